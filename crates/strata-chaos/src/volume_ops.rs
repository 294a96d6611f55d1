//! Volume operations while hosts are connected, through the `strata
//! volume` CLI (`--api http://ADDR`), as an operator would run them.
//!
//! One run, on a fresh volume `chaos-rN` of 64 MiB (16384 blocks):
//!
//! 1. delete the volume the previous run left, while a verified host is
//!    doing I/O on it: its commands must fail (status or closed
//!    connection) within the watchdog, not hang;
//! 2. create the new volume; a verified host starts I/O on its first
//!    2048 blocks and keeps going until the round ends (so a kill -9
//!    finds it under load);
//! 3. a second controller writes and flushes blocks in the tail
//!    (12288..16384);
//! 4. grow to 96 MiB: the connected host sees the new size (Identify
//!    Namespace), and a write past the old end succeeds;
//! 5. shrink to 48 MiB (`--shrink`): I/O past the new end must fail with
//!    an NVMe status (LBA Out of Range), not succeed, hang or drop the
//!    connection;
//! 6. grow back to 64 MiB: the regrown range reads zeros (the oracle
//!    keeps expecting zeros there, so the end-of-round verification
//!    checks it again after a kill -9); new blocks written there and
//!    flushed must survive.
//!
//! In about half the rounds that end with a kill -9, steps 5 and 6 wait
//! for the attack window to end and run with the flush gate held, and the
//! run asks for the kill right after them: strata must make a shrink
//! durable by itself, not leave its discarded extents to the next Flush
//! (else the regrown range shows the old data after the restart).
//!
//! The volume is left for the round's verification and deleted by the
//! next run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use strata_host::Controller;
use tokio::sync::{OwnedRwLockWriteGuard, watch};

use crate::block::{self, BLOCK_SIZE};
use crate::ctx::{Ctx, VolumeRef};
use crate::host::{self, Ended, HostPlan, NSID, guarded};
use crate::oracle::{Value, VolumeId};
use crate::process::VolumeCli;
use strata_rand::Rng;

const SCENARIO: &str = "volume_ops";
const MIB_BLOCKS: u64 = (1 << 20) / BLOCK_SIZE as u64;
/// Size of a fresh volume, MiB.
const SIZE_MIB: u64 = 64;
/// Size it is grown to, MiB.
const GROWN_MIB: u64 = 96;
/// Size it is shrunk to, MiB.
const SHRUNK_MIB: u64 = 48;
/// Blocks the verified host on the volume owns.
const HOST_BLOCKS: u64 = 2048;

/// A step failed and was reported.
struct Abort;

/// Runs one `strata volume` command that must succeed.
async fn cli(ctx: &Ctx, c: &VolumeCli, args: &[&str]) -> Result<(), Abort> {
    ctx.report(|r| r.fault("volume_ops", 1));
    match c.run(args, ctx.watchdog).await {
        Ok(out) if out.success => Ok(()),
        Ok(out) => {
            ctx.fail(SCENARIO, format!("strata volume {} failed: {}", args.join(" "), out.stderr.trim()));
            Err(Abort)
        }
        Err(e @ crate::process::CliError::Timeout(..)) => {
            ctx.hang(SCENARIO, &e);
            Err(Abort)
        }
        Err(e) => {
            ctx.fail(SCENARIO, e.to_string());
            Err(Abort)
        }
    }
}

/// One write through `ctrl`, recorded in the oracle; it must be
/// acknowledged.
async fn write(ctx: &Ctx, ctrl: &Controller, vol: &VolumeRef, writer: u32, lba: u64, n: u32) -> Result<(), Abort> {
    let seq = ctx.seq();
    let data = block::encode_run(vol.id, writer, seq, lba, n);
    let t = ctx.oracle(|o| o.begin_write(vol.id, lba, u64::from(n), Value::Data { writer, seq }));
    let ended = guarded(ctx.watchdog, ctrl.write(NSID, lba, data, false)).await;
    ctx.oracle(|o| o.end_write(t, ended.write_outcome(), false));
    ctx.report(|r| r.op("volume_write", 1));
    match ended {
        Ended::Done(()) => {
            ctx.report(|r| r.bytes_written += u64::from(n) * BLOCK_SIZE as u64);
            Ok(())
        }
        Ended::Hang => {
            ctx.hang(SCENARIO, format!("write to {} lba {lba}+{n}", vol.name));
            Err(Abort)
        }
        Ended::Status(e) | Ended::Transport(e) => {
            ctx.fail(SCENARIO, format!("write to {} lba {lba}+{n} failed: {e}", vol.name));
            Err(Abort)
        }
    }
}

async fn flush(ctx: &Ctx, ctrl: &Controller, vol: &VolumeRef) -> Result<(), Abort> {
    let _gate = ctx.flush_gate.read().await;
    let t = ctx.oracle(|o| o.begin_flush(vol.id));
    match guarded(ctx.watchdog, ctrl.flush(NSID)).await {
        Ended::Done(()) => {
            ctx.oracle(|o| o.flush_succeeded(t));
            Ok(())
        }
        Ended::Hang => {
            ctx.hang(SCENARIO, format!("flush of {}", vol.name));
            Err(Abort)
        }
        Ended::Status(e) | Ended::Transport(e) => {
            ctx.fail(SCENARIO, format!("flush of {} failed: {e}", vol.name));
            Err(Abort)
        }
    }
}

