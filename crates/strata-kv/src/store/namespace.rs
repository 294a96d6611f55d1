//! Namespaces: their quotas, usage and deletion. A namespace's usage
//! counts its entries in every tier (its keys and values as DRAM charges
//! them, [`dram_size`](super::dram_size)); a put that would take it over
//! its quota first deletes its oldest blocks ([`KvStore::put`]), soft
//! pinned ones last, and never a hard-pinned or leased one.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::durable::Durability;
use super::error::KvError;
use super::index::{Inner, Pin, full_key, lock, ns_of};
use super::kv_store::KvStore;

impl KvStore {
    /// Sets namespace `ns`'s quota in bytes (0: none). Takes effect on the
    /// namespace's next put.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn set_quota(&self, ns: &[u8], bytes: u64) -> Result<(), KvError> {
        full_key(ns, b"")?;
        let mut g = lock(&self.inner);
        g.ns.entry(Bytes::copy_from_slice(ns)).or_default().quota = bytes;
        Ok(())
    }

    /// Namespace `ns`'s usage: `(keys, bytes, quota)`, bytes as its quota
    /// counts them (keys, values and [`ENTRY_OVERHEAD`](super::ENTRY_OVERHEAD), in any tier).
    pub fn namespace_usage(&self, ns: &[u8]) -> (u64, u64, u64) {
        let g = lock(&self.inner);
        g.ns.get(ns).map(|st| (st.keys, st.bytes, st.quota)).unwrap_or((0, 0, 0))
    }

    /// Keys of namespace `ns` (every tier).
    pub fn namespace_len(&self, ns: &[u8]) -> u64 {
        self.namespace_usage(ns).0
    }

    /// Deletes every key of namespace `ns`, with one namespace tombstone
    /// per log tier; returns how many once the deletion is durable.
    ///
    /// # Errors
    ///
    /// A bad namespace; [`KvError::NotDurable`] as for
    /// [`KvStore::put`] (the keys are deleted in memory).
    pub async fn delete_namespace(&self, ns: &[u8]) -> Result<u64, KvError> {
        let prefix = full_key(ns, b"")?;
        let (n, pending) = {
            let mut g = lock(&self.inner);
            let mut d = Durability::default();
            let n = self.delete_prefix(&mut g, &prefix, &mut d);
            g.peer_index.retain(|k, _| ns_of(k) != ns);
            (n, self.request_if(&mut g, d))
        };
        self.settle(pending).await?;
        Ok(n)
    }

    /// Deletes namespace `ns`'s oldest blocks until a block of `size`
    /// bytes, replacing `except` of `old_size`, fits in its quota;
    /// soft-pinned ones go last, hard-pinned and leased ones stay.
    pub(super) fn enforce_quota(
        &self,
        inner: &mut Inner,
        ns: &[u8],
        size: u64,
        old_size: u64,
        now: u64,
        except: &Bytes,
    ) -> Result<(), KvError> {
        let Some(st) = inner.ns.get(ns).filter(|st| st.quota > 0) else { return Ok(()) };
        let quota = st.quota;
        if size > quota {
            // Nothing to delete for: it can never fit.
            return Err(KvError::Quota { need: size, used: st.bytes, quota });
        }
        let need = size.saturating_sub(old_size);
        for soft_too in [false, true] {
            let mut kept = Vec::new();
            loop {
                let st = inner.ns.get_mut(ns).expect("checked above");
                if st.bytes + need <= quota {
                    break;
                }
                let Some((k, stamp)) = st.order.pop_front() else { break };
                let Some(e) = inner.map.get(&k).filter(|e| e.stamp == stamp) else { continue };
                if k == *except || e.pin == Pin::Hard || e.lease_until_ms > now || (!soft_too && e.pin == Pin::Soft) {
                    kept.push((k, stamp));
                    continue;
                }
                self.remove_entry(inner, &k, &mut Durability::default());
                self.counters.quota_evicted.fetch_add(1, Ordering::Relaxed);
            }
            let st = inner.ns.get_mut(ns).expect("checked above");
            for slot in kept.into_iter().rev() {
                st.order.push_front(slot);
            }
            if st.bytes + need <= quota {
                return Ok(());
            }
        }
        let used = inner.ns.get(ns).map(|st| st.bytes).unwrap_or(0);
        Err(KvError::Quota { need, used, quota })
    }
}
