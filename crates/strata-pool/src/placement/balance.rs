//! The balancer: a small table of remaps that evens out the group copies
//! each node holds, moving as little data as it can.
//!
//! Hashing alone gives each node a number of group copies that varies
//! like a binomial draw: with ~157 copies per node the spread is ±8%, so
//! the fullest node of 2,500 holds ~28% more than the mean and the cluster
//! is "full" at ~78% of raw (`strata sim`). More groups shrink the spread
//! only as one over the square root. Instead, like Ceph's upmap balancer,
//! this module computes a few exceptions ([`Remap`]) that move single
//! copies from overfull to underfull nodes; they are stored in the map, so
//! placement stays a pure function of the map.
//!
//! # Targets, bands and aims
//!
//! A node's target is its weight's share of all copies, over up nodes.
//! A node is overfull above `target * (1 + tolerance)` (and at least one
//! copy above target), underfull below the mirror image. Phase one drains
//! every overfull node, most overfull first, down to its aim (half the
//! band, at least half a copy) into nodes that stay within their aim;
//! phase two fills every underfull node, most underfull first, up to its
//! aim from nodes that stay within theirs. Nodes the balancer touches thus
//! end well inside the band, so the next small change of targets (a
//! failure raises every target by a fraction of a copy) moves nothing. A
//! move is made only if it lowers `sum(load^2 / target)`, so the balancer
//! always terminates.

//! # Moving little
//!
//! Given the previous epoch's table, each candidate move has a cost: +1 if
//! it takes a copy off a node that held it in the previous epoch (data
//! that would otherwise have stayed put must move), 0 if the copy was
//! arriving anyway, and -1 if it sends a copy back to a node that held it
//! before (data that need not move at all). Candidates are ranked by cost,
//! then by how far below target the receiver is. After a failure the
//! overfull nodes are mostly those that just received a failed node's
//! copies, and they pass those on at no cost; after an addition, overfull
//! newcomers hand copies back to the nodes they took them from.
//!
//! Every move is verified by placing the group again with the new remap
//! (through the same code every gateway runs); a move that would change
//! anything else is not made, and its group is left alone.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::map::{NodeId, PlacementMap, Remap};
use super::placer::{NONE, Placer, Scratch, Slots};
use super::table::PlacementTable;

/// Balancer settings.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct BalanceOptions {
    /// Allowed relative deviation of a node's copies from its target.
    /// Default: 0.01 (1%).
    pub tolerance: f64,
    /// Stop after this many moves. Default: unlimited.
    pub max_moves: usize,
    /// Threads for placing every group (the result does not depend on
    /// it). Default: 1.
    pub threads: usize,
    /// Count only the first `slots` nodes of every group: the copies a
    /// protection narrower than the map takes (a pool's map lists 12
    /// nodes a group, a `rep:3` volume uses the first 3). Moves are made
    /// in those slots only. Default: every slot.
    pub slots: usize,
}

impl Default for BalanceOptions {
    fn default() -> BalanceOptions {
        BalanceOptions { tolerance: 0.01, max_moves: usize::MAX, threads: 1, slots: usize::MAX }
    }
}

/// What [`balance`] produced.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Balanced {
    /// The new exception table, sorted; store it with
    /// [`PlacementMap::set_remaps`] in the next epoch.
    pub remaps: Vec<Remap>,
    /// Copies moved by the balancer (both phases).
    pub moves: usize,
    /// Remaps of the input map dropped because they no longer applied.
    pub dropped: usize,
    /// Highest `copies / target` over up nodes afterwards.
    pub max_over_target: f64,
    /// Lowest `copies / target` over up nodes afterwards.
    pub min_over_target: f64,
    /// The placement of every group under the map with `remaps`: what
    /// [`Placer::table`] returns for it, without placing everything again.
    pub table: PlacementTable,
    /// The placement under the input map with its still-applying remaps:
    /// `before.moved(&table, ..)` is what the balancer's own moves cost.
    pub before: PlacementTable,
}

