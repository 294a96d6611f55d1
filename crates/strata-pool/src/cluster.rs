//! A replicated volume's state in etcd: its membership, its owner and its
//! dirty-region log, changed only by compare-and-set transactions.
//!
//! Keys, under the cluster's prefix (default `/strata/`):
//!
//! | key | value | lease |
//! |---|---|---|
//! | `pool/volumes/<id>` | [`VolumeState`] as JSON | none |
//! | `pool/owners/<id>` | [`OwnerToken`] as JSON | the owner node's |
//! | `pool/drl/<id>` | [`DrlState`](crate::drl::DrlState) bytes, [stamped](crate::drl::DrlState::encode_stamped) | none |
//!
//! # Invariants
//!
//! - The epoch in `pool/volumes/<id>` only grows; every change of owner or
//!   in-sync set bumps it, in the same transaction that checks the state
//!   is the one the caller read.
//! - Only the holder of `pool/owners/<id>` changes the membership or the
//!   log: every such transaction compares the owner key's value with the
//!   caller's token. When the owner's lease expires etcd deletes the key,
//!   and nothing the old owner sends after that is applied.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use strata_meta::etcd::{Compare, EtcdClient, EtcdError, KeyRange, LeaseId, Txn, TxnOp};

use crate::control::{Control, ControlError, ControlFuture, Membership};
use crate::drl::{DrlState, DrlStore, NodeId, NoteSink, SaveFuture, Stamp};
use crate::layout::NextLayout;
use crate::regions::Regions;
// Pure types that lived here; kept at their old paths for the node
// (crates/strata). New code imports them from `crate::layout`.
pub use crate::layout::{MovePlan, PlacementLayout};

/// How many times a transaction is retried when a concurrent change that
/// does not concern it (a size change, say) made it fail.
const MAX_ATTEMPTS: u32 = 8;

/// How long an owner keeps retrying a membership change or a save of the
/// dirty-region log while etcd does not answer (a leader election, a
/// stalled member) before failing the write that needs it. Below the
/// 30 s a Linux host waits for an I/O; an owner cut off for longer than
/// its lease stops serving anyway.
pub const METADATA_PATIENCE: std::time::Duration = std::time::Duration::from_secs(20);

/// Pause between two tries of an etcd request that got no answer.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a save of the dirty-region log tries etcd before it keeps the
/// log on the replicas instead ([`EtcdVolume::keep_notes_on`]): short, as
/// every write to a clean region waits for it.
pub const NOTE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// Once the log went to the replicas, how long each later save tries etcd
/// (it goes to the replicas as well, whatever etcd answers).
const ETCD_TRY_IN_OUTAGE: std::time::Duration = std::time::Duration::from_millis(500);

/// A replicated volume's membership as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeState {
    /// The protection, e.g. `rep:3`.
    pub protection: String,
    /// The placement map epoch the volume's chunks are placed by.
    pub map_epoch: u64,
    /// Bumped at each change of owner or in-sync set.
    pub epoch: u64,
    /// Nodes that hold every acknowledged write.
    pub in_sync: BTreeSet<NodeId>,
    /// Erasure-coded: the groups whose shard slots differ from the map's
    /// order, each with its nodes by slot (see [`PlacementLayout::moved_to`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub slots: BTreeMap<u32, Vec<NodeId>>,
    /// A move in progress: where the volume is going. Its nodes that join
    /// chunks take writes and are filled while the volume stays placed by
    /// `map_epoch` (the nodes that leave keep serving), then it switches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<NextLayout>,
    /// The node that took the volume over last (at `epoch`, unless the
    /// membership changed since): while it lives, it may take its owner
    /// key back after its lease ended, so others wait a moment before
    /// taking the volume over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<NodeId>,
    /// The node an owner that gave the volume up on purpose (a drain's
    /// hand-over, a rebalance) handed it to: while it lives, the other
    /// nodes let it take the volume over first. The takeover clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successor: Option<NodeId>,
}

impl VolumeState {
    /// The membership part.
    pub fn membership(&self) -> Membership {
        Membership { epoch: self.epoch, in_sync: self.in_sync.clone() }
    }
}

