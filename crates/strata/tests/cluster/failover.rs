//! What a failover costs a host: strata's own multipath initiator
//! (`RemoteNamespace` found through every node's port) writes a `rep:3`
//! volume at queue depth 1, each block a pattern the oracle remembers,
//! and reads blocks back as it goes, while the owner is killed -9 (and
//! comes back) and while a path is lost (the host port of the node it
//! uses closed by the firewall while the node lives). The host must see
//! no error and read back nothing but what it wrote; each event's pause
//! (the longest gap between two completions around it) is reported.
//!
//! The suite runs two rounds of each; `bench/failover.sh` runs 20 in a
//! release build and prints p50/p99/max (`STRATA_FAILOVER_ROUNDS`,
//! `STRATA_FAILOVER_REPORT`). Needs root and iptables (the path loss).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use strata_block::{BlockDevice, IoBuf};
use strata_host::RemoteNamespace;
use strata_meta::testing::EtcdProcess;

use crate::common::{NodeProc, free_ports, host, loopback_node, node_name, volume_status, wait_for};

/// Blocks the probe cycles over (4 KiB each).
const BLOCKS: u64 = 4096;

/// The probe's view, shared with the test thread.
#[derive(Default)]
struct Probe {
    /// Every completion, in order.
    done: Mutex<Vec<Instant>>,
    /// Errors the host saw (must stay empty).
    errors: Mutex<Vec<String>>,
    /// Where its commands went last.
    addr: Mutex<Option<SocketAddr>>,
    writes: AtomicU64,
    verified: AtomicU64,
    stop: AtomicBool,
}

impl Probe {
    fn completions(&self) -> usize {
        self.done.lock().unwrap().len()
    }

    /// The longest gap between two completions from `from` on, and the
    /// one before it.
    fn pause_since(&self, from: Instant) -> Duration {
        let done = self.done.lock().unwrap();
        let first = done.partition_point(|&t| t < from).saturating_sub(1);
        done[first..].windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default()
    }

