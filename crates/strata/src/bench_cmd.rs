//! `strata bench`: the command-line face of `strata-bench`.
//!
//! - `strata bench --target tcp://ADDR:PORT/NQN [options]` runs one workload.
//! - `strata bench suite JOBFILE.toml [--baseline REPORT.json]` runs a job
//!   file's workloads and checks their gates.
//! - `strata bench keygen KEYFILE` makes an Ed25519 signing key.
//! - `strata bench verify REPORT.json [--pubkey KEY]` checks a signed report.
//!
//! Exit status: 0 when everything passed, 1 when a gate failed, a run was
//! aborted (I/O error, verify mismatch, stop-loss, Ctrl-C) or a report
//! failed verification, 2 for usage and configuration errors (bad options,
//! bad job file, unreadable key or baseline, a relative gate without a
//! baseline). Nothing is sent to a target before the configuration has
//! been checked in full.
//!
//! The results go to stdout (a table, or the report JSON with `--json`);
//! the live progress line goes to stderr, rewritten in place with `\r` when
//! stderr is a terminal and one line per interval otherwise (logs).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use clap::{Args, Subcommand};
use strata_bench::report::{BaselineRef, JobFile, render_text};
use strata_bench::suite::{check_spec, run_suite};
use strata_bench::sysinfo::rfc3339;
use strata_bench::{
    Pattern, Progress, PublicKey, Report, RunOptions, SecretKey, StopLossMonitor, Suite, SystemInfo, TargetSpec,
    WorkloadReport, WorkloadResult, WorkloadSpec, html, sign,
};
use strata_block::parse_duration;
use tokio::sync::watch;

/// `strata bench` arguments.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Run the workloads of a TOML job file and check their gates.
    Suite {
        /// The job file (see docs/benchmarking.md).
        jobfile: PathBuf,
        /// Replace every target the job file names.
        #[arg(long, value_name = "tcp://ADDR:PORT/NQN", value_parser = parse_target)]
        target: Option<TargetSpec>,
        /// Report to compare relative gates (`... baseline * 1.1`) with.
        #[arg(long, value_name = "REPORT.json")]
        baseline: Option<PathBuf>,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Make an Ed25519 key for signing reports: KEYFILE (mode 0600) and
    /// KEYFILE.pub.
    Keygen {
        /// Where to write the secret key; never overwritten.
        keyfile: PathBuf,
    },
    /// Hit rate against capacity of the KV store's eviction policy and
    /// LRU, replaying a prefix-cache trace (e.g. the Mooncake trace).
    KvTrace(crate::kv_bench::TraceArgs),
    /// Put and get throughput and latency of the KV store's DRAM and SSD
    /// tiers, through its API (compare with fio on the same file:
    /// bench/kv-tiers.sh).
    KvTier(crate::kv_bench::TierArgs),
    /// Time to first token: a Llama-shaped prefill recomputed on the CPU
    /// against loading its KV blocks from each tier of the KV store, a
    /// multi-turn trace replay with and without the store, and a GPU
    /// projection (docs/kv.md).
    Ttft(crate::kv_bench::TtftArgs),
    /// Check that a signed report is unchanged since it was signed.
    Verify {
        /// The report.
        report: PathBuf,
        /// Require this signer: a .pub file or the hex key.
        #[arg(long, value_name = "KEY")]
        pubkey: Option<String>,
    },
}

