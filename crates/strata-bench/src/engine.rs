//! The load engine: runs one [`WorkloadSpec`] against its target and
//! measures it into a [`WorkloadResult`].
//!
//! [`run`] connects one controller whose `jobs` I/O queues (one TCP
//! connection each) come back as caller-driven
//! [`QueueDriver`](strata_host::QueueDriver)s, identifies the namespace,
//! checks the spec against it, and starts one task per job (see the
//! private `job` module for the I/O path). This task is the coordinator:
//! it merges the jobs' per-interval reports into the time series, calls
//! the progress and stop-loss hooks, and watches for cancellation.
//!
//! Semantics worth knowing:
//! - Sequential patterns (`read`, `write`) give each job its own
//!   contiguous region of the span and wrap around inside it; random ones
//!   draw `bs`-aligned offsets uniformly over the whole span, from an
//!   `strata_rand::Rng` seeded with `seed + job`.
//! - The ramp is excluded by submission time: I/Os issued during the ramp
//!   are never counted, I/Os issued after it are counted when they
//!   complete, including those still in flight at the runtime deadline
//!   (the run drains them). `duration_s` runs from the end of the ramp to
//!   the last completion.
//! - `size` counts measured bytes over all jobs and is exact: it must be
//!   a multiple of `bs`.
//! - `rate_iops` is one token bucket over all jobs (10 ms of burst).
//! - Verify: writes carry the self-describing pattern of the `verify`
//!   module; reads check every byte, and never write: a block that reads
//!   as zeros is a failure like any other that does not hold its LBA's
//!   pattern (it was never written, or it was lost). So a verify read
//!   run checks data left by an earlier verify write run and cannot hide
//!   a block lost to zeros. With `prefill`, a workload that reads first
//!   writes the pattern over every block of its span (sequentially, not
//!   measured), for a fresh namespace.
//! - The first I/O error or verify mismatch ends the run: the result comes
//!   back with `errors` or `verify_failures` set and `aborted` saying
//!   what happened. So do stop-loss and cancellation. [`BenchError`] is
//!   only for runs that could not start.
//! - Samples start after the ramp. The final, partial interval counts in
//!   the totals but becomes a sample only if it lasted at least half an
//!   interval (a sliver of an interval has a meaningless rate).
//! - The client CPU is the whole process's (`getrusage(RUSAGE_SELF)`)
//!   from the end of the ramp to the end of the run. With `poll_us` set,
//!   each job spins on its socket for up to that long before it sleeps
//!   (see [`QueueDriver::set_busy_poll`](strata_host::QueueDriver::set_busy_poll)),
//!   so the client CPU grows towards one core per job: the spin is the
//!   price of sparing the target a wake-up per batch of completions, as
//!   SPDK's `spdk_nvme_perf` (which never sleeps) does.
//! - With `failover`, the run starts on the best path discovery at the
//!   target lists and rides through path failures instead of ending at
//!   the first (the `paths` and `job` modules say how); the result lists
//!   each change of path.
//! - `disable_sqflow` asks the target, at Connect, to disable SQ flow
//!   control, which lets it complete successful reads with the C2HData
//!   SUCCESS flag instead of a separate CapsuleResp.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use strata_host::{Controller, HostConfig, HostError, MAX_BLOCKS_PER_COMMAND};
use strata_nvme::pdu::Digests;
use tokio::sync::{mpsc, watch};

use crate::cpu::{self, CpuTimes};
use crate::histogram::Histogram;
use crate::job::{Check, Job, Phase, PhaseOutcome, Report, Reporter, Shared};
use crate::paths::{Connected, Paths, known_paths};
use crate::pattern::{self, OpKind, Source};
use crate::rate::RateLimiter;
use crate::result::{CpuUsage, LatencySummary, Sample, WorkloadResult};
use crate::spec::{MAX_POLL_US, Pattern, WorkloadSpec};
use crate::verify::{self, Stamp};
use strata_rand::Rng;

/// Largest transfer of one prefill I/O.
const PREFILL_CHUNK_BYTES: usize = 128 * 1024;

