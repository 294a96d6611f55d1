//! What DH-HMAC-CHAP costs a connect. strata's initiator connects to
//! strata's target on loopback (an admin queue and one I/O queue, each
//! authenticated) `N` times per setting, and the p50 and p90 connect
//! times are printed: without authentication, then per hash and DH group.
//! Authentication happens once per queue; the data path is unchanged.
//!
//! `cargo run --release -p auth-connect [N]` (default 40).

use std::sync::Arc;
use std::time::Instant;

use strata_auth::{DhGroup, DhchapSecret, HashFn, HostKeys};
use strata_block::MemDevice;
use strata_host::{Controller, HostConfig};
use strata_target::{Namespace, NamespaceIds, PortRole, Subsystem, Target, TargetConfig};

const NQN: &str = "nqn.2026-11.io.strata:auth-connect";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-00000000a0c0";

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(40).max(2);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
    if let Err(e) = rt.block_on(run(n)) {
        eprintln!("auth-connect: {e}");
        std::process::exit(1);
    }
}

async fn run(n: usize) -> Result<(), String> {
    let target = Target::new(TargetConfig::default());
    let sub = Subsystem::new(NQN, "AUTHCONNECT", vec![]);
    let ids = NamespaceIds { nguid: [1; 16], uuid: [2; 16], eui64: [0; 8] };
    sub.add_namespace(Namespace::new(1, ids, Arc::new(MemDevice::new(4096, 256)))).map_err(|e| e.to_string())?;
    target.add_subsystem(sub).map_err(|e| e.to_string())?;
    let addr =
        target.listen("127.0.0.1:0".parse().expect("an address"), PortRole::Io).await.map_err(|e| e.to_string())?.addr;
    let key = DhchapSecret::generate(Some(HashFn::Sha256));
    println!("{n} connects each (admin queue + 1 I/O queue, each authenticated), loopback:");
    let settings = [
        None,
        Some((HashFn::Sha256, DhGroup::Null)),
        Some((HashFn::Sha256, DhGroup::Ffdhe2048)),
        Some((HashFn::Sha384, DhGroup::Ffdhe3072)),
        Some((HashFn::Sha512, DhGroup::Ffdhe4096)),
        Some((HashFn::Sha512, DhGroup::Ffdhe6144)),
        Some((HashFn::Sha512, DhGroup::Ffdhe8192)),
    ];
    for setting in settings {
        let keys = setting.map(|(hash, dhgroup)| HostKeys { hash, dhgroup, ..HostKeys::new(key.clone(), None) });
        target.set_host_keys(HOST, keys);
        let cfg = HostConfig {
            hostnqn: HOST.into(),
            io_queues: 1,
            dhchap_secret: setting.map(|_| key.clone()),
            ..HostConfig::default()
        };
        let mut ms = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let c = Controller::connect(addr, NQN, &cfg).await.map_err(|e| e.to_string())?;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            drop(c);
        }
        ms.sort_by(f64::total_cmp);
        let label = setting.map_or("no authentication".to_string(), |(h, g)| format!("{h}, {g}"));
        println!("  {label:<20} p50 {:>7.2} ms   p90 {:>7.2} ms", ms[n / 2], ms[n * 9 / 10]);
    }
    Ok(())
}
