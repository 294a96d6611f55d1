//! The cluster node's reconcile loop, whole passes, in one process: each
//! node runs in its own tokio runtime (dropping it is kill -9; blocking
//! its workers is SIGSTOP) against an in-process etcd ([`FakeEtcd`]), and
//! a host checks every transition with data it remembers writing.
//!
//! One test per ownership transition: a takeover after the owner's lease
//! ends, the hand-over after the owner is drained, a frozen owner giving
//! the volume up to the node that took it over, and a deleted volume
//! released by its owner and its holders. `ownership`'s unit tests pin
//! the decisions; these pin that a pass carries them out.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use strata_host::{Controller, HostConfig, HostError};
use strata_meta::NewVolume;
use strata_meta::testing::{FakeEtcd, loopback_ports};
use strata_node::cluster::start::{NodeStart, StartedNode, cntlid_range, start};
use strata_node::cluster::{ClusterNode, SettingsPatch};
use strata_node::config::{RuntimeModel, ServeConfig};
use strata_node::pool_status::{Liveness, PoolStatus, VolumeStatus};
use strata_pool::NodeId;
use strata_pool::placement::FailureDomain;
use strata_target::AnaState;
use tokio::runtime::Runtime;

const MIB: u64 = 1 << 20;
/// Blocks of the test volumes (4 KiB each).
const BLOCK: usize = 4096;
/// How long any one transition may take: leases of 2 s, passes every
/// second, a debug build on two shared cores.
const LIMIT: Duration = Duration::from_secs(60);

/// One node in its own runtime.
struct TestNode {
    name: String,
    listen: SocketAddr,
    rt: Option<Runtime>,
    node: Option<StartedNode>,
    /// Set while the node is frozen (see [`TestNode::freeze`]).
    frozen: Arc<AtomicBool>,
}

impl TestNode {
    fn start(etcd: &FakeEtcd, name: &str, dir: &Path) -> TestNode {
        let ports = loopback_ports(3);
        let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let serve = ServeConfig {
            data_dir: dir.join(name),
            listen: vec![addr(ports[0])],
            discovery: Vec::new(),
            http: addr(ports[2]),
            allow_remote_api: false,
            http_tls: None,
            http_tls_ca: None,
            drives: vec!["mem:512M".into()],
            default_volume_size: 0,
            allow_buffered: true,
            extent_size: MIB as u32,
            runtime: RuntimeModel::Shared,
            target: strata_target::TargetConfig::default(),
        };
        let node = rt
            .block_on(start(NodeStart {
                name: name.into(),
                etcd: etcd.config(),
                prefix: "/strata/".into(),
                labels: Default::default(),
                failure_domain: FailureDomain::Node,
                failure_domain_asked: true,
                fabric: addr(ports[1]),
                lease_ttl: Duration::from_secs(2),
                relabel: false,
                serve,
                pool: SettingsPatch::default(),
            }))
            .unwrap_or_else(|e| panic!("node {name} did not start: {e:#}"));
        rt.spawn(node.cluster.clone().run());
        TestNode {
            name: name.into(),
            listen: addr(ports[0]),
            rt: Some(rt),
            node: Some(node),
            frozen: Arc::new(AtomicBool::new(false)),
        }
    }

    fn cluster(&self) -> Arc<ClusterNode> {
        self.node.as_ref().expect("the node runs").cluster.clone()
    }

    /// Runs `f` on this node's runtime.
    fn on<F: Future>(&self, f: F) -> F::Output {
        self.rt.as_ref().expect("the node runs").block_on(f)
    }

    fn status(&self) -> PoolStatus {
        let c = self.cluster();
        self.on(async move { c.status().await }).expect("pool status")
    }

    /// As kill -9: every task of the node stops at once, its sockets
    /// close, its lease is no longer renewed.
    fn kill(&mut self) {
        self.rt.take().expect("the node runs").shutdown_background();
        self.node = None;
    }