/// Why a run could not start. Failures during a run (I/O errors, verify
/// mismatches) are not errors: they end the run and are reported in the
/// [`WorkloadResult`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// Connecting to the target or setting up the controller failed.
    #[error("connecting to {target}: {source}")]
    Connect {
        /// The target, as `tcp://ADDR/NQN`.
        target: String,
        /// What failed.
        #[source]
        source: HostError,
    },
    /// The controller granted fewer I/O queues than there are jobs.
    #[error("the controller granted {granted} I/O queues; the workload needs {wanted} (one per job)")]
    TooFewQueues {
        /// Jobs asked for.
        wanted: u32,
        /// Queues connected.
        granted: usize,
    },
    /// Identify Namespace failed.
    #[error("identifying namespace {nsid}: {source}")]
    Identify {
        /// Namespace ID.
        nsid: u32,
        /// What failed.
        #[source]
        source: HostError,
    },
    /// The namespace cannot be used (inactive, unusable format).
    #[error("namespace {nsid}: {reason}")]
    Namespace {
        /// Namespace ID.
        nsid: u32,
        /// What is wrong.
        reason: String,
    },
    /// The spec is inconsistent, or does not fit the namespace.
    #[error("bad workload: {field}: {reason}")]
    BadSpec {
        /// The spec field at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

fn bad(field: &'static str, reason: impl Into<String>) -> BenchError {
    BenchError::BadSpec { field, reason: reason.into() }
}

/// Where a run stands, handed to the progress callback once per interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// The interval that just ended.
    pub sample: Sample,
    /// Measured time so far (since the end of the ramp).
    pub elapsed: Duration,
    /// Measured time the run is set to last (`runtime`), if known.
    pub total: Option<Duration>,
    /// I/Os measured so far.
    pub ios: u64,
    /// Bytes measured so far.
    pub bytes: u64,
}

impl std::fmt::Display for Progress {
    /// The live line: `12s/30s  412k IOPS  1.6 GB/s  p99 120us`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.elapsed.as_secs_f64();
        match self.total {
            Some(t) => write!(f, "{s:.0}s/{:.0}s", t.as_secs_f64())?,
            None => write!(f, "{s:.0}s")?,
        }
        let iops = self.sample.iops;
        if iops >= 1e6 {
            write!(f, "  {:.2}M IOPS", iops / 1e6)?;
        } else if iops >= 1e3 {
            write!(f, "  {:.0}k IOPS", iops / 1e3)?;
        } else {
            write!(f, "  {iops:.0} IOPS")?;
        }
        let mbps = self.sample.mbps;
        if mbps >= 1000.0 {
            write!(f, "  {:.1} GB/s", mbps / 1000.0)?;
        } else {
            write!(f, "  {mbps:.0} MB/s")?;
        }
        write!(f, "  p99 {:.0}us", self.sample.p99_us)
    }
}

/// Progress callback.
pub type ProgressFn = Box<dyn FnMut(&Progress) + Send>;
/// Stop-loss hook: given the interval's sample and the histogram of every
/// I/O measured so far, `Some(reason)` aborts the run.
pub type StopLossFn = Box<dyn FnMut(&Sample, &Histogram) -> Option<String> + Send>;

/// How to run a workload (as opposed to what to run, the spec).
pub struct RunOptions {
    interval: Duration,
    progress: Option<ProgressFn>,
    stop_loss: Option<StopLossFn>,
    cancel: Option<watch::Receiver<bool>>,
    io_timeout: Duration,
    host: Option<HostConfig>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            interval: Duration::from_secs(1),
            progress: None,
            stop_loss: None,
            cancel: None,
            io_timeout: Duration::from_secs(30),
            host: None,
        }
    }
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("interval", &self.interval)
            .field("progress", &self.progress.is_some())
            .field("stop_loss", &self.stop_loss.is_some())
            .field("cancel", &self.cancel.is_some())
            .field("io_timeout", &self.io_timeout)
            .finish()
    }
}

impl RunOptions {
    /// Length of one time-series interval. Default: 1 s. Zero is taken as
    /// 1 ms.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Called at the end of every measured interval. Default: none.
    pub fn on_progress(mut self, f: impl FnMut(&Progress) + Send + 'static) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Called at the end of every measured interval, after the progress
    /// callback, with the interval's sample and the histogram of all I/Os
    /// measured so far; returning `Some(reason)` ends the run, and the
    /// result's `aborted` reads `stop-loss: <reason>`. Default: none.
    pub fn stop_loss(mut self, f: impl FnMut(&Sample, &Histogram) -> Option<String> + Send + 'static) -> Self {
        self.stop_loss = Some(Box::new(f));
        self
    }

    /// Ends the run when the watched value becomes `true` (wire Ctrl-C to
    /// the sender); the result holds what was measured until then and
    /// `aborted` reads `cancelled`. A dropped sender cancels nothing.
    /// Default: none.
    pub fn cancel_on(mut self, rx: watch::Receiver<bool>) -> Self {
        self.cancel = Some(rx);
        self
    }

    /// An I/O outstanding longer than this fails the run. Default: 30 s.
    pub fn io_timeout(mut self, t: Duration) -> Self {
        self.io_timeout = t;
        self
    }

    /// Host identity and connection settings; the engine overrides the
    /// queue count, queue size, digests and SQ flow control from the spec
    /// (the report's spec says what ran). Default: [`HostConfig::default`].
    pub fn host_config(mut self, cfg: HostConfig) -> Self {
        self.host = Some(cfg);
        self
    }
}

/// The spec checked against the namespace, in blocks.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Blocks per I/O (`bs / block_bytes`).
    bpi: u32,
    /// I/O-sized units in the span.
    units: u64,
    /// Measured I/Os allowed by `size`.
    size_ios: Option<u64>,
}

