//! A raw NVMe/TCP client with byte-level control, for the misbehaving
//! hosts: it sends exactly the PDUs it is told to, when it is told to,
//! and can stop half-way through anything.
//!
//! Built on the `strata-nvme` encoders and decoder. One [`RawConn`] is one
//! TCP connection (one queue); [`RawAssoc`] sets up a controller the way
//! the brief of every NVMe/TCP host goes: ICReq/ICResp, Connect on the
//! admin queue (QID 0, dynamic controller ID 0xFFFF), Property Set CC.EN=1
//! with IOSQES 6 / IOCQES 4 and a CSTS.RDY poll, Set Features Number of
//! Queues when more than one I/O queue is wanted, then Connect on each I/O
//! queue with the controller ID returned. No digests.
//!
//! Every socket has `SO_LINGER` 0, so dropping a [`RawConn`] (or calling
//! [`RawConn::reset`]) sends a TCP RST, not a FIN: the target sees the
//! connection die mid-command, as when a host crashes or a NIC resets.
//!
//! Every receive has a deadline; bytes from strata are decoded with the
//! same checks the target and host library use, and anything unexpected
//! is an error value, never a panic.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use strata_nvme::command::{ReadWrite, SGL_INCAPSULE_DATA, SGL_TRANSPORT_DATA, SglDescriptor, Sqe, admin, feature, io};
use strata_nvme::completion::Cqe;
use strata_nvme::fabrics::{CNTLID_DYNAMIC, ConnectCmd, ConnectData, FABRICS_OPCODE, PropertyCmd, reg};
use strata_nvme::pdu::{
    self, DataHeader, Digests, FLAG_DATA_LAST, FLAG_DATA_SUCCESS, IcReq, Pdu, PduError, PduType, R2t,
};
use strata_nvme::status::Status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

use strata_rand::Rng;

/// In-capsule data strata accepts on I/O queues (IOCCSZ 516: 8 KiB after
/// the SQE); larger writes go by R2T.
pub const IN_CAPSULE_MAX: usize = 8192;
/// Largest data a PDU from strata may carry here (MDTS is 1 MiB).
pub const MAX_PDU_DATA: usize = 2 << 20;

/// Why a raw operation did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RawError {
    /// A socket error.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// Nothing (or not enough) arrived in time.
    #[error("{0} timed out after {1:?}")]
    Timeout(&'static str, Duration),
    /// strata closed the connection (EOF).
    #[error("connection closed by strata")]
    Closed,
    /// strata sent a C2HTermReq.
    #[error("strata terminated the connection (C2HTermReq FES {fes:#x}, FEI {fei:#x})")]
    Terminated {
        /// Fatal error status.
        fes: u16,
        /// Fatal error information.
        fei: u32,
    },
    /// strata sent bytes that are not a valid PDU.
    #[error("malformed PDU from strata: {0}")]
    Malformed(PduError),
    /// A valid PDU that makes no sense here.
    #[error("protocol violation by strata: {0}")]
    Protocol(String),
    /// A setup command completed with an error status.
    #[error("{what} failed with status {status}")]
    Status {
        /// The command.
        what: &'static str,
        /// Its status.
        status: Status,
    },
}

impl RawError {
    /// True when strata ended the connection (EOF, RST, or a termination
    /// request): what an attacker waits to see.
    pub fn is_closed_by_peer(&self) -> bool {
        use std::io::ErrorKind::*;
        match self {
            RawError::Closed | RawError::Terminated { .. } => true,
            RawError::Io { source, .. } => {
                matches!(source.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof)
            }
            _ => false,
        }
    }
}

/// A host identity (host NQN and host ID) drawn from the run's PRNG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIdent {
    /// Host NQN (`nqn.2014-08.org.nvmexpress:uuid:...`).
    pub hostnqn: String,
    /// Host ID: the UUID's bytes.
    pub hostid: [u8; 16],
}

