//! Storage nodes in etcd: stable ids, live registrations under leases, and
//! the versioned placement map they join.
//!
//! Keys, under the cluster's prefix:
//!
//! | key | value | lease |
//! |---|---|---|
//! | `pool/cluster` | [`ClusterId`] as JSON: the cluster's identity | none (written once) |
//! | `pool/node-names/<name>` | the node's id, decimal | none (ids are never reused) |
//! | `pool/next-node-id` | the next id to hand out, decimal | none |
//! | `pool/instances/<id>` | the data dir instance running node `<id>`, decimal | the node's |
//! | `pool/nodes/<id>` | [`NodeRecord`] as JSON | the node's: gone when it dies |
//! | `pool/map` | the current [`PlacementMap`] as JSON | none |
//! | `pool/maps/<epoch>` | the map as it was at that epoch | none |
//!
//! A volume is placed by the map of the epoch it was created at, which is
//! why every epoch is kept: a node joining changes where new volumes go,
//! never where existing chunks are (moving them is rebalancing).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use strata_meta::etcd::{Compare, EtcdClient, KeyRange, LeaseId, Txn, TxnOp};

use crate::cluster::ClusterError;
use crate::drl::NodeId;
use crate::placement::{FailureDomain, Node, NodeState, PlacementMap, Protection};

/// Placement groups of a new cluster's map. Fixed for the map's life (a
/// different count would move every chunk); 4096 gives each of up to about
/// 120 nodes at least 100 group copies at rep:3.
pub const DEFAULT_PG_COUNT: u32 = 4096;

/// The slots of a new cluster's placement map, written as the widest
/// `ec:K+M` it serves: 12 ordered nodes per group, enough for `rep:1` to
/// `rep:8` and erasure codes up to 12 shards (`ec:8+4`, `ec:10+2`).
pub const MAP_SLOTS: (u8, u8) = (8, 4);

/// How many times a compare-and-set is retried under contention.
const MAX_ATTEMPTS: u32 = 16;

/// A live node, as it registers itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Stable id.
    pub id: NodeId,
    /// Name, unique in the cluster.
    pub name: String,
    /// Where other nodes reach its fabric listener.
    pub fabric: SocketAddr,
    /// Where hosts reach its NVMe/TCP listener.
    pub listen: SocketAddr,
    /// Failure-domain labels.
    pub labels: BTreeMap<String, String>,
    /// Raw capacity of its drives, bytes.
    pub capacity_bytes: u64,
    /// Bytes allocated on its drives.
    pub allocated_bytes: u64,
    /// Random at each start: a new value means the process restarted.
    pub incarnation: u64,
    /// Volumes whose replica it holds and serves on its fabric listener.
    #[serde(default)]
    pub held: Vec<u64>,
    /// Volumes it owns and serves to hosts now.
    #[serde(default)]
    pub serving: Vec<u64>,
    /// Replicas it is resyncing, as the owner of their volumes.
    #[serde(default)]
    pub resyncing: Vec<ResyncProgress>,
    /// Its drives.
    #[serde(default)]
    pub drives: Vec<DriveRecord>,
    /// Bytes each replica it holds allocates, by volume id.
    #[serde(default)]
    pub held_bytes: BTreeMap<u64, u64>,
    /// Bytes per second its owned volumes copied or decoded onto nodes
    /// that missed them, lately (resync, rebuild, moves).
    #[serde(default)]
    pub rebuild_bytes_per_sec: u64,
    /// Where its HTTP API listens, for the requests another node passes
    /// on to the owner of a volume (a volume check).
    #[serde(default)]
    pub api: Option<SocketAddr>,
}

/// Bytes one copy of volume `id` allocates: what its holders among `nodes`
/// allocate for it, over `copies`.
pub fn volume_allocated<'a>(nodes: impl IntoIterator<Item = &'a NodeRecord>, id: u64, protection: Protection) -> u64 {
    let total: u64 = nodes.into_iter().filter_map(|n| n.held_bytes.get(&id)).sum();
    // Every node holds a copy (rep) or a shard (ec): data is total x K / width.
    let (data, width) = (protection.data_shards() as u64, protection.width().max(1) as u64);
    u64::try_from(u128::from(total) * u128::from(data) / u128::from(width)).unwrap_or(u64::MAX)
}

