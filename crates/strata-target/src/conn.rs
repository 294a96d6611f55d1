//! The connection driver: one tokio task per TCP connection, turning
//! socket bytes into [`Transport`] input and executing the commands it
//! yields.
//!
//! A connection goes through two phases. Until Connect it has no
//! controller; the only command it accepts is Connect, and it must come
//! within the handshake deadline (ICReq included) or the connection is
//! closed; it may also be evicted by a newer pending connection (see
//! `admission`). Afterwards it is either an admin queue (commands run one
//! at a time, in order; parked AERs complete when the controller raises an
//! event) or an I/O queue (commands run concurrently up to the queue
//! depth; their completions are sent as they finish, batched into as few
//! writes as possible).
//!
//! Every wait on the host has a deadline: the handshake, the data of each
//! R2T (`r2t_timeout`), progress of every send (`send_timeout`, so a host
//! that stops reading cannot hold a task, buffers or lent blocks), and the
//! controller's keep-alive timer, which runs on a task of its own.
//!
//! On a port with TLS (`TlsMode::Required`, or `Allowed` and the host's
//! first byte opens a TLS record) the TLS 1.3 handshake comes first,
//! within the same handshake deadline; the PSK identity the host proved
//! then binds the connection: its Connect must name the identity's host
//! and subsystem NQNs.
//!
//! A protocol error ends only this connection: the C2HTermReq is sent, the
//! error logged, the socket closed. Closing an admin queue tears down its
//! controller, which closes that controller's I/O queues too.
//!
//! # Commands in flight when a connection ends
//!
//! The socket is closed at once, then the commands still running are
//! *drained*: they run to completion (their results are dropped) for up
//! to `drain_timeout`, and only then does the queue leave its controller
//! and free its slot. This is what Linux nvmet does (it waits for a
//! queue's requests before freeing it): a write of a dead connection that
//! is still reaching the media must not overtake the host's retry of it
//! on a new connection, and a Flush in a group commit finishes for every
//! writer. Commands still running at the deadline are dropped, which the
//! block-device cancellation contract makes safe, and counted.
//!
//! # Panics
//!
//! A panic in an admin command completes it with Internal Error; a panic
//! anywhere else in a connection, I/O commands included, ends that
//! connection. Both are logged and counted; the connection's slot, its
//! controller (killed if it was the admin queue), its buffers, leases and
//! the commands it had in flight are released by drop guards (the
//! block-device cancellation contract makes dropping them safe), and the
//! node keeps serving.

use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use strata_auth::PskIdentity;
use strata_nvme::completion::Cqe;
use strata_nvme::status::Status;
use strata_tls::{Stream, TlsMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use strata_auth::{ControllerAuth, Outcome};

use crate::access::{AccessEvent, AccessKind};
use strata_nvme::auth::{AuthCmd, is_auth};
use strata_nvme::fabrics::fctype;

use crate::admin::{self, AdminContext, AdminReply};
use crate::admission::{Counters, Slot};
use crate::budget::Permit;
use crate::config::{MAX_QUEUE_SIZE, TargetConfig};
use crate::controller::{Controller, ControllerKind, InflightGuard, KeepAliveEnd};
use crate::nvm::{self, IoReply};
use crate::target::{Port, TargetInner};
use crate::transport::{self, Closed, Command, Fatal, Input, Transport, TransportLimits};

/// Output is written out once this many bytes are ready, even if more
/// completions could join the batch: the host starts on the first
/// completions while the rest are still being sent, instead of the two
/// sides taking turns with whole queue-depth batches. Measured with
/// `strata bench` (4 KiB random reads, QD 32, one connection, server and
/// client on their own cores): one write per batch 288-299K IOPS; 8 KiB
/// 252-255K; 16 KiB 327-387K; 32 KiB 533-537K; 64 KiB 296-493K.
const FLUSH_BYTES: usize = 32 * 1024;

/// Admin answers up to this size are not charged to the buffer budget.
const ADMIN_FREE_DATA: usize = 16 * 1024;

/// Receive buffer of a connection before Connect: an ICReq (128 bytes)
/// and a Connect capsule with its data (about 1.1 KiB) fit.
const RBUF_HANDSHAKE: usize = 4 * 1024;
/// Free space offered to each socket read once connected. With a partial
/// PDU of at most header + MAXH2CDATA waiting, the buffer stays under
/// this plus the largest PDU (see `docs/operations.md`).
const RBUF_READ: usize = 128 * 1024;

/// TCP keep-alive on every connection: a host that vanishes without a
/// FIN or RST (power loss, cable cut) is noticed even with the NVMe
/// keep-alive timer disabled (KATO 0, as discovery controllers use).
const TCP_KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const TCP_KEEPALIVE_RETRIES: u32 = 3;

/// Resolves once the watched flag is true (or its sender is gone).
pub(crate) async fn until_true(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|&v| v).await.map(|_| ());
}

