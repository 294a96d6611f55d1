//! The scale simulator behind `strata sim`: the real placement code on a
//! modelled cluster.
//!
//! The model: nodes of equal drives in racks (the failure domain); a map
//! balanced by the real balancer; volumes of log-uniform sizes, thin and
//! written in full, chunk by chunk, each chunk's copies (`rep:N`) or
//! shards (`ec:K+M`) on its group's nodes and, inside a node, on the drive
//! with the most free extents (the node store's rule); filled until the
//! first drive is full. Then 1% more nodes are added, and single nodes are
//! failed, and the data each change moves is compared with the minimum
//! that must move; each failure's rebuild is costed in bytes read and
//! written per node, and in time at a given bandwidth per node.
//! `docs/scale.md` describes the model and its figures.
//!
//! - `options`: what is modelled, with defaults and checks;
//! - `run`: the scenarios;
//! - `fill`: writing volumes until the first drive is full;
//! - `rebuild`: who reads and writes what to rebuild a failed node;
//! - `drives`: a node's drives, most free first;
//! - `workload`: the volumes;
//! - [`strata_rand::Rng`]: the seeded generator;
//! - `report`: the figures.

mod drives;
mod fill;
mod options;
mod rebuild;
mod report;
mod run;
mod workload;

pub use options::{MAX_REBUILD_MBPS, SimError, SimOptions};
pub use report::SimReport;
pub use run::run;
