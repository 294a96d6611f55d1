//! Who serves a volume: the decision each reconcile pass makes for each
//! volume, free of etcd, the store and the clock.
//!
//! The pass reads what it needs (the owner key, the volume's state, the
//! live nodes, what this node serves), asks [`decide`] and carries the
//! answer out. Keeping the decision pure lets every ownership transition
//! (a takeover after the owner's lease ended, the hand-over after a drain,
//! a fenced owner giving up) be tested here without etcd or processes.
//!
//! The safety of a transition never rests on this decision alone: the
//! owner key is changed by compare-and-set in etcd, and every replica's
//! epoch fence refuses a deposed owner. What the decision adds is
//! liveness and manners: not taking a volume over that cannot be served
//! yet, not deposing a live owner that only lost its key with a lease,
//! and spreading ownership evenly over the nodes.
//!
//! # Balance
//!
//! Every live node that is up in the map owns within one volume of an
//! even share, once the pool is quiet: the most loaded owner hands a
//! settled volume (no fill, no resync, served for [`SETTLE`]) to the least
//! loaded live in-sync holder of it whenever their counts differ by two
//! or more, one volume per [`REBALANCE_EVERY`], and names it as the
//! successor so that no other node takes the volume first. A hand-over
//! is planned: the owner flushes, cleans its log and ends its promises
//! before it lets go, so the successor opens it with nothing to repair
//! and the hosts' I/O waits on path errors for about a reconcile pass.
//! Only the most loaded nodes give volumes away and each hand-over lowers
//! the spread, so the spreading ends; a count read from a record one
//! pass old can overshoot by one volume, which the next round evens out.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use strata_pool::NodeId;

/// How long a volume without an owner waits for its last owner, when that
/// owner may be alive, before another node takes it over: a lease lost
/// while etcd was out of reach is taken back at the owner's next pass.
pub const RECLAIM_GRACE: Duration = Duration::from_secs(4);

/// The longest a volume without an owner waits for a last owner that says
/// it still serves the volume (its fresh record, or the promise it still
/// renews on this node's replica) to take its key back.
pub const RECLAIM_LIMIT: Duration = Duration::from_secs(30);

/// How long an owner serves a volume before it may hand it to another
/// node to even out ownership (a volume just taken over stays put while
/// the nodes' records catch up).
pub const SETTLE: Duration = Duration::from_secs(5);

/// The least time between two hand-overs of one node to even out
/// ownership: a few passes, so that the records show each one before the
/// next is chosen.
pub const REBALANCE_EVERY: Duration = Duration::from_secs(5);

/// This node's view of a volume it owns and serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Serving {
    /// Its fence refused it (a newer owner, or too few in-sync nodes).
    pub fenced: bool,
    /// Stopped because too few in-sync nodes are left to serve every
    /// chunk.
    pub below_minimum: bool,
    /// A fill (a move's copy) is still running.
    pub filling: bool,
    /// A node that missed writes is being caught up.
    pub resyncing: bool,
    /// Served here for [`SETTLE`] or longer.
    pub settled: bool,
}

/// What a volume's last owner shows of itself, for a takeover's grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LastOwner {
    /// The last owner (from the volume's state), when it is not this node.
    pub node: Option<NodeId>,
    /// It has a live record.
    pub live: bool,
    /// Its live record lists the volume as served.
    pub serves: bool,
    /// This node's replica still sees it renew its promise.
    pub promised: bool,
}

