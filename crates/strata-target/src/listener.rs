//! The accepting side of a target: binding a port ([`Target::listen`]),
//! the accept loop of each port, and handing every accepted connection to
//! its executor, where `conn` serves it.
//!
//! It sits above both `target` (the state every connection shares) and
//! `conn` (one connection), so that neither of those two imports the
//! other's module: `conn` needs the target's state, and starting to
//! listen needs `conn`. That is why `Target::listen` is implemented here
//! and not beside the rest of [`Target`].
//!
//! Invariants: a port is listed (and the discovery log generation bumped)
//! before its accept loop starts; an accept loop ends when the target
//! shuts down; an accepted connection's admission slot is released when
//! its task ends, however it ends (or at once, when the connection cannot
//! be handed to its executor).

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::net::{TcpListener, TcpStream};

use crate::admission::{Counters, Slot};
use crate::conn::{panic_message, serve, until_true};
use crate::target::{Port, PortRole, Target, TargetError, TargetInner};

impl Target {
    /// Binds a TCP listener on `addr` and starts accepting connections on
    /// it. Returns the bound port (with the real port number when `addr`
    /// asked for port 0).
    ///
    /// # Errors
    ///
    /// [`TargetError::Bind`] when the address cannot be bound.
    pub async fn listen(&self, addr: SocketAddr, role: PortRole) -> Result<Port, TargetError> {
        let tls = if role == PortRole::Fabric { strata_tls::TlsMode::Off } else { self.inner.config.tls };
        if tls != strata_tls::TlsMode::Off {
            // Fail here, not at the first host, when OpenSSL cannot.
            self.inner.tls_context()?;
        }
        let listener = bind_listener(addr).map_err(|source| TargetError::Bind { addr, source })?;
        let bound = listener.local_addr().map_err(|source| TargetError::Bind { addr, source })?;
        let port = {
            let mut ports = self.inner.ports.write().unwrap_or_else(|e| e.into_inner());
            let portid = ports.iter().map(|p| p.portid).max().unwrap_or(0) + 1;
            let port = Port { portid, addr: bound, role, tls };
            ports.push(port);
            port
        };
        self.inner.genctr.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(accept_loop(self.inner.clone(), listener, port));
        tracing::info!(%bound, ?role, %tls, "listening for NVMe/TCP");
        Ok(port)
    }
}

/// Connections the kernel may queue before we accept them. The default
/// of most listeners (128) drops bursts that hosts reconnecting after an
/// outage produce; the kernel caps it at `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 4096;

fn bind_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

async fn accept_loop(inner: Arc<TargetInner>, listener: TcpListener, port: Port) {
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        tokio::select! {
            res = listener.accept() => match res {
                Ok((stream, peer)) => {
                    let Some(slot) = inner.admission.admit() else {
                        tracing::warn!(%peer, limit = inner.config.max_connections, "connection refused: too many connections");
                        drop(stream);
                        continue;
                    };
                    spawn_connection(&inner, stream, peer, port, slot);
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
/// target has per-core executors, else on the current runtime. The slot
/// is released when the task ends, however it ends.
fn spawn_connection(inner: &Arc<TargetInner>, stream: TcpStream, peer: SocketAddr, port: Port, slot: Slot) {
    let accepted = Instant::now();
    let task = {
        let inner = inner.clone();
        move |stream: TcpStream, slot: Slot| async move {
            let run = AssertUnwindSafe(serve(&inner, stream, peer, port, slot, accepted)).catch_unwind();
            if let Err(panic) = run.await {
                Counters::bump(&inner.admission.counters.panics);
                tracing::error!(%peer, "connection task panicked: {}", panic_message(&panic));
            }
        }
    };
    let Some(handle) = inner.next_executor() else {
        tokio::spawn(task(stream, slot));
        return;
    };
    // A tokio socket belongs to the runtime that registered it: hand the
    // executor a std socket and register it there.
    let std_stream = match stream.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(%peer, "cannot move connection to its executor: {e}");
            return;
        }
    };
    handle.spawn(async move {
        match TcpStream::from_std(std_stream) {
            Ok(stream) => task(stream, slot).await,
            Err(e) => tracing::warn!(%peer, "cannot register connection on its executor: {e}"),
        }
    });
}