/// Who owns a volume, since which epoch. Its bytes are the token every
/// owner-only transaction compares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerToken {
    /// The owning node.
    pub node: NodeId,
    /// The epoch it took the volume over at.
    pub epoch: u64,
}

/// The keys of one volume.
#[derive(Debug, Clone)]
pub struct VolumeKeys {
    /// `pool/volumes/<id>`.
    pub state: Vec<u8>,
    /// `pool/owners/<id>`.
    pub owner: Vec<u8>,
    /// `pool/drl/<id>`.
    pub drl: Vec<u8>,
    /// `pool/reservations/<id>`: the hosts' reservations of the volume
    /// (`strata_target::reservation::Reservations::to_bytes`).
    pub reservations: Vec<u8>,
}

impl VolumeKeys {
    /// The keys of volume `id` under `prefix` (ends with `/`).
    pub fn new(prefix: &str, id: u64) -> VolumeKeys {
        VolumeKeys {
            state: format!("{prefix}pool/volumes/{id}").into_bytes(),
            owner: format!("{prefix}pool/owners/{id}").into_bytes(),
            drl: format!("{prefix}pool/drl/{id}").into_bytes(),
            reservations: format!("{prefix}pool/reservations/{id}").into_bytes(),
        }
    }
}

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// etcd failed or could not be reached.
    #[error("etcd: {0}")]
    Etcd(#[from] EtcdError),
    /// A stored value does not decode.
    #[error("{key}: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The volume has no pool state.
    #[error("volume {0} has no pool state")]
    NotFound(u64),
    /// Another node owns the volume.
    #[error("volume {volume} is owned by node {owner}")]
    Owned {
        /// The volume.
        volume: u64,
        /// Its owner.
        owner: NodeId,
    },
    /// The state changed under us too many times.
    #[error("volume {0}: too many concurrent changes")]
    Contention(u64),
}

fn corrupt(key: &[u8], e: impl std::fmt::Display) -> ClusterError {
    ClusterError::Corrupt { key: String::from_utf8_lossy(key).into_owned(), reason: e.to_string() }
}

/// Reads a volume's state and the revision it was read at.
///
/// # Errors
///
/// [`ClusterError::NotFound`], [`ClusterError::Corrupt`], etcd errors.
pub async fn read_state(client: &EtcdClient, keys: &VolumeKeys, id: u64) -> Result<(VolumeState, i64), ClusterError> {
    let kv = client.get(&keys.state).await?.ok_or(ClusterError::NotFound(id))?;
    let state = serde_json::from_slice(&kv.value).map_err(|e| corrupt(&keys.state, e))?;
    Ok((state, kv.mod_revision))
}

/// Writes the pool state of a new volume (no owner yet, epoch 0).
///
/// # Errors
///
/// [`ClusterError::Contention`] if the volume has a state already; etcd
/// errors.
pub async fn create_state(
    client: &EtcdClient,
    keys: &VolumeKeys,
    id: u64,
    state: &VolumeState,
) -> Result<(), ClusterError> {
    let txn = Txn {
        compare: vec![Compare::missing(keys.state.clone())],
        success: vec![TxnOp::Put { key: keys.state.clone(), value: to_json(state), lease: None }],
        failure: vec![],
    };
    if client.txn(&txn).await?.succeeded { Ok(()) } else { Err(ClusterError::Contention(id)) }
}

fn to_json<T: Serialize>(v: &T) -> Vec<u8> {
    // Serialising these plain structs cannot fail.
    serde_json::to_vec(v).unwrap_or_default()
}

