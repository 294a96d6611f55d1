//! Errors of reading a sysfs tree.
//!
//! Only the tree as a whole can fail: a root that is missing or not a
//! directory, or a class directory that exists but cannot be listed.
//! A single attribute that is missing, unreadable or malformed is not an
//! error: it reads as "unknown" (`None`) and, where it matters, leaves a
//! note in [`Topology::notes`](crate::Topology::notes).

use std::path::PathBuf;

/// Why a sysfs tree could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopoError {
    /// The root given (normally `/sys`) does not exist or cannot be resolved.
    #[error("sysfs root {path} cannot be opened")]
    Root {
        /// The root as given.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The root exists but is not a directory.
    #[error("sysfs root {path} is not a directory")]
    NotADirectory {
        /// The root as given.
        path: PathBuf,
    },
    /// A directory that exists could not be listed (permissions, I/O error).
    #[error("cannot list {path}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
}
