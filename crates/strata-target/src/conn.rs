//! The connection driver: one tokio task per TCP connection, turning
//! socket bytes into [`Transport`] input and executing the commands it
//! yields.
//!
//! A connection goes through two phases. Until Connect it has no
//! controller; the only command it accepts is Connect. Afterwards it is
//! either an admin queue (commands run one at a time, in order; parked
//! AERs complete when the controller raises an event; the keep-alive
//! timer is watched here) or an I/O queue (commands run concurrently up to
//! the queue depth; their completions are sent as they finish, batched
//! into as few writes as possible).
//!
//! A protocol error ends only this connection: the C2HTermReq is sent, the
//! error logged, the socket closed. Closing an admin queue tears down its
//! controller, which closes that controller's I/O queues too.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use strata_nvme::completion::Cqe;
use strata_nvme::status::Status;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::admin::{self, AdminContext, AdminReply};
use crate::controller::{Controller, ControllerKind};
use crate::nvm::{self, IoReply};
use crate::subsystem::Subsystem;
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

/// Resolves once the watched flag is true (or its sender is gone).
async fn until_true(rx: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|&v| v).await.map(|_| ());
}

/// One I/O command in flight. A named future type (not a boxed one), so
/// that `FuturesUnordered` holds it without a second allocation per I/O.
async fn io_command(ctrl: Arc<Controller>, sub: Arc<Subsystem>, qid: u16, cmd: Command) -> IoReply {
    nvm::execute(&ctrl, &sub, qid, cmd).await
}

pub(crate) async fn accept_loop(inner: Arc<TargetInner>, listener: TcpListener, port: Port) {
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        tokio::select! {
            res = listener.accept() => match res {
                Ok((stream, peer)) => {
                    if inner.active_connections.load(Ordering::Acquire) >= inner.config.max_connections {
                        tracing::warn!(%peer, limit = inner.config.max_connections, "connection refused: too many connections");
                        drop(stream);
                        continue;
                    }
                    inner.active_connections.fetch_add(1, Ordering::AcqRel);
                    spawn_connection(&inner, stream, peer, port);
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off briefly
                    // instead of spinning.
                    tracing::warn!(addr = %port.addr, "accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = until_true(&mut shutdown) => return,
        }
    }
}

/// Runs a connection: on the next executor in round-robin order when the
/// target has per-core executors, else on the current runtime.
fn spawn_connection(inner: &Arc<TargetInner>, stream: TcpStream, peer: SocketAddr, port: Port) {
    let task = {
        let inner = inner.clone();
        move |stream: TcpStream| async move {
            serve(&inner, stream, peer, port).await;
            if inner.active_connections.fetch_sub(1, Ordering::AcqRel) == 1 {
                inner.idle.notify_waiters();
            }
        }
    };
    let Some(handle) = inner.next_executor() else {
        tokio::spawn(task(stream));
        return;
    };
    // A tokio socket belongs to the runtime that registered it: hand the
    // executor a std socket and register it there.
    let std_stream = match stream.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(%peer, "cannot move connection to its executor: {e}");
            inner.active_connections.fetch_sub(1, Ordering::AcqRel);
            return;
        }
    };
    let inner2 = inner.clone();
    handle.spawn(async move {
        match TcpStream::from_std(std_stream) {
            Ok(stream) => task(stream).await,
            Err(e) => {
                tracing::warn!(%peer, "cannot register connection on its executor: {e}");
                if inner2.active_connections.fetch_sub(1, Ordering::AcqRel) == 1 {
                    inner2.idle.notify_waiters();
                }
            }
        }
    });
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
    KeepAliveExpired,
    Shutdown,
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
            End::KeepAliveExpired => write!(f, "keep-alive timeout"),
            End::Shutdown => write!(f, "target shutting down"),
        }
    }
}

struct Conn<'a> {
    inner: &'a Arc<TargetInner>,
    stream: TcpStream,
    local: SocketAddr,
    port: Port,
    transport: Transport,
    rbuf: BytesMut,
    inputs: Vec<Input>,
}