/// Sleeps until `deadline`, or forever when there is none.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// One I/O command in flight. A named future type (not a boxed one), so
/// that `FuturesUnordered` holds it without a second allocation per I/O.
///
/// A panic inside it ends the connection (caught around the connection's
/// task), not just the command: catching it per command cost about 100
/// instructions per I/O, 3 % of the read path (callgrind, see
/// docs/performance.md), for a case that is a bug. Admin commands, which
/// are few, are caught one by one.
async fn io_command(ctrl: InflightGuard, qid: u16, cmd: Command) -> IoReply {
    match ctrl.subsystem() {
        Some(sub) => nvm::execute(&ctrl, sub, qid, cmd, &ctrl.data_budget).await,
        None => (Cqe::new(cmd.sqe.cid(), Status::INTERNAL), None),
    }
}

pub(crate) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Why a connection ended.
#[derive(Debug)]
enum End {
    Eof,
    Io(std::io::Error),
    Fatal(Fatal),
    Host(Closed),
    Disconnect,
    ControllerGone,
    Shutdown,
    HandshakeTimeout,
    Evicted,
    SendStalled,
    /// In-band authentication failed (the reason is logged where it
    /// failed) or did not finish within the handshake deadline.
    AuthFailed,
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Eof => write!(f, "host closed the connection"),
            End::Io(e) => write!(f, "socket error: {e}"),
            End::Fatal(fatal) => write!(f, "protocol error: {}", fatal.reason),
            End::Host(Closed::HostTerminated { fes }) => write!(f, "host sent H2CTermReq (FES {fes:#x})"),
            End::Disconnect => write!(f, "host sent Disconnect"),
            End::ControllerGone => write!(f, "controller torn down"),
            End::Shutdown => write!(f, "target shutting down"),
            End::HandshakeTimeout => write!(f, "no ICReq and Connect within the handshake deadline"),
            End::Evicted => write!(f, "closed before Connect to make room for newer connections"),
            End::SendStalled => write!(f, "host stopped reading: no send progress within the send deadline"),
            End::AuthFailed => write!(f, "DH-HMAC-CHAP authentication failed"),
        }
    }
}

/// Leaves the controller when the queue's task ends, panics included: the
/// admin queue kills its controller, an I/O queue detaches.
struct QueueGuard {
    ctrl: Arc<Controller>,
    qid: u16,
    inner: Arc<TargetInner>,
    peer: SocketAddr,
}

impl Drop for QueueGuard {
    fn drop(&mut self) {
        if self.qid == 0 {
            if !self.ctrl.is_dead() {
                tracing::info!(cntlid = self.ctrl.cntlid(), hostnqn = self.ctrl.hostnqn(), "controller removed");
            }
            self.ctrl.kill();
            let ctrl = &self.ctrl;
            self.inner.access(|| AccessEvent {
                kind: AccessKind::Disconnected,
                peer: self.peer,
                hostnqn: ctrl.hostnqn().to_owned(),
                subnqn: ctrl.subsystem().map(|s| s.nqn().to_owned()).unwrap_or_default(),
                qid: 0,
                detail: format!("controller {} removed", ctrl.cntlid()),
            });
        } else {
            self.ctrl.detach_io_queue(self.qid);
        }
    }
}

struct Conn<'a> {
    inner: &'a Arc<TargetInner>,
    stream: Stream,
    /// The PSK identity the host proved in the TLS handshake, if TLS.
    tls: Option<PskIdentity>,
    peer: SocketAddr,
    local: SocketAddr,
    port: Port,
    transport: Transport,
    rbuf: BytesMut,
    rbuf_read: usize,
    inputs: Vec<Input>,
    shutdown: watch::Receiver<bool>,
    /// The controller's death, once connected.
    dead: Option<watch::Receiver<bool>>,
    /// The socket was shut down (the end was handled).
    closed: bool,
    /// The budget an I/O queue prepaid for its commands; returned after
    /// its commands are drained.
    queue_permit: Option<Permit>,
    /// The queue's DH-HMAC-CHAP state, once a transaction began.
    auth: Option<ControllerAuth>,
}

fn transport_limits(cfg: &TargetConfig) -> TransportLimits {
    TransportLimits {
        in_capsule_data: cfg.in_capsule_data,
        max_h2c_data: cfg.max_h2c_data,
        max_transfer: cfg.max_transfer(),
        max_r2t_inflight: cfg.max_r2t_inflight,
        r2t_timeout: cfg.r2t_timeout,
    }
}

