//! Shared fixtures for the target + host integration tests: a target on
//! loopback (port 0) serving one RAM namespace, and the project's seeded
//! PRNG for data patterns.

#![allow(dead_code, unused_imports)]

pub mod raw;

use std::net::SocketAddr;
use std::sync::Arc;

use strata_block::{BlockDevice, MemDevice};
use strata_target::{Namespace, NamespaceIds, PortRole, Subsystem, Target, TargetConfig};

/// NQN of the fixture's subsystem.
pub const NQN: &str = "nqn.2026-11.io.strata:itest";
/// Block size of the fixture's namespaces.
pub const BS: usize = 4096;
/// Identity of namespace 1.
pub const IDS: NamespaceIds = NamespaceIds { nguid: [0x11; 16], uuid: [0x22; 16], eui64: [0x33; 8] };

/// A running target with one subsystem and namespace 1.
pub struct Fixture {
    pub target: Target,
    pub sub: Arc<Subsystem>,
    pub dev: Arc<MemDevice>,
    /// The I/O port.
    pub io: SocketAddr,
    /// The discovery port.
    pub disc: SocketAddr,
}

/// Starts a target whose namespace 1 is `blocks` 4 KiB blocks of RAM.
pub async fn start(blocks: u64) -> Fixture {
    start_with(TargetConfig::default(), blocks).await
}

/// As [`start`], with `config`.
pub async fn start_with(config: TargetConfig, blocks: u64) -> Fixture {
    let dev = Arc::new(MemDevice::new(BS as u32, blocks));
    let (target, sub, io, disc) = serve(config, dev.clone()).await;
    Fixture { target, sub, dev, io, disc }
}

/// A target with `config` serving `device` as namespace 1 of [`NQN`]:
/// the target, the subsystem, the I/O port and the discovery port.
pub async fn serve(
    config: TargetConfig,
    device: Arc<dyn BlockDevice>,
) -> (Target, Arc<Subsystem>, SocketAddr, SocketAddr) {
    let target = Target::new(config);
    let sub = Subsystem::new(NQN, "STRATAITEST01", vec![]);
    sub.add_namespace(Namespace::new(1, IDS, device)).expect("namespace 1");
    target.add_subsystem(sub.clone()).expect("subsystem");
    let io = target.listen("127.0.0.1:0".parse().unwrap(), PortRole::Io).await.expect("io port").addr;
    let disc = target.listen("127.0.0.1:0".parse().unwrap(), PortRole::Discovery).await.expect("disc port").addr;
    (target, sub, io, disc)
}

pub use strata_rand::Rng;
