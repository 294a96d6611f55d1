//! A namespace of a remote NVMe/TCP subsystem as a [`BlockDevice`], for
//! code written against local devices (the KV store's pool tier).
//!
//! The controller is connected at [`RemoteNamespace::connect`] and again,
//! lazily, by the first command after a failure: an error status, a
//! dropped connection or a command that outlives
//! [`RemoteNamespace::command_timeout`] fails that command with
//! [`BlockError::Io`] and retires the connection, so one
//! stalled target costs its callers one timeout each, not a hang. I/O
//! larger than the controller's transfer limit is split into commands of
//! whole blocks, all in flight at once; a write's buffer is sent without
//! a copy. Nothing is retried here: the caller decides (the KV
//! store treats a failed read as a miss).
//!
//! A volume of a strata pool is owned by one node, which moves when a
//! node fails, and every other node is a path to it that forwards to the
//! owner (ANA non-optimized). [`RemoteNamespace::connect_any`] takes
//! several addresses (any I/O or discovery port of any node): each
//! connect, the first one and every reconnect, asks them in turn where
//! the subsystem is served now (discovery is served on every I/O port),
//! then tries those addresses, the last one that worked, and the given
//! ones, keeping the first optimized path (else the first that
//! connected). A reconnect checks that the namespace still has the size
//! it had.
//!
//! # Failover
//!
//! A namespace found that way rides through a path's loss and an owner's
//! failover as Linux native multipath does: a command that fails with a
//! path error (ANA Transition or Inaccessible, a status the target marks
//! as a path error), any status without Do Not Retry, a dropped
//! connection, a failed connect or a timeout retires the connection and
//! runs again on the path discovery gives next, with a short, growing pause (5 ms to 200 ms) between rounds,
//! until [`RemoteNamespace::failover_timeout`] has passed since the
//! command began (default 30 s: longer than a pool's lease, so an
//! owner's crash stalls a command rather than fails it). A status with
//! Do Not Retry that is not a path error fails the command at once. A command that timed out is retried
//! only after its connection is closed (as Linux resets a controller
//! before it fails I/O over), so the old attempt cannot land after a
//! later write. [`RemoteNamespace::connect_direct`] never fails over: a
//! node forwarding to a volume's owner returns path errors to its own
//! host, whose multipath decides.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_block::{BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf};

use crate::paths::find;
use crate::{Controller, HostConfig, HostError};
use strata_nvme::status::Status;

/// Part of a write's buffer, handed to the host library as `Bytes`.
struct Piece {
    buf: Arc<IoBuf>,
    range: std::ops::Range<usize>,
}

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        &self.buf.as_slice()[self.range.clone()]
    }
}

/// Most bytes one command moves.
const MAX_COMMAND_BYTES: usize = 1 << 20;
/// Most blocks one Write Zeroes command clears.
const MAX_ZERO_BLOCKS: u64 = 65_536;

/// One namespace of a remote subsystem.
pub struct RemoteNamespace {
    /// Where to ask for the subsystem (see the module doc).
    seeds: Vec<SocketAddr>,
    /// Where it was connected last.
    addr: Mutex<SocketAddr>,
    /// Whether a connect asks the seeds' discovery first (false: the
    /// seeds are the subsystem's own address, a fabric port that serves
    /// no discovery).
    discover: bool,
    nqn: String,
    nsid: u32,
    cfg: HostConfig,
    geometry: Geometry,
    /// Command timeout in milliseconds (settable while shared).
    timeout_ms: std::sync::atomic::AtomicU64,
    /// How long a command keeps failing over, in milliseconds (see the
    /// module doc; 0: never).
    failover_ms: std::sync::atomic::AtomicU64,
    current: Mutex<Option<Arc<Controller>>>,
    connecting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for RemoteNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteNamespace")
            .field("addr", &self.addr())
            .field("seeds", &self.seeds)
            .field("nqn", &self.nqn)
            .field("nsid", &self.nsid)
            .field("geometry", &self.geometry)
            .finish_non_exhaustive()
    }
}

