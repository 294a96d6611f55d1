//! Helpers shared by the cluster tests: `strata node` processes, their
//! HTTP API, and waiting with the nodes' logs at hand.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use strata_testkit::Proc;

pub const BIN: &str = env!("CARGO_BIN_EXE_strata");

/// Distinct free loopback ports from outside the ephemeral range (see
/// [`strata_meta::testing::loopback_ports`]).
pub fn free_ports(n: usize) -> Vec<u16> {
    strata_meta::testing::loopback_ports(n)
}

/// Where one node listens.
#[derive(Debug, Clone)]
pub struct NodeAddrs {
    /// Internal fabric.
    pub fabric: String,
    /// Host-facing NVMe/TCP.
    pub listen: String,
    /// Discovery.
    pub discovery: String,
    /// HTTP API.
    pub http: String,
}

/// A `strata node` process: a [`Proc`] (log in a file, killed on drop,
/// its log kept under `STRATA_TEST_LOGS` when the test fails) with the
/// node's name and addresses.
pub struct NodeProc {
    pub name: String,
    proc: Proc,
    pub addrs: NodeAddrs,
    /// Its data dir (where its admin token is).
    pub dir: std::path::PathBuf,
}

impl NodeProc {
    /// Starts node `name` in failure domain `rack`, its data under `dir`
    /// (one drive file of `drive_size`, e.g. `512M`), run through `prefix`
    /// (empty, or e.g. `ip netns exec NS`).
    pub fn start(
        dir: &Path,
        name: &str,
        rack: &str,
        etcd: &str,
        drive_size: &str,
        addrs: NodeAddrs,
        prefix: &[&str],
    ) -> NodeProc {
        Self::start_with(dir, name, rack, etcd, drive_size, addrs, prefix, &[])
    }

    /// As [`NodeProc::start`], with `extra` options for `strata node`.
    #[allow(clippy::too_many_arguments)]
    pub fn start_with(
        dir: &Path,
        name: &str,
        rack: &str,
        etcd: &str,
        drive_size: &str,
        addrs: NodeAddrs,
        prefix: &[&str],
        extra: &[String],
    ) -> NodeProc {
        std::fs::create_dir_all(dir).unwrap();
        let mut argv: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
        argv.push(BIN.to_string());
        argv.extend(
            [
                "node",
                "--name",
                name,
                "--etcd",
                etcd,
                "--label",
                &format!("rack={rack}"),
                "--lease-ttl",
                "3",
                "--fabric",
                &addrs.fabric,
                "--listen",
                &addrs.listen,
                "--discovery",
                &addrs.discovery,
                "--http",
                &addrs.http,
                "--data-dir",
                &dir.display().to_string(),
                "--drive",
                &format!("{}:{drive_size}", dir.join("drive0.img").display()),
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        if !addrs.http.starts_with("127.") {
            argv.push("--allow-remote-api".into());
        }
        argv.extend(extra.iter().cloned());
        let proc = Proc::spawn(name, argv, dir.join(format!("{name}.log")));
        NodeProc { name: name.to_string(), proc, addrs, dir: dir.to_path_buf() }
    }

    /// SIGKILL, and reap.
    pub fn kill9(&mut self) {
        self.proc.kill9();
    }

    /// Sends `signal` (e.g. `-STOP`, `-CONT`) to the process.
    pub fn signal(&self, signal: &str) {
        assert!(self.proc.signal(signal), "kill {signal} {} failed", self.name);
    }

    /// Waits up to `limit` for the process to exit on its own; its exit
    /// status, or `None` if it still runs.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        self.proc.wait_exit(limit)
    }

    /// Starts the node again with the same arguments (after a kill).
    pub fn restart(&mut self) {
        self.proc.restart().expect("restart strata node");
    }

    /// Its whole log.
    pub fn log_text(&self) -> String {
        self.proc.log_text()
    }

    /// The last 30 lines of its log.
    pub fn log_tail(&self) -> String {
        self.proc.log_tail(30)
    }

    /// The lines of its log that say what the pool did (warnings,
    /// errors, takeovers, repairs, resyncs, moves, undo logs), the last
    /// 150: for a failure found long after its cause.
    pub fn log_notable(&self) -> String {
        const MARKS: [&str; 9] =
            ["WARN", "ERROR", "took the volume", "repair", "resync", "mov", "roll", "undo", "in-sync"];
        let s = self.proc.log_text();
        let lines: Vec<&str> = s.lines().filter(|l| MARKS.iter().any(|m| l.contains(m))).collect();
        format!("== {} ==\n{}", self.name, lines[lines.len().saturating_sub(150)..].join("\n"))
    }

    /// Its admin token (empty before its first start wrote it).
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.dir.join("api-token")).unwrap_or_default().trim().to_string()
    }

    /// Its `/metrics` text (empty when it does not answer).
    pub fn metrics(&self) -> String {
        Command::new("curl")
            .args(["-s", "-m", "5", &format!("http://{}/metrics", self.addrs.http)])
            .args(["-H", &format!("Authorization: Bearer {}", self.token())])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// A blocking call to its HTTP API; `None` when it does not answer
    /// with JSON.
    pub fn api(&self, method: &str, path: &str, body: Option<Value>) -> Option<Value> {
        let out = Command::new("curl")
            .args(["-s", "-m", "5", "-X", method, &format!("http://{}{path}", self.addrs.http)])
            .args(["-H", &format!("Authorization: Bearer {}", self.token())])
            .args(
                body.map(|b| {
                    vec!["-H".to_string(), "content-type: application/json".into(), "-d".into(), b.to_string()]
                })
                .unwrap_or_default(),
            )
            .output()
            .ok()?;
        serde_json::from_slice(&out.stdout).ok()
    }
}

