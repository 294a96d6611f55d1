//! `strata serve` settings: defaults, the TOML config file, and command
//! line overrides, merged in that order (the command line wins).
//!
//! ```toml
//! data_dir = "/var/lib/strata"
//! listen = ["0.0.0.0:4420"]
//! discovery = ["0.0.0.0:8009"]
//! http = "127.0.0.1:7420"
//! drives = ["/dev/nvme1n1", "/var/lib/strata/extra.img:100G"]
//! default_volume_size = "8G"
//! log_format = "json"
//! ```
//!
//! `dist/strata.toml` is a sample with every key; a test loads it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::logging::LogFormat;
use anyhow::{Context, bail};
use serde::Deserialize;
pub use strata_node::config::{PoolFile, RuntimeModel, ServeConfig, parse_duration_secs};

/// Default data directory, relative to the working directory.
pub const DEFAULT_DATA_DIR: &str = "./strata-data";
/// Default NVMe/TCP I/O address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4420";
/// Default discovery address.
pub const DEFAULT_DISCOVERY: &str = "127.0.0.1:8009";
/// Default HTTP API address.
pub const DEFAULT_HTTP: &str = "127.0.0.1:7420";
/// Size of the sparse drive file created when no drive is configured.
pub const DEFAULT_DRIVE_SIZE: &str = "64G";
/// Size of the volume created on first start.
pub const DEFAULT_VOLUME_SIZE: &str = "8G";
/// The config file: every key optional, same names as the long options.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Data directory.
    pub data_dir: Option<PathBuf>,
    /// NVMe/TCP I/O listen addresses.
    pub listen: Option<Vec<String>>,
    /// Discovery listen addresses.
    pub discovery: Option<Vec<String>>,
    /// HTTP API address.
    pub http: Option<String>,
    /// Serve the API on an address other than loopback (plain HTTP).
    pub allow_remote_api: Option<bool>,
    /// The API's TLS certificate chain (PEM): HTTPS.
    pub http_tls_cert: Option<PathBuf>,
    /// Its private key (PEM, mode 0600).
    pub http_tls_key: Option<PathBuf>,
    /// The CA of the other nodes' API certificates (for forwarding).
    pub http_tls_ca: Option<PathBuf>,
    /// Drives: `PATH[:SIZE]`, a block device, or `mem:SIZE`.
    pub drives: Option<Vec<String>>,
    /// Size of the default drive file when `drives` is empty.
    pub drive_size: Option<String>,
    /// Size of the default volume created on first start; "0" for none.
    pub default_volume_size: Option<String>,
    /// Allow buffered I/O on file systems without O_DIRECT (tmpfs).
    pub allow_buffered: Option<bool>,
    /// Extent size for newly formatted drives.
    pub extent_size: Option<String>,
    /// Connection threading model: "per-core" or "shared".
    pub runtime: Option<String>,
    /// Threads serving connections in the per-core model.
    pub io_threads: Option<usize>,
    /// Microseconds an idle I/O queue busy-polls before sleeping.
    pub poll_us: Option<u64>,
    /// Record per-volume and per-host I/O metrics (default true).
    pub metrics: Option<bool>,
    /// TLS on the NVMe/TCP and discovery ports: off, allowed, required.
    pub tls: Option<String>,
    /// How TLS PSKs are derived from hosts' configured PSKs: compat
    /// (libnvme 1.13 and earlier, the default) or rfc8446.
    pub tls_derivation: Option<String>,
    /// Connections that have not completed Connect, at most.
    pub max_pending_connections: Option<usize>,
    /// TCP connections served at once, at most.
    pub max_connections: Option<usize>,
    /// Time from accept to Connect, e.g. "10s".
    pub handshake_timeout: Option<String>,
    /// Time a host has to send the data of an R2T.
    pub r2t_timeout: Option<String>,
    /// Time a send to a host may make no progress.
    pub send_timeout: Option<String>,
    /// Bytes of command data buffers in flight over all connections.
    pub io_buffer_budget: Option<String>,
    /// How long commands of a closed connection are waited for.
    pub drain_timeout: Option<String>,
    /// Log lines on stderr: "text" (the default) or "json".
    pub log_format: Option<LogFormat>,
    /// `[node]`: settings of `strata node`; `strata serve` ignores them.
    pub node: Option<NodeFile>,
    /// `[pool]`: the pool's settings a new cluster starts with (see
    /// [`PoolFile`]); `strata serve` ignores them.
    pub pool: Option<PoolFile>,
}

