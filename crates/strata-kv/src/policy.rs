//! Eviction policies: which block leaves a full tier first.
//!
//! [`S3Fifo`] is the DRAM tier's policy (Yang et al., "FIFO queues are
//! all you need for cache eviction", SOSP'23): a small FIFO takes new
//! blocks, a main FIFO keeps the ones that were used again, and a ghost
//! FIFO of evicted keys sends a block that returns soon straight to main.
//! A block read once and never again (a one-hit wonder, the bulk of a
//! prefix cache's scan traffic) leaves from the small queue without
//! disturbing the main one: the policy is scan-resistant. It is also what
//! decides admission to the SSD tier: a block leaving the small queue
//! unused is not written to the drive (see [`Evicted::reused`]).
//!
//! [`Lru`] is here to be compared with (`strata bench kv-trace`).
//!
//! Both are pure bookkeeping over keys and sizes: no values, no clock, no
//! locks. The caller says which keys may not leave now (pins, leases)
//! through the `keep` callback of [`Policy::evict`].
//!
//! Invariant: a key is in at most one of small and main, and
//! `used` is the sum of the sizes of the keys in them.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};

/// A block chosen to leave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evicted<K> {
    /// Its key.
    pub key: K,
    /// Its size as inserted.
    pub size: u64,
    /// Whether it was read again while cached (or came back from the
    /// ghost queue): worth a place on the next tier.
    pub reused: bool,
}

/// An eviction policy over keys of type `K`.
pub trait Policy<K> {
    /// Records a new key of `size` bytes (or a new size for a known one).
    fn insert(&mut self, key: K, size: u64);
    /// Records a read of `key`; false when it is not cached.
    fn touch(&mut self, key: &K) -> bool;
    /// Forgets `key` (deleted); returns its size.
    fn remove(&mut self, key: &K) -> Option<u64>;
    /// Bytes held.
    fn used(&self) -> u64;
    /// Chooses blocks to leave until `used() + need <= capacity`, never
    /// one for which `keep` is true. Returns fewer than needed when only
    /// kept blocks are left.
    fn evict(&mut self, capacity: u64, need: u64, keep: &mut dyn FnMut(&K) -> bool) -> Vec<Evicted<K>>;
    /// True when `key` is cached.
    fn contains(&self, key: &K) -> bool;
    /// Keys cached.
    fn len(&self) -> usize;
    /// True when nothing is cached.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
}

#[derive(Debug)]
struct Meta {
    size: u64,
    freq: u8,
    queue: Queue,
    /// Matches the queue slot that is current; older slots of the same
    /// key (after a move or re-insert) are skipped when popped.
    slot: u64,
    /// Came back from the ghost queue or was read while in small.
    reused: bool,
}

/// S3-FIFO with a small queue of 10% of the bytes, a main queue, and a
/// ghost queue remembering as many keys as the cache holds. The ghosts
/// are 64-bit fingerprints of the keys (hashed with a per-policy random
/// key), not the keys: a key that left costs no memory of its own. Two
/// keys sharing a fingerprint only send a new block to main early.
#[derive(Debug)]
pub struct S3Fifo<K: Hash + Eq + Clone> {
    meta: HashMap<K, Meta>,
    small: VecDeque<(K, u64)>,
    main: VecDeque<(K, u64)>,
    ghost: VecDeque<u64>,
    ghost_set: HashMap<u64, u32>,
    small_bytes: u64,
    main_bytes: u64,
    next_gen: u64,
    small_percent: u64,
    ghost_factor: usize,
    /// Adaptive sizing: the small queue's target in bytes (`None` until
    /// the first eviction tells the capacity), and a ghost of keys that
    /// left main.
    adaptive: bool,
    small_target: Option<u64>,
    ghost_main: VecDeque<u64>,
    ghost_main_set: HashMap<u64, u32>,
    fingerprints: std::collections::hash_map::RandomState,
}

