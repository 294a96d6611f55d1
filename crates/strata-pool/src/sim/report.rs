//! What a simulation measured.

use serde::{Deserialize, Serialize};

/// The figures of one simulation run. Ratios are plain numbers (1.0 =
/// 100%); bytes are bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SimReport {
    /// Storage nodes modelled.
    pub nodes: u32,
    /// Drives in the cluster.
    pub drives: u64,
    /// Racks (failure domains).
    pub racks: u32,
    /// Drives per node.
    pub drives_per_node: u32,
    /// Bytes per drive.
    pub drive_bytes: u64,
    /// Protection, e.g. `rep:3`.
    pub protection: String,
    /// The seed of the run.
    pub seed: u64,
    /// Placement groups.
    pub pgs: u32,
    /// Mean group copies per node.
    pub pg_copies_per_node: f64,
    /// Bytes per chunk.
    pub chunk_bytes: u64,
    /// Bytes per extent in the node store.
    pub extent_bytes: u64,
    /// Raw capacity: nodes x drives x drive bytes.
    pub raw_bytes: u64,
    /// Volumes written until the first drive filled (the last one partly).
    pub volumes: u64,
    /// Volume bytes written (one copy).
    pub logical_bytes: u64,
    /// Bytes allocated on drives (every copy) when the first drive filled.
    pub allocated_bytes: u64,
    /// `allocated_bytes / raw_bytes` when the first drive filled.
    pub utilization_at_first_full: f64,
    /// The same with the balancer's remaps left out: hashing alone.
    pub utilization_without_balancer: f64,
    /// Fullest drive's fill over the mean drive fill, at that moment.
    pub max_fill_over_mean: f64,
    /// Emptiest drive's fill over the mean drive fill, at that moment.
    pub min_fill_over_mean: f64,
    /// The balancer's exceptions in the map.
    pub remaps: u64,
    /// Copies the balancer moved to balance the new cluster.
    pub balance_moves: u64,
    /// Size of the placement map as JSON (what etcd would store).
    pub map_json_bytes: u64,
    /// Microseconds to place one group with `Placer::place`: the mean of
    /// the fastest of 16 batches of 256 groups spread over the table (each
    /// checked against the balancer's table), wall clock.
    pub place_micros_per_pg: f64,
    /// Nodes added (1%) to measure movement.
    pub added_nodes: u32,
    /// Bytes moved when they were added (after balancing).
    pub moved_on_add_bytes: u64,
    /// The new nodes' fair share of the stored bytes: what must move.
    pub minimum_on_add_bytes: u64,
    /// `moved_on_add_bytes / minimum_on_add_bytes`.
    pub moved_on_add_ratio: f64,
    /// Nodes failed (one at a time) to measure movement.
    pub failed_nodes_sampled: u32,
    /// Bytes moved for the worst failed node (after balancing).
    pub moved_on_fail_bytes: u64,
    /// Bytes that node held.
    pub failed_node_bytes: u64,
    /// The highest `moved / held` over the sampled failures.
    pub moved_on_fail_ratio: f64,
    /// Fewest distinct nodes holding copies of one node's data, over every
    /// node: the sources a rebuild of that node reads from.
    pub rebuild_sources_min: u32,
    /// The same, averaged over nodes.
    pub rebuild_sources_mean: f64,
    /// Wall-clock seconds for the whole run.
    pub seconds: f64,
}
