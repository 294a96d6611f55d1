//! One job: one I/O queue kept `depth` I/Os deep by one task.
//!
//! The job owns its [`QueueDriver`] and runs the whole I/O path on its own
//! task: draw the next I/Os from its [`Source`], encode them into the
//! driver (which sends a whole batch with one vectored write), wait for
//! completions (one read syscall returns as many as the socket holds),
//! account them, refill. Per I/O there is no task, no channel, no
//! allocation (except the pattern buffer of a verify write) and two clock
//! reads per batch, not per I/O: every I/O of a batch shares the
//! submission timestamp taken before it was encoded, and every completion
//! returned by one `poll` shares the timestamp taken after it returned.
//!
//! A run is split into phases (prefill scan, prefill write, measured
//! run); each is one call of [`Job::run_phase`]. Within a phase:
//! - I/Os submitted before `measure_from` (the ramp) are not recorded;
//!   the others are recorded when they complete, so a run that stops at
//!   its deadline still counts the I/Os it had in flight;
//! - at every interval boundary the job sends what it recorded since the
//!   previous one to the coordinator and starts afresh; its timer is set
//!   to the next boundary, so boundaries are seen within timer
//!   resolution even when no I/O completes;
//! - submission stops at the deadline, when the shared byte budget is
//!   spent, when the source runs dry or when anyone sets `stop`; the
//!   phase ends once nothing is in flight.
//!
//! The first I/O error or verify mismatch sets `stop` for every job: a run
//! never continues past a failure.
//!
//! With failover on, a path failure is not an error: a completion with a
//! path error (or any status without Do Not Retry, except Reservation
//! Conflict), a queue that failed, a submission the queue refused or an
//! I/O past the I/O timeout drops the queue, puts everything that was in
//! flight on the retry list (keeping its first submission time, so its
//! latency shows the pause) and takes a queue on the next path from
//! [`Paths::replace`]. The retry list is sent before any new I/O, and a
//! phase ends only once it is empty. Writes may land twice, and in
//! either order: a verify write always writes its LBA's one pattern, and
//! other runs' data is never checked.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use strata_host::{Completion, HostError, QueueDriver};
use strata_nvme::command::{ReadWrite, Sqe, io};
use strata_nvme::status::Status;
use tokio::sync::mpsc;

use crate::histogram::Histogram;
use crate::paths::Paths;
use crate::pattern::{NextIo, OpKind, Source};
use crate::rate::{Grant, RateLimiter};
use crate::verify::{self, BlockCheck, Stamp};
use strata_rand::Rng;

/// State shared by the jobs of one phase.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Set to end the phase: failure, stop-loss, cancellation.
    pub(crate) stop: AtomicBool,
    /// Measured I/Os still to issue (the `size` end condition).
    pub(crate) budget: Option<AtomicU64>,
    /// The IOPS limit.
    pub(crate) rate: Option<RateLimiter>,
}

impl Shared {
    /// Claims up to `want` measured I/Os from the budget.
    fn claim(&self, want: u64) -> u64 {
        let Some(b) = &self.budget else { return want };
        let mut left = b.load(Ordering::Relaxed);
        loop {
            let n = left.min(want);
            if n == 0 {
                return 0;
            }
            match b.compare_exchange_weak(left, left - n, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return n,
                Err(cur) => left = cur,
            }
        }
    }

    fn budget_spent(&self) -> bool {
        self.budget.as_ref().is_some_and(|b| b.load(Ordering::Relaxed) == 0)
    }
}

/// What the job records per interval and sends at each boundary.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) job: usize,
    /// Interval index (0 is the first after the ramp).
    pub(crate) k: u64,
    pub(crate) read: Histogram,
    pub(crate) write: Histogram,
    pub(crate) ios: u64,
    pub(crate) bytes: u64,
    /// The job's last report: it has finished.
    pub(crate) last: bool,
}

