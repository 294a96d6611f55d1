//! The NVM command set on I/O queues: Read, Write (with FUA), Flush,
//! Write Zeroes, Dataset Management (deallocate) and Compare, executed
//! against a namespace's [`BlockDevice`](strata_block::BlockDevice).
//!
//! Every failure is an NVMe status: a missing namespace is Invalid
//! Namespace, a range past the end is LBA Out of Range, a transfer length
//! that disagrees with the block count is Data SGL Length Invalid, a full
//! thin pool is Capacity Exceeded (hosts map it to ENOSPC), and drive
//! errors are Write Fault or Unrecovered Read Error.
//!
//! Completed Reads and Writes, and media errors, are counted on the
//! namespace for the SMART / Health log (see
//! [`NamespaceIoStats`](crate::controller::NamespaceIoStats)).
//!
//! Every command is also recorded in the data-path metrics
//! ([`crate::io_metrics`]) of its host (all commands, by the controller's
//! metrics) and of its volume (commands that reach an active namespace, by
//! the namespace's metrics): both were resolved before the command, so
//! recording is a few relaxed atomic adds.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use std::time::{Duration, Instant};

use strata_block::{BlockDevice, BlockError, IoBuf, ReadData, Refused, Sender};
use strata_nvme::command::{DatasetManagement, DsmRange, ReadWrite, Sqe, WriteZeroes, fenced, io};
use strata_nvme::completion::Cqe;
use strata_nvme::log_page::AnaState;
use strata_nvme::reservation as rsv;
use strata_nvme::status::Status;

use crate::budget::{DataBudget, Permit};
use crate::controller::Controller;
use crate::io_metrics::IoOp;
use crate::namespace::Namespace;
use crate::reservation::{Access, HostId, access_of};
use crate::subsystem::{NsEntry, Subsystem};
use crate::transport::Command;

/// The result of an I/O command: its completion and, for reads, the data
/// (possibly lent by the device: send it or copy it promptly) with the
/// budget it holds until it is sent.
pub type IoReply = (Cqe, Option<(ReadData, Option<Permit>)>);

fn status_of(e: &BlockError, writing: bool) -> Status {
    match e {
        BlockError::OutOfRange { .. } => Status::LBA_OUT_OF_RANGE.dnr(),
        BlockError::BadBuffer { .. } => Status::SGL_INVALID_DATA.dnr(),
        BlockError::NoSpace => Status::CAPACITY_EXCEEDED.dnr(),
        BlockError::Gone => Status::NS_NOT_READY,
        // A path error: the host retries the command on another path.
        BlockError::PathUnavailable(_) => Status::ANA_TRANSITION,
        BlockError::ReservationConflict => Status::RESERVATION_CONFLICT.dnr(),
        _ if writing => Status::WRITE_FAULT.dnr(),
        _ => Status::UNRECOVERED_READ_ERROR.dnr(),
    }
}

/// The completion of a fenced command its fence refused: Stale Epoch, or
/// Promised with the milliseconds left in the error's second field.
fn refused(nsid: u32, r: Refused) -> (Status, u64) {
    match r {
        Refused::Stale(stale) => {
            tracing::debug!(nsid, offered = stale.offered, current = stale.current, "stale epoch refused");
            (Status::STALE_EPOCH.dnr(), 0)
        }
        Refused::Promised { offered, left } => {
            tracing::debug!(nsid, offered, ?left, "a newer epoch waits for the replica's promise to its owner");
            (Status::PROMISED, u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1))
        }
    }
}

/// Executes one I/O command of controller `ctrl` on queue `sqid`.
pub async fn execute(ctrl: &Controller, sub: &Subsystem, sqid: u16, cmd: Command, budget: &DataBudget) -> IoReply {
    // An R2T write's buffer stays charged until the device is done with it.
    let Command { sqe, data, read_len, permit: _permit } = cmd;
    let host_metrics = ctrl.host_metrics();
    let started = host_metrics.map(|_| Instant::now());
    let write_len = data.as_ref().map_or(0, |d| d.len());
    // The latency the volume recorded, if it did: one clock read serves both.
    let mut measured = None;
    let reply = run(ctrl, sub, sqid, sqe, data, read_len, budget, started, &mut measured).await;
    if let (Some(m), Some(t)) = (host_metrics, started) {
        let latency = measured.unwrap_or_else(|| t.elapsed());
        m.record(IoOp::of(sqe.opcode()), data_bytes(&sqe, read_len, write_len, &reply.0), latency, reply.0.status);
    }
    reply
}

