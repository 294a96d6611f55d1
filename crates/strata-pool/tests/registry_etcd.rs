//! Node ids, registrations and the placement map in a real etcd.

use std::collections::BTreeSet;
use std::time::Duration;

use strata_meta::testing::EtcdProcess;
use strata_pool::NodeId;
use strata_pool::placement::{FailureDomain, Node};
use strata_pool::registry::{NodeRecord, current_map, join_map, live_nodes, map_at, node_id, register};

const P: &str = "/strata/";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_stable_per_name_and_never_shared_even_when_nodes_race() {
    let etcd = EtcdProcess::start();
    let names: Vec<String> = (0..8).map(|i| format!("node-{i}")).collect();
    let tasks: Vec<_> = names
        .iter()
        .map(|n| {
            let (c, n) = (etcd.client(), n.clone());
            tokio::spawn(async move { node_id(&c, P, &n).await.unwrap() })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 8, "two nodes got one id: {ids:?}");
    for (n, id) in names.iter().zip(&ids) {
        assert_eq!(node_id(&etcd.client(), P, n).await.unwrap(), *id, "a node's id changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_joining_at_once_all_land_in_one_map_and_every_epoch_is_kept() {
    let etcd = EtcdProcess::start();
    let tasks: Vec<_> = (1..=5u32)
        .map(|i| {
            let c = etcd.client();
            let node = Node::new(i, format!("n{i}"), 1 << 40).with_label("rack", format!("r{}", i % 3));
            tokio::spawn(async move { join_map(&c, P, node, FailureDomain::default()).await.unwrap() })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let (map, _) = current_map(&etcd.client(), P).await.unwrap().unwrap();
    assert_eq!(map.nodes().len(), 5);
    assert_eq!(map.epoch(), 5, "one epoch per join");
    for e in 1..=5 {
        assert_eq!(map_at(&etcd.client(), P, e).await.unwrap().nodes().len() as u64, e);
    }
    // Joining again as it is changes nothing; a new weight is a new epoch.
    let same = Node::new(3, "n3", 1 << 40).with_label("rack", "r0");
    assert_eq!(join_map(&etcd.client(), P, same, FailureDomain::default()).await.unwrap().epoch(), 5);
    let bigger = Node::new(3, "n3", 2 << 40).with_label("rack", "r0");
    assert_eq!(join_map(&etcd.client(), P, bigger, FailureDomain::default()).await.unwrap().epoch(), 6);
}

#[tokio::test]
async fn a_node_whose_lease_ends_is_no_longer_live() {
    let etcd = EtcdProcess::start();
    let c = etcd.client();
    let lease = c.lease_grant(Duration::from_secs(30)).await.unwrap();
    let rec = NodeRecord {
        id: NodeId(4),
        name: "n4".into(),
        fabric: "127.0.0.1:4520".parse().unwrap(),
        listen: "127.0.0.1:4420".parse().unwrap(),
        labels: [("rack".to_string(), "r1".to_string())].into(),
        capacity_bytes: 1 << 40,
        allocated_bytes: 0,
        incarnation: 99,
        held: vec![7],
        resyncing: vec![strata_pool::registry::ResyncProgress {
            volume: 7,
            node: NodeId(2),
            regions_left: 12,
            bytes_left: 12 << 20,
            filling: true,
        }],
        drives: vec![strata_pool::registry::DriveRecord {
            path: "/dev/nvme1n1".into(),
            capacity_bytes: 1 << 40,
            allocated_bytes: 1 << 30,
            failed: false,
        }],
        held_bytes: [(7, 1 << 30)].into(),
        rebuild_bytes_per_sec: 5 << 20,
    };
    register(&c, P, &rec, lease.id).await.unwrap();
    assert_eq!(live_nodes(&c, P).await.unwrap(), vec![rec]);
    c.lease_revoke(lease.id).await.unwrap();
    assert!(live_nodes(&c, P).await.unwrap().is_empty());
}
