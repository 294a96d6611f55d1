//! strata-pool's integration tests, one binary (each one links the whole
//! crate and its dependencies): replicated and erasure-coded volumes over
//! in-memory and faulty replicas, over the fabric, moves, undo logs, and
//! a volume's and the registry's state in etcd (each run against real
//! etcd and against the in-process fake).

mod cluster_etcd;
mod erasure;
mod fabric;
mod fabric_ec;
mod moves;
mod registry_etcd;
mod replication;
mod undo_log;
