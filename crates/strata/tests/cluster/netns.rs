//! Network namespaces for multi-node tests: a bridge, one namespace per
//! node with its own address, links to cut; and the helpers the tests
//! that use them share.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use strata_chaos::ctx::{Ctx, VolumeRef};
use strata_chaos::host::{self, HostPlan};
use strata_chaos::report::Report;
use strata_rand::Rng;

use crate::common::{NodeAddrs, NodeProc, volume_status, wait_for};

/// Runs `ip ARGS...`, panicking with its stderr on failure.
fn ip(args: &[&str]) {
    let out =
        Command::new("ip").args(args).output().unwrap_or_else(|e| panic!("cannot run ip(8): {e}; install iproute2"));
    assert!(
        out.status.success(),
        "ip {} failed: {}(this test needs root, or CAP_NET_ADMIN, to build network namespaces)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A bridge in the test's namespace and one namespace per node, each with
/// a veth on the bridge and its own address. Torn down on drop.
pub struct Net {
    tag: String,
    subnet: [u8; 3],
    nodes: usize,
}

impl Net {
    pub fn new(nodes: usize) -> Net {
        let pid = std::process::id();
        let net =
            Net { tag: format!("{:x}", pid & 0xf_ffff), subnet: [10, 100 + (pid >> 8) as u8 % 100, pid as u8], nodes };
        net.teardown(); // leftovers of an earlier run with this pid
        let br = net.bridge();
        ip(&["link", "add", &br, "type", "bridge"]);
        ip(&["addr", "add", &format!("{}/24", net.gateway()), "dev", &br]);
        ip(&["link", "set", &br, "up"]);
        for i in 0..nodes {
            let (ns, veth) = (net.ns(i), net.veth(i));
            ip(&["netns", "add", &ns]);
            ip(&["link", "add", &veth, "type", "veth", "peer", "name", &format!("{veth}p")]);
            ip(&["link", "set", &format!("{veth}p"), "netns", &ns]);
            ip(&["-n", &ns, "link", "set", &format!("{veth}p"), "name", "eth0"]);
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", net.addr(i)), "dev", "eth0"]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            ip(&["link", "set", &veth, "master", &br]);
            ip(&["link", "set", &veth, "up"]);
        }
        net
    }

    fn bridge(&self) -> String {
        format!("sb{}", self.tag)
    }
    pub fn ns(&self, i: usize) -> String {
        format!("st{}n{i}", self.tag)
    }
    fn veth(&self, i: usize) -> String {
        format!("sv{}n{i}", self.tag)
    }
    pub fn gateway(&self) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 1)
    }
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 10 + i as u8)
    }

    /// Node `i`'s link goes down (`up == false`) or comes back.
    pub fn link(&self, i: usize, up: bool) {
        ip(&["-n", &self.ns(i), "link", "set", "eth0", if up { "up" } else { "down" }]);
    }

    fn teardown(&self) {
        for i in 0..self.nodes {
            let _ = Command::new("ip").args(["netns", "del", &self.ns(i)]).output();
        }
        let _ = Command::new("ip").args(["link", "del", &self.bridge()]).output();
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Starts `strata node` `n{i}` (rack `r{i}`, a 1 GiB drive under
/// `root/n{i}`) in namespace `i` of `net`, on the etcd at `etcd`.
pub fn start_node(net: &Net, etcd: &str, root: &std::path::Path, i: usize) -> NodeProc {
    let ns = net.ns(i);
    let dir = root.join(format!("n{i}"));
    let prefix = ["ip", "netns", "exec", ns.as_str()];
    NodeProc::start(&dir, &format!("n{i}"), &format!("r{i}"), etcd, "1G", addrs(net.addr(i)), &prefix)
}

pub fn addrs(ip: Ipv4Addr) -> NodeAddrs {
    NodeAddrs {
        fabric: format!("{ip}:4430"),
        listen: format!("{ip}:4420"),
        discovery: format!("{ip}:8009"),
        http: format!("{ip}:7420"),
    }
}

/// The volume's state names seen from `via` until `until` returns true
/// of the status, or `limit` passes (then panics with the logs).
pub fn watch_states(
    volume: &str,
    what: &str,
    nodes: &[NodeProc],
    via: usize,
    limit: Duration,
    mut until: impl FnMut(&serde_json::Value) -> bool,
) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    wait_for(what, limit, nodes, || {
        let v = volume_status(&nodes[via], volume)?;
        let state = v["state"].as_str()?.to_string();
        if seen.last() != Some(&state) {
            seen.push(state);
        }
        until(&v).then_some(())
    });
    seen
}

/// A node of the volume's replicas other than its owner, and not `not`.
pub fn replica_not_owner(volume: &str, nodes: &[NodeProc], via: usize, not: Option<usize>) -> usize {
    let v = volume_status(&nodes[via], volume).expect("status");
    let owner = v["owner"].as_u64().expect("an owner");
    let replicas: Vec<u64> = v["replicas"].as_array().unwrap().iter().filter_map(|r| r.as_u64()).collect();
    let index = |id: u64| {
        let name = crate::common::node_name(&nodes[via], id).expect("node name");
        nodes.iter().position(|n| n.name == name).expect("a node of ours")
    };
    replicas
        .into_iter()
        .filter(|&r| r != owner)
        .map(index)
        .find(|&i| Some(i) != not)
        .expect("a replica other than the owner")
}

pub fn owner_index(volume: &str, nodes: &[NodeProc], via: usize) -> usize {
    let v = volume_status(&nodes[via], volume).expect("status");
    let name = crate::common::node_name(&nodes[via], v["owner"].as_u64().expect("an owner")).expect("name");
    nodes.iter().position(|n| n.name == name).unwrap()
}

pub fn written(ctx: &Ctx) -> u64 {
    ctx.snapshot().bytes_written
}

/// Lets the load run for `d` and checks it wrote meanwhile.
pub fn load_runs(ctx: &Ctx, d: Duration, during: &str) {
    let before = written(ctx);
    std::thread::sleep(d);
    assert!(written(ctx) > before, "the hosts wrote nothing {during}\n{}", ctx.snapshot().summary());
}

/// The chaos suite's verified hosts on one volume: two hosts of four
/// workers, each on half of its blocks, finding its owner through the
/// discovery of every node's namespace.
pub struct Load {
    pub ctx: Arc<Ctx>,
    vol: VolumeRef,
    rt: tokio::runtime::Runtime,
    stop: tokio::sync::watch::Sender<bool>,
    hosts: Vec<tokio::task::JoinHandle<()>>,
    /// The hosts' names.
    names: Vec<String>,
    rng: Rng,
}

impl Load {
    /// Starts the hosts on volume `name` (`nqn`, `blocks` blocks) of the
    /// nodes in `net`'s `nodes` namespaces.
    pub fn start(net: &Net, nodes: usize, name: &str, nqn: String, blocks: u64, seed: u64) -> Load {
        let discovery: Vec<SocketAddr> = (0..nodes).map(|i| SocketAddr::from((net.addr(i), 8009))).collect();
        let ctx = Arc::new(
            Ctx::new(discovery[0], Duration::from_secs(40), Duration::from_secs(40), Report::default())
                .with_discovery(discovery),
        );
        let vol = VolumeRef { id: 1, name: name.into(), nqn };
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let mut rng = Rng::new(seed);
        let names: Vec<String> = (0..2).map(|h| format!("host{h}")).collect();
        let hosts = (0..2u64)
            .map(|h| {
                let plan = HostPlan {
                    name: names[h as usize].clone(),
                    scenario: "cluster",
                    volume: vol.clone(),
                    range: h * blocks / 2..(h + 1) * blocks / 2,
                    workers: 4,
                    expect_errors: Arc::new(AtomicBool::new(false)),
                };
                rt.spawn(host::run(ctx.clone(), plan, rng.fork(), stop_rx.clone()))
            })
            .collect();
        Load { ctx, vol, rt, stop, hosts, names, rng }
    }

    /// Waits until the hosts write again (after a takeover), and every
    /// host completed an operation since: none is left with commands on
    /// a connection the fault broke, which would fail later.
    pub fn writing_again(&self, nodes: &[NodeProc]) {
        let before = self.ctx.host_ops();
        wait_for("the hosts writing again", Duration::from_secs(90), nodes, || {
            let written_before = written(&self.ctx);
            std::thread::sleep(Duration::from_millis(500));
            let now = self.ctx.host_ops();
            let every = self.names.iter().all(|h| now.get(h) > before.get(h));
            (written(&self.ctx) > written_before && every).then_some(())
        });
    }

    /// Stops the hosts, reads every block back, and asserts that nothing
    /// was lost, flipped or hung (with the nodes' logs if so).
    pub fn finish(self, nodes: &[NodeProc]) {
        let report = self.verify();
        let summary = report.summary();
        eprintln!("{summary}");
        let logs: Vec<String> = nodes.iter().map(NodeProc::log_tail).collect();
        assert!(report.bytes_verified > 0, "nothing was verified\n{summary}");
        assert!(report.is_clean(), "the cluster lost, flipped or hung something:\n{summary}\n{}", logs.join("\n"));
    }

    /// Stops the hosts, reads every block back, and returns the report.
    pub fn verify(mut self) -> Report {
        let _ = self.stop.send(true);
        let (ctx, vol, rng) = (&self.ctx, &self.vol, &mut self.rng);
        let hosts = std::mem::take(&mut self.hosts);
        self.rt.block_on(async {
            for h in hosts {
                tokio::time::timeout(Duration::from_secs(60), h).await.expect("a host did not stop").unwrap();
            }
            host::verify_volume(ctx, vol, None, &|_| "cluster", rng).await;
        });
        self.ctx.snapshot()
    }
}

/// The ids of a volume status's holders (`replicas`).
pub fn holders(v: &serde_json::Value) -> Vec<u64> {
    v["replicas"].as_array().map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect()).unwrap_or_default()
}

