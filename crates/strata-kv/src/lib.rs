//! strata's tiered KV-cache store: attention KV blocks kept in DRAM, on a
//! local SSD and (on a cluster) in a pool volume, served over the Redis
//! protocol so that inference engines and their KV-cache layers reach it
//! with the clients they already have.
//!
//! - [`KvStore`] is the store: tiers, eviction, demotion and promotion,
//!   pins, leases, TTLs, recovery ([`store`] module doc).
//! - [`resp`] is the Redis protocol, sans I/O; [`server`] drives it over
//!   TCP, [`client`] is a small async client for it.
//! - [`auth`] says who may use the port (users, passwords, namespaces).
//! - [`key`] is the reference key scheme engines should use; [`glob`]
//!   matches Redis's key patterns (`KEYS`, `SCAN ... MATCH`).
//! - [`policy`] holds the eviction policies (S3-FIFO, and LRU to compare).
//!
//! The user guide is `docs/kv.md` at the repository root.

pub mod admit;
pub mod auth;
pub mod client;
pub mod command;
mod format;
pub mod glob;
pub mod key;
mod log;
pub mod policy;
pub mod resp;
pub mod server;
pub mod shm;
pub mod sim;
pub mod store;

pub use log::{LogError, Place};
pub use store::{Admit, KvConfig, KvError, KvStore, LOAD_SOURCES, LoadStats, Pin, PutOpts, Stats, Tiers};
