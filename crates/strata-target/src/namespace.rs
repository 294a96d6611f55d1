//! Namespaces: a [`BlockDevice`] with the identity a host sees (NSID,
//! NGUID, UUID, EUI-64) and, on the internal fabric, the fence, undo log
//! and note store that guard it.
//!
//! Plain data with no locks and no back references: subsystems hold
//! namespaces, the SMART counters (`io_stats`) key on them and the command
//! sets run on them; all of those import this module, and it imports no
//! other module of the crate.

use std::sync::Arc;

use strata_block::{BlockDevice, EpochFence, NoteStore, UndoLog};

/// The identity a host sees for a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceIds {
    /// Namespace globally unique identifier.
    pub nguid: [u8; 16],
    /// Namespace UUID.
    pub uuid: [u8; 16],
    /// IEEE EUI-64.
    pub eui64: [u8; 8],
}

/// A namespace: an NSID, its identifiers and the device behind it.
pub struct Namespace {
    /// Namespace identifier (1-based).
    pub nsid: u32,
    /// Identifiers reported in Identify.
    pub ids: NamespaceIds,
    /// The storage.
    pub device: Arc<dyn BlockDevice>,
    /// The epoch fence of a replica on the internal fabric. A fenced
    /// namespace takes only the fenced commands
    /// ([`strata_nvme::command::fenced`]), each admitted by this fence; an
    /// unfenced one refuses them.
    pub fence: Option<Arc<EpochFence>>,
    /// The undo log of an erasure-coded shard: a fenced namespace with one
    /// also takes the undo commands (`fenced::is_undo`).
    pub undo: Option<Arc<dyn UndoLog>>,
    /// Where the node keeps the volume owner's note (`fenced::NOTE_SAVE`,
    /// `fenced::NOTE_LOAD`); without one a fenced namespace refuses them.
    pub notes: Option<Arc<dyn NoteStore>>,
    /// The reservations to start from (kept across a restart); a new,
    /// empty state when `None`. A subsystem keeps them across a swap of
    /// the namespace's device.
    pub reservations: Option<Arc<crate::reservation::ReservationCell>>,
    /// Where the namespace is really served, when this is a path to it
    /// (a pool volume's node that does not own it): every command runs
    /// there as the host that sent it, so that the reservations the owner
    /// keeps apply to each host, whichever node it came through.
    pub forward: Option<Arc<dyn HostForward>>,
    /// The volume's data-path metrics (see [`crate::io_metrics`]), taken
    /// from the target's registry when the namespace is made; `None`
    /// records nothing. A swap of the device keeps the old namespace's.
    pub metrics: Option<Arc<crate::io_metrics::IoMetrics>>,
}

/// What [`HostForward::reservation`] returns: the completion's status
/// and the data the command returned.
pub type ForwardFuture<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<(strata_nvme::status::Status, Vec<u8>), strata_block::BlockError>>
            + Send
            + 'a,
    >,
>;

/// A namespace served on behalf of the node that owns it (see
/// [`Namespace::forward`]).
pub trait HostForward: Send + Sync {
    /// The device that runs host `host`'s I/O where the namespace is
    /// served.
    fn device_for(&self, host: &crate::reservation::HostId) -> Arc<dyn BlockDevice>;

    /// Runs reservation command `sqe` (its data `data`, `read_len` bytes
    /// back) for host `host` where the namespace is served.
    fn reservation(
        &self,
        host: &crate::reservation::HostId,
        sqe: strata_nvme::command::Sqe,
        data: Option<Vec<u8>>,
        read_len: usize,
    ) -> ForwardFuture<'_>;
}

impl Namespace {
    /// A namespace hosts address with the standard NVM commands.
    pub fn new(nsid: u32, ids: NamespaceIds, device: Arc<dyn BlockDevice>) -> Namespace {
        Namespace {
            nsid,
            ids,
            device,
            fence: None,
            undo: None,
            notes: None,
            reservations: None,
            forward: None,
            metrics: None,
        }
    }

    /// A replica on the internal fabric, guarded by `fence`.
    pub fn fenced(nsid: u32, ids: NamespaceIds, device: Arc<dyn BlockDevice>, fence: Arc<EpochFence>) -> Namespace {
        Namespace {
            nsid,
            ids,
            device,
            fence: Some(fence),
            undo: None,
            notes: None,
            reservations: None,
            forward: None,
            metrics: None,
        }
    }

    /// A shard of an erasure-coded volume on the internal fabric: fenced,
    /// with the undo log `undo` over the same blocks as `device`.
    pub fn shard(
        nsid: u32,
        ids: NamespaceIds,
        device: Arc<dyn BlockDevice>,
        undo: Arc<dyn UndoLog>,
        fence: Arc<EpochFence>,
    ) -> Namespace {
        Namespace {
            nsid,
            ids,
            device,
            fence: Some(fence),
            undo: Some(undo),
            notes: None,
            reservations: None,
            forward: None,
            metrics: None,
        }
    }

    /// The same namespace, its reservations starting from `cell` (see
    /// [`Namespace::reservations`]).
    pub fn with_reservations(mut self, cell: Arc<crate::reservation::ReservationCell>) -> Namespace {
        self.reservations = Some(cell);
        self
    }

    /// The same namespace, served through `forward` (see
    /// [`Namespace::forward`]).
    pub fn with_forward(mut self, forward: Arc<dyn HostForward>) -> Namespace {
        self.forward = Some(forward);
        self
    }

    /// The same namespace, recording its I/O in `metrics` (see
    /// [`Namespace::metrics`]); `None` records nothing.
    pub fn with_metrics(mut self, metrics: Option<Arc<crate::io_metrics::IoMetrics>>) -> Namespace {
        self.metrics = metrics;
        self
    }

    /// The same namespace, keeping the owner's notes in `notes`.
    pub fn with_notes(mut self, notes: Arc<dyn NoteStore>) -> Namespace {
        self.notes = Some(notes);
        self
    }
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace").field("nsid", &self.nsid).field("geometry", &self.device.geometry()).finish()
    }
}