/// Takes volume `id` over for node `me`: if nobody owns it, writes the
/// owner key under `lease` and bumps the epoch, in one transaction.
/// Returns the membership to open the volume at and the token.
///
/// # Errors
///
/// [`ClusterError::Owned`] when another node holds it; etcd errors.
pub async fn acquire(
    client: &EtcdClient,
    keys: &VolumeKeys,
    id: u64,
    me: NodeId,
    lease: LeaseId,
) -> Result<(Membership, OwnerToken), ClusterError> {
    for _ in 0..MAX_ATTEMPTS {
        if let Some(kv) = client.get(&keys.owner).await? {
            let owner: OwnerToken = serde_json::from_slice(&kv.value).map_err(|e| corrupt(&keys.owner, e))?;
            return Err(ClusterError::Owned { volume: id, owner: owner.node });
        }
        let (mut state, rev) = read_state(client, keys, id).await?;
        state.epoch += 1;
        state.owner = Some(me);
        state.successor = None;
        let token = OwnerToken { node: me, epoch: state.epoch };
        let txn = Txn {
            compare: vec![Compare::missing(keys.owner.clone()), Compare::mod_revision_is(keys.state.clone(), rev)],
            success: vec![
                TxnOp::Put { key: keys.owner.clone(), value: to_json(&token), lease: Some(lease) },
                TxnOp::Put { key: keys.state.clone(), value: to_json(&state), lease: None },
            ],
            failure: vec![],
        };
        if client.txn(&txn).await?.succeeded {
            return Ok((state.membership(), token));
        }
    }
    Err(ClusterError::Contention(id))
}

/// Takes volume `id` back for its owner `token` under a new `lease`,
/// after its owner key went with its old lease (etcd was out of reach for
/// longer than the lease, or frozen): granted only if nobody owns it and
/// its membership is still at `epoch`, the one the owner serves (a
/// takeover by another node bumps it). True when taken back; false when
/// another node owns it or its membership moved on.
///
/// A change of the volume's state that keeps its epoch (the owner's own
/// resync marking a node in sync) is not a reason to give it up: the
/// owner tries again.
///
/// With `held`, the owner key still holds `token` at that mod revision,
/// under a lease the owner lost (etcd came back with the old leases still
/// counting down): the key moves to `lease` now, rather than vanishing
/// when the old lease ends and leaving the volume without a listed owner
/// until the next pass takes it back.
///
/// # Errors
///
/// etcd errors, [`ClusterError::Contention`].
pub async fn reclaim(
    client: &EtcdClient,
    keys: &VolumeKeys,
    id: u64,
    token: &OwnerToken,
    epoch: u64,
    lease: LeaseId,
    held: Option<i64>,
) -> Result<bool, ClusterError> {
    let owner_is = || match held {
        Some(rev) => Compare::mod_revision_is(keys.owner.clone(), rev),
        None => Compare::missing(keys.owner.clone()),
    };
    for _ in 0..MAX_ATTEMPTS {
        let (state, rev) = read_state(client, keys, id).await?;
        if state.epoch != epoch {
            return Ok(false);
        }
        let txn = Txn {
            compare: vec![owner_is(), Compare::mod_revision_is(keys.state.clone(), rev)],
            success: vec![TxnOp::Put { key: keys.owner.clone(), value: to_json(token), lease: Some(lease) }],
            failure: vec![],
        };
        if client.txn(&txn).await?.succeeded {
            return Ok(true);
        }
        let now = client.get(&keys.owner).await?;
        if now.is_some_and(|kv| held != Some(kv.mod_revision)) {
            return Ok(false);
        }
    }
    Err(ClusterError::Contention(id))
}

/// The hosts' reservations kept for a volume (empty: none yet).
///
/// # Errors
///
/// etcd errors.
pub async fn load_reservations(client: &EtcdClient, keys: &VolumeKeys) -> Result<Vec<u8>, ClusterError> {
    Ok(client.get(&keys.reservations).await?.map(|kv| kv.value).unwrap_or_default())
}

/// Keeps `state` as the volume's reservations, if the owner `token`
/// still owns it: a deposed owner changes nothing. True when kept.
///
/// # Errors
///
/// etcd errors.
pub async fn save_reservations(
    client: &EtcdClient,
    keys: &VolumeKeys,
    token: &OwnerToken,
    state: &[u8],
) -> Result<bool, ClusterError> {
    let txn = Txn {
        compare: vec![Compare::value_is(keys.owner.clone(), to_json(token))],
        success: vec![TxnOp::Put { key: keys.reservations.clone(), value: state.to_vec(), lease: None }],
        failure: vec![],
    };
    Ok(client.txn(&txn).await?.succeeded)
}