/// What one reconcile pass knows of one volume, after the owner key was
/// taken back where it could be.
#[derive(Debug, Clone)]
pub struct VolumeView<'a> {
    /// This node.
    pub me: NodeId,
    /// The node the owner key names.
    pub owner: Option<NodeId>,
    /// This node serves the volume.
    pub serving: Option<Serving>,
    /// This node is being opened as the volume's owner (a takeover in
    /// progress).
    pub opening: bool,
    /// This node is not up in the current map (drained, down, removed).
    pub leaving: bool,
    /// A move to a newer map is due or recorded.
    pub moving: bool,
    /// The volume's epoch (0: never served).
    pub epoch: u64,
    /// The nodes the volume's placement puts chunks on.
    pub holders: &'a BTreeSet<NodeId>,
    /// The volume's in-sync nodes.
    pub in_sync: &'a BTreeSet<NodeId>,
    /// Nodes with a live record.
    pub live: &'a BTreeSet<NodeId>,
    /// Live holders that do not hold a replica yet.
    pub holders_not_ready: bool,
    /// Too few in-sync nodes are live to serve every chunk.
    pub short_of_live: bool,
    /// The last owner, for a takeover's grace.
    pub last: LastOwner,
    /// How long the volume has been seen without an owner.
    pub orphaned_for: Duration,
    /// This node got a new lease lately after losing one: every lease may
    /// have ended together (etcd froze).
    pub rejoined: bool,
    /// The live node the last owner handed the volume to (see
    /// [`strata_pool::VolumeState::successor`]).
    pub successor: Option<NodeId>,
    /// How many volumes each live node that is up in the map owns.
    pub owned: &'a BTreeMap<NodeId, usize>,
    /// This node's last hand-over to even out ownership was
    /// [`REBALANCE_EVERY`] ago or longer.
    pub may_rebalance: bool,
}

/// What this node does about a volume this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to do here (not a holder, or not in sync).
    Idle,
    /// It owns the volume: serve it, repair it and move it.
    Tend,
    /// Another node owns it: point hosts there.
    Forward(NodeId),
    /// Its fence refused this owner: stop serving and give the key up.
    /// `short` when it stopped for too few in-sync nodes.
    GiveUp {
        /// Stopped for too few in-sync nodes, rather than deposed.
        short: bool,
    },
    /// Hand it to another node, after a flush: drained off this node,
    /// which holds none of it, or to even out ownership (`rebalance`).
    /// `to` is the node that takes it over first, when one is chosen.
    HandOver {
        /// The successor.
        to: Option<NodeId>,
        /// Handed over to even out ownership, not for a drain.
        rebalance: bool,
    },
    /// A new volume whose live holders do not all hold a replica yet.
    AwaitHolders,
    /// Being opened here already.
    Opening,
    /// Too few of its in-sync nodes are up to serve it.
    AwaitInSync,
    /// Its last owner may still take its key back.
    AwaitLastOwner,
    /// Its last owner handed it to another live node, which takes it.
    AwaitSuccessor,
    /// Take it over.
    TakeOver,
}

/// Whether this node, serving the volume, must stop because the owner key
/// no longer names it.
pub fn must_stop_serving(v: &VolumeView<'_>) -> bool {
    v.serving.is_some() && v.owner != Some(v.me)
}

/// What this node does about the volume. When [`must_stop_serving`] holds,
/// the caller stops first and decides with `serving` cleared.
pub fn decide(v: &VolumeView<'_>) -> Decision {
    match v.owner {
        Some(o) if o == v.me => match v.serving {
            Some(s) if s.fenced => Decision::GiveUp { short: s.below_minimum },
            // Drained off this node and settled: a holder in sync and
            // alive takes it, after the hand-over's flush.
            Some(s)
                if v.leaving
                    && !v.moving
                    && !v.holders.contains(&v.me)
                    && v.holders.iter().any(|h| v.in_sync.contains(h) && v.live.contains(h))
                    && !s.filling =>
            {
                Decision::HandOver { to: least_loaded_holder(v).map(|(_, n)| n), rebalance: false }
            }
            Some(s) if !v.leaving && !v.moving && !s.filling && !s.resyncing && s.settled && v.may_rebalance => {
                match rebalance_to(v) {
                    Some(n) => Decision::HandOver { to: Some(n), rebalance: true },
                    None => Decision::Tend,
                }
            }
            _ => Decision::Tend,
        },
        Some(o) => Decision::Forward(o),
        None if v.epoch == 0 && v.holders_not_ready => Decision::AwaitHolders,
        None if v.opening => Decision::Opening,
        None if v.holders.contains(&v.me) && v.in_sync.contains(&v.me) => {
            let handed_elsewhere = v.successor.is_some_and(|s| s != v.me);
            if v.short_of_live {
                Decision::AwaitInSync
            } else if handed_elsewhere && v.orphaned_for < RECLAIM_GRACE {
                Decision::AwaitSuccessor
            } else if v.successor != Some(v.me) && waits_for_last_owner(v) {
                Decision::AwaitLastOwner
            } else {
                Decision::TakeOver
            }
        }
        None => Decision::Idle,
    }
}

