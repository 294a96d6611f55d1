//! A cluster node's start, in the order that keeps it safe: the data dir
//! locked and its identity checked against etcd before anything joins,
//! the listeners up before the node is registered, the node claimed under
//! its lease so that no second process runs it. `strata node` calls
//! [`start`] after reading its options; tests call it to run several
//! nodes in one process.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use strata_auth::{DhchapSecret, HashFn, HostKeys};
use strata_meta::etcd::{Compare, EtcdClient, EtcdConfig, Txn, TxnOp};
use strata_pool::NodeId;
use strata_pool::fabric::fabric_nqn;
use strata_pool::placement::{FailureDomain, Node};
use strata_pool::registry::{NodeClaim, NodeRecord, claim_node, join_map, register};
use strata_store::Store;
use strata_target::{PortRole, Subsystem, Target, TargetConfig};

use super::paths::proxy_nqn;
use super::{ClusterNode, ClusterParts, SettingsPatch, node_nqn};
use crate::config::ServeConfig;
use crate::identity::DirLock;

/// What a cluster node starts with (`strata node`'s merged options).
#[derive(Debug, Clone)]
pub struct NodeStart {
    /// The node's name, unique in the cluster.
    pub name: String,
    /// How to reach etcd.
    pub etcd: EtcdConfig,
    /// The cluster's key prefix in etcd.
    pub prefix: String,
    /// Failure-domain labels.
    pub labels: BTreeMap<String, String>,
    /// The failure domain a new pool spreads copies over.
    pub failure_domain: FailureDomain,
    /// The failure domain was asked for (not the default): a pool whose
    /// domain differs gets a warning.
    pub failure_domain_asked: bool,
    /// The internal fabric listener.
    pub fabric: SocketAddr,
    /// The node's lease TTL: how long after it dies its volumes move.
    pub lease_ttl: Duration,
    /// Accept labels that differ from the placement map's for this node.
    pub relabel: bool,
    /// The host side: listeners, HTTP address, drives, data dir.
    pub serve: ServeConfig,
    /// The pool settings a new cluster starts with.
    pub pool: SettingsPatch,
}

/// A started node: its reconcile loop is not running yet (see
/// [`ClusterNode::run`]).
pub struct StartedNode {
    /// The node.
    pub cluster: Arc<ClusterNode>,
    /// Its id in the cluster.
    pub id: NodeId,
    /// Where its HTTP API is to listen.
    pub http: SocketAddr,
    /// Its NVMe/TCP target (host, discovery and fabric listeners).
    pub target: Target,
    /// Its drives.
    pub store: Arc<Store>,
    /// Where other nodes reach its fabric listener.
    pub fabric: SocketAddr,
    /// How many nodes the placement map held when it joined.
    pub map_nodes: usize,
    /// Held while the node runs: one node per data dir.
    dir_lock: DirLock,
}

impl StartedNode {
    /// Stops serving hosts and peers and flushes the drives.
    ///
    /// # Errors
    ///
    /// The flush failed.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.target.shutdown(Duration::from_secs(5)).await;
        self.store.flush_all().await.context("flush at shutdown failed")?;
        drop(self.dir_lock);
        Ok(())
    }
}

