//! Where a volume's chunks live, and how a volume moves to other nodes.
//!
//! - [`Layout`]: the placement seen from one volume (the nodes of each
//!   chunk, in placement order); [`PlacementLayout`] is the one a
//!   placement map gives.
//! - [`MovePlan`]: what a move from one layout to another asks of the
//!   nodes; [`NextLayout`]: where a move goes, as the metadata store
//!   records it; [`Moving`]: a move as an owner serves it.
//!
//! Pure values: no I/O and no etcd. The volume's state in etcd is
//! [`crate::cluster`]'s; what an owner does with a layout is
//! `crate::owner`'s.
//!
//! # Invariants
//!
//! - A layout answers the same nodes, in the same order, for a chunk
//!   every time it is asked: reads pick a replica by that order, and an
//!   erasure-coded chunk's shard `i` is its `i`-th node.
//! - A [`PlacementLayout`] never moves a chunk by itself when a node
//!   fails; only a move (a new layout) does.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;

use crate::drl::NodeId;
use crate::regions::Regions;

/// Where a volume's chunks live: the placement, seen from one volume.
pub trait Layout: Send + Sync + Debug {
    /// Bytes per chunk, a power of two and a multiple of the block size.
    fn chunk_bytes(&self) -> u64;
    /// The nodes that hold chunk `chunk`, in placement order.
    fn replicas(&self, chunk: u64) -> Vec<NodeId>;
    /// True if `node` holds chunk `chunk` (the read path asks this of the
    /// local node on every read: implement it without allocating).
    fn holds(&self, chunk: u64, node: NodeId) -> bool {
        self.replicas(chunk).contains(&node)
    }
    /// The distinct node lists (in placement order) of the first `chunks`
    /// chunks. The default looks at every chunk; a layout whose chunks
    /// repeat a few groups (placement groups) looks at each group once.
    fn groups(&self, chunks: u64) -> Vec<Vec<NodeId>> {
        let mut seen = std::collections::BTreeSet::new();
        (0..chunks).map(|c| self.replicas(c)).filter(|g| seen.insert(g.clone())).collect()
    }
}

/// The first group of `layout`'s first `chunks` chunks that has fewer
/// than `min` of its nodes in `in_sync` (or than all of them, for a group
/// smaller than `min`), if any: the check behind "never below the
/// minimum" (see `owner`).
pub fn short_group(layout: &dyn Layout, chunks: u64, in_sync: &BTreeSet<NodeId>, min: usize) -> Option<Vec<NodeId>> {
    layout.groups(chunks).into_iter().find(|g| g.iter().filter(|n| in_sync.contains(n)).count() < min.min(g.len()))
}

/// A volume's [`Layout`] from a placement map: chunk
/// `i` lives on the first `copies` nodes of its placement group.
///
/// A volume keeps the map it was created under (its `map_epoch`): nodes
/// that fail stay in its layout as stale replicas until they come back or
/// are rebuilt elsewhere, so a node's failure never moves a chunk by
/// itself. Volumes with fewer copies than the map's width take the first
/// ones of each group: distinct nodes in distinct failure domains, as
/// placement guarantees for the whole group.
#[derive(Debug)]
pub struct PlacementLayout {
    volume: u64,
    copies: usize,
    table: Arc<crate::placement::PlacementTable>,
    /// Groups whose nodes are listed in another order than the table's.
    slots: BTreeMap<u32, Vec<NodeId>>,
}

impl PlacementLayout {
    /// The layout of `volume` with `copies` copies under `table`.
    pub fn new(volume: u64, copies: usize, table: Arc<crate::placement::PlacementTable>) -> PlacementLayout {
        PlacementLayout { volume, copies: copies.max(1), table, slots: BTreeMap::new() }
    }

    /// The same, with the groups of `slots` in the order given there (a
    /// volume's [`VolumeState::slots`](crate::cluster::VolumeState::slots)).
    pub fn with_slots(mut self, slots: BTreeMap<u32, Vec<NodeId>>) -> PlacementLayout {
        self.slots = slots;
        self
    }

    /// The groups listed in another order than the table's.
    pub fn slots(&self) -> &BTreeMap<u32, Vec<NodeId>> {
        &self.slots
    }

    fn pg_of(&self, chunk: u64) -> u32 {
        crate::placement::ChunkId { volume: self.volume, index: chunk }.pg(self.table.pg_count())
    }

    /// The nodes of group `pg`, in slot order.
    fn group(&self, pg: u32) -> &[NodeId] {
        if let Some(nodes) = self.slots.get(&pg) {
            return nodes;
        }
        let all = self.table.nodes(pg);
        &all[..all.len().min(self.copies)]
    }

    /// The nodes of `chunk`, in slot order.
    fn nodes(&self, chunk: u64) -> &[NodeId] {
        self.group(self.pg_of(chunk))
    }