/// The live, up, in-sync holder of the volume other than this node that
/// owns the fewest volumes, with its count (the lowest id among equals).
fn least_loaded_holder(v: &VolumeView<'_>) -> Option<(usize, NodeId)> {
    v.holders
        .iter()
        .filter(|&&h| h != v.me && v.in_sync.contains(&h) && v.live.contains(&h))
        .filter_map(|&h| v.owned.get(&h).map(|&count| (count, h)))
        .min()
}

/// The node this owner hands the volume to, to even out ownership (see
/// the module docs): only a most loaded node gives one away, to a holder
/// that owns at least two fewer. Most loaded nodes deciding on the same
/// counts spread their volumes over the holders that own the fewest
/// (the k-th most loaded by id picks the k-th of them), rather than all
/// handing one to the same node.
fn rebalance_to(v: &VolumeView<'_>) -> Option<NodeId> {
    let mine = *v.owned.get(&v.me)?;
    if v.owned.values().any(|&c| c > mine) {
        return None;
    }
    let rank = v.owned.iter().filter(|&(&n, &c)| c == mine && n < v.me).count();
    let mut takers: Vec<(usize, NodeId)> = v
        .holders
        .iter()
        .filter(|&&h| h != v.me && v.in_sync.contains(&h) && v.live.contains(&h))
        .filter_map(|&h| v.owned.get(&h).map(|&count| (count, h)))
        .filter(|&(count, _)| count + 2 <= mine)
        .collect();
    takers.sort_unstable();
    takers.get(rank % takers.len().max(1)).map(|&(_, n)| n)
}

