//! Volumes over the cluster.
//!
//! - [`regions`] and [`drl`]: the dirty-region log that lets a new owner
//!   repair exactly the regions where replicas may differ, and a stale
//!   replica copy exactly what it missed;
//! - [`replica`]: one node's copy of a volume, local or over the fabric,
//!   behind an epoch fence;
//! - [`volume`]: the replicated volume its owner serves to hosts;
//! - [`fabric`]: replicas on other nodes, over NVMe/TCP with fenced
//!   commands.
//!
//! The design, with the crash cases, is in `docs/pool.md`.

pub mod drl;
pub mod fabric;
pub mod regions;
pub mod replica;
pub mod testing;
pub mod volume;

pub use drl::{DirtyRegionLog, DrlState, DrlStore, NodeId};
pub use regions::{RegionSet, Regions};
pub use replica::{LocalReplica, Replica, ReplicaError};
pub use volume::{Control, ControlError, Layout, Membership, ReplicatedVolume, VolumeParts};