fn io_error(e: impl std::fmt::Display) -> BlockError {
    BlockError::Io(std::io::Error::other(e.to_string()))
}

impl RemoteNamespace {
    /// Connects to `nqn` at `addr` and opens namespace `nsid` (the first
    /// active one when `None`), reading its size and block size.
    ///
    /// # Errors
    ///
    /// The connection fails, or the namespace does not exist.
    pub async fn connect(
        addr: SocketAddr,
        nqn: &str,
        nsid: Option<u32>,
        cfg: &HostConfig,
    ) -> Result<Arc<RemoteNamespace>, HostError> {
        Self::connect_any(&[addr], nqn, nsid, cfg).await
    }

    /// As [`RemoteNamespace::connect`], at `addr` only, never asking
    /// discovery where the subsystem is (a fabric port between storage
    /// nodes serves none).
    ///
    /// # Errors
    ///
    /// The connection fails, or the namespace does not exist.
    pub async fn connect_direct(
        addr: SocketAddr,
        nqn: &str,
        nsid: Option<u32>,
        cfg: &HostConfig,
    ) -> Result<Arc<RemoteNamespace>, HostError> {
        Self::open(&[addr], false, nqn, nsid, cfg).await
    }

    /// As [`RemoteNamespace::connect`], finding the subsystem through
    /// `seeds` (see the module doc), now and at every reconnect.
    ///
    /// # Errors
    ///
    /// No address leads to the subsystem, or the namespace does not exist.
    pub async fn connect_any(
        seeds: &[SocketAddr],
        nqn: &str,
        nsid: Option<u32>,
        cfg: &HostConfig,
    ) -> Result<Arc<RemoteNamespace>, HostError> {
        Self::open(seeds, true, nqn, nsid, cfg).await
    }

    async fn open(
        seeds: &[SocketAddr],
        discover: bool,
        nqn: &str,
        nsid: Option<u32>,
        cfg: &HostConfig,
    ) -> Result<Arc<RemoteNamespace>, HostError> {
        if seeds.is_empty() {
            return Err(HostError::InvalidArgument(format!("no address given for {nqn}")));
        }
        let (ctrl, (), addr) = find(seeds, discover, None, nqn, cfg, cfg.connect_timeout.min(DEFAULT_TIMEOUT), |a| {
            connect_plain(a, nqn, cfg)
        })
        .await?;
        let nsid = match nsid {
            Some(n) => n,
            None => match ctrl.active_namespaces().await?.first() {
                Some(&n) => n,
                None => return Err(HostError::InvalidArgument(format!("{nqn} has no active namespace"))),
            },
        };
        let id = ctrl.identify_namespace(nsid).await?;
        let block_size = id.block_size_bytes().and_then(|b| u32::try_from(b).ok()).unwrap_or(0);
        if id.nsze == 0 {
            return Err(HostError::UnknownNamespace(nsid));
        }
        if !(512..=1 << 16).contains(&block_size) {
            return Err(HostError::InvalidArgument(format!(
                "{nqn} namespace {nsid}: unusable block size {block_size}"
            )));
        }
        Ok(Arc::new(RemoteNamespace {
            seeds: seeds.to_vec(),
            addr: Mutex::new(addr),
            discover,
            nqn: nqn.to_string(),
            nsid,
            cfg: cfg.clone(),
            geometry: Geometry { block_size, num_blocks: id.nsze },
            timeout_ms: std::sync::atomic::AtomicU64::new(DEFAULT_TIMEOUT.as_millis() as u64),
            failover_ms: std::sync::atomic::AtomicU64::new(if discover {
                DEFAULT_FAILOVER.as_millis() as u64
            } else {
                0
            }),
            current: Mutex::new(Some(Arc::new(ctrl))),
            connecting: tokio::sync::Mutex::new(()),
        }))
    }

