//! Admission to the log tiers that adapts to their size next to the
//! working set ([`Admit::Auto`](crate::Admit::Auto), the default).
//!
//! Measured on the Mooncake trace (docs/kv.md, "Both tiers together"):
//! writing only blocks that were reused in DRAM wins while the SSD holds
//! a few percent of the working set (writing every block floods a small
//! SSD with blocks never read again), and writing every block wins once
//! the SSD holds a tenth of it or more (most blocks come back once, after
//! they left DRAM, before any sign of reuse). The rule: admit every block
//! while the log tier below DRAM holds at least [`ALL_AT_PERCENT`] of the
//! working set's bytes, else only reused ones.
//!
//! The working set is the distinct blocks stored since the store opened
//! (the trace's "distinct blocks"), estimated in constant memory with a
//! k-minimum-values sketch: the [`K`] smallest 64-bit hashes of the keys
//! stored; with the k-th smallest at fraction `f` of the hash space there
//! are about `(K - 1) / f` distinct keys (relative error about
//! `1 / sqrt(K - 2)`, 3% for 1,024). Its bytes are that count times the
//! mean size of a block stored. No I/O, no clock.

use std::collections::BTreeSet;

/// Hashes kept by the sketch.
pub const K: usize = 1024;

/// Admit every block while the log tier holds at least this share of
/// the working set (percent).
pub const ALL_AT_PERCENT: u64 = 10;

/// An estimate of the distinct blocks stored and their bytes.
#[derive(Debug, Clone, Default)]
pub struct WorkingSet {
    smallest: BTreeSet<u64>,
    puts: u64,
    put_bytes: u128,
}

/// A key's 64-bit hash, the same in every process (FNV-1a, then the
/// splitmix64 finaliser so that every bit depends on every byte): the
/// sketch needs hashes spread evenly, not secret ones.
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl WorkingSet {
    /// Notes a block of `bytes` stored under a key hashing to `hash`.
    pub fn observe(&mut self, hash: u64, bytes: u64) {
        self.puts += 1;
        self.put_bytes += u128::from(bytes);
        if self.smallest.len() < K {
            self.smallest.insert(hash);
        } else if let Some(&largest) = self.smallest.last()
            && hash < largest
            && self.smallest.insert(hash)
        {
            self.smallest.pop_last();
        }
    }

    /// Distinct keys stored (estimated; exact below [`K`]).
    pub fn distinct(&self) -> f64 {
        if self.smallest.len() < K {
            return self.smallest.len() as f64;
        }
        let kth = self.smallest.last().copied().unwrap_or(u64::MAX) as f64 / u64::MAX as f64;
        if kth <= 0.0 { self.smallest.len() as f64 } else { (K - 1) as f64 / kth }
    }

    /// Bytes of the distinct blocks stored (estimated).
    pub fn bytes(&self) -> u64 {
        if self.puts == 0 {
            return 0;
        }
        let mean = self.put_bytes as f64 / self.puts as f64;
        (self.distinct() * mean) as u64
    }

    /// Whether a log tier of `log_bytes` should take every block leaving
    /// DRAM (see the module doc).
    pub fn admit_all(&self, log_bytes: u64) -> bool {
        u128::from(log_bytes) * 100 >= u128::from(self.bytes()) * u128::from(ALL_AT_PERCENT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_exact_when_small_and_within_a_few_percent_when_large() {
        let mut w = WorkingSet::default();
        for i in 0..500u64 {
            w.observe(key_hash(&i.to_le_bytes()), 100);
            w.observe(key_hash(&i.to_le_bytes()), 100); // a repeat
        }
        assert_eq!(w.distinct(), 500.0);
        assert_eq!(w.bytes(), 50_000);
        for n in [10_000u64, 200_000] {
            let mut w = WorkingSet::default();
            for i in 0..n {
                w.observe(key_hash(&i.to_le_bytes()), 4096);
                if i % 3 == 0 {
                    w.observe(key_hash(&(i / 2).to_le_bytes()), 4096);
                }
            }
            let err = (w.distinct() - n as f64).abs() / n as f64;
            assert!(err < 0.1, "{n}: estimated {} ({err})", w.distinct());
        }
    }

    #[test]
    fn every_block_is_admitted_while_the_tier_holds_a_tenth_of_the_working_set() {
        let mut w = WorkingSet::default();
        for i in 0..100_000u64 {
            w.observe(key_hash(&i.to_le_bytes()), 1000);
        }
        let ws = w.bytes();
        assert!(w.admit_all(ws / 5), "a fifth");
        assert!(!w.admit_all(ws / 20), "a twentieth");
        assert!(WorkingSet::default().admit_all(0), "nothing stored yet");
    }
}