/// Polls `f` every 100 ms until it gives a value; panics after `limit`
/// with the nodes' logs.
pub fn wait_for<T>(what: &str, limit: Duration, nodes: &[NodeProc], f: impl FnMut() -> Option<T>) -> T {
    let procs: Vec<&Proc> = nodes.iter().map(|n| &n.proc).collect();
    strata_testkit::wait_for(what, limit, &procs, f)
}

/// Volume `name` as the pool status of `via` shows it.
pub fn volume_status(via: &NodeProc, name: &str) -> Option<Value> {
    let s = via.api("GET", "/api/v1/pool", None)?;
    s["volumes"].as_array()?.iter().find(|v| v["name"] == name).cloned()
}

/// How many nodes the pool status of `via` shows up.
pub fn nodes_up(via: &NodeProc) -> Option<usize> {
    let s = via.api("GET", "/api/v1/pool", None)?;
    Some(s["nodes"].as_array()?.iter().filter(|n| n["state"] == "up").count())
}

/// The id of node `name` in the pool status of `via`.
pub fn node_id_of(via: &NodeProc, name: &str) -> Option<u64> {
    let s = via.api("GET", "/api/v1/pool", None)?;
    s["nodes"].as_array()?.iter().find(|n| n["name"] == name)?["id"].as_u64()
}

/// The name of node `id` in the pool status of `via`.
pub fn node_name(via: &NodeProc, id: u64) -> Option<String> {
    let s = via.api("GET", "/api/v1/pool", None)?;
    Some(s["nodes"].as_array()?.iter().find(|n| n["id"] == id)?["name"].as_str()?.to_string())
}

/// Where the owner of volume `name` serves it, from the pool status of
/// `via`; `None` while it has no owner that is up.
pub fn owner_addr(via: &NodeProc, name: &str) -> Option<std::net::SocketAddr> {
    let owner = volume_status(via, name)?["owner"].as_u64()?;
    let s = via.api("GET", "/api/v1/pool", None)?;
    s["nodes"].as_array()?.iter().find(|n| n["id"] == owner)?["listen"].as_str()?.parse().ok()
}

/// Node addresses on loopback from four ports: API, fabric, I/O, discovery.
pub fn loopback(ports: &[u16]) -> NodeAddrs {
    let a = |i: usize| format!("127.0.0.1:{}", ports[i]);
    NodeAddrs { http: a(0), fabric: a(1), listen: a(2), discovery: a(3) }
}

/// Node `n{i}` (i from 1) in rack `r{i}` on loopback, its data under
/// `root/n{i}`, one drive of `drive_size`, on the i-th four of `ports`.
#[allow(dead_code)] // not every test binary uses every helper
pub fn loopback_node(root: &Path, i: usize, etcd: &str, drive_size: &str, ports: &[u16]) -> NodeProc {
    loopback_node_with(root, i, etcd, drive_size, ports, &[])
}

/// As [`loopback_node`], with more arguments for `strata node`.
pub fn loopback_node_with(
    root: &Path,
    i: usize,
    etcd: &str,
    drive_size: &str,
    ports: &[u16],
    extra: &[&str],
) -> NodeProc {
    let dir = root.join(format!("n{i}"));
    let addrs = loopback(&ports[(i - 1) * 4..i * 4]);
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    NodeProc::start_with(&dir, &format!("n{i}"), &format!("r{i}"), etcd, drive_size, addrs, &[], &extra)
}

/// 4 KiB of pseudo-random bytes, named by `seed`.
pub fn pattern(seed: u64) -> Vec<u8> {
    pattern_len(seed, 4096)
}

/// `len` (a multiple of 8) pseudo-random bytes, named by `seed`.
pub fn pattern_len(seed: u64, len: usize) -> Vec<u8> {
    strata_rand::Rng::new(seed).bytes(len)
}

/// The host side of the cluster tests.
pub fn host() -> strata_host::HostConfig {
    strata_host::HostConfig {
        io_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(3),
        ..strata_host::HostConfig::default()
    }
}

/// Connects to an owner, retrying while it is not serving yet: an owner
/// serves once it has fenced the replicas and repaired the dirty regions,
/// and hosts retry until then.
pub async fn connect_when_served(addr: std::net::SocketAddr, nqn: &str) -> strata_host::Controller {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        match strata_host::Controller::connect(addr, nqn, &host()).await {
            Ok(c) => return c,
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => panic!("{addr} never served {nqn}: {e}"),
        }
    }
}
