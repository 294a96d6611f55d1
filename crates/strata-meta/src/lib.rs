//! strata's metadata store: the source of truth for volumes and their NVMe
//! identity, and for small node-level settings.
//!
//! [`MetaStore`] is the contract, an async trait usable as
//! `Arc<dyn MetaStore>`. [`RedbMetaStore`] keeps it in one embedded redb
//! file (`DATA_DIR/meta.redb`, single machine), [`EtcdMetaStore`] in etcd
//! (a cluster), [`MemMetaStore`] in memory (tests of other crates). The
//! rules every backend applies (name and NQN validation, id and
//! namespace-id allocation, optimistic concurrency by generation) live
//! once, in this crate, so all backends answer alike. Size parsing and
//! validation helpers are shared with the binary's CLI and HTTP API.
//! [`etcd`] is the etcd client under the etcd backend, for the pool's
//! leases, cluster map and watches too. `docs/metadata.md` describes the
//! backends, the etcd key layout and what is atomic.
//!
//! ```
//! use strata_meta::{MetaError, MetaStore, NewVolume, RedbMetaStore, format_size, parse_size};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let store = RedbMetaStore::open_in_dir(dir.path())?;
//! let vol = store.create_volume(NewVolume::new("vol1", parse_size("8G")?)).await?;
//! assert_eq!(vol.nqn, "nqn.2026-11.io.strata:vol1");
//! assert_eq!(format_size(vol.size_bytes), "8 GiB");
//!
//! // Updates carry the generation they read; a stale one is refused.
//! let mut bigger = vol.clone();
//! bigger.size_bytes = parse_size("16G")?;
//! store.update_volume(&bigger).await?;
//! assert!(matches!(store.update_volume(&bigger).await, Err(MetaError::Conflict { .. })));
//! # Ok(()) }
//! ```

mod error;
pub mod etcd;
mod etcd_store;
mod format;
#[cfg(any(test, fuzzing))]
pub mod fuzzing;
mod mem;
mod record;
mod redb_store;
mod store;
mod sys;
#[cfg(any(test, feature = "test-utils"))]
pub mod testing;
mod validate;

pub use error::MetaError;
pub use etcd_store::{DEFAULT_ETCD_PREFIX, ETCD_STORE_FORMAT_VERSION, EtcdMetaStore, MAX_CAS_ATTEMPTS};
pub use format::FORMAT_VERSION;
pub use mem::MemMetaStore;
pub use record::{BLOCK_SIZES, NewVolume, VolumeRecord};
pub use redb_store::{META_FILE_NAME, RedbMetaStore, STORE_FORMAT_VERSION};
// Sizes are parsed in one place for the whole project (drive specs too).
pub use store::{MAX_CONFIG_KEY_LEN, MAX_CONFIG_VALUE_LEN, MetaFuture, MetaStore};
pub use strata_block::size::{SizeError, format_size, parse_size};
pub use validate::{
    DEFAULT_NQN_PREFIX, DISCOVERY_NQN, MAX_NQN_LEN, MAX_VOLUME_NAME_LEN, NameError, NqnError, default_nqn,
    validate_nqn, validate_subsystem_nqn, validate_volume_name,
};