impl HostIdent {
    /// A random version-4 UUID identity.
    pub fn random(rng: &mut Rng) -> HostIdent {
        let mut b = [0u8; 16];
        rng.fill(&mut b);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let mut uuid = String::with_capacity(36);
        for (i, byte) in b.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                uuid.push('-');
            }
            uuid.push_str(&format!("{byte:02x}"));
        }
        HostIdent { hostnqn: format!("nqn.2014-08.org.nvmexpress:uuid:{uuid}"), hostid: b }
    }
}

/// A PDU from strata, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// CapsuleResp.
    Resp(Cqe),
    /// R2T.
    R2t(R2t),
    /// C2HData.
    Data {
        /// Command it belongs to.
        cccid: u16,
        /// Offset of the data in the command's buffer.
        datao: u32,
        /// The data.
        data: Vec<u8>,
        /// SUCCESS flag: no CapsuleResp follows.
        success: bool,
    },
    /// C2HTermReq.
    Term {
        /// Fatal error status.
        fes: u16,
        /// Fatal error information.
        fei: u32,
    },
    /// Any other PDU type (a controller should not send it).
    Unexpected(u8),
}

/// Opens a TCP connection to `addr` with `SO_LINGER` 0 and, when given, a
/// small receive buffer (set before connect, so the window is small from
/// the start).
///
/// # Errors
///
/// [`RawError::Io`] or [`RawError::Timeout`].
pub async fn tcp_connect(addr: SocketAddr, timeout: Duration, rcvbuf: Option<u32>) -> Result<TcpStream, RawError> {
    let sock = if addr.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() }
        .map_err(|source| RawError::Io { what: "socket", source })?;
    if let Some(n) = rcvbuf {
        sock.set_recv_buffer_size(n).map_err(|source| RawError::Io { what: "SO_RCVBUF", source })?;
    }
    let stream = tokio::time::timeout(timeout, sock.connect(addr))
        .await
        .map_err(|_| RawError::Timeout("TCP connect", timeout))?
        .map_err(|source| RawError::Io { what: "TCP connect", source })?;
    socket2::SockRef::from(&stream)
        .set_linger(Some(Duration::ZERO))
        .map_err(|source| RawError::Io { what: "SO_LINGER", source })?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// One raw NVMe/TCP connection (one queue).
#[derive(Debug)]
pub struct RawConn {
    stream: TcpStream,
    rbuf: BytesMut,
    maxh2cdata: usize,
    next_cid: u16,
}

impl RawConn {
    /// Connects and exchanges ICReq/ICResp.
    ///
    /// # Errors
    ///
    /// Socket errors, a timeout, or strata refusing the connection.
    pub async fn open(addr: SocketAddr, timeout: Duration, rcvbuf: Option<u32>) -> Result<RawConn, RawError> {
        let deadline = Instant::now() + timeout;
        let stream = tcp_connect(addr, timeout, rcvbuf).await?;
        let mut c = RawConn { stream, rbuf: BytesMut::with_capacity(64 * 1024), maxh2cdata: 4096, next_cid: 0 };
        c.send_ic_req(deadline).await?;
        match c.recv_until(deadline).await? {
            IncomingOrIc::IcResp(maxh2cdata) => c.maxh2cdata = maxh2cdata.max(4096),
            IncomingOrIc::Other(Incoming::Term { fes, fei }) => return Err(RawError::Terminated { fes, fei }),
            IncomingOrIc::Other(other) => return Err(RawError::Protocol(format!("expected ICResp, got {other:?}"))),
        }
        Ok(c)
    }

    async fn send_ic_req(&mut self, deadline: Instant) -> Result<(), RawError> {
        let ic = IcReq { pfv: 0, hpda: 0, digests: Digests::default(), maxr2t: 0 }.encode();
        self.send_until(&ic, deadline).await
    }

    /// The socket (to poll it for errors, or shut it down).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// MAXH2CDATA granted in ICResp.
    pub fn maxh2cdata(&self) -> usize {
        self.maxh2cdata
    }

