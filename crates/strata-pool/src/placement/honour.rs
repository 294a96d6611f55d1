//! Whether a map can honour a protection with strict failure domains.
//!
//! Placement never refuses: with fewer failure domains than copies it
//! spreads copies as evenly as the domains allow, and with fewer up nodes
//! it places fewer copies. Whoever must not accept that (a volume created
//! with `rep:3` and strict domains) asks [`check_protection`] first and
//! shows the operator its message.

use std::collections::BTreeSet;

use super::map::{FailureDomain, PlacementMap};
use super::protection::Protection;

/// Names listed in a message before the rest are counted.
const MAX_LISTED: usize = 10;

/// Why a protection cannot be honoured with one copy per failure domain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CannotHonour {
    /// Fewer up nodes than the protection's width.
    #[error("{protection} needs {need} up nodes; the cluster has {have}{list}", need = protection.width(), have = up.len(), list = listed(up))]
    TooFewNodes {
        /// The protection asked for.
        protection: Protection,
        /// Names of the up nodes.
        up: Vec<String>,
    },
    /// Fewer failure domains with up nodes than the protection's width.
    #[error(
        "{protection} needs {need} {plural} with up nodes; the cluster has {have}{list}",
        need = protection.width(), plural = domain.plural(), have = domains.len(), list = listed(domains)
    )]
    TooFewDomains {
        /// The protection asked for.
        protection: Protection,
        /// The failure-domain key.
        domain: FailureDomain,
        /// The domains that have up nodes.
        domains: Vec<String>,
    },
}

/// ` (a, b, c)`, ` (a, ..., j and 5 more)`, or nothing for an empty list.
fn listed(names: &[String]) -> String {
    if names.is_empty() {
        return String::new();
    }
    let shown: Vec<&str> = names.iter().take(MAX_LISTED).map(String::as_str).collect();
    let more = names.len().saturating_sub(MAX_LISTED);
    if more == 0 { format!(" ({})", shown.join(", ")) } else { format!(" ({} and {more} more)", shown.join(", ")) }
}

/// Checks that `map` has at least `protection.width()` up nodes in as
/// many distinct failure domains, so every group gets one copy per domain.
///
/// ```
/// use strata_pool::placement::{check_protection, FailureDomain, Node, PlacementMap, Protection};
///
/// let nodes = (0..4).map(|i| Node::new(i, format!("n{i}"), 1 << 40).with_label("rack", format!("r{}", i % 2 + 1)));
/// let map = PlacementMap::new(Protection::default(), FailureDomain::default(), 64, nodes.collect()).unwrap();
/// let err = check_protection(&map, Protection::default()).unwrap_err();
/// assert_eq!(err.to_string(), "rep:3 needs 3 racks with up nodes; the cluster has 2 (r1, r2)");
/// ```
///
/// # Errors
///
/// [`CannotHonour`] says what is missing and lists what there is.
pub fn check_protection(map: &PlacementMap, protection: Protection) -> Result<(), CannotHonour> {
    let up: Vec<_> = map.nodes().iter().filter(|n| n.state.holds_data()).collect();
    let need = protection.width();
    if up.len() < need {
        return Err(CannotHonour::TooFewNodes { protection, up: up.iter().map(|n| n.name.clone()).collect() });
    }
    let domains: BTreeSet<&str> = up.iter().map(|n| map.domain_of(n)).collect();
    if domains.len() < need {
        return Err(CannotHonour::TooFewDomains {
            protection,
            domain: map.failure_domain().clone(),
            domains: domains.into_iter().map(str::to_owned).collect(),
        });
    }
    Ok(())
}

/// A drain that would leave some volume without the nodes its protection
/// needs, with each such volume's name and what it would miss.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("draining {node} would leave {} without the nodes its protection needs: {}; add nodes (or domains) first, \
         or delete the volume", if blocked.len() == 1 { "a volume" } else { "volumes" },
        blocked.iter().map(|(v, e)| format!("{v}: {e}")).collect::<Vec<_>>().join("; "))]
pub struct DrainRefused {
    /// The node to drain.
    pub node: String,
    /// Each volume that could not keep its protection, with the reason.
    pub blocked: Vec<(String, CannotHonour)>,
}

/// Checks that node `node` of `map` can be drained: with it out, every
/// volume of `volumes` (name, protection) can still be placed with one
/// copy or shard per failure domain. A drain that cannot be completed
/// would leave those volumes moving (or, erasure-coded, unplaceable)
/// for good, so it is refused before anything moves.
///
/// # Errors
///
/// [`DrainRefused`] naming every volume that would miss nodes.
pub fn check_drain<'a>(
    map: &PlacementMap,
    node: super::NodeId,
    volumes: impl IntoIterator<Item = (&'a str, Protection)>,
) -> Result<(), DrainRefused> {
    let mut after = map.clone();
    let name = map.node(node).map_or_else(|| node.to_string(), |n| n.name.clone());
    if after.set_state(node, super::NodeState::Out).is_err() {
        return Ok(()); // not in the map: nothing to move
    }
    let blocked = unplaceable(&after, volumes);
    if blocked.is_empty() { Ok(()) } else { Err(DrainRefused { node: name, blocked }) }
}