fn check_spec(spec: &WorkloadSpec) -> Result<(), BenchError> {
    if spec.jobs == 0 || spec.jobs > u32::from(u16::MAX) {
        return Err(bad("jobs", format!("{} is outside 1..=65535", spec.jobs)));
    }
    if spec.iodepth == 0 || spec.iodepth > u32::from(u16::MAX) {
        return Err(bad("iodepth", format!("{} is outside 1..=65535", spec.iodepth)));
    }
    if spec.bs == 0 {
        return Err(bad("bs", "must not be 0"));
    }
    if spec.read_pct > 100 {
        return Err(bad("read_pct", format!("{} is above 100", spec.read_pct)));
    }
    if spec.rate_iops == Some(0) {
        return Err(bad("rate_iops", "must not be 0"));
    }
    if spec.poll_us > MAX_POLL_US {
        return Err(bad("poll_us", format!("{} is above {MAX_POLL_US} (one second)", spec.poll_us)));
    }
    if spec.prefill && !spec.verify {
        return Err(bad("prefill", "writes the verify pattern: it needs verify"));
    }
    match (spec.runtime, spec.size) {
        (None, None) => return Err(bad("runtime", "a workload needs a runtime, a size or both")),
        (_, Some(s)) if s == 0 || !s.is_multiple_of(u64::from(spec.bs)) => {
            return Err(bad("size", format!("{s} bytes is not a non-zero multiple of bs ({})", spec.bs)));
        }
        (Some(r), _) if r.is_zero() => return Err(bad("runtime", "must not be 0")),
        _ => {}
    }
    Ok(())
}

fn layout(spec: &WorkloadSpec, block_bytes: usize, ns_bytes: u64, max_transfer: usize) -> Result<Layout, BenchError> {
    let bs = spec.bs as usize;
    if !bs.is_multiple_of(block_bytes) {
        return Err(bad("bs", format!("{bs} is not a multiple of the namespace block size {block_bytes}")));
    }
    if bs > max_transfer || bs / block_bytes > MAX_BLOCKS_PER_COMMAND as usize {
        return Err(bad("bs", format!("{bs} exceeds the largest transfer the controller accepts ({max_transfer})")));
    }
    if spec.verify && block_bytes < verify::MIN_BLOCK_BYTES {
        return Err(bad(
            "verify",
            format!(
                "the namespace block size {block_bytes} is below the {} the pattern needs",
                verify::MIN_BLOCK_BYTES
            ),
        ));
    }
    let span = spec.span.unwrap_or(ns_bytes);
    if span > ns_bytes {
        return Err(bad("span", format!("{span} bytes is beyond the namespace's {ns_bytes}")));
    }
    let units = span / bs as u64;
    let sequential = matches!(spec.rw, Pattern::Read | Pattern::Write);
    let least = if sequential { u64::from(spec.jobs) } else { 1 };
    if units < least {
        return Err(bad(
            "span",
            format!(
                "{span} bytes is too small for {least} I/O(s) of {bs} bytes{}",
                if sequential { " (one region per job)" } else { "" }
            ),
        ));
    }
    Ok(Layout { bpi: (bs / block_bytes) as u32, units, size_ios: spec.size.map(|s| s / bs as u64) })
}

/// The source of job `j` for the measured phase.
fn main_source(spec: &WorkloadSpec, l: &Layout, j: u32) -> Source {
    let random = |read_pct| Source::Random {
        rng: Rng::new(spec.seed.wrapping_add(u64::from(j))),
        units: l.units,
        blocks_per_io: l.bpi,
        read_pct,
    };
    let seq = |kind| {
        let (first, n) = pattern::job_region(l.units, u64::from(spec.jobs), u64::from(j));
        let bpi = u64::from(l.bpi);
        Source::Seq { kind, start: first * bpi, len: n * bpi, chunk: l.bpi, pos: 0, once: false }
    };
    match spec.rw {
        Pattern::Read => seq(OpKind::Read),
        Pattern::Write => seq(OpKind::Write),
        Pattern::RandRead => random(100),
        Pattern::RandWrite => random(0),
        Pattern::RandRw => random(spec.read_pct),
    }
}

