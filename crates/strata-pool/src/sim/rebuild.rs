//! Rebuilding a failed node: which nodes read and write how much, and how
//! long that takes at a given bandwidth per node.
//!
//! # The model
//!
//! The input is the move the simulator already measures for a failure:
//! the placement before, and the balanced placement with the node down.
//! Placement keeps slot positions, so every slot whose node changed is
//! one of:
//!
//! - **a lost slot** (the failed node's copy or shard): rebuilt on the
//!   slot's new node from `data_shards` surviving slots of the group (the
//!   group's other nodes before the failure): one surviving copy for
//!   `rep:N`, K surviving shards for `ec:K+M`. Each source reads one
//!   slot's bytes; the new node writes one slot's bytes. Sources are
//!   spread evenly: groups are taken in order, and each reads from the
//!   survivors that have read the fewest bytes so far (ties to the lower
//!   slot), as a rebuild scheduler that knows every node's queue would. A
//!   group with fewer than `data_shards` survivors (`rep:1`) has lost the
//!   data: nothing is read or written for it;
//! - **a balancer move** (a live node's slot handed to another): the old
//!   node reads its slot, the new one writes it, as any copy.
//!
//! Every node reads and writes at the same time, each at up to the given
//! bandwidth (full duplex: drives and NIC are taken to do both at that
//! rate, e.g. 1,000 MB/s of reads and 1,000 MB/s of writes), all nodes in
//! parallel and from the first second, so the rebuild ends when the
//! busiest node is done: `max over nodes of max(read, written) /
//! bandwidth`.
//!
//! Left out: the network (a decoding `ec` node receives K shards for each
//! one it writes; here only what drives read and write counts), decode
//! CPU, foreground I/O competing for the same bandwidth, and finer-grained
//! rebuild (a lost slot is one group's worth of data rebuilt by one node,
//! so the writers are at most the failed node's group slots).

use super::options::MB;
use crate::placement::{NodeId, PlacementTable};

/// What rebuilding one failed node costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Rebuild {
    /// Bytes the failed node held (every slot of it).
    pub(crate) lost_bytes: u64,
    /// Bytes read, over all nodes.
    pub(crate) read_bytes: u64,
    /// Bytes written, over all nodes.
    pub(crate) written_bytes: u64,
    /// Distinct nodes that read.
    pub(crate) nodes_reading: u32,
    /// Distinct nodes that write (the substitutes, and the receivers of
    /// balancer moves).
    pub(crate) nodes_writing: u32,
    /// The busiest node's `max(read, written)`.
    pub(crate) busiest_node_bytes: u64,
}

impl Rebuild {
    /// Seconds the rebuild takes at `mbps` MB/s a node (full duplex).
    pub(crate) fn seconds(&self, mbps: u32) -> f64 {
        self.busiest_node_bytes as f64 / (f64::from(mbps) * MB as f64)
    }
}

