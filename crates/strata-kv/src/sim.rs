//! Replays a prefix-cache trace against an eviction policy: the hit rate
//! a KV cache of a given capacity would have had, with no store and no
//! clock, so that policies compare on the same requests
//! (`strata bench kv-trace`).
//!
//! The model is what an inference engine does with the store: for each
//! request, look up its chain of block keys; the consecutive blocks found
//! from the first are hits (read, so they count as used), and every block
//! after them is computed and stored. Blocks are of equal size, so
//! capacity is in blocks.

use crate::policy::Policy;

/// What a replay counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replay {
    /// Requests replayed.
    pub requests: u64,
    /// Blocks asked for (the sum of the chains' lengths).
    pub blocks: u64,
    /// Blocks found as part of a cached prefix.
    pub hits: u64,
    /// Blocks stored (computed after a miss).
    pub stored: u64,
}

impl Replay {
    /// Hits over blocks asked for.
    pub fn hit_rate(&self) -> f64 {
        if self.blocks == 0 { 0.0 } else { self.hits as f64 / self.blocks as f64 }
    }
}

/// Replays `requests` (each a chain of block ids) against `policy` with
/// room for `capacity` blocks.
pub fn replay(policy: &mut dyn Policy<u64>, capacity: u64, requests: &[Vec<u64>]) -> Replay {
    replay_in(policy, capacity, requests, Order::Chain)
}

/// In which order a request's blocks are used and stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// First block first, as the engine computes them: the chain's head
    /// ends up least recent, so recency evicts heads first.
    Chain,
    /// Last block first: the head ends up most recent, so recency evicts
    /// a chain from its tail, as a radix tree evicts leaves. A block is
    /// of use only while every block before it in its chain is cached;
    /// evicting a head makes the whole rest of the chain dead weight.
    TailFirst,
}

/// [`replay`] with a request's blocks used and stored in `order`.
pub fn replay_in(policy: &mut dyn Policy<u64>, capacity: u64, requests: &[Vec<u64>], order: Order) -> Replay {
    let mut r = Replay::default();
    let mut never = |_: &u64| false;
    let mut touched: Vec<u64> = Vec::new();
    for chain in requests {
        r.requests += 1;
        r.blocks += chain.len() as u64;
        let hit = chain.iter().take_while(|b| policy.contains(b)).count();
        r.hits += hit as u64;
        touched.clear();
        touched.extend_from_slice(chain);
        if order == Order::TailFirst {
            touched.reverse();
        }
        for b in &touched {
            if policy.contains(b) {
                policy.touch(b);
                continue;
            }
            policy.evict(capacity, 1, &mut never);
            policy.insert(*b, 1);
            r.stored += 1;
        }
    }
    r
}

/// Belady's MIN, the offline optimum a policy is measured against: on a
/// miss with the cache full, the block used again farthest in the future
/// (or never) leaves, and a block whose own next use is farther than
/// every cached block's is not stored at all (MIN with bypass, optimal
/// for a cache that may decline a block). Uses are the replay's: every
/// block of every chain, in order. For a prefix cache it is a bound, not
/// the exact optimum: it values a block by its next use, not by whether
/// the blocks before it will be cached then.
pub fn replay_min(capacity: u64, requests: &[Vec<u64>]) -> Replay {
    use std::collections::{BTreeSet, HashMap};
    // next[i]: the position of the next use of the block used at i.
    let uses: Vec<u64> = requests.iter().flatten().copied().collect();
    let mut next = vec![u64::MAX; uses.len()];
    let mut later: HashMap<u64, u64> = HashMap::new();
    for (i, &b) in uses.iter().enumerate().rev() {
        next[i] = later.insert(b, i as u64).unwrap_or(u64::MAX);
    }
    // Cached blocks by their next use, and each block's next use.
    let mut by_next: BTreeSet<(u64, u64)> = BTreeSet::new();
    let mut cached: HashMap<u64, u64> = HashMap::new();
    let mut r = Replay::default();
    let mut i = 0usize;
    for chain in requests {
        r.requests += 1;
        r.blocks += chain.len() as u64;
        let hit = chain.iter().take_while(|b| cached.contains_key(*b)).count();
        r.hits += hit as u64;
        for (j, &b) in chain.iter().enumerate() {
            let n = next[i];
            i += 1;
            if let Some(old) = cached.get_mut(&b) {
                by_next.remove(&(*old, b));
                by_next.insert((n, b));
                *old = n;
                continue;
            }
            if j >= hit {
                r.stored += 1;
            }
            if capacity == 0 {
                continue;
            }
            if cached.len() as u64 >= capacity {
                let &(far, victim) = by_next.iter().next_back().expect("a full cache holds blocks");
                if far <= n {
                    continue; // bypass: this block is the one used last
                }
                by_next.remove(&(far, victim));
                cached.remove(&victim);
            }
            cached.insert(b, n);
            by_next.insert((n, b));
        }
    }
    r
}