    /// The layout under `table` (a newer map) that keeps every node in the
    /// slot it has here when the new map still places it in the group,
    /// and puts the group's other nodes in the slots left, in the new
    /// map's order. Erasure coding needs this: a shard that changes slot
    /// must be rebuilt, and placement order shifts when a node is added in
    /// front of others (or, with fewer nodes than slots, is lost). The
    /// groups of the first `chunks` chunks are kept; the others follow the
    /// table.
    pub fn moved_to(&self, table: Arc<crate::placement::PlacementTable>, chunks: u64) -> PlacementLayout {
        let next = PlacementLayout::new(self.volume, self.copies, table);
        let pgs: BTreeSet<u32> = (0..chunks.min(u64::from(next.table.pg_count()))).map(|c| self.pg_of(c)).collect();
        let mut slots = BTreeMap::new();
        for pg in pgs {
            let (before, wanted) = (self.group(pg), next.group(pg));
            let mut placed: Vec<Option<NodeId>> =
                (0..wanted.len()).map(|i| before.get(i).copied().filter(|n| wanted.contains(n))).collect();
            let mut rest =
                wanted.iter().copied().filter(|n| !placed.contains(&Some(*n))).collect::<Vec<_>>().into_iter();
            for slot in placed.iter_mut().filter(|s| s.is_none()) {
                *slot = rest.next();
            }
            let stable: Vec<NodeId> = placed.into_iter().flatten().collect();
            if stable != wanted {
                slots.insert(pg, stable);
            }
        }
        next.with_slots(slots)
    }
}

impl Layout for PlacementLayout {
    fn chunk_bytes(&self) -> u64 {
        crate::placement::CHUNK_SIZE
    }

    fn replicas(&self, chunk: u64) -> Vec<NodeId> {
        self.nodes(chunk).to_vec()
    }

    fn holds(&self, chunk: u64, node: NodeId) -> bool {
        self.nodes(chunk).contains(&node)
    }

    fn groups(&self, chunks: u64) -> Vec<Vec<NodeId>> {
        // Chunk `i` is in group `(h + i) mod groups`: the first `groups`
        // chunks meet every group the volume uses.
        let mut seen = BTreeSet::new();
        (0..chunks.min(u64::from(self.table.pg_count())))
            .map(|c| self.nodes(c).to_vec())
            .filter(|g| seen.insert(g.clone()))
            .collect()
    }
}

/// What moving a volume from one layout to another asks of its nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MovePlan {
    /// Nodes that hold chunks under the new layout that they did not hold
    /// under the old one, each with the regions of those chunks (to fill).
    pub joining: Vec<(NodeId, crate::regions::RegionSet)>,
    /// Every node that holds a chunk under the new layout.
    pub holders: BTreeSet<NodeId>,
    /// Nodes that keep holding some chunks but leave others, each with the
    /// byte ranges of its device those others took (to free).
    pub leaving: Vec<(NodeId, Vec<std::ops::Range<u64>>)>,
    /// The fewest nodes of any chunk that keep holding it (in the same
    /// position, erasure-coded) through the move: what its joining nodes
    /// are filled from.
    pub kept: usize,
}

impl MovePlan {
    /// The plan of a move from `old` to `new` of a volume whose nodes hold
    /// `span` bytes each, cut into `regions`. `positional` (erasure
    /// coding): a node holds a chunk's shard *position*, so a node moved
    /// to another position of the same chunk joins it too.
    pub fn new(old: &dyn Layout, new: &dyn Layout, span: u64, regions: Regions, positional: bool) -> MovePlan {
        let chunk_bytes = new.chunk_bytes();
        let mut joining: std::collections::BTreeMap<NodeId, crate::regions::RegionSet> = Default::default();
        let mut left: std::collections::BTreeMap<NodeId, Vec<std::ops::Range<u64>>> = Default::default();
        let mut holders = BTreeSet::new();
        let mut kept = usize::MAX;
        for chunk in 0..span.div_ceil(chunk_bytes) {
            let (before, after) = (old.replicas(chunk), new.replicas(chunk));
            let mut stay = 0;
            for (pos, &n) in after.iter().enumerate() {
                holders.insert(n);
                let held = if positional { before.get(pos) == Some(&n) } else { before.contains(&n) };
                stay += usize::from(held);
                if !held {
                    let set = joining.entry(n).or_default();
                    for r in regions.touched(chunk * chunk_bytes, chunk_bytes.min(span - chunk * chunk_bytes)) {
                        set.insert(r);
                    }
                }
            }
            kept = kept.min(stay);
            // A node that moves to another position of the chunk keeps
            // using the chunk's range of its device.
            let at = chunk * chunk_bytes;
            for &n in before.iter().filter(|n| !after.contains(n)) {
                left.entry(n).or_default().push(at..(at + chunk_bytes).min(span));
            }
        }
        let leaving = left.into_iter().filter(|(n, _)| holders.contains(n)).collect();
        MovePlan {
            joining: joining.into_iter().collect(),
            holders,
            leaving,
            kept: if kept == usize::MAX { 0 } else { kept },
        }
    }

