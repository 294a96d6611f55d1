//! How blocks leave a tier, and how the index follows the logs:
//! eviction from DRAM with demotion to the log tiers that lack the
//! block (when admitted, [`Admit`]), deletion with tombstones, and
//! dropping the locations whose records a log no longer holds (a
//! reclaimed segment, a failed write).
//!
//! Every function here runs under the index's lock and keeps the
//! invariants of the `store` module doc: an entry left with no copy in
//! any tier is removed, and a location leaves the map with its count.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::config::Admit;
use super::error::KvError;
use super::index::{Entry, Inner, Pin};
use super::kv_store::KvStore;
use super::stats::Counters;
use super::tier::Tier;
use crate::format::{Kind, RecordMeta};
use crate::log::{Loc, LogError, LogState};
use crate::policy::Policy;

impl KvStore {
    /// Evicts from DRAM until `need` more bytes fit, demoting what is
    /// admitted. Soft pins go last; hard pins and leases stay.
    pub(super) fn make_room(
        &self,
        inner: &mut Inner,
        need: u64,
        now: u64,
        except: Option<&Bytes>,
    ) -> Result<(), KvError> {
        let cap = self.cfg.dram_bytes;
        for soft_too in [false, true] {
            if inner.dram.used() + need <= cap {
                break;
            }
            let map = &inner.map;
            let evicted = inner.dram.evict(cap, need, &mut |k| {
                except == Some(k)
                    || map.get(k).is_some_and(|e| {
                        e.pin == Pin::Hard || e.lease_until_ms > now || (!soft_too && e.pin == Pin::Soft)
                    })
            });
            for ev in evicted {
                self.counters.evicted.fetch_add(1, Ordering::Relaxed);
                self.demote(inner, ev.key, ev.reused, now);
            }
        }
        let used = inner.dram.used();
        if used + need > cap {
            return Err(KvError::Full { used, capacity: cap });
        }
        Ok(())
    }

    /// A block has left DRAM's policy: write it to each log tier that
    /// lacks it if admitted, and forget it if no tier holds it then.
    fn demote(&self, inner: &mut Inner, k: Bytes, reused: bool, now: u64) {
        let Some(e) = inner.map.get_mut(&k) else { return };
        let Some(value) = e.value.take() else { return };
        if e.expired(now) {
            self.counters.expired.fetch_add(1, Ordering::Relaxed);
            let e = inner.take_entry(&k).expect("looked up above");
            for (t, loc) in e.locs.iter() {
                if let Some(loc) = *loc {
                    inner.sub_loc(t, loc);
                }
            }
            return;
        }
        let admit = reused || self.cfg.admit == Admit::All || e.pin != Pin::None;
        let (have, meta) = (e.locs, RecordMeta { kind: Kind::Put, expires_ms: e.expires_ms, version: e.version });
        for t in Tier::ALL {
            if have[t].is_some() || !admit {
                continue;
            }
            if t == Tier::Pool && self.devs[Tier::Pool].as_ref().is_some_and(|d| d.is_stalled()) {
                self.counters.pool_skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match self.write_copy(inner, t, &k, &value, meta) {
                Ok(Some(loc)) => {
                    self.counters.demoted.fetch_add(1, Ordering::Relaxed);
                    self.counters.demoted_bytes.fetch_add(loc.len(), Ordering::Relaxed);
                }
                Ok(None) => {}
                Err(err) => tracing::debug!(error = %err, tier = t.name(), "KV block not demoted"),
            }
        }
        if inner.map.get(&k).is_some_and(|e| !e.has_copy()) {
            self.counters.not_admitted.fetch_add(1, Ordering::Relaxed);
            inner.take_entry(&k);
        }
    }

    /// Appends `k`'s value to log tier `t` (when the store has it) and
    /// points the entry there; returns where it went.
    pub(super) fn write_copy(
        &self,
        inner: &mut Inner,
        t: Tier,
        k: &Bytes,
        value: &[u8],
        meta: RecordMeta,
    ) -> Result<Option<Loc>, LogError> {
        let Some(tier) = inner.tiers[t].as_mut() else { return Ok(None) };
        let (loc, reclaimed) = tier.log.append(k.clone(), k, value, meta)?;
        if let Some(e) = inner.map.get_mut(k) {
            e.locs[t] = Some(loc);
        }
        inner.add_loc(t, loc);
        Self::reclaim(inner, &self.counters, t, reclaimed);
        Ok(Some(loc))
    }

    /// Drops the log records of `old` (an entry already out of the map)
    /// from the index, leaving tombstones so a restart does not bring it
    /// back. A tombstone carries the version it deletes.
    pub(super) fn forget(&self, inner: &mut Inner, k: &Bytes, old: &Entry) {
        for (t, loc) in old.locs.iter() {
            let Some(loc) = *loc else { continue };
            inner.sub_loc(t, loc);
            let Some(tier) = inner.tiers[t].as_mut() else { continue };
            if !tier.log.is_current(loc) {
                continue;
            }
            let meta = RecordMeta { kind: Kind::Delete, expires_ms: 0, version: old.version };
            match tier.log.append(k.clone(), k, &[], meta) {
                Ok((_, reclaimed)) => Self::reclaim(inner, &self.counters, t, reclaimed),
                Err(e) => tracing::warn!(error = %e, tier = t.name(), "KV log: tombstone not written"),
            }
        }
    }

    /// Removes `k` from every tier's index (tombstones in the logs).
    pub(super) fn remove_entry(&self, inner: &mut Inner, k: &Bytes) -> bool {
        let Some(e) = inner.take_entry(k) else { return false };
        if e.value.is_some() {
            inner.dram.remove(k);
        }
        self.forget(inner, k, &e);
        true
    }

    /// Drops the tier-`t` locations of reclaimed keys whose records are
    /// gone, and the entries left with no copy.
    fn reclaim(inner: &mut Inner, counters: &Counters, t: Tier, keys: Vec<Bytes>) {
        let n = Self::drop_locs(inner, t, keys, |log, loc| !log.is_current(loc));
        counters.dropped[t].fetch_add(n, Ordering::Relaxed);
    }

    /// Drops tier `t`'s records whose writes failed from the index.
    pub(super) fn drop_lost(inner: &mut Inner, counters: &Counters, t: Tier) {
        let Some(tier) = inner.tiers[t].as_mut() else { return };
        for (span, keys) in tier.log.take_lost() {
            let n = Self::drop_locs(inner, t, keys, |_, loc| span.holds(loc));
            if n > 0 {
                tracing::warn!(tier = t.name(), records = n, "KV records lost with a failed write");
            }
            counters.lost[t].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Drops the tier-`t` records of `keys` for which `gone` holds from
    /// the index, and the entries left with no copy; returns how many.
    fn drop_locs(inner: &mut Inner, t: Tier, keys: Vec<Bytes>, gone: impl Fn(&LogState<Bytes>, Loc) -> bool) -> u64 {
        let mut n = 0;
        for k in keys {
            let Some(tier) = inner.tiers[t].as_ref() else { break };
            let Some(e) = inner.map.get_mut(&k) else { continue };
            let Some(loc) = e.locs[t].filter(|&l| gone(&tier.log, l)) else { continue };
            e.locs[t] = None;
            let no_copy = !e.has_copy();
            inner.sub_loc(t, loc);
            n += 1;
            if no_copy {
                inner.take_entry(&k);
            }
        }
        n
    }
}
