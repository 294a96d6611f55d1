//! The Redis-protocol server over TCP: one task per connection, reading
//! requests into one buffer, answering every complete request in it, and
//! writing the replies together (so pipelined requests cost one write).
//!
//! A connection that sends bytes that are not RESP gets the error and is
//! closed; the others go on.
//!
//! Memory for requests in progress is bounded server-wide: a connection's
//! receive buffer beyond [`BUFFER_FREE`] is charged to one budget
//! ([`ServerConfig::request_memory`]) before the connection reads on. A
//! connection that cannot get its share within
//! [`ServerConfig::request_memory_wait`] is answered with an error and
//! closed, freeing what it held; so many clients each sending half of a
//! large value wait for each other, then some are refused, rather than
//! the server running out of memory (or deadlocking). Each connection has its protocol version
//! (`HELLO 3` switches to RESP3), its namespace (`KV.NS name`; the
//! empty namespace by default) and its user ([`crate::auth`]: with users
//! configured, nothing but `AUTH`, `HELLO ... AUTH` and `QUIT` runs
//! until one authenticates; a user limited to namespaces starts in its
//! first and is kept to them).
//!
//! A request whose first word is an HTTP `POST` or a `Host:` header closes
//! the connection at once, unanswered, as redis-server does: a web page
//! can make a browser send a POST whose body is Redis commands, and
//! nothing after that line must run.
//!
//! The modules below: `txn` takes each request to its reply (and holds
//! a connection's `MULTI` transaction; `EXEC` runs alone, through the
//! server's gate), `exec` runs one command against the store, `info`
//! answers `INFO`, `CONFIG` and `KV.STATS`.

mod exec;
mod info;
mod txn;

pub use info::stats_pairs;
pub use txn::{MAX_QUEUED, MAX_QUEUED_BYTES};

use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::auth::{Access, Grant, looks_like_http};
use crate::resp::{Limits, Out, Reply, parse_request};
use crate::store::KvStore;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Most connections at once; more are answered with an error and
    /// closed.
    pub max_clients: usize,
    /// Protocol limits (largest value, most arguments).
    pub limits: Limits,
    /// A client that takes none of its replies for this long is
    /// disconnected, so that a stalled reader does not hold its buffers
    /// (and the values they share) forever.
    pub write_stall: Duration,
    /// Bytes of receive buffers (requests in progress) all connections
    /// may hold beyond [`BUFFER_FREE`] each.
    pub request_memory: u64,
    /// How long a connection waits for its share of `request_memory`
    /// before it is refused.
    pub request_memory_wait: Duration,
    /// Who may connect (default: anyone; see [`crate::auth`]).
    pub access: Access,
    /// TLS on every connection (redis-server's `tls-port`), when set:
    /// a client must complete a TLS handshake within [`TLS_HANDSHAKE`].
    pub tls: Option<KvTls>,
}

/// A TLS acceptor for the KV port.
#[derive(Clone)]
pub struct KvTls(pub openssl::ssl::SslAcceptor);

impl std::fmt::Debug for KvTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KvTls")
    }
}

impl KvTls {
    /// TLS 1.2 and 1.3 (Mozilla's intermediate settings) with the
    /// certificate chain and key in `cert` and `key` (PEM).
    ///
    /// # Errors
    ///
    /// A file that cannot be read or parsed, or a key that does not match.
    pub fn from_files(cert: &std::path::Path, key: &std::path::Path) -> Result<KvTls, String> {
        strata_tls::cert::acceptor(cert, key).map(KvTls)
    }
}

/// The longest a TLS handshake may take.
pub const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_clients: 10_000,
            limits: Limits::default(),
            write_stall: Duration::from_secs(60),
            request_memory: 2 << 30,
            request_memory_wait: Duration::from_secs(10),
            access: Access::open(),
            tls: None,
        }
    }
}

/// Receive-buffer bytes each connection has without charge.
pub const BUFFER_FREE: usize = 256 << 10;

/// Replies are written once this many bytes are waiting, even in the
/// middle of a pipeline.
const WRITE_AT: usize = 1 << 20;
/// Bytes read per call when the buffer has no request in progress.
const READ_CHUNK: usize = 64 << 10;