/// Gives volume `id` up: deletes its owner key if it still holds
/// `token`, so that another node can take it over at once instead of after
/// this node's lease (a takeover that failed half way).
///
/// # Errors
///
/// etcd errors.
pub async fn release(client: &EtcdClient, keys: &VolumeKeys, token: &OwnerToken) -> Result<bool, ClusterError> {
    let txn = Txn {
        compare: vec![Compare::value_is(keys.owner.clone(), to_json(token))],
        success: vec![TxnOp::Delete(KeyRange::key(keys.owner.clone()))],
        failure: vec![],
    };
    Ok(client.txn(&txn).await?.succeeded)
}

/// [`release`], and the volume's record of its last owner
/// ([`VolumeState::owner`]) cleared with it: the other nodes take the volume
/// over at once instead of giving its owner time to take the key back (a
/// handover, or an owner that stopped), `successor` first when named (see
/// [`VolumeState::successor`]). True when released.
///
/// # Errors
///
/// etcd errors, [`ClusterError::Contention`].
pub async fn release_for_good(
    client: &EtcdClient,
    keys: &VolumeKeys,
    id: u64,
    token: &OwnerToken,
    successor: Option<NodeId>,
) -> Result<bool, ClusterError> {
    for _ in 0..MAX_ATTEMPTS {
        let (mut state, rev) = read_state(client, keys, id).await?;
        if state.owner != Some(token.node) && successor.is_none() {
            return release(client, keys, token).await;
        }
        state.owner = None;
        state.successor = successor;
        let txn = Txn {
            compare: vec![
                Compare::value_is(keys.owner.clone(), to_json(token)),
                Compare::mod_revision_is(keys.state.clone(), rev),
            ],
            success: vec![
                TxnOp::Delete(KeyRange::key(keys.owner.clone())),
                TxnOp::Put { key: keys.state.clone(), value: to_json(&state), lease: None },
            ],
            failure: vec![TxnOp::Range(KeyRange::key(keys.owner.clone()))],
        };
        let r = client.txn(&txn).await?;
        if r.succeeded {
            return Ok(true);
        }
        if client.get(&keys.owner).await?.map(|kv| kv.value) != Some(to_json(token)) {
            return Ok(false); // not ours (any more)
        }
    }
    Err(ClusterError::Contention(id))
}

/// Who holds a volume's owner key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// This owner.
    Us,
    /// No one: the key went with a lease that ended.
    Nobody,
    /// Another owner (or an answer that does not say).
    Other,
}

/// The owner's [`Control`] and [`DrlStore`] for one volume, on etcd.
///
/// # The log while etcd is out of reach
///
/// With a [`NoteSink`] ([`keep_notes_on`](Self::keep_notes_on)), a save
/// of the dirty-region log that etcd does not take within [`NOTE_AFTER`]
/// goes to the replicas instead (a note on every node that takes the
/// volume's writes), and the write that needed it goes on. From then on,
/// for this owner's life, every save goes to the replicas too: a save that
/// timed out may still land in etcd later, over a newer one, so etcd alone
/// is not trusted again. Every save is stamped ([`Stamp`]: this owner's
/// tenure, the number of the save), and a new owner loads the latest of
/// etcd's log and every reachable replica's note: a note a replica kept
/// while it was down is older than what a later owner saved in etcd, and
/// is left out. One that found notes clears them after its first save
/// etcd takes (the log it saved holds them).
pub struct EtcdVolume {
    client: EtcdClient,
    keys: VolumeKeys,
    id: u64,
    token: Vec<u8>,
    /// The epoch this owner took the volume over at: its saves' tenure.
    tenure: u64,
    /// Saves stamped so far.
    saves: std::sync::atomic::AtomicU64,
    regions: Regions,
    sink: std::sync::OnceLock<std::sync::Weak<dyn NoteSink>>,
    /// Saves go to the replicas too (sticky: see the type's docs).
    noting: std::sync::atomic::AtomicBool,
    /// Notes of an earlier owner are on the replicas: cleared after the
    /// first save etcd takes while not `noting`.
    stale_notes: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for EtcdVolume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdVolume").field("id", &self.id).field("regions", &self.regions).finish_non_exhaustive()
    }
}

