//! Crash semantics: after a crash a key reads as its newest acknowledged
//! value or a miss, never an older one (`docs/kv.md`, "Crash
//! semantics").
//!
//! A put lives in DRAM until it is demoted, so after a crash the newest
//! value of a key may be gone while an older record of it is still on a
//! log device. Versions alone cannot hide that record: nothing newer is
//! on the device. So a change that makes an old record stale (an
//! overwrite, a delete, a namespace's deletion, `FLUSHALL`, and an
//! expiry change of a record) writes what invalidates it (a tombstone, a
//! namespace tombstone, an expiry record) and waits until that is on the
//! device before it is acknowledged. A change to a key with no record in
//! any log (the common case for a KV cache: content-addressed blocks put
//! once) writes and waits for nothing.
//!
//! The three steps, split so that the waiting happens without the lock:
//!
//! 1. under the lock, the operation makes its change, then
//!    [`KvStore::invalidate`] (or its own appends) fills a [`Durability`]:
//!    the tiers to sync, or a tier that cannot take what it owes;
//! 2. [`KvStore::request`], still under the lock, asks those tiers for a
//!    sync ([`LogState::request_sync`](crate::log::LogState::request_sync)
//!    seals the open buffer first);
//! 3. [`KvStore::settle`] waits for the syncs. `Ok` only when each
//!    answered `Ok` while its device's failure count stayed put: then the
//!    tier's marks up to that sync are dropped. Otherwise they are owed,
//!    and the change gets [`KvError::NotDurable`]: it is applied in
//!    memory, but not acknowledged.
//!
//! What is not yet known to be on a device is tracked per tier in
//! [`Unsure`](super::unsure::Unsure), so that a later change to the same
//! key (another client's put after a delete, a put after a quota
//! eviction or an expiry wrote a tombstone nobody waited for) waits for
//! it too, and a tombstone that a paused tier could not take is written
//! before the next acknowledged change to its key.
//!
//! # Cancel safety
//!
//! [`KvStore::settle`] is cancel safe: the change and its appends are
//! made before it is called, and a dropped wait leaves the marks
//! `Appended`, to be dropped by the store's periodic sync (every second)
//! or owed if that fails.

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::error::KvError;
use super::index::{Inner, lock};
use super::kv_store::KvStore;
use super::tier::{PerTier, Tier};
use super::unsure::State;
use crate::format::{Kind, RecordMeta};
use crate::log::LogError;

/// The longest a change waits for its invalidations to land. A tier whose
/// writes stall longer (not failed: a stuck device or network path) gets
/// the change [`KvError::NotDurable`]; what it appended stays on its way,
/// and the next change to the key waits for it again.
pub const DURABLE_WAIT: Duration = Duration::from_secs(10);

/// A sync the store asked for on its own behalf: its number, the failure
/// count to check its answer against, and the answer's channel.
pub(super) type PeriodicSync = (u64, u64, oneshot::Receiver<Result<(), LogError>>);

/// What a change needs from the log tiers before it is acknowledged.
#[derive(Debug, Default)]
pub(super) struct Durability {
    /// Tiers that must sync, and the failure count their marks were
    /// settled against.
    sync: PerTier<Option<u64>>,
    /// A tier that could not take an invalidation the change needs.
    failed: Option<Tier>,
}

impl Durability {
    /// True when the change needs nothing.
    fn is_empty(&self) -> bool {
        self.failed.is_none() && self.sync.iter().all(|(_, s)| s.is_none())
    }
}

/// A sync asked for on behalf of a change.
#[derive(Debug)]
struct Ticket {
    /// Its number.
    sync: u64,
    /// The device's failure count the change's marks were settled at.
    failures: u64,
    rx: oneshot::Receiver<Result<(), LogError>>,
}

/// The syncs a change waits for ([`KvStore::settle`]).
#[derive(Debug, Default)]
#[must_use = "a change is acknowledged only once `KvStore::settle` of its syncs is Ok"]
pub(super) struct Pending {
    syncs: PerTier<Option<Ticket>>,
    failed: Option<Tier>,
}

impl KvStore {
    /// Brings tier `t`'s marks up to date with its device's failure
    /// count; returns that count.
    fn settle_failures(&self, inner: &mut Inner, t: Tier) -> u64 {
        let failures = self.devs[t].as_ref().map_or(0, |d| d.failures());
        if let Some(tier) = inner.tiers[t].as_mut() {
            tier.unsure.settle_failures(failures);
        }
        failures
    }

    /// True when tier `t` takes appends now.
    fn takes_appends(&self, t: Tier) -> bool {
        self.devs[t].as_ref().is_some_and(|d| !d.is_failed())
    }

    /// Notes that the change needs tier `t` synced.
    pub(super) fn need_sync(&self, inner: &mut Inner, t: Tier, d: &mut Durability) {
        if d.sync[t].is_none() {
            d.sync[t] = Some(self.settle_failures(inner, t));
        }
    }

    /// Notes that the change needs tier `t`, which cannot take it.
    pub(super) fn need_failed(d: &mut Durability, t: Tier) {
        d.failed.get_or_insert(t);
    }

