//! Every node is a path to every pool volume (ANA multipath).
//!
//! The owner serves a volume itself (ANA optimized). Every other node
//! serves it too, under the same subsystem NQN, serial, model, NSID and
//! namespace identifiers, so that a multipath host (Linux native
//! multipath, SPDK's bdev_nvme) merges the paths into one device: such a
//! *path* forwards each command to the owner over the fabric and reports
//! ANA non-optimized. The owner lists the volumes it serves on its *proxy*
//! subsystem (internal, fabric listener only, the cluster's nodes as its
//! only hosts, NSID = volume id), which is what a path connects to.
//!
//! # States
//!
//! | this node | ANA state of its path | I/O |
//! |---|---|---|
//! | owner | optimized | served here |
//! | another node owns it | non-optimized | forwarded to the owner |
//! | no owner known (a takeover under way) | change | ANA Transition |
//! | the owner did not answer the last command | change | ANA Transition |
//! | it stopped owning the volume (fenced, deposed, handed over) | change, then non-optimized | ANA Transition, then forwarded |
//!
//! A forwarded command that cannot reach the owner (it died, it was
//! fenced, its proxy no longer lists the volume) fails with
//! [`BlockError::PathUnavailable`], which the target answers with ANA
//! Transition: a path error, which makes the host retry the command on
//! another path instead of failing it. An owner that stops owning keeps
//! its subsystem and its hosts' connections: the volume in it is swapped
//! for a forwarding device (`ClusterNode::demote`). Nothing a path
//! forwards can be stale: the owner serves it through its fenced volume,
//! and a deposed owner's proxy refuses it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use strata_block::{BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf};
use strata_host::{HostConfig, RemoteNamespace};
use strata_nvme::command::Sqe;
use strata_target::reservation::HostId;
use strata_target::{AnaState, ForwardFuture, HostForward, Subsystem};

/// The NQN of `node_name`'s proxy subsystem (see the module docs).
pub fn proxy_nqn(node_name: &str) -> String {
    format!("nqn.2026-11.io.strata:proxy:{node_name}")
}

/// How long a forwarded command may take before the path gives up on it
/// and answers ANA Transition: well inside the 30 s a Linux host waits for
/// an I/O, so that the host retries elsewhere rather than aborts.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a path tries to connect to the owner's proxy.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Where a path forwards to: the owner's fabric address and proxy NQN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aim {
    /// The owner's fabric listener.
    pub addr: SocketAddr,
    /// The owner's proxy subsystem.
    pub nqn: String,
}

/// A path's device: forwards every command to the volume's owner (see
/// the module docs). Aimed by the reconcile pass; connects on first use
/// and after every failure.
pub struct Forward {
    geometry: Geometry,
    /// The volume's NSID on the owner's proxy: its id.
    nsid: u32,
    /// The volume's NSID in the path's subsystem (what hosts see).
    host_nsid: u32,
    /// Itself, for the tasks it starts.
    me: Weak<Forward>,
    host: HostConfig,
    /// Where it forwards, and its connections there: one per host that
    /// sent commands through this path (connected with that host's
    /// identifier, so the owner applies the host's reservations), and
    /// the node's own (`None`: probes).
    aim: Mutex<Option<(Aim, Connections)>>,
    connecting: tokio::sync::Mutex<()>,
    /// The path's subsystem, whose ANA state a lost owner turns to
    /// change at once (see [`Forward::failing`]); none once retired.
    path: Mutex<Weak<Subsystem>>,
    /// Set when a command could not reach the current aim; cleared by a
    /// new aim or a probe that reaches it again.
    failing: AtomicBool,
    probing: AtomicBool,
}

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward").field("nsid", &self.nsid).field("aim", &self.aimed()).finish_non_exhaustive()
    }
}

/// A path's connections to the owner, by the host they forward for,
/// each with the task relaying its reservation notices.
type Connections = std::collections::HashMap<Option<HostId>, (Arc<RemoteNamespace>, Option<Relay>)>;

/// A task relaying a host's reservation notices from the owner to the
/// path's controllers of that host; stopped when its connection goes.
struct Relay(tokio::task::AbortHandle);

