//! `INFO`, `CONFIG` and `KV.STATS`: what the server says about itself.
//!
//! Honest by rule: `INFO` names strata's version (`strata_version`) and
//! claims no Redis version (there is no `redis_version` field: strata is
//! not Redis, and redis-py and redis-cli do not need one); its keyspace
//! line counts the real keys and the keys with an expiry. `CONFIG GET`
//! answers the few parameters that describe the server as they are;
//! `CONFIG SET`, `RESETSTAT` and `REWRITE` are refused, since nothing
//! here changes at run time (the settings come from the command line).

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::Shared;
use crate::glob::Glob;
use crate::resp::Reply;
use crate::store::KvStore;

/// The store's statistics as name/value pairs.
pub fn stats_pairs(store: &KvStore) -> Vec<(&'static str, u64)> {
    let s = store.stats();
    vec![
        ("keys", s.keys),
        ("expires", s.expires),
        ("dram_keys", s.dram_keys),
        ("dram_used_bytes", s.dram_used),
        ("dram_capacity_bytes", s.dram_capacity),
        ("ssd_keys", s.ssd_keys),
        ("ssd_live_bytes", s.ssd_live),
        ("ssd_capacity_bytes", s.ssd_capacity),
        ("pool_keys", s.pool_keys),
        ("pool_live_bytes", s.pool_live),
        ("pool_capacity_bytes", s.pool_capacity),
        ("gets", s.gets),
        ("hits_dram", s.hits_dram),
        ("hits_ssd", s.hits_ssd),
        ("hits_pool", s.hits_pool),
        ("hits_peer", s.hits_peer),
        ("peer_keys", s.peer_keys),
        ("misses", s.misses),
        ("puts", s.puts),
        ("evicted", s.evicted),
        ("demoted", s.demoted),
        ("demoted_bytes", s.demoted_bytes),
        ("working_set_bytes", s.working_set_bytes),
        ("not_admitted", s.not_admitted),
        ("demote_dropped", s.demote_dropped),
        ("dropped_ssd", s.dropped_ssd),
        ("dropped_pool", s.dropped_pool),
        ("lost_ssd", s.lost_ssd),
        ("lost_pool", s.lost_pool),
        ("ssd_skipped", s.ssd_skipped),
        ("pool_skipped", s.pool_skipped),
        ("promoted", s.promoted),
        ("corrupt", s.corrupt),
        ("expired", s.expired),
        ("quota_evicted", s.quota_evicted),
    ]
}

pub(super) fn stats_reply(store: &KvStore) -> Reply {
    Reply::Map(stats_pairs(store).into_iter().map(|(k, v)| (Reply::text(k), Reply::Int(v as i64))).collect())
}

/// `INFO [section ...]`: the sections asked for (all when none, `all`,
/// `everything` or `default`), each as `# Name` and `field:value` lines.
pub(super) fn info(shared: &Shared, sections: &[Bytes]) -> String {
    let want = |name: &str| {
        sections.is_empty()
            || sections.iter().any(|s| {
                let s = String::from_utf8_lossy(s).to_ascii_lowercase();
                s == name || s == "all" || s == "everything" || s == "default"
            })
    };
    let mut s = String::new();
    if want("server") {
        let up = shared.started.elapsed().as_secs();
        s.push_str(&format!(
            "# Server\r\nstrata_version:{}\r\nredis_mode:standalone\r\nprocess_id:{}\r\ntcp_port:{}\r\n\
             uptime_in_seconds:{up}\r\nuptime_in_days:{}\r\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            shared.addr.port(),
            up / 86_400,
        ));
    }
    if want("clients") {
        s.push_str(&format!("# Clients\r\nconnected_clients:{}\r\n", shared.clients.load(Ordering::Relaxed)));
    }
    let st = shared.store.stats();
    if want("keyspace") {
        s.push_str("# Keyspace\r\n");
        if st.keys > 0 {
            s.push_str(&format!("db0:keys={},expires={},avg_ttl={}\r\n", st.keys, st.expires, st.avg_ttl_ms));
        }
    }
    if want("strata") {
        s.push_str("# Strata\r\n");
        for (k, v) in stats_pairs(&shared.store) {
            s.push_str(&format!("{k}:{v}\r\n"));
        }
    }
    s
}

/// `CONFIG GET pattern ...`: the parameters that describe this server,
/// as they are. `maxmemory` is the DRAM tier's capacity; there is no
/// RDB or AOF (`save` empty, `appendonly` no: the log tiers are not
/// Redis persistence), and one database.
pub(super) fn config_get(shared: &Shared, patterns: &[Bytes]) -> Reply {
    let max = shared.store.stats().dram_capacity.to_string();
    let known = [("maxmemory", max.as_str()), ("save", ""), ("appendonly", "no"), ("databases", "1")];
    let globs: Vec<Glob> = patterns.iter().map(|p| Glob::new(&p.to_ascii_lowercase())).collect();
    let pairs = known
        .iter()
        .filter(|(k, _)| globs.iter().any(|g| g.matches(k.as_bytes())))
        .map(|(k, v)| (Reply::text(*k), Reply::text(*v)))
        .collect();
    Reply::Map(pairs)
}

/// `CONFIG SET`, `CONFIG RESETSTAT`, `CONFIG REWRITE`: refused, naming
/// where the setting comes from instead.
pub(super) fn config_refused(sub: &str, param: Option<&[u8]>) -> Reply {
    let what = match param {
        Some(p) => format!("CONFIG {sub} {}", String::from_utf8_lossy(&p[..p.len().min(64)])),
        None => format!("CONFIG {sub}"),
    };
    Reply::err(format!(
        "{what} is not supported: strata kv changes no setting at run time; its settings are the \
         options of `strata kv serve` (docs/kv.md)"
    ))
}
