//! Six `strata node` processes and a private etcd on loopback, an
//! `ec:4+2` volume: flushed writes read back through the kill -9 of one
//! node, then of its owner as well (M = 2 nodes down: reads decode from
//! the four left), writes go on degraded, and the two nodes come back and
//! are rebuilt from the others until the volume is healthy again, after
//! which the shards of two other nodes are not needed to read it. First,
//! space written and deallocated is freed on the shards.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use strata_host::Controller;
use strata_meta::testing::EtcdProcess;

use crate::common::{NodeProc, connect_when_served, free_ports, loopback, pattern, wait_for};

const NODES: usize = 6;

/// The volume's owner id, its host address and its status, from `via`.
fn owner_of(via: &NodeProc) -> Option<(u64, SocketAddr, Value)> {
    let s = via.api("GET", "/api/v1/pool", None)?;
    let v = s["volumes"].as_array()?.iter().find(|v| v["name"] == "ec")?.clone();
    let owner = v["owner"].as_u64()?;
    let n = s["nodes"].as_array()?.iter().find(|n| n["id"] == owner && n["state"] == "up")?;
    Some((owner, n["listen"].as_str()?.parse().ok()?, v))
}

/// The volume's data as its shards hold it (allocated bytes x K / width),
/// as `via` reports.
fn allocated(via: &NodeProc) -> Option<u64> {
    owner_of(via)?.2["allocated_bytes"].as_u64()
}

fn name_of(via: &NodeProc, id: u64) -> String {
    crate::common::node_name(via, id).expect("node listed")
}

/// Reads every block in `expect` and checks it.
async fn verify(c: &Controller, expect: &std::collections::BTreeMap<u64, Vec<u8>>, when: &str) {
    for (&b, want) in expect {
        let got = c.read(1, b, 1).await.unwrap_or_else(|e| panic!("{when}: read of block {b}: {e}"));
        assert!(got[..] == want[..], "{when}: block {b} differs");
    }
}