/// The `[pool]` table of the config file at `path` (empty when absent).
///
/// # Errors
///
/// The file cannot be read or is not valid.
pub fn pool_file(path: Option<&Path>) -> anyhow::Result<PoolFile> {
    match path {
        Some(p) => Ok(read_file(p)?.pool.unwrap_or_default()),
        None => Ok(PoolFile::default()),
    }
}

/// The log format: `--log-format` (or `STRATA_LOG_FORMAT`) over the
/// config file's `log_format` over text.
///
/// # Errors
///
/// The config file cannot be read or is not valid.
pub fn log_format(args: &ServeArgs) -> anyhow::Result<LogFormat> {
    if let Some(f) = args.log_format {
        return Ok(f);
    }
    match &args.config {
        Some(p) => Ok(read_file(p)?.log_format.unwrap_or_default()),
        None => Ok(LogFormat::default()),
    }
}

/// The `[node]` table: the options of `strata node`, same names.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    /// The node's name, unique in the cluster.
    pub name: Option<String>,
    /// etcd endpoints.
    pub etcd: Option<Vec<String>>,
    /// Key prefix of the cluster in etcd.
    pub etcd_prefix: Option<String>,
    /// CA certificate of etcd's certificates (https endpoints).
    pub etcd_ca: Option<std::path::PathBuf>,
    /// Client certificate for etcd.
    pub etcd_cert: Option<std::path::PathBuf>,
    /// Its key.
    pub etcd_key: Option<std::path::PathBuf>,
    /// Failure-domain labels, e.g. `{ rack = "r1", pod = "p1" }`.
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    /// The failure domain copies are spread over.
    pub failure_domain: Option<String>,
    /// The internal fabric listener.
    pub fabric: Option<String>,
    /// Seconds of the node's lease.
    pub lease_ttl: Option<u64>,
}

/// The `[node]` table of the config file at `path` (empty when absent).
///
/// # Errors
///
/// The file cannot be read or is not valid.
pub fn node_file(path: Option<&Path>) -> anyhow::Result<NodeFile> {
    match path {
        Some(p) => Ok(read_file(p)?.node.unwrap_or_default()),
        None => Ok(NodeFile::default()),
    }
}

