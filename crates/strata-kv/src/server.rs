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

use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::auth::{Access, Grant, looks_like_http};
use crate::command::{Command, Expiry};
use crate::resp::{Limits, Out, Reply, parse_request};
use crate::store::{KvError, KvStore, Presence, PutOpts, unix_ms};

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
                    let reply = match Command::parse(args) {
                        Ok(cmd) => match refusal(&conn, &cmd) {
                            Some(no) => no,
                            None => exec(shared, &mut conn, cmd).await,
                        },
                        Err(e) => e,
                    };
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

fn kv_err(e: KvError) -> Reply {
    match e {
        KvError::Full { .. } | KvError::TooLarge { .. } | KvError::Quota { .. } => Reply::Error(format!("OOM {e}")),
        e => Reply::err(e),
    }
}

fn opt_bulk(v: Option<Bytes>) -> Reply {
    v.map(Reply::Bulk).unwrap_or(Reply::Nil)
}

/// Tries of `SET ... GET` before it gives up on a key others keep writing.
const SET_GET_TRIES: usize = 64;

/// `SET ... GET`: the old value, and the new one stored in its place as
/// one step. The old value is read (from any tier) knowing its version,
/// and the store is conditional on that version, so a write in between
/// makes it read and try again; the value returned is the one replaced.
async fn set_get(
    store: &KvStore,
    ns: &[u8],
    key: &[u8],
    value: Bytes,
    nx: bool,
    xx: bool,
    opts: PutOpts,
) -> Result<Reply, KvError> {
    for _ in 0..SET_GET_TRIES {
        let version = store.version(ns, key)?;
        let old = match version {
            Some(_) => store.get(ns, key).await?,
            None => None,
        };
        if (nx && version.is_some()) || (xx && version.is_none()) {
            // Not stored; the reply is the value as it is.
            return Ok(opt_bulk(old));
        }
        let only_if = Some(version.map_or(Presence::Absent, Presence::Version));
        if store.put(ns, key, value.clone(), PutOpts { only_if, ..opts }).await? {
            return Ok(opt_bulk(old));
        }
    }
    Ok(Reply::err("SET ... GET: the key kept changing under other writers; try again"))
}

/// Why `conn` may not run `cmd`, if it may not: not authenticated, or a
/// user kept to some namespaces reaching for another or for all.
fn refusal(conn: &Conn, cmd: &Command) -> Option<Reply> {
    let Some(g) = &conn.grant else {
        return match cmd {
            Command::Auth { .. } | Command::Hello { auth: Some(_), .. } | Command::Quit => None,
            Command::Hello { auth: None, .. } => Some(Reply::Error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH \
                 <user> <pass> option can be used to authenticate the client and select the RESP protocol version at \
                 the same time"
                    .into(),
            )),
            _ => Some(Reply::Error("NOAUTH Authentication required.".into())),
        };
    };
    if g.is_admin() {
        return None;
    }
    let denied = |what: &str| {
        tracing::warn!(conn = conn.id, peer = ?conn.peer, user = g.user(), "KV port: {what} denied");
        Some(Reply::Error(format!("NOPERM User {} has no permissions to {what}", g.user())))
    };
    let ns_denied = |ns: &[u8]| denied(&format!("access the '{}' namespace", String::from_utf8_lossy(ns)));
    match cmd {
        Command::Flush => denied("run the 'flushall' command"),
        Command::Quota(_, Some(_)) => denied("set quotas"),
        Command::Namespace(Some(ns)) | Command::DelNamespace(ns) | Command::Quota(ns, None) if !g.allows(ns) => {
            ns_denied(ns)
        }
        _ => None,
    }
}

/// `AUTH` and `HELLO ... AUTH`: the connection becomes `user`'s when the
/// password is right, and stays as it was when it is not.
fn authenticate(shared: &Shared, conn: &mut Conn, user: Option<&[u8]>, password: &[u8]) -> Result<(), Reply> {
    let access = &shared.cfg.access;
    let name = || String::from_utf8_lossy(user.unwrap_or(crate::auth::DEFAULT_USER.as_bytes())).into_owned();
    match access.check(user, password) {
        Some(g) => {
            tracing::debug!(conn = conn.id, peer = ?conn.peer, user = g.user(), "KV port: authenticated");
            if !g.allows(&conn.ns) {
                conn.ns = g.home();
            }
            conn.grant = Some(g);
            Ok(())
        }
        None => {
            tracing::warn!(conn = conn.id, peer = ?conn.peer, user = %name(), "KV port: authentication failed");
            Err(Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into()))
        }
    }
}

async fn exec(shared: &Shared, conn: &mut Conn, cmd: Command) -> Reply {
    match run(shared, conn, cmd).await {
        Ok(r) => r,
        Err(e) => kv_err(e),
    }
}

