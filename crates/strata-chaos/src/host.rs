//! Verified hosts: strata's own initiator (`strata_host::Controller`)
//! doing random, checked I/O on a range of blocks it owns alone.
//!
//! A host connects one controller with two I/O queues and runs a few
//! workers on it; each worker owns a disjoint slice of the host's range
//! and runs one operation at a time, so no block ever has two commands in
//! flight and the oracle's rule 3 (read returns exactly the last
//! acknowledged value) applies whenever nothing failed. Operations, in
//! random order: small writes (1-2 blocks, in-capsule), large writes
//! (16-64 blocks, the R2T path), some with FUA, reads of 1-64 blocks,
//! Flush, Write Zeroes and deallocate. Every read is checked block by
//! block.
//!
//! Each operation runs under the watchdog: one that has not finished
//! after [`Ctx::watchdog`] (or that the host library timed out, its
//! `io_timeout` being the same) is a hang. A transport failure marks the
//! controller broken; the host drops it and connects a new one, unless it
//! was told to stop. Failures are expected, and not reported, while the
//! run disrupts strata on purpose or while the host's `expect_errors`
//! flag is set (its volume is being shrunk or deleted).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use strata_host::{Controller, HostConfig, HostError};
use tokio::sync::watch;

use crate::block::{self, BLOCK_SIZE};
use crate::ctx::{Ctx, VolumeRef};
use crate::oracle::{Value, WriteOutcome};
use crate::raw::HostIdent;
use strata_rand::Rng;

/// Namespace of every strata volume.
pub const NSID: u32 = 1;

/// What a verified host does.
#[derive(Debug, Clone)]
pub struct HostPlan {
    /// Name in messages ("host2").
    pub name: String,
    /// Scenario failures are attributed to.
    pub scenario: &'static str,
    /// Volume it does I/O on.
    pub volume: VolumeRef,
    /// Blocks it owns.
    pub range: Range<u64>,
    /// Workers (commands in flight at once).
    pub workers: u16,
    /// While set, failures are expected (its volume is being resized or
    /// deleted) and only hangs are reported.
    pub expect_errors: Arc<AtomicBool>,
}

/// A host-library configuration with an identity from `rng`.
pub fn host_config(ctx: &Ctx, rng: &mut Rng, io_queues: u16) -> HostConfig {
    let ident = HostIdent::random(rng);
    HostConfig {
        hostnqn: ident.hostnqn,
        hostid: ident.hostid,
        io_queues,
        io_queue_size: 32,
        connect_timeout: ctx.watchdog.min(Duration::from_secs(10)),
        io_timeout: ctx.watchdog,
        ..HostConfig::default()
    }
}

/// How an operation ended, from the harness's point of view.
pub enum Ended<T> {
    /// Completed with success.
    Done(T),
    /// Completed with an error status.
    Status(HostError),
    /// The transport failed (connection lost, queue failed).
    Transport(HostError),
    /// Did not finish within the watchdog.
    Hang,
}

impl<T> Ended<T> {
    /// What the oracle should record for a write that ended like this.
    pub fn write_outcome(&self) -> WriteOutcome {
        match self {
            Ended::Done(_) => WriteOutcome::Acked,
            // A path that forwarded the command may have given up on it
            // after the owner ran it.
            Ended::Status(e) if is_path_error(e) => WriteOutcome::Unknown,
            Ended::Status(_) => WriteOutcome::Failed,
            Ended::Transport(_) | Ended::Hang => WriteOutcome::Unknown,
        }
    }
}

/// A path error (ANA Transition, Inaccessible, ...): a multipath host
/// retries the command on another path, or on this one once it serves
/// again; its application never sees it.
pub fn is_path_error(e: &HostError) -> bool {
    e.status().is_some_and(|s| s.is_path_error())
}

/// Runs `fut` under the watchdog and classifies its result. The host
/// library's own command timeout is reported as a hang too.
pub async fn guarded<T>(watchdog: Duration, fut: impl Future<Output = Result<T, HostError>>) -> Ended<T> {
    match tokio::time::timeout(watchdog + Duration::from_secs(2), fut).await {
        Err(_) => Ended::Hang,
        Ok(Ok(v)) => Ended::Done(v),
        Ok(Err(e @ HostError::Timeout { .. })) => {
            let _ = e;
            Ended::Hang
        }
        Ok(Err(e)) if e.status().is_some() => Ended::Status(e),
        Ok(Err(e)) => Ended::Transport(e),
    }
}

