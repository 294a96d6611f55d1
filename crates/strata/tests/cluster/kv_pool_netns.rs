//! The KV store's pool tier on a pool volume of a real cluster: three
//! `strata node` processes and two `strata kv serve` processes (GPU hosts),
//! each in its own network namespace on a bridge, with a private etcd.
//! The two KV servers share one `rep:2` volume (`--pool-region 0/2` and
//! `1/2`), list every node in `--pool`, and are driven from the test's
//! namespace through the Redis protocol, the whole time that
//!
//! 1. the volume's owner is killed with kill -9 and another node takes
//!    the volume over;
//! 2. the new owner freezes (SIGSTOP) for longer than its lease, a third
//!    owner takes over, and the frozen one wakes up.
//!
//! Each time, puts go on without waiting out the takeover, the pool
//! tiers find the new owner through discovery and resume, blocks written
//! after it are seen by the other server, and every value read anywhere
//! is the one written for its key or a miss. Blocks flushed before the
//! faults survive them, and a kill -9 of a KV server finds its blocks on
//! the volume again.
//!
//! Needs root (CAP_NET_ADMIN), iproute2 and etcd, as in CI (`.ci/run`
//! installs them and runs as root); it fails, saying so, without them.

use std::time::{Duration, Instant};

use strata_kv::client::Client;
use strata_kv::resp::Reply;
use strata_meta::testing::EtcdProcess;
use strata_testkit::Proc;

use crate::common::{NodeProc, nodes_up, volume_status, wait_for};
use crate::netns::{Net, create_healthy, owner_index, start_node, watch_states};

const BIN: &str = env!("CARGO_BIN_EXE_strata");
const NODES: usize = 3;
const VOLUME: &str = "kvpool";
const BLOCK: usize = 64 << 10;

/// The value written for `key`: any reader can check it.
fn value_of(key: &str) -> Vec<u8> {
    let seed = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    crate::common::pattern_len(seed, BLOCK)
}

/// `strata kv serve` in a namespace of its own; killed when dropped.
struct KvProc {
    proc: Proc,
    addr: std::net::SocketAddr,
}

/// The KV servers' password (they listen off loopback).
const PASSWORD: &str = "kv-pool-test";

/// A client of `addr`, authenticated.
async fn connect(addr: std::net::SocketAddr) -> Client {
    let mut c = Client::connect(addr).await.unwrap();
    c.auth(None, PASSWORD.as_bytes()).await.unwrap();
    c
}