impl Drop for Relay {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Why a path with no aim refuses a command.
const NO_OWNER: &str = "no owner known";

fn unavailable(e: impl std::fmt::Display) -> BlockError {
    BlockError::PathUnavailable(e.to_string())
}

impl Forward {
    /// A path to volume `nsid` (on the owner's proxy; `host_nsid` in the
    /// path's subsystem) of `geometry`, connecting as `host`; aimed
    /// nowhere yet.
    pub fn new(geometry: Geometry, nsid: u32, host_nsid: u32, host: HostConfig) -> Arc<Forward> {
        Arc::new_cyclic(|me| Forward {
            me: me.clone(),
            geometry,
            nsid,
            host_nsid,
            host,
            aim: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            path: Mutex::new(Weak::new()),
            failing: AtomicBool::new(false),
            probing: AtomicBool::new(false),
        })
    }

    /// The path subsystem this device serves in: its ANA state turns to
    /// change as soon as a command cannot reach the owner.
    pub fn serves_in(&self, sub: &Arc<Subsystem>) {
        *self.path.lock().unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(sub);
    }

    /// Stops being a path: aimed nowhere (every command a path error)
    /// and never again touching its subsystem's ANA state, which the
    /// volume itself now serves in (this node took it over).
    pub fn stop_being_a_path(&self) {
        *self.path.lock().unwrap_or_else(|e| e.into_inner()) = Weak::new();
        self.aim(None);
    }

    fn subsystem(&self) -> Option<Arc<Subsystem>> {
        self.path.lock().unwrap_or_else(|e| e.into_inner()).upgrade()
    }