/// Reads `n` blocks and checks them against the oracle.
async fn check(ctx: &Ctx, ctrl: &Controller, vol: &VolumeRef, lba: u64, n: u32) -> Result<(), Abort> {
    match guarded(ctx.watchdog, ctrl.read(NSID, lba, n)).await {
        Ended::Done(data) => {
            ctx.check_blocks(SCENARIO, vol.id, lba, &data, None);
            Ok(())
        }
        Ended::Hang => {
            ctx.hang(SCENARIO, format!("read of {} lba {lba}+{n}", vol.name));
            Err(Abort)
        }
        Ended::Status(e) | Ended::Transport(e) => {
            ctx.fail(SCENARIO, format!("read of {} lba {lba}+{n} failed: {e}", vol.name));
            Err(Abort)
        }
    }
}

/// I/O past the end of `vol` must complete with an NVMe status.
async fn past_end_fails(ctx: &Ctx, ctrl: &Controller, vol: &VolumeRef, lba: u64, writer: u32) {
    // Not recorded in the oracle: it must not land. If it does, the
    // regrown range stops reading zeros and the oracle says so.
    let data = block::encode_run(vol.id, writer, ctx.seq(), lba, 1);
    let w = guarded(ctx.watchdog, ctrl.write(NSID, lba, data, false)).await;
    let r = guarded(ctx.watchdog, ctrl.read(NSID, lba, 1)).await;
    for (what, ended) in [("write", w.map_unit()), ("read", r.map_unit())] {
        match ended {
            Ended::Status(_) => {}
            Ended::Done(()) => {
                ctx.fail(SCENARIO, format!("{what} of lba {lba}, past the shrunk end of {}, succeeded", vol.name))
            }
            Ended::Transport(e) => ctx.fail(
                SCENARIO,
                format!(
                    "{what} past the shrunk end of {} lost the connection instead of failing with a status: {e}",
                    vol.name
                ),
            ),
            Ended::Hang => ctx.hang(SCENARIO, format!("{what} past the shrunk end of {}", vol.name)),
        }
    }
}

impl<T> Ended<T> {
    fn map_unit(self) -> Ended<()> {
        match self {
            Ended::Done(_) => Ended::Done(()),
            Ended::Status(e) => Ended::Status(e),
            Ended::Transport(e) => Ended::Transport(e),
            Ended::Hang => Ended::Hang,
        }
    }
}

/// Deletes `vol` while a verified host does I/O on it; the host must see
/// its commands fail, not hang.
async fn delete_under_io(ctx: &Arc<Ctx>, c: &VolumeCli, vol: &VolumeRef, rng: &mut Rng) {
    let expect = Arc::new(AtomicBool::new(false));
    let (tx, rx) = watch::channel(false);
    let plan = HostPlan {
        name: format!("host on {}", vol.name),
        scenario: SCENARIO,
        volume: vol.clone(),
        range: 0..HOST_BLOCKS,
        workers: 2,
        expect_errors: expect.clone(),
    };
    let h = tokio::spawn(host::run(ctx.clone(), plan, rng.fork(), rx));
    tokio::time::sleep(Duration::from_millis(800)).await;
    expect.store(true, Ordering::Release);
    let deleted = cli(ctx, c, &["delete", &vol.name]).await.is_ok();
    // Commands in flight at the delete now end one way or another; the
    // host's watchdog reports any that hang.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = tx.send(true);
    let limit = ctx.watchdog + Duration::from_secs(5);
    if tokio::time::timeout(limit, h).await.is_err() {
        ctx.hang(SCENARIO, format!("host on deleted volume {} stopping", vol.name));
    }
    if deleted {
        ctx.oracle(|o| o.forget_volume(vol.id));
    }
}

/// What a run leaves behind.
pub struct Outcome {
    /// The volume it created, to be verified at the end of the round and
    /// deleted by the next run, if it got that far.
    pub volume: Option<VolumeRef>,
    /// Set when the run ended right after a shrink and regrow, holding the
    /// flush gate: the caller must kill strata now, then drop it.
    pub kill_now: Option<OwnedRwLockWriteGuard<()>>,
}