/// What a two-tier replay counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TieredReplay {
    /// The totals (hits from either tier).
    pub total: Replay,
    /// Hits read from the SSD tier (then promoted into DRAM).
    pub hits_ssd: u64,
    /// Blocks written to the SSD tier (its wear).
    pub ssd_writes: u64,
}

/// The SSD tier as the store runs it: a log of `capacity` blocks that
/// reclaims its oldest writes first, whatever has been read since. A
/// block written again, or deleted by a put of the same key, leaves its
/// old copy taking room until the ring reaches it.
struct Ring {
    capacity: u64,
    order: std::collections::VecDeque<(u64, u64)>,
    current: std::collections::HashMap<u64, u64>,
    next: u64,
    writes: u64,
}

impl Ring {
    fn contains(&self, b: &u64) -> bool {
        self.current.contains_key(b)
    }

    fn write(&mut self, b: u64) {
        if self.capacity == 0 {
            return;
        }
        while self.order.len() as u64 >= self.capacity {
            let Some((old, g)) = self.order.pop_front() else { break };
            if self.current.get(&old) == Some(&g) {
                self.current.remove(&old);
            }
        }
        self.next += 1;
        self.order.push_back((b, self.next));
        self.current.insert(b, self.next);
        self.writes += 1;
    }
}

/// Replays `requests` against the store's two tiers: DRAM under `dram`
/// with room for `dram_capacity` blocks, and an SSD log of
/// `ssd_capacity` blocks. A block leaving DRAM is written to the SSD when
/// it lacks a current copy there and is admitted (read again while in
/// DRAM, back from the ghost, or by `admit`: every block with
/// [`Admit::All`](crate::Admit::All), and with
/// [`Admit::Auto`](crate::Admit::Auto) while the SSD holds a tenth of the
/// distinct blocks stored so far, estimated as the store does); a hit on the SSD promotes
/// the block into DRAM, keeping its SSD copy; a put of a key (a block
/// computed after the prefix broke) replaces any SSD copy.
pub fn replay_tiered(
    dram: &mut dyn Policy<u64>,
    dram_capacity: u64,
    ssd_capacity: u64,
    admit: crate::Admit,
    requests: &[Vec<u64>],
) -> TieredReplay {
    let mut r = TieredReplay::default();
    let mut ssd =
        Ring { capacity: ssd_capacity, order: Default::default(), current: Default::default(), next: 0, writes: 0 };
    let mut never = |_: &u64| false;
    let mut working_set = crate::admit::WorkingSet::default();
    let mut to_dram = |dram: &mut dyn Policy<u64>, ssd: &mut Ring, ws: &crate::admit::WorkingSet, b: u64| {
        let admit_all = match admit {
            crate::Admit::All => true,
            crate::Admit::Reused => false,
            crate::Admit::Auto => ws.admit_all(ssd_capacity),
        };
        for e in dram.evict(dram_capacity, 1, &mut never) {
            if (e.reused || admit_all) && !ssd.contains(&e.key) {
                ssd.write(e.key);
            }
        }
        dram.insert(b, 1);
    };
    for chain in requests {
        r.total.requests += 1;
        r.total.blocks += chain.len() as u64;
        let hit = chain.iter().take_while(|b| dram.contains(b) || ssd.contains(b)).count();
        for &b in &chain[..hit] {
            if !dram.contains(&b) {
                r.hits_ssd += 1;
                to_dram(dram, &mut ssd, &working_set, b);
            }
            dram.touch(&b);
        }
        r.total.hits += hit as u64;
        for &b in &chain[hit..] {
            if dram.contains(&b) {
                dram.touch(&b);
                continue;
            }
            ssd.current.remove(&b);
            working_set.observe(crate::admit::key_hash(&b.to_le_bytes()), 1);
            to_dram(dram, &mut ssd, &working_set, b);
            r.total.stored += 1;
        }
    }
    r.ssd_writes = ssd.writes;
    r
}