    /// True when the move changes nothing.
    pub fn is_empty(&self) -> bool {
        self.joining.is_empty()
    }
}

/// Where a volume is moving: placement map `map_epoch`, with the
/// erasure-coded `slots` (see [`crate::cluster::VolumeState::slots`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct NextLayout {
    /// The placement map epoch the volume moves to.
    pub map_epoch: u64,
    /// Groups whose shard slots differ from that map's order.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub slots: std::collections::BTreeMap<u32, Vec<NodeId>>,
}

/// A move in progress, as an owner serves it: the volume is still placed
/// (read) by its current layout while the nodes that join chunks under
/// `next` take every write there and are filled; then it switches.
#[derive(Clone)]
pub struct Moving {
    /// The layout the volume moves to.
    pub next: Arc<dyn Layout>,
    /// Where that is, as the metadata store records it.
    pub target: NextLayout,
    /// What the move asks of the nodes (from the current layout to `next`).
    pub plan: MovePlan,
    /// Erasure coding: a node joins a chunk at a slot, and mirrors the
    /// node that holds that slot now.
    pub positional: bool,
}

impl Debug for Moving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Moving").field("target", &self.target).field("plan", &self.plan).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::{FailureDomain, Node, PlacementMap, Placer, Protection};
    use crate::regions::Regions;

    #[test]
    fn a_move_keeps_every_shard_that_stays_in_the_group_in_its_slot() {
        use crate::placement::NodeState;
        // Five nodes and twelve slots: a lost node has no substitute, and
        // the map's later slots close up.
        let nodes: Vec<Node> =
            (0..5).map(|i| Node::new(i, format!("n{i}"), 1 << 40).with_label("rack", format!("r{i}"))).collect();
        let wide = Protection::erasure_coded(8, 4).unwrap();
        let map = PlacementMap::new(wide, FailureDomain::default(), 64, nodes).unwrap();
        let before = PlacementLayout::new(9, 3, Arc::new(Placer::new(&map).table()));
        let mut down = map.clone();
        down.set_state(NodeId(2), NodeState::Down).unwrap();
        let mut grown = map.clone();
        grown.add_nodes([Node::new(5, "n5", 1 << 40).with_label("rack", "r5")]).unwrap();
        let regions = Regions::for_volume(64 * crate::placement::CHUNK_SIZE, crate::placement::CHUNK_SIZE);
        let mut shifted = 0;
        for next in [down, grown] {
            let table = Arc::new(Placer::new(&next).table());
            let plain = PlacementLayout::new(9, 3, table.clone());
            let after = before.moved_to(table, 64);
            for chunk in 0..64 {
                let (b, a, p) = (before.replicas(chunk), after.replicas(chunk), plain.replicas(chunk));
                let set = |v: &[NodeId]| v.iter().copied().collect::<BTreeSet<_>>();
                assert_eq!(set(&a), set(&p), "chunk {chunk}: the map's nodes, in other slots");
                let kept = (0..3).filter(|&i| a[i] == b[i]).count();
                let stay = b.iter().filter(|n| p.contains(n)).count();
                assert_eq!(kept, stay, "chunk {chunk}: {b:?} -> {a:?} (map order {p:?})");
                shifted += usize::from((0..3).filter(|&i| p[i] == b[i]).count() < stay);
            }
            let plan = MovePlan::new(&before, &after, 64 * crate::placement::CHUNK_SIZE, regions, true);
            assert!(plan.kept >= 2, "one node changed per group at most: kept {}", plan.kept);
        }
        assert!(shifted > 0, "the map's own order shifts some shards; the test would prove nothing");
    }

    #[test]
    fn a_layout_gives_each_chunk_distinct_nodes_in_distinct_racks() {
        let nodes = (0..6).map(|i| Node::new(i, format!("n{i}"), 1 << 40).with_label("rack", format!("r{}", i / 2)));
        let map = PlacementMap::new(Protection::default(), FailureDomain::default(), 64, nodes.collect()).unwrap();
        let table = Arc::new(Placer::new(&map).table());
        let rack = |n: NodeId| n.0 / 2;
        let rep3 = PlacementLayout::new(7, 3, table.clone());
        let rep2 = PlacementLayout::new(7, 2, table);
        let mut seen = BTreeSet::new();
        for chunk in 0..64 {
            let nodes = rep3.replicas(chunk);
            assert_eq!(nodes.len(), 3);
            assert_eq!(nodes.iter().map(|&n| rack(n)).collect::<BTreeSet<_>>().len(), 3, "chunk {chunk}: {nodes:?}");
            assert_eq!(rep2.replicas(chunk), nodes[..2].to_vec(), "rep:2 is the prefix");
            assert_eq!(rep3.replicas(chunk), nodes, "stable");
            seen.insert(nodes[0]);
        }
        assert!(seen.len() >= 4, "chunks spread their first copies: {seen:?}");
    }
}