async fn run(shared: &Shared, conn: &mut Conn, cmd: Command) -> Result<Reply, KvError> {
    let store = &shared.store;
    let ns = conn.ns.clone();
    Ok(match cmd {
        Command::Ping(None) => Reply::Simple("PONG".into()),
        Command::Ping(Some(m)) | Command::Echo(m) => Reply::Bulk(m),
        Command::Auth { user: None, .. } if !shared.cfg.access.required() => Reply::err(
            "AUTH <password> called without any password configured for the default user. Are you sure your \
             configuration is correct?",
        ),
        Command::Auth { user, password } => match authenticate(shared, conn, user.as_deref(), &password) {
            Ok(()) => Reply::Ok,
            Err(no) => no,
        },
        Command::Hello { proto, auth } => {
            if let Some((user, password)) = auth
                && let Err(no) = authenticate(shared, conn, Some(&user), &password)
            {
                return Ok(no);
            }
            if let Some(p) = proto {
                conn.proto = p;
            }
            Reply::Map(vec![
                (Reply::text("server"), Reply::text("redis")),
                (Reply::text("version"), Reply::text("7.2.0")),
                (Reply::text("proto"), Reply::Int(i64::from(conn.proto))),
                (Reply::text("id"), Reply::Int(conn.id as i64)),
                (Reply::text("mode"), Reply::text("standalone")),
                (Reply::text("role"), Reply::text("master")),
                (Reply::text("modules"), Reply::Array(vec![])),
            ])
        }
        Command::Quit => {
            conn.quit = true;
            Reply::Ok
        }
        Command::Select(0) => Reply::Ok,
        Command::Select(_) => Reply::err("DB index is out of range"),
        Command::NoOp => Reply::Ok,
        Command::ClientId => Reply::Int(conn.id as i64),
        Command::Info => Reply::text(info(shared)),
        Command::ConfigGet(pattern) => config_get(shared, &pattern),
        Command::CommandDocs => Reply::Array(vec![]),
        Command::DbSize => Reply::Int(store.stats().keys as i64),
        Command::Flush => {
            store.clear();
            Reply::Ok
        }
        Command::Save => {
            store.flush(true).await?;
            Reply::Ok
        }
        Command::KvFlush(all) => {
            store.flush(all).await?;
            Reply::Ok
        }
        Command::Get(k) => opt_bulk(store.get(&ns, &k).await?),
        Command::Set { key, value, expiry, nx, xx, get } => {
            let (expires_ms, keep_ttl) = match expiry {
                Expiry::None => (0, false),
                Expiry::In(ms) => (unix_ms().saturating_add(ms), false),
                Expiry::At(ms) => (ms, false),
                Expiry::Keep => (0, true),
            };
            let opts = PutOpts { expires_ms, keep_ttl, ..PutOpts::default() };
            if get {
                return set_get(store, &ns, &key, value, nx, xx, opts).await;
            }
            let only_if = match (nx, xx) {
                (true, _) => Some(Presence::Absent),
                (_, true) => Some(Presence::Present),
                _ => None,
            };
            match store.put(&ns, &key, value, PutOpts { only_if, ..opts }).await? {
                true => Reply::Ok,
                false => Reply::Nil,
            }
        }
        Command::MGet(keys) => {
            let gets = keys.iter().map(|k| store.get(&ns, k));
            let got = futures_util::future::join_all(gets).await;
            Reply::Array(got.into_iter().map(|r| r.map(opt_bulk)).collect::<Result<_, _>>()?)
        }
        Command::MSet(pairs) => {
            for (k, v) in pairs {
                store.put(&ns, &k, v, PutOpts::default()).await?;
            }
            Reply::Ok
        }
        Command::Exists(keys) => {
            let mut n = 0;
            for k in &keys {
                n += i64::from(store.exists(&ns, k)?);
            }
            Reply::Int(n)
        }
        Command::Del(keys) => {
            let mut n = 0;
            for k in &keys {
                n += i64::from(store.delete(&ns, k)?);
            }
            Reply::Int(n)
        }
        Command::StrLen(k) => Reply::Int(store.get(&ns, &k).await?.map(|v| v.len() as i64).unwrap_or(0)),
        Command::Ttl(k, ms) => match store.expiry(&ns, &k)? {
            None => Reply::Int(-2),
            Some(0) => Reply::Int(-1),
            Some(at) => {
                let left = at.saturating_sub(unix_ms());
                Reply::Int(if ms { left as i64 } else { left.div_ceil(1000) as i64 })
            }
        },
        Command::Expire(k, ms) => {
            let at = ms.map(|m| unix_ms().saturating_add(m)).unwrap_or(0);
            Reply::Int(i64::from(store.set_expiry(&ns, &k, at)?))
        }
        Command::Lookup(keys) => Reply::Int(store.lookup(&ns, &keys)? as i64),
        Command::Prefetch { deadline_ms, lease_ms, keys } => {
            Reply::Int(store.prefetch(&ns, &keys, Duration::from_millis(deadline_ms), lease_ms).await? as i64)
        }
        Command::Lease(ms, keys) => {
            Reply::Int(store.prefetch(&ns, &keys, Duration::from_secs(5), ms.max(1)).await? as i64)
        }
        Command::Release(keys) => Reply::Int(store.release(&ns, &keys)? as i64),
        Command::Pin(pin, keys) => Reply::Int(store.pin(&ns, &keys, pin)? as i64),
        Command::Stats => stats_reply(store),
        Command::Namespace(None) => Reply::Bulk(conn.ns.clone()),
        Command::Namespace(Some(name)) => {
            if name.len() > 255 {
                return Err(KvError::BadNamespace(name.len()));
            }
            conn.ns = name;
            Reply::Ok
        }
        Command::DelNamespace(name) => Reply::Int(store.delete_namespace(&name)? as i64),
        Command::Quota(name, Some(bytes)) => {
            store.set_quota(&name, bytes)?;
            Reply::Ok
        }
        Command::Quota(name, None) => {
            let (keys, used, quota) = store.namespace_usage(&name);
            Reply::Map(vec![
                (Reply::text("keys"), Reply::Int(keys as i64)),
                (Reply::text("used_bytes"), Reply::Int(used as i64)),
                (Reply::text("quota_bytes"), Reply::Int(quota as i64)),
            ])
        }
    })
}