/// The volumes of `volumes` (name, protection) that `map` cannot place
/// with one copy or shard per failure domain, each once, with the reason.
fn unplaceable<'a>(
    map: &PlacementMap,
    volumes: impl IntoIterator<Item = (&'a str, Protection)>,
) -> Vec<(String, CannotHonour)> {
    let mut seen = BTreeSet::new();
    volumes
        .into_iter()
        .filter_map(|(v, p)| check_protection(map, p).err().map(|e| (v.to_string(), e)))
        .filter(|(v, _)| seen.insert(v.clone()))
        .collect()
}

/// Why the pool's failure domain cannot be changed to the one asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DomainRefused {
    /// Some volume could not be placed with one copy or shard per domain;
    /// each such volume's name, with what it would miss.
    #[error("with one copy or shard per {domain} {} could not be placed: {}; add nodes in more {plural} first, \
             or choose a finer failure domain", if blocked.len() == 1 { "a volume" } else { "volumes" },
            blocked.iter().map(|(v, e)| format!("{v}: {e}")).collect::<Vec<_>>().join("; "), plural = domain.plural())]
    Unplaceable {
        /// The failure domain asked for.
        domain: FailureDomain,
        /// Each volume that could not keep its protection, with the reason.
        blocked: Vec<(String, CannotHonour)>,
    },
    /// The map's nodes do not make a map under it (a node lacks the label).
    #[error("the failure domain {domain} cannot be used: {reason}")]
    Invalid {
        /// The failure domain asked for.
        domain: FailureDomain,
        /// The broken invariant.
        reason: String,
    },
}

/// `map` with failure domain `domain` (its nodes as they are; the caller
/// balances it and bumps its epoch), when every volume of `volumes` can
/// be placed under it with one copy or shard per domain: moving to a
/// domain some volume cannot honour would leave it moving for good.
///
/// # Errors
///
/// [`DomainRefused`] naming every volume that could not be placed, or the
/// node that lacks the domain's label.
pub fn check_failure_domain<'a>(
    map: &PlacementMap,
    domain: &FailureDomain,
    volumes: impl IntoIterator<Item = (&'a str, Protection)>,
) -> Result<PlacementMap, DomainRefused> {
    let after = PlacementMap::new(map.protection(), domain.clone(), map.pg_count(), map.nodes().to_vec())
        .map_err(|e| DomainRefused::Invalid { domain: domain.clone(), reason: e.to_string() })?;
    let blocked = unplaceable(&after, volumes);
    if blocked.is_empty() { Ok(after) } else { Err(DomainRefused::Unplaceable { domain: domain.clone(), blocked }) }
}

