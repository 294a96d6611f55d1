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
    /// A change that makes an old log record stale could not make that
    /// record's invalidation durable (the tier is paused, or its write
    /// or sync failed). The change is made in memory, but is not
    /// acknowledged: after a crash the old value could come back. The
    /// invalidation is written before the next acknowledged change to
    /// the key.
    #[error(
        "the {tier} tier could not durably invalidate the old record (it is paused or failed); the change is \
         made in memory but not durable: after a crash the old value could return"
    )]
    NotDurable {
        /// The tier's name.
        tier: &'static str,
    },
}
