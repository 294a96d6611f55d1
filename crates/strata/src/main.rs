//! The `strata` command: `strata serve` runs a node (embedded,
//! single-machine by default); `strata volume ...` manages volumes through
//! the node's HTTP API; `strata bench ...` measures an NVMe/TCP target
//! (see `bench_cmd`); `strata sim` runs the pool's scale simulator (see
//! `sim_cmd`); `strata kv serve` runs the KV-cache store (see `kv_cmd`);
//! `strata doctor` checks a machine for running strata (see `doctor_cmd`).
//! The serving commands log through `logging`.

mod api;
mod api_events;
mod audit_cmd;
mod bench_cmd;
mod client;
mod config;
mod dashboard;
mod doctor_cmd;
mod events_cmd;
mod events_watch;
mod host_cmd;
mod io_stats;
mod kv_bench;
mod kv_cmd;
mod logging;
mod metrics;
mod node_cmd;
mod pool_view;
mod sim_cmd;
mod status_cmd;
mod top_cmd;
mod topology_cmd;

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde_json::{Value, json};

use crate::config::{ServeArgs, ServeConfig};
use strata_node::{node, volume_check};

/// Default API base URL for the CLI.
const DEFAULT_API: &str = "http://127.0.0.1:7420";

#[derive(Parser)]
#[command(name = "strata", version, about = "Disaggregated NVMe/TCP flash storage for GPU clusters")]
struct Cli {
    /// The API token of the commands that use the API (volume, pool,
    /// node drain, token): a file holding it, such as a node's
    /// DATA_DIR/api-token. Default: $STRATA_TOKEN, else
    /// ./strata-data/api-token when it exists.
    #[arg(long, env = "STRATA_TOKEN_FILE", global = true, value_name = "FILE")]
    token_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a storage node: NVMe/TCP target, metadata, drives and HTTP API.
    Serve(ServeArgs),
    /// Run one storage node of a cluster (etcd, placement, replication),
    /// or drain or remove one.
    #[command(args_conflicts_with_subcommands = true)]
    Node {
        #[command(subcommand)]
        action: Option<NodeAction>,
        #[command(flatten)]
        args: Box<node_cmd::NodeArgs>,
    },
    /// The pool of a cluster: nodes, volumes, capacity.
    Pool {
        /// API of any node.
        #[arg(long, env = "STRATA_API", default_value = DEFAULT_API, global = true)]
        api: String,
        #[command(subcommand)]
        command: PoolCommand,
    },
    /// Manage volumes on a running node.
    Volume {
        /// API of the node.
        #[arg(long, env = "STRATA_API", default_value = DEFAULT_API, global = true)]
        api: String,
        #[command(subcommand)]
        command: VolumeCommand,
    },
    /// Tokens of the management API: make, list and revoke them.
    Token {
        /// API of the node (any node of a cluster).
        #[arg(long, env = "STRATA_API", default_value = DEFAULT_API, global = true)]
        api: String,
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// NVMe hosts and their keys (DH-HMAC-CHAP secrets, TLS PSKs): add,
    /// set (rotate), list and remove them.
    Host {
        /// API of the node (any node of a cluster).
        #[arg(long, env = "STRATA_API", default_value = DEFAULT_API, global = true)]
        api: String,
        #[command(subcommand)]
        command: host_cmd::HostCommand,
    },
    /// The node's tamper-evident audit log: verify the chain, tail it.
    Audit {
        /// API of the node.
        #[arg(long, env = "STRATA_API", default_value = DEFAULT_API, global = true)]
        api: String,
        #[command(subcommand)]
        command: audit_cmd::AuditCommand,
    },
    /// Measure an NVMe/TCP target: single runs, suites with gates, signed
    /// reports (exit 0 pass, 1 gate failed or run aborted, 2 usage error).
    Bench(Box<bench_cmd::BenchArgs>),
    /// Simulate placement on a modelled cluster: balance, fill until the
    /// first drive is full, data moved when nodes join or fail.
    Sim(sim_cmd::SimArgs),
    /// The tiered KV-cache store (DRAM, SSD) for LLM inference, over the
    /// Redis protocol.
    Kv(kv_cmd::KvArgs),
    /// Check this machine for running strata: kernel modules, O_DIRECT
    /// and free space on the data dir, open-file limit, clock sync, etcd,
    /// ports. Each check says ok, warn or fail and how to fix it (exit 0:
    /// no fail, 1: some check failed).
    Doctor(doctor_cmd::DoctorArgs),
    /// The node's (or cluster's) health on one screen and what needs the
    /// operator (exit 0: healthy, 1: needs attention, 2: unreachable).
    Status(status_cmd::StatusArgs),
    /// The busiest volumes and hosts with live IOPS, throughput and
    /// latency percentiles, refreshed in place.
    Top(top_cmd::TopArgs),
    /// The node's recent events (connects, refusals, volume, drive, node
    /// and replica changes, fill thresholds); `--follow` for new ones as
    /// they happen.
    Events(events_cmd::EventsArgs),
    /// Where this host's GPUs, NICs and NVMe drives sit (NUMA node, PCIe
    /// root complex), cross-NUMA placements, and pinning advice.
    Topology(topology_cmd::TopologyArgs),
}

#[derive(Subcommand)]
enum PoolCommand {
    /// Nodes (state, labels, capacity), volumes (protection, owner,
    /// in-sync replicas, health, rebuild progress) and totals.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Change the pool's settings, live on every node (no option: show
    /// them).
    Set {
        /// How long a node may stay down before its data is rebuilt on
        /// other nodes, e.g. 5m, 90s, 1h.
        #[arg(long, value_parser = config::parse_duration_secs)]
        rebuild_grace: Option<u64>,
        /// Bandwidth each node gives rebuilds, resyncs and moves, MB/s
        /// (0: no limit).
        #[arg(long)]
        rebuild_mbps: Option<u64>,
        /// Fill warning thresholds, percent of raw capacity, e.g. 75,85,95.
        #[arg(long, value_delimiter = ',')]
        fill_warn: Option<Vec<u8>>,
        /// The protection whose copies the balancer evens out over the
        /// nodes (that of most of the pool's data), e.g. rep:3, ec:4+2.
        #[arg(long)]
        balance_for: Option<String>,
        /// What copies and shards of a chunk never share: `node`, or a
        /// label key such as `rack` or `zone`. A change moves data (every
        /// volume is placed anew); refused when some volume could not be
        /// placed under it.
        #[arg(long)]
        failure_domain: Option<String>,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Make a token; it is printed once and never shown again.
    Create {
        /// What it may do: `admin` (everything) or `reader` (GET only).
        #[arg(long, default_value = "reader")]
        role: String,
        /// What it is for (free text), e.g. "prometheus".
        #[arg(long)]
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the tokens (IDs, names, roles; never secrets).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by ID (refused everywhere within 30 s).
    Revoke {
        /// The token's ID (the 16 hex digits after `strata_`).
        id: String,
    },
}

/// What `strata node` does besides running a node.
#[derive(Subcommand)]
enum NodeAction {
    /// Move every copy and shard off a node, online; `strata pool status`
    /// shows the progress.
    Drain {
        /// The node's name.
        name: String,
        /// API of any node.
        #[arg(long, env = "STRATA_API", default_value = DEFAULT_API)]
        api: String,
    },
    /// Cancel a drain: the node is up in the placement map again and its
    /// volumes stay on it (what already moved comes back).
    Undrain {
        /// The node's name.
        name: String,
        /// API of any node.
        #[arg(long, env = "STRATA_API", default_value = DEFAULT_API)]
        api: String,
    },
    /// Forget a node; refused until it is drained (or down and rebuilt).
    Remove {
        /// The node's name.
        name: String,
        /// API of any node.
        #[arg(long, env = "STRATA_API", default_value = DEFAULT_API)]
        api: String,
    },
}

#[derive(Subcommand)]
enum VolumeCommand {
    /// Create a thin volume, served as namespace of its own subsystem.
    Create {
        /// Volume name: letters, digits, '.', '_', '-'.
        name: String,
        /// Provisioned size, e.g. 8G, 512M.
        #[arg(long)]
        size: String,
        /// Logical block size: 4096 or 512.
        #[arg(long, default_value_t = 4096)]
        block_size: u32,
        /// Subsystem NQN. Default: nqn.2026-11.io.strata:NAME
        #[arg(long)]
        nqn: Option<String>,
        /// Host NQN allowed to connect; repeatable. Default on `strata
        /// serve`: any host; a cluster needs this or --allow-any-host.
        #[arg(long = "allow-host")]
        allow_hosts: Vec<String>,
        /// Let any host that reaches the pool connect (a cluster refuses a
        /// volume with no --allow-host otherwise).
        #[arg(long, conflicts_with = "allow_hosts")]
        allow_any_host: bool,
        /// Protection on a cluster: rep:N copies on N nodes, or ec:K+M
        /// (K data and M parity shards on K+M nodes), in distinct failure
        /// domains. Default: rep:1.
        #[arg(long)]
        protect: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List volumes.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Grow (or with --shrink, shrink) a volume; connected hosts are told.
    Resize {
        /// Volume name.
        name: String,
        /// New size.
        #[arg(long)]
        size: String,
        /// Allow shrinking, which discards data past the new end.
        #[arg(long)]
        shrink: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Compare every copy or shard of a pool volume, online, and report
    /// where they differ (with --repair, make them agree). Runs on the
    /// volume's owner; waits for the end, showing progress, and fails
    /// when a difference is left.
    Check {
        /// Volume name.
        name: String,
        /// Rewrite what differs: the copy a majority holds, a strip the
        /// others locate, or else the parity from the data.
        #[arg(long)]
        repair: bool,
        /// Show the last check's state instead of starting one.
        #[arg(long, conflicts_with = "repair")]
        status: bool,
        /// Start it and return at once (follow it with --status).
        #[arg(long)]
        no_wait: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a volume and free its space.
    Delete {
        /// Volume name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Commands that print for a pipeline end quietly when the reader goes
/// away (`strata pool status | grep -q up`), as Unix tools do, instead of
/// panicking in `println!`.
fn quiet_on_broken_pipe() {
    // SAFETY: restores the default disposition of SIGPIPE, which the Rust
    // runtime set to ignore; this affects no memory and runs on the main
    // thread before any other thread exists in these commands.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    client::set_token_file(cli.token_file.as_deref());
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Node { action: None, args } => node(*args),
        Command::Node { action: Some(action), .. } => node_action(action),
        Command::Pool { api, command: PoolCommand::Status { json: as_json } } => {
            quiet_on_broken_pipe();
            pool_status(&api, as_json)
        }
        Command::Pool {
            api,
            command: PoolCommand::Set { rebuild_grace, rebuild_mbps, fill_warn, balance_for, failure_domain },
        } => {
            let body = serde_json::json!({
                "rebuild_grace_secs": rebuild_grace,
                "rebuild_mbps": rebuild_mbps,
                "fill_warn_percent": fill_warn,
                "balance_for": balance_for,
                "failure_domain": failure_domain,
            });
            pool_set(&api, body)
        }
        Command::Volume { api, command } => {
            quiet_on_broken_pipe();
            volume(&api, command)
        }
        Command::Token { api, command } => token(&api, command),
        Command::Host { api, command } => host_cmd::main(&api, command),
        Command::Audit { api, command } => {
            quiet_on_broken_pipe();
            audit_cmd::main(&api, command)
        }
        Command::Bench(args) => return bench_cmd::main(*args),
        Command::Sim(args) => return sim_cmd::main(args),
        Command::Kv(args) => kv_cmd::main(args),
        Command::Status(args) => {
            quiet_on_broken_pipe();
            return status_cmd::main(args);
        }
        Command::Top(args) => {
            quiet_on_broken_pipe();
            top_cmd::main(args)
        }
        Command::Events(args) => {
            quiet_on_broken_pipe();
            events_cmd::main(args)
        }
        Command::Topology(args) => {
            quiet_on_broken_pipe();
            topology_cmd::main(args)
        }
        Command::Doctor(args) => {
            quiet_on_broken_pipe();
            return doctor_cmd::main(args);
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    logging::init(config::log_format(&args)?)?;
    let cfg = config::load(&args)?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if matches!(cfg.runtime, config::RuntimeModel::PerCore { .. }) {
        // Connections run on the per-core runtimes; this one only accepts
        // and serves the HTTP API.
        builder.worker_threads(1);
    }
    let rt = builder.enable_all().build().context("cannot start the runtime")?;
    rt.block_on(run(cfg))
}

fn node(args: node_cmd::NodeArgs) -> anyhow::Result<()> {
    logging::init(config::log_format(&args.serve)?)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")?;
    rt.block_on(node_cmd::run(args))
}

fn node_action(action: NodeAction) -> anyhow::Result<()> {
    let v = match &action {
        NodeAction::Drain { name, api } => client::request(api, "POST", &format!("/api/v1/nodes/{name}/drain"), None)?,
        NodeAction::Undrain { name, api } => {
            client::request(api, "POST", &format!("/api/v1/nodes/{name}/undrain"), None)?
        }
        NodeAction::Remove { name, api } => client::request(api, "DELETE", &format!("/api/v1/nodes/{name}"), None)?,
    };
    match action {
        NodeAction::Drain { name, .. } => println!(
            "node {name} is draining (map epoch {}): its volumes move off it; see strata pool status",
            v["map_epoch"]
        ),
        NodeAction::Undrain { name, .. } => println!(
            "node {name} is up again (map epoch {}): its volumes stay on it; see strata pool status",
            v["map_epoch"]
        ),
        NodeAction::Remove { name, .. } => println!("node {name} removed (map epoch {})", v["map_epoch"]),
    }
    Ok(())
}

fn token(api: &str, command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create { role, name, json } => {
            let role: strata_node::tokens::Role = role.parse().map_err(|e: String| anyhow::anyhow!("--role: {e}"))?;
            let v = client::request(api, "POST", "/api/v1/tokens", Some(&json!({"name": name, "role": role})))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("{}", v["token"].as_str().unwrap_or_default());
                eprintln!(
                    "token {} ({}, {}): shown once; keep it in a file of mode 0600",
                    v["id"], v["role"], v["name"]
                );
            }
        }
        TokenCommand::List { json } => {
            let v = client::request(api, "GET", "/api/v1/tokens", None)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("{:<18} {:<7} {:<12} NAME", "ID", "ROLE", "CREATED");
                for t in v.as_array().into_iter().flatten() {
                    println!(
                        "{:<18} {:<7} {:<12} {}",
                        t["id"].as_str().unwrap_or(""),
                        t["role"].as_str().unwrap_or(""),
                        t["created_unix"],
                        t["name"].as_str().unwrap_or("")
                    );
                }
            }
        }
        TokenCommand::Revoke { id } => {
            let v = client::request(api, "DELETE", &format!("/api/v1/tokens/{id}"), None)?;
            println!("revoked token {} ({})", v["id"].as_str().unwrap_or(&id), v["name"].as_str().unwrap_or(""));
        }
    }
    Ok(())
}

/// Shows the pool's settings, or changes those `patch` gives (fields that
/// are not null).
fn pool_set(api: &str, patch: serde_json::Value) -> anyhow::Result<()> {
    let v = if patch.as_object().is_some_and(|o| o.values().all(serde_json::Value::is_null)) {
        client::request(api, "GET", "/api/v1/pool/settings", None)?
    } else {
        client::request(api, "PATCH", "/api/v1/pool/settings", Some(&patch))?
    };
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

fn pool_status(api: &str, as_json: bool) -> anyhow::Result<()> {
    let v = client::request(api, "GET", "/api/v1/pool", None)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", pool_view::render(&v));
    }
    Ok(())
}

/// Threads each running a single-threaded runtime until `stop` fires.
fn start_executors(
    threads: usize,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Vec<tokio::runtime::Handle>> {
    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start an I/O runtime")?;
        handles.push(rt.handle().clone());
        let mut stop = stop.clone();
        std::thread::Builder::new()
            .name(format!("strata-io-{i}"))
            .spawn(move || {
                rt.block_on(async move {
                    let _ = stop.wait_for(|&s| s).await;
                })
            })
            .context("cannot start an I/O thread")?;
    }
    Ok(handles)
}

async fn run(cfg: ServeConfig) -> anyhow::Result<()> {
    let target = strata_target::Target::new(cfg.target.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    if let config::RuntimeModel::PerCore { threads } = cfg.runtime {
        target.set_executors(start_executors(threads, &stop_rx)?);
        tracing::info!(threads, "connections run on per-core runtimes");
    }
    let api_tls = api::tls_of(&cfg)?;
    api::check_exposure(cfg.http, cfg.allow_remote_api, api_tls.is_some())?;
    let scheme = if api_tls.is_some() { "https" } else { "http" };
    let node = node::Node::open(&cfg, target).await?;
    // The hosts' keys and the audit trail are in place before the first
    // host can connect: no window in which a host with a key gets in
    // without proving it, or goes unrecorded.
    let hosts = std::sync::Arc::new(strata_node::hosts::Hosts::new(node.meta(), node.target().clone()));
    hosts.apply().await?;
    let events = std::sync::Arc::new(strata_events::EventLog::default());
    let audit = strata_node::audit::open_audit(
        &cfg.data_dir,
        node.meta(),
        "local",
        node.target(),
        Some(events_watch::access_sink(events.clone())),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the audit log in {}: {e}", cfg.data_dir.display()))?;
    node.listen(&cfg).await?;
    let tokens = std::sync::Arc::new(strata_node::tokens::Tokens::new(node.meta()));
    let token_file = tokens.ensure_local(&cfg.data_dir, "local admin (strata serve)").await?;
    events_watch::spawn_drive_watch(node.clone(), events.clone());
    let http = api::serve(api::Backend::Serve(node.clone()), tokens, hosts, audit, events, cfg.http, api_tls).await?;
    let a = cfg.listen[0];
    let host = if a.ip().is_unspecified() { "127.0.0.1".to_string() } else { a.ip().to_string() };
    println!("strata {} serving; data dir {}", env!("CARGO_PKG_VERSION"), cfg.data_dir.display());
    println!(
        "  discovery: nvme discover -t tcp -a {} -s {}",
        cfg.discovery.first().map(|d| d.ip().to_string()).unwrap_or(host.clone()),
        cfg.discovery.first().map(|d| d.port()).unwrap_or(a.port())
    );
    for v in node.list_volumes().await.map_err(|e| anyhow::anyhow!("{e}"))? {
        println!("  volume {} ({}): {}", v.name, v.size, v.connect);
    }
    println!("  API: {scheme}://{http}/api/v1/volumes (admin token: {})", token_file.display());
    println!("  dashboard: {scheme}://{http}/ (sign in with that token, or open {scheme}://{http}/#token=TOKEN)");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
    }
    node.target().shutdown(Duration::from_secs(5)).await;
    stop_tx.send_replace(true);
    node.flush().await.context("flush at shutdown failed")?;
    tracing::info!("all drives flushed; bye");
    Ok(())
}

fn volume(api: &str, command: VolumeCommand) -> anyhow::Result<()> {
    match command {
        VolumeCommand::Create { name, size, block_size, nqn, allow_hosts, allow_any_host, protect, json: as_json } => {
            let mut body =
                json!({"name": name, "size": size, "block_size": block_size, "nqn": nqn, "allowed_hosts": allow_hosts});
            if allow_any_host {
                body["allow_any_host"] = json!(true);
            }
            if let Some(p) = protect {
                body["protect"] = json!(p);
            }
            let v = client::request(api, "POST", "/api/v1/volumes", Some(&body))?;
            print_volume(&v, as_json);
        }
        VolumeCommand::List { json: as_json } => {
            let v = client::request(api, "GET", "/api/v1/volumes", None)?;
            if as_json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print_table(&v);
            }
        }
        VolumeCommand::Resize { name, size, shrink, json: as_json } => {
            let body = json!({"size": size, "allow_shrink": shrink});
            let v = client::request(api, "PATCH", &format!("/api/v1/volumes/{name}"), Some(&body))?;
            print_volume(&v, as_json);
        }
        VolumeCommand::Check { name, repair, status, no_wait, json: as_json } => {
            return check_volume(api, &name, repair, status, no_wait, as_json);
        }
        VolumeCommand::Delete { name, json: as_json } => {
            let v = client::request(api, "DELETE", &format!("/api/v1/volumes/{name}"), None)?;
            if as_json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("deleted volume {name}");
            }
        }
    }
    Ok(())
}

fn field(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

fn print_volume(v: &Value, as_json: bool) {
    if as_json {
        println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
        return;
    }
    println!("volume {} ({}, {} bytes allocated)", field(v, "name"), field(v, "size"), field(v, "allocated_bytes"));
    println!("  nqn:     {}", field(v, "nqn"));
    println!("  uuid:    {}", field(v, "uuid"));
    println!("  connect: {}", field(v, "connect"));
}

/// `strata volume check`: starts a check (unless `status`), follows it
/// to its end (unless `no_wait`), prints it; an error when it failed or
/// left a difference.
fn check_volume(api: &str, name: &str, repair: bool, status: bool, no_wait: bool, as_json: bool) -> anyhow::Result<()> {
    let path = format!("/api/v1/volumes/{name}/check");
    let mut v = if status {
        client::request(api, "GET", &path, None)?
    } else {
        client::request(api, "POST", &path, Some(&json!({ "repair": repair })))?
    };
    let interactive = !as_json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    while v["state"] == "running" && !(no_wait || status) {
        if interactive {
            eprint!("\r{}   ", volume_check::render(&v));
        }
        std::thread::sleep(Duration::from_secs(1));
        v = client::request(api, "GET", &path, None)?;
    }
    if interactive {
        eprint!("\r\x1b[K");
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{}", volume_check::render(&v).trim_end());
    }
    match v["state"].as_str() {
        Some("failed") => anyhow::bail!("the check of {name} failed"),
        Some("done") => {
            let r = &v["report"];
            let left = r["differences"].as_u64().unwrap_or(0).saturating_sub(r["repaired"].as_u64().unwrap_or(0));
            if left > 0 {
                anyhow::bail!("{left} ranges of {name} differ (strata volume check {name} --repair makes them agree)");
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn print_table(list: &Value) {
    let rows = list.as_array().cloned().unwrap_or_default();
    // A cluster's volumes have a protection and a state; a single node's
    // are one copy, always served.
    let pool = rows.iter().any(|v| v.get("protection").is_some());
    let extra = |prot: &str, state: &str| if pool { format!("{prot:<7} {state:<11} ") } else { String::new() };
    println!("{:<20} {:>10} {:>10} {:>6} {}NQN", "NAME", "SIZE", "ALLOCATED", "BLOCK", extra("PROT", "STATE"));
    for v in rows {
        let alloc = v.get("allocated_bytes").and_then(Value::as_u64).unwrap_or(0);
        println!(
            "{:<20} {:>10} {:>10} {:>6} {}{}",
            field(&v, "name"),
            field(&v, "size"),
            pool_view::approx_size(alloc),
            field(&v, "block_size"),
            extra(&field(&v, "protection"), &field(&v, "state")),
            field(&v, "nqn")
        );
    }
}
