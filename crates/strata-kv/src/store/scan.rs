//! Listing keys: `SCAN` (a cursor over one namespace's keys, in the
//! stable order of the `keyorder` module) and `KEYS` (the same walk to
//! its end, a chunk per lock hold). Only this store's own keys are
//! listed: keys known only from the peers' logs on a shared pool volume
//! are not (as `DBSIZE` does not count them). Expired keys are left out.

use bytes::Bytes;

use super::error::KvError;
use super::index::{full_key, lock};
use super::kv_store::KvStore;
use crate::glob::Glob;

/// The most keys one `SCAN` call examines, whatever its `COUNT`: the
/// store's lock is held meanwhile. The cursor goes on from there.
pub const MAX_SCAN_COUNT: usize = 100_000;

impl KvStore {
    /// One step of a scan of namespace `ns`: examines about `count` keys
    /// (at most [`MAX_SCAN_COUNT`]) from `cursor` (0 to start) and
    /// returns the next cursor (0 when the scan is done) and those that
    /// are live and match `pattern`. A key stored for the whole scan is
    /// returned at least once.
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn scan(
        &self,
        ns: &[u8],
        cursor: u64,
        count: usize,
        pattern: Option<&Glob>,
    ) -> Result<(u64, Vec<Bytes>), KvError> {
        let prefix = full_key(ns, b"")?;
        let now = self.now();
        let g = lock(&self.inner);
        let mut keys = Vec::new();
        let next = g.order.walk(&prefix, cursor, count.min(MAX_SCAN_COUNT), |k| {
            let key = k.slice(prefix.len()..);
            if g.map.get(k).is_some_and(|e| !e.expired(now)) && pattern.is_none_or(|p| p.matches(&key)) {
                keys.push(key);
            }
        });
        Ok((next, keys))
    }

    /// Every live key of namespace `ns` matching `pattern`, each once,
    /// sorted (a key stored or deleted meanwhile may be listed or not).
    ///
    /// # Errors
    ///
    /// A bad namespace.
    pub fn keys(&self, ns: &[u8], pattern: &Glob) -> Result<Vec<Bytes>, KvError> {
        let mut all = Vec::new();
        let mut cursor = 0;
        loop {
            let (next, mut keys) = self.scan(ns, cursor, 10_000, Some(pattern))?;
            all.append(&mut keys);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        // Each key once (a walk never stops inside a run of equal
        // positions); sorted, so that the answer reads well.
        all.sort_unstable();
        Ok(all)
    }
}
