//! Where a pool volume's owner keeps its hosts' reservations: etcd
//! (`pool/reservations/<id>`), written under the owner's token before the
//! command that changed them completes, so that a deposed owner changes
//! nothing and the next owner, which loads them when it opens the volume,
//! serves them on. A takeover is not a power loss: the state survives it
//! whatever Persist Through Power Loss says.
//!
//! Every node is a path to the volume, and a path runs each host's
//! commands at the owner under that host's identifier (see [`super::paths`]),
//! so one state, the owner's, applies to every host on every path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use strata_meta::etcd::EtcdClient;
use strata_pool::cluster::{OwnerToken, VolumeKeys};
use strata_target::reservation::{ReservationCell, ReservationStore, Reservations, SaveFuture};

/// The volumes of one subsystem whose reservations this node keeps as
/// their owner, by NSID.
pub struct EtcdReservations {
    etcd: EtcdClient,
    volumes: Mutex<HashMap<u32, (VolumeKeys, OwnerToken)>>,
}

impl EtcdReservations {
    /// For a subsystem with no volume owned yet.
    pub fn new(etcd: EtcdClient) -> Arc<EtcdReservations> {
        Arc::new(EtcdReservations { etcd, volumes: Mutex::new(HashMap::new()) })
    }

    fn volumes(&self) -> std::sync::MutexGuard<'_, HashMap<u32, (VolumeKeys, OwnerToken)>> {
        self.volumes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the reservations of namespace `nsid` (the volume of `keys`)
    /// under owner `token` from now on.
    pub fn own(&self, nsid: u32, keys: VolumeKeys, token: OwnerToken) {
        self.volumes().insert(nsid, (keys, token));
    }

    /// Stops keeping namespace `nsid`'s (no longer owned here).
    pub fn disown(&self, nsid: u32) {
        self.volumes().remove(&nsid);
    }
}

impl ReservationStore for EtcdReservations {
    fn save(&self, nsid: u32, state: Vec<u8>) -> SaveFuture<'_> {
        Box::pin(async move {
            let (keys, token) =
                self.volumes().get(&nsid).cloned().ok_or_else(|| format!("namespace {nsid} is not owned here"))?;
            match strata_pool::cluster::save_reservations(&self.etcd, &keys, &token, &state).await {
                Ok(true) => Ok(()),
                Ok(false) => Err("this node no longer owns the volume".into()),
                Err(e) => Err(e.to_string()),
            }
        })
    }
}

/// The reservations volume `keys` starts with at its new owner.
///
/// # Errors
///
/// etcd errors (the open fails and is tried again); a state that does not
/// parse is logged and the volume starts with none, rather than never
/// being served.
pub async fn load(etcd: &EtcdClient, keys: &VolumeKeys, name: &str) -> anyhow::Result<Arc<ReservationCell>> {
    let kept = strata_pool::cluster::load_reservations(etcd, keys).await?;
    let state = if kept.is_empty() {
        Reservations::default()
    } else {
        Reservations::from_bytes(&kept).unwrap_or_else(|e| {
            tracing::error!(volume = %name, "{e}: the volume is served with no reservation");
            Reservations::default()
        })
    };
    Ok(Arc::new(ReservationCell::with_state(state)))
}
