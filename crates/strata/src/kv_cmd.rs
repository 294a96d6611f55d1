//! `strata kv serve`: the tiered KV-cache store behind a Redis-protocol
//! listener. With no arguments: 127.0.0.1:6380, 1 GiB of DRAM and a
//! 4 GiB SSD tier file under `./strata-data/kv`.
//!
//! Without a password (`--requirepass-file`) or users (`--users`) the port
//! is open to whoever reaches it, so it only listens on loopback; any
//! other address is refused at start. Secret files must be readable by
//! their owner only.

use std::sync::Arc;

use anyhow::Context;
use strata_block::{BlockDevice, parse_size};
use strata_kv::server::ServerConfig;
use strata_kv::{Admit, KvConfig, KvStore};
use strata_kvbench::tiers::{PoolSpec, connect_pool, open_ssd, parse_ssd};

/// `strata kv ...`
#[derive(clap::Args)]
pub struct KvArgs {
    #[command(subcommand)]
    command: KvCommand,
}

#[derive(clap::Subcommand)]
enum KvCommand {
    /// Serve the KV-cache store over the Redis protocol (RESP2/RESP3).
    Serve(ServeArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6380")]
    listen: std::net::SocketAddr,
    /// DRAM tier capacity (keys, values and per-entry overhead).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    dram: u64,
    /// SSD tier: a file (created at SIZE when missing) or a block device,
    /// as PATH[:SIZE]; `none` for DRAM only.
    #[arg(long, default_value = "./strata-data/kv/ssd.log:4G")]
    ssd: String,
    /// Segment size of a newly formatted SSD tier (the largest value it
    /// holds). Default: a sixteenth of the device, 1M..256M.
    #[arg(long, value_parser = parse_size)]
    ssd_segment: Option<u64>,
    /// Pool tier: a strata volume (or any NVMe/TCP namespace 1) as
    /// tcp://ADDR:PORT[,ADDR:PORT...]/NQN, used whole as a log below the
    /// SSD tier. On a cluster, list several nodes: each (re)connect asks
    /// them where the volume is served now, so the tier follows its owner.
    #[arg(long)]
    pool: Option<PoolSpec>,
    /// With --pool: how long one pool command may take, and how long it
    /// fails over to the volume's other paths (an owner's failover, a
    /// lost path), before it fails (the tier then pauses, and resumes
    /// once the volume answers).
    #[arg(long, default_value = "5s", value_parser = parse_timeout)]
    pool_timeout: std::time::Duration,
    /// With --pool: this server's region of a pool volume shared by N KV
    /// servers, as I/N (0-based). The volume is cut in N equal regions;
    /// this server writes region I and reads the others, so that its
    /// lookups see the blocks the other servers wrote.
    #[arg(long, default_value = "0/1", value_parser = parse_region)]
    pool_region: (u64, u64),
    /// Which blocks leaving DRAM are written to SSD: `auto` (every block
    /// while the SSD holds a tenth of the working set, the distinct blocks
    /// stored, or more; else as `reused`), `reused` (read again while in
    /// DRAM; one-hit blocks never touch the drive) or `all`.
    #[arg(long, default_value = "auto")]
    admit: String,
    /// Log lines on stderr: text (coloured only on a terminal without
    /// NO_COLOR) or json (one object per line).
    #[arg(long, value_name = "FORMAT", env = "STRATA_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: crate::logging::LogFormat,
    /// Accept a file system without O_DIRECT (tmpfs) for the SSD tier.
    #[arg(long)]
    allow_buffered: bool,
    /// Most client connections at once.
    #[arg(long, default_value_t = 10_000)]
    max_clients: usize,
    /// Memory all connections may hold for requests in progress (receive
    /// buffers beyond 256 KiB each). A client that cannot get its share
    /// within 10 s is answered with an error and closed.
    #[arg(long, default_value = "2G", value_parser = parse_size)]
    request_memory: u64,
    /// A namespace's quota over every tier, as NAME=SIZE (repeatable;
    /// `=SIZE` for the default, empty namespace). Over it, the
    /// namespace's oldest blocks are deleted first.
    #[arg(long = "quota", value_parser = parse_quota)]
    quotas: Vec<(String, u64)>,
    /// Runtime worker threads (default: one per CPU).
    #[arg(long)]
    threads: Option<usize>,
    /// The default user's password (`AUTH password`, redis-cli `-a`,
    /// redis-py `password=`), as the first line of FILE (mode 0600).
    #[arg(long, value_name = "FILE")]
    requirepass_file: Option<std::path::PathBuf>,
    /// Users, as TOML (mode 0600): `[[user]]` tables with `name`,
    /// `password` and optionally `namespaces = ["..."]`, which keeps the
    /// user to those namespaces (it starts in the first). See docs/kv.md.
    #[arg(long, value_name = "FILE")]
    users: Option<std::path::PathBuf>,
    /// Serve TLS only (TLS 1.2 and 1.3), with this certificate chain
    /// (PEM); clients connect as to redis-server's tls-port (redis-cli
    /// --tls, redis-py ssl=True).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The TLS certificate's private key (PEM, mode 0600).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// The same-host fast path's Unix socket (mode 0660: the owner and
    /// group may connect), where engines on this machine read and write
    /// blocks through shared memory; `none` to serve RESP only. Default:
    /// `shm.sock` beside the SSD tier's file (`./strata-data/kv/shm.sock`),
    /// none with `--ssd none` or a block device.
    #[arg(long)]
    shm: Option<String>,
    /// Shared memory for the fast path: blocks put through it live there,
    /// and others while leased. Default: twice --dram. Pages are taken as
    /// they are first used.
    #[arg(long, value_parser = parse_size)]
    shm_region: Option<u64>,
    /// Serve Prometheus metrics (gets, bytes and latency per tier, puts,
    /// evictions, demotion, each tier's fill) at http://ADDR/metrics. No
    /// token: bind it to loopback or a management network.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<std::net::SocketAddr>,
    /// Put the shared region on 2 MiB huge pages (hugetlbfs): fewer TLB
    /// misses in the clients' copies, pages reserved at start. The kernel
    /// must have them reserved (sysctl vm.nr_hugepages); the region is
    /// rounded up to 2 MiB.
    #[arg(long)]
    shm_hugepages: bool,
    /// The most staging memory one fast-path client gets (what it writes
    /// blocks to put into).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    shm_staging: u64,
}

/// One `[[user]]` of a `--users` file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    name: String,
    password: String,
    namespaces: Option<Vec<String>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    #[serde(default)]
    user: Vec<UserEntry>,
}