struct Shared {
    store: Arc<KvStore>,
    cfg: ServerConfig,
    /// Permits are bytes of [`ServerConfig::request_memory`].
    budget: tokio::sync::Semaphore,
    clients: AtomicUsize,
    next_id: AtomicU64,
    started: std::time::Instant,
    addr: SocketAddr,
    /// Held for reading while a command runs, for writing while a
    /// transaction (`EXEC`) runs: nothing comes between its commands.
    gate: tokio::sync::RwLock<()>,
}

/// Serves `listener` until the future `stop` completes.
///
/// # Errors
///
/// Accepting fails for a reason other than a transient one.
pub async fn serve(
    store: Arc<KvStore>,
    listener: TcpListener,
    cfg: ServerConfig,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let permits = usize::try_from(cfg.request_memory).unwrap_or(usize::MAX).min(tokio::sync::Semaphore::MAX_PERMITS);
    let shared = Arc::new(Shared {
        store,
        budget: tokio::sync::Semaphore::new(permits),
        cfg,
        clients: AtomicUsize::new(0),
        next_id: AtomicU64::new(1),
        started: std::time::Instant::now(),
        addr: listener.local_addr()?,
        gate: tokio::sync::RwLock::new(()),
    });
    tokio::pin!(stop);
    loop {
        let (sock, peer) = tokio::select! {
            _ = &mut stop => return Ok(()),
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends pass; back off a little.
                    tracing::warn!(error = %e, "KV accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let n = shared.clients.fetch_add(1, Ordering::AcqRel);
            let _ = sock.set_nodelay(true);
            let over = n >= shared.cfg.max_clients;
            let ended = match &shared.cfg.tls {
                None => connection(&shared, sock, Some(peer), over).await,
                Some(KvTls(acceptor)) => match tls_accept(acceptor, sock).await {
                    Ok(tls) => connection(&shared, tls, Some(peer), over).await,
                    Err(e) => {
                        tracing::info!(%peer, "KV: TLS handshake refused: {e}");
                        Ok(())
                    }
                },
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "KV connection ended");
            }
            shared.clients.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

struct Conn {
    id: u64,
    peer: Option<SocketAddr>,
    proto: u8,
    ns: Bytes,
    quit: bool,
    /// Who it is; `None` until it authenticates.
    grant: Option<Grant>,
    /// Its transaction, after `MULTI`.
    txn: Option<txn::Txn>,
}

/// The server side of a TLS handshake on `sock`, within [`TLS_HANDSHAKE`].
async fn tls_accept(
    acceptor: &openssl::ssl::SslAcceptor,
    sock: TcpStream,
) -> Result<tokio_openssl::SslStream<TcpStream>, String> {
    let ssl = openssl::ssl::Ssl::new(acceptor.context()).map_err(|e| e.to_string())?;
    let mut tls = tokio_openssl::SslStream::new(ssl, sock).map_err(|e| e.to_string())?;
    match tokio::time::timeout(TLS_HANDSHAKE, std::pin::Pin::new(&mut tls).accept()).await {
        Ok(Ok(())) => Ok(tls),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no handshake within {TLS_HANDSHAKE:?}")),
    }
}

async fn connection<S>(shared: &Shared, mut sock: S, peer: Option<SocketAddr>, over_limit: bool) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    if over_limit {
        sock.write_all(b"-ERR max number of clients reached\r\n").await?;
        return Ok(());
    }
    let mut conn = Conn {
        id: shared.next_id.fetch_add(1, Ordering::Relaxed),
        peer,
        proto: 2,
        ns: Bytes::new(),
        quit: false,
        grant: shared.cfg.access.initial(),
        txn: None,
    };
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut out = Out::default();
    let stall = shared.cfg.write_stall;
    let mut charge = Charge { budget: &shared.budget, held: 0 };
    loop {
        loop {
            match parse_request(&mut buf, &shared.cfg.limits) {
                Ok(Some(args)) => {
                    if args.first().is_some_and(|w| looks_like_http(w)) {
                        tracing::warn!(
                            conn = conn.id,
                            peer = ?conn.peer,
                            "KV port: a request that looks like HTTP (a web page reaching the port?); connection closed"
                        );
                        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "HTTP on the KV port"));
                    }
                    let reply = txn::handle(shared, &mut conn, args).await;
                    reply.encode(conn.proto, &mut out);
                    if conn.quit {
                        return write_chunks(&mut sock, out.take(), stall).await;
                    }
                    if out.len() >= WRITE_AT {
                        write_chunks(&mut sock, out.take(), stall).await?;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    Reply::err(e).encode(conn.proto, &mut out);
                    write_chunks(&mut sock, out.take(), stall).await?;
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "protocol error"));
                }
            }
        }
        if !out.is_empty() {
            write_chunks(&mut sock, out.take(), stall).await?;
        }
        room_to_read(&mut buf);
        if !charge.cover(buf.capacity(), shared.cfg.request_memory_wait).await {
            tracing::warn!(
                conn = conn.id,
                bytes = buf.capacity(),
                "KV request memory budget exhausted; client refused"
            );
            let e = "OOM the server's memory for requests in progress is exhausted; retry later";
            Reply::Error(e.into()).encode(conn.proto, &mut out);
            write_chunks(&mut sock, out.take(), stall).await?;
            return Err(std::io::Error::new(std::io::ErrorKind::OutOfMemory, "request memory budget exhausted"));
        }
        if sock.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}