/// What single runs and suites share: where results go, and who the
/// host is.
#[derive(Args, Debug)]
struct OutputArgs {
    /// The host NQN to connect as. Default: a random
    /// nqn.2014-08.org.nvmexpress:uuid:... per run.
    #[arg(long, value_name = "NQN")]
    hostnqn: Option<String>,
    /// The host's DH-HMAC-CHAP secret (DHHC-1:...), for a target that
    /// asks this host to authenticate (strata host add --dhchap-secret).
    #[arg(long, value_name = "KEY", env = "STRATA_DHCHAP_SECRET", hide_env_values = true)]
    dhchap_secret: Option<String>,
    /// The controller's secret: the host then checks the target too.
    #[arg(long, value_name = "KEY", requires = "dhchap_secret")]
    dhchap_ctrl_secret: Option<String>,
    /// Connect over TLS 1.3 with this configured PSK (NVMeTLSkey-1:...,
    /// the one given to `strata host add --tls-psk`).
    #[arg(long, value_name = "KEY", env = "STRATA_TLS_PSK", hide_env_values = true)]
    tls_psk: Option<String>,
    /// How the TLS PSK is derived: compat (the default) or rfc8446, as the
    /// target's --tls-derivation.
    #[arg(long, value_name = "KIND", requires = "tls_psk")]
    tls_derivation: Option<String>,
    /// Print the report JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Write the JSON report here.
    #[arg(long, value_name = "FILE.json")]
    report: Option<PathBuf>,
    /// Write a self-contained HTML report here.
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,
    /// Sign the JSON report with this key (from `strata bench keygen`).
    #[arg(long, value_name = "KEYFILE", requires = "report")]
    sign: Option<PathBuf>,
    /// Length of one time-series interval (and progress update).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_dur)]
    interval: Duration,
    /// No progress line.
    #[arg(long, short)]
    quiet: bool,
}

impl OutputArgs {
    /// The host settings these options ask for.
    fn host(&self) -> Result<strata_host::HostConfig, String> {
        let key = |flag: &str, k: &Option<String>| {
            k.as_deref().map(strata_host::DhchapSecret::parse).transpose().map_err(|e| format!("{flag}: {e}"))
        };
        let mut cfg = strata_host::HostConfig {
            dhchap_secret: key("--dhchap-secret", &self.dhchap_secret)?,
            dhchap_ctrl_secret: key("--dhchap-ctrl-secret", &self.dhchap_ctrl_secret)?,
            tls_psk: self
                .tls_psk
                .as_deref()
                .map(strata_auth::TlsPsk::parse)
                .transpose()
                .map_err(|e| format!("--tls-psk: {e}"))?,
            ..strata_host::HostConfig::default()
        };
        if let Some(d) = &self.tls_derivation {
            cfg.tls_derivation = d.parse().map_err(|e| format!("--tls-derivation: {e}"))?;
        }
        if let Some(nqn) = &self.hostnqn {
            cfg.hostnqn = nqn.clone();
        }
        Ok(cfg)
    }
}

/// One workload from the command line.
#[derive(Args, Debug)]
struct RunArgs {
    /// Target: tcp://ADDR:PORT/NQN (IPv6: tcp://[::1]:4420/NQN).
    #[arg(long, required = true, value_name = "tcp://ADDR:PORT/NQN", value_parser = parse_target)]
    target: Option<TargetSpec>,
    /// Namespace ID.
    #[arg(long, default_value_t = 1)]
    nsid: u32,
    /// Access pattern: read, write, randread, randwrite, randrw.
    #[arg(long, default_value = "randread", value_parser = parse_pattern)]
    rw: Pattern,
    /// Percentage of reads for randrw.
    #[arg(long, value_name = "PCT", default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    rwmixread: u8,
    /// Block size (4k, 128k, 1M...).
    #[arg(long, default_value = "4k", value_parser = strata_block::parse_size)]
    bs: u64,
    /// Outstanding I/Os per job.
    #[arg(long, default_value_t = 32)]
    iodepth: u32,
    /// Jobs: I/O queues (TCP connections), each with --iodepth I/Os.
    #[arg(long, default_value_t = 1)]
    jobs: u32,
    /// Measured run time (10s, 2m...). Default: 10s unless --size is given.
    #[arg(long, value_name = "DURATION", value_parser = parse_dur)]
    runtime: Option<Duration>,
    /// Stop after this many bytes in total.
    #[arg(long, value_parser = strata_block::parse_size)]
    size: Option<u64>,
    /// Warm-up before measuring.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_dur)]
    ramp: Duration,
    /// Limit on total IOPS.
    #[arg(long, value_name = "IOPS")]
    rate: Option<u64>,
    /// Write identifiable data and check every byte read back; a read
    /// never writes, and a block that reads as zeros fails.
    #[arg(long)]
    verify: bool,
    /// Before a workload that reads, write the verify pattern over the
    /// whole span (not measured): for a verify read of a fresh volume.
    #[arg(long)]
    prefill: bool,
    /// Header and data digests.
    #[arg(long)]
    digests: bool,
    /// Only use the first SPAN bytes of the namespace.
    #[arg(long, value_parser = strata_block::parse_size)]
    span: Option<u64>,
    /// Seed for random offsets.
    #[arg(long)]
    seed: Option<u64>,
    /// Busy-poll: each job spins on its socket up to this many
    /// microseconds for completions before sleeping (0: never). Spares the
    /// target a wake-up per batch of completions, as SPDK's
    /// spdk_nvme_perf does, at the cost of up to one client core per job.
    #[arg(long, value_name = "US", default_value_t = 0)]
    poll_us: u64,
    /// Ask the target to disable SQ flow control, so it can complete reads
    /// with the C2HData SUCCESS flag instead of a CapsuleResp.
    #[arg(long)]
    disable_sqflow: bool,
    /// Follow the volume through path failures and owner failovers for up
    /// to DURATION each, as a multipath host does: on a path error, a
    /// lost connection or an I/O timeout, connect again to the best path
    /// discovery at the target lists and re-issue what was in flight.
    /// Without it the first failure ends the run.
    #[arg(long, value_name = "DURATION", value_parser = parse_dur)]
    failover: Option<Duration>,
    #[command(flatten)]
    out: OutputArgs,
}

