//! Placement: where the copies of every chunk live. Pure: no I/O, no
//! clock, no threads; a function of a [`PlacementMap`] and nothing else.
//!
//! volume chunk --[`ChunkId::pg`]--> placement group --[`Placer`]--> ordered nodes
//!
//! - `chunk`: chunk size and chunk to group (hashed start, striped);
//! - `hash`: the deterministic hashes and the straw2 draw;
//! - `map`: the serialisable map and its invariants;
//! - `protection`: `rep:N` and `ec:K+M`, the group's width;
//! - `placer`: group to nodes (rendezvous under failure domains, remaps,
//!   substitutes for nodes that hold no data);
//! - `table`: every group's placement, and movement between two tables;
//! - `balance`: the remaps that even nodes out;
//! - `honour`: whether a protection can be met with strict domains.
//!
//! The design and its measurements are argued in `docs/pool.md`.

mod balance;
mod chunk;
mod hash;
mod honour;
mod map;
mod placer;
mod protection;
mod table;
#[cfg(test)]
pub(crate) mod test_utils;

pub use balance::{BalanceOptions, Balanced, balance};
pub use chunk::{CHUNK_SIZE, ChunkId, PG_COPIES_PER_NODE, PG_PARTNERS_PER_NODE, pg_count_for};
pub use honour::{CannotHonour, DomainRefused, DrainRefused, check_drain, check_failure_domain, check_protection};
pub use map::{
    ALGORITHM, FailureDomain, MAX_NODES, MAX_PG_COUNT, MapError, Node, NodeId, NodeState, PlacementMap, Remap,
};
pub use placer::Placer;
pub use protection::{MAX_COPIES, MAX_WIDTH, Protection, ProtectionError};
pub use table::PlacementTable;
