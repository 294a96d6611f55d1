//! The placement map: the one serialisable value placement is a function of.
//!
//! It holds the nodes (stable id, name, weight = capacity in bytes,
//! failure-domain labels, state), the protection, the failure-domain key,
//! the placement-group count, the balancer's exception table ([`Remap`]s)
//! and an epoch. The cluster stores it (in etcd, by others) and every
//! gateway and node computes the same placement from the same map with
//! [`Placer`](super::Placer); nothing else is consulted.
//!
//! # Invariants (checked by every constructor, mutator and by `Deserialize`)
//!
//! - node ids are unique and below [`NodeId::MAX`]; names are unique and
//!   non-empty; weights are positive;
//! - every node carries the failure-domain label (unless the domain is the
//!   node itself);
//! - the placement-group count is a power of two in 1..=[`MAX_PG_COUNT`]
//!   (a power of two so that a later split of every group p into p and
//!   p + count moves chunks only from a group to its child);
//! - remaps name existing nodes and groups, never map a node to itself,
//!   and are unique per (group, from) and sorted by it;
//! - `algorithm` is [`ALGORITHM`]: a map written for another placement
//!   algorithm is refused rather than silently placed differently.
//!
//! So a `PlacementMap` value, however it was obtained, is always safe to
//! place with: the placement code has no error paths and no panics.
//!
//! # Node states
//!
//! `up` nodes hold data. `down` (failed, may come back) and `out`
//! (drained by the operator) nodes hold none; placement treats both the
//! same way: they keep their place in the hash contests, and only the
//! copies they would hold are given to other nodes. That is what keeps a
//! failure's movement to exactly the failed node's data (see
//! `docs/pool.md`). Deleting a node from the map instead moves the same
//! amount, but also drops the remaps that name it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::protection::Protection;

/// The placement algorithm this code implements. Stored in the map; bump
/// it for any change that places any group differently.
pub const ALGORITHM: u32 = 1;

/// The most nodes a map may hold.
pub const MAX_NODES: usize = 1 << 16;

/// The largest placement-group count.
pub const MAX_PG_COUNT: u32 = 1 << 22;

/// A node's stable identity. Ids are never reused for another machine:
/// they key the hash contests, so a node keeps its data only as long as it
/// keeps its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u32);

impl NodeId {
    /// Ids must be below this value (`u32::MAX` marks an empty slot in a
    /// [`PlacementTable`](super::PlacementTable)).
    pub const MAX: u32 = u32::MAX;
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Whether a node holds data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Serving: holds data.
    #[default]
    Up,
    /// Failed or unreachable; may come back. Holds no data; its copies are
    /// placed elsewhere.
    Down,
    /// Drained by the operator. Holds no data, like `down`.
    Out,
    /// Removed by the operator after a drain or a rebuild: holds no data
    /// and is no longer shown, but keeps its place in the contests, so
    /// that removing it moves nothing (and erasure-coded shards keep their
    /// positions).
    Removed,
}

impl NodeState {
    /// True if placement may put data on a node in this state.
    pub fn holds_data(self) -> bool {
        matches!(self, NodeState::Up)
    }
}

/// One storage node as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// Stable identity (see [`NodeId`]).
    pub id: NodeId,
    /// Name for people and messages, unique in the map.
    pub name: String,
    /// Capacity in bytes; data is spread in proportion to it.
    pub weight: u64,
    /// Labels such as `rack=r1`, `pod=p1`; the failure-domain key picks one.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Up, down or out.
    #[serde(default)]
    pub state: NodeState,
}

impl Node {
    /// An up node without labels.
    pub fn new(id: u32, name: impl Into<String>, weight: u64) -> Node {
        Node { id: NodeId(id), name: name.into(), weight, labels: BTreeMap::new(), state: NodeState::Up }
    }

    /// Adds (or replaces) a label.
    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Node {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Sets the state.
    pub fn with_state(mut self, state: NodeState) -> Node {
        self.state = state;
        self
    }
}

/// The failure domain copies of one group are spread over.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum FailureDomain {
    /// Each node is its own domain (written `node`).
    Node,
    /// Nodes sharing the value of this label share a domain (`rack`, `pod`).
    Label(String),
}

impl Default for FailureDomain {
    /// `rack`.
    fn default() -> FailureDomain {
        FailureDomain::Label("rack".into())
    }
}