    /// How long one command may take before it fails and the connection
    /// is retired (default 30 s).
    pub fn command_timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Sets [`Self::command_timeout`] for the commands that start after.
    pub fn set_command_timeout(&self, timeout: Duration) {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1);
        self.timeout_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long a command keeps trying other paths after path errors
    /// (see the module doc); zero for [`Self::connect_direct`].
    pub fn failover_timeout(&self) -> Duration {
        Duration::from_millis(self.failover_ms.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Sets [`Self::failover_timeout`] for the commands that start after
    /// (zero: a path error fails the command, as before failover).
    pub fn set_failover_timeout(&self, timeout: Duration) {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.failover_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Runs command `sqe` on this namespace (its NSID set here), sending
    /// `data` and taking `read_len` bytes back: the completion's status
    /// and the data, whatever the status. For the commands this type has
    /// no method for (reservations); never failed over.
    ///
    /// # Errors
    ///
    /// A transport failure or a timeout (the connection is retired).
    pub async fn raw_command(
        &self,
        mut sqe: strata_nvme::command::Sqe,
        data: Option<bytes::Bytes>,
        read_len: usize,
    ) -> Result<(strata_nvme::status::Status, bytes::Bytes), BlockError> {
        sqe.set_nsid(self.nsid);
        let ctrl = self.ctrl().await.map_err(|(Attempt::Path(e) | Attempt::Final(e))| e)?;
        let queue = ctrl.io_queue(0).map_err(io_error)?;
        let limit = self.command_timeout();
        match tokio::time::timeout(limit, queue.io_command(sqe, data, read_len)).await {
            Ok(Ok((cqe, back))) => Ok((cqe.status, back)),
            Ok(Err(e)) => Err(self.retire_after(&ctrl, io_error(e))),
            Err(_) => {
                Err(self.retire_after(&ctrl, io_error(format!("a command to {} took over {limit:?}", self.addr()))))
            }
        }
    }

    /// The live controller, connecting if there is none (for what this
    /// type has no method for: asynchronous events, log pages).
    ///
    /// # Errors
    ///
    /// No connection could be made.
    pub async fn controller(&self) -> Result<Arc<Controller>, BlockError> {
        self.ctrl().await.map_err(|(Attempt::Path(e) | Attempt::Final(e))| e)
    }

    /// Retires `ctrl` as the live connection; returns `e`.
    fn retire_after(&self, ctrl: &Arc<Controller>, e: BlockError) -> BlockError {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, ctrl)) {
            *cur = None;
        }
        e
    }

    /// The namespace id.
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// Where the subsystem was connected last.
    pub fn addr(&self) -> SocketAddr {
        *self.addr.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live controller, connecting again after a failure. Only a
    /// namespace that changed size fails for good.
    async fn ctrl(&self) -> Result<Arc<Controller>, Attempt> {
        if let Some(c) = self.current.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(c);
        }
        let _one = self.connecting.lock().await;
        if let Some(c) = self.current.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(c);
        }
        let limit = self.command_timeout();
        let path = |e| Attempt::Path(io_error(e));
        let (c, (), addr) = find(&self.seeds, self.discover, Some(self.addr()), &self.nqn, &self.cfg, limit, |a| {
            connect_plain(a, &self.nqn, &self.cfg)
        })
        .await
        .map_err(path)?;
        let id = tokio::time::timeout(limit, c.identify_namespace(self.nsid))
            .await
            .map_err(|_| Attempt::Path(io_error(format!("identifying namespace {} at {addr} timed out", self.nsid))))?
            .map_err(path)?;
        if id.nsze != self.geometry.num_blocks {
            return Err(Attempt::Final(io_error(format!(
                "{} namespace {} at {addr} has {} blocks, not the {} it had",
                self.nqn, self.nsid, id.nsze, self.geometry.num_blocks
            ))));
        }
        let c = Arc::new(c);
        *self.addr.lock().unwrap_or_else(|e| e.into_inner()) = addr;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.clone());
        tracing::info!(%addr, nqn = %self.nqn, "remote namespace reconnected");
        Ok(c)
    }

    /// Runs one command with the timeout; a failure retires `ctrl`.
    async fn run<T>(
        &self,
        ctrl: &Arc<Controller>,
        cmd: impl std::future::Future<Output = Result<T, HostError>>,
    ) -> Result<T, Attempt> {
        let limit = self.command_timeout();
        // Any failure retires the connection, an error status too: the
        // controller may be a pool volume's deposed owner, whose fenced
        // writes fail while the volume is served elsewhere, and only a
        // reconnect asks discovery where that is.
        let failed = match tokio::time::timeout(limit, cmd).await {
            Ok(Ok(v)) => return Ok(v),
            // As Linux: a status the target says not to retry fails the
            // command; a path error or any other status is tried again.
            Ok(Err(HostError::Status { status, .. })) if status.code() == Status::RESERVATION_CONFLICT.code() => {
                return Err(Attempt::Final(BlockError::ReservationConflict));
            }
            Ok(Err(e)) if matches!(&e, HostError::Status { status, .. } if status.is_dnr() && !status.is_path_error()) => {
                Attempt::Final(io_error(e))
            }
            Ok(Err(e)) => Attempt::Path(io_error(e)),
            Err(_) => Attempt::Path(io_error(format!("a command to {} took over {limit:?}", self.addr()))),
        };
        Err(match failed {
            Attempt::Path(e) => Attempt::Path(self.retire_after(ctrl, e)),
            Attempt::Final(e) => Attempt::Final(self.retire_after(ctrl, e)),
        })
    }

    /// Runs `op` on the live controller, and again on the next path
    /// after each path failure until [`Self::failover_timeout`] has
    /// passed (see the module doc).
    async fn failover<T, F, Fut>(&self, mut op: F) -> Result<T, BlockError>
    where
        F: FnMut(Arc<Controller>) -> Fut,
        Fut: std::future::Future<Output = Result<T, Attempt>>,
    {
        let deadline = tokio::time::Instant::now() + self.failover_timeout();
        let mut pause = FAILOVER_FIRST_PAUSE;
        loop {
            let tried = match self.ctrl().await {
                Ok(c) => op(c).await,
                Err(failed) => Err(failed),
            };
            let e = match tried {
                Ok(v) => return Ok(v),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Path(e)) => e,
            };
            if tokio::time::Instant::now() + pause > deadline {
                return Err(e);
            }
            tracing::debug!(nqn = %self.nqn, error = %e, "path failure: trying again on the next path");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(FAILOVER_MAX_PAUSE);
        }
    }

    /// The commands `len` bytes at `lba` take: each one's first block
    /// and byte range, whole blocks within the controller's limit.
    fn pieces(&self, ctrl: &Controller, lba: u64, len: usize) -> impl Iterator<Item = (u64, std::ops::Range<usize>)> {
        let bs = self.geometry.block_size as usize;
        let step = MAX_COMMAND_BYTES.min(ctrl.max_transfer_bytes()).max(bs) / bs * bs;
        (0..len).step_by(step).map(move |at| (lba + (at / bs) as u64, at..len.min(at + step)))
    }

    fn check(&self, lba: u64, len: usize) -> Result<(), BlockError> {
        let bs = u64::from(self.geometry.block_size);
        let blocks = len as u64 / bs;
        if !(len as u64).is_multiple_of(bs) {
            return Err(BlockError::BadBuffer { len, expected: blocks.saturating_add(1) * bs });
        }
        if lba.checked_add(blocks).is_none_or(|end| end > self.geometry.num_blocks) {
            return Err(BlockError::OutOfRange { lba, blocks, num_blocks: self.geometry.num_blocks });
        }
        Ok(())
    }
}

