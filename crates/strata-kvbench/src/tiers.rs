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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// Where to find it: any I/O port of the target, or of any node.
    pub addrs: Vec<std::net::SocketAddr>,
    /// The subsystem.
    pub nqn: String,
}

/// A pool spec that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PoolSpecError {
    /// Not `tcp://ADDRS/NQN`, or an empty NQN.
    #[error("{spec:?}: expected tcp://ADDR:PORT[,ADDR:PORT...]/NQN")]
    Shape {
        /// The spec as given.
        spec: String,
    },
    /// One of the addresses is not `IP:PORT`.
    #[error("{spec:?}: address {addr:?}: {reason}")]
    Address {
        /// The spec as given.
        spec: String,
        /// The address that did not parse.
        addr: String,
        /// Why (part of the message, so not a separate source).
        reason: std::net::AddrParseError,
    },
}

impl std::str::FromStr for PoolSpec {
    type Err = PoolSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let shape = || PoolSpecError::Shape { spec: s.to_string() };
        let rest = s.strip_prefix("tcp://").ok_or_else(shape)?;
        let (addrs, nqn) = rest.split_once('/').ok_or_else(shape)?;
        if nqn.is_empty() {
            return Err(shape());
        }
        let addrs = addrs
            .split(',')
            .map(|a| {
                a.trim().parse().map_err(|reason| PoolSpecError::Address {
                    spec: s.to_string(),
                    addr: a.to_string(),
                    reason,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PoolSpec { addrs, nqn: nqn.to_string() })
    }
}

impl std::fmt::Display for PoolSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<String> = self.addrs.iter().map(ToString::to_string).collect();
        write!(f, "tcp://{}/{}", addrs.join(","), self.nqn)
    }
}

/// Connects to a pool tier's volume over NVMe/TCP, with `timeout` for
/// each command.
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

    #[test]
    fn pool_specs_take_one_address_or_several() {
        let one: PoolSpec = "tcp://127.0.0.1:4420/nqn.x".parse().unwrap();
        assert_eq!((one.addrs.len(), one.nqn.as_str()), (1, "nqn.x"));
        let three: PoolSpec = "tcp://10.0.0.1:4420,10.0.0.2:4420,[::1]:4421/nqn.y".parse().unwrap();
        assert_eq!(three.addrs.len(), 3);
        assert_eq!(three.to_string(), "tcp://10.0.0.1:4420,10.0.0.2:4420,[::1]:4421/nqn.y");
        for bad in ["127.0.0.1:4420/nqn", "tcp://127.0.0.1:4420", "tcp://127.0.0.1:4420/", "tcp://a,b/nqn", "tcp:///n"]
        {
            assert!(bad.parse::<PoolSpec>().is_err(), "{bad}");
        }
    }

    /// The messages are the CLI's: they were `String`s before these
    /// errors were typed, and must read the same.
    #[test]
    fn errors_read_as_the_cli_printed_them() {
        let shape = "tcp://127.0.0.1:4420".parse::<PoolSpec>().unwrap_err();
        assert_eq!(shape.to_string(), "\"tcp://127.0.0.1:4420\": expected tcp://ADDR:PORT[,ADDR:PORT...]/NQN");
        let addr = "tcp://a, b/nqn".parse::<PoolSpec>().unwrap_err();
        assert_eq!(addr.to_string(), "\"tcp://a, b/nqn\": address \"a\": invalid socket address syntax");
        assert_eq!(parse_ssd(":4G").unwrap_err().to_string(), "--ssd \":4G\": no path");
    }
}
