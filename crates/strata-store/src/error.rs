//! [`StoreError`]: why opening or managing the store failed.
//!
//! Data-path errors (read, write, flush of a volume) use
//! [`strata_block::BlockError`] instead, because the target maps those to
//! NVMe statuses. This enum covers configuration, format, recovery and the
//! management calls. Every variant names the drive it concerns and says what
//! the operator can do about it.

use std::path::PathBuf;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A drive spec string could not be parsed.
    #[error("bad drive spec {spec:?}: {reason}")]
    BadDriveSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The configuration is unusable (no drives, bad extent size, ...).
    #[error("bad store configuration: {0}")]
    BadConfig(String),
    /// An operating-system call on a drive failed.
    #[error("drive {path}: {op}: {source}")]
    Io {
        /// The drive.
        path: String,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `O_DIRECT` is refused by the file system under a drive file.
    #[error(
        "the file system holding {path} does not support O_DIRECT (tmpfs?); put the drive on \
         ext4/xfs or a block device, or accept buffered I/O with allow_buffered (strata serve --allow-buffered)"
    )]
    DirectIoUnsupported {
        /// The drive file.
        path: PathBuf,
    },
    /// The drive holds data that is not a strata drive; formatting it would
    /// destroy that data.
    #[error(
        "drive {path} is not empty and carries no strata superblock; refusing to format it \
         (set force_format to overwrite it)"
    )]
    NotStrataDrive {
        /// The drive.
        path: String,
    },
    /// The drive was formatted with a different extent size.
    #[error(
        "drive {path} was formatted with {on_disk}-byte extents but the store is configured for \
         {configured}; configure extent_size = {on_disk} or use another drive"
    )]
    ExtentSizeMismatch {
        /// The drive.
        path: String,
        /// Extent size in the superblock.
        on_disk: u32,
        /// Extent size in the configuration.
        configured: u32,
    },
    /// The drive was written by a format version this build does not know.
    #[error(
        "drive {path} has {what} format version {found}; this build reads version {supported} \
         only (upgrade strata)"
    )]
    UnsupportedVersion {
        /// The drive.
        path: String,
        /// Which structure.
        what: &'static str,
        /// Version found.
        found: u32,
        /// Version this build writes and reads.
        supported: u32,
    },
    /// Persistent metadata failed validation and no valid copy remains.
    #[error("drive {path} is corrupt: {detail}")]
    Corrupt {
        /// The drive.
        path: String,
        /// What was seen.
        detail: String,
    },
    /// The drive is smaller than its superblock says (a truncated file),
    /// or too small to hold the format.
    #[error("drive {path} is {actual} bytes but {needed} bytes are needed: {why}")]
    TooSmall {
        /// The drive.
        path: String,
        /// Its size.
        actual: u64,
        /// Size required.
        needed: u64,
        /// Why that size is needed.
        why: &'static str,
    },
    /// A volume argument is invalid.
    #[error("volume {id}: {reason}")]
    BadVolume {
        /// The volume id.
        id: u64,
        /// What is wrong.
        reason: String,
    },
    /// A drive or volume refuses writes after an I/O error of unknown
    /// outcome; restart the store to recover.
    #[error("{what} failed after an earlier I/O error; restart to recover")]
    Failed {
        /// The drive or volume.
        what: String,
    },
    /// A data-path error surfaced through a management call.
    #[error(transparent)]
    Block(#[from] strata_block::BlockError),
}

impl StoreError {
    pub(crate) fn io(path: &str, op: &'static str, source: std::io::Error) -> StoreError {
        StoreError::Io { path: path.to_owned(), op, source }
    }

    pub(crate) fn corrupt(path: &str, detail: impl Into<String>) -> StoreError {
        StoreError::Corrupt { path: path.to_owned(), detail: detail.into() }
    }
}
