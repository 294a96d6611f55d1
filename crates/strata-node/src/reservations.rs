//! Where `strata serve` keeps its volumes' reservations: one metadata
//! store value per volume (`reservations/ID`, ID the store's volume id),
//! written (redb commits with an fsync) before the command that changed
//! it completes. At start a volume's namespace starts from its kept state
//! when that state has Persist Through Power Loss set, as the
//! specification asks; without it (or with a state that does not parse,
//! which is logged) it starts with none.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use strata_meta::MetaStore;
use strata_target::reservation::{ReservationCell, ReservationStore, Reservations, SaveFuture};

/// One subsystem's reservations in the metadata store.
pub struct MetaReservations {
    meta: Arc<dyn MetaStore>,
    /// The store volume id of each NSID.
    ids: Mutex<HashMap<u32, u64>>,
}

fn key(id: u64) -> String {
    format!("reservations/{id}")
}

impl MetaReservations {
    /// For one subsystem, its volumes added with [`Self::load`].
    pub fn new(meta: Arc<dyn MetaStore>) -> Arc<MetaReservations> {
        Arc::new(MetaReservations { meta, ids: Mutex::new(HashMap::new()) })
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashMap<u32, u64>> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves store volume `id` as namespace `nsid`: the state its
    /// namespace starts from.
    pub async fn load(&self, nsid: u32, id: u64) -> Arc<ReservationCell> {
        self.ids().insert(nsid, id);
        let kept = match self.meta.get_config(&key(id)).await {
            Ok(Some(b)) if !b.is_empty() => match Reservations::from_bytes(&b) {
                Ok(r) if r.persists() => r,
                Ok(_) => Reservations::default(),
                Err(e) => {
                    tracing::error!(volume = id, "{e}: the volume starts with no reservation");
                    Reservations::default()
                }
            },
            Ok(_) => Reservations::default(),
            Err(e) => {
                tracing::error!(volume = id, "reading its reservations: {e}; it starts with none");
                Reservations::default()
            }
        };
        Arc::new(ReservationCell::with_state(kept))
    }

    /// Forgets the reservations of store volume `id` (deleted).
    ///
    /// # Errors
    ///
    /// The metadata store's.
    pub async fn forget(&self, nsid: u32, id: u64) -> Result<(), strata_meta::MetaError> {
        self.ids().remove(&nsid);
        self.meta.put_config(&key(id), &[]).await
    }
}

impl ReservationStore for MetaReservations {
    fn save(&self, nsid: u32, state: Vec<u8>) -> SaveFuture<'_> {
        Box::pin(async move {
            let id = self.ids().get(&nsid).copied().ok_or_else(|| format!("namespace {nsid} is not a volume here"))?;
            self.meta.put_config(&key(id), &state).await.map_err(|e| e.to_string())
        })
    }
}
