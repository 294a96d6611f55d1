//! The same-host fast path: an engine on the GPU host reads and writes
//! blocks through shared memory instead of RESP bulk strings.
//!
//! - `region`: the shared region (a memfd) DRAM blocks put through the
//!   fast path live in, its allocator, and a client's staging area;
//! - [`wire`]: the control protocol over the Unix socket, no I/O;
//! - [`server`]: the socket, leases, puts from the staging area;
//! - [`client`]: a blocking client (the Python one is
//!   `clients/python/strata_kv`).
//!
//! A lease is a clone of the block's bytes held for the client: the
//! block's extent of the region is not reused while a client reads it,
//! even if the store evicts or overwrites the key meanwhile. The user
//! guide is the "Same-host fast path" section of `docs/kv.md`.

pub mod client;
pub mod region;
pub mod server;
pub mod wire;

pub use client::{Lease, ShmClient, ShmError};
pub use server::{ShmConfig, ShmServer};
