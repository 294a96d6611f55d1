//! Every group's placement under one map, and what changes between two.
//!
//! A table is what a gateway caches per map epoch, what the balancer
//! works on, and what the simulator measures movement with. It stores
//! `width` slots per group; a group that could not be given `width` nodes
//! (fewer up nodes than copies) has its empty slots at the end.

use std::collections::BTreeMap;

use super::map::NodeId;

/// An empty slot.
const EMPTY: NodeId = NodeId(NodeId::MAX);

/// The nodes of every placement group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementTable {
    width: usize,
    /// `pg_count * width` slots, group-major.
    slots: Vec<NodeId>,
}

impl PlacementTable {
    pub(crate) fn empty(pg_count: u32, width: usize) -> PlacementTable {
        PlacementTable { width, slots: vec![EMPTY; pg_count as usize * width] }
    }

    /// Sets a group's nodes (at most `width`; more are ignored).
    pub(crate) fn set(&mut self, pg: u32, nodes: impl IntoIterator<Item = NodeId>) {
        let start = pg as usize * self.width;
        let row = &mut self.slots[start..start + self.width];
        row.fill(EMPTY);
        for (slot, n) in row.iter_mut().zip(nodes) {
            *slot = n;
        }
    }

    /// Number of groups.
    pub fn pg_count(&self) -> u32 {
        // Built from a u32 count.
        (self.slots.len() / self.width.max(1)) as u32
    }

    /// Slots per group.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The ordered nodes of group `pg` (empty past the last group).
    pub fn nodes(&self, pg: u32) -> &[NodeId] {
        let start = pg as usize * self.width;
        let Some(row) = self.slots.get(start..start + self.width) else {
            return &[];
        };
        let len = row.iter().position(|&n| n == EMPTY).unwrap_or(row.len());
        &row[..len]
    }

    /// True if group `pg` has a copy on `node`.
    pub fn holds(&self, pg: u32, node: NodeId) -> bool {
        self.nodes(pg).contains(&node)
    }

    /// Group copies per node (nodes holding none are absent).
    pub fn copies_per_node(&self) -> BTreeMap<NodeId, u64> {
        let mut m = BTreeMap::new();
        for &n in self.slots.iter().filter(|&&n| n != EMPTY) {
            *m.entry(n).or_insert(0) += 1;
        }
        m
    }

    /// Copies that `next` places on a node that did not hold them here,
    /// weighted per group by `bytes(pg)` (the bytes one copy of the group
    /// holds): the data that must move to go from this table to `next`.
    /// Groups are compared up to the smaller of the two counts.
    pub fn moved(&self, next: &PlacementTable, bytes: impl Fn(u32) -> u64) -> u64 {
        let groups = self.pg_count().min(next.pg_count());
        (0..groups)
            .map(|pg| {
                let before = self.nodes(pg);
                let arrivals = next.nodes(pg).iter().filter(|n| !before.contains(n)).count() as u64;
                arrivals * bytes(pg)
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_keep_their_order_and_trim_empty_slots() {
        let mut t = PlacementTable::empty(3, 3);
        t.set(0, [NodeId(5), NodeId(1), NodeId(9)]);
        t.set(1, [NodeId(2)]);
        assert_eq!(t.nodes(0), &[NodeId(5), NodeId(1), NodeId(9)]);
        assert_eq!(t.nodes(1), &[NodeId(2)]);
        assert_eq!(t.nodes(2), &[] as &[NodeId]);
        assert_eq!(t.nodes(3), &[] as &[NodeId], "past the end");
        assert_eq!(t.pg_count(), 3);
        assert!(t.holds(0, NodeId(1)) && !t.holds(1, NodeId(1)));
        assert_eq!(t.copies_per_node().get(&NodeId(2)), Some(&1));
    }

    #[test]
    fn movement_counts_arrivals_weighted_by_group_bytes() {
        let mut a = PlacementTable::empty(2, 3);
        a.set(0, [NodeId(1), NodeId(2), NodeId(3)]);
        a.set(1, [NodeId(1), NodeId(2), NodeId(3)]);
        let mut b = a.clone();
        // Reordering moves nothing; replacing one node moves one copy.
        b.set(0, [NodeId(3), NodeId(2), NodeId(1)]);
        b.set(1, [NodeId(1), NodeId(4), NodeId(3)]);
        assert_eq!(a.moved(&b, |pg| if pg == 1 { 10 } else { 1000 }), 10);
        assert_eq!(a.moved(&a, |_| 1), 0);
    }
}