/// The hit rate with unbounded capacity: every block seen before is a
/// hit when its prefix is (the ceiling for any policy).
pub fn ideal(requests: &[Vec<u64>]) -> Replay {
    let mut seen = std::collections::HashSet::new();
    let mut r = Replay::default();
    for chain in requests {
        r.requests += 1;
        r.blocks += chain.len() as u64;
        let hit = chain.iter().take_while(|b| seen.contains(*b)).count();
        r.hits += hit as u64;
        for b in &chain[hit..] {
            if seen.insert(*b) {
                r.stored += 1;
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Lru, S3Fifo};

    #[test]
    fn prefix_hits_are_counted_and_capacity_bounds_them() {
        let reqs = vec![vec![1, 2, 3], vec![1, 2, 4], vec![1, 9, 3], vec![1, 2, 3]];
        let ideal = ideal(&reqs);
        assert_eq!((ideal.blocks, ideal.hits, ideal.stored), (12, 2 + 1 + 3, 5));
        for p in [&mut S3Fifo::default() as &mut dyn Policy<u64>, &mut Lru::default()] {
            let r = replay(p, 100, &reqs);
            assert_eq!(r, ideal);
        }
        let tiny = replay(&mut Lru::default(), 1, &reqs);
        assert!(tiny.hits < ideal.hits);
    }

    #[test]
    fn min_is_never_beaten_and_tail_first_keeps_chains_whole() {
        // Two long chains that alternate, in a cache that holds one and
        // a half of them.
        let a: Vec<u64> = (1..=8).collect();
        let b: Vec<u64> = (101..=108).collect();
        let reqs: Vec<Vec<u64>> = (0..10).map(|i| if i % 2 == 0 { a.clone() } else { b.clone() }).collect();
        let min = replay_min(12, &reqs);
        for order in [Order::Chain, Order::TailFirst] {
            for p in [&mut S3Fifo::default() as &mut dyn Policy<u64>, &mut Lru::default()] {
                let r = replay_in(p, 12, &reqs, order);
                assert!(r.hits <= min.hits, "{order:?}: {r:?} beats MIN {min:?}");
            }
        }
        // Chain-order LRU loses every head, and with it every chain;
        // tail-first keeps the heads and loses only tails.
        let chain = replay_in(&mut Lru::default(), 12, &reqs, Order::Chain);
        let tail = replay_in(&mut Lru::default(), 12, &reqs, Order::TailFirst);
        assert_eq!(chain.hits, 0);
        assert!(tail.hits > 0 && min.hits >= tail.hits, "{tail:?} {min:?}");
        // Chain order is what `replay` does; with room for all, MIN, both
        // orders and the ideal agree.
        assert_eq!(replay_in(&mut Lru::default(), 12, &reqs, Order::Chain), replay(&mut Lru::default(), 12, &reqs));
        assert_eq!(replay_min(100, &reqs).hits, ideal(&reqs).hits);
        assert_eq!(replay_in(&mut Lru::default(), 100, &reqs, Order::TailFirst).hits, ideal(&reqs).hits);
    }

    #[test]
    fn the_ssd_tier_catches_what_dram_drops_and_admission_spares_it_one_hit_blocks() {
        // A chain read again after a long scan of one-hit blocks.
        let hot: Vec<u64> = (1..=4).collect();
        let mut reqs = vec![hot.clone(), hot.clone()];
        reqs.extend((100..140).map(|b| vec![b]));
        reqs.push(hot.clone());
        let dram_only = replay_tiered(&mut S3Fifo::default(), 8, 0, crate::Admit::Reused, &reqs);
        let tiered = replay_tiered(&mut S3Fifo::default(), 8, 16, crate::Admit::Reused, &reqs);
        let all = replay_tiered(&mut S3Fifo::default(), 8, 16, crate::Admit::All, &reqs);
        // With no SSD the same as the one-tier replay.
        assert_eq!(dram_only.total, replay(&mut S3Fifo::default(), 8, &reqs));
        assert_eq!((dram_only.hits_ssd, dram_only.ssd_writes), (0, 0));
        // The hot chain comes back whole, from DRAM or SSD.
        assert!(tiered.total.hits >= 8 && tiered.total.hits >= dram_only.total.hits, "{tiered:?} {dram_only:?}");
        // Admitting everything writes the scan too, and its writes push
        // the hot chain out of a small ring.
        assert!(tiered.ssd_writes < all.ssd_writes, "{tiered:?} {all:?}");
        assert!(tiered.total.hits >= all.total.hits, "{tiered:?} {all:?}");
        // Auto: this SSD holds 16 of 44 distinct blocks, over a tenth, so
        // every block is admitted, as with All.
        let auto = replay_tiered(&mut S3Fifo::default(), 8, 16, crate::Admit::Auto, &reqs);
        assert_eq!(auto, all);
        // A ring of 2 blocks is a tenth of the first 20 distinct blocks
        // and less after: every block until then, only reused ones after.
        let small_auto = replay_tiered(&mut S3Fifo::default(), 8, 2, crate::Admit::Auto, &reqs);
        let small_all = replay_tiered(&mut S3Fifo::default(), 8, 2, crate::Admit::All, &reqs);
        let small_reused = replay_tiered(&mut S3Fifo::default(), 8, 2, crate::Admit::Reused, &reqs);
        assert!(small_reused.ssd_writes < small_auto.ssd_writes, "{small_reused:?} {small_auto:?}");
        assert!(small_auto.ssd_writes < small_all.ssd_writes, "{small_auto:?} {small_all:?}");
        // Unbounded tiers reach the ceiling.
        let big = replay_tiered(&mut Lru::default(), 2, 1000, crate::Admit::All, &reqs);
        assert_eq!(big.total.hits, ideal(&reqs).hits);
    }
}