/// The command timeout until [`RemoteNamespace::set_command_timeout`].
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The failover time of a namespace found through discovery until
/// [`RemoteNamespace::set_failover_timeout`].
const DEFAULT_FAILOVER: Duration = Duration::from_secs(30);

/// The pause before a command's second try on another path; it doubles
/// at each round up to [`FAILOVER_MAX_PAUSE`].
const FAILOVER_FIRST_PAUSE: Duration = Duration::from_millis(5);
const FAILOVER_MAX_PAUSE: Duration = Duration::from_millis(200);

/// How one try of a command failed.
enum Attempt {
    /// On this path only: another path (or this one later) may serve it.
    Path(BlockError),
    /// For good: the target answered with a status that is not a path
    /// error.
    Final(BlockError),
}

/// A path's controller with its own I/O queues.
async fn connect_plain(addr: SocketAddr, nqn: &str, cfg: &HostConfig) -> Result<(Controller, ()), HostError> {
    Ok((Controller::connect(addr, nqn, cfg).await?, ()))
}

impl BlockDevice for RemoteNamespace {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn usage(&self) -> DeviceUsage {
        // The remote side does the thin accounting; report the size.
        DeviceUsage { provisioned_bytes: self.geometry.size_bytes(), allocated_bytes: 0 }
    }