/// Runs the scenario. With `kill_after`, the shrink and regrow wait until
/// that flag is set (the round's attack window is over), run with the
/// flush gate held, and the run ends asking for a kill -9 at once: the
/// regrown range must read zeros even though no Flush came after the
/// shrink.
pub async fn run(
    ctx: Arc<Ctx>,
    c: VolumeCli,
    previous: Option<VolumeRef>,
    new: (VolumeId, String),
    mut rng: Rng,
    stop: watch::Receiver<bool>,
    kill_after: Option<watch::Receiver<bool>>,
) -> Outcome {
    ctx.report(|r| r.ran(SCENARIO));
    if let Some(prev) = &previous {
        delete_under_io(&ctx, &c, prev, &mut rng).await;
    }
    let vol = VolumeRef::new(new.0, &new.1);
    if cli(&ctx, &c, &["create", &vol.name, "--size", &format!("{SIZE_MIB}M")]).await.is_err() {
        return Outcome { volume: None, kill_now: None };
    }
    let plan = HostPlan {
        name: format!("host on {}", vol.name),
        scenario: SCENARIO,
        volume: vol.clone(),
        range: 0..HOST_BLOCKS,
        workers: 2,
        expect_errors: Arc::new(AtomicBool::new(false)),
    };
    tokio::spawn(host::run(ctx.clone(), plan, rng.fork(), stop.clone()));
    let kill_now = steps(&ctx, &c, &vol, &mut rng, stop, kill_after).await.ok().flatten();
    Outcome { volume: Some(vol), kill_now }
}

async fn steps(
    ctx: &Arc<Ctx>,
    c: &VolumeCli,
    vol: &VolumeRef,
    rng: &mut Rng,
    stop: watch::Receiver<bool>,
    kill_after: Option<watch::Receiver<bool>>,
) -> Result<Option<OwnedRwLockWriteGuard<()>>, Abort> {
    let cfg = host::host_config(ctx, rng, 1);
    let mut stop = stop;
    let ctrl = match host::connect_retrying(ctx, &vol.nqn, &cfg, ctx.watchdog, &mut stop).await {
        Ok(Some(c)) => c,
        Ok(None) => return Err(Abort),
        Err(e) => {
            ctx.fail(SCENARIO, format!("cannot connect to {}: {e}", vol.nqn));
            return Err(Abort);
        }
    };
    let writer = ctx.writer_id();
    let tail = (SHRUNK_MIB * MIB_BLOCKS)..(SIZE_MIB * MIB_BLOCKS);
    let mut lba = tail.start + rng.below(64);
    while lba + 16 <= tail.end {
        write(ctx, &ctrl, vol, writer, lba, if rng.chance(50) { 16 } else { 1 }).await?;
        lba += rng.range(200, 900);
    }
    flush(ctx, &ctrl, vol).await?;

    cli(ctx, c, &["resize", &vol.name, "--size", &format!("{GROWN_MIB}M")]).await?;
    let want = GROWN_MIB * MIB_BLOCKS;
    let began = Instant::now();
    loop {
        match ctrl.identify_namespace(NSID).await {
            Ok(ns) if ns.nsze == want => break,
            Ok(ns) if began.elapsed() > Duration::from_secs(10) => {
                ctx.fail(
                    SCENARIO,
                    format!("a connected host still sees {} blocks, not {want}, 10 s after growth", ns.nsze),
                );
                break;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => {
                ctx.fail(SCENARIO, format!("Identify Namespace after growth failed: {e}"));
                break;
            }
        }
    }
    let beyond = SIZE_MIB * MIB_BLOCKS + rng.below((GROWN_MIB - SIZE_MIB) * MIB_BLOCKS - 1);
    write(ctx, &ctrl, vol, writer, beyond, 1).await?;
    flush(ctx, &ctrl, vol).await?;

    let gate = match kill_after {
        Some(mut ready) => {
            // The attack window must be over before strata is killed.
            let limit = ctx.watchdog * 4;
            if tokio::time::timeout(limit, ready.wait_for(|&r| r)).await.is_err() {
                ctx.hang(SCENARIO, "waiting for the attack window to end");
                return Err(Abort);
            }
            Some(ctx.flush_gate.clone().write_owned().await)
        }
        None => None,
    };
    cli(ctx, c, &["resize", &vol.name, "--size", &format!("{SHRUNK_MIB}M"), "--shrink"]).await?;
    let end = SHRUNK_MIB * MIB_BLOCKS;
    ctx.oracle(|o| o.shrink(vol.id, end));
    past_end_fails(ctx, &ctrl, vol, end + rng.below(tail.end - end), writer).await;

    cli(ctx, c, &["resize", &vol.name, "--size", &format!("{SIZE_MIB}M")]).await?;
    ctx.oracle(|o| o.track_zeros(vol.id, tail.clone()));
    // The regrown range reads zeros, every block of it.
    for start in (tail.start..tail.end).step_by(256) {
        check(ctx, &ctrl, vol, start, 256.min((tail.end - start) as u32)).await?;
    }
    for _ in 0..4 {
        let lba = tail.start + rng.below(tail.end - tail.start);
        write(ctx, &ctrl, vol, writer, lba, 1).await?;
    }
    if gate.is_none() {
        flush(ctx, &ctrl, vol).await?;
        let _ = tokio::time::timeout(Duration::from_secs(5), ctrl.disconnect()).await;
    }
    // With the gate held, no orderly disconnect: its shutdown notification
    // (CC.SHN) makes strata flush, which would commit the shrink.
    Ok(gate)
}
