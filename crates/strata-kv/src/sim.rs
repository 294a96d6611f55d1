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
    let mut r = Replay::default();
    let mut never = |_: &u64| false;
    for chain in requests {
        r.requests += 1;
        r.blocks += chain.len() as u64;
        let hit = chain.iter().take_while(|b| policy.contains(b)).count();
        for b in &chain[..hit] {
            policy.touch(b);
        }
        r.hits += hit as u64;
        for b in &chain[hit..] {
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
}
