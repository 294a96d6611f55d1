//! What every kind of pool volume offers the node that owns it, whatever
//! its protection: [`PoolVolume`], the counters it keeps
//! ([`VolumeStats`]), why it may fail to open ([`OpenError`]), and how
//! often its owner cleans its dirty-region log ([`CLEAN_AFTER`]).
//!
//! The kinds are [`crate::replicated::ReplicatedVolume`] and
//! [`crate::erasure::ErasureVolume`]; both are the owner core
//! (`crate::owner`) plus their own data path.

use std::sync::Arc;
use std::time::Duration;

use strata_block::{BlockDevice, BlockError, BlockFuture};

use crate::check::{CheckProgress, CheckReport};
use crate::drl::{DirtyRegionLog, NodeId};
use crate::layout::NextLayout;
// `short_group` stays reachable at its old path for the node (crates/strata).
pub use crate::layout::short_group;

/// How long a dirty region stays dirty after its last write when the
/// owner cleans the log. Longer means fewer metadata writes under writes
/// scattered over the volume (a region written again within this time
/// costs nothing); shorter means fewer regions to repair after the owner
/// dies. md's write-intent bitmap makes the same trade with a few seconds.
pub const CLEAN_AFTER: Duration = Duration::from_secs(5);

/// Counters of one volume (replicated or erasure-coded).
#[derive(Debug, Default)]
pub struct VolumeStats {
    /// Replicas that left the in-sync set.
    pub replicas_dropped: std::sync::atomic::AtomicU64,
    /// Regions copied by resync or repair.
    pub regions_copied: std::sync::atomic::AtomicU64,
    /// Bytes copied or decoded onto nodes that missed them (resync, fill).
    pub bytes_rebuilt: std::sync::atomic::AtomicU64,
    /// Bytes one copy of the volume allocates, as the owner last learned
    /// from its replicas' nodes (what [`BlockDevice::usage`] reports).
    pub allocated_bytes: std::sync::atomic::AtomicU64,
}

/// Why a volume could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Some chunk has no reachable in-sync replica: its data is
    /// unavailable until one comes back.
    #[error(
        "chunk {chunk} has {readable} of the {needed} readable in-sync nodes it needs (its nodes {replicas:?}; \
         in sync {in_sync:?}; in sync but missing some of its regions {missing:?})"
    )]
    Unavailable {
        /// The chunk.
        chunk: u64,
        /// Its replicas.
        replicas: Vec<NodeId>,
        /// How many of them are in sync and miss none of its regions.
        readable: usize,
        /// How many it needs (one copy; K shards).
        needed: usize,
        /// The volume's in-sync set.
        in_sync: Vec<NodeId>,
        /// Its nodes in sync that miss some of its regions (being filled
        /// or refilled).
        missing: Vec<NodeId>,
    },
    /// I/O failed while opening.
    #[error(transparent)]
    Io(#[from] BlockError),
}

/// What a node asks of a volume it owns, whatever its protection.
pub trait PoolVolume: BlockDevice {
    /// The stale nodes being caught up, each with the regions it misses.
    fn resyncing(&self) -> Vec<(NodeId, u64)>;
    /// The volume's counters.
    fn stats(&self) -> &VolumeStats;
    /// The dirty-region log.
    fn drl(&self) -> &Arc<DirtyRegionLog>;
    /// Clears quiet dirty regions (and, erasure-coded, commits what has
    /// ended); the owner runs it every second.
    fn clean(&self, quiet_for: Duration) -> BlockFuture<'_, Result<u64, BlockError>>;
    /// Brings the stale node `node` back in sync, or fills in-sync `node`
    /// with the chunks it joined in a move.
    fn resync(&self, node: NodeId) -> BlockFuture<'_, Result<(), BlockError>>;
    /// In-sync nodes being filled with chunks they joined in a move, each
    /// with the regions it still misses.
    fn filling(&self) -> Vec<(NodeId, u64)>;
    /// Limits what resyncs and fills copy to this node's rebuild
    /// bandwidth (set once).
    fn set_throttle(&self, throttle: Arc<crate::throttle::Throttle>);
    /// True once this owner has been fenced: it serves nothing more.
    fn is_fenced(&self) -> bool;
    /// Where the volume is moving, while a move runs.
    fn moving_to(&self) -> Option<NextLayout>;
    /// Ends the move in progress once every node that joins chunks is
    /// filled: the volume is placed by its new layout, and the nodes that
    /// left it are dropped. True when it switched.
    fn finish_move(&self) -> BlockFuture<'_, Result<bool, BlockError>>;
    /// From now on serve only while every other in-sync node's promise of
    /// `duration` holds (asked for at once, then every third of it): how
    /// an owner goes on serving, safely, while the metadata store is out
    /// of reach (docs/pool.md, "I/O through a metadata outage").
    fn keep_promises(&self, duration: Duration) -> BlockFuture<'_, ()>;
    /// True while the owner may serve by its replicas' promises (always,
    /// when it keeps none).
    fn promised(&self) -> bool;
    /// Where the volume's dirty-region log goes while the metadata store
    /// does not answer: a note on every node that takes its writes.
    fn note_sink(&self) -> std::sync::Weak<dyn crate::drl::NoteSink>;
    /// The membership epoch this owner serves at.
    fn epoch(&self) -> u64;
    /// Gives the volume up: stops serving it and has its replicas end the
    /// promises they gave this owner, so that the next owner need not wait
    /// for them.
    fn end_promises(&self) -> BlockFuture<'_, ()>;
    /// Asks the fill running now to stop at its next region (what it has
    /// not copied stays missed), so that a newer placement can be taken up
    /// at once: an undrain right after a drain, a node that came back.
    fn interrupt_fill(&self);
    /// Writes, write-zeroes and deallocates still running, including those
    /// whose callers left.
    fn writes_running(&self) -> usize;
    /// Reads every copy or shard, online, and reports where they differ;
    /// with `repair`, makes them agree (see [`crate::check`]).
    fn check<'a>(
        &'a self,
        repair: bool,
        progress: &'a CheckProgress,
    ) -> BlockFuture<'a, Result<CheckReport, BlockError>>;
    /// Regions the last owner left dirty that this one, serving already,
    /// has not yet made agree (see `owner::repair_in_background`).
    fn unrepaired(&self) -> u64;
    /// Waits until those regions all agree again and the log is clean of
    /// them (or the owner is fenced).
    fn repair_ended(&self) -> BlockFuture<'_, ()>;
    /// Turns true when this owner is fenced (it serves nothing more); its
    /// `changed` fails once the volume is dropped unfenced.
    fn fenced_signal(&self) -> tokio::sync::watch::Receiver<bool>;
    /// True when this owner stopped serving because nodes failed that
    /// could not leave the in-sync set without leaving a chunk below what
    /// the protection needs (it is fenced too): the volume comes back at
    /// the next takeover once enough of them are back.
    fn below_minimum(&self) -> bool;
}
