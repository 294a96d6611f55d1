//! One simulation: build the cluster, balance it, fill it until the first
//! drive is full, then add 1% more nodes and fail single nodes, measuring
//! the data each change moves and what rebuilding a failed node reads,
//! writes and takes. Every placement is made by the real placement code
//! (`crate::placement`), on maps the real balancer made.

use std::time::Instant;

use super::drives::{first_full_at, most_free_first};
use super::fill::{Cluster, fill};
use super::options::{SimError, SimOptions};
use super::rebuild::{Rebuild, rebuild};
use super::report::SimReport;
use super::workload::Workload;
use crate::placement::{
    BalanceOptions, CHUNK_SIZE, FailureDomain, Node, NodeId, NodeState, PlacementMap, PlacementTable, Placer, balance,
    pg_count_for,
};
use strata_rand::Rng;

/// Node `i` of the modelled cluster.
fn sim_node(i: u32, opts: &SimOptions) -> Node {
    let weight = opts.drive_bytes * u64::from(opts.drives_per_node);
    Node::new(i, format!("n{i}"), weight).with_label("rack", format!("r{}", i / opts.rack_size))
}

/// Runs one simulation.
///
/// # Errors
///
/// [`SimError`] for an option out of range, or a cluster that cannot keep
/// the protection's copies in distinct racks.
pub fn run(opts: &SimOptions) -> Result<SimReport, SimError> {
    let started = Instant::now();
    opts.validate()?;
    let mut rng = Rng::new(opts.seed);
    let width = opts.protection.width();
    let pgs = opts.pg_count.unwrap_or_else(|| pg_count_for(opts.nodes as usize, width));
    let nodes: Vec<Node> = (0..opts.nodes).map(|i| sim_node(i, opts)).collect();
    let mut map = PlacementMap::new(opts.protection, FailureDomain::default(), pgs, nodes)?;
    map.honours()?;
    let bopts = BalanceOptions { tolerance: opts.tolerance, threads: opts.threads, ..BalanceOptions::default() };

    // The cluster as it would start: balanced from scratch. `before` is
    // hashing alone, for comparison.
    let balanced = balance(&map, None, &bopts);
    map.set_remaps(balanced.remaps)?;
    map.set_epoch(2);
    let (table, hashed) = (balanced.table, balanced.before);
    let place_micros_per_pg = spot_check(&map, &table)?;

    // Fill it.
    let drive_extents = opts.drive_bytes / opts.extent_bytes;
    let drives = vec![drive_extents; opts.drives_per_node as usize];
    let node_extents: u64 = drives.iter().sum();
    let first_full = vec![first_full_at(&drives); opts.nodes as usize];
    let data_shards = opts.protection.data_shards() as u64;
    let cluster = Cluster { table: &table, first_full: &first_full, extent_bytes: opts.extent_bytes, data_shards };
    let workload = Workload::new(Rng::new(rng.next_u64()), opts.volume_min_bytes, opts.volume_max_bytes);
    let filled = fill(&cluster, workload.clone());
    let filled_hashed = fill(&Cluster { table: &hashed, ..cluster }, workload);
    let pg_bytes = |pg: u32| filled.pg_extents[pg as usize] * opts.extent_bytes;

    let raw_bytes = opts.drive_bytes * u64::from(opts.drives_per_node) * u64::from(opts.nodes);
    let allocated_of = |f: &super::fill::Filled| f.node_extents.iter().map(|&e| e.min(node_extents)).sum::<u64>();
    let allocated = allocated_of(&filled);
    let (min_fill, max_fill) = drive_fill_spread(&filled.node_extents, &drives);
    let mean_fill = allocated as f64 / (node_extents * u64::from(opts.nodes)) as f64;

    let (sources_min, sources_mean) = rebuild_sources(&table, &filled.pg_extents, opts.nodes as usize);
    let add = add_nodes(&map, &table, opts, &bopts, &pg_bytes)?;
    let (fail, rebuilt) = fail_nodes(&map, &table, opts, &bopts, &pg_bytes, &mut rng)?;

    Ok(SimReport {
        nodes: opts.nodes,
        drives: u64::from(opts.nodes) * u64::from(opts.drives_per_node),
        racks: opts.nodes.div_ceil(opts.rack_size),
        drives_per_node: opts.drives_per_node,
        drive_bytes: opts.drive_bytes,
        protection: opts.protection.to_string(),
        seed: opts.seed,
        pgs,
        pg_copies_per_node: f64::from(pgs) * width as f64 / f64::from(opts.nodes),
        chunk_bytes: CHUNK_SIZE,
        extent_bytes: opts.extent_bytes,
        raw_bytes,
        volumes: filled.volumes,
        logical_bytes: filled.logical_bytes,
        allocated_bytes: allocated * opts.extent_bytes,
        utilization_at_first_full: (allocated * opts.extent_bytes) as f64 / raw_bytes as f64,
        data_at_first_full: filled.logical_bytes as f64 / raw_bytes as f64,
        utilization_without_balancer: (allocated_of(&filled_hashed) * opts.extent_bytes) as f64 / raw_bytes as f64,
        max_fill_over_mean: max_fill / mean_fill,
        min_fill_over_mean: min_fill / mean_fill,
        remaps: map.remaps().len() as u64,
        balance_moves: balanced.moves as u64,
        map_json_bytes: serde_json::to_vec(&map).map_or(0, |v| v.len() as u64),
        place_micros_per_pg,
        added_nodes: add.nodes,
        moved_on_add_bytes: add.moved,
        minimum_on_add_bytes: add.minimum,
        moved_on_add_ratio: ratio(add.moved, add.minimum),
        failed_nodes_sampled: fail.samples,
        moved_on_fail_bytes: fail.moved,
        failed_node_bytes: fail.held,
        moved_on_fail_ratio: ratio(fail.moved, fail.held),
        rebuild_sources_min: sources_min,
        rebuild_sources_mean: sources_mean,
        rebuild_mbps: opts.rebuild_mbps,
        rebuild_seconds: rebuilt.seconds(opts.rebuild_mbps),
        rebuild_lost_bytes: rebuilt.lost_bytes,
        rebuild_bytes_read: rebuilt.read_bytes,
        rebuild_bytes_written: rebuilt.written_bytes,
        rebuild_nodes_reading: rebuilt.nodes_reading,
        rebuild_nodes_writing: rebuilt.nodes_writing,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Groups placed one by one to time placement and check the balancer:
/// batches of this many...
const SPOT_BATCH: u32 = 256;
/// ...this many times.
const SPOT_BATCHES: u32 = 16;

/// Places a spread of groups one by one, as a gateway would, and checks
/// them against the balancer's table. Returns microseconds per group in
/// the fastest batch: the machine may be shared, and the fastest batch is
/// the one least disturbed by others.
fn spot_check(map: &PlacementMap, table: &PlacementTable) -> Result<f64, SimError> {
    let placer = Placer::new(map);
    let n = (SPOT_BATCH * SPOT_BATCHES).min(map.pg_count());
    let step = map.pg_count() / n;
    let mut fastest = f64::INFINITY;
    for batch in (0..n).collect::<Vec<u32>>().chunks(SPOT_BATCH as usize) {
        let timer = Instant::now();
        for &k in batch {
            let pg = k * step;
            if placer.place(pg) != table.nodes(pg) {
                return Err(SimError::TableMismatch);
            }
        }
        fastest = fastest.min(timer.elapsed().as_secs_f64() * 1e6 / batch.len() as f64);
    }
    Ok(fastest)
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Lowest and highest drive fill (0..1) over the cluster, drives filled
/// most-free-first inside each node.
fn drive_fill_spread(node_extents: &[u64], drives: &[u64]) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi: f64 = 0.0;
    for &e in node_extents {
        for (alloc, cap) in most_free_first(drives, e).iter().zip(drives) {
            let f = *alloc as f64 / *cap as f64;
            lo = lo.min(f);
            hi = hi.max(f);
        }
    }
    (lo, hi)
}

/// Per node holding data: how many distinct other nodes hold copies of
/// the groups it holds. Minimum and mean over those nodes.
fn rebuild_sources(table: &PlacementTable, pg_extents: &[u64], nodes: usize) -> (u32, f64) {
    let mut peers: Vec<Vec<u32>> = vec![Vec::new(); nodes];
    for pg in 0..table.pg_count() {
        if pg_extents[pg as usize] == 0 {
            continue;
        }
        let row = table.nodes(pg);
        for a in row {
            peers[a.0 as usize].extend(row.iter().filter(|b| *b != a).map(|b| b.0));
        }
    }
    let counts: Vec<u32> = peers
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(|mut p| {
            p.sort_unstable();
            p.dedup();
            p.len() as u32 // <= nodes <= MAX_NODES
        })
        .collect();
    let min = counts.iter().copied().min().unwrap_or(0);
    let mean =
        if counts.is_empty() { 0.0 } else { counts.iter().map(|&c| f64::from(c)).sum::<f64>() / counts.len() as f64 };
    (min, mean)
}

/// What one change moved.
struct Moved {
    nodes: u32,
    samples: u32,
    moved: u64,
    /// The minimum that had to move (added) or the failed node's bytes.
    minimum: u64,
    held: u64,
}

/// Adds 1% more nodes (continuing the rack numbering), balances with the
/// previous table in view, and measures what moved against the new nodes'
/// fair share of everything stored.
fn add_nodes(
    map: &PlacementMap,
    table: &PlacementTable,
    opts: &SimOptions,
    bopts: &BalanceOptions,
    pg_bytes: &impl Fn(u32) -> u64,
) -> Result<Moved, SimError> {
    let added = opts.added_nodes();
    let mut grown = map.clone();
    grown.add_nodes((opts.nodes..opts.nodes + added).map(|i| sim_node(i, opts)))?;
    let balanced = balance(&grown, Some(table), bopts);
    let moved = table.moved(&balanced.table, pg_bytes);
    let stored: u64 = (0..table.pg_count()).map(|pg| pg_bytes(pg) * table.nodes(pg).len() as u64).sum();
    let minimum = (stored as f64 * f64::from(added) / f64::from(opts.nodes + added)) as u64;
    Ok(Moved { nodes: added, samples: 0, moved, minimum, held: 0 })
}

/// Fails `fail_samples` nodes one at a time (each from the same starting
/// map), balances, and keeps the worst `moved / held` and the slowest
/// rebuild.
fn fail_nodes(
    map: &PlacementMap,
    table: &PlacementTable,
    opts: &SimOptions,
    bopts: &BalanceOptions,
    pg_bytes: &impl Fn(u32) -> u64,
    rng: &mut Rng,
) -> Result<(Moved, Rebuild), SimError> {
    let mut worst = Moved { nodes: 0, samples: 0, moved: 0, minimum: 0, held: 0 };
    let mut slowest = Rebuild::default();
    let mut tried = Vec::new();
    while tried.len() < opts.fail_samples.min(opts.nodes) as usize {
        let victim = NodeId(rng.below(u64::from(opts.nodes)) as u32); // < nodes
        if tried.contains(&victim) {
            continue;
        }
        tried.push(victim);
        let mut failed = map.clone();
        failed.set_state(victim, NodeState::Down)?;
        let balanced = balance(&failed, Some(table), bopts);
        let moved = table.moved(&balanced.table, pg_bytes);
        let held: u64 = (0..table.pg_count()).filter(|&pg| table.holds(pg, victim)).map(pg_bytes).sum();
        if worst.samples == 0 || ratio(moved, held) > ratio(worst.moved, worst.held) {
            worst = Moved { moved, held, ..worst };
        }
        let r = rebuild(table, &balanced.table, victim, opts.protection.data_shards(), pg_bytes);
        if worst.samples == 0 || r.busiest_node_bytes > slowest.busiest_node_bytes {
            slowest = r;
        }
        worst.samples += 1;
    }
    Ok((worst, slowest))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// 60 nodes of 4 x 256 GiB in racks of 6, volumes of 8 GiB to 1 TiB.
    fn small() -> SimOptions {
        SimOptions {
            nodes: 60,
            drives_per_node: 4,
            drive_bytes: 256 * GIB,
            rack_size: 6,
            volume_min_bytes: 8 * GIB,
            volume_max_bytes: 1024 * GIB,
            threads: 2,
            ..SimOptions::default()
        }
    }

    #[test]
    fn a_small_cluster_fills_evenly_and_moves_little() {
        let r = run(&small()).expect("valid options");
        assert_eq!((r.nodes, r.drives, r.racks, r.pgs), (60, 240, 10, 2048));
        assert_eq!(r.raw_bytes, 60 * 4 * 256 * GIB);
        assert!(r.volumes > 10, "{} volumes", r.volumes);
        assert!(
            r.utilization_at_first_full > 0.97 && r.utilization_at_first_full <= 1.0,
            "{}",
            r.utilization_at_first_full
        );
        assert_eq!(r.allocated_bytes as f64 / r.raw_bytes as f64, r.utilization_at_first_full);
        // rep:3: allocated is three copies of what was written, give or
        // take the last extent of each volume.
        let copies = r.allocated_bytes as f64 / r.logical_bytes as f64;
        assert!((2.99..3.01).contains(&copies), "{copies}");
        assert!(r.max_fill_over_mean >= 1.0 && r.max_fill_over_mean < 1.03, "{}", r.max_fill_over_mean);
        assert!(r.min_fill_over_mean <= 1.0 && r.min_fill_over_mean > 0.95, "{}", r.min_fill_over_mean);
        assert_eq!(r.added_nodes, 1);
        assert!(r.moved_on_add_ratio > 0.8 && r.moved_on_add_ratio <= 1.1, "{}", r.moved_on_add_ratio);
        assert_eq!(r.failed_nodes_sampled, 3);
        assert!(r.moved_on_fail_ratio >= 1.0 && r.moved_on_fail_ratio <= 1.1, "{}", r.moved_on_fail_ratio);
        assert!(r.failed_node_bytes > 0 && r.moved_on_fail_bytes >= r.failed_node_bytes);
        // ~102 copies a node, 2 partners each, 59 other nodes.
        assert!(r.rebuild_sources_min > 40 && f64::from(r.rebuild_sources_min) <= r.rebuild_sources_mean);
        assert!((r.data_at_first_full - r.utilization_at_first_full / 3.0).abs() < 0.001, "{}", r.data_at_first_full);
        // A lost copy is read once; a balancer move is read and written once.
        assert_rebuild_reads(&r, 1);
        assert!(r.remaps > 0 && r.map_json_bytes > 1000);
        // Hashing alone fills the fullest node early.
        assert!(
            r.utilization_without_balancer < r.utilization_at_first_full - 0.05,
            "{}",
            r.utilization_without_balancer
        );
    }

    /// Rebuild figures of a failure: each lost slot is read `k` times and
    /// written once, a balancer move read and written once each.
    fn assert_rebuild_reads(r: &SimReport, k: u64) {
        assert!(r.rebuild_lost_bytes > 0, "{r:?}");
        let moves = r.rebuild_bytes_written - r.rebuild_lost_bytes;
        assert_eq!(r.rebuild_bytes_read, k * r.rebuild_lost_bytes + moves, "{r:?}");
        assert!(moves * 10 <= r.rebuild_lost_bytes, "balancer moves {moves} of {}", r.rebuild_lost_bytes);
        assert!(r.rebuild_nodes_writing > 1 && r.rebuild_nodes_writing < r.nodes, "{}", r.rebuild_nodes_writing);
        assert!(r.rebuild_nodes_reading >= r.rebuild_sources_min.min(r.nodes - 1) / 2, "{}", r.rebuild_nodes_reading);
        // No node can beat bandwidth x time, and the busiest does not
        // carry more than the lost bytes.
        let node_bytes_per_second = f64::from(r.rebuild_mbps) * 1e6;
        let busiest = r.rebuild_seconds * node_bytes_per_second;
        let per_node = (k * r.rebuild_lost_bytes) as f64 / f64::from(r.rebuild_nodes_reading);
        assert!(busiest >= per_node && busiest <= r.rebuild_bytes_read as f64, "{busiest} bytes on the busiest node");
    }

    #[test]
    fn erasure_coding_stores_shards_and_rebuilds_from_k_of_them() {
        // ec:4+2 over 18 nodes in 9 racks of 2: one shard per rack.
        let ec = SimOptions {
            nodes: 18,
            rack_size: 2,
            protection: "ec:4+2".parse().expect("valid"),
            volume_max_bytes: 256 * GIB,
            ..small()
        };
        let r = run(&ec).expect("valid options");
        assert_eq!((r.protection.as_str(), r.racks, r.pgs), ("ec:4+2", 9, 512));
        assert_eq!(r.pg_copies_per_node, 512.0 * 6.0 / 18.0);
        assert!(r.utilization_at_first_full > 0.95, "{}", r.utilization_at_first_full);
        // 6 shards of 16 MiB per 64 MiB chunk: 1.5 bytes per byte, plus
        // the partial last chunk of each volume rounded up to extents.
        let per_data = r.allocated_bytes as f64 / r.logical_bytes as f64;
        assert!((1.5..1.501).contains(&per_data), "{per_data}");
        let want = r.utilization_at_first_full * 4.0 / 6.0;
        assert!((r.data_at_first_full - want).abs() < 0.001, "{} vs {want}", r.data_at_first_full);
        // Every node outside its rack holds shards of a node's groups, its
        // rack mate none (one shard per rack).
        assert_eq!(r.rebuild_sources_min, 16);
        assert_rebuild_reads(&r, 4);
        // With exactly one rack per shard, a lost shard can only go to the
        // failed node's rack mate: one writer.
        let tight = run(&SimOptions { nodes: 12, ..ec.clone() }).expect("valid options");
        assert_eq!((tight.racks, tight.rebuild_nodes_writing), (6, 1));

        // Twice the bandwidth, half the time; nothing else changes.
        let fast = run(&SimOptions { rebuild_mbps: 2 * ec.rebuild_mbps, ..ec.clone() }).expect("valid");
        assert_eq!(fast.rebuild_seconds * 2.0, r.rebuild_seconds);
        assert!(fast.rebuild_seconds > 0.0);
        assert_eq!(
            (fast.rebuild_bytes_read, fast.rebuild_nodes_writing, fast.data_at_first_full),
            (r.rebuild_bytes_read, r.rebuild_nodes_writing, r.data_at_first_full)
        );
    }

    #[test]
    fn a_seed_replays_its_figures() {
        let strip = |mut r: SimReport| {
            (r.seconds, r.place_micros_per_pg) = (0.0, 0.0);
            r
        };
        let a = strip(run(&small()).expect("valid"));
        let b = strip(run(&SimOptions { threads: 1, ..small() }).expect("valid"));
        assert_eq!(a, b);
        let c = strip(run(&SimOptions { seed: 2, ..small() }).expect("valid"));
        assert_ne!(a.logical_bytes, c.logical_bytes);
    }

    #[test]
    fn a_cluster_without_enough_racks_is_refused_with_the_reason() {
        let e = run(&SimOptions { nodes: 12, ..small() }).expect_err("two racks of 6");
        assert_eq!(
            e.to_string(),
            "the modelled cluster cannot honour the protection: rep:3 needs 3 racks with up nodes; the cluster has 2 (r0, r1)"
        );
        assert!(matches!(run(&SimOptions { nodes: 0, ..small() }), Err(SimError::Option { option: "--nodes", .. })));
    }
}
