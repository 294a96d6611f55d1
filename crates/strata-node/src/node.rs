//! One strata node in single-machine mode: the metadata store, the node
//! store and the NVMe/TCP target wired together, and the volume
//! operations the API offers.
//!
//! The metadata store is the source of truth for which volumes exist; the
//! node store only holds their extents. Operations are ordered so that a
//! crash between the two leaves nothing a restart cannot repair:
//! - create: metadata first, then the store volume (a volume in metadata
//!   with no extents is simply empty);
//! - resize: metadata first, then the store (at open the store frees
//!   extents beyond the recorded size and zeroes the tail of the last
//!   one); a grow first commits the store, so that nothing it dropped past
//!   the old end is still pending when the metadata records the new end;
//! - delete: namespace detached, metadata deleted, then the store frees
//!   the extents (orphaned extents are freed at the next start by
//!   `retain_volumes`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use serde::Serialize;
use strata_block::BlockDevice;
use strata_meta::{MetaError, MetaStore, NewVolume, VolumeRecord};
use strata_store::{DriveSpec, Store, StoreConfig, Volume};
use strata_target::{Namespace, NamespaceIds, PortRole, Subsystem, Target};

use crate::config::ServeConfig;

/// A volume as the API reports it.
#[derive(Debug, Clone, Serialize)]
pub struct VolumeInfo {
    /// Name.
    pub name: String,
    /// Store id.
    pub id: u64,
    /// Provisioned size in bytes.
    pub size_bytes: u64,
    /// Provisioned size, for people.
    pub size: String,
    /// Bytes of backing storage allocated (thin).
    pub allocated_bytes: u64,
    /// Logical block size.
    pub block_size: u32,
    /// Subsystem NQN.
    pub nqn: String,
    /// Namespace id in the subsystem.
    pub nsid: u32,
    /// Namespace UUID.
    pub uuid: String,
    /// Namespace NGUID (hex).
    pub nguid: String,
    /// Host NQNs allowed (empty = any).
    pub allowed_hosts: Vec<String>,
    /// Creation time, Unix seconds.
    pub created_unix: u64,
    /// An `nvme connect` command line for it.
    pub connect: String,
}

/// Errors the API maps to HTTP statuses.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Bad request (400).
    #[error("{0}")]
    Invalid(String),
    /// No such volume (404).
    #[error("{0}")]
    NotFound(String),
    /// Conflicts with existing state (409).
    #[error("{0}")]
    Conflict(String),
    /// Anything else (500).
    #[error("{0:#}")]
    Internal(anyhow::Error),
}

impl From<MetaError> for NodeError {
    fn from(e: MetaError) -> Self {
        match e {
            MetaError::NotFound { .. } => NodeError::NotFound(e.to_string()),
            MetaError::AlreadyExists { .. }
            | MetaError::Conflict { .. }
            | MetaError::Replaced { .. }
            | MetaError::NsidInUse { .. } => NodeError::Conflict(e.to_string()),
            MetaError::Corrupt { .. }
            | MetaError::Io { .. }
            | MetaError::Redb { .. }
            | MetaError::InUse { .. }
            | MetaError::Etcd { .. }
            | MetaError::Contention { .. }
            | MetaError::Abandoned { .. } => NodeError::Internal(e.into()),
            _ => NodeError::Invalid(e.to_string()),
        }
    }
}

impl Node {
    /// The metadata store (volumes, config, tokens).
    pub fn meta(&self) -> Arc<dyn MetaStore> {
        self.meta.clone()
    }
}

/// The running node.
pub struct Node {
    meta: Arc<dyn MetaStore>,
    /// Each subsystem's reservations in `meta`, by NQN.
    reservations: Mutex<BTreeMap<String, Arc<crate::reservations::MetaReservations>>>,
    store: Arc<Store>,
    target: Target,
    volumes: Mutex<BTreeMap<String, Arc<Volume>>>,
    /// Serialises volume management so that metadata and namespaces change
    /// together.
    admin: tokio::sync::Mutex<()>,
    connect_addr: SocketAddr,
}

/// A stable 20-character serial number for a subsystem, derived from its
/// NQN (FNV-1a), so that hosts see the same serial after a restart.
fn serial_for(nqn: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in nqn.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("STR{h:016X}")
}

