//! `strata node`: one storage node of a cluster. It registers in etcd
//! under a lease, joins the placement map, keeps a replica of every volume
//! placement gives it (a thin store volume behind an epoch fence, served
//! on the fabric listener), takes over volumes that have no owner, and
//! serves the ones it owns to hosts. Every node's discovery lists each
//! volume at its owner.
//!
//! The node reconciles with etcd every second: what it should hold and
//! serve follows from the volumes, their pool state and the live nodes
//! there, so a missed event costs a second, never correctness. The rules
//! that keep data safe (fencing, the dirty-region log, compare-and-set on
//! the membership) live in `strata-pool`; this module wires them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use strata_block::{BlockDevice, EpochFence, UndoLog};
use strata_host::HostConfig;
use strata_meta::etcd::{EtcdClient, KeyRange, LeaseKeeper};
use strata_meta::{MetaStore, VolumeRecord};
use strata_pool::cluster::{EtcdVolume, OwnerToken, PlacementLayout, VolumeKeys, VolumeState, acquire, read_state};
use strata_pool::erasure::{EcParts, ErasureVolume, LocalShard, Shard, Stripes, UndoDevice};
use strata_pool::fabric::{FabricLink, FabricReplica, fabric_nqn};
use strata_pool::placement::{PlacementTable, Protection};
use strata_pool::registry::{DriveRecord, NodeRecord, ResyncProgress, live_nodes, map_at, register, volume_allocated};
use strata_pool::{
    DirtyRegionLog, Layout, LocalReplica, NodeId, PoolVolume, Regions, Replica, ReplicatedVolume, VolumeParts,
};
use strata_store::Store;
use strata_target::{Namespace, NamespaceIds, RemoteSubsystem, Subsystem, Target};

use crate::node::NodeError;

/// How often a node reconciles with etcd and cleans its dirty regions.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(1);

/// A replica (or shard) this node keeps.
struct Held {
    fence: Arc<EpochFence>,
    device: Arc<dyn BlockDevice>,
    /// A shard's undo log, over the same blocks as `device`.
    undo: Option<Arc<dyn UndoLog>>,
}

/// Bytes of the undo log each node keeps for each erasure-coded shard it
/// holds (a thin store volume: what stays uncommitted between the owner's
/// commits, at most about a second of writes or 2,048 updates).
const UNDO_LOG_BYTES: u64 = 128 << 20;

/// The store volume id of the undo log of volume `id`'s shard.
fn undo_log_id(id: u64) -> u64 {
    id | 1 << 62
}

/// A volume to take over, with what the reconcile pass knows of it.
struct Claim<'a> {
    rec: &'a VolumeRecord,
    keys: &'a VolumeKeys,
    layout: Arc<PlacementLayout>,
    protection: Protection,
    holders: &'a BTreeSet<NodeId>,
    nodes: &'a BTreeMap<NodeId, NodeRecord>,
}

