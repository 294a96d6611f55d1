//! Volumes over the cluster.
//!
//! - [`placement`]: which nodes keep the copies of every chunk of every
//!   volume, and [`sim`], the scale simulator that runs it on a modelled
//!   cluster (`strata sim`);
//! - [`regions`] and [`drl`]: the dirty-region log that lets a new owner
//!   repair exactly the regions where replicas may differ, and a stale
//!   replica copy exactly what it missed;
//! - [`replica`]: one node's copy of a volume, local or over the fabric,
//!   behind an epoch fence;
//! - [`layout`]: where a volume's chunks live and how a volume moves;
//!   [`control`]: its in-sync set and the owner's changes to it, in
//!   whatever metadata store;
//! - [`volume`]: what every volume offers the node that owns it;
//!   [`replicated`] and [`erasure`]: the replicated and erasure-coded
//!   volumes an owner serves to hosts; [`opened`]: either kind by its
//!   protection (the members a node holds, the volume an owner opens);
//! - [`fabric`]: replicas on other nodes, over NVMe/TCP with fenced
//!   commands;
//! - [`cluster`]: a volume's membership, owner and log in etcd, changed
//!   by compare-and-set; [`registry`]: nodes, their ids and the
//!   versioned placement map in etcd;
//! - [`check`]: what a check of a volume's copies or shards found;
//!   [`slow`]: waits that log when they last.
//!
//! The design, with the crash cases, is in `docs/pool.md`.
//!
//! ```
//! use strata_pool::placement::{ChunkId, FailureDomain, Node, PlacementMap, Placer, Protection};
//!
//! // Six nodes of 1 TiB in three racks, rep:3.
//! let nodes = (0..6).map(|i| Node::new(i, format!("n{i}"), 1 << 40).with_label("rack", format!("r{}", i / 2)));
//! let map = PlacementMap::new(Protection::default(), FailureDomain::default(), 256, nodes.collect())?;
//! let placer = Placer::new(&map);
//!
//! let pg = ChunkId::at(7, 5 << 30).pg(map.pg_count()); // byte 5 GiB of volume 7
//! let copies = placer.place(pg);
//! assert_eq!(copies.len(), 3);
//! // One copy per rack.
//! let racks: std::collections::BTreeSet<_> = copies.iter().map(|id| map.domain_of(map.node(*id).unwrap())).collect();
//! assert_eq!(racks.len(), 3);
//! # Ok::<(), strata_pool::placement::MapError>(())
//! ```

pub mod check;
pub mod cluster;
pub mod control;
pub mod drl;
pub mod erasure;
pub mod fabric;
pub mod layout;
pub mod opened;
mod owner;
pub mod placement;
pub mod regions;
pub mod registry;
pub mod replica;
pub mod replicated;
pub mod sim;
pub mod slow;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;
pub mod throttle;
pub mod volume;

pub use control::{Control, ControlError, Membership};
pub use drl::{DirtyRegionLog, DrlState, DrlStore, NodeId, NoteSink, Stamp};
pub use layout::{Layout, Moving, NextLayout};
pub use regions::{RegionSet, Regions};
pub use replica::{LocalReplica, Replica, ReplicaError};
pub use replicated::{ReplicatedVolume, VolumeParts};
pub use volume::PoolVolume;
