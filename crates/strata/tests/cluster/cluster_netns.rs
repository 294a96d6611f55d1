//! A pool of four `strata node` processes, each in its own network
//! namespace with its own address on a bridge, and a private etcd, under
//! verified load: hosts (the chaos suite's, judged by its durability
//! oracle) write, read, flush and deallocate on a `rep:3` volume, finding
//! its owner through discovery, the whole time that
//!
//! 1. a replica node is killed with kill -9, and comes back;
//! 2. a replica node's link is cut (`ip link set down` in its namespace),
//!    long enough for its lease to end, and comes back;
//! 3. the owner is killed with kill -9, another node takes over, and the
//!    killed node comes back;
//! 4. the owner freezes (SIGSTOP) for longer than its lease, another node
//!    takes over, and the old owner wakes up (SIGCONT) with writes in
//!    flight: the fence refuses them.
//!
//! Every acknowledged-and-flushed write reads back, no block read ever
//! flips between values after a failover, nothing hangs, and
//! `strata pool status` shows degraded, then resyncing, then healthy.
//!
//! Needs root (CAP_NET_ADMIN) and iproute2, as in CI (`.ci/run` runs as
//! root); it fails, saying so, without them.

use std::time::{Duration, Instant};

use strata_meta::testing::EtcdProcess;

use crate::common::{NodeProc, nodes_up, volume_status, wait_for};
use crate::netns::{Load, Net, create_healthy, load_runs, owner_index, replica_not_owner, start_node, watch_states};

const NODES: usize = 4;
const SEED: u64 = 20261201;
const VOLUME: &str = "v1";
/// Blocks the hosts write: the whole 512 MiB volume, every chunk. Each
/// node has a 1 GiB drive: a node may hold a copy of every chunk.
const BLOCKS: u64 = 512 << 20 >> 12;