    /// A fresh command identifier.
    pub fn next_cid(&mut self) -> u16 {
        self.next_cid = self.next_cid.wrapping_add(1);
        self.next_cid
    }

    /// Drops the connection with a TCP RST (`SO_LINGER` 0).
    pub fn reset(self) {
        drop(self);
    }

    async fn send_until(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), RawError> {
        tokio::time::timeout_at(deadline, self.stream.write_all(bytes))
            .await
            .map_err(|_| RawError::Timeout("sending", Duration::ZERO))?
            .map_err(|source| RawError::Io { what: "sending", source })
    }

    /// Sends raw bytes.
    ///
    /// # Errors
    ///
    /// Socket errors or a timeout (the peer stopped reading).
    pub async fn send(&mut self, bytes: &[u8], timeout: Duration) -> Result<(), RawError> {
        self.send_until(bytes, Instant::now() + timeout).await
    }

    /// Sends a CapsuleCmd with `data` in-capsule (none when empty).
    ///
    /// # Errors
    ///
    /// As [`RawConn::send`].
    pub async fn send_capsule(&mut self, sqe: &Sqe, data: &[u8], timeout: Duration) -> Result<(), RawError> {
        let mut b = pdu::encode_capsule_cmd(sqe, data.len(), Digests::default()).as_slice().to_vec();
        b.extend_from_slice(data);
        self.send(&b, timeout).await
    }

    /// Sends one H2CData PDU.
    ///
    /// # Errors
    ///
    /// As [`RawConn::send`].
    pub async fn send_h2c(
        &mut self,
        r2t: &R2t,
        datao: u32,
        data: &[u8],
        last: bool,
        timeout: Duration,
    ) -> Result<(), RawError> {
        let header = DataHeader { cccid: r2t.cccid, ttag: r2t.ttag, datao, datal: data.len() as u32 };
        let flags = if last { FLAG_DATA_LAST } else { 0 };
        let mut b = pdu::encode_h2c_data(&header, flags, Digests::default()).as_slice().to_vec();
        b.extend_from_slice(data);
        self.send(&b, timeout).await
    }

    /// Receives the next PDU.
    ///
    /// # Errors
    ///
    /// [`RawError::Closed`] on EOF, socket errors, a timeout, or a
    /// malformed PDU.
    pub async fn recv(&mut self, timeout: Duration) -> Result<Incoming, RawError> {
        match self.recv_until(Instant::now() + timeout).await? {
            IncomingOrIc::Other(i) => Ok(i),
            IncomingOrIc::IcResp(_) => Err(RawError::Protocol("a second ICResp".into())),
        }
    }

