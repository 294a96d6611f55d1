//! Connection resets at random moments, from raw hosts that own a range
//! of blocks each (several run at once).
//!
//! - **Reset during Flush.** Deallocate a few whole extents, write new
//!   blocks into them (so strata allocates fresh extents, whose mappings
//!   only a Flush makes durable), send a Flush, send a TCP RST before it
//!   completes, reconnect as a new controller, Flush again and get
//!   success: every block written before is now durable and must survive
//!   a later kill -9. This is the history that lost 480-864 of 960 blocks
//!   when a Flush dropped with its connection took the journal entries it
//!   was committing with it.
//! - **Reset during an R2T transfer.** Send a large write, wait for the
//!   R2T, then RST at once, or after sending part of the data (cut off the
//!   block boundary, so a write applied from half its data shows as a torn
//!   block). The write's outcome is unknown; a fresh connection reads the
//!   range back (each block old or new, never torn) and writes it again.
//!
//! Raw connections are used so that the RST lands exactly where the
//! scenario wants it (`SO_LINGER` 0, see [`crate::raw`]).

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use strata_nvme::command::{DsmRange, Sqe, io};
use strata_nvme::pdu::R2t;
use tokio::sync::watch;

use crate::block::{self, BLOCK_SIZE};
use crate::ctx::{Ctx, VolumeRef};
use crate::host::NSID;
use crate::oracle::{Value, WriteOutcome};
use crate::raw::{self, AssocOptions, HostIdent, Incoming, RawAssoc, RawConn, RawError};
use strata_rand::Rng;

const SCENARIO: &str = "resets";
/// Blocks per extent with strata's default `extent_size` (1 MiB): the
/// unit strata allocates, and whose mapping a Flush commits.
pub const EXTENT_BLOCKS: u64 = 256;

/// A scenario step failed; it has been reported (or was expected).
struct Abort;

fn report_error(ctx: &Ctx, what: &str, e: &RawError) {
    if ctx.disrupted() {
        return;
    }
    match e {
        RawError::Timeout(..) => ctx.hang(SCENARIO, what),
        _ => ctx.fail(SCENARIO, format!("{what}: {e}")),
    }
}

async fn step<T>(ctx: &Ctx, what: &str, fut: impl Future<Output = Result<T, RawError>>) -> Result<T, Abort> {
    fut.await.map_err(|e| {
        report_error(ctx, what, &e);
        Abort
    })
}

/// One acknowledged write through a raw connection, recorded in the
/// oracle.
async fn raw_write(ctx: &Ctx, q: &mut RawConn, vol: &VolumeRef, writer: u32, lba: u64, n: u32) -> Result<(), Abort> {
    let seq = ctx.seq();
    let data = block::encode_run(vol.id, writer, seq, lba, n);
    let t = ctx.oracle(|o| o.begin_write(vol.id, lba, u64::from(n), Value::Data { writer, seq }));
    let r = q.execute(raw::io_sqe(io::WRITE, NSID, lba, n, false), &data, 0, ctx.watchdog).await;
    ctx.report(|r| r.op("raw_write", 1));
    match r {
        Ok((cqe, _)) if cqe.status.is_success() => {
            ctx.oracle(|o| o.end_write(t, WriteOutcome::Acked, false));
            ctx.report(|r| r.bytes_written += data.len() as u64);
            Ok(())
        }
        Ok((cqe, _)) => {
            ctx.oracle(|o| o.end_write(t, WriteOutcome::Failed, false));
            if !ctx.disrupted() {
                ctx.fail(SCENARIO, format!("write lba {lba}+{n} failed with {}", cqe.status));
            }
            Err(Abort)
        }
        Err(e) => {
            ctx.oracle(|o| o.end_write(t, WriteOutcome::Unknown, false));
            report_error(ctx, &format!("write lba {lba}+{n}"), &e);
            Err(Abort)
        }
    }
}

/// Reads `n` blocks at `lba` and checks them.
async fn raw_check(ctx: &Ctx, q: &mut RawConn, vol: &VolumeRef, lba: u64, n: u32) -> Result<(), Abort> {
    let len = n as usize * BLOCK_SIZE;
    let (cqe, data) =
        step(ctx, "read back", q.execute(raw::io_sqe(io::READ, NSID, lba, n, false), &[], len, ctx.watchdog)).await?;
    ctx.report(|r| r.op("raw_read", 1));
    if !cqe.status.is_success() {
        ctx.fail(SCENARIO, format!("read back of lba {lba}+{n} failed with {}", cqe.status));
        return Err(Abort);
    }
    ctx.check_blocks(SCENARIO, vol.id, lba, &data, None);
    Ok(())
}