fn parse_target(s: &str) -> Result<TargetSpec, String> {
    s.parse()
}

fn parse_pattern(s: &str) -> Result<Pattern, String> {
    s.parse()
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// How a bench command ended.
enum Failure {
    /// Gate failed, run aborted, verification failed: exit 1.
    Failed(String),
    /// Usage or configuration: exit 2.
    Usage(String),
}

type Outcome = Result<bool, Failure>;

fn usage(e: impl std::fmt::Display) -> Failure {
    Failure::Usage(e.to_string())
}

/// The exit status of a KV benchmark: 0, or 2 with the error.
fn kv_outcome(name: &str, r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata bench {name}: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs `strata bench ...`; returns the process exit status.
pub fn main(args: BenchArgs) -> ExitCode {
    let outcome = match args.command {
        None => run_one(args.run),
        Some(BenchCommand::Suite { jobfile, target, baseline, out }) => run_suite_cmd(&jobfile, target, baseline, out),
        Some(BenchCommand::Keygen { keyfile }) => keygen(&keyfile),
        Some(BenchCommand::Verify { report, pubkey }) => verify(&report, pubkey.as_deref()),
        Some(BenchCommand::KvTrace(args)) => return kv_outcome("kv-trace", strata_kvbench::kv_trace(&args.into())),
        Some(BenchCommand::KvTier(args)) => return kv_outcome("kv-tier", strata_kvbench::kv_tier(&args.into())),
        Some(BenchCommand::Ttft(args)) => return kv_outcome("ttft", strata_kvbench::ttft(&args.into())),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(Failure::Failed(msg)) => {
            eprintln!("strata bench: {msg}");
            ExitCode::from(1)
        }
        Err(Failure::Usage(msg)) => {
            eprintln!("strata bench: error: {msg}");
            ExitCode::from(2)
        }
    }
}

fn keygen(path: &Path) -> Outcome {
    let key = SecretKey::generate().map_err(usage)?;
    let pub_path = key.write_new(path).map_err(usage)?;
    eprintln!("wrote secret key {} (mode 0600) and public key {}", path.display(), pub_path.display());
    println!("{}", key.public());
    Ok(true)
}

fn verify(path: &Path, pubkey: Option<&str>) -> Outcome {
    let expected = pubkey.map(PublicKey::load_or_parse).transpose().map_err(usage)?;
    let bytes = std::fs::read(path).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    let opened = sign::verify(&bytes, expected.as_ref())
        .map_err(|e| Failure::Failed(format!("{}: verification FAILED: {e}", path.display())))?;
    let report = Report::from_json(opened.body).map_err(|e| {
        Failure::Failed(format!("{}: the signature is valid but the signed body is not a report: {e}", path.display()))
    })?;
    let signer = opened.signer.map(|k| k.to_string()).unwrap_or_default();
    println!(
        "{}: OK: signed by {signer}; {:?} started {}, {} workload(s), {}",
        path.display(),
        report.name,
        report.started_at,
        report.workloads.len(),
        if report.passed { "passed" } else { "FAILED" }
    );
    if expected.is_none() {
        println!("  (no --pubkey: this proves the report is unchanged since that key signed it, not whose key it is)");
    }
    Ok(true)
}

fn load_secret(out: &OutputArgs) -> Result<Option<SecretKey>, Failure> {
    out.sign.as_deref().map(SecretKey::load).transpose().map_err(usage)
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| usage(format!("tokio runtime: {e}")))
}

/// A watch channel that turns true on Ctrl-C.
fn cancel_on_ctrl_c() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = tx.send(true);
        }
        // Keep the sender alive until the process ends: a dropped sender
        // must not look like a cancellation to anyone.
        std::future::pending::<()>().await;
    });
    rx
}

