//! The queue engine: one TCP connection driven by one task.
//!
//! [`QueueHandle::open`] connects, exchanges ICReq/ICResp and spawns the
//! driver task, which owns the socket and a [`QueueProto`]. Callers submit
//! commands through a bounded channel and wait on a oneshot for the
//! completion, so the per-command cost is one channel send, one oneshot
//! and the encoding; no task is spawned per command.
//!
//! The driver loop, each round:
//! 1. moves as many waiting submissions into the protocol as there are
//!    free command identifiers (the rest wait in the channel, which is how
//!    requests beyond the queue depth are held back);
//! 2. delivers finished completions;
//! 3. waits for whichever comes first: bytes from the socket, room to
//!    write pending output (one vectored write carries every capsule and
//!    data segment queued so far), or a new submission.
//!
//! Reading never waits for writing: a controller that is itself blocked
//! sending us data while we send it a large write would otherwise
//! deadlock the connection.
//!
//! When the queue fails (protocol error, C2HTermReq, socket error, EOF) or
//! the last handle is dropped, the driver records the cause, sends an
//! H2CTermReq if the controller is owed one, closes the socket and fails
//! every pending and later command with [`HostError::QueueFailed`].

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use strata_nvme::pdu::{self, CommonHeader, Digests, Pdu, PduType};
use strata_tls::Stream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::error::{HostError, QueueFailure};
use crate::proto::{self, Command, Limits, QueueProto, Response};

/// Most segments passed to one vectored write.
pub(crate) const MAX_IOV: usize = 64;
/// Smallest free space offered to each socket read.
pub(crate) const MIN_READ: usize = 64 * 1024;

type Reply = oneshot::Sender<Result<Response, HostError>>;

struct Submission {
    cmd: Command,
    reply: Reply,
}

struct QueueState {
    failure: OnceLock<QueueFailure>,
}

/// Parameters of one queue.
#[derive(Debug, Clone)]
pub(crate) struct QueueParams {
    /// Queue ID (0 = admin).
    pub(crate) qid: u16,
    /// Command slots (the Connect SQSIZE is one less).
    pub(crate) depth: u16,
    /// Digests to ask for.
    pub(crate) digests: Digests,
    /// Most in-capsule data bytes per command.
    pub(crate) in_capsule: usize,
    /// Most bytes one command may read.
    pub(crate) max_read: usize,
    /// Limit on connecting and the ICReq/ICResp exchange.
    pub(crate) connect_timeout: Duration,
    /// Limit on each command (zero: none).
    pub(crate) io_timeout: Duration,
    /// TLS to run the queue in, if any.
    pub(crate) tls: Option<Arc<TlsParams>>,
}

/// What a queue needs for TLS: the host's configured PSK and the NQNs of
/// its identity.
#[derive(Debug)]
pub(crate) struct TlsParams {
    pub(crate) psk: strata_auth::TlsPsk,
    pub(crate) hostnqn: String,
    pub(crate) subnqn: String,
    pub(crate) derivation: strata_auth::Derivation,
}

impl TlsParams {
    /// The TLS of `cfg` toward `subnqn`; `None` without a PSK.
    pub(crate) fn of(cfg: &crate::HostConfig, subnqn: &str) -> Option<Arc<TlsParams>> {
        cfg.tls_psk.as_ref().map(|psk| {
            Arc::new(TlsParams {
                psk: psk.clone(),
                hostnqn: cfg.hostnqn.clone(),
                subnqn: subnqn.to_owned(),
                derivation: cfg.tls_derivation,
            })
        })
    }
}

/// A handle on a running queue. Cloning is cheap; the queue closes when
/// the last handle is dropped.
#[derive(Clone)]
pub(crate) struct QueueHandle {
    qid: u16,
    tx: mpsc::Sender<Submission>,
    state: Arc<QueueState>,
    io_timeout: Duration,
    digests: Digests,
}

impl std::fmt::Debug for QueueHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueHandle").field("qid", &self.qid).field("failure", &self.state.failure.get()).finish()
    }
}

