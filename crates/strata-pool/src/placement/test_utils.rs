//! Clusters for tests.

use super::map::{FailureDomain, Node, PlacementMap};
use super::protection::Protection;

/// `nodes` nodes named `n{i}` with ids `0..nodes`, `rack_size` to a rack
/// (`rack=r{i / rack_size}`), each of weight `weight(i)`; `rep:copies`.
pub(crate) fn cluster(nodes: u32, rack_size: u32, copies: u8, pgs: u32, weight: impl Fn(u32) -> u64) -> PlacementMap {
    let protection = Protection::replicated(copies).expect("valid copies");
    cluster_with(protection, nodes, rack_size, pgs, weight)
}

/// [`cluster`] with any protection.
pub(crate) fn cluster_with(
    protection: Protection,
    nodes: u32,
    rack_size: u32,
    pgs: u32,
    weight: impl Fn(u32) -> u64,
) -> PlacementMap {
    let list = (0..nodes).map(|i| node(i, rack_size, weight(i))).collect();
    PlacementMap::new(protection, FailureDomain::default(), pgs, list).expect("valid map")
}

/// Node `i` as [`cluster`] makes it.
pub(crate) fn node(i: u32, rack_size: u32, weight: u64) -> Node {
    Node::new(i, format!("n{i}"), weight).with_label("rack", format!("r{}", i / rack_size.max(1)))
}
