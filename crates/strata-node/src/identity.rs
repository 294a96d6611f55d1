//! Who a cluster node is: its name, id and cluster, kept in its data dir
//! (`node.json`, owner-only) and checked against etcd at every start and
//! every re-registration, so that
//!
//! - a node never joins another cluster, or an etcd that was wiped and
//!   created again, with the replicas its drives hold (their ids and
//!   epochs belong to the old cluster);
//! - a data dir holds one node: another name, or a second process on the
//!   same dir (`node.lock`, an exclusive `flock`), is refused;
//! - a name belongs to one node: a fresh data dir that claims the name of
//!   a node of the cluster is refused (it would take over that node's id
//!   and be trusted to hold its replicas, empty), and while a node's
//!   lease lives a second process with the same name is refused.
//!
//! The decision is a pure function ([`decide`]) of what the data dir and
//! etcd hold; the rest reads and writes them.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use strata_meta::etcd::EtcdClient;
use strata_pool::NodeId;
use strata_pool::placement::NodeState;
use strata_pool::registry::ClusterId;

/// The identity file's name in the data dir.
const FILE: &str = "node.json";
/// The lock file's name in the data dir.
const LOCK: &str = "node.lock";
/// The identity file's format; a newer one is refused, not guessed at.
const FORMAT: u32 = 1;

/// What a node's data dir says it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIdentity {
    /// [`FORMAT`].
    pub format: u32,
    /// The cluster it belongs to ([`ClusterId::id`]).
    pub cluster: String,
    /// Its id in that cluster.
    pub node_id: u32,
    /// Its name.
    pub name: String,
    /// Random, made with the file: tells this data dir's node from
    /// another process started with the same name.
    pub instance: u64,
}

/// Why a node may not start (or go on) as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// The data dir belongs to another node.
    #[error(
        "the data dir belongs to node {held} (id {id}), not {asked}: start it with --name {held}, or give {asked} a \
         data dir of its own"
    )]
    OtherName {
        /// The name the data dir holds.
        held: String,
        /// Its id.
        id: u32,
        /// The name asked for.
        asked: String,
    },
    /// The data dir belongs to another cluster than etcd's.
    #[error(
        "the data dir belongs to cluster {held}, but etcd holds cluster {etcd}: point --etcd (and --etcd-prefix) at \
         that cluster's etcd, or start with an empty data dir"
    )]
    OtherCluster {
        /// The data dir's cluster.
        held: String,
        /// etcd's.
        etcd: String,
    },
    /// etcd holds no cluster, but the data dir belongs to one.
    #[error(
        "the data dir belongs to cluster {held}, but etcd holds no cluster (a new or wiped etcd, or another \
         --etcd-prefix): restore that cluster's etcd, or start with an empty data dir"
    )]
    NoCluster {
        /// The data dir's cluster.
        held: String,
    },
    /// etcd gives the name another id than the data dir holds.
    #[error("etcd gives node {name} id {etcd}, but the data dir holds id {held}: this data dir is not that node's")]
    OtherId {
        /// The name.
        name: String,
        /// etcd's id.
        etcd: u32,
        /// The data dir's.
        held: u32,
    },
    /// A fresh data dir claims the name of a node of the cluster.
    #[error(
        "node {name} (id {id}) is already a node of this cluster, and this data dir does not hold its data: start \
         that node with its own data dir; to replace it, remove it (strata node remove {name}) and start the new one \
         under another name"
    )]
    NameTaken {
        /// The name.
        name: String,
        /// Its id.
        id: u32,
    },
    /// The node was removed from the cluster.
    #[error(
        "node {name} was removed from the cluster; its data dir is stale: start a new node with another name and an \
         empty data dir"
    )]
    Removed {
        /// The name.
        name: String,
    },
    /// Another process runs the node while its lease lives.
    #[error(
        "node {name} (id {id}) is already running (another process holds it, instance {instance:x}); stop it first, \
         or wait until its lease ends"
    )]
    Running {
        /// The name.
        name: String,
        /// Its id.
        id: u32,
        /// The other process's instance.
        instance: u64,
    },
}

/// What a start does, from what the data dir and etcd hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The node the data dir holds, again.
    Resume,
    /// A new node: get an id for the name (creating the cluster's
    /// identity first when etcd has none: the first node).
    Join {
        /// etcd holds no cluster yet.
        create_cluster: bool,
    },
    /// A data dir with replicas but no identity file, from a strata that
    /// kept none: it takes the id etcd gives its name (creating the
    /// cluster's identity when etcd has none, as that strata did not).
    Adopt {
        /// etcd holds no cluster identity yet.
        create_cluster: bool,
    },
}

