//! Pins and leases: what keeps a block in DRAM. A hard pin or an
//! unexpired lease keeps it there; a soft pin lets it go only when
//! nothing unpinned is left (eviction, the `evict` module, and quotas
//! honour both). Leases are taken by [`KvStore::prefetch`] and ended
//! here or by time.

use super::error::KvError;
use super::index::{Entry, Pin, full_key, lock};
use super::kv_store::KvStore;

impl KvStore {
    /// Sets the pin of `keys` (which must be present); returns how many
    /// were. A pinned block on SSD only is pinned once it is read back.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn pin<K: AsRef<[u8]>>(&self, ns: &[u8], keys: &[K], pin: Pin) -> Result<usize, KvError> {
        self.update(ns, keys, |e| {
            e.pin = pin;
            true
        })
    }

    /// Ends the leases of `keys`; returns how many were leased.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn release<K: AsRef<[u8]>>(&self, ns: &[u8], keys: &[K]) -> Result<usize, KvError> {
        self.update(ns, keys, |e| std::mem::take(&mut e.lease_until_ms) != 0)
    }

    fn update<K: AsRef<[u8]>>(
        &self,
        ns: &[u8],
        keys: &[K],
        mut f: impl FnMut(&mut Entry) -> bool,
    ) -> Result<usize, KvError> {
        let keys = keys.iter().map(|k| full_key(ns, k.as_ref())).collect::<Result<Vec<_>, _>>()?;
        let mut g = lock(&self.inner);
        Ok(keys.iter().filter(|k| g.map.get_mut(*k).is_some_and(&mut f)).count())
    }
}