/// Command-line overrides (all optional; see `strata serve --help`).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct ServeArgs {
    /// Data directory (metadata, default drive file). Default: ./strata-data
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// NVMe/TCP I/O address, repeatable. Default: 127.0.0.1:4420
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Vec<String>,
    /// Discovery address, repeatable. Default: 127.0.0.1:8009
    #[arg(long, value_name = "ADDR:PORT")]
    pub discovery: Vec<String>,
    /// HTTP API address. Default: 127.0.0.1:7420
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<String>,
    /// Serve the HTTP API on an address other than loopback. It is plain
    /// HTTP: its bearer tokens cross the network in clear text, so only
    /// on a trusted management network.
    #[arg(long)]
    pub allow_remote_api: bool,
    /// Serve the HTTP API over TLS (HTTPS) with this certificate chain
    /// (PEM); then it may listen on any address. Clients trust it through
    /// the system's CAs or STRATA_API_CA.
    #[arg(long, value_name = "FILE", requires = "http_tls_key")]
    pub http_tls_cert: Option<PathBuf>,
    /// The API certificate's private key (PEM, mode 0600).
    #[arg(long, value_name = "FILE", requires = "http_tls_cert")]
    pub http_tls_key: Option<PathBuf>,
    /// The CA that signed the other nodes' API certificates, trusted when
    /// a node forwards a request to another (a cluster with HTTPS APIs).
    #[arg(long, value_name = "FILE")]
    pub http_tls_ca: Option<PathBuf>,
    /// A drive: a file created sparse with SIZE if missing (PATH:SIZE), a
    /// block device used whole, or volatile RAM (mem:SIZE). Repeatable.
    /// Default: DATA_DIR/drive0.img of --drive-size.
    #[arg(long = "drive", value_name = "PATH[:SIZE]")]
    pub drives: Vec<String>,
    /// Size of the default drive file. Default: 64G (sparse)
    #[arg(long, value_name = "SIZE")]
    pub drive_size: Option<String>,
    /// Size of the volume created on first start; 0 for none. Default: 8G
    #[arg(long, value_name = "SIZE")]
    pub default_volume_size: Option<String>,
    /// Fall back to buffered I/O + fdatasync where O_DIRECT is refused.
    #[arg(long)]
    pub allow_buffered: bool,
    /// Extent size for newly formatted drives. Default: 1M
    #[arg(long, value_name = "SIZE")]
    pub extent_size: Option<String>,
    /// Connection threading: per-core (each connection lives on one of
    /// --io-threads single-threaded runtimes) or shared (one work-stealing
    /// pool). Default: shared (per-core measured no faster on 2 cores; see docs/performance.md)
    #[arg(long, value_name = "MODEL")]
    pub runtime: Option<String>,
    /// Threads for connections in the per-core model. Default: CPUs
    /// available to the process
    #[arg(long, value_name = "N")]
    pub io_threads: Option<usize>,
    /// Microseconds an idle I/O queue busy-polls its socket before it
    /// sleeps: lower latency for more CPU, for dedicated cores. Default: 0
    #[arg(long, value_name = "US")]
    pub poll_us: Option<u64>,
    /// Do not record per-volume and per-host I/O metrics (counts, bytes,
    /// latency histograms) on the data path: to measure what they cost.
    /// Config file: `metrics = false`. Default: recorded
    #[arg(long)]
    pub no_io_metrics: bool,
    /// TLS 1.3 with pre-shared keys on the NVMe/TCP and discovery ports:
    /// off, allowed (each host chooses) or required. Hosts prove the PSK
    /// given with `strata host add NQN --tls-psk`. Default: off
    #[arg(long, value_name = "MODE")]
    pub tls: Option<String>,
    /// How TLS PSKs are derived from configured ones: compat (what
    /// libnvme up to 1.13, e.g. nvme-cli 2.13, puts in the kernel's
    /// keyring) or rfc8446 (later libnvme). Default: compat
    #[arg(long, value_name = "KIND")]
    pub tls_derivation: Option<String>,
    /// Log lines on stderr: text (coloured only on a terminal without
    /// NO_COLOR) or json (one object per line). Default: text
    #[arg(long, value_name = "FORMAT", env = "STRATA_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// TOML config file with the same keys.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

fn addrs(values: &[String], what: &str) -> anyhow::Result<Vec<SocketAddr>> {
    values
        .iter()
        .map(|v| {
            v.parse::<SocketAddr>()
                .with_context(|| format!("{what} address {v:?} is not ADDR:PORT (e.g. 0.0.0.0:4420 or [::]:4420)"))
        })
        .collect()
}

fn duration(v: Option<String>, what: &str, default: Duration) -> anyhow::Result<Duration> {
    let Some(v) = v else { return Ok(default) };
    let d = strata_block::parse_duration(&v)
        .with_context(|| format!("{what} {v:?} is not a duration such as 10s or 500ms"))?;
    if d.is_zero() {
        bail!("{what} must be more than zero");
    }
    Ok(d)
}

/// The target's settings from the config file over its defaults.
fn target_config(file: &mut FileConfig, poll: Duration) -> anyhow::Result<strata_target::TargetConfig> {
    let d = strata_target::TargetConfig::default();
    let count = |v: Option<usize>, what: &str, default: usize| match v {
        Some(0) => bail!("{what} must be at least 1"),
        v => Ok(v.unwrap_or(default)),
    };
    let budget = match file.io_buffer_budget.take() {
        Some(v) => usize::try_from(size(&v, "io_buffer_budget")?).context("io_buffer_budget is too large")?,
        None => default_buffer_budget(),
    };
    let max_transfer = d.max_transfer();
    if budget < 2 * max_transfer {
        bail!(
            "io_buffer_budget must be at least twice the largest transfer ({max_transfer} bytes): half of it holds data"
        );
    }
    Ok(strata_target::TargetConfig {
        poll,
        max_pending_connections: count(
            file.max_pending_connections,
            "max_pending_connections",
            d.max_pending_connections,
        )?,
        max_connections: count(file.max_connections, "max_connections", d.max_connections)?,
        handshake_timeout: duration(file.handshake_timeout.take(), "handshake_timeout", d.handshake_timeout)?,
        r2t_timeout: duration(file.r2t_timeout.take(), "r2t_timeout", d.r2t_timeout)?,
        send_timeout: duration(file.send_timeout.take(), "send_timeout", d.send_timeout)?,
        io_buffer_budget: budget,
        drain_timeout: duration(file.drain_timeout.take(), "drain_timeout", d.drain_timeout)?,
        ..d
    })
}

