//! Caller-driven I/O queues: one TCP connection that the caller submits
//! to and reaps from on its own task.
//!
//! The task-driven queues of [`crate::Controller`] cost a channel send, a
//! oneshot and a task switch per command. That is cheap for a file system
//! but not for a load generator that must outrun a target doing hundreds
//! of thousands of I/Os per second on one core. A [`QueueDriver`] owns the
//! socket and the sans-I/O [`QueueProto`] directly:
//! [`QueueDriver::submit`] only encodes a capsule into the output list, and
//! [`QueueDriver::poll`] sends everything queued so far with vectored
//! writes, then reads as many PDUs as the socket holds into one reused
//! receive buffer and hands back every completion they carry. Nothing is
//! allocated per command beyond what the protocol itself keeps (read data
//! arrives as [`Bytes`] views of the receive buffer).
//!
//! Invariants between calls:
//! - every submitted token comes back exactly once from `poll`, with the
//!   completion or an error (a failed queue hands back every pending token
//!   with [`HostError::QueueFailed`] before `poll` returns its error);
//! - after a failure the driver stays failed: `submit` refuses and `poll`
//!   returns the same error;
//! - `poll` is cancel safe: all state lives in the driver, so dropping its
//!   future (in a `select!` against a timer) loses nothing.
//!
//! The driver applies no command timeout: the caller knows when each
//! command was submitted and decides how long is too long.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use strata_nvme::command::Sqe;
use strata_nvme::completion::Cqe;
use strata_nvme::fabrics::{self, fctype};
use strata_nvme::pdu::Digests;
use strata_tls::Stream;
use tokio::io::{AsyncWriteExt, Interest};

use crate::error::{HostError, QueueFailure};
use crate::proto::{Command, QueueProto, Response};
use crate::queue::{MAX_IOV, MIN_READ, QueueParams, advance, open_stream};

/// A completed command: its completion queue entry, whatever the status,
/// and the data it returned (a view of the receive buffer; empty for
/// commands without data). Check `cqe.status` for the outcome.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The completion queue entry (for a read completed with the C2HData
    /// SUCCESS flag, a synthesized success entry).
    pub cqe: Cqe,
    /// Controller-to-host data.
    pub data: Bytes,
}

/// One I/O queue driven by its caller. See the module docs; obtained from
/// [`crate::Controller::connect_with_drivers`]. `T` is the caller's token
/// for each command (an index into its own table, typically).
pub struct QueueDriver<T> {
    qid: u16,
    depth: u16,
    stream: Stream,
    /// `None` tokens are the driver's own commands (Connect, Disconnect).
    proto: QueueProto<Option<T>>,
    rbuf: BytesMut,
    out: VecDeque<Bytes>,
    failure: Option<QueueFailure>,
    digests: Digests,
    max_transfer: usize,
    internal: Option<Result<Response, HostError>>,
    /// How long `poll` spins on the socket before sleeping; zero: never.
    busy_poll: Duration,
}

impl<T> std::fmt::Debug for QueueDriver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueDriver").field("qid", &self.qid).field("failure", &self.failure).finish()
    }
}

impl<T> QueueDriver<T> {
    /// Connects and initialises the connection (not yet Connected to a
    /// controller: the caller sends the fabrics Connect).
    pub(crate) async fn open(
        addr: SocketAddr,
        p: QueueParams,
        max_transfer: usize,
    ) -> Result<QueueDriver<T>, HostError> {
        let (stream, proto, digests) = open_stream(addr, &p).await?;
        Ok(QueueDriver {
            qid: p.qid,
            depth: p.depth.max(1),
            stream,
            proto,
            rbuf: BytesMut::with_capacity(4 * MIN_READ),
            out: VecDeque::new(),
            failure: None,
            digests,
            max_transfer,
            internal: None,
            busy_poll: Duration::ZERO,
        })
    }

    /// Queue ID (1-based for I/O queues).
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// Command slots: the most commands in flight at once.
    pub fn depth(&self) -> u16 {
        self.depth
    }

    /// Digests in force on this connection.
    pub fn digests(&self) -> Digests {
        self.digests
    }

    /// Largest transfer of one command (MDTS).
    pub fn max_transfer_bytes(&self) -> usize {
        self.max_transfer
    }

    /// Commands submitted whose tokens have not come back yet (including
    /// completions reaped by the protocol but not yet returned by `poll`).
    pub fn in_flight(&self) -> usize {
        self.proto.in_flight()
    }

    /// True when [`QueueDriver::submit`] will find a free command slot.
    pub fn has_free_slot(&self) -> bool {
        self.failure.is_none() && self.proto.has_free_slot()
    }