    /// As SIGSTOP: both of the runtime's workers block until
    /// [`thaw`](Self::thaw), so no task (lease keep-alive, reconcile,
    /// I/O) runs; its sockets stay open.
    fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
        let arrived = Arc::new(AtomicUsize::new(0));
        let rt = self.rt.as_ref().expect("the node runs");
        for _ in 0..2 {
            let (frozen, arrived) = (self.frozen.clone(), arrived.clone());
            // Spawned from outside the runtime: each lands in the shared
            // queue, and an idle worker takes it.
            rt.spawn(async move {
                arrived.fetch_add(1, Ordering::SeqCst);
                while frozen.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while arrived.load(Ordering::SeqCst) < 2 {
            assert!(Instant::now() < deadline, "node {} did not freeze", self.name);
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }
}

/// A cluster of `n` nodes named n0, n1, ... on one in-process etcd.
struct Cluster {
    /// Runs the fake etcd and the host.
    main: Runtime,
    _etcd: FakeEtcd,
    nodes: Vec<TestNode>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn start(n: usize) -> Cluster {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
            .with_test_writer()
            .try_init();
        let main = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let etcd = {
            let _in = main.enter();
            FakeEtcd::start()
        };
        let dir = tempfile::tempdir().unwrap();
        let nodes = (0..n).map(|i| TestNode::start(&etcd, &format!("n{i}"), dir.path())).collect();
        let c = Cluster { main, _etcd: etcd, nodes, _dir: dir };
        c.wait("every node up", |s| s.nodes.len() == n && s.nodes.iter().all(|n| n.state == Liveness::Up));
        c
    }

    /// The first node that runs.
    fn any(&self) -> &TestNode {
        self.nodes.iter().find(|n| n.node.is_some() && !n.frozen.load(Ordering::SeqCst)).expect("a running node")
    }

    fn node(&self, name: &str) -> &TestNode {
        self.nodes.iter().find(|n| n.name == name).expect("a node of that name")
    }

    /// Waits until the pool status a running node gives satisfies `ok`,
    /// and returns it.
    fn wait(&self, what: &str, ok: impl Fn(&PoolStatus) -> bool) -> PoolStatus {
        let deadline = Instant::now() + LIMIT;
        loop {
            let s = self.any().status();
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what}: not within {LIMIT:?}; the pool: {s:#?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Creates a 64 MiB volume, waits until it is served and writes
    /// round 1's pattern over it: its status, the blocks written and the
    /// host that wrote them.
    fn create_written(&self, name: &str, protection: &str) -> (VolumeStatus, Vec<u64>, Controller) {
        let c = self.any().cluster();
        let req = NewVolume::new(name, 64 * MIB);
        let p = protection.to_string();
        self.any().on(async move { c.create_volume(req, &p).await }).expect("volume create");
        let v = self.served(name, None);
        let lbas = spread(v.size_bytes);
        let host = self.connect(&v);
        write_all(&self.main, &host, &lbas, 1);
        (v, lbas, host)
    }

    /// Waits until the volume is served by an owner other than `not`
    /// and returns its status.
    fn served(&self, name: &str, not: Option<&str>) -> VolumeStatus {
        let s = self.wait(&format!("{name} served by a node other than {not:?}"), |s| {
            volume(s, name)
                .is_some_and(|v| v.address.is_some() && v.owner_name.is_some() && v.owner_name.as_deref() != not)
        });
        volume(&s, name).cloned().expect("listed")
    }

    /// Connects a host to the volume's owner, retrying while it opens.
    fn connect(&self, v: &VolumeStatus) -> Controller {
        let addr: SocketAddr = v.address.as_deref().expect("served").parse().expect("an address");
        let nqn = v.nqn.clone();
        self.main.block_on(async move {
            let deadline = tokio::time::Instant::now() + LIMIT;
            loop {
                match Controller::connect(addr, &nqn, &host()).await {
                    Ok(c) => return c,
                    Err(_) if tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(200)).await
                    }
                    Err(e) => panic!("{addr} never served {nqn}: {e}"),
                }
            }
        })
    }
}

/// Polls `done` until it holds; panics naming `what` after [`LIMIT`].
fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn volume<'a>(s: &'a PoolStatus, name: &str) -> Option<&'a VolumeStatus> {
    s.volumes.iter().find(|v| v.name == name)
}

fn host() -> HostConfig {
    HostConfig { io_timeout: Duration::from_secs(10), connect_timeout: Duration::from_secs(3), ..HostConfig::default() }
}

/// The bytes the oracle writes to block `lba` in round `round`.
fn pattern(lba: u64, round: u8) -> Bytes {
    let mut b = vec![0u8; BLOCK];
    for (i, chunk) in b.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(lba << 16 | u64::from(round) << 8 | (i as u64 & 0xff)).to_le_bytes());
    }
    Bytes::from(b)
}