/// The rebuild that takes `before` to `after` once `failed` is down.
/// `slot_bytes(pg)` is what one slot of group `pg` holds; `data_shards` is
/// the slots a lost one is rebuilt from.
pub(crate) fn rebuild(
    before: &PlacementTable,
    after: &PlacementTable,
    failed: NodeId,
    data_shards: usize,
    slot_bytes: impl Fn(u32) -> u64,
) -> Rebuild {
    let ids = (0..before.pg_count()).flat_map(|pg| before.nodes(pg).iter().chain(after.nodes(pg)));
    let nodes = ids.map(|n| n.0 as usize + 1).max().unwrap_or(0);
    let (mut read, mut written) = (vec![0u64; nodes], vec![0u64; nodes]);
    let mut lost_bytes = 0;
    let mut survivors: Vec<NodeId> = Vec::new();
    for pg in 0..before.pg_count().min(after.pg_count()) {
        let bytes = slot_bytes(pg);
        let (old, new) = (before.nodes(pg), after.nodes(pg));
        if bytes == 0 {
            continue;
        }
        survivors.clear();
        survivors.extend(old.iter().copied().filter(|&n| n != failed));
        lost_bytes += bytes * old.iter().filter(|&&n| n == failed).count() as u64;
        for (slot, &to) in new.iter().enumerate() {
            if old.contains(&to) {
                continue; // positions are kept: it holds this slot already
            }
            match old.get(slot) {
                Some(&from) if from != failed => read[from.0 as usize] += bytes,
                _ if survivors.len() < data_shards => continue, // lost for good
                _ => {
                    // Stable: equal loads keep slot order.
                    survivors.sort_by_key(|n| read[n.0 as usize]);
                    for source in &survivors[..data_shards] {
                        read[source.0 as usize] += bytes;
                    }
                }
            }
            written[to.0 as usize] += bytes;
        }
    }
    let count = |v: &[u64]| v.iter().filter(|&&b| b > 0).count() as u32; // <= MAX_NODES
    Rebuild {
        lost_bytes,
        read_bytes: read.iter().sum(),
        written_bytes: written.iter().sum(),
        nodes_reading: count(&read),
        nodes_writing: count(&written),
        busiest_node_bytes: read.iter().zip(&written).map(|(&r, &w)| r.max(w)).max().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: &[[u32; 3]]) -> PlacementTable {
        let mut t = PlacementTable::empty(rows.len() as u32, 3);
        for (pg, row) in rows.iter().enumerate() {
            t.set(pg as u32, row.iter().map(|&n| NodeId(n)));
        }
        t
    }

    /// Node 0 fails. Group 0 (10 bytes a slot) loses slot 0 to node 5;
    /// group 1 (100 bytes) loses slot 1 to node 6, and the balancer also
    /// moves its slot 2 from node 4 to node 7.
    fn failure() -> (PlacementTable, PlacementTable) {
        (table(&[[0, 1, 2], [3, 0, 4]]), table(&[[5, 1, 2], [3, 6, 7]]))
    }

    fn bytes(pg: u32) -> u64 {
        if pg == 0 { 10 } else { 100 }
    }

    #[test]
    fn a_lost_shard_is_read_from_k_survivors_and_a_move_from_its_holder() {
        let (before, after) = failure();
        // ec:2+1: group 0 reads nodes 1 and 2; group 1 reads 3 and 4, then
        // node 4 again for the move.
        let r = rebuild(&before, &after, NodeId(0), 2, bytes);
        assert_eq!(r.lost_bytes, 110);
        assert_eq!(r.read_bytes, 2 * 110 + 100, "K x lost, plus the move once");
        assert_eq!(r.written_bytes, 110 + 100);
        assert_eq!((r.nodes_reading, r.nodes_writing), (4, 3));
        assert_eq!(r.busiest_node_bytes, 200, "node 4 reads a shard and its moved slot");
    }

    #[test]
    fn a_lost_copy_is_read_once() {
        let (before, after) = failure();
        // rep:3: group 0 reads node 1, group 1 node 3; node 4 sends its
        // moved copy.
        let r = rebuild(&before, &after, NodeId(0), 1, bytes);
        assert_eq!((r.lost_bytes, r.read_bytes, r.written_bytes), (110, 110 + 100, 210));
        assert_eq!((r.nodes_reading, r.nodes_writing, r.busiest_node_bytes), (3, 3, 100));
    }

    #[test]
    fn sources_are_the_survivors_that_have_read_least() {
        // Three groups lose node 0's slot; node 1 survives in each. The
        // first survivor, or a rotation by group, would read node 1 two or
        // three times; least-read-first reads nodes 1, 3 and 4 once each.
        let before = table(&[[0, 1, 2], [0, 3, 1], [0, 1, 4]]);
        let after = table(&[[5, 1, 2], [6, 3, 1], [7, 1, 4]]);
        let r = rebuild(&before, &after, NodeId(0), 1, |_| 10);
        assert_eq!((r.read_bytes, r.nodes_reading, r.busiest_node_bytes), (30, 3, 10));
        // ec:2+1: every group reads both survivors, node 1 three times.
        let r = rebuild(&before, &after, NodeId(0), 2, |_| 10);
        assert_eq!((r.read_bytes, r.nodes_reading, r.busiest_node_bytes), (60, 4, 30));
    }

    #[test]
    fn time_is_the_busiest_node_at_the_bandwidth() {
        let r = Rebuild { busiest_node_bytes: 3_000_000_000, ..Rebuild::default() };
        assert_eq!(r.seconds(1000), 3.0);
        assert_eq!(r.seconds(2000), 1.5);
    }

    #[test]
    fn without_enough_survivors_nothing_is_rebuilt() {
        // rep:1 and ec:3+1 after losing a second node: data is gone.
        let before = table(&[[0, 1, 2]]);
        let after = table(&[[5, 1, 2]]);
        let r = rebuild(&before, &after, NodeId(0), 3, |_| 10);
        assert_eq!((r.lost_bytes, r.read_bytes, r.written_bytes, r.busiest_node_bytes), (10, 0, 0, 0));
        let unchanged = rebuild(&before, &before, NodeId(9), 1, |_| 10);
        assert_eq!(unchanged, Rebuild::default());
    }
}
