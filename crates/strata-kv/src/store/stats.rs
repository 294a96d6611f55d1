//! What the store counts and reports: [`Counters`], bumped without the
//! lock as operations run, and [`Stats`], their snapshot together with
//! the index's sizes. Counters only grow; a snapshot is taken under the
//! index's lock, so its sizes agree with each other (the counters may
//! run ahead of them by what other threads count meanwhile).

use std::sync::atomic::{AtomicU64, Ordering};

use strata_metrics::{HistogramSnapshot, LatencyHistogram};

use super::index::Inner;
use super::tier::{PerTier, Tier};
use crate::policy::Policy;

/// Counters since start.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) gets: AtomicU64,
    pub(super) hits_dram: AtomicU64,
    pub(super) hits_ssd: AtomicU64,
    pub(super) hits_pool: AtomicU64,
    pub(super) hits_peer: AtomicU64,
    pub(super) misses: AtomicU64,
    pub(super) puts: AtomicU64,
    pub(super) evicted: AtomicU64,
    pub(super) demoted: AtomicU64,
    pub(super) demoted_bytes: AtomicU64,
    pub(super) not_admitted: AtomicU64,
    pub(super) demote_dropped: AtomicU64,
    pub(super) dropped: PerTier<AtomicU64>,
    pub(super) lost: PerTier<AtomicU64>,
    pub(super) skipped: PerTier<AtomicU64>,
    pub(super) promoted: AtomicU64,
    pub(super) corrupt: AtomicU64,
    pub(super) expired: AtomicU64,
    pub(super) quota_evicted: AtomicU64,
    /// Gets' latency by where they were answered ([`LOAD_SOURCES`]).
    pub(super) load_latency: [LatencyHistogram; 5],
    /// Bytes those gets returned.
    pub(super) load_bytes: [AtomicU64; 5],
}

/// Where a get was answered, in the order of [`Counters::load_latency`]:
/// DRAM, the SSD tier, the pool tier, a peer's log, or a miss.
pub const LOAD_SOURCES: [&str; 5] = ["dram", "ssd", "pool", "peer", "miss"];

/// Gets answered from one place: how many bytes, and how long they took
/// from the call to the answer (a log tier's read and the promotion into
/// DRAM included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadStats {
    /// One of [`LOAD_SOURCES`].
    pub source: &'static str,
    /// Bytes returned.
    pub bytes: u64,
    /// Their latencies (the count is the number of gets).
    pub latency: HistogramSnapshot,
}

impl Counters {
    /// Loads by where they were answered.
    pub(super) fn loads(&self) -> Vec<LoadStats> {
        LOAD_SOURCES
            .iter()
            .enumerate()
            .map(|(i, &source)| LoadStats {
                source,
                bytes: self.load_bytes[i].load(Ordering::Relaxed),
                latency: self.load_latency[i].snapshot(),
            })
            .collect()
    }
}

