//! A pool volume by its protection: what a node needs to hold a member of
//! one and to open one as its owner, so that the node's control plane
//! never decides protection-specific things itself.
//!
//! - A replicated volume's member is a whole copy; an erasure-coded
//!   volume's is a shard of [`Stripes::shard_bytes`], with an undo log of
//!   [`UNDO_LOG_BYTES`] beside it in the node's store, under the store
//!   volume id [`undo_log_id`] (both ids must stay stable: a restarted
//!   node finds its shards and logs by them).
//! - [`Members`] are the handles of a volume's members (copies or
//!   shards), and [`OpenedVolume`] the volume an owner serves.

use std::sync::Arc;

use strata_block::{BlockError, Geometry};

use crate::control::{Control, Membership};
use crate::drl::{DirtyRegionLog, NodeId};
use crate::erasure::{EcParts, ErasureVolume, Shard, Stripes};
use crate::layout::{Layout, Moving};
use crate::placement::Protection;
use crate::replica::Replica;
use crate::replicated::{ReplicatedVolume, VolumeParts};
use crate::volume::{OpenError, PoolVolume};

/// Bytes of the undo log each node keeps for each erasure-coded shard it
/// holds (a thin store volume: what stays uncommitted between the owner's
/// commits, at most about a second of writes or 2,048 updates).
pub const UNDO_LOG_BYTES: u64 = 128 << 20;

/// The store volume id of the undo log of volume `id`'s shard. Volume ids
/// stay below 2^62, so it never collides with a volume's own id.
pub fn undo_log_id(id: u64) -> u64 {
    id | 1 << 62
}

/// The stripes of an erasure-coded volume of `block_size`-byte blocks:
/// strips of 4 KiB (or one block, when larger). `None` for a replicated
/// volume.
pub fn stripes_of(protection: Protection, block_size: u32) -> Option<Stripes> {
    match protection {
        Protection::ErasureCoded { data, parity } => Some(Stripes {
            data: usize::from(data),
            parity: usize::from(parity),
            strip: u64::from(block_size).max(4096),
        }),
        _ => None,
    }
}

/// Bytes each member of a `size_bytes` volume holds: the whole volume, or
/// one shard of it.
pub fn member_bytes(protection: Protection, size_bytes: u64, block_size: u32) -> u64 {
    stripes_of(protection, block_size).map_or(size_bytes, |s| s.shard_bytes(size_bytes))
}

/// Handles of a volume's members: copies, or shards.
pub enum Members {
    /// A replicated volume's copies.
    Replicas(Vec<Arc<dyn Replica>>),
    /// An erasure-coded volume's shards.
    Shards(Vec<Arc<dyn Shard>>),
}

impl Members {
    /// No handles yet, of the kind `protection` has.
    pub fn none(protection: Protection) -> Members {
        match protection {
            Protection::ErasureCoded { .. } => Members::Shards(Vec::new()),
            _ => Members::Replicas(Vec::new()),
        }
    }

    /// Adds the handle of a member on another node (a fabric replica
    /// serves as either).
    pub fn push_remote<R: Replica + Shard + 'static>(&mut self, remote: Arc<R>) {
        match self {
            Members::Replicas(list) => list.push(remote),
            Members::Shards(list) => list.push(remote),
        }
    }

    /// Every handle, as a replica (what copies and shards share: the
    /// node, its notes, its fence).
    pub fn as_replicas(&self) -> Vec<Arc<dyn Replica>> {
        match self {
            Members::Replicas(r) => r.clone(),
            Members::Shards(s) => s.iter().map(|s| s.clone() as Arc<dyn Replica>).collect(),
        }
    }
}

/// A volume its owner opened, by protection.
#[derive(Clone)]
pub enum OpenedVolume {
    /// Replicated.
    Replicated(Arc<ReplicatedVolume>),
    /// Erasure-coded.
    Erasure(Arc<ErasureVolume>),
}

impl OpenedVolume {
    /// The volume, as hosts and the owner's chores use it.
    pub fn volume(&self) -> Arc<dyn PoolVolume> {
        match self {
            OpenedVolume::Replicated(v) => v.clone(),
            OpenedVolume::Erasure(v) => v.clone(),
        }
    }

