//! The one error type of the metadata store.
//!
//! Every backend returns [`MetaError`]; the variants split into what the
//! caller asked wrongly (invalid input, not found, already exists, conflict),
//! what the persisted state holds wrongly ([`MetaError::Corrupt`]) and what
//! the backend could not do (I/O, lock, redb, etcd, contention, shutdown).
//! The binary maps the first group to 4xx answers and CLI usage errors, the
//! rest to failures. [`MetaError::outcome_unknown`] tells the one case in
//! which a failed call may nevertheless have been applied.

use std::path::PathBuf;

use crate::etcd::EtcdError;
use crate::validate::{NameError, NqnError};

/// An error from a [`MetaStore`](crate::MetaStore) operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetaError {
    /// The volume name is invalid.
    #[error(transparent)]
    InvalidName(#[from] NameError),
    /// The subsystem NQN is invalid.
    #[error("invalid subsystem NQN: {0}")]
    InvalidNqn(#[source] NqnError),
    /// A host NQN in `allowed_hosts` is invalid.
    #[error("invalid allowed host NQN: {0}")]
    InvalidHostNqn(#[source] NqnError),
    /// A host NQN appears twice in `allowed_hosts`.
    #[error("allowed host {host:?} is listed twice; list each host NQN once")]
    DuplicateHost {
        /// The repeated host NQN.
        host: String,
    },
    /// The block size is neither 512 nor 4096.
    #[error("block size {block_size} is not supported; use 512 or 4096")]
    InvalidBlockSize {
        /// The block size that was given.
        block_size: u32,
    },
    /// The size is zero or not a multiple of the block size.
    #[error(
        "volume size {size_bytes} bytes is not a positive multiple of the block size \
         {block_size}; round it up to a multiple of {block_size}"
    )]
    InvalidSize {
        /// The size that was given, in bytes.
        size_bytes: u64,
        /// The volume's block size, in bytes.
        block_size: u32,
    },
    /// The namespace id is 0 or 0xFFFFFFFF, which NVMe reserves.
    #[error("namespace id {nsid:#x} is reserved by NVMe; use 1 to 0xfffffffe")]
    InvalidNsid {
        /// The namespace id that was given.
        nsid: u32,
    },
    /// Another volume already uses this namespace id in this subsystem.
    #[error("namespace {nsid} of subsystem {nqn} is already volume {holder:?}; pick another nsid or NQN")]
    NsidInUse {
        /// The subsystem NQN.
        nqn: String,
        /// The namespace id.
        nsid: u32,
        /// The volume that holds it.
        holder: String,
    },
    /// Every namespace id of the subsystem is taken.
    #[error("subsystem {nqn} has no free namespace id left; serve the volume under another NQN")]
    NoFreeNsid {
        /// The subsystem NQN.
        nqn: String,
    },
    /// A volume of this name exists already.
    #[error("volume {name:?} already exists; choose another name or delete it first")]
    AlreadyExists {
        /// The volume name.
        name: String,
    },
    /// No volume has this name.
    #[error("volume {name:?} does not exist")]
    NotFound {
        /// The volume name.
        name: String,
    },
    /// The volume was changed since the caller read it (optimistic concurrency).
    #[error(
        "volume {name:?} was changed concurrently (you read generation {expected}, it is now \
         {found}); read it again and retry"
    )]
    Conflict {
        /// The volume name.
        name: String,
        /// The generation the caller's record carried.
        expected: u64,
        /// The generation in the store.
        found: u64,
    },
    /// The volume was deleted and recreated since the caller read it.
    #[error(
        "volume {name:?} was deleted and recreated since you read it (id {expected_id} is now \
         {found_id}); read it again and retry"
    )]
    Replaced {
        /// The volume name.
        name: String,
        /// The id the caller's record carried.
        expected_id: u64,
        /// The id of the volume now stored under that name.
        found_id: u64,
    },
    /// An update tried to change a field that is fixed at creation.
    #[error("volume {name:?}: field {field} cannot be changed after creation")]
    Immutable {
        /// The volume name.
        name: String,
        /// The field the update tried to change.
        field: &'static str,
    },
    /// A config key is empty, too long or holds characters other than
    /// printable ASCII.
    #[error("config key {key:?} is invalid: {reason}")]
    InvalidConfigKey {
        /// The rejected key.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A config value is larger than the store keeps.
    #[error("config value for {key:?} is {len} bytes; the maximum is {max}")]
    ConfigValueTooLarge {
        /// The key.
        key: String,
        /// The value's length, in bytes.
        len: usize,
        /// The largest value accepted, in bytes.
        max: usize,
    },
    /// Persisted bytes could not be decoded: garbage, a format version newer
    /// than this build knows, or a record that breaks an invariant.
    #[error("metadata entry {key} is corrupt or unreadable: {reason}")]
    Corrupt {
        /// Which entry, as `table/key`.
        key: String,
        /// What was wrong with it.
        reason: String,
    },
    /// Another process holds the store's file lock.
    #[error(
        "data dir {} is in use by another strata process (its metadata store {} is locked); \
         stop that process or choose another data dir",
        dir.display(),
        path.display()
    )]
    InUse {
        /// The data dir.
        dir: PathBuf,
        /// The locked store file.
        path: PathBuf,
    },
    /// An operating-system call failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "opening metadata store".
        what: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The redb backend failed.
    #[error("metadata store (redb) failed while {op}: {source}")]
    Redb {
        /// What the store was doing.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: redb::Error,
    },
    /// The etcd backend failed: etcd unreachable, too slow, refusing, or
    /// answering garbage. See [`EtcdError`] for which, and
    /// [`MetaError::outcome_unknown`] for whether the call may have been
    /// applied anyway.
    #[error("metadata store (etcd) failed while {op}: {source}")]
    Etcd {
        /// What the store was doing.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: EtcdError,
    },
    /// A compare-and-swap lost to concurrent writers every time it was
    /// tried. Nothing was changed.
    #[error(
        "metadata store (etcd): {op} lost to concurrent changes {attempts} times in a row; \
         nothing was changed, retry later"
    )]
    Contention {
        /// What the store was doing.
        op: &'static str,
        /// How many times it tried.
        attempts: u32,
    },
    /// The async runtime shut down before the call ran. Nothing was changed.
    #[error("metadata store call ({op}) abandoned: the runtime is shutting down; nothing was changed")]
    Abandoned {
        /// What the store was asked to do.
        op: &'static str,
    },
}

impl MetaError {
    /// Whether the call may have been applied although it failed (an etcd
    /// deadline passed or the connection broke after the request was
    /// sent). Read the state again before retrying; a retry may find its
    /// own earlier attempt (see the cancel-safety section of
    /// [`MetaStore`](crate::MetaStore)).
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, MetaError::Etcd { source, .. } if source.outcome_unknown())
    }

    /// Builds a [`MetaError::Corrupt`].
    pub(crate) fn corrupt(key: impl Into<String>, reason: impl Into<String>) -> Self {
        MetaError::Corrupt { key: key.into(), reason: reason.into() }
    }
}