/// Runs `spec` to its end condition (or failure, stop-loss, cancellation)
/// and returns what it measured.
///
/// # Errors
///
/// [`BenchError`] when the run cannot start: the target refuses the
/// connection, the namespace is unusable, or the spec is inconsistent or
/// does not fit the namespace. Everything that goes wrong once I/O has
/// started is reported in the result instead.
pub async fn run(spec: &WorkloadSpec, mut opts: RunOptions) -> Result<WorkloadResult, BenchError> {
    check_spec(spec)?;
    let target = spec.target.to_string();
    let cfg = host_config(spec, opts.host.take().unwrap_or_default());
    let (addr, nqn) = (spec.target.addr, spec.target.nqn.as_str());
    let connected = match spec.failover {
        None => Controller::connect_with_drivers::<u16>(addr, nqn, &cfg).await.map(|(c, d)| (c, d, addr)),
        // Start where a multipath host would: on the best path.
        Some(_) => strata_host::connect_best_with_drivers::<u16>(&[addr], None, nqn, &cfg, cfg.connect_timeout).await,
    };
    let (ctrl, drivers, path) = connected.map_err(|source| BenchError::Connect { target: target.clone(), source })?;
    match namespace_of(spec, &ctrl).await {
        Ok(ns) => {
            let seeds = match spec.failover {
                Some(_) => known_paths(addr, nqn, &cfg, cfg.connect_timeout).await,
                None => vec![addr],
            };
            let paths = Arc::new(Paths::new(
                ctrl,
                Connected {
                    seeds,
                    addr: path,
                    nqn: nqn.to_string(),
                    nsid: spec.target.nsid,
                    nsze: ns.nsze,
                    cfg,
                    failover: spec.failover,
                    poll: (spec.poll_us > 0).then(|| Duration::from_micros(spec.poll_us)),
                },
            ));
            let r = run_connected(spec, &mut opts, ns, drivers, &paths).await;
            paths.disconnect().await;
            r
        }
        Err(e) => {
            if let Err(d) = ctrl.disconnect().await {
                tracing::debug!("disconnecting from {target}: {d}");
            }
            Err(e)
        }
    }
}

/// What the run needs to know of its namespace.
#[derive(Debug, Clone, Copy)]
struct NamespaceFacts {
    nsze: u64,
    block_bytes: usize,
    max_transfer: usize,
}

/// Identifies the spec's namespace on `ctrl`.
async fn namespace_of(spec: &WorkloadSpec, ctrl: &Controller) -> Result<NamespaceFacts, BenchError> {
    let nsid = spec.target.nsid;
    let ns = ctrl.identify_namespace(nsid).await.map_err(|source| BenchError::Identify { nsid, source })?;
    if ns.nsze == 0 {
        return Err(BenchError::Namespace { nsid, reason: "not active on this controller (NSZE 0)".into() });
    }
    let block_bytes = ns
        .block_size_bytes()
        .and_then(|b| usize::try_from(b).ok())
        .filter(|&b| b > 0)
        .ok_or_else(|| BenchError::Namespace { nsid, reason: "its formatted LBA size is invalid".into() })?;
    Ok(NamespaceFacts { nsze: ns.nsze, block_bytes, max_transfer: ctrl.max_transfer_bytes() })
}

/// The caller's host settings with what the spec decides put in.
/// `spec` must have passed `check_spec` (jobs and iodepth fit a u16).
fn host_config(spec: &WorkloadSpec, base: HostConfig) -> HostConfig {
    HostConfig {
        io_queues: spec.jobs as u16,
        // One slot per I/O; at least 2 (SQSIZE is 0-based and 0 is invalid).
        io_queue_size: (spec.iodepth as u16).max(2),
        digests: if spec.digests { Digests { header: true, data: true } } else { Digests::default() },
        disable_sq_flow_control: spec.disable_sqflow,
        ..base
    }
}