/// Leaves room in `buf` for the next read. A large buffer (sized by the
/// parser for a value on its way) is read into as it is: `reserve` would
/// double it. One that is full is moved to a buffer of the right size.
fn room_to_read(buf: &mut BytesMut) {
    let spare = buf.capacity() - buf.len();
    if spare >= READ_CHUNK / 4 || (spare > 0 && buf.capacity() > BUFFER_FREE) {
        return;
    }
    if buf.capacity() <= BUFFER_FREE {
        buf.reserve(READ_CHUNK);
        return;
    }
    let mut moved = BytesMut::with_capacity(buf.len() + READ_CHUNK);
    moved.extend_from_slice(buf);
    *buf = moved;
}

/// A connection's share of the server's request memory; given back when
/// dropped.
struct Charge<'a> {
    budget: &'a tokio::sync::Semaphore,
    held: usize,
}

impl Charge<'_> {
    /// Holds what a receive buffer of `capacity` bytes needs beyond
    /// [`BUFFER_FREE`], waiting up to `wait` for more; gives back what it
    /// no longer needs. False when the budget did not cover it in time.
    async fn cover(&mut self, capacity: usize, wait: Duration) -> bool {
        let need = capacity.saturating_sub(BUFFER_FREE);
        if need < self.held {
            self.budget.add_permits(self.held - need);
            self.held = need;
        }
        if need == self.held {
            return true;
        }
        let more = u32::try_from(need - self.held).unwrap_or(u32::MAX);
        match tokio::time::timeout(wait, self.budget.acquire_many(more)).await {
            Ok(Ok(p)) => {
                p.forget();
                self.held += more as usize;
                self.held >= need
            }
            _ => false,
        }
    }
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        self.budget.add_permits(self.held);
    }
}

/// Writes the chunks in order with vectored writes; fails when the peer
/// takes nothing for `stall`.
async fn write_chunks<S>(sock: &mut S, mut chunks: Vec<Bytes>, stall: Duration) -> std::io::Result<()>
where
    S: tokio::io::AsyncWrite + Unpin,
{
    let mut i = 0;
    while i < chunks.len() {
        let slices: Vec<IoSlice<'_>> = chunks[i..].iter().take(64).map(|c| IoSlice::new(c)).collect();
        let mut n = tokio::time::timeout(stall, sock.write_vectored(&slices))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "client takes no replies"))??;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 && i < chunks.len() {
            let l = chunks[i].len();
            if n >= l {
                n -= l;
                i += 1;
            } else {
                chunks[i].advance(n);
                n = 0;
            }
        }
        while i < chunks.len() && chunks[i].is_empty() {
            i += 1;
        }
    }
    Ok(())
}
