//! The devices under a KV store's log tiers, opened from their
//! command-line specs: the SSD tier's file or block device
//! (`PATH[:SIZE]`) and the pool tier's volume over NVMe/TCP
//! (`tcp://ADDR:PORT[,ADDR:PORT...]/NQN`, namespace 1).
//!
//! This module owns parsing those specs and opening the devices; what a
//! store keeps on them is `strata-kv`'s. The benchmarks here and
//! `strata kv serve` both use it. It is not in `strata-kv` because
//! opening needs `strata-store` (the raw device) and `strata-host` (the
//! NVMe/TCP initiator), and `strata-kv` stays their sibling over the
//! `strata-block` contract, importing neither.
//!
//! Errors are [`TierError`] and [`PoolSpecError`]; their messages are the
//! ones the CLI prints (an error's sources follow it, `: `-separated).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use strata_block::{BlockDevice, parse_size};

/// Opening a tier failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TierError {
    /// An SSD spec with a size and no path (`:4G`).
    #[error("--ssd {spec:?}: no path")]
    NoPath {
        /// The spec as given.
        spec: String,
    },
    /// The SSD tier file's directory could not be created.
    #[error("cannot create {}", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The SSD tier's file or device could not be opened.
    #[error("SSD tier {}", path.display())]
    Ssd {
        /// The file or device.
        path: PathBuf,
        /// Why.
        #[source]
        source: strata_store::StoreError,
    },
    /// The pool tier's volume could not be reached within
    /// [`POOL_CONNECT_WAIT`].
    #[error("pool tier {spec}")]
    Pool {
        /// The volume.
        spec: PoolSpec,
        /// The last attempt's error.
        #[source]
        source: strata_host::HostError,
    },
}

/// Splits `PATH[:SIZE]`; a suffix that is not a size stays in the path.
///
/// # Errors
///
/// [`TierError::NoPath`] when a size follows an empty path.
pub fn parse_ssd(spec: &str) -> Result<(PathBuf, Option<u64>), TierError> {
    if let Some((path, size)) = spec.rsplit_once(':')
        && let Ok(n) = parse_size(size)
    {
        if path.is_empty() {
            return Err(TierError::NoPath { spec: spec.to_string() });
        }
        return Ok((PathBuf::from(path), Some(n)));
    }
    Ok((PathBuf::from(spec), None))
}

/// Opens an SSD tier's file (created at `size` when missing, with its
/// directory) or block device.
///
/// # Errors
///
/// [`TierError::CreateDir`] when the file's directory cannot be made,
/// [`TierError::Ssd`] when the file or device cannot be opened.
pub fn open_ssd(
    path: &Path,
    size: Option<u64>,
    allow_buffered: bool,
) -> Result<Arc<strata_store::RawDevice>, TierError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| TierError::CreateDir { dir: dir.to_path_buf(), source })?;
    }
    strata_store::RawDevice::open(path, size, allow_buffered)
        .map_err(|source| TierError::Ssd { path: path.to_path_buf(), source })
}

/// A pool tier's volume: `tcp://ADDR:PORT[,ADDR:PORT...]/NQN`, namespace 1.
pub type PoolSpec = strata_host::TargetUrl;

/// A pool spec that does not parse.
pub type PoolSpecError = strata_host::TargetUrlError;

/// Connects to a pool tier's volume over NVMe/TCP, with `timeout` for
/// each command, and as the most it fails over to other paths (a path's
/// loss, an owner's failover): a command waits for the pool at most that
/// long, and the store treats what fails as a miss.
/// A volume that is not served yet (a cluster still starting, an owner
/// moving) is asked for again, every second, for [`POOL_CONNECT_WAIT`].
///
/// # Errors
///
/// [`TierError::Pool`] with the last attempt's error once that wait is
/// over.
pub async fn connect_pool(t: &PoolSpec, timeout: Duration) -> Result<Arc<dyn BlockDevice>, TierError> {
    let started = std::time::Instant::now();
    let cfg = strata_host::HostConfig::default();
    loop {
        match strata_host::RemoteNamespace::connect_any(&t.addrs, &t.nqn, Some(1), &cfg).await {
            Ok(dev) => {
                dev.set_command_timeout(timeout);
                dev.set_failover_timeout(timeout);
                return Ok(dev);
            }
            Err(e) if started.elapsed() < POOL_CONNECT_WAIT => {
                tracing::warn!(target = %t, error = %e, "pool tier not reachable yet; trying again in a second");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(source) => return Err(TierError::Pool { spec: t.clone(), source }),
        }
    }
}

/// How long `strata kv serve` (and a benchmark) waits for its pool
/// volume at start.
pub const POOL_CONNECT_WAIT: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssd_specs_split_at_a_size_only() {
        assert_eq!(parse_ssd("a/b.log:4G").unwrap(), (PathBuf::from("a/b.log"), Some(4 << 30)));
        assert_eq!(parse_ssd("/dev/nvme0n1").unwrap(), (PathBuf::from("/dev/nvme0n1"), None));
        assert_eq!(parse_ssd("x:y").unwrap(), (PathBuf::from("x:y"), None));
        assert!(parse_ssd(":4G").is_err());
    }

    /// The messages are the CLI's: they were `String`s before these
    /// errors were typed, and must read the same.
    #[test]
    fn errors_read_as_the_cli_printed_them() {
        assert_eq!(parse_ssd(":4G").unwrap_err().to_string(), "--ssd \":4G\": no path");
    }
}