impl FailureDomain {
    /// `node` or the label key, e.g. `rack`; `node` is the reserved word.
    ///
    /// # Errors
    ///
    /// [`MapError::EmptyFailureDomain`] for an empty key.
    pub fn parse(key: &str) -> Result<FailureDomain, MapError> {
        match key.trim() {
            "" => Err(MapError::EmptyFailureDomain),
            "node" => Ok(FailureDomain::Node),
            k => Ok(FailureDomain::Label(k.to_owned())),
        }
    }

    /// The plural used in messages: `racks`, `nodes`.
    pub fn plural(&self) -> String {
        format!("{self}s")
    }
}

impl fmt::Display for FailureDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureDomain::Node => f.write_str("node"),
            FailureDomain::Label(k) => f.write_str(k),
        }
    }
}

impl TryFrom<String> for FailureDomain {
    type Error = MapError;
    fn try_from(s: String) -> Result<FailureDomain, MapError> {
        FailureDomain::parse(&s)
    }
}

impl From<FailureDomain> for String {
    fn from(d: FailureDomain) -> String {
        d.to_string()
    }
}

/// One balancer exception: in group `pg`, the copy the hash gives to node
/// `from` goes to node `to` instead (Ceph calls these upmap items).
///
/// It applies only while `from` is in the group's hashed set, `to` is not,
/// and the move does not crowd the failure domains more than the hash did;
/// otherwise it is ignored (stale), so a remap can never break a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Remap {
    /// Placement group.
    pub pg: u32,
    /// The node the hash chose.
    pub from: NodeId,
    /// The node that holds the copy instead.
    pub to: NodeId,
}

/// Why a map (or a change to one) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MapError {
    /// Written for another placement algorithm.
    #[error("placement map uses algorithm {found}; this build places with algorithm {supported}")]
    UnsupportedAlgorithm {
        /// The map's algorithm.
        found: u32,
        /// The one this code implements.
        supported: u32,
    },
    /// More nodes than [`MAX_NODES`].
    #[error("placement map has {count} nodes; the most supported is {max}")]
    TooManyNodes {
        /// Nodes in the map.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// Two nodes share an id.
    #[error("node id {0} appears twice; ids must be unique")]
    DuplicateNodeId(NodeId),
    /// An id at or above [`NodeId::MAX`].
    #[error("node id {0} is reserved; ids must be below {max}", max = NodeId::MAX)]
    ReservedNodeId(NodeId),
    /// A node without a name.
    #[error("node {0} has an empty name")]
    EmptyName(NodeId),
    /// Two nodes share a name.
    #[error("node name {0:?} appears twice; names must be unique")]
    DuplicateName(String),
    /// A node with weight 0.
    #[error("node {0:?} has weight 0; give its capacity in bytes, or mark it out to keep data off it")]
    ZeroWeight(String),
    /// A node lacks the failure-domain label.
    #[error("node {node:?} has no {key:?} label; every node needs one when the failure domain is {key}")]
    MissingLabel {
        /// The node's name.
        node: String,
        /// The failure-domain key.
        key: String,
    },
    /// An empty failure-domain key.
    #[error("the failure domain is empty; use a label key such as rack, or node")]
    EmptyFailureDomain,
    /// A placement-group count that is 0, too large, or not a power of two.
    #[error("placement-group count {0} must be a power of two from 1 to {max}", max = MAX_PG_COUNT)]
    PgCount(u32),
    /// A remap for a group that does not exist.
    #[error("remap for placement group {pg}, but the map has {pg_count} groups")]
    RemapPgOutOfRange {
        /// The group.
        pg: u32,
        /// Groups in the map.
        pg_count: u32,
    },
    /// A remap naming a node that is not in the map.
    #[error("remap for placement group {pg} names node {node}, which is not in the map")]
    RemapUnknownNode {
        /// The group.
        pg: u32,
        /// The unknown node.
        node: NodeId,
    },
    /// A remap from a node to itself.
    #[error("remap for placement group {pg} maps node {node} to itself")]
    RemapToItself {
        /// The group.
        pg: u32,
        /// The node.
        node: NodeId,
    },
    /// Two remaps for the same (group, from).
    #[error("two remaps for placement group {pg} from node {from}")]
    DuplicateRemap {
        /// The group.
        pg: u32,
        /// The node both move away from.
        from: NodeId,
    },
    /// A node id that is not in the map.
    #[error("node {0} is not in the map")]
    UnknownNode(NodeId),
}