#[test]
fn an_ec_4_2_volume_keeps_flushed_writes_through_two_kill_9s_and_rebuilds_the_nodes() {
    let _group = strata_testkit::group(module_path!());
    let etcd = EtcdProcess::start();
    let tmp = tempfile::tempdir().unwrap();
    let ports = free_ports(4 * NODES);
    let mut nodes: Vec<NodeProc> = (1..=NODES)
        .map(|i| {
            let dir = tmp.path().join(format!("n{i}"));
            let addrs = loopback(&ports[(i - 1) * 4..i * 4]);
            NodeProc::start(&dir, &format!("n{i}"), &format!("r{i}"), &etcd.url(), "512M", addrs, &[])
        })
        .collect();
    wait_for("six nodes up", Duration::from_secs(40), &nodes, || {
        (crate::common::nodes_up(&nodes[0])? == NODES).then_some(())
    });
    let created = nodes[0]
        .api(
            "POST",
            "/api/v1/volumes",
            Some(json!({"name": "ec", "size": "64M", "protect": "ec:4+2", "allow_any_host": true})),
        )
        .expect("create answered");
    assert_eq!(created["protection"], "ec:4+2", "{created}");
    let nqn = created["nqn"].as_str().unwrap().to_string();
    let (owner, addr, _) = wait_for("an owner, with six shards in sync", Duration::from_secs(40), &nodes, || {
        owner_of(&nodes[0])
            .filter(|(_, _, v)| v["state"] == "healthy" && v["in_sync"].as_array().map(Vec::len) == Some(NODES))
    });

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();

    // Deallocated space is freed on the shards: 32 MiB written and
    // deallocated read as zeros, and the volume's shards (its data, not
    // the undo logs) hold what they held before.
    let before = allocated(&nodes[0]).expect("status");
    rt.block_on(async {
        let c = connect_when_served(addr, &nqn).await;
        for start in (0..8192u64).step_by(256) {
            let data: Vec<u8> = (start..start + 256).flat_map(|b| pattern(b << 8 | 9)).collect();
            c.write(1, start, data, false).await.expect("fill write");
        }
        c.flush(1).await.expect("flush");
    });
    let filled = wait_for("the shards' space allocated", Duration::from_secs(30), &nodes, || {
        allocated(&nodes[0]).filter(|&a| a >= before + (30 << 20))
    });
    rt.block_on(async {
        let c = connect_when_served(addr, &nqn).await;
        let ranges: Vec<(u64, u32)> = (0..8192u64).step_by(1024).map(|b| (b, 1024)).collect();
        c.deallocate(1, &ranges).await.expect("deallocate");
        for b in [0u64, 1, 4095, 8191] {
            let got = c.read(1, b, 1).await.expect("read");
            assert!(got.iter().all(|&x| x == 0), "block {b} reads as data after the deallocate");
        }
    });
    wait_for("the shards' space freed", Duration::from_secs(30), &nodes, || {
        allocated(&nodes[0]).filter(|&a| a + (30 << 20) <= filled)
    });

    let mut expect = std::collections::BTreeMap::new();
    // Single blocks (partial stripes) and 64 KiB runs (full stripes).
    let singles: Vec<u64> = (0..48).map(|i| i * 977 % 16384).collect();
    let runs: Vec<u64> = (0..8).map(|i| 8192 + i * 64).collect();
    rt.block_on(async {
        let c = connect_when_served(addr, &nqn).await;
        for &b in &singles {
            c.write(1, b, pattern(b << 8 | 1), false).await.expect("write");
            expect.insert(b, pattern(b << 8 | 1));
        }
        for &start in &runs {
            let data: Vec<u8> = (start..start + 16).flat_map(|b| pattern(b << 8 | 1)).collect();
            c.write(1, start, data, false).await.expect("full-stripe write");
            expect.extend((start..start + 16).map(|b| (b, pattern(b << 8 | 1))));
        }
        c.flush(1).await.expect("flush");
        verify(&c, &expect, "healthy").await;
    });

    // kill -9 a node that does not own the volume: reads decode, writes go on.
    let owner_name = name_of(&nodes[0], owner);
    let k1 = nodes.iter().position(|n| n.name != owner_name).unwrap();
    nodes[k1].kill9();
    let via = (0..NODES).find(|&i| i != k1 && nodes[i].name != owner_name).unwrap();
    rt.block_on(async {
        let c = connect_when_served(addr, &nqn).await;
        verify(&c, &expect, "one node down").await;
        for &b in singles.iter().step_by(3) {
            c.write(1, b, pattern(b << 8 | 2), false).await.expect("degraded write");
            expect.insert(b, pattern(b << 8 | 2));
        }
        c.flush(1).await.expect("degraded flush");
        verify(&c, &expect, "one node down, after degraded writes").await;
    });
    wait_for("the volume degraded", Duration::from_secs(30), &nodes, || {
        owner_of(&nodes[via]).filter(|(_, _, v)| v["state"] == "degraded").map(|_| ())
    });

    // kill -9 the owner too: M nodes down; another node takes it over.
    let k2 = nodes.iter().position(|n| n.name == owner_name).unwrap();
    nodes[k2].kill9();
    let via = (0..NODES).find(|&i| i != k1 && i != k2).unwrap();
    // The new owner takes it over at once, and drops the dead owner from
    // the in-sync set when its fencing flush finds it gone.
    let (new_owner, new_addr, v) = wait_for("a new owner with four shards", Duration::from_secs(60), &nodes, || {
        owner_of(&nodes[via])
            .filter(|(o, _, v)| *o != owner && v["in_sync"].as_array().is_some_and(|s| s.len() <= NODES - 2))
    });
    assert_ne!(new_owner, owner);
    assert!(!v["in_sync"].as_array().unwrap().contains(&json!(owner)), "{v}");
    rt.block_on(async {
        let c = connect_when_served(new_addr, &nqn).await;
        verify(&c, &expect, "two nodes down, after the takeover").await;
        for &b in singles.iter().step_by(4) {
            c.write(1, b, pattern(b << 8 | 3), true).await.expect("write with M nodes down");
            expect.insert(b, pattern(b << 8 | 3));
        }
        verify(&c, &expect, "two nodes down, after writes").await;
    });

    // Both come back and are rebuilt from the others.
    nodes[k1].restart();
    nodes[k2].restart();
    let (_, addr, _) = wait_for("the volume healthy again", Duration::from_secs(90), &nodes, || {
        owner_of(&nodes[via]).filter(|(_, _, v)| v["state"] == "healthy")
    });
    // Rebuilt shards carry the data: with two other nodes down (neither the
    // owner), every block still reads back.
    let (owner, _, _) = owner_of(&nodes[via]).unwrap();
    let owner_name = name_of(&nodes[via], owner);
    let spare: Vec<usize> = (0..NODES).filter(|&i| i != k1 && i != k2 && nodes[i].name != owner_name).take(2).collect();
    for &i in &spare {
        nodes[i].kill9();
    }
    rt.block_on(async {
        let c = connect_when_served(addr, &nqn).await;
        verify(&c, &expect, "rebuilt, with two other nodes down").await;
    });
}
