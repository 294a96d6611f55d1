//! The fast path's server: a Unix socket beside the RESP port. Each
//! client says Hello and gets two file descriptors: the shared region
//! (read-only), where DRAM blocks put through the fast path live, and a
//! staging area of its own (read-write), where it writes the blocks it
//! puts. Then it asks in batches: a Get leases blocks (the client copies
//! them out of its mapping of the region and releases them), a Put
//! stores blocks from its staging area (one copy, into the region).
//!
//! Who may connect is who may write the socket file: it is created mode
//! 0660 (owner and group), and a stale one left by a killed server is
//! replaced.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use super::region::{ALIGN, Mapping, Region};
use super::wire::{self, Got, PutStatus, Reply, Request};
use crate::store::PutOpts;
use crate::{KvError, KvStore};

/// The fast path's settings.
#[derive(Debug, Clone)]
pub struct ShmConfig {
    /// The socket's path.
    pub socket: PathBuf,
    /// Bytes of the shared region (DRAM blocks put through the fast path,
    /// and copies of others while leased).
    pub region_bytes: u64,
    /// The most staging bytes one client gets.
    pub max_staging: u64,
    /// The most leases one client holds at once.
    pub max_leases: usize,
    /// The most clients connected at once; more are answered with an
    /// error and closed.
    pub max_clients: usize,
    /// The region on 2 MiB huge pages (hugetlbfs), reserved up front.
    pub hugepages: bool,
}

impl ShmConfig {
    /// Settings for a store with `dram_bytes` of DRAM: a region twice
    /// that (blocks in DRAM, and evicted ones still leased), 256 MiB of
    /// staging per client, 65,536 leases.
    pub fn for_dram(socket: PathBuf, dram_bytes: u64) -> ShmConfig {
        ShmConfig {
            socket,
            region_bytes: dram_bytes.saturating_mul(2),
            max_staging: 256 << 20,
            max_leases: 65_536,
            max_clients: 1024,
            hugepages: false,
        }
    }
}

/// A bound fast-path socket, ready to serve.
pub struct ShmServer {
    store: Arc<KvStore>,
    region: Arc<Region>,
    cfg: ShmConfig,
    listener: UnixListener,
}

impl ShmServer {
    /// Maps the region and binds the socket (replacing a stale socket
    /// file; refusing a path that is something else).
    ///
    /// # Errors
    ///
    /// The region could not be made (memory), or the socket not bound.
    pub fn bind(store: Arc<KvStore>, cfg: ShmConfig) -> io::Result<ShmServer> {
        let region = if cfg.hugepages { Region::new_huge(cfg.region_bytes)? } else { Region::new(cfg.region_bytes)? };
        remove_stale(&cfg.socket)?;
        let listener = UnixListener::bind(&cfg.socket)?;
        std::fs::set_permissions(&cfg.socket, std::os::unix::fs::PermissionsExt::from_mode(0o660))?;
        Ok(ShmServer { store, region, cfg, listener })
    }

    /// The shared region.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Serves until `stop` completes, then removes the socket file.
    ///
    /// # Errors
    ///
    /// Accepting failed for good.
    pub async fn serve(self, stop: impl std::future::Future<Output = ()>) -> io::Result<()> {
        tokio::pin!(stop);
        let ShmServer { store, region, cfg, listener } = self;
        let cfg = Arc::new(cfg);
        let clients = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        loop {
            tokio::select! {
                _ = &mut stop => break,
                accepted = listener.accept() => {
                    let (stream, _) = match accepted {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::warn!("fast path: accept failed: {e}");
                            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    use std::sync::atomic::Ordering::AcqRel;
                    if clients.fetch_add(1, AcqRel) >= cfg.max_clients {
                        clients.fetch_sub(1, AcqRel);
                        let refusal = Reply::Error(format!("{} fast-path clients already connected", cfg.max_clients));
                        tokio::spawn(async move {
                            let mut stream = stream;
                            _ = stream.write_all(&refusal.encode()).await;
                        });
                        continue;
                    }
                    let conn = Conn { store: store.clone(), region: region.clone(), cfg: cfg.clone(), leases: HashMap::new(), next_lease: 1, staging: None };
                    let clients = clients.clone();
                    tokio::spawn(async move {
                        if let Err(e) = conn.run(stream).await {
                            tracing::debug!("fast path client: {e}");
                        }
                        clients.fetch_sub(1, AcqRel);
                    });
                }
            }
        }
        _ = std::fs::remove_file(&cfg.socket);
        Ok(())
    }
}

/// Removes a socket file no server listens on; refuses to remove
/// anything else.
fn remove_stale(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{}: a server already listens there", path.display()),
                ));
            }
            std::fs::remove_file(path)
        }
        Ok(_) => {
            Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{}: exists and is not a socket", path.display())))
        }
    }
}