/// Connects a controller to `nqn` through its optimized path, as a host
/// without multipath that follows discovery and ANA: each address
/// discovery lists in turn, keeping the first whose ANA state is
/// optimized (a pool volume's owner; a controller without ANA counts as
/// optimized). Every other node of a pool serves a path that forwards to
/// the owner: a host on it would lose its connection with that node,
/// which the chaos tests' faults do not expect.
///
/// # Errors
///
/// The last connect error, or [`HostError::Io`] when no path is
/// optimized now (a takeover under way: the caller tries again).
async fn connect_optimized(ctx: &Ctx, nqn: &str, cfg: &HostConfig) -> Result<Controller, HostError> {
    let mut last = None;
    for at in ctx.targets(nqn, cfg).await? {
        let c = match Controller::connect(at, nqn, cfg).await {
            Ok(c) => c,
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        match c.is_optimized().await {
            Ok(true) => return Ok(c),
            Ok(false) => {}
            Err(e) => last = Some(e),
        }
        let _ = c.disconnect().await;
    }
    Err(last.unwrap_or_else(|| HostError::Io {
        context: "finding the optimized path",
        source: std::io::Error::new(std::io::ErrorKind::NotFound, format!("no path to {nqn} is optimized now")),
    }))
}

/// Connects a controller to `nqn`, retrying for up to `patience` while
/// `stop` is not set. `None` when stopped or out of patience (the last
/// error is returned).
pub async fn connect_retrying(
    ctx: &Ctx,
    nqn: &str,
    cfg: &HostConfig,
    patience: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<Controller>, HostError> {
    let began = Instant::now();
    loop {
        if *stop.borrow() {
            return Ok(None);
        }
        let attempt = tokio::time::timeout(ctx.watchdog, connect_optimized(ctx, nqn, cfg));
        let err = tokio::select! {
            r = attempt => match r {
                Ok(Ok(c)) => return Ok(Some(c)),
                Ok(Err(e)) => e,
                Err(_) => HostError::Timeout { what: "connecting", after: ctx.watchdog },
            },
            _ = stop.changed() => return Ok(None),
        };
        if began.elapsed() >= patience {
            return Err(err);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = stop.changed() => return Ok(None),
        }
    }
}

/// Runs a verified host until `stop` is set.
pub async fn run(ctx: Arc<Ctx>, plan: HostPlan, mut rng: Rng, mut stop: watch::Receiver<bool>) {
    ctx.report(|r| r.ran(plan.scenario));
    let cfg = host_config(&ctx, &mut rng, 2);
    loop {
        let era = ctx.disruption_era();
        let expected = || ctx.disrupted() || ctx.disruption_era() != era || plan.expect_errors.load(Ordering::Acquire);
        let ctrl = match connect_retrying(&ctx, &plan.volume.nqn, &cfg, ctx.watchdog, &mut stop).await {
            Ok(Some(c)) => Arc::new(c),
            Ok(None) => return,
            Err(e) => {
                if matches!(e, HostError::Timeout { .. }) && !expected() {
                    ctx.hang(plan.scenario, format!("{}: connecting to {}", plan.name, plan.volume.nqn));
                } else if !expected() {
                    ctx.fail(plan.scenario, format!("{}: cannot connect to {}: {e}", plan.name, plan.volume.nqn));
                }
                // Out of patience: this host is done for the round.
                return;
            }
        };
        let broken = Arc::new(AtomicBool::new(false));
        let span = plan.range.end.saturating_sub(plan.range.start);
        let workers = u64::from(plan.workers.max(1)).min(span.max(1));
        let slice = span / workers;
        let mut tasks = Vec::new();
        for w in 0..workers {
            let start = plan.range.start + w * slice;
            let end = if w + 1 == workers { plan.range.end } else { start + slice };
            let worker = Worker {
                ctx: ctx.clone(),
                plan: plan.clone(),
                ctrl: ctrl.clone(),
                range: start..end,
                writer: ctx.writer_id(),
                broken: broken.clone(),
                stop: stop.clone(),
            };
            let wrng = rng.fork();
            tasks.push(tokio::spawn(worker.run(wrng)));
        }
        for t in tasks {
            let _ = t.await;
        }
        drop(ctrl);
        if *stop.borrow() {
            return;
        }
        // Broken controller: connect a new one after a breath.
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = stop.changed() => return,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Write { lba: u64, n: u32, fua: bool },
    Read { lba: u64, n: u32 },
    Flush,
    WriteZeroes { lba: u64, n: u32 },
    Deallocate { lba: u64, n: u32 },
}

struct Worker {
    ctx: Arc<Ctx>,
    plan: HostPlan,
    ctrl: Arc<Controller>,
    range: Range<u64>,
    writer: u32,
    broken: Arc<AtomicBool>,
    stop: watch::Receiver<bool>,
}

impl Worker {
    fn pick(&self, rng: &mut Rng) -> Op {
        let span = self.range.end - self.range.start;
        let roll = rng.below(100);
        let mut at = |n: u32| {
            let n = u64::from(n).min(span).max(1);
            (self.range.start + rng.below(span - n + 1), n as u32)
        };
        match roll {
            0..30 => {
                let n = 1 + (roll % 2) as u32;
                let (lba, n) = at(n);
                Op::Write { lba, n, fua: roll.is_multiple_of(7) }
            }
            30..45 => {
                let n = 16 + (roll as u32 % 4) * 16;
                let (lba, n) = at(n);
                Op::Write { lba, n, fua: roll.is_multiple_of(5) }
            }
            45..80 => {
                let n = [1, 2, 8, 16, 64][(roll % 5) as usize];
                let (lba, n) = at(n);
                Op::Read { lba, n }
            }
            80..90 => Op::Flush,
            90..95 => {
                let (lba, n) = at(1 + (roll % 8) as u32);
                Op::WriteZeroes { lba, n }
            }
            _ => {
                let (lba, n) = at(1 + (roll % 8) as u32);
                Op::Deallocate { lba, n }
            }
        }
    }

    /// Whether an operation begun in disruption era `era` may fail: a
    /// disruption runs now or ran during it, or the plan expects errors.
    fn expected(&self, era: u64) -> bool {
        self.overlapped(era) || self.plan.expect_errors.load(Ordering::Acquire)
    }

    fn overlapped(&self, era: u64) -> bool {
        self.ctx.disrupted() || self.ctx.disruption_era() != era
    }

    /// Reports a non-success end of `what`; returns false when the
    /// controller must be replaced.
    fn settle<T>(&self, what: &str, ended: &Ended<T>, era: u64) -> bool {
        let who = &self.plan.name;
        match ended {
            Ended::Done(_) => {
                self.ctx.host_done(who);
                true
            }
            // As a multipath host: the path is changing (a pool volume's
            // owner handing it over, or fenced); look for the optimized
            // path again. Not an error the application sees.
            Ended::Status(e) if is_path_error(e) => {
                self.ctx.report(|r| r.op("path_error", 1));
                false
            }
            Ended::Status(e) => {
                if !self.expected(era) {
                    self.ctx.fail(self.plan.scenario, format!("{who}: {what} failed: {e}"));
                }
                true
            }
            Ended::Transport(e) => {
                if !self.expected(era) {
                    self.ctx.fail(self.plan.scenario, format!("{who}: {what}: connection failed: {e}"));
                }
                false
            }
            Ended::Hang => {
                if !self.overlapped(era) {
                    self.ctx.hang(self.plan.scenario, format!("{who}: {what}"));
                }
                false
            }
        }
    }

    async fn run(self, mut rng: Rng) {
        let vol = self.plan.volume.id;
        let wd = self.ctx.watchdog;
        while !*self.stop.borrow() && !self.broken.load(Ordering::Acquire) {
            let op = self.pick(&mut rng);
            let era = self.ctx.disruption_era();
            let ok = match op {
                Op::Write { lba, n, fua } => {
                    let seq = self.ctx.seq();
                    let data = block::encode_run(vol, self.writer, seq, lba, n);
                    let value = Value::Data { writer: self.writer, seq };
                    // A FUA write runs a commit like a Flush: same gate.
                    let gate = if fua { Some(self.ctx.flush_gate.read().await) } else { None };
                    let t = self.ctx.oracle(|o| o.begin_write(vol, lba, u64::from(n), value));
                    let ended = guarded(wd, self.ctrl.write(NSID, lba, data, fua)).await;
                    self.ctx.oracle(|o| o.end_write(t, ended.write_outcome(), fua));
                    drop(gate);
                    let kind = match (n > 2, fua) {
                        (true, _) => "write_large",
                        (false, true) => "write_fua",
                        (false, false) => "write",
                    };
                    self.ctx.report(|r| {
                        r.op(kind, 1);
                        if matches!(ended, Ended::Done(_)) {
                            r.bytes_written += u64::from(n) * BLOCK_SIZE as u64;
                        }
                    });
                    self.settle(&format!("write lba {lba}+{n}{}", if fua { " FUA" } else { "" }), &ended, era)
                }
                Op::Read { lba, n } => {
                    let ended = guarded(wd, self.ctrl.read(NSID, lba, n)).await;
                    self.ctx.report(|r| r.op("read", 1));
                    if let Ended::Done(data) = &ended {
                        if data.len() != n as usize * BLOCK_SIZE {
                            self.ctx.fail(
                                self.plan.scenario,
                                format!("{}: read lba {lba}+{n} returned {} bytes", self.plan.name, data.len()),
                            );
                        } else {
                            self.ctx.check_blocks(self.plan.scenario, vol, lba, data, None);
                        }
                    }
                    self.settle(&format!("read lba {lba}+{n}"), &ended, era)
                }
                Op::Flush => {
                    let gate = self.ctx.flush_gate.read().await;
                    let t = self.ctx.oracle(|o| o.begin_flush(vol));
                    let ended = guarded(wd, self.ctrl.flush(NSID)).await;
                    drop(gate);
                    if matches!(ended, Ended::Done(_)) {
                        self.ctx.oracle(|o| o.flush_succeeded(t));
                    }
                    self.ctx.report(|r| r.op("flush", 1));
                    self.settle("flush", &ended, era)
                }
                Op::WriteZeroes { lba, n } | Op::Deallocate { lba, n } => {
                    let zeroes = matches!(op, Op::WriteZeroes { .. });
                    let t = self.ctx.oracle(|o| o.begin_write(vol, lba, u64::from(n), Value::Zero));
                    let ended = if zeroes {
                        guarded(wd, self.ctrl.write_zeroes(NSID, lba, n, false)).await
                    } else {
                        guarded(wd, self.ctrl.deallocate(NSID, &[(lba, n)])).await
                    };
                    self.ctx.oracle(|o| o.end_write(t, ended.write_outcome(), false));
                    let kind = if zeroes { "write_zeroes" } else { "deallocate" };
                    self.ctx.report(|r| r.op(kind, 1));
                    self.settle(&format!("{kind} lba {lba}+{n}"), &ended, era)
                }
            };
            if !ok {
                self.broken.store(true, Ordering::Release);
            }
        }
    }
}

/// Reads back every tracked block of `volume` with a fresh controller and
/// checks it; `after` names the restart it follows, if any (violations
/// of durable blocks then count as lost). `scenario_of` names the scenario that owns an LBA, so that a
/// failure is reported against the scenario that wrote the block.
/// Returns the blocks checked.
pub async fn verify_volume(
    ctx: &Ctx,
    volume: &VolumeRef,
    after: Option<&str>,
    scenario_of: &(dyn Fn(u64) -> &'static str + Sync),
    rng: &mut Rng,
) -> u64 {
    let cfg = host_config(ctx, rng, 1);
    let (_tx, mut never) = watch::channel(false);
    let ctrl = match connect_retrying(ctx, &volume.nqn, &cfg, ctx.watchdog, &mut never).await {
        Ok(Some(c)) => c,
        Ok(None) => return 0,
        Err(e) => {
            ctx.fail("verify", format!("cannot connect to {} to verify it: {e}", volume.nqn));
            return 0;
        }
    };
    let lbas = ctx.oracle(|o| o.tracked(volume.id));
    let mut checked = 0;
    let mut i = 0;
    while i < lbas.len() {
        // A run of consecutive tracked blocks of one scenario, at most 1 MiB.
        let start = lbas[i];
        let scenario = scenario_of(start);
        let mut n = 1;
        while i + n < lbas.len() && lbas[i + n] == start + n as u64 && n < 256 && scenario_of(lbas[i + n]) == scenario {
            n += 1;
        }
        // Path errors (the owner handing the volume over) are tried
        // again, as a multipath host does, until the watchdog.
        let deadline = Instant::now() + ctx.watchdog;
        let ended = loop {
            match guarded(ctx.watchdog, ctrl.read(NSID, start, n as u32)).await {
                Ended::Status(e) if is_path_error(&e) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                ended => break ended,
            }
        };
        match ended {
            Ended::Done(data) if data.len() == n * BLOCK_SIZE => {
                ctx.check_blocks(scenario, volume.id, start, &data, after);
                checked += n as u64;
            }
            Ended::Done(data) => {
                ctx.fail(scenario, format!("verify: read of {start}+{n} returned {} bytes", data.len()))
            }
            Ended::Status(e) => {
                ctx.fail(scenario, format!("verify: read of volume {} lba {start}+{n} failed: {e}", volume.name))
            }
            Ended::Transport(e) => {
                ctx.fail(scenario, format!("verify: connection lost reading volume {}: {e}", volume.name));
                break;
            }
            Ended::Hang => {
                ctx.hang(scenario, format!("verify: read of volume {} lba {start}+{n}", volume.name));
                break;
            }
        }
        ctx.report(|r| r.op("verify_read", 1));
        i += n;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), ctrl.disconnect()).await;
    checked
}