/// Blocks the tests write: spread over the volume so that every chunk
/// (and so every holder) gets some.
fn spread(size: u64) -> Vec<u64> {
    let blocks = size / BLOCK as u64;
    (0..32).map(|i| i * (blocks / 32) + i % 7).collect()
}

/// Writes `round`'s pattern to `lbas` and flushes: acknowledged and
/// durable.
fn write_all(main: &Runtime, host: &Controller, lbas: &[u64], round: u8) {
    main.block_on(async {
        for &lba in lbas {
            host.write(1, lba, pattern(lba, round), false).await.unwrap_or_else(|e| panic!("write {lba}: {e}"));
        }
        host.flush(1).await.expect("flush");
    });
}

/// Reads `lbas` back and checks each against what the oracle wrote.
fn verify(main: &Runtime, host: &Controller, lbas: &[u64], round: u8) {
    main.block_on(async {
        for &lba in lbas {
            let got = host.read(1, lba, 1).await.unwrap_or_else(|e| panic!("read {lba}: {e}"));
            assert!(got == pattern(lba, round), "block {lba} does not hold round {round}'s pattern");
        }
    });
}

/// What a host's multipath compares across paths to merge them into one
/// device (Linux refuses a path whose namespace identifiers differ): the
/// subsystem's serial and model, the namespace's size, NGUID and EUI-64,
/// and its identification descriptors (UUID, command set).
async fn identity(h: &Controller) -> (String, String, u64, [u8; 16], [u8; 8], Vec<u8>) {
    use strata_nvme::command::{Sqe, admin};
    let c = h.identify_controller().await.expect("identify controller");
    let ns = h.identify_namespace(1).await.expect("identify namespace");
    let mut sqe = Sqe::new(admin::IDENTIFY, 0);
    sqe.set_nsid(1);
    sqe.set_cdw10(3);
    let (cqe, descriptors) = h.admin_command(sqe, None, 4096).await.expect("identify descriptors");
    assert!(cqe.status.is_success(), "{:?}", cqe.status);
    (c.sn, c.mn, ns.nsze, ns.nguid, ns.eui64, descriptors)
}

/// The ANA state of the volume through `node`'s port: `None` when it
/// refuses the volume (it serves neither the volume nor a path to it).
fn ana_state(main: &Runtime, node: &TestNode, nqn: &str) -> Option<AnaState> {
    let (addr, nqn) = (node.listen, nqn.to_string());
    main.block_on(async move {
        let c = Controller::connect(addr, &nqn, &host()).await.ok()?;
        let log = c.ana_log().await.expect("the ANA log");
        assert_eq!(log.groups.len(), 1, "{log:?}");
        assert_eq!(log.groups[0].nsids, vec![1], "{log:?}");
        Some(log.groups[0].state)
    })
}

/// Connects a host to `node`'s port for volume `nqn` (its path, or the
/// volume itself on the owner).
fn connect_at(main: &Runtime, node: &TestNode, nqn: &str) -> Controller {
    let (addr, nqn) = (node.listen, nqn.to_string());
    main.block_on(async move { Controller::connect(addr, &nqn, &host()).await }).expect("connect")
}

/// Whether `node` refuses a host that asks it for the volume (it does
/// not serve it).
fn refuses(main: &Runtime, node: &TestNode, nqn: &str) -> bool {
    let (addr, nqn) = (node.listen, nqn.to_string());
    main.block_on(async move {
        matches!(Controller::connect(addr, &nqn, &host()).await, Err(HostError::ConnectRejected { .. }))
    })
}

#[test]
fn a_volume_whose_owner_dies_is_taken_over_by_a_holder_with_every_acknowledged_block() {
    taken_over_after_its_owner_dies("rep:3");
}

