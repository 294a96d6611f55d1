//! Placement group to nodes: weighted rendezvous hashing (straw2) under
//! failure-domain rules, then the balancer's exceptions, then
//! substitutes for nodes that hold no data.
//!
//! # The three steps, per group
//!
//! 1. **Hashed set.** Every node of the map (whatever its state) draws a
//!    straw2 score for the group (`hash.rs`). Domain, then node within
//!    domain: each failure domain is represented by its best-scoring node,
//!    and the `width` domains with the best representatives win, in score
//!    order. A domain's best score is the maximum over its nodes, which is
//!    distributed exactly like a straw2 draw with the domain's summed
//!    weight, so domains win in proportion to their weight and nodes within
//!    them in proportion to theirs. With fewer domains than `width`, the
//!    copies are dealt round-robin over the domains in score order (each
//!    domain's nodes in score order), so domain counts differ by at most
//!    one wherever nodes allow.
//! 2. **Remaps.** Each [`Remap`] of the group whose `from` is in the hashed
//!    set moves that slot's copy to `to`, if `to` is not already in the set
//!    and the move does not put more copies in `to`'s domain than were in
//!    `from`'s. Remaps are tried in passes until none applies any more, so
//!    their order does not matter. Stale remaps are ignored.
//! 3. **Substitutes.** A slot whose node is down or out is given, in slot
//!    order, to the best-scoring up node outside the set among the domains
//!    that hold the fewest live copies (zero whenever possible). A slot
//!    stays empty only when no up node is left; the list is then shorter
//!    than `width`.
//!
//! # Why not the classic two-level draw
//!
//! CRUSH-style hierarchies draw the domain with its summed weight, then
//! the node inside it with an independent draw. That costs O(domains +
//! nodes per domain) per group but moves about twice the minimum when a
//! node joins an existing rack: the rack's weight grows, groups that enter
//! the rack land on any of its nodes (not on the newcomer), and the
//! newcomer's share is then taken from its rack mates. Taking each
//! domain's score as the maximum of its nodes' scores is exact: adding,
//! removing or reweighting a node changes only the contests that node wins
//! or loses. It costs one hash per node per group. Nodes of a domain with
//! the same weight and state form a run in which the highest raw draw
//! wins, so the logarithm is taken once per run, not per node; a group at
//! 2,500 nodes takes about ten microseconds (`docs/pool.md`).
//!
//! # Why state does not enter step 1
//!
//! Down and out nodes keep their scores, so a failure changes nothing in
//! any hashed set and no remap goes stale: exactly the failed node's
//! copies move (step 3), each to the node that would have won had it not
//! been there, so they scatter over the whole cluster in proportion to
//! weight, and its rack keeps only its remaining nodes' share.
//!
//! # Invariants of every result
//!
//! - no node appears twice;
//! - every node listed is up;
//! - when at least `width` domains have up nodes (and no remap says
//!   otherwise, which step 2 forbids), no two copies share a domain;
//! - the result is a pure function of the map and the group.

use super::hash::{draw, log2_unit, node_key, pg_key};
use super::map::{NodeId, PlacementMap, Remap};
use super::table::PlacementTable;

/// Marks an empty slot in the index-based internals.
pub(crate) const NONE: u32 = u32::MAX;

/// Consecutive nodes of one domain with the same weight and state: among
/// them the highest draw wins without a logarithm (`hash.rs`).
#[derive(Debug, Clone, Copy)]
struct Run {
    start: u32,
    end: u32,
    inv_weight: f64,
    up: bool,
}

/// A map compiled for placement: nodes grouped by domain, then by weight
/// and state, in flat arrays.
#[derive(Debug, Clone)]
pub struct Placer {
    width: usize,
    pg_count: u32,
    /// Node index (ordered by domain, weight, state, id) to its id.
    ids: Vec<NodeId>,
    keys: Vec<u64>,
    weight: Vec<u64>,
    inv_weight: Vec<f64>,
    up: Vec<bool>,
    domain: Vec<u32>,
    runs: Vec<Run>,
    /// Domain index to its range of runs.
    domains: Vec<(u32, u32)>,
    /// Ids sorted, with their node index, for lookups.
    by_id: Vec<(NodeId, u32)>,
    /// The map's remaps, sorted by (pg, from).
    remaps: Vec<Remap>,
}