/// A snapshot of the store's state and counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Keys in any tier.
    pub keys: u64,
    /// Bytes of the distinct blocks stored since the store opened
    /// (estimated; what [`Admit::Auto`](super::Admit::Auto) weighs the
    /// log tier against).
    pub working_set_bytes: u64,
    /// Keys with an expiry (expired ones not yet deleted included).
    pub expires: u64,
    /// The mean time left to the keys with an expiry, in milliseconds
    /// (0 when none).
    pub avg_ttl_ms: u64,
    /// Keys with a DRAM copy.
    pub dram_keys: u64,
    /// DRAM bytes used.
    pub dram_used: u64,
    /// DRAM capacity.
    pub dram_capacity: u64,
    /// Keys with an SSD record.
    pub ssd_keys: u64,
    /// Bytes of live SSD records.
    pub ssd_live: u64,
    /// SSD log capacity (0: no SSD tier).
    pub ssd_capacity: u64,
    /// Keys with a pool record.
    pub pool_keys: u64,
    /// Bytes of live pool records.
    pub pool_live: u64,
    /// Pool log capacity (0: no pool tier).
    pub pool_capacity: u64,
    /// Gets.
    pub gets: u64,
    /// Gets answered from DRAM.
    pub hits_dram: u64,
    /// Gets answered from SSD.
    pub hits_ssd: u64,
    /// Gets answered from the pool.
    pub hits_pool: u64,
    /// Gets answered from another store's log on the shared pool volume.
    pub hits_peer: u64,
    /// Keys known from other stores' logs on the shared pool volume.
    pub peer_keys: u64,
    /// Gets that found nothing.
    pub misses: u64,
    /// Puts.
    pub puts: u64,
    /// Blocks that left DRAM.
    pub evicted: u64,
    /// Log records written on leaving DRAM (one per tier written).
    pub demoted: u64,
    /// Bytes written to the log tiers by demotion.
    pub demoted_bytes: u64,
    /// Blocks that left DRAM without being written because the admission
    /// policy turned them away ([`Admit`](super::Admit)).
    pub not_admitted: u64,
    /// Blocks that left DRAM admitted but written to no log tier (each
    /// tier paused, stalled, or the block larger than a segment): gone.
    pub demote_dropped: u64,
    /// SSD records dropped when their segment was reclaimed.
    pub dropped_ssd: u64,
    /// Pool records dropped when their segment was reclaimed.
    pub dropped_pool: u64,
    /// SSD records dropped because their write failed.
    pub lost_ssd: u64,
    /// Pool records dropped because their write failed.
    pub lost_pool: u64,
    /// Blocks not written to the SSD tier because its writes were
    /// stalled (the SSD's bounded wait ran out).
    pub ssd_skipped: u64,
    /// Blocks not written to the pool because its writes were stalled.
    pub pool_skipped: u64,
    /// Blocks copied back into DRAM from a log tier.
    pub promoted: u64,
    /// Log records that failed their checks on read (answered as misses).
    pub corrupt: u64,
    /// Blocks found expired.
    pub expired: u64,
    /// Blocks deleted to keep a namespace within its quota.
    pub quota_evicted: u64,
}

impl Counters {
    /// A snapshot of these counters and of `g`, the index (locked), in a
    /// store of `dram_capacity` bytes of DRAM, at `now` (Unix ms).
    pub(super) fn snapshot(&self, g: &Inner, dram_capacity: u64, now: u64) -> Stats {
        let c = self;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mean_expiry = g.expiry_sum.checked_div(u128::from(g.with_expiry)).unwrap_or(0);
        let avg_ttl_ms = u64::try_from(mean_expiry.saturating_sub(u128::from(now))).unwrap_or(u64::MAX);
        Stats {
            keys: g.map.len() as u64,
            working_set_bytes: g.working_set.bytes(),
            expires: g.with_expiry,
            avg_ttl_ms: if g.with_expiry == 0 { 0 } else { avg_ttl_ms },
            dram_keys: g.dram.len() as u64,
            dram_used: g.dram.used(),
            dram_capacity,
            ssd_keys: g.tiers[Tier::Ssd].as_ref().map_or(0, |t| t.keys),
            ssd_live: g.tiers[Tier::Ssd].as_ref().map_or(0, |t| t.live),
            ssd_capacity: g.tiers[Tier::Ssd].as_ref().map_or(0, |t| t.log.capacity()),
            pool_keys: g.tiers[Tier::Pool].as_ref().map_or(0, |t| t.keys),
            pool_live: g.tiers[Tier::Pool].as_ref().map_or(0, |t| t.live),
            pool_capacity: g.tiers[Tier::Pool].as_ref().map_or(0, |t| t.log.capacity()),
            gets: r(&c.gets),
            hits_dram: r(&c.hits_dram),
            hits_ssd: r(&c.hits_ssd),
            hits_pool: r(&c.hits_pool),
            hits_peer: r(&c.hits_peer),
            peer_keys: g.peer_index.len() as u64,
            misses: r(&c.misses),
            puts: r(&c.puts),
            evicted: r(&c.evicted),
            demoted: r(&c.demoted),
            demoted_bytes: r(&c.demoted_bytes),
            not_admitted: r(&c.not_admitted),
            demote_dropped: r(&c.demote_dropped),
            dropped_ssd: r(&c.dropped[Tier::Ssd]),
            dropped_pool: r(&c.dropped[Tier::Pool]),
            lost_ssd: r(&c.lost[Tier::Ssd]),
            lost_pool: r(&c.lost[Tier::Pool]),
            ssd_skipped: r(&c.skipped[Tier::Ssd]),
            pool_skipped: r(&c.skipped[Tier::Pool]),
            promoted: r(&c.promoted),
            corrupt: r(&c.corrupt),
            expired: r(&c.expired),
            quota_evicted: r(&c.quota_evicted),
        }
    }
}
