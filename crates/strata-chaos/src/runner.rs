//! The round loop: start strata, then round after round run verified
//! load with faults on top, kill -9 (or stop the load) at a random
//! moment, restart, and verify every tracked block against the oracle.
//!
//! A round:
//!
//! 1. verified hosts (one per [`Layout`] host range) and, when resets are
//!    on, two resetters start on the default volume;
//! 2. the volume-operations scenario and the attack window (two kinds of
//!    misbehaving hosts at a time, alternating between rounds, with a
//!    legitimate host probing beside them) run and finish;
//! 3. at a random moment after that, while the hosts are still busy,
//!    strata is killed with SIGKILL (most rounds) or the load is stopped;
//!    in some rounds the kill comes right when the volume scenario asks
//!    for it, just after a shrink and regrow;
//! 4. the load stops; after a kill the oracle records the crash and
//!    strata restarts on the same data dir and ports;
//! 5. every tracked block of every live volume is read back and checked.
//!
//! After the last round strata is stopped with SIGTERM, started again,
//! and everything is verified once more (a clean shutdown loses nothing
//! acknowledged). The plan of each round comes from the seeded PRNG, so a
//! seed replays the same experiment.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::attack::{self, ProbePlan};
use crate::block::BLOCK_SIZE;
use crate::config::{ChaosConfig, FaultKind, Tuning};
use crate::ctx::{Ctx, VolumeRef};
use crate::error::Error;
use crate::host::{self, HostPlan};
use crate::process::{RssSampler, StrataProcess};
use crate::report::Report;
use crate::{resets, volume_ops};
use strata_rand::Rng;

/// Blocks each verified host owns.
const HOST_BLOCKS: u64 = 2048;
/// Blocks each resetter owns (32 extents of strata's default 1 MiB, so
/// that it can keep giving some back and allocating them anew).
const RESET_BLOCKS: u64 = 32 * crate::resets::EXTENT_BLOCKS;
/// Resetters running at once.
const RESETTERS: u64 = 2;
/// Blocks the legitimate-host probes write.
const PROBE_BLOCKS: u64 = 256;
/// Blocks the R2T hoarders aim at (never written: they send no data).
const SCRATCH_BLOCKS: u64 = 8192;
/// Deadline for strata to listen after a (re)start.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// Where each scenario does its I/O on the default volume.
#[derive(Debug, Clone)]
pub struct Layout {
    /// One range per verified host.
    pub hosts: Vec<Range<u64>>,
    /// One range per resetter.
    pub resetters: Vec<Range<u64>>,
    /// The legitimate-host probes' range.
    pub probe: Range<u64>,
    /// The R2T hoarders' target (no data ever lands there).
    pub scratch: Range<u64>,
    /// Size of the default volume, MiB.
    pub volume_mib: u64,
}

impl Layout {
    /// The layout for `hosts` verified hosts.
    pub fn new(hosts: u16) -> Layout {
        let hosts: Vec<Range<u64>> = (0..u64::from(hosts)).map(|i| i * HOST_BLOCKS..(i + 1) * HOST_BLOCKS).collect();
        let base = hosts.last().map_or(0, |r| r.end);
        let resetters: Vec<Range<u64>> =
            (0..RESETTERS).map(|j| base + j * RESET_BLOCKS..base + (j + 1) * RESET_BLOCKS).collect();
        let probe = base + RESETTERS * RESET_BLOCKS..base + RESETTERS * RESET_BLOCKS + PROBE_BLOCKS;
        let scratch = probe.end..probe.end + SCRATCH_BLOCKS;
        let volume_mib = (scratch.end * BLOCK_SIZE as u64).div_ceil(1 << 20) + 16;
        Layout { hosts, resetters, probe, scratch, volume_mib }
    }

    /// The scenario that writes `lba` of the default volume.
    pub fn scenario_of(&self, lba: u64) -> &'static str {
        if self.hosts.iter().any(|r| r.contains(&lba)) {
            "verified_io"
        } else if self.resetters.iter().any(|r| r.contains(&lba)) {
            "resets"
        } else if self.probe.contains(&lba) {
            "legit_host"
        } else {
            "r2t_hoarders"
        }
    }
}

/// What one round does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundPlan {
    /// Misbehaving hosts of this round's attack window.
    pub attacks: Vec<FaultKind>,
    /// Run the volume-operations scenario.
    pub volume_ops: bool,
    /// End with kill -9 (else the load just stops).
    pub kill: bool,
    /// Run resetters.
    pub resets: bool,
}

