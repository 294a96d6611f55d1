//! The host side of the NVMe/TCP transport for one queue, sans I/O.
//!
//! [`QueueProto`] turns commands into the bytes to send and received bytes
//! into completions. It never touches a socket or a clock: the driver in
//! [`crate::queue`] feeds it with [`QueueProto::submit`] and
//! [`QueueProto::receive`], writes what [`QueueProto::take_output`] hands
//! out, and delivers what [`QueueProto::take_done`] returns. Each pending
//! command carries an opaque token `T` (the driver's reply channel; a
//! number in the unit tests).
//!
//! What it owns:
//! - command identifiers: a free list sized to the queue depth; a CID is
//!   reused only after its completion arrived;
//! - the host-to-controller data flow: in-capsule data up to the queue's
//!   in-capsule limit, else a transport SGL, answering each R2T with
//!   H2CData PDUs split at MAXH2CDATA, the last one of each R2T flagged
//!   LAST_PDU;
//! - the controller-to-host data flow: C2HData PDUs checked against the
//!   command they name (in order, inside the requested length), the
//!   SUCCESS flag (completion without a CapsuleResp), data digests;
//! - PDU validation: every length from the controller is checked by
//!   [`PduLayout::new`] against the negotiated digests and a data limit
//!   before it is used.
//!
//! Invariants between calls:
//! - `slots[cid]` is `Some` exactly for CIDs submitted and not completed,
//!   and those CIDs are not in `free`;
//! - `solicited <= data_out.len()` and `received <= read_len` for every
//!   pending command;
//! - after `receive` returns a [`Fatal`], the queue is dead: the driver
//!   sends the H2CTermReq (if any), closes the socket and fails the
//!   pending tokens with [`QueueProto::fail_all`].
//!
//! Outgoing bytes are kept as a list of [`Bytes`] segments so that write
//! payloads go to the socket without being copied: small headers are
//! packed into one scratch buffer, and the caller's data buffers (or
//! slices of them, for H2CData) sit between them.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use strata_nvme::command::{self, SGL_INCAPSULE_DATA, SGL_TRANSPORT_DATA, SglDescriptor, Sqe};
use strata_nvme::completion::{self, Cqe};
use strata_nvme::digest::digest_bytes;
use strata_nvme::pdu::{
    self, CommonHeader, DataHeader, Digests, FLAG_DATA_LAST, FLAG_DATA_SUCCESS, IC_LEN, IcReq, IcResp, Pdu, PduError,
    PduLayout, PduType, R2t, fes,
};
use strata_nvme::status::Status;

use crate::error::{HostError, QueueFailure};

/// Writes smaller than this are copied next to their header instead of
/// being sent as a separate segment.
const SMALL_DATA_COPY: usize = 512;
/// Scratch space added to the header buffer when it runs low.
const HDR_CHUNK: usize = 16 * 1024;
/// Smallest MAXH2CDATA a controller may report (NVMe/TCP 1.0, ICResp).
pub(crate) const MIN_MAXH2CDATA: u32 = 4096;

/// One command to send.
#[derive(Debug, Clone)]
pub(crate) struct Command {
    /// The SQE; its CID and SGL are filled in on submission.
    pub(crate) sqe: Sqe,
    /// Host-to-controller data.
    pub(crate) data_out: Option<Bytes>,
    /// Controller-to-host bytes expected (0 for none).
    pub(crate) read_len: usize,
}

impl Command {
    pub(crate) fn new(sqe: Sqe) -> Command {
        Command { sqe, data_out: None, read_len: 0 }
    }
}

/// A completed command: its completion entry and the data it returned.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    /// The completion queue entry (for the SUCCESS-flag path, a synthesized
    /// success entry with a zero result).
    pub(crate) cqe: Cqe,
    /// Controller-to-host data (empty for commands without any).
    pub(crate) data: Bytes,
}

/// Transfer limits of one queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Most in-capsule data bytes per command.
    pub(crate) in_capsule: usize,
    /// MAXH2CDATA from ICResp.
    pub(crate) max_h2c_data: usize,
    /// Most data bytes accepted in one C2HData PDU (the transfer limit).
    pub(crate) max_c2h_data: usize,
}

/// A fatal protocol error: the queue is dead.
#[derive(Debug)]
pub(crate) struct Fatal {
    /// Why.
    pub(crate) cause: QueueFailure,
    /// The H2CTermReq to send before closing, when the controller is owed
    /// one (not after its own C2HTermReq).
    pub(crate) term_req: Option<Vec<u8>>,
}