/// Serves one accepted connection until it ends, then closes it (see the
/// module doc for how it ends).
pub(crate) async fn serve(
    inner: &Arc<TargetInner>,
    stream: TcpStream,
    peer: SocketAddr,
    port: Port,
    mut slot: Slot,
    accepted: Instant,
) {
    let _ = stream.set_nodelay(true);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(TCP_KEEPALIVE_IDLE)
        .with_interval(TCP_KEEPALIVE_INTERVAL)
        .with_retries(TCP_KEEPALIVE_RETRIES);
    let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive);
    let local = stream.local_addr().unwrap_or(port.addr);
    let (stream, tls) = match tls_handshake(inner, stream, peer, port, &mut slot, accepted).await {
        Some(s) => s,
        None => return,
    };
    let limits = transport_limits(&inner.config);
    let mut conn = Conn {
        inner,
        stream,
        tls,
        peer,
        local,
        port,
        transport: Transport::with_budget(limits, inner.budget.clone()),
        rbuf: BytesMut::with_capacity(RBUF_HANDSHAKE),
        rbuf_read: RBUF_HANDSHAKE,
        inputs: Vec::new(),
        shutdown: inner.shutdown.subscribe(),
        dead: None,
        closed: false,
        queue_permit: None,
        auth: None,
    };
    let end = conn.run(&mut slot, accepted).await;
    conn.close(&end, &slot).await;
}

/// The TLS handshake a port asks for, under the handshake deadline:
/// `None` when the connection is to be closed (refused, failed, timed
/// out, evicted, shut down), logged and counted here.
async fn tls_handshake(
    inner: &Arc<TargetInner>,
    tcp: TcpStream,
    peer: SocketAddr,
    port: Port,
    slot: &mut Slot,
    accepted: Instant,
) -> Option<(Stream, Option<PskIdentity>)> {
    let mode = port.tls;
    if mode == TlsMode::Off {
        return Some((Stream::Tcp(tcp), None));
    }
    let deadline = accepted + inner.config.handshake_timeout;
    let left = deadline.saturating_duration_since(Instant::now());
    let mut shutdown = inner.shutdown.subscribe();
    let handshake = async {
        if mode == TlsMode::Allowed {
            match tokio::time::timeout(left, strata_tls::server::sniff(&tcp)).await {
                Ok(Ok(false)) => return Ok((Stream::Tcp(tcp), None)),
                Ok(Ok(true)) => {}
                Ok(Err(e)) => return Err(strata_tls::TlsError::Io(e)),
                Err(_) => return Err(strata_tls::TlsError::Timeout(left)),
            }
        }
        let ctx = inner.tls_context().map_err(|e| strata_tls::TlsError::Handshake(e.to_string()))?;
        let left = deadline.saturating_duration_since(Instant::now());
        strata_tls::server::accept(&ctx, tcp, left).await.map(|(s, id)| (s, Some(id)))
    };
    let r = tokio::select! {
        r = handshake => r,
        _ = slot.evicted() => return None,
        _ = until_true(&mut shutdown) => return None,
    };
    match r {
        Ok(s) => {
            if let Some(id) = &s.1 {
                tracing::debug!(%peer, identity = %id, "TLS established");
            }
            Some(s)
        }
        Err(e) => {
            Counters::bump(&inner.admission.counters.tls_failures);
            tracing::warn!(%peer, port = %port.addr, "connection closed: {e}");
            inner.access(|| AccessEvent {
                kind: AccessKind::ConnectRefused,
                peer,
                hostnqn: String::new(),
                subnqn: String::new(),
                qid: 0,
                detail: e.to_string(),
            });
            None
        }
    }
}