/// One drive of a node, as its record shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriveRecord {
    /// Device or file path.
    pub path: String,
    /// Raw capacity, bytes.
    pub capacity_bytes: u64,
    /// Bytes allocated.
    pub allocated_bytes: u64,
    /// Taken out of service after an I/O error.
    pub failed: bool,
}

/// A stale replica an owner is copying back, as its node record shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResyncProgress {
    /// The volume.
    pub volume: u64,
    /// The node being resynced.
    pub node: NodeId,
    /// Regions it still misses.
    pub regions_left: u64,
    /// Bytes it still misses.
    #[serde(default)]
    pub bytes_left: u64,
    /// Bytes it missed when the owner began filling it (the most it has
    /// missed since), for the share done.
    #[serde(default)]
    pub bytes_total: u64,
    /// In sync, being filled with chunks it joined in a move (rebuild,
    /// drain, rebalance), rather than stale and being caught up.
    #[serde(default)]
    pub filling: bool,
}

/// The pool's settings, under `pool/settings`, changed live with
/// `strata pool set` and read by every node at each reconcile pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PoolSettings {
    /// How long a node may stay down before its copies and shards are
    /// rebuilt on other nodes, seconds.
    pub rebuild_grace_secs: u64,
    /// Bandwidth each node gives rebuilds, resyncs and moves, MB/s (0: no
    /// limit).
    pub rebuild_mbps: u64,
    /// Fill of the pool (percent of raw capacity allocated) past which a
    /// warning is raised, in rising order.
    pub fill_warn_percent: Vec<u8>,
    /// The protection whose copies the balancer evens out over the nodes:
    /// the map lists 12 nodes a group, and a volume uses the first
    /// `width` of them, so the balancer counts the first `width` (that of
    /// the protection holding most of the pool's data).
    pub balance_for: Protection,
}

impl Default for PoolSettings {
    fn default() -> PoolSettings {
        PoolSettings {
            rebuild_grace_secs: 300,
            rebuild_mbps: 200,
            fill_warn_percent: vec![75, 85, 95],
            balance_for: Protection::default(),
        }
    }
}

impl PoolSettings {
    /// The rebuild bandwidth in bytes per second (0: no limit).
    pub fn rebuild_bytes_per_sec(&self) -> u64 {
        self.rebuild_mbps.saturating_mul(1_000_000)
    }
}

/// The pool's settings (the defaults when none were set).
///
/// # Errors
///
/// etcd errors, a value that does not decode.
pub async fn settings(client: &EtcdClient, prefix: &str) -> Result<PoolSettings, ClusterError> {
    let k = key(prefix, "settings");
    match client.get(&k).await? {
        None => Ok(PoolSettings::default()),
        Some(kv) => json(&k, &kv.value),
    }
}

/// Stores `s` as the pool's settings if it has none yet; true if stored.
///
/// # Errors
///
/// etcd errors.
pub async fn init_settings(client: &EtcdClient, prefix: &str, s: &PoolSettings) -> Result<bool, ClusterError> {
    let k = key(prefix, "settings");
    let txn = Txn {
        compare: vec![Compare::mod_revision_is(k.clone(), 0)],
        success: vec![TxnOp::Put { key: k, value: serde_json::to_vec(s).unwrap_or_default(), lease: None }],
        failure: vec![],
    };
    Ok(client.txn(&txn).await?.succeeded)
}

/// Stores the pool's settings.
///
/// # Errors
///
/// etcd errors.
pub async fn set_settings(client: &EtcdClient, prefix: &str, s: &PoolSettings) -> Result<(), ClusterError> {
    client.put(&key(prefix, "settings"), &serde_json::to_vec(s).unwrap_or_default(), None).await?;
    Ok(())
}

/// Changes the current placement map with `change` and stores it as a new
/// epoch, by compare-and-set; `change` returns `Ok(false)` for a map that
/// needs no change (nothing is written). Returns the map as stored.
///
/// # Errors
///
/// What `change` returns, etcd errors, [`ClusterError::NotFound`] when the
/// cluster has no map, [`ClusterError::Contention`].
pub async fn update_map(
    client: &EtcdClient,
    prefix: &str,
    change: impl Fn(&PlacementMap) -> Result<Option<PlacementMap>, ClusterError>,
) -> Result<PlacementMap, ClusterError> {
    for _ in 0..MAX_ATTEMPTS {
        let (map, rev) = current_map(client, prefix).await?.ok_or(ClusterError::NotFound(0))?;
        let Some(next) = change(&map)? else { return Ok(map) };
        let mut next = balanced(&map, next, &settings(client, prefix).await?)?;
        if next.nodes() == map.nodes() && next.remaps() == map.remaps() && next.failure_domain() == map.failure_domain()
        {
            return Ok(map); // the change changed nothing
        }
        next.set_epoch(map.epoch() + 1);
        if store_map(client, prefix, &next, rev).await? {
            return Ok(next);
        }
    }
    Err(ClusterError::Contention(0))
}

