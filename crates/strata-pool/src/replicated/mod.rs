//! Replicated volumes (`rep:N`), as their owner serves them:
//! [`ReplicatedVolume`], a [`BlockDevice`](strata_block::BlockDevice)
//! whose blocks live on the replicas that placement chose for each chunk.
//!
//! # What the owner guarantees
//!
//! - A write completes when every in-sync replica of its chunks has it. A
//!   replica that fails it leaves the in-sync set, recorded in the
//!   metadata store with an epoch bump
//!   ([`Control::leave`](crate::control::Control::leave)), and the regions
//!   it missed are recorded in the dirty-region log, all *before* the
//!   write completes. A write that no in-sync replica of some chunk
//!   took fails.
//! - Flush (and FUA) make data durable on every in-sync replica.
//! - Reads go to one in-sync replica per chunk, the local one when it is
//!   in sync, else the first in placement order: while the owner lives the
//!   same replica answers, so a block never flips between two values.
//! - An owner whose epoch a replica refuses (a newer owner fenced it) or
//!   whose metadata update is refused stops: every later I/O fails with
//!   [`BlockError::PathUnavailable`](strata_block::BlockError::PathUnavailable)
//!   (ANA Transition, a path error), and the host's multipath moves to the
//!   new owner.
//!
//! # Cancellation
//!
//! A host may vanish at any await. Writes, write-zeroes and deallocates
//! run to the end on a task of their own whether or not the caller still
//! waits, so replicas never diverge because a future was dropped; the
//! caller's future only waits for that task. Reads and flushes change
//! nothing and may be dropped anywhere.
//!
//! The in-sync set, fencing, the dirty-region log and the lock order are
//! the owner core's (`crate::owner`), shared with erasure-coded volumes.
//!
//! - [`volume`]: the volume, its data path, repair and resync;
//! - `check`: the online check of its copies (see [`crate::check`]).

mod check;
pub mod volume;

pub use volume::{ReplicatedVolume, VolumeParts};