/// The data bytes command `sqe` moved, if it completed with `cqe`: the
/// transfer of a Read (`read_len`) or Write (`write_len`, the data it
/// carried) that succeeded, otherwise none.
fn data_bytes(sqe: &Sqe, read_len: usize, write_len: usize, cqe: &Cqe) -> u64 {
    if !cqe.status.is_success() {
        return 0;
    }
    match sqe.opcode() {
        io::READ => read_len as u64,
        io::WRITE => write_len as u64,
        _ => 0,
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    ctrl: &Controller,
    sub: &Subsystem,
    sqid: u16,
    sqe: Sqe,
    data: Option<IoBuf>,
    read_len: usize,
    budget: &DataBudget,
    started: Option<Instant>,
    measured: &mut Option<Duration>,
) -> IoReply {
    let cid = sqe.cid();
    let sender = ctrl.sender();
    // A namespace masked from this host does not exist for it.
    if !sub.visible(sqe.nsid(), ctrl.hostnqn()) {
        ctrl.record_error(sqid, cid, Status::INVALID_NS.dnr(), sqe.nsid(), 0);
        return (Cqe::new(cid, Status::INVALID_NS.dnr()), None);
    }
    let (result, value) = if fenced::is_undo(sqe.opcode()) {
        match undo_command(sub, &sqe, data, read_len, sender).await {
            Ok((v, data)) => (Ok(data.map(|d| (d, None))), v),
            Err(e) => (Err(e), 0),
        }
    } else if fenced::is_owner(sqe.opcode()) {
        (owner_command(sub, &sqe, data, read_len, sender).await, 0)
    } else if is_reservation(sqe.opcode()) {
        (reservation_command(ctrl, sub, &sqe, data, read_len).await, 0)
    } else {
        (dispatch(sub, &sqe, data, read_len, budget, sender, &ctrl.hostid(), started, measured).await, 0)
    };
    match result {
        Ok(data) => {
            let mut cqe = Cqe::new(cid, Status::SUCCESS);
            cqe.result = value;
            (cqe, data)
        }
        // Not an error: the sender waits the time given and tries again.
        Err((status, left)) if status == Status::PROMISED => {
            let mut cqe = Cqe::new(cid, status);
            cqe.result = left;
            (cqe, None)
        }
        Err((status, lba)) => {
            ctrl.record_error(sqid, cid, status, sqe.nsid(), lba);
            (Cqe::new(cid, status), None)
        }
    }
}

fn is_reservation(opcode: u8) -> bool {
    matches!(opcode, rsv::opcode::REGISTER | rsv::opcode::REPORT | rsv::opcode::ACQUIRE | rsv::opcode::RELEASE)
}

/// Reservation Register, Report, Acquire and Release from `ctrl`'s host
/// (see [`crate::reservation`]): the namespace's state changes under its
/// lock, and the hosts the change concerns get their notices.
async fn reservation_command(
    ctrl: &Controller,
    sub: &Subsystem,
    sqe: &Sqe,
    data: Option<IoBuf>,
    read_len: usize,
) -> Outcome {
    if !sub.serves_reservations() {
        return Err((Status::INVALID_OPCODE.dnr(), 0));
    }
    let nsid = sqe.nsid();
    let Some(entry) = sub.entry(nsid) else { return Err((Status::INVALID_NS.dnr(), 0)) };
    let host = ctrl.hostid();
    if let Some(f) = &entry.ns.forward {
        // Run where the namespace is served, as this host.
        let bytes = data.as_ref().map(|b| b.as_slice().to_vec());
        let (status, back) = f.reservation(&host, *sqe, bytes, read_len).await.map_err(|e| (status_of(&e, true), 0))?;
        if !status.is_success() {
            return Err((status, 0));
        }
        return Ok((sqe.opcode() == rsv::opcode::REPORT).then(|| (ReadData::from(IoBuf::from_slice(&back)), None)));
    }
    let field = |_| (Status::INVALID_FIELD.dnr(), 0);
    let data = || data.as_ref().map(|b| b.as_slice().to_vec()).ok_or((Status::SGL_INVALID_DATA.dnr(), 0));
    let store = sub.reservation_store();
    let cell = &entry.reservations;
    let keep = async |bytes: Vec<u8>| match &store {
        Some(store) => store.save(nsid, bytes).await,
        None => Ok(()),
    };
    let outcome = match sqe.opcode() {
        rsv::opcode::REPORT => {
            let f = rsv::ReportFields::from_cdws(sqe.cdw10(), sqe.cdw11());
            if !f.extended {
                // Host identifiers are 128-bit on fabrics.
                return Err((Status::HOST_ID_INCONSISTENT.dnr(), 0));
            }
            if read_len < rsv::STATUS_HEADER_BYTES {
                return Err((Status::INVALID_FIELD.dnr(), 0));
            }
            let report = cell.with(|r| r.report());
            return Ok(Some((ReadData::from(IoBuf::from_slice(&report.encode(read_len))), None)));
        }
        rsv::opcode::REGISTER => {
            let mut f = rsv::RegisterFields::from_cdw10(sqe.cdw10()).map_err(field)?;
            if store.is_none() {
                // Nowhere to keep it (Linux asks for it at every
                // register): ignored, as nvmet does; PTPLS stays 0.
                f.persist = rsv::PersistChange::Keep;
            }
            let (crkey, nrkey) = rsv::two_keys(&data()?).map_err(field)?;
            cell.command(|r| r.register(&host, f, crkey, nrkey), keep).await
        }
        rsv::opcode::ACQUIRE => {
            let f = rsv::AcquireFields::from_cdw10(sqe.cdw10()).map_err(field)?;
            let (crkey, prkey) = rsv::two_keys(&data()?).map_err(field)?;
            cell.command(|r| r.acquire(&host, f, crkey, prkey), keep).await
        }
        _ => {
            let f = rsv::ReleaseFields::from_cdw10(sqe.cdw10()).map_err(field)?;
            let crkey = rsv::one_key(&data()?).map_err(field)?;
            cell.command(|r| r.release(&host, f, crkey), keep).await
        }
    }
    .map_err(|status| (status, 0))?;
    // Every subsystem that serves the namespace: a pool volume's hosts on
    // the owner, and those whose paths forward to its proxy.
    cell.deliver(&outcome.notices);
    // Preempt and Abort: what the preempted hosts had running ends before
    // this completes (their new commands already get Reservation
    // Conflict), so none of it lands after the preemptor is told.
    for aborted in outcome.aborted.iter().filter(|&&h| h != host) {
        if tokio::time::timeout(PREEMPT_DRAIN_LIMIT, cell.drain(aborted)).await.is_err() {
            tracing::warn!(nsid, "a preempted host's commands still run after {PREEMPT_DRAIN_LIMIT:?}");
        }
    }
    Ok(None)
}

/// The longest a Preempt and Abort waits for a preempted host's commands.
const PREEMPT_DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// The owner commands of a fenced namespace: Promise, Note Save and Note
/// Load ([`fenced::is_owner`]), admitted by the namespace's fence.
async fn owner_command(sub: &Subsystem, sqe: &Sqe, data: Option<IoBuf>, read_len: usize, sender: Sender) -> Outcome {
    let Some(entry) = sub.entry(sqe.nsid()) else { return Err((Status::INVALID_NS.dnr(), 0)) };
    let ns = &entry.ns;
    let Some(fence) = &ns.fence else { return Err((Status::INVALID_OPCODE.dnr(), 0)) };
    if sqe.opcode() == fenced::PROMISE {
        let ms = sqe.arg64();
        fence.promise(sqe.epoch(), sender, Duration::from_millis(ms)).map_err(|r| refused(ns.nsid, r))?;
        return Ok(None);
    }
    let Some(notes) = &ns.notes else { return Err((Status::INVALID_OPCODE.dnr(), 0)) };
    let _admitted = fence.admit(sqe.epoch(), sender).await.map_err(|r| refused(ns.nsid, r))?;
    let block = ns.device.geometry().block_size as usize;
    match sqe.opcode() {
        fenced::NOTE_SAVE => {
            let Some(buf) = data else { return Err((Status::SGL_INVALID_DATA.dnr(), 0)) };
            let note = fenced::decode_note(&buf).map_err(|_| (Status::INVALID_FIELD.dnr(), 0))?;
            notes.save(note.to_vec()).await.map_err(|e| (status_of(&e, true), 0))?;
            Ok(None)
        }
        fenced::NOTE_LOAD => {
            let note = notes.load().await.map_err(|e| (status_of(&e, false), 0))?;
            let mut wire = fenced::encode_note(&note, block.max(1)).ok_or((Status::INTERNAL.dnr(), 0))?;
            if wire.len() > read_len {
                // The host asked for fewer blocks than the note takes.
                return Err((Status::SGL_INVALID_DATA.dnr(), 0));
            }
            wire.resize(read_len, 0);
            Ok(Some((ReadData::from(IoBuf::from_slice(&wire)), None)))
        }
        _ => Err((Status::INVALID_OPCODE.dnr(), 0)),
    }
}

/// The undo-log commands of an erasure-coded shard
/// ([`strata_block::UndoLog`]), admitted by the namespace's fence. The
/// value is the completion's result (Roll Back, Roll Back Only: records
/// undone; Committed: the mark) and the data for the host (Undo Records).
async fn undo_command(
    sub: &Subsystem,
    sqe: &Sqe,
    data: Option<IoBuf>,
    read_len: usize,
    sender: Sender,
) -> Result<(u64, Option<ReadData>), (Status, u64)> {
    let Some(entry) = sub.entry(sqe.nsid()) else { return Err((Status::INVALID_NS.dnr(), 0)) };
    let ns = &entry.ns;
    let (Some(fence), Some(undo)) = (&ns.fence, &ns.undo) else { return Err((Status::INVALID_OPCODE.dnr(), 0)) };
    let _admitted = fence.admit(sqe.epoch(), sender).await.map_err(|r| refused(ns.nsid, r))?;
    let failed = |e: BlockError| (status_of(&e, true), 0);
    match sqe.opcode() {
        fenced::WRITE_LOGGED => {
            let rw = ReadWrite::decode(sqe);
            let Some(buf) = data else { return Err((Status::SGL_INVALID_DATA.dnr(), rw.slba)) };
            let len = transfer_len(ns, rw.slba, rw.nlb, buf.len())?;
            let (_, res) = undo.write_logged(sqe.update_seq(), u64::from(sqe.update_targets()), rw.slba, buf).await;
            res.map_err(|e| (status_of(&e, true), rw.slba))?;
            entry.counters.count_write(len as u64);
            Ok((0, None))
        }
        fenced::COMMIT => undo.commit(sqe.arg64()).await.map(|()| (0, None)).map_err(failed),
        fenced::ROLL_BACK => undo.roll_back(sqe.arg64()).await.map(|n| (n, None)).map_err(failed),
        fenced::COMMITTED => Ok((undo.committed(), None)),
        fenced::DISCARD_UNDO => undo.discard().await.map(|()| (0, None)).map_err(failed),
        fenced::UNDO_RECORDS => {
            let mut records = undo.records(sqe.arg64()).await.map_err(failed)?;
            let take = undo_page(&mut records, read_len).ok_or((Status::SGL_INVALID_DATA.dnr(), 0))?;
            let values: Vec<u64> = records[..take].iter().flat_map(|r| [r.seq, r.lba, r.blocks, r.targets]).collect();
            let block = (ns.device.geometry().block_size as usize).max(1);
            let mut wire = fenced::encode_list(&values, 4, block).ok_or((Status::INTERNAL.dnr(), 0))?;
            if wire.len() > read_len {
                return Err((Status::SGL_INVALID_DATA.dnr(), 0));
            }
            wire.resize(read_len, 0);
            Ok((u64::from(take < records.len()), Some(ReadData::from(IoBuf::from_slice(&wire)))))
        }
        fenced::ROLL_BACK_ONLY => {
            let Some(buf) = data else { return Err((Status::SGL_INVALID_DATA.dnr(), 0)) };
            let undo_seqs = fenced::decode_list(&buf, 1).map_err(|_| (Status::INVALID_FIELD.dnr(), 0))?;
            undo.roll_back_only(undo_seqs, sqe.arg64()).await.map(|n| (n, None)).map_err(failed)
        }
        _ => Err((Status::INVALID_OPCODE.dnr(), 0)),
    }
}

/// How many of `records` one Undo Records reply of `read_len` bytes
/// carries: sorts them by update (a shard logs concurrent updates of
/// different stripes in any order), then takes as many as the bytes hold,
/// whole updates only, so that the host asks again after the last one's
/// sequence number. `None` when one update alone does not fit.
fn undo_page(records: &mut [strata_block::UndoRecord], read_len: usize) -> Option<usize> {
    records.sort_by_key(|r| r.seq);
    let fit = read_len.saturating_sub(fenced::LIST_COUNT_LEN) / strata_block::UndoRecord::WIRE_LEN;
    let mut take = records.len().min(fit).min(fenced::MAX_LIST);
    if take < records.len() {
        while take > 0 && records[take].seq == records[take - 1].seq {
            take -= 1;
        }
        if take == 0 {
            return None;
        }
    }
    Some(take)
}

type Outcome = Result<Option<(ReadData, Option<Permit>)>, (Status, u64)>;

#[allow(clippy::too_many_arguments)]
async fn dispatch(
    sub: &Subsystem,
    sqe: &Sqe,
    data: Option<IoBuf>,
    read_len: usize,
    budget: &DataBudget,
    sender: Sender,
    host: &HostId,
    started: Option<Instant>,
    measured: &mut Option<Duration>,
) -> Outcome {
    // A path that does not serve the namespaces says so with a path
    // status: the host retries on another path instead of failing the I/O.
    match sub.ana_state() {
        AnaState::Optimized | AnaState::NonOptimized => {}
        AnaState::Inaccessible => return Err((Status::ANA_INACCESSIBLE, 0)),
        AnaState::PersistentLoss => return Err((Status::ANA_PERSISTENT_LOSS, 0)),
        AnaState::Change => return Err((Status::ANA_TRANSITION, 0)),
    }
    let nsid = sqe.nsid();
    // A host the namespace's reservation keeps out gets Reservation
    // Conflict (see `reservation`).
    // A path checks nothing here: the node it forwards to does, knowing
    // the host (see `Namespace::forward`).
    let access = access_of(sqe.opcode());
    let reserved = sub.serves_reservations();
    let kept_out = |e: &NsEntry| {
        reserved && e.ns.forward.is_none() && access != Access::Free && !e.reservations.allows(host, access)
    };
    if sqe.opcode() == io::FLUSH && nsid == u32::MAX {
        if sub.entries().iter().any(|e| kept_out(e)) {
            return Err((Status::RESERVATION_CONFLICT.dnr(), 0));
        }
        for e in sub.entries() {
            let dev = e.ns.forward.as_ref().map_or_else(|| e.ns.device.clone(), |f| f.device_for(host));
            dev.flush().await.map_err(|err| (status_of(&err, true), 0)).inspect_err(|s| media_error(&e, s))?;
        }
        return Ok(None);
    }
    let Some(entry) = sub.entry(nsid) else { return Err((Status::INVALID_NS.dnr(), 0)) };
    let Some(metrics) = &entry.ns.metrics else {
        return on_entry(&entry, sub, sqe, data, read_len, budget, sender, host).await;
    };
    let _in_flight = metrics.start();
    // The host's clock when it records too; otherwise from here.
    let started = started.unwrap_or_else(Instant::now);
    let write_len = data.as_ref().map_or(0, |d| d.len() as u64);
    let outcome = on_entry(&entry, sub, sqe, data, read_len, budget, sender, host).await;
    let (op, status) = (IoOp::of(sqe.opcode()), outcome.as_ref().map_or_else(|(s, _)| *s, |_| Status::SUCCESS));
    let bytes = match op {
        IoOp::Read => read_len as u64,
        IoOp::Write => write_len,
        _ => 0,
    };
    let latency = started.elapsed();
    *measured = Some(latency);
    metrics.record(op, bytes, latency, status);
    outcome
}

/// The rest of [`dispatch`] for a command on the active namespace `entry`.
#[allow(clippy::too_many_arguments)]
async fn on_entry(
    entry: &NsEntry,
    sub: &Subsystem,
    sqe: &Sqe,
    data: Option<IoBuf>,
    read_len: usize,
    budget: &DataBudget,
    sender: Sender,
    host: &HostId,
) -> Outcome {
    let nsid = sqe.nsid();
    // As `kept_out` in `dispatch`.
    let access = access_of(sqe.opcode());
    let reserved = sub.serves_reservations();
    if reserved && entry.ns.forward.is_none() && access != Access::Free && !entry.reservations.allows(host, access) {
        return Err((Status::RESERVATION_CONFLICT.dnr(), 0));
    }
    // Counted until it ends, for a Preempt and Abort that names its host.
    let _running = if reserved && entry.ns.forward.is_none() { entry.reservations.track(host) } else { None };
    let ns = &entry.ns;
    let forwarded;
    let dev = match &ns.forward {
        Some(f) => {
            forwarded = f.device_for(host);
            &forwarded
        }
        None => &ns.device,
    };
    // A fenced namespace (a replica on the internal fabric) runs a command
    // only under its fence; see `strata_block::fence`.
    let (opcode, _admitted) = match (&ns.fence, fenced::standard(sqe.opcode())) {
        (None, None) => (sqe.opcode(), None),
        (None, Some(_)) => return Err((Status::INVALID_OPCODE.dnr(), 0)),
        (Some(_), None) => return Err((Status::FENCE_REQUIRED.dnr(), 0)),
        (Some(fence), Some(op)) => match fence.admit(sqe.epoch(), sender).await {
            Ok(guard) => (op, Some(guard)),
            Err(r) => return Err(refused(nsid, r)),
        },
    };
    match opcode {
        io::READ => read(entry, dev, sqe, read_len, budget).await,
        io::WRITE => write(entry, dev, sqe, data).await,
        io::FLUSH => dev.flush().await.map(|_| None).map_err(|e| (status_of(&e, true), 0)),
        io::WRITE_ZEROES => write_zeroes(dev, sqe).await,
        io::DATASET_MANAGEMENT => dataset_management(dev, sqe, data).await,
        io::COMPARE => compare(ns, dev, sqe, data, budget).await,
        _ => Err((Status::INVALID_OPCODE.dnr(), 0)),
    }
    .inspect_err(|e| media_error(entry, e))
}

/// Counts a media and data integrity error on `ns`. A miscompare is in
/// the same status code type but is not an error of the media.
fn media_error(entry: &NsEntry, (status, _): &(Status, u64)) {
    if status.sct() == strata_nvme::status::SCT_MEDIA && status.code() != Status::COMPARE_FAILURE.code() {
        entry.counters.media_errors.fetch_add(1, Relaxed);
    }
}

/// Byte length of `nlb` blocks at `slba`, after checking the range and
/// that the host's transfer length matches it.
fn transfer_len(ns: &Namespace, slba: u64, nlb: u32, sgl_len: usize) -> Result<usize, (Status, u64)> {
    let g = ns.device.geometry();
    strata_block::check_range(g, slba, u64::from(nlb)).map_err(|e| (status_of(&e, false), slba))?;
    let len = nlb as usize * g.block_size as usize;
    if len != sgl_len {
        return Err((Status::SGL_INVALID_DATA.dnr(), slba));
    }
    Ok(len)
}

async fn read(entry: &NsEntry, dev: &Arc<dyn BlockDevice>, sqe: &Sqe, read_len: usize, budget: &DataBudget) -> Outcome {
    let ns = &entry.ns;
    let rw = ReadWrite::decode(sqe);
    let len = transfer_len(ns, rw.slba, rw.nlb, read_len)?;
    // The data is held until it is on the wire: charge it first (in line
    // with every other command waiting for memory), unless the command's
    // prepaid slot holds it.
    let permit = budget.charge(len).await;
    let data = dev.read_data(rw.slba, u64::from(rw.nlb)).await.map_err(|e| (status_of(&e, false), rw.slba))?;
    entry.counters.count_read(len as u64);
    Ok(Some((data, permit)))
}

async fn write(entry: &NsEntry, dev: &Arc<dyn BlockDevice>, sqe: &Sqe, data: Option<IoBuf>) -> Outcome {
    let ns = &entry.ns;
    let rw = ReadWrite::decode(sqe);
    let Some(buf) = data else { return Err((Status::SGL_INVALID_DATA.dnr(), rw.slba)) };
    let len = transfer_len(ns, rw.slba, rw.nlb, buf.len())?;
    let (_, res) = dev.write(rw.slba, buf, rw.fua).await;
    res.map_err(|e| (status_of(&e, true), rw.slba))?;
    entry.counters.count_write(len as u64);
    Ok(None)
}

async fn write_zeroes(dev: &Arc<dyn BlockDevice>, sqe: &Sqe) -> Outcome {
    let wz = WriteZeroes::decode(sqe);
    let g = dev.geometry();
    strata_block::check_range(g, wz.slba, u64::from(wz.nlb)).map_err(|e| (status_of(&e, true), wz.slba))?;
    dev.write_zeroes(wz.slba, u64::from(wz.nlb), wz.deallocate).await.map_err(|e| (status_of(&e, true), wz.slba))?;
    if wz.fua {
        dev.flush().await.map_err(|e| (status_of(&e, true), wz.slba))?;
    }
    Ok(None)
}

async fn dataset_management(dev: &Arc<dyn BlockDevice>, sqe: &Sqe, data: Option<IoBuf>) -> Outcome {
    let dsm = DatasetManagement::decode(sqe);
    let Some(data) = data else { return Err((Status::SGL_INVALID_DATA.dnr(), 0)) };
    if data.len() < dsm.data_len() {
        return Err((Status::SGL_INVALID_DATA.dnr(), 0));
    }
    if !dsm.deallocate {
        // Only the deallocate attribute changes anything; the others are
        // hints we may ignore.
        return Ok(None);
    }
    let g = dev.geometry();
    let mut ranges = Vec::with_capacity(dsm.nr);
    for r in DsmRange::decode_all(&data[..dsm.data_len()]) {
        if r.nlb == 0 {
            continue;
        }
        strata_block::check_range(g, r.slba, u64::from(r.nlb)).map_err(|e| (status_of(&e, true), r.slba))?;
        ranges.push((r.slba, u64::from(r.nlb)));
    }
    if !ranges.is_empty() {
        dev.deallocate(ranges).await.map_err(|e| (status_of(&e, true), 0))?;
    }
    Ok(None)
}

async fn compare(
    ns: &Arc<Namespace>,
    dev: &Arc<dyn BlockDevice>,
    sqe: &Sqe,
    data: Option<IoBuf>,
    budget: &DataBudget,
) -> Outcome {
    let rw = ReadWrite::decode(sqe);
    let Some(expected) = data else { return Err((Status::SGL_INVALID_DATA.dnr(), rw.slba)) };
    // The read to compare against is a second buffer of the same size.
    let len = transfer_len(ns, rw.slba, rw.nlb, expected.len())?;
    let _permit = budget.charge(len).await;
    let actual = dev.read_data(rw.slba, u64::from(rw.nlb)).await.map_err(|e| (status_of(&e, false), rw.slba))?;
    if actual[..] != expected[..] {
        return Err((Status::COMPARE_FAILURE.dnr(), rw.slba));
    }
    Ok(None)
}

#[cfg(test)]
mod undo_page_tests {
    use super::undo_page;
    use strata_block::UndoRecord;

    fn recs(seqs: &[u64]) -> Vec<UndoRecord> {
        seqs.iter().enumerate().map(|(i, &seq)| UndoRecord { seq, lba: i as u64, blocks: 1, targets: 0 }).collect()
    }

    #[test]
    fn a_page_is_sorted_by_update_and_splits_only_between_updates() {
        // Room for three records (4 + 3 * 32 bytes).
        assert_eq!(UndoRecord::WIRE_LEN, 32);
        let len = 4 + 3 * UndoRecord::WIRE_LEN;
        let mut r = recs(&[7, 5, 6, 6, 6]);
        assert_eq!(undo_page(&mut r, len), Some(1), "5 fits; the three records of 6 do not with it");
        assert_eq!(r.iter().map(|x| x.seq).collect::<Vec<_>>(), vec![5, 6, 6, 6, 7]);
        let mut r = recs(&[7, 5, 6, 6]);
        assert_eq!(undo_page(&mut r, len), Some(3), "5, 6, 6; 7 on the next page");
        let mut r = recs(&[3, 1, 2]);
        assert_eq!(undo_page(&mut r, len), Some(3), "all fit: no more to ask for");
        let mut r = recs(&[4, 4, 4, 4]);
        assert_eq!(undo_page(&mut r, len), None, "one update larger than a page");
        let mut r = recs(&[]);
        assert_eq!(undo_page(&mut r, len), Some(0));
        assert_eq!(undo_page(&mut recs(&[1]), 0), None, "no room at all");
    }
}