impl Conn<'_> {
    /// Reads more bytes and feeds them to the transport.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: bytes read are kept in `rbuf`.
    async fn read_more(&mut self) -> Result<(), End> {
        if self.rbuf.capacity() - self.rbuf.len() < self.rbuf_read / 8 {
            self.rbuf.reserve(self.rbuf_read);
        }
        match self.stream.read_buf(&mut self.rbuf).await {
            Ok(0) => Err(End::Eof),
            Ok(_) => self.transport.receive(&mut self.rbuf, &mut self.inputs, Instant::now()).map_err(End::Fatal),
            Err(e) => Err(End::Io(e)),
        }
    }

    /// Writes all pending output with vectored writes: read data goes
    /// from the drive's buffer (or the RAM drive's own memory, lent) to the
    /// socket without another copy. Lent data never waits for the socket:
    /// when the socket is full, what is left of it is copied first (see
    /// [`Transport::materialize`]), so a host that stops reading cannot
    /// hold up writers to the blocks it read. A send that makes no
    /// progress for `send_timeout` ends the connection, as does the
    /// controller's death or the target's shutdown while waiting.
    async fn flush(&mut self) -> Result<(), End> {
        /// At most this many slices per system call (IOV_MAX is 1024).
        const IOV_BATCH: usize = 512;
        while self.transport.has_output() {
            let slices = self.transport.output_slices();
            let n = slices.len().min(IOV_BATCH);
            match self.stream.try_write_vectored(&slices[..n]) {
                Ok(0) => {
                    self.transport.clear_output();
                    return Err(End::Io(std::io::ErrorKind::WriteZero.into()));
                }
                Ok(k) => self.transport.consume(k),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.transport.materialize();
                    // Boxed: the rare slow path stays out of this future,
                    // which every batch of completions builds.
                    if let Err(end) = Box::pin(self.wait_writable()).await {
                        self.transport.clear_output();
                        return Err(end);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.transport.clear_output();
                    return Err(End::Io(e));
                }
            }
        }
        Ok(())
    }

    async fn wait_writable(&mut self) -> Result<(), End> {
        let mut shutdown = self.shutdown.clone();
        let mut dead = self.dead.clone();
        let dead = async {
            match &mut dead {
                Some(d) => until_true(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = self.stream.writable() => r.map_err(End::Io),
            _ = tokio::time::sleep(self.inner.config.send_timeout) => Err(End::SendStalled),
            _ = dead => Err(End::ControllerGone),
            _ = until_true(&mut shutdown) => Err(End::Shutdown),
        }
    }

    /// Ends the connection: logs why, sends a C2HTermReq after a protocol
    /// error (under the send deadline) and shuts the socket.
    async fn close(&mut self, end: &End, slot: &Slot) {
        if std::mem::replace(&mut self.closed, true) {
            return;
        }
        let peer = self.peer;
        let counters = slot.counters();
        match end {
            End::Fatal(f) => {
                tracing::warn!(%peer, fes = f.fes, fei = f.fei, "protocol error, terminating connection: {}", f.reason);
                self.transport.push_output(&f.term_req());
                let _ = self.flush().await;
            }
            End::Eof | End::Disconnect | End::Shutdown | End::ControllerGone => {
                tracing::debug!(%peer, "connection closed: {end}")
            }
            End::HandshakeTimeout | End::SendStalled | End::Evicted => {
                match end {
                    End::HandshakeTimeout => Counters::bump(&counters.handshake_timeouts),
                    End::SendStalled => Counters::bump(&counters.send_timeouts),
                    // Counted when it was chosen for eviction.
                    _ => {}
                }
                tracing::warn!(%peer, "connection closed: {end}")
            }
            other => tracing::info!(%peer, "connection closed: {other}"),
        }
        let _ = self.stream.shutdown().await;
    }

    /// An I/O queue's Connect first takes, from the buffer budget, the
    /// memory of every command its queue can hold (see `budget`); then the
    /// queue never waits for memory to read its socket. When the budget
    /// cannot give it now, the Connect is answered Controller Busy, which
    /// hosts retry: it does not wait in the budget's line, where a stream
    /// of Connects that cannot be served would hold up commands.
    fn prepay_queue(&mut self, cmd: &Command) -> Result<(), Cqe> {
        let c = strata_nvme::fabrics::ConnectCmd::decode(&cmd.sqe);
        if c.qid == 0 {
            return Ok(());
        }
        let entries = (usize::from(c.sqsize) + 1).min(usize::from(MAX_QUEUE_SIZE));
        let bytes = transport::queue_memory(&transport_limits(&self.inner.config), entries);
        match self.inner.queue_budget.try_acquire(bytes) {
            Some(permit) => {
                self.queue_permit = Some(permit);
                Ok(())
            }
            None => {
                tracing::warn!(peer = %self.peer, qid = c.qid, bytes, "I/O queue refused for now: no buffer budget for its commands");
                Err(Cqe::new(cmd.sqe.cid(), Status::CONNECT_CONTROLLER_BUSY))
            }
        }
    }

    /// Holds a new association of a host back until the commands of its
    /// previous, dead associations with the same subsystem have finished
    /// (at most `drain_timeout`): a write of a connection that died must
    /// not overtake the host's retry of it on the new association.
    async fn await_predecessors(&self, ctrl: &Arc<Controller>) {
        for old in self.inner.predecessors(ctrl) {
            tracing::info!(
                cntlid = ctrl.cntlid(),
                old = old.cntlid(),
                in_flight = old.commands_in_flight(),
                "new association waits for the commands of the host's previous one"
            );
            let _ = tokio::time::timeout(self.inner.config.drain_timeout, old.wait_drained()).await;
        }
    }

    async fn run(&mut self, slot: &mut Slot, accepted: Instant) -> End {
        // Phase 1: wait for Connect, under the handshake deadline.
        let deadline = accepted + self.inner.config.handshake_timeout;
        let connected = loop {
            if let Some(input) = (!self.inputs.is_empty()).then(|| self.inputs.remove(0)) {
                match input {
                    Input::Closed(c) => return End::Host(c),
                    Input::Command(cmd) if transport::is_connect(&cmd.sqe) => {
                        if let Err(cqe) = self.prepay_queue(&cmd) {
                            self.transport.complete(cqe);
                            continue;
                        }
                        match self.inner.connect(self.port.role, self.peer, &cmd, self.tls.as_ref()) {
                            Ok(c) => {
                                if c.qid == 0 {
                                    self.await_predecessors(&c.ctrl).await;
                                }
                                self.transport.complete(c.response);
                                break c;
                            }
                            Err(cqe) => {
                                self.queue_permit = None;
                                self.transport.complete(cqe);
                            }
                        }
                    }
                    Input::Command(cmd) => {
                        self.transport.complete(Cqe::new(cmd.sqe.cid(), Status::COMMAND_SEQUENCE.dnr()));
                    }
                    Input::AerRetired(_) => {}
                }
                continue;
            }
            if let Err(e) = self.flush().await {
                return e;
            }
            let mut shutdown = self.shutdown.clone();
            tokio::select! {
                r = self.read_more() => if let Err(e) = r { return e },
                _ = tokio::time::sleep_until(deadline.into()) => return End::HandshakeTimeout,
                _ = slot.evicted() => return End::Evicted,
                _ = until_true(&mut shutdown) => return End::Shutdown,
            }
        };
        slot.connected();
        self.rbuf_read = RBUF_READ;
        self.transport.set_queue_params(connected.sqsize, connected.sq_flow_disabled);
        let _guard =
            QueueGuard { ctrl: connected.ctrl.clone(), qid: connected.qid, inner: self.inner.clone(), peer: self.peer };
        self.dead = Some(connected.ctrl.watch_dead());
        if connected.qid == 0 {
            let ctrl = connected.ctrl.clone();
            let inner = self.inner.clone();
            let peer = self.peer;
            tokio::spawn(async move {
                if ctrl.watch_keep_alive().await == KeepAliveEnd::Expired {
                    Counters::bump(&inner.admission.counters.keep_alive_expiries);
                    tracing::warn!(cntlid = ctrl.cntlid(), hostnqn = ctrl.hostnqn(), kato = ?ctrl.kato(),
                        "keep-alive timeout expired; tearing down the controller");
                    inner.access(|| AccessEvent {
                        kind: AccessKind::KeepAliveExpired,
                        peer,
                        hostnqn: ctrl.hostnqn().to_owned(),
                        subnqn: ctrl.subsystem().map(|s| s.nqn().to_owned()).unwrap_or_default(),
                        qid: 0,
                        detail: format!(
                            "no keep-alive within {:?}; controller {} torn down",
                            ctrl.kato(),
                            ctrl.cntlid()
                        ),
                    });
                }
            });
        }
        if let Err(e) = self.flush().await {
            return e;
        }
        if let Some(keys) = connected.auth {
            let (hostnqn, subnqn) = (connected.ctrl.hostnqn(), connected.ctrl.subsystem().map(|s| s.nqn().to_owned()));
            self.auth = Some(ControllerAuth::new(Some(keys), hostnqn, subnqn.as_deref().unwrap_or_default()));
            if let Err(e) = self.authenticate(&connected.ctrl, connected.qid, deadline).await {
                if !matches!(e, End::AuthFailed) {
                    let why = format!("the connection ended before the host authenticated: {e}");
                    self.access_event(AccessKind::AuthenticationFailed, &connected.ctrl, connected.qid, why);
                }
                return e;
            }
        }
        if connected.qid == 0 {
            self.admin_queue(&connected.ctrl).await
        } else {
            self.io_queue(&connected.ctrl, connected.qid, slot).await
        }
    }

    /// Runs the queue's first DH-HMAC-CHAP transaction, which must finish
    /// by `deadline` (the handshake's). Until it succeeds every other
    /// command is answered Authentication Required (Disconnect excepted).
    async fn authenticate(&mut self, ctrl: &Arc<Controller>, qid: u16, deadline: Instant) -> Result<(), End> {
        loop {
            for input in std::mem::take(&mut self.inputs) {
                let cmd = match input {
                    Input::Closed(c) => return Err(End::Host(c)),
                    Input::AerRetired(_) => continue,
                    Input::Command(cmd) => cmd,
                };
                if is_auth(&cmd.sqe) {
                    if let Err(e) = self.auth_command(ctrl, qid, &cmd) {
                        let _ = self.flush().await;
                        return Err(e);
                    }
                } else if cmd.sqe.opcode() == strata_nvme::fabrics::FABRICS_OPCODE
                    && cmd.sqe.fctype() == fctype::DISCONNECT
                {
                    self.transport.complete(Cqe::new(cmd.sqe.cid(), Status::SUCCESS));
                    let _ = self.flush().await;
                    return Err(End::Disconnect);
                } else {
                    self.transport.complete(Cqe::new(cmd.sqe.cid(), Status::AUTH_REQUIRED.dnr()));
                }
            }
            self.flush().await?;
            if self.auth.as_ref().is_some_and(|a| a.outcome() == Outcome::Authenticated && a.finished()) {
                tracing::debug!(cntlid = ctrl.cntlid(), qid, hostnqn = ctrl.hostnqn(), "queue authenticated");
                return Ok(());
            }
            let mut shutdown = self.shutdown.clone();
            tokio::select! {
                r = self.read_more() => r?,
                _ = tokio::time::sleep_until(deadline.into()) => {
                    tracing::warn!(peer = %self.peer, cntlid = ctrl.cntlid(), qid, hostnqn = ctrl.hostnqn(),
                        "authentication refused: the host did not authenticate within the handshake deadline \
                         (does it have the DH-HMAC-CHAP key? nvme connect --dhchap-secret)");
                    self.access_event(AccessKind::AuthenticationFailed, ctrl, qid, "no authentication within the handshake deadline".into());
                    return Err(End::AuthFailed);
                }
                _ = until_true(&mut shutdown) => return Err(End::Shutdown),
            }
        }
    }

    fn access_event(&self, kind: AccessKind, ctrl: &Controller, qid: u16, detail: String) {
        self.inner.access(|| AccessEvent {
            kind,
            peer: self.peer,
            hostnqn: ctrl.hostnqn().to_owned(),
            subnqn: ctrl.subsystem().map(|s| s.nqn().to_owned()).unwrap_or_default(),
            qid,
            detail,
        });
    }

    /// Executes an Authentication Send or Receive on queue `qid` of `ctrl`.
    /// A Negotiate (re)starts a transaction with the host's keys of the
    /// moment. Fails when a transaction ended in failure: the queue is
    /// closed, as nvmet does with a fatal controller error.
    fn auth_command(&mut self, ctrl: &Arc<Controller>, qid: u16, cmd: &Command) -> Result<(), End> {
        let cid = cmd.sqe.cid();
        let a = AuthCmd::decode(&cmd.sqe);
        if a.invalid_field().is_some() {
            self.transport.complete(Cqe::new(cid, Status::INVALID_FIELD.dnr()));
            return Ok(());
        }
        let len = a.len as usize;
        let Some(sub) = ctrl.subsystem() else {
            // Discovery does not authenticate hosts in band.
            self.transport.complete(Cqe::new(cid, Status::INVALID_OPCODE.dnr()));
            return Ok(());
        };
        if cmd.sqe.fctype() == fctype::AUTH_SEND {
            let data = cmd.data.as_deref().unwrap_or_default();
            if data.len() != len {
                self.transport.complete(Cqe::new(cid, Status::INVALID_FIELD.dnr()));
                return Ok(());
            }
            if ControllerAuth::is_negotiate(data) {
                let keys = self.inner.auth_keys(sub, ctrl.hostnqn());
                match self.auth.as_mut() {
                    Some(m) => m.set_keys(keys),
                    None => self.auth = Some(ControllerAuth::new(keys, ctrl.hostnqn(), sub.nqn())),
                }
            }
            let Some(m) = self.auth.as_mut() else {
                self.transport.complete(Cqe::new(cid, Status::COMMAND_SEQUENCE.dnr()));
                return Ok(());
            };
            m.send(data);
            self.transport.complete(Cqe::new(cid, Status::SUCCESS));
        } else {
            let Some(m) = self.auth.as_mut() else {
                self.transport.complete(Cqe::new(cid, Status::COMMAND_SEQUENCE.dnr()));
                return Ok(());
            };
            if cmd.read_len != len {
                self.transport.complete(Cqe::new(cid, Status::INVALID_FIELD.dnr()));
                return Ok(());
            }
            match m.receive(len) {
                Ok(b) => self.transport.complete_with_data(Cqe::new(cid, Status::SUCCESS), &b),
                Err(e) => {
                    tracing::debug!(cntlid = ctrl.cntlid(), qid, "authentication receive: {e}");
                    self.transport.complete(Cqe::new(cid, Status::INVALID_FIELD.dnr()));
                }
            }
        }
        let Some(m) = self.auth.as_ref() else { return Ok(()) };
        if m.finished() {
            match m.outcome() {
                Outcome::Authenticated => {
                    let (hash, group) = m.chosen().map_or(("?", "?"), |(h, g)| (h.name(), g.name()));
                    tracing::info!(
                        cntlid = ctrl.cntlid(),
                        qid,
                        hostnqn = ctrl.hostnqn(),
                        subnqn = sub.nqn(),
                        hash,
                        dhgroup = group,
                        "host authenticated (DH-HMAC-CHAP)"
                    );
                    self.access_event(AccessKind::Authenticated, ctrl, qid, format!("{hash}, {group}"));
                }
                Outcome::Failed => {
                    let why = m.failure().unwrap_or("unknown reason").to_string();
                    tracing::warn!(peer = %self.peer, cntlid = ctrl.cntlid(), qid, hostnqn = ctrl.hostnqn(), subnqn = sub.nqn(),
                        "authentication refused: {why}");
                    self.access_event(AccessKind::AuthenticationFailed, ctrl, qid, why);
                    return Err(End::AuthFailed);
                }
                Outcome::Pending => {}
            }
        }
        Ok(())
    }

    async fn admin_queue(&mut self, ctrl: &Arc<Controller>) -> End {
        let hostnqn = ctrl.hostnqn().to_owned();
        let local = self.local;
        let inner = self.inner.clone();
        let discovery_log = move || inner.discovery_log(&hostnqn, local);
        let mut dead = ctrl.watch_dead();
        loop {
            let mut held: Vec<Permit> = Vec::new();
            for input in std::mem::take(&mut self.inputs) {
                let cmd = match input {
                    Input::Closed(c) => return End::Host(c),
                    Input::AerRetired(cid) => {
                        ctrl.retire_aer(cid);
                        continue;
                    }
                    Input::Command(cmd) => cmd,
                };
                if is_auth(&cmd.sqe) {
                    if let Err(e) = self.auth_command(ctrl, 0, &cmd) {
                        let _ = self.flush().await;
                        return e;
                    }
                    continue;
                }
                // A large answer is charged until it is sent. Small ones are
                // not (one at a time per queue, at most ADMIN_FREE_DATA):
                // Identify and Keep Alive must not wait behind I/O buffers.
                if cmd.read_len > ADMIN_FREE_DATA {
                    held.push(self.inner.budget.clone().acquire(cmd.read_len).await);
                }
                let ctx = AdminContext { config: &self.inner.config, discovery_log: &discovery_log };
                let cid = cmd.sqe.cid();
                let reply = AssertUnwindSafe(admin::execute(&ctx, ctrl, &cmd.sqe, cmd.read_len)).catch_unwind().await;
                match reply {
                    Ok(AdminReply::Done(cqe, data)) => self.transport.complete_with_data(cqe, &data),
                    Ok(AdminReply::Parked) => self.transport.park_aer(cid),
                    Ok(AdminReply::Disconnect(cqe)) => {
                        self.transport.complete(cqe);
                        let _ = self.flush().await;
                        return End::Disconnect;
                    }
                    Err(panic) => {
                        Counters::bump(&self.inner.admission.counters.panics);
                        tracing::error!(
                            cntlid = ctrl.cntlid(),
                            cid,
                            "admin command panicked: {}",
                            panic_message(&panic)
                        );
                        self.transport.complete(Cqe::new(cid, Status::INTERNAL));
                    }
                }
            }
            for cqe in ctrl.take_ready_aers() {
                self.transport.complete(cqe);
            }
            if let Err(e) = self.flush().await {
                return e;
            }
            drop(held);
            let mut shutdown = self.shutdown.clone();
            tokio::select! {
                r = self.read_more() => if let Err(e) = r { return e },
                _ = ctrl.event_ready() => {}
                _ = until_true(&mut dead) => return End::ControllerGone,
                _ = until_true(&mut shutdown) => return End::Shutdown,
            }
        }
    }

    async fn io_queue(&mut self, ctrl: &Arc<Controller>, qid: u16, slot: &Slot) -> End {
        if !matches!(ctrl.kind(), ControllerKind::Io(_)) {
            return End::ControllerGone;
        }
        let mut inflight = FuturesUnordered::new();
        let mut dead = ctrl.watch_dead();
        let mut shutdown = self.shutdown.clone();
        let budget = self.inner.budget.clone();
        // The wait for an R2T buffer, kept across rounds so that it keeps
        // its place in the budget's line.
        let mut r2t_wait: Option<std::pin::Pin<Box<dyn Future<Output = Permit> + Send>>> = None;
        let end = 'run: loop {
            if !self.inputs.is_empty() {
                ctrl.touch();
            }
            for input in std::mem::take(&mut self.inputs) {
                let cmd = match input {
                    Input::Closed(c) => break 'run End::Host(c),
                    Input::AerRetired(_) => continue,
                    Input::Command(cmd) => cmd,
                };
                if is_auth(&cmd.sqe) {
                    if let Err(e) = self.auth_command(ctrl, qid, &cmd) {
                        let _ = self.flush().await;
                        break 'run e;
                    }
                    continue;
                }
                if cmd.sqe.opcode() == strata_nvme::fabrics::FABRICS_OPCODE {
                    // Only Disconnect and authentication are meaningful
                    // on an I/O queue.
                    if cmd.sqe.fctype() == strata_nvme::fabrics::fctype::DISCONNECT {
                        self.transport.complete(Cqe::new(cmd.sqe.cid(), Status::SUCCESS));
                        let _ = self.flush().await;
                        break 'run End::Disconnect;
                    }
                    self.transport.complete(Cqe::new(cmd.sqe.cid(), Status::INVALID_OPCODE.dnr()));
                    continue;
                }
                inflight.push(io_command(ctrl.command_started(), qid, cmd));
            }
            // Collect every completion that is ready now, so that one write
            // carries them all.
            while let Some(Some((cqe, data))) = inflight.next().now_or_never() {
                self.complete(cqe, data);
                if self.transport.output_len() >= FLUSH_BYTES
                    && let Err(e) = self.flush().await
                {
                    break 'run e;
                }
            }
            if let Err(e) = self.flush().await {
                break 'run e;
            }
            let poll = self.inner.config.poll;
            if !poll.is_zero() {
                match self.busy_poll(poll, &mut inflight).await {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(e) => break 'run e,
                }
            }
            let r2t_deadline = self.transport.r2t_deadline();
            match (self.transport.r2t_blocked_on(), &r2t_wait) {
                (Some(n), None) => r2t_wait = Some(Box::pin(budget.clone().acquire(n))),
                (None, Some(_)) => r2t_wait = None,
                _ => {}
            }
            tokio::select! {
                r = self.read_more() => if let Err(e) = r { break 'run e },
                Some((cqe, data)) = inflight.next(), if !inflight.is_empty() => self.complete(cqe, data),
                _ = sleep_until(r2t_deadline), if r2t_deadline.is_some() => {
                    if let Err(f) = self.transport.check_timeouts(Instant::now()) {
                        Counters::bump(&slot.counters().r2t_timeouts);
                        break 'run End::Fatal(f);
                    }
                }
                // The guard makes the branch run only with a wait in place.
                permit = async { r2t_wait.as_mut().expect("guarded").await }, if r2t_wait.is_some() => {
                    r2t_wait = None;
                    self.transport.send_r2ts(permit, Instant::now());
                }
                _ = until_true(&mut dead) => break 'run End::ControllerGone,
                _ = until_true(&mut shutdown) => break 'run End::Shutdown,
            }
        };
        // Close first, so the host learns at once; then let what is still
        // running finish (see the module doc).
        self.close(&end, slot).await;
        if !inflight.is_empty() {
            let n = inflight.len();
            let drain = async { while inflight.next().await.is_some() {} };
            if tokio::time::timeout(self.inner.config.drain_timeout, drain).await.is_err() {
                let left = inflight.len();
                slot.counters().commands_abandoned.fetch_add(left as u64, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(peer = %self.peer, cntlid = ctrl.cntlid(), qid, left,
                    "commands of a closed connection still running after the drain deadline; abandoning them");
            } else {
                tracing::debug!(peer = %self.peer, qid, n, "drained the commands of a closed connection");
            }
        }
        end
    }

    /// Polls the socket and the commands in flight without sleeping for up
    /// to `budget`, yielding to the runtime between attempts so that other
    /// connections on this thread run too. Returns true when something
    /// arrived or completed. Trades CPU for latency: a sleeping thread
    /// costs a wake-up (scheduler, interrupts) per round trip, which is
    /// what limits shallow queues.
    async fn busy_poll<F>(&mut self, budget: Duration, inflight: &mut FuturesUnordered<F>) -> Result<bool, End>
    where
        F: Future<Output = IoReply>,
    {
        let deadline = std::time::Instant::now() + budget;
        loop {
            // A plain non-blocking recv: tokio's readiness cache only
            // changes when its reactor runs, which is what we avoid here.
            match self.stream.recv_now(&mut self.rbuf, 16 * 1024) {
                Ok(0) => return Err(End::Eof),
                Ok(_) => {
                    self.transport.receive(&mut self.rbuf, &mut self.inputs, Instant::now()).map_err(End::Fatal)?;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(End::Io(e)),
            }
            if let Some(Some((cqe, data))) = inflight.next().now_or_never() {
                self.complete(cqe, data);
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::task::yield_now().await;
        }
    }

    fn complete(&mut self, cqe: Cqe, data: Option<(strata_block::ReadData, Option<Permit>)>) {
        match data {
            Some((buf, permit)) => self.transport.complete_with_buf(cqe, buf, permit),
            None => self.transport.complete(cqe),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::DataBudget;
    use crate::subsystem::Subsystem;

    #[test]
    fn the_state_of_a_command_in_flight_fits_its_memory_charge() {
        let sub = Subsystem::new("nqn.2026-11.io.strata:probe", "probe", vec![]);
        let ctrl = Controller::new(1, ControllerKind::Io(sub), "h".into(), [0; 16], 0, 1, DataBudget::unlimited());
        let cmd = Command { sqe: strata_nvme::command::Sqe::new(0x02, 1), data: None, read_len: 4096, permit: None };
        let fut = io_command(ctrl.command_started(), 1, cmd);
        let size = std::mem::size_of_val(&fut);
        eprintln!("io_command future: {size} bytes");
        // Room left for the task around it and the device's future.
        assert!(size + 1024 <= transport::COMMAND_STATE_BYTES, "{size} bytes");
    }
}
