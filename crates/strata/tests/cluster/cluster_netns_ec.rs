//! An `ec:4+2` volume on `strata node` processes, each in its own network
//! namespace, with a private etcd, under verified load: hosts (the chaos
//! suite's, judged by its durability oracle) write, read, flush and
//! deallocate the whole time that
//!
//! 1. two nodes, the owner and another holder (M = 2), are killed with
//!    kill -9 together: another node takes the volume over and serves it
//!    decoding from the four shards left, and both come back and are
//!    resynced;
//! 2. an eighth node joins and shards move onto it (add and rebalance);
//! 3. a holder is drained, every shard moves off it, and it is removed;
//! 4. a holder is killed and stays down past the grace time: it is marked
//!    down and its shards are rebuilt on the others, slowly (a bandwidth
//!    limit), and in the middle of the rebuild the owner, the rebuild's
//!    source, is killed with kill -9 too: the next owner finishes the
//!    rebuild from the persisted log, and the dead node is removed.
//!
//! Every acknowledged-and-flushed write reads back, no block read ever
//! flips between values after a failover, and nothing hangs.
//!
//! Needs root (CAP_NET_ADMIN) and iproute2, as in CI (`.ci/run` runs as
//! root); it fails, saying so, without them.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_meta::testing::EtcdProcess;

use crate::common::{NodeProc, nodes_up, volume_status, wait_for};
use crate::netns::{Load, Net, create_healthy, load_runs, owner_index, replica_not_owner, start_node, watch_states};

/// Namespaces: seven nodes at first, an eighth joins in step 2.
const NODES: usize = 8;
const SEED: u64 = 20261202;
const VOLUME: &str = "e";
/// Blocks the hosts write: the whole 256 MiB volume.
const BLOCKS: u64 = 256 << 20 >> 12;

fn status(via: &NodeProc) -> Option<Value> {
    via.api("GET", "/api/v1/pool", None)
}

