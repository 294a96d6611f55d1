//! strata's NVMe/TCP target.
//!
//! A [`Target`] listens on TCP ports, answers the discovery subsystem, and
//! serves NVM subsystems whose namespaces are any
//! [`BlockDevice`](strata_block::BlockDevice). It speaks the NVMe/TCP
//! transport (digests, in-capsule data, R2T flow control), the fabrics
//! commands (Connect, Property Get/Set, Disconnect), the admin command set
//! a fabrics host needs (Identify, Get Log Page, Get/Set Features, Keep
//! Alive, Asynchronous Event Request) and the NVM I/O command set (Read,
//! Write, Flush, Write Zeroes, Dataset Management, Compare).
//!
//! ```no_run
//! use std::sync::Arc;
//! use strata_block::MemDevice;
//! use strata_target::{Namespace, NamespaceIds, PortRole, Subsystem, Target, TargetConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let target = Target::new(TargetConfig::default());
//! let sub = Subsystem::new("nqn.2026-11.io.strata:demo", "demo0001", vec![]);
//! let ids = NamespaceIds { nguid: [1; 16], uuid: [2; 16], eui64: [0; 8] };
//! sub.add_namespace(Namespace::new(1, ids, Arc::new(MemDevice::new(4096, 1 << 16))))?;
//! target.add_subsystem(sub)?;
//! target.listen("127.0.0.1:4420".parse()?, PortRole::Io).await?;
//! target.listen("127.0.0.1:8009".parse()?, PortRole::Discovery).await?;
//! # Ok(()) }
//! ```
//!
//! # Locks
//!
//! Every lock in the crate is a short `std::sync` lock, never held across
//! an `.await`, and never held while another is taken, except in this
//! order: the target's subsystem map, port list or controller map, then a
//! subsystem's namespace map, access list or controller list, then a
//! controller's state. Cross-task signals (controller death, events,
//! keep-alive changes, drained commands, the buffer budget) are
//! `tokio::sync` channels and notifies.
//!
//! Layout: [`transport`] is the sans-I/O NVMe/TCP state machine of one
//! connection; `conn` drives it over a socket; [`controller`] and
//! [`admin`] hold controller state and the admin command set; `nvm`
//! executes I/O commands; [`subsystem`] holds subsystems and namespaces;
//! `target` ties ports, subsystems and controllers together; `listener`
//! binds ports and hands accepted connections to `conn`.

mod access;
pub mod admin;
mod admission;
pub mod budget;
mod config;
mod conn;
pub mod controller;
pub mod io_metrics;
mod io_stats;
mod listener;
mod namespace;
mod nvm;
pub mod reservation;
pub mod subsystem;
mod target;
pub mod transport;

pub use access::{AccessEvent, AccessKind, AccessSink};
pub use admission::TargetStats;
pub use config::{CNTLIDS, MAX_NSID, MAX_QUEUE_SIZE, TargetConfig};
pub use controller::Controller;
pub use io_metrics::{IoMetrics, IoMetricsRegistry};
pub use namespace::{ForwardFuture, HostForward};
pub use strata_nvme::log_page::AnaState;
pub use subsystem::{ANA_GROUP, Namespace, NamespaceIds, Subsystem, SubsystemError};
pub use target::{Port, PortRole, RemoteSubsystem, Target, TargetError};
