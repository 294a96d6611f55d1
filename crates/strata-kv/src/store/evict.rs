//! How blocks leave a tier, and how the index follows the logs:
//! eviction from DRAM with demotion to the log tiers that lack the
//! block (when admitted, [`Admit`]), deletion with tombstones, and
//! dropping the locations whose records a log no longer holds (a
//! reclaimed segment, a failed write).
//!
//! Every function here runs under the index's lock and keeps the
//! invariants of the `store` module doc: an entry left with no copy in
//! any tier is removed, and a location leaves the map with its count.
//!
//! A block leaving DRAM that is admitted but that no log tier takes (a
//! paused tier, a stalled one, a record larger than a segment) is gone:
//! it is counted as `demote_dropped`, apart from the blocks the
//! admission policy turned away (`not_admitted`), and logged. Puts wait
//! for the log tiers' writers before they evict (the `write` module),
//! so a tier that is merely slow slows puts rather than drops blocks.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::config::Admit;
use super::durable::Durability;
use super::error::KvError;
use super::index::{Entry, Inner, Pin};
use super::kv_store::KvStore;
use super::stats::Counters;
use super::tier::Tier;
use super::unsure::State;
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
    /// Whether every block leaving DRAM goes to the log tiers now (see
    /// [`Admit`]): by [`Admit::Auto`], while the first log tier below DRAM
    /// holds a tenth of the working set.
    pub(super) fn admit_all(&self, inner: &Inner) -> bool {
        match self.cfg.admit {
            Admit::All => true,
            Admit::Reused => false,
            Admit::Auto => {
                let below = Tier::ALL.iter().find_map(|&t| inner.tiers[t].as_ref().map(|x| x.log.capacity()));
                below.is_some_and(|bytes| inner.working_set.admit_all(bytes))
            }
        }
    }

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
        let pinned = e.pin != Pin::None;
        let admit = reused || pinned || self.admit_all(inner);
        let Some(e) = inner.map.get_mut(&k) else { return };
        let (have, meta) = (e.locs, RecordMeta { kind: Kind::Put, expires_ms: e.expires_ms, version: e.version });
        let mut refused = None;
        for t in Tier::ALL {
            if have[t].is_some() || !admit {
                continue;
            }
            if self.devs[t].as_ref().is_some_and(|d| d.is_stalled()) {
                self.counters.skipped[t].fetch_add(1, Ordering::Relaxed);
                refused = Some((t, "stalled"));
                continue;
            }
            match self.write_copy(inner, t, &k, &value, meta) {
                Ok(Some(loc)) => {
                    self.counters.demoted.fetch_add(1, Ordering::Relaxed);
                    self.counters.demoted_bytes.fetch_add(loc.len(), Ordering::Relaxed);
                }
                Ok(None) => {}
                Err(LogError::TooBig { .. }) => refused = Some((t, "larger than a segment")),
                Err(_) => refused = Some((t, "paused")),
            }
        }
        if inner.map.get(&k).is_some_and(|e| !e.has_copy()) {
            inner.take_entry(&k);
            if !admit {
                self.counters.not_admitted.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let n = self.counters.demote_dropped.fetch_add(1, Ordering::Relaxed) + 1;
            let (tier, why) = refused.map_or(("any", "no log tier"), |(t, why)| (t.name(), why));
            // The first drop and then one line per doubling: a tier that
            // stays paused must not flood the log.
            if n.is_power_of_two() {
                tracing::warn!(
                    tier,
                    reason = why,
                    dropped = n,
                    "KV blocks leaving DRAM dropped: no log tier took them"
                );
            } else {
                tracing::debug!(tier, reason = why, "KV block leaving DRAM dropped");
            }
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
    /// back. A tombstone carries the version it deletes; until it is
    /// known to be on the device the key is unsure in that tier (a
    /// tombstone a paused tier refuses is owed), and `d` notes what the
    /// change that removed `old` must wait for (the `durable` module).
    pub(super) fn forget(&self, inner: &mut Inner, k: &Bytes, old: &Entry, d: &mut Durability) {
        for (t, loc) in old.locs.iter() {
            let Some(loc) = *loc else { continue };
            inner.sub_loc(t, loc);
            if inner.tiers[t].as_ref().is_some_and(|tier| tier.log.is_current(loc)) {
                self.append_tombstone(inner, t, k, Kind::Delete, old.version, d);
            }
        }
    }

    /// Removes `k` from every tier's index (tombstones in the logs); `d`
    /// as in [`KvStore::forget`].
    pub(super) fn remove_entry(&self, inner: &mut Inner, k: &Bytes, d: &mut Durability) -> bool {
        let Some(e) = inner.take_entry(k) else { return false };
        if e.value.is_some() {
            inner.dram.remove(k);
        }
        self.forget(inner, k, &e, d);
        true
    }

    /// Removes `k` from the index without a tombstone of its own: a
    /// namespace tombstone covers it, or (a paused tier) its records are
    /// owed one. Returns the entry.
    pub(super) fn remove_untombstoned(&self, inner: &mut Inner, k: &Bytes) -> Option<Entry> {
        let e = inner.take_entry(k)?;
        if e.value.is_some() {
            inner.dram.remove(k);
        }
        for (t, loc) in e.locs.iter() {
            if let Some(loc) = *loc {
                inner.sub_loc(t, loc);
            }
        }
        Some(e)
    }

    /// Drops the tier-`t` locations of reclaimed keys whose records are
    /// gone, and the entries left with no copy.
    pub(super) fn reclaim(inner: &mut Inner, counters: &Counters, t: Tier, keys: Vec<Bytes>) {
        let n = Self::drop_locs(inner, t, keys, |log, loc| !log.is_current(loc)).len();
        counters.dropped[t].fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Drops tier `t`'s records whose writes failed from the index. Such
    /// a write's outcome is unknown: its records may be on the device
    /// after all, so each is owed a tombstone before the next
    /// acknowledged change to its key (the `durable` module).
    pub(super) fn drop_lost(inner: &mut Inner, counters: &Counters, t: Tier) {
        let Some(tier) = inner.tiers[t].as_mut() else { return };
        for (span, keys) in tier.log.take_lost() {
            let dropped = Self::drop_locs(inner, t, keys, |_, loc| span.holds(loc));
            if !dropped.is_empty() {
                tracing::warn!(tier = t.name(), records = dropped.len(), "KV records lost with a failed write");
            }
            counters.lost[t].fetch_add(dropped.len() as u64, Ordering::Relaxed);
            if let Some(tier) = inner.tiers[t].as_mut() {
                for (k, version) in dropped {
                    tier.unsure.note_key(&k, version, State::Owed);
                }
            }
        }
    }

    /// Drops the tier-`t` records of `keys` for which `gone` holds from
    /// the index, and the entries left with no copy; returns each key
    /// dropped with its entry's version.
    fn drop_locs(
        inner: &mut Inner,
        t: Tier,
        keys: Vec<Bytes>,
        gone: impl Fn(&LogState<Bytes>, Loc) -> bool,
    ) -> Vec<(Bytes, u64)> {
        let mut dropped = Vec::new();
        for k in keys {
            let Some(tier) = inner.tiers[t].as_ref() else { break };
            let Some(e) = inner.map.get_mut(&k) else { continue };
            let Some(loc) = e.locs[t].filter(|&l| gone(&tier.log, l)) else { continue };
            e.locs[t] = None;
            let no_copy = !e.has_copy();
            let version = e.version;
            inner.sub_loc(t, loc);
            if no_copy {
                inner.take_entry(&k);
            }
            dropped.push((k, version));
        }
        dropped
    }
}