impl Node {
    /// Opens metadata and drives, restores volumes and their subsystems.
    ///
    /// # Errors
    ///
    /// Any failure to open the data dir, a drive or the metadata.
    pub async fn open(cfg: &ServeConfig, target: Target) -> anyhow::Result<Arc<Node>> {
        std::fs::create_dir_all(&cfg.data_dir)
            .with_context(|| format!("cannot create data dir {}", cfg.data_dir.display()))?;
        // Opening may fsync: keep it off the runtime's threads.
        let dir = cfg.data_dir.clone();
        let meta = tokio::task::spawn_blocking(move || strata_meta::RedbMetaStore::open_in_dir(dir)).await??;
        let drives = drive_specs(cfg)?;
        check_drive_set(&meta, &drives).await?;
        let store = open_store(cfg, drives)?;
        let connect_addr = cfg.listen[0];
        let node = Arc::new(Node {
            meta: Arc::new(meta),
            reservations: Mutex::new(BTreeMap::new()),
            store,
            target,
            volumes: Mutex::new(BTreeMap::new()),
            admin: tokio::sync::Mutex::new(()),
            connect_addr,
        });
        let records = node.meta.list_volumes().await?;
        let ids: Vec<u64> = records.iter().map(|r| r.id).collect();
        let freed = node.store.retain_volumes(&ids).await?;
        if !freed.is_empty() {
            tracing::info!(?freed, "freed extents of volumes no longer in the metadata");
        }
        for rec in &records {
            node.attach(rec).await.with_context(|| format!("cannot restore volume {}", rec.name))?;
        }
        if records.is_empty()
            && cfg.default_volume_size > 0
            && node.meta.get_config("default_volume_created").await?.is_none()
        {
            let v = node
                .create_volume(NewVolume::new(crate::config::DEFAULT_VOLUME_NAME, cfg.default_volume_size))
                .await
                .map_err(|e| anyhow::anyhow!("cannot create the default volume: {e}"))?;
            tracing::info!(name = %v.name, size = %v.size, "created the default volume");
        }
        node.meta.put_config("default_volume_created", b"1").await?;
        Ok(node)
    }

    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Opens the store volume of `rec` and serves it as a namespace. A
    /// new subsystem becomes visible to hosts only once it has its access
    /// list and its namespace: there is no moment at which any host may
    /// connect to it.
    async fn attach(&self, rec: &VolumeRecord) -> anyhow::Result<()> {
        let vol = self.store.open_volume(rec.id, rec.size_bytes, rec.block_size)?;
        let ids = NamespaceIds { nguid: rec.nguid, uuid: rec.uuid, eui64: rec.eui64 };
        let kept = self.reservations_of(&rec.nqn);
        let cell = kept.load(rec.nsid, rec.id).await;
        let ns = Namespace::new(rec.nsid, ids, vol.clone() as Arc<dyn BlockDevice>)
            .with_reservations(cell)
            .with_metrics(self.target.io_metrics().volume(&rec.name));
        match self.target.subsystem(&rec.nqn) {
            Some(sub) => {
                // Another volume's subsystem: the namespace is masked to
                // its own hosts before any host can see it.
                sub.set_namespace_hosts(rec.nsid, rec.allowed_hosts.clone());
                sub.add_namespace(ns)?;
                self.refresh_acl(&rec.nqn).await?;
            }
            None => {
                let sub = Subsystem::new(rec.nqn.clone(), serial_for(&rec.nqn), self.acl(&rec.nqn).await?);
                sub.set_namespace_hosts(rec.nsid, rec.allowed_hosts.clone());
                // One node sees every host's commands: it serves
                // reservations, kept in the metadata store.
                sub.serve_reservations(true);
                sub.keep_reservations_in(kept);
                sub.add_namespace(ns)?;
                self.target.add_subsystem(sub)?;
            }
        }
        self.volumes.lock().unwrap_or_else(|e| e.into_inner()).insert(rec.name.clone(), vol);
        Ok(())
    }

    /// Where subsystem `nqn`'s reservations are kept.
    fn reservations_of(&self, nqn: &str) -> Arc<crate::reservations::MetaReservations> {
        let mut map = self.reservations.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(nqn.to_string())
            .or_insert_with(|| crate::reservations::MetaReservations::new(self.meta.clone()))
            .clone()
    }

    /// Who may connect to subsystem `nqn`: the union of its volumes' host
    /// lists, or any host when one of its volumes is open to any host.
    /// Which of its namespaces each host sees is the namespaces' masks'
    /// business (each volume's own list).
    async fn acl(&self, nqn: &str) -> anyhow::Result<Vec<String>> {
        let mut hosts: Vec<String> = Vec::new();
        let volumes: Vec<VolumeRecord> = self.meta.list_volumes().await?.into_iter().filter(|r| r.nqn == nqn).collect();
        if volumes.iter().any(|r| r.allowed_hosts.is_empty()) {
            return Ok(Vec::new());
        }
        for r in volumes {
            for h in r.allowed_hosts {
                if !hosts.contains(&h) {
                    hosts.push(h);
                }
            }
        }
        Ok(hosts)
    }