async fn run_connected(
    spec: &WorkloadSpec,
    opts: &mut RunOptions,
    ns: NamespaceFacts,
    drivers: Vec<strata_host::QueueDriver<u16>>,
    paths: &Arc<Paths>,
) -> Result<WorkloadResult, BenchError> {
    if drivers.len() < spec.jobs as usize {
        return Err(BenchError::TooFewQueues { wanted: spec.jobs, granted: drivers.len() });
    }
    let NamespaceFacts { nsze, block_bytes, max_transfer } = ns;
    let ns_bytes = nsze.saturating_mul(block_bytes as u64);
    let l = layout(spec, block_bytes, ns_bytes, max_transfer)?;
    let generation = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let stamp = spec.verify.then_some(Stamp { seed: spec.seed, generation });
    let mut jobs: Vec<Job> = drivers
        .into_iter()
        .enumerate()
        .map(|(i, mut d)| {
            if spec.poll_us > 0 {
                d.set_busy_poll(Duration::from_micros(spec.poll_us));
            }
            let seed = spec.seed.wrapping_add(i as u64);
            let max_write = spec.bs.max(PREFILL_CHUNK_BYTES as u32) as usize;
            Job::new(i, d, paths.clone(), spec.target.nsid, block_bytes, max_write, stamp, seed)
        })
        .collect();
    let reads = matches!(spec.rw, Pattern::Read | Pattern::RandRead | Pattern::RandRw);
    let mut result = WorkloadResult {
        spec: spec.clone(),
        duration_s: 0.0,
        ios: 0,
        bytes: 0,
        iops: 0.0,
        mbps: 0.0,
        latency: LatencySummary::default(),
        read_latency: LatencySummary::default(),
        write_latency: LatencySummary::default(),
        histogram: Histogram::new(),
        timeseries: Vec::new(),
        cpu: CpuUsage::default(),
        errors: 0,
        verify_failures: 0,
        aborted: None,
        failovers: Vec::new(),
    };
    if spec.prefill && reads {
        let chunk =
            ((PREFILL_CHUNK_BYTES.min(max_transfer) / spec.bs as usize).max(1) * spec.bs as usize / block_bytes) as u32;
        let aborted = prefill(spec, &l, chunk, &mut jobs, opts).await;
        if let Some((errors, failures, why)) = aborted {
            result.errors = errors;
            result.verify_failures = failures;
            result.aborted = Some(why);
            finish_teardown(jobs).await;
            result.failovers = paths.events().await;
            return Ok(result);
        }
    }
    measure(spec, &l, jobs, opts, &mut result).await;
    result.failovers = paths.events().await;
    Ok(result)
}

/// Closes the job queues.
async fn finish_teardown(jobs: Vec<Job>) {
    for j in jobs {
        if let Err(e) = j.driver.disconnect(Duration::from_secs(5)).await {
            tracing::debug!("disconnecting job {}: {e}", j.index);
        }
    }
}

/// Runs one phase on every job at once, setting `shared.stop` if `cancel`
/// fires meanwhile; returns the jobs, their outcomes and whether the
/// phase was cancelled.
async fn run_phase_all(
    jobs: Vec<Job>,
    shared: &Shared,
    cancel: &mut Option<watch::Receiver<bool>>,
    mut phase_of: impl FnMut(&Job) -> Phase,
) -> (Vec<Job>, Vec<PhaseOutcome>, bool) {
    let mut handles = Vec::with_capacity(jobs.len());
    for mut job in jobs {
        let ph = phase_of(&job);
        handles.push(tokio::spawn(async move {
            let out = job.run_phase(ph).await;
            (job, out)
        }));
    }
    let mut was_cancelled = false;
    let mut jobs = Vec::with_capacity(handles.len());
    let mut outs = Vec::with_capacity(handles.len());
    for mut h in handles {
        let joined = loop {
            tokio::select! {
                j = &mut h => break j,
                () = cancelled(cancel), if !was_cancelled => {
                    was_cancelled = true;
                    shared.stop.store(true, Ordering::Relaxed);
                }
            }
        };
        file_job(joined, &mut jobs, &mut outs);
    }
    (jobs, outs, was_cancelled)
}

/// Sums outcomes: `(errors, verify failures, first abort)`.
fn summarise(outs: &[PhaseOutcome]) -> (u64, u64, Option<String>) {
    let errors = outs.iter().map(|o| o.errors).sum();
    let failures = outs.iter().map(|o| o.verify_failures).sum();
    // Prefer naming a real failure over a job that merely saw `stop`.
    let abort = outs.iter().find_map(|o| o.abort.clone());
    (errors, failures, abort)
}