    async fn recv_until(&mut self, deadline: Instant) -> Result<IncomingOrIc, RawError> {
        loop {
            if let Some((inc, len)) = decode_one(&self.rbuf)? {
                self.rbuf.advance(len);
                return Ok(inc);
            }
            self.rbuf.reserve(64 * 1024);
            let n = tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.rbuf))
                .await
                .map_err(|_| RawError::Timeout("waiting for a PDU", Duration::ZERO))?
                .map_err(|source| RawError::Io { what: "receiving", source })?;
            if n == 0 {
                return Err(RawError::Closed);
            }
        }
    }

    /// Runs one command to completion: sends it (data in-capsule up to
    /// [`IN_CAPSULE_MAX`], else answering R2Ts with H2CData), collects
    /// C2HData up to `read_len`, and returns the completion and the data.
    /// The connection must have no other command outstanding.
    ///
    /// # Errors
    ///
    /// Transport errors; an error status is returned in the [`Cqe`].
    pub async fn execute(
        &mut self,
        mut sqe: Sqe,
        data_out: &[u8],
        read_len: usize,
        timeout: Duration,
    ) -> Result<(Cqe, Vec<u8>), RawError> {
        let deadline = Instant::now() + timeout;
        let cid = self.next_cid();
        sqe.set_cid(cid);
        let in_capsule = !data_out.is_empty() && data_out.len() <= IN_CAPSULE_MAX;
        let sgl = if in_capsule {
            SglDescriptor { addr: 0, length: data_out.len() as u32, sgl_type: SGL_INCAPSULE_DATA }
        } else {
            let len = if data_out.is_empty() { read_len } else { data_out.len() };
            SglDescriptor { addr: 0, length: len as u32, sgl_type: SGL_TRANSPORT_DATA }
        };
        sqe.set_sgl(sgl);
        let capsule_data = if in_capsule { data_out } else { &[][..] };
        let mut b = pdu::encode_capsule_cmd(&sqe, capsule_data.len(), Digests::default()).as_slice().to_vec();
        b.extend_from_slice(capsule_data);
        self.send_until(&b, deadline).await?;
        let mut data = vec![0u8; read_len];
        loop {
            let inc = match self.recv_until(deadline).await? {
                IncomingOrIc::Other(i) => i,
                IncomingOrIc::IcResp(_) => return Err(RawError::Protocol("a second ICResp".into())),
            };
            match inc {
                Incoming::Resp(cqe) if cqe.cid == cid => return Ok((cqe, data)),
                Incoming::R2t(r2t) if r2t.cccid == cid => {
                    let (start, len) = (r2t.r2to as usize, r2t.r2tl as usize);
                    let end = start.checked_add(len).filter(|&e| e <= data_out.len()).ok_or_else(|| {
                        RawError::Protocol(format!("R2T for {start}+{len} of a {}-byte write", data_out.len()))
                    })?;
                    let mut off = start;
                    while off < end {
                        let n = (end - off).min(self.maxh2cdata);
                        let header = DataHeader { cccid: cid, ttag: r2t.ttag, datao: off as u32, datal: n as u32 };
                        let flags = if off + n == end { FLAG_DATA_LAST } else { 0 };
                        let mut b = pdu::encode_h2c_data(&header, flags, Digests::default()).as_slice().to_vec();
                        b.extend_from_slice(&data_out[off..off + n]);
                        self.send_until(&b, deadline).await?;
                        off += n;
                    }
                }
                Incoming::Data { cccid, datao, data: chunk, success } if cccid == cid => {
                    let start = datao as usize;
                    let end = start.checked_add(chunk.len()).filter(|&e| e <= data.len()).ok_or_else(|| {
                        RawError::Protocol(format!("C2HData {start}+{} past a {read_len}-byte read", chunk.len()))
                    })?;
                    data[start..end].copy_from_slice(&chunk);
                    if success {
                        return Ok((Cqe::new(cid, Status::SUCCESS), data));
                    }
                }
                Incoming::Term { fes, fei } => return Err(RawError::Terminated { fes, fei }),
                other => return Err(RawError::Protocol(format!("unexpected {other:?} while waiting for cid {cid}"))),
            }
        }
    }

    /// Runs a command that must succeed; returns completion DW0.
    async fn must(&mut self, what: &'static str, sqe: Sqe, data: &[u8], timeout: Duration) -> Result<u32, RawError> {
        let (cqe, _) = self.execute(sqe, data, 0, timeout).await?;
        if !cqe.status.is_success() {
            return Err(RawError::Status { what, status: cqe.status });
        }
        Ok(cqe.dw0())
    }
}

enum IncomingOrIc {
    IcResp(usize),
    Other(Incoming),
}

