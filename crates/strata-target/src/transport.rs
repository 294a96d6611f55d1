//! The NVMe/TCP transport state machine of one queue (one TCP connection),
//! controller side. Sans-I/O: bytes go in through [`Transport::receive`],
//! commands ready to execute come out as [`Command`]s, and everything to
//! send is appended to a caller-visible output buffer.
//!
//! What it owns:
//! - connection initialisation (ICReq/ICResp) and digest negotiation;
//! - PDU framing with "need more bytes" kept apart from "malformed";
//! - the host-to-controller data flow: in-capsule data, and R2T/H2CData
//!   for larger writes, honouring MAXH2CDATA and a cap on how many
//!   commands may hold an R2T (and a data buffer) at once;
//! - the controller-to-host data flow (C2HData, then CapsuleResp or the
//!   SUCCESS flag when SQ flow control is disabled);
//! - command identifiers: a CID may not be reused while it is outstanding,
//!   except the CID of a parked Asynchronous Event Request, which the
//!   reuse retires (SPDK's initiator completes its AERs locally at detach
//!   and reuses their CIDs; nvmet and SPDK's target accept that);
//! - the memory of R2T buffers: each is charged to a shared [`Budget`]
//!   when its R2T goes out; when the budget is spent, R2Ts wait (in
//!   order) for a permit the caller obtains. Input never waits: what a
//!   queue can hold in-capsule was paid for at Connect (see
//!   [`queue_memory`]);
//! - R2T deadlines: the host must send the data an R2T asks for within
//!   `r2t_timeout`, or [`Transport::check_timeouts`] fails the connection;
//! - host PDU data alignment (HPDA): C2HData data starts at a multiple of
//!   it.
//!
//! Time comes from the caller (`now` arguments); the transport reads no
//! clock.
//!
//! What it leaves to others: what a command means (the controller and
//! namespace layers), sockets and timers (the connection driver).
//!
//! Invariants between calls:
//! - `outstanding` holds exactly the CIDs accepted and not yet completed;
//! - every CID in `pending_data` is outstanding, and at most
//!   `max_r2t_inflight` of them have an R2T on the wire (`r2t_active`);
//! - once [`Transport::receive`] has returned a [`Fatal`], the caller sends
//!   its termination PDU and drops the connection; no further input is
//!   processed;
//! - every R2T buffer and in-capsule data buffer holds a [`Permit`] of its
//!   size until its command is dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use strata_block::{IoBuf, ReadData};
use strata_nvme::command::{self, SGL_INCAPSULE_DATA, SGL_TRANSPORT_DATA, Sqe};
use strata_nvme::completion::Cqe;
use strata_nvme::digest::digest_bytes;
use strata_nvme::fabrics::{FABRICS_OPCODE, fctype};
use strata_nvme::pdu::{
    self, CommonHeader, DataHeader, Decoded, Digests, FLAG_DATA_LAST, FLAG_DATA_SUCCESS, IcResp, Pdu, PduError,
    PduType, R2t, fes,
};
use strata_nvme::status::Status;

use crate::budget::{Budget, Permit};

/// Bytes charged to the buffer budget for the state of each command slot
/// of an I/O queue (its future and task, its completion on the way out),
/// on top of its in-capsule buffer. Larger than the command's future with
/// room for the task around it and the device's own future (pinned by a
/// test in `conn`).
pub const COMMAND_STATE_BYTES: usize = 3072;

/// What an I/O queue of `entries` commands prepays at Connect: the state
/// and the in-capsule buffer of every command it can hold, as Linux nvmet
/// and SPDK preallocate per queue.
pub fn queue_memory(limits: &TransportLimits, entries: usize) -> usize {
    entries.saturating_mul(COMMAND_STATE_BYTES + limits.in_capsule_data)
}

/// Transport limits for one queue.
#[derive(Debug, Clone, Copy)]
pub struct TransportLimits {
    /// Most in-capsule data bytes accepted in a CapsuleCmd.
    pub in_capsule_data: usize,
    /// MAXH2CDATA: most data bytes in one H2CData PDU.
    pub max_h2c_data: u32,
    /// Largest data transfer of one command (MDTS), in bytes.
    pub max_transfer: usize,
    /// Most commands that may have an R2T outstanding at once; further
    /// writes wait their turn, which bounds buffer memory per queue.
    pub max_r2t_inflight: usize,
    /// How long the host may take to send the data of an R2T.
    pub r2t_timeout: Duration,
}

/// A fatal transport error: the caller sends [`Fatal::term_req`] and closes
/// the connection.
#[derive(Debug)]
pub struct Fatal {
    /// Fatal error status.
    pub fes: u16,
    /// Fatal error information.
    pub fei: u32,
    /// The PDU header in error (up to 128 bytes).
    pub offending: Vec<u8>,
    /// What went wrong, for the log.
    pub reason: String,
}

impl Fatal {
    fn new(fes: u16, fei: u32, offending: &[u8], reason: impl Into<String>) -> Fatal {
        let n = offending.len().min(pdu::TERM_MAX_ERROR_DATA);
        Fatal { fes, fei, offending: offending[..n].to_vec(), reason: reason.into() }
    }

    fn from_pdu_error(e: &PduError, offending: &[u8]) -> Fatal {
        Fatal::new(e.fes(), e.fei(), offending, e.to_string())
    }

    /// The C2HTermReq PDU to send before closing.
    pub fn term_req(&self) -> Vec<u8> {
        pdu::encode_term_req(PduType::C2H_TERM_REQ, self.fes, self.fei, &self.offending)
    }
}

/// Why the connection ended without a fatal error of ours.
#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    /// The host sent an H2CTermReq.
    HostTerminated {
        /// Its fatal error status.
        fes: u16,
    },
}

/// A command ready to be executed, with all of its host-to-controller data.
#[derive(Debug)]
pub struct Command {
    /// The submission queue entry.
    pub sqe: Sqe,
    /// Data from the host (in-capsule or R2T-driven), if the command
    /// carries any.
    pub data: Option<IoBuf>,
    /// Bytes the host expects back (controller-to-host commands).
    pub read_len: usize,
    /// The budget held by `data`; dropped with the command.
    pub permit: Option<Permit>,
}

