//! What a node is configured with: the merged, validated settings of
//! `strata serve` and `strata node` (the binary reads them from defaults,
//! the TOML file and the command line), and the config file's `[pool]`
//! table, which a new cluster's first node stores in etcd.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// Name of the volume created on first start.
pub const DEFAULT_VOLUME_NAME: &str = "default";

/// How connections are spread over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeModel {
    /// One single-threaded runtime per thread; a connection stays on one.
    PerCore {
        /// Number of threads.
        threads: usize,
    },
    /// tokio's multi-threaded, work-stealing runtime for everything.
    Shared,
}

/// The merged, validated settings.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Data directory.
    pub data_dir: PathBuf,
    /// I/O listen addresses.
    pub listen: Vec<SocketAddr>,
    /// Discovery listen addresses.
    pub discovery: Vec<SocketAddr>,
    /// HTTP API address.
    pub http: SocketAddr,
    /// Serve the API on an address other than loopback (plain HTTP).
    pub allow_remote_api: bool,
    /// The API's TLS certificate chain and key (PEM); with them the API
    /// is HTTPS and may listen on any address.
    pub http_tls: Option<(PathBuf, PathBuf)>,
    /// The CA that signed the nodes' API certificates, trusted (besides
    /// the system's CAs) when a node forwards a request to another node.
    pub http_tls_ca: Option<PathBuf>,
    /// Drive specs as given (`PATH[:SIZE]`, `mem:SIZE`).
    pub drives: Vec<String>,
    /// Default volume size in bytes (0 = none).
    pub default_volume_size: u64,
    /// Allow buffered I/O fallback.
    pub allow_buffered: bool,
    /// Extent size in bytes.
    pub extent_size: u32,
    /// Threading model for connections.
    pub runtime: RuntimeModel,
    /// Settings of the NVMe/TCP target: `poll_us`, and the config file's
    /// `max_pending_connections`, `max_connections`, `handshake_timeout`,
    /// `r2t_timeout`, `send_timeout`, `io_buffer_budget`,
    /// `drain_timeout`).
    pub target: strata_target::TargetConfig,
}

/// The `[pool]` table: the pool's settings, as `strata pool set` takes
/// them. They live in etcd, shared by every node: the first node to start
/// in a new cluster stores these; later, a node whose file differs from
/// what the pool holds logs a warning, and `strata pool set` changes them.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolFile {
    /// How long a node may stay down before its data is rebuilt
    /// elsewhere, e.g. "5m".
    pub rebuild_grace: Option<String>,
    /// Rebuild bandwidth per node, MB/s (0: no limit).
    pub rebuild_mbps: Option<u64>,
    /// Fill warning thresholds, percent of raw capacity.
    pub fill_warn: Option<Vec<u8>>,
    /// The protection the balancer evens out, e.g. "rep:3".
    pub balance_for: Option<String>,
}

/// Whole seconds of a duration such as `90s`, `5m`, `1h30m` or a bare
/// `600` (seconds), read by [`strata_block::parse_duration_or_secs`].
///
/// # Errors
///
/// Text that is not such a duration, or not a whole number of seconds,
/// with why.
pub fn parse_duration_secs(text: &str) -> Result<u64, String> {
    let d = strata_block::parse_duration_or_secs(text).map_err(|e| e.to_string())?;
    if d.subsec_nanos() != 0 {
        return Err(format!("{text:?} is not a whole number of seconds"));
    }
    Ok(d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_whole_seconds() {
        assert_eq!(parse_duration_secs("600"), Ok(600));
        assert_eq!(parse_duration_secs("90s"), Ok(90));
        assert_eq!(parse_duration_secs("5m"), Ok(300));
        assert_eq!(parse_duration_secs("1h30m"), Ok(5400));
        assert!(parse_duration_secs("1500ms").unwrap_err().contains("whole number of seconds"));
        for bad in ["", "5x", "-1s", "m"] {
            assert!(parse_duration_secs(bad).is_err(), "{bad}");
        }
    }
}