impl KvProc {
    fn start(net: &Net, at: usize, region: usize, pool: &str, dir: &std::path::Path) -> KvProc {
        std::fs::create_dir_all(dir).unwrap();
        let addr: std::net::SocketAddr = format!("{}:6380", net.addr(at)).parse().unwrap();
        // Off loopback the port needs a password.
        let pass = dir.join("kv.pass");
        std::fs::write(&pass, format!("{PASSWORD}\n")).unwrap();
        std::fs::set_permissions(&pass, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let pass = pass.display().to_string();
        let argv = [
            "ip",
            "netns",
            "exec",
            &net.ns(at),
            BIN,
            "kv",
            "serve",
            "--listen",
            &addr.to_string(),
            "--dram",
            "4M",
            "--ssd",
            "none",
            "--admit",
            "all",
            "--pool",
            pool,
            "--pool-region",
            &format!("{region}/2"),
            "--pool-timeout",
            "3s",
            "--requirepass-file",
            &pass,
        ];
        let name = format!("kv{region}");
        let mut kv = KvProc { proc: Proc::spawn(&name, argv, dir.join(format!("{name}.log"))), addr };
        kv.wait_listening();
        kv
    }

    fn wait_listening(&mut self) {
        if let Err(e) = self.proc.wait_listening(&[self.addr], Duration::from_secs(60)) {
            panic!("strata kv serve: {e}");
        }
    }

    fn restart(&mut self) {
        self.proc.restart().expect("restart strata kv serve");
        self.wait_listening();
    }

    fn log_tail(&self) -> String {
        self.proc.log_tail(30)
    }
}

/// Puts `{prefix}{i}` for each `i` of `r`; returns the slowest put.
async fn put(c: &mut Client, prefix: &str, r: std::ops::Range<u32>) -> Duration {
    let mut slowest = Duration::ZERO;
    for i in r {
        let key = format!("{prefix}{i}");
        let t0 = Instant::now();
        c.set(key.as_bytes(), &value_of(&key)).await.unwrap_or_else(|e| panic!("SET {key}: {e}"));
        slowest = slowest.max(t0.elapsed());
    }
    slowest
}

/// Reads `{prefix}{i}` for each `i` of `r`: each is right or a miss.
/// Returns how many were there.
async fn check(c: &mut Client, prefix: &str, r: std::ops::Range<u32>) -> usize {
    let mut n = 0;
    for i in r {
        let key = format!("{prefix}{i}");
        if let Some(v) = c.get(key.as_bytes()).await.unwrap_or_else(|e| panic!("GET {key}: {e}")) {
            assert!(v[..] == value_of(&key)[..], "{key} came back with bytes written for something else");
            n += 1;
        }
    }
    n
}

fn keys(prefix: &str, r: std::ops::Range<u32>) -> Vec<String> {
    r.map(|i| format!("{prefix}{i}")).collect()
}

/// Flushes every DRAM block to the pool, retrying while the pool tier is
/// paused; panics with the logs after `limit`.
async fn flush_all(c: &mut Client, limit: Duration, logs: &dyn Fn() -> String) {
    let deadline = Instant::now() + limit;
    loop {
        match c.call(&["KV.FLUSH", "ALL"]).await.unwrap() {
            Reply::Simple(s) if s == "OK" => return,
            other => {
                let st = c.stats().await.unwrap();
                assert!(Instant::now() < deadline, "the pool tier never resumed: {other:?} {st:?}\n{}", logs());
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until `c` finds every key of `chain` (blocks `writer` wrote).
async fn sees(c: &mut Client, writer: &mut Client, chain: &[String], limit: Duration, logs: &dyn Fn() -> String) {
    let deadline = Instant::now() + limit;
    loop {
        let n = c.lookup(chain).await.unwrap();
        if n == chain.len() {
            return;
        }
        let st = c.stats().await.unwrap();
        let ws = writer.stats().await.unwrap();
        let why = format!("saw {n} of {} peer blocks: {st:?}\nthe writer: {ws:?}\n{}", chain.len(), logs());
        assert!(Instant::now() < deadline, "{why}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The tails of every process's log.
fn all_logs(nodes: &[NodeProc], kvs: [&KvProc; 2]) -> String {
    let mut all: Vec<String> = nodes.iter().map(NodeProc::log_tail).collect();
    all.extend(kvs.iter().map(|k| k.log_tail()));
    all.join("\n")
}

#[test]
fn two_kv_servers_share_a_rep2_pool_volume_through_owner_failures() {
    let _group = strata_testkit::group(module_path!());
    let net = Net::new(NODES + 2);
    let etcd = EtcdProcess::start_also_on(net.gateway());
    let tmp = tempfile::tempdir().unwrap();
    let etcd_url = etcd.url_on(net.gateway());
    let mut nodes: Vec<NodeProc> = (0..NODES).map(|i| start_node(&net, &etcd_url, tmp.path(), i)).collect();
    wait_for("three nodes up", Duration::from_secs(30), &nodes, || (nodes_up(&nodes[0])? == NODES).then_some(()));
    let nqn = create_healthy(&nodes, VOLUME, "256M", "rep:2");
    let seeds: Vec<String> = (0..NODES).map(|i| format!("{}:4420", net.addr(i))).collect();
    let pool = format!("tcp://{}/{nqn}", seeds.join(","));
    let mut a = KvProc::start(&net, NODES, 0, &pool, &tmp.path().join("kv-a"));
    let b = KvProc::start(&net, NODES + 1, 1, &pool, &tmp.path().join("kv-b"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let limit = Duration::from_secs(60);

    // Before any fault: each server's blocks reach the volume and the
    // other server sees and reads them.
    let logs = || all_logs(&nodes, [&a, &b]);
    rt.block_on(async {
        let (mut ca, mut cb) = (connect(a.addr).await, connect(b.addr).await);
        put(&mut ca, "a", 0..150).await;
        put(&mut cb, "b", 0..150).await;
        flush_all(&mut ca, limit, &logs).await;
        flush_all(&mut cb, limit, &logs).await;
        sees(&mut ca, &mut cb, &keys("b", 0..150), Duration::from_secs(30), &logs).await;
        sees(&mut cb, &mut ca, &keys("a", 0..150), Duration::from_secs(30), &logs).await;
        assert_eq!(check(&mut ca, "b", 0..150).await, 150);
        assert_eq!(check(&mut cb, "a", 0..150).await, 150);
    });

    let mut round = 0u32;
    for fault in ["kill -9", "SIGSTOP"] {
        let owner = owner_index(VOLUME, &nodes, 0);
        let watcher = (0..NODES).find(|&i| i != owner).unwrap();
        let old_owner = volume_status(&nodes[watcher], VOLUME).unwrap()["owner"].clone();
        match fault {
            "kill -9" => nodes[owner].kill9(),
            _ => nodes[owner].signal("-STOP"),
        }
        round += 1;
        let (lo, hi) = (round * 1000, round * 1000 + 60);
        rt.block_on(async {
            // Puts go on while the owner is gone: none waits out the
            // takeover (the pool is skipped once it stalls).
            let (mut ca, mut cb) = (connect(a.addr).await, connect(b.addr).await);
            let slowest = put(&mut ca, "a", lo..lo + 30).await.max(put(&mut cb, "b", lo..lo + 30).await);
            assert!(slowest < Duration::from_secs(8), "a put waited {slowest:?} during the {fault} of the owner");
        });
        watch_states(VOLUME, "a new owner", &nodes, watcher, Duration::from_secs(60), |v| {
            v["owner"].is_u64() && v["owner"] != old_owner
        });
        if fault == "SIGSTOP" {
            nodes[owner].signal("-CONT");
        }
        let logs = || all_logs(&nodes, [&a, &b]);
        rt.block_on(async {
            // The pool tiers find the new owner and resume; what each
            // server writes now, the other sees.
            let (mut ca, mut cb) = (connect(a.addr).await, connect(b.addr).await);
            flush_all(&mut ca, limit, &logs).await;
            flush_all(&mut cb, limit, &logs).await;
            put(&mut ca, "a", lo + 30..hi).await;
            put(&mut cb, "b", lo + 30..hi).await;
            flush_all(&mut ca, limit, &logs).await;
            flush_all(&mut cb, limit, &logs).await;
            sees(&mut ca, &mut cb, &keys("b", lo + 30..hi), Duration::from_secs(30), &logs).await;
            sees(&mut cb, &mut ca, &keys("a", lo + 30..hi), Duration::from_secs(30), &logs).await;
            assert_eq!(check(&mut ca, "b", lo + 30..hi).await, 30);
            assert_eq!(check(&mut cb, "a", lo + 30..hi).await, 30);
            // Blocks put during the fault are right or misses; blocks
            // flushed before any fault are all there, on both servers.
            check(&mut ca, "a", lo..lo + 30).await;
            check(&mut cb, "b", lo..lo + 30).await;
            assert_eq!(check(&mut ca, "a", 0..150).await, 150, "{}", logs());
            assert_eq!(check(&mut cb, "a", 0..150).await, 150, "{}", logs());
            let st = ca.stats().await.unwrap();
            assert!(st.iter().any(|(k, v)| k == "corrupt" && *v == 0), "{st:?}");
        });
        if fault == "kill -9" {
            nodes[owner].restart();
        }
        // rep:2 bears one fault at a time: the next waits for a healthy
        // volume (the returned node resynced).
        watch_states(VOLUME, "healthy again", &nodes, watcher, Duration::from_secs(90), |v| v["state"] == "healthy");
    }
    let text = a.proc.log_text();
    let moved = text.matches("remote namespace reconnected").count();
    assert!(moved >= 2, "A's pool tier moved {moved} times for two owner faults:\n{}", a.log_tail());

    // A kill -9 of a KV server: its log on the volume brings its flushed
    // blocks back, wherever the owner is now.
    a.restart();
    rt.block_on(async {
        let mut ca = connect(a.addr).await;
        assert_eq!(check(&mut ca, "a", 0..150).await, 150, "{}", a.log_tail());
        for r in 1..=round {
            assert_eq!(check(&mut ca, "a", r * 1000 + 30..r * 1000 + 60).await, 30, "{}", a.log_tail());
        }
    });
    drop((a, b));
}