/// What [`Transport::receive`] produced.
#[derive(Debug)]
pub enum Input {
    /// A command to execute.
    Command(Command),
    /// The connection is over.
    Closed(Closed),
    /// A command reused the identifier of this parked Asynchronous Event
    /// Request, which is retired: it will never be completed.
    AerRetired(u16),
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    AwaitIcReq,
    Ready,
    Done,
}

struct PendingData {
    sqe: Sqe,
    len: usize,
    /// Allocated when the R2T goes out, so that queued writes hold no
    /// memory.
    buf: Option<IoBuf>,
    permit: Option<Permit>,
    received: usize,
    ttag: u16,
    r2t_sent: bool,
    digest_failed: bool,
}

/// Controller-side NVMe/TCP state of one connection.
pub struct Transport {
    state: State,
    digests: Digests,
    limits: TransportLimits,
    sq_flow_disabled: bool,
    sqhd: u16,
    sqsize: u16,
    outstanding: Vec<u64>,
    outstanding_n: usize,
    max_outstanding: usize,
    pending_data: HashMap<u16, PendingData>,
    r2t_waiting: VecDeque<u16>,
    r2t_active: usize,
    /// R2Ts on the wire, oldest first: (sent at, CID, transfer tag).
    /// Entries whose transfer has finished are skipped lazily.
    r2t_sent_order: VecDeque<(Instant, u16, u16)>,
    next_ttag: u16,
    budget: Arc<Budget>,
    /// A permit the caller obtained for the oldest waiting R2T.
    r2t_credit: Option<Permit>,
    /// The time of the input being handled (from the caller).
    now: Instant,
    /// C2HData data alignment in bytes, from the host's HPDA.
    data_align: usize,
    /// CIDs of parked Asynchronous Event Requests (admin queue).
    parked_aers: Vec<u16>,
    /// Output bytes: headers, responses and small data.
    out: Vec<u8>,
    /// Read data sent without copying: each goes out after
    /// `out[..offset]` and before `out[offset..]`, in order, holding its
    /// budget until then. Lent data must not wait long: see
    /// [`Transport::materialize`].
    out_bufs: Vec<(usize, ReadData, Option<Permit>)>,
    /// Total length of `out_bufs`' data.
    out_bufs_len: usize,
    /// Bytes of the output already written (partial writes).
    sent: usize,
}

impl Transport {
    /// A transport waiting for the host's ICReq, with an unlimited buffer
    /// budget.
    pub fn new(limits: TransportLimits) -> Transport {
        Transport::with_budget(limits, Budget::unlimited())
    }

    /// A transport waiting for the host's ICReq, charging host data to
    /// `budget`.
    pub fn with_budget(limits: TransportLimits, budget: Arc<Budget>) -> Transport {
        Transport {
            state: State::AwaitIcReq,
            digests: Digests::default(),
            limits,
            sq_flow_disabled: false,
            sqhd: 0,
            sqsize: 0,
            outstanding: vec![0; 65536 / 64],
            outstanding_n: 0,
            // Before Connect only the Connect command is expected; the
            // admin queue's size is the smallest a host may use.
            max_outstanding: 32,
            pending_data: HashMap::new(),
            r2t_waiting: VecDeque::new(),
            r2t_active: 0,
            r2t_sent_order: VecDeque::new(),
            next_ttag: 0,
            budget,
            r2t_credit: None,
            now: Instant::now(),
            data_align: 0,
            parked_aers: Vec::new(),
            out: Vec::with_capacity(4096),
            out_bufs: Vec::new(),
            out_bufs_len: 0,
            sent: 0,
        }
    }

    /// Negotiated digests.
    pub fn digests(&self) -> Digests {
        self.digests
    }

    /// Records the queue size from Connect (0-based) and whether the host
    /// disabled SQ flow control, which allows C2HData with SUCCESS.
    pub fn set_queue_params(&mut self, sqsize: u16, sq_flow_disabled: bool) {
        self.sqsize = sqsize;
        self.max_outstanding = usize::from(sqsize) + 1;
        self.sq_flow_disabled = sq_flow_disabled;
    }

    /// True when there is output waiting to be sent.
    pub fn has_output(&self) -> bool {
        !self.out.is_empty() || !self.out_bufs.is_empty()
    }

    /// Bytes of output waiting to be sent.
    pub fn output_len(&self) -> usize {
        self.out.len() + self.out_bufs_len - self.sent
    }

