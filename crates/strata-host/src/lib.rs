//! strata's user-space NVMe/TCP initiator.
//!
//! [`discover`] reads a discovery controller's log; [`Controller::connect`]
//! associates with an NVM subsystem over an admin queue and any number of
//! I/O queues (one TCP connection each), and offers the admin command set
//! and the NVM I/O commands on top. It is what strata's tests, `strata
//! bench` and the pool's internal fabric use to talk to an NVMe/TCP
//! target, so the per-I/O path is kept lean: commands are pipelined up to
//! the queue depth, no task is spawned per command, and write payloads go
//! to the socket as [`bytes::Bytes`] views without being copied.
//!
//! ```no_run
//! use strata_host::{Controller, HostConfig, discover};
//!
//! # async fn run() -> Result<(), strata_host::HostError> {
//! let cfg = HostConfig { io_queues: 4, ..HostConfig::default() };
//! let addr = "127.0.0.1:4420".parse().expect("address");
//! for entry in discover(addr, &cfg).await? {
//!     println!("{} at {}:{}", entry.subnqn, entry.traddr, entry.trsvcid);
//! }
//! let ctrl = Controller::connect(addr, "nqn.2026-11.io.strata:demo", &cfg).await?;
//! ctrl.write(1, 0, vec![0xab; 4096], false).await?;
//! let back = ctrl.read(1, 0, 1).await?;
//! assert_eq!(&back[..], &[0xab; 4096][..]);
//! ctrl.disconnect().await?;
//! # Ok(()) }
//! ```
//!
//! Layout: [`config`](HostConfig) holds the settings; `proto` is the
//! sans-I/O host side of the NVMe/TCP transport for one queue (framing,
//! command identifiers, R2T and C2HData handling, digests); `queue` drives
//! it over a socket with one task per connection; `controller` does
//! association setup, admin and I/O commands; `driver` is the
//! caller-driven alternative to `queue` for load generators
//! ([`Controller::connect_with_drivers`]); `discovery` reads the discovery
//! log; `namespace` presents one namespace as a
//! [`strata_block::BlockDevice`] ([`RemoteNamespace`]); `error` holds the
//! error types; [`TargetUrl`] is the `tcp://ADDR:PORT/NQN` form that
//! names a target on the command line.

mod auth;
mod config;
mod controller;
mod discovery;
mod driver;
mod error;
mod namespace;
mod paths;
mod proto;
mod queue;
mod url;

pub use config::HostConfig;
pub use controller::{
    ADMIN_IN_CAPSULE_BYTES, ADMIN_MAX_TRANSFER_BYTES, Controller, IoQueue, MAX_BLOCKS_PER_COMMAND,
    MAX_TRANSFER_CAP_BYTES,
};
pub use discovery::{MAX_DISCOVERY_RECORDS, discover};
pub use driver::{Completion, QueueDriver};
pub use error::{HostError, QueueFailure};
pub use namespace::RemoteNamespace;
pub use paths::connect_best_with_drivers;
pub use strata_auth::{DhchapSecret, HostAuthError};
pub use url::{TargetUrl, TargetUrlError};
