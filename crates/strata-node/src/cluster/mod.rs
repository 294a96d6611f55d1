//! `strata node`: one storage node of a cluster. It registers in etcd
//! under a lease, joins the placement map, keeps a replica of every volume
//! placement gives it (a thin store volume behind an epoch fence, served
//! on the fabric listener), takes over volumes that have no owner, and
//! serves the ones it owns to hosts. Every other node serves each volume
//! as a path that forwards to the owner ([`paths`]), and every node's
//! discovery lists each volume at every live node.
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
use strata_block::{BlockDevice, EpochFence, NoteStore, UndoLog};
use strata_host::HostConfig;
use strata_meta::etcd::{EtcdClient, KeyRange, KeyValue, LeaseKeeper};
use strata_meta::{MetaStore, VolumeRecord};
use strata_pool::cluster::{
    EtcdVolume, MovePlan, OwnerToken, PlacementLayout, VolumeKeys, VolumeState, acquire, read_state,
};
use strata_pool::erasure::{LocalShard, Stripes, UndoDevice};
use strata_pool::fabric::{FabricLink, FabricReplica, fabric_nqn};
use strata_pool::opened::{
    Members, OpenParts, OpenedVolume, UNDO_LOG_BYTES, member_bytes, open_volume, stripes_of, undo_log_id,
};
use strata_pool::placement::{FailureDomain, NodeState, PlacementMap, PlacementTable, Protection};
use strata_pool::registry::{
    DriveRecord, NodeRecord, PoolSettings, ResyncProgress, live_nodes, map_at, register, update_map, volume_allocated,
};
use strata_pool::slow::logged_if_slow;
use strata_pool::throttle::Throttle;
use strata_pool::{DirtyRegionLog, Layout, LocalReplica, Moving, NodeId, PoolVolume, Regions};
use strata_store::Store;
use strata_target::{AnaState, Namespace, NamespaceIds, RemoteSubsystem, Subsystem, Target};

use crate::node::NodeError;
use crate::pool_status::{
    DriveStatus, FillKind, FillStatus, Fullest, HealthInputs, Liveness, NodeStatus, PoolStatus, Totals, VolumeStatus,
    health,
};

mod ownership;
pub mod paths;
mod reservations;
pub mod start;

use ownership::{Decision, LastOwner, RECLAIM_GRACE, Serving, VolumeView, decide, must_stop_serving};

/// How often a node reconciles with etcd and cleans its dirty regions.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(1);

/// A check of a placement-map change (the map before it, the node it
/// concerns): `Err` with the reason refuses the change.
type MapCheck<'a> = dyn Fn(&PlacementMap, NodeId) -> Result<(), String> + Sync + 'a;

/// The longest one volume's part of a reconcile pass may take before the
/// pass goes on to the next volume (it is tried again at the next pass).
const VOLUME_PASS_LIMIT: Duration = Duration::from_secs(30);

/// A replica (or shard) this node keeps.
struct Held {
    fence: Arc<EpochFence>,
    device: Arc<dyn BlockDevice>,
    /// A shard's undo log, over the same blocks as `device`.
    undo: Option<Arc<dyn UndoLog>>,
    /// The note this node keeps for the volume's owners.
    notes: Arc<dyn NoteStore>,
}

/// A volume to take over, with what the reconcile pass knows of it.
struct Claim<'a> {
    rec: &'a VolumeRecord,
    keys: &'a VolumeKeys,
    layout: Arc<PlacementLayout>,
    protection: Protection,
    holders: &'a BTreeSet<NodeId>,
    nodes: &'a BTreeMap<NodeId, NodeRecord>,
    /// The move the state records, with its layout and holders.
    moving: Option<(strata_pool::NextLayout, Arc<PlacementLayout>, BTreeSet<NodeId>)>,
}

/// Where a volume is and where it goes, as a reconcile pass reads it.
struct Placed {
    state: VolumeState,
    protection: Protection,
    layout: Arc<PlacementLayout>,
    /// The nodes its layout puts chunks on.
    holders: BTreeSet<NodeId>,
    /// The move its state records, with the layout it moves to.
    recorded: Option<(strata_pool::NextLayout, Arc<PlacementLayout>)>,
    /// The nodes that move puts chunks on.
    recorded_holders: BTreeSet<NodeId>,
    /// Where the current map, newer than its placement, would put it:
    /// the map's epoch, the layout and its holders.
    next: Option<(u64, Arc<PlacementLayout>, BTreeSet<NodeId>)>,
}

/// A volume taken over, ready to open on a task of its own.
struct Opening {
    rec: VolumeRecord,
    keys: VolumeKeys,
    token: OwnerToken,
    membership: strata_pool::Membership,
    layout: Arc<PlacementLayout>,
    regions: Regions,
    stripes: Option<Stripes>,
    handles: Members,
    moving: Option<Moving>,
}

/// A volume this node serves as another node's path to it (see
/// [`paths`]).
struct Path {
    sub: Arc<Subsystem>,
    forward: Arc<paths::Forward>,
}

/// A volume this node owns and serves.
struct Owned {
    /// The volume's id: its NSID on this node's proxy subsystem.
    id: u64,
    vol: Arc<dyn PoolVolume>,
    kind: OpenedVolume,
    nqn: String,
    /// The subsystem hosts reach it in: it stays as this node's path to
    /// the volume when the node stops owning it (see `demote`).
    sub: Arc<Subsystem>,
    /// When this node began serving it.
    since: std::time::Instant,
    resyncing: Arc<tokio::sync::Mutex<()>>,
    /// The owner key's value, for taking it back under a new lease.
    token: OwnerToken,
}

/// What a pass reads of an owned volume under the state lock to take
/// its owner key back after it, with no lock held.
struct Served {
    token: OwnerToken,
    epoch: u64,
}

/// A move of a volume to the current placement map, ready to run: every
/// node it adds serves the volume already.
struct Move {
    map_epoch: u64,
    layout: Arc<PlacementLayout>,
    plan: MovePlan,
    added: Members,
}

#[derive(Default)]
struct State {
    links: HashMap<NodeId, Arc<FabricLink>>,
    held: HashMap<u64, Held>,
    owned: HashMap<u64, Owned>,
    /// The volumes served here as a path to their owner.
    paths: HashMap<u64, Path>,
    /// Up nodes of the map without a live record, since when this node
    /// has seen them gone.
    missing_since: HashMap<NodeId, std::time::Instant>,
    /// Bytes rebuilt by this node's owned volumes at the last pass, and
    /// when, for the rate.
    rebuilt: Option<(std::time::Instant, u64)>,
    /// Rebuild bytes per second, smoothed.
    rebuild_rate: u64,
    /// The highest fill threshold crossed at the last pass (0: none).
    fill_warned: u8,
    /// Volumes without an owner that this node waits to take over until
    /// enough of their in-sync nodes are up (logged once).
    waiting: std::collections::HashSet<u64>,
    /// The last error of each volume's reconcile pass (logged when it
    /// changes).
    volume_errors: HashMap<u64, String>,
    /// Volumes seen without an owner, since when.
    orphaned: HashMap<u64, std::time::Instant>,
    /// Volumes taken over and being opened (see `take_over`).
    opening: std::collections::HashSet<u64>,
    /// The size of each fill this node's volumes run (volume, node,
    /// whether it fills a move rather than catches up): the most it had
    /// left since it began.
    fill_sizes: HashMap<(u64, NodeId, bool), u64>,
    /// When this node last got a new lease after losing one (etcd was out
    /// of reach, or froze, for longer than the lease).
    rejoined: Option<std::time::Instant>,
    /// This node is not up in the current map (drained, down, removed):
    /// it hands every volume it owns and holds none of to a holder. An up
    /// node that a rebalance moved off a volume keeps serving it (its
    /// hosts would only see their connections closed for nothing).
    leaving: bool,
    /// How many volumes each live node that is up in the map owns, as of
    /// this pass (this node's own count is its own; the others' come from
    /// their records).
    owned_counts: BTreeMap<NodeId, usize>,
    /// When this node last handed a volume over to even out ownership.
    rebalanced: Option<std::time::Instant>,
}

impl ClusterNode {
    /// The cluster's metadata store (etcd: shared by every node).
    pub fn meta(&self) -> Arc<dyn MetaStore> {
        self.meta.clone()
    }

    /// The node's NVMe/TCP target.
    pub fn target(&self) -> &Target {
        &self.target
    }
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
    /// The volumes this node owns, for the other nodes' paths.
    proxy: Arc<Subsystem>,
    /// Where the proxy's volumes' reservations are kept (the paths send
    /// their hosts' reservation commands there).
    proxy_reservations: Arc<reservations::EtcdReservations>,
    /// Where hosts discover volumes on this node.
    discovery: Option<SocketAddr>,
    /// The current lease; replaced by a new one after a loss.
    lease: std::sync::Mutex<Arc<LeaseKeeper>>,
    host_cfg: HostConfig,
    state: tokio::sync::Mutex<State>,
    /// Placement tables by map epoch (see [`Self::table`]).
    tables: std::sync::Mutex<HashMap<u64, Arc<PlacementTable>>>,
    /// The rebuild bandwidth every owned volume's copies share.
    throttle: Arc<Throttle>,
    /// Who the node is, checked again at every new lease.
    identity: crate::identity::NodeIdentity,
    /// The node's data dir.
    data_dir: std::path::PathBuf,
    /// Volume checks this node ran as owner.
    checks: crate::volume_check::Checks,
}

/// Who answers a request about a volume: this node (it owns the volume),
/// or the owner's API at this address.
pub enum Answer {
    /// This node's answer.
    Here(serde_json::Value),
    /// Ask the owner there.
    Owner(SocketAddr),
}

/// The owner token an owner key holds (`None` when there is none, or it
/// does not parse).
fn token_of(kv: Option<&KeyValue>) -> Option<OwnerToken> {
    kv.and_then(|kv| serde_json::from_slice(&kv.value).ok())
}

/// A volume's protection, `rep:N` or `ec:K+M`.
pub fn protection_of(protection: &str) -> anyhow::Result<Protection> {
    protection.parse::<Protection>().map_err(|e| anyhow::anyhow!("{e}"))
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
    /// The proxy subsystem, whose namespaces are the volumes owned here
    /// (see [`paths`]).
    pub proxy: Arc<Subsystem>,
    /// The node's lease.
    pub lease: LeaseKeeper,
    /// Where hosts discover the pool's volumes on this node.
    pub discovery: Option<SocketAddr>,
    /// Who the node is (its data dir's identity).
    pub identity: crate::identity::NodeIdentity,
    /// The node's data dir (the owners' notes live there).
    pub data_dir: std::path::PathBuf,
    /// The secret nodes prove to each other on the fabric.
    pub fabric_secret: strata_auth::DhchapSecret,
}

impl ClusterNode {
    /// A node, registered and in the map.
    pub fn new(parts: ClusterParts) -> Arc<ClusterNode> {
        let ClusterParts {
            me,
            prefix,
            etcd,
            meta,
            store,
            target,
            fabric,
            proxy,
            lease,
            discovery,
            identity,
            data_dir,
            fabric_secret,
        } = parts;
        let host_cfg = HostConfig {
            hostnqn: node_nqn(&me.name),
            io_queues: 2,
            io_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            // A peer that dies closes the connection, and one that hangs
            // fails its I/O after `io_timeout`: the keep-alive only has to
            // keep an idle link, and must not drop a busy one whose
            // keep-alive waits behind large writes on a slow machine.
            kato: Duration::from_secs(30),
            // Every fabric and proxy queue authenticates both ways.
            dhchap_secret: Some(fabric_secret.clone()),
            dhchap_ctrl_secret: Some(fabric_secret),
            ..HostConfig::default()
        };
        let proxy_reservations = reservations::EtcdReservations::new(etcd.clone());
        proxy.serve_reservations(true);
        proxy.keep_reservations_in(proxy_reservations.clone());
        Arc::new(ClusterNode {
            me,
            prefix,
            etcd,
            meta,
            store,
            target,
            fabric,
            proxy,
            proxy_reservations,
            lease: std::sync::Mutex::new(Arc::new(lease)),
            discovery,
            identity,
            data_dir,
            host_cfg,
            state: tokio::sync::Mutex::new(State::default()),
            tables: std::sync::Mutex::new(HashMap::new()),
            throttle: Arc::new(Throttle::new(PoolSettings::default().rebuild_bytes_per_sec())),
            checks: Default::default(),
        })
    }