    /// Sets a subsystem's host list to the union of its volumes' lists;
    /// hosts left out are disconnected.
    async fn refresh_acl(&self, nqn: &str) -> anyhow::Result<()> {
        let Some(sub) = self.target.subsystem(nqn) else { return Ok(()) };
        for r in self.meta.list_volumes().await?.into_iter().filter(|r| r.nqn == nqn) {
            sub.set_namespace_hosts(r.nsid, r.allowed_hosts);
        }
        sub.set_allowed_hosts(self.acl(nqn).await?);
        Ok(())
    }

    fn info(&self, rec: &VolumeRecord) -> VolumeInfo {
        let allocated = self
            .volumes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&rec.name)
            .map(|v| v.allocated_bytes())
            .unwrap_or(0);
        let a = self.connect_addr;
        let host = if a.ip().is_unspecified() { "127.0.0.1".to_string() } else { a.ip().to_string() };
        VolumeInfo {
            name: rec.name.clone(),
            id: rec.id,
            size_bytes: rec.size_bytes,
            size: strata_meta::format_size(rec.size_bytes),
            allocated_bytes: allocated,
            block_size: rec.block_size,
            nqn: rec.nqn.clone(),
            nsid: rec.nsid,
            uuid: rec.uuid_string(),
            nguid: rec.nguid_hex(),
            allowed_hosts: rec.allowed_hosts.clone(),
            created_unix: rec.created_unix,
            connect: format!("nvme connect -t tcp -a {host} -s {} -n {}", a.port(), rec.nqn),
        }
    }

    /// All volumes.
    pub async fn list_volumes(&self) -> Result<Vec<VolumeInfo>, NodeError> {
        Ok(self.meta.list_volumes().await?.iter().map(|r| self.info(r)).collect())
    }

    /// One volume.
    pub async fn get_volume(&self, name: &str) -> Result<VolumeInfo, NodeError> {
        let rec = self
            .meta
            .get_volume(name)
            .await?
            .ok_or_else(|| NodeError::NotFound(format!("no volume named {name:?}")))?;
        Ok(self.info(&rec))
    }

    /// Refuses a size the store cannot open, naming its limit.
    fn check_size(&self, size_bytes: u64) -> Result<(), NodeError> {
        let max = self.store.max_volume_bytes();
        if size_bytes > max {
            return Err(NodeError::Invalid(format!(
                "{}: a volume can be at most {} here ({} extents of {}; each extent costs 8 bytes of memory)",
                strata_meta::format_size(size_bytes),
                strata_meta::format_size(max),
                strata_store::MAX_VOLUME_EXTENTS,
                strata_meta::format_size(u64::from(self.store.extent_size()))
            )));
        }
        Ok(())
    }

    /// Creates a volume and serves it.
    pub async fn create_volume(&self, req: NewVolume) -> Result<VolumeInfo, NodeError> {
        self.check_size(req.size_bytes)?;
        let _guard = self.admin.lock().await;
        let rec = self.meta.create_volume(req).await?;
        if let Err(e) = self.attach(&rec).await {
            // Roll back so that the name can be used again.
            let _ = self.meta.delete_volume(&rec.name).await;
            return Err(NodeError::Internal(e));
        }
        tracing::info!(name = %rec.name, size = rec.size_bytes, nqn = %rec.nqn, "volume created");
        Ok(self.info(&rec))
    }

    /// Changes a volume's size. Shrinking needs `allow_shrink`, since it
    /// discards data past the new end.
    pub async fn resize_volume(
        &self,
        name: &str,
        size_bytes: u64,
        allow_shrink: bool,
    ) -> Result<VolumeInfo, NodeError> {
        self.check_size(size_bytes)?;
        let _guard = self.admin.lock().await;
        let mut rec = self
            .meta
            .get_volume(name)
            .await?
            .ok_or_else(|| NodeError::NotFound(format!("no volume named {name:?}")))?;
        if size_bytes < rec.size_bytes && !allow_shrink {
            return Err(NodeError::Invalid(format!(
                "{} is smaller than the volume's size {}; shrinking discards data, pass allow_shrink (--shrink) to do it",
                strata_meta::format_size(size_bytes),
                strata_meta::format_size(rec.size_bytes)
            )));
        }
        if size_bytes > rec.size_bytes {
            // Before the metadata says the volume is larger, the store must
            // have durably forgotten everything past the old end (extents
            // freed by a shrink or at open, the zeroed tail), or a crash
            // could bring old data back where zeros are promised.
            self.store.commit().await.map_err(|e| NodeError::Internal(e.into()))?;
        }
        rec.size_bytes = size_bytes;
        let rec = self.meta.update_volume(&rec).await?;
        let vol = self.volumes.lock().unwrap_or_else(|e| e.into_inner()).get(name).cloned();
        if let Some(vol) = vol {
            vol.resize(size_bytes).await.map_err(|e| NodeError::Internal(e.into()))?;
        }
        if let Some(sub) = self.target.subsystem(&rec.nqn) {
            sub.namespace_changed(rec.nsid);
        }
        tracing::info!(name, size = size_bytes, "volume resized");
        Ok(self.info(&rec))
    }

    /// Deletes a volume: disconnects it from its subsystem, forgets it and
    /// frees its space.
    pub async fn delete_volume(&self, name: &str) -> Result<VolumeInfo, NodeError> {
        let _guard = self.admin.lock().await;
        let rec = self
            .meta
            .get_volume(name)
            .await?
            .ok_or_else(|| NodeError::NotFound(format!("no volume named {name:?}")))?;
        let info = self.info(&rec);
        if let Some(sub) = self.target.subsystem(&rec.nqn) {
            let _ = sub.remove_namespace(rec.nsid);
            if sub.nsids().is_empty() {
                self.target.remove_subsystem(&rec.nqn);
            }
        }
        self.meta.delete_volume(name).await?;
        if let Err(e) = self.reservations_of(&rec.nqn).forget(rec.nsid, rec.id).await {
            tracing::warn!(name, "forgetting the deleted volume's reservations: {e}");
        }
        self.volumes.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
        self.target.io_metrics().remove_volume(name);
        self.store.delete_volume(rec.id).await.map_err(|e| NodeError::Internal(e.into()))?;
        self.refresh_acl(&rec.nqn).await.map_err(NodeError::Internal)?;
        tracing::info!(name, "volume deleted");
        Ok(info)
    }

    /// Flushes every drive; used at shutdown.
    pub async fn flush(&self) -> anyhow::Result<()> {
        self.store.flush_all().await?;
        Ok(())
    }

    /// Starts the NVMe/TCP listeners.
    pub async fn listen(&self, cfg: &ServeConfig) -> anyhow::Result<()> {
        for a in &cfg.listen {
            self.target.listen(*a, PortRole::Io).await?;
        }
        for a in &cfg.discovery {
            if cfg.listen.contains(a) {
                bail!("--discovery {a} is also a --listen address; give them different ports");
            }
            self.target.listen(*a, PortRole::Discovery).await?;
        }
        Ok(())
    }
}