/// Everything placement is a function of. See the module doc for the
/// invariants every value upholds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "MapRecord", into = "MapRecord")]
pub struct PlacementMap {
    epoch: u64,
    protection: Protection,
    failure_domain: FailureDomain,
    pg_count: u32,
    /// Sorted by id.
    nodes: Vec<Node>,
    /// Sorted by (pg, from).
    remaps: Vec<Remap>,
}

/// The serialised form: the fields plus the algorithm version.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MapRecord {
    algorithm: u32,
    epoch: u64,
    protection: Protection,
    failure_domain: FailureDomain,
    pg_count: u32,
    nodes: Vec<Node>,
    #[serde(default)]
    remaps: Vec<Remap>,
}

impl TryFrom<MapRecord> for PlacementMap {
    type Error = MapError;
    fn try_from(r: MapRecord) -> Result<PlacementMap, MapError> {
        if r.algorithm != ALGORITHM {
            return Err(MapError::UnsupportedAlgorithm { found: r.algorithm, supported: ALGORITHM });
        }
        let mut map = PlacementMap::new(r.protection, r.failure_domain, r.pg_count, r.nodes)?;
        map.epoch = r.epoch;
        map.set_remaps(r.remaps)?;
        Ok(map)
    }
}

impl From<PlacementMap> for MapRecord {
    fn from(m: PlacementMap) -> MapRecord {
        MapRecord {
            algorithm: ALGORITHM,
            epoch: m.epoch,
            protection: m.protection,
            failure_domain: m.failure_domain,
            pg_count: m.pg_count,
            nodes: m.nodes,
            remaps: m.remaps,
        }
    }
}

impl PlacementMap {
    /// A map at epoch 1 without remaps; `nodes` may come in any order.
    ///
    /// # Errors
    ///
    /// A [`MapError`] naming the first broken invariant (see the module doc).
    pub fn new(
        protection: Protection,
        failure_domain: FailureDomain,
        pg_count: u32,
        mut nodes: Vec<Node>,
    ) -> Result<PlacementMap, MapError> {
        nodes.sort_by_key(|n| n.id);
        let map = PlacementMap { epoch: 1, protection, failure_domain, pg_count, nodes, remaps: Vec::new() };
        map.check_nodes()?;
        if pg_count == 0 || pg_count > MAX_PG_COUNT || !pg_count.is_power_of_two() {
            return Err(MapError::PgCount(pg_count));
        }
        Ok(map)
    }

    /// The map's version; whoever stores the map bumps it on every change.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Data protection of every group.
    pub fn protection(&self) -> Protection {
        self.protection
    }

    /// The failure-domain key.
    pub fn failure_domain(&self) -> &FailureDomain {
        &self.failure_domain
    }

    /// Number of placement groups (a power of two).
    pub fn pg_count(&self) -> u32 {
        self.pg_count
    }

    /// The nodes, sorted by id.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The balancer's exceptions, sorted by (pg, from).
    pub fn remaps(&self) -> &[Remap] {
        &self.remaps
    }

    /// The remaps of one group.
    pub fn remaps_of(&self, pg: u32) -> &[Remap] {
        let start = self.remaps.partition_point(|r| r.pg < pg);
        let end = self.remaps.partition_point(|r| r.pg <= pg);
        &self.remaps[start..end]
    }