async fn serve(inner: &Arc<TargetInner>, stream: TcpStream, peer: SocketAddr, port: Port) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().unwrap_or(port.addr);
    let cfg = &inner.config;
    let limits = TransportLimits {
        in_capsule_data: cfg.in_capsule_data,
        max_h2c_data: cfg.max_h2c_data,
        max_transfer: cfg.max_transfer(),
        max_r2t_inflight: cfg.max_r2t_inflight,
    };
    let mut conn = Conn {
        inner,
        stream,
        local,
        port,
        transport: Transport::new(limits),
        rbuf: BytesMut::with_capacity(256 * 1024),
        inputs: Vec::new(),
    };
    let mut ctrl_for_cleanup: Option<(Arc<Controller>, u16)> = None;
    let end = conn.run(&mut ctrl_for_cleanup).await;
    if let End::Fatal(f) = &end {
        tracing::warn!(%peer, fes = f.fes, fei = f.fei, "protocol error, terminating connection: {}", f.reason);
        let _ = conn.flush().await;
        let _ = conn.stream.write_all(&f.term_req()).await;
    }
    let _ = conn.stream.shutdown().await;
    match &end {
        End::Eof | End::Disconnect | End::Shutdown | End::ControllerGone => {
            tracing::debug!(%peer, "connection closed: {end}")
        }
        End::Fatal(_) => {}
        other => tracing::info!(%peer, "connection closed: {other}"),
    }
    if let Some((ctrl, qid)) = ctrl_for_cleanup {
        if qid == 0 {
            tracing::info!(cntlid = ctrl.cntlid(), hostnqn = ctrl.hostnqn(), "controller removed");
            ctrl.kill();
        } else {
            ctrl.detach_io_queue(qid);
        }
    }
}

