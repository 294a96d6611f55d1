//! Opening a store, and the background work it starts: the log tiers
//! opened (formatted when blank) and recovered into the index, then a
//! task that every 200 ms expires due entries and writes, syncs and
//! checks the logs, and one that reads the peers' logs every
//! [`PEER_REFRESH`]. Both tasks hold a [`Weak`] reference and end once
//! the store is dropped.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use strata_block::BlockDevice;
use tokio::sync::oneshot;

use super::config::{KvConfig, Tiers, ghost_factor_for, segment_size_for};
use super::durable::PeriodicSync;
use super::error::KvError;
use super::index::{Inner, lock};
use super::kv_store::KvStore;
use super::peers::{PEER_REFRESH, Peer};
use super::recovery::recover;
use super::stats::Counters;
use super::tier::{LogTier, PerTier, Tier};
use crate::log::LogState;
use crate::policy::S3Fifo;

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl KvStore {
    /// Opens the store with a DRAM tier and, when `ssd` is given, an SSD
    /// log tier on that device (formatted when blank, recovered
    /// otherwise). Starts a task that writes out the log's buffer every
    /// 200 ms and syncs the device every second, so a block reaches the
    /// drive within about a second of leaving DRAM.
    ///
    /// # Errors
    ///
    /// The log device is too small or its I/O fails.
    pub async fn open(cfg: KvConfig, ssd: Option<Arc<dyn BlockDevice>>) -> Result<Arc<KvStore>, KvError> {
        Self::open_tiers(cfg, Tiers { ssd, ..Tiers::default() }, Box::new(unix_ms)).await
    }

    /// [`KvStore::open`] with a clock of Unix milliseconds (tests).
    ///
    /// # Errors
    ///
    /// As [`KvStore::open`].
    pub async fn open_with_clock(
        cfg: KvConfig,
        ssd: Option<Arc<dyn BlockDevice>>,
        clock: Box<dyn Fn() -> u64 + Send + Sync>,
    ) -> Result<Arc<KvStore>, KvError> {
        Self::open_tiers(cfg, Tiers { ssd, ..Tiers::default() }, clock).await
    }

    /// [`KvStore::open`] with every tier: a log on `tiers.pool` too (a
    /// pool volume, usually `strata_host::RemoteNamespace`, or a region
    /// of one), with segments sized for it by [`segment_size_for`], and
    /// the other writers' regions of a shared pool volume, read every
    /// [`PEER_REFRESH`].
    ///
    /// # Errors
    ///
    /// As [`KvStore::open`], for either log device.
    pub async fn open_tiers(
        cfg: KvConfig,
        tiers: Tiers,
        clock: Box<dyn Fn() -> u64 + Send + Sync>,
    ) -> Result<Arc<KvStore>, KvError> {
        let Tiers { ssd, pool, peers } = tiers;
        let below = [&ssd, &pool].iter().filter_map(|d| d.as_ref()).map(|d| d.geometry().size_bytes()).max();
        let mut inner = Inner::new(S3Fifo::with_shape(10, ghost_factor_for(cfg.dram_bytes, below.unwrap_or(0))));
        let mut devs = PerTier::default();
        let mut found = Vec::new();
        for (t, dev) in [(Tier::Ssd, ssd), (Tier::Pool, pool)] {
            let Some(dev) = dev else { continue };
            let seg = if t == Tier::Ssd { cfg.segment_bytes } else { segment_size_for(dev.geometry().size_bytes()) };
            let (log, f) = LogState::open(dev, seg).await?;
            devs[t] = Some(log.dev().clone());
            inner.tiers[t] = Some(LogTier { log, live: 0, keys: 0, unsure: Default::default() });
            found.extend(f.into_iter().map(|f| (t, f)));
        }
        recover(&mut inner, found, clock());
        let peers = peers.into_iter().map(Peer::new).collect();
        let store =
            Arc::new(KvStore { inner: Mutex::new(inner), devs, peers, cfg, counters: Counters::default(), clock });
        tokio::spawn(tick(Arc::downgrade(&store)));
        if !store.peers.is_empty() {
            store.refresh_peers().await;
            tokio::spawn(peer_tick(Arc::downgrade(&store)));
        }
        Ok(store)
    }

    /// Reads what the peers added to their logs since the last look, and
    /// indexes it. Runs every [`PEER_REFRESH`]; public so that tests (and
    /// callers that just learnt of a peer's write) need not wait.
    pub async fn refresh_peers(&self) {
        for (p, peer) in self.peers.iter().enumerate() {
            peer.refresh(p, &self.inner, &*self.clock).await;
        }
    }
}

/// Every 200 ms, while the store lives: deletes what expired, writes each
/// log's open buffer out, drops the records of failed writes from the
/// index, and syncs every second (a sync that lands also settles the
/// tombstones nobody waited for: those of evictions and expiries). A
/// tier's next sync is asked for only once its last one has answered, so
/// a slow device neither holds up the other tier nor queues syncs.
async fn tick(store: Weak<KvStore>) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut n = 0u64;
    let mut syncing: PerTier<Option<PeriodicSync>> = PerTier::default();
    loop {
        tick.tick().await;
        n += 1;
        let Some(s) = store.upgrade() else { return };
        s.expire_due();
        let mut g = lock(&s.inner);
        for (t, pending) in syncing.iter_mut() {
            KvStore::drop_lost(&mut g, &s.counters, t);
            let Some(tier) = g.tiers[t].as_mut() else { continue };
            tier.log.seal(false);
            if let Some((sync, failures, rx)) = pending {
                let ok = match rx.try_recv() {
                    Err(oneshot::error::TryRecvError::Empty) => continue,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, tier = t.name(), "KV log sync failed");
                        false
                    }
                    Ok(Ok(())) => true,
                    Err(oneshot::error::TryRecvError::Closed) => false,
                };
                s.synced(&mut g, t, *sync, *failures, ok);
                *pending = None;
            }
            if n.is_multiple_of(5) {
                *pending = s.request_periodic_sync(&mut g, t);
            }
        }
    }
}

/// Reads the peers' logs every [`PEER_REFRESH`], while the store lives.
async fn peer_tick(store: Weak<KvStore>) {
    let mut tick = tokio::time::interval(PEER_REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(s) = store.upgrade() else { return };
        s.refresh_peers().await;
    }
}