impl Fatal {
    fn new(fes: u16, fei: u32, header: &[u8], cause: QueueFailure) -> Fatal {
        Fatal { cause, term_req: Some(pdu::encode_term_req(PduType::H2C_TERM_REQ, fes, fei, header)) }
    }

    fn protocol(fes: u16, fei: usize, header: &[u8], reason: String) -> Fatal {
        Fatal::new(fes, fei as u32, header, QueueFailure::Protocol(reason))
    }

    fn malformed(e: PduError, header: &[u8]) -> Fatal {
        Fatal::new(e.fes(), e.fei(), header, QueueFailure::Malformed(e))
    }
}

#[derive(Debug)]
enum ReadData {
    /// Nothing received yet.
    Empty,
    /// The whole transfer arrived in one PDU: a view of the receive buffer.
    Whole(Bytes),
    /// Pieces copied together.
    Pieces(BytesMut),
}

impl ReadData {
    fn len(&self) -> usize {
        match self {
            ReadData::Empty => 0,
            ReadData::Whole(b) => b.len(),
            ReadData::Pieces(b) => b.len(),
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            ReadData::Empty => Bytes::new(),
            ReadData::Whole(b) => b,
            ReadData::Pieces(b) => b.freeze(),
        }
    }
}

#[derive(Debug)]
struct Slot<T> {
    token: T,
    /// Data still to be sent on R2T (transport SGL writes only).
    data_out: Option<Bytes>,
    /// Bytes of `data_out` requested by R2Ts so far.
    solicited: usize,
    read_len: usize,
    read: ReadData,
    digest_failed: bool,
}

/// The offsets, lengths and LAST flags of the H2CData PDUs that answer an
/// R2T for `r2tl` bytes at `r2to`, at most `max` bytes each.
pub(crate) fn h2c_chunks(r2to: usize, r2tl: usize, max: usize) -> impl Iterator<Item = (usize, usize, bool)> {
    let end = r2to + r2tl;
    (r2to..end).step_by(max.max(1)).map(move |off| {
        let n = max.max(1).min(end - off);
        (off, n, off + n == end)
    })
}

/// The ICReq this host sends: PFV 0, no PDU data alignment, one R2T per
/// command (MAXR2T is 0-based).
pub(crate) fn ic_req(digests: Digests) -> [u8; IC_LEN] {
    IcReq { pfv: 0, hpda: 0, digests, maxr2t: 0 }.encode()
}

/// Checks an ICResp's parameters against what this host supports.
///
/// # Errors
///
/// [`HostError::Handshake`] when the controller asks for PDU data
/// alignment (CPDA) or reports a MAXH2CDATA below 4096.
pub(crate) fn check_ic_resp(resp: &IcResp) -> Result<(), HostError> {
    if resp.cpda != 0 {
        return Err(HostError::Handshake(format!(
            "controller requires PDU data alignment (CPDA {}), which this host does not implement",
            resp.cpda
        )));
    }
    if resp.maxh2cdata < MIN_MAXH2CDATA {
        return Err(HostError::Handshake(format!("MAXH2CDATA {} is below the minimum of 4096", resp.maxh2cdata)));
    }
    Ok(())
}

/// Host-side NVMe/TCP state of one queue.
pub(crate) struct QueueProto<T> {
    qid: u16,
    digests: Digests,
    limits: Limits,
    slots: Vec<Option<Slot<T>>>,
    free: Vec<u16>,
    in_flight: usize,
    hdr: BytesMut,
    out: Vec<Bytes>,
    done: Vec<(T, Result<Response, HostError>)>,
    want: usize,
}

impl<T> QueueProto<T> {
    /// A queue of `depth` command slots (at least 1) after a successful
    /// ICReq/ICResp exchange that negotiated `digests`.
    pub(crate) fn new(qid: u16, depth: u16, digests: Digests, limits: Limits) -> QueueProto<T> {
        let depth = depth.max(1);
        QueueProto {
            qid,
            digests,
            limits: Limits { max_h2c_data: limits.max_h2c_data.max(1), ..limits },
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
            in_flight: 0,
            hdr: BytesMut::with_capacity(HDR_CHUNK),
            out: Vec::new(),
            done: Vec::new(),
            want: pdu::CH_LEN,
        }
    }

    /// True when another command can be submitted.
    pub(crate) fn has_free_slot(&self) -> bool {
        !self.free.is_empty()
    }

    /// Commands submitted and not completed.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Length of the PDU at the front of the receive buffer, once its
    /// header has been validated (else the common header length): the
    /// driver sizes its reads with it.
    pub(crate) fn want(&self) -> usize {
        self.want
    }