/// A volume this node owns and serves.
struct Owned {
    vol: Arc<dyn PoolVolume>,
    nqn: String,
    resyncing: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct State {
    links: HashMap<NodeId, Arc<FabricLink>>,
    held: HashMap<u64, Held>,
    owned: HashMap<u64, Owned>,
    tables: HashMap<u64, Arc<PlacementTable>>,
}

/// One node of a cluster.
pub struct ClusterNode {
    me: NodeRecord,
    prefix: String,
    etcd: EtcdClient,
    meta: Arc<dyn MetaStore>,
    store: Arc<Store>,
    target: Target,
    fabric: Arc<Subsystem>,
    /// Where hosts discover volumes on this node.
    discovery: Option<SocketAddr>,
    /// The current lease; replaced by a new one after a loss.
    lease: std::sync::Mutex<Arc<LeaseKeeper>>,
    host_cfg: HostConfig,
    state: tokio::sync::Mutex<State>,
}

/// A volume's protection, `rep:N` or `ec:K+M`.
pub fn protection_of(protection: &str) -> anyhow::Result<Protection> {
    protection.parse::<Protection>().map_err(|e| anyhow::anyhow!("{e}"))
}

/// The stripes of an erasure-coded volume of `block_size`-byte blocks:
/// strips of 4 KiB (or one block, when larger).
fn stripes_of(protection: Protection, block_size: u32) -> Option<Stripes> {
    match protection {
        Protection::ErasureCoded { data, parity } => Some(Stripes {
            data: usize::from(data),
            parity: usize::from(parity),
            strip: u64::from(block_size).max(4096),
        }),
        _ => None,
    }
}

/// What a node is built from (see `node_cmd`).
pub struct ClusterParts {
    /// This node's registration.
    pub me: NodeRecord,
    /// The cluster's key prefix in etcd.
    pub prefix: String,
    /// The etcd client.
    pub etcd: EtcdClient,
    /// Volume records (in etcd).
    pub meta: Arc<dyn MetaStore>,
    /// The node's drives.
    pub store: Arc<Store>,
    /// The NVMe/TCP target (host, discovery and fabric listeners).
    pub target: Target,
    /// The fabric subsystem, whose namespaces are the replicas held here.
    pub fabric: Arc<Subsystem>,
    /// The node's lease.
    pub lease: LeaseKeeper,
    /// Where hosts discover the pool's volumes on this node.
    pub discovery: Option<SocketAddr>,
}

impl ClusterNode {
    /// A node, registered and in the map.
    pub fn new(parts: ClusterParts) -> Arc<ClusterNode> {
        let ClusterParts { me, prefix, etcd, meta, store, target, fabric, lease, discovery } = parts;
        let host_cfg = HostConfig {
            hostnqn: node_nqn(&me.name),
            io_queues: 2,
            io_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            ..HostConfig::default()
        };
        Arc::new(ClusterNode {
            me,
            prefix,
            etcd,
            meta,
            store,
            target,
            fabric,
            lease: std::sync::Mutex::new(Arc::new(lease)),
            discovery,
            host_cfg,
            state: tokio::sync::Mutex::new(State::default()),
        })
    }

    /// Runs the reconcile loop. When the node's lease is lost (etcd
    /// unreachable for longer than its TTL, as in a network partition) it
    /// stops serving every volume it owned at once, since another node
    /// may take them over, then gets a new lease as soon as etcd answers
    /// and joins again; its replicas are resynced by their owners.
    pub async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(RECONCILE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let lease = self.lease();
            tokio::select! {
                loss = lease.lost() => {
                    tracing::error!(?loss, "the node's lease is lost: no longer serving any volume");
                    self.drop_all_owned().await;
                    self.renew_lease(&lease).await;
                }
                _ = tick.tick() => {
                    if let Err(e) = self.reconcile().await {
                        tracing::warn!("reconcile: {e:#}");
                    }
                }
            }
        }
    }