/// The drives of `cfg`, parsed.
///
/// # Errors
///
/// A drive spec that does not parse.
pub fn drive_specs(cfg: &ServeConfig) -> anyhow::Result<Vec<DriveSpec>> {
    cfg.drives.iter().map(|d| d.parse::<DriveSpec>().map_err(|e| anyhow::anyhow!("--drive {d:?}: {e}"))).collect()
}

/// Opens (formatting when new) the node's drives.
///
/// # Errors
///
/// A drive that cannot be opened.
pub fn open_store(cfg: &ServeConfig, drives: Vec<DriveSpec>) -> anyhow::Result<Arc<Store>> {
    let mut store_cfg = StoreConfig::new(drives);
    store_cfg.extent_size = cfg.extent_size;
    store_cfg.allow_buffered = cfg.allow_buffered;
    let store = Store::open(store_cfg).context("cannot open the drives")?;
    for d in store.stats().drives {
        if d.volatile {
            tracing::warn!(drive = %d.path, "drive is VOLATILE (RAM): its data is lost when strata exits");
        }
        tracing::info!(drive = %d.path, kind = d.kind, engine = d.engine, capacity = %strata_meta::format_size(d.capacity_bytes), "drive ready");
    }
    Ok(store)
}

async fn check_drive_set(meta: &dyn MetaStore, drives: &[DriveSpec]) -> anyhow::Result<()> {
    let now: Vec<String> = drives
        .iter()
        .filter(|d| !matches!(d.kind, strata_store::DriveKind::Mem { .. }))
        .map(DriveSpec::label)
        .collect();
    if let Some(prev) = meta.get_config("drives").await? {
        let prev: Vec<String> = serde_json::from_slice(&prev).context("metadata key 'drives' is corrupt")?;
        let missing: Vec<&String> = prev.iter().filter(|p| !now.contains(p)).collect();
        if !missing.is_empty() {
            bail!(
                "drive(s) {missing:?} held volume data at the last start but are not configured now; \
                 add them back with --drive, or remove the data dir to start over"
            );
        }
    }
    meta.put_config("drives", &serde_json::to_vec(&now)?).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_are_stable_and_fit_the_field() {
        let a = serial_for("nqn.2026-11.io.strata:default");
        assert_eq!(a, serial_for("nqn.2026-11.io.strata:default"));
        assert_ne!(a, serial_for("nqn.2026-11.io.strata:other"));
        assert!(a.len() <= 20);
    }
}