/// Connects, retrying as a real host does when strata closes the
/// connection during the handshake (under a flood of pending connections
/// it evicts the oldest); a failure only when that lasts past the
/// legitimate-host deadline.
async fn connect(ctx: &Ctx, vol: &VolumeRef, rng: &mut Rng) -> Result<RawAssoc, Abort> {
    let ident = HostIdent::random(rng);
    let until = tokio::time::Instant::now() + ctx.legit_deadline;
    loop {
        match RawAssoc::connect(ctx.io, &vol.nqn, &ident, AssocOptions::default(), ctx.watchdog).await {
            Ok(a) => return Ok(a),
            Err(e) if e.is_closed_by_peer() && tokio::time::Instant::now() < until && !ctx.disrupted() => {
                ctx.report(|r| r.op("reset_connect_retry", 1));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                report_error(ctx, "connect", &e);
                return Err(Abort);
            }
        }
    }
}

/// Runs resetters on `range` of `vol` until `stop` is set.
pub async fn run(ctx: Arc<Ctx>, vol: VolumeRef, range: Range<u64>, mut rng: Rng, mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        ctx.report(|r| r.ran(SCENARIO));
        let roll = rng.below(100);
        let _ = if roll < 50 {
            flush_reset(&ctx, &vol, &range, &mut rng).await
        } else {
            r2t_reset(&ctx, &vol, &range, &mut rng, roll < 75).await
        };
        let pause = rng.duration(Duration::from_millis(20), Duration::from_millis(200));
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.changed() => {}
        }
    }
}

/// Deallocates `n` blocks at `lba` (whole extents are unmapped, so the
/// next writes there allocate fresh ones), recorded in the oracle.
async fn raw_deallocate(ctx: &Ctx, q: &mut RawConn, vol: &VolumeRef, lba: u64, n: u32) -> Result<(), Abort> {
    let mut sqe = Sqe::new(io::DATASET_MANAGEMENT, 0);
    sqe.set_nsid(NSID);
    sqe.set_cdw10(0);
    sqe.set_cdw11(1 << 2);
    let range = DsmRange { attributes: 0, nlb: n, slba: lba }.encode();
    let t = ctx.oracle(|o| o.begin_write(vol.id, lba, u64::from(n), Value::Zero));
    let r = q.execute(sqe, &range, 0, ctx.watchdog).await;
    ctx.report(|r| r.op("raw_deallocate", 1));
    match r {
        Ok((cqe, _)) if cqe.status.is_success() => {
            ctx.oracle(|o| o.end_write(t, WriteOutcome::Acked, false));
            Ok(())
        }
        Ok((cqe, _)) => {
            ctx.oracle(|o| o.end_write(t, WriteOutcome::Failed, false));
            ctx.fail(SCENARIO, format!("deallocate lba {lba}+{n} failed with {}", cqe.status));
            Err(Abort)
        }
        Err(e) => {
            ctx.oracle(|o| o.end_write(t, WriteOutcome::Unknown, false));
            report_error(ctx, &format!("deallocate lba {lba}+{n}"), &e);
            Err(Abort)
        }
    }
}

async fn flush_reset(ctx: &Ctx, vol: &VolumeRef, range: &Range<u64>, rng: &mut Rng) -> Result<(), Abort> {
    let mut a = connect(ctx, vol, rng).await?;
    let writer = ctx.writer_id();
    // New blocks in the strong sense: in extents strata has to allocate,
    // whose mappings only a completed Flush makes durable. Give a few
    // extents back first, then write into each.
    let extents = (range.end - range.start) / EXTENT_BLOCKS;
    let k = rng.range(2, 9).min(extents);
    let start = range.start + rng.below(extents - k + 1) * EXTENT_BLOCKS;
    let count = k * EXTENT_BLOCKS;
    raw_deallocate(ctx, &mut a.io[0], vol, start, count as u32).await?;
    for e in 0..k {
        let base = start + e * EXTENT_BLOCKS;
        raw_write(ctx, &mut a.io[0], vol, writer, base + rng.below(EXTENT_BLOCKS - 16), 16).await?;
        let n = 1 + rng.below(2) as u32;
        raw_write(ctx, &mut a.io[0], vol, writer, base + rng.below(EXTENT_BLOCKS - 2), n).await?;
    }
    // Half the time, keep the verified hosts' Flushes out of the way so
    // that this Flush runs the group commit the reset interrupts.
    let gate = if rng.chance(50) { Some(ctx.flush_gate.write().await) } else { None };
    let cid = a.io[0].next_cid();
    let sent = a.io[0].send(&raw::flush_capsule(cid, NSID), ctx.watchdog).await;
    match rng.below(4) {
        0 => {}
        1 => tokio::task::yield_now().await,
        2 => tokio::time::sleep(Duration::from_millis(1)).await,
        _ => tokio::time::sleep(Duration::from_millis(3)).await,
    }
    a.reset();
    drop(gate);
    step(ctx, "sending Flush", async { sent }).await?;
    ctx.report(|r| {
        r.fault("resets", 1);
        r.op("raw_flush_reset", 1)
    });
    let mut b = connect(ctx, vol, rng).await?;
    let gate = ctx.flush_gate.read().await;
    let t = ctx.oracle(|o| o.begin_flush(vol.id));
    let flushed = step(
        ctx,
        "Flush after reconnect",
        b.io[0].execute(raw::io_sqe(io::FLUSH, NSID, 0, 1, false), &[], 0, ctx.watchdog),
    )
    .await;
    drop(gate);
    let (cqe, _) = flushed?;
    ctx.report(|r| r.op("raw_flush", 1));
    if !cqe.status.is_success() {
        ctx.fail(SCENARIO, format!("Flush after reconnect failed with {}", cqe.status));
        return Err(Abort);
    }
    ctx.oracle(|o| o.flush_succeeded(t));
    for e in 0..k {
        raw_check(ctx, &mut b.io[0], vol, start + e * EXTENT_BLOCKS, EXTENT_BLOCKS as u32).await?;
    }
    b.reset();
    Ok(())
}

