//! Running one command against the store for a connection: the
//! dispatch from [`Command`] to the store's calls and back to a
//! [`Reply`], with Redis's reply types, and who may run what.
//!
//! Commands made of several store calls (`SET ... GET`, `GETDEL`,
//! `GETEX`) read the key's version first and make their change
//! conditional on it, trying again when another client wrote between:
//! the value they answer is the one they changed. (Inside `EXEC` nothing
//! else runs meanwhile: the `txn` module.)

use std::time::Duration;

use bytes::Bytes;

use super::info::{config_get, config_refused, info, stats_reply};
use super::{Conn, Shared};
use crate::command::{Command, ExpireAt, Expiry, GetExpiry};
use crate::glob::Glob;
use crate::resp::Reply;
use crate::store::{KvError, KvStore, Presence, PutOpts, unix_ms};

pub(super) fn kv_err(e: KvError) -> Reply {
    match e {
        KvError::Full { .. } | KvError::TooLarge { .. } | KvError::Quota { .. } => Reply::Error(format!("OOM {e}")),
        e => Reply::err(e),
    }
}

fn opt_bulk(v: Option<Bytes>) -> Reply {
    v.map(Reply::Bulk).unwrap_or(Reply::Nil)
}

/// Tries of `SET ... GET`, `GETDEL` and `GETEX` before they give up on a
/// key others keep writing.
const SET_GET_TRIES: usize = 64;

fn kept_changing(cmd: &str) -> Reply {
    Reply::err(format!("{cmd}: the key kept changing under other writers; try again"))
}

/// `SET ... GET`: the old value, and the new one stored in its place as
/// one step. The old value is read (from any tier) knowing its version,
/// and the store is conditional on that version, so a write in between
/// makes it read and try again; the value returned is the one replaced.
async fn set_get(
    store: &KvStore,
    ns: &[u8],
    key: &[u8],
    value: Bytes,
    nx: bool,
    xx: bool,
    opts: PutOpts,
) -> Result<Reply, KvError> {
    for _ in 0..SET_GET_TRIES {
        let version = store.version(ns, key)?;
        let old = match version {
            Some(_) => store.get(ns, key).await?,
            None => None,
        };
        if (nx && version.is_some()) || (xx && version.is_none()) {
            // Not stored; the reply is the value as it is.
            return Ok(opt_bulk(old));
        }
        let only_if = Some(version.map_or(Presence::Absent, Presence::Version));
        if store.put(ns, key, value.clone(), PutOpts { only_if, ..opts }).await? {
            return Ok(opt_bulk(old));
        }
    }
    Ok(kept_changing("SET ... GET"))
}

/// The key's version and value read together: `None` when absent. A key
/// known only from a peer's log is adopted by the read and read again.
async fn versioned(store: &KvStore, ns: &[u8], key: &[u8]) -> Result<Option<(u64, Bytes)>, KvError> {
    for _ in 0..2 {
        let version = store.version(ns, key)?;
        let Some(value) = store.get(ns, key).await? else { return Ok(None) };
        match version {
            Some(v) => return Ok(Some((v, value))),
            // Read from a peer's log, and now this store's: once more.
            None => continue,
        }
    }
    Ok(None)
}

/// `GETDEL`: the value, and the key deleted, as one step.
async fn get_del(store: &KvStore, ns: &[u8], key: &[u8]) -> Result<Reply, KvError> {
    for _ in 0..SET_GET_TRIES {
        let Some((version, value)) = versioned(store, ns, key).await? else { return Ok(Reply::Nil) };
        if store.delete_version(ns, key, version).await? {
            return Ok(Reply::Bulk(value));
        }
    }
    Ok(kept_changing("GETDEL"))
}

/// `GETEX`: the value, and its expiry changed, as one step.
async fn get_ex(store: &KvStore, ns: &[u8], key: &[u8], e: GetExpiry) -> Result<Reply, KvError> {
    let at = match e {
        GetExpiry::Keep => return Ok(opt_bulk(store.get(ns, key).await?)),
        GetExpiry::Persist => 0,
        GetExpiry::Set(Expiry::In(ms)) => unix_ms().saturating_add(ms),
        // A time already past deletes the key; 0 would mean "none".
        GetExpiry::Set(Expiry::At(ms)) => ms.max(1),
        GetExpiry::Set(_) => 0,
    };
    for _ in 0..SET_GET_TRIES {
        let Some((version, value)) = versioned(store, ns, key).await? else { return Ok(Reply::Nil) };
        if store.set_expiry_version(ns, key, at, version).await? {
            return Ok(Reply::Bulk(value));
        }
    }
    Ok(kept_changing("GETEX"))
}