    fn read(&self, lba: u64, mut buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        Box::pin(async move {
            if let Err(e) = self.check(lba, buf.len()) {
                return (buf, Err(e));
            }
            let len = buf.len();
            let bs = self.geometry.block_size as usize;
            let r = self
                .failover(|ctrl| async move {
                    let pieces: Vec<_> = self.pieces(&ctrl, lba, len).collect();
                    let reads = pieces
                        .iter()
                        .map(|(slba, r)| self.run(&ctrl, ctrl.read(self.nsid, *slba, (r.len() / bs) as u32)));
                    let datas = futures_util::future::try_join_all(reads).await?;
                    for ((_, r), data) in pieces.iter().zip(&datas) {
                        if data.len() != r.len() {
                            let e = io_error(format!("short read: {} of {} bytes", data.len(), r.len()));
                            return Err(Attempt::Final(e));
                        }
                    }
                    Ok((pieces, datas))
                })
                .await;
            let r = r.map(|(pieces, datas)| {
                for ((_, r), data) in pieces.into_iter().zip(datas) {
                    buf.as_mut_slice()[r].copy_from_slice(&data);
                }
            });
            (buf, r)
        })
    }

    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        Box::pin(async move {
            if let Err(e) = self.check(lba, buf.len()) {
                return (buf, Err(e));
            }
            // The host library sends `Bytes`: each command's piece is a
            // view of the one buffer, shared rather than copied.
            let shared = Arc::new(buf);
            let r = self
                .failover(|ctrl| {
                    let shared = shared.clone();
                    async move {
                        let writes = self.pieces(&ctrl, lba, shared.len()).map(|(slba, range)| {
                            let data = bytes::Bytes::from_owner(Piece { buf: shared.clone(), range });
                            self.run(&ctrl, ctrl.write(self.nsid, slba, data, fua))
                        });
                        futures_util::future::try_join_all(writes).await.map(drop)
                    }
                })
                .await;
            // A completed command has dropped its piece. One that failed
            // or timed out may still be queued, holding its piece: then
            // the caller gets a copy and the queue frees the original.
            let buf = Arc::try_unwrap(shared).unwrap_or_else(|s| IoBuf::from_slice(s.as_slice()));
            (buf, r)
        })
    }

    fn write_zeroes(&self, lba: u64, blocks: u64, deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(async move {
            let len = usize::try_from(blocks.saturating_mul(u64::from(self.geometry.block_size)))
                .map_err(|_| BlockError::OutOfRange { lba, blocks, num_blocks: self.geometry.num_blocks })?;
            self.check(lba, len)?;
            let mut done = 0;
            while done < blocks {
                let n = (blocks - done).min(MAX_ZERO_BLOCKS);
                let at = lba + done;
                self.failover(|ctrl| async move {
                    self.run(&ctrl, ctrl.write_zeroes(self.nsid, at, n as u32, deallocate)).await
                })
                .await?;
                done += n;
            }
            Ok(())
        })
    }

    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(async move {
            for &(lba, blocks) in &ranges {
                self.write_zeroes(lba, blocks, true).await?;
            }
            Ok(())
        })
    }

    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        Box::pin(async move { self.failover(|ctrl| async move { self.run(&ctrl, ctrl.flush(self.nsid)).await }).await })
    }
}
