//! strata's node control plane: what a `strata serve` or `strata node`
//! process runs between its listeners and its drives.
//!
//! - [`node`]: the single-machine node, the metadata store, the node
//!   store and the NVMe/TCP target wired together, with the crash-ordering
//!   rules of its volume operations.
//! - [`cluster`]: one node of a cluster, reconciling with etcd every
//!   second: it holds the replicas placement gives it, takes over volumes
//!   that have no owner ([`cluster`]'s `ownership` module decides, free of
//!   I/O), serves and moves the ones it owns, and answers the pool's
//!   status ([`pool_status`]); `cluster::start` starts one in the order
//!   that keeps it safe, for `strata node` and for tests that run several
//!   nodes in one process (`tests/reconcile.rs`).
//! - [`identity`]: who a cluster node is (its data dir's identity,
//!   checked against etcd), [`notes`]: what it keeps for its volumes'
//!   owners, [`volume_check`]: an owner's check of its volumes' copies,
//!   [`fill`]: how full the pool is.
//! - [`config`]: the merged settings a node runs with.
//!
//! The binary (`crates/strata`) reads the command line and config files,
//! starts the runtimes and listeners, serves the HTTP API over these
//! types, and prints them for people.

pub mod audit;
pub mod cluster;
pub mod config;
pub mod fill;
pub mod hosts;
pub mod human;
pub mod identity;
pub mod node;
pub mod notes;
pub mod pool_status;
pub mod reservations;
pub mod tokens;
pub mod volume_check;