    fn lease(&self) -> Arc<LeaseKeeper> {
        self.lease.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Gets a new lease with the TTL of `lost`, retrying until etcd grants
    /// one.
    async fn renew_lease(&self, lost: &LeaseKeeper) {
        let ttl = Duration::from_secs(u64::try_from(lost.lease().ttl_secs).unwrap_or(1).max(1));
        loop {
            match self.etcd.lease_grant(ttl).await {
                Ok(lease) => {
                    tracing::info!(lease = ?lease.id, "a new lease: joining the cluster again");
                    *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(self.etcd.keep_alive(lease));
                    return;
                }
                Err(e) => {
                    tracing::warn!("cannot get a new lease yet: {e}");
                    tokio::time::sleep(RECONCILE_EVERY / 2).await;
                }
            }
        }
    }

    fn fabric_hosts(&self) -> Vec<String> {
        self.fabric.allowed_hosts()
    }

    async fn drop_all_owned(&self) {
        let mut st = self.state.lock().await;
        for (_, o) in st.owned.drain() {
            self.target.remove_subsystem(&o.nqn);
        }
    }

    async fn table(&self, st: &mut State, epoch: u64) -> anyhow::Result<Arc<PlacementTable>> {
        if let Some(t) = st.tables.get(&epoch) {
            return Ok(t.clone());
        }
        let map = map_at(&self.etcd, &self.prefix, epoch).await?;
        let table = tokio::task::spawn_blocking(move || Arc::new(strata_pool::placement::Placer::new(&map).table()))
            .await
            .context("placement")?;
        st.tables.insert(epoch, table.clone());
        Ok(table)
    }

    /// One pass: registration, replicas, ownership, discovery.
    async fn reconcile(self: &Arc<Self>) -> anyhow::Result<()> {
        let mut me = self.me.clone();
        let stats = self.store.stats();
        me.allocated_bytes = stats.extents_allocated * u64::from(stats.extent_size);
        me.drives = stats
            .drives
            .iter()
            .map(|d| DriveRecord {
                path: d.path.clone(),
                capacity_bytes: d.capacity_bytes,
                allocated_bytes: d.extents_allocated * u64::from(stats.extent_size),
                failed: d.failed,
            })
            .collect();
        {
            let st = self.state.lock().await;
            me.held = st.held.keys().copied().collect();
            me.held_bytes = st.held.iter().map(|(&id, h)| (id, h.device.usage().allocated_bytes)).collect();
            me.resyncing = st
                .owned
                .iter()
                .flat_map(|(&volume, o)| {
                    o.vol.resyncing().into_iter().map(move |(node, regions_left)| ResyncProgress {
                        volume,
                        node,
                        regions_left,
                    })
                })
                .collect();
        }
        register(&self.etcd, &self.prefix, &me, self.lease().id()).await?;
        let nodes: BTreeMap<NodeId, NodeRecord> =
            live_nodes(&self.etcd, &self.prefix).await?.into_iter().map(|n| (n.id, n)).collect();
        // Only the cluster's nodes may reach the replicas.
        if let Some((map, _)) = strata_pool::registry::current_map(&self.etcd, &self.prefix).await? {
            let mut allowed: Vec<String> = map.nodes().iter().map(|n| node_nqn(&n.name)).collect();
            allowed.sort();
            if self.fabric_hosts() != allowed {
                self.fabric.set_allowed_hosts(allowed);
            }
        }
        let volumes = self.meta.list_volumes().await?;
        let mut remote = Vec::new();
        let mut st = self.state.lock().await;
        for (id, link) in &st.links {
            if let Some(n) = nodes.get(id) {
                link.update(n.fabric, fabric_nqn(&n.name));
            }
        }
        let mut present = BTreeSet::new();
        for rec in volumes {
            present.insert(rec.id);
            let keys = VolumeKeys::new(&self.prefix, rec.id);
            let Ok((state, _)) = read_state(&self.etcd, &keys, rec.id).await else { continue };
            let table = self.table(&mut st, state.map_epoch).await?;
            let protection = protection_of(&state.protection)?;
            let layout = Arc::new(PlacementLayout::new(rec.id, protection.width(), table));
            let holders = holders(&*layout, &rec, protection);
            if holders.contains(&self.me.id) {
                self.hold(&mut st, &rec, &state, protection).await?;
            }
            let owner: Option<OwnerToken> = match self.etcd.get(&keys.owner).await? {
                Some(kv) => serde_json::from_slice(&kv.value).ok(),
                None => None,
            };
            match owner {
                Some(t) if t.node == self.me.id => {
                    if let Some(o) = st.owned.get(&rec.id) {
                        let allocated = volume_allocated(nodes.values(), rec.id, protection);
                        o.vol.stats().allocated_bytes.store(allocated, std::sync::atomic::Ordering::Relaxed);
                        self.tend(rec.id, o, &state, &nodes);
                    }
                }
                Some(t) => {
                    if let Some(o) = st.owned.remove(&rec.id) {
                        tracing::warn!(volume = %rec.name, owner = %t.node, "another node owns the volume now");
                        self.target.remove_subsystem(&o.nqn);
                    }
                    if let Some(n) = nodes.get(&t.node) {
                        remote.push(RemoteSubsystem {
                            nqn: rec.nqn.clone(),
                            addr: n.listen,
                            allowed_hosts: rec.allowed_hosts.clone(),
                        });
                    }
                }
                // A new volume waits until every live holder serves its
                // replica, so that it does not start degraded.
                None if state.epoch == 0
                    && holders.iter().any(|h| nodes.get(h).is_some_and(|n| !n.held.contains(&rec.id))) => {}
                None if holders.contains(&self.me.id) && state.in_sync.contains(&self.me.id) => {
                    if let Some(o) = st.owned.remove(&rec.id) {
                        self.target.remove_subsystem(&o.nqn);
                    }
                    let claim = Claim { rec: &rec, keys: &keys, layout, protection, holders: &holders, nodes: &nodes };
                    match self.take_over(&mut st, claim).await {
                        Ok(o) => {
                            st.owned.insert(rec.id, o);
                        }
                        Err(e) => tracing::info!(volume = %rec.name, "not taking the volume over: {e:#}"),
                    }
                }
                None => {}
            }
        }
        st.owned.retain(|id, o| {
            let keep = present.contains(id);
            if !keep {
                self.target.remove_subsystem(&o.nqn);
            }
            keep
        });
        for id in st.held.keys().copied().filter(|id| !present.contains(id)).collect::<Vec<_>>() {
            st.held.remove(&id);
            let _ = self.fabric.remove_namespace(id as u32);
        }
        drop(st);
        // Replicas of deleted volumes (also those deleted while this node
        // was down) give their space back. Only this pass creates
        // replicas, and only of listed volumes, so nothing new is lost.
        let keep: Vec<u64> = present.iter().flat_map(|&id| [id, undo_log_id(id)]).collect();
        if self.store.volume_ids().iter().any(|id| !keep.contains(id)) {
            let freed = self.store.retain_volumes(&keep).await?;
            tracing::info!(volumes = ?freed, "freed the replicas of deleted volumes");
        }
        self.target.set_remote_subsystems(remote);
        Ok(())
    }

    /// Keeps a replica (or shard, with its undo log) of `rec` in the
    /// store and on the fabric, its fence at least at the stored epoch.
    async fn hold(
        &self,
        st: &mut State,
        rec: &VolumeRecord,
        state: &VolumeState,
        protection: Protection,
    ) -> anyhow::Result<()> {
        if let Some(h) = st.held.get(&rec.id) {
            h.fence.raise(state.epoch);
            return Ok(());
        }
        let nsid = u32::try_from(rec.id).context("volume id beyond the fabric's NSIDs")?;
        let fence = EpochFence::new(state.epoch);
        let ids = NamespaceIds { nguid: rec.nguid, uuid: rec.uuid, eui64: rec.eui64 };
        let held = match stripes_of(protection, rec.block_size) {
            None => {
                let device = self.store.open_volume(rec.id, rec.size_bytes, rec.block_size)? as Arc<dyn BlockDevice>;
                self.fabric.add_namespace(Namespace::fenced(nsid, ids, device.clone(), fence.clone()))?;
                Held { fence, device, undo: None }
            }
            Some(stripes) => {
                let data = self.store.open_volume(rec.id, stripes.shard_bytes(rec.size_bytes), rec.block_size)?;
                let log = self.store.open_volume(undo_log_id(rec.id), UNDO_LOG_BYTES, rec.block_size)?;
                let shard = UndoDevice::open(data, log).await.context("the shard's undo log")?;
                let device = shard.clone() as Arc<dyn BlockDevice>;
                let undo = shard as Arc<dyn UndoLog>;
                self.fabric.add_namespace(Namespace::shard(nsid, ids, device.clone(), undo.clone(), fence.clone()))?;
                Held { fence, device, undo: Some(undo) }
            }
        };
        tracing::info!(volume = %rec.name, epoch = state.epoch, %protection, "holding a replica");
        st.held.insert(rec.id, held);
        Ok(())
    }

    /// The link to node `id`, pointed at where it listens when it is
    /// alive. A dead node's link refuses until the node is back (the
    /// reconcile loop updates every link from the live records).
    fn link(&self, st: &mut State, id: NodeId, node: Option<&NodeRecord>) -> Arc<FabricLink> {
        let nowhere: SocketAddr = ([127, 0, 0, 1], 9).into();
        let link = st
            .links
            .entry(id)
            .or_insert_with(|| FabricLink::new(id, nowhere, fabric_nqn("unknown"), self.host_cfg.clone()))
            .clone();
        if let Some(n) = node {
            link.update(n.fabric, fabric_nqn(&n.name));
        }
        link
    }

    async fn take_over(&self, st: &mut State, claim: Claim<'_>) -> anyhow::Result<Owned> {
        let (rec, keys) = (claim.rec, claim.keys);
        let (membership, token) = acquire(&self.etcd, keys, rec.id, self.me.id, self.lease().id()).await?;
        tracing::info!(volume = %rec.name, epoch = membership.epoch, "took the volume over");
        let opened = self.open_owned(st, claim, membership, &token).await;
        if opened.is_err() {
            // Do not sit on a volume we cannot serve until our lease ends.
            if let Err(e) = strata_pool::cluster::release(&self.etcd, keys, &token).await {
                tracing::warn!(volume = %rec.name, "cannot give the volume up: {e}");
            }
        }
        opened
    }

    async fn open_owned(
        &self,
        st: &mut State,
        claim: Claim<'_>,
        membership: strata_pool::Membership,
        token: &OwnerToken,
    ) -> anyhow::Result<Owned> {
        let Claim { rec, keys, layout, protection, holders, nodes } = claim;
        let stripes = stripes_of(protection, rec.block_size);
        // The log's regions cover what each node holds: the volume, or a
        // shard of it.
        let span = stripes.map_or(rec.size_bytes, |s| s.shard_bytes(rec.size_bytes));
        let regions = Regions::for_volume(span, layout.chunk_bytes());
        let ev = Arc::new(EtcdVolume::new(self.etcd.clone(), keys.clone(), rec.id, token, regions));
        let drl = DirtyRegionLog::new(regions, ev.load_drl().await?, ev.clone());
        let geometry = strata_block::Geometry {
            block_size: rec.block_size,
            num_blocks: rec.size_bytes / u64::from(rec.block_size),
        };
        let (local, nsid) = (self.me.id, rec.id as u32);
        let vol: Arc<dyn PoolVolume> = match stripes {
            None => {
                let mut replicas: Vec<Arc<dyn Replica>> = Vec::new();
                for &n in holders {
                    if n == local {
                        let h = st.held.get(&rec.id).context("no local replica")?;
                        replicas.push(Arc::new(LocalReplica::new(n, h.device.clone(), h.fence.clone())));
                    } else {
                        // A dead node's replica fails at once, so the volume
                        // drops it when it fences; its link finds the node
                        // when it is back.
                        let link = self.link(st, n, nodes.get(&n));
                        replicas.push(Arc::new(FabricReplica::new(link, nsid, rec.block_size)));
                    }
                }
                let parts = VolumeParts { geometry, local, layout, replicas, membership, drl, control: ev };
                Arc::new(ReplicatedVolume::open(parts).await?)
            }
            Some(stripes) => {
                let mut shards: Vec<Arc<dyn Shard>> = Vec::new();
                for &n in holders {
                    if n == local {
                        let h = st.held.get(&rec.id).context("no local shard")?;
                        let undo = h.undo.clone().context("the local copy has no undo log")?;
                        shards.push(Arc::new(LocalShard::new(n, h.device.clone(), undo, h.fence.clone())));
                    } else {
                        let link = self.link(st, n, nodes.get(&n));
                        shards.push(Arc::new(FabricReplica::new(link, nsid, rec.block_size)));
                    }
                }
                let parts = EcParts { geometry, local, stripes, layout, shards, membership, drl, control: ev };
                Arc::new(ErasureVolume::open(parts).await?)
            }
        };
        let sub = Subsystem::new(rec.nqn.clone(), serial_for(&rec.nqn), rec.allowed_hosts.clone());
        let ids = NamespaceIds { nguid: rec.nguid, uuid: rec.uuid, eui64: rec.eui64 };
        sub.add_namespace(Namespace::new(rec.nsid, ids, vol.clone()))?;
        self.target.add_subsystem(sub)?;
        tracing::info!(volume = %rec.name, "serving the volume");
        Ok(Owned { vol, nqn: rec.nqn.clone(), resyncing: Arc::new(tokio::sync::Mutex::new(())) })
    }

    /// An owner's chores: clean the log, bring back stale replicas whose
    /// node is alive.
    fn tend(&self, id: u64, o: &Owned, state: &VolumeState, nodes: &BTreeMap<NodeId, NodeRecord>) {
        let vol = o.vol.clone();
        let lock = o.resyncing.clone();
        let stale: Vec<NodeId> = o
            .vol
            .drl()
            .state()
            .missed
            .keys()
            .copied()
            .filter(|n| nodes.contains_key(n) && !state.in_sync.contains(n))
            .collect();
        tokio::spawn(async move {
            let Ok(_one) = lock.try_lock() else { return };
            if let Err(e) = vol.clean(strata_pool::volume::CLEAN_AFTER).await {
                tracing::warn!(volume = id, "cleaning the dirty-region log: {e}");
            }
            for n in stale {
                match vol.resync(n).await {
                    Ok(()) => tracing::info!(volume = id, node = %n, "replica resynced"),
                    Err(e) => tracing::info!(volume = id, node = %n, "resync not finished: {e}"),
                }
            }
        });
    }
}

/// The host NQN a node connects to its peers' fabric with.
pub fn node_nqn(name: &str) -> String {
    format!("nqn.2026-11.io.strata:node:{name}")
}

/// Every node that holds some chunk of `rec`.
fn holders(layout: &dyn Layout, rec: &VolumeRecord, protection: Protection) -> BTreeSet<NodeId> {
    let span = stripes_of(protection, rec.block_size).map_or(rec.size_bytes, |s| s.shard_bytes(rec.size_bytes));
    let chunks = span.div_ceil(layout.chunk_bytes());
    let mut set = BTreeSet::new();
    // A volume's groups repeat after pg_count chunks; 4096 covers them.
    for c in 0..chunks.min(4096) {
        set.extend(layout.replicas(c));
    }
    set
}

fn serial_for(nqn: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in nqn.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("STR{h:016X}")
}

impl ClusterNode {
    /// Creates a volume of the pool: its record, then its pool state under
    /// the current map with every replica in sync (a new volume holds
    /// nothing). A protection the map's failure domains cannot honour is
    /// refused with the reason.
    ///
    /// # Errors
    ///
    /// [`crate::node::NodeError`] kinds, as the single-node API uses them.
    pub async fn create_volume(
        &self,
        req: strata_meta::NewVolume,
        protection: &str,
    ) -> Result<serde_json::Value, NodeError> {
        let wanted = protection_of(protection).map_err(|e| NodeError::Invalid(e.to_string()))?;
        let Some((map, _)) = strata_pool::registry::current_map(&self.etcd, &self.prefix)
            .await
            .map_err(|e| NodeError::Internal(e.into()))?
        else {
            return Err(NodeError::Internal(anyhow::anyhow!("the cluster has no placement map yet")));
        };
        if wanted.width() > map.protection().width() {
            return Err(NodeError::Invalid(format!(
                "{protection}: the cluster's placement map places at most {} copies or shards per chunk",
                map.protection().width()
            )));
        }
        strata_pool::placement::check_protection(&map, wanted).map_err(|e| NodeError::Invalid(e.to_string()))?;
        let rec = self.meta.create_volume(req).await?;
        let table = {
            let mut st = self.state.lock().await;
            self.table(&mut st, map.epoch()).await.map_err(NodeError::Internal)?
        };
        let layout = PlacementLayout::new(rec.id, wanted.width(), table);
        let state = VolumeState {
            protection: wanted.to_string(),
            map_epoch: map.epoch(),
            epoch: 0,
            in_sync: holders(&layout, &rec, wanted),
        };
        let keys = VolumeKeys::new(&self.prefix, rec.id);
        if let Err(e) = strata_pool::cluster::create_state(&self.etcd, &keys, rec.id, &state).await {
            let _ = self.meta.delete_volume(&rec.name).await;
            return Err(NodeError::Internal(e.into()));
        }
        Ok(serde_json::json!({
            "name": rec.name,
            "id": rec.id,
            "size": strata_meta::format_size(rec.size_bytes),
            "size_bytes": rec.size_bytes,
            "nqn": rec.nqn,
            "uuid": rec.uuid_string(),
            "block_size": rec.block_size,
            "allocated_bytes": 0,
            "protection": state.protection,
            "replicas": state.in_sync.iter().map(|n| n.0).collect::<Vec<_>>(),
            // Its owner serves it; every node's discovery lists it there.
            "connect": match self.discovery {
                Some(d) => format!("nvme discover -t tcp -a {} -s {}, then nvme connect to the address it lists", d.ip(), d.port()),
                None => "nvme discover on any node lists it at its owner".to_string(),
            },
        }))
    }

