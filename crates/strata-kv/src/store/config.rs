//! What a store is opened with: its settings ([`KvConfig`], [`Admit`]),
//! the devices of its log tiers ([`Tiers`]), and the sizes derived from
//! them (the DRAM policy's ghost, a log's segments). Plain values: none
//! of it changes once the store is open.

use std::sync::Arc;

use strata_block::BlockDevice;

/// The devices of a store's log tiers.
#[derive(Default)]
pub struct Tiers {
    /// The local SSD tier.
    pub ssd: Option<Arc<dyn BlockDevice>>,
    /// This store's pool tier (its region of a shared pool volume).
    pub pool: Option<Arc<dyn BlockDevice>>,
    /// The regions the other stores sharing the pool volume write: read
    /// only, so that a lookup here sees the blocks they wrote.
    pub peers: Vec<Arc<dyn BlockDevice>>,
}

/// Which blocks leaving DRAM are written to the SSD tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Admit {
    /// Every block while the log tier below DRAM holds a tenth of the
    /// working set or more, else as [`Admit::Reused`] ([`crate::admit`]).
    #[default]
    Auto,
    /// Blocks read again while in DRAM, returning blocks and pinned ones.
    Reused,
    /// Every block.
    All,
}

/// The store's settings.
#[derive(Debug, Clone)]
pub struct KvConfig {
    /// DRAM tier capacity in bytes (keys, values and [`ENTRY_OVERHEAD`](super::ENTRY_OVERHEAD)).
    pub dram_bytes: u64,
    /// SSD admission.
    pub admit: Admit,
    /// Segment size for a newly formatted SSD log.
    pub segment_bytes: u64,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig { dram_bytes: 1 << 30, admit: Admit::Auto, segment_bytes: 256 << 20 }
    }
}

/// The DRAM policy's ghost length, in multiples of the keys DRAM holds,
/// for a log tier of `log_bytes` below `dram_bytes` of DRAM: 1 + 4x
/// their ratio, at most 16. A block that comes back from the ghost counts
/// as reused and is admitted to the log tiers when it leaves DRAM again;
/// a ghost that remembers as far back as the SSD reaches lets a block
/// that returns after leaving DRAM get there, where a ghost of DRAM's
/// size forgets it first (`strata bench kv-trace --ssd-ratio`, in
/// docs/kv.md: 4.7% to 10.9% hits at the smallest size measured).
pub fn ghost_factor_for(dram_bytes: u64, log_bytes: u64) -> usize {
    let ratio = log_bytes / dram_bytes.max(1);
    usize::try_from(ratio.saturating_mul(4).saturating_add(1)).unwrap_or(usize::MAX).clamp(1, 16)
}

/// Segment size for a log device of `bytes`: a sixteenth of it, between
/// 1 MiB and 256 MiB (which bounds the largest value the tier holds).
pub fn segment_size_for(bytes: u64) -> u64 {
    (bytes / 16).clamp(1 << 20, 256 << 20) >> 20 << 20
}