/// The plan of round `index`: attack kinds alternate in pairs (idle
/// sockets with connect floods, stalled readers with R2T hoarders),
/// volume operations every other round, kill -9 in the first round and
/// in about 70% of the others.
pub fn plan_round(index: u64, cfg: &ChaosConfig, rng: &mut Rng) -> RoundPlan {
    let groups: Vec<Vec<FaultKind>> = [
        vec![FaultKind::IdleSockets, FaultKind::ConnectFloods],
        vec![FaultKind::StalledReaders, FaultKind::R2tHoarders],
    ]
    .into_iter()
    .map(|g| g.into_iter().filter(|k| cfg.enabled(*k)).collect::<Vec<_>>())
    .filter(|g| !g.is_empty())
    .collect();
    let attacks = if groups.is_empty() { Vec::new() } else { groups[(index % groups.len() as u64) as usize].clone() };
    let kill_roll = rng.chance(70);
    RoundPlan {
        attacks,
        volume_ops: cfg.enabled(FaultKind::VolumeOps) && index.is_multiple_of(2),
        kill: cfg.enabled(FaultKind::Kill9) && (index == 0 || kill_roll),
        resets: cfg.enabled(FaultKind::Resets),
    }
}

/// Runs the chaos suite as `cfg` says, on a runtime of its own. Call it
/// from synchronous code (a plain `#[test]`, `main`), not from inside a
/// tokio runtime; there, use [`run_async`].
///
/// # Errors
///
/// [`Error`] when the run cannot be carried out: bad settings, an unusable
/// work dir, strata not starting. What strata does wrong is in the
/// [`Report`], not an error.
pub fn run(cfg: &ChaosConfig) -> Result<Report, Error> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::Config("run() was called inside a tokio runtime; use run_async".into()));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the tokio runtime", e))?;
    rt.block_on(run_async(cfg))
}

/// [`run`] on the caller's tokio runtime (which must be multi-threaded
/// and have time and I/O enabled).
///
/// # Errors
///
/// As [`run`].
pub async fn run_async(cfg: &ChaosConfig) -> Result<Report, Error> {
    cfg.validate()?;
    let (dir, temporary) = match &cfg.work_dir {
        Some(d) => (d.clone(), false),
        None => {
            let nanos =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
            (std::env::temp_dir().join(format!("strata-chaos-{}-{}-{nanos}", cfg.seed, std::process::id())), true)
        }
    };
    let data = dir.join("data");
    if std::fs::read_dir(&data).is_ok_and(|mut d| d.next().is_some()) {
        return Err(Error::Config(format!(
            "{} already holds a strata data dir; give an empty or new --work-dir",
            data.display()
        )));
    }
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let layout = Layout::new(cfg.hosts);
    let strata = StrataProcess::prepare(&cfg.strata, &dir, cfg.tuning.as_ref(), layout.volume_mib, 2048)?;
    let report = Report {
        seed: cfg.seed,
        tuning: cfg.tuning.is_some(),
        rss_limit_bytes: cfg.rss_limit_bytes,
        work_dir: dir.display().to_string(),
        ..Report::default()
    };
    let ctx = Arc::new(Ctx::new(strata.io, cfg.watchdog, cfg.legit_deadline, report));
    let sampler = RssSampler::start(strata.pid_cell(), Duration::from_millis(50));
    let mut runner = Runner {
        cfg: cfg.clone(),
        ctx,
        strata,
        rng: Rng::new(cfg.seed),
        default_vol: VolumeRef::new(1, "default"),
        chaos_vol: None,
        next_vol_id: 2,
        layout,
        expect: cfg.tuning.clone().unwrap_or_default(),
        started: Instant::now(),
        sampler,
    };
    let result = runner.run().await;
    let mut report = runner.finish();
    report.duration_secs = runner.started.elapsed().as_secs_f64();
    result?;
    if temporary && report.is_clean() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(report)
}

struct Runner {
    cfg: ChaosConfig,
    ctx: Arc<Ctx>,
    strata: StrataProcess,
    rng: Rng,
    default_vol: VolumeRef,
    chaos_vol: Option<VolumeRef>,
    next_vol_id: u32,
    layout: Layout,
    /// Timeouts the attackers are held to (the tuning, or its defaults
    /// when strata runs without it).
    expect: Tuning,
    started: Instant,
    sampler: RssSampler,
}

impl Runner {
    fn progress(&self, line: String) {
        if self.cfg.progress {
            eprintln!("[strata-chaos {:6.1}s] {line}", self.started.elapsed().as_secs_f64());
        }
    }