    /// The node with this id.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.binary_search_by_key(&id, |n| n.id).ok().map(|i| &self.nodes[i])
    }

    /// The failure domain a node belongs to: its label value, or its name
    /// when the domain is the node.
    pub fn domain_of<'a>(&'a self, node: &'a Node) -> &'a str {
        match &self.failure_domain {
            FailureDomain::Node => &node.name,
            // Present: checked by `check_nodes`.
            FailureDomain::Label(k) => node.labels.get(k).map_or("", String::as_str),
        }
    }

    /// Sets the epoch (the store that keeps the map decides it).
    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    /// Replaces the exception table; `remaps` may come in any order.
    ///
    /// # Errors
    ///
    /// A [`MapError`] for a remap naming an unknown group or node, mapping
    /// a node to itself, or repeating a (group, from) pair. The map is
    /// unchanged then.
    pub fn set_remaps(&mut self, mut remaps: Vec<Remap>) -> Result<(), MapError> {
        remaps.sort_unstable();
        for (i, r) in remaps.iter().enumerate() {
            if r.pg >= self.pg_count {
                return Err(MapError::RemapPgOutOfRange { pg: r.pg, pg_count: self.pg_count });
            }
            for id in [r.from, r.to] {
                if self.node(id).is_none() {
                    return Err(MapError::RemapUnknownNode { pg: r.pg, node: id });
                }
            }
            if r.from == r.to {
                return Err(MapError::RemapToItself { pg: r.pg, node: r.from });
            }
            if i > 0 && remaps[i - 1].pg == r.pg && remaps[i - 1].from == r.from {
                return Err(MapError::DuplicateRemap { pg: r.pg, from: r.from });
            }
        }
        self.remaps = remaps;
        Ok(())
    }

    /// Changes one node's state.
    ///
    /// # Errors
    ///
    /// [`MapError::UnknownNode`] if no node has this id.
    pub fn set_state(&mut self, id: NodeId, state: NodeState) -> Result<(), MapError> {
        let i = self.nodes.binary_search_by_key(&id, |n| n.id).map_err(|_| MapError::UnknownNode(id))?;
        self.nodes[i].state = state;
        Ok(())
    }

    /// Adds nodes.
    ///
    /// # Errors
    ///
    /// A [`MapError`] if the result would break an invariant (a reused id
    /// or name, a missing label, ...). The map is unchanged then.
    pub fn add_nodes(&mut self, nodes: impl IntoIterator<Item = Node>) -> Result<(), MapError> {
        let mut grown = self.clone();
        grown.nodes.extend(nodes);
        grown.nodes.sort_by_key(|n| n.id);
        grown.check_nodes()?;
        self.nodes = grown.nodes;
        Ok(())
    }

    fn check_nodes(&self) -> Result<(), MapError> {
        if self.nodes.len() > MAX_NODES {
            return Err(MapError::TooManyNodes { count: self.nodes.len(), max: MAX_NODES });
        }
        let mut names = BTreeSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.id.0 == NodeId::MAX {
                return Err(MapError::ReservedNodeId(n.id));
            }
            if i > 0 && self.nodes[i - 1].id == n.id {
                return Err(MapError::DuplicateNodeId(n.id));
            }
            if n.name.is_empty() {
                return Err(MapError::EmptyName(n.id));
            }
            if !names.insert(n.name.as_str()) {
                return Err(MapError::DuplicateName(n.name.clone()));
            }
            if n.weight == 0 {
                return Err(MapError::ZeroWeight(n.name.clone()));
            }
            if let FailureDomain::Label(k) = &self.failure_domain
                && !n.labels.contains_key(k)
            {
                return Err(MapError::MissingLabel { node: n.name.clone(), key: k.clone() });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::test_utils::{cluster, node};

    const TIB: u64 = 1 << 40;

    fn nodes(n: u32) -> Vec<Node> {
        (0..n).map(|i| node(i, 2, TIB)).collect()
    }

    fn map_with(list: Vec<Node>) -> Result<PlacementMap, MapError> {
        PlacementMap::new(Protection::default(), FailureDomain::default(), 64, list)
    }

    #[test]
    fn json_round_trips_with_the_algorithm_version() {
        let mut map = cluster(6, 2, 3, 64, |i| TIB * u64::from(i + 1));
        map.set_state(NodeId(4), NodeState::Out).expect("known");
        map.set_remaps(vec![Remap { pg: 3, from: NodeId(1), to: NodeId(2) }]).expect("valid");
        map.set_epoch(42);
        let json = serde_json::to_string(&map).expect("serialise");
        assert!(
            json.contains("\"algorithm\":1")
                && json.contains("\"state\":\"out\"")
                && json.contains("\"protection\":\"rep:3\"")
        );
        let back: PlacementMap = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, map);
        assert_eq!(back.epoch(), 42);
    }

    #[test]
    fn serialised_maps_are_validated() {
        let good = serde_json::to_value(cluster(4, 2, 3, 64, |_| TIB)).expect("serialise");
        let with = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut v = good.clone();
            edit(&mut v);
            serde_json::from_value::<PlacementMap>(v).expect_err("must be refused").to_string()
        };
        assert!(with(&|v| v["algorithm"] = 2.into()).contains("algorithm 2"));
        assert!(with(&|v| v["pg_count"] = 100.into()).contains("power of two"));
        assert!(with(&|v| v["nodes"][1]["id"] = 0.into()).contains("appears twice"));
        assert!(with(&|v| v["nodes"][0]["weight"] = 0.into()).contains("weight 0"));
        assert!(with(&|v| v["surprise"] = 1.into()).contains("unknown field"));
        assert!(with(&|v| v["remaps"] = serde_json::json!([{"pg": 64, "from": 0, "to": 1}])).contains("64 groups"));
        assert!(with(&|v| v["protection"] = "rep:0".into()).contains("copies"));
    }

    #[test]
    fn every_broken_invariant_has_its_error() {
        let mut reserved = nodes(2);
        reserved[1].id = NodeId(NodeId::MAX);
        assert_eq!(map_with(reserved), Err(MapError::ReservedNodeId(NodeId(NodeId::MAX))));
        let mut dup = nodes(2);
        dup[1].id = NodeId(0);
        assert_eq!(map_with(dup), Err(MapError::DuplicateNodeId(NodeId(0))));
        let mut unnamed = nodes(2);
        unnamed[0].name.clear();
        assert_eq!(map_with(unnamed), Err(MapError::EmptyName(NodeId(0))));
        let mut same_name = nodes(2);
        same_name[1].name = "n0".into();
        assert_eq!(map_with(same_name), Err(MapError::DuplicateName("n0".into())));
        let mut weightless = nodes(2);
        weightless[1].weight = 0;
        assert_eq!(map_with(weightless), Err(MapError::ZeroWeight("n1".into())));
        let unlabelled = vec![Node::new(0, "a", TIB)];
        assert_eq!(map_with(unlabelled.clone()), Err(MapError::MissingLabel { node: "a".into(), key: "rack".into() }));
        assert!(
            PlacementMap::new(Protection::default(), FailureDomain::Node, 64, unlabelled).is_ok(),
            "no label needed"
        );
        for bad in [0, 3, 100, MAX_PG_COUNT * 2] {
            assert_eq!(
                PlacementMap::new(Protection::default(), FailureDomain::default(), bad, nodes(3)),
                Err(MapError::PgCount(bad))
            );
        }
        assert_eq!(FailureDomain::parse(" "), Err(MapError::EmptyFailureDomain));
        assert_eq!(FailureDomain::parse("node"), Ok(FailureDomain::Node));
        assert_eq!(FailureDomain::parse("pod"), Ok(FailureDomain::Label("pod".into())));
    }

    #[test]
    fn bad_remaps_and_unknown_nodes_are_refused_and_leave_the_map_alone() {
        let mut map = cluster(4, 2, 3, 64, |_| TIB);
        let r = |pg, from, to| Remap { pg, from: NodeId(from), to: NodeId(to) };
        assert_eq!(map.set_remaps(vec![r(64, 0, 1)]), Err(MapError::RemapPgOutOfRange { pg: 64, pg_count: 64 }));
        assert_eq!(map.set_remaps(vec![r(1, 0, 9)]), Err(MapError::RemapUnknownNode { pg: 1, node: NodeId(9) }));
        assert_eq!(map.set_remaps(vec![r(1, 2, 2)]), Err(MapError::RemapToItself { pg: 1, node: NodeId(2) }));
        assert_eq!(
            map.set_remaps(vec![r(1, 2, 3), r(1, 2, 0)]),
            Err(MapError::DuplicateRemap { pg: 1, from: NodeId(2) })
        );
        assert!(map.remaps().is_empty());
        map.set_remaps(vec![r(5, 3, 0), r(1, 2, 0), r(5, 1, 2)]).expect("valid");
        assert_eq!(map.remaps_of(5), &[r(5, 1, 2), r(5, 3, 0)]);
        assert_eq!(map.remaps_of(4), &[]);
        assert_eq!(map.set_state(NodeId(9), NodeState::Down), Err(MapError::UnknownNode(NodeId(9))));
        let before = map.clone();
        assert_eq!(map.add_nodes([node(1, 2, TIB)]), Err(MapError::DuplicateNodeId(NodeId(1))));
        assert_eq!(map, before);
        map.add_nodes([node(7, 2, TIB)]).expect("new id");
        assert_eq!(map.nodes().iter().map(|n| n.id.0).collect::<Vec<_>>(), vec![0, 1, 2, 3, 7]);
    }
}