/// Whether a volume without an owner still waits for its last owner.
///
/// A last owner that is alive lost its key with a lease that ended while
/// etcd was out of reach, and takes it back at its next pass: it gets
/// [`RECLAIM_GRACE`]. When this node has just rejoined too, every lease
/// ended together (etcd froze) and the last owner may not have a record
/// yet: it gets the grace all the same. A last owner whose record says it
/// still serves the volume is reclaiming it in the pass that wrote the
/// record (after a thaw etcd may answer it slowly), and one that still
/// renews the promise this node's replica keeps it serves though its
/// record went with its lease: a takeover would only close their hosts'
/// connections, so they get [`RECLAIM_LIMIT`]. A dead or cut-off owner
/// renews nothing: its promise ends within half a lease and the takeover
/// goes on without waiting.
fn waits_for_last_owner(v: &VolumeView<'_>) -> bool {
    let l = &v.last;
    let grace = if l.serves || l.promised { RECLAIM_LIMIT } else { RECLAIM_GRACE };
    l.node.is_some() && (v.rejoined || l.promised || l.live) && v.orphaned_for < grace
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: NodeId = NodeId(1);

    fn set(ids: &[u32]) -> BTreeSet<NodeId> {
        ids.iter().map(|&i| NodeId(i)).collect()
    }

    struct World {
        holders: BTreeSet<NodeId>,
        in_sync: BTreeSet<NodeId>,
        live: BTreeSet<NodeId>,
        owned: BTreeMap<NodeId, usize>,
    }

    fn counts(list: &[(u32, usize)]) -> BTreeMap<NodeId, usize> {
        list.iter().map(|&(n, c)| (NodeId(n), c)).collect()
    }

    impl World {
        /// Three holders (1, 2, 3), all in sync and live, owning one
        /// volume each.
        fn three() -> World {
            let all = set(&[1, 2, 3]);
            World { holders: all.clone(), in_sync: all.clone(), live: all, owned: counts(&[(1, 1), (2, 1), (3, 1)]) }
        }

        fn view(&self) -> VolumeView<'_> {
            VolumeView {
                me: ME,
                owner: None,
                serving: None,
                opening: false,
                leaving: false,
                moving: false,
                epoch: 3,
                holders: &self.holders,
                in_sync: &self.in_sync,
                live: &self.live,
                holders_not_ready: false,
                short_of_live: false,
                last: LastOwner::default(),
                orphaned_for: Duration::ZERO,
                rejoined: false,
                successor: None,
                owned: &self.owned,
                may_rebalance: true,
            }
        }
    }

    const SERVING: Serving =
        Serving { fenced: false, below_minimum: false, filling: false, resyncing: false, settled: true };

    #[test]
    fn the_owner_tends_what_it_serves_and_others_forward_to_it() {
        let w = World::three();
        let v = VolumeView { owner: Some(ME), serving: Some(SERVING), ..w.view() };
        assert!(!must_stop_serving(&v));
        assert_eq!(decide(&v), Decision::Tend);
        let v = VolumeView { owner: Some(NodeId(2)), ..w.view() };
        assert_eq!(decide(&v), Decision::Forward(NodeId(2)));
    }

    #[test]
    fn a_volume_is_taken_over_after_its_owner_lease_ended_and_the_owner_is_gone() {
        let mut w = World::three();
        w.live.remove(&NodeId(2));
        let last = LastOwner { node: Some(NodeId(2)), live: false, serves: false, promised: false };
        let v = VolumeView { last, ..w.view() };
        assert_eq!(decide(&v), Decision::TakeOver, "a dead last owner gets no grace");
        // A holder not in sync never takes over.
        w.in_sync.remove(&ME);
        let v = VolumeView { last, ..w.view() };
        assert_eq!(decide(&v), Decision::Idle);
    }

    #[test]
    fn a_live_last_owner_gets_its_grace_to_take_its_key_back() {
        let w = World::three();
        let last = LastOwner { node: Some(NodeId(2)), live: true, serves: false, promised: false };
        let v = VolumeView { last, orphaned_for: Duration::from_secs(1), ..w.view() };
        assert_eq!(decide(&v), Decision::AwaitLastOwner);
        let v = VolumeView { last, orphaned_for: RECLAIM_GRACE, ..w.view() };
        assert_eq!(decide(&v), Decision::TakeOver, "the grace ended");
        // One that says it serves, or renews its promise, gets longer.
        for last in [LastOwner { serves: true, ..last }, LastOwner { live: false, promised: true, ..last }] {
            let v = VolumeView { last, orphaned_for: RECLAIM_GRACE, ..w.view() };
            assert_eq!(decide(&v), Decision::AwaitLastOwner, "{last:?}");
            let v = VolumeView { last, orphaned_for: RECLAIM_LIMIT, ..w.view() };
            assert_eq!(decide(&v), Decision::TakeOver, "{last:?}");
        }
        // After every lease ended together the last owner may have no
        // record yet.
        let last = LastOwner { node: Some(NodeId(2)), live: false, serves: false, promised: false };
        let v = VolumeView { last, rejoined: true, ..w.view() };
        assert_eq!(decide(&v), Decision::AwaitLastOwner);
    }

    #[test]
    fn no_takeover_while_too_few_in_sync_nodes_are_up_or_while_one_is_opening() {
        let w = World::three();
        let v = VolumeView { short_of_live: true, ..w.view() };
        assert_eq!(decide(&v), Decision::AwaitInSync);
        let v = VolumeView { opening: true, ..w.view() };
        assert_eq!(decide(&v), Decision::Opening);
        let v = VolumeView { epoch: 0, holders_not_ready: true, ..w.view() };
        assert_eq!(decide(&v), Decision::AwaitHolders, "a new volume does not start degraded");
    }

    #[test]
    fn a_fenced_owner_gives_the_volume_up() {
        let w = World::three();
        let fenced = Serving { fenced: true, ..SERVING };
        let v = VolumeView { owner: Some(ME), serving: Some(fenced), ..w.view() };
        assert_eq!(decide(&v), Decision::GiveUp { short: false });
        let short = Serving { below_minimum: true, ..fenced };
        let v = VolumeView { owner: Some(ME), serving: Some(short), ..w.view() };
        assert_eq!(decide(&v), Decision::GiveUp { short: true });
    }

    #[test]
    fn an_owner_deposed_in_etcd_stops_serving_at_once() {
        let w = World::three();
        let v = VolumeView { owner: Some(NodeId(2)), serving: Some(SERVING), ..w.view() };
        assert!(must_stop_serving(&v));
        let v = VolumeView { owner: None, serving: Some(SERVING), ..w.view() };
        assert!(must_stop_serving(&v), "its key is gone and could not be taken back");
    }

    #[test]
    fn a_drained_owner_hands_over_only_once_settled_on_a_live_in_sync_holder() {
        let mut w = World::three();
        w.holders = set(&[2, 3, 4]);
        w.in_sync = set(&[1, 2, 3, 4]);
        w.live = set(&[1, 2, 3, 4]);
        w.owned = counts(&[(2, 3), (3, 1), (4, 1)]);
        let settled = VolumeView { owner: Some(ME), serving: Some(SERVING), leaving: true, ..w.view() };
        let to_3 = Decision::HandOver { to: Some(NodeId(3)), rebalance: false };
        assert_eq!(decide(&settled), to_3, "to the least loaded holder, the lowest id among equals");
        let v = VolumeView { moving: true, ..settled.clone() };
        assert_eq!(decide(&v), Decision::Tend, "its move is not done");
        let v = VolumeView { serving: Some(Serving { filling: true, ..SERVING }), ..settled.clone() };
        assert_eq!(decide(&v), Decision::Tend, "its fill is still running");
        let v = VolumeView { leaving: false, may_rebalance: false, ..settled.clone() };
        assert_eq!(decide(&v), Decision::Tend, "a rebalance off an up node keeps its owner");
        let in_sync = set(&[1]);
        let v = VolumeView { in_sync: &in_sync, ..settled.clone() };
        assert_eq!(decide(&v), Decision::Tend, "no holder in sync to take it");
        let mut holders = w.holders.clone();
        holders.insert(ME);
        let v = VolumeView { holders: &holders, ..settled };
        assert_eq!(decide(&v), Decision::Tend, "it still holds a part");
    }

    #[test]
    fn the_most_loaded_owner_hands_a_settled_volume_to_the_least_loaded_holder() {
        let mut w = World::three();
        w.owned = counts(&[(1, 3), (2, 1), (3, 2)]);
        let v = VolumeView { owner: Some(ME), serving: Some(SERVING), ..w.view() };
        assert_eq!(decide(&v), Decision::HandOver { to: Some(NodeId(2)), rebalance: true });
        for (why, serving) in [
            ("not settled", Serving { settled: false, ..SERVING }),
            ("filling", Serving { filling: true, ..SERVING }),
            ("resyncing", Serving { resyncing: true, ..SERVING }),
        ] {
            let v = VolumeView { owner: Some(ME), serving: Some(serving), ..w.view() };
            assert_eq!(decide(&v), Decision::Tend, "{why}");
        }
        let v = VolumeView { owner: Some(ME), serving: Some(SERVING), may_rebalance: false, ..w.view() };
        assert_eq!(decide(&v), Decision::Tend, "one hand-over per REBALANCE_EVERY");
        let v = VolumeView { owner: Some(ME), serving: Some(SERVING), moving: true, ..w.view() };
        assert_eq!(decide(&v), Decision::Tend, "a move runs");
        // Within one volume of the least loaded holder: stays.
        w.owned = counts(&[(1, 3), (2, 2), (3, 2)]);
        let v = VolumeView { owner: Some(ME), serving: Some(SERVING), ..w.view() };
        assert_eq!(decide(&v), Decision::Tend);
        // Not the most loaded: another node gives first.
        w.owned = counts(&[(1, 3), (2, 1), (3, 4)]);
        let v = VolumeView { owner: Some(ME), serving: Some(SERVING), ..w.view() };
        assert_eq!(decide(&v), Decision::Tend);
        // Only to a live, in-sync holder that is up (has a count).
        w.owned = counts(&[(1, 3), (2, 0), (3, 2), (4, 0)]);
        w.in_sync.remove(&NodeId(2));
        let v = VolumeView { owner: Some(ME), serving: Some(SERVING), ..w.view() };
        assert_eq!(decide(&v), Decision::Tend, "node 2 is not in sync, node 4 holds none of it");
    }

    #[test]
    fn a_volume_handed_to_a_live_successor_waits_for_it() {
        let w = World::three();
        let last = LastOwner { node: None, live: false, serves: false, promised: false };
        let v = VolumeView { last, successor: Some(NodeId(2)), ..w.view() };
        assert_eq!(decide(&v), Decision::AwaitSuccessor);
        let v = VolumeView { orphaned_for: RECLAIM_GRACE, ..v };
        assert_eq!(decide(&v), Decision::TakeOver, "a successor that does not come gets the grace only");
        // The successor takes it at once, even while a last owner lives.
        let last = LastOwner { node: Some(NodeId(3)), live: true, serves: false, promised: false };
        let v = VolumeView { last, successor: Some(ME), ..w.view() };
        assert_eq!(decide(&v), Decision::TakeOver);
    }

    /// Every node holds every volume; in each round every node decides on
    /// the same counts (the worst case of records read at once) and each
    /// hand-over moves one volume. From any start the counts end within
    /// one of each other, and stay there.
    #[test]
    fn balancing_ends_within_one_volume_of_an_even_share_from_any_start() {
        let mut rng = strata_rand::Rng::new(0x0a0b_5eed);
        let base = World::three();
        for _ in 0..300 {
            let nodes = 2 + rng.below(7) as u32;
            let all: BTreeSet<NodeId> = (1..=nodes).map(NodeId).collect();
            let mut owned: BTreeMap<NodeId, usize> = all.iter().map(|&n| (n, 0)).collect();
            let volumes = rng.below(40) as usize;
            for _ in 0..volumes {
                let n = NodeId(1 + rng.below(u64::from(nodes)) as u32);
                *owned.get_mut(&n).unwrap() += 1;
            }
            let mut rounds = 0;
            loop {
                let snapshot = owned.clone();
                let mut moves = Vec::new();
                for &me in &all {
                    if snapshot[&me] == 0 {
                        continue;
                    }
                    let v = VolumeView {
                        me,
                        owner: Some(me),
                        serving: Some(SERVING),
                        holders: &all,
                        in_sync: &all,
                        live: &all,
                        owned: &snapshot,
                        ..base.view()
                    };
                    if let Decision::HandOver { to: Some(to), rebalance: true } = decide(&v) {
                        moves.push((me, to));
                    }
                }
                if moves.is_empty() {
                    break;
                }
                for (from, to) in moves {
                    *owned.get_mut(&from).unwrap() -= 1;
                    *owned.get_mut(&to).unwrap() += 1;
                }
                rounds += 1;
                assert!(rounds <= volumes, "no end after {rounds} rounds: {owned:?}");
            }
            let (min, max) = (owned.values().min().unwrap(), owned.values().max().unwrap());
            assert!(max - min <= 1, "{owned:?}");
            assert_eq!(owned.values().sum::<usize>(), volumes);
        }
    }
}