    async fn run(&mut self) -> Result<(), Error> {
        self.progress(format!("starting {}", self.strata.command_line()));
        let took = self.strata.start(START_DEADLINE).await?;
        self.progress(format!("strata listening on {} after {:.1}s", self.strata.io, took.as_secs_f64()));
        let min_round = Duration::from_secs(6);
        let mut index = 0;
        while self.started.elapsed() + min_round <= self.cfg.duration {
            let left = self.cfg.duration.saturating_sub(self.started.elapsed());
            self.round(index, self.cfg.round.min(left)).await?;
            index += 1;
        }
        self.clean_restart().await
    }

    fn finish(&mut self) -> Report {
        let peak = self.sampler.peak();
        let panics = self.strata.panics_in_log();
        self.strata.kill9();
        let ctx = &self.ctx;
        for p in panics.iter().take(5) {
            ctx.fail("strata", format!("strata panicked: {p}"));
        }
        ctx.report(|r| r.peak_rss_bytes = r.peak_rss_bytes.max(peak));
        if let Some(limit) = self.cfg.rss_limit_bytes
            && peak > limit
        {
            ctx.fail("rss", format!("strata's peak RSS {} MiB is over the limit of {} MiB", peak >> 20, limit >> 20));
        }
        ctx.snapshot()
    }

    fn live_volumes(&self) -> Vec<VolumeRef> {
        let mut v = vec![self.default_vol.clone()];
        v.extend(self.chaos_vol.clone());
        v
    }

    /// Checks strata is still running; if it died by itself, records it,
    /// tells the oracle about the crash and starts it again.
    async fn check_alive(&mut self, when: &str) -> Result<bool, Error> {
        let Some(status) = self.strata.exited() else { return Ok(true) };
        self.ctx.fail(
            "strata",
            format!(
                "strata exited by itself ({status}) {when}; log {}:\n{}",
                self.strata.log_path().display(),
                self.strata.log_tail(10)
            ),
        );
        self.ctx.oracle(|o| o.crash());
        self.strata.start(START_DEADLINE).await?;
        Ok(false)
    }

