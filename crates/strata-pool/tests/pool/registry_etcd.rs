//! Node ids, registrations and the placement map in a real etcd.

use std::collections::BTreeSet;
use std::time::Duration;

use strata_meta::on_both_etcds;
use strata_meta::testing::EtcdServer;
use strata_pool::NodeId;
use strata_pool::placement::{FailureDomain, Node};
use strata_pool::registry::{NodeRecord, current_map, join_map, live_nodes, map_at, node_id, register};

const P: &str = "/strata/";

on_both_etcds!(
    ids_are_stable_per_name_and_never_shared_even_when_nodes_race,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn ids_are_stable_per_name_and_never_shared_even_when_nodes_race(etcd: impl EtcdServer) {
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

on_both_etcds!(
    nodes_joining_at_once_all_land_in_one_map_and_every_epoch_is_kept,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn nodes_joining_at_once_all_land_in_one_map_and_every_epoch_is_kept(etcd: impl EtcdServer) {
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

on_both_etcds!(a_node_whose_lease_ends_is_no_longer_live);
async fn a_node_whose_lease_ends_is_no_longer_live(etcd: impl EtcdServer) {
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
        serving: vec![7],
        resyncing: vec![strata_pool::registry::ResyncProgress {
            volume: 7,
            node: NodeId(2),
            regions_left: 12,
            bytes_left: 12 << 20,
            bytes_total: 64 << 20,
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
        api: Some("10.0.0.9:7420".parse().unwrap()),
    };
    register(&c, P, &rec, lease.id).await.unwrap();
    assert_eq!(live_nodes(&c, P).await.unwrap(), vec![rec]);
    c.lease_revoke(lease.id).await.unwrap();
    assert!(live_nodes(&c, P).await.unwrap().is_empty());
}

/// Copies per node in the first `k` slots of every group, over the mean:
/// lowest and highest.
fn prefix_spread(map: &strata_pool::placement::PlacementMap, k: usize) -> (f64, f64) {
    let table = strata_pool::placement::Placer::new(map).table();
    let mut per = std::collections::BTreeMap::new();
    for pg in 0..table.pg_count() {
        for n in table.nodes(pg).iter().take(k) {
            *per.entry(*n).or_insert(0u64) += 1;
        }
    }
    let mean = per.values().sum::<u64>() as f64 / map.nodes().len() as f64;
    let r = map.nodes().iter().map(|n| per.get(&n.id).copied().unwrap_or(0) as f64 / mean);
    r.fold((f64::INFINITY, 0.0), |(lo, hi), x| (lo.min(x), hi.max(x)))
}

on_both_etcds!(
    every_map_change_balances_the_protection_the_pool_is_set_to_and_a_setting_change_rebalances,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn every_map_change_balances_the_protection_the_pool_is_set_to_and_a_setting_change_rebalances(
    etcd: impl EtcdServer,
) {
    use strata_pool::registry::{PoolSettings, rebalance, set_settings, update_map};
    let c = etcd.client();
    let join = |i: u32| {
        join_map(
            &c,
            P,
            Node::new(i, format!("n{i}"), 1 << 40).with_label("rack", format!("r{i}")),
            FailureDomain::default(),
        )
    };
    for i in 1..=24u32 {
        join(i).await.unwrap();
    }
    let (map, _) = current_map(&c, P).await.unwrap().unwrap();
    assert!(!map.remaps().is_empty(), "the balancer made no move");
    // rep:3 (the default): 512 copies a node in the first 3 slots, 1% is 5.
    let (lo, hi) = prefix_spread(&map, 3);
    assert!(lo >= 0.99 && hi <= 1.01, "rep:3 copies per node over the mean: {lo}..{hi}");

    // Balancing for ec:4+2 instead evens out the first 6 slots.
    let s = PoolSettings { balance_for: "ec:4+2".parse().unwrap(), ..PoolSettings::default() };
    set_settings(&c, P, &s).await.unwrap();
    let six = rebalance(&c, P).await.unwrap();
    assert_eq!(six.epoch(), map.epoch() + 1);
    let (lo, hi) = prefix_spread(&six, 6);
    assert!(lo >= 0.99 && hi <= 1.01, "ec:4+2 shards per node over the mean: {lo}..{hi}");
    assert_eq!(rebalance(&c, P).await.unwrap().epoch(), six.epoch(), "a balanced map stays as it is");

    // A node going down: its copies move, and the rest stay even.
    let down = update_map(&c, P, |m| {
        let mut next = m.clone();
        next.set_state(NodeId(5), strata_pool::placement::NodeState::Down).unwrap();
        Ok(Some(next))
    })
    .await
    .unwrap();
    let table = strata_pool::placement::Placer::new(&down).table();
    assert!((0..table.pg_count()).all(|pg| !table.nodes(pg)[..6].contains(&NodeId(5))), "the down node holds shards");
    let before = strata_pool::placement::Placer::new(&six).table();
    let held = (0..4096).filter(|&pg| before.nodes(pg)[..6].contains(&NodeId(5))).count();
    let moved: usize =
        (0..4096).map(|pg| table.nodes(pg)[..6].iter().filter(|n| !before.nodes(pg)[..6].contains(n)).count()).sum();
    assert!(
        moved >= held && (moved as f64) <= held as f64 * 1.15,
        "{moved} shards moved for the {held} the down node held"
    );
}

on_both_etcds!(the_first_settings_stored_win_and_later_seeds_change_nothing);
async fn the_first_settings_stored_win_and_later_seeds_change_nothing(etcd: impl EtcdServer) {
    use strata_pool::registry::{PoolSettings, init_settings, settings};
    let c = etcd.client();
    assert_eq!(settings(&c, P).await.unwrap(), PoolSettings::default(), "no settings yet: the defaults");
    let first = PoolSettings { rebuild_mbps: 80, ..PoolSettings::default() };
    assert!(init_settings(&c, P, &first).await.unwrap(), "the first seed is stored");
    let second = PoolSettings { rebuild_mbps: 10, ..PoolSettings::default() };
    assert!(!init_settings(&c, P, &second).await.unwrap(), "a later seed is not");
    assert_eq!(settings(&c, P).await.unwrap(), first);
}