/// One client.
struct Conn {
    store: Arc<KvStore>,
    region: Arc<Region>,
    cfg: Arc<ShmConfig>,
    /// Blocks leased: each holds its bytes in the region.
    leases: HashMap<u64, Bytes>,
    next_lease: u64,
    staging: Option<Mapping>,
}

impl Conn {
    async fn run(mut self, mut stream: UnixStream) -> io::Result<()> {
        let mut frame = Vec::new();
        loop {
            let mut head = [0u8; wire::LEN_BYTES];
            match stream.read_exact(&mut head).await {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
            let n = match wire::frame_len(head) {
                Ok(n) => n,
                Err(e) => {
                    // The stream cannot be re-synchronised: say why, close.
                    stream.write_all(&Reply::Error(e.to_string()).encode()).await?;
                    return Ok(());
                }
            };
            frame.resize(n, 0);
            stream.read_exact(&mut frame).await?;
            let (reply, fds) = match Request::decode(&frame) {
                Ok(req) => self.handle(req).await,
                Err(e) => (Reply::Error(format!("bad request: {e}")), None),
            };
            let out = reply.encode();
            match fds {
                Some(fds) => send_with_fds(&stream, &out, &fds).await?,
                None => stream.write_all(&out).await?,
            }
        }
    }

    async fn handle(&mut self, req: Request<'_>) -> (Reply, Option<[OwnedFd; 2]>) {
        if self.staging.is_none() && !matches!(req, Request::Hello { .. }) {
            return (Reply::Error("say Hello first".into()), None);
        }
        let r = match req {
            Request::Hello { version, staging } => return self.hello(version, staging),
            Request::Get { ns, keys } => self.get(ns, &keys).await,
            Request::Release(leases) => {
                Ok(Reply::Release(leases.iter().filter(|l| self.leases.remove(l).is_some()).count() as u32))
            }
            Request::Exists { ns, keys } => {
                keys.iter().map(|k| self.store.exists(ns, k)).collect::<Result<Vec<bool>, _>>().map(Reply::Exists)
            }
            Request::Lookup { ns, keys } => self.store.lookup(ns, &keys).map(|n| Reply::Lookup(n as u32)),
            Request::Put { ns, items } => self.put(ns, &items).await,
        };
        (r.unwrap_or_else(|e| Reply::Error(e.to_string())), None)
    }

    fn hello(&mut self, version: u32, staging: u64) -> (Reply, Option<[OwnedFd; 2]>) {
        if version != wire::VERSION {
            return (Reply::Error(format!("protocol version {version}: this server speaks {}", wire::VERSION)), None);
        }
        if self.staging.is_some() {
            return (Reply::Error("Hello was said already".into()), None);
        }
        let bytes = staging.clamp(ALIGN, self.cfg.max_staging.max(ALIGN)).div_ceil(ALIGN) * ALIGN;
        let made = Mapping::new("strata-kv-staging", bytes).and_then(|m| {
            let fds = [self.region.mapping().read_only_fd()?, m.fd().try_clone()?];
            Ok((m, fds))
        });
        match made {
            Ok((m, fds)) => {
                self.staging = Some(m);
                let region = self.region.mapping().len() as u64;
                (Reply::Hello { version: wire::VERSION, region, staging: bytes }, Some(fds))
            }
            Err(e) => (Reply::Error(format!("no staging area of {bytes} bytes: {e}")), None),
        }
    }

    async fn get(&mut self, ns: &[u8], keys: &[&[u8]]) -> Result<Reply, KvError> {
        if self.leases.len().saturating_add(keys.len()) > self.cfg.max_leases {
            return Ok(Reply::Error(format!(
                "{} leases held and {} asked for (at most {}): release some first",
                self.leases.len(),
                keys.len(),
                self.cfg.max_leases
            )));
        }
        // Every key of the batch at once: blocks on a log tier are read in
        // parallel (the SSD's queue, the pool's connections).
        // A block on a log tier is read straight into the region (O_DIRECT
        // into a leased extent); only when the region is full is it read
        // into the heap and copied below.
        let store = &self.store;
        let region = &self.region;
        let place = move |len: usize| region.alloc_io(len);
        let found = futures_util::future::join_all(keys.iter().map(|k| store.get_placed(ns, k, &place))).await;
        let mut out = Vec::with_capacity(keys.len());
        for b in found {
            let Some(b) = b? else {
                out.push(Got::Miss);
                continue;
            };
            // A block put through the fast path lies in the region; any
            // other (put over RESP, read back from a log tier) is copied
            // there while leased.
            let b = match self.region.mapping().offset_of(&b) {
                Some(_) => b,
                None => match self.region.copy_in(&b) {
                    Some(copy) => copy,
                    None => {
                        out.push(Got::NoRoom);
                        continue;
                    }
                },
            };
            let offset = self.region.mapping().offset_of(&b).unwrap_or(0);
            let lease = self.next_lease;
            self.next_lease += 1;
            out.push(Got::Hit { lease, offset, len: b.len() as u64 });
            self.leases.insert(lease, b);
        }
        Ok(Reply::Get(out))
    }

    async fn put(&mut self, ns: &[u8], items: &[(&[u8], u64, u64)]) -> Result<Reply, KvError> {
        let mut out = Vec::with_capacity(items.len());
        for &(key, offset, len) in items {
            let Some(staging) = &self.staging else { return Ok(Reply::Error("say Hello first".into())) };
            let Ok(len) = usize::try_from(len) else {
                out.push(PutStatus::BadRange);
                continue;
            };
            let Some(mut slot) = self.region.alloc(len) else {
                out.push(PutStatus::Full);
                continue;
            };
            if staging.copy_out(offset, len, slot.bytes_mut()).is_none() {
                out.push(PutStatus::BadRange);
                continue;
            }
            out.push(match self.store.put(ns, key, slot.into_bytes(), PutOpts::default()).await {
                Ok(_) => PutStatus::Stored,
                Err(KvError::Full { .. } | KvError::Quota { .. }) => PutStatus::Full,
                Err(KvError::BadNamespace(_)) => return Err(KvError::BadNamespace(ns.len())),
                Err(e) => {
                    tracing::debug!("fast path put: {e}");
                    PutStatus::Failed
                }
            });
        }
        Ok(Reply::Put(out))
    }
}

/// Writes `data` with `fds` attached to its first byte (SCM_RIGHTS).
async fn send_with_fds(stream: &UnixStream, data: &[u8], fds: &[OwnedFd]) -> io::Result<()> {
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let mut sent = 0;
    while sent < data.len() {
        stream.writable().await?;
        let attach: &[RawFd] = if sent == 0 { &raw } else { &[] };
        match stream.try_io(tokio::io::Interest::WRITABLE, || sendmsg_fds(stream.as_raw_fd(), &data[sent..], attach)) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One `sendmsg` of `data` with `fds` (may be empty) as SCM_RIGHTS.
pub(super) fn sendmsg_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE only computes a size.
    let space = if fds.is_empty() { 0 } else { (unsafe { libc::CMSG_SPACE(fd_bytes as u32) }) as usize };
    // u64 words: the control buffer must be aligned for cmsghdr.
    let mut control = vec![0u64; space.div_ceil(8)];
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` bytes, enough for one
        // header and `fds` (CMSG_SPACE), so CMSG_FIRSTHDR is non-null and
        // CMSG_DATA has room for fd_bytes.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), fd_bytes);
        }
    }
    // SAFETY: msg and the buffers it points at live across the call; the
    // result is checked.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}