    /// Waits until `n` more commands completed after now.
    fn progress(&self, n: usize, limit: Duration) {
        let want = self.completions() + n;
        let deadline = Instant::now() + limit;
        while self.completions() < want {
            assert!(Instant::now() < deadline, "the host made no progress for {limit:?}: {:?}", self.errors());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }
}

/// The probe: QD 1 writes over [`BLOCKS`], each block's content named by
/// a seed the oracle keeps; every fourth command reads back a block
/// written before and checks it.
async fn probe(dev: Arc<RemoteNamespace>, p: Arc<Probe>) {
    let mut oracle: HashMap<u64, u64> = HashMap::new();
    let mut rng = strata_rand::Rng::new(0xfa11_0be5);
    let mut n: u64 = 0;
    while !p.stop.load(Ordering::Relaxed) {
        n += 1;
        let read = n.is_multiple_of(4) && !oracle.is_empty();
        let lba = rng.below(BLOCKS);
        let r = if read && let Some(&seed) = oracle.get(&lba) {
            let (buf, r) = dev.read(lba, IoBuf::zeroed(4096)).await;
            r.map_err(|e| e.to_string()).and_then(|()| {
                p.verified.fetch_add(1, Ordering::Relaxed);
                (buf.as_slice() == crate::common::pattern(seed).as_slice())
                    .then_some(())
                    .ok_or_else(|| format!("block {lba} does not hold what was written last (seed {seed})"))
            })
        } else {
            let seed = n << 20 | lba;
            let (_, r) = dev.write(lba, IoBuf::from_slice(&crate::common::pattern(seed)), false).await;
            if r.is_ok() {
                oracle.insert(lba, seed);
                p.writes.fetch_add(1, Ordering::Relaxed);
            }
            r.map_err(|e| e.to_string())
        };
        match r {
            Ok(()) => p.done.lock().unwrap().push(Instant::now()),
            Err(e) => {
                p.errors.lock().unwrap().push(e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        *p.addr.lock().unwrap() = Some(dev.addr());
    }
}

/// A firewall rule that resets every TCP packet to `port`, as a port
/// closed while its process lives; removed on drop.
struct ClosedPort(u16);

impl ClosedPort {
    fn iptables(op: &str, port: u16) -> bool {
        let rule = ["INPUT", "-p", "tcp", "--dport", &port.to_string(), "-j", "REJECT", "--reject-with", "tcp-reset"];
        Command::new("iptables").arg(op).args(rule).status().is_ok_and(|s| s.success())
    }

    fn close(port: u16) -> ClosedPort {
        assert!(Self::iptables("-I", port), "iptables could not close port {port} (root and iptables needed)");
        ClosedPort(port)
    }
}

impl Drop for ClosedPort {
    fn drop(&mut self) {
        while Self::iptables("-D", self.0) {}
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn summary(pauses: &[Duration]) -> serde_json::Value {
    let mut s = pauses.to_vec();
    s.sort();
    let ms = |d: Duration| (d.as_secs_f64() * 1000.0).round() as u64;
    json!({
        "events": s.len(),
        "p50_ms": ms(percentile(&s, 0.5)),
        "p99_ms": ms(percentile(&s, 0.99)),
        "max_ms": ms(*s.last().unwrap()),
        "all_ms": pauses.iter().map(|&d| ms(d)).collect::<Vec<_>>(),
    })
}

/// Three nodes on loopback (3 s lease) and a `rep:3` volume `v`; its NQN.
fn three_nodes_and_v(root: &std::path::Path, etcd: &EtcdProcess) -> (Vec<NodeProc>, String) {
    let ports = free_ports(12);
    let nodes: Vec<NodeProc> = (1..=3).map(|i| loopback_node(root, i, &etcd.url(), "512M", &ports)).collect();
    wait_for("three nodes up", Duration::from_secs(30), &nodes, || {
        let s = nodes[0].api("GET", "/api/v1/pool", None)?;
        (s["nodes"].as_array()?.iter().filter(|n| n["state"] == "up").count() == 3).then_some(())
    });
    let created = nodes[0]
        .api(
            "POST",
            "/api/v1/volumes",
            Some(json!({"name": "v", "size": "64M", "protect": "rep:3", "allow_any_host": true})),
        )
        .expect("create answered");
    let nqn = created["nqn"].as_str().expect("an NQN").to_string();
    (nodes, nqn)
}

/// Waits until `v` is healthy with three replicas in sync, as node `via`
/// sees it; returns its owner's id.
fn healthy_owner(nodes: &[NodeProc], via: usize) -> u64 {
    wait_for("v healthy, three in sync", Duration::from_secs(90), nodes, || {
        let v = volume_status(&nodes[via], "v")?;
        (v["state"] == "healthy" && v["in_sync"].as_array()?.len() == 3 && v["owner"].as_u64().is_some())
            .then_some(v["owner"].as_u64()?)
    })
}

#[test]
fn a_multipath_host_rides_through_owner_kills_and_path_losses_without_an_error() {
    let _group = strata_testkit::group(module_path!());
    let rounds: usize = std::env::var("STRATA_FAILOVER_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let etcd = EtcdProcess::start();
    let tmp = tempfile::tempdir().unwrap();
    let (mut nodes, nqn) = three_nodes_and_v(tmp.path(), &etcd);
    let healthy = healthy_owner;
    healthy(&nodes, 0);
    let seeds: Vec<SocketAddr> = nodes.iter().map(|n| n.addrs.listen.parse().unwrap()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dev = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match RemoteNamespace::connect_any(&seeds, &nqn, Some(1), &host()).await {
                Ok(d) => break d,
                Err(e) => assert!(Instant::now() < deadline, "the host never found v: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    dev.set_command_timeout(Duration::from_secs(10));
    dev.set_failover_timeout(Duration::from_secs(60));
    let p = Arc::new(Probe::default());
    let task = rt.spawn(probe(dev, p.clone()));
    p.progress(200, Duration::from_secs(30));

    let mut kills = Vec::new();
    let mut returns = Vec::new();
    let mut losses = Vec::new();
    for round in 0..rounds {
        // The owner killed -9: another node takes over after its lease.
        let via = (0..3).find(|&i| nodes[i].api("GET", "/api/v1/pool", None).is_some()).expect("a node answers");
        let owner = healthy(&nodes, via);
        let name = node_name(&nodes[via], owner).expect("the owner's name");
        let k = nodes.iter().position(|n| n.name == name).expect("the owner");
        let t0 = Instant::now();
        nodes[k].kill9();
        p.progress(100, Duration::from_secs(60));
        kills.push(p.pause_since(t0));
        // It comes back, is resynced, and may be handed volumes again.
        let t1 = Instant::now();
        nodes[k].restart();
        healthy(&nodes, (k + 1) % 3);
        p.progress(100, Duration::from_secs(60));
        returns.push(p.pause_since(t1));

        // The host port of the node the host uses, closed.
        let used = p.addr.lock().unwrap().expect("the probe ran");
        let t2 = Instant::now();
        let closed = ClosedPort::close(used.port());
        p.progress(100, Duration::from_secs(60));
        losses.push(p.pause_since(t2));
        assert_ne!(*p.addr.lock().unwrap(), Some(used), "still on the closed path");
        drop(closed);
        p.progress(100, Duration::from_secs(60));
        eprintln!(
            "round {round}: owner kill {:?}, its return {:?}, path loss {:?}",
            kills[round], returns[round], losses[round]
        );
    }
    p.stop.store(true, Ordering::Relaxed);
    rt.block_on(task).unwrap();
    let errors = p.errors();
    assert!(errors.is_empty(), "the host saw {} errors: {errors:?}", errors.len());
    let report = json!({
        "rounds": rounds,
        "writes": p.writes.load(Ordering::Relaxed),
        "reads_verified": p.verified.load(Ordering::Relaxed),
        "errors": errors.len(),
        "owner_kill": summary(&kills),
        "owner_return": summary(&returns),
        "path_loss": summary(&losses),
    });
    eprintln!("failover: {report:#}");
    assert!(p.verified.load(Ordering::Relaxed) > 0, "nothing was read back");
    if let Ok(path) = std::env::var("STRATA_FAILOVER_REPORT") {
        std::fs::write(path, serde_json::to_string_pretty(&report).unwrap()).expect("the report");
    }
}

/// `strata bench --failover` is a multipath host too: a verify run
/// (prefill, then random reads and writes checked byte for byte) goes on
/// through the owner's kill -9 and through the loss of the path it uses,
/// with no error, and its report names each path change. Without
/// `--failover` the same path loss ends a run.
#[test]
fn strata_bench_with_failover_rides_through_an_owner_kill_and_a_path_loss() {
    let _group = strata_testkit::group(module_path!());
    let etcd = EtcdProcess::start();
    let tmp = tempfile::tempdir().unwrap();
    let (mut nodes, nqn) = three_nodes_and_v(tmp.path(), &etcd);
    let owner = healthy_owner;
    owner(&nodes, 0);
    let bench = |seed: &str, runtime: &str, failover: bool| {
        let mut cmd = Command::new(crate::common::BIN);
        cmd.args(["bench", "--target", &format!("tcp://{seed}/{nqn}"), "--rw", "randrw", "--iodepth", "4"]).args([
            "--jobs",
            "2",
            "--verify",
            "--prefill",
            "--span",
            "4M",
            "--runtime",
            runtime,
            "--json",
            "-q",
        ]);
        if failover {
            cmd.args(["--failover", "60s"]);
        }
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("strata bench")
    };
    let result = |child: std::process::Child| {
        let out = child.wait_with_output().expect("strata bench ran");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("no report ({e}): {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), report["workloads"][0]["result"].clone())
    };

    // With failover: the owner killed, back, then the path in use closed.
    let run = bench(&nodes[0].addrs.listen, "24s", true);
    std::thread::sleep(Duration::from_secs(4));
    let via = 0;
    let name = node_name(&nodes[via], owner(&nodes, via)).expect("the owner's name");
    let k = nodes.iter().position(|n| n.name == name).expect("the owner");
    nodes[k].kill9();
    std::thread::sleep(Duration::from_secs(7));
    nodes[k].restart();
    let via = (k + 1) % 3;
    owner(&nodes, via);
    let used = crate::common::owner_addr(&nodes[via], "v").expect("the owner's address");
    let closed = ClosedPort::close(used.port());
    std::thread::sleep(Duration::from_secs(3));
    drop(closed);
    let (code, r) = result(run);
    assert_eq!((r["errors"].as_u64(), r["verify_failures"].as_u64()), (Some(0), Some(0)), "{r:#}");
    assert!(r["aborted"].is_null(), "the run ended early: {}", r["aborted"]);
    assert_eq!(code, Some(0));
    let failovers = r["failovers"].as_array().expect("failovers");
    eprintln!("strata bench failovers: {failovers:#?}");
    assert!(failovers.len() >= 2, "an owner kill and a path loss, but {} failovers", failovers.len());
    assert!(
        failovers.iter().any(|f| f["path"].as_str() != Some(&used.to_string())),
        "it never left the closed path {used}"
    );
    assert!(r["ios"].as_u64().unwrap_or(0) > 0);

    // Without: the first path loss ends the run, as it always did.
    let used = crate::common::owner_addr(&nodes[via], "v").expect("the owner's address");
    let run = bench(&used.to_string(), "20s", false);
    std::thread::sleep(Duration::from_secs(3));
    let closed = ClosedPort::close(used.port());
    let (code, r) = result(run);
    drop(closed);
    assert_eq!(code, Some(1), "{r:#}");
    assert!(r["aborted"].is_string() && r["errors"].as_u64() > Some(0), "{r:#}");
    assert_eq!(r["failovers"].as_array().map(Vec::len), Some(0));
}