fn key(prefix: &str, rest: impl std::fmt::Display) -> Vec<u8> {
    format!("{prefix}pool/{rest}").into_bytes()
}

fn decimal(key: &[u8], v: &[u8]) -> Result<u64, ClusterError> {
    std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()).ok_or_else(|| ClusterError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: "not a decimal number".into(),
    })
}

fn json<T: serde::de::DeserializeOwned>(key: &[u8], v: &[u8]) -> Result<T, ClusterError> {
    serde_json::from_slice(v)
        .map_err(|e| ClusterError::Corrupt { key: String::from_utf8_lossy(key).into_owned(), reason: e.to_string() })
}

/// The identity of a cluster: created once by its first node, and kept in
/// every node's data dir, so that a node never joins another cluster (or
/// an etcd that was wiped and created again) with what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterId {
    /// Random, 32 hex digits.
    pub id: String,
    /// When the cluster was created, Unix seconds.
    pub created_unix: u64,
}

/// The cluster's identity, if it has one yet.
///
/// # Errors
///
/// etcd errors, a value that does not decode.
pub async fn cluster_id(client: &EtcdClient, prefix: &str) -> Result<Option<ClusterId>, ClusterError> {
    let k = key(prefix, "cluster");
    match client.get(&k).await? {
        None => Ok(None),
        Some(kv) => json(&k, &kv.value).map(Some),
    }
}

/// Stores `id` as the cluster's identity unless it has one; returns the
/// one stored (`id`, or the one another node stored first).
///
/// # Errors
///
/// etcd errors, [`ClusterError::Contention`].
pub async fn create_cluster_id(client: &EtcdClient, prefix: &str, id: &ClusterId) -> Result<ClusterId, ClusterError> {
    let k = key(prefix, "cluster");
    let txn = Txn {
        compare: vec![Compare::missing(k.clone())],
        success: vec![TxnOp::Put { key: k, value: serde_json::to_vec(id).unwrap_or_default(), lease: None }],
        failure: vec![],
    };
    if client.txn(&txn).await?.succeeded {
        return Ok(id.clone());
    }
    cluster_id(client, prefix).await?.ok_or(ClusterError::Contention(0))
}

/// The id etcd gives the node called `name`, if it has one.
///
/// # Errors
///
/// etcd errors, corrupt values.
pub async fn existing_node_id(client: &EtcdClient, prefix: &str, name: &str) -> Result<Option<NodeId>, ClusterError> {
    let name_key = key(prefix, format!("node-names/{name}"));
    match client.get(&name_key).await? {
        None => Ok(None),
        Some(kv) => {
            let id = decimal(&name_key, &kv.value)?;
            u32::try_from(id).map(|i| Some(NodeId(i))).map_err(|_| ClusterError::Corrupt {
                key: String::from_utf8_lossy(&name_key).into_owned(),
                reason: "id out of range".into(),
            })
        }
    }
}

/// Who runs node `id` now, as [`claim_node`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeClaim {
    /// This process: the claim is held under its lease.
    Ours,
    /// Another process (another data dir instance) runs the node while
    /// its lease lives.
    Taken {
        /// That instance.
        instance: u64,
    },
}

/// Claims node `id` for the data dir `instance` under `lease`: granted
/// when no live process runs it, or when the one that does is this data
/// dir's (a restart of the same node, whose old lease has not ended yet).
/// A second node started with the same name and another data dir is
/// refused while the first one's lease lives.
///
/// # Errors
///
/// etcd errors, corrupt values, [`ClusterError::Contention`].
pub async fn claim_node(
    client: &EtcdClient,
    prefix: &str,
    id: NodeId,
    instance: u64,
    lease: LeaseId,
) -> Result<NodeClaim, ClusterError> {
    let k = key(prefix, format!("instances/{}", id.0));
    let mine = instance.to_string().into_bytes();
    for _ in 0..MAX_ATTEMPTS {
        let current = client.get(&k).await?;
        let compare = match &current {
            None => Compare::missing(k.clone()),
            Some(kv) if kv.value == mine => Compare::value_is(k.clone(), mine.clone()),
            Some(kv) => return Ok(NodeClaim::Taken { instance: decimal(&k, &kv.value)? }),
        };
        let txn = Txn {
            compare: vec![compare],
            success: vec![TxnOp::Put { key: k.clone(), value: mine.clone(), lease: Some(lease) }],
            failure: vec![],
        };
        if client.txn(&txn).await?.succeeded {
            return Ok(NodeClaim::Ours);
        }
    }
    Err(ClusterError::Contention(0))
}