/// Interval boundaries and where to send reports.
#[derive(Debug, Clone)]
pub(crate) struct Reporter {
    pub(crate) tx: mpsc::UnboundedSender<Report>,
    /// Start of interval 0 (the end of the ramp).
    pub(crate) first: Instant,
    pub(crate) interval: Duration,
}

/// What to check on reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Nothing.
    None,
    /// Every block must hold a valid verify pattern: zeros fail too.
    Verify,
}

/// One phase of a job.
pub(crate) struct Phase {
    pub(crate) source: Source,
    pub(crate) depth: usize,
    pub(crate) check: Check,
    /// I/Os submitted at or after this are measured (`None`: none are).
    pub(crate) measure_from: Option<Instant>,
    /// Stop submitting at this instant.
    pub(crate) end: Option<Instant>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) reporter: Option<Reporter>,
    /// An I/O outstanding longer than this fails the run.
    pub(crate) io_timeout: Duration,
}

/// How a phase ended for one job.
#[derive(Debug, Default)]
pub(crate) struct PhaseOutcome {
    pub(crate) errors: u64,
    pub(crate) verify_failures: u64,
    /// The first failure, described.
    pub(crate) abort: Option<String>,
    /// When the last I/O of the phase completed.
    pub(crate) finished: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct InFlight {
    io: NextIo,
    submitted: Instant,
    measured: bool,
}

#[derive(Debug)]
struct Acc {
    read: Histogram,
    write: Histogram,
    ios: u64,
    bytes: u64,
}

impl Acc {
    fn new() -> Acc {
        Acc { read: Histogram::new(), write: Histogram::new(), ios: 0, bytes: 0 }
    }
}

/// One job: its queue and per-I/O bookkeeping.
pub(crate) struct Job {
    pub(crate) index: usize,
    pub(crate) driver: QueueDriver<u16>,
    /// The run's connection: where a new queue comes from on failover.
    paths: Arc<Paths>,
    /// The generation of the connection `driver` belongs to.
    generation: u64,
    nsid: u32,
    block_bytes: usize,
    /// Pattern of the verify writes; `None` writes `payload`.
    stamp: Option<Stamp>,
    /// Write data of non-verify writes (sliced to each write's length).
    payload: Bytes,
    slots: Vec<Option<InFlight>>,
    free: Vec<u16>,
    done: Vec<(u16, Result<Completion, HostError>)>,
    /// I/Os to send again on a new path, in the order they were sent.
    retry: std::collections::VecDeque<InFlight>,
    /// A path failure seen and not yet acted on.
    path_failed: Option<String>,
    /// Whether an I/O completed on the current queue.
    served: bool,
}

fn far_future(now: Instant) -> Instant {
    now + Duration::from_secs(86_400 * 365)
}

impl Job {
    /// A job on `driver` for namespace `nsid` with `block_bytes` blocks,
    /// writing at most `max_write` bytes per I/O.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        index: usize,
        driver: QueueDriver<u16>,
        paths: Arc<Paths>,
        nsid: u32,
        block_bytes: usize,
        max_write: usize,
        stamp: Option<Stamp>,
        seed: u64,
    ) -> Job {
        let depth = usize::from(driver.depth());
        let mut payload = vec![0u8; if stamp.is_some() { 0 } else { max_write }];
        // Not zeros: a target may treat zero writes specially.
        let mut rng = Rng::new(seed ^ 0xDA7A);
        for chunk in payload.chunks_mut(8) {
            let v = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        Job {
            index,
            driver,
            paths,
            generation: 0,
            nsid,
            block_bytes,
            stamp,
            payload: payload.into(),
            slots: vec![None; depth],
            free: (0..depth as u16).rev().collect(),
            done: Vec::with_capacity(depth),
            retry: std::collections::VecDeque::new(),
            path_failed: None,
            served: false,
        }
    }

    /// Sends `f` on the queue. The caller checked that a slot is free.
    fn submit(&mut self, f: InFlight) -> Result<(), HostError> {
        let io = f.io;
        let Some(token) = self.free.pop() else { return Err(HostError::InvalidArgument("no free slot".into())) };
        let len = io.nlb as usize * self.block_bytes;
        let mut sqe = Sqe::new(if io.kind == OpKind::Read { io::READ } else { io::WRITE }, 0);
        sqe.set_nsid(self.nsid);
        ReadWrite { slba: io.slba, nlb: io.nlb, fua: false, limited_retry: false }.encode(&mut sqe);
        let (data, read_len) = match (io.kind, self.stamp) {
            (OpKind::Read, _) => (None, len),
            (OpKind::Write, Some(stamp)) => {
                let mut buf = vec![0u8; len];
                verify::fill(&mut buf, self.block_bytes, io.slba, stamp);
                (Some(Bytes::from(buf)), 0)
            }
            (OpKind::Write, None) => (Some(self.payload.slice(..len)), 0),
        };
        if let Err((token, e)) = self.driver.submit(token, sqe, data, read_len) {
            self.free.push(token);
            return Err(e);
        }
        self.slots[usize::from(token)] = Some(f);
        Ok(())
    }

    /// Sends `f`, or, when the queue refuses it and the run fails over,
    /// keeps it for the next path. `Err` describes a failure that ends
    /// the run.
    fn send(&mut self, f: InFlight) -> Result<(), String> {
        match self.submit(f) {
            Ok(()) => Ok(()),
            Err(e) if self.paths.fails_over() => {
                self.retry.push_back(f);
                self.note_path_failure(format!("the queue refused a command: {e}"));
                Ok(())
            }
            Err(e) => Err(format!(
                "job {}: submitting {} of {} blocks at LBA {}: {e}",
                self.index, f.io.kind, f.io.nlb, f.io.slba
            )),
        }
    }

    fn note_path_failure(&mut self, cause: String) {
        if self.path_failed.is_none() {
            self.path_failed = Some(cause);
        }
    }

    /// Whether a failed completion is a path failure to ride through
    /// (the run fails over and the status allows a retry elsewhere).
    fn is_path_failure(&self, res: &Result<Completion, HostError>) -> bool {
        if !self.paths.fails_over() {
            return false;
        }
        match res {
            Ok(c) => {
                let st = c.cqe.status;
                !st.is_success()
                    && (st.is_path_error() || (!st.is_dnr() && st.code() != Status::RESERVATION_CONFLICT.code()))
            }
            Err(_) => true,
        }
    }

    /// Drops the queue after a path failure, puts what was in flight on
    /// the retry list and takes a queue on the next path.
    async fn fail_over(&mut self, cause: String, shared: &Shared) -> Result<(), String> {
        let since = Instant::now();
        let mut stranded: Vec<InFlight> = self.slots.iter_mut().filter_map(Option::take).collect();
        stranded.sort_by_key(|f| f.submitted);
        self.retry.extend(stranded);
        let cause = format!("job {}: {cause}", self.index);
        let (driver, generation) =
            self.paths.replace(self.index, self.generation, &cause, since, self.served, &shared.stop).await?;
        self.served = false;
        // The old queue's connection closes as it drops.
        self.driver = driver;
        self.generation = generation;
        let depth = usize::from(self.driver.depth());
        self.slots = vec![None; depth];
        self.free = (0..depth as u16).rev().collect();
        self.done.clear();
        Ok(())
    }

    fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Runs one phase to its end; see the module docs.
    pub(crate) async fn run_phase(&mut self, mut ph: Phase) -> PhaseOutcome {
        let mut out = PhaseOutcome::default();
        let mut acc = Acc::new();
        let mut k = 0u64;
        let start = Instant::now();
        let far = far_future(start);
        let mut boundary = ph.reporter.as_ref().map_or(far, |r| r.first + r.interval);
        let mut watchdog = start + Duration::from_secs(1);
        let depth = ph.depth.min(self.slots.len());
        let mut issuing = true;
        let sleep = tokio::time::sleep_until(far.into());
        tokio::pin!(sleep);
        let mut sleep_at = far;
        loop {
            let now = Instant::now();
            if let Some(r) = &ph.reporter {
                while now >= boundary {
                    let a = std::mem::replace(&mut acc, Acc::new());
                    let _ = r.tx.send(Report {
                        job: self.index,
                        k,
                        read: a.read,
                        write: a.write,
                        ios: a.ios,
                        bytes: a.bytes,
                        last: false,
                    });
                    k += 1;
                    boundary += r.interval;
                }
            }
            if now >= watchdog {
                watchdog = now + Duration::from_secs(1);
                if let Some(f) = self.slots.iter().flatten().find(|f| now.duration_since(f.submitted) > ph.io_timeout) {
                    if self.paths.fails_over() {
                        let f = *f;
                        self.note_path_failure(format!(
                            "{} of {} blocks at LBA {} did not complete within {:?}",
                            f.io.kind, f.io.nlb, f.io.slba, ph.io_timeout
                        ));
                    } else {
                        self.fail(
                            &mut out,
                            &ph.shared,
                            format!(
                                "job {}: {} of {} blocks at LBA {} did not complete within {:?}",
                                self.index, f.io.kind, f.io.nlb, f.io.slba, ph.io_timeout
                            ),
                        );
                        out.errors += 1;
                        // The queue may be wedged: give up on what is in flight.
                        break;
                    }
                }
            }
            if let Some(cause) = self.path_failed.take() {
                if let Err(why) = self.fail_over(cause, &ph.shared).await {
                    if !ph.shared.stop.load(Ordering::Relaxed) {
                        out.errors += self.retry.len() as u64;
                        self.fail(&mut out, &ph.shared, why);
                    }
                    // Stopped anyway: what is left to retry is dropped.
                    self.retry.clear();
                    break;
                }
                continue;
            }
            // What a failed path left is sent first.
            while !self.free.is_empty() && self.path_failed.is_none() {
                let Some(f) = self.retry.pop_front() else { break };
                if let Err(msg) = self.send(f) {
                    out.errors += 1;
                    self.fail(&mut out, &ph.shared, msg);
                }
            }
            if issuing && (ph.shared.stop.load(Ordering::Relaxed) || ph.end.is_some_and(|e| now >= e)) {
                issuing = false;
            }
            let mut rate_wait = None;
            if issuing && self.retry.is_empty() && self.path_failed.is_none() {
                let mut want = depth.saturating_sub(self.in_flight()) as u64;
                let measured = ph.measure_from.is_some_and(|m| now >= m);
                if want > 0 && measured && ph.shared.budget.is_some() {
                    want = ph.shared.claim(want);
                    if want == 0 && ph.shared.budget_spent() {
                        issuing = false;
                    }
                }
                if want > 0
                    && let Some(rate) = &ph.shared.rate
                {
                    match rate.acquire(want, now) {
                        Grant::Go(n) => {
                            // Give back budget claimed beyond the grant.
                            if let (Some(b), true) = (&ph.shared.budget, measured) {
                                b.fetch_add(want - n, Ordering::Relaxed);
                            }
                            want = n;
                        }
                        Grant::WaitUntil(t) => {
                            if let (Some(b), true) = (&ph.shared.budget, measured) {
                                b.fetch_add(want, Ordering::Relaxed);
                            }
                            want = 0;
                            rate_wait = Some(t);
                        }
                    }
                }
                for _ in 0..want {
                    let Some(io) = ph.source.next_io() else {
                        issuing = false;
                        break;
                    };
                    if let Err(msg) = self.send(InFlight { io, submitted: now, measured }) {
                        out.errors += 1;
                        self.fail(&mut out, &ph.shared, msg);
                        issuing = false;
                        break;
                    }
                }
            }
            if self.path_failed.is_some() {
                continue;
            }
            if !issuing && self.in_flight() == 0 && self.retry.is_empty() {
                break;
            }
            let mut deadline = boundary.min(watchdog);
            if issuing {
                if let Some(e) = ph.end {
                    deadline = deadline.min(e);
                }
                if let Some(t) = rate_wait {
                    deadline = deadline.min(t);
                }
            }
            if deadline != sleep_at {
                sleep.as_mut().reset(deadline.into());
                sleep_at = deadline;
            }
            if self.in_flight() > 0 {
                tokio::select! {
                    biased;
                    r = self.driver.poll(&mut self.done) => {
                        // A failed queue has handed every token back with
                        // the error; they are accounted below.
                        let _ = r;
                    }
                    () = &mut sleep => {}
                }
            } else {
                (&mut sleep).await;
            }
            if !self.done.is_empty() {
                let now = Instant::now();
                self.complete(now, &mut acc, &mut out, &ph);
            }
        }
        out.finished = Some(Instant::now());
        if let Some(r) = &ph.reporter {
            let _ = r.tx.send(Report {
                job: self.index,
                k,
                read: acc.read,
                write: acc.write,
                ios: acc.ios,
                bytes: acc.bytes,
                last: true,
            });
        }
        out
    }

    fn fail(&self, out: &mut PhaseOutcome, shared: &Shared, reason: String) {
        shared.stop.store(true, Ordering::Relaxed);
        if out.abort.is_none() {
            tracing::warn!("{reason}");
            out.abort = Some(reason);
        }
    }

    /// Accounts every completion in `self.done`.
    fn complete(&mut self, now: Instant, acc: &mut Acc, out: &mut PhaseOutcome, ph: &Phase) {
        let mut done = std::mem::take(&mut self.done);
        for (token, res) in done.drain(..) {
            let Some(f) = self.slots.get_mut(usize::from(token)).and_then(Option::take) else { continue };
            self.free.push(token);
            let io = f.io;
            if self.is_path_failure(&res) {
                let cause = match &res {
                    Ok(c) => format!("{} of {} blocks at LBA {}: {}", io.kind, io.nlb, io.slba, c.cqe.status),
                    Err(e) => e.to_string(),
                };
                self.retry.push_back(f);
                self.note_path_failure(cause);
                continue;
            }
            let what = || format!("job {}: {} of {} blocks at LBA {}", self.index, io.kind, io.nlb, io.slba);
            let c = match res {
                Ok(c) if c.cqe.status.is_success() => {
                    self.served = true;
                    c
                }
                Ok(c) => {
                    out.errors += 1;
                    self.fail(out, &ph.shared, format!("{} failed: {}", what(), c.cqe.status));
                    continue;
                }
                Err(e) => {
                    out.errors += 1;
                    self.fail(out, &ph.shared, format!("{} failed: {e}", what()));
                    continue;
                }
            };
            let len = io.nlb as usize * self.block_bytes;
            if io.kind == OpKind::Read && ph.check != Check::None {
                for (i, block) in c.data.chunks(self.block_bytes).enumerate() {
                    let lba = io.slba + i as u64;
                    match verify::check_block(block, lba) {
                        BlockCheck::Valid => {}
                        BlockCheck::Zeros => {
                            out.verify_failures += 1;
                            let msg = format!(
                                "verify: job {}: LBA {lba}: expected the verify pattern of LBA {lba}, found zeros \
                                 (never written, or lost; a verify read never writes: write the span first, or \
                                 pass --prefill)",
                                self.index
                            );
                            self.fail(out, &ph.shared, msg);
                        }
                        BlockCheck::Mismatch(m) => {
                            out.verify_failures += 1;
                            self.fail(out, &ph.shared, format!("verify: job {}: LBA {lba}: {m}", self.index));
                        }
                    }
                }
            }
            drop(c);
            if f.measured {
                let ns = now.saturating_duration_since(f.submitted).as_nanos() as u64;
                match io.kind {
                    OpKind::Read => acc.read.record(ns),
                    OpKind::Write => acc.write.record(ns),
                }
                acc.ios += 1;
                acc.bytes += len as u64;
            }
        }
        self.done = done;
    }
}