/// The prefill of a run that reads: the verify pattern written over every
/// block of the span, each job its region. `Some((errors, verify failures,
/// reason))` when it failed.
async fn prefill(
    spec: &WorkloadSpec,
    l: &Layout,
    chunk: u32,
    jobs: &mut Vec<Job>,
    opts: &mut RunOptions,
) -> Option<(u64, u64, String)> {
    let shared = Arc::new(Shared::default());
    let io_timeout = opts.io_timeout;
    let region = |j: usize| {
        let (first, n) = pattern::job_region(l.units, u64::from(spec.jobs), j as u64);
        (first * u64::from(l.bpi), n * u64::from(l.bpi))
    };
    let (js, outs, was_cancelled) = run_phase_all(std::mem::take(jobs), &shared, &mut opts.cancel, |j| {
        let (start, len) = region(j.index);
        Phase {
            source: Source::Seq { kind: OpKind::Write, start, len, chunk, pos: 0, once: true },
            depth: spec.iodepth as usize,
            check: Check::None,
            measure_from: None,
            end: None,
            shared: shared.clone(),
            reporter: None,
            io_timeout,
        }
    })
    .await;
    *jobs = js;
    let (errors, failures, abort) = summarise(&outs);
    tracing::info!(blocks = l.units * u64::from(l.bpi), "prefill: wrote the verify pattern over the span");
    match (abort, was_cancelled) {
        (Some(why), _) => Some((errors, failures, format!("prefill: {why}"))),
        (None, true) => Some((errors, failures, "cancelled (during the prefill)".into())),
        (None, false) => None,
    }
}

/// Interval totals being merged from the jobs' reports.
#[derive(Debug)]
struct Agg {
    read: Histogram,
    write: Histogram,
    ios: u64,
    bytes: u64,
}

/// Resolves when the watched value is (or becomes) true; never if there
/// is nothing to watch or its sender is gone.
async fn cancelled(rx: &mut Option<watch::Receiver<bool>>) {
    if let Some(r) = rx {
        if r.wait_for(|c| *c).await.is_ok() {
            return;
        }
        *rx = None;
    }
    std::future::pending::<()>().await
}