/// A relative deviation, totally ordered for the sorted node set.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Dev(f64);

impl Eq for Dev {}

impl PartialOrd for Dev {
    fn partial_cmp(&self, other: &Dev) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Dev {
    fn cmp(&self, other: &Dev) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The balancer's two phases.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Move copies off overfull nodes.
    Drain,
    /// Move copies onto underfull nodes.
    Fill,
}

/// A proposed move of one copy.
#[derive(Debug, Clone, Copy)]
struct Move {
    pg: u32,
    slot: usize,
    to: u32,
    /// Data-movement cost: -1, 0 or +1 (see the module doc).
    cost: i32,
    /// Receiver's deviation (drain) or giver's negated deviation (fill):
    /// lower is better.
    rank: f64,
}

impl Move {
    fn better_than(&self, other: &Option<Move>) -> bool {
        match other {
            None => true,
            Some(o) => (self.cost, Dev(self.rank)) < (o.cost, Dev(o.rank)),
        }
    }
}

/// The balancer's working state over one map.
struct State<'a> {
    placer: Placer,
    previous: Option<&'a PlacementTable>,
    width: usize,
    /// The slots counted and moved: the first `counted` of `width`.
    counted: usize,
    tolerance: f64,
    /// Per group: its remaps (being edited).
    remaps: Vec<Vec<Remap>>,
    /// Per group: `width` slots of node indices ([`NONE`] = empty).
    rows: Vec<u32>,
    /// Per group: the hashed set, `width` slots.
    bases: Vec<u32>,
    /// Groups whose re-placement surprised the balancer: left alone.
    frozen: Vec<bool>,
    load: Vec<u64>,
    target: Vec<f64>,
    /// Per node: the groups it holds now.
    holds: Vec<Vec<u32>>,
    /// Per node: the groups it held in the previous table.
    held: Vec<Vec<u32>>,
    /// Up nodes by deviation.
    order: BTreeSet<(Dev, u32)>,
    /// (group, node) copies on a node that did not hold them in the
    /// previous table: moving them on costs nothing.
    arrivals: BTreeSet<(u32, u32)>,
    scratch: Scratch,
    slots: Slots,
    moves: usize,
}

/// Computes the remaps that balance `map`, starting from its own remaps.
/// `previous` is the table of the epoch before (if any): the balancer then
/// prefers moves that keep data where it was.
///
/// Deterministic: the same inputs give the same remaps. Cost: one
/// placement of every group, plus one per move.
pub fn balance(map: &PlacementMap, previous: Option<&PlacementTable>, opts: &BalanceOptions) -> Balanced {
    let mut st = State::new(map, previous, opts.tolerance, opts.slots);
    let dropped = st.load_map(map, opts.threads);
    st.set_targets();
    let before = st.table(map.pg_count());
    st.run_phase(Phase::Drain, opts.max_moves);
    st.run_phase(Phase::Fill, opts.max_moves);
    let (min_over_target, max_over_target) = st.spread();
    let table = st.table(map.pg_count());
    let mut remaps: Vec<Remap> = st.remaps.into_iter().flatten().collect();
    remaps.sort_unstable();
    Balanced { remaps, moves: st.moves, dropped, max_over_target, min_over_target, table, before }
}

