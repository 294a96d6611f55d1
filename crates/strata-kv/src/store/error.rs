//! [`KvError`]: why a store operation failed. A miss is not an error
//! (an operation answers it as `None` or `false`), nor is a damaged or
//! unreadable log record (a get answers it as a miss, or with another
//! tier's copy).

use crate::log::LogError;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// The value cannot fit in the DRAM tier at all.
    #[error("value of {len} bytes is larger than the DRAM tier ({capacity} bytes)")]
    TooLarge {
        /// Value bytes.
        len: u64,
        /// DRAM capacity.
        capacity: u64,
    },
    /// DRAM is full of pinned or leased blocks.
    #[error("the DRAM tier is full of pinned or leased blocks ({used} of {capacity} bytes)")]
    Full {
        /// Bytes in use.
        used: u64,
        /// Capacity.
        capacity: u64,
    },
    /// A namespace name is longer than 255 bytes.
    #[error("namespace name is {0} bytes; at most 255")]
    BadNamespace(usize),
    /// The namespace's quota cannot take the value: it is larger than the
    /// quota, or the rest is pinned or leased.
    #[error(
        "namespace quota of {quota} bytes cannot take {need} more bytes ({used} in use, the rest pinned or leased)"
    )]
    Quota {
        /// Bytes asked for.
        need: u64,
        /// Bytes in use.
        used: u64,
        /// The quota.
        quota: u64,
    },
    /// The SSD log failed to open or to write.
    #[error(transparent)]
    Log(#[from] LogError),
}
