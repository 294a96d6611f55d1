//! Recovery at open: the index rebuilt from the records the log tiers'
//! scans found. Afterwards the index and its byte counts are what they
//! were at the last written record, and the next write stamp is above
//! every version in the logs. It reads no device itself: the logs'
//! scans (the `log` module) hand it what they found.
//!
//! The rules (the `format` module's kinds):
//! - per key the highest version wins; at equal versions a tombstone
//!   wins (it carries the version it deletes), and puts of one version
//!   are copies of one value, one per log;
//! - a namespace tombstone deletes every put under its prefix up to its
//!   version, whichever log either is in;
//! - the newest expiry record (by stamp) of the winning put gives its
//!   expiry; an expired winner is not recovered.
//!
//! A log whose stale put is deleted only by a record in the other log
//! (its own tombstone was lost with a failed write) is marked as owing
//! that put a tombstone ([`Unsure`](super::unsure::Unsure)): the other
//! log's tombstone may be reclaimed by its ring first, and the next
//! acknowledged change to the key writes one of its own.

use std::collections::HashMap;

use bytes::Bytes;

use super::index::{Entry, Inner, dram_size};
use super::tier::{PerTier, Tier};
use super::unsure::State;
use crate::format::Kind;
use crate::log::{Found, Loc};

/// The newest record of a key across the logs, and what each log holds
/// of it.
struct Newest {
    version: u64,
    kind: Kind,
    expires_ms: u64,
    value_len: u64,
    locs: PerTier<Option<Loc>>,
    /// Per log: the highest version of a put of the key in it, and the
    /// highest version a tombstone of the key in it deletes.
    held: PerTier<(Option<u64>, Option<u64>)>,
}

/// The internal key's namespace prefix (`[length, name]`), when it has
/// one whole.
fn ns_prefix(k: &[u8]) -> Option<&[u8]> {
    let n = *k.first()? as usize;
    k.get(..1 + n)
}

/// Rebuilds the index from the records both logs' scans found (each
/// log's oldest first), by the module doc's rules. Entries are inserted
/// oldest version first, so a namespace's oldest-first order survives.
pub(super) fn recover(inner: &mut Inner, found: Vec<(Tier, Found)>, now: u64) {
    let mut newest: HashMap<Bytes, Newest> = HashMap::new();
    // A prefix's highest deleted version, over both logs and per log.
    let mut ranges: HashMap<Bytes, (u64, PerTier<u64>)> = HashMap::new();
    // (key, the put's version) -> (the newest expiry record's stamp, its expiry)
    let mut expiries: HashMap<(Bytes, u64), (u64, u64)> = HashMap::new();
    for (t, f) in found {
        let h = f.head;
        inner.next_version = inner.next_version.max(h.version);
        match h.kind {
            Kind::DeletePrefix => {
                let r = ranges.entry(f.key).or_default();
                r.0 = r.0.max(h.version);
                r.1[t] = r.1[t].max(h.version);
                continue;
            }
            Kind::Expiry => {
                if let Some(target) = f.applies_to {
                    let e = expiries.entry((f.key, target)).or_insert((h.version, h.expires_ms));
                    if h.version >= e.0 {
                        *e = (h.version, h.expires_ms);
                    }
                }
                continue;
            }
            Kind::Put | Kind::Delete => {}
        }
        let slot = newest.entry(f.key).or_insert(Newest {
            version: h.version,
            kind: h.kind,
            expires_ms: h.expires_ms,
            value_len: h.value_len,
            locs: PerTier::default(),
            held: PerTier::default(),
        });
        let held = &mut slot.held[t];
        let mine = if h.kind == Kind::Put { &mut held.0 } else { &mut held.1 };
        *mine = Some(mine.map_or(h.version, |v| v.max(h.version)));
        if h.version > slot.version || (h.version == slot.version && h.kind == Kind::Delete) {
            let held = slot.held;
            *slot = Newest {
                version: h.version,
                kind: h.kind,
                expires_ms: h.expires_ms,
                value_len: h.value_len,
                locs: PerTier::default(),
                held,
            };
        } else if h.version < slot.version || slot.kind == Kind::Delete {
            continue;
        }
        if h.kind == Kind::Put {
            slot.locs[t] = Some(f.loc);
        }
    }
    // The highest version deleted under a key's prefixes: every key's,
    // and its namespace's; overall and in each log.
    let deleted = |k: &[u8]| {
        let mut d = (0u64, PerTier::<u64>::default());
        for p in [Some(&[][..]), ns_prefix(k)].into_iter().flatten() {
            if let Some((all, per)) = ranges.get(p) {
                d.0 = d.0.max(*all);
                for (t, v) in per.iter() {
                    d.1[t] = d.1[t].max(*v);
                }
            }
        }
        d
    };
    let mut live = Vec::new();
    for (k, mut n) in newest {
        let (range_all, range_in) = deleted(&k);
        let wins = n.kind == Kind::Put && n.version > range_all;
        for (t, (put, del)) in n.held.iter() {
            // This log's newest put of the key is stale, and nothing in
            // this log deletes it: owed a tombstone here.
            let Some(put) = *put else { continue };
            let current = wins && put == n.version;
            let covered = del.is_some_and(|d| d >= put) || range_in[t] >= put;
            if !current
                && !covered
                && let Some(tier) = inner.tiers[t].as_mut()
            {
                tier.unsure.note_key(&k, put, State::Owed);
            }
        }
        if !wins {
            continue;
        }
        if let Some(&(_, expires_ms)) = expiries.get(&(k.clone(), n.version)) {
            n.expires_ms = expires_ms;
        }
        if n.expires_ms == 0 || n.expires_ms > now {
            live.push((k, n));
        }
    }
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
        // What the logs hold was stored: part of the working set.
        inner.working_set.observe(crate::admit::key_hash(&k), size);
        inner.insert_entry(k, e);
    }
}