#[test]
fn a_rep3_volume_under_verified_load_survives_kills_a_cut_link_and_a_takeover_in_network_namespaces() {
    let _group = strata_testkit::group(module_path!());
    let net = Net::new(NODES);
    let etcd = EtcdProcess::start_also_on(net.gateway());
    let tmp = tempfile::tempdir().unwrap();
    let etcd_url = etcd.url_on(net.gateway());
    let mut nodes: Vec<NodeProc> = (0..NODES).map(|i| start_node(&net, &etcd_url, tmp.path(), i)).collect();
    wait_for("four nodes up", Duration::from_secs(30), &nodes, || (nodes_up(&nodes[0])? == NODES).then_some(()));
    let nqn = create_healthy(&nodes, VOLUME, "512M", "rep:3");

    // Verified hosts, finding the owner through any node's discovery.
    let load = Load::start(&net, NODES, VOLUME, nqn, BLOCKS, SEED);
    let ctx = load.ctx.clone();
    load_runs(&ctx, Duration::from_secs(3), "before any fault");
    let mut resyncing_seen = 0;

    // 1. kill -9 of a replica node: the owner drops it, I/O goes on.
    let victim = replica_not_owner(VOLUME, &nodes, 0, None);
    let watcher = (0..NODES).find(|&i| i != victim).unwrap();
    nodes[victim].kill9();
    watch_states(VOLUME, "degraded after a replica's kill -9", &nodes, watcher, Duration::from_secs(40), |v| {
        v["state"] == "degraded"
    });
    load_runs(&ctx, Duration::from_secs(3), "while a replica node was dead");
    nodes[victim].restart();
    let seen =
        watch_states(VOLUME, "healthy after the node came back", &nodes, watcher, Duration::from_secs(90), |v| {
            v["state"] == "healthy"
        });
    resyncing_seen += seen.iter().filter(|s| *s == "resyncing").count();

    // 2. A cut link, for longer than the lease: the node is cut off from
    // etcd and from the owner, then joins again with a new lease.
    let cut = replica_not_owner(VOLUME, &nodes, watcher, Some(victim));
    let watcher = (0..NODES).find(|&i| i != cut).unwrap();
    let cut_id =
        volume_status(&nodes[watcher], VOLUME).map(|_| crate::common::node_id_of(&nodes[watcher], &nodes[cut].name));
    net.link(cut, false);
    // Degraded as soon as its record is gone; the hosts write again once
    // the owner has dropped it (its writes to it time out first).
    watch_states(VOLUME, "degraded while a link is cut", &nodes, watcher, Duration::from_secs(40), |v| {
        v["state"] == "degraded"
            && !v["in_sync"].as_array().is_some_and(|s| s.iter().any(|n| n.as_u64() == cut_id.flatten()))
    });
    // Writes sent to it before it was dropped wait for the fabric's I/O
    // timeout; then the hosts go on.
    load.writing_again(&nodes);
    load_runs(&ctx, Duration::from_secs(5), "while a replica's link was cut");
    net.link(cut, true);
    let seen =
        watch_states(VOLUME, "healthy after the link came back", &nodes, watcher, Duration::from_secs(90), |v| {
            v["state"] == "healthy"
        });
    resyncing_seen += seen.iter().filter(|s| *s == "resyncing").count();

    // 3. kill -9 of the owner: another node takes the volume over after
    // the lease, the hosts find it through discovery and go on. What was
    // acknowledged but not flushed may be lost; flushed data may not, and
    // a block once read after the crash never changes by itself.
    let owner = owner_index(VOLUME, &nodes, watcher);
    let watcher = (0..NODES).find(|&i| i != owner).unwrap();
    ctx.set_disrupted(true);
    nodes[owner].kill9();
    ctx.oracle(|o| o.crash());
    let old_owner = volume_status(&nodes[watcher], VOLUME).unwrap()["owner"].clone();
    watch_states(VOLUME, "a new owner", &nodes, watcher, Duration::from_secs(60), |v| {
        v["owner"].is_u64() && v["owner"] != old_owner && v["state"] == "degraded"
    });
    let took_over = Instant::now();
    load.writing_again(&nodes);
    ctx.set_disrupted(false);
    eprintln!("hosts back {:.1}s after the takeover", took_over.elapsed().as_secs_f64());
    load_runs(&ctx, Duration::from_secs(3), "after the takeover");
    nodes[owner].restart();
    let seen =
        watch_states(VOLUME, "healthy after the old owner came back", &nodes, watcher, Duration::from_secs(90), |v| {
            v["state"] == "healthy"
        });
    resyncing_seen += seen.iter().filter(|s| *s == "resyncing").count();
    load_runs(&ctx, Duration::from_secs(2), "once healthy again");

    // 4. The owner freezes (SIGSTOP) for longer than its lease: another
    // node takes over, and the old owner wakes up (SIGCONT) with writes
    // in flight and hosts' commands in its sockets. The fence refuses
    // them everywhere but on its own replica, which is out of the in-sync
    // set and resynced; the hosts see no block flip.
    let owner = owner_index(VOLUME, &nodes, watcher);
    let watcher = (0..NODES).find(|&i| i != owner).unwrap();
    let old_owner = volume_status(&nodes[watcher], VOLUME).unwrap()["owner"].clone();
    ctx.set_disrupted(true);
    nodes[owner].signal("-STOP");
    ctx.oracle(|o| o.crash());
    watch_states(VOLUME, "a new owner while the old one is frozen", &nodes, watcher, Duration::from_secs(60), |v| {
        v["owner"].is_u64() && v["owner"] != old_owner
    });
    nodes[owner].signal("-CONT");
    load.writing_again(&nodes);
    ctx.set_disrupted(false);
    let seen =
        watch_states(VOLUME, "healthy after the old owner woke", &nodes, watcher, Duration::from_secs(90), |v| {
            v["state"] == "healthy"
        });
    resyncing_seen += seen.iter().filter(|s| *s == "resyncing").count();
    load_runs(&ctx, Duration::from_secs(2), "after the frozen owner woke up");
    let woke = nodes[owner].log_text();
    assert!(
        woke.contains("lease is lost"),
        "the frozen owner never noticed it lost its lease\n{}",
        nodes[owner].log_tail()
    );
    for line in woke.lines().filter(|l| l.contains("fenced") || l.contains("refused epoch")) {
        eprintln!("old owner: {line}");
    }

    // Stop the load and read every block back through the owner.
    load.finish(&nodes);
    assert!(resyncing_seen > 0, "pool status never showed a volume resyncing\n{}", {
        let logs: Vec<String> = nodes.iter().map(NodeProc::log_tail).collect();
        logs.join("\n")
    });
}