/// Per-call work space, reused across groups by [`Placer::table`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Scratch {
    /// Per domain: best (score, node index) over all nodes.
    best: Vec<(f64, u32)>,
    /// Per domain: best (score, node index) over up nodes.
    best_up: Vec<(f64, u32)>,
}

/// Every group's slots, `width` per group, in node indices ([`NONE`] =
/// empty), and whether each of the map's remaps applied (in map order).
#[derive(Debug, Clone, Default)]
pub(crate) struct Rows {
    pub(crate) base: Vec<u32>,
    pub(crate) nodes: Vec<u32>,
    pub(crate) applied: Vec<bool>,
}

/// One group's placement by slot, in node indices ([`NONE`] = empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Slots {
    /// Step 1: the hashed set.
    pub(crate) base: Vec<u32>,
    /// After steps 2 and 3.
    pub(crate) nodes: Vec<u32>,
    /// Per remap passed in: whether step 2 applied it.
    pub(crate) applied: Vec<bool>,
}

impl Placer {
    /// Compiles a map. Cost O(nodes log nodes).
    pub fn new(map: &PlacementMap) -> Placer {
        // Domain, weight, state, id: stable and independent of the order
        // nodes were added in.
        let mut order: Vec<(&str, u64, bool, NodeId, usize)> = map
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, n)| (map.domain_of(n), n.weight, !n.state.holds_data(), n.id, i))
            .collect();
        order.sort_unstable();
        let n = order.len();
        let mut p = Placer {
            width: map.protection().width(),
            pg_count: map.pg_count(),
            ids: Vec::with_capacity(n),
            keys: Vec::with_capacity(n),
            weight: Vec::with_capacity(n),
            inv_weight: Vec::with_capacity(n),
            up: Vec::with_capacity(n),
            domain: Vec::with_capacity(n),
            runs: Vec::new(),
            domains: Vec::new(),
            by_id: Vec::with_capacity(n),
            remaps: map.remaps().to_vec(),
        };
        for (idx, &(dom, weight, down, id, _)) in order.iter().enumerate() {
            let idx = idx as u32; // n <= MAX_NODES
            let new_domain = idx == 0 || order[idx as usize - 1].0 != dom;
            if new_domain {
                p.domains.push((p.runs.len() as u32, p.runs.len() as u32));
            }
            let prev = p.runs.last().copied();
            if new_domain || prev.is_some_and(|r| r.up == down || p.weight[r.start as usize] != weight) {
                // Weights are > 0 (map invariant), so this is finite.
                p.runs.push(Run { start: idx, end: idx, inv_weight: 1.0 / weight as f64, up: !down });
                debug_assert!(p.runs.len() < u32::MAX as usize);
            }
            if let Some(r) = p.runs.last_mut() {
                r.end = idx + 1;
            }
            if let Some(d) = p.domains.last_mut() {
                d.1 = p.runs.len() as u32;
            }
            p.ids.push(id);
            p.keys.push(node_key(id.0));
            p.weight.push(weight);
            p.inv_weight.push(1.0 / weight as f64);
            p.up.push(!down);
            p.domain.push(p.domains.len() as u32 - 1);
            p.by_id.push((id, idx));
        }
        p.by_id.sort_unstable();
        p
    }

    /// Nodes per group (the protection's width).
    pub fn width(&self) -> usize {
        self.width
    }

    /// Number of placement groups.
    pub fn pg_count(&self) -> u32 {
        self.pg_count
    }

    /// The ordered nodes of group `pg` (position i holds copy i, or shard
    /// i of an `ec:K+M` group): `width` distinct up nodes, fewer only if
    /// fewer are up. An empty slot is left out, so the positions after it
    /// shift: an `ec` group needs all `width` slots, which
    /// [`check_protection`](super::check_protection) checks. Groups at or beyond
    /// [`pg_count`](Self::pg_count) are placed like any other number, which
    /// callers should not rely on.
    pub fn place(&self, pg: u32) -> Vec<NodeId> {
        let mut scratch = Scratch::default();
        let mut slots = Slots::default();
        self.place_slots(pg, self.remaps_of(pg), &mut scratch, &mut slots);
        slots.nodes.iter().filter(|&&i| i != NONE).map(|&i| self.ids[i as usize]).collect()
    }

    /// Every group's placement. Cost: `pg_count` times [`place`](Self::place).
    pub fn table(&self) -> PlacementTable {
        self.table_with_threads(1)
    }

    /// [`table`](Self::table) computed on up to `threads` threads (groups
    /// are independent); the result does not depend on `threads`.
    pub fn table_with_threads(&self, threads: usize) -> PlacementTable {
        let rows = self.rows(threads);
        let mut table = PlacementTable::empty(self.pg_count, self.width);
        for pg in 0..self.pg_count {
            let row = &rows.nodes[pg as usize * self.width..(pg as usize + 1) * self.width];
            table.set(pg, row.iter().filter(|&&i| i != NONE).map(|&i| self.ids[i as usize]));
        }
        table
    }

    /// Every group's slots with the map's remaps, on up to `threads`
    /// threads, in group order.
    pub(crate) fn rows(&self, threads: usize) -> Rows {
        let groups = self.pg_count as usize;
        let threads = threads.clamp(1, groups.max(1));
        let per = groups.div_ceil(threads) as u32;
        let part = |first: u32| {
            let mut rows = Rows::default();
            let (mut scratch, mut slots) = (Scratch::default(), Slots::default());
            for pg in first..first.saturating_add(per).min(self.pg_count) {
                self.place_slots(pg, self.remaps_of(pg), &mut scratch, &mut slots);
                for k in 0..self.width {
                    rows.base.push(slots.base.get(k).copied().unwrap_or(NONE));
                    rows.nodes.push(slots.nodes.get(k).copied().unwrap_or(NONE));
                }
                rows.applied.extend_from_slice(&slots.applied);
            }
            rows
        };
        if threads == 1 {
            return part(0);
        }
        let parts: Vec<Rows> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads as u32).map(|t| scope.spawn(move || part(t * per))).collect();
            // A panic in a worker is a bug in this module; re-raise it.
            handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
        });
        let mut rows = Rows::default();
        for p in parts {
            rows.base.extend(p.base);
            rows.nodes.extend(p.nodes);
            rows.applied.extend(p.applied);
        }
        rows
    }

    /// The map's remaps of one group.
    pub(crate) fn remaps_of(&self, pg: u32) -> &[Remap] {
        let start = self.remaps.partition_point(|r| r.pg < pg);
        let end = self.remaps.partition_point(|r| r.pg <= pg);
        &self.remaps[start..end]
    }

    pub(crate) fn node_count(&self) -> usize {
        self.ids.len()
    }

    pub(crate) fn id(&self, idx: u32) -> NodeId {
        self.ids[idx as usize]
    }

    pub(crate) fn is_up(&self, idx: u32) -> bool {
        self.up[idx as usize]
    }

    pub(crate) fn weight(&self, idx: u32) -> u64 {
        self.weight[idx as usize]
    }

    /// The node index of an id.
    pub(crate) fn index(&self, id: NodeId) -> Option<u32> {
        self.by_id.binary_search_by_key(&id, |&(i, _)| i).ok().map(|k| self.by_id[k].1)
    }

    /// Steps 1 to 3 for one group with the given remaps (all of this
    /// group). `out.base` and `out.nodes` have equal length, at most
    /// `width`.
    pub(crate) fn place_slots(&self, pg: u32, remaps: &[Remap], s: &mut Scratch, out: &mut Slots) {
        let pkey = pg_key(pg);
        self.scan(pkey, s);
        self.hashed_set(pkey, s, &mut out.base);
        out.nodes.clear();
        out.nodes.extend_from_slice(&out.base);
        // Passes until none applies any more, so the result does not depend
        // on the order remaps are listed in: one may free the domain
        // another needs.
        out.applied.clear();
        out.applied.resize(remaps.len(), false);
        let mut progress = true;
        while progress {
            progress = false;
            for (r, applied) in remaps.iter().zip(out.applied.iter_mut()) {
                if !*applied && self.apply_remap(r, &out.base, &mut out.nodes) {
                    *applied = true;
                    progress = true;
                }
            }
        }
        for slot in 0..out.nodes.len() {
            if !self.up[out.nodes[slot] as usize] {
                out.nodes[slot] = self.substitute(pkey, slot, s, &out.nodes);
            }
        }
    }

    /// Per domain, the best (score, node) overall and among up nodes.
    fn scan(&self, pkey: u64, s: &mut Scratch) {
        s.best.clear();
        s.best_up.clear();
        for &(first, last) in &self.domains {
            let mut best = (f64::NEG_INFINITY, NONE);
            let mut best_up = (f64::NEG_INFINITY, NONE);
            for run in &self.runs[first as usize..last as usize] {
                let (h, node) = self.run_winner(pkey, run);
                let score = log2_unit(h) * run.inv_weight;
                if score > best.0 {
                    best = (score, node);
                }
                if run.up && score > best_up.0 {
                    best_up = (score, node);
                }
            }
            s.best.push(best);
            s.best_up.push(best_up);
        }
    }

    /// The highest draw of a run (ties to the lower index) and its node.
    /// The hot loop: one hash and one comparison per node.
    #[inline]
    fn run_winner(&self, pkey: u64, run: &Run) -> (u64, u32) {
        let keys = &self.keys[run.start as usize..run.end as usize];
        // Runs are never empty (`new` opens one only for a node).
        let mut best = (keys.first().map_or(0, |&k| draw(pkey, k)), 0usize);
        for (k, &key) in keys.iter().enumerate().skip(1) {
            let h = draw(pkey, key);
            if h > best.0 {
                best = (h, k);
            }
        }
        (best.0, run.start + best.1 as u32)
    }

    /// Step 1 into `base`.
    fn hashed_set(&self, pkey: u64, s: &Scratch, base: &mut Vec<u32>) {
        base.clear();
        let width = self.width.min(self.ids.len());
        if self.domains.len() >= width {
            // Top `width` domains by their best node; insertion into a
            // short sorted list (width <= MAX_WIDTH).
            let mut top: Vec<(f64, u32)> = Vec::with_capacity(width + 1);
            for &(score, node) in &s.best {
                if top.len() == width && top.last().is_some_and(|&(t, _)| score <= t) {
                    continue;
                }
                let at = top.partition_point(|&(t, _)| t >= score);
                top.insert(at, (score, node));
                top.truncate(width);
            }
            base.extend(top.iter().map(|&(_, n)| n));
            return;
        }
        // Fewer domains than copies: round-robin over domains in score
        // order, each domain's nodes in score order.
        let mut domains: Vec<usize> = (0..self.domains.len()).collect();
        domains.sort_by(|&a, &b| s.best[b].0.total_cmp(&s.best[a].0).then(a.cmp(&b)));
        let ranked: Vec<Vec<u32>> = domains.iter().map(|&d| self.ranked(pkey, d, |_| true)).collect();
        let mut round = 0;
        while base.len() < width {
            for r in &ranked {
                if let Some(&n) = r.get(round)
                    && base.len() < width
                {
                    base.push(n);
                }
            }
            round += 1;
        }
    }

    /// The nodes of domain `d` that pass `keep`, in the order the scan
    /// would pick them if each winner were removed in turn: within a run by
    /// draw, across runs by the score of each run's next node. Only for
    /// the rare cases that need more than a domain's winner.
    fn ranked(&self, pkey: u64, d: usize, keep: impl Fn(u32) -> bool) -> Vec<u32> {
        let (first, last) = self.domains[d];
        // Per run: its kept nodes by draw, highest first, as a stack.
        let mut stacks: Vec<(f64, Vec<(u64, u32)>)> = self.runs[first as usize..last as usize]
            .iter()
            .map(|run| {
                let mut v: Vec<(u64, u32)> =
                    (run.start..run.end).filter(|&i| keep(i)).map(|i| (draw(pkey, self.keys[i as usize]), i)).collect();
                // Ascending by draw, ties: higher index first, so popping
                // yields the highest draw and, among equal draws, the lower index.
                v.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
                (run.inv_weight, v)
            })
            .collect();
        let mut out = Vec::new();
        loop {
            let mut pick: Option<(f64, usize)> = None;
            for (k, (inv, stack)) in stacks.iter().enumerate() {
                if let Some(&(h, _)) = stack.last() {
                    let score = log2_unit(h) * inv;
                    if pick.is_none_or(|(best, _)| score > best) {
                        pick = Some((score, k));
                    }
                }
            }
            let Some((_, k)) = pick else { return out };
            if let Some((_, node)) = stacks[k].1.pop() {
                out.push(node);
            }
        }
    }

    /// Step 2 for one remap; true if it applied.
    fn apply_remap(&self, r: &Remap, base: &[u32], nodes: &mut [u32]) -> bool {
        let (Some(from), Some(to)) = (self.index(r.from), self.index(r.to)) else {
            return false; // the map's invariants make this unreachable
        };
        let Some(slot) = base.iter().position(|&b| b == from) else {
            return false; // stale: the hash no longer picks `from`
        };
        if nodes[slot] != from || !self.may_take(nodes, slot, from, to) {
            return false;
        }
        nodes[slot] = to;
        true
    }

    /// The rule of step 2: `to` may take slot `slot` of `nodes`, whose
    /// hashed node is `from`, if it is not in `nodes` and its domain holds
    /// no more of the other copies than `from`'s domain does.
    pub(crate) fn may_take(&self, nodes: &[u32], slot: usize, from: u32, to: u32) -> bool {
        if nodes.contains(&to) {
            return false;
        }
        let others = || nodes.iter().enumerate().filter(move |&(k, &n)| k != slot && n != NONE);
        let in_domain = |d: u32| others().filter(|&(_, &n)| self.domain[n as usize] == d).count();
        in_domain(self.domain[to as usize]) <= in_domain(self.domain[from as usize])
    }

    /// Step 3 for one slot: the node that takes it, or [`NONE`].
    fn substitute(&self, pkey: u64, slot: usize, s: &Scratch, nodes: &[u32]) -> u32 {
        let live = |d: u32| {
            nodes
                .iter()
                .enumerate()
                .filter(|&(k, &n)| k != slot && n != NONE && self.up[n as usize] && self.domain[n as usize] == d)
                .count()
        };
        // (live copies, -score, node): the smallest wins.
        let mut pick: Option<(usize, f64, u32)> = None;
        let better = |pick: &Option<(usize, f64, u32)>, c: usize, score: f64| match pick {
            None => true,
            Some((pc, ps, _)) => c < *pc || (c == *pc && score > *ps),
        };
        for d in 0..self.domains.len() {
            let (score, node) = s.best_up[d];
            if node == NONE {
                continue; // no up node in this domain
            }
            let c = live(d as u32);
            if !nodes.contains(&node) {
                if better(&pick, c, score) {
                    pick = Some((c, score, node));
                }
                continue;
            }
            // The domain's best up node is taken already (only with fewer
            // domains than copies): look further down the domain.
            if pick.is_some_and(|(pc, _, _)| c > pc) {
                continue;
            }
            let next = self.ranked(pkey, d, |i| self.up[i as usize] && !nodes.contains(&i)).first().copied();
            if let Some(n) = next {
                // The same product the scan computes for this node's run.
                let score = log2_unit(draw(pkey, self.keys[n as usize])) * self.inv_weight[n as usize];
                if better(&pick, c, score) {
                    pick = Some((c, score, n));
                }
            }
        }
        pick.map_or(NONE, |(_, _, n)| n)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;
    use crate::placement::map::{FailureDomain, Node, NodeState};
    use crate::placement::protection::Protection;
    use crate::placement::test_utils::{cluster, cluster_with, node};

    const TIB: u64 = 1 << 40;
    const GOLDEN_PLACEMENT: [[u32; 3]; 5] = [[19, 27, 5], [15, 32, 4], [22, 38, 35], [2, 5, 23], [14, 29, 32]];

    fn racks_of(map: &PlacementMap, nodes: &[NodeId]) -> Vec<String> {
        nodes.iter().map(|id| map.domain_of(map.node(*id).expect("listed node exists")).to_owned()).collect()
    }

    fn distinct<T: Ord + Clone>(v: &[T]) -> usize {
        v.iter().cloned().collect::<BTreeSet<_>>().len()
    }

    #[test]
    fn placement_is_pinned() {
        // Golden values: if this fails, every live cluster would move its
        // data on upgrade. Change the algorithm only with a new ALGORITHM.
        let map = cluster(40, 4, 3, 1024, |i| TIB + u64::from(i % 3) * TIB);
        let placer = Placer::new(&map);
        let got: Vec<Vec<u32>> =
            [0, 1, 2, 511, 1023].iter().map(|&pg| placer.place(pg).iter().map(|n| n.0).collect()).collect();
        assert_eq!(got, GOLDEN_PLACEMENT, "{got:?}");
    }

    #[test]
    fn placement_is_deterministic_and_independent_of_node_order() {
        let map = cluster(50, 5, 3, 512, |_| TIB);
        let mut reversed: Vec<Node> = map.nodes().to_vec();
        reversed.reverse();
        let again = PlacementMap::new(map.protection(), map.failure_domain().clone(), 512, reversed).expect("valid");
        assert_eq!(Placer::new(&map).table(), Placer::new(&again).table());
        assert_eq!(Placer::new(&map).table(), Placer::new(&map).table());
    }

    #[test]
    fn copies_land_on_distinct_nodes_in_distinct_racks() {
        let map = cluster(60, 6, 3, 2048, |i| TIB * u64::from(1 + i % 4));
        let table = Placer::new(&map).table();
        for pg in 0..map.pg_count() {
            let nodes = table.nodes(pg);
            assert_eq!(nodes.len(), 3, "pg {pg}");
            assert_eq!(distinct(nodes), 3, "pg {pg}: {nodes:?}");
            assert_eq!(distinct(&racks_of(&map, nodes)), 3, "pg {pg}: {nodes:?}");
        }
    }

    #[test]
    fn with_fewer_racks_than_copies_the_spread_is_as_even_as_possible() {
        // 2 racks, rep:3: two copies in one rack, one in the other.
        let map = cluster(8, 4, 3, 512, |_| TIB);
        let table = Placer::new(&map).table();
        for pg in 0..map.pg_count() {
            let nodes = table.nodes(pg);
            assert_eq!(distinct(nodes), 3);
            let mut per_rack: BTreeMap<String, usize> = BTreeMap::new();
            for r in racks_of(&map, nodes) {
                *per_rack.entry(r).or_default() += 1;
            }
            let mut counts: Vec<usize> = per_rack.into_values().collect();
            counts.sort();
            assert_eq!(counts, vec![1, 2], "pg {pg}");
        }
        // One rack of 2 and one of 6, rep:4: 2 + 2.
        let lopsided = cluster(8, 6, 4, 256, |_| TIB);
        for pg in 0..256 {
            let nodes = Placer::new(&lopsided).place(pg);
            let in_small = racks_of(&lopsided, &nodes).iter().filter(|r| *r == "r1").count();
            assert_eq!((nodes.len(), in_small), (4, 2), "pg {pg}");
        }
    }

    #[test]
    fn with_fewer_nodes_than_copies_every_node_gets_one() {
        let map = cluster(2, 1, 3, 16, |_| TIB);
        for pg in 0..16 {
            let mut nodes = Placer::new(&map).place(pg);
            nodes.sort();
            assert_eq!(nodes, vec![NodeId(0), NodeId(1)]);
        }
        let empty = PlacementMap::new(Protection::default(), FailureDomain::Node, 16, vec![]).expect("valid");
        assert!(Placer::new(&empty).place(3).is_empty());
    }

    #[test]
    fn copies_follow_capacity() {
        // rep:1: node i gets a share proportional to weight 1..=4.
        let map = cluster(20, 1, 1, 1 << 16, |i| TIB * u64::from(1 + i % 4));
        let per_node = Placer::new(&map).table().copies_per_node();
        let total_weight: u64 = map.nodes().iter().map(|n| n.weight).sum();
        for n in map.nodes() {
            let want = f64::from(1u32 << 16) * n.weight as f64 / total_weight as f64;
            let got = per_node.get(&n.id).copied().unwrap_or(0) as f64;
            assert!((got / want - 1.0).abs() < 0.08, "{}: {got} copies, want {want:.0}", n.name);
        }
        // rep:3 over 12 racks of equal weight, nodes of weight 1, 2 and 3
        // in each: within a rack, copies follow weight.
        let map = cluster(36, 3, 3, 1 << 15, |i| TIB * u64::from(1 + i % 3));
        let per_node = Placer::new(&map).table().copies_per_node();
        for n in map.nodes() {
            let want = f64::from(3u32 << 15) / 12.0 * n.weight as f64 / (6 * TIB) as f64;
            let got = per_node.get(&n.id).copied().unwrap_or(0) as f64;
            assert!((got / want - 1.0).abs() < 0.08, "{}: {got} copies, want {want:.0}", n.name);
        }
    }

    #[test]
    fn down_and_out_nodes_hold_nothing_and_only_their_copies_move() {
        // Slots keep their positions: an ec group's shard i stays shard i.
        for protection in ["rep:3", "ec:4+2"] {
            let protection: Protection = protection.parse().expect("valid");
            let width = protection.width();
            let map = cluster_with(protection, 60, 6, 2048, |_| TIB);
            let before = Placer::new(&map).table();
            for state in [NodeState::Down, NodeState::Out] {
                let mut failed = map.clone();
                failed.set_state(NodeId(17), state).expect("known node");
                let after = Placer::new(&failed).table();
                for pg in 0..map.pg_count() {
                    let (b, a) = (before.nodes(pg), after.nodes(pg));
                    assert!(!a.contains(&NodeId(17)), "{protection} pg {pg}");
                    assert_eq!((b.len(), a.len()), (width, width), "{protection} pg {pg}");
                    assert_eq!(distinct(&racks_of(&failed, a)), width, "{protection} pg {pg}");
                    match b.iter().position(|&n| n == NodeId(17)) {
                        None => assert_eq!(a, b, "{protection} pg {pg} moved without holding the failed node"),
                        Some(slot) => {
                            for k in 0..width {
                                assert_eq!(a[k] == b[k], k != slot, "{protection} pg {pg}: only slot {slot} changes");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_failed_nodes_copies_scatter_over_the_cluster() {
        let map = cluster(100, 10, 3, 4096, |_| TIB);
        let before = Placer::new(&map).table();
        let mut failed = map.clone();
        failed.set_state(NodeId(5), NodeState::Down).expect("known node");
        let after = Placer::new(&failed).table();
        let before = &before;
        let receivers: BTreeSet<NodeId> = (0..map.pg_count())
            .filter(|&pg| before.holds(pg, NodeId(5)))
            .flat_map(|pg| after.nodes(pg).iter().copied().filter(move |n| !before.holds(pg, *n)))
            .collect();
        // ~123 copies over 99 nodes: far more than the 9 rack mates.
        assert!(receivers.len() > 50, "only {} receivers", receivers.len());
    }

    #[test]
    fn adding_a_node_moves_copies_only_onto_it() {
        let map = cluster(60, 6, 3, 4096, |_| TIB);
        let before = Placer::new(&map).table();
        // One node into an existing rack, then one in a new rack.
        for (id, rack_size) in [(60, 6), (61, 1)] {
            let mut grown = map.clone();
            let mut n = node(id, rack_size, TIB);
            if rack_size == 6 {
                n = n.with_label("rack", "r3");
            }
            grown.add_nodes([n]).expect("new node");
            let after = Placer::new(&grown).table();
            let mut arrivals = 0u64;
            for pg in 0..map.pg_count() {
                for n in after.nodes(pg) {
                    if !before.holds(pg, *n) {
                        assert_eq!(n.0, id, "pg {pg}: a copy moved between old nodes");
                        arrivals += 1;
                    }
                }
            }
            // Fair share: 3 * 4096 / 61 = 201.
            assert!((150..260).contains(&arrivals), "{arrivals} copies moved to node {id}");
        }
    }

    #[test]
    fn remaps_move_one_copy_and_never_break_the_domain_rule() {
        let mut map = cluster(30, 3, 3, 64, |_| TIB);
        let placer = Placer::new(&map);
        let pg = 9;
        let hashed = placer.place(pg);
        let from = hashed[1];
        let racks = racks_of(&map, &hashed);
        let same_rack =
            map.nodes().iter().find(|n| map.domain_of(n) == racks[0] && n.id != hashed[0]).expect("rack mate").id;
        let free_rack =
            map.nodes().iter().find(|n| !racks.contains(&map.domain_of(n).to_owned())).expect("other rack").id;
        // To a free rack: applies. To the rack of another copy: ignored.
        for (to, applies) in [(free_rack, true), (same_rack, false), (hashed[2], false)] {
            map.set_remaps(vec![Remap { pg, from, to }]).expect("valid remap");
            let got = Placer::new(&map).place(pg);
            let mut want = hashed.clone();
            if applies {
                want[1] = to;
            }
            assert_eq!(got, want, "remap {from} -> {to}");
        }
    }

    /// A random cluster: up to 40 nodes in up to 8 racks, random weights
    /// and states, rep:1..=4 or ec:K+M up to 6 wide.
    fn arb_map() -> impl Strategy<Value = PlacementMap> {
        let node = (
            0u32..8,
            1u64..=8,
            prop_oneof![6 => Just(NodeState::Up), 1 => Just(NodeState::Down), 1 => Just(NodeState::Out)],
        );
        let protection = prop_oneof![
            (1u8..=4).prop_map(|n| Protection::replicated(n).expect("valid")),
            (1u8..=4, 1u8..=2).prop_map(|(k, m)| Protection::erasure_coded(k, m).expect("valid")),
        ];
        (proptest::collection::vec(node, 0..40), protection).prop_map(|(nodes, p)| {
            let list = nodes
                .into_iter()
                .enumerate()
                .map(|(i, (rack, w, state))| {
                    let i = i as u32 * 7 + 3; // ids need not be dense
                    Node::new(i, format!("n{i}"), w * TIB).with_label("rack", format!("r{rack}")).with_state(state)
                })
                .collect();
            PlacementMap::new(p, FailureDomain::default(), 64, list).expect("valid map")
        })
    }

    proptest! {
        #[test]
        fn every_placement_keeps_the_rules(map in arb_map(), pg in 0u32..64) {
            let nodes = Placer::new(&map).place(pg);
            let up: Vec<&Node> = map.nodes().iter().filter(|n| n.state.holds_data()).collect();
            let width = map.protection().width();
            prop_assert_eq!(nodes.len(), width.min(up.len()));
            prop_assert_eq!(distinct(&nodes), nodes.len());
            for id in &nodes {
                prop_assert!(map.node(*id).is_some_and(|n| n.state.holds_data()));
            }
            // As many domains as possible, and as even as possible.
            let up_domains = up.iter().map(|n| map.domain_of(n)).collect::<BTreeSet<_>>().len();
            let racks = racks_of(&map, &nodes);
            prop_assert_eq!(distinct(&racks), nodes.len().min(up_domains));
            if map.honours().is_ok() {
                prop_assert_eq!(distinct(&racks), width);
            }
        }

        #[test]
        fn adding_a_node_moves_copies_only_onto_it_prop(
            map in arb_map(), rack in 0u32..9, weight in 1u64..=8, pg in 0u32..64,
        ) {
            // All up: with down nodes a newcomer may also shift a substitute.
            let mut up = map.clone();
            for n in map.nodes() {
                up.set_state(n.id, NodeState::Up).expect("known node");
            }
            let before = Placer::new(&up).place(pg);
            let mut grown = up.clone();
            let newcomer = Node::new(1000, "new", weight * TIB).with_label("rack", format!("r{rack}"));
            grown.add_nodes([newcomer]).expect("fresh id and name");
            let after = Placer::new(&grown).place(pg);
            let arrivals: Vec<NodeId> = after.iter().copied().filter(|n| !before.contains(n)).collect();
            prop_assert!(arrivals.is_empty() || arrivals == vec![NodeId(1000)], "{:?} -> {:?}", before, after);
        }

        #[test]
        fn failing_a_node_moves_only_its_copies(map in arb_map(), victim in 0usize..40) {
            let Some(v) = map.nodes().get(victim % map.nodes().len().max(1)).map(|n| n.id) else { return Ok(()) };
            let before = Placer::new(&map).table();
            let mut failed = map.clone();
            failed.set_state(v, NodeState::Down).expect("known node");
            let after = Placer::new(&failed).table();
            for pg in 0..64 {
                let arrivals = after.nodes(pg).iter().filter(|n| !before.holds(pg, **n)).count();
                let lost = usize::from(before.holds(pg, v));
                // One copy may arrive for the one lost; with other nodes
                // already down, a substitute may shift once more.
                prop_assert!(arrivals <= 2 * lost, "pg {}: {:?} -> {:?}", pg, before.nodes(pg), after.nodes(pg));
            }
        }
    }
}