    async fn round(&mut self, index: u64, length: Duration) -> Result<(), Error> {
        let plan = plan_round(index, &self.cfg, &mut self.rng);
        let ctx = self.ctx.clone();
        let before = ctx.snapshot();
        let (stop_tx, stop_rx) = watch::channel(false);
        let began = Instant::now();
        let mut load = JoinSet::new();
        for (i, range) in self.layout.hosts.iter().enumerate() {
            let hp = HostPlan {
                name: format!("host{}", i + 1),
                scenario: "verified_io",
                volume: self.default_vol.clone(),
                range: range.clone(),
                workers: 3,
                expect_errors: Arc::new(AtomicBool::new(false)),
            };
            load.spawn(host::run(ctx.clone(), hp, self.rng.fork(), stop_rx.clone()));
        }
        if plan.resets {
            for range in &self.layout.resetters {
                load.spawn(resets::run(
                    ctx.clone(),
                    self.default_vol.clone(),
                    range.clone(),
                    self.rng.fork(),
                    stop_rx.clone(),
                ));
            }
        }
        let (attacks_done, attacks_over) = watch::channel(plan.attacks.is_empty());
        let kill_after_volume_ops = plan.kill && plan.volume_ops && self.rng.chance(50);
        let vol_task = plan.volume_ops.then(|| {
            let id = self.next_vol_id;
            self.next_vol_id += 1;
            let new = (id, format!("chaos-r{index}"));
            let previous = self.chaos_vol.take();
            let kill_after = kill_after_volume_ops.then(|| attacks_over.clone());
            let (c, rng, stop) = (self.strata.cli(), self.rng.fork(), stop_rx.clone());
            tokio::spawn(volume_ops::run(ctx.clone(), c, previous, new, rng, stop, kill_after))
        });
        let attack_task = (!plan.attacks.is_empty()).then(|| {
            let phase = AttackPhase {
                ctx: ctx.clone(),
                kinds: plan.attacks.clone(),
                expect: self.expect.clone(),
                slack: self.cfg.close_slack,
                vol: self.default_vol.clone(),
                probe: self.layout.probe.clone(),
                scratch: self.layout.scratch.clone(),
            };
            tokio::spawn(phase.run(self.rng.fork()))
        });
        let guard = length + self.cfg.watchdog * 2 + Duration::from_secs(30);
        if let Some(t) = attack_task
            && tokio::time::timeout(guard, t).await.is_err()
        {
            ctx.hang("attacks", "the attack window");
        }
        let _ = attacks_done.send(true);
        let mut kill_now = None;
        if let Some(t) = vol_task {
            match tokio::time::timeout(guard, t).await {
                Ok(Ok(outcome)) => {
                    self.chaos_vol = outcome.volume;
                    kill_now = outcome.kill_now;
                }
                Ok(Err(e)) => ctx.fail("volume_ops", format!("the scenario task failed: {e}")),
                Err(_) => ctx.hang("volume_ops", "the volume operations scenario"),
            }
        }
        let now = began.elapsed();
        let end = length.max(now + Duration::from_millis(800));
        let mut killed_at = None;
        let immediate = kill_now.is_some();
        if plan.kill {
            // Right away when the volume scenario asks (it holds the flush
            // gate until then), else at a random moment under load.
            let at = if immediate { now } else { self.rng.duration(now + Duration::from_millis(300), end) };
            tokio::time::sleep_until(began + at).await;
            if self.check_alive("before kill -9").await? {
                ctx.set_disrupted(true);
                self.strata.kill9();
                ctx.report(|r| r.fault("kill9", 1));
                killed_at = Some(at);
            }
            drop(kill_now.take());
        } else {
            tokio::time::sleep_until(began + end).await;
        }
        let _ = stop_tx.send(true);
        let stop_deadline = self.cfg.watchdog + Duration::from_secs(15);
        if tokio::time::timeout(stop_deadline, async { while load.join_next().await.is_some() {} }).await.is_err() {
            ctx.hang("verified_io", format!("round {index}: hosts stopping"));
            load.abort_all();
        }
        let after = if killed_at.is_some() {
            ctx.oracle(|o| o.crash());
            let took = self.strata.start(START_DEADLINE).await?;
            ctx.set_disrupted(false);
            self.progress(format!("round {index}: strata restarted after kill -9 in {:.1}s", took.as_secs_f64()));
            Some("kill -9")
        } else if self.check_alive("during the round").await? {
            None
        } else {
            Some("an unexpected exit")
        };
        for vol in self.live_volumes() {
            let layout = self.layout.clone();
            let is_default = vol.id == self.default_vol.id;
            let scenario_of = move |lba: u64| if is_default { layout.scenario_of(lba) } else { "volume_ops" };
            host::verify_volume(&ctx, &vol, after, &scenario_of, &mut self.rng).await;
        }
        ctx.report(|r| r.rounds += 1);
        let after = ctx.snapshot();
        let ops = |r: &Report| r.operations.values().sum::<u64>();
        let kill = match killed_at {
            Some(t) if immediate => {
                format!("kill -9 at {:.1}s (right after shrink+regrow)", t.as_secs_f64())
            }
            Some(t) => format!("kill -9 at {:.1}s", t.as_secs_f64()),
            None => "no kill".to_string(),
        };
        let attacks = plan.attacks.iter().map(|k| k.name()).collect::<Vec<_>>().join("+");
        self.progress(format!(
            "round {index} ({:.1}s): attacks [{attacks}]{} {kill} | ops {} written {:.1} MiB verified {:.1} MiB | lost {} wrong {} hangs {} failures {} | peak rss {} MiB",
            began.elapsed().as_secs_f64(),
            if plan.volume_ops { " volume_ops" } else { "" },
            ops(&after) - ops(&before),
            (after.bytes_written - before.bytes_written) as f64 / 1048576.0,
            (after.bytes_verified - before.bytes_verified) as f64 / 1048576.0,
            after.blocks_lost,
            after.wrong_reads,
            after.hangs,
            after.scenarios.values().map(|s| s.failures).sum::<u64>(),
            self.sampler.peak() >> 20,
        ));
        Ok(())
    }

    /// SIGTERM, start again, verify: a clean shutdown flushes everything
    /// acknowledged.
    async fn clean_restart(&mut self) -> Result<(), Error> {
        let ctx = self.ctx.clone();
        ctx.report(|r| r.ran("clean_restart"));
        self.check_alive("before the final SIGTERM").await?;
        match self.strata.stop(Duration::from_secs(30)).await {
            Some(status) if status.success() => {}
            Some(status) => ctx.fail("clean_restart", format!("strata exited with {status} on SIGTERM")),
            None => ctx.fail("clean_restart", "strata did not exit within 30 s of SIGTERM"),
        }
        let took = self.strata.start(START_DEADLINE).await?;
        self.progress(format!("clean restart in {:.1}s; verifying", took.as_secs_f64()));
        for vol in self.live_volumes() {
            let scenario_of = |_lba: u64| "clean_restart";
            host::verify_volume(&ctx, &vol, Some("clean restart"), &scenario_of, &mut self.rng).await;
        }
        let _ = self.strata.stop(Duration::from_secs(30)).await;
        Ok(())
    }
}