/// The live progress line.
struct ProgressLine {
    tty: bool,
    /// A `\r` line is on screen and must be cleared before other output.
    dirty: Arc<AtomicBool>,
}

impl ProgressLine {
    fn new() -> ProgressLine {
        ProgressLine { tty: std::io::stderr().is_terminal(), dirty: Arc::new(AtomicBool::new(false)) }
    }

    fn callback(&self, name: &str) -> impl FnMut(&Progress) + Send + 'static {
        let (tty, dirty, name) = (self.tty, self.dirty.clone(), name.to_string());
        move |p: &Progress| {
            if tty {
                eprint!("\r\x1b[K[{name}] {p}");
                dirty.store(true, Ordering::Relaxed);
            } else {
                eprintln!("[{name}] {p}");
            }
        }
    }

    fn clear(&self) {
        if self.dirty.swap(false, Ordering::Relaxed) {
            eprint!("\r\x1b[K");
        }
    }
}

/// Runs one workload through the engine.
async fn run_workload(
    spec: &WorkloadSpec,
    out: &OutputArgs,
    monitor: Option<StopLossMonitor>,
    cancel: &watch::Receiver<bool>,
    progress: &ProgressLine,
) -> Result<WorkloadResult, String> {
    if *cancel.borrow() {
        return Err("not run: cancelled".into());
    }
    let mut opts = RunOptions::default().interval(out.interval).cancel_on(cancel.clone()).host_config(out.host()?);
    if !out.quiet {
        opts = opts.on_progress(progress.callback(&spec.name));
    }
    if let Some(mut m) = monitor {
        opts = opts.stop_loss(move |s, h| m.observe(s, h));
    }
    let r = strata_bench::run(spec, opts).await.map_err(|e| e.to_string());
    progress.clear();
    r
}

fn command_line() -> Vec<String> {
    std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect()
}

/// Writes the report files and prints the summary; returns whether the
/// report passed.
fn finish(mut report: Report, out: &OutputArgs, key: Option<&SecretKey>) -> Outcome {
    report.finished_at = rfc3339(SystemTime::now());
    let body = report.to_json();
    let mut write_failed = None;
    if let Some(path) = &out.report {
        let bytes = match key {
            Some(k) => sign::sign_report(&body, k),
            None => body.clone(),
        };
        if let Err(e) = std::fs::write(path, bytes) {
            write_failed = Some(format!("{}: {e}", path.display()));
        }
    }
    if let Some(path) = &out.html
        && let Err(e) = std::fs::write(path, html::render(&report))
    {
        write_failed = Some(format!("{}: {e}", path.display()));
    }
    if out.json {
        print!("{}", String::from_utf8_lossy(&body));
    } else {
        print!("{}", render_text(&report));
    }
    if let Some(e) = write_failed {
        return Err(usage(format!("cannot write the report: {e}")));
    }
    Ok(report.passed)
}