    /// The unsent output as slices for vectored writes, in order. Read
    /// data is not copied. Report what was written with
    /// [`Transport::consume`].
    pub fn output_slices(&self) -> Vec<std::io::IoSlice<'_>> {
        let mut v = Vec::with_capacity(2 * self.out_bufs.len() + 1);
        let mut skip = self.sent;
        let mut start = 0;
        for (off, buf, _) in &self.out_bufs {
            push_unsent(&mut v, &mut skip, &self.out[start..*off]);
            push_unsent(&mut v, &mut skip, buf);
            start = *off;
        }
        push_unsent(&mut v, &mut skip, &self.out[start..]);
        v
    }

    /// Records that the first `n` bytes of the unsent output went out;
    /// once everything has, the output is cleared (and every lease ends).
    pub fn consume(&mut self, n: usize) {
        self.sent += n;
        if self.sent >= self.out.len() + self.out_bufs_len {
            self.clear_output();
        }
    }

    /// Copies every piece of lent read data still in the output into a
    /// buffer of its own, ending the leases. Call before waiting for the
    /// socket: the host decides how long that takes, and writers to the
    /// lent blocks would wait as long.
    pub fn materialize(&mut self) {
        for (_, data, _) in &mut self.out_bufs {
            data.make_owned();
        }
    }

    /// Bytes of budget the oldest R2T that waits for it needs, if R2Ts
    /// wait for budget: obtain them ([`Budget::acquire`]), then hand them
    /// to [`Transport::send_r2ts`].
    pub fn r2t_blocked_on(&self) -> Option<usize> {
        if self.r2t_active >= self.limits.max_r2t_inflight {
            return None;
        }
        let cid = self.r2t_waiting.front()?;
        self.pending_data.get(cid).map(|p| p.len)
    }

    /// Sends the R2Ts that may go now, stamped `now`, the oldest with
    /// `credit` (obtained for [`Transport::r2t_blocked_on`]'s bytes) and
    /// the rest as budget permits.
    pub fn send_r2ts(&mut self, credit: Permit, now: Instant) {
        self.now = now;
        self.r2t_credit = Some(credit);
        self.send_waiting_r2ts();
        // A credit that no longer fits the oldest R2T goes back.
        self.r2t_credit = None;
    }

    /// When the oldest R2T on the wire times out, if any.
    pub fn r2t_deadline(&mut self) -> Option<Instant> {
        while let Some(&(at, cid, ttag)) = self.r2t_sent_order.front() {
            if self.pending_data.get(&cid).is_some_and(|p| p.r2t_sent && p.ttag == ttag) {
                return Some(at + self.limits.r2t_timeout);
            }
            self.r2t_sent_order.pop_front();
        }
        None
    }

    /// Fails the connection if an R2T has waited for its data longer than
    /// `r2t_timeout` at `now`.
    ///
    /// # Errors
    ///
    /// A [`Fatal`] naming the command whose data did not come.
    pub fn check_timeouts(&mut self, now: Instant) -> Result<(), Fatal> {
        match self.r2t_deadline() {
            Some(deadline) if deadline <= now => {
                let (_, cid, _) = self.r2t_sent_order[0];
                Err(Fatal::new(
                    fes::PDU_SEQUENCE_ERROR,
                    0,
                    &[],
                    format!("no H2CData for the R2T of command {cid} within {:?}", self.limits.r2t_timeout),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Records that the admin command `cid` is a parked Asynchronous
    /// Event Request: a later command reusing its CID retires it.
    pub fn park_aer(&mut self, cid: u16) {
        if !self.parked_aers.contains(&cid) {
            self.parked_aers.push(cid);
        }
    }

    /// Appends bytes to the output as they are (a C2HTermReq).
    pub fn push_output(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// Forgets the output (written or abandoned), keeping the capacity.
    pub fn clear_output(&mut self) {
        self.out.clear();
        self.out_bufs.clear();
        self.out_bufs_len = 0;
        self.sent = 0;
    }

    /// Takes the output as one contiguous byte string (copies data
    /// buffers; for tests and error paths).
    pub fn take_output(&mut self) -> Vec<u8> {
        let v = self.output_slices().iter().flat_map(|s| s.iter().copied()).collect();
        self.clear_output();
        v
    }

    /// Number of commands accepted and not yet completed.
    pub fn outstanding_count(&self) -> usize {
        self.outstanding_n
    }

    fn is_outstanding(&self, cid: u16) -> bool {
        self.outstanding[usize::from(cid) / 64] & (1 << (cid % 64)) != 0
    }

    fn set_outstanding(&mut self, cid: u16, on: bool) {
        let w = &mut self.outstanding[usize::from(cid) / 64];
        let bit = 1 << (cid % 64);
        if on && *w & bit == 0 {
            *w |= bit;
            self.outstanding_n += 1;
        } else if !on && *w & bit != 0 {
            *w &= !bit;
            self.outstanding_n -= 1;
        }
    }

    /// Consumes as many whole PDUs from `rbuf` as it holds, pushing the
    /// resulting inputs to `inputs`. Partial PDUs stay in `rbuf`.
    ///
    /// # Errors
    ///
    /// A [`Fatal`] protocol error; the connection must be terminated.
    pub fn receive(&mut self, rbuf: &mut BytesMut, inputs: &mut Vec<Input>, now: Instant) -> Result<(), Fatal> {
        self.now = now;
        while self.state != State::Done {
            let Some(ch) = CommonHeader::parse(rbuf) else { return Ok(()) };
            let max_data = match ch.pdu_type {
                PduType::CAPSULE_CMD => self.limits.in_capsule_data,
                PduType::H2C_DATA => self.limits.max_h2c_data as usize,
                _ => 0,
            };
            let header_len = ch.pdu_type.hlen().unwrap_or(pdu::CH_LEN).min(rbuf.len());
            let digests = if self.state == State::AwaitIcReq { Digests::default() } else { self.digests };
            let decoded = match pdu::decode_pdu(rbuf, digests, max_data) {
                Ok(Some(d)) => d,
                Ok(None) => return Ok(()),
                Err(e) => return Err(Fatal::from_pdu_error(&e, &rbuf[..header_len])),
            };
            let len = decoded.len;
            let res = self.handle_pdu(decoded, &rbuf[..header_len], inputs);
            rbuf.advance(len);
            res?;
        }
        Ok(())
    }

    fn handle_pdu(&mut self, d: Decoded<'_>, header: &[u8], inputs: &mut Vec<Input>) -> Result<(), Fatal> {
        let seq_error = |what: &str| Fatal::new(fes::PDU_SEQUENCE_ERROR, 0, header, what.to_string());
        match (&self.state, d.pdu) {
            (State::AwaitIcReq, Pdu::IcReq(req)) => {
                if req.hpda > pdu::HPDA_MAX {
                    return Err(Fatal::new(
                        fes::INVALID_HEADER_FIELD,
                        pdu::IC_PDA_OFFSET as u32,
                        header,
                        format!("ICReq HPDA {} is above {}", req.hpda, pdu::HPDA_MAX),
                    ));
                }
                // MAXR2T needs no check: every value allows the one R2T
                // per command that we send.
                self.data_align = (usize::from(req.hpda) + 1) * 4;
                // The host may ask for digests; we grant what it asks.
                self.digests = req.digests;
                let resp = IcResp { pfv: 0, cpda: 0, digests: req.digests, maxh2cdata: self.limits.max_h2c_data };
                self.out.extend_from_slice(&resp.encode());
                self.state = State::Ready;
                Ok(())
            }
            (State::AwaitIcReq, _) => Err(seq_error("first PDU is not an ICReq")),
            (_, Pdu::H2cTermReq(t)) => {
                self.state = State::Done;
                inputs.push(Input::Closed(Closed::HostTerminated { fes: t.fes }));
                Ok(())
            }
            (State::Ready, Pdu::IcReq(_)) => Err(seq_error("second ICReq")),
            (State::Ready, Pdu::CapsuleCmd { sqe, data }) => {
                self.handle_capsule(sqe, data, d.data_digest_ok, header, inputs)
            }
            (State::Ready, Pdu::H2cData { header: h, flags, data }) => {
                self.handle_h2c_data(h, flags, data, d.data_digest_ok, header, inputs)
            }
            (_, other) => Err(Fatal::new(
                fes::INVALID_HEADER_FIELD,
                pdu::TYPE_OFFSET as u32,
                header,
                format!("a host must not send {:?}", pdu_name(&other)),
            )),
        }
    }

    fn handle_capsule(
        &mut self,
        sqe: Sqe,
        data: &[u8],
        digest_ok: bool,
        header: &[u8],
        inputs: &mut Vec<Input>,
    ) -> Result<(), Fatal> {
        let cid = sqe.cid();
        if let Some(i) = self.parked_aers.iter().position(|&c| c == cid) {
            self.parked_aers.swap_remove(i);
            self.set_outstanding(cid, false);
            inputs.push(Input::AerRetired(cid));
        }
        if self.is_outstanding(cid) {
            return Err(Fatal::new(
                fes::INVALID_HEADER_FIELD,
                (pdu::CH_LEN + command::CID_OFFSET) as u32,
                header,
                format!("command identifier {cid} reused while outstanding"),
            ));
        }
        if self.outstanding_n >= self.max_outstanding {
            // The host overran its queue: with SQ flow control it cannot
            // have more than SQSIZE + 1 commands outstanding. Refusing to
            // queue more bounds the memory one connection can claim.
            return Err(Fatal::new(
                fes::PDU_SEQUENCE_ERROR,
                0,
                header,
                format!("command {cid} exceeds the queue size ({} outstanding)", self.outstanding_n),
            ));
        }
        self.set_outstanding(cid, true);
        self.sqhd = if self.sqsize == 0 { 0 } else { (self.sqhd + 1) % (self.sqsize + 1) };
        if !digest_ok {
            self.complete(Cqe::new(cid, Status::TRANSIENT_TRANSPORT));
            return Ok(());
        }
        let direction = if sqe.opcode() == FABRICS_OPCODE { sqe.fctype() & 0x3 } else { sqe.opcode() & 0x3 };
        let sgl = sqe.sgl();
        let len = sgl.length as usize;
        if len == 0 {
            if !data.is_empty() {
                self.complete(Cqe::new(cid, Status::SGL_INVALID_DATA.dnr()));
                return Ok(());
            }
            inputs.push(Input::Command(Command { sqe, data: None, read_len: 0, permit: None }));
            return Ok(());
        }
        if len > self.limits.max_transfer.max(self.limits.in_capsule_data) {
            self.complete(Cqe::new(cid, Status::INVALID_FIELD.dnr()));
            return Ok(());
        }
        match (sgl.sgl_type, direction) {
            (SGL_INCAPSULE_DATA, 0x1) => {
                let off = sgl.addr as usize;
                if sgl.addr > data.len() as u64 || off + len > data.len() {
                    self.complete(Cqe::new(cid, Status::SGL_INVALID_OFFSET.dnr()));
                    return Ok(());
                }
                let buf = IoBuf::from_slice(&data[off..off + len]);
                inputs.push(Input::Command(Command { sqe, data: Some(buf), read_len: 0, permit: None }));
            }
            (SGL_TRANSPORT_DATA, 0x1) => {
                if !data.is_empty() {
                    return Err(Fatal::new(
                        fes::INVALID_HEADER_FIELD,
                        pdu::PLEN_OFFSET as u32,
                        header,
                        "capsule carries in-capsule data but its SGL asks for a transport transfer",
                    ));
                }
                self.queue_r2t(cid, sqe, len);
            }
            (SGL_TRANSPORT_DATA, 0x2) => {
                inputs.push(Input::Command(Command { sqe, data: None, read_len: len, permit: None }));
            }
            (SGL_INCAPSULE_DATA, _) | (SGL_TRANSPORT_DATA, _) => {
                self.complete(Cqe::new(cid, Status::INVALID_FIELD.dnr()));
            }
            (t, _) if t >> 4 == 0 || t >> 4 == 5 => {
                self.complete(Cqe::new(cid, Status::SGL_INVALID_SUBTYPE.dnr()));
            }
            _ => self.complete(Cqe::new(cid, Status::SGL_INVALID_TYPE.dnr())),
        }
        Ok(())
    }

    fn queue_r2t(&mut self, cid: u16, sqe: Sqe, len: usize) {
        let ttag = self.next_ttag;
        self.next_ttag = self.next_ttag.wrapping_add(1);
        let pending =
            PendingData { sqe, len, buf: None, permit: None, received: 0, ttag, r2t_sent: false, digest_failed: false };
        self.pending_data.insert(cid, pending);
        self.r2t_waiting.push_back(cid);
        self.send_waiting_r2ts();
    }

    fn send_waiting_r2ts(&mut self) {
        while self.r2t_active < self.limits.max_r2t_inflight {
            let Some(&cid) = self.r2t_waiting.front() else { return };
            let Some(p) = self.pending_data.get_mut(&cid) else {
                self.r2t_waiting.pop_front();
                continue;
            };
            // The buffer is charged when the R2T goes out; without budget
            // the R2T waits (in order) until the caller brings a permit.
            let permit = match self.r2t_credit.take() {
                Some(credit) if credit.bytes() == p.len.min(self.budget.limit()) => credit,
                _ => match self.budget.try_acquire(p.len) {
                    Some(permit) => permit,
                    None => return,
                },
            };
            self.r2t_waiting.pop_front();
            p.r2t_sent = true;
            p.buf = Some(IoBuf::recycled(p.len));
            p.permit = Some(permit);
            let r2t = R2t { cccid: cid, ttag: p.ttag, r2to: 0, r2tl: p.len as u32 };
            self.r2t_active += 1;
            self.r2t_sent_order.push_back((self.now, cid, p.ttag));
            self.out.extend_from_slice(pdu::encode_r2t(&r2t, self.digests).as_slice());
        }
    }

    fn handle_h2c_data(
        &mut self,
        h: DataHeader,
        flags: u8,
        data: &[u8],
        digest_ok: bool,
        header: &[u8],
        inputs: &mut Vec<Input>,
    ) -> Result<(), Fatal> {
        let Some(p) = self.pending_data.get_mut(&h.cccid) else {
            return Err(Fatal::new(
                fes::INVALID_HEADER_FIELD,
                pdu::DATA_CCCID_OFFSET as u32,
                header,
                format!("H2CData for command {} which awaits no data", h.cccid),
            ));
        };
        let (true, Some(buf)) = (p.r2t_sent && p.ttag == h.ttag, p.buf.as_mut()) else {
            return Err(Fatal::new(
                fes::INVALID_HEADER_FIELD,
                pdu::DATA_TTAG_OFFSET as u32,
                header,
                format!("H2CData transfer tag {} does not match an R2T for command {}", h.ttag, h.cccid),
            ));
        };
        let datao = h.datao as usize;
        if datao != p.received || datao + data.len() > p.len {
            return Err(Fatal::new(
                fes::DATA_OUT_OF_RANGE,
                pdu::DATA_OFFSET_OFFSET as u32,
                header,
                format!(
                    "H2CData offset {} length {} outside the expected window (received {} of {})",
                    h.datao,
                    data.len(),
                    p.received,
                    p.len
                ),
            ));
        }
        buf[datao..datao + data.len()].copy_from_slice(data);
        p.received += data.len();
        p.digest_failed |= !digest_ok;
        let complete = p.received == p.len;
        if complete != (flags & FLAG_DATA_LAST != 0) {
            return Err(Fatal::new(
                fes::INVALID_HEADER_FIELD,
                pdu::FLAGS_OFFSET as u32,
                header,
                "H2CData LAST_PDU flag does not match the end of the transfer",
            ));
        }
        if complete {
            let Some(p) = self.pending_data.remove(&h.cccid) else { return Ok(()) };
            self.r2t_active -= 1;
            if p.digest_failed {
                self.complete(Cqe::new(h.cccid, Status::TRANSIENT_TRANSPORT));
            } else {
                inputs.push(Input::Command(Command { sqe: p.sqe, data: p.buf, read_len: 0, permit: p.permit }));
            }
            self.send_waiting_r2ts();
        }
        Ok(())
    }

    /// Sends the completion of a command without data to return.
    pub fn complete(&mut self, mut cqe: Cqe) {
        self.set_outstanding(cqe.cid, false);
        if !self.parked_aers.is_empty() {
            self.parked_aers.retain(|&c| c != cqe.cid);
        }
        cqe.sqhd = self.sqhd;
        self.out.extend_from_slice(pdu::encode_capsule_resp(&cqe, self.digests).as_slice());
    }

    /// Sends `data` (at most what the command asked for) to the host in a
    /// C2HData PDU, then the completion. On success with SQ flow control
    /// disabled, the completion rides in the C2HData's SUCCESS flag.
    pub fn complete_with_data(&mut self, cqe: Cqe, data: &[u8]) {
        if data.is_empty() || !cqe.status.is_success() {
            self.complete(cqe);
            return;
        }
        self.c2h_data_header(&cqe, data.len());
        self.out.extend_from_slice(data);
        self.c2h_data_trailer(cqe, data);
    }

    /// As [`Transport::complete_with_data`], sending `buf` (owned or lent)
    /// without copying it; `permit` (the budget `buf` holds) is kept until
    /// it is sent.
    pub fn complete_with_buf(&mut self, cqe: Cqe, buf: ReadData, permit: Option<Permit>) {
        if buf.is_empty() || !cqe.status.is_success() {
            self.complete(cqe);
            return;
        }
        self.c2h_data_header(&cqe, buf.len());
        let digest = self.digests.data.then(|| digest_bytes(&buf));
        self.out_bufs_len += buf.len();
        self.out_bufs.push((self.out.len(), buf, permit));
        if let Some(d) = digest {
            self.out.extend_from_slice(&d);
        }
        self.c2h_data_completion(cqe);
    }

    #[inline]
    fn c2h_data_header(&mut self, cqe: &Cqe, len: usize) {
        let header = DataHeader { cccid: cqe.cid, ttag: 0, datao: 0, datal: len as u32 };
        let flags = FLAG_DATA_LAST | if self.success_flag(cqe) { FLAG_DATA_SUCCESS } else { 0 };
        // Every header ends on a dword: HPDA 0 (all hosts we know) needs
        // no padding, and the plain encoder is the cheaper one.
        let h = if self.data_align <= 4 {
            pdu::encode_c2h_data(&header, flags, self.digests)
        } else {
            pdu::encode_c2h_data_aligned(&header, flags, self.digests, self.data_align)
        };
        self.out.extend_from_slice(h.as_slice());
    }

    fn c2h_data_trailer(&mut self, cqe: Cqe, data: &[u8]) {
        if self.digests.data {
            self.out.extend_from_slice(&digest_bytes(data));
        }
        self.c2h_data_completion(cqe);
    }

    /// The SUCCESS flag may replace the CapsuleResp only with SQ flow
    /// control disabled and nothing in the completion's result.
    fn success_flag(&self, cqe: &Cqe) -> bool {
        self.sq_flow_disabled && cqe.result == 0
    }

    fn c2h_data_completion(&mut self, cqe: Cqe) {
        if self.success_flag(&cqe) {
            self.set_outstanding(cqe.cid, false);
        } else {
            self.complete(cqe);
        }
    }
}

/// Appends what of `s` is left after skipping `*skip` bytes (already
/// written), consuming the skip.
fn push_unsent<'a>(v: &mut Vec<std::io::IoSlice<'a>>, skip: &mut usize, s: &'a [u8]) {
    if *skip >= s.len() {
        *skip -= s.len();
    } else {
        v.push(std::io::IoSlice::new(&s[*skip..]));
        *skip = 0;
    }
}

fn pdu_name(p: &Pdu<'_>) -> &'static str {
    match p {
        Pdu::IcResp(_) => "ICResp",
        Pdu::C2hTermReq(_) => "C2HTermReq",
        Pdu::CapsuleResp(_) => "CapsuleResp",
        Pdu::C2hData { .. } => "C2HData",
        Pdu::R2t(_) => "R2T",
        _ => "this PDU",
    }
}

/// True for the fabrics commands a queue accepts before Connect: only
/// Connect itself.
pub fn is_connect(sqe: &Sqe) -> bool {
    sqe.opcode() == FABRICS_OPCODE && sqe.fctype() == fctype::CONNECT
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_nvme::command::SglDescriptor;
    use strata_nvme::pdu::IcReq;

    const LIMITS: TransportLimits = TransportLimits {
        in_capsule_data: 8192,
        max_h2c_data: 4096,
        max_transfer: 1 << 20,
        max_r2t_inflight: 2,
        r2t_timeout: Duration::from_secs(10),
    };

    fn ready(digests: Digests) -> Transport {
        let mut t = Transport::new(LIMITS);
        let mut rbuf = BytesMut::from(&IcReq { pfv: 0, hpda: 0, digests, maxr2t: 0 }.encode()[..]);
        let mut inputs = vec![];
        t.receive(&mut rbuf, &mut inputs, Instant::now()).unwrap();
        assert!(rbuf.is_empty() && inputs.is_empty());
        let resp = t.take_output();
        assert_eq!(resp.len(), 128);
        assert_eq!(resp[0], 0x01);
        t
    }

    fn capsule(sqe: &Sqe, data: &[u8], digests: Digests) -> Vec<u8> {
        let mut v = pdu::encode_capsule_cmd(sqe, data.len(), digests).as_slice().to_vec();
        v.extend_from_slice(data);
        if digests.data && !data.is_empty() {
            v.extend_from_slice(&digest_bytes(data));
        }
        v
    }

    fn write_sqe(cid: u16, len: u32, sgl_type: u8) -> Sqe {
        let mut sqe = Sqe::new(command::io::WRITE, cid);
        sqe.set_sgl(SglDescriptor { addr: 0, length: len, sgl_type });
        sqe
    }

    #[test]
    fn first_pdu_must_be_icreq() {
        let mut t = Transport::new(LIMITS);
        let mut rbuf = BytesMut::from(&capsule(&Sqe::new(0, 1), &[], Digests::default())[..]);
        let e = t.receive(&mut rbuf, &mut vec![], Instant::now()).unwrap_err();
        assert_eq!(e.fes, fes::PDU_SEQUENCE_ERROR);
        assert_eq!(e.term_req()[0], 0x03);
    }

    #[test]
    fn in_capsule_write_is_delivered_whole_even_when_split() {
        let mut t = ready(Digests { header: true, data: true });
        let data = vec![5u8; 4096];
        let bytes = capsule(&write_sqe(1, 4096, SGL_INCAPSULE_DATA), &data, t.digests());
        let mut inputs = vec![];
        let mut rbuf = BytesMut::new();
        for chunk in bytes.chunks(1000) {
            rbuf.extend_from_slice(chunk);
            t.receive(&mut rbuf, &mut inputs, Instant::now()).unwrap();
        }
        assert_eq!(inputs.len(), 1);
        let Input::Command(c) = &inputs[0] else { panic!() };
        assert_eq!(c.data.as_deref(), Some(&data[..]));
        assert_eq!(t.outstanding_count(), 1);
        t.complete(Cqe::new(1, Status::SUCCESS));
        assert_eq!(t.outstanding_count(), 0);
    }

    #[test]
    fn large_write_goes_through_r2t_and_h2c_data() {
        let mut t = ready(Digests::default());
        let mut inputs = vec![];
        let mut rbuf = BytesMut::from(&capsule(&write_sqe(7, 8192, SGL_TRANSPORT_DATA), &[], t.digests())[..]);
        t.receive(&mut rbuf, &mut inputs, Instant::now()).unwrap();
        assert!(inputs.is_empty());
        let out = t.take_output();
        let Some(Decoded { pdu: Pdu::R2t(r2t), .. }) = pdu::decode_pdu(&out, t.digests(), 0).unwrap() else {
            panic!("expected an R2T")
        };
        assert_eq!((r2t.cccid, r2t.r2to, r2t.r2tl), (7, 0, 8192));
        for (i, chunk) in [[1u8; 4096], [2u8; 4096]].iter().enumerate() {
            let h = DataHeader { cccid: 7, ttag: r2t.ttag, datao: (i * 4096) as u32, datal: 4096 };
            let mut v =
                pdu::encode_h2c_data(&h, if i == 1 { FLAG_DATA_LAST } else { 0 }, t.digests()).as_slice().to_vec();
            v.extend_from_slice(chunk);
            rbuf.extend_from_slice(&v);
        }
        t.receive(&mut rbuf, &mut inputs, Instant::now()).unwrap();
        let Input::Command(c) = &inputs[0] else { panic!() };
        let d = c.data.as_ref().unwrap();
        assert!(d[..4096].iter().all(|&b| b == 1) && d[4096..].iter().all(|&b| b == 2));
    }

    #[test]
    fn h2c_data_larger_than_maxh2cdata_is_fatal() {
        let mut t = ready(Digests::default());
        let mut rbuf = BytesMut::from(&capsule(&write_sqe(7, 8192, SGL_TRANSPORT_DATA), &[], t.digests())[..]);
        t.receive(&mut rbuf, &mut vec![], Instant::now()).unwrap();
        let h = DataHeader { cccid: 7, ttag: 0, datao: 0, datal: 8192 };
        let mut v = pdu::encode_h2c_data(&h, FLAG_DATA_LAST, t.digests()).as_slice().to_vec();
        v.extend_from_slice(&[0; 8192]);
        rbuf.extend_from_slice(&v);
        let e = t.receive(&mut rbuf, &mut vec![], Instant::now()).unwrap_err();
        assert_eq!(e.fes, fes::DATA_LIMIT_EXCEEDED);
    }

    #[test]
    fn h2c_data_out_of_window_is_fatal() {
        let mut t = ready(Digests::default());
        let mut rbuf = BytesMut::from(&capsule(&write_sqe(7, 4096, SGL_TRANSPORT_DATA), &[], t.digests())[..]);
        t.receive(&mut rbuf, &mut vec![], Instant::now()).unwrap();
        let h = DataHeader { cccid: 7, ttag: 0, datao: 512, datal: 4096 };
        let mut v = pdu::encode_h2c_data(&h, FLAG_DATA_LAST, t.digests()).as_slice().to_vec();
        v.extend_from_slice(&[0; 4096]);
        rbuf.extend_from_slice(&v);
        let e = t.receive(&mut rbuf, &mut vec![], Instant::now()).unwrap_err();
        assert_eq!((e.fes, e.fei), (fes::DATA_OUT_OF_RANGE, 12));
    }

    #[test]
    fn r2ts_are_capped_and_released_in_order() {
        let mut t = ready(Digests::default());
        let mut rbuf = BytesMut::new();
        for cid in 0..4 {
            rbuf.extend_from_slice(&capsule(&write_sqe(cid, 512, SGL_TRANSPORT_DATA), &[], t.digests()));
        }
        t.receive(&mut rbuf, &mut vec![], Instant::now()).unwrap();
        let out = t.take_output();
        assert_eq!(out.len(), 2 * 24, "only max_r2t_inflight R2Ts go out");
        let h = DataHeader { cccid: 0, ttag: 0, datao: 0, datal: 512 };
        let mut v = pdu::encode_h2c_data(&h, FLAG_DATA_LAST, t.digests()).as_slice().to_vec();
        v.extend_from_slice(&[0; 512]);
        rbuf.extend_from_slice(&v);
        let mut inputs = vec![];
        t.receive(&mut rbuf, &mut inputs, Instant::now()).unwrap();
        assert_eq!(inputs.len(), 1);
        let out = t.take_output();
        let Some(Decoded { pdu: Pdu::R2t(r2t), .. }) = pdu::decode_pdu(&out, t.digests(), 0).unwrap() else {
            panic!("expected the third R2T")
        };
        assert_eq!(r2t.cccid, 2);
    }

    #[test]
    fn reused_cid_is_fatal() {
        let mut t = ready(Digests::default());
        let mut rbuf = BytesMut::new();
        let mut sqe = Sqe::new(command::io::READ, 3);
        sqe.set_sgl(SglDescriptor { addr: 0, length: 4096, sgl_type: SGL_TRANSPORT_DATA });
        rbuf.extend_from_slice(&capsule(&sqe, &[], t.digests()));
        rbuf.extend_from_slice(&capsule(&sqe, &[], t.digests()));
        let mut inputs = vec![];
        let e = t.receive(&mut rbuf, &mut inputs, Instant::now()).unwrap_err();
        assert_eq!(inputs.len(), 1);
        assert_eq!((e.fes, e.fei), (fes::INVALID_HEADER_FIELD, 10));
    }

    #[test]
    fn bad_data_digest_fails_only_that_command() {
        let mut t = ready(Digests { header: false, data: true });
        let mut bytes = capsule(&write_sqe(1, 512, SGL_INCAPSULE_DATA), &[1; 512], t.digests());
        let n = bytes.len();
        bytes[n - 1] ^= 0xff;
        let mut rbuf = BytesMut::from(&bytes[..]);
        let mut inputs = vec![];
        t.receive(&mut rbuf, &mut inputs, Instant::now()).unwrap();
        assert!(inputs.is_empty());
        let out = t.take_output();
        let Some(Decoded { pdu: Pdu::CapsuleResp(cqe), .. }) = pdu::decode_pdu(&out, t.digests(), 0).unwrap() else {
            panic!()
        };
        assert_eq!(cqe.status, Status::TRANSIENT_TRANSPORT);
    }

    #[test]
    fn read_completion_uses_success_flag_only_without_sq_flow_control() {
        for disabled in [false, true] {
            let mut t = ready(Digests::default());
            t.set_queue_params(31, disabled);
            t.complete_with_data(Cqe::new(4, Status::SUCCESS), &[9; 512]);
            let out = t.take_output();
            let d = pdu::decode_pdu(&out, t.digests(), 4096).unwrap().unwrap();
            let Pdu::C2hData { flags, data, .. } = d.pdu else { panic!() };
            assert_eq!(data, &[9; 512]);
            assert_eq!(flags & FLAG_DATA_SUCCESS != 0, disabled);
            assert_eq!(out.len() - d.len, if disabled { 0 } else { 24 });
        }
    }

    #[test]
    fn a_host_overrunning_its_queue_is_terminated() {
        let mut t = ready(Digests::default());
        t.set_queue_params(3, false);
        let mut rbuf = BytesMut::new();
        for cid in 0..5 {
            let mut sqe = Sqe::new(command::io::READ, cid);
            sqe.set_sgl(SglDescriptor { addr: 0, length: 4096, sgl_type: SGL_TRANSPORT_DATA });
            rbuf.extend_from_slice(&capsule(&sqe, &[], t.digests()));
        }
        let mut inputs = vec![];
        let e = t.receive(&mut rbuf, &mut inputs, Instant::now()).unwrap_err();
        assert_eq!(inputs.len(), 4, "SQSIZE 3 allows four outstanding commands");
        assert_eq!(e.fes, fes::PDU_SEQUENCE_ERROR);
    }

    #[test]
    fn zero_copy_completion_sends_the_same_bytes_as_copying_one() {
        for (h, d, flow) in [(false, false, false), (true, true, false), (true, true, true), (false, true, true)] {
            let digests = Digests { header: h, data: d };
            let (mut a, mut b) = (ready(digests), ready(digests));
            for t in [&mut a, &mut b] {
                t.set_queue_params(31, flow);
                t.complete(Cqe::new(9, Status::SUCCESS));
            }
            let data: Vec<u8> = (0..8192u32).map(|i| i as u8).collect();
            a.complete_with_data(Cqe::new(4, Status::SUCCESS), &data);
            b.complete_with_buf(Cqe::new(4, Status::SUCCESS), IoBuf::from_slice(&data).into(), None);
            a.complete(Cqe::new(5, Status::SUCCESS));
            b.complete(Cqe::new(5, Status::SUCCESS));
            assert_eq!(a.take_output(), b.take_output());
            assert!(!b.has_output());
        }
    }

    /// Lends slices of a fixed byte string and counts open leases.
    struct TestLender {
        data: Vec<u8>,
        leases: std::sync::atomic::AtomicUsize,
    }

    // SAFETY: `data` is never modified after construction.
    unsafe impl strata_block::Lender for TestLender {
        fn release(&self, _tag: u64) {
            self.leases.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }

    fn lend(l: &std::sync::Arc<TestLender>, off: usize, len: usize) -> ReadData {
        l.leases.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let ptr = std::ptr::NonNull::from(&l.data[off]);
        // SAFETY: `data` is immutable and lives as long as the Arc.
        ReadData::Lent(unsafe { strata_block::Lent::new(ptr, len, 0, l.clone()) })
    }

    #[test]
    fn partial_writes_and_materialize_keep_the_byte_stream() {
        use std::sync::atomic::Ordering::Acquire;
        let lender =
            std::sync::Arc::new(TestLender { data: (0..20000u32).map(|i| (i * 7) as u8).collect(), leases: 0.into() });
        let fill = |t: &mut Transport| {
            t.set_queue_params(31, false);
            t.complete_with_buf(Cqe::new(1, Status::SUCCESS), lend(&lender, 100, 4096), None);
            t.complete_with_buf(Cqe::new(2, Status::SUCCESS), IoBuf::from_slice(&lender.data[..512]).into(), None);
            t.complete(Cqe::new(3, Status::SUCCESS));
            t.complete_with_buf(Cqe::new(4, Status::SUCCESS), lend(&lender, 9000, 8192), None);
        };
        let mut whole = ready(Digests { header: true, data: true });
        fill(&mut whole);
        let expected = whole.take_output();
        assert_eq!(lender.leases.load(Acquire), 0, "clearing the output ends the leases");
        // Write the output in uneven pieces, materializing half way at
        // every split point: the bytes on the wire must not change.
        for step in [1usize, 7, 100, 4096, 5000, 20000] {
            let mut t = ready(Digests { header: true, data: true });
            fill(&mut t);
            assert_eq!(t.output_len(), expected.len());
            let mut wire = Vec::new();
            let mut rounds = 0;
            while t.has_output() {
                let chunk: Vec<u8> = t.output_slices().iter().flat_map(|s| s.iter().copied()).take(step).collect();
                wire.extend_from_slice(&chunk);
                t.consume(chunk.len());
                rounds += 1;
                if rounds == 3 {
                    t.materialize();
                    assert_eq!(lender.leases.load(Acquire), 0, "materialize ends every lease");
                }
            }
            assert_eq!(wire, expected, "step {step}");
            assert_eq!(lender.leases.load(Acquire), 0);
        }
    }

    #[test]
    fn a_parked_aer_cid_may_be_reused_and_is_retired() {
        let mut t = ready(Digests::default());
        let mut rbuf = BytesMut::from(&capsule(&Sqe::new(0x0c, 3), &[], t.digests())[..]);
        let mut inputs = vec![];
        t.receive(&mut rbuf, &mut inputs, Instant::now()).unwrap();
        assert_eq!(inputs.len(), 1);
        t.park_aer(3);
        inputs.clear();
        rbuf.extend_from_slice(&capsule(&Sqe::new(0x18, 3), &[], t.digests()));
        t.receive(&mut rbuf, &mut inputs, Instant::now()).expect("reuse of a parked AER's CID is allowed");
        assert!(matches!(inputs[0], Input::AerRetired(3)));
        assert!(matches!(&inputs[1], Input::Command(c) if c.sqe.cid() == 3));
        assert_eq!(t.outstanding_count(), 1, "the AER left, the new command counts");
        // A completed AER is no longer parked: its CID is an ordinary one.
        t.complete(Cqe::new(3, Status::SUCCESS));
        t.park_aer(4);
        t.complete(Cqe::new(4, Status::SUCCESS));
        inputs.clear();
        rbuf.extend_from_slice(&capsule(&Sqe::new(0x18, 4), &[], t.digests()));
        t.receive(&mut rbuf, &mut inputs, Instant::now()).unwrap();
        assert!(matches!(&inputs[..], [Input::Command(_)]));
    }

    #[test]
    fn r2ts_wait_for_budget_and_input_never_does() {
        let budget = Budget::new(8192);
        let mut t = Transport::with_budget(LIMITS, budget.clone());
        let mut rbuf = BytesMut::from(&IcReq { pfv: 0, hpda: 0, digests: Digests::default(), maxr2t: 0 }.encode()[..]);
        t.receive(&mut rbuf, &mut vec![], Instant::now()).unwrap();
        t.take_output();
        let held = budget.try_acquire(8192).unwrap();
        // An R2T write: no R2T while the budget is spent...
        rbuf.extend_from_slice(&capsule(&write_sqe(3, 8192, SGL_TRANSPORT_DATA), &[], t.digests()));
        // ...and the input behind it is still read: an in-capsule write.
        rbuf.extend_from_slice(&capsule(&write_sqe(4, 4096, SGL_INCAPSULE_DATA), &[7; 4096], t.digests()));
        let mut inputs = vec![];
        t.receive(&mut rbuf, &mut inputs, Instant::now()).unwrap();
        assert!(rbuf.is_empty());
        assert!(matches!(&inputs[..], [Input::Command(c)] if c.sqe.cid() == 4));
        assert!(t.take_output().is_empty(), "no R2T without budget");
        assert_eq!(t.r2t_blocked_on(), Some(8192));
        assert_eq!(t.r2t_deadline(), None, "no deadline runs for an R2T not sent");
        drop(held);
        let credit = budget.try_acquire(8192).unwrap();
        t.send_r2ts(credit, Instant::now());
        assert_eq!(t.take_output().len(), 24, "the R2T goes out with the credit");
        assert_eq!(budget.used(), 8192);
        assert_eq!(t.r2t_blocked_on(), None);
    }

    #[test]
    fn an_r2t_without_data_times_out() {
        let mut t = ready(Digests::default());
        let start = Instant::now();
        let mut rbuf = BytesMut::from(&capsule(&write_sqe(7, 8192, SGL_TRANSPORT_DATA), &[], t.digests())[..]);
        t.receive(&mut rbuf, &mut vec![], start).unwrap();
        assert_eq!(t.r2t_deadline(), Some(start + LIMITS.r2t_timeout));
        assert!(t.check_timeouts(start + LIMITS.r2t_timeout / 2).is_ok());
        let e = t.check_timeouts(start + LIMITS.r2t_timeout).unwrap_err();
        assert!(e.reason.contains("command 7"), "{}", e.reason);
        // Data that arrives in time clears the deadline.
        let mut t = ready(Digests::default());
        let write = capsule(&write_sqe(7, 4096, SGL_TRANSPORT_DATA), &[], t.digests());
        t.receive(&mut BytesMut::from(&write[..]), &mut vec![], start).unwrap();
        let h = DataHeader { cccid: 7, ttag: 0, datao: 0, datal: 4096 };
        let mut v = pdu::encode_h2c_data(&h, FLAG_DATA_LAST, t.digests()).as_slice().to_vec();
        v.extend_from_slice(&[0; 4096]);
        t.receive(&mut BytesMut::from(&v[..]), &mut vec![], start).unwrap();
        assert_eq!(t.r2t_deadline(), None);
    }

    #[test]
    fn host_term_req_closes() {
        let mut t = ready(Digests::default());
        let mut rbuf = BytesMut::from(&pdu::encode_term_req(PduType::H2C_TERM_REQ, 1, 0, &[])[..]);
        let mut inputs = vec![];
        t.receive(&mut rbuf, &mut inputs, Instant::now()).unwrap();
        assert!(matches!(inputs[0], Input::Closed(Closed::HostTerminated { fes: 1 })));
    }
}
