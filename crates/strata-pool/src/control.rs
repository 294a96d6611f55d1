//! The owner's link to the metadata store: a volume's in-sync set at an
//! epoch ([`Membership`]) and the changes an owner makes to it
//! ([`Control`]), each a compare-and-set on the membership it read.
//!
//! [`crate::cluster::EtcdVolume`] implements [`Control`] over etcd; the
//! crate's test doubles keep it in memory.
//!
//! # Invariants
//!
//! - Every change applies only if the stored membership is still the one
//!   the caller passes as `from`, and bumps the epoch: an owner never
//!   overwrites a change it did not see.
//! - [`ControlError::NotOwner`] means the volume moved on: the owner is
//!   fenced and MUST stop serving. [`ControlError::Unavailable`] says
//!   nothing about who owns the volume.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;

use crate::drl::NodeId;
use crate::layout::NextLayout;

/// The in-sync set of a volume at an epoch, as the metadata store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Bumped at every change of owner or in-sync set.
    pub epoch: u64,
    /// Replicas that hold every acknowledged write.
    pub in_sync: BTreeSet<NodeId>,
}

/// Why the metadata store refused or failed a membership change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// The volume moved on (another owner, a newer epoch): this owner is
    /// fenced and must stop.
    #[error("the volume is no longer ours: {0}")]
    NotOwner(String),
    /// The store could not be reached or failed.
    #[error("metadata store: {0}")]
    Unavailable(String),
}

/// A boxed control-plane future.
pub type ControlFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ControlError>> + Send + 'a>>;

/// The owner's link to the metadata store for one volume.
pub trait Control: Send + Sync {
    /// Takes `nodes` out of the in-sync set, if the stored membership is
    /// still `from`, and returns the new membership (epoch bumped).
    fn leave(&self, from: &Membership, nodes: &[NodeId]) -> ControlFuture<'_, Membership>;
    /// Puts `node` back in the in-sync set, if the stored membership is
    /// still `from`, and returns the new membership (epoch bumped).
    fn rejoin(&self, from: &Membership, node: NodeId) -> ControlFuture<'_, Membership>;
    /// Starts (or retargets) a move of the volume to `next`, with in-sync
    /// set `in_sync` (the current one, with the nodes new to the volume),
    /// if the stored membership is still `from`, and returns the new
    /// membership (epoch bumped). The volume stays placed by its current
    /// map until [`relayout`](Self::relayout); a new owner finds the move
    /// recorded and goes on with it.
    fn begin_move(
        &self,
        from: &Membership,
        next: &NextLayout,
        in_sync: &BTreeSet<NodeId>,
    ) -> ControlFuture<'_, Membership>;
    /// Moves the volume to placement map `map_epoch` (with erasure-coded
    /// `slots`, see [`crate::cluster::VolumeState::slots`]) and in-sync set
    /// `in_sync`, ending any move recorded, if the stored membership is
    /// still `from`, and returns the new membership (epoch bumped).
    fn relayout(
        &self,
        from: &Membership,
        map_epoch: u64,
        slots: &std::collections::BTreeMap<u32, Vec<NodeId>>,
        in_sync: &BTreeSet<NodeId>,
    ) -> ControlFuture<'_, Membership>;
}