#[test]
fn an_erasure_coded_volume_whose_owner_dies_is_taken_over_with_every_acknowledged_block() {
    taken_over_after_its_owner_dies("ec:2+1");
}

fn taken_over_after_its_owner_dies(protection: &str) {
    let mut c = Cluster::start(3);
    let (v, lbas, h) = c.create_written("v", protection);
    let before = c.main.block_on(identity(&h));
    drop(h);

    let owner = v.owner_name.clone().expect("owned");
    c.nodes.iter_mut().find(|n| n.name == owner).expect("the owner").kill();
    let after = c.served("v", Some(&owner));
    assert!(after.epoch > v.epoch, "a takeover fences with a new epoch: {} then {}", v.epoch, after.epoch);
    let h = c.connect(&after);
    assert!(c.main.block_on(identity(&h)) == before, "the new owner presents another namespace");
    let new_owner = NodeId(after.owner.expect("owned"));
    assert!(cntlid_range(new_owner).contains(&h.cntlid()), "controller {} from {new_owner:?}'s range", h.cntlid());
    verify(&c.main, &h, &lbas, 1);
    // The new owner takes writes.
    write_all(&c.main, &h, &lbas, 2);
    verify(&c.main, &h, &lbas, 2);
}

/// Every node serves the volume: the owner as the optimized path, the
/// others as non-optimized paths that forward to it, all with one
/// identity (a multipath host merges them). When the owner dies, a path
/// answers path errors only, and then forwards to the new owner.
#[test]
fn every_node_is_a_path_to_the_volume_and_follows_a_takeover() {
    let mut c = Cluster::start(3);
    let (v, lbas, owned) = c.create_written("v", "rep:3");
    let owner = v.owner_name.clone().expect("owned");
    let before = c.main.block_on(identity(&owned));
    assert_eq!(ana_state(&c.main, c.node(&owner), &v.nqn), Some(AnaState::Optimized));
    let others: Vec<String> = c.nodes.iter().map(|n| n.name.clone()).filter(|n| *n != owner).collect();
    for name in &others {
        let node = c.node(name);
        until(&format!("{name} a non-optimized path"), || {
            ana_state(&c.main, node, &v.nqn) == Some(AnaState::NonOptimized)
        });
        let h = connect_at(&c.main, node, &v.nqn);
        assert!(c.main.block_on(identity(&h)) == before, "{name}'s path presents another namespace");
        let id = node.node.as_ref().expect("runs").id;
        assert!(cntlid_range(id).contains(&h.cntlid()), "controller {} from {id:?}'s range", h.cntlid());
        verify(&c.main, &h, &lbas, 1);
    }
    // Discovery on any node lists every node's port for the volume, its
    // own first.
    let ports: std::collections::BTreeSet<SocketAddr> = c.nodes.iter().map(|n| n.listen).collect();
    for node in &c.nodes {
        let found: Vec<SocketAddr> = c.main.block_on(async {
            let entries = strata_host::discover(node.listen, &host()).await.expect("discovery");
            entries.iter().filter(|e| e.subnqn == v.nqn).filter_map(|e| e.tcp_socket_addr()).collect()
        });
        assert_eq!(found.first(), Some(&node.listen), "{}'s discovery: {found:?}", node.name);
        assert_eq!(found.iter().copied().collect::<std::collections::BTreeSet<_>>(), ports, "{}", node.name);
        assert_eq!(found.len(), ports.len(), "{}'s discovery repeats a port: {found:?}", node.name);
    }
    // Writes through a path reach the owner.
    let path = connect_at(&c.main, c.node(&others[0]), &v.nqn);
    write_all(&c.main, &path, &lbas, 2);
    verify(&c.main, &owned, &lbas, 2);
    drop(owned);

    // The owner dies: the survivors' paths answer path errors (the host
    // retries elsewhere), never a media error, until one of them owns
    // the volume and the other forwards to it. Neither closes its hosts'
    // connections: the node that takes the volume over serves it in the
    // subsystem it served as a path.
    let probes: Vec<Controller> = others.iter().map(|n| connect_at(&c.main, c.node(n), &v.nqn)).collect();
    c.nodes.iter_mut().find(|n| n.name == owner).expect("the owner").kill();
    let path_errors = c.main.block_on(async {
        let deadline = tokio::time::Instant::now() + LIMIT;
        let mut errors = 0;
        for (name, probe) in others.iter().zip(&probes) {
            loop {
                match probe.read(1, lbas[0], 1).await {
                    Ok(got) => {
                        assert!(got == pattern(lbas[0], 2), "a path read stale bytes after the takeover");
                        break;
                    }
                    Err(HostError::Status { status, .. }) => {
                        assert!(status.is_path_error(), "{name}'s path answered {status:?}, not a path error");
                        errors += 1;
                    }
                    Err(e) => panic!("{name} closed its host's connection during the takeover: {e}"),
                }
                assert!(tokio::time::Instant::now() < deadline, "{name}'s path never served again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        errors
    });
    let after = c.served("v", Some(&owner));
    let new_owner = after.owner_name.clone().expect("owned");
    eprintln!("the path answered {path_errors} path errors during the takeover by {new_owner}");
    for name in &others {
        let want = if *name == new_owner { AnaState::Optimized } else { AnaState::NonOptimized };
        until(&format!("{name} {want:?}"), || ana_state(&c.main, c.node(name), &v.nqn) == Some(want));
        let h = connect_at(&c.main, c.node(name), &v.nqn);
        verify(&c.main, &h, &lbas, 2);
    }
    for probe in &probes {
        write_all(&c.main, probe, &lbas, 3);
    }
    let h = c.connect(&after);
    verify(&c.main, &h, &lbas, 3);
}

#[test]
fn a_drained_owner_hands_its_volume_to_a_holder_once_its_copies_moved() {
    let c = Cluster::start(4);
    let (v, lbas, _) = c.create_written("v", "rep:3");

    let owner = v.owner_name.clone().expect("owned");
    let cluster = c.any().cluster();
    let name = owner.clone();
    c.any().on(async move { cluster.drain_node(&name).await }).expect("drain accepted");
    let after = c.served("v", Some(&owner));
    let drained = c.node(&owner).node.as_ref().expect("runs").id.0;
    let settled = c.wait("v placed off the drained node", |s| {
        volume(s, "v").is_some_and(|v| !v.replicas.contains(&drained) && v.moving_to.is_none())
    });
    let moved = volume(&settled, "v").expect("listed");
    assert!(!moved.in_sync.contains(&drained), "the drained node left the in-sync set once replaced: {moved:?}");
    // It serves v as a path to the new owner, not as its owner.
    until("the drained node a non-optimized path", || {
        ana_state(&c.main, c.node(&owner), &v.nqn) == Some(AnaState::NonOptimized)
    });
    let h = c.connect(&after);
    verify(&c.main, &h, &lbas, 1);
}

#[test]
fn a_frozen_owner_gives_the_volume_up_to_the_node_that_took_it_over() {
    let c = Cluster::start(3);
    let (v, lbas, old) = c.create_written("v", "rep:3");

    let owner = v.owner_name.clone().expect("owned");
    c.node(&owner).freeze();
    let after = c.served("v", Some(&owner));
    let new = c.connect(&after);
    write_all(&c.main, &new, &lbas[..16], 2);
    c.node(&owner).thaw();

    // The old owner's host writes again once it wakes: the replicas'
    // fences refuse the deposed owner, so a write it acknowledges would
    // be one the new owner never sees.
    let lba = lbas[20];
    let stale = c.main.block_on(async { old.write(1, lba, pattern(lba, 3), false).await });
    until(&format!("the deposed owner {owner} only a path to v"), || {
        ana_state(&c.main, c.node(&owner), &v.nqn) == Some(AnaState::NonOptimized)
    });
    let now = c.served("v", Some(&owner));
    assert_eq!(now.owner_name, after.owner_name, "the new owner keeps the volume");
    let new = c.connect(&now);
    verify(&c.main, &new, &lbas[..16], 2);
    let got = c.main.block_on(async { new.read(1, lba, 1).await }).expect("read");
    match stale {
        Ok(()) => assert!(got == pattern(lba, 3), "the deposed owner acknowledged a write the new owner lost"),
        Err(_) => assert!(got == pattern(lba, 1) || got == pattern(lba, 3), "block {lba} holds neither write"),
    }
    verify(&c.main, &new, &lbas[21..], 1);
}

#[test]
fn a_deleted_volume_is_released_by_its_owner_and_freed_by_its_holders() {
    let c = Cluster::start(3);
    let (v, _, _) = c.create_written("v", "rep:3");
    let (_, w_lbas, hw) = c.create_written("w", "rep:2");

    let cluster = c.any().cluster();
    c.any().on(async move { cluster.delete_volume("v").await }).expect("delete");
    let owner = c.node(v.owner_name.as_deref().expect("owned"));
    until("v neither held nor served after its delete", || {
        let freed = c.nodes.iter().all(|n| !n.node.as_ref().expect("runs").store.volume_ids().contains(&v.id));
        freed && refuses(&c.main, owner, &v.nqn)
    });
    assert!(c.any().status().volumes.iter().all(|x| x.name != "v"), "v is still listed");
    // The other volume goes on.
    verify(&c.main, &hw, &w_lbas, 1);
}

/// Runs `op` until it succeeds, through path errors only (a multipath
/// host retries those on another path, or on this one once it serves
/// again): a closed connection or any other status fails the test.
async fn through_path_errors<T, F, Fut>(what: &str, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, HostError>>,
{
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        match op().await {
            Ok(t) => return t,
            Err(HostError::Status { status, .. }) if status.is_path_error() => {}
            Err(e) => panic!("{what}: {e}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: path errors only, for {LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many volumes each node owns, by name; `None` while a volume has
/// no owner.
fn owners(s: &PoolStatus) -> Option<std::collections::BTreeMap<String, usize>> {
    let mut counts: std::collections::BTreeMap<String, usize> = s.nodes.iter().map(|n| (n.name.clone(), 0)).collect();
    for v in &s.volumes {
        *counts.entry(v.owner_name.clone()?).or_default() += 1;
    }
    Some(counts)
}

/// Ownership is spread over the nodes: six volumes end two on each of
/// three nodes, and again after an owner frozen past its lease wakes up
/// deposed (its volumes taken over by the others) and gets its share
/// back by planned hand-overs. Hosts connected to every node's port for
/// every volume write and read all along: they see path errors at most,
/// never a closed connection, another status or a wrong byte; the deposed
/// owner's hosts stay connected to it as a path.
#[test]
fn ownership_is_spread_over_the_nodes_and_again_after_a_deposed_owner_wakes() {
    let c = Cluster::start(3);
    let names = ["a", "b", "c", "d", "e", "f"];
    let mut nqns = Vec::new();
    let mut lbas = Vec::new();
    for name in names {
        let (v, l, _) = c.create_written(name, "rep:3");
        nqns.push(v.nqn);
        lbas = l;
    }
    let even = |s: &PoolStatus| owners(s).is_some_and(|o| o.values().all(|&n| n == 2));
    c.wait("two volumes owned by each node", even);
    // A host on every node's port for every volume.
    let hosts: Vec<Vec<(String, Controller)>> = nqns
        .iter()
        .map(|nqn| c.nodes.iter().map(|n| (n.name.clone(), connect_at(&c.main, n, nqn))).collect())
        .collect();
    let round_trip = |round: u8| {
        c.main.block_on(async {
            for (vi, paths) in hosts.iter().enumerate() {
                let (name, writer) = &paths[(vi + usize::from(round)) % paths.len()];
                for &lba in &lbas {
                    let what = format!("{} write {lba} through {name}", names[vi]);
                    through_path_errors(&what, || writer.write(1, lba, pattern(lba, round), false)).await;
                }
                through_path_errors(&format!("{} flush through {name}", names[vi]), || writer.flush(1)).await;
                for (name, reader) in paths {
                    for &lba in &lbas {
                        let what = format!("{} read {lba} through {name}", names[vi]);
                        let got = through_path_errors(&what, || reader.read(1, lba, 1)).await;
                        assert!(got == pattern(lba, round), "{what}: not round {round}'s pattern");
                    }
                }
            }
        })
    };
    round_trip(2);

    // n0 frozen past its lease: the others take its volumes over.
    c.node("n0").freeze();
    c.wait("n0's volumes taken over", |s| {
        owners(s).is_some_and(|o| o.get("n0") == Some(&0) && o.values().sum::<usize>() == names.len())
    });
    c.node("n0").thaw();
    // It wakes deposed and gets its share back, while every host writes
    // and reads through every node.
    let mut round = 3;
    let deadline = Instant::now() + 3 * LIMIT;
    loop {
        round_trip(round);
        let s = c.any().status();
        if even(&s) && c.nodes.iter().all(|n| n.status().volumes.iter().all(|v| v.owner_name.is_some())) {
            break;
        }
        assert!(Instant::now() < deadline, "ownership not spread again: {:?}", owners(&s));
        round = if round == u8::MAX { 3 } else { round + 1 };
    }
    round_trip(round.wrapping_add(1).max(3));
}

/// A host with identifier `[id; 16]`.
fn host_as(id: u8) -> HostConfig {
    HostConfig {
        hostnqn: format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000{id:02x}"),
        hostid: [id; 16],
        ..host()
    }
}

/// Connects host `id` to `node`'s port for volume `nqn`.
fn connect_as(main: &Runtime, node: &TestNode, nqn: &str, id: u8) -> Controller {
    let (addr, nqn) = (node.listen, nqn.to_string());
    main.block_on(async move { Controller::connect(addr, &nqn, &host_as(id)).await }).expect("connect")
}

/// A reservation command on namespace 1 through `c`: its status code,
/// and the data back.
fn reservation(main: &Runtime, c: &Controller, opcode: u8, cdw10: u32, data: Vec<u8>, read: usize) -> (u16, Vec<u8>) {
    main.block_on(async {
        let mut sqe = strata_nvme::command::Sqe::new(opcode, 0);
        sqe.set_nsid(1);
        sqe.set_cdw10(cdw10);
        sqe.set_cdw11(u32::from(opcode == strata_nvme::reservation::opcode::REPORT));
        let out = (!data.is_empty()).then(|| Bytes::from(data));
        let (cqe, back) = c.io_queue(0).unwrap().io_command(sqe, out, read).await.expect("transport");
        (cqe.status.code(), back.to_vec())
    })
}

fn keys(a: u64, b: u64) -> Vec<u8> {
    [a.to_le_bytes(), b.to_le_bytes()].concat()
}

fn report(main: &Runtime, c: &Controller) -> strata_nvme::reservation::ReservationStatus {
    let (status, data) = reservation(main, c, strata_nvme::reservation::opcode::REPORT, 1023, Vec::new(), 4096);
    assert_eq!(status, 0, "report");
    strata_nvme::reservation::ReservationStatus::decode(&data).expect("a report")
}

/// A pool volume's reservations hold whichever node a host comes
/// through: a host on a path registers and is kept out by another host's
/// Write Exclusive reservation taken at the owner (its writes through
/// the path conflict, its reads pass), and after the owner dies the node
/// that takes the volume over serves the same state from etcd, where a
/// preempt then keeps the old holder out.
#[test]
fn reservations_hold_on_every_path_and_through_a_takeover() {
    use strata_nvme::reservation::{ReservationType, opcode};
    const CONFLICT: u16 = 0x83;
    let mut c = Cluster::start(3);
    let (v, lbas, _) = c.create_written("v", "rep:3");
    let owner = v.owner_name.clone().expect("owned");
    let others: Vec<String> = c.nodes.iter().map(|n| n.name.clone()).filter(|n| *n != owner).collect();
    until("a non-optimized path", || ana_state(&c.main, c.node(&others[0]), &v.nqn) == Some(AnaState::NonOptimized));
    let a = connect_as(&c.main, c.node(&owner), &v.nqn, 0xa);
    let b = connect_as(&c.main, c.node(&others[0]), &v.nqn, 0xb);
    let (rescap, oncs) = c.main.block_on(async {
        (b.identify_namespace(1).await.unwrap().rescap, b.identify_controller().await.unwrap().oncs)
    });
    assert_eq!(rescap & 0x7e, 0x7e, "a path announces every type");
    assert_ne!(oncs & strata_nvme::identify::ONCS_RESERVATIONS, 0);

    assert_eq!(reservation(&c.main, &b, opcode::REGISTER, 0, keys(0, 0xbbbb), 0).0, 0, "register through a path");
    assert_eq!(reservation(&c.main, &a, opcode::REGISTER, 0, keys(0, 0xaaaa), 0).0, 0);
    let we = u32::from(ReservationType::WriteExclusive.code()) << 8;
    assert_eq!(reservation(&c.main, &a, opcode::ACQUIRE, we, keys(0xaaaa, 0), 0).0, 0);
    let lba = lbas[3];
    let e = c.main.block_on(b.write(1, lba, pattern(lba, 7), false)).expect_err("b wrote through its path");
    assert_eq!(e.status().map(|s| s.code()), Some(CONFLICT), "{e}");
    assert!(c.main.block_on(b.read(1, lba, 1)).expect("b reads") == pattern(lba, 1), "b's refused write landed");
    let s = report(&c.main, &b);
    let held: Vec<([u8; 16], bool)> = s.registrants.iter().map(|r| (r.hostid, r.holds)).collect();
    assert_eq!(s.rtype, Some(ReservationType::WriteExclusive));
    assert_eq!(held, vec![([0xb; 16], false), ([0xa; 16], true)], "one state, seen through the path");
    drop(a);

    // The owner dies; the next one serves the same reservations.
    c.nodes.iter_mut().find(|n| n.name == owner).expect("the owner").kill();
    let after = c.served("v", Some(&owner));
    let new_owner = after.owner_name.clone().expect("owned");
    let b_at = connect_as(&c.main, c.node(&others[0]), &v.nqn, 0xb);
    let deadline = Instant::now() + LIMIT;
    let e = loop {
        match c.main.block_on(b_at.write(1, lba, pattern(lba, 8), false)) {
            Err(e) if e.status().is_some_and(|s| s.is_path_error()) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => break e,
            Ok(()) => panic!("b wrote after the takeover by {new_owner}: the reservation was lost"),
        }
    };
    assert_eq!(e.status().map(|s| s.code()), Some(CONFLICT), "{e}");
    assert_eq!(report(&c.main, &b_at).rtype, Some(ReservationType::WriteExclusive));
    // a, on a path now, still holds it; b preempts a (and aborts what a
    // had running): b holds it, a is kept out on every node and hears of
    // it through its path.
    let path = others.iter().find(|n| **n != new_owner).expect("a path");
    let a_path = connect_as(&c.main, c.node(path), &v.nqn, 0xa);
    c.main.block_on(a_path.write(1, lba, pattern(lba, 8), false)).expect("the holder writes through a path");
    let ea = 2 | u32::from(ReservationType::ExclusiveAccess.code()) << 8;
    assert_eq!(reservation(&c.main, &b_at, opcode::ACQUIRE, ea, keys(0xbbbb, 0xaaaa), 0).0, 0, "preempt");
    let a = connect_as(&c.main, c.node(&new_owner), &v.nqn, 0xa);
    let e = c.main.block_on(a.read(1, lba, 1)).expect_err("a reads under b's Exclusive Access");
    assert_eq!(e.status().map(|s| s.code()), Some(CONFLICT), "{e}");
    let e = c.main.block_on(a_path.read(1, lba, 1)).expect_err("a reads through its path");
    assert_eq!(e.status().map(|s| s.code()), Some(CONFLICT), "{e}");
    let notice = || {
        let page =
            c.main.block_on(a_path.get_log_page(strata_nvme::reservation::NOTIFICATION_LOG_PAGE, 1, 0, 64, false));
        strata_nvme::reservation::ReservationNotice::decode(&page.expect("the notification page")).expect("a notice")
    };
    let deadline = Instant::now() + LIMIT;
    loop {
        let n = notice();
        if n.kind == strata_nvme::reservation::NoticeKind::RegistrationPreempted {
            assert_eq!(n.nsid, 1, "the NSID the host sees");
            break;
        }
        assert!(Instant::now() < deadline, "a never heard through its path that it was preempted: {n:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    c.main.block_on(b_at.write(1, lba, pattern(lba, 9), false)).expect("the new holder writes");
}