    /// Appends a tombstone of `k` (`Kind::Delete`, of `version` and
    /// older) or of every key under the prefix `k` (`Kind::DeletePrefix`)
    /// to tier `t`, and marks it unsure there until a sync covers it (or
    /// owed, when the tier refuses it).
    pub(super) fn append_tombstone(
        &self,
        inner: &mut Inner,
        t: Tier,
        k: &Bytes,
        kind: Kind,
        version: u64,
        d: &mut Durability,
    ) {
        let Some(tier) = inner.tiers[t].as_mut() else { return };
        let sync = tier.log.next_sync();
        let meta = RecordMeta { kind, expires_ms: 0, version };
        let (state, reclaimed) = match tier.log.append(k.clone(), k, &[], meta) {
            Ok((_, reclaimed)) => (State::Appended { sync }, reclaimed),
            Err(e) => {
                tracing::warn!(error = %e, tier = t.name(), "KV log: tombstone not written; owed until the tier resumes");
                (State::Owed, Vec::new())
            }
        };
        match kind {
            Kind::DeletePrefix => tier.unsure.note_range(k, version, state),
            _ => tier.unsure.note_key(k, version, state),
        }
        match state {
            State::Appended { .. } => self.need_sync(inner, t, d),
            State::Owed => Self::need_failed(d, t),
        }
        Self::reclaim(inner, &self.counters, t, reclaimed);
    }

    /// Sees to it that no older record of `k` can come back from a log
    /// tier once `d`'s syncs land: appends what is owed for it, and asks
    /// for a sync of what is on its way. Called after the change to `k`
    /// was made in the index (its own tombstones appended by `forget`).
    pub(super) fn invalidate(&self, inner: &mut Inner, k: &Bytes, d: &mut Durability) {
        for t in Tier::ALL {
            self.settle_failures(inner, t);
            let need = match inner.tiers[t].as_ref() {
                Some(tier) => tier.unsure.need(k),
                None => continue,
            };
            if need.is_empty() {
                continue;
            }
            if need.sync {
                self.need_sync(inner, t, d);
            }
            if need.key.is_none() && need.ranges.is_empty() {
                continue;
            }
            if !self.takes_appends(t) {
                Self::need_failed(d, t);
                continue;
            }
            if let Some(version) = need.key {
                self.append_tombstone(inner, t, k, Kind::Delete, version, d);
            }
            for r in need.ranges {
                self.append_tombstone(inner, t, &r.prefix, Kind::DeletePrefix, r.version, d);
            }
        }
    }

    /// Asks for the syncs `d` needs (under the lock, so that they cover
    /// what the change appended).
    pub(super) fn request(&self, inner: &mut Inner, d: Durability) -> Pending {
        let mut p = Pending { syncs: PerTier::default(), failed: d.failed };
        for (t, failures) in d.sync.iter() {
            let (Some(failures), Some(tier)) = (*failures, inner.tiers[t].as_mut()) else { continue };
            let (sync, rx) = tier.log.request_sync();
            p.syncs[t] = Some(Ticket { sync, failures, rx });
        }
        p
    }

    /// [`KvStore::request`] when `d` needs something; `None` otherwise.
    pub(super) fn request_if(&self, inner: &mut Inner, d: Durability) -> Option<Pending> {
        (!d.is_empty()).then(|| self.request(inner, d))
    }

    /// Waits for a change's syncs (the module doc).
    ///
    /// # Errors
    ///
    /// [`KvError::NotDurable`]: a tier could not take, or did not land,
    /// an invalidation the change needs. The change is made in memory.
    pub(super) async fn settle(&self, p: Option<Pending>) -> Result<(), KvError> {
        let Some(mut p) = p else { return Ok(()) };
        let mut answers = PerTier::<Option<(Ticket, Option<bool>)>>::default();
        let deadline = tokio::time::Instant::now() + DURABLE_WAIT;
        for (t, ticket) in p.syncs.iter_mut() {
            if let Some(mut ticket) = ticket.take() {
                // `None`: no answer in time.
                let answer = tokio::time::timeout_at(deadline, &mut ticket.rx).await.ok();
                answers[t] = Some((ticket, answer.map(|r| matches!(r, Ok(Ok(()))))));
            }
        }
        let mut failed = p.failed;
        let mut g = lock(&self.inner);
        for (t, answer) in answers.iter() {
            let Some((ticket, ok)) = answer else { continue };
            let failures = self.settle_failures(&mut g, t);
            let Some(tier) = g.tiers[t].as_mut() else { continue };
            match ok {
                Some(true) if failures == ticket.failures => tier.unsure.prune(ticket.sync),
                // Still on its way: left for a later sync to settle.
                None => {
                    tracing::warn!(tier = t.name(), waited = ?DURABLE_WAIT, "KV log sync too slow; change not acknowledged");
                    failed.get_or_insert(t);
                }
                Some(_) => {
                    tier.unsure.fail(ticket.sync);
                    failed.get_or_insert(t);
                }
            }
        }
        drop(g);
        match failed {
            None => Ok(()),
            Some(t) => Err(KvError::NotDurable { tier: t.name() }),
        }
    }

    /// The store's periodic sync of tier `t` answered: drops the marks it
    /// covers, or owes them (the `open` module's tick).
    pub(super) fn synced(&self, inner: &mut Inner, t: Tier, sync: u64, failures: u64, ok: bool) {
        let now = self.settle_failures(inner, t);
        let Some(tier) = inner.tiers[t].as_mut() else { return };
        if ok && now == failures {
            tier.unsure.prune(sync);
        } else {
            tier.unsure.fail(sync);
        }
    }

    /// Asks tier `t` for a sync on the store's own behalf: its number and
    /// the failure count to check its answer against ([`KvStore::synced`]).
    pub(super) fn request_periodic_sync(&self, inner: &mut Inner, t: Tier) -> Option<PeriodicSync> {
        let failures = self.settle_failures(inner, t);
        let tier = inner.tiers[t].as_mut()?;
        let (sync, rx) = tier.log.request_sync();
        Some((sync, failures, rx))
    }
}