/// One attack window: the round's attackers, plus legitimate-host probes
/// for as long as the longest of them.
struct AttackPhase {
    ctx: Arc<Ctx>,
    kinds: Vec<FaultKind>,
    expect: Tuning,
    slack: Duration,
    vol: VolumeRef,
    probe: Range<u64>,
    scratch: Range<u64>,
}

impl AttackPhase {
    async fn run(self, mut rng: Rng) {
        let label = self.kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(" and ");
        let mut set = JoinSet::new();
        let mut longest = Duration::ZERO;
        for kind in &self.kinds {
            let (ctx, vol) = (self.ctx.clone(), self.vol.clone());
            let mut r = rng.fork();
            match kind {
                FaultKind::IdleSockets => {
                    let within = self.expect.handshake_timeout + self.slack;
                    longest = longest.max(within);
                    set.spawn(attack::idle_sockets(ctx, 300, within));
                }
                FaultKind::StalledReaders => {
                    let within = self.expect.send_timeout + self.slack;
                    longest = longest.max(within * 2);
                    set.spawn(async move { attack::stalled_readers(ctx, vol, 4, 32, within, &mut r).await });
                }
                FaultKind::R2tHoarders => {
                    let within = self.expect.r2t_timeout + self.slack;
                    // Queues strata holds back for its budget get their
                    // R2Ts late; the hoarders watch for twice as long.
                    longest = longest.max(within * 2);
                    let scratch = self.scratch.clone();
                    set.spawn(async move {
                        attack::r2t_hoarders(ctx, vol, scratch, 64, 32, 256 * 1024, within, &mut r).await
                    });
                }
                FaultKind::ConnectFloods => {
                    let d = Duration::from_secs(5);
                    longest = longest.max(d);
                    set.spawn(async move { attack::connect_flood(ctx, vol, 3, d, &mut r).await });
                }
                _ => {}
            }
        }
        let plan = ProbePlan {
            vol: self.vol.clone(),
            region: self.probe.clone(),
            first: Duration::from_millis(1000),
            every: Duration::from_millis(1500),
            until: Instant::now() + longest,
            label,
        };
        set.spawn(attack::legit_probes(self.ctx.clone(), plan, rng.fork()));
        while set.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ChaosConfig {
        ChaosConfig::new("/bin/true", Duration::from_secs(60), 1)
    }

    #[test]
    fn layout_regions_do_not_overlap_and_fit_the_volume() {
        let l = Layout::new(3);
        let mut all: Vec<Range<u64>> = l.hosts.clone();
        all.extend(l.resetters.clone());
        all.push(l.probe.clone());
        all.push(l.scratch.clone());
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert!(a.end <= b.start || b.end <= a.start, "{a:?} overlaps {b:?}");
            }
        }
        assert!(l.scratch.end * BLOCK_SIZE as u64 <= l.volume_mib << 20);
        assert_eq!(l.scenario_of(0), "verified_io");
        assert_eq!(l.scenario_of(l.resetters[1].start), "resets");
        assert_eq!(l.scenario_of(l.probe.start), "legit_host");
    }

    #[test]
    fn plans_alternate_attack_pairs_and_respect_toggles() {
        let c = cfg();
        let mut rng = Rng::new(5);
        let p0 = plan_round(0, &c, &mut rng);
        let p1 = plan_round(1, &c, &mut rng);
        assert_eq!(p0.attacks, vec![FaultKind::IdleSockets, FaultKind::ConnectFloods]);
        assert_eq!(p1.attacks, vec![FaultKind::StalledReaders, FaultKind::R2tHoarders]);
        assert!(p0.kill && p0.volume_ops && !p1.volume_ops && p0.resets);
        let mut only = cfg();
        only.faults = [FaultKind::R2tHoarders].into_iter().collect();
        let p = plan_round(0, &only, &mut rng);
        assert_eq!(p.attacks, vec![FaultKind::R2tHoarders]);
        assert!(!p.kill && !p.volume_ops && !p.resets);
        // The same seed plans the same rounds.
        let (mut a, mut b) = (Rng::new(9), Rng::new(9));
        let pa: Vec<RoundPlan> = (0..8).map(|i| plan_round(i, &c, &mut a)).collect();
        let pb: Vec<RoundPlan> = (0..8).map(|i| plan_round(i, &c, &mut b)).collect();
        assert_eq!(pa, pb);
    }
}