/// The most fingerprints a ghost queue holds, whatever its factor (about
/// 32 MiB with the set that indexes them).
pub const GHOST_MAX: usize = 1 << 20;

/// Reads that make a block "used again"; the count saturates at 3.
const MAX_FREQ: u8 = 3;

impl<K: Hash + Eq + Clone> Default for S3Fifo<K> {
    fn default() -> Self {
        S3Fifo {
            meta: HashMap::new(),
            small: VecDeque::new(),
            main: VecDeque::new(),
            ghost: VecDeque::new(),
            ghost_set: HashMap::new(),
            small_bytes: 0,
            main_bytes: 0,
            next_gen: 0,
            small_percent: 10,
            ghost_factor: 1,
            adaptive: false,
            small_target: None,
            ghost_main: VecDeque::new(),
            ghost_main_set: HashMap::new(),
            fingerprints: std::collections::hash_map::RandomState::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> S3Fifo<K> {
    /// S3-FIFO with a small queue of `small_percent` of the bytes and a
    /// ghost queue of `ghost_factor` times as many keys as are cached.
    pub fn with_shape(small_percent: u64, ghost_factor: usize) -> Self {
        S3Fifo { small_percent: small_percent.min(100), ghost_factor: ghost_factor.max(1), ..Self::default() }
    }

    /// Adaptive S3-FIFO: the small queue starts at 10% and moves like
    /// ARC's target, growing when keys come back from the small queue's
    /// ghost (new blocks left too soon) and shrinking when they come back
    /// from main's (reused blocks left too soon), between 1% and 90%.
    pub fn adaptive(ghost_factor: usize) -> Self {
        S3Fifo { adaptive: true, ..Self::with_shape(10, ghost_factor) }
    }

    fn push(&mut self, key: K, q: Queue) -> u64 {
        self.next_gen += 1;
        let g = self.next_gen;
        match q {
            Queue::Small => self.small.push_back((key, g)),
            Queue::Main => self.main.push_back((key, g)),
        }
        g
    }

    fn add_ghost(&mut self, key: K, from_main: bool) {
        let key = self.fingerprints.hash_one(&key);
        let limit = (self.meta.len() * self.ghost_factor).clamp(16, GHOST_MAX);
        let (q, set) = if from_main {
            (&mut self.ghost_main, &mut self.ghost_main_set)
        } else {
            (&mut self.ghost, &mut self.ghost_set)
        };
        *set.entry(key).or_insert(0) += 1;
        q.push_back(key);
        while q.len() > limit {
            if let Some(k) = q.pop_front()
                && let Some(n) = set.get_mut(&k)
            {
                *n -= 1;
                if *n == 0 {
                    set.remove(&k);
                }
            }
        }
    }

    /// Pops the oldest live slot of `q`; `None` when it is empty.
    fn pop(&mut self, q: Queue) -> Option<K> {
        loop {
            let (k, g) = match q {
                Queue::Small => self.small.pop_front()?,
                Queue::Main => self.main.pop_front()?,
            };
            if self.meta.get(&k).is_some_and(|m| m.slot == g && m.queue == q) {
                return Some(k);
            }
        }
    }

    fn account(&mut self, q: Queue, size: u64, add: bool) {
        let b = match q {
            Queue::Small => &mut self.small_bytes,
            Queue::Main => &mut self.main_bytes,
        };
        if add { *b += size } else { *b -= size }
    }
}

impl<K: Hash + Eq + Clone> Policy<K> for S3Fifo<K> {
    fn insert(&mut self, key: K, size: u64) {
        if self.remove(&key).is_some() {
            // A rewrite keeps its history: it goes to main.
            let slot = self.push(key.clone(), Queue::Main);
            self.meta.insert(key, Meta { size, freq: 0, queue: Queue::Main, slot, reused: true });
            self.main_bytes += size;
            return;
        }
        let fp = self.fingerprints.hash_one(&key);
        let from_ghost = self.ghost_set.contains_key(&fp);
        let from_main_ghost = self.adaptive && self.ghost_main_set.contains_key(&fp);
        if let Some(t) = self.small_target.as_mut() {
            // ARC's step: larger when the other ghost is the longer one.
            if from_ghost {
                let ratio = (self.ghost_main.len() / self.ghost.len().max(1)).max(1) as u64;
                *t = t.saturating_add(size * ratio);
            } else if from_main_ghost {
                let ratio = (self.ghost.len() / self.ghost_main.len().max(1)).max(1) as u64;
                *t = t.saturating_sub(size * ratio);
            }
        }
        let q = if from_ghost || from_main_ghost { Queue::Main } else { Queue::Small };
        let slot = self.push(key.clone(), q);
        self.meta.insert(key, Meta { size, freq: 0, queue: q, slot, reused: from_ghost });
        self.account(q, size, true);
    }

    fn touch(&mut self, key: &K) -> bool {
        match self.meta.get_mut(key) {
            Some(m) => {
                m.freq = (m.freq + 1).min(MAX_FREQ);
                m.reused = true;
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, key: &K) -> Option<u64> {
        let m = self.meta.remove(key)?;
        self.account(m.queue, m.size, false);
        Some(m.size)
    }

    fn used(&self) -> u64 {
        self.small_bytes + self.main_bytes
    }

    fn contains(&self, key: &K) -> bool {
        self.meta.contains_key(key)
    }

    fn len(&self) -> usize {
        self.meta.len()
    }

    fn evict(&mut self, capacity: u64, need: u64, keep: &mut dyn FnMut(&K) -> bool) -> Vec<Evicted<K>> {
        let mut out = Vec::new();
        // Kept blocks are put back at the tail; after a whole lap of both
        // queues with nothing evicted, give up.
        let mut kept_in_a_row = 0usize;
        while self.used() + need > capacity && !self.meta.is_empty() {
            if kept_in_a_row > self.meta.len() * 2 + 2 {
                break;
            }
            let target = match self.small_target.as_mut() {
                Some(t) if self.adaptive => {
                    *t = (*t).clamp(capacity / 100, capacity / 10 * 9);
                    *t
                }
                _ => {
                    let t = capacity / 100 * self.small_percent;
                    if self.adaptive {
                        self.small_target = Some(t);
                    }
                    t
                }
            };
            let from_small = self.small_bytes > 0 && (self.small_bytes >= target || self.main_bytes == 0);
            let q = if from_small { Queue::Small } else { Queue::Main };
            let Some(k) = self.pop(q) else {
                // Stale slots only: the byte counts say otherwise, which
                // cannot be; stop rather than spin.
                debug_assert!(false, "queue empty with bytes accounted");
                break;
            };
            let (freq, size) = self.meta.get(&k).map(|m| (m.freq, m.size)).unwrap_or((0, 0));
            if keep(&k) {
                kept_in_a_row += 1;
                let g = self.push(k.clone(), Queue::Main);
                if let Some(m) = self.meta.get_mut(&k) {
                    m.slot = g;
                    if m.queue == Queue::Small {
                        self.small_bytes -= size;
                        self.main_bytes += size;
                        m.queue = Queue::Main;
                    }
                }
                continue;
            }
            match q {
                Queue::Small if freq >= 1 => {
                    // Read while new: promote to main.
                    let g = self.push(k.clone(), Queue::Main);
                    if let Some(m) = self.meta.get_mut(&k) {
                        m.slot = g;
                        m.queue = Queue::Main;
                        m.freq = 0;
                    }
                    self.small_bytes -= size;
                    self.main_bytes += size;
                }
                Queue::Main if freq >= 1 => {
                    let g = self.push(k.clone(), Queue::Main);
                    if let Some(m) = self.meta.get_mut(&k) {
                        m.slot = g;
                        m.freq -= 1;
                    }
                }
                _ => {
                    kept_in_a_row = 0;
                    let m = self.meta.remove(&k).expect("popped keys are live (checked in pop)");
                    self.account(m.queue, m.size, false);
                    if q == Queue::Small {
                        self.add_ghost(k.clone(), false);
                    } else if self.adaptive {
                        self.add_ghost(k.clone(), true);
                    }
                    out.push(Evicted { key: k, size: m.size, reused: m.reused });
                }
            }
        }
        out
    }
}

/// Least recently used: the baseline the trace benchmark compares with.
#[derive(Debug)]
pub struct Lru<K: Hash + Eq + Clone> {
    meta: HashMap<K, (u64, u64, bool)>,
    order: VecDeque<(K, u64)>,
    used: u64,
    next_gen: u64,
}

impl<K: Hash + Eq + Clone> Default for Lru<K> {
    fn default() -> Self {
        Lru { meta: HashMap::new(), order: VecDeque::new(), used: 0, next_gen: 0 }
    }
}

impl<K: Hash + Eq + Clone> Lru<K> {
    fn bump(&mut self, key: &K) {
        self.next_gen += 1;
        if let Some(m) = self.meta.get_mut(key) {
            m.1 = self.next_gen;
            self.order.push_back((key.clone(), self.next_gen));
        }
        // Stale slots are dropped as they reach the front; compact when
        // they would dominate.
        if self.order.len() > self.meta.len() * 4 + 64 {
            let meta = &self.meta;
            self.order.retain(|(k, g)| meta.get(k).is_some_and(|m| m.1 == *g));
        }
    }
}

impl<K: Hash + Eq + Clone> Policy<K> for Lru<K> {
    fn insert(&mut self, key: K, size: u64) {
        self.remove(&key);
        self.meta.insert(key.clone(), (size, 0, false));
        self.used += size;
        self.bump(&key);
    }

    fn touch(&mut self, key: &K) -> bool {
        match self.meta.get_mut(key) {
            Some(m) => {
                m.2 = true;
                self.bump(key);
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, key: &K) -> Option<u64> {
        let (size, _, _) = self.meta.remove(key)?;
        self.used -= size;
        Some(size)
    }

    fn used(&self) -> u64 {
        self.used
    }

    fn contains(&self, key: &K) -> bool {
        self.meta.contains_key(key)
    }

    fn len(&self) -> usize {
        self.meta.len()
    }

    fn evict(&mut self, capacity: u64, need: u64, keep: &mut dyn FnMut(&K) -> bool) -> Vec<Evicted<K>> {
        let mut out = Vec::new();
        let mut kept = 0usize;
        while self.used + need > capacity && kept <= self.meta.len() {
            let Some((k, g)) = self.order.pop_front() else { break };
            if self.meta.get(&k).is_none_or(|m| m.1 != g) {
                continue;
            }
            if keep(&k) {
                kept += 1;
                self.bump(&k);
                continue;
            }
            let (size, _, reused) = self.meta.remove(&k).expect("live slot (checked above)");
            self.used -= size;
            out.push(Evicted { key: k, size, reused });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: &u64) -> bool {
        false
    }

    #[test]
    fn a_scan_does_not_flush_the_blocks_in_use() {
        let mut p = S3Fifo::default();
        // Ten hot blocks, read twice: they reach main.
        for k in 0..10u64 {
            p.insert(k, 1);
            p.evict(100, 0, &mut never);
        }
        for k in 0..10u64 {
            assert!(p.touch(&k));
        }
        // A scan of 1,000 blocks read once.
        for k in 1000..2000u64 {
            p.evict(100, 1, &mut never);
            p.insert(k, 1);
        }
        assert!(p.used() <= 100);
        for k in 0..10u64 {
            assert!(p.contains(&k), "hot block {k} was flushed by the scan");
        }
        // The same under LRU loses them.
        let mut l = Lru::default();
        for k in 0..10u64 {
            l.insert(k, 1);
            l.touch(&k);
        }
        for k in 1000..2000u64 {
            l.evict(100, 1, &mut never);
            l.insert(k, 1);
        }
        assert!((0..10u64).all(|k| !l.contains(&k)));
    }

    #[test]
    fn the_ghost_queue_remembers_evicted_keys_without_holding_them() {
        let mut p = S3Fifo::default();
        let keys: Vec<std::sync::Arc<u64>> = (0..1000).map(std::sync::Arc::new).collect();
        for k in &keys {
            p.insert(k.clone(), 10);
            drop(p.evict(1000, 0, &mut |_| false));
        }
        let gone: Vec<_> = keys.iter().filter(|k| !p.contains(k)).collect();
        assert!(gone.len() >= 900);
        assert!(gone.iter().all(|k| std::sync::Arc::strong_count(k) == 1), "an evicted key is still held");
        // And the ghost still knows the recent ones: one comes back to main.
        let back = keys[850].clone();
        assert!(!p.contains(&back));
        p.insert(back.clone(), 10);
        assert_eq!(p.meta[&back].queue, Queue::Main);
    }

    #[test]
    fn one_hit_wonders_leave_unreused_and_returning_keys_go_to_main() {
        let mut p = S3Fifo::default();
        p.insert(1u64, 10);
        p.insert(2, 10);
        p.touch(&2);
        let ev = p.evict(15, 0, &mut never);
        assert_eq!(ev, vec![Evicted { key: 1, size: 10, reused: false }]);
        assert!(p.contains(&2));
        // Key 1 comes back from the ghost queue: into main, marked reused.
        p.insert(1, 10);
        let ev = p.evict(10, 0, &mut never);
        assert_eq!(ev.len(), 1);
        assert!(p.contains(&1) ^ p.contains(&2));
    }

    #[test]
    fn kept_keys_stay_and_eviction_gives_up_when_all_are_kept() {
        for mut p in [Box::new(S3Fifo::default()) as Box<dyn Policy<u64>>, Box::new(Lru::default())] {
            for k in 0..10u64 {
                p.insert(k, 10);
            }
            let ev = p.evict(50, 0, &mut |k| k % 2 == 0);
            assert_eq!(ev.len(), 5);
            assert!(ev.iter().all(|e| e.key % 2 == 1));
            let ev = p.evict(10, 0, &mut |_| true);
            assert!(ev.is_empty());
            assert_eq!(p.used(), 50);
            assert_eq!(p.remove(&0), Some(10));
            assert_eq!(p.used(), 40);
        }
    }

    #[test]
    fn capacity_holds_under_random_load() {
        for p in [S3Fifo::default(), S3Fifo::with_shape(30, 4), S3Fifo::adaptive(2)] {
            random_load(p);
        }
    }

    #[test]
    fn the_adaptive_small_queue_grows_when_new_blocks_leave_too_soon() {
        let mut p = S3Fifo::adaptive(2);
        // A cycle of 150 blocks through room for 100: a small queue of 10
        // drops each before it returns, and the ghost (200 keys) sees it
        // come back.
        for _ in 0..20u64 {
            for key in 0..150u64 {
                if !p.touch(&key) {
                    p.evict(100, 1, &mut never);
                    p.insert(key, 1);
                }
            }
        }
        assert!(p.small_target.unwrap() > 10, "{:?}", p.small_target);
    }

    fn random_load(mut p: S3Fifo<u64>) {
        let mut rng = strata_rand::Rng::new(1);
        for _ in 0..20_000 {
            let x = rng.next_u64();
            let k = x % 500;
            if x.is_multiple_of(3) {
                p.touch(&k);
            } else {
                let size = 1 + x % 64;
                p.remove(&k);
                p.evict(1000, size, &mut never);
                p.insert(k, size);
            }
            assert!(p.used() <= 1000);
            assert_eq!(p.used(), p.meta.values().map(|m| m.size).sum::<u64>());
        }
    }
}
