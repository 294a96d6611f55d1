//! An in-memory [`MetaStore`], for tests of the crates above this one.
//!
//! It follows exactly the rules of the persistent backends (it calls the
//! same checks in [`crate::store`]) but keeps nothing across drops. One
//! mutex guards the whole state; each call holds it from its first read to
//! its last write, which makes every call atomic. The state is only mutated
//! after every check has passed, so a panic elsewhere cannot leave it half
//! changed, and a poisoned lock is safe to keep using.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use crate::error::MetaError;
use crate::record::{Identity, NewVolume, VolumeRecord};
use crate::store::{MetaFuture, MetaStore, allocate_nsid, check_config, check_new, prepare_new, prepare_update};
use crate::sys::now_unix;
use crate::validate::validate_volume_name;

#[derive(Debug)]
struct State {
    volumes: BTreeMap<String, VolumeRecord>,
    config: BTreeMap<String, Vec<u8>>,
    next_id: u64,
}

/// A [`MetaStore`] that lives in memory only.
#[derive(Debug)]
pub struct MemMetaStore {
    state: Mutex<State>,
}

impl Default for MemMetaStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemMetaStore {
    /// An empty store; the first volume gets id 1.
    pub fn new() -> Self {
        MemMetaStore { state: Mutex::new(State { volumes: BTreeMap::new(), config: BTreeMap::new(), next_id: 1 }) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // See the module doc: state is never left half-changed.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl MemMetaStore {
    fn create_now(&self, req: NewVolume) -> Result<VolumeRecord, MetaError> {
        let nqn = check_new(&req)?;
        let identity = Identity::generate()?;
        let mut st = self.lock();
        if st.volumes.contains_key(&req.name) {
            return Err(MetaError::AlreadyExists { name: req.name });
        }
        let nsid = allocate_nsid(&nqn, st.volumes.values())?;
        let id = st.next_id;
        let next = id
            .checked_add(1)
            .ok_or_else(|| MetaError::corrupt("counters/next_volume_id", "volume ids are exhausted"))?;
        let rec = prepare_new(req, nqn, id, nsid, identity, now_unix());
        st.next_id = next;
        st.volumes.insert(rec.name.clone(), rec.clone());
        Ok(rec)
    }

    fn update_now(&self, rec: &VolumeRecord) -> Result<VolumeRecord, MetaError> {
        validate_volume_name(&rec.name)?;
        let mut st = self.lock();
        let stored = st.volumes.get(&rec.name).ok_or_else(|| MetaError::NotFound { name: rec.name.clone() })?;
        let others = st.volumes.values().filter(|r| r.name != rec.name);
        let updated = prepare_update(stored, rec, others)?;
        st.volumes.insert(updated.name.clone(), updated.clone());
        Ok(updated)
    }
}

// Each call runs, whole, under the lock at its future's first poll; there
// is no await point inside, so a dropped future either never ran or ran
// completely.
impl MetaStore for MemMetaStore {
    fn list_volumes(&self) -> MetaFuture<'_, Vec<VolumeRecord>> {
        Box::pin(async move { Ok(self.lock().volumes.values().cloned().collect()) })
    }

    fn get_volume<'a>(&'a self, name: &'a str) -> MetaFuture<'a, Option<VolumeRecord>> {
        Box::pin(async move {
            validate_volume_name(name)?;
            Ok(self.lock().volumes.get(name).cloned())
        })
    }

    fn create_volume(&self, req: NewVolume) -> MetaFuture<'_, VolumeRecord> {
        Box::pin(async move { self.create_now(req) })
    }

    fn update_volume<'a>(&'a self, rec: &'a VolumeRecord) -> MetaFuture<'a, VolumeRecord> {
        Box::pin(async move { self.update_now(rec) })
    }

    fn delete_volume<'a>(&'a self, name: &'a str) -> MetaFuture<'a, VolumeRecord> {
        Box::pin(async move {
            validate_volume_name(name)?;
            self.lock().volumes.remove(name).ok_or_else(|| MetaError::NotFound { name: name.to_owned() })
        })
    }

    fn get_config<'a>(&'a self, key: &'a str) -> MetaFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            check_config(key, None)?;
            Ok(self.lock().config.get(key).cloned())
        })
    }

    fn put_config<'a>(&'a self, key: &'a str, value: &'a [u8]) -> MetaFuture<'a, ()> {
        Box::pin(async move {
            check_config(key, Some(value))?;
            self.lock().config.insert(key.to_owned(), value.to_vec());
            Ok(())
        })
    }

    fn delete_config<'a>(&'a self, key: &'a str) -> MetaFuture<'a, bool> {
        Box::pin(async move {
            check_config(key, None)?;
            Ok(self.lock().config.remove(key).is_some())
        })
    }

    fn list_config<'a>(&'a self, prefix: &'a str) -> MetaFuture<'a, Vec<(String, Vec<u8>)>> {
        Box::pin(async move {
            check_config(prefix, None)?;
            let st = self.lock();
            Ok(st
                .config
                .range(prefix.to_owned()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_the_conformance_suite() {
        crate::testing::check_conformance(|| async { (Arc::new(MemMetaStore::new()) as Arc<dyn MetaStore>, ()) }).await;
    }
}