/// Starts a cluster node: locks and opens its data dir and drives,
/// proves who it is to etcd, opens its listeners, joins the placement map
/// and registers under a new lease.
///
/// # Errors
///
/// Unreachable etcd, a data dir or drives that cannot be opened, a node
/// that may not join (another cluster's data dir, a name another process
/// runs, labels changed without `relabel`), listeners that cannot bind.
pub async fn start(s: NodeStart) -> anyhow::Result<StartedNode> {
    let NodeStart {
        name,
        etcd,
        prefix,
        labels,
        failure_domain,
        failure_domain_asked,
        fabric,
        lease_ttl,
        relabel,
        serve,
        pool,
    } = s;
    // Checked now: a bad [pool] table stops the node before it joins.
    pool.apply(&mut strata_pool::registry::PoolSettings::default())?;
    std::fs::create_dir_all(&serve.data_dir)
        .with_context(|| format!("cannot create data dir {}", serve.data_dir.display()))?;

    // One node per data dir, and a data dir that knows which node it is.
    let dir_lock = crate::identity::lock(&serve.data_dir)?;
    let etcd = EtcdClient::new(etcd);
    let meta =
        strata_meta::EtcdMetaStore::open(etcd.clone(), &prefix).await.context("cannot open the metadata in etcd")?;
    let store = crate::node::open_store(&serve, crate::node::drive_specs(&serve)?)?;
    let has_data = !store.volume_ids().is_empty();
    let identity = crate::identity::establish(&etcd, &prefix, &serve.data_dir, &name, has_data)
        .await
        .with_context(|| format!("node {name} cannot join the cluster"))?;
    let id = NodeId(identity.node_id);
    let capacity = store.stats().capacity_bytes;
    keeps_its_failure_domain(&etcd, &prefix, id, &name, &labels, relabel).await?;

    let fabric_secret = fabric_secret(&etcd, &prefix).await.context("reading the fabric's secret")?;
    let Listening { target, fabric: fabric_sub, proxy: proxy_sub, fabric_port } =
        serve_ports(id, &name, fabric, &serve, &fabric_secret).await?;

    let mut node = Node::new(id.0, name.clone(), capacity);
    node.labels = labels.clone();
    let map = join_map(&etcd, &prefix, node, failure_domain.clone()).await.context("cannot join the placement map")?;
    if failure_domain_asked && map.failure_domain() != &failure_domain {
        tracing::warn!(pool = %map.failure_domain(), asked = %failure_domain,
            "--failure-domain only sets the domain of a new pool; this pool's stays as it is: change it with \
             strata pool set --failure-domain");
    }
    let lease = etcd.lease_grant(lease_ttl).await.context("cannot get a lease")?;
    // While this node's lease lives, no other process may run it.
    if let NodeClaim::Taken { instance } = claim_node(&etcd, &prefix, id, identity.instance, lease.id).await? {
        return Err(crate::identity::IdentityError::Running { name: name.clone(), id: id.0, instance }.into());
    }
    let listen = *serve.listen.first().context("a node needs an I/O listener")?;
    let me = first_record(id, name, fabric_port.addr, listen, labels, capacity, reachable(serve.http, listen.ip()))?;
    register(&etcd, &prefix, &me, lease.id).await?;
    let keeper = etcd.keep_alive(lease);
    let cluster = ClusterNode::new(ClusterParts {
        me,
        prefix,
        etcd,
        meta: Arc::new(meta),
        store: store.clone(),
        target: target.clone(),
        fabric: fabric_sub,
        proxy: proxy_sub,
        lease: keeper,
        discovery: serve.discovery.first().copied(),
        identity,
        data_dir: serve.data_dir.clone(),
        fabric_secret,
    });
    cluster.seed_settings(pool).await.context("the config file's [pool] settings")?;
    Ok(StartedNode {
        cluster,
        id,
        http: serve.http,
        target,
        store,
        fabric: fabric_port.addr,
        map_nodes: map.nodes().len(),
        dir_lock,
    })
}

/// Refuses a start that would move node `id` to another failure domain
/// (which moves its data) unless `relabel` asks for it.
async fn keeps_its_failure_domain(
    etcd: &EtcdClient,
    prefix: &str,
    id: NodeId,
    name: &str,
    labels: &BTreeMap<String, String>,
    relabel: bool,
) -> anyhow::Result<()> {
    if let Some((map, _)) = strata_pool::registry::current_map(etcd, prefix).await?
        && let Some(n) = map.node(id)
        && &n.labels != labels
        && !relabel
    {
        let show = |l: &BTreeMap<String, String>| {
            let v: Vec<String> = l.iter().map(|(k, v)| format!("{k}={v}")).collect();
            if v.is_empty() { "none".to_string() } else { v.join(",") }
        };
        anyhow::bail!(
            "node {name}'s labels in the placement map are {}, and this start gives {}: moving a node to another \
             failure domain moves its data; pass --relabel to do it, or start it with its labels",
            show(&n.labels),
            show(labels)
        );
    }
    Ok(())
}

/// The target of a node and what it serves before it joins: its fabric
/// and proxy subsystems (only itself may reach them until the first
/// reconcile lists the other nodes) and its listeners.
struct Listening {
    target: Target,
    fabric: Arc<Subsystem>,
    proxy: Arc<Subsystem>,
    fabric_port: strata_target::Port,
}

/// The cluster's fabric secret: made by the first node to start, kept in
/// etcd (`PREFIX/pool/fabric-dhchap-secret`), the same for every node.
/// Nodes prove it to each other with DH-HMAC-CHAP, both ways, on every
/// fabric and proxy queue: a host that claims a node's NQN cannot connect
/// (and so cannot send fenced commands), nor can an impostor node serve.
async fn fabric_secret(etcd: &EtcdClient, prefix: &str) -> anyhow::Result<DhchapSecret> {
    let key = format!("{prefix}pool/fabric-dhchap-secret").into_bytes();
    let fresh = DhchapSecret::generate(Some(HashFn::Sha256)).to_interchange();
    // Whoever comes first writes it; everyone reads what is there.
    let txn = Txn {
        compare: vec![Compare::missing(key.clone())],
        success: vec![TxnOp::Put { key: key.clone(), value: fresh.into_bytes(), lease: None }],
        failure: vec![],
    };
    let made = etcd.txn(&txn).await?.succeeded;
    let kv = etcd.get(&key).await?.context("the fabric secret vanished from etcd")?;
    let text = String::from_utf8(kv.value).context("the fabric secret in etcd is not text")?;
    let secret = DhchapSecret::parse(&text).context("the fabric secret in etcd")?;
    if made {
        tracing::info!("made the cluster's fabric secret (nodes authenticate each other with DH-HMAC-CHAP)");
    }
    Ok(secret)
}