/// Who may use the port, from `--requirepass-file` and `--users`.
fn access_of(args: &ServeArgs) -> anyhow::Result<strata_kv::auth::Access> {
    let mut access = strata_kv::auth::Access::open();
    if let Some(path) = &args.requirepass_file {
        let text = crate::config::read_secret(path)?;
        let pass = text.lines().next().unwrap_or("").trim_end_matches('\r');
        access
            .add_user(strata_kv::auth::DEFAULT_USER, pass.as_bytes())
            .with_context(|| format!("{}", path.display()))?;
    }
    if let Some(path) = &args.users {
        let text = crate::config::read_secret(path)?;
        let file: UsersFile = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
        for u in file.user {
            match &u.namespaces {
                None => access.add_user(&u.name, u.password.as_bytes()),
                Some(ns) => access.add_tenant(&u.name, u.password.as_bytes(), ns),
            }
            .with_context(|| format!("{}", path.display()))?;
        }
    }
    Ok(access)
}

/// An open port (no users) listens on loopback only.
fn check_exposure(listen: std::net::SocketAddr, access: &strata_kv::auth::Access) -> anyhow::Result<()> {
    anyhow::ensure!(
        access.required() || listen.ip().is_loopback(),
        "refusing to serve {listen} without a password: anyone who reaches it could read, write and delete \
         every block. Set one with --requirepass-file FILE or --users FILE, or listen on loopback"
    );
    Ok(())
}

fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    let d = strata_block::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))?;
    if d.is_zero() {
        return Err(format!("{s:?}: a timeout must be above zero"));
    }
    Ok(d)
}

fn parse_region(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("{s:?}: expected I/N with 0 <= I < N, e.g. 0/2");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (u64, u64) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if n == 0 || i >= n || n > 1024 {
        return Err(bad());
    }
    Ok((i, n))
}

fn parse_quota(s: &str) -> Result<(String, u64), String> {
    let (name, size) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected NAME=SIZE"))?;
    if name.len() > 255 {
        return Err(format!("namespace {name:?} is longer than 255 bytes"));
    }
    Ok((name.to_string(), parse_size(size).map_err(|e| format!("{s:?}: {e}"))?))
}

/// Runs `strata kv ...`.
pub fn main(args: KvArgs) -> anyhow::Result<()> {
    let KvCommand::Serve(args) = args.command;
    let admit = match args.admit.as_str() {
        "auto" => Admit::Auto,
        "reused" => Admit::Reused,
        "all" => Admit::All,
        other => anyhow::bail!("--admit {other:?}: expected auto, reused or all"),
    };
    crate::logging::init(args.log_format)?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        anyhow::ensure!(n > 0, "--threads must be at least 1");
        builder.worker_threads(n);
    }
    let rt = builder.enable_all().build().context("cannot start the runtime")?;
    rt.block_on(serve(args, admit))
}