/// The workload a single run's options describe, checked.
fn spec_of(args: &RunArgs) -> Result<WorkloadSpec, Failure> {
    let target = args.target.clone().ok_or_else(|| usage("--target is required"))?;
    let spec = WorkloadSpec {
        name: "default".into(),
        target: TargetSpec { nsid: args.nsid, ..target },
        rw: args.rw,
        read_pct: args.rwmixread,
        bs: u32::try_from(args.bs).map_err(|_| usage(format!("--bs {} is too large", args.bs)))?,
        iodepth: args.iodepth,
        jobs: args.jobs,
        runtime: args.runtime.or(if args.size.is_none() { Some(Duration::from_secs(10)) } else { None }),
        size: args.size,
        ramp: args.ramp,
        rate_iops: args.rate,
        verify: args.verify,
        prefill: args.prefill,
        span: args.span,
        digests: args.digests,
        seed: args.seed.unwrap_or(WorkloadSpec::default().seed),
        poll_us: args.poll_us,
        disable_sqflow: args.disable_sqflow,
        failover: args.failover,
    };
    check_spec(&spec).map_err(usage)?;
    Ok(spec)
}

fn run_one(args: RunArgs) -> Outcome {
    let spec = spec_of(&args)?;
    let key = load_secret(&args.out)?;
    let mut report = Report::new("run", command_line(), SystemInfo::collect(), rfc3339(SystemTime::now()));
    let rt = runtime()?;
    let progress = ProgressLine::new();
    let entry = rt.block_on(async {
        let cancel = cancel_on_ctrl_c();
        match run_workload(&spec, &args.out, None, &cancel, &progress).await {
            Ok(r) => WorkloadReport::ran(&spec.name, r, vec![]),
            Err(e) => WorkloadReport::failed(&spec.name, e),
        }
    });
    if let Some(e) = &entry.error {
        // The run never started: connection refused, namespace too small...
        return Err(Failure::Failed(format!("{}: {e}", spec.target)));
    }
    report.push(entry);
    finish(report, &args.out, key.as_ref())
}