    /// Queues `cmd` for sending and returns its CID. Fails (handing both
    /// back) only when no command slot is free. A command whose lengths
    /// cannot be encoded is completed at once with an error in
    /// [`QueueProto::take_done`] and gets no CID (`Ok(None)`).
    pub(crate) fn submit(&mut self, token: T, cmd: Command) -> Result<Option<u16>, (T, Command)> {
        let out_len = cmd.data_out.as_ref().map_or(0, Bytes::len);
        if u32::try_from(out_len).is_err() || u32::try_from(cmd.read_len).is_err() || (out_len > 0 && cmd.read_len > 0)
        {
            let e = HostError::InvalidArgument(format!(
                "a command moves data one way, at most 4 GiB (asked: {out_len} out, {} in)",
                cmd.read_len
            ));
            self.done.push((token, Err(e)));
            return Ok(None);
        }
        let Some(cid) = self.free.pop() else { return Err((token, cmd)) };
        let mut sqe = cmd.sqe;
        sqe.set_cid(cid);
        sqe.bytes_mut()[command::FLAGS_OFFSET] = (sqe.flags() & !0xC0) | command::PSDT_SGL;
        let mut slot = Slot {
            token,
            data_out: None,
            solicited: 0,
            read_len: cmd.read_len,
            read: ReadData::Empty,
            digest_failed: false,
        };
        self.reserve_hdr();
        match cmd.data_out {
            Some(data) if !data.is_empty() && data.len() <= self.limits.in_capsule => {
                // The SGL address of in-capsule data is its offset in the
                // capsule's data (ICDOFF is 0).
                sqe.set_sgl(SglDescriptor { addr: 0, length: data.len() as u32, sgl_type: SGL_INCAPSULE_DATA });
                self.hdr.put_slice(pdu::encode_capsule_cmd(&sqe, data.len(), self.digests).as_slice());
                self.push_data(data);
            }
            Some(data) if !data.is_empty() => {
                sqe.set_sgl(SglDescriptor { addr: 0, length: data.len() as u32, sgl_type: SGL_TRANSPORT_DATA });
                self.hdr.put_slice(pdu::encode_capsule_cmd(&sqe, 0, self.digests).as_slice());
                slot.data_out = Some(data);
            }
            _ => {
                sqe.set_sgl(SglDescriptor { addr: 0, length: cmd.read_len as u32, sgl_type: SGL_TRANSPORT_DATA });
                self.hdr.put_slice(pdu::encode_capsule_cmd(&sqe, 0, self.digests).as_slice());
            }
        }
        self.slots[usize::from(cid)] = Some(slot);
        self.in_flight += 1;
        Ok(Some(cid))
    }

    fn reserve_hdr(&mut self) {
        if self.hdr.capacity() - self.hdr.len() < pdu::MAX_HEADER_LEN + SMALL_DATA_COPY + 8 {
            self.hdr.reserve(HDR_CHUNK);
        }
    }

    /// Appends a data payload (and its digest) after the headers so far.
    fn push_data(&mut self, data: Bytes) {
        let digest = self.digests.data.then(|| digest_bytes(&data));
        if data.len() <= SMALL_DATA_COPY {
            self.hdr.put_slice(&data);
        } else {
            if !self.hdr.is_empty() {
                self.out.push(self.hdr.split().freeze());
            }
            self.out.push(data);
        }
        if let Some(d) = digest {
            self.reserve_hdr();
            self.hdr.put_slice(&d);
        }
    }

    /// Moves the bytes to send, in order, to the end of `out`.
    pub(crate) fn take_output(&mut self, out: &mut std::collections::VecDeque<Bytes>) {
        out.extend(self.out.drain(..));
        if !self.hdr.is_empty() {
            out.push_back(self.hdr.split().freeze());
        }
    }