    /// Deletes volume `name` from the pool: its record goes first, so that
    /// every node stops serving it and frees its replica at its next
    /// reconcile pass (a node that is down frees it when it comes back:
    /// it keeps only the replicas of listed volumes); then its pool keys.
    ///
    /// # Errors
    ///
    /// [`crate::node::NodeError::NotFound`] for no such volume; etcd errors.
    pub async fn delete_volume(&self, name: &str) -> Result<serde_json::Value, NodeError> {
        let rec = self.meta.delete_volume(name).await?;
        let keys = VolumeKeys::new(&self.prefix, rec.id);
        for key in [&keys.owner, &keys.drl, &keys.state] {
            self.etcd.delete(&KeyRange::key(key.clone())).await.map_err(|e| NodeError::Internal(e.into()))?;
        }
        tracing::info!(volume = %rec.name, id = rec.id, "volume deleted from the pool");
        Ok(serde_json::json!({"name": rec.name, "id": rec.id, "deleted": true}))
    }

    /// Volume `name` as pool status shows it.
    ///
    /// # Errors
    ///
    /// [`crate::node::NodeError::NotFound`] for no such volume; etcd errors.
    pub async fn volume(&self, name: &str) -> Result<serde_json::Value, NodeError> {
        let status = self.status().await.map_err(NodeError::Internal)?;
        status["volumes"]
            .as_array()
            .and_then(|l| l.iter().find(|v| v["name"] == name).cloned())
            .ok_or_else(|| NodeError::NotFound(format!("no volume named {name:?}")))
    }