impl QueueHandle {
    /// Connects to `addr`, initialises the connection and starts the
    /// driver task. The queue is not yet associated with a controller
    /// (that is the Connect command's job).
    ///
    /// # Errors
    ///
    /// [`HostError::Io`], [`HostError::Timeout`] or [`HostError::Handshake`].
    pub(crate) async fn open(addr: SocketAddr, p: QueueParams) -> Result<QueueHandle, HostError> {
        let (stream, proto, digests) = open_stream(addr, &p).await?;
        let (tx, rx) = mpsc::channel(usize::from(p.depth.max(1)));
        let state = Arc::new(QueueState { failure: OnceLock::new() });
        let (qid, st) = (p.qid, state.clone());
        match stream {
            // The halves of a TCP stream need no lock; TLS's share one.
            Stream::Tcp(mut tcp) => {
                tokio::spawn(async move {
                    let (rd, wr) = tcp.split();
                    drive(rd, wr, proto, rx, st, qid).await
                });
            }
            tls => {
                tokio::spawn(async move {
                    let (rd, wr) = tokio::io::split(tls);
                    drive(rd, wr, proto, rx, st, qid).await
                });
            }
        }
        Ok(QueueHandle { qid: p.qid, tx, state, io_timeout: p.io_timeout, digests })
    }

    /// Queue ID.
    pub(crate) fn qid(&self) -> u16 {
        self.qid
    }

    /// Digests in force on this connection.
    pub(crate) fn digests(&self) -> Digests {
        self.digests
    }

    /// Why the queue stopped, if it has.
    pub(crate) fn failure(&self) -> Option<QueueFailure> {
        self.state.failure.get().cloned()
    }

    fn failed(&self) -> HostError {
        HostError::QueueFailed { qid: self.qid, cause: self.failure().unwrap_or(QueueFailure::Closed) }
    }

    /// Hands `cmd` to the driver; the receiver yields its completion.
    pub(crate) async fn submit(
        &self,
        cmd: Command,
    ) -> Result<oneshot::Receiver<Result<Response, HostError>>, HostError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Submission { cmd, reply }).await.map_err(|_| self.failed())?;
        Ok(rx)
    }

    /// Waits for a submitted command, mapping a dropped reply to the
    /// queue's failure.
    pub(crate) async fn wait(&self, rx: oneshot::Receiver<Result<Response, HostError>>) -> Result<Response, HostError> {
        rx.await.map_err(|_| self.failed())?
    }

    /// Runs `cmd` and returns its completion whatever its status, within
    /// the queue's command timeout.
    pub(crate) async fn execute_raw(&self, cmd: Command) -> Result<Response, HostError> {
        let run = async {
            let rx = self.submit(cmd).await?;
            self.wait(rx).await
        };
        if self.io_timeout.is_zero() {
            return run.await;
        }
        tokio::time::timeout(self.io_timeout, run)
            .await
            .map_err(|_| HostError::Timeout { what: "command", after: self.io_timeout })?
    }

    /// Runs `cmd`; a completion with an error status becomes
    /// [`HostError::Status`].
    pub(crate) async fn execute(&self, cmd: Command) -> Result<Response, HostError> {
        let opcode = cmd.sqe.opcode();
        let resp = self.execute_raw(cmd).await?;
        check_status(resp, self.qid, opcode)
    }
}