/// The id of the node called `name`, handed out the first time it asks
/// and the same ever after.
///
/// # Errors
///
/// etcd errors, corrupt values, [`ClusterError::Contention`].
pub async fn node_id(client: &EtcdClient, prefix: &str, name: &str) -> Result<NodeId, ClusterError> {
    let name_key = key(prefix, format!("node-names/{name}"));
    let counter = key(prefix, "next-node-id");
    for _ in 0..MAX_ATTEMPTS {
        if let Some(kv) = client.get(&name_key).await? {
            let id = decimal(&name_key, &kv.value)?;
            return u32::try_from(id).map(NodeId).map_err(|_| ClusterError::Corrupt {
                key: String::from_utf8_lossy(&name_key).into_owned(),
                reason: "id out of range".into(),
            });
        }
        let (next, rev) = match client.get(&counter).await? {
            Some(kv) => (decimal(&counter, &kv.value)?, kv.mod_revision),
            None => (1, 0),
        };
        let txn = Txn {
            compare: vec![Compare::missing(name_key.clone()), Compare::mod_revision_is(counter.clone(), rev)],
            success: vec![
                TxnOp::Put { key: counter.clone(), value: (next + 1).to_string().into_bytes(), lease: None },
                TxnOp::Put { key: name_key.clone(), value: next.to_string().into_bytes(), lease: None },
            ],
            failure: vec![],
        };
        if client.txn(&txn).await?.succeeded {
            return u32::try_from(next).map(NodeId).map_err(|_| ClusterError::Contention(0));
        }
    }
    Err(ClusterError::Contention(0))
}

/// Registers (or refreshes) `rec` under the node's `lease`.
///
/// # Errors
///
/// etcd errors.
pub async fn register(client: &EtcdClient, prefix: &str, rec: &NodeRecord, lease: LeaseId) -> Result<(), ClusterError> {
    let value = serde_json::to_vec(rec).unwrap_or_default();
    let k = key(prefix, format!("nodes/{}", rec.id.0));
    client.put(&k, &value, Some(lease)).await?;
    Ok(())
}

/// Every node registered now (alive: its lease holds).
///
/// # Errors
///
/// etcd errors, corrupt records.
pub async fn live_nodes(client: &EtcdClient, prefix: &str) -> Result<Vec<NodeRecord>, ClusterError> {
    let r = client.range(&KeyRange::prefix(key(prefix, "nodes/"))).await?;
    r.kvs.iter().map(|kv| json(&kv.key, &kv.value)).collect()
}

/// The current placement map, if the cluster has one, with its revision.
///
/// # Errors
///
/// etcd errors, a map that does not decode.
pub async fn current_map(client: &EtcdClient, prefix: &str) -> Result<Option<(PlacementMap, i64)>, ClusterError> {
    let k = key(prefix, "map");
    match client.get(&k).await? {
        None => Ok(None),
        Some(kv) => Ok(Some((json(&k, &kv.value)?, kv.mod_revision))),
    }
}

/// The map as it was at `epoch`.
///
/// # Errors
///
/// [`ClusterError::NotFound`] (with the epoch) when no map has that epoch;
/// etcd errors; a map that does not decode.
pub async fn map_at(client: &EtcdClient, prefix: &str, epoch: u64) -> Result<PlacementMap, ClusterError> {
    let k = key(prefix, format!("maps/{epoch}"));
    let kv = client.get(&k).await?.ok_or(ClusterError::NotFound(epoch))?;
    json(&k, &kv.value)
}