impl Conn<'_> {
    /// Reads more bytes and feeds them to the transport.
    async fn read_more(&mut self) -> Result<(), End> {
        if self.rbuf.capacity() - self.rbuf.len() < 16 * 1024 {
            self.rbuf.reserve(256 * 1024);
        }
        match self.stream.read_buf(&mut self.rbuf).await {
            Ok(0) => Err(End::Eof),
            Ok(_) => self.transport.receive(&mut self.rbuf, &mut self.inputs).map_err(End::Fatal),
            Err(e) => Err(End::Io(e)),
        }
    }

    /// Writes all pending output with vectored writes: read data goes
    /// from the drive's buffer (or the RAM drive's own memory, lent) to the
    /// socket without another copy. Lent data never waits for the socket:
    /// when the socket is full, what is left of it is copied first (see
    /// [`Transport::materialize`]), so a host that stops reading cannot
    /// hold up writers to the blocks it read.
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
                    if let Err(e) = self.stream.writable().await {
                        self.transport.clear_output();
                        return Err(End::Io(e));
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

    async fn run(&mut self, cleanup: &mut Option<(Arc<Controller>, u16)>) -> End {
        let mut shutdown = self.inner.shutdown.subscribe();
        // Phase 1: wait for Connect.
        let connected = loop {
            if let Some(input) = (!self.inputs.is_empty()).then(|| self.inputs.remove(0)) {
                match input {
                    Input::Closed(c) => return End::Host(c),
                    Input::Command(cmd) if transport::is_connect(&cmd.sqe) => {
                        match self.inner.connect(self.port.role, &cmd) {
                            Ok(c) => {
                                self.transport.complete(c.response);
                                break c;
                            }
                            Err(cqe) => self.transport.complete(cqe),
                        }
                    }
                    Input::Command(cmd) => {
                        self.transport.complete(Cqe::new(cmd.sqe.cid(), Status::COMMAND_SEQUENCE.dnr()));
                    }
                }
                continue;
            }
            if let Err(e) = self.flush().await {
                return e;
            }
            tokio::select! {
                r = self.read_more() => if let Err(e) = r { return e },
                _ = until_true(&mut shutdown) => return End::Shutdown,
            }
        };
        self.transport.set_queue_params(connected.sqsize, connected.sq_flow_disabled);
        *cleanup = Some((connected.ctrl.clone(), connected.qid));
        if let Err(e) = self.flush().await {
            return e;
        }
        if connected.qid == 0 {
            self.admin_queue(&connected.ctrl, &mut shutdown).await
        } else {
            self.io_queue(&connected.ctrl, connected.qid, &mut shutdown).await
        }
    }

    async fn admin_queue(&mut self, ctrl: &Arc<Controller>, shutdown: &mut tokio::sync::watch::Receiver<bool>) -> End {
        let mut dead = ctrl.watch_dead();
        let hostnqn = ctrl.hostnqn().to_owned();
        let local = self.local;
        let inner = self.inner.clone();
        let discovery_log = move || inner.discovery_log(&hostnqn, local);
        loop {
            for input in std::mem::take(&mut self.inputs) {
                let cmd = match input {
                    Input::Closed(c) => return End::Host(c),
                    Input::Command(cmd) => cmd,
                };
                let ctx = AdminContext { config: &self.inner.config, discovery_log: &discovery_log };
                match admin::execute(&ctx, ctrl, &cmd.sqe, cmd.read_len).await {
                    AdminReply::Done(cqe, data) => self.transport.complete_with_data(cqe, &data),
                    AdminReply::Parked => {}
                    AdminReply::Disconnect(cqe) => {
                        self.transport.complete(cqe);
                        let _ = self.flush().await;
                        return End::Disconnect;
                    }
                }
            }
            for cqe in ctrl.take_ready_aers() {
                self.transport.complete(cqe);
            }
            if let Err(e) = self.flush().await {
                return e;
            }
            let keepalive = async {
                match ctrl.keepalive_remaining() {
                    Some(left) => tokio::time::sleep(left).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = self.read_more() => if let Err(e) = r { return e },
                _ = ctrl.event_ready() => {}
                _ = keepalive => {
                    if ctrl.keepalive_remaining() == Some(Duration::ZERO) {
                        tracing::warn!(cntlid = ctrl.cntlid(), hostnqn = ctrl.hostnqn(), kato = ?ctrl.kato(),
                            "keep-alive timeout expired; tearing down the controller");
                        ctrl.kill();
                        return End::KeepAliveExpired;
                    }
                }
                _ = until_true(&mut dead) => return End::ControllerGone,
                _ = until_true(shutdown) => return End::Shutdown,
            }
        }
    }

    async fn io_queue(
        &mut self,
        ctrl: &Arc<Controller>,
        qid: u16,
        shutdown: &mut tokio::sync::watch::Receiver<bool>,
    ) -> End {
        let ControllerKind::Io(sub) = ctrl.kind().clone() else { return End::ControllerGone };
        let mut dead = ctrl.watch_dead();
        let mut inflight = FuturesUnordered::new();
        loop {
            if !self.inputs.is_empty() {
                ctrl.touch();
            }
            for input in std::mem::take(&mut self.inputs) {
                let cmd = match input {
                    Input::Closed(c) => return End::Host(c),
                    Input::Command(cmd) => cmd,
                };
                if cmd.sqe.opcode() == strata_nvme::fabrics::FABRICS_OPCODE {
                    // Only Disconnect is meaningful on an I/O queue.
                    if cmd.sqe.fctype() == strata_nvme::fabrics::fctype::DISCONNECT {
                        self.transport.complete(Cqe::new(cmd.sqe.cid(), Status::SUCCESS));
                        let _ = self.flush().await;
                        return End::Disconnect;
                    }
                    self.transport.complete(Cqe::new(cmd.sqe.cid(), Status::INVALID_OPCODE.dnr()));
                    continue;
                }
                inflight.push(io_command(ctrl.clone(), sub.clone(), qid, cmd));
            }
            // Collect every completion that is ready now, so that one write
            // carries them all.
            while let Some(Some((cqe, data))) = inflight.next().now_or_never() {
                self.complete(cqe, data);
                if self.transport.output_len() >= FLUSH_BYTES
                    && let Err(e) = self.flush().await
                {
                    return e;
                }
            }
            if let Err(e) = self.flush().await {
                return e;
            }
            let poll = self.inner.config.poll;
            if !poll.is_zero() {
                match self.busy_poll(poll, &mut inflight).await {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(e) => return e,
                }
            }
            tokio::select! {
                r = self.read_more() => if let Err(e) = r { return e },
                Some((cqe, data)) = inflight.next(), if !inflight.is_empty() => self.complete(cqe, data),
                _ = until_true(&mut dead) => return End::ControllerGone,
                _ = until_true(shutdown) => return End::Shutdown,
            }
        }
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
        use std::io::Read;
        let deadline = std::time::Instant::now() + budget;
        let mut scratch = [0u8; 16 * 1024];
        loop {
            // A plain non-blocking recv: tokio's readiness cache only
            // changes when its reactor runs, which is what we avoid here.
            match (&*socket2::SockRef::from(&self.stream)).read(&mut scratch) {
                Ok(0) => return Err(End::Eof),
                Ok(n) => {
                    self.rbuf.extend_from_slice(&scratch[..n]);
                    self.transport.receive(&mut self.rbuf, &mut self.inputs).map_err(End::Fatal)?;
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

    fn complete(&mut self, cqe: Cqe, data: Option<strata_block::ReadData>) {
        match data {
            Some(buf) => self.transport.complete_with_buf(cqe, buf),
            None => self.transport.complete(cqe),
        }
    }
}