/// `EXPIRE` and friends: 1 when the key's expiry was set (or the key
/// deleted by a time that has passed), 0 when it is absent. `PERSIST`: 1
/// when an expiry was removed, 0 when the key had none or is absent.
async fn expire(store: &KvStore, ns: &[u8], key: &[u8], at: ExpireAt) -> Result<Reply, KvError> {
    let now = unix_ms() as i64;
    let at = match at {
        ExpireAt::Never => {
            if store.expiry(ns, key)?.is_none_or(|e| e == 0) {
                return Ok(Reply::Int(0));
            }
            0
        }
        ExpireAt::In(ms) => match now.checked_add(ms) {
            Some(t) => t.max(1) as u64,
            None => return Ok(Reply::err("invalid expire time in 'expire' command")),
        },
        ExpireAt::At(ms) => ms.max(1) as u64,
    };
    Ok(Reply::Int(i64::from(store.set_expiry(ns, key, at).await?)))
}

/// `SCAN`'s reply: the next cursor (as a bulk string) and the keys.
fn scan(
    store: &KvStore,
    ns: &[u8],
    cursor: u64,
    pattern: Option<&[u8]>,
    count: usize,
    kind: Option<&[u8]>,
) -> Result<Reply, KvError> {
    let glob = pattern.map(Glob::new).filter(|g| !g.matches_all());
    let (next, mut keys) = store.scan(ns, cursor, count, glob.as_ref())?;
    if kind.is_some_and(|k| !k.eq_ignore_ascii_case(b"string")) {
        // Every value is a string: no key is of another type.
        keys.clear();
    }
    Ok(Reply::Array(vec![Reply::text(next.to_string()), Reply::Array(keys.into_iter().map(Reply::Bulk).collect())]))
}

/// Why `conn` may not run `cmd`, if it may not: not authenticated, or a
/// user kept to some namespaces reaching for another or for all.
pub(super) fn refusal(conn: &Conn, cmd: &Command) -> Option<Reply> {
    let Some(g) = &conn.grant else {
        return match cmd {
            Command::Auth { .. } | Command::Hello { auth: Some(_), .. } | Command::Quit | Command::Reset => None,
            Command::Hello { auth: None, .. } => Some(Reply::Error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH \
                 <user> <pass> option can be used to authenticate the client and select the RESP protocol version at \
                 the same time"
                    .into(),
            )),
            _ => Some(Reply::Error("NOAUTH Authentication required.".into())),
        };
    };
    if g.is_admin() {
        return None;
    }
    let denied = |what: &str| {
        tracing::warn!(conn = conn.id, peer = ?conn.peer, user = g.user(), "KV port: {what} denied");
        Some(Reply::Error(format!("NOPERM User {} has no permissions to {what}", g.user())))
    };
    let ns_denied = |ns: &[u8]| denied(&format!("access the '{}' namespace", String::from_utf8_lossy(ns)));
    match cmd {
        Command::Flush => denied("run the 'flushall' command"),
        Command::Quota(_, Some(_)) => denied("set quotas"),
        Command::Namespace(Some(ns)) | Command::DelNamespace(ns) | Command::Quota(ns, None) if !g.allows(ns) => {
            ns_denied(ns)
        }
        _ => None,
    }
}

/// `AUTH` and `HELLO ... AUTH`: the connection becomes `user`'s when the
/// password is right, and stays as it was when it is not.
fn authenticate(shared: &Shared, conn: &mut Conn, user: Option<&[u8]>, password: &[u8]) -> Result<(), Reply> {
    let access = &shared.cfg.access;
    let name = || String::from_utf8_lossy(user.unwrap_or(crate::auth::DEFAULT_USER.as_bytes())).into_owned();
    match access.check(user, password) {
        Some(g) => {
            tracing::debug!(conn = conn.id, peer = ?conn.peer, user = g.user(), "KV port: authenticated");
            if !g.allows(&conn.ns) {
                conn.ns = g.home();
            }
            conn.grant = Some(g);
            Ok(())
        }
        None => {
            tracing::warn!(conn = conn.id, peer = ?conn.peer, user = %name(), "KV port: authentication failed");
            Err(Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into()))
        }
    }
}