async fn serve(args: ServeArgs, admit: Admit) -> anyhow::Result<()> {
    let access = access_of(&args)?;
    check_exposure(args.listen, &access)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            crate::config::read_secret(key).context("--tls-key")?;
            Some(
                strata_kv::server::KvTls::from_files(cert, key)
                    .map_err(|e| anyhow::anyhow!("--tls-cert/--tls-key: {e}"))?,
            )
        }
        _ => None,
    };
    let ssd: Option<Arc<dyn BlockDevice>> = if args.ssd == "none" {
        None
    } else {
        let (path, size) = parse_ssd(&args.ssd)?;
        let dev = open_ssd(&path, size, args.allow_buffered)?;
        tracing::info!(path = %path.display(), bytes = dev.geometry().size_bytes(), io_uring = dev.is_uring(), "SSD tier");
        Some(dev)
    };
    let segment_bytes = args.ssd_segment.unwrap_or_else(|| {
        strata_kv::store::segment_size_for(ssd.as_ref().map(|d| d.geometry().size_bytes()).unwrap_or(0))
    });
    let mut tiers = strata_kv::Tiers { ssd, ..Default::default() };
    if let Some(t) = &args.pool {
        let dev = connect_pool(t, args.pool_timeout).await?;
        let (me, n) = args.pool_region;
        let region = |i| -> anyhow::Result<Arc<dyn BlockDevice>> {
            let r = strata_block::Region::nth(dev.clone(), i, n)
                .with_context(|| format!("pool volume {t} is too small for {n} regions"))?;
            Ok(Arc::new(r))
        };
        let mine = if n == 1 { dev.clone() } else { region(me)? };
        tracing::info!(target = %t, region = me, of = n, bytes = mine.geometry().size_bytes(), "pool tier");
        tiers.peers = (0..n).filter(|&i| i != me).map(region).collect::<anyhow::Result<_>>()?;
        tiers.pool = Some(mine);
    }
    let cfg = KvConfig { dram_bytes: args.dram, admit, segment_bytes };
    let store =
        KvStore::open_tiers(cfg, tiers, Box::new(strata_kv::store::unix_ms)).await.context("opening the KV store")?;
    for (ns, bytes) in &args.quotas {
        store.set_quota(ns.as_bytes(), *bytes)?;
    }
    let st = store.stats();
    tracing::info!(keys = st.keys, ssd_live_bytes = st.ssd_live, pool_live_bytes = st.pool_live, "KV store recovered");
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    // The bound address (port 0 picks one), for people and for scripts.
    let bound = listener.local_addr()?;
    tracing::info!(dram = args.dram, "strata kv serving (RESP2/RESP3) on {bound}");
    if access.required() {
        tracing::info!("clients must authenticate (AUTH)");
    } else {
        tracing::warn!(
            "no password set: anyone on this machine may use the port (loopback only; see --requirepass-file)"
        );
    }
    if tls.is_some() {
        tracing::info!("TLS on every connection");
    }
    if let Some(addr) = args.metrics {
        let l = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("--metrics {addr}"))?;
        tracing::info!("Prometheus metrics on http://{}/metrics", l.local_addr()?);
        crate::metrics::serve_kv_metrics(l, store.clone());
    }
    let server_cfg = ServerConfig {
        max_clients: args.max_clients,
        request_memory: args.request_memory,
        access,
        tls,
        ..ServerConfig::default()
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stop = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        }
    };
    let (shm_stop, shm_stopped) = tokio::sync::oneshot::channel::<()>();
    let shm_path = args.shm.clone().or_else(|| {
        let (path, _) = parse_ssd(&args.ssd).ok()?;
        (args.ssd != "none" && !path.starts_with("/dev"))
            .then(|| path.with_file_name("shm.sock").to_string_lossy().into_owned())
    });
    let shm = match shm_path.as_deref() {
        None | Some("none") => None,
        Some(path) => {
            let path = std::path::PathBuf::from(path);
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            }
            let cfg = strata_kv::shm::ShmConfig {
                region_bytes: args.shm_region.unwrap_or(args.dram.saturating_mul(2)),
                max_staging: args.shm_staging,
                hugepages: args.shm_hugepages,
                ..strata_kv::shm::ShmConfig::for_dram(path.clone(), args.dram)
            };
            let server = strata_kv::shm::ShmServer::bind(store.clone(), cfg.clone())
                .with_context(|| format!("--shm {}", path.display()))?;
            tracing::info!(socket = %path.display(), region_bytes = cfg.region_bytes, "same-host fast path");
            Some(tokio::spawn(server.serve(async move {
                _ = shm_stopped.await;
            })))
        }
    };
    strata_kv::server::serve(store.clone(), listener, server_cfg, stop).await?;
    _ = shm_stop.send(());
    if let Some(t) = shm {
        _ = t.await;
    }
    // A clean stop writes every DRAM block to the log tiers, so that the
    // next start is warm.
    store.flush(true).await.context("writing DRAM blocks to the log tiers at shutdown")?;
    let st = store.stats();
    tracing::info!(keys = st.keys, ssd_live_bytes = st.ssd_live, "KV store flushed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_and_regions_parse() {
        assert_eq!(parse_quota("llama=2G").unwrap(), ("llama".to_string(), 2 << 30));
        assert_eq!(parse_quota("=1M").unwrap(), (String::new(), 1 << 20));
        assert!(parse_quota("llama").is_err() && parse_quota("a=lots").is_err());
        assert_eq!(parse_region("1/3").unwrap(), (1, 3));
        assert!(parse_region("3/3").is_err() && parse_region("0/0").is_err() && parse_region("1").is_err());
    }

    #[test]
    fn pool_timeouts_are_durations_above_zero() {
        assert_eq!(parse_timeout("250ms").unwrap(), std::time::Duration::from_millis(250));
        assert!(parse_timeout("0s").is_err() && parse_timeout("soon").is_err());
    }
}