    /// Whether a member's place in a chunk's list matters (a shard's
    /// index), so that a move keeps members where they stay.
    pub fn positional(&self) -> bool {
        matches!(self, OpenedVolume::Erasure(_))
    }

    /// Starts (or retargets) a move to `moving`, with the handles of the
    /// members it adds.
    ///
    /// # Errors
    ///
    /// I/O or metadata errors of the move's first step. Members of the
    /// other kind are ignored (a move never changes the protection).
    pub async fn begin_move(&self, moving: Moving, added: Members) -> Result<(), BlockError> {
        match (self, added) {
            (OpenedVolume::Replicated(v), Members::Replicas(a)) => v.begin_move(moving, a).await,
            (OpenedVolume::Erasure(v), Members::Shards(a)) => v.begin_move(moving, a).await,
            _ => Ok(()),
        }
    }
}

/// What an owner needs to open a volume of either kind.
pub struct OpenParts {
    /// Block size and count of the volume.
    pub geometry: Geometry,
    /// This node.
    pub local: NodeId,
    /// The volume's stripes when it is erasure-coded ([`stripes_of`]).
    pub stripes: Option<Stripes>,
    /// Its placement (in shard space when erasure-coded).
    pub layout: Arc<dyn Layout>,
    /// Every member's handle, reachable or not.
    pub members: Members,
    /// The membership this owner took the volume over at.
    pub membership: Membership,
    /// The dirty-region log.
    pub drl: Arc<DirtyRegionLog>,
    /// The metadata store.
    pub control: Arc<dyn Control>,
    /// The move in progress, as the metadata store records it.
    pub moving: Option<Moving>,
}

/// Why a volume did not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenVolumeError {
    /// The stripes and the members' kind disagree (copies for an
    /// erasure-coded volume, or shards for a replicated one).
    #[error("the volume's protection and its members' handles disagree")]
    Mismatch,
    /// The volume itself could not open.
    #[error(transparent)]
    Open(#[from] OpenError),
}

/// Opens the volume `parts` describe, replicated or erasure-coded.
///
/// # Errors
///
/// [`OpenVolumeError`].
pub async fn open_volume(parts: OpenParts) -> Result<OpenedVolume, OpenVolumeError> {
    let OpenParts { geometry, local, stripes, layout, members, membership, drl, control, moving } = parts;
    Ok(match (stripes, members) {
        (None, Members::Replicas(replicas)) => {
            let parts = VolumeParts { geometry, local, layout, replicas, membership, drl, control, moving };
            OpenedVolume::Replicated(Arc::new(ReplicatedVolume::open(parts).await?))
        }
        (Some(stripes), Members::Shards(shards)) => {
            let parts = EcParts { geometry, local, stripes, layout, shards, membership, drl, control, moving };
            OpenedVolume::Erasure(Arc::new(ErasureVolume::open(parts).await?))
        }
        _ => return Err(OpenVolumeError::Mismatch),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protection_picks_the_members_and_the_shard_geometry() {
        let ec = Protection::ErasureCoded { data: 4, parity: 2 };
        let rep = Protection::Replicated { copies: 3 };
        assert!(matches!(Members::none(ec), Members::Shards(_)));
        assert!(matches!(Members::none(rep), Members::Replicas(_)));
        assert_eq!(stripes_of(rep, 4096), None);
        let s = stripes_of(ec, 512).unwrap();
        assert_eq!((s.data, s.parity, s.strip), (4, 2, 4096), "strips are at least 4 KiB");
        assert_eq!(stripes_of(ec, 16384).unwrap().strip, 16384, "or one block");
        assert_eq!(member_bytes(rep, 1 << 30, 4096), 1 << 30);
        assert_eq!(member_bytes(ec, 1 << 30, 4096), s.shard_bytes(1 << 30));
    }

    #[test]
    fn undo_logs_live_beside_their_shards_under_ids_no_volume_has() {
        // Pinned: a restarted node finds its logs under these ids.
        assert_eq!(undo_log_id(7), 7 | 1 << 62);
        assert_eq!(UNDO_LOG_BYTES, 128 << 20);
        assert!((1..1000).all(|id| undo_log_id(id) != id && undo_log_id(id) >> 62 == 1));
    }
}