/// The default `io_buffer_budget`: a quarter of the machine's memory, at
/// least the target's own default (1 GiB). I/O queues prepay their
/// commands from it, so it decides how many hosts can connect.
fn default_buffer_budget() -> usize {
    let floor = strata_target::TargetConfig::default().io_buffer_budget;
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        usize::try_from(kib.saturating_mul(1024)).ok()
    });
    total.map_or(floor, |t| (t / 4).max(floor))
}

fn size(v: &str, what: &str) -> anyhow::Result<u64> {
    strata_meta::parse_size(v).with_context(|| format!("{what} {v:?} is not a size such as 8G, 512M or 4096"))
}

/// Merges defaults, the config file named by `--config` and the command
/// line.
///
/// # Errors
///
/// A message naming the bad key or option.
pub fn load(args: &ServeArgs) -> anyhow::Result<ServeConfig> {
    let mut file = match &args.config {
        Some(path) => read_file(path)?,
        None => FileConfig::default(),
    };
    let poll = Duration::from_micros(args.poll_us.or(file.poll_us).unwrap_or(0).min(1_000_000));
    let mut target = target_config(&mut file, poll)?;
    if let Some(mode) = args.tls.clone().or(file.tls.take()) {
        target.tls = mode.parse().map_err(|e: String| anyhow::anyhow!("--tls: {e}"))?;
    }
    if let Some(d) = args.tls_derivation.clone().or(file.tls_derivation.take()) {
        target.tls_derivation = d.parse().map_err(|e: String| anyhow::anyhow!("--tls-derivation: {e}"))?;
    }
    target.io_metrics = !args.no_io_metrics && file.metrics.unwrap_or(true);
    let data_dir = args.data_dir.clone().or(file.data_dir).unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let pick = |cli: &[String], file: Option<Vec<String>>, default: &str| -> Vec<String> {
        if !cli.is_empty() { cli.to_vec() } else { file.unwrap_or_else(|| vec![default.to_string()]) }
    };
    let listen = addrs(&pick(&args.listen, file.listen, DEFAULT_LISTEN), "--listen")?;
    let discovery = addrs(&pick(&args.discovery, file.discovery, DEFAULT_DISCOVERY), "--discovery")?;
    let http = args.http.clone().or(file.http).unwrap_or_else(|| DEFAULT_HTTP.to_string());
    let http = addrs(&[http], "--http")?[0];
    let mut drives = if args.drives.is_empty() { file.drives.unwrap_or_default() } else { args.drives.clone() };
    if drives.is_empty() {
        let drive_size = args.drive_size.clone().or(file.drive_size).unwrap_or_else(|| DEFAULT_DRIVE_SIZE.into());
        size(&drive_size, "--drive-size")?;
        drives.push(format!("{}:{drive_size}", data_dir.join("drive0.img").display()));
    }
    let dvs =
        args.default_volume_size.clone().or(file.default_volume_size).unwrap_or_else(|| DEFAULT_VOLUME_SIZE.into());
    let default_volume_size = if dvs.trim() == "0" { 0 } else { size(&dvs, "--default-volume-size")? };
    let extent = args.extent_size.clone().or(file.extent_size).unwrap_or_else(|| "1M".into());
    let extent_size = u32::try_from(size(&extent, "--extent-size")?).context("--extent-size is too large")?;
    if listen.is_empty() {
        bail!("at least one --listen address is needed");
    }
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads = args.io_threads.or(file.io_threads).unwrap_or(cpus);
    if threads == 0 || threads > 1024 {
        bail!("--io-threads {threads} must be between 1 and 1024");
    }
    let runtime = match args.runtime.clone().or(file.runtime).as_deref().unwrap_or("shared") {
        "per-core" => RuntimeModel::PerCore { threads },
        "shared" => RuntimeModel::Shared,
        other => bail!("--runtime {other:?} must be per-core or shared"),
    };
    Ok(ServeConfig {
        data_dir,
        listen,
        discovery,
        http,
        allow_remote_api: args.allow_remote_api || file.allow_remote_api.unwrap_or(false),
        http_tls: match (
            args.http_tls_cert.clone().or(file.http_tls_cert),
            args.http_tls_key.clone().or(file.http_tls_key),
        ) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => bail!("http_tls_cert and http_tls_key go together"),
        },
        http_tls_ca: args.http_tls_ca.clone().or(file.http_tls_ca),
        drives,
        default_volume_size,
        allow_buffered: args.allow_buffered || file.allow_buffered.unwrap_or(false),
        extent_size,
        runtime,
        target,
    })
}