impl<'a> State<'a> {
    fn new(map: &PlacementMap, previous: Option<&'a PlacementTable>, tolerance: f64, slots: usize) -> State<'a> {
        let placer = Placer::new(map);
        let groups = map.pg_count() as usize;
        let width = placer.width();
        let nodes = placer.node_count();
        State {
            placer,
            previous,
            width,
            counted: slots.clamp(1, width.max(1)),
            tolerance: tolerance.max(0.0),
            remaps: vec![Vec::new(); groups],
            rows: vec![NONE; groups * width],
            bases: vec![NONE; groups * width],
            frozen: vec![false; groups],
            load: vec![0; nodes],
            target: vec![0.0; nodes],
            holds: vec![Vec::new(); nodes],
            held: vec![Vec::new(); nodes],
            order: BTreeSet::new(),
            arrivals: BTreeSet::new(),
            scratch: Scratch::default(),
            slots: Slots::default(),
            moves: 0,
        }
    }

    /// Places every group with the map's remaps, keeping those that apply.
    /// Returns how many were dropped.
    fn load_map(&mut self, map: &PlacementMap, threads: usize) -> usize {
        let rows = self.placer.rows(threads);
        let mut dropped = 0;
        for (r, applied) in map.remaps().iter().zip(&rows.applied) {
            if *applied {
                self.remaps[r.pg as usize].push(*r);
            } else {
                dropped += 1;
            }
        }
        self.bases = rows.base;
        self.rows = rows.nodes;
        for pg in 0..map.pg_count() {
            let at = pg as usize * self.width;
            for &n in &self.rows[at..at + self.counted] {
                if n != NONE {
                    self.load[n as usize] += 1;
                    self.holds[n as usize].push(pg);
                }
            }
            if let Some(prev) = self.previous {
                for id in self.held_before(prev, pg) {
                    if let Some(i) = self.placer.index(*id) {
                        self.held[i as usize].push(pg);
                    }
                }
                for &n in &self.rows[at..at + self.counted] {
                    if n != NONE && !self.held_before(prev, pg).contains(&self.placer.id(n)) {
                        self.arrivals.insert((pg, n));
                    }
                }
            }
        }
        dropped
    }

    fn set_targets(&mut self) {
        let up: Vec<u32> = (0..self.placer.node_count() as u32).filter(|&i| self.placer.is_up(i)).collect();
        let total: u64 = self.load.iter().sum();
        let weight: f64 = up.iter().map(|&i| self.placer.weight(i) as f64).sum();
        if total == 0 || weight <= 0.0 {
            return; // nothing to balance
        }
        for &i in &up {
            self.target[i as usize] = total as f64 * self.placer.weight(i) as f64 / weight;
            self.order.insert((self.dev(i), i));
        }
    }

    fn dev(&self, i: u32) -> Dev {
        Dev(self.load[i as usize] as f64 / self.target[i as usize] - 1.0)
    }

    /// The allowed distance from target, in copies: at least one.
    fn slack(&self, i: u32) -> f64 {
        (self.target[i as usize] * self.tolerance).max(1.0)
    }

    /// The distance from target a drained or filled node is brought to:
    /// half the band, at least half a copy. Nodes end well inside their
    /// band, so the next small change of targets moves nothing.
    fn aim(&self, i: u32) -> f64 {
        (self.target[i as usize] * self.tolerance / 2.0).max(0.5)
    }

    fn above_aim(&self, i: u32) -> bool {
        self.load[i as usize] as f64 > self.target[i as usize] + self.aim(i)
    }

    fn below_aim(&self, i: u32) -> bool {
        (self.load[i as usize] as f64) < self.target[i as usize] - self.aim(i)
    }

    /// Up nodes take part; others hold nothing and have no target.
    fn is_balanced(&self, i: u32) -> bool {
        self.target[i as usize] > 0.0
    }

    fn overfull(&self, i: u32) -> bool {
        self.load[i as usize] as f64 > self.target[i as usize] + self.slack(i)
    }

    fn underfull(&self, i: u32) -> bool {
        (self.load[i as usize] as f64) < self.target[i as usize] - self.slack(i)
    }

    /// True if moving one copy from `a` to `b` lowers `sum(load^2/target)`.
    fn improves(&self, a: u32, b: u32) -> bool {
        let (la, ta) = (self.load[a as usize] as f64, self.target[a as usize]);
        let (lb, tb) = (self.load[b as usize] as f64, self.target[b as usize]);
        2.0 * (la / ta - lb / tb) > 1.0 / ta + 1.0 / tb
    }

    fn row(&self, pg: u32) -> &[u32] {
        let at = pg as usize * self.width;
        &self.rows[at..at + self.width]
    }

    /// The slots of group `pg` that are counted and moved.
    fn counted_row(&self, pg: u32) -> &[u32] {
        &self.row(pg)[..self.counted]
    }

    /// The nodes that held the counted slots of `pg` in the previous table.
    fn held_before<'t>(&self, prev: &'t PlacementTable, pg: u32) -> &'t [NodeId] {
        let nodes = prev.nodes(pg);
        &nodes[..nodes.len().min(self.counted)]
    }

    /// -1, 0 or +1: see the module doc.
    fn cost(&self, pg: u32, from: u32, to: u32) -> i32 {
        let Some(prev) = self.previous else {
            return 0;
        };
        let had = |i: u32| self.held_before(prev, pg).contains(&self.placer.id(i));
        i32::from(!had(to)) - i32::from(!had(from))
    }

    /// Whether `to` can take `slot` of group `pg` from its holder.
    fn can_take(&self, pg: u32, slot: usize, to: u32) -> bool {
        let base = self.bases[pg as usize * self.width + slot];
        !self.frozen[pg as usize]
            && self.placer.is_up(to)
            && base != NONE
            && self.placer.may_take(self.row(pg), slot, base, to)
    }

    /// One phase: drain every overfull node down to its aim (most overfull
    /// first), or fill every underfull node up to its aim (most underfull
    /// first). A node leaves the phase at its aim or when no move helps.
    fn run_phase(&mut self, phase: Phase, max_moves: usize) {
        let out_of_band = |st: &State<'_>, i: u32| match phase {
            Phase::Drain => st.overfull(i),
            Phase::Fill => st.underfull(i),
        };
        let mut active: Vec<bool> =
            (0..self.load.len() as u32).map(|i| self.is_balanced(i) && out_of_band(self, i)).collect();
        while self.moves < max_moves {
            let is_active = |&&(_, i): &&(Dev, u32)| active[i as usize];
            let next = match phase {
                Phase::Drain => self.order.iter().rev().find(is_active),
                Phase::Fill => self.order.iter().find(is_active),
            };
            let Some(&(_, i)) = next else { break };
            let made = match phase {
                Phase::Drain => self.above_aim(i) && self.best_move_from(i).is_some_and(|m| self.commit(m)),
                Phase::Fill => self.below_aim(i) && self.best_move_to(i).is_some_and(|m| self.commit(m)),
            };
            if !made {
                active[i as usize] = false;
            }
        }
    }

    /// The best move of one of `a`'s copies to a node that stays within
    /// its aim: home first, then to the most underfull node.
    fn best_move_from(&self, a: u32) -> Option<Move> {
        let mut best: Option<Move> = None;
        for &pg in &self.holds[a as usize] {
            let Some(slot) = self.counted_row(pg).iter().position(|&n| n == a) else { continue };
            let mut consider = |to: u32| {
                if to == a || self.load[to as usize] as f64 + 1.0 > self.target[to as usize] + self.aim(to) {
                    return; // `to` would pass its aim
                }
                if !self.improves(a, to) || !self.can_take(pg, slot, to) {
                    return;
                }
                let m = Move { pg, slot, to, cost: self.cost(pg, a, to), rank: self.dev(to).0 };
                if m.better_than(&best) {
                    best = Some(m);
                }
            };
            // Nodes that held the group before: sending it back is cheap.
            if let Some(prev) = self.previous {
                for id in self.held_before(prev, pg) {
                    if let Some(i) = self.placer.index(*id) {
                        consider(i);
                    }
                }
            }
            // The most underfull node that can take it.
            let below = self.order.iter().take_while(|(d, _)| d.0 < 0.0);
            if let Some(&(_, to)) = below.filter(|&&(_, i)| i != a).find(|&&(_, i)| self.can_take(pg, slot, i)) {
                consider(to);
            }
            if best.is_some_and(|b| b.cost < 0) {
                break; // nothing beats sending a copy home
            }
        }
        best
    }

    /// The best move of a copy onto `b` from a node that stays within its
    /// aim: a copy `b` held before, then a copy that is moving anyway, then
    /// any copy of the most overfull node that has one `b` can take.
    fn best_move_to(&self, b: u32) -> Option<Move> {
        let mut best: Option<Move> = None;
        let consider = |pg: u32, a: u32, best: &mut Option<Move>| {
            if a == NONE || a == b || (self.load[a as usize] as f64) - 1.0 < self.target[a as usize] - self.aim(a) {
                return; // `a` would pass its aim
            }
            let Some(slot) = self.counted_row(pg).iter().position(|&n| n == a) else { return };
            if !self.improves(a, b) || !self.can_take(pg, slot, b) {
                return;
            }
            let m = Move { pg, slot, to: b, cost: self.cost(pg, a, b), rank: -self.dev(a).0 };
            if m.better_than(best) {
                *best = Some(m);
            }
        };
        for &pg in &self.held[b as usize] {
            if !self.row(pg).contains(&b) {
                for &a in self.counted_row(pg) {
                    consider(pg, a, &mut best);
                }
            }
        }
        if best.is_some_and(|m| m.cost < 0) {
            return best;
        }
        for &(pg, a) in &self.arrivals {
            consider(pg, a, &mut best);
        }
        if best.is_some_and(|m| m.cost <= 0) && self.previous.is_some() {
            return best;
        }
        let above = self.order.iter().rev().take_while(|(d, _)| d.0 > 0.0).map(|&(_, i)| i);
        for a in above {
            for &pg in &self.holds[a as usize] {
                consider(pg, a, &mut best);
            }
            if best.is_some() {
                return best;
            }
        }
        best
    }

    /// Makes a move if re-placing the group confirms it; true if made.
    fn commit(&mut self, m: Move) -> bool {
        let at = m.pg as usize * self.width;
        let from = self.rows[at + m.slot];
        let base = self.bases[at + m.slot];
        let mut remaps: Vec<Remap> =
            self.remaps[m.pg as usize].iter().filter(|r| self.placer.index(r.from) != Some(base)).copied().collect();
        if m.to != base {
            remaps.push(Remap { pg: m.pg, from: self.placer.id(base), to: self.placer.id(m.to) });
            remaps.sort_unstable();
        }
        self.placer.place_slots(m.pg, &remaps, &mut self.scratch, &mut self.slots);
        let mut expected = self.row(m.pg).to_vec();
        expected[m.slot] = m.to;
        let got = &self.slots.nodes;
        let same = got.len() <= self.width
            && (0..self.width).all(|k| got.get(k).copied().unwrap_or(NONE) == expected[k])
            && self.slots.applied.iter().all(|&a| a);
        if !same {
            self.frozen[m.pg as usize] = true;
            return false;
        }
        self.remaps[m.pg as usize] = remaps;
        self.rows[at + m.slot] = m.to;
        for (node, delta) in [(from, -1i64), (m.to, 1)] {
            self.order.remove(&(self.dev(node), node));
            self.load[node as usize] = self.load[node as usize].saturating_add_signed(delta);
            self.order.insert((self.dev(node), node));
        }
        let holds = &mut self.holds[from as usize];
        if let Some(k) = holds.iter().position(|&g| g == m.pg) {
            holds.swap_remove(k);
        }
        self.holds[m.to as usize].push(m.pg);
        if let Some(prev) = self.previous {
            self.arrivals.remove(&(m.pg, from));
            if !self.held_before(prev, m.pg).contains(&self.placer.id(m.to)) {
                self.arrivals.insert((m.pg, m.to));
            }
        }
        self.moves += 1;
        true
    }

    fn table(&self, pg_count: u32) -> PlacementTable {
        let mut t = PlacementTable::empty(pg_count, self.width);
        for pg in 0..pg_count {
            t.set(pg, self.row(pg).iter().filter(|&&n| n != NONE).map(|&n| self.placer.id(n)));
        }
        t
    }

    /// Lowest and highest `load / target` over up nodes.
    fn spread(&self) -> (f64, f64) {
        let ratios = self.order.iter().map(|&(_, i)| self.load[i as usize] as f64 / self.target[i as usize]);
        ratios.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| (lo.min(r), hi.max(r)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::placement::map::{NodeId, NodeState};
    use crate::placement::test_utils::{cluster, node};

    const TIB: u64 = 1 << 40;

    /// 100 nodes in racks of 10, rep:3, 4096 groups (~123 copies a node).
    fn fresh() -> PlacementMap {
        cluster(100, 10, 3, 4096, |_| TIB)
    }

    fn balanced(map: &PlacementMap, prev: Option<&PlacementTable>) -> (PlacementMap, Balanced) {
        let b = balance(map, prev, &BalanceOptions::default());
        let mut next = map.clone();
        next.set_remaps(b.remaps.clone()).expect("balancer remaps are valid");
        (next, b)
    }

    /// The band for a target of `t` copies: 1% or one copy.
    fn band(t: f64) -> f64 {
        (0.01f64).max(1.0 / t) + 1e-9
    }

    /// Copies per node over their weight's share, lowest and highest.
    fn spread(map: &PlacementMap, table: &PlacementTable) -> (f64, f64) {
        let per = table.copies_per_node();
        let total: u64 = per.values().sum();
        let up: Vec<_> = map.nodes().iter().filter(|n| n.state.holds_data()).collect();
        let weight: u64 = up.iter().map(|n| n.weight).sum();
        let r = up
            .iter()
            .map(|n| per.get(&n.id).copied().unwrap_or(0) as f64 / (total as f64 * n.weight as f64 / weight as f64));
        r.fold((f64::INFINITY, 0.0), |(lo, hi), x| (lo.min(x), hi.max(x)))
    }

    #[test]
    fn a_fresh_cluster_ends_within_the_band_and_its_table_is_the_maps() {
        let map = fresh();
        let (raw_lo, raw_hi) = spread(&map, &Placer::new(&map).table());
        assert!(raw_hi > 1.1 && raw_lo < 0.9, "hashing alone should be uneven: {raw_lo}..{raw_hi}");
        let (next, b) = balanced(&map, None);
        assert!(b.moves > 0 && b.remaps.len() == b.moves, "{} moves, {} remaps", b.moves, b.remaps.len());
        assert_eq!(b.before, Placer::new(&map).table());
        assert_eq!(b.before.moved(&b.table, |_| 1), b.moves as u64);
        // The returned table is exactly what every gateway computes.
        assert_eq!(b.table, Placer::new(&next).table());
        let (lo, hi) = spread(&next, &b.table);
        // Band: 1% or one copy (of ~123) either side.
        assert!(hi <= 1.0 + band(122.88) && lo >= 1.0 - band(122.88), "{lo}..{hi}");
        assert_eq!((b.min_over_target, b.max_over_target), (lo, hi));
        for pg in 0..next.pg_count() {
            let racks: BTreeSet<&str> =
                b.table.nodes(pg).iter().map(|id| next.domain_of(next.node(*id).expect("node"))).collect();
            assert_eq!(racks.len(), 3, "pg {pg}: remaps broke the rack rule");
        }
    }

    #[test]
    fn balancing_is_deterministic_and_a_balanced_map_stays_put() {
        let (next, b) = balanced(&fresh(), None);
        assert_eq!(b, balance(&fresh(), None, &BalanceOptions::default()));
        let again = balance(&next, Some(&b.table), &BalanceOptions::default());
        assert_eq!((again.moves, again.dropped), (0, 0));
        assert_eq!(again.remaps, b.remaps);
    }

    #[test]
    fn threads_do_not_change_the_result() {
        let one = balance(&fresh(), None, &BalanceOptions::default());
        let two = balance(&fresh(), None, &BalanceOptions { threads: 3, ..BalanceOptions::default() });
        assert_eq!(one, two);
    }

    #[test]
    fn a_failure_moves_little_more_than_the_failed_nodes_copies() {
        let (map, b) = balanced(&fresh(), None);
        for victim in [0u32, 37, 99] {
            let mut failed = map.clone();
            failed.set_state(NodeId(victim), NodeState::Down).expect("known node");
            let (after, b2) = balanced(&failed, Some(&b.table));
            let held = b.table.copies_per_node()[&NodeId(victim)];
            let moved = b.table.moved(&b2.table, |_| 1);
            assert!(moved >= held, "node {victim}: its {held} copies must move, {moved} did");
            assert!(moved as f64 <= held as f64 * 1.1, "node {victim}: {moved} moved for {held} held");
            let (lo, hi) = spread(&after, &b2.table);
            assert!(hi <= 1.0 + band(124.1) && lo >= 1.0 - band(124.1), "node {victim}: {lo}..{hi}");
        }
    }

    #[test]
    fn adding_nodes_moves_little_more_than_their_share() {
        let (map, b) = balanced(&fresh(), None);
        // Two into existing racks, three into a new one.
        let mut grown = map.clone();
        grown
            .add_nodes([node(100, 10, TIB).with_label("rack", "r2"), node(101, 10, TIB).with_label("rack", "r7")])
            .expect("new");
        grown.add_nodes((102..105).map(|i| node(i, 1, TIB).with_label("rack", "r10"))).expect("new");
        let (after, b2) = balanced(&grown, Some(&b.table));
        let fair = (3 * 4096) as f64 * 5.0 / 105.0;
        let moved = b.table.moved(&b2.table, |_| 1) as f64;
        assert!(moved <= fair * 1.1 && moved >= fair * 0.9, "{moved} moved, fair share {fair}");
        let (lo, hi) = spread(&after, &b2.table);
        assert!(hi <= 1.0 + band(117.0) && lo >= 1.0 - band(117.0), "{lo}..{hi}");
    }

    /// Copies per node in the first `k` slots of every group, over the
    /// mean: lowest and highest.
    fn prefix_spread(map: &PlacementMap, table: &PlacementTable, k: usize) -> (f64, f64) {
        let mut per = std::collections::BTreeMap::new();
        for pg in 0..table.pg_count() {
            for n in table.nodes(pg).iter().take(k) {
                *per.entry(*n).or_insert(0u64) += 1;
            }
        }
        let up: Vec<_> = map.nodes().iter().filter(|n| n.state.holds_data()).map(|n| n.id).collect();
        let mean = per.values().sum::<u64>() as f64 / up.len() as f64;
        let r = up.iter().map(|n| per.get(n).copied().unwrap_or(0) as f64 / mean);
        r.fold((f64::INFINITY, 0.0), |(lo, hi), x| (lo.min(x), hi.max(x)))
    }

    #[test]
    fn a_wide_map_balances_the_slots_a_narrow_protection_takes() {
        // A pool's map lists 12 nodes a group; rep:3 volumes use the first 3.
        let ec = crate::placement::Protection::erasure_coded(8, 4).expect("valid");
        let map = crate::placement::test_utils::cluster_with(ec, 40, 1, 4096, |_| TIB);
        let hashed = prefix_spread(&map, &Placer::new(&map).table(), 3);
        assert!(hashed.1 > 1.05, "hashing alone leaves the first 3 slots uneven: {hashed:?}");
        let opts = BalanceOptions { slots: 3, ..BalanceOptions::default() };
        let b = balance(&map, None, &opts);
        let mut next = map.clone();
        next.set_remaps(b.remaps.clone()).expect("valid remaps");
        assert_eq!(b.table, Placer::new(&next).table());
        let t = 3.0 * 4096.0 / 40.0;
        let (lo, hi) = prefix_spread(&next, &b.table, 3);
        assert!(hi <= 1.0 + band(t) && lo >= 1.0 - band(t), "first 3 slots after balancing: {lo}..{hi}");
        assert_eq!((lo, hi), (b.min_over_target, b.max_over_target));

        // A node added: the first 3 slots stay even, and about its share moves.
        let mut grown = next.clone();
        grown.add_nodes([node(40, 1, TIB)]).expect("new node");
        let b2 = balance(&grown, Some(&b.table), &opts);
        let mut after = grown.clone();
        after.set_remaps(b2.remaps.clone()).expect("valid remaps");
        let (lo, hi) = prefix_spread(&after, &b2.table, 3);
        let t = 3.0 * 4096.0 / 41.0;
        assert!(hi <= 1.0 + band(t) && lo >= 1.0 - band(t), "after the add: {lo}..{hi}");
        let moved: usize = (0..4096)
            .map(|pg| {
                let before = &b.table.nodes(pg)[..3];
                b2.table.nodes(pg)[..3].iter().filter(|n| !before.contains(n)).count()
            })
            .sum();
        assert!((moved as f64) < t * 1.3, "{moved} copies of the first 3 slots moved, the new node's share is {t}");
    }

    #[test]
    fn copies_follow_weight_after_balancing() {
        let map = cluster(60, 6, 3, 4096, |i| TIB * u64::from(1 + i % 3));
        let (next, b) = balanced(&map, None);
        let (lo, hi) = spread(&next, &b.table);
        // Targets from ~102 to ~307 copies: 1% or one copy.
        assert!(hi <= 1.0 + band(102.0) && lo >= 1.0 - band(102.0), "{lo}..{hi}");
    }

    #[test]
    fn stale_remaps_are_dropped() {
        let map = fresh();
        let table = Placer::new(&map).table();
        // A remap from a node the hash did not choose for group 0.
        let outsider = (0..100).map(NodeId).find(|n| !table.holds(0, *n)).expect("some node");
        let other = (0..100).map(NodeId).find(|n| *n != outsider && !table.holds(0, *n)).expect("another");
        let mut stale = map.clone();
        stale.set_remaps(vec![Remap { pg: 0, from: outsider, to: other }]).expect("valid");
        let b = balance(&stale, None, &BalanceOptions::default());
        assert_eq!(b.dropped, 1);
        assert!(!b.remaps.iter().any(|r| r.pg == 0 && r.from == outsider));
    }

    #[test]
    fn degenerate_clusters_do_not_trouble_the_balancer() {
        let mut all_down = cluster(6, 2, 3, 64, |_| TIB);
        for i in 0..6 {
            all_down.set_state(NodeId(i), NodeState::Down).expect("known");
        }
        let b = balance(&all_down, None, &BalanceOptions::default());
        assert_eq!((b.moves, b.remaps.len()), (0, 0));
        // Three racks, rep:3, unequal racks: every group needs every rack,
        // so targets by weight cannot be met; the balancer stops.
        let lopsided = cluster(7, 5, 3, 256, |_| TIB).clone();
        let b = balance(&lopsided, None, &BalanceOptions::default());
        assert_eq!(b.table, {
            let mut m = lopsided.clone();
            m.set_remaps(b.remaps.clone()).expect("valid");
            Placer::new(&m).table()
        });
        assert_eq!(balance(&lopsided, None, &BalanceOptions { max_moves: 0, ..BalanceOptions::default() }).moves, 0);
    }
}