/// Connects to `addr` and exchanges ICReq/ICResp: the socket and a fresh
/// protocol state for a queue with parameters `p`, plus the digests in
/// force. Shared by the task-driven queues and [`crate::QueueDriver`].
///
/// # Errors
///
/// [`HostError::Io`], [`HostError::Timeout`] or [`HostError::Handshake`].
pub(crate) async fn open_stream<T>(
    addr: SocketAddr,
    p: &QueueParams,
) -> Result<(Stream, QueueProto<T>, Digests), HostError> {
    let setup = async {
        let tcp = TcpStream::connect(addr).await.map_err(|source| HostError::Io { context: "TCP connect", source })?;
        tcp.set_nodelay(true).map_err(|source| HostError::Io { context: "TCP_NODELAY", source })?;
        let mut stream = match &p.tls {
            None => Stream::Tcp(tcp),
            Some(t) => {
                let (v, d) = (0, t.derivation);
                strata_tls::client::connect(tcp, &t.psk, &t.hostnqn, &t.subnqn, v, d, p.connect_timeout)
                    .await
                    .map_err(|e| HostError::Tls(e.to_string()))?
            }
        };
        stream
            .write_all(&proto::ic_req(p.digests))
            .await
            .map_err(|source| HostError::Io { context: "sending ICReq", source })?;
        let resp = read_ic_resp(&mut stream).await?;
        proto::check_ic_resp(&resp)?;
        Ok::<_, HostError>((stream, resp))
    };
    let (stream, resp) = tokio::time::timeout(p.connect_timeout, setup)
        .await
        .map_err(|_| HostError::Timeout { what: "connecting a queue", after: p.connect_timeout })??;
    let limits = Limits { in_capsule: p.in_capsule, max_h2c_data: resp.maxh2cdata as usize, max_c2h_data: p.max_read };
    let proto = QueueProto::new(p.qid, p.depth, resp.digests, limits);
    tracing::debug!(qid = p.qid, %addr, digests = ?resp.digests, maxh2cdata = resp.maxh2cdata, "queue connected");
    Ok((stream, proto, resp.digests))
}

/// Turns an error completion into [`HostError::Status`].
pub(crate) fn check_status(resp: Response, qid: u16, opcode: u8) -> Result<Response, HostError> {
    if resp.cqe.status.is_success() {
        return Ok(resp);
    }
    Err(HostError::Status { status: resp.cqe.status, cid: resp.cqe.cid, qid, opcode, dw0: resp.cqe.dw0() })
}

/// Reads the controller's answer to ICReq: an ICResp, or a C2HTermReq.
async fn read_ic_resp(stream: &mut Stream) -> Result<pdu::IcResp, HostError> {
    let io = |source| HostError::Io { context: "reading ICResp", source };
    let mut buf = [0u8; pdu::IC_LEN];
    stream.read_exact(&mut buf[..pdu::CH_LEN]).await.map_err(io)?;
    // The parse cannot fail: CH_LEN bytes are present.
    let ch = CommonHeader::parse(&buf).ok_or_else(|| HostError::Handshake("short header".into()))?;
    let plen = ch.plen as usize;
    let expected_len = match ch.pdu_type {
        PduType::IC_RESP => pdu::IC_LEN,
        PduType::C2H_TERM_REQ if (pdu::TERM_HLEN..=pdu::TERM_HLEN + pdu::TERM_MAX_ERROR_DATA).contains(&plen) => plen,
        t => return Err(HostError::Handshake(format!("expected ICResp, got PDU type {:#04x} (PLEN {plen})", t.0))),
    };
    let mut whole = vec![0u8; expected_len];
    whole[..pdu::CH_LEN].copy_from_slice(&buf[..pdu::CH_LEN]);
    stream.read_exact(&mut whole[pdu::CH_LEN..]).await.map_err(io)?;
    match pdu::decode_pdu(&whole, Digests::default(), 0) {
        Ok(Some(d)) => match d.pdu {
            Pdu::IcResp(r) => Ok(r),
            Pdu::C2hTermReq(t) => Err(HostError::Handshake(format!(
                "controller refused the connection (C2HTermReq FES {:#x}, FEI {:#x})",
                t.fes, t.fei
            ))),
            _ => Err(HostError::Handshake("unexpected PDU instead of ICResp".into())),
        },
        Ok(None) => Err(HostError::Handshake("truncated ICResp".into())),
        Err(e) => Err(HostError::Handshake(format!("malformed ICResp: {e}"))),
    }
}

enum Event {
    Read(std::io::Result<usize>),
    Wrote(std::io::Result<usize>),
    Submit(Option<Submission>),
}

/// Writes as many leading segments of `out` as one vectored write takes.
async fn write_some<W: AsyncWrite + Unpin>(wr: &mut W, out: &VecDeque<Bytes>) -> std::io::Result<usize> {
    let mut iov = [IoSlice::new(&[]); MAX_IOV];
    let mut n = 0;
    for (slot, seg) in iov.iter_mut().zip(out.iter()) {
        *slot = IoSlice::new(seg);
        n += 1;
    }
    wr.write_vectored(&iov[..n]).await
}