/// The coordinator of the measured phase; fills in `result`.
async fn measure(spec: &WorkloadSpec, l: &Layout, jobs: Vec<Job>, opts: &mut RunOptions, result: &mut WorkloadResult) {
    let start = Instant::now();
    let ramp_end = start + spec.ramp;
    let end = spec.runtime.map(|r| ramp_end + r);
    let shared = Arc::new(Shared {
        stop: Default::default(),
        budget: l.size_ios.map(AtomicU64::new),
        rate: spec.rate_iops.map(|r| RateLimiter::new(start, r)),
    });
    let (tx, mut rx) = mpsc::unbounded_channel();
    let reporter = Reporter { tx, first: ramp_end, interval: opts.interval };
    let check = if spec.verify && !matches!(spec.rw, Pattern::Write | Pattern::RandWrite) {
        Check::Verify
    } else {
        Check::None
    };
    let n = jobs.len();
    let io_timeout = opts.io_timeout;
    let phases = {
        let shared = shared.clone();
        move |j: &Job| Phase {
            source: main_source(spec, l, j.index as u32),
            depth: spec.iodepth as usize,
            check,
            measure_from: Some(ramp_end),
            end,
            shared: shared.clone(),
            reporter: Some(reporter.clone()),
            io_timeout,
        }
    };
    // Spawn the jobs; the reporter clones they hold are the only senders.
    let mut handles = Vec::with_capacity(n);
    for mut job in jobs {
        let ph = phases(&job);
        handles.push(tokio::spawn(async move {
            let out = job.run_phase(ph).await;
            (job, out)
        }));
    }
    drop(phases);

    let mut cpu_start: Option<(Instant, Option<CpuTimes>)> =
        spec.ramp.is_zero().then(|| (Instant::now(), cpu::cpu_times()));
    let mut aggs: BTreeMap<u64, Agg> = BTreeMap::new();
    let mut reported = vec![0u64; n];
    let mut finished = vec![false; n];
    let mut next_k = 0u64;
    let (mut tot_read, mut tot_write) = (Histogram::new(), Histogram::new());
    let (mut tot_ios, mut tot_bytes) = (0u64, 0u64);
    let mut aborted: Option<String> = None;
    let ramp_sleep = tokio::time::sleep_until(ramp_end.into());
    tokio::pin!(ramp_sleep);
    let interval = opts.interval;

    // `judge`: whether to consult the stop-loss hook (not once the run is
    // already ending).
    let emit =
        |k: u64, agg: Agg, len: Duration, tot: &Histogram, ios: u64, bytes: u64, opts: &mut RunOptions, judge: bool| {
            let mut h = agg.read;
            h.merge(&agg.write);
            let secs = len.as_secs_f64().max(1e-9);
            let elapsed = interval * k as u32 + len;
            let sample = Sample {
                t_s: elapsed.as_secs_f64(),
                iops: agg.ios as f64 / secs,
                mbps: agg.bytes as f64 / secs / 1e6,
                p99_us: h.quantile(0.99) as f64 / 1000.0,
                p50_us: h.quantile(0.50) as f64 / 1000.0,
            };
            if let Some(p) = &mut opts.progress {
                p(&Progress { sample, elapsed, total: spec.runtime, ios, bytes });
            }
            let stop = if judge { opts.stop_loss.as_mut().and_then(|s| s(&sample, tot)) } else { None };
            (sample, stop)
        };

    let mut done_jobs = 0;
    while done_jobs < n {
        let rep: Report = tokio::select! {
            r = rx.recv() => match r {
                Some(r) => r,
                None => break,
            },
            () = cancelled(&mut opts.cancel), if aborted.is_none() => {
                aborted = Some("cancelled".into());
                shared.stop.store(true, Ordering::Relaxed);
                continue;
            }
            () = &mut ramp_sleep, if cpu_start.is_none() => {
                cpu_start = Some((Instant::now(), cpu::cpu_times()));
                continue;
            }
        };
        tot_read.merge(&rep.read);
        tot_write.merge(&rep.write);
        tot_ios += rep.ios;
        tot_bytes += rep.bytes;
        let agg = aggs.entry(rep.k).or_insert_with(|| Agg {
            read: Histogram::new(),
            write: Histogram::new(),
            ios: 0,
            bytes: 0,
        });
        agg.read.merge(&rep.read);
        agg.write.merge(&rep.write);
        agg.ios += rep.ios;
        agg.bytes += rep.bytes;
        if rep.last {
            finished[rep.job] = true;
            done_jobs += 1;
        } else {
            reported[rep.job] = rep.k + 1;
        }
        // Emit every interval that all running jobs have reported in full.
        while (0..n).any(|j| !finished[j]) && (0..n).all(|j| finished[j] || reported[j] > next_k) {
            let agg = aggs.remove(&next_k).unwrap_or(Agg {
                read: Histogram::new(),
                write: Histogram::new(),
                ios: 0,
                bytes: 0,
            });
            let mut tot = tot_read.clone();
            tot.merge(&tot_write);
            let judge = aborted.is_none();
            let (sample, stop) = emit(next_k, agg, interval, &tot, tot_ios, tot_bytes, opts, judge);
            result.timeseries.push(sample);
            next_k += 1;
            if let (Some(reason), None) = (stop, &aborted) {
                aborted = Some(format!("stop-loss: {reason}"));
                shared.stop.store(true, Ordering::Relaxed);
            }
        }
    }

    let mut outs = Vec::with_capacity(n);
    let mut jobs = Vec::with_capacity(n);
    for h in handles {
        file_job(h.await, &mut jobs, &mut outs);
    }
    let run_end = outs.iter().filter_map(|o| o.finished).max().unwrap_or_else(Instant::now);
    let cpu_end = cpu::cpu_times();
    // The tail: intervals not yet emitted, the last one partial.
    let last_k = aggs.keys().next_back().copied();
    for (k, agg) in std::mem::take(&mut aggs) {
        if k < next_k {
            continue;
        }
        let from = ramp_end + interval * k as u32;
        let len = if Some(k) == last_k { run_end.saturating_duration_since(from) } else { interval };
        if len >= interval / 2 {
            let mut tot = tot_read.clone();
            tot.merge(&tot_write);
            let (sample, _) = emit(k, agg, len.min(interval), &tot, tot_ios, tot_bytes, opts, false);
            result.timeseries.push(sample);
        }
    }
    finish_teardown(jobs).await;

    let (errors, failures, job_abort) = summarise(&outs);
    result.errors = errors;
    result.verify_failures = failures;
    // A failure is what ended the run, even if a hook fired meanwhile.
    result.aborted = job_abort.or(aborted);
    let duration = run_end.saturating_duration_since(ramp_end);
    result.duration_s = duration.as_secs_f64();
    result.ios = tot_ios;
    result.bytes = tot_bytes;
    if result.duration_s > 0.0 {
        result.iops = tot_ios as f64 / result.duration_s;
        result.mbps = tot_bytes as f64 / result.duration_s / 1e6;
    }
    result.read_latency = LatencySummary::of(&tot_read);
    result.write_latency = LatencySummary::of(&tot_write);
    let mut all = tot_read;
    all.merge(&tot_write);
    result.latency = LatencySummary::of(&all);
    result.histogram = all;
    if let (Some((t0, Some(c0))), Some(c1)) = (cpu_start, cpu_end) {
        let wall = run_end.saturating_duration_since(t0).as_secs_f64();
        let user = c1.user.saturating_sub(c0.user).as_secs_f64();
        let sys = c1.sys.saturating_sub(c0.sys).as_secs_f64();
        let percent = if wall > 0.0 { (user + sys) / wall * 100.0 } else { 0.0 };
        result.cpu = CpuUsage { user_s: user, sys_s: sys, percent };
    }
}