async fn r2t_reset(ctx: &Ctx, vol: &VolumeRef, range: &Range<u64>, rng: &mut Rng, mid_data: bool) -> Result<(), Abort> {
    let mut a = connect(ctx, vol, rng).await?;
    let writer = ctx.writer_id();
    let span = range.end - range.start;
    let n = rng.range(16, 65).min(span);
    let lba = range.start + rng.below(span - n + 1);
    let n = n as u32;
    let seq = ctx.seq();
    let data = block::encode_run(vol.id, writer, seq, lba, n);
    let t = ctx.oracle(|o| o.begin_write(vol.id, lba, u64::from(n), Value::Data { writer, seq }));
    let q = &mut a.io[0];
    let cid = q.next_cid();
    let sent = q.send(&raw::r2t_write_capsule(cid, NSID, lba, data.len()), ctx.watchdog).await;
    let r2t = match sent {
        Ok(()) => wait_r2t(q, cid, ctx.watchdog).await,
        Err(e) => Err(e),
    };
    let r2t = match r2t {
        Ok(Some(r2t)) => r2t,
        Ok(None) => {
            // Completed without asking for data: a status. Record, move on.
            ctx.oracle(|o| o.end_write(t, WriteOutcome::Failed, false));
            ctx.fail(SCENARIO, format!("large write lba {lba}+{n} completed without an R2T"));
            return Err(Abort);
        }
        Err(e) => {
            ctx.oracle(|o| o.end_write(t, WriteOutcome::Unknown, false));
            report_error(ctx, &format!("waiting for the R2T of write lba {lba}+{n}"), &e);
            return Err(Abort);
        }
    };
    if mid_data {
        // Part of the data, cut off a block boundary, never flagged last.
        let end = (r2t.r2to as usize + r2t.r2tl as usize / 2 + 512).min(data.len() - 1);
        let mut off = r2t.r2to as usize;
        while off < end {
            let len = (end - off).min(q.maxh2cdata());
            if q.send_h2c(&r2t, off as u32, &data[off..off + len], false, ctx.watchdog).await.is_err() {
                break;
            }
            off += len;
        }
    }
    a.reset();
    ctx.oracle(|o| o.end_write(t, WriteOutcome::Unknown, false));
    ctx.report(|r| {
        r.fault("resets", 1);
        r.op(if mid_data { "raw_r2t_reset_mid_data" } else { "raw_r2t_reset" }, 1)
    });
    let mut b = connect(ctx, vol, rng).await?;
    raw_check(ctx, &mut b.io[0], vol, lba, n).await?;
    // Write it again, whole, so the range is settled for the next round.
    raw_write(ctx, &mut b.io[0], vol, writer, lba, n).await?;
    raw_check(ctx, &mut b.io[0], vol, lba, n).await?;
    b.reset();
    Ok(())
}

/// Waits for the R2T of `cid`; `None` when the command completed instead.
async fn wait_r2t(q: &mut RawConn, cid: u16, timeout: Duration) -> Result<Option<R2t>, RawError> {
    match q.recv(timeout).await? {
        Incoming::R2t(r) if r.cccid == cid => Ok(Some(r)),
        Incoming::Resp(c) if c.cid == cid => Ok(None),
        Incoming::Term { fes, fei } => Err(RawError::Terminated { fes, fei }),
        other => Err(RawError::Protocol(format!("expected an R2T for cid {cid}, got {other:?}"))),
    }
}