/// Runs `cmd` (already let through [`refusal`]); a store error is its
/// reply.
pub(super) async fn exec(shared: &Shared, conn: &mut Conn, cmd: Command) -> Reply {
    match run(shared, conn, cmd).await {
        Ok(r) => r,
        Err(e) => kv_err(e),
    }
}

async fn run(shared: &Shared, conn: &mut Conn, cmd: Command) -> Result<Reply, KvError> {
    let store = &shared.store;
    let ns = conn.ns.clone();
    Ok(match cmd {
        Command::Ping(None) => Reply::Simple("PONG".into()),
        Command::Ping(Some(m)) | Command::Echo(m) => Reply::Bulk(m),
        Command::Auth { user: None, .. } if !shared.cfg.access.required() => Reply::err(
            "AUTH <password> called without any password configured for the default user. Are you sure your \
             configuration is correct?",
        ),
        Command::Auth { user, password } => match authenticate(shared, conn, user.as_deref(), &password) {
            Ok(()) => Reply::Ok,
            Err(no) => no,
        },
        Command::Hello { proto, auth } => {
            if let Some((user, password)) = auth
                && let Err(no) = authenticate(shared, conn, Some(&user), &password)
            {
                return Ok(no);
            }
            if let Some(p) = proto {
                conn.proto = p;
            }
            // strata, not Redis: its own name and version (docs/kv.md).
            Reply::Map(vec![
                (Reply::text("server"), Reply::text("strata")),
                (Reply::text("version"), Reply::text(env!("CARGO_PKG_VERSION"))),
                (Reply::text("proto"), Reply::Int(i64::from(conn.proto))),
                (Reply::text("id"), Reply::Int(conn.id as i64)),
                (Reply::text("mode"), Reply::text("standalone")),
                (Reply::text("role"), Reply::text("master")),
                (Reply::text("modules"), Reply::Array(vec![])),
            ])
        }
        Command::Quit => {
            conn.quit = true;
            Reply::Ok
        }
        Command::Reset => {
            conn.txn = None;
            conn.proto = 2;
            conn.grant = shared.cfg.access.initial();
            conn.ns = conn.grant.as_ref().map(|g| g.home()).unwrap_or_default();
            Reply::Simple("RESET".into())
        }
        Command::Select(0) => Reply::Ok,
        Command::Select(_) => Reply::err("DB index is out of range"),
        Command::NoOp => Reply::Ok,
        Command::ClientId => Reply::Int(conn.id as i64),
        Command::Info(sections) => Reply::text(info(shared, &sections)),
        Command::ConfigGet(patterns) => config_get(shared, &patterns),
        Command::ConfigRefused(sub, param) => config_refused(&sub, param.as_deref()),
        // The connection's transaction state is the `txn` module's; these
        // reach here only when it passes them on.
        Command::Multi | Command::Exec | Command::Discard => Reply::err("transaction command out of place"),
        Command::Watch => {
            Reply::err("WATCH is not supported: strata kv runs MULTI/EXEC without optimistic locking (docs/kv.md)")
        }
        Command::Unwatch => Reply::Ok,
        Command::Scan { cursor, pattern, count, kind } => {
            scan(store, &ns, cursor, pattern.as_deref(), count, kind.as_deref())?
        }
        Command::Keys(pattern) => {
            let keys = store.keys(&ns, &Glob::new(&pattern))?;
            Reply::Array(keys.into_iter().map(Reply::Bulk).collect())
        }
        Command::Type(k) => Reply::Simple(if store.exists(&ns, &k)? { "string" } else { "none" }.into()),
        Command::GetDel(k) => get_del(store, &ns, &k).await?,
        Command::GetEx(k, e) => get_ex(store, &ns, &k, e).await?,
        Command::CommandDocs => Reply::Array(vec![]),
        Command::DbSize => Reply::Int(store.stats().keys as i64),
        Command::Flush => {
            store.delete_all().await?;
            Reply::Ok
        }
        Command::Save => {
            store.flush(true).await?;
            Reply::Ok
        }
        Command::KvFlush(all) => {
            store.flush(all).await?;
            Reply::Ok
        }
        Command::Get(k) => opt_bulk(store.get(&ns, &k).await?),
        Command::Set { key, value, expiry, nx, xx, get } => {
            let (expires_ms, keep_ttl) = match expiry {
                Expiry::None => (0, false),
                Expiry::In(ms) => (unix_ms().saturating_add(ms), false),
                Expiry::At(ms) => (ms, false),
                Expiry::Keep => (0, true),
            };
            let opts = PutOpts { expires_ms, keep_ttl, ..PutOpts::default() };
            if get {
                return set_get(store, &ns, &key, value, nx, xx, opts).await;
            }
            let only_if = match (nx, xx) {
                (true, _) => Some(Presence::Absent),
                (_, true) => Some(Presence::Present),
                _ => None,
            };
            match store.put(&ns, &key, value, PutOpts { only_if, ..opts }).await? {
                true => Reply::Ok,
                false => Reply::Nil,
            }
        }
        Command::MGet(keys) => {
            let gets = keys.iter().map(|k| store.get(&ns, k));
            let got = futures_util::future::join_all(gets).await;
            Reply::Array(got.into_iter().map(|r| r.map(opt_bulk)).collect::<Result<_, _>>()?)
        }
        Command::MSet(pairs) => {
            for (k, v) in pairs {
                store.put(&ns, &k, v, PutOpts::default()).await?;
            }
            Reply::Ok
        }
        Command::Exists(keys) => {
            let mut n = 0;
            for k in &keys {
                n += i64::from(store.exists(&ns, k)?);
            }
            Reply::Int(n)
        }
        Command::Del(keys) => Reply::Int(store.delete_many(&ns, &keys).await? as i64),
        Command::StrLen(k) => Reply::Int(store.get(&ns, &k).await?.map(|v| v.len() as i64).unwrap_or(0)),
        Command::Ttl(k, ms) => match store.expiry(&ns, &k)? {
            None => Reply::Int(-2),
            Some(0) => Reply::Int(-1),
            Some(at) => {
                let left = at.saturating_sub(unix_ms());
                Reply::Int(if ms { left as i64 } else { left.div_ceil(1000) as i64 })
            }
        },
        Command::Expire(k, at) => expire(store, &ns, &k, at).await?,
        Command::Lookup(keys) => Reply::Int(store.lookup(&ns, &keys)? as i64),
        Command::Prefetch { deadline_ms, lease_ms, keys } => {
            Reply::Int(store.prefetch(&ns, &keys, Duration::from_millis(deadline_ms), lease_ms).await? as i64)
        }
        Command::Lease(ms, keys) => {
            Reply::Int(store.prefetch(&ns, &keys, Duration::from_secs(5), ms.max(1)).await? as i64)
        }
        Command::Release(keys) => Reply::Int(store.release(&ns, &keys)? as i64),
        Command::Pin(pin, keys) => Reply::Int(store.pin(&ns, &keys, pin)? as i64),
        Command::Stats => stats_reply(store),
        Command::Namespace(None) => Reply::Bulk(conn.ns.clone()),
        Command::Namespace(Some(name)) => {
            if name.len() > 255 {
                return Err(KvError::BadNamespace(name.len()));
            }
            conn.ns = name;
            Reply::Ok
        }
        Command::DelNamespace(name) => Reply::Int(store.delete_namespace(&name).await? as i64),
        Command::Quota(name, Some(bytes)) => {
            store.set_quota(&name, bytes)?;
            Reply::Ok
        }
        Command::Quota(name, None) => {
            let (keys, used, quota) = store.namespace_usage(&name);
            Reply::Map(vec![
                (Reply::text("keys"), Reply::Int(keys as i64)),
                (Reply::text("used_bytes"), Reply::Int(used as i64)),
                (Reply::text("quota_bytes"), Reply::Int(quota as i64)),
            ])
        }
    })
}