/// Puts `node` in the placement map (creating the map for the first node,
/// with `failure_domain`), or updates its weight and labels, bumping the
/// epoch; returns the map that holds it. A node already in the map as it
/// is changes nothing.
///
/// # Errors
///
/// etcd errors, [`ClusterError::Contention`], a map the node cannot join
/// ([`ClusterError::Corrupt`] with the reason, e.g. a name another id
/// has).
pub async fn join_map(
    client: &EtcdClient,
    prefix: &str,
    node: Node,
    failure_domain: FailureDomain,
) -> Result<PlacementMap, ClusterError> {
    let map_key = key(prefix, "map");
    let invalid = |e: crate::placement::MapError| ClusterError::Corrupt {
        key: String::from_utf8_lossy(&map_key).into_owned(),
        reason: e.to_string(),
    };
    for _ in 0..MAX_ATTEMPTS {
        let (map, rev) = match current_map(client, prefix).await? {
            Some((map, rev)) => {
                // A node marked down comes back up; a drained one stays out.
                let was = map.node(node.id);
                let state = match was.map(|n| n.state) {
                    Some(NodeState::Out) => NodeState::Out,
                    _ => NodeState::Up,
                };
                if was.is_some_and(|n| n.weight == node.weight && n.labels == node.labels && n.state == state) {
                    return Ok(map);
                }
                let mut nodes: Vec<Node> = map.nodes().iter().filter(|n| n.id != node.id).cloned().collect();
                nodes.push(Node { state, ..node.clone() });
                let next = PlacementMap::new(map.protection(), map.failure_domain().clone(), map.pg_count(), nodes)
                    .map_err(invalid)?;
                let mut next = balanced(&map, next, &settings(client, prefix).await?)?;
                next.set_epoch(map.epoch() + 1);
                (next, rev)
            }
            None => {
                // The map's width is how many ordered nodes each group
                // lists; a volume takes the first `width` of them (rep:N
                // the first N, ec:K+M the first K+M), so one map serves
                // every protection up to MAP_WIDTH.
                let protection = Protection::erasure_coded(MAP_SLOTS.0, MAP_SLOTS.1).map_err(|e| {
                    ClusterError::Corrupt { key: String::from_utf8_lossy(&map_key).into_owned(), reason: e.to_string() }
                })?;
                let map = PlacementMap::new(protection, failure_domain.clone(), DEFAULT_PG_COUNT, vec![node.clone()])
                    .map_err(invalid)?;
                (map, 0)
            }
        };
        if store_map(client, prefix, &map, rev).await? {
            return Ok(map);
        }
    }
    Err(ClusterError::Contention(0))
}

/// Rebalances the current map under the pool's settings (after a change of
/// [`PoolSettings::balance_for`]); a map already balanced stays as it is.
///
/// # Errors
///
/// As [`update_map`].
pub async fn rebalance(client: &EtcdClient, prefix: &str) -> Result<PlacementMap, ClusterError> {
    update_map(client, prefix, |m| Ok(Some(m.clone()))).await
}

/// `next` (the map after a change of `prev`) with the remaps that even out
/// the copies of `settings.balance_for` over its nodes, moving as little
/// of what `prev` placed as the balancer can.
fn balanced(
    prev: &PlacementMap,
    mut next: PlacementMap,
    settings: &PoolSettings,
) -> Result<PlacementMap, ClusterError> {
    use crate::placement::{BalanceOptions, Placer, balance};
    let before = Placer::new(prev).table();
    let opts = BalanceOptions { slots: settings.balance_for.width(), ..BalanceOptions::default() };
    let b = balance(&next, Some(&before), &opts);
    next.set_remaps(b.remaps).map_err(|e| ClusterError::Corrupt { key: "pool/map".into(), reason: e.to_string() })?;
    Ok(next)
}

/// Stores `map` as the current map and as its epoch's, if the current map
/// is still at revision `rev` (0: none yet); false when it is not.
async fn store_map(client: &EtcdClient, prefix: &str, map: &PlacementMap, rev: i64) -> Result<bool, ClusterError> {
    let map_key = key(prefix, "map");
    let value = serde_json::to_vec(map).unwrap_or_default();
    let txn = Txn {
        compare: vec![Compare::mod_revision_is(map_key.clone(), rev)],
        success: vec![
            TxnOp::Put { key: map_key, value: value.clone(), lease: None },
            TxnOp::Put { key: key(prefix, format!("maps/{}", map.epoch())), value, lease: None },
        ],
        failure: vec![],
    };
    Ok(client.txn(&txn).await?.succeeded)
}