    /// True while the owner it is aimed at did not answer the last
    /// command (or connect) and no probe has reached it since. The path
    /// then reports ANA change, not non-optimized: a multipath host stops
    /// sending there (Linux queues the I/O, or sends it down another path)
    /// instead of retrying a dead owner through it as fast as it can.
    pub fn failing(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    /// A command could not reach the owner: the path goes to ANA change
    /// until a probe or a new aim says otherwise.
    fn lost(&self, why: &BlockError) {
        if self.failing.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::warn!(nsid = self.nsid, aim = ?self.aimed(), error = %why, "a path lost the volume's owner: ANA change");
        if let Some(sub) = self.subsystem() {
            sub.set_ana_state(AnaState::Change);
        }
    }

    /// Tries to reach the owner again (one probe at a time); when it
    /// does, the path serves again (non-optimized).
    pub async fn probe(self: Arc<Self>) {
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let aim = self.aimed();
        if aim.is_some() && self.remote(None).await.is_ok() && self.aimed() == aim {
            self.failing.store(false, Ordering::Release);
            if let Some(sub) = self.subsystem() {
                sub.set_ana_state(AnaState::NonOptimized);
            }
            tracing::info!(nsid = self.nsid, ?aim, "a path reaches the volume's owner again");
        }
        self.probing.store(false, Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Aim, Connections)>> {
        self.aim.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where it forwards to now.
    pub fn aimed(&self) -> Option<Aim> {
        self.lock().as_ref().map(|(a, _)| a.clone())
    }

    /// Forwards to `aim` from now on (`None`: nowhere, every command is a
    /// path error); a new aim drops the connection to the old one.
    pub fn aim(&self, aim: Option<Aim>) {
        let mut cur = self.lock();
        if cur.as_ref().map(|(a, _)| a) != aim.as_ref() {
            *cur = aim.map(|a| (a, Connections::new()));
            self.failing.store(false, Ordering::Release);
        }
    }

    /// The connection to the owner's namespace, made if there is none;
    /// a failure to make it marks the path [failing](Self::failing).
    async fn remote(&self, host: Option<&HostId>) -> Result<Arc<RemoteNamespace>, BlockError> {
        self.connected(host).await.inspect_err(|e| {
            if !matches!(e, BlockError::PathUnavailable(why) if why == NO_OWNER) {
                self.lost(e);
            }
        })
    }

    async fn connected(&self, host: Option<&HostId>) -> Result<Arc<RemoteNamespace>, BlockError> {
        let key = host.copied();
        let aim = match &*self.lock() {
            None => return Err(unavailable(NO_OWNER)),
            Some((aim, conns)) => match conns.get(&key) {
                Some((ns, _)) => return Ok(ns.clone()),
                None => aim.clone(),
            },
        };
        let _one = self.connecting.lock().await;
        if let Some((a, conns)) = &*self.lock()
            && *a == aim
            && let Some((ns, _)) = conns.get(&key)
        {
            return Ok(ns.clone());
        }
        // The host's identifier, this node's NQN (the proxy admits only
        // the cluster's nodes).
        let cfg = match host {
            Some(id) => HostConfig { hostid: *id, ..self.host.clone() },
            None => self.host.clone(),
        };
        let connect = RemoteNamespace::connect_direct(aim.addr, &aim.nqn, Some(self.nsid), &cfg);
        let ns = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| unavailable(format!("connecting to the owner at {} timed out", aim.addr)))?
            .map_err(|e| unavailable(format!("the owner at {}: {e}", aim.addr)))?;
        if ns.geometry() != self.geometry {
            return Err(unavailable(format!(
                "the owner at {} serves {:?}, not the volume's {:?}",
                aim.addr,
                ns.geometry(),
                self.geometry
            )));
        }
        ns.set_command_timeout(FORWARD_TIMEOUT);
        let mut cur = self.lock();
        match &mut *cur {
            Some((a, conns)) if *a == aim => {
                let relay =
                    host.map(|h| Relay(tokio::spawn(relay_notices(self.me.clone(), ns.clone(), *h)).abort_handle()));
                conns.insert(key, (ns.clone(), relay));
                Ok(ns)
            }
            // Aimed elsewhere meanwhile: this command still goes where it
            // was sent; the next one connects to the new aim.
            _ => Ok(ns),
        }
    }

    /// Drops `ns` as the connection, after a failure on it: the next
    /// command connects again (the owner may have restarted, or moved).
    fn retire(&self, ns: &Arc<RemoteNamespace>) {
        if let Some((_, conns)) = &mut *self.lock() {
            conns.retain(|_, (s, _)| !Arc::ptr_eq(s, ns));
        }
    }

    /// `e` from the owner as this path's answer: a bad request stays
    /// what it is, anything else is a path error (the owner's own path
    /// gives the host the real status, if there is one).
    fn judge(&self, ns: &Arc<RemoteNamespace>, e: BlockError) -> BlockError {
        match e {
            BlockError::OutOfRange { .. } | BlockError::BadBuffer { .. } | BlockError::ReservationConflict => e,
            e => {
                self.retire(ns);
                let e = unavailable(format!("forwarding to the owner: {e}"));
                self.lost(&e);
                e
            }
        }
    }

    /// Forwards a read or write of `buf` at `lba` (`op`), after the
    /// local range check; the buffer comes back whatever happens.
    async fn with_buf<F, Fut>(
        &self,
        host: Option<&HostId>,
        lba: u64,
        buf: IoBuf,
        op: F,
    ) -> (IoBuf, Result<(), BlockError>)
    where
        F: FnOnce(Arc<RemoteNamespace>, IoBuf) -> Fut,
        Fut: std::future::Future<Output = (IoBuf, Result<(), BlockError>)>,
    {
        if let Err(e) = self.check(lba, buf.len() as u64) {
            return (buf, Err(e));
        }
        let ns = match self.remote(host).await {
            Ok(ns) => ns,
            Err(e) => return (buf, Err(e)),
        };
        let (buf, r) = op(ns.clone(), buf).await;
        (buf, r.map_err(|e| self.judge(&ns, e)))
    }

    fn check(&self, lba: u64, len: u64) -> Result<(), BlockError> {
        let bs = u64::from(self.geometry.block_size);
        if !len.is_multiple_of(bs) {
            return Err(BlockError::BadBuffer { len: len as usize, expected: len / bs * bs });
        }
        let blocks = len / bs;
        if lba.checked_add(blocks).is_none_or(|end| end > self.geometry.num_blocks) {
            return Err(BlockError::OutOfRange { lba, blocks, num_blocks: self.geometry.num_blocks });
        }
        Ok(())
    }
}

impl Forward {
    fn read_as(&self, host: Option<&HostId>, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        let host = host.copied();
        Box::pin(async move {
            self.with_buf(host.as_ref(), lba, buf, move |ns, buf| async move { ns.read(lba, buf).await }).await
        })
    }

    fn write_as(
        &self,
        host: Option<&HostId>,
        lba: u64,
        buf: IoBuf,
        fua: bool,
    ) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        let host = host.copied();
        Box::pin(async move {
            self.with_buf(host.as_ref(), lba, buf, move |ns, buf| async move { ns.write(lba, buf, fua).await }).await
        })
    }

    fn write_zeroes_as(
        &self,
        host: Option<&HostId>,
        lba: u64,
        blocks: u64,
        deallocate: bool,
    ) -> BlockFuture<'_, Result<(), BlockError>> {
        let host = host.copied();
        Box::pin(async move {
            let len = blocks.saturating_mul(u64::from(self.geometry.block_size));
            self.check(lba, len)?;
            let ns = self.remote(host.as_ref()).await?;
            ns.write_zeroes(lba, blocks, deallocate).await.map_err(|e| self.judge(&ns, e))
        })
    }