    /// Completed commands since the last call.
    pub(crate) fn take_done(&mut self) -> std::vec::Drain<'_, (T, Result<Response, HostError>)> {
        self.done.drain(..)
    }

    /// Drops every pending command and returns their tokens.
    pub(crate) fn fail_all(&mut self) -> Vec<T> {
        let mut tokens = Vec::with_capacity(self.in_flight);
        for (cid, slot) in self.slots.iter_mut().enumerate() {
            if let Some(s) = slot.take() {
                tokens.push(s.token);
                self.free.push(cid as u16);
            }
        }
        self.in_flight = 0;
        tokens
    }

    /// Consumes every whole PDU in `rbuf`; a partial PDU stays for later.
    ///
    /// # Errors
    ///
    /// A [`Fatal`] error: the queue must be closed.
    pub(crate) fn receive(&mut self, rbuf: &mut BytesMut) -> Result<(), Fatal> {
        loop {
            let Some(ch) = CommonHeader::parse(rbuf) else {
                self.want = pdu::CH_LEN;
                return Ok(());
            };
            let max_data = if ch.pdu_type == PduType::C2H_DATA { self.limits.max_c2h_data } else { 0 };
            let header_len = ch.pdu_type.hlen().unwrap_or(pdu::CH_LEN).min(rbuf.len());
            let layout =
                PduLayout::new(ch, self.digests, max_data).map_err(|e| Fatal::malformed(e, &rbuf[..header_len]))?;
            if rbuf.len() < layout.total {
                self.want = layout.total;
                return Ok(());
            }
            self.want = pdu::CH_LEN;
            if ch.pdu_type == PduType::C2H_DATA {
                // Split the PDU off so that its data can leave as a view.
                let bytes = rbuf.split_to(layout.total).freeze();
                self.on_c2h_data(&layout, bytes)?;
                continue;
            }
            let res = match pdu::decode_pdu(&rbuf[..layout.total], self.digests, max_data) {
                Ok(Some(d)) => self.on_pdu(d.pdu, &rbuf[..header_len]),
                // The layout said the whole PDU is here.
                Ok(None) => Err(Fatal::protocol(fes::INVALID_HEADER_FIELD, pdu::PLEN_OFFSET, &[], "short PDU".into())),
                Err(e) => Err(Fatal::malformed(e, &rbuf[..header_len])),
            };
            rbuf.advance(layout.total);
            res?;
        }
    }

    fn on_pdu(&mut self, p: Pdu<'_>, header: &[u8]) -> Result<(), Fatal> {
        match p {
            Pdu::CapsuleResp(cqe) => self.on_completion(cqe, header),
            Pdu::R2t(r2t) => self.on_r2t(r2t, header),
            Pdu::C2hTermReq(t) => {
                Err(Fatal { cause: QueueFailure::Terminated { fes: t.fes, fei: t.fei }, term_req: None })
            }
            other => Err(Fatal::protocol(
                fes::INVALID_HEADER_FIELD,
                pdu::TYPE_OFFSET,
                header,
                format!("a controller must not send {}", pdu_name(&other)),
            )),
        }
    }

    fn slot_mut(&mut self, cid: u16) -> Option<&mut Slot<T>> {
        self.slots.get_mut(usize::from(cid)).and_then(Option::as_mut)
    }

    fn on_completion(&mut self, cqe: Cqe, header: &[u8]) -> Result<(), Fatal> {
        let cid = cqe.cid;
        let Some(slot) = self.slots.get_mut(usize::from(cid)).and_then(Option::take) else {
            return Err(Fatal::protocol(
                fes::INVALID_HEADER_FIELD,
                pdu::CH_LEN + completion::CID_OFFSET,
                header,
                format!("completion for command {cid}, which is not outstanding"),
            ));
        };
        self.free.push(cid);
        self.in_flight -= 1;
        let qid = self.qid;
        let received = slot.read.len();
        let result = if slot.digest_failed {
            Err(HostError::DataDigest { qid, cid })
        } else if cqe.status.is_success() && received < slot.read_len {
            Err(HostError::ShortTransfer { qid, cid, expected: slot.read_len, received })
        } else {
            Ok(Response { cqe, data: slot.read.into_bytes() })
        };
        self.done.push((slot.token, result));
        Ok(())
    }

    fn on_r2t(&mut self, r2t: R2t, header: &[u8]) -> Result<(), Fatal> {
        let cid = r2t.cccid;
        let Some(slot) = self.slot_mut(cid) else {
            return Err(Fatal::protocol(
                fes::INVALID_HEADER_FIELD,
                pdu::DATA_CCCID_OFFSET,
                header,
                format!("R2T for command {cid}, which is not outstanding"),
            ));
        };
        let Some(data) = slot.data_out.clone() else {
            return Err(Fatal::protocol(
                fes::INVALID_HEADER_FIELD,
                pdu::DATA_CCCID_OFFSET,
                header,
                format!("R2T for command {cid}, which has no data to transfer"),
            ));
        };
        let (off, len) = (r2t.r2to as usize, r2t.r2tl as usize);
        if len == 0 || off != slot.solicited || off + len > data.len() {
            return Err(Fatal::protocol(
                fes::DATA_OUT_OF_RANGE,
                pdu::DATA_OFFSET_OFFSET,
                header,
                format!(
                    "R2T for {len} bytes at {off} of command {cid}: expected offset {} within {} bytes",
                    slot.solicited,
                    data.len()
                ),
            ));
        }
        slot.solicited += len;
        if slot.solicited == data.len() {
            // Nothing more will be asked for; let the buffer go early.
            slot.data_out = None;
        }
        for (o, n, last) in h2c_chunks(off, len, self.limits.max_h2c_data) {
            let h = DataHeader { cccid: cid, ttag: r2t.ttag, datao: o as u32, datal: n as u32 };
            self.reserve_hdr();
            let flags = if last { FLAG_DATA_LAST } else { 0 };
            self.hdr.put_slice(pdu::encode_h2c_data(&h, flags, self.digests).as_slice());
            self.push_data(data.slice(o..o + n));
        }
        Ok(())
    }

    fn on_c2h_data(&mut self, layout: &PduLayout, bytes: Bytes) -> Result<(), Fatal> {
        let header = &bytes[..layout.hlen.min(bytes.len())];
        let d = match pdu::decode_pdu(&bytes, self.digests, self.limits.max_c2h_data) {
            Ok(Some(d)) => d,
            Ok(None) => {
                return Err(Fatal::protocol(fes::INVALID_HEADER_FIELD, pdu::PLEN_OFFSET, header, "short PDU".into()));
            }
            Err(e) => return Err(Fatal::malformed(e, header)),
        };
        let Pdu::C2hData { header: h, flags, .. } = d.pdu else {
            return Err(Fatal::protocol(fes::INVALID_HEADER_FIELD, pdu::TYPE_OFFSET, header, "not C2HData".into()));
        };
        let cid = h.cccid;
        let Some(slot) = self.slots.get_mut(usize::from(cid)).and_then(Option::as_mut) else {
            return Err(Fatal::protocol(
                fes::INVALID_HEADER_FIELD,
                pdu::DATA_CCCID_OFFSET,
                header,
                format!("C2HData for command {cid}, which is not outstanding"),
            ));
        };
        let (datao, datal) = (h.datao as usize, h.datal as usize);
        let received = slot.read.len();
        if slot.read_len == 0 || datao != received || datao + datal > slot.read_len {
            return Err(Fatal::protocol(
                fes::DATA_OUT_OF_RANGE,
                pdu::DATA_OFFSET_OFFSET,
                header,
                format!(
                    "C2HData of {datal} bytes at {datao} for command {cid}: expected offset {received} within {} bytes",
                    slot.read_len
                ),
            ));
        }
        let last = flags & FLAG_DATA_LAST != 0;
        let success = flags & FLAG_DATA_SUCCESS != 0;
        if last != (datao + datal == slot.read_len) || (success && !last) {
            return Err(Fatal::protocol(
                fes::INVALID_HEADER_FIELD,
                pdu::FLAGS_OFFSET,
                header,
                format!("C2HData flags {flags:#x} do not match the end of command {cid}'s transfer"),
            ));
        }
        slot.digest_failed |= !d.data_digest_ok;
        let data = bytes.slice(layout.data_offset..layout.data_offset + layout.data_len);
        slot.read = match std::mem::replace(&mut slot.read, ReadData::Empty) {
            ReadData::Empty if datal == slot.read_len => ReadData::Whole(data),
            ReadData::Empty => {
                let mut b = BytesMut::with_capacity(slot.read_len);
                b.extend_from_slice(&data);
                ReadData::Pieces(b)
            }
            ReadData::Pieces(mut b) => {
                b.extend_from_slice(&data);
                ReadData::Pieces(b)
            }
            // A whole transfer leaves no room: the range check above failed.
            whole @ ReadData::Whole(_) => whole,
        };
        if success {
            let mut cqe = Cqe::new(cid, Status::SUCCESS);
            cqe.sqid = self.qid;
            return self.on_completion(cqe, &[]);
        }
        Ok(())
    }
}