impl EtcdVolume {
    /// Volume `id`, owned with `token` (from [`acquire`]), cut into
    /// `regions`.
    pub fn new(client: EtcdClient, keys: VolumeKeys, id: u64, token: &OwnerToken, regions: Regions) -> EtcdVolume {
        EtcdVolume {
            client,
            keys,
            id,
            token: to_json(token),
            tenure: token.epoch,
            saves: std::sync::atomic::AtomicU64::new(0),
            regions,
            sink: std::sync::OnceLock::new(),
            noting: std::sync::atomic::AtomicBool::new(false),
            stale_notes: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Keeps the log on the replicas, through `sink`, when etcd does not
    /// take a save (see the type's docs).
    pub fn keep_notes_on(&self, sink: std::sync::Weak<dyn NoteSink>) {
        let _ = self.sink.set(sink);
    }

    /// The latest of the log in etcd and the notes an earlier owner kept
    /// on the replicas (`notes`, each as its node returned it: empty for
    /// none): what a new owner opens the volume with. Every copy is a whole
    /// log, stamped when it was saved ([`Stamp`]); an older copy is stale
    /// and left out. Notes that do not decode are logged and left out.
    ///
    /// # Errors
    ///
    /// As [`load_drl`](Self::load_drl).
    pub async fn load_drl_with(&self, notes: &[(NodeId, Vec<u8>)]) -> Result<DrlState, ClusterError> {
        let (mut latest, mut state) = self.load_stamped_drl().await?;
        for (n, note) in notes.iter().filter(|(_, b)| !b.is_empty()) {
            match DrlState::decode_stamped(note, self.regions) {
                Ok((stamp, s)) => {
                    // Notes are cleared once etcd holds a later log; one
                    // seen at all asks for that again.
                    self.stale_notes.store(true, std::sync::atomic::Ordering::Release);
                    if stamp > latest {
                        tracing::warn!(volume = self.id, node = %n, ?stamp, etcd = ?latest,
                            "an earlier owner kept a later dirty-region log on the replicas (etcd was out of reach): taking it");
                        (latest, state) = (stamp, s);
                    } else if stamp < latest {
                        tracing::info!(volume = self.id, node = %n, ?stamp, latest = ?latest,
                            "a replica's note is older than the latest dirty-region log: left out");
                    }
                }
                Err(e) => tracing::warn!(volume = self.id, node = %n, "a replica's note does not decode: {e}"),
            }
        }
        Ok(state)
    }

    /// The dirty-region log as persisted (empty when none was).
    ///
    /// # Errors
    ///
    /// [`ClusterError::Corrupt`] for bytes that do not decode; etcd errors.
    pub async fn load_drl(&self) -> Result<DrlState, ClusterError> {
        Ok(self.load_stamped_drl().await?.1)
    }

    async fn load_stamped_drl(&self) -> Result<(Stamp, DrlState), ClusterError> {
        match self.client.get(&self.keys.drl).await? {
            None => Ok((Stamp::default(), DrlState::default())),
            Some(kv) => DrlState::decode_stamped(&kv.value, self.regions).map_err(|e| corrupt(&self.keys.drl, e)),
        }
    }

    fn still_owner(&self) -> Compare {
        Compare::value_is(self.keys.owner.clone(), self.token.clone())
    }

    /// Who holds the owner key, as read by the failure branch of a
    /// transaction that compared [`still_owner`](Self::still_owner).
    fn holder_in(&self, responses: &[strata_meta::etcd::TxnOpResponse]) -> Holder {
        let value = responses.iter().find_map(|r| match r {
            strata_meta::etcd::TxnOpResponse::Range(range) => Some(range.kvs.first().map(|kv| &kv.value)),
            _ => None,
        });
        match value {
            Some(None) => Holder::Nobody,
            Some(Some(v)) if *v == self.token => Holder::Us,
            _ => Holder::Other,
        }
    }

    /// [`change`](Self::change), retried while etcd does not answer,
    /// within [`METADATA_PATIENCE`]. A try whose answer was lost is
    /// recognised by the next one (it finds its own result stored).
    async fn change_patiently(
        &self,
        from: &Membership,
        change: impl Fn(&mut VolumeState),
    ) -> Result<Membership, ControlError> {
        let began = std::time::Instant::now();
        loop {
            match self.change(from, &change).await {
                Err(ControlError::Unavailable(e)) if began.elapsed() < METADATA_PATIENCE => {
                    tracing::warn!(volume = self.id, "changing the in-sync set, retrying: {e}");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                r => return r,
            }
        }
    }

    /// Changes the state with `change` (the in-sync set, the map) if the
    /// stored membership is still `from` and we still own the volume.
    async fn change(&self, from: &Membership, change: impl Fn(&mut VolumeState)) -> Result<Membership, ControlError> {
        let unavailable = |e: &dyn std::fmt::Display| ControlError::Unavailable(e.to_string());
        for _ in 0..MAX_ATTEMPTS {
            let (mut state, rev) = read_state(&self.client, &self.keys, self.id).await.map_err(|e| unavailable(&e))?;
            let mut expected = VolumeState { epoch: from.epoch, in_sync: from.in_sync.clone(), ..state.clone() };
            change(&mut expected);
            expected.epoch += 1;
            if state == expected {
                // Our earlier attempt landed though its answer was lost.
                return Ok(state.membership());
            }
            if state.epoch != from.epoch {
                return Err(ControlError::NotOwner(format!(
                    "volume {} is at epoch {}, not {}",
                    self.id, state.epoch, from.epoch
                )));
            }
            state = expected;
            let txn = Txn {
                compare: vec![self.still_owner(), Compare::mod_revision_is(self.keys.state.clone(), rev)],
                success: vec![TxnOp::Put { key: self.keys.state.clone(), value: to_json(&state), lease: None }],
                failure: vec![TxnOp::Range(KeyRange::key(self.keys.owner.clone()))],
            };
            match self.client.txn(&txn).await {
                Ok(r) if r.succeeded => return Ok(state.membership()),
                Ok(r) => match self.holder_in(&r.responses) {
                    Holder::Other => {
                        return Err(ControlError::NotOwner(format!("volume {}: our ownership ended", self.id)));
                    }
                    // Gone with a lease etcd let expire: the owner takes
                    // it back under its new lease (or another node takes
                    // the volume); the caller waits to see which.
                    Holder::Nobody => {
                        return Err(ControlError::Unavailable(format!(
                            "volume {}: the owner key went with an old lease and is not back yet",
                            self.id
                        )));
                    }
                    Holder::Us => {} // the state moved: read it again
                },
                Err(e) if e.outcome_unknown() => {} // read again: it may have landed
                Err(e) => return Err(unavailable(&e)),
            }
        }
        Err(ControlError::Unavailable(format!("volume {}: too many concurrent changes", self.id)))
    }
}

impl Control for EtcdVolume {
    fn leave(&self, from: &Membership, nodes: &[NodeId]) -> ControlFuture<'_, Membership> {
        let (from, nodes) = (from.clone(), nodes.to_vec());
        Box::pin(async move {
            self.change_patiently(&from, |s| {
                for n in &nodes {
                    s.in_sync.remove(n);
                }
            })
            .await
        })
    }

    fn rejoin(&self, from: &Membership, node: NodeId) -> ControlFuture<'_, Membership> {
        let from = from.clone();
        Box::pin(async move {
            self.change_patiently(&from, |s| {
                s.in_sync.insert(node);
            })
            .await
        })
    }

    fn begin_move(
        &self,
        from: &Membership,
        next: &NextLayout,
        in_sync: &BTreeSet<NodeId>,
    ) -> ControlFuture<'_, Membership> {
        let (from, next, in_sync) = (from.clone(), next.clone(), in_sync.clone());
        Box::pin(async move {
            self.change_patiently(&from, |s| {
                s.next = Some(next.clone());
                s.in_sync = in_sync.clone();
            })
            .await
        })
    }