/// Drops `n` written bytes from the front of `out`.
pub(crate) fn advance(out: &mut VecDeque<Bytes>, mut n: usize) {
    while n > 0 {
        let Some(front) = out.front_mut() else { return };
        if front.len() <= n {
            n -= front.len();
            out.pop_front();
        } else {
            front.advance(n);
            n = 0;
        }
    }
}

fn accept(proto: &mut QueueProto<Reply>, s: Submission) {
    if let Err((reply, _)) = proto.submit(s.reply, s.cmd) {
        // The loop only accepts submissions while a slot is free.
        let _ = reply.send(Err(HostError::InvalidArgument("queue full".into())));
    }
}

async fn drive<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    mut rd: R,
    mut wr: W,
    mut proto: QueueProto<Reply>,
    mut rx: mpsc::Receiver<Submission>,
    state: Arc<QueueState>,
    qid: u16,
) {
    let mut rbuf = BytesMut::with_capacity(4 * MIN_READ);
    let mut out: VecDeque<Bytes> = VecDeque::new();
    let (failure, term_req) = loop {
        while proto.has_free_slot() {
            match rx.try_recv() {
                Ok(s) => accept(&mut proto, s),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => break,
            }
        }
        proto.take_output(&mut out);
        for (reply, res) in proto.take_done() {
            let _ = reply.send(res);
        }
        let need = proto.want().saturating_sub(rbuf.len()).max(MIN_READ);
        rbuf.reserve(need);
        let free = proto.has_free_slot();
        let ev = tokio::select! {
            biased;
            r = rd.read_buf(&mut rbuf) => Event::Read(r),
            w = write_some(&mut wr, &out), if !out.is_empty() => Event::Wrote(w),
            s = rx.recv(), if free => Event::Submit(s),
        };
        match ev {
            Event::Read(Ok(0)) => break (QueueFailure::Eof, None),
            Event::Read(Ok(_)) => {
                if let Err(f) = proto.receive(&mut rbuf) {
                    break (f.cause, f.term_req);
                }
            }
            Event::Read(Err(e)) | Event::Wrote(Err(e)) => break (e.into(), None),
            Event::Wrote(Ok(0)) => break (std::io::Error::from(std::io::ErrorKind::WriteZero).into(), None),
            Event::Wrote(Ok(n)) => advance(&mut out, n),
            Event::Submit(Some(s)) => accept(&mut proto, s),
            // Every handle is gone: nobody can wait for anything any more.
            Event::Submit(None) => break (QueueFailure::Closed, None),
        }
    };
    match &failure {
        QueueFailure::Closed | QueueFailure::Eof => tracing::debug!(qid, "queue closed: {failure}"),
        _ => tracing::warn!(qid, "queue failed: {failure}"),
    }
    let _ = state.failure.set(failure.clone());
    rx.close();
    for reply in proto.fail_all() {
        let _ = reply.send(Err(HostError::QueueFailed { qid, cause: failure.clone() }));
    }
    while let Ok(s) = rx.try_recv() {
        let _ = s.reply.send(Err(HostError::QueueFailed { qid, cause: failure.clone() }));
    }
    if let Some(t) = term_req {
        // Finish any PDU already half on the wire, then say why we leave.
        // Best effort, bounded: the connection is being dropped anyway.
        let flush = async {
            while !out.is_empty() {
                match write_some(&mut wr, &out).await {
                    Ok(n) if n > 0 => advance(&mut out, n),
                    _ => return,
                }
            }
            let _ = wr.write_all(&t).await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), flush).await;
    }
    let _ = wr.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_drops_whole_and_partial_segments() {
        let mut out: VecDeque<Bytes> =
            [Bytes::from_static(b"abc"), Bytes::from_static(b"defg"), Bytes::from_static(b"h")].into();
        advance(&mut out, 5);
        assert_eq!(out.len(), 2);
        assert_eq!(&out[0][..], b"fg");
        advance(&mut out, 3);
        assert!(out.is_empty());
        advance(&mut out, 1);
    }
}