fn pdu_name(p: &Pdu<'_>) -> &'static str {
    match p {
        Pdu::IcReq(_) => "ICReq",
        Pdu::IcResp(_) => "ICResp",
        Pdu::H2cTermReq(_) => "H2CTermReq",
        Pdu::CapsuleCmd { .. } => "CapsuleCmd",
        Pdu::H2cData { .. } => "H2CData",
        _ => "this PDU",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use strata_nvme::command::io;
    use strata_nvme::pdu::{Decoded, encode_c2h_data, encode_capsule_resp, encode_r2t, encode_term_req};

    const LIMITS: Limits = Limits { in_capsule: 8192, max_h2c_data: 4096, max_c2h_data: 1 << 20 };
    const ALL: Digests = Digests { header: true, data: true };

    fn output<T>(p: &mut QueueProto<T>) -> Vec<u8> {
        let mut out = VecDeque::new();
        p.take_output(&mut out);
        out.iter().flat_map(|b| b.iter().copied()).collect()
    }

    /// Decodes every PDU in `b` as the controller would.
    fn pdus(b: &[u8], digests: Digests) -> Vec<(Vec<u8>, bool)> {
        let mut v = vec![];
        let mut off = 0;
        while off < b.len() {
            let d: Decoded<'_> = pdu::decode_pdu(&b[off..], digests, 1 << 20).unwrap().unwrap();
            v.push((b[off..off + d.len].to_vec(), d.data_digest_ok));
            off += d.len;
        }
        v
    }

    fn with_data(header: pdu::HeaderBuf, data: &[u8], digests: Digests) -> Vec<u8> {
        let mut v = header.as_slice().to_vec();
        v.extend_from_slice(data);
        if digests.data && !data.is_empty() {
            v.extend_from_slice(&digest_bytes(data));
        }
        v
    }

    fn write_cmd(len: usize) -> Command {
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        Command { sqe: Sqe::new(io::WRITE, 0), data_out: Some(data.into()), read_len: 0 }
    }

    #[test]
    fn h2c_chunks_split_at_maxh2cdata_and_flag_the_last() {
        let v: Vec<_> = h2c_chunks(0, 10000, 4096).collect();
        assert_eq!(v, vec![(0, 4096, false), (4096, 4096, false), (8192, 1808, true)]);
        let v: Vec<_> = h2c_chunks(8192, 4096, 4096).collect();
        assert_eq!(v, vec![(8192, 4096, true)]);
        assert_eq!(h2c_chunks(0, 0, 4096).count(), 0);
    }

    #[test]
    fn small_writes_go_in_capsule_large_ones_wait_for_r2t() {
        for digests in [Digests::default(), ALL] {
            let mut p = QueueProto::<u32>::new(1, 4, digests, LIMITS);
            let cid = p.submit(7, write_cmd(8192)).unwrap().unwrap();
            let out = output(&mut p);
            let v = pdus(&out, digests);
            assert_eq!(v.len(), 1);
            let d = pdu::decode_pdu(&v[0].0, digests, 8192).unwrap().unwrap();
            let Pdu::CapsuleCmd { sqe, data } = d.pdu else { panic!() };
            assert_eq!((sqe.cid(), sqe.sgl().sgl_type, sqe.sgl().length, data.len()), (cid, 0x01, 8192, 8192));
            assert!(v[0].1, "data digest");

            let cid2 = p.submit(8, write_cmd(8193)).unwrap().unwrap();
            assert_ne!(cid, cid2);
            let v = pdus(&output(&mut p), digests);
            let d = pdu::decode_pdu(&v[0].0, digests, 0).unwrap().unwrap();
            let Pdu::CapsuleCmd { sqe, data } = d.pdu else { panic!() };
            assert_eq!((sqe.sgl().sgl_type, sqe.sgl().length, data.len()), (0x5A, 8193, 0));
            assert_eq!(p.in_flight(), 2);
        }
    }

    #[test]
    fn r2t_is_answered_with_h2c_data_split_at_maxh2cdata() {
        for digests in [Digests::default(), ALL] {
            let mut p = QueueProto::<u32>::new(1, 4, digests, LIMITS);
            let cmd = write_cmd(10000);
            let expected = cmd.data_out.clone().unwrap();
            let cid = p.submit(1, cmd).unwrap().unwrap();
            output(&mut p);
            let mut rbuf =
                BytesMut::from(encode_r2t(&R2t { cccid: cid, ttag: 9, r2to: 0, r2tl: 10000 }, digests).as_slice());
            p.receive(&mut rbuf).unwrap();
            assert!(rbuf.is_empty());
            let v = pdus(&output(&mut p), digests);
            assert_eq!(v.len(), 3);
            let mut got = vec![];
            for (i, (b, ok)) in v.iter().enumerate() {
                assert!(ok);
                let d = pdu::decode_pdu(b, digests, 4096).unwrap().unwrap();
                let Pdu::H2cData { header, flags, data } = d.pdu else { panic!() };
                assert_eq!((header.cccid, header.ttag, header.datao as usize), (cid, 9, got.len()));
                assert_eq!(flags & FLAG_DATA_LAST != 0, i == 2);
                got.extend_from_slice(data);
            }
            assert_eq!(&got[..], &expected[..]);
            // A second R2T once everything was asked for is a protocol error.
            let mut rbuf =
                BytesMut::from(encode_r2t(&R2t { cccid: cid, ttag: 9, r2to: 0, r2tl: 10 }, digests).as_slice());
            let f = p.receive(&mut rbuf).unwrap_err();
            let t = f.term_req.unwrap();
            assert_eq!((t[0], u16::from_le_bytes([t[8], t[9]])), (0x02, fes::INVALID_HEADER_FIELD));
        }
    }

    #[test]
    fn r2t_outside_the_data_is_out_of_range() {
        for (r2to, r2tl) in [(4096, 4096), (0, 10001), (0, 0)] {
            let mut p = QueueProto::<u32>::new(1, 4, Digests::default(), LIMITS);
            let cid = p.submit(1, write_cmd(10000)).unwrap().unwrap();
            let mut rbuf =
                BytesMut::from(encode_r2t(&R2t { cccid: cid, ttag: 1, r2to, r2tl }, Digests::default()).as_slice());
            let t = p.receive(&mut rbuf).unwrap_err().term_req.unwrap();
            assert_eq!(u16::from_le_bytes([t[8], t[9]]), fes::DATA_OUT_OF_RANGE);
        }
    }

    #[test]
    fn read_data_in_pieces_then_capsule_resp() {
        let digests = ALL;
        let mut p = QueueProto::<u32>::new(1, 4, digests, LIMITS);
        let cid = p.submit(5, Command { sqe: Sqe::new(io::READ, 0), data_out: None, read_len: 12 }).unwrap().unwrap();
        let v = pdus(&output(&mut p), digests);
        let Pdu::CapsuleCmd { sqe, .. } = pdu::decode_pdu(&v[0].0, digests, 0).unwrap().unwrap().pdu else { panic!() };
        assert_eq!((sqe.sgl().sgl_type, sqe.sgl().length), (0x5A, 12));
        let mut wire = with_data(
            encode_c2h_data(&DataHeader { cccid: cid, ttag: 0, datao: 0, datal: 5 }, 0, digests),
            b"hello",
            digests,
        );
        wire.extend(with_data(
            encode_c2h_data(&DataHeader { cccid: cid, ttag: 0, datao: 5, datal: 7 }, FLAG_DATA_LAST, digests),
            b", world",
            digests,
        ));
        wire.extend_from_slice(encode_capsule_resp(&Cqe::new(cid, Status::SUCCESS), digests).as_slice());
        // Feed one byte at a time: partial PDUs are "need more", never errors.
        let mut rbuf = BytesMut::new();
        for b in wire {
            rbuf.put_u8(b);
            p.receive(&mut rbuf).unwrap();
        }
        let done: Vec<_> = p.take_done().collect();
        assert_eq!(done.len(), 1);
        let (tok, res) = &done[0];
        assert_eq!(*tok, 5);
        assert_eq!(&res.as_ref().unwrap().data[..], b"hello, world");
        assert_eq!(p.in_flight(), 0);
        assert!(p.has_free_slot());
    }

    #[test]
    fn success_flag_completes_without_capsule_resp() {
        let mut p = QueueProto::<u32>::new(1, 1, Digests::default(), LIMITS);
        let cid = p.submit(1, Command { sqe: Sqe::new(io::READ, 0), data_out: None, read_len: 4 }).unwrap().unwrap();
        assert!(!p.has_free_slot());
        let h = DataHeader { cccid: cid, ttag: 0, datao: 0, datal: 4 };
        let mut rbuf = BytesMut::from(
            &with_data(
                encode_c2h_data(&h, FLAG_DATA_LAST | FLAG_DATA_SUCCESS, Digests::default()),
                b"abcd",
                Digests::default(),
            )[..],
        );
        p.receive(&mut rbuf).unwrap();
        let (_, res) = p.take_done().next().unwrap();
        let r = res.unwrap();
        assert_eq!((&r.data[..], r.cqe.status), (&b"abcd"[..], Status::SUCCESS));
        assert!(p.has_free_slot());
    }

    #[test]
    fn bad_data_digest_fails_only_that_command() {
        let mut p = QueueProto::<u32>::new(1, 2, ALL, LIMITS);
        let cid = p.submit(1, Command { sqe: Sqe::new(io::READ, 0), data_out: None, read_len: 4 }).unwrap().unwrap();
        let h = DataHeader { cccid: cid, ttag: 0, datao: 0, datal: 4 };
        let mut wire = with_data(encode_c2h_data(&h, FLAG_DATA_LAST, ALL), b"abcd", ALL);
        let n = wire.len();
        wire[n - 1] ^= 1;
        wire.extend_from_slice(encode_capsule_resp(&Cqe::new(cid, Status::SUCCESS), ALL).as_slice());
        let mut rbuf = BytesMut::from(&wire[..]);
        p.receive(&mut rbuf).unwrap();
        let (_, res) = p.take_done().next().unwrap();
        assert!(matches!(res, Err(HostError::DataDigest { qid: 1, cid: c }) if c == cid));
    }

    #[test]
    fn data_beyond_the_request_is_fatal() {
        let mut p = QueueProto::<u32>::new(1, 2, Digests::default(), LIMITS);
        let cid = p.submit(1, Command { sqe: Sqe::new(io::READ, 0), data_out: None, read_len: 4 }).unwrap().unwrap();
        let h = DataHeader { cccid: cid, ttag: 0, datao: 0, datal: 8 };
        let mut rbuf = BytesMut::from(
            &with_data(encode_c2h_data(&h, FLAG_DATA_LAST, Digests::default()), &[0; 8], Digests::default())[..],
        );
        let f = p.receive(&mut rbuf).unwrap_err();
        assert!(matches!(f.cause, QueueFailure::Protocol(_)));
        assert_eq!(p.fail_all(), vec![1]);
    }

    #[test]
    fn unknown_cid_and_wrong_pdu_types_are_fatal() {
        let mut p = QueueProto::<u32>::new(1, 2, Digests::default(), LIMITS);
        let mut rbuf =
            BytesMut::from(encode_capsule_resp(&Cqe::new(1, Status::SUCCESS), Digests::default()).as_slice());
        let f = p.receive(&mut rbuf).unwrap_err();
        let t = f.term_req.unwrap();
        assert_eq!(u32::from_le_bytes([t[10], t[11], t[12], t[13]]), 20, "FEI names the CQE's CID");
        // A header digest the connection did not negotiate.
        let mut p = QueueProto::<u32>::new(1, 2, Digests::default(), LIMITS);
        let mut rbuf = BytesMut::from(encode_capsule_resp(&Cqe::new(1, Status::SUCCESS), ALL).as_slice());
        assert!(matches!(p.receive(&mut rbuf).unwrap_err().cause, QueueFailure::Malformed(_)));
        // The controller's own termination request.
        let mut rbuf = BytesMut::from(&encode_term_req(PduType::C2H_TERM_REQ, 2, 0, &[1, 2])[..]);
        let f = p.receive(&mut rbuf).unwrap_err();
        assert_eq!(f.cause, QueueFailure::Terminated { fes: 2, fei: 0 });
        assert!(f.term_req.is_none());
    }

    #[test]
    fn cids_are_reused_only_after_completion() {
        let mut p = QueueProto::<u32>::new(0, 2, Digests::default(), LIMITS);
        let a = p.submit(1, Command::new(Sqe::new(io::FLUSH, 0))).unwrap().unwrap();
        let b = p.submit(2, Command::new(Sqe::new(io::FLUSH, 0))).unwrap().unwrap();
        assert!(p.submit(3, Command::new(Sqe::new(io::FLUSH, 0))).is_err());
        let mut rbuf =
            BytesMut::from(encode_capsule_resp(&Cqe::new(b, Status::LBA_OUT_OF_RANGE), Digests::default()).as_slice());
        p.receive(&mut rbuf).unwrap();
        let (tok, res) = p.take_done().next().unwrap();
        assert_eq!((tok, res.unwrap().cqe.status), (2, Status::LBA_OUT_OF_RANGE));
        assert_eq!(p.submit(4, Command::new(Sqe::new(io::FLUSH, 0))).unwrap().unwrap(), b);
        assert_ne!(a, b);
    }

    #[test]
    fn ic_resp_checks() {
        let ok = IcResp { pfv: 0, cpda: 0, digests: Digests::default(), maxh2cdata: 4096 };
        assert!(check_ic_resp(&ok).is_ok());
        assert!(check_ic_resp(&IcResp { cpda: 1, ..ok }).is_err());
        assert!(check_ic_resp(&IcResp { maxh2cdata: 0, ..ok }).is_err());
        assert_eq!(ic_req(ALL)[11], 3);
    }
}
