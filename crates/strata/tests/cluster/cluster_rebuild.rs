//! Five `strata node` processes and a private etcd on loopback, a `rep:3`
//! and an `ec:2+1` volume: a node killed with -9 and left down past the
//! rebuild grace time is marked down and its copies and shards are
//! rebuilt on the others until both volumes are healthy without it; a
//! node drained under writes hands everything over and is then removed
//! (an up node is refused); a new node joins and data moves onto it.
//! Every flushed write reads back after each step. And the owner, the
//! source of a rebuild's copies, killed with -9 in the middle of it: the
//! next owner finishes it from the persisted log.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use strata_host::Controller;
use strata_meta::testing::EtcdProcess;

use crate::common::{NodeProc, connect_when_served, free_ports, pattern, wait_for};

const VOLUMES: [(&str, &str, &str); 2] = [("r", "192M", "rep:3"), ("e", "128M", "ec:2+1")];

fn status(via: &NodeProc) -> Option<Value> {
    via.api("GET", "/api/v1/pool", None)
}

fn volume<'a>(s: &'a Value, name: &str) -> Option<&'a Value> {
    s["volumes"].as_array()?.iter().find(|v| v["name"] == name)
}

fn ids(v: &Value, field: &str) -> Vec<u64> {
    v[field].as_array().map(|a| a.iter().filter_map(Value::as_u64).collect()).unwrap_or_default()
}

/// Both volumes healthy on the current map, neither placed on `without`.
fn settled(via: &NodeProc, without: &[u64]) -> Option<Value> {
    let s = status(via)?;
    for (name, _, _) in VOLUMES {
        let v = volume(&s, name)?;
        let placed = ids(v, "replicas");
        if v["state"] != "healthy" || v["map_epoch"] != s["map_epoch"] || placed.iter().any(|n| without.contains(n)) {
            return None;
        }
    }
    Some(s)
}

/// The owner's host address of volume `name`.
fn owner_addr(s: &Value, name: &str) -> Option<SocketAddr> {
    let owner = volume(s, name)?["owner"].as_u64()?;
    let n = s["nodes"].as_array()?.iter().find(|n| n["id"] == owner)?;
    n["listen"].as_str()?.parse().ok()
}