    fn relayout(
        &self,
        from: &Membership,
        map_epoch: u64,
        slots: &BTreeMap<u32, Vec<NodeId>>,
        in_sync: &BTreeSet<NodeId>,
    ) -> ControlFuture<'_, Membership> {
        let (from, slots, in_sync) = (from.clone(), slots.clone(), in_sync.clone());
        Box::pin(async move {
            self.change_patiently(&from, |s| {
                s.map_epoch = map_epoch;
                s.slots = slots.clone();
                s.in_sync = in_sync.clone();
                s.next = None;
            })
            .await
        })
    }
}

impl EtcdVolume {
    /// Saves `bytes` as the log in etcd, trying for up to `patience`.
    /// `Ok(false)` when etcd did not answer in time.
    async fn save_in_etcd(&self, bytes: &[u8], patience: std::time::Duration) -> Result<bool, String> {
        let txn = Txn {
            compare: vec![self.still_owner()],
            success: vec![TxnOp::Put { key: self.keys.drl.clone(), value: bytes.to_vec(), lease: None }],
            failure: vec![TxnOp::Range(KeyRange::key(self.keys.owner.clone()))],
        };
        // Saving the whole log again is idempotent: retry until etcd
        // answers, within the patience.
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            match tokio::time::timeout_at(deadline, self.client.txn(&txn)).await {
                Ok(Ok(r)) if r.succeeded => return Ok(true),
                Ok(Ok(r)) => match self.holder_in(&r.responses) {
                    // Our key went with a lease etcd let expire (it was
                    // frozen past it) and the owner takes it back under
                    // its new lease: until then the log goes to the
                    // replicas, whose fences refuse it if another owner
                    // came meanwhile.
                    Holder::Nobody => {
                        tracing::warn!(
                            volume = self.id,
                            "the owner key went with an old lease: the log goes to the replicas until it is back"
                        );
                        return Ok(false);
                    }
                    Holder::Us => {} // taken back meanwhile: again
                    Holder::Other => return Err(format!("volume {}: not the owner any more", self.id)),
                },
                Ok(Err(e)) if tokio::time::Instant::now() + RETRY_PAUSE < deadline => {
                    tracing::warn!(volume = self.id, "saving the dirty-region log, retrying: {e}");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Ok(Err(e)) => {
                    tracing::warn!(volume = self.id, "etcd did not take the dirty-region log: {e}");
                    return Ok(false);
                }
                Err(_) => return Ok(false),
            }
        }
    }
}

