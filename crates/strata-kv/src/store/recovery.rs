//! Recovery at open: the index rebuilt from the records the log tiers'
//! scans found. Afterwards the index and its byte counts are what they
//! were at the last written record, and the next write stamp is above
//! every version in the logs. It reads no device itself: the logs'
//! scans (the `log` module) hand it what they found.

use std::collections::HashMap;

use bytes::Bytes;

use super::index::{Entry, Inner, dram_size};
use super::tier::{PerTier, Tier};
use crate::format::Kind;
use crate::log::{Found, Loc};

/// The newest record of a key across the logs.
struct Newest {
    version: u64,
    kind: Kind,
    expires_ms: u64,
    value_len: u64,
    locs: PerTier<Option<Loc>>,
}

/// Rebuilds the index from the records both logs' scans found (each
/// log's oldest first). Per key the highest version wins; at equal
/// versions a tombstone wins (it carries the version it deletes), and
/// puts are copies of one value, one per log. Entries are inserted oldest
/// version first, so a namespace's oldest-first order survives.
pub(super) fn recover(inner: &mut Inner, found: Vec<(Tier, Found)>, now: u64) {
    let mut newest: HashMap<Bytes, Newest> = HashMap::new();
    for (t, f) in found {
        let h = f.head;
        inner.next_version = inner.next_version.max(h.version);
        let slot = newest.entry(f.key).or_insert(Newest {
            version: h.version,
            kind: h.kind,
            expires_ms: h.expires_ms,
            value_len: h.value_len,
            locs: PerTier::default(),
        });
        if h.version > slot.version || (h.version == slot.version && h.kind == Kind::Delete) {
            *slot = Newest {
                version: h.version,
                kind: h.kind,
                expires_ms: h.expires_ms,
                value_len: h.value_len,
                locs: PerTier::default(),
            };
        } else if h.version < slot.version || slot.kind == Kind::Delete {
            continue;
        }
        if h.kind == Kind::Put {
            slot.locs[t] = Some(f.loc);
        }
    }
    let mut live: Vec<(Bytes, Newest)> =
        newest.into_iter().filter(|(_, n)| n.kind == Kind::Put && (n.expires_ms == 0 || n.expires_ms > now)).collect();
    live.sort_unstable_by_key(|(_, n)| n.version);
    for (k, n) in live {
        for (t, loc) in n.locs.iter() {
            let Some(loc) = *loc else { continue };
            if let Some(tier) = inner.tiers[t].as_mut() {
                tier.log.track(k.clone(), loc);
            }
            inner.add_loc(t, loc);
        }
        let size = dram_size(k.len(), n.value_len as usize);
        let e = Entry { locs: n.locs, version: n.version, expires_ms: n.expires_ms, ..Entry::new(size) };
        inner.insert_entry(k, e);
    }
}