    /// Makes [`QueueDriver::poll`] spin on the socket for up to `budget`
    /// before it sleeps waiting for a completion, yielding to the runtime
    /// between attempts. Zero (the default) never spins.
    ///
    /// A sleeping reader costs the sender a wake-up per batch of
    /// completions (on loopback, the target's core pays it); a polling
    /// initiator such as SPDK's `spdk_nvme_perf` never sleeps. Spinning
    /// trades this thread's CPU for that.
    pub fn set_busy_poll(&mut self, budget: Duration) {
        self.busy_poll = budget;
    }

    /// Why the queue stopped, if it has.
    pub fn failure(&self) -> Option<&QueueFailure> {
        self.failure.as_ref()
    }

    fn failed(&self) -> HostError {
        HostError::QueueFailed { qid: self.qid, cause: self.failure.clone().unwrap_or(QueueFailure::Closed) }
    }

    /// Queues a command for sending on the next [`QueueDriver::poll`]:
    /// `sqe` (its CID and data pointer are filled in here), with
    /// `data_out` to write or `read_len` bytes to read. Costs an encoding
    /// and no allocation beyond the protocol's amortised header buffer.
    ///
    /// # Errors
    ///
    /// Hands the token back with [`HostError::QueueFailed`] after a
    /// failure, [`HostError::TransferTooLarge`] beyond MDTS, or
    /// [`HostError::InvalidArgument`] when no command slot is free.
    pub fn submit(
        &mut self,
        token: T,
        sqe: Sqe,
        data_out: Option<Bytes>,
        read_len: usize,
    ) -> Result<(), (T, HostError)> {
        if self.failure.is_some() {
            return Err((token, self.failed()));
        }
        let len = read_len.max(data_out.as_ref().map_or(0, Bytes::len));
        if len > self.max_transfer {
            return Err((token, HostError::TransferTooLarge { len, max: self.max_transfer }));
        }
        match self.proto.submit(Some(token), Command { sqe, data_out, read_len }) {
            Ok(_) => Ok(()),
            Err((Some(token), _)) => Err((token, HostError::InvalidArgument("no free command slot".into()))),
            // `proto.submit` hands back the token it was given, which is `Some`.
            Err((None, _)) => unreachable!("a user command came back without its token"),
        }
    }

    /// Sends what was submitted, then waits until at least one command has
    /// completed and appends every completion available to `done`.
    /// Returns at once when nothing is in flight.
    ///
    /// # Errors
    ///
    /// [`HostError::QueueFailed`] when the connection fails (socket error,
    /// EOF, protocol violation, C2HTermReq); every pending token has been
    /// appended to `done` with the same error first.
    pub async fn poll(&mut self, done: &mut Vec<(T, Result<Completion, HostError>)>) -> Result<(), HostError> {
        let before = done.len();
        loop {
            self.reap(done);
            if self.failure.is_some() {
                return Err(self.failed());
            }
            self.proto.take_output(&mut self.out);
            if let Err(e) = self.write_ready() {
                self.fail(e.into(), None, done).await;
                continue;
            }
            if done.len() > before || self.internal.is_some() || self.proto.in_flight() == 0 {
                return Ok(());
            }
            if !self.busy_poll.is_zero() && self.out.is_empty() {
                match self.spin().await {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err((cause, term_req)) => {
                        self.fail(cause, term_req, done).await;
                        continue;
                    }
                }
            }
            let interest =
                if self.out.is_empty() { Interest::READABLE } else { Interest::READABLE | Interest::WRITABLE };
            let ready = match self.stream.ready(interest).await {
                Ok(r) => r,
                Err(e) => {
                    self.fail(e.into(), None, done).await;
                    continue;
                }
            };
            if (ready.is_readable() || ready.is_read_closed())
                && let Err((cause, term_req)) = self.read_ready()
            {
                self.fail(cause, term_req, done).await;
            }
        }
    }

    /// Moves finished commands from the protocol to `done`.
    fn reap(&mut self, done: &mut Vec<(T, Result<Completion, HostError>)>) {
        for (token, res) in self.proto.take_done() {
            match token {
                Some(t) => done.push((t, res.map(|r| Completion { cqe: r.cqe, data: r.data }))),
                None => self.internal = Some(res),
            }
        }
    }