/// Decides whether node `name` may start with the data dir identity
/// `held` (and a store that holds volume data, `has_data`), when etcd
/// holds cluster `etcd`, gives the name `name_id`, and the placement map
/// has the node in `state`.
///
/// # Errors
///
/// An [`IdentityError`] that says what is wrong and what to do.
pub fn decide(
    held: Option<&NodeIdentity>,
    has_data: bool,
    etcd: Option<&ClusterId>,
    name: &str,
    name_id: Option<NodeId>,
    state: Option<NodeState>,
) -> Result<Decision, IdentityError> {
    let removed = state == Some(NodeState::Removed);
    let Some(h) = held else {
        return match name_id {
            Some(_) if removed => Err(IdentityError::Removed { name: name.to_string() }),
            Some(_) if has_data => Ok(Decision::Adopt { create_cluster: etcd.is_none() }),
            Some(id) => Err(IdentityError::NameTaken { name: name.to_string(), id: id.0 }),
            None => Ok(Decision::Join { create_cluster: etcd.is_none() }),
        };
    };
    if h.name != name {
        return Err(IdentityError::OtherName { held: h.name.clone(), id: h.node_id, asked: name.to_string() });
    }
    match etcd {
        None => return Err(IdentityError::NoCluster { held: h.cluster.clone() }),
        Some(c) if h.cluster != c.id => {
            return Err(IdentityError::OtherCluster { held: h.cluster.clone(), etcd: c.id.clone() });
        }
        Some(_) => {}
    }
    match name_id {
        Some(id) if id.0 != h.node_id => {
            Err(IdentityError::OtherId { name: name.to_string(), etcd: id.0, held: h.node_id })
        }
        _ if removed => Err(IdentityError::Removed { name: name.to_string() }),
        _ => Ok(Decision::Resume),
    }
}

/// The identity file of `dir`, if there is one.
///
/// # Errors
///
/// A file that cannot be read, does not decode or has a newer format.
pub fn load(dir: &Path) -> anyhow::Result<Option<NodeIdentity>> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let id: NodeIdentity = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is damaged: not a node identity", path.display()))?;
    if id.format != FORMAT {
        anyhow::bail!(
            "{} has format {}, this strata reads {FORMAT}: a newer strata wrote it",
            path.display(),
            id.format
        );
    }
    Ok(Some(id))
}

/// Writes `id` as `dir`'s identity, durably (a new file renamed over the
/// old one, then the directory synced), readable by the owner only.
///
/// # Errors
///
/// File system errors.
pub fn save(dir: &Path, id: &NodeIdentity) -> anyhow::Result<()> {
    let path = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.new"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    f.write_all(&serde_json::to_vec_pretty(id)?)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// The exclusive lock of a node's data dir, held while the node runs
/// (released when dropped, or when the process dies).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Locks `dir` for this process.
///
/// # Errors
///
/// Another process holds the lock (another node runs on this data dir),
/// or the lock file cannot be opened.
pub fn lock(dir: &Path) -> anyhow::Result<DirLock> {
    let path = dir.join(LOCK);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    // SAFETY: flock takes a file descriptor this function owns (`file`
    // lives in the returned lock) and an integer flag; it touches no
    // memory of ours.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            anyhow::bail!("another strata node runs on the data dir {} (it holds {})", dir.display(), path.display());
        }
        return Err(e).with_context(|| format!("cannot lock {}", path.display()));
    }
    Ok(DirLock { _file: file })
}

/// A new random cluster identity.
///
/// # Errors
///
/// No random bytes.
pub fn new_cluster_id() -> anyhow::Result<ClusterId> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("random: {e}"))?;
    let created_unix =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    Ok(ClusterId { id: b.iter().map(|x| format!("{x:02x}")).collect(), created_unix })
}

/// A new random data dir instance.
///
/// # Errors
///
/// No random bytes.
pub fn new_instance() -> anyhow::Result<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("random: {e}"))?;
    Ok(u64::from_le_bytes(b))
}

/// Establishes who node `name` with data dir `dir` is in the cluster
/// under `prefix` of `etcd`: checks the data dir against etcd
/// ([`decide`]), creates the cluster or gets an id when it is new, and
/// writes the data dir's identity.
///
/// # Errors
///
/// [`IdentityError`]s (as `anyhow`), etcd and file errors.
pub async fn establish(
    etcd: &EtcdClient,
    prefix: &str,
    dir: &Path,
    name: &str,
    has_data: bool,
) -> anyhow::Result<NodeIdentity> {
    let held = load(dir)?;
    let cluster = strata_pool::registry::cluster_id(etcd, prefix).await.context("reading the cluster's identity")?;
    let name_id = strata_pool::registry::existing_node_id(etcd, prefix, name).await?;
    let state = match (name_id, strata_pool::registry::current_map(etcd, prefix).await?) {
        (Some(id), Some((map, _))) => map.node(id).map(|n| n.state),
        _ => None,
    };
    let create = match decide(held.as_ref(), has_data, cluster.as_ref(), name, name_id, state)? {
        Decision::Resume => {
            return held.context("a resumed node has an identity file");
        }
        Decision::Join { create_cluster } => create_cluster,
        Decision::Adopt { create_cluster } => {
            tracing::warn!(
                node = name,
                "the data dir holds replicas but no identity file (an older strata): adopting it"
            );
            create_cluster
        }
    };
    let cluster = match (create, cluster) {
        (false, Some(c)) => c,
        _ => {
            let c = strata_pool::registry::create_cluster_id(etcd, prefix, &new_cluster_id()?).await?;
            tracing::info!(cluster = %c.id, "the cluster's identity is stored");
            c
        }
    };
    let id = strata_pool::registry::node_id(etcd, prefix, name).await.context("cannot get the node's id")?;
    let identity = NodeIdentity {
        format: FORMAT,
        cluster: cluster.id,
        node_id: id.0,
        name: name.to_string(),
        instance: new_instance()?,
    };
    save(dir, &identity)?;
    tracing::info!(node = name, id = id.0, cluster = %identity.cluster, "joined the cluster");
    Ok(identity)
}