/// The store's statistics as name/value pairs.
pub fn stats_pairs(store: &KvStore) -> Vec<(&'static str, u64)> {
    let s = store.stats();
    vec![
        ("keys", s.keys),
        ("dram_keys", s.dram_keys),
        ("dram_used_bytes", s.dram_used),
        ("dram_capacity_bytes", s.dram_capacity),
        ("ssd_keys", s.ssd_keys),
        ("ssd_live_bytes", s.ssd_live),
        ("ssd_capacity_bytes", s.ssd_capacity),
        ("pool_keys", s.pool_keys),
        ("pool_live_bytes", s.pool_live),
        ("pool_capacity_bytes", s.pool_capacity),
        ("gets", s.gets),
        ("hits_dram", s.hits_dram),
        ("hits_ssd", s.hits_ssd),
        ("hits_pool", s.hits_pool),
        ("hits_peer", s.hits_peer),
        ("peer_keys", s.peer_keys),
        ("misses", s.misses),
        ("puts", s.puts),
        ("evicted", s.evicted),
        ("demoted", s.demoted),
        ("demoted_bytes", s.demoted_bytes),
        ("not_admitted", s.not_admitted),
        ("dropped_ssd", s.dropped_ssd),
        ("dropped_pool", s.dropped_pool),
        ("lost_ssd", s.lost_ssd),
        ("lost_pool", s.lost_pool),
        ("pool_skipped", s.pool_skipped),
        ("promoted", s.promoted),
        ("corrupt", s.corrupt),
        ("expired", s.expired),
        ("quota_evicted", s.quota_evicted),
    ]
}

fn stats_reply(store: &KvStore) -> Reply {
    Reply::Map(stats_pairs(store).into_iter().map(|(k, v)| (Reply::text(k), Reply::Int(v as i64))).collect())
}

fn info(shared: &Shared) -> String {
    let mut s = format!(
        "# Server\r\nredis_version:7.2.0\r\nstrata_version:{}\r\nredis_mode:standalone\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\
         # Clients\r\nconnected_clients:{}\r\n# Keyspace\r\n",
        env!("CARGO_PKG_VERSION"),
        shared.addr.port(),
        shared.started.elapsed().as_secs(),
        shared.clients.load(Ordering::Relaxed),
    );
    let st = shared.store.stats();
    if st.keys > 0 {
        s.push_str(&format!("db0:keys={},expires=0,avg_ttl=0\r\n", st.keys));
    }
    s.push_str("# Strata KV\r\n");
    for (k, v) in stats_pairs(&shared.store) {
        s.push_str(&format!("{k}:{v}\r\n"));
    }
    s
}

fn config_get(shared: &Shared, pattern: &[u8]) -> Reply {
    let max = shared.store.stats().dram_capacity.to_string();
    let known = [("maxmemory", max.as_str()), ("save", ""), ("appendonly", "no"), ("databases", "1")];
    let p = String::from_utf8_lossy(pattern).to_ascii_lowercase();
    let pairs =
        known.iter().filter(|(k, _)| p == "*" || p == *k).map(|(k, v)| (Reply::text(*k), Reply::text(*v))).collect();
    Reply::Map(pairs)
}