    fn deallocate_as(&self, host: Option<&HostId>, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        let host = host.copied();
        Box::pin(async move {
            let ns = self.remote(host.as_ref()).await?;
            ns.deallocate(ranges).await.map_err(|e| self.judge(&ns, e))
        })
    }

    fn flush_as(&self, host: Option<&HostId>) -> BlockFuture<'_, Result<(), BlockError>> {
        let host = host.copied();
        Box::pin(async move {
            let ns = self.remote(host.as_ref()).await?;
            ns.flush().await.map_err(|e| self.judge(&ns, e))
        })
    }
}

/// The path's device as the node itself (probes): every command goes to
/// the owner under the node's own host identifier.
impl BlockDevice for Forward {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn usage(&self) -> DeviceUsage {
        // The owner accounts for the space; a path only knows the size.
        DeviceUsage { provisioned_bytes: self.geometry.size_bytes(), allocated_bytes: 0 }
    }

    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        self.read_as(None, lba, buf)
    }

    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        self.write_as(None, lba, buf, fua)
    }

    fn write_zeroes(&self, lba: u64, blocks: u64, deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        self.write_zeroes_as(None, lba, blocks, deallocate)
    }

    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        self.deallocate_as(None, ranges)
    }

    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        self.flush_as(None)
    }
}

/// Relays host `host`'s reservation notices about the volume from the
/// owner (its connection `ns` there) to the path's controllers of that
/// host, until the connection goes.
async fn relay_notices(forward: std::sync::Weak<Forward>, ns: Arc<RemoteNamespace>, host: HostId) {
    use strata_nvme::reservation::{NOTIFICATION_LOG_PAGE, NoticeKind, ReservationNotice};
    let Ok(ctrl) = ns.controller().await else { return };
    drop(ns);
    loop {
        let Ok(event) = ctrl.async_event_request().await else { return };
        let Ok(dw0) = event.await else { return };
        if dw0 & 0x7 != u32::from(strata_nvme::command::async_event::TYPE_IO_COMMAND_SPECIFIC) {
            continue;
        }
        loop {
            let Ok(page) = ctrl.get_log_page(NOTIFICATION_LOG_PAGE, u32::MAX, 0, 64, false).await else { return };
            let Ok(notice) = ReservationNotice::decode(&page) else { break };
            if notice.kind == NoticeKind::Empty {
                break;
            }
            let Some(f) = forward.upgrade() else { return };
            if notice.nsid == f.nsid
                && let Some(sub) = f.subsystem()
            {
                for c in sub.controllers().iter().filter(|c| c.hostid() == host) {
                    c.notify_reservation(f.host_nsid, notice.kind);
                }
            }
            if notice.available == 0 {
                break;
            }
        }
    }
}

/// A path's forwarding for one host: what the target runs that host's
/// commands on (see [`strata_target::HostForward`]).
struct ForwardAs {
    forward: Arc<Forward>,
    host: HostId,
}

impl BlockDevice for ForwardAs {
    fn geometry(&self) -> Geometry {
        self.forward.geometry
    }

    fn usage(&self) -> DeviceUsage {
        self.forward.usage()
    }

    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        self.forward.read_as(Some(&self.host), lba, buf)
    }

    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        self.forward.write_as(Some(&self.host), lba, buf, fua)
    }

    fn write_zeroes(&self, lba: u64, blocks: u64, deallocate: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        self.forward.write_zeroes_as(Some(&self.host), lba, blocks, deallocate)
    }

    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        self.forward.deallocate_as(Some(&self.host), ranges)
    }

    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        self.forward.flush_as(Some(&self.host))
    }
}

/// A path as the target sees it: each host's commands, reservation
/// commands included, run at the owner under that host's identifier.
pub struct PathForward(pub Arc<Forward>);

impl HostForward for PathForward {
    fn device_for(&self, host: &HostId) -> Arc<dyn BlockDevice> {
        Arc::new(ForwardAs { forward: self.0.clone(), host: *host })
    }

    fn reservation(&self, host: &HostId, sqe: Sqe, data: Option<Vec<u8>>, read_len: usize) -> ForwardFuture<'_> {
        let host = *host;
        Box::pin(async move {
            let ns = self.0.remote(Some(&host)).await?;
            match ns.raw_command(sqe, data.map(bytes::Bytes::from), read_len).await {
                Ok((status, back)) => Ok((status, back.to_vec())),
                Err(e) => Err(self.0.judge(&ns, e)),
            }
        })
    }
}