/// Changes the pool's settings through `via`, asserting they were taken.
pub fn settings(via: &NodeProc, patch: serde_json::Value) {
    let s = via.api("PATCH", "/api/v1/pool/settings", Some(patch.clone())).expect("settings answered");
    assert!(s.get("error").is_none(), "settings {patch} refused: {s}");
}

/// Volume `volume` healthy (served, every holder up and in sync) on the
/// current map with no move recorded, as seen by `via`: its status. The
/// owner need not be a holder: a move that takes every copy or shard off
/// a node that stays up leaves it serving the volume (a hand-over would
/// close its hosts' connections), which a seventh node's join does when
/// it takes the owner's place.
pub fn settled(via: &NodeProc, volume: &str) -> Option<serde_json::Value> {
    let s = via.api("GET", "/api/v1/pool", None)?;
    let v = s["volumes"].as_array()?.iter().find(|v| v["name"] == volume)?.clone();
    v["owner"].as_u64()?;
    (v["state"] == "healthy" && v["map_epoch"] == s["map_epoch"] && v["moving_to"].is_null()).then_some(v)
}

/// Runs `strata volume check` of `volume` through `nodes[via]` (which
/// passes it to the owner) to its end; asserts that every byte of its
/// `size` was compared and nothing differs; returns the report.
pub fn check_clean(nodes: &[NodeProc], via: usize, volume: &str, size: u64) -> serde_json::Value {
    let path = format!("/api/v1/volumes/{volume}/check");
    let started = nodes[via].api("POST", &path, Some(serde_json::json!({"repair": false}))).expect("answered");
    assert_eq!(started["state"], "running", "{started}");
    let done = wait_for("the check to end", Duration::from_secs(180), nodes, || {
        let v = nodes[via].api("GET", &path, None)?;
        (v["state"] != "running").then_some(v)
    });
    assert_eq!(done["state"], "done", "{done}");
    let r = done["report"].clone();
    if r["differences"] != 0 {
        // What each node did matters more than the report: say it all.
        let logs: Vec<String> = nodes.iter().map(NodeProc::log_notable).collect();
        panic!("the copies or shards of {volume} disagree: {done}\nnode logs:\n{}", logs.join("\n"));
    }
    assert_eq!(r["bytes_unchecked"], 0, "{done}");
    assert_eq!(r["bytes_checked"], size, "{done}");
    r
}

/// Creates volume `name` of `size` with `protect` through `nodes[0]` and
/// waits until it is healthy with an owner; returns its NQN.
pub fn create_healthy(nodes: &[NodeProc], name: &str, size: &str, protect: &str) -> String {
    let created = nodes[0].api(
        "POST",
        "/api/v1/volumes",
        Some(serde_json::json!({"name": name, "size": size, "protect": protect, "allow_any_host": true})),
    );
    let created = created.expect("create answered");
    assert_eq!(created["protection"], protect, "{created}");
    let nqn = created["nqn"].as_str().unwrap().to_string();
    wait_for("the volume healthy, with an owner", Duration::from_secs(30), nodes, || {
        let v = volume_status(&nodes[1], name)?;
        (v["state"] == "healthy" && v["owner"].is_u64()).then_some(())
    });
    nqn
}