/// Files a finished job task: its job and outcome, or, when the task
/// panicked (its queue went with it), a failed outcome.
fn file_job<J>(
    joined: Result<(J, PhaseOutcome), tokio::task::JoinError>,
    jobs: &mut Vec<J>,
    outs: &mut Vec<PhaseOutcome>,
) {
    match joined {
        Ok((j, o)) => {
            jobs.push(j);
            outs.push(o);
        }
        Err(e) => outs.push(PhaseOutcome {
            errors: 1,
            abort: Some(format!("a job task failed: {e}")),
            ..PhaseOutcome::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_line_reads_like_the_cli_wants() {
        let p = Progress {
            sample: Sample { t_s: 12.0, iops: 412_300.0, mbps: 1_600.0, p99_us: 120.4, p50_us: 60.0 },
            elapsed: Duration::from_secs(12),
            total: Some(Duration::from_secs(30)),
            ios: 0,
            bytes: 0,
        };
        assert_eq!(p.to_string(), "12s/30s  412k IOPS  1.6 GB/s  p99 120us");
    }

    #[test]
    fn the_spec_decides_queues_digests_and_sq_flow_control() {
        let base = HostConfig { disable_sq_flow_control: true, hostnqn: "nqn.test:host".into(), ..Default::default() };
        let spec = WorkloadSpec { jobs: 3, iodepth: 1, digests: true, ..WorkloadSpec::default() };
        let cfg = host_config(&spec, base.clone());
        assert_eq!((cfg.io_queues, cfg.io_queue_size), (3, 2));
        assert!(cfg.digests.header && cfg.digests.data);
        assert!(!cfg.disable_sq_flow_control, "the spec says what ran, not the caller's base");
        assert_eq!(cfg.hostnqn, "nqn.test:host");
        let cfg = host_config(&WorkloadSpec { disable_sqflow: true, ..spec }, HostConfig::default());
        assert!(cfg.disable_sq_flow_control);
    }

    #[test]
    fn specs_that_cannot_run_are_refused_naming_the_field() {
        let ok = WorkloadSpec::default();
        assert!(check_spec(&ok).is_ok());
        let cases = [
            (WorkloadSpec { jobs: 0, ..ok.clone() }, "jobs"),
            (WorkloadSpec { iodepth: 0, ..ok.clone() }, "iodepth"),
            (WorkloadSpec { read_pct: 101, ..ok.clone() }, "read_pct"),
            (WorkloadSpec { runtime: None, size: None, ..ok.clone() }, "runtime"),
            (WorkloadSpec { size: Some(4097), ..ok.clone() }, "size"),
            (WorkloadSpec { rate_iops: Some(0), ..ok.clone() }, "rate_iops"),
            (WorkloadSpec { poll_us: MAX_POLL_US + 1, ..ok.clone() }, "poll_us"),
        ];
        for (spec, field) in cases {
            match check_spec(&spec) {
                Err(BenchError::BadSpec { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        assert!(check_spec(&WorkloadSpec { poll_us: MAX_POLL_US, disable_sqflow: true, ..ok.clone() }).is_ok());
        let bs = |bs| WorkloadSpec { bs, ..ok.clone() };
        assert!(matches!(layout(&bs(1000), 512, 1 << 20, 1 << 20), Err(BenchError::BadSpec { field: "bs", .. })));
        assert!(matches!(layout(&bs(1 << 21), 512, 1 << 30, 1 << 20), Err(BenchError::BadSpec { field: "bs", .. })));
        let span = |s| WorkloadSpec { span: Some(s), rw: Pattern::Read, jobs: 4, ..ok.clone() };
        assert!(matches!(
            layout(&span(3 * 4096), 512, 1 << 20, 1 << 20),
            Err(BenchError::BadSpec { field: "span", .. })
        ));
        assert!(matches!(
            layout(&span(2 << 20), 512, 1 << 20, 1 << 20),
            Err(BenchError::BadSpec { field: "span", .. })
        ));
        let l = layout(&span(1 << 20), 512, 1 << 20, 1 << 20).unwrap();
        assert_eq!((l.bpi, l.units), (8, 256));
    }
}