/// Decodes one PDU from the front of `b`: the PDU and its length, `None`
/// when more bytes are needed.
fn decode_one(b: &[u8]) -> Result<Option<(IncomingOrIc, usize)>, RawError> {
    let Some(d) = pdu::decode_pdu(b, Digests::default(), MAX_PDU_DATA).map_err(RawError::Malformed)? else {
        return Ok(None);
    };
    let inc = match d.pdu {
        Pdu::IcResp(r) => IncomingOrIc::IcResp(r.maxh2cdata as usize),
        Pdu::CapsuleResp(cqe) => IncomingOrIc::Other(Incoming::Resp(cqe)),
        Pdu::R2t(r) => IncomingOrIc::Other(Incoming::R2t(r)),
        Pdu::C2hData { header, flags, data } => IncomingOrIc::Other(Incoming::Data {
            cccid: header.cccid,
            datao: header.datao,
            data: data.to_vec(),
            success: flags & FLAG_DATA_SUCCESS != 0,
        }),
        Pdu::C2hTermReq(t) => IncomingOrIc::Other(Incoming::Term { fes: t.fes, fei: t.fei }),
        _ => IncomingOrIc::Other(Incoming::Unexpected(b[pdu::TYPE_OFFSET])),
    };
    Ok(Some((inc, d.len)))
}

/// A Connect command for queue `qid` with `sqsize` entries (1-based).
fn connect_capsule(
    qid: u16,
    sqsize: u16,
    kato_ms: u32,
    cntlid: u16,
    subnqn: &str,
    ident: &HostIdent,
) -> (Sqe, Vec<u8>) {
    let mut sqe = Sqe::new(FABRICS_OPCODE, 0);
    ConnectCmd { recfmt: 0, qid, sqsize: sqsize.saturating_sub(1).max(1), cattr: 0, kato: kato_ms }.encode(&mut sqe);
    let data = ConnectData { hostid: ident.hostid, cntlid, subnqn: subnqn.to_string(), hostnqn: ident.hostnqn.clone() };
    (sqe, data.encode().to_vec())
}

/// A Read, Write (FUA optional) or Flush SQE for namespace `nsid`.
pub fn io_sqe(opcode: u8, nsid: u32, slba: u64, nlb: u32, fua: bool) -> Sqe {
    let mut sqe = Sqe::new(opcode, 0);
    sqe.set_nsid(nsid);
    if opcode != io::FLUSH {
        ReadWrite { slba, nlb: nlb.clamp(1, 65536), fua, limited_retry: false }.encode(&mut sqe);
    }
    sqe
}

/// A Write SQE whose data will go by R2T (transport SGL of `len` bytes),
/// with its CID set: for attackers that send the capsule themselves.
pub fn r2t_write_capsule(cid: u16, nsid: u32, slba: u64, len: usize) -> Vec<u8> {
    let mut sqe = io_sqe(io::WRITE, nsid, slba, (len / crate::block::BLOCK_SIZE) as u32, false);
    sqe.set_cid(cid);
    sqe.set_sgl(SglDescriptor { addr: 0, length: len as u32, sgl_type: SGL_TRANSPORT_DATA });
    pdu::encode_capsule_cmd(&sqe, 0, Digests::default()).as_slice().to_vec()
}

/// A Read capsule of `nlb` blocks with its CID set.
pub fn read_capsule(cid: u16, nsid: u32, slba: u64, nlb: u32) -> Vec<u8> {
    let mut sqe = io_sqe(io::READ, nsid, slba, nlb, false);
    sqe.set_cid(cid);
    let len = nlb as usize * crate::block::BLOCK_SIZE;
    sqe.set_sgl(SglDescriptor { addr: 0, length: len as u32, sgl_type: SGL_TRANSPORT_DATA });
    pdu::encode_capsule_cmd(&sqe, 0, Digests::default()).as_slice().to_vec()
}

/// A Flush capsule with its CID set.
pub fn flush_capsule(cid: u16, nsid: u32) -> Vec<u8> {
    let mut sqe = io_sqe(io::FLUSH, nsid, 0, 1, false);
    sqe.set_cid(cid);
    pdu::encode_capsule_cmd(&sqe, 0, Digests::default()).as_slice().to_vec()
}