    /// Writes queued output until the socket would block.
    fn write_ready(&mut self) -> std::io::Result<()> {
        while !self.out.is_empty() {
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let mut n = 0;
            for (slot, seg) in iov.iter_mut().zip(self.out.iter()) {
                *slot = IoSlice::new(seg);
                n += 1;
            }
            match self.stream.try_write_vectored(&iov[..n]) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(k) => advance(&mut self.out, k),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Tries plain non-blocking reads for up to `busy_poll`, yielding
    /// between attempts; true when something arrived. tokio's readiness
    /// cache only changes when its reactor runs, which is what spinning
    /// avoids, so this reads the socket directly.
    async fn spin(&mut self) -> Result<bool, (QueueFailure, Option<Vec<u8>>)> {
        let deadline = std::time::Instant::now() + self.busy_poll;
        loop {
            let need = self.proto.want().saturating_sub(self.rbuf.len()).max(MIN_READ);
            match self.stream.recv_now(&mut self.rbuf, need) {
                Ok(0) => return Err((QueueFailure::Eof, None)),
                Ok(_) => {
                    self.proto.receive(&mut self.rbuf).map_err(|f| (f.cause, f.term_req))?;
                    return Ok(true);
                }
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) => {}
                Err(e) => return Err((e.into(), None)),
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::task::yield_now().await;
        }
    }

    /// Reads what the socket holds (one read, sized by the PDU being
    /// assembled) and feeds it to the protocol. Would-block is not an error.
    fn read_ready(&mut self) -> Result<(), (QueueFailure, Option<Vec<u8>>)> {
        let need = self.proto.want().saturating_sub(self.rbuf.len()).max(MIN_READ);
        self.rbuf.reserve(need);
        match self.stream.try_read_buf(&mut self.rbuf) {
            Ok(0) => Err((QueueFailure::Eof, None)),
            Ok(_) => self.proto.receive(&mut self.rbuf).map_err(|f| (f.cause, f.term_req)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err((e.into(), None)),
        }
    }

    /// Marks the queue failed, hands every pending token back with the
    /// error and, when the controller is owed one, sends an H2CTermReq
    /// (best effort, bounded) before closing the socket.
    async fn fail(
        &mut self,
        cause: QueueFailure,
        term_req: Option<Vec<u8>>,
        done: &mut Vec<(T, Result<Completion, HostError>)>,
    ) {
        match &cause {
            QueueFailure::Closed | QueueFailure::Eof => tracing::debug!(qid = self.qid, "queue closed: {cause}"),
            _ => tracing::warn!(qid = self.qid, "queue failed: {cause}"),
        }
        self.failure = Some(cause.clone());
        for token in self.proto.fail_all() {
            let e = HostError::QueueFailed { qid: self.qid, cause: cause.clone() };
            match token {
                Some(t) => done.push((t, Err(e))),
                None => self.internal = Some(Err(e)),
            }
        }
        let stream = &mut self.stream;
        let out = &mut self.out;
        let flush = async {
            if let Some(t) = term_req {
                // Finish any PDU already half on the wire, then say why.
                out.push_back(t.into());
                while let Some(front) = out.front() {
                    match stream.write(front).await {
                        Ok(n) if n > 0 => advance(out, n),
                        _ => break,
                    }
                }
            }
            let _ = stream.shutdown().await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), flush).await;
        self.out.clear();
    }

    /// Runs one of the driver's own commands (Connect, Disconnect) to
    /// completion within `limit`. Completions of caller commands that
    /// arrive meanwhile are dropped (the driver only does this before the
    /// caller's first command and at disconnect).
    pub(crate) async fn execute_internal(&mut self, cmd: Command, limit: Duration) -> Result<Response, HostError> {
        if self.failure.is_some() {
            return Err(self.failed());
        }
        self.internal = None;
        if self.proto.submit(None, cmd).is_err() {
            return Err(HostError::InvalidArgument("no free command slot".into()));
        }
        let run = async {
            let mut dropped = Vec::new();
            loop {
                if let Some(r) = self.internal.take() {
                    return r;
                }
                self.poll(&mut dropped).await?;
                dropped.clear();
            }
        };
        tokio::time::timeout(limit, run).await.map_err(|_| HostError::Timeout { what: "command", after: limit })?
    }

    /// Waits for commands in flight (their completions are dropped), sends
    /// the fabrics Disconnect for this queue and closes the connection.
    ///
    /// # Errors
    ///
    /// [`HostError::QueueFailed`] if the queue had failed, a timeout after
    /// `limit`, or [`HostError::Status`] if the Disconnect failed. The
    /// connection is closed in every case.
    pub async fn disconnect(mut self, limit: Duration) -> Result<(), HostError> {
        let drain = async {
            let mut dropped = Vec::new();
            while self.proto.in_flight() > 0 && self.failure.is_none() {
                let _ = self.poll(&mut dropped).await;
                dropped.clear();
            }
        };
        let _ = tokio::time::timeout(limit, drain).await;
        let mut sqe = Sqe::new(fabrics::FABRICS_OPCODE, 0);
        sqe.set_fctype(fctype::DISCONNECT);
        let res = self.execute_internal(Command::new(sqe), limit).await;
        let _ = self.stream.shutdown().await;
        let resp = res?;
        crate::queue::check_status(resp, self.qid, fabrics::FABRICS_OPCODE).map(|_| ())
    }
}