    /// The pool: nodes, volumes and totals.
    ///
    /// # Errors
    ///
    /// etcd or metadata errors.
    pub async fn status(&self) -> anyhow::Result<serde_json::Value> {
        use serde_json::json;
        let live: BTreeMap<NodeId, NodeRecord> =
            live_nodes(&self.etcd, &self.prefix).await?.into_iter().map(|n| (n.id, n)).collect();
        let map = strata_pool::registry::current_map(&self.etcd, &self.prefix).await?.map(|(m, _)| m);
        let mut nodes = Vec::new();
        let (mut raw, mut allocated) = (0u64, 0u64);
        for n in map.as_ref().map(|m| m.nodes().to_vec()).unwrap_or_default() {
            let rec = live.get(&n.id);
            raw += n.weight;
            allocated += rec.map_or(0, |r| r.allocated_bytes);
            nodes.push(json!({
                "id": n.id.0,
                "name": n.name,
                "state": if rec.is_some() { "up" } else { "down" },
                "labels": n.labels,
                "capacity_bytes": n.weight,
                "allocated_bytes": rec.map(|r| r.allocated_bytes),
                "fabric": rec.map(|r| r.fabric.to_string()),
                "listen": rec.map(|r| r.listen.to_string()),
                "drives": rec.map(|r| r.drives.clone()).unwrap_or_default(),
            }));
        }
        let mut volumes = Vec::new();
        let mut provisioned = 0u64;
        for rec in self.meta.list_volumes().await? {
            let keys = VolumeKeys::new(&self.prefix, rec.id);
            let Ok((state, _)) = read_state(&self.etcd, &keys, rec.id).await else { continue };
            provisioned += rec.size_bytes;
            let owner: Option<OwnerToken> = match self.etcd.get(&keys.owner).await? {
                Some(kv) => serde_json::from_slice(&kv.value).ok(),
                None => None,
            };
            let Ok(protection) = protection_of(&state.protection) else { continue };
            let table = {
                let mut st = self.state.lock().await;
                self.table(&mut st, state.map_epoch).await?
            };
            let all = holders(&PlacementLayout::new(rec.id, protection.width(), table), &rec, protection);
            // The owner's record says which replicas it is copying back.
            let resync: Vec<&ResyncProgress> = owner
                .as_ref()
                .and_then(|o| live.get(&o.node))
                .map(|n| n.resyncing.iter().filter(|r| r.volume == rec.id).collect())
                .unwrap_or_default();
            let health = if owner.is_none() {
                // Not served until a holder takes it over.
                "offline"
            } else if state.in_sync == all {
                "healthy"
            } else if !resync.is_empty() {
                "resyncing"
            } else {
                "degraded"
            };
            volumes.push(json!({
                "name": rec.name,
                "id": rec.id,
                "size_bytes": rec.size_bytes,
                "protection": state.protection,
                "owner": owner.as_ref().map(|o| o.node.0),
                "epoch": state.epoch,
                "replicas": all.iter().map(|n| n.0).collect::<Vec<_>>(),
                "in_sync": state.in_sync.iter().map(|n| n.0).collect::<Vec<_>>(),
                "state": health,
                "allocated_bytes": volume_allocated(live.values(), rec.id, protection),
                "resync": resync
                    .iter()
                    .map(|r| json!({"node": r.node.0, "regions_left": r.regions_left}))
                    .collect::<Vec<_>>(),
            }));
        }
        Ok(json!({
            "node": self.me.name,
            "nodes": nodes,
            "volumes": volumes,
            "totals": {"raw_bytes": raw, "provisioned_bytes": provisioned, "allocated_bytes": allocated,
                       "free_bytes": raw.saturating_sub(allocated)},
        }))
    }
}