/// Options of a raw association.
#[derive(Debug, Clone, Copy)]
pub struct AssocOptions {
    /// I/O queues to connect.
    pub io_queues: u16,
    /// Entries per I/O queue.
    pub io_queue_size: u16,
    /// Keep-alive timeout sent in Connect, milliseconds (0: none).
    pub kato_ms: u32,
    /// SO_RCVBUF of the I/O queue sockets.
    pub rcvbuf: Option<u32>,
    /// Stop without error at the first I/O queue strata refuses once this
    /// many are connected (strata may cap queues per controller).
    pub min_io_queues: u16,
}

impl Default for AssocOptions {
    fn default() -> Self {
        AssocOptions { io_queues: 1, io_queue_size: 128, kato_ms: 0, rcvbuf: None, min_io_queues: 1 }
    }
}

/// A controller set up by hand: admin queue and I/O queues.
#[derive(Debug)]
pub struct RawAssoc {
    /// The admin queue.
    pub admin: RawConn,
    /// The I/O queues (queue ID = index + 1).
    pub io: Vec<RawConn>,
    /// Controller ID strata assigned.
    pub cntlid: u16,
}

impl RawAssoc {
    /// Connects the admin queue, enables the controller and connects the
    /// I/O queues.
    ///
    /// # Errors
    ///
    /// Transport errors or a setup command's error status.
    pub async fn connect(
        addr: SocketAddr,
        subnqn: &str,
        ident: &HostIdent,
        opts: AssocOptions,
        timeout: Duration,
    ) -> Result<RawAssoc, RawError> {
        let mut admin_q = RawConn::open(addr, timeout, None).await?;
        let (sqe, data) = connect_capsule(0, 32, opts.kato_ms, CNTLID_DYNAMIC, subnqn, ident);
        let cntlid = admin_q.must("admin Connect", sqe, &data, timeout).await? as u16;
        let mut set = Sqe::new(FABRICS_OPCODE, 0);
        let cc = reg::CC_EN | (6 << reg::CC_IOSQES_SHIFT) | (4 << reg::CC_IOCQES_SHIFT);
        PropertyCmd { eight_bytes: false, offset: reg::CC, value: u64::from(cc) }.encode(&mut set, true);
        admin_q.must("Property Set CC", set, &[], timeout).await?;
        let deadline = Instant::now() + timeout;
        loop {
            let mut get = Sqe::new(FABRICS_OPCODE, 0);
            PropertyCmd { eight_bytes: false, offset: reg::CSTS, value: 0 }.encode(&mut get, false);
            let csts = admin_q.must("Property Get CSTS", get, &[], timeout).await?;
            if csts & reg::CSTS_RDY != 0 {
                break;
            }
            if Instant::now() > deadline {
                return Err(RawError::Timeout("CSTS.RDY", timeout));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if opts.io_queues > 1 {
            let n = u32::from(opts.io_queues - 1);
            let mut sqe = Sqe::new(admin::SET_FEATURES, 0);
            sqe.set_cdw10(u32::from(feature::NUMBER_OF_QUEUES));
            sqe.set_cdw11(n | (n << 16));
            admin_q.must("Set Features Number of Queues", sqe, &[], timeout).await?;
        }
        let mut ioqs = Vec::with_capacity(usize::from(opts.io_queues));
        for qid in 1..=opts.io_queues {
            let queue = async {
                let mut q = RawConn::open(addr, timeout, opts.rcvbuf).await?;
                let (sqe, data) = connect_capsule(qid, opts.io_queue_size, 0, cntlid, subnqn, ident);
                q.must("I/O queue Connect", sqe, &data, timeout).await?;
                Ok::<_, RawError>(q)
            };
            match queue.await {
                Ok(q) => ioqs.push(q),
                Err(_) if ioqs.len() >= usize::from(opts.min_io_queues) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(RawAssoc { admin: admin_q, io: ioqs, cntlid })
    }

    /// Drops every connection with a TCP RST.
    pub fn reset(self) {
        drop(self);
    }
}

/// Sends just the ICReq and a Connect for the admin queue (dynamic
/// controller ID) on a fresh connection and returns it, without waiting
/// for the answer: the cheapest way to make strata allocate a controller.
///
/// # Errors
///
/// Transport errors.
pub async fn connect_only(
    addr: SocketAddr,
    subnqn: &str,
    ident: &HostIdent,
    timeout: Duration,
) -> Result<RawConn, RawError> {
    let mut c = RawConn::open(addr, timeout, None).await?;
    let (mut sqe, data) = connect_capsule(0, 32, 0, CNTLID_DYNAMIC, subnqn, ident);
    let cid = c.next_cid();
    sqe.set_cid(cid);
    sqe.set_sgl(SglDescriptor { addr: 0, length: data.len() as u32, sgl_type: SGL_INCAPSULE_DATA });
    let mut b = pdu::encode_capsule_cmd(&sqe, data.len(), Digests::default()).as_slice().to_vec();
    b.extend_from_slice(&data);
    c.send(&b, timeout).await?;
    Ok(c)
}

/// The PDU type byte of a C2HTermReq, for callers matching raw bytes.
pub const C2H_TERM_REQ: u8 = PduType::C2H_TERM_REQ.0;

#[cfg(test)]
mod tests {
    use super::*;
    use strata_nvme::pdu::IcResp;

    #[test]
    fn identities_are_v4_uuid_nqns_from_the_seed() {
        let a = HostIdent::random(&mut Rng::new(1));
        assert_eq!(a, HostIdent::random(&mut Rng::new(1)));
        let uuid = a.hostnqn.strip_prefix("nqn.2014-08.org.nvmexpress:uuid:").unwrap();
        assert_eq!(uuid.len(), 36);
        assert_eq!(&uuid[14..15], "4");
    }

    #[test]
    fn decoder_needs_more_bytes_then_yields_owned_pdus() {
        let resp = pdu::encode_capsule_resp(&Cqe::new(7, Status::SUCCESS), Digests::default());
        let b = resp.as_slice();
        assert!(decode_one(&b[..10]).unwrap().is_none());
        match decode_one(b).unwrap() {
            Some((IncomingOrIc::Other(Incoming::Resp(c)), n)) => assert_eq!((c.cid, n), (7, b.len())),
            _ => panic!("not a response"),
        }
        let ic = IcResp { pfv: 0, cpda: 0, digests: Digests::default(), maxh2cdata: 131072 }.encode();
        assert!(matches!(decode_one(&ic).unwrap(), Some((IncomingOrIc::IcResp(131072), 128))));
        let term = pdu::encode_term_req(PduType::C2H_TERM_REQ, 2, 0, &[]);
        assert!(matches!(decode_one(&term).unwrap(), Some((IncomingOrIc::Other(Incoming::Term { fes: 2, .. }), _))));
    }

    #[test]
    fn garbage_from_the_peer_is_an_error_not_a_panic() {
        let mut b = [0u8; 64];
        b[0] = 0x55;
        b[2] = 24;
        b[4] = 24;
        assert!(matches!(decode_one(&b), Err(RawError::Malformed(_))));
    }

    #[test]
    fn capsules_carry_their_cid_and_sgl() {
        let b = r2t_write_capsule(9, 1, 100, 65536);
        let d = pdu::decode_pdu(&b, Digests::default(), 0).unwrap().unwrap();
        let Pdu::CapsuleCmd { sqe, data } = d.pdu else { panic!() };
        assert!(data.is_empty());
        assert_eq!((sqe.cid(), sqe.nsid(), sqe.sgl().length), (9, 1, 65536));
        assert_eq!(ReadWrite::decode(&sqe).nlb, 16);
        let (sqe, data) = connect_capsule(1, 128, 0, 5, "nqn.x", &HostIdent::random(&mut Rng::new(2)));
        assert_eq!(data.len(), strata_nvme::fabrics::CONNECT_DATA_LEN);
        assert_eq!(ConnectCmd::decode(&sqe).sqsize, 127);
    }
}