/// Reads a secret file (a password, a TLS key), refusing one that others
/// may read.
///
/// # Errors
///
/// The file cannot be read, or its mode lets others read it.
pub fn read_secret(path: &std::path::Path) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    let mode = meta.permissions().mode();
    anyhow::ensure!(
        mode & 0o077 == 0,
        "{} holds secrets but is readable by others (mode {:o}): chmod 600 {}",
        path.display(),
        mode & 0o777,
        path.display()
    );
    std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))
}

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("config file {} is not valid", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_need_no_config() {
        let c = load(&ServeArgs::default()).unwrap();
        assert_eq!(c.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert_eq!(c.listen, vec!["127.0.0.1:4420".parse().unwrap()]);
        assert_eq!(c.discovery, vec!["127.0.0.1:8009".parse().unwrap()]);
        assert_eq!(c.http, "127.0.0.1:7420".parse().unwrap());
        assert_eq!(c.drives, vec!["./strata-data/drive0.img:64G".to_string()]);
        assert_eq!(c.default_volume_size, 8 << 30);
    }

    #[test]
    fn command_line_overrides_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strata.toml");
        std::fs::write(
            &path,
            "data_dir = \"/srv/x\"\nlisten = [\"0.0.0.0:4421\"]\nhttp = \"127.0.0.1:1\"\ndrives = [\"mem:1G\"]\n",
        )
        .unwrap();
        let args = ServeArgs { config: Some(path), http: Some("127.0.0.1:2".into()), ..Default::default() };
        let c = load(&args).unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/srv/x"));
        assert_eq!(c.listen, vec!["0.0.0.0:4421".parse().unwrap()]);
        assert_eq!(c.http, "127.0.0.1:2".parse().unwrap());
        assert_eq!(c.drives, vec!["mem:1G".to_string()]);
    }

    #[test]
    fn bad_values_are_named() {
        let args = ServeArgs { listen: vec!["localhost".into()], ..Default::default() };
        let e = format!("{:#}", load(&args).unwrap_err());
        assert!(e.contains("--listen") && e.contains("localhost"), "{e}");
        let args = ServeArgs { default_volume_size: Some("lots".into()), ..Default::default() };
        assert!(format!("{:#}", load(&args).unwrap_err()).contains("--default-volume-size"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "listne = []\n").unwrap();
        let args = ServeArgs { config: Some(path), ..Default::default() };
        let e = format!("{:#}", load(&args).unwrap_err());
        assert!(e.contains("listne"), "{e}");
    }

    #[test]
    fn tls_comes_from_the_file_or_the_command_line_and_bad_modes_are_named() {
        use strata_tls::TlsMode;
        assert_eq!(load(&ServeArgs::default()).unwrap().target.tls, TlsMode::Off);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strata.toml");
        std::fs::write(&path, "tls = \"allowed\"\ntls_derivation = \"rfc8446\"\n").unwrap();
        let t = load(&ServeArgs { config: Some(path.clone()), ..Default::default() }).unwrap().target;
        assert_eq!((t.tls, t.tls_derivation), (TlsMode::Allowed, strata_auth::Derivation::Rfc8446));
        let args = ServeArgs { config: Some(path), tls: Some("required".into()), ..Default::default() };
        assert_eq!(load(&args).unwrap().target.tls, TlsMode::Required);
        let e = format!("{:#}", load(&ServeArgs { tls: Some("on".into()), ..Default::default() }).unwrap_err());
        assert!(e.contains("--tls") && e.contains("off, allowed or required"), "{e}");
        let args = ServeArgs { tls_derivation: Some("x".into()), ..Default::default() };
        assert!(format!("{:#}", load(&args).unwrap_err()).contains("--tls-derivation"));
    }

    /// `dist/strata.toml`, the sample shipped beside the systemd units.
    fn sample() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/strata.toml")
    }

    #[test]
    fn the_sample_config_loads_as_shipped_and_with_every_key_set() {
        let c = load(&ServeArgs { config: Some(sample()), ..Default::default() }).unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/strata"));
        // "#key = value" lines are settings: uncommented, each must be a
        // key this version knows, with a value it accepts.
        let text = std::fs::read_to_string(sample()).unwrap();
        let all: String = text
            .lines()
            .map(|l| match l.strip_prefix('#') {
                Some(rest) if rest.starts_with(|c: char| c.is_ascii_lowercase() || c == '[') => rest,
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("all.toml");
        std::fs::write(&path, &all).unwrap();
        let c = load(&ServeArgs { config: Some(path.clone()), ..Default::default() }).unwrap();
        assert_eq!(c.drives, vec!["/dev/nvme1n1".to_string(), "/dev/nvme2n1".to_string()]);
        assert_eq!(
            log_format(&ServeArgs { config: Some(path.clone()), ..Default::default() }).unwrap(),
            LogFormat::Text
        );
        let node = node_file(Some(&path)).unwrap();
        assert_eq!(node.etcd.map(|e| e.len()), Some(3));
        assert_eq!(pool_file(Some(&path)).unwrap().rebuild_mbps, Some(200));
        for key in ["max_connections", "io_buffer_budget", "log_format", "tls_derivation", "lease_ttl", "balance_for"] {
            assert!(all.lines().any(|l| l.starts_with(&format!("{key} = "))), "the sample lacks {key}");
        }
    }

    #[test]
    fn io_metrics_are_on_unless_the_file_or_the_flag_turns_them_off() {
        assert!(load(&ServeArgs::default()).unwrap().target.io_metrics);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strata.toml");
        std::fs::write(&path, "metrics = false\n").unwrap();
        assert!(!load(&ServeArgs { config: Some(path.clone()), ..Default::default() }).unwrap().target.io_metrics);
        std::fs::write(&path, "metrics = true\n").unwrap();
        let args = ServeArgs { config: Some(path), no_io_metrics: true, ..Default::default() };
        assert!(!load(&args).unwrap().target.io_metrics, "the flag wins");
    }

    #[test]
    fn log_format_comes_from_the_command_line_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strata.toml");
        std::fs::write(&path, "log_format = \"json\"\n").unwrap();
        let args = ServeArgs { config: Some(path.clone()), ..Default::default() };
        assert_eq!(log_format(&args).unwrap(), LogFormat::Json);
        load(&args).unwrap();
        let args = ServeArgs { config: Some(path.clone()), log_format: Some(LogFormat::Text), ..Default::default() };
        assert_eq!(log_format(&args).unwrap(), LogFormat::Text);
        assert_eq!(log_format(&ServeArgs::default()).unwrap(), LogFormat::Text);
        std::fs::write(&path, "log_format = \"xml\"\n").unwrap();
        let e = format!("{:#}", log_format(&ServeArgs { config: Some(path), ..Default::default() }).unwrap_err());
        assert!(e.contains("xml"), "{e}");
    }

    #[test]
    fn target_limits_come_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strata.toml");
        std::fs::write(
            &path,
            "handshake_timeout = \"2s\"\nr2t_timeout = \"1500ms\"\nsend_timeout = \"3s\"\n\
             max_pending_connections = 64\nio_buffer_budget = \"64M\"\ndrain_timeout = \"1m\"\n",
        )
        .unwrap();
        let c = load(&ServeArgs { config: Some(path.clone()), ..Default::default() }).unwrap();
        let t = &c.target;
        assert_eq!(t.handshake_timeout, Duration::from_secs(2));
        assert_eq!(t.r2t_timeout, Duration::from_millis(1500));
        assert_eq!(t.send_timeout, Duration::from_secs(3));
        assert_eq!(t.max_pending_connections, 64);
        assert_eq!(t.io_buffer_budget, 64 << 20);
        assert_eq!(t.drain_timeout, Duration::from_secs(60));
        let d = load(&ServeArgs::default()).unwrap().target;
        assert_eq!(d.handshake_timeout, strata_target::TargetConfig::default().handshake_timeout);
        assert!(d.io_buffer_budget >= strata_target::TargetConfig::default().io_buffer_budget);
        for bad in [
            "send_timeout = \"soon\"",
            "r2t_timeout = \"0s\"",
            "io_buffer_budget = \"4K\"",
            "max_pending_connections = 0",
        ] {
            std::fs::write(&path, bad).unwrap();
            let e = format!("{:#}", load(&ServeArgs { config: Some(path.clone()), ..Default::default() }).unwrap_err());
            let key = bad.split(' ').next().unwrap();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }
}
