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
    /// Protection, e.g. `rep:3` or `ec:8+3`.
    pub protection: String,
    /// The seed of the run.
    pub seed: u64,
    /// Placement groups.
    pub pgs: u32,
    /// Mean group slots (copies or shards) per node.
    pub pg_copies_per_node: f64,
    /// Bytes per chunk.
    pub chunk_bytes: u64,
    /// Bytes per extent in the node store.
    pub extent_bytes: u64,
    /// Raw capacity: nodes x drives x drive bytes.
    pub raw_bytes: u64,
    /// Volumes written until the first drive filled (the last one partly).
    pub volumes: u64,
    /// Volume bytes written: the data, before copies or parity.
    pub logical_bytes: u64,
    /// Bytes allocated on drives (every copy or shard, in whole extents)
    /// when the first drive filled.
    pub allocated_bytes: u64,
    /// `allocated_bytes / raw_bytes` when the first drive filled.
    pub utilization_at_first_full: f64,
    /// `logical_bytes / raw_bytes` then: the data the cluster holds when
    /// its first drive is full, per raw byte (about the utilization over
    /// `rep:N`'s N or over `ec:K+M`'s (K+M)/K).
    pub data_at_first_full: f64,
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
    /// Rebuild bandwidth of one node assumed, MB/s, reading and writing
    /// at the same time.
    pub rebuild_mbps: u32,
    /// Seconds to rebuild a failed node at that bandwidth: the slowest of
    /// the sampled failures, whose other `rebuild_` figures follow. The
    /// busiest node's `max(read, written) / bandwidth`.
    pub rebuild_seconds: f64,
    /// Bytes that failed node held.
    pub rebuild_lost_bytes: u64,
    /// Bytes read to rebuild it: one surviving copy per lost copy, K
    /// surviving shards per lost shard, plus the balancer's moves.
    pub rebuild_bytes_read: u64,
    /// Bytes written: each lost slot once, plus the balancer's moves.
    pub rebuild_bytes_written: u64,
    /// Distinct nodes that read.
    pub rebuild_nodes_reading: u32,
    /// Distinct nodes that write (the substitutes placement gives).
    pub rebuild_nodes_writing: u32,
    /// Wall-clock seconds for the whole run.
    pub seconds: f64,
}