    /// Runs the reconcile loop. When the node's lease is lost (etcd
    /// unreachable, or frozen, for longer than its TTL) its volumes go on
    /// while their replicas' promises hold (an owner cut off from its
    /// replicas stops on its own), it gets a new lease as soon as etcd
    /// answers and takes its owner keys back (see `reclaim`).
    ///
    /// Returns only when the node may not go on: when it comes back, etcd
    /// holds another cluster, has removed it, or another process runs it.
    pub async fn run(self: Arc<Self>) -> anyhow::Error {
        let mut tick = tokio::time::interval(RECONCILE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let lease = self.lease();
            tokio::select! {
                loss = lease.lost() => {
                    // Its volumes go on while their replicas promise no
                    // other owner comes (one that cannot renew them stops
                    // on its own), and their owner keys are taken back
                    // under the new lease (see `reclaim`).
                    tracing::error!(?loss, "the node's lease is lost: serving only what the replicas' promises cover");
                    if let Err(e) = self.renew_lease(&lease).await {
                        tracing::error!("the node may not rejoin the cluster: {e:#}");
                        return e;
                    }
                }
                _ = tick.tick() => {
                    if let Err(e) = logged_if_slow("a reconcile pass", self.reconcile()).await {
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
    /// one, after checking that the node may rejoin: etcd still holds its
    /// cluster and has not removed it, and no other process runs it.
    ///
    /// # Errors
    ///
    /// When the node may not rejoin (it must stop).
    async fn renew_lease(&self, lost: &LeaseKeeper) -> anyhow::Result<()> {
        let ttl = Duration::from_secs(u64::try_from(lost.lease().ttl_secs).unwrap_or(1).max(1));
        loop {
            let attempt = async {
                crate::identity::still_member(&self.etcd, &self.prefix, &self.identity).await?;
                let lease = self.etcd.lease_grant(ttl).await?;
                let claim = strata_pool::registry::claim_node(
                    &self.etcd,
                    &self.prefix,
                    self.me.id,
                    self.identity.instance,
                    lease.id,
                )
                .await?;
                anyhow::Ok((lease, claim))
            };
            match attempt.await {
                Ok((lease, strata_pool::registry::NodeClaim::Ours)) => {
                    tracing::info!(lease = ?lease.id, "a new lease: joining the cluster again");
                    *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(self.etcd.keep_alive(lease));
                    self.state.lock().await.rejoined = Some(std::time::Instant::now());
                    return Ok(());
                }
                Ok((_, strata_pool::registry::NodeClaim::Taken { instance })) => {
                    let id = self.me.id.0;
                    return Err(
                        crate::identity::IdentityError::Running { name: self.me.name.clone(), id, instance }.into()
                    );
                }
                Err(e) if e.downcast_ref::<crate::identity::IdentityError>().is_some() => return Err(e),
                Err(e) => {
                    tracing::warn!("cannot get a new lease yet: {e:#}");
                    tokio::time::sleep(RECONCILE_EVERY / 2).await;
                }
            }
        }
    }

    fn fabric_hosts(&self) -> Vec<String> {
        self.fabric.allowed_hosts()
    }

    /// The placement table of map `epoch`, computed once (a map never
    /// changes once written). Its own lock, held for no await: the pool's
    /// status and volume operations never wait behind a reconcile pass.
    async fn table(&self, epoch: u64) -> anyhow::Result<Arc<PlacementTable>> {
        if let Some(t) = self.tables_lock().get(&epoch) {
            return Ok(t.clone());
        }
        let map = map_at(&self.etcd, &self.prefix, epoch).await?;
        let table = tokio::task::spawn_blocking(move || Arc::new(strata_pool::placement::Placer::new(&map).table()))
            .await
            .context("placement")?;
        self.tables_lock().insert(epoch, table.clone());
        Ok(table)
    }

    fn tables_lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<PlacementTable>>> {
        self.tables.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// This node's record as it registers it at each pass: its drives,
    /// what it holds and serves, the fills its volumes run and its rebuild
    /// rate (which this updates).
    async fn self_report(&self) -> NodeRecord {
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
            let mut st = self.state.lock().await;
            me.held = st.held.keys().copied().collect();
            me.serving = st.owned.iter().filter(|(_, o)| !o.vol.is_fenced()).map(|(&id, _)| id).collect();
            me.held_bytes = st.held.iter().map(|(&id, h)| (id, h.device.usage().allocated_bytes)).collect();
            me.resyncing = st
                .owned
                .iter()
                .flat_map(|(&volume, o)| {
                    let region = o.vol.drl().regions().region_bytes();
                    let progress = move |filling: bool| {
                        move |(node, regions_left): (NodeId, u64)| ResyncProgress {
                            volume,
                            node,
                            regions_left,
                            bytes_left: regions_left * region,
                            bytes_total: 0,
                            filling,
                        }
                    };
                    let stale = o.vol.resyncing().into_iter().map(progress(false));
                    stale.chain(o.vol.filling().into_iter().map(progress(true))).collect::<Vec<_>>()
                })
                .collect();
            // Each fill's size is the most it has had left since it began.
            let sizes = std::mem::take(&mut st.fill_sizes);
            for r in &mut me.resyncing {
                let total = sizes.get(&(r.volume, r.node, r.filling)).copied().unwrap_or(0).max(r.bytes_left);
                r.bytes_total = total;
                st.fill_sizes.insert((r.volume, r.node, r.filling), total);
            }
            let rebuilt: u64 =
                st.owned.values().map(|o| o.vol.stats().bytes_rebuilt.load(std::sync::atomic::Ordering::Relaxed)).sum();
            let now = std::time::Instant::now();
            if let Some((at, before)) = st.rebuilt {
                let secs = now.duration_since(at).as_secs_f64().max(0.001);
                let rate = (rebuilt.saturating_sub(before) as f64 / secs) as u64;
                st.rebuild_rate = (st.rebuild_rate + rate) / 2;
            }
            st.rebuilt = Some((now, rebuilt));
            me.rebuild_bytes_per_sec = st.rebuild_rate;
        }
        me
    }

    /// One pass: registration, replicas, ownership, discovery.
    async fn reconcile(self: &Arc<Self>) -> anyhow::Result<()> {
        let me = self.self_report().await;
        let settings = self.pool_settings().await;
        self.throttle.set(settings.rebuild_bytes_per_sec());
        register(&self.etcd, &self.prefix, &me, self.lease().id()).await?;
        let nodes: BTreeMap<NodeId, NodeRecord> =
            live_nodes(&self.etcd, &self.prefix).await?.into_iter().map(|n| (n.id, n)).collect();
        let map = strata_pool::registry::current_map(&self.etcd, &self.prefix).await?.map(|(m, _)| m);
        if let Some(map) = &map {
            self.allow_fabric_hosts(map);
        }
        let volumes = self.meta.list_volumes().await?;
        let map = match map {
            Some(map) => Some(self.watch_nodes(map, &nodes, &settings).await?),
            None => None,
        };
        let current_epoch = map.as_ref().map(PlacementMap::epoch);
        {
            let mut st = self.state.lock().await;
            st.leaving = map.as_ref().is_some_and(|m| m.node(self.me.id).is_none_or(|n| n.state != NodeState::Up));
            let mine = st.owned.len() + st.opening.len();
            st.owned_counts = nodes
                .values()
                .filter(|n| map.as_ref().and_then(|m| m.node(n.id)).is_some_and(|m| m.state == NodeState::Up))
                .map(|n| (n.id, if n.id == self.me.id { mine } else { n.serving.len() }))
                .collect();
            if let Some(map) = &map {
                self.warn_fill(&mut st, map, &nodes, &settings);
            }
            for (id, link) in &st.links {
                if let Some(n) = nodes.get(id) {
                    link.update(n.fabric, fabric_nqn(&n.name));
                }
            }
        }
        let present: BTreeSet<u64> = volumes.iter().map(|rec| rec.id).collect();
        let (remote, released) = self.reconcile_volumes(&volumes, current_epoch, &nodes).await;
        self.drop_deleted(&mut *self.state.lock().await, &present);
        self.free_deleted(&present, &released).await?;
        self.target.set_remote_subsystems(remote);
        Ok(())
    }

    /// The pool's settings, or the defaults when etcd cannot say.
    async fn pool_settings(&self) -> PoolSettings {
        match strata_pool::registry::settings(&self.etcd, &self.prefix).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("reading the pool's settings: {e}; using the defaults");
                PoolSettings::default()
            }
        }
    }

    /// Only the cluster's nodes may reach the replicas.
    fn allow_fabric_hosts(&self, map: &PlacementMap) {
        let mut allowed: Vec<String> = map.nodes().iter().map(|n| node_nqn(&n.name)).collect();
        allowed.sort();
        if self.fabric_hosts() != allowed {
            self.proxy.set_allowed_hosts(allowed.clone());
            self.fabric.set_allowed_hosts(allowed);
        }
    }

    /// Each volume's pass, bounded and its failure its own: one bad
    /// volume never holds back the others (their deletes, takeovers and
    /// moves). The volumes other nodes serve, for discovery, and those
    /// that moved off this node.
    async fn reconcile_volumes(
        self: &Arc<Self>,
        volumes: &[VolumeRecord],
        current_epoch: Option<u64>,
        nodes: &BTreeMap<NodeId, NodeRecord>,
    ) -> (Vec<RemoteSubsystem>, Vec<u64>) {
        let mut remote = Vec::new();
        let mut released = Vec::new();
        for rec in volumes {
            let pass = self.reconcile_volume(rec, current_epoch, nodes, &mut remote, &mut released);
            let outcome = match tokio::time::timeout(VOLUME_PASS_LIMIT, pass).await {
                Ok(r) => r,
                Err(_) => Err(anyhow::anyhow!("its reconcile pass took longer than {VOLUME_PASS_LIMIT:?}")),
            };
            let mut st = self.state.lock().await;
            match outcome {
                Ok(()) => {
                    st.volume_errors.remove(&rec.id);
                }
                Err(e) => {
                    let e = format!("{e:#}");
                    if st.volume_errors.get(&rec.id) != Some(&e) {
                        tracing::warn!(volume = %rec.name, "reconcile: {e}");
                        st.volume_errors.insert(rec.id, e);
                    }
                }
            }
        }
        (remote, released)
    }

    /// Stops serving and holding the volumes that are no longer listed.
    fn drop_deleted(&self, st: &mut State, present: &BTreeSet<u64>) {
        st.owned.retain(|id, o| {
            let keep = present.contains(id);
            if !keep {
                self.unserve(o);
            }
            keep
        });
        st.paths.retain(|id, p| {
            let keep = present.contains(id);
            if !keep {
                self.target.remove_this_subsystem(&p.sub);
            }
            keep
        });
        for id in st.held.keys().copied().filter(|id| !present.contains(id)).collect::<Vec<_>>() {
            st.held.remove(&id);
            let _ = self.fabric.remove_namespace(id as u32);
        }
    }

    /// Replicas of deleted volumes (also those deleted while this node was
    /// down) and of volumes that moved off it give their space back, and
    /// so do the notes kept for their owners. Only the reconcile pass
    /// creates replicas, and only of listed volumes, so nothing new is
    /// lost.
    async fn free_deleted(&self, present: &BTreeSet<u64>, released: &[u64]) -> anyhow::Result<()> {
        let keep: Vec<u64> =
            present.iter().filter(|id| !released.contains(id)).flat_map(|&id| [id, undo_log_id(id)]).collect();
        if self.store.volume_ids().iter().any(|id| !keep.contains(id)) {
            let freed = self.store.retain_volumes(&keep).await?;
            tracing::info!(volumes = ?freed, "freed the replicas of deleted volumes");
        }
        let dir = self.data_dir.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || crate::notes::retain(&dir, &keep)).await? {
            tracing::warn!("freeing the notes of deleted volumes: {e}");
        }
        Ok(())
    }

    /// Takes volume `rec`, which this node serves as `o`, back under its
    /// current lease after its owner key went with an old one; the owner
    /// token when it did, `None` when another node took the volume over.
    ///
    /// # Errors
    ///
    /// When etcd did not say: the node goes on serving (its replicas'
    /// promises keep any other owner out) and tries again at its next pass.
    async fn reclaim(
        &self,
        rec: &VolumeRecord,
        keys: &VolumeKeys,
        served: &Served,
        held: Option<i64>,
    ) -> anyhow::Result<Option<OwnerToken>> {
        let lease = self.lease().id();
        let taken = strata_pool::cluster::reclaim(&self.etcd, keys, rec.id, &served.token, served.epoch, lease, held)
            .await
            .context("taking its owner key back (still serving; trying again)")?;
        if taken && held.is_some() {
            tracing::info!(volume = %rec.name, "its owner key moved from the lost lease to the new one, still serving");
        } else if taken {
            tracing::info!(volume = %rec.name, "its owner key went with an old lease: taken back, still serving");
        }
        Ok(taken.then(|| served.token.clone()))
    }

    /// How long the promises an owner asks of its replicas last: half the
    /// lease, so that after an owner dies they end before its lease does
    /// (the takeover waits for nothing), and a partitioned owner stops
    /// half a lease after its last promise at most.
    fn promise_duration(&self) -> Duration {
        let ttl = u64::try_from(self.lease().lease().ttl_secs).unwrap_or(1).max(1);
        Duration::from_millis(ttl * 500).max(Duration::from_millis(500))
    }

    /// The layout of `rec` under placement map `epoch` with shard `slots`.
    async fn layout_at(
        &self,
        rec: &VolumeRecord,
        protection: Protection,
        epoch: u64,
        slots: &BTreeMap<u32, Vec<NodeId>>,
    ) -> anyhow::Result<Arc<PlacementLayout>> {
        let table = self.table(epoch).await?;
        Ok(Arc::new(PlacementLayout::new(rec.id, protection.width(), table).with_slots(slots.clone())))
    }

    /// What a pass needs to know of volume `rec`'s placement: its state
    /// and layouts (where it is, where a recorded move takes it, where
    /// the current map would put it). `None` while it is being created
    /// or deleted.
    async fn placement_of(
        &self,
        rec: &VolumeRecord,
        keys: &VolumeKeys,
        current_epoch: Option<u64>,
    ) -> anyhow::Result<Option<Placed>> {
        let state = match read_state(&self.etcd, keys, rec.id).await {
            Ok((state, _)) => state,
            // Being created (its record is written first) or deleted.
            Err(strata_pool::cluster::ClusterError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let protection = protection_of(&state.protection)?;
        let layout = self.layout_at(rec, protection, state.map_epoch, &state.slots).await?;
        let holders = holders_of(&*layout, rec, protection);
        // A move in progress: the nodes joining chunks hold the volume too.
        let recorded = match &state.next {
            Some(n) => Some((n.clone(), self.layout_at(rec, protection, n.map_epoch, &n.slots).await?)),
            None => None,
        };
        let recorded_holders = recorded.as_ref().map(|(_, l)| holders_of(&**l, rec, protection)).unwrap_or_default();
        // Where the volume should go when the map changed since it was
        // placed (or since its move began): its new holders serve it
        // before the owner moves it.
        let target = state.next.as_ref().map_or(state.map_epoch, |n| n.map_epoch);
        let next = match current_epoch {
            Some(e) if e > target => {
                let table = self.table(e).await?;
                let next = Arc::new(match stripes_of(protection, rec.block_size) {
                    // Shards keep their slots where they stay.
                    Some(s) => layout.moved_to(table, s.shard_bytes(rec.size_bytes).div_ceil(layout.chunk_bytes())),
                    None => PlacementLayout::new(rec.id, protection.width(), table),
                });
                let next_holders = holders_of(&*next, rec, protection);
                Some((e, next, next_holders))
            }
            _ => None,
        };
        Ok(Some(Placed { state, protection, layout, holders, recorded, recorded_holders, next }))
    }

    /// Holds a replica of volume `rec` while this node holds a part of it
    /// (now, in a recorded move, or in the current map); frees it once it
    /// moved off this node (and this node no longer serves it).
    async fn keep_replica(
        &self,
        st: &mut State,
        rec: &VolumeRecord,
        p: &Placed,
        owner: Option<&OwnerToken>,
        nodes: &BTreeMap<NodeId, NodeRecord>,
        released: &mut Vec<u64>,
    ) -> anyhow::Result<()> {
        let me = self.me.id;
        let holds_next = p.next.as_ref().is_some_and(|(_, _, h)| h.contains(&me));
        if p.holders.contains(&me) || p.recorded_holders.contains(&me) || holds_next {
            self.hold(st, rec, &p.state, p.protection, owner, nodes).await?;
        } else if st.held.contains_key(&rec.id) && !st.owned.contains_key(&rec.id) {
            st.held.remove(&rec.id);
            let _ = self.fabric.remove_namespace(rec.id as u32);
            released.push(rec.id);
            tracing::info!(volume = %rec.name, "the volume moved off this node; freeing its replica");
        }
        Ok(())
    }

    /// The volume's owner key, after this node took it back where it
    /// still serves the volume.
    ///
    /// Still serving the volume, its owner key gone with a lease that
    /// ended (etcd was out of reach, or frozen, for longer than the
    /// lease): take it back under the new lease unless another node took
    /// it over meanwhile (the epoch tells). A key still under the lease
    /// this node lost (etcd came back before that lease ran out) moves to
    /// the new lease at once, so that the volume never shows no owner
    /// while it is served.
    async fn owner_of(
        &self,
        rec: &VolumeRecord,
        keys: &VolumeKeys,
        owner_kv: Option<KeyValue>,
    ) -> anyhow::Result<Option<OwnerToken>> {
        let owner = token_of(owner_kv.as_ref());
        let lease = self.lease().id();
        // Read under the lock, used after it: the key is taken back in
        // etcd with no lock held.
        let served = self
            .state
            .lock()
            .await
            .owned
            .get(&rec.id)
            .filter(|o| !o.vol.is_fenced())
            .map(|o| Served { token: o.token.clone(), epoch: o.vol.epoch() });
        Ok(match (owner, served) {
            (None, Some(served)) => self.reclaim(rec, keys, &served, None).await?,
            (Some(t), Some(served))
                if t == served.token && owner_kv.as_ref().is_some_and(|kv| kv.lease != Some(lease)) =>
            {
                let held = owner_kv.as_ref().map(|kv| kv.mod_revision);
                self.reclaim(rec, keys, &served, held).await?;
                Some(t)
            }
            (owner, _) => owner,
        })
    }

    /// One volume's part of a reconcile pass: hold or free its replica,
    /// serve or stop serving it, take it over, and as its owner move it
    /// and bring its nodes up to date.
    ///
    /// The node's state lock is never held across an etcd round trip: the
    /// pass reads etcd first, and changes it (a takeover, a key taken back
    /// or given up) between its locked steps. Passes run one at a time
    /// (only [`Self::run`] starts them), so what a step decided under the
    /// lock still holds when the next step takes it again: the pass is the
    /// only one to change which volumes this node holds, owns or opens,
    /// except a takeover's own task, which ends an opening it started.
    async fn reconcile_volume(
        self: &Arc<Self>,
        rec: &VolumeRecord,
        current_epoch: Option<u64>,
        nodes: &BTreeMap<NodeId, NodeRecord>,
        remote: &mut Vec<RemoteSubsystem>,
        released: &mut Vec<u64>,
    ) -> anyhow::Result<()> {
        let keys = VolumeKeys::new(&self.prefix, rec.id);
        let Some(placed) = self.placement_of(rec, &keys, current_epoch).await? else {
            return Ok(());
        };
        let owner_kv = self.etcd.get(&keys.owner).await?;
        {
            let mut st = self.state.lock().await;
            self.keep_replica(&mut st, rec, &placed, token_of(owner_kv.as_ref()).as_ref(), nodes, released).await?;
        }
        let owner = self.owner_of(rec, &keys, owner_kv).await?;
        let mut st = self.state.lock().await;
        let decision = self.decide_for(&mut st, rec, &placed, owner.as_ref(), nodes);
        let owner_node = owner.as_ref().map(|t| t.node);
        self.carry_out(st, rec, &keys, placed, owner, decision, nodes).await;
        self.keep_path(&mut *self.state.lock().await, rec, owner_node, nodes, remote)
    }

    /// Stops serving owned volume `o` to hosts and to the other nodes'
    /// paths.
    fn unserve(&self, o: &Owned) {
        self.target.remove_subsystem(&o.nqn);
        self.leave_proxy(o);
    }

    /// Takes owned volume `o` off the proxy (the other nodes' paths).
    fn leave_proxy(&self, o: &Owned) {
        if let Ok(nsid) = u32::try_from(o.id)
            && self.proxy.namespace(nsid).is_some_and(|ns| same_volume(&ns.device, &o.vol))
        {
            let _ = self.proxy.remove_namespace(nsid);
            self.proxy_reservations.disown(nsid);
        }
    }

    /// Serves owned volume `o`, which this node stops owning (deposed,
    /// fenced, handing it over), as a path in the subsystem its hosts are
    /// connected to: the subsystem turns to ANA change at once, so that
    /// new commands get path errors, and its namespace's device becomes a
    /// forwarding device, which the next pass aims at the new owner. In
    /// flight commands finish on the volume. Its hosts stay connected
    /// (and Linux sends their I/O to the new owner as soon as it serves),
    /// rather than see their connections closed and reconnect. When the
    /// subsystem is no longer served (a fence closed it), it goes.
    fn demote(&self, paths: &mut HashMap<u64, Path>, rec: &VolumeRecord, o: &Owned) {
        self.leave_proxy(o);
        let served = self.target.subsystem(&o.nqn).is_some_and(|s| Arc::ptr_eq(&s, &o.sub));
        if !served || paths.contains_key(&rec.id) {
            self.target.remove_this_subsystem(&o.sub);
            return;
        }
        o.sub.set_ana_state(AnaState::Change);
        let forward = match self.forward_for(rec) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(volume = %rec.name, "cannot serve the volume as a path: {e:#}");
                self.target.remove_this_subsystem(&o.sub);
                return;
            }
        };
        forward.serves_in(&o.sub);
        match o.sub.replace_namespace(path_namespace(rec, &forward)) {
            Ok(_) => {
                paths.insert(rec.id, Path { sub: o.sub.clone(), forward });
            }
            Err(e) => {
                tracing::warn!(volume = %rec.name, "cannot serve the volume as a path: {e}");
                self.target.remove_this_subsystem(&o.sub);
            }
        }
    }

    /// A path's forwarding device for volume `rec`, aimed nowhere yet.
    fn forward_for(&self, rec: &VolumeRecord) -> anyhow::Result<Arc<paths::Forward>> {
        let geometry = strata_block::Geometry {
            block_size: rec.block_size,
            num_blocks: rec.size_bytes / u64::from(rec.block_size),
        };
        let nsid = u32::try_from(rec.id).context("volume id beyond the proxy's NSIDs")?;
        Ok(paths::Forward::new(geometry, nsid, rec.nsid, self.host_cfg.clone()))
    }

    /// Serves volume `rec` as a path to its owner (`owner`, when known)
    /// unless this node owns it or is opening it (see [`paths`]), and
    /// lists every other live node's port for it in discovery.
    fn keep_path(
        &self,
        st: &mut State,
        rec: &VolumeRecord,
        owner: Option<NodeId>,
        nodes: &BTreeMap<NodeId, NodeRecord>,
        remote: &mut Vec<RemoteSubsystem>,
    ) -> anyhow::Result<()> {
        for n in nodes.values().filter(|n| n.id != self.me.id) {
            remote.push(RemoteSubsystem {
                nqn: rec.nqn.clone(),
                addr: n.listen,
                allowed_hosts: rec.allowed_hosts.clone(),
            });
        }
        if st.owned.contains_key(&rec.id) || st.opening.contains(&rec.id) {
            if let Some(p) = st.paths.remove(&rec.id) {
                self.target.remove_this_subsystem(&p.sub);
            }
            return Ok(());
        }
        let path = match st.paths.get(&rec.id) {
            Some(p) => p,
            None => {
                let forward = self.forward_for(rec)?;
                let sub = Subsystem::new(rec.nqn.clone(), serial_for(&rec.nqn), rec.allowed_hosts.clone());
                sub.set_ana_state(AnaState::Change);
                sub.serve_reservations(true);
                forward.serves_in(&sub);
                sub.add_namespace(path_namespace(rec, &forward))?;
                // A subsystem of that NQN still here (an owner's, being
                // stopped) stays until it goes; the next pass adds this.
                self.target.add_subsystem(sub.clone())?;
                tracing::info!(volume = %rec.name, "serving the volume as a path to its owner");
                st.paths.entry(rec.id).or_insert(Path { sub, forward })
            }
        };
        if path.sub.allowed_hosts() != rec.allowed_hosts {
            path.sub.set_allowed_hosts(rec.allowed_hosts.clone());
        }
        let aim = owner
            .filter(|&o| o != self.me.id)
            .and_then(|o| nodes.get(&o))
            .map(|n| paths::Aim { addr: n.fabric, nqn: paths::proxy_nqn(&n.name) });
        let known = aim.is_some();
        path.forward.aim(aim);
        // A path that lost the owner stays in change until a probe
        // reaches it again (or the owner changes).
        let state = if known && !path.forward.failing() { AnaState::NonOptimized } else { AnaState::Change };
        if known && path.forward.failing() {
            tokio::spawn(path.forward.clone().probe());
        }
        path.sub.set_ana_state(state);
        Ok(())
    }

    /// What this node does about volume `rec` this pass (see
    /// [`ownership`]); stops serving it first when the owner key no
    /// longer names this node.
    fn decide_for(
        &self,
        st: &mut State,
        rec: &VolumeRecord,
        p: &Placed,
        owner: Option<&OwnerToken>,
        nodes: &BTreeMap<NodeId, NodeRecord>,
    ) -> Decision {
        if owner.is_some() {
            st.orphaned.remove(&rec.id);
        }
        let live: BTreeSet<NodeId> = nodes.keys().copied().collect();
        let serving = |st: &State| {
            st.owned.get(&rec.id).map(|o| Serving {
                fenced: o.vol.is_fenced(),
                below_minimum: o.vol.below_minimum(),
                filling: !o.vol.filling().is_empty(),
                resyncing: !o.vol.resyncing().is_empty(),
                settled: o.since.elapsed() >= ownership::SETTLE,
            })
        };
        let last = p.state.owner.filter(|&o| o != self.me.id);
        let mut view = VolumeView {
            me: self.me.id,
            owner: owner.map(|t| t.node),
            serving: serving(st),
            opening: st.opening.contains(&rec.id),
            leaving: st.leaving,
            moving: p.next.is_some() || p.state.next.is_some(),
            epoch: p.state.epoch,
            holders: &p.holders,
            in_sync: &p.state.in_sync,
            live: &live,
            holders_not_ready: p.holders.iter().any(|h| nodes.get(h).is_some_and(|n| !n.held.contains(&rec.id))),
            short_of_live: false,
            last: LastOwner {
                node: last,
                live: last.is_some_and(|o| nodes.contains_key(&o)),
                serves: last.and_then(|o| nodes.get(&o)).is_some_and(|n| n.serving.contains(&rec.id)),
                promised: last.is_some()
                    && st.held.get(&rec.id).is_some_and(|h| h.fence.promise_left(self.sender()).is_some()),
            },
            orphaned_for: Duration::ZERO,
            rejoined: st.rejoined.is_some_and(|t| t.elapsed() < 2 * RECLAIM_GRACE),
            successor: p.state.successor.filter(|s| nodes.contains_key(s)),
            owned: &st.owned_counts,
            may_rebalance: st.rebalanced.is_none_or(|t| t.elapsed() >= ownership::REBALANCE_EVERY),
        };
        // Not (or no longer) the owner: serve it as a path to the owner
        // at once, rather than answer path errors until it is fenced.
        if must_stop_serving(&view)
            && let Some(o) = st.owned.remove(&rec.id)
        {
            tracing::warn!(volume = %rec.name, owner = ?view.owner, "no longer the owner: serving the volume as a path");
            self.demote(&mut st.paths, rec, &o);
            view.serving = None;
        }
        let mut decision = decide(&view);
        // A takeover in view: first whether enough of its in-sync nodes
        // are up to serve every chunk (a takeover would only fail, and
        // bump the epoch for nothing), then how long it has waited.
        if matches!(decision, Decision::AwaitLastOwner | Decision::AwaitSuccessor | Decision::TakeOver) {
            view.short_of_live = short_of_live(&*p.layout, rec, p.protection, &p.state.in_sync, nodes).is_some();
            if !view.short_of_live {
                view.orphaned_for = st.orphaned.entry(rec.id).or_insert_with(std::time::Instant::now).elapsed();
                if st.waiting.remove(&rec.id) {
                    tracing::info!(volume = %rec.name, "enough in-sync nodes are back: taking the volume over");
                }
            }
            decision = decide(&view);
        }
        decision
    }

    /// Carries out what [`Self::decide_for`] decided for volume `rec`.
    #[allow(clippy::too_many_arguments)]
    async fn carry_out(
        self: &Arc<Self>,
        mut st: tokio::sync::MutexGuard<'_, State>,
        rec: &VolumeRecord,
        keys: &VolumeKeys,
        p: Placed,
        owner: Option<OwnerToken>,
        decision: Decision,
        nodes: &BTreeMap<NodeId, NodeRecord>,
    ) {
        let Placed { state, protection, layout, holders, recorded, recorded_holders, next } = p;
        match (decision, owner) {
            (Decision::GiveUp { short }, Some(t)) => {
                // Deposed while the key still names us (a change of the
                // volume's state we did not make), or stopped because too
                // few in-sync nodes were left: stop serving, and give the
                // key up so that a holder takes it over (and recovers it)
                // once it can.
                if let Some(o) = st.owned.remove(&rec.id) {
                    self.demote(&mut st.paths, rec, &o);
                }
                if short {
                    tracing::error!(volume = %rec.name,
                        "the volume stopped: nodes failed that it needs to serve every chunk; giving it up \
                         until enough are back (the next owner recovers it from their drives)");
                } else {
                    tracing::warn!(volume = %rec.name, "this owner was fenced: giving the volume up");
                }
                drop(st);
                self.give_up(rec, keys, &t).await;
            }
            // Hand the volume to a node that holds it, after a flush, so
            // nothing is lost; this node's hosts stay connected to it as a
            // path, their I/O waiting on path errors until the successor
            // serves it.
            (Decision::HandOver { to, rebalance }, Some(t)) => {
                if let Some(o) = st.owned.remove(&rec.id) {
                    self.demote(&mut st.paths, rec, &o);
                    if rebalance {
                        st.rebalanced = Some(std::time::Instant::now());
                        tracing::info!(volume = %rec.name, to = ?to, "handing the volume over to even out ownership");
                    } else {
                        tracing::info!(volume = %rec.name, to = ?to,
                            "this node holds none of the volume: handing it to a holder");
                    }
                    let (this, rec, keys) = (self.clone(), rec.clone(), keys.clone());
                    tokio::spawn(async move { this.hand_over(&rec, &keys, &t, o.vol, to).await });
                }
            }
            (Decision::Tend, _) => {
                let mv = match next {
                    Some((epoch, next, next_holders)) if st.owned.contains_key(&rec.id) => {
                        self.prepare_move(&mut st, rec, protection, &layout, epoch, next, &next_holders, nodes)
                    }
                    _ => None,
                };
                if let Some(o) = st.owned.get(&rec.id) {
                    let allocated = volume_allocated(nodes.values(), rec.id, protection);
                    o.vol.stats().allocated_bytes.store(allocated, std::sync::atomic::Ordering::Relaxed);
                    // A newer placement while a fill runs: the fill gives
                    // way, so that the move is retargeted now rather than
                    // after it (an undrain cancels a drain).
                    if mv.is_some() && o.resyncing.try_lock().is_err() {
                        o.vol.interrupt_fill();
                    }
                    self.tend(rec.id, o, nodes, &state.in_sync, mv);
                }
            }
            (Decision::AwaitInSync, _) if st.waiting.insert(rec.id) => {
                let group = short_of_live(&*layout, rec, protection, &state.in_sync, nodes);
                tracing::warn!(volume = %rec.name, chunk_nodes = ?group, in_sync = ?state.in_sync,
                    "not taking the volume over: too few of its in-sync nodes are up to serve it; \
                     waiting for them to come back");
            }
            (Decision::TakeOver, _) => {
                let claim = Claim {
                    rec,
                    keys,
                    layout,
                    protection,
                    holders: &holders,
                    nodes,
                    moving: recorded.map(|(target, l)| (target, l, recorded_holders)),
                };
                if let Err(e) = self.take_over(st, claim).await {
                    tracing::info!(volume = %rec.name, "not taking the volume over: {e:#}");
                }
            }
            _ => {}
        }
    }

    /// Keeps a replica (or shard, with its undo log) of `rec` in the
    /// store and on the fabric, its fence at least at the stored epoch.
    async fn hold(
        &self,
        st: &mut State,
        rec: &VolumeRecord,
        state: &VolumeState,
        protection: Protection,
        owner: Option<&OwnerToken>,
        nodes: &BTreeMap<NodeId, NodeRecord>,
    ) -> anyhow::Result<()> {
        // The stored epoch and its owner (a raise to another owner's epoch
        // waits for a promise this replica gave the last one).
        let owner_sender = owner.and_then(|t| self.sender_of(t.node, nodes));
        if let Some(h) = st.held.get(&rec.id) {
            h.fence.raise(state.epoch, owner_sender);
            return Ok(());
        }
        let nsid = u32::try_from(rec.id).context("volume id beyond the fabric's NSIDs")?;
        let fence = EpochFence::new(state.epoch);
        let ids = NamespaceIds { nguid: rec.nguid, uuid: rec.uuid, eui64: rec.eui64 };
        let notes: Arc<dyn NoteStore> = Arc::new(crate::notes::FileNotes::new(&self.data_dir, rec.id));
        let held = match stripes_of(protection, rec.block_size) {
            None => {
                let device = self.store.open_volume(rec.id, rec.size_bytes, rec.block_size)? as Arc<dyn BlockDevice>;
                let ns = Namespace::fenced(nsid, ids, device.clone(), fence.clone()).with_notes(notes.clone());
                self.fabric.add_namespace(ns)?;
                Held { fence, device, undo: None, notes }
            }
            Some(stripes) => {
                let data = self.store.open_volume(rec.id, stripes.shard_bytes(rec.size_bytes), rec.block_size)?;
                let log = self.store.open_volume(undo_log_id(rec.id), UNDO_LOG_BYTES, rec.block_size)?;
                let shard = UndoDevice::open(data, log).await.context("the shard's undo log")?;
                let device = shard.clone() as Arc<dyn BlockDevice>;
                let undo = shard as Arc<dyn UndoLog>;
                let ns =
                    Namespace::shard(nsid, ids, device.clone(), undo.clone(), fence.clone()).with_notes(notes.clone());
                self.fabric.add_namespace(ns)?;
                Held { fence, device, undo: Some(undo), notes }
            }
        };
        tracing::info!(volume = %rec.name, epoch = state.epoch, %protection, "holding a replica");
        st.held.insert(rec.id, held);
        Ok(())
    }

    /// The fence sender of node `id` (its fabric host NQN), when its name
    /// is known.
    fn sender_of(&self, id: NodeId, nodes: &BTreeMap<NodeId, NodeRecord>) -> Option<strata_block::Sender> {
        if id == self.me.id {
            return Some(self.sender());
        }
        nodes.get(&id).map(|n| strata_block::sender_id(&node_nqn(&n.name)))
    }

    /// This node's fence sender: what its own replicas and its fabric
    /// connections to its peers are known as.
    fn sender(&self) -> strata_block::Sender {
        strata_block::sender_id(&node_nqn(&self.me.name))
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

    /// Takes volume `claim.rec` over: acquires it in etcd (epoch bump) and
    /// builds its handles now, and opens it (fence, roll back or repair,
    /// promises) on a task of its own, which can take long (a busy volume's
    /// dirty regions) and must not be cut short by the pass's bound or
    /// hold up the other volumes. The task serves the volume when it is
    /// open, or gives it up.
    async fn take_over(
        self: &Arc<Self>,
        st: tokio::sync::MutexGuard<'_, State>,
        claim: Claim<'_>,
    ) -> anyhow::Result<()> {
        let (rec, keys) = (claim.rec.clone(), claim.keys.clone());
        // No lock across the round trip (see `reconcile_volume`).
        drop(st);
        let (membership, token) = acquire(&self.etcd, &keys, rec.id, self.me.id, self.lease().id()).await?;
        tracing::info!(volume = %rec.name, epoch = membership.epoch, "took the volume over");
        let mut st = self.state.lock().await;
        let opening = match self.prepare_open(&mut st, claim, membership, &token) {
            Ok(o) => o,
            Err(e) => {
                drop(st);
                self.give_up(&rec, &keys, &token).await;
                return Err(e);
            }
        };
        // The owner serves the volume itself, in this node's path
        // subsystem when it has one: its hosts stay connected, their I/O
        // waits on path errors (ANA change) until the volume is open and
        // the path turns optimized.
        let path = st.paths.remove(&rec.id);
        if let Some(p) = &path {
            p.forward.stop_being_a_path();
            p.sub.set_ana_state(AnaState::Change);
        }
        st.opening.insert(rec.id);
        let this = self.clone();
        tokio::spawn(async move {
            let opened = this.open_owned(opening, path.as_ref().map(|p| p.sub.clone())).await;
            let mut st = this.state.lock().await;
            st.opening.remove(&rec.id);
            match opened {
                Ok(o) => {
                    st.owned.insert(rec.id, o);
                }
                Err(e) => {
                    // Still a path to whoever owns the volume next, its
                    // forwarding device back in place (an open can fail
                    // after the swap).
                    if let Some(p) = path {
                        let _ = p.sub.replace_namespace(path_namespace(&rec, &p.forward));
                        p.forward.serves_in(&p.sub);
                        st.paths.insert(rec.id, p);
                    }
                    drop(st);
                    tracing::info!(volume = %rec.name, "could not open the volume it took over: {e:#}");
                    // Do not sit on a volume we cannot serve until our
                    // lease ends.
                    this.give_up(&rec, &keys, &token).await;
                }
            }
        });
        Ok(())
    }

    /// Hands volume `rec` (no longer served to hosts) to the node that
    /// takes it over next: lets the writes still running end, flushes,
    /// cleans its dirty-region log (so that the next owner has nothing to
    /// repair), ends its replicas' promises and gives the key up.
    async fn hand_over(
        &self,
        rec: &VolumeRecord,
        keys: &VolumeKeys,
        token: &OwnerToken,
        vol: Arc<dyn PoolVolume>,
        successor: Option<NodeId>,
    ) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while vol.writes_running() > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        match vol.flush().await {
            Ok(()) => {
                for _ in 0..2 {
                    if let Err(e) = vol.clean(Duration::ZERO).await {
                        tracing::warn!(volume = %rec.name, "cleaning the log before handing the volume over: {e}");
                        break;
                    }
                }
            }
            Err(e) => tracing::warn!(volume = %rec.name, "flush before handing the volume over: {e}"),
        }
        vol.end_promises().await;
        self.release(rec, keys, token, successor).await;
    }

    /// Releases volume `rec`'s owner key (held with `token`) for good: the
    /// other nodes may take it over at once (no grace for a live owner).
    async fn give_up(&self, rec: &VolumeRecord, keys: &VolumeKeys, token: &OwnerToken) {
        self.release(rec, keys, token, None).await;
    }

    /// [`Self::give_up`], naming the node that takes the volume over
    /// first, when there is one.
    ///
    /// Tried again every second until etcd answers, on a task of its own:
    /// a key this node no longer serves under stays with its live lease,
    /// and no other node would ever take the volume over.
    async fn release(&self, rec: &VolumeRecord, keys: &VolumeKeys, token: &OwnerToken, successor: Option<NodeId>) {
        let (etcd, keys, token, id, name) = (self.etcd.clone(), keys.clone(), token.clone(), rec.id, rec.name.clone());
        tokio::spawn(async move {
            let mut warned = false;
            while let Err(e) = strata_pool::cluster::release_for_good(&etcd, &keys, id, &token, successor).await {
                if !warned {
                    tracing::warn!(volume = %name, "cannot give the volume up yet (trying again every second): {e}");
                    warned = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }

    /// What opening a volume just taken over needs from the node's state:
    /// its handles (and those of a move in progress), its layout and log
    /// regions.
    fn prepare_open(
        &self,
        st: &mut State,
        claim: Claim<'_>,
        membership: strata_pool::Membership,
        token: &OwnerToken,
    ) -> anyhow::Result<Opening> {
        let Claim { rec, keys, layout, protection, holders, nodes, moving } = claim;
        let stripes = stripes_of(protection, rec.block_size);
        // The log's regions cover what each node holds: the volume, or a
        // shard of it.
        let span = span_of(rec, protection);
        let regions = Regions::for_volume(span, layout.chunk_bytes());
        // Every node that holds a chunk, and those a move in progress
        // brings in (a dead node's handle fails at once, so the volume
        // drops it when it fences; its link finds the node when it is
        // back).
        let mut all = holders.clone();
        let moving = moving.map(|(target, next, joining)| {
            all.extend(joining);
            let plan = MovePlan::new(&*layout, &*next, span, regions, stripes.is_some());
            Moving { next, target, plan, positional: stripes.is_some() }
        });
        let handles = self.handles(st, rec, stripes.is_some(), all.into_iter(), nodes)?;
        Ok(Opening {
            rec: rec.clone(),
            keys: keys.clone(),
            token: token.clone(),
            membership,
            layout,
            regions,
            stripes,
            handles,
            moving,
        })
    }

    /// Opens the volume a takeover claimed and serves it: in `path`, the
    /// subsystem this node served it in as a path (its namespace's device
    /// swapped for the volume, its ANA state optimized), or in a new one.
    async fn open_owned(&self, opening: Opening, path: Option<Arc<Subsystem>>) -> anyhow::Result<Owned> {
        let Opening { rec, keys, token, membership, layout, regions, stripes, handles, moving } = opening;
        let ev = Arc::new(EtcdVolume::new(self.etcd.clone(), keys.clone(), rec.id, &token, regions));
        // The log etcd holds, and the notes an owner kept on the replicas
        // while etcd was out of reach.
        let notes = load_notes(&handles, &membership).await;
        let drl = DirtyRegionLog::new(regions, ev.load_drl_with(&notes).await?, ev.clone());
        let geometry = strata_block::Geometry {
            block_size: rec.block_size,
            num_blocks: rec.size_bytes / u64::from(rec.block_size),
        };
        if let Some(mv) = &moving {
            tracing::info!(volume = %rec.name, map_epoch = mv.target.map_epoch, "going on with the move in progress");
        }
        let parts = OpenParts {
            geometry,
            local: self.me.id,
            stripes,
            layout,
            members: handles,
            membership,
            drl,
            control: ev.clone(),
            moving,
        };
        let kind = open_volume(parts).await?;
        let vol = kind.volume();
        vol.set_throttle(self.throttle.clone());
        // While etcd does not answer the log goes to the replicas, and the
        // volume is served only while they promise no other owner comes.
        ev.keep_notes_on(vol.note_sink());
        vol.keep_promises(self.promise_duration()).await;
        let ids = NamespaceIds { nguid: rec.nguid, uuid: rec.uuid, eui64: rec.eui64 };
        // The hosts' reservations: one state, kept in etcd under this
        // owner's token, for its own hosts and for every path's.
        let cell = reservations::load(&self.etcd, &keys, &rec.name).await?;
        let kept = reservations::EtcdReservations::new(self.etcd.clone());
        kept.own(rec.nsid, keys.clone(), token.clone());
        // The volume's I/O is counted here, at its owner: its own hosts'
        // and, through the proxy, the other nodes' paths' (a path node
        // counts its hosts, not the volume), so each command counts once.
        let metrics = self.target.io_metrics().volume(&rec.name);
        let hosts_ns =
            Namespace::new(rec.nsid, ids, vol.clone()).with_reservations(cell.clone()).with_metrics(metrics.clone());
        let sub = match path {
            Some(sub) => {
                sub.set_allowed_hosts(rec.allowed_hosts.clone());
                sub.keep_reservations_in(kept);
                sub.replace_namespace(hosts_ns)?;
                sub.set_ana_state(AnaState::Optimized);
                sub
            }
            None => {
                let sub = Subsystem::new(rec.nqn.clone(), serial_for(&rec.nqn), rec.allowed_hosts.clone());
                sub.serve_reservations(true);
                sub.keep_reservations_in(kept);
                sub.add_namespace(hosts_ns)?;
                self.target.add_subsystem(sub.clone())?;
                sub
            }
        };
        // The other nodes' paths forward to it here.
        let proxy_nsid = u32::try_from(rec.id).context("volume id beyond the proxy's NSIDs")?;
        let _ = self.proxy.remove_namespace(proxy_nsid);
        self.proxy_reservations.own(proxy_nsid, keys.clone(), token.clone());
        self.proxy.add_namespace(
            Namespace::new(proxy_nsid, ids, vol.clone()).with_reservations(cell).with_metrics(metrics),
        )?;
        tracing::info!(volume = %rec.name, "serving the volume");
        // Fenced: the path turns to ANA change at once, so that the hosts
        // send their I/O elsewhere (the volume answers path errors) until
        // the next pass serves it as a path (`demote`).
        let (mut fenced, weak_sub, weak_vol, name, nsid) =
            (vol.fenced_signal(), Arc::downgrade(&sub), Arc::downgrade(&vol), rec.name.clone(), rec.nsid);
        tokio::spawn(async move {
            if fenced.wait_for(|&f| f).await.is_ok()
                && let (Some(sub), Some(vol)) = (weak_sub.upgrade(), weak_vol.upgrade())
                && sub.namespace(nsid).is_some_and(|ns| same_volume(&ns.device, &vol))
            {
                sub.set_ana_state(AnaState::Change);
                tracing::warn!(volume = %name, "fenced: not serving the volume (ANA change)");
            }
        });
        Ok(Owned {
            id: rec.id,
            vol,
            kind,
            nqn: rec.nqn.clone(),
            sub,
            since: std::time::Instant::now(),
            resyncing: Arc::new(tokio::sync::Mutex::new(())),
            token,
        })
    }

    /// Handles of the copies (`shards` false) or shards of `rec` that
    /// `nodes_of` hold: this node's own in its store, the others' over
    /// the fabric.
    fn handles(
        &self,
        st: &mut State,
        rec: &VolumeRecord,
        shards: bool,
        nodes_of: impl Iterator<Item = NodeId>,
        nodes: &BTreeMap<NodeId, NodeRecord>,
    ) -> anyhow::Result<Members> {
        let nsid = u32::try_from(rec.id).context("volume id beyond the fabric's NSIDs")?;
        let mut added = if shards { Members::Shards(Vec::new()) } else { Members::Replicas(Vec::new()) };
        for n in nodes_of {
            if n == self.me.id {
                let h = st.held.get(&rec.id).context("no local copy")?;
                let (sender, notes) = (self.sender(), Some(h.notes.clone()));
                match &mut added {
                    Members::Shards(list) => {
                        let undo = h.undo.clone().context("the local copy has no undo log")?;
                        let local = LocalShard::new(n, h.device.clone(), undo, h.fence.clone()).on_node(sender, notes);
                        list.push(Arc::new(local));
                    }
                    Members::Replicas(list) => {
                        let local = LocalReplica::new(n, h.device.clone(), h.fence.clone()).on_node(sender, notes);
                        list.push(Arc::new(local));
                    }
                }
                continue;
            }
            let link = self.link(st, n, nodes.get(&n));
            added.push_remote(Arc::new(FabricReplica::new(link, nsid, rec.block_size)));
        }
        Ok(added)
    }

    /// An owner's chores: clean the log, move the volume to the current
    /// map when `mv` is ready, bring back stale replicas whose node is
    /// alive and fill nodes that joined chunks.
    fn tend(
        &self,
        id: u64,
        o: &Owned,
        nodes: &BTreeMap<NodeId, NodeRecord>,
        in_sync: &BTreeSet<NodeId>,
        mv: Option<Move>,
    ) {
        let (vol, kind) = (o.vol.clone(), o.kind.clone());
        let lock = o.resyncing.clone();
        let live: BTreeSet<NodeId> = nodes.keys().copied().collect();
        let in_sync = in_sync.clone();
        tokio::spawn(async move {
            let Ok(_one) = lock.try_lock() else { return };
            let slow = |what: &str| format!("volume {id}: {what}");
            if let Err(e) = logged_if_slow(&slow("cleaning the log"), vol.clean(strata_pool::volume::CLEAN_AFTER)).await
            {
                tracing::warn!(volume = id, "cleaning the dirty-region log: {e}");
            }
            // A move to a newer map starts (or retargets the one in
            // progress) at once; the nodes it brings in are filled below.
            if let Some(mv) = mv {
                let Move { map_epoch, layout, plan, added } = mv;
                let target = strata_pool::NextLayout { map_epoch, slots: layout.slots().clone() };
                let moving = Moving { next: layout, target, plan, positional: kind.positional() };
                let begun = logged_if_slow(&slow("starting a move"), kind.begin_move(moving, added)).await;
                if let Err(e) = begun {
                    tracing::warn!(volume = id, map_epoch, "moving the volume to the new map: {e}");
                }
            }
            for n in behind(vol.drl().state().missed, &live, &in_sync) {
                match logged_if_slow(&slow(&format!("resync of node {n}")), vol.resync(n)).await {
                    Ok(()) => tracing::info!(volume = id, node = %n, "replica in sync"),
                    Err(e) => tracing::info!(volume = id, node = %n, "resync not finished: {e}"),
                }
            }
            // Every node the move brought in is filled: switch.
            if vol.moving_to().is_some()
                && let Err(e) = logged_if_slow(&slow("switching to the new placement"), vol.finish_move()).await
            {
                tracing::warn!(volume = id, "switching the volume to its new placement: {e}");
            }
        });
    }
    /// The move of volume `rec` from `layout` to `next` (map `epoch`),
    /// once every node it adds serves the volume (none is dead: a node
    /// down past the grace time is out of the map, and one that is down
    /// for less holds the move until it returns or is marked down).
    #[allow(clippy::too_many_arguments)]
    fn prepare_move(
        &self,
        st: &mut State,
        rec: &VolumeRecord,
        protection: Protection,
        layout: &Arc<PlacementLayout>,
        epoch: u64,
        next: Arc<PlacementLayout>,
        next_holders: &BTreeSet<NodeId>,
        nodes: &BTreeMap<NodeId, NodeRecord>,
    ) -> Option<Move> {
        let stripes = stripes_of(protection, rec.block_size);
        let span = span_of(rec, protection);
        let regions = Regions::for_volume(span, layout.chunk_bytes());
        let plan = MovePlan::new(&**layout, &*next, span, regions, stripes.is_some());
        let old = holders_of(&**layout, rec, protection);
        let new: Vec<NodeId> = next_holders.iter().copied().filter(|n| !old.contains(n)).collect();
        let serving = |n: &NodeId| {
            if *n == self.me.id {
                st.held.contains_key(&rec.id)
            } else {
                nodes.get(n).is_some_and(|r| r.held.contains(&rec.id))
            }
        };
        if let Some(st) = stripes.filter(|s| plan.kept < s.data) {
            // Shards that change position must be decoded from K that do
            // not; a map change that shifts more (a node added in front of
            // them) is not moved yet.
            tracing::debug!(volume = %rec.name, kept = plan.kept, k = st.data, "not moving: too few shards keep their place");
            return None;
        }
        // Never to a placement that cannot hold the protection (a map
        // with fewer up nodes than its width, after a node was marked
        // down): the volume stays where it is, degraded, until the map
        // can place it whole again.
        let chunks = span.div_ceil(next.chunk_bytes());
        if let Some(g) = next.groups(chunks).into_iter().find(|g| g.len() < protection.width()) {
            tracing::debug!(volume = %rec.name, group = ?g, %protection, "not moving: the new map places a chunk on too few nodes");
            return None;
        }
        let joining_ready = plan.joining.iter().all(|(n, _)| nodes.contains_key(n) && serving(n));
        if !joining_ready || !new.iter().all(serving) {
            return None;
        }
        let added = self.handles(st, rec, stripes.is_some(), new.into_iter(), nodes).ok()?;
        Some(Move { map_epoch: epoch, layout: next, plan, added })
    }

    /// Logs a warning when the pool's fill crosses a threshold upwards
    /// (once per threshold, again after it fell below).
    fn warn_fill(&self, st: &mut State, map: &PlacementMap, live: &BTreeMap<NodeId, NodeRecord>, s: &PoolSettings) {
        let fill = pool_fill(map, live);
        let crossed = fill.crossed(&s.fill_warn_percent);
        if crossed > st.fill_warned {
            for w in fill.warnings(&s.fill_warn_percent, &[s.balance_for]) {
                tracing::warn!(fill_percent = fill.percent(), threshold = crossed, "{w}");
            }
        }
        st.fill_warned = crossed;
    }

    /// Watches the map's nodes against the live ones: an up node gone for
    /// longer than the grace time is marked down in a new map epoch (its
    /// volumes then move, and their owners rebuild what it held), and this
    /// node, found marked down while alive, marks itself up. Returns the
    /// map as it is after that.
    async fn watch_nodes(
        &self,
        map: PlacementMap,
        live: &BTreeMap<NodeId, NodeRecord>,
        settings: &PoolSettings,
    ) -> anyhow::Result<PlacementMap> {
        let now = std::time::Instant::now();
        let grace = Duration::from_secs(settings.rebuild_grace_secs);
        let mut dead = Vec::new();
        {
            let mut st = self.state.lock().await;
            st.missing_since.retain(|id, _| !live.contains_key(id));
            for n in map.nodes() {
                if n.state != NodeState::Up || live.contains_key(&n.id) {
                    continue;
                }
                let since = *st.missing_since.entry(n.id).or_insert(now);
                if now.duration_since(since) >= grace {
                    dead.push(n.id);
                }
            }
        }
        let me_down = map.node(self.me.id).is_some_and(|n| n.state == NodeState::Down);
        if dead.is_empty() && !me_down {
            return Ok(map);
        }
        let me = self.me.id;
        let next = update_map(&self.etcd, &self.prefix, |m| {
            let mut next = m.clone();
            let mut changed = false;
            for &id in dead.iter().filter(|&&id| m.node(id).is_some_and(|n| n.state == NodeState::Up)) {
                next.set_state(id, NodeState::Down).map_err(map_refused)?;
                changed = true;
            }
            if m.node(me).is_some_and(|n| n.state == NodeState::Down) {
                next.set_state(me, NodeState::Up).map_err(map_refused)?;
                changed = true;
            }
            Ok(changed.then_some(next))
        })
        .await?;
        if !dead.is_empty() {
            tracing::warn!(nodes = ?dead, grace_secs = grace.as_secs(), epoch = next.epoch(),
                "nodes down for longer than the grace time: rebuilding what they held on other nodes");
        }
        Ok(next)
    }
}

/// The fill of the nodes that take new data: up in `map`, with a live
/// record.
fn pool_fill(map: &PlacementMap, live: &BTreeMap<NodeId, NodeRecord>) -> crate::fill::Fill {
    crate::fill::Fill::of(map.nodes().iter().filter(|n| n.state == NodeState::Up).filter_map(|n| {
        let rec = live.get(&n.id)?;
        Some(crate::fill::NodeFill { name: n.name.clone(), capacity: n.weight, allocated: rec.allocated_bytes })
    }))
}

/// A change of the pool's settings: the fields given replace the stored
/// ones.
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsPatch {
    /// Seconds a node may stay down before its data is rebuilt elsewhere.
    pub rebuild_grace_secs: Option<u64>,
    /// Rebuild bandwidth per node, MB/s (0: no limit).
    pub rebuild_mbps: Option<u64>,
    /// Fill warning thresholds, percent.
    pub fill_warn_percent: Option<Vec<u8>>,
    /// The protection the balancer evens out, e.g. `rep:3`, `ec:4+2`.
    pub balance_for: Option<String>,
    /// The failure domain: `node`, or a label key such as `rack`. Kept
    /// in the placement map (a change moves data), not in the settings.
    pub failure_domain: Option<String>,
}

impl SettingsPatch {
    /// The patch of a config file's `[pool]` table.
    ///
    /// # Errors
    ///
    /// A duration that does not parse.
    pub fn from_file(f: crate::config::PoolFile) -> Result<SettingsPatch, NodeError> {
        let grace = f.rebuild_grace.as_deref().map(crate::config::parse_duration_secs).transpose();
        Ok(SettingsPatch {
            rebuild_grace_secs: grace.map_err(|e| NodeError::Invalid(format!("[pool] rebuild_grace: {e}")))?,
            rebuild_mbps: f.rebuild_mbps,
            fill_warn_percent: f.fill_warn,
            balance_for: f.balance_for,
            failure_domain: None,
        })
    }

    /// Puts the fields given into `s`, checked.
    ///
    /// # Errors
    ///
    /// [`NodeError::Invalid`] naming the bad field.
    pub fn apply(&self, s: &mut PoolSettings) -> Result<(), NodeError> {
        if let Some(g) = self.rebuild_grace_secs {
            s.rebuild_grace_secs = g;
        }
        if let Some(m) = self.rebuild_mbps {
            s.rebuild_mbps = m;
        }
        if let Some(f) = &self.fill_warn_percent {
            if f.iter().any(|&p| p == 0 || p > 100) {
                return Err(NodeError::Invalid("fill warning thresholds are percentages from 1 to 100".into()));
            }
            let mut f = f.clone();
            f.sort_unstable();
            f.dedup();
            s.fill_warn_percent = f;
        }
        if let Some(p) = &self.balance_for {
            s.balance_for = p.parse().map_err(|e| NodeError::Invalid(format!("balance_for: {e}")))?;
        }
        Ok(())
    }
}

/// Refuses a volume of `size` bytes with `protection` that no node's
/// store could open (each holder keeps a copy, or a 1/K shard, of at most
/// `node_max` bytes) or that is larger than the pool's up nodes could
/// ever hold with that protection, naming the limit.
fn check_size(size: u64, protection: Protection, node_max: u64, map: &PlacementMap) -> Result<(), NodeError> {
    let fmt = strata_meta::format_size;
    let k = protection.data_shards() as u64;
    let largest = node_max.saturating_mul(k.max(1));
    if size > largest {
        return Err(NodeError::Invalid(format!(
            "{}: a {protection} volume can be at most {} (each node keeps {} of it, and a node's store opens \
             volumes of at most {})",
            fmt(size),
            fmt(largest),
            if k > 1 { format!("1/{k}") } else { "a whole copy".to_string() },
            fmt(node_max)
        )));
    }
    let up: Vec<&strata_pool::placement::Node> = map.nodes().iter().filter(|n| n.state == NodeState::Up).collect();
    let raw: u64 = up.iter().map(|n| n.weight).sum();
    let effective =
        u64::try_from(u128::from(raw) * u128::from(k) / protection.width().max(1) as u128).unwrap_or(u64::MAX);
    if size > effective {
        return Err(NodeError::Invalid(format!(
            "{}: more than the pool can ever hold as {protection}: {} ({} raw on {} up nodes, of which {protection} \
             keeps {k}/{}); add nodes or create a smaller volume",
            fmt(size),
            fmt(effective),
            fmt(raw),
            up.len(),
            protection.width()
        )));
    }
    Ok(())
}

/// The host NQN a node connects to its peers' fabric with.
pub fn node_nqn(name: &str) -> String {
    format!("nqn.2026-11.io.strata:node:{name}")
}

/// The bytes each holder of `rec` keeps: the volume, or a shard of it.
fn span_of(rec: &VolumeRecord, protection: Protection) -> u64 {
    member_bytes(protection, rec.size_bytes, rec.block_size)
}

/// The fewest in-sync nodes a chunk of a volume of `protection` needs to
/// be served: one copy, or K shards.
fn min_in_sync(protection: Protection) -> usize {
    match protection {
        Protection::ErasureCoded { data, .. } => usize::from(data),
        _ => 1,
    }
}

/// The first chunk group of `rec` with fewer than the minimum of its
/// in-sync nodes alive (registered), if any: no takeover can serve the
/// volume before they are back.
fn short_of_live(
    layout: &dyn Layout,
    rec: &VolumeRecord,
    protection: Protection,
    in_sync: &BTreeSet<NodeId>,
    live: &BTreeMap<NodeId, NodeRecord>,
) -> Option<Vec<NodeId>> {
    let alive: BTreeSet<NodeId> = in_sync.iter().copied().filter(|n| live.contains_key(n)).collect();
    let chunks = span_of(rec, protection).div_ceil(layout.chunk_bytes());
    strata_pool::volume::short_group(layout, chunks, &alive, min_in_sync(protection))
}

/// Every node that holds some chunk of `rec`.
fn holders_of(layout: &dyn Layout, rec: &VolumeRecord, protection: Protection) -> BTreeSet<NodeId> {
    let span = span_of(rec, protection);
    let chunks = span.div_ceil(layout.chunk_bytes());
    let mut set = BTreeSet::new();
    // A volume's groups repeat after pg_count chunks; 4096 covers them.
    for c in 0..chunks.min(4096) {
        set.extend(layout.replicas(c));
    }
    set
}

/// Whether `device` is `vol` (the same object behind two trait objects).
/// Volume `rec`'s namespace on a path: the forwarding device, through
/// which each host's commands run at the owner as that host.
fn path_namespace(rec: &VolumeRecord, forward: &Arc<paths::Forward>) -> Namespace {
    let ids = NamespaceIds { nguid: rec.nguid, uuid: rec.uuid, eui64: rec.eui64 };
    Namespace::new(rec.nsid, ids, forward.clone()).with_forward(Arc::new(paths::PathForward(forward.clone())))
}

fn same_volume(device: &Arc<dyn BlockDevice>, vol: &Arc<dyn PoolVolume>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(device), Arc::as_ptr(vol))
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
        check_size(req.size_bytes, wanted, self.store.max_volume_bytes(), &map)?;
        let rec = self.meta.create_volume(req).await?;
        let table = self.table(map.epoch()).await.map_err(NodeError::Internal)?;
        let layout = PlacementLayout::new(rec.id, wanted.width(), table);
        let state = VolumeState {
            protection: wanted.to_string(),
            map_epoch: map.epoch(),
            epoch: 0,
            in_sync: holders_of(&layout, &rec, wanted),
            slots: Default::default(),
            next: None,
            owner: None,
            successor: None,
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
        for key in [&keys.owner, &keys.drl, &keys.reservations, &keys.state] {
            self.etcd.delete(&KeyRange::key(key.clone())).await.map_err(|e| NodeError::Internal(e.into()))?;
        }
        tracing::info!(volume = %rec.name, id = rec.id, "volume deleted from the pool");
        Ok(serde_json::json!({"name": rec.name, "id": rec.id, "deleted": true}))
    }

    /// Starts a check of volume `name`'s copies or shards (with
    /// `repair`, a repair of what differs) on its owner: here, or says
    /// where the owner is.
    ///
    /// # Errors
    ///
    /// [`NodeError::NotFound`]; [`NodeError::Conflict`] while a check
    /// runs or while no node serves the volume; etcd errors.
    pub async fn start_check(&self, name: &str, repair: bool) -> Result<Answer, NodeError> {
        let rec = self.volume_record(name).await?;
        match self.served_here(rec.id).await {
            Some(vol) => Ok(Answer::Here(self.checks.start(rec.id, &rec.name, vol, repair)?)),
            None => self.owner_api(&rec).await.map(Answer::Owner),
        }
    }

    /// The last check of volume `name` its owner ran: here, or says where
    /// the owner is.
    ///
    /// # Errors
    ///
    /// [`NodeError::NotFound`] for no such volume or no check run by
    /// its owner; [`NodeError::Conflict`] while no node serves it.
    pub async fn check_status(&self, name: &str) -> Result<Answer, NodeError> {
        let rec = self.volume_record(name).await?;
        if self.served_here(rec.id).await.is_none() {
            return self.owner_api(&rec).await.map(Answer::Owner);
        }
        self.checks.get(rec.id).map(Answer::Here).ok_or_else(|| {
            NodeError::NotFound(format!(
                "no check of {name} has run on its owner ({}) since it took the volume over: start one with \
                 strata volume check {name}",
                self.me.name
            ))
        })
    }

    async fn volume_record(&self, name: &str) -> Result<VolumeRecord, NodeError> {
        self.meta.get_volume(name).await?.ok_or_else(|| NodeError::NotFound(format!("no volume named {name:?}")))
    }

    /// Volume `id` if this node serves it now.
    async fn served_here(&self, id: u64) -> Option<Arc<dyn PoolVolume>> {
        let st = self.state.lock().await;
        st.owned.get(&id).filter(|o| !o.vol.is_fenced()).map(|o| o.vol.clone())
    }

    /// The API of the node that owns `rec` now.
    async fn owner_api(&self, rec: &VolumeRecord) -> Result<SocketAddr, NodeError> {
        let internal = |e: strata_meta::etcd::EtcdError| NodeError::Internal(e.into());
        let keys = VolumeKeys::new(&self.prefix, rec.id);
        let owner: Option<OwnerToken> =
            self.etcd.get(&keys.owner).await.map_err(internal)?.and_then(|kv| serde_json::from_slice(&kv.value).ok());
        let not_served =
            || NodeError::Conflict(format!("no node serves volume {} now; try again once one does", rec.name));
        let owner = owner.ok_or_else(not_served)?;
        if owner.node == self.me.id {
            return Err(not_served());
        }
        let live = live_nodes(&self.etcd, &self.prefix).await.map_err(|e| NodeError::Internal(e.into()))?;
        let node = live.into_iter().find(|n| n.id == owner.node).ok_or_else(not_served)?;
        node.api.ok_or_else(|| {
            NodeError::Conflict(format!("the owner of {}, {}, runs a version without this API", rec.name, node.name))
        })
    }

    /// Volume `name` as pool status shows it.
    ///
    /// # Errors
    ///
    /// [`crate::node::NodeError::NotFound`] for no such volume; etcd errors.
    pub async fn volume(&self, name: &str) -> Result<VolumeStatus, NodeError> {
        let status = self.status().await.map_err(NodeError::Internal)?;
        status
            .volumes
            .into_iter()
            .find(|v| v.name == name)
            .ok_or_else(|| NodeError::NotFound(format!("no volume named {name:?}")))
    }

    /// Changes the pool's settings: each field given replaces the stored
    /// one. Every node applies them at its next pass.
    pub async fn update_settings(&self, patch: SettingsPatch) -> Result<serde_json::Value, NodeError> {
        let internal = |e: strata_pool::cluster::ClusterError| NodeError::Internal(e.into());
        // The failure domain first: refused, it changes nothing else.
        if let Some(d) = &patch.failure_domain {
            let d = FailureDomain::parse(d).map_err(|e| NodeError::Invalid(format!("failure_domain: {e}")))?;
            self.set_failure_domain(&d).await?;
        }
        let mut s = strata_pool::registry::settings(&self.etcd, &self.prefix).await.map_err(internal)?;
        let before = s.balance_for;
        patch.apply(&mut s)?;
        let rebalance = s.balance_for != before;
        strata_pool::registry::set_settings(&self.etcd, &self.prefix, &s).await.map_err(internal)?;
        tracing::info!(?s, "pool settings changed");
        if rebalance {
            let map = strata_pool::registry::rebalance(&self.etcd, &self.prefix).await.map_err(internal)?;
            tracing::info!(epoch = map.epoch(), remaps = map.remaps().len(), "placement map rebalanced");
        }
        self.settings().await
    }

    /// Places the pool by failure domain `domain` from now on: a new map
    /// epoch, to which every volume moves (online, as for a drain).
    /// Refused, naming the volumes, when some volume could not be placed
    /// with one copy or shard per domain.
    ///
    /// # Errors
    ///
    /// [`NodeError::Conflict`] for a domain some volume cannot honour or
    /// a node lacks the label of; etcd errors.
    async fn set_failure_domain(&self, domain: &FailureDomain) -> Result<PlacementMap, NodeError> {
        let volumes = self.protections().await?;
        let refused = std::sync::Mutex::new(None);
        let map = update_map(&self.etcd, &self.prefix, |m| {
            if m.failure_domain() == domain {
                return Ok(None);
            }
            let vols = volumes.iter().map(|(v, p)| (v.as_str(), *p));
            match strata_pool::placement::check_failure_domain(m, domain, vols) {
                Ok(next) => Ok(Some(next)),
                Err(why) => {
                    *refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.to_string());
                    Err(strata_pool::cluster::ClusterError::Contention(0))
                }
            }
        })
        .await
        .map_err(|e| match refused.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(why) => NodeError::Conflict(why),
            None => NodeError::Internal(e.into()),
        })?;
        tracing::info!(%domain, epoch = map.epoch(), "the pool's failure domain changed: volumes move to the new map");
        Ok(map)
    }

    /// Every volume's name and protection.
    async fn protections(&self) -> Result<Vec<(String, Protection)>, NodeError> {
        let mut volumes = Vec::new();
        for rec in self.meta.list_volumes().await? {
            let keys = VolumeKeys::new(&self.prefix, rec.id);
            let Ok((state, _)) = read_state(&self.etcd, &keys, rec.id).await else { continue };
            volumes.push((rec.name, protection_of(&state.protection).map_err(NodeError::Internal)?));
        }
        Ok(volumes)
    }

    /// Stores `wanted` (the config file's `[pool]` table) as the pool's
    /// settings if the pool has none yet; otherwise warns about each one
    /// the pool holds otherwise (the pool's hold: `strata pool set`
    /// changes them).
    ///
    /// # Errors
    ///
    /// Invalid values ([`NodeError::Invalid`]), etcd errors.
    pub async fn seed_settings(&self, wanted: SettingsPatch) -> Result<(), NodeError> {
        let internal = |e: strata_pool::cluster::ClusterError| NodeError::Internal(e.into());
        let mut seed = PoolSettings::default();
        wanted.apply(&mut seed)?;
        if strata_pool::registry::init_settings(&self.etcd, &self.prefix, &seed).await.map_err(internal)? {
            tracing::info!(?seed, "pool settings stored from the config file");
            return Ok(());
        }
        let held = strata_pool::registry::settings(&self.etcd, &self.prefix).await.map_err(internal)?;
        let mut mine = held.clone();
        wanted.apply(&mut mine)?;
        if mine != held {
            tracing::warn!(
                config = ?mine,
                pool = ?held,
                "the config file's [pool] settings differ from the pool's, which hold (strata pool set changes them)"
            );
        }
        Ok(())
    }

    /// The pool's settings.
    pub async fn settings(&self) -> Result<serde_json::Value, NodeError> {
        let s = strata_pool::registry::settings(&self.etcd, &self.prefix)
            .await
            .map_err(|e| NodeError::Internal(e.into()))?;
        let mut v = serde_json::to_value(&s).unwrap_or_default();
        // The failure domain lives in the placement map.
        if let Some((map, _)) = strata_pool::registry::current_map(&self.etcd, &self.prefix)
            .await
            .map_err(|e| NodeError::Internal(e.into()))?
        {
            v["failure_domain"] = serde_json::json!(map.failure_domain().to_string());
        }
        Ok(v)
    }

    /// Marks node `name` out of the placement map: every volume moves its
    /// copies and shards off it to other nodes, online, while it keeps
    /// serving (and stays in sync) until each replacement is filled.
    /// Refused, naming the volumes, when some volume could not keep its
    /// protection without it.
    ///
    /// # Errors
    ///
    /// [`NodeError::Conflict`] for a drain that cannot be completed,
    /// [`NodeError::NotFound`], etcd errors.
    pub async fn drain_node(&self, name: &str) -> Result<serde_json::Value, NodeError> {
        let volumes = self.protections().await?;
        let check = |m: &PlacementMap, id: NodeId| {
            strata_pool::placement::check_drain(m, id, volumes.iter().map(|(v, p)| (v.as_str(), *p)))
                .map_err(|e| e.to_string())
        };
        let map = self.set_node_state(name, NodeState::Out, Some(&check)).await?;
        tracing::info!(node = %name, epoch = map.epoch(), "node draining: its volumes move off it");
        Ok(serde_json::json!({ "node": name, "state": "out", "map_epoch": map.epoch() }))
    }

    /// Cancels the drain of node `name`: it is up in the placement map
    /// again, and the moves off it are retargeted (what was copied to
    /// other nodes is dropped there; what already moved comes back).
    ///
    /// # Errors
    ///
    /// [`NodeError::Conflict`] when the node is not draining,
    /// [`NodeError::NotFound`], etcd errors.
    pub async fn undrain_node(&self, name: &str) -> Result<serde_json::Value, NodeError> {
        let map = self.map_or_missing().await?;
        match map.nodes().iter().find(|n| n.name == name).map(|n| n.state) {
            None => return Err(NodeError::NotFound(format!("no node {name} in the pool"))),
            Some(NodeState::Out) => {}
            Some(other) => {
                return Err(NodeError::Conflict(format!(
                    "node {name} is not draining (its placement state is {})",
                    serde_json::to_value(other).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
                )));
            }
        }
        let map = self.set_node_state(name, NodeState::Up, None).await?;
        tracing::info!(node = %name, epoch = map.epoch(), "drain cancelled: the node is up in the placement map");
        Ok(serde_json::json!({ "node": name, "state": "up", "map_epoch": map.epoch() }))
    }

    /// The current placement map.
    async fn map_or_missing(&self) -> Result<PlacementMap, NodeError> {
        match strata_pool::registry::current_map(&self.etcd, &self.prefix).await {
            Ok(Some((map, _))) => Ok(map),
            Ok(None) => Err(NodeError::NotFound("the pool has no placement map".into())),
            Err(e) => Err(NodeError::Internal(e.into())),
        }
    }

    /// Sets node `name`'s placement state to `state`, if `check` (of the
    /// map before the change, and the node) allows it: checked inside the
    /// compare-and-set, so two concurrent changes are judged in turn.
    async fn set_node_state(
        &self,
        name: &str,
        state: NodeState,
        check: Option<&MapCheck<'_>>,
    ) -> Result<PlacementMap, NodeError> {
        let name = name.to_string();
        let refused = std::sync::Mutex::new(None);
        let map = update_map(&self.etcd, &self.prefix, |m| {
            let Some(n) = m.nodes().iter().find(|n| n.name == name) else {
                return Err(strata_pool::cluster::ClusterError::NotFound(0));
            };
            if n.state == state {
                return Ok(None);
            }
            if let Some(Err(why)) = check.map(|c| c(m, n.id)) {
                *refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                return Err(strata_pool::cluster::ClusterError::Contention(0));
            }
            let mut next = m.clone();
            next.set_state(n.id, state).map_err(map_refused)?;
            Ok(Some(next))
        })
        .await
        .map_err(|e| {
            if let Some(why) = refused.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return NodeError::Conflict(why);
            }
            match e {
                strata_pool::cluster::ClusterError::NotFound(_) => {
                    NodeError::NotFound(format!("no node {name} in the pool"))
                }
                e => NodeError::Internal(e.into()),
            }
        })?;
        tracing::info!(node = %name, ?state, epoch = map.epoch(), "node state changed in the placement map");
        Ok(map)
    }

    /// Forgets node `name`: refused until it is drained (or down and
    /// rebuilt), judged by the data: no volume places a copy or shard on
    /// it, moves to it, keeps it in its in-sync set or is owned by it.
    ///
    /// # Errors
    ///
    /// [`NodeError::Conflict`] naming what still holds the node,
    /// [`NodeError::NotFound`], etcd errors.
    pub async fn remove_node(&self, name: &str) -> Result<serde_json::Value, NodeError> {
        let internal = |e: anyhow::Error| NodeError::Internal(e);
        let map = self.map_or_missing().await?;
        let node = map.nodes().iter().find(|n| n.name == name).cloned();
        let Some(node) = node else { return Err(NodeError::NotFound(format!("no node {name} in the pool"))) };
        if node.state == NodeState::Removed {
            return Err(NodeError::NotFound(format!("node {name} was removed already")));
        }
        if node.state == NodeState::Up {
            return Err(NodeError::Conflict(format!(
                "node {name} is up in the placement map: drain it first (strata node drain {name}), or wait until it \
                 is down for the rebuild grace time"
            )));
        }
        for rec in self.meta.list_volumes().await.map_err(|e| internal(e.into()))? {
            let keys = VolumeKeys::new(&self.prefix, rec.id);
            let Ok((state, _)) = read_state(&self.etcd, &keys, rec.id).await else { continue };
            let protection = protection_of(&state.protection).map_err(internal)?;
            let owner: Option<OwnerToken> = match self.etcd.get(&keys.owner).await.map_err(|e| internal(e.into()))? {
                Some(kv) => serde_json::from_slice(&kv.value).ok(),
                None => None,
            };
            if owner.is_some_and(|o| o.node == node.id) {
                return Err(NodeError::Conflict(format!(
                    "node {name} still owns volume {}: it hands it to a holder once the volume has moved off it",
                    rec.name
                )));
            }
            let mut on = {
                let placed = self.layout_at(&rec, protection, state.map_epoch, &state.slots).await;
                let moving = match &state.next {
                    Some(n) => Some(self.layout_at(&rec, protection, n.map_epoch, &n.slots).await),
                    None => None,
                };
                let mut on = holders_of(&*placed.map_err(internal)?, &rec, protection);
                if let Some(l) = moving {
                    on.extend(holders_of(&*l.map_err(internal)?, &rec, protection));
                }
                on
            };
            on.extend(state.in_sync.iter().copied());
            if on.contains(&node.id) {
                let why = if state.next.is_some() { "its move is not finished" } else { "it has not moved yet" };
                return Err(NodeError::Conflict(format!(
                    "node {name} still holds data of volume {} ({why}): wait until strata pool status shows the \
                     volume off it",
                    rec.name
                )));
            }
        }
        let map = self.set_node_state(name, NodeState::Removed, None).await?;
        Ok(serde_json::json!({ "node": name, "removed": true, "map_epoch": map.epoch() }))
    }

    /// The pool: nodes, volumes and totals.
    ///
    /// # Errors
    ///
    /// etcd or metadata errors.
    pub async fn status(&self) -> anyhow::Result<PoolStatus> {
        let live: BTreeMap<NodeId, NodeRecord> =
            live_nodes(&self.etcd, &self.prefix).await?.into_iter().map(|n| (n.id, n)).collect();
        let map = strata_pool::registry::current_map(&self.etcd, &self.prefix).await?.map(|(m, _)| m);
        let mut nodes = Vec::new();
        let (mut raw, mut allocated) = (0u64, 0u64);
        for n in map.as_ref().map(|m| m.nodes().to_vec()).unwrap_or_default() {
            if n.state == NodeState::Removed {
                continue;
            }
            let rec = live.get(&n.id);
            raw += n.weight;
            allocated += rec.map_or(0, |r| r.allocated_bytes);
            nodes.push(NodeStatus {
                id: n.id.0,
                name: n.name,
                state: if rec.is_some() { Liveness::Up } else { Liveness::Down },
                placement: n.state,
                rebuild_bytes_per_sec: rec.map_or(0, |r| r.rebuild_bytes_per_sec),
                labels: n.labels,
                capacity_bytes: n.weight,
                allocated_bytes: rec.map(|r| r.allocated_bytes),
                fabric: rec.map(|r| r.fabric.to_string()),
                listen: rec.map(|r| r.listen.to_string()),
                drives: rec.map(|r| r.drives.iter().map(DriveStatus::from).collect()).unwrap_or_default(),
            });
        }
        let mut volumes = Vec::new();
        let mut provisioned = 0u64;
        let mut protections = BTreeMap::new();
        for rec in self.meta.list_volumes().await? {
            let keys = VolumeKeys::new(&self.prefix, rec.id);
            let Ok((state, _)) = read_state(&self.etcd, &keys, rec.id).await else { continue };
            provisioned += rec.size_bytes;
            let owner = token_of(self.etcd.get(&keys.owner).await?.as_ref());
            let Ok(protection) = protection_of(&state.protection) else { continue };
            protections.insert(protection.to_string(), protection);
            let (placed, next) = {
                let placed = self.layout_at(&rec, protection, state.map_epoch, &state.slots).await?;
                let next = match &state.next {
                    Some(n) => Some(self.layout_at(&rec, protection, n.map_epoch, &n.slots).await?),
                    None => None,
                };
                (placed, next)
            };
            volumes.push(self.volume_status(&rec, &state, protection, owner, &placed, next, map.as_ref(), &live));
        }
        let settings = strata_pool::registry::settings(&self.etcd, &self.prefix).await.unwrap_or_default();
        let fill_percent = if raw == 0 { 0.0 } else { allocated as f64 * 100.0 / raw as f64 };
        let fill = map.as_ref().map(|m| pool_fill(m, &live)).unwrap_or_default();
        protections.insert(settings.balance_for.to_string(), settings.balance_for);
        let protections: Vec<Protection> = protections.into_values().collect();
        let warnings: Vec<String> = fill.warnings(&settings.fill_warn_percent, &protections);
        let room_bytes = protections.iter().map(|&p| (p.to_string(), fill.room(p))).collect();
        Ok(PoolStatus {
            node: self.me.name.clone(),
            map_epoch: map.as_ref().map(PlacementMap::epoch),
            nodes,
            volumes,
            settings,
            warnings,
            totals: Totals {
                raw_bytes: raw,
                provisioned_bytes: provisioned,
                allocated_bytes: allocated,
                free_bytes: raw.saturating_sub(allocated),
                fill_percent,
                effective_fill_percent: fill.percent(),
                room_bytes,
                fullest_node: fill.fullest.as_ref().map(|(n, p)| Fullest { name: n.clone(), fill_percent: *p }),
            },
        })
    }

    /// One volume's line of the pool status.
    #[allow(clippy::too_many_arguments)]
    fn volume_status(
        &self,
        rec: &VolumeRecord,
        state: &VolumeState,
        protection: Protection,
        owner: Option<OwnerToken>,
        placed: &PlacementLayout,
        next: Option<Arc<PlacementLayout>>,
        map: Option<&PlacementMap>,
        live: &BTreeMap<NodeId, NodeRecord>,
    ) -> VolumeStatus {
        let all = holders_of(placed, rec, protection);
        let next_holders = next.as_ref().map(|l| holders_of(&**l, rec, protection)).unwrap_or_default();
        let owner_rec = owner.as_ref().and_then(|o| live.get(&o.node));
        // The owner's record says which replicas it is copying back.
        let resync: Vec<&ResyncProgress> =
            owner_rec.map(|n| n.resyncing.iter().filter(|r| r.volume == rec.id).collect()).unwrap_or_default();
        let rate = owner_rec.map_or(0, |n| n.rebuild_bytes_per_sec);
        let served = owner_rec.is_some_and(|n| n.serving.contains(&rec.id));
        let down: Vec<NodeId> = all.iter().copied().filter(|n| !live.contains_key(n)).collect();
        let waiting = short_of_live(placed, rec, protection, &state.in_sync, live);
        let state_of = health(HealthInputs {
            owned: owner.is_some(),
            served,
            short_of_live: waiting.is_some(),
            moving: state.next.is_some(),
            move_due: map.is_some_and(|m| state.next.as_ref().map_or(state.map_epoch, |n| n.map_epoch) < m.epoch()),
            stale: all.iter().any(|n| !state.in_sync.contains(n)),
            down: !down.is_empty(),
            resyncing: resync.iter().any(|r| !r.filling),
            filling: resync.iter().any(|r| r.filling),
        });
        let ids = |set: &mut dyn Iterator<Item = &NodeId>| set.map(|n| n.0).collect::<Vec<u32>>();
        VolumeStatus {
            name: rec.name.clone(),
            id: rec.id,
            size_bytes: rec.size_bytes,
            size: strata_meta::format_size(rec.size_bytes),
            block_size: rec.block_size,
            nqn: rec.nqn.clone(),
            uuid: rec.uuid_string(),
            protection: state.protection.clone(),
            owner: owner.as_ref().map(|o| o.node.0),
            owner_name: owner_rec.map(|n| n.name.clone()),
            address: owner_rec.filter(|_| served).map(|n| n.listen.to_string()),
            epoch: state.epoch,
            replicas: ids(&mut all.iter()),
            in_sync: ids(&mut state.in_sync.iter()),
            state: state_of,
            allocated_bytes: volume_allocated(live.values(), rec.id, protection),
            map_epoch: state.map_epoch,
            moving_to: state.next.as_ref().map(|n| n.map_epoch),
            joining: ids(&mut next_holders.difference(&all)),
            down: ids(&mut down.iter()),
            waiting_for: waiting.map(|g| ids(&mut g.iter().filter(|n| !live.contains_key(n)))),
            resync: resync
                .iter()
                .map(|r| FillStatus {
                    node: r.node.0,
                    kind: if r.filling { FillKind::Rebuild } else { FillKind::Resync },
                    regions_left: r.regions_left,
                    bytes_left: r.bytes_left,
                    bytes_total: r.bytes_total.max(r.bytes_left),
                    rate_bytes_per_sec: rate,
                    eta_secs: (rate > 0).then(|| r.bytes_left.div_ceil(rate)),
                })
                .collect(),
        }
    }
}

/// The notes the in-sync nodes of a volume keep for its owners, from
/// `handles` at the new owner's epoch (within a few seconds; a node that
/// does not answer is left out, and its replica with it, at the fence).
async fn load_notes(handles: &Members, membership: &strata_pool::Membership) -> Vec<(NodeId, Vec<u8>)> {
    let list = handles.as_replicas();
    let epoch = membership.epoch;
    let loads = list.iter().filter(|h| membership.in_sync.contains(&h.node())).map(|h| async move {
        match tokio::time::timeout(Duration::from_secs(3), h.load_note(epoch)).await {
            Ok(Ok(note)) => Some((h.node(), note)),
            _ => None,
        }
    });
    futures_util::future::join_all(loads).await.into_iter().flatten().collect()
}

/// The nodes an owner brings up to date: stale nodes that are alive, and
/// in-sync nodes being filled (those with regions missed). A stale node
/// is resynced even when it misses no region: one whose regions were all
/// copied but whose final flush failed (it was still restarting) has yet
/// to be flushed and rejoin, or it would stay stale for good.
fn behind(
    missed: BTreeMap<NodeId, strata_pool::RegionSet>,
    live: &BTreeSet<NodeId>,
    in_sync: &BTreeSet<NodeId>,
) -> Vec<NodeId> {
    missed
        .into_iter()
        .filter(|(n, s)| live.contains(n) && (!s.is_empty() || !in_sync.contains(n)))
        .map(|(n, _)| n)
        .collect()
}

/// A change the pool map refused, as the error of an update of it.
fn map_refused(e: strata_pool::placement::MapError) -> strata_pool::cluster::ClusterError {
    strata_pool::cluster::ClusterError::Corrupt { key: "pool/map".into(), reason: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_larger_than_the_pool_or_a_node_store_can_hold_is_refused_with_the_limit() {
        use strata_pool::placement::{FailureDomain, Node};
        // Six nodes of 1 GiB, one per rack.
        let nodes = (0..6).map(|i| Node::new(i, format!("n{i}"), 1 << 30).with_label("rack", format!("r{i}")));
        let wide = Protection::erasure_coded(8, 4).unwrap();
        let map = PlacementMap::new(wide, FailureDomain::default(), 64, nodes.collect()).unwrap();
        let ec = Protection::erasure_coded(4, 2).unwrap();
        let rep3 = Protection::replicated(3).unwrap();
        let node_max = 256 << 40;
        // 6 GiB raw: ec:4+2 holds 4 GiB, rep:3 2 GiB.
        assert!(check_size(4 << 30, ec, node_max, &map).is_ok());
        let e = check_size((4 << 30) + 4096, ec, node_max, &map).unwrap_err().to_string();
        assert!(e.contains("more than the pool can ever hold as ec:4+2: 4 GiB"), "{e}");
        assert!(check_size(2 << 30, rep3, node_max, &map).is_ok());
        assert!(check_size(3 << 30, rep3, node_max, &map).is_err());
        // 1 EiB: beyond what a node's store opens, named.
        let e = check_size(1 << 60, rep3, node_max, &map).unwrap_err().to_string();
        assert!(e.contains("can be at most 256 TiB") && e.contains("a whole copy"), "{e}");
        let e = check_size(1 << 60, ec, node_max, &map).unwrap_err().to_string();
        assert!(e.contains("can be at most 1 PiB") && e.contains("1/4"), "{e}");
    }

    #[test]
    fn a_stale_node_is_resynced_even_when_it_misses_no_region() {
        let n = NodeId;
        let regions = |rs: &[u64]| {
            let mut s = strata_pool::RegionSet::new();
            for &r in rs {
                s.insert(r);
            }
            s
        };
        let missed = BTreeMap::from([
            (n(1), regions(&[3, 4])), // stale, behind
            (n(2), regions(&[])),     // stale, all copied, not yet rejoined
            (n(3), regions(&[])),     // in sync, filled
            (n(4), regions(&[7])),    // in sync, being filled
            (n(5), regions(&[1])),    // stale but not alive
        ]);
        let live = BTreeSet::from([n(1), n(2), n(3), n(4)]);
        let in_sync = BTreeSet::from([n(3), n(4)]);
        assert_eq!(behind(missed, &live, &in_sync), vec![n(1), n(2), n(4)]);
    }
}
