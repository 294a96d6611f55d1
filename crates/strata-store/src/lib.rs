//! strata's node store: one node's drives pooled into thin volumes.
//!
//! A drive is a sparse file, a block device (used whole) or `mem:SIZE`
//! (volatile RAM, for benchmarks and tests). Volumes are thin: space is
//! allocated on first write in fixed extents (1 MiB by default, recorded in
//! each drive's superblock); unwritten and deallocated ranges read as
//! zeros; deallocation gives space back. Each [`Volume`] implements
//! [`strata_block::BlockDevice`], so the NVMe/TCP target serves it
//! directly.
//!
//! Durability follows the NVMe volatile-write-cache model: a completed
//! write is durable after a flush completes, or at once with FUA. The
//! protocol (zero before map, group commit of the reverse-map journal,
//! frees reusable only after they are durable and drained) and its crash
//! analysis are in `docs/durability.md` beside this crate's `Cargo.toml`;
//! the on-disk format is in the `format` module.
//!
//! Drive I/O goes through one io_uring thread per drive with `O_DIRECT`
//! (a pread/pwrite thread when io_uring is unavailable).
//!
//! ```
//! use strata_block::{BlockDevice, IoBuf};
//! use strata_store::{Store, StoreConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! let mut cfg = StoreConfig::new(vec!["mem:64M".parse()?]);
//! cfg.extent_size = 64 * 1024;
//! let store = Store::open(cfg)?;
//! let vol = store.open_volume(1, 16 << 20, 4096)?;
//! rt.block_on(async {
//!     let (_, r) = vol.write(10, IoBuf::from_slice(&[7; 4096]), false).await;
//!     r?;
//!     vol.flush().await?;
//!     let (back, r) = vol.read(10, IoBuf::zeroed(4096)).await;
//!     r?;
//!     assert!(back.iter().all(|&b| b == 7));
//!     assert_eq!(vol.usage().allocated_bytes, 64 * 1024);
//!     Ok::<_, Box<dyn std::error::Error>>(())
//! })?;
//! # Ok(()) }
//! ```

mod drive;
mod error;
mod format;
#[cfg(any(test, fuzzing))]
pub mod fuzzing;
mod io;
mod raw;
mod shared;
mod spec;
mod store;
mod sys;
mod volume;

#[cfg(test)]
mod cancel_tests;
#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod tests;

pub use drive::DriveClass;
pub use error::StoreError;
pub use format::FORMAT_VERSION;
pub use raw::{RAW_BLOCK, RawDevice};
pub use spec::{DEFAULT_EXTENT_SIZE, DriveKind, DriveSpec, MAX_EXTENT_SIZE, MIN_EXTENT_SIZE, StoreConfig};
pub use store::{DriveStats, MAX_VOLUME_EXTENTS, Store, StoreStats};
pub use volume::Volume;
