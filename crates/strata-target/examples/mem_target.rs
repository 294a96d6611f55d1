//! Serves one RAM-backed namespace, for trying the target against the
//! kernel initiator without the rest of strata:
//! `cargo run -p strata-target --example mem_target -- 0.0.0.0:4420 256`
//! (address and size in MiB).

use std::sync::Arc;

use strata_block::MemDevice;
use strata_target::{Namespace, NamespaceIds, PortRole, Subsystem, Target, TargetConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let mut args = std::env::args().skip(1);
    let addr: std::net::SocketAddr = args.next().unwrap_or_else(|| "127.0.0.1:4420".into()).parse()?;
    let mib: u64 = args.next().unwrap_or_else(|| "256".into()).parse()?;
    let target = Target::new(TargetConfig::default());
    let sub = Subsystem::new("nqn.2026-11.io.strata:mem", "STRATAMEM0001", vec![]);
    let ids = NamespaceIds { nguid: [0x11; 16], uuid: [0x22; 16], eui64: [0; 8] };
    sub.add_namespace(Namespace::new(1, ids, Arc::new(MemDevice::new(4096, mib * 256))))?;
    target.add_subsystem(sub)?;
    target.listen(addr, PortRole::Io).await?;
    let mut disc = addr;
    disc.set_port(8009);
    target.listen(disc, PortRole::Discovery).await?;
    tokio::signal::ctrl_c().await?;
    Ok(())
}