fn node_id(via: &NodeProc, name: &str) -> u64 {
    let s = status(via).expect("status");
    s["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).unwrap()["id"].as_u64().unwrap()
}

/// The volume healthy on the current map, with no shard on `without`.
fn settled(via: &NodeProc, without: &[u64]) -> Option<Value> {
    let s = status(via)?;
    let v = s["volumes"].as_array()?.iter().find(|v| v["name"] == VOLUME)?.clone();
    let placed: Vec<u64> = v["replicas"].as_array()?.iter().filter_map(Value::as_u64).collect();
    (v["state"] == "healthy" && v["map_epoch"] == s["map_epoch"] && !placed.iter().any(|n| without.contains(n)))
        .then_some(v)
}

fn settings(via: &NodeProc, patch: Value) {
    let s = via.api("PATCH", "/api/v1/pool/settings", Some(patch.clone())).expect("settings answered");
    assert!(s.get("error").is_none(), "settings {patch} refused: {s}");
}

#[test]
fn an_ec_4_2_volume_under_verified_load_survives_m_kills_an_add_a_drain_and_a_rebuild_in_network_namespaces() {
    let _group = strata_testkit::group(module_path!());
    let began = Instant::now();
    let step = |what: &str| eprintln!("{:6.1}s {what}", began.elapsed().as_secs_f64());
    let net = Net::new(NODES);
    let etcd = EtcdProcess::start_also_on(net.gateway());
    let tmp = tempfile::tempdir().unwrap();
    let etcd_url = etcd.url_on(net.gateway());
    let start = |i: usize| start_node(&net, &etcd_url, tmp.path(), i);
    let mut nodes: Vec<NodeProc> = (0..NODES - 1).map(start).collect();
    wait_for("seven nodes up", Duration::from_secs(30), &nodes, || (nodes_up(&nodes[0])? == NODES - 1).then_some(()));
    // No rebuild until step 4; resyncs and moves at full speed.
    settings(&nodes[0], json!({"rebuild_grace_secs": 3600, "rebuild_mbps": 0}));
    let nqn = create_healthy(&nodes, VOLUME, "256M", "ec:4+2");

    // Verified hosts, finding the owner through any node's discovery.
    let load = Load::start(&net, NODES, VOLUME, nqn, BLOCKS, SEED);
    let ctx = load.ctx.clone();
    load_runs(&ctx, Duration::from_secs(3), "before any fault");

    step("load running");
    // 1. M = 2: the owner and another holder die together. The next owner
    // decodes from the four shards left; both come back and are resynced.
    let owner = owner_index(VOLUME, &nodes, 0);
    let other = replica_not_owner(VOLUME, &nodes, 0, Some(owner));
    let watcher = (0..NODES - 1).find(|&i| i != owner && i != other).unwrap();
    let old_owner = volume_status(&nodes[watcher], VOLUME).unwrap()["owner"].clone();
    ctx.set_disrupted(true);
    nodes[other].kill9();
    nodes[owner].kill9();
    ctx.oracle(|o| o.crash());
    watch_states(VOLUME, "a new owner, two shards down", &nodes, watcher, Duration::from_secs(60), |v| {
        v["owner"].is_u64() && v["owner"] != old_owner && v["state"] == "degraded"
    });
    load.writing_again(&nodes);
    ctx.set_disrupted(false);
    load_runs(&ctx, Duration::from_secs(3), "with two of six shards down");
    nodes[other].restart();
    nodes[owner].restart();
    let seen = watch_states(VOLUME, "healthy after both came back", &nodes, watcher, Duration::from_secs(120), |v| {
        v["state"] == "healthy"
    });
    eprintln!("step 1: states {seen:?}");
    load_runs(&ctx, Duration::from_secs(2), "once healthy again");

    step("step 1 done: M kills, takeover, resync");
    // 2. An eighth node joins: shards move onto it under load.
    nodes.push(start(NODES - 1));
    wait_for("eight nodes up", Duration::from_secs(30), &nodes, || (nodes_up(&nodes[watcher])? == NODES).then_some(()));
    let added = node_id(&nodes[watcher], &nodes[NODES - 1].name);
    wait_for("shards moved onto the new node", Duration::from_secs(180), &nodes, || {
        let v = settled(&nodes[watcher], &[])?;
        v["replicas"].as_array()?.iter().any(|r| r == added).then_some(())
    });
    load_runs(&ctx, Duration::from_secs(2), "after the add");

    step("step 2 done: add");
    // 3. A holder other than the owner is drained under load, then removed.
    let drained = replica_not_owner(VOLUME, &nodes, watcher, None);
    let drained_id = node_id(&nodes[watcher], &nodes[drained].name);
    let name = nodes[drained].name.clone();
    let d = nodes[watcher].api("POST", &format!("/api/v1/nodes/{name}/drain"), None).expect("drain answered");
    assert!(d.get("error").is_none(), "drain refused: {d}");
    wait_for("every shard off the drained node", Duration::from_secs(180), &nodes, || {
        settled(&nodes[watcher], &[drained_id])
    });
    wait_for("the drained node removed", Duration::from_secs(30), &nodes, || {
        let r = nodes[watcher].api("DELETE", &format!("/api/v1/nodes/{name}"), None)?;
        (r["removed"] == true).then_some(())
    });
    nodes[drained].kill9();
    load_runs(&ctx, Duration::from_secs(2), "after the drain");

    step("step 3 done: drain, remove");
    // 4. A holder dies for good: past the grace time its shards are
    // rebuilt on the others, at 4 MB/s so that the rebuild lasts; in the
    // middle of it the owner, which decodes and sends the shards, dies
    // too, and the next owner finishes the rebuild from the log.
    let victim = replica_not_owner(VOLUME, &nodes, watcher, Some(drained));
    let victim_id = node_id(&nodes[watcher], &nodes[victim].name);
    let watcher = (0..NODES).find(|&i| i != victim && i != drained).unwrap();
    settings(&nodes[watcher], json!({"rebuild_grace_secs": 2, "rebuild_mbps": 4}));
    nodes[victim].kill9();
    wait_for("the dead node marked down", Duration::from_secs(60), &nodes, || {
        let s = status(&nodes[watcher])?;
        let n = s["nodes"].as_array()?.iter().find(|n| n["id"] == victim_id)?.clone();
        (n["placement"] == "down").then_some(())
    });
    // Nobody else is marked down from here on: the owner comes back.
    settings(&nodes[watcher], json!({"rebuild_grace_secs": 3600}));
    watch_states(VOLUME, "the rebuild running", &nodes, watcher, Duration::from_secs(60), |v| {
        v["state"] == "rebuilding"
    });
    load_runs(&ctx, Duration::from_secs(2), "during the rebuild");
    let owner = owner_index(VOLUME, &nodes, watcher);
    let watcher = (0..NODES).find(|&i| i != victim && i != drained && i != owner).unwrap();
    let old_owner = volume_status(&nodes[watcher], VOLUME).unwrap()["owner"].clone();
    ctx.set_disrupted(true);
    nodes[owner].kill9();
    ctx.oracle(|o| o.crash());
    watch_states(VOLUME, "a new owner in the middle of the rebuild", &nodes, watcher, Duration::from_secs(60), |v| {
        v["owner"].is_u64() && v["owner"] != old_owner
    });
    load.writing_again(&nodes);
    ctx.set_disrupted(false);
    nodes[owner].restart();
    settings(&nodes[watcher], json!({"rebuild_mbps": 0}));
    wait_for("the rebuild finished without the dead node", Duration::from_secs(180), &nodes, || {
        settled(&nodes[watcher], &[victim_id, drained_id])
    });
    let name = nodes[victim].name.clone();
    let r = nodes[watcher].api("DELETE", &format!("/api/v1/nodes/{name}"), None).expect("remove answered");
    assert_eq!(r["removed"], true, "the rebuilt node could not be removed: {r}");
    load_runs(&ctx, Duration::from_secs(2), "after the rebuild");

    step("step 4 done: rebuild, owner killed mid-rebuild");
    // Stop the load and read every block back through the owner.
    load.finish(&nodes);
    step("verified");
}