/// Checks, at a re-registration (a new lease after etcd was out of
/// reach), that etcd still holds this node's cluster and has not removed
/// it.
///
/// # Errors
///
/// [`IdentityError`]s (as `anyhow`) when the node must stop; etcd errors.
pub async fn still_member(etcd: &EtcdClient, prefix: &str, me: &NodeIdentity) -> anyhow::Result<()> {
    let cluster = strata_pool::registry::cluster_id(etcd, prefix).await?;
    let name_id = strata_pool::registry::existing_node_id(etcd, prefix, &me.name).await?;
    let state = match strata_pool::registry::current_map(etcd, prefix).await? {
        Some((map, _)) => map.node(NodeId(me.node_id)).map(|n| n.state),
        None => None,
    };
    decide(Some(me), true, cluster.as_ref(), &me.name, name_id, state)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> NodeIdentity {
        NodeIdentity { format: FORMAT, cluster: "c1".into(), node_id: 7, name: "n7".into(), instance: 42 }
    }

    fn cluster(id: &str) -> ClusterId {
        ClusterId { id: id.into(), created_unix: 0 }
    }

    #[test]
    fn a_node_resumes_only_as_itself_in_its_own_cluster() {
        let c1 = cluster("c1");
        let up = Some(NodeState::Up);
        let d = |held: Option<&NodeIdentity>, etcd: Option<&ClusterId>, name: &str, id: Option<u32>, state| {
            decide(held, true, etcd, name, id.map(NodeId), state)
        };
        assert_eq!(d(Some(&me()), Some(&c1), "n7", Some(7), up), Ok(Decision::Resume));
        assert!(matches!(
            d(Some(&me()), Some(&c1), "n8", None, None),
            Err(IdentityError::OtherName { ref held, .. }) if held == "n7"
        ));
        assert!(matches!(
            d(Some(&me()), Some(&cluster("c2")), "n7", Some(7), up),
            Err(IdentityError::OtherCluster { .. })
        ));
        // A wiped etcd: the node would register its cached id anew.
        assert!(matches!(d(Some(&me()), None, "n7", None, None), Err(IdentityError::NoCluster { .. })));
        assert!(matches!(
            d(Some(&me()), Some(&c1), "n7", Some(9), up),
            Err(IdentityError::OtherId { etcd: 9, held: 7, .. })
        ));
        assert!(matches!(
            d(Some(&me()), Some(&c1), "n7", Some(7), Some(NodeState::Removed)),
            Err(IdentityError::Removed { .. })
        ));
    }

    #[test]
    fn a_fresh_data_dir_creates_or_joins_but_never_takes_a_name_in_use() {
        let c1 = cluster("c1");
        assert_eq!(decide(None, false, None, "n1", None, None), Ok(Decision::Join { create_cluster: true }));
        assert_eq!(decide(None, false, Some(&c1), "n9", None, None), Ok(Decision::Join { create_cluster: false }));
        let e = decide(None, false, Some(&c1), "n7", Some(NodeId(7)), Some(NodeState::Up)).unwrap_err();
        assert!(matches!(e, IdentityError::NameTaken { id: 7, .. }));
        assert!(e.to_string().contains("strata node remove n7"), "{e}");
        assert!(matches!(
            decide(None, true, Some(&c1), "n7", Some(NodeId(7)), Some(NodeState::Removed)),
            Err(IdentityError::Removed { .. })
        ));
        // A data dir with replicas and no identity file (an older strata)
        // is adopted under its name's id.
        assert_eq!(
            decide(None, true, Some(&c1), "n7", Some(NodeId(7)), Some(NodeState::Up)),
            Ok(Decision::Adopt { create_cluster: false })
        );
        assert_eq!(decide(None, true, None, "n7", Some(NodeId(7)), None), Ok(Decision::Adopt { create_cluster: true }));
    }

    #[test]
    fn the_identity_file_round_trips_owner_only_and_a_second_lock_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
        save(dir.path(), &me()).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(me()));
        let mode = std::fs::metadata(dir.path().join(FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "readable by others: {mode:o}");
        std::fs::write(dir.path().join(FILE), b"{not json").unwrap();
        assert!(format!("{:#}", load(dir.path()).unwrap_err()).contains("damaged"));
        let held = lock(dir.path()).unwrap();
        let e = format!("{:#}", lock(dir.path()).unwrap_err());
        assert!(e.contains("another strata node runs on the data dir"), "{e}");
        drop(held);
        lock(dir.path()).expect("free again once the holder is gone");
    }
}