/// The target's keys for a fabric peer: the fabric secret, both ways.
fn fabric_keys(secret: &DhchapSecret) -> HostKeys {
    HostKeys::new(secret.clone(), Some(secret.clone()))
}

async fn serve_ports(
    id: NodeId,
    name: &str,
    fabric: SocketAddr,
    serve: &ServeConfig,
    secret: &DhchapSecret,
) -> anyhow::Result<Listening> {
    // A volume's subsystem comes and goes with ownership and paths: a
    // host reconnecting meanwhile is told to retry, not to give up.
    let target =
        Target::new(TargetConfig { cntlids: cntlid_range(id), retry_unknown_subsystems: true, ..serve.target.clone() });
    target.set_fabric_keys(Some(fabric_keys(secret)));
    // Only the cluster's nodes may reach the replicas: this one until the
    // first reconcile lists them all (never any host).
    let fabric_sub = Subsystem::internal(fabric_nqn(name), format!("STRATAFAB{:011}", id.0), vec![node_nqn(name)]);
    target.add_subsystem(fabric_sub.clone())?;
    // The volumes this node owns, for the other nodes' paths to them.
    let proxy_sub = Subsystem::internal(proxy_nqn(name), format!("STRATAPRX{:011}", id.0), vec![node_nqn(name)]);
    target.add_subsystem(proxy_sub.clone())?;
    let fabric_port = target.listen(fabric, PortRole::Fabric).await?;
    for &a in &serve.listen {
        target.listen(a, PortRole::Io).await?;
    }
    for &a in &serve.discovery {
        target.listen(a, PortRole::Discovery).await?;
    }
    Ok(Listening { target, fabric: fabric_sub, proxy: proxy_sub, fabric_port })
}

/// This node's record as it first registers it.
fn first_record(
    id: NodeId,
    name: String,
    fabric: SocketAddr,
    listen: SocketAddr,
    labels: BTreeMap<String, String>,
    capacity_bytes: u64,
    api: SocketAddr,
) -> anyhow::Result<NodeRecord> {
    let mut incarnation = [0u8; 8];
    getrandom::fill(&mut incarnation).map_err(|e| anyhow::anyhow!("random: {e}"))?;
    Ok(NodeRecord {
        id,
        name,
        fabric,
        listen,
        labels,
        capacity_bytes,
        allocated_bytes: 0,
        incarnation: u64::from_le_bytes(incarnation),
        held: Vec::new(),
        serving: Vec::new(),
        resyncing: Vec::new(),
        drives: Vec::new(),
        held_bytes: BTreeMap::new(),
        rebuild_bytes_per_sec: 0,
        api: Some(api),
    })
}

/// How many nodes give out controller IDs from ranges of their own.
const CNTLID_RANGES: u32 = 64;
/// Controller IDs in each node's range.
const CNTLID_RANGE_WIDTH: u16 = 1023;

/// The controller IDs node `id` gives out: one of 64 ranges of 1023, by
/// its id, so that the paths a host holds to one volume through different
/// nodes never share an ID (Linux refuses a path whose ID another path of
/// the subsystem has). IDs are unique per subsystem, so a range bounds the
/// controllers of one volume on one node, not of the node; nodes whose ids
/// are 64 apart share a range.
pub fn cntlid_range(id: NodeId) -> std::ops::RangeInclusive<u16> {
    let slot = (id.0.saturating_sub(1) % CNTLID_RANGES) as u16;
    slot * CNTLID_RANGE_WIDTH + 1..=(slot + 1) * CNTLID_RANGE_WIDTH
}

/// `addr` as another node reaches it: an unspecified address (listen on
/// every interface) becomes `ip`, the address hosts reach this node at.
fn reachable(addr: SocketAddr, ip: std::net::IpAddr) -> SocketAddr {
    if addr.ip().is_unspecified() && !ip.is_unspecified() { SocketAddr::new(ip, addr.port()) } else { addr }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_give_out_controller_ids_from_disjoint_ranges_within_the_dynamic_ones() {
        let ranges: Vec<_> = (1..=CNTLID_RANGES).map(|i| cntlid_range(NodeId(i))).collect();
        for (i, r) in ranges.iter().enumerate() {
            assert!(strata_target::CNTLIDS.contains(r.start()) && strata_target::CNTLIDS.contains(r.end()), "{r:?}");
            assert_eq!(r.len(), usize::from(CNTLID_RANGE_WIDTH));
            for other in &ranges[i + 1..] {
                assert!(r.end() < other.start(), "{r:?} overlaps {other:?}");
            }
        }
        assert_eq!(cntlid_range(NodeId(CNTLID_RANGES + 1)), cntlid_range(NodeId(1)));
        assert_eq!(cntlid_range(NodeId(0)), cntlid_range(NodeId(1)), "no id 0, but no panic either");
    }
}