impl PlacementMap {
    /// [`check_protection`] with the map's own protection.
    ///
    /// # Errors
    ///
    /// As [`check_protection`].
    pub fn honours(&self) -> Result<(), CannotHonour> {
        check_protection(self, self.protection())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::map::{NodeId, NodeState};
    use crate::placement::test_utils::cluster;

    const TIB: u64 = 1 << 40;

    #[test]
    fn enough_racks_with_up_nodes_is_fine() {
        let map = cluster(6, 2, 3, 64, |_| TIB);
        assert_eq!(map.honours(), Ok(()));
        assert_eq!(
            check_protection(&map, Protection::replicated(4).expect("valid")).map_err(|e| e.to_string()),
            Err("rep:4 needs 4 racks with up nodes; the cluster has 3 (r0, r1, r2)".into())
        );
    }

    #[test]
    fn erasure_coding_needs_a_rack_per_shard() {
        let ec = Protection::erasure_coded(4, 2).expect("valid");
        let five_racks = cluster(10, 2, 3, 64, |_| TIB);
        assert_eq!(
            check_protection(&five_racks, ec).map_err(|e| e.to_string()),
            Err("ec:4+2 needs 6 racks with up nodes; the cluster has 5 (r0, r1, r2, r3, r4)".into())
        );
        assert_eq!(check_protection(&cluster(12, 2, 3, 64, |_| TIB), ec), Ok(()));
        assert_eq!(
            check_protection(&cluster(5, 1, 3, 64, |_| TIB), ec).map_err(|e| e.to_string()),
            Err("ec:4+2 needs 6 up nodes; the cluster has 5 (n0, n1, n2, n3, n4)".into())
        );
    }

    #[test]
    fn down_nodes_do_not_count() {
        let mut map = cluster(6, 2, 3, 64, |_| TIB);
        map.set_state(NodeId(4), NodeState::Down).expect("known");
        map.set_state(NodeId(5), NodeState::Out).expect("known");
        let e = map.honours().expect_err("rack r2 has no up node");
        assert_eq!(e.to_string(), "rep:3 needs 3 racks with up nodes; the cluster has 2 (r0, r1)");
        for i in 1..4 {
            map.set_state(NodeId(i), NodeState::Down).expect("known");
        }
        assert_eq!(
            map.honours().map_err(|e| e.to_string()),
            Err("rep:3 needs 3 up nodes; the cluster has 1 (n0)".into())
        );
    }

    #[test]
    fn a_drain_that_would_leave_an_erasure_coded_volume_unplaceable_is_refused_by_name() {
        // Six nodes, one per rack: ec:4+2 needs all six.
        let map = cluster(6, 1, 3, 64, |_| TIB);
        let ec = Protection::erasure_coded(4, 2).expect("valid");
        let rep3 = Protection::default();
        let e = check_drain(&map, NodeId(4), [("ckpt", ec), ("db", rep3)]).expect_err("ec:4+2 cannot lose a node");
        assert_eq!(e.blocked.len(), 1, "rep:3 fits on five");
        assert_eq!(e.blocked[0].0, "ckpt");
        assert_eq!(
            e.to_string(),
            "draining n4 would leave a volume without the nodes its protection needs: ckpt: ec:4+2 needs 6 up \
             nodes; the cluster has 5 (n0, n1, n2, n3, n5); add nodes (or domains) first, or delete the volume"
        );
        assert_eq!(check_drain(&map, NodeId(4), [("db", rep3)]), Ok(()));
        // A seventh node makes room.
        let seven = cluster(7, 1, 3, 64, |_| TIB);
        assert_eq!(check_drain(&seven, NodeId(4), [("ckpt", ec), ("db", rep3)]), Ok(()));
        // Two drains at once are judged together: the second sees the
        // first one out.
        let mut one_out = seven.clone();
        one_out.set_state(NodeId(0), NodeState::Out).expect("known");
        assert!(check_drain(&one_out, NodeId(4), [("ckpt", ec)]).is_err());
    }

    #[test]
    fn a_failure_domain_some_volume_cannot_honour_is_refused_by_name() {
        // Six nodes, two per rack: three racks. The README's ec:4+2 on
        // three racks needs `node` as the failure domain.
        let map = cluster(6, 2, 3, 64, |_| TIB);
        let ec = Protection::erasure_coded(4, 2).expect("valid");
        let rep3 = Protection::default();
        let e = check_protection(&map, ec).expect_err("three racks");
        assert!(e.to_string().contains("needs 6 racks"), "{e}");
        let by_node = check_failure_domain(&map, &FailureDomain::Node, [("ckpt", ec), ("db", rep3)])
            .expect("six nodes hold ec:4+2 one shard per node");
        assert_eq!(by_node.failure_domain(), &FailureDomain::Node);
        assert_eq!(by_node.nodes(), map.nodes(), "the nodes stay as they are");
        assert_eq!(check_protection(&by_node, ec), Ok(()));
        // Back to racks: ec:4+2 could not be placed, and says so.
        let rack = FailureDomain::parse("rack").expect("valid");
        let e = check_failure_domain(&by_node, &rack, [("ckpt", ec), ("db", rep3)]).expect_err("three racks");
        assert_eq!(
            e.to_string(),
            "with one copy or shard per rack a volume could not be placed: ckpt: ec:4+2 needs 6 racks with up \
             nodes; the cluster has 3 (r0, r1, r2); add nodes in more racks first, or choose a finer failure domain"
        );
        // A label no node has.
        let zone = FailureDomain::parse("zone").expect("valid");
        let e = check_failure_domain(&map, &zone, [("db", rep3)]).expect_err("no zone labels");
        assert!(matches!(e, DomainRefused::Invalid { .. }), "{e}");
        assert!(e.to_string().contains("zone"), "{e}");
    }

    #[test]
    fn too_few_nodes_are_listed_and_long_lists_cut() {
        let seven = cluster(7, 1, 8, 64, |_| TIB);
        let msg = seven.honours().expect_err("7 nodes").to_string();
        assert_eq!(msg, "rep:8 needs 8 up nodes; the cluster has 7 (n0, n1, n2, n3, n4, n5, n6)");
        let names: Vec<String> = (0..13).map(|i| format!("x{i}")).collect();
        assert_eq!(listed(&names), " (x0, x1, x2, x3, x4, x5, x6, x7, x8, x9 and 3 more)");
        assert_eq!(listed(&[]), "");
    }
}
