//! Volumes over the cluster.
//!
//! Today this crate holds the pool's placement (which nodes keep the
//! copies of every chunk of every volume) and the scale simulator that
//! runs it on a modelled cluster (`strata sim`). Replication, fencing,
//! rebuild and rebalance will join as modules of their own.
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

pub mod placement;
pub mod sim;