impl DrlStore for EtcdVolume {
    fn save(&self, state: DrlState) -> SaveFuture<'_> {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        Box::pin(async move {
            let save = self.saves.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let bytes = state.encode_stamped(Stamp { tenure: self.tenure, save }, self.regions);
            let Some(sink) = self.sink.get().and_then(std::sync::Weak::upgrade) else {
                return match self.save_in_etcd(&bytes, METADATA_PATIENCE).await? {
                    true => Ok(()),
                    false => Err(format!("volume {}: etcd did not take the dirty-region log", self.id)),
                };
            };
            let noting = self.noting.load(Acquire);
            let patience = if noting { ETCD_TRY_IN_OUTAGE } else { NOTE_AFTER };
            let in_etcd = self.save_in_etcd(&bytes, patience).await?;
            if in_etcd && !noting {
                if self.stale_notes.swap(false, AcqRel)
                    && let Err(e) = sink.save_note(Vec::new()).await
                {
                    tracing::info!(volume = self.id, "clearing an earlier owner's notes: {e}");
                }
                return Ok(());
            }
            if !self.noting.swap(true, AcqRel) {
                tracing::warn!(
                    volume = self.id,
                    "etcd does not take the dirty-region log: keeping it on the replicas (and on every later save)"
                );
            }
            sink.save_note(bytes).await
        })
    }
}