fn node_id(s: &Value, name: &str) -> u64 {
    s["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).unwrap()["id"].as_u64().unwrap()
}

/// Bytes allocated on the live nodes' drives.
fn allocated(s: &Value) -> u64 {
    s["nodes"].as_array().map_or(0, |n| n.iter().filter_map(|n| n["allocated_bytes"].as_u64()).sum())
}

type Expect = BTreeMap<u64, Vec<u8>>;

async fn write_some(c: &Controller, expect: &mut Expect, blocks: &[u64], round: u64) {
    for &b in blocks {
        c.write(1, b, pattern(b << 8 | round), false).await.expect("write");
        expect.insert(b, pattern(b << 8 | round));
    }
    c.flush(1).await.expect("flush");
}

async fn verify(c: &Controller, expect: &Expect, when: &str) {
    for (&b, want) in expect {
        let got = c.read(1, b, 1).await.unwrap_or_else(|e| panic!("{when}: read of block {b}: {e}"));
        assert!(got[..] == want[..], "{when}: block {b} differs");
    }
}

#[test]
fn a_dead_node_is_rebuilt_elsewhere_a_drained_one_removed_and_a_new_one_filled() {
    let _group = strata_testkit::group(module_path!());
    let etcd = EtcdProcess::start();
    let tmp = tempfile::tempdir().unwrap();
    let ports = free_ports(4 * 6);
    let start = |i: usize| crate::common::loopback_node(tmp.path(), i, &etcd.url(), "768M", &ports);
    let mut nodes: Vec<NodeProc> = (1..=5).map(start).collect();
    wait_for("five nodes up", Duration::from_secs(40), &nodes, || {
        (crate::common::nodes_up(&nodes[0])? == 5).then_some(())
    });
    let set = nodes[0]
        .api("PATCH", "/api/v1/pool/settings", Some(json!({"rebuild_grace_secs": 2, "rebuild_mbps": 0})))
        .expect("settings answered");
    assert_eq!(set["rebuild_grace_secs"], 2, "{set}");
    let bad = nodes[0].api("PATCH", "/api/v1/pool/settings", Some(json!({"fill_warn_percent": [0]}))).unwrap();
    assert!(bad["error"].as_str().is_some_and(|e| e.contains("percent")), "{bad}");

    let mut nqns = BTreeMap::new();
    for (name, size, protect) in VOLUMES {
        let v = nodes[0]
            .api(
                "POST",
                "/api/v1/volumes",
                Some(json!({"name": name, "size": size, "protect": protect, "allow_any_host": true})),
            )
            .expect("create answered");
        nqns.insert(name, v["nqn"].as_str().expect("nqn").to_string());
    }
    let s = wait_for("both volumes healthy", Duration::from_secs(60), &nodes, || settled(&nodes[0], &[]));

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // Blocks in every 64 MiB chunk of each volume.
    let blocks = |size_blocks: u64| -> Vec<u64> { (0..64).map(|i| i * 7919 % size_blocks).collect() };
    let sizes: BTreeMap<&str, u64> = [("r", 192u64 << 8), ("e", 128u64 << 8)].into();
    let mut expect: BTreeMap<&str, Expect> = BTreeMap::new();
    rt.block_on(async {
        for (name, _, _) in VOLUMES {
            let c = connect_when_served(owner_addr(&s, name).unwrap(), &nqns[name]).await;
            write_some(&c, expect.entry(name).or_default(), &blocks(sizes[name]), 1).await;
        }
    });

    // kill -9 a node that holds both volumes and owns neither.
    let owners: Vec<u64> = VOLUMES.iter().map(|(n, _, _)| volume(&s, n).unwrap()["owner"].as_u64().unwrap()).collect();
    // A holder of the ec volume other than its owner, best one that owns
    // nothing (else the rep volume is taken over too, which is fine).
    let holds_e = |id: u64| ids(volume(&s, "e").unwrap(), "replicas").contains(&id) && id != owners[1];
    let all: Vec<u64> = (1..=5).map(|i| node_id(&s, &format!("n{i}"))).collect();
    std::thread::sleep(Duration::from_millis(2500)); // the node records catch up
    let before = allocated(&status(&nodes[0]).unwrap());
    let victim = all
        .iter()
        .copied()
        .find(|&id| holds_e(id) && !owners.contains(&id))
        .or_else(|| all.iter().copied().find(|&id| holds_e(id)))
        .expect("a holder of the ec volume");
    let vi = (1..=5).position(|i| node_id(&s, &format!("n{i}")) == victim).unwrap();
    nodes[vi].kill9();
    let via = (0..5).find(|&i| i != vi).unwrap();
    let s = wait_for("both volumes rebuilt without the dead node", Duration::from_secs(120), &nodes, || {
        settled(&nodes[via], &[victim])
    });
    // What was never written stays thin where it was rebuilt: the live
    // nodes hold about what all five held (the node records lag a pass).
    std::thread::sleep(Duration::from_millis(2500));
    let after = allocated(&status(&nodes[via]).unwrap());
    assert!(after <= before + (24 << 20), "allocated {before} bytes before the kill, {after} after the rebuild");
    let dead = s["nodes"].as_array().unwrap().iter().find(|n| n["id"] == victim).unwrap();
    assert_eq!(dead["placement"], "down", "{dead}");
    for (name, _, protect) in VOLUMES {
        let v = volume(&s, name).unwrap();
        assert!(ids(v, "replicas").len() >= 3, "{protect}: {v}");
        assert!(!ids(v, "in_sync").contains(&victim), "{v}");
    }
    rt.block_on(async {
        for (name, _, _) in VOLUMES {
            let c = connect_when_served(owner_addr(&s, name).unwrap(), &nqns[name]).await;
            verify(&c, &expect[name], &format!("{name}: rebuilt without the dead node")).await;
        }
    });

    // Removing an up node is refused; the dead, rebuilt one goes.
    let up_name = &nodes[via].name.clone();
    let refused = nodes[via].api("DELETE", &format!("/api/v1/nodes/{up_name}"), None).unwrap();
    assert!(refused["error"].as_str().is_some_and(|e| e.contains("drain it first")), "{refused}");
    let victim_name = nodes[vi].name.clone();
    let removed = nodes[via].api("DELETE", &format!("/api/v1/nodes/{victim_name}"), None).unwrap();
    assert_eq!(removed["removed"], true, "{removed}");

    // Drain the rep volume's owner, under writes: the volume moves off it,
    // then it hands the volume to a node that holds it.
    let r_owner = volume(&s, "r").unwrap()["owner"].as_u64().unwrap();
    let di = (0..5).find(|&i| i != vi && node_id(&s, &nodes[i].name) == r_owner).expect("the owner of r");
    let drained = node_id(&s, &nodes[di].name);
    let drain_name = nodes[di].name.clone();
    let via = (0..5).find(|&i| i != vi && i != di).unwrap();
    let d = nodes[via].api("POST", &format!("/api/v1/nodes/{drain_name}/drain"), None).unwrap();
    assert_eq!(d["state"], "out", "{d}");
    rt.block_on(async {
        for (name, _, _) in VOLUMES {
            let c = connect_when_served(owner_addr(&s, name).unwrap(), &nqns[name]).await;
            write_some(&c, expect.get_mut(name).unwrap(), &blocks(sizes[name])[..32], 2).await;
        }
    });
    let s = wait_for(
        "both volumes moved off the drained node, and r to a new owner",
        Duration::from_secs(120),
        &nodes,
        || {
            settled(&nodes[via], &[victim, drained])
                .filter(|s| volume(s, "r").is_some_and(|r| r["owner"].as_u64().is_some_and(|o| o != drained)))
        },
    );
    rt.block_on(async {
        for (name, _, _) in VOLUMES {
            let c = connect_when_served(owner_addr(&s, name).unwrap(), &nqns[name]).await;
            verify(&c, &expect[name], &format!("{name}: after the drain")).await;
        }
    });
    wait_for("the drained node removed", Duration::from_secs(30), &nodes, || {
        let r = nodes[via].api("DELETE", &format!("/api/v1/nodes/{drain_name}"), None)?;
        (r["removed"] == true).then_some(())
    });
    // Drained and removed, it holds and owns nothing: the volumes do
    // without it.
    nodes[di].kill9();

    // A new node joins: data moves onto it.
    nodes.push(start(6));
    let s = wait_for("data moved onto the new node", Duration::from_secs(120), &nodes, || {
        let s = settled(&nodes[via], &[victim, drained])?;
        let n6 = s["nodes"].as_array()?.iter().find(|n| n["name"] == "n6")?["id"].as_u64()?;
        VOLUMES.iter().any(|(n, _, _)| volume(&s, n).is_some_and(|v| ids(v, "replicas").contains(&n6))).then_some(s)
    });
    rt.block_on(async {
        for (name, _, _) in VOLUMES {
            let c = connect_when_served(owner_addr(&s, name).unwrap(), &nqns[name]).await;
            verify(&c, &expect[name], &format!("{name}: after the new node joined")).await;
        }
    });
}

#[test]
fn the_owner_killed_in_the_middle_of_a_rebuild_leaves_it_to_the_next_owner() {
    let _group = strata_testkit::group(module_path!());
    let etcd = EtcdProcess::start();
    let tmp = tempfile::tempdir().unwrap();
    let ports = free_ports(4 * 5);
    let mut nodes: Vec<NodeProc> =
        (1..=5).map(|i| crate::common::loopback_node(tmp.path(), i, &etcd.url(), "512M", &ports)).collect();
    wait_for("five nodes up", Duration::from_secs(40), &nodes, || {
        (crate::common::nodes_up(&nodes[0])? == 5).then_some(())
    });
    // Slow enough that the rebuild is still running when the owner dies.
    let set = nodes[0].api("PATCH", "/api/v1/pool/settings", Some(json!({"rebuild_grace_secs": 1, "rebuild_mbps": 8})));
    assert_eq!(set.expect("settings")["rebuild_mbps"], 8);
    let v = nodes[0].api(
        "POST",
        "/api/v1/volumes",
        Some(json!({"name": "r", "size": "128M", "protect": "rep:3", "allow_any_host": true})),
    );
    let nqn = v.expect("create")["nqn"].as_str().unwrap().to_string();
    let healthy = |via: &NodeProc| status(via).filter(|s| volume(s, "r").is_some_and(|v| v["state"] == "healthy"));
    let s = wait_for("the volume healthy", Duration::from_secs(60), &nodes, || healthy(&nodes[0]));

    // Every MiB written, so that the rebuild copies real bytes.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mib = |m: u64| -> Vec<u8> { (0..256).flat_map(|b| pattern(m << 16 | b)).collect() };
    rt.block_on(async {
        let c = connect_when_served(owner_addr(&s, "r").unwrap(), &nqn).await;
        for m in 0..128 {
            c.write(1, m * 256, mib(m), false).await.expect("write");
        }
        c.flush(1).await.expect("flush");
    });

    let v = volume(&s, "r").unwrap();
    let owner = v["owner"].as_u64().unwrap();
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    let index_of = |id: u64| names.iter().position(|n| node_id(&s, n) == id).unwrap();
    let victim = ids(v, "replicas").into_iter().find(|&n| n != owner).unwrap();
    let (vi, oi) = (index_of(victim), index_of(owner));
    nodes[vi].kill9();
    let via = (0..5).find(|&i| i != vi && i != oi).unwrap();
    wait_for("the rebuild under way", Duration::from_secs(60), &nodes, || {
        let s = status(&nodes[via])?;
        let r = volume(&s, "r")?;
        (r["state"] == "rebuilding" && r["resync"].as_array()?.iter().any(|p| p["bytes_left"].as_u64() > Some(8 << 20)))
            .then_some(())
    });
    // The owner, which is also the source of the copies, dies mid-rebuild.
    nodes[oi].kill9();
    let s = wait_for("the volume rebuilt by a new owner", Duration::from_secs(180), &nodes, || {
        let s = status(&nodes[via])?;
        let r = volume(&s, "r")?;
        let placed = ids(r, "replicas");
        (r["state"] == "healthy"
            && r["map_epoch"] == s["map_epoch"]
            && r["owner"].as_u64() != Some(owner)
            && !placed.contains(&victim)
            && !placed.contains(&owner))
        .then_some(s)
    });
    rt.block_on(async {
        let c = connect_when_served(owner_addr(&s, "r").unwrap(), &nqn).await;
        for m in 0..128 {
            let got = c.read(1, m * 256, 256).await.unwrap_or_else(|e| panic!("read of MiB {m}: {e}"));
            assert!(got[..] == mib(m)[..], "MiB {m} differs after the rebuild and the takeover");
        }
    });
}