fn run_suite_cmd(jobfile: &Path, target: Option<TargetSpec>, baseline: Option<PathBuf>, out: OutputArgs) -> Outcome {
    let suite = Suite::load(jobfile, target.as_ref()).map_err(usage)?;
    let key = load_secret(&out)?;
    let baseline = match &baseline {
        None => None,
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|e| usage(format!("baseline {}: {e}", path.display())))?;
            let opened = sign::open(&bytes).map_err(|e| usage(format!("baseline {}: {e}", path.display())))?;
            let report =
                Report::from_json(opened.body).map_err(|e| usage(format!("baseline {}: {e}", path.display())))?;
            let r = BaselineRef {
                path: path.display().to_string(),
                started_at: report.started_at.clone(),
                git_commit: report.system.git_commit.clone(),
                signed_by: opened.signer.map(|k| k.to_string()),
            };
            Some((report, r))
        }
    };
    let gates = suite.resolve_gates(baseline.as_ref().map(|b| &b.0)).map_err(usage)?;
    let mut report = Report::new(&suite.name, command_line(), SystemInfo::collect(), rfc3339(SystemTime::now()));
    report.job_file = Some(JobFile { path: jobfile.display().to_string(), contents: suite.source.clone() });
    report.baseline = baseline.map(|b| b.1);
    report.stop_loss = suite.stop_loss;
    let rt = runtime()?;
    let progress = ProgressLine::new();
    let entries = rt.block_on(async {
        let cancel = cancel_on_ctrl_c();
        run_suite(&suite, &gates, async |spec: &WorkloadSpec, monitor: Option<StopLossMonitor>| {
            run_workload(spec, &out, monitor, &cancel, &progress).await
        })
        .await
    });
    for e in entries {
        report.push(e);
    }
    finish(report, &out, key.as_ref())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn spec(args: &[&str]) -> Result<WorkloadSpec, String> {
        let argv = ["bench", "--target", "tcp://127.0.0.1:4420/nqn.x"].iter().chain(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        spec_of(&cli.bench.run).map_err(|f| match f {
            Failure::Failed(m) | Failure::Usage(m) => m,
        })
    }

    #[test]
    fn poll_us_and_disable_sqflow_are_off_unless_given() {
        let s = spec(&[]).unwrap();
        assert_eq!((s.poll_us, s.disable_sqflow), (0, false));
        let s = spec(&["--poll-us", "100", "--disable-sqflow"]).unwrap();
        assert_eq!((s.poll_us, s.disable_sqflow), (100, true));
        let s = spec(&["--poll-us", "1000000"]).unwrap();
        assert_eq!(s.poll_us, 1_000_000);
    }

    /// Size strings and what every place that reads one must make of them
    /// (`None`: refused). The bench once had its own parser, which read
    /// `100_000` and `.5k` but not `1P`; it now shares the volumes' parser,
    /// and these rows pin the choices: no digit separators, no bare
    /// leading or trailing dot, P and E accepted, fractions only when they
    /// come to whole bytes.
    const SIZES: &[(&str, Option<u64>)] = &[
        ("4096", Some(4096)),
        ("4096B", Some(4096)),
        ("4k", Some(4096)),
        ("4K", Some(4096)),
        ("4KB", Some(4096)),
        ("4KiB", Some(4096)),
        ("4kib", Some(4096)),
        ("4 k", Some(4096)),
        (" 128k ", Some(128 << 10)),
        ("1M", Some(1 << 20)),
        ("1.5G", Some(3 << 29)),
        ("1.5g", Some(3 << 29)),
        ("0.5k", Some(512)),
        ("2T", Some(2 << 40)),
        ("1P", Some(1 << 50)),
        ("1pib", Some(1 << 50)),
        ("15E", Some(15 << 60)),
        ("", None),
        ("k", None),
        ("abc", None),
        ("4q", None),
        ("4Gi", None),
        ("-4k", None),
        ("1.1K", None),
        ("0.5", None),
        (".5k", None),
        ("1.k", None),
        ("100_000", None),
        ("16E", None),
        ("1e3", None),
    ];

    #[test]
    fn every_place_that_parses_sizes_agrees() {
        for &(input, want) in SIZES {
            // Volume sizes: the HTTP API, the config file and `strata volume`.
            assert_eq!(strata_meta::parse_size(input).ok(), want, "volumes: {input:?}");
            // Drive specs (`--drive mem:SIZE`).
            let drive = format!("mem:{input}").parse::<strata_store::DriveSpec>().ok().map(|d| match d.kind {
                strata_store::DriveKind::Mem { size } => size,
                other => panic!("mem:{input} parsed as {other:?}"),
            });
            assert_eq!(drive, want, "drive spec: {input:?}");
            // The bench command line.
            let arg = format!("--span={input}");
            let cli = Cli::try_parse_from(["bench", "--target", "tcp://127.0.0.1:4420/nqn.x", &arg]);
            assert_eq!(cli.ok().and_then(|c| c.bench.run.span), want, "bench option: {input:?}");
            // Bench job files.
            let job = format!("[[workload]]\nname = \"w\"\nbs = 512\nruntime = \"1s\"\nspan = {input:?}\n");
            let suite = Suite::parse(&job, "sizes.toml", Some(&"tcp://127.0.0.1:4420/nqn.x".parse().unwrap()));
            assert_eq!(suite.ok().and_then(|s| s.workloads[0].spec.span), want, "job file: {input:?}");
        }
    }

    #[test]
    fn a_bad_poll_us_is_a_usage_error_naming_it() {
        let e = spec(&["--poll-us", "1000001"]).unwrap_err();
        assert!(e.contains("poll_us = 1000001"), "{e}");
        let e = spec(&["--poll-us", "100us"]).unwrap_err();
        assert!(e.contains("--poll-us"), "{e}");
        let e = spec(&["--poll-us=-1"]).unwrap_err();
        assert!(e.contains("--poll-us"), "{e}");
    }
}
