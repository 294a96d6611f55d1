//! [`KeyOrder`]: the store's keys in an order that stays put while keys
//! come and go, for `SCAN`'s cursor: by namespace, then by a position
//! drawn from a hash of the key, then by the key.
//!
//! A cursor is a position: a scan returns the keys from the cursor's
//! position on and the position of the next key as the next cursor
//! (0 when none is left). Because a key's position never changes while
//! it is stored (the hash's keys are fixed for the process), a key present
//! from a scan's first call to its last lies ahead of the cursor until it
//! is returned: every such key is returned at least once, whatever is
//! inserted or deleted meanwhile (Redis's guarantee, without its cursor
//! reversing bits: this order is kept, not a hash table's). Keys of
//! equal position are returned together, so a cursor never stops in the
//! middle of them.
//!
//! Positions are in `1..=2^62`: 0 is the cursor that starts and ends a
//! scan, and every cursor fits a signed 64-bit integer (what clients
//! parse it as).
//!
//! Costs: a B-tree insert or remove per key stored or deleted, and about
//! 40 bytes per key plus the tree's nodes (not counted in DRAM's
//! capacity, like the index's other structures).

use std::collections::BTreeSet;
use std::hash::BuildHasher;

use bytes::Bytes;

/// The namespace prefix of an internal key (`[length, name]`).
fn ns_part(k: &[u8]) -> &[u8] {
    let n = k.first().copied().unwrap_or(0) as usize;
    k.get(..1 + n).unwrap_or(k)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    pos: u64,
    key: Bytes,
}

impl Ord for Slot {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (ns_part(&self.key), self.pos, &self.key[..]).cmp(&(ns_part(&o.key), o.pos, &o.key[..]))
    }
}

impl PartialOrd for Slot {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// The keys in scan order (the module doc).
#[derive(Debug, Default)]
pub(super) struct KeyOrder {
    set: BTreeSet<Slot>,
    hash: std::collections::hash_map::RandomState,
}

impl KeyOrder {
    fn pos(&self, k: &[u8]) -> u64 {
        (self.hash.hash_one(k) >> 2) + 1
    }

    /// Notes a stored key (internal form).
    pub(super) fn insert(&mut self, k: &Bytes) {
        self.set.insert(Slot { pos: self.pos(k), key: k.clone() });
    }

    /// Forgets a key no longer stored.
    pub(super) fn remove(&mut self, k: &Bytes) {
        self.set.remove(&Slot { pos: self.pos(k), key: k.clone() });
    }

    /// Up to about `count` keys of the namespace with internal prefix
    /// `prefix`, from position `cursor` on (more when the last ones share
    /// a position), each passed to `take`; returns the next cursor (0:
    /// none left).
    pub(super) fn walk(&self, prefix: &Bytes, cursor: u64, count: usize, mut take: impl FnMut(&Bytes)) -> u64 {
        let from = Slot { pos: cursor.max(1), key: prefix.clone() };
        let mut last = None;
        for (n, s) in self.set.range(from..).enumerate() {
            if ns_part(&s.key) != &prefix[..] {
                return 0;
            }
            if n >= count.max(1) && last != Some(s.pos) {
                return s.pos;
            }
            take(&s.key);
            last = Some(s.pos);
        }
        0
    }

    /// Keys noted (the index's invariant check).
    pub(super) fn len(&self) -> usize {
        self.set.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, k: &str) -> Bytes {
        let mut v = vec![ns.len() as u8];
        v.extend_from_slice(ns.as_bytes());
        v.extend_from_slice(k.as_bytes());
        Bytes::from(v)
    }

    fn scan_all(o: &KeyOrder, ns: &str, count: usize) -> Vec<Bytes> {
        let (mut cursor, mut got) = (0, Vec::new());
        loop {
            cursor = o.walk(&key(ns, ""), cursor, count, |k| got.push(k.clone()));
            if cursor == 0 {
                return got;
            }
            assert!(cursor <= i64::MAX as u64);
        }
    }

    #[test]
    fn a_scan_visits_each_key_of_its_namespace_once() {
        let mut o = KeyOrder::default();
        for i in 0..500 {
            o.insert(&key("a", &format!("k{i}")));
            o.insert(&key("ab", &format!("k{i}")));
        }
        o.insert(&key("", "lonely"));
        let mut got = scan_all(&o, "a", 7);
        got.sort();
        let mut want: Vec<Bytes> = (0..500).map(|i| key("a", &format!("k{i}"))).collect();
        want.sort();
        assert_eq!(got, want);
        assert_eq!(scan_all(&o, "", 3), vec![key("", "lonely")]);
        assert!(scan_all(&o, "zzz", 3).is_empty());
        o.remove(&key("ab", "k3"));
        assert_eq!(o.len(), 1000);
    }

    #[test]
    fn keys_present_throughout_are_returned_despite_inserts_and_deletes() {
        let mut o = KeyOrder::default();
        let stay: Vec<Bytes> = (0..300).map(|i| key("n", &format!("stay{i}"))).collect();
        for k in &stay {
            o.insert(k);
        }
        let (mut cursor, mut seen, mut round) = (0, std::collections::HashSet::new(), 0);
        loop {
            cursor = o.walk(&key("n", ""), cursor, 10, |k| {
                seen.insert(k.clone());
            });
            // Churn between calls: keys come and go.
            for j in 0..20 {
                let k = key("n", &format!("churn{round}-{j}"));
                o.insert(&k);
                if j % 2 == 0 {
                    o.remove(&k);
                }
            }
            round += 1;
            if cursor == 0 {
                break;
            }
        }
        assert!(stay.iter().all(|k| seen.contains(k)));
    }
}
