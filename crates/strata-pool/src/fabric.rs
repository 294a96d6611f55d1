//! Replicas on other nodes, reached over the internal fabric: NVMe/TCP
//! with strata's host library, fenced commands, one connection (with its
//! queue set) per peer node shared by every volume.
//!
//! A [`FabricLink`] is the connection to one peer. It connects on first
//! use and again after a transport failure. Each (re)connection gets a new
//! *generation*: a [`FabricReplica`] that sees the generation change fails
//! its next operation ([`ReplicaError::Reconnected`], before sending
//! anything), because the peer may have restarted and lost writes it had
//! not flushed. The volume then marks every dirty region missed for the
//! replica, trusts the new generation ([`Replica::trust`]) and refills
//! those regions: a node that restarts is never ejected for it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use strata_block::IoBuf;
use strata_host::{Controller, HostConfig, HostError};
use strata_nvme::command::fenced;
use strata_nvme::status::Status;

use crate::drl::NodeId;
use crate::replica::{Replica, ReplicaError, ReplicaFuture};

/// The subsystem NQN of `node`'s fabric listener.
pub fn fabric_nqn(node_name: &str) -> String {
    format!("nqn.2026-11.io.strata:fabric:{node_name}")
}

/// Largest transfer of one fabric command; larger I/O is split.
pub const MAX_FABRIC_TRANSFER: usize = 1 << 20;

/// The connection to one peer node.
pub struct FabricLink {
    node: NodeId,
    /// Where the peer listens and its fabric NQN; a restarted peer may
    /// come back elsewhere.
    target: std::sync::Mutex<(SocketAddr, String)>,
    cfg: HostConfig,
    current: std::sync::Mutex<Option<(Arc<Controller>, u64)>>,
    connecting: tokio::sync::Mutex<()>,
    generation: AtomicU64,
}

impl std::fmt::Debug for FabricLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FabricLink").field("node", &self.node).field("target", &self.peer()).finish_non_exhaustive()
    }
}

impl FabricLink {
    /// A link to `node` at `addr` serving `nqn`; connects on first use.
    pub fn new(node: NodeId, addr: SocketAddr, nqn: String, cfg: HostConfig) -> Arc<FabricLink> {
        Arc::new(FabricLink {
            node,
            target: std::sync::Mutex::new((addr, nqn)),
            cfg,
            current: std::sync::Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(0),
        })
    }

    /// The peer.
    pub fn node(&self) -> NodeId {
        self.node
    }

    fn peer(&self) -> (SocketAddr, String) {
        self.target.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Points the link at where the peer listens now; a change drops the
    /// current connection (the next use connects to the new place).
    pub fn update(&self, addr: SocketAddr, nqn: String) {
        let mut t = self.target.lock().unwrap_or_else(|e| e.into_inner());
        if *t != (addr, nqn.clone()) {
            *t = (addr, nqn);
            drop(t);
            *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// The connection, connecting if there is none, with its generation.
    ///
    /// # Errors
    ///
    /// [`ReplicaError::Unavailable`] when the peer cannot be reached.
    pub async fn get(&self) -> Result<(Arc<Controller>, u64), ReplicaError> {
        if let Some(c) = self.current.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(c);
        }
        let _one = self.connecting.lock().await;
        if let Some(c) = self.current.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(c);
        }
        let (addr, nqn) = self.peer();
        let ctrl = Controller::connect(addr, &nqn, &self.cfg)
            .await
            .map_err(|e| ReplicaError::Unavailable(format!("node {} at {addr}: {e}", self.node)))?;
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let c = (Arc::new(ctrl), generation);
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.clone());
        tracing::info!(node = %self.node, %addr, generation, "fabric link connected");
        Ok(c)
    }

    /// Forgets connection `generation` after a transport failure; the next
    /// [`get`](Self::get) reconnects.
    pub fn broken(&self, generation: u64) {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if cur.as_ref().is_some_and(|(_, g)| *g == generation) {
            tracing::warn!(node = %self.node, generation, "fabric link failed; will reconnect");
            *cur = None;
        }
    }
}

/// One volume's replica on a peer, reached through the peer's link. The
/// namespace ID on the peer's fabric subsystem is the volume id.
#[derive(Debug)]
pub struct FabricReplica {
    link: Arc<FabricLink>,
    nsid: u32,
    block_size: usize,
    /// The link generation this replica trusts; 0 until first use.
    armed: AtomicU64,
}

impl FabricReplica {
    /// Volume `nsid`'s replica behind `link`, with blocks of `block_size`
    /// bytes.
    pub fn new(link: Arc<FabricLink>, nsid: u32, block_size: u32) -> FabricReplica {
        FabricReplica { link, nsid, block_size: block_size.max(512) as usize, armed: AtomicU64::new(0) }
    }

    /// The connection to use, failing when it is not the one this
    /// replica was armed on (the peer may have lost unflushed writes).
    async fn conn(&self) -> Result<(Arc<Controller>, u64), ReplicaError> {
        let (ctrl, generation) = self.link.get().await?;
        match self.armed.compare_exchange(0, generation, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok((ctrl, generation)),
            Err(armed) if armed == generation => Ok((ctrl, generation)),
            Err(armed) => Err(ReplicaError::Reconnected {
                generation,
                reason: format!(
                    "node {}: fabric link reconnected (generation {armed} -> {generation}); the peer may have lost \
                     unflushed writes",
                    self.link.node
                ),
            }),
        }
    }

    fn error(&self, generation: u64, e: HostError) -> ReplicaError {
        match &e {
            HostError::Status { status, dw0, .. } => {
                let code = status.code();
                if code == Status::STALE_EPOCH.code() {
                    ReplicaError::Stale(0)
                } else if code == Status::PROMISED.code() {
                    ReplicaError::Promised(std::time::Duration::from_millis(u64::from(*dw0).max(1)))
                } else if code == Status::CAPACITY_EXCEEDED.code() {
                    ReplicaError::NoSpace
                } else if [Status::LBA_OUT_OF_RANGE.code(), Status::SGL_INVALID_DATA.code()].contains(&code) {
                    ReplicaError::Invalid(e.to_string())
                } else {
                    ReplicaError::Unavailable(format!("node {}: {e}", self.link.node))
                }
            }
            HostError::InvalidArgument(_) | HostError::TransferTooLarge { .. } => ReplicaError::Invalid(e.to_string()),
            _ => {
                self.link.broken(generation);
                ReplicaError::Unavailable(format!("node {}: {e}", self.link.node))
            }
        }
    }
}

impl Replica for FabricReplica {
    fn node(&self) -> NodeId {
        self.link.node
    }

    fn rearm(&self) {
        self.armed.store(0, Ordering::Release);
    }

    fn trust(&self, generation: u64) {
        self.armed.store(generation, Ordering::Release);
    }

    fn write(&self, epoch: u64, lba: u64, data: Bytes, fua: bool) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let (ctrl, g) = self.conn().await?;
            let q = ctrl.next_io_queue().map_err(|e| self.error(g, e))?;
            let step = self.step(&ctrl);
            let mut at = 0usize;
            while at < data.len() {
                let n = step.min(data.len() - at);
                let slba = lba + (at / self.block_size) as u64;
                q.fenced_write(self.nsid, epoch, slba, data.slice(at..at + n), fua)
                    .await
                    .map_err(|e| self.error(g, e))?;
                at += n;
            }
            Ok(())
        })
    }

    fn read(&self, epoch: u64, lba: u64, mut buf: IoBuf) -> ReplicaFuture<'_, IoBuf> {
        Box::pin(async move {
            let (ctrl, g) = self.conn().await?;
            let q = ctrl.next_io_queue().map_err(|e| self.error(g, e))?;
            let step = self.step(&ctrl);
            let mut at = 0usize;
            while at < buf.len() {
                let n = step.min(buf.len() - at);
                let slba = lba + (at / self.block_size) as u64;
                let data = q
                    .fenced_read(self.nsid, epoch, slba, (n / self.block_size) as u32)
                    .await
                    .map_err(|e| self.error(g, e))?;
                if data.len() != n {
                    return Err(ReplicaError::Unavailable(format!("node {}: short read", self.link.node)));
                }
                buf.as_mut_slice()[at..at + n].copy_from_slice(&data);
                at += n;
            }
            Ok(buf)
        })
    }

    fn write_zeroes(&self, epoch: u64, lba: u64, blocks: u64, deallocate: bool) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let (ctrl, g) = self.conn().await?;
            let q = ctrl.next_io_queue().map_err(|e| self.error(g, e))?;
            let mut done = 0u64;
            while done < blocks {
                let n = (blocks - done).min(65536);
                q.fenced_write_zeroes(self.nsid, epoch, lba + done, n as u32, deallocate)
                    .await
                    .map_err(|e| self.error(g, e))?;
                done += n;
            }
            Ok(())
        })
    }

    fn flush(&self, epoch: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let (ctrl, g) = self.conn().await?;
            let q = ctrl.next_io_queue().map_err(|e| self.error(g, e))?;
            q.fenced_flush(self.nsid, epoch).await.map_err(|e| self.error(g, e))
        })
    }

    fn promise(&self, epoch: u64, duration: std::time::Duration) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let (ctrl, g) = self.conn().await?;
            let q = ctrl.next_io_queue().map_err(|e| self.error(g, e))?;
            q.fenced_promise(self.nsid, epoch, duration).await.map_err(|e| self.error(g, e))
        })
    }

    fn save_note(&self, epoch: u64, note: Vec<u8>) -> ReplicaFuture<'_, ()> {
        let nsid = self.nsid;
        Box::pin(self.noting(move |ctrl| {
            let note = note.clone();
            Box::pin(async move { ctrl.next_io_queue()?.fenced_note_save(nsid, epoch, &note).await })
        }))
    }

    fn load_note(&self, epoch: u64) -> ReplicaFuture<'_, Vec<u8>> {
        let nsid = self.nsid;
        Box::pin(
            self.noting(move |ctrl| Box::pin(async move { ctrl.next_io_queue()?.fenced_note_load(nsid, epoch).await })),
        )
    }
}

/// A note command's future, on a connection it borrows.
type NoteFuture<'c, T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, HostError>> + Send + 'c>>;

impl FabricReplica {
    /// Runs a note command (`op`, on one of the connection's I/O queues) over
    /// whatever connection the link has, trusted or not, and once more on
    /// a new one when that connection has failed. A note is the owner's
    /// log, not the volume's data: it does not depend on what the peer
    /// kept of earlier writes, and saving it again replaces it whole.
    /// Failing it as `Reconnected`, or on the dead connection to a peer
    /// that has restarted since, failed the save of the log and the
    /// host's write that needed it (the soak, during an etcd freeze).
    async fn noting<T, F>(&self, op: F) -> Result<T, ReplicaError>
    where
        F: for<'c> Fn(&'c Controller) -> NoteFuture<'c, T>,
    {
        let mut tries = 0;
        loop {
            tries += 1;
            let (ctrl, g) = self.link.get().await?;
            match op(&ctrl).await.map_err(|e| self.error(g, e)) {
                Err(ReplicaError::Unavailable(why)) if tries < 2 => {
                    tracing::debug!(node = %self.link.node, "a note failed on the link's connection ({why}): again on a new one");
                }
                r => return r,
            }
        }
    }
}

impl crate::erasure::Shard for FabricReplica {
    fn write_logged(&self, epoch: u64, seq: u64, targets: u64, lba: u64, data: Bytes) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            let (ctrl, g) = self.conn().await?;
            let q = ctrl.next_io_queue().map_err(|e| self.error(g, e))?;
            let step = self.step(&ctrl);
            let mut at = 0usize;
            while at < data.len() {
                let n = step.min(data.len() - at);
                let slba = lba + (at / self.block_size) as u64;
                q.fenced_write_logged(self.nsid, epoch, seq, targets, slba, data.slice(at..at + n))
                    .await
                    .map_err(|e| self.error(g, e))?;
                at += n;
            }
            Ok(())
        })
    }

    fn committed(&self, epoch: u64) -> ReplicaFuture<'_, u64> {
        self.undo_command(fenced::COMMITTED, epoch, 0)
    }

    fn commit(&self, epoch: u64, seq: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move { self.undo_command(fenced::COMMIT, epoch, seq).await.map(|_| ()) })
    }

    fn roll_back(&self, epoch: u64, after: u64) -> ReplicaFuture<'_, u64> {
        self.undo_command(fenced::ROLL_BACK, epoch, after)
    }

    fn records(&self, epoch: u64, after: u64) -> ReplicaFuture<'_, Vec<strata_block::UndoRecord>> {
        Box::pin(async move {
            let (ctrl, g) = self.conn().await?;
            let q = ctrl.next_io_queue().map_err(|e| self.error(g, e))?;
            let list = q.fenced_undo_records(self.nsid, epoch, after).await.map_err(|e| self.error(g, e))?;
            Ok(list
                .into_iter()
                .map(|[seq, lba, blocks, targets]| strata_block::UndoRecord { seq, lba, blocks, targets })
                .collect())
        })
    }

    fn roll_back_only(&self, epoch: u64, undo: Vec<u64>, mark: u64) -> ReplicaFuture<'_, u64> {
        Box::pin(async move {
            let (ctrl, g) = self.conn().await?;
            let q = ctrl.next_io_queue().map_err(|e| self.error(g, e))?;
            q.fenced_roll_back_only(self.nsid, epoch, &undo, mark).await.map_err(|e| self.error(g, e))
        })
    }

    fn discard_undo(&self, epoch: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move { self.undo_command(fenced::DISCARD_UNDO, epoch, 0).await.map(|_| ()) })
    }
}

impl FabricReplica {
    fn undo_command(&self, opcode: u8, epoch: u64, arg: u64) -> ReplicaFuture<'_, u64> {
        Box::pin(async move {
            let (ctrl, g) = self.conn().await?;
            let q = ctrl.next_io_queue().map_err(|e| self.error(g, e))?;
            q.undo_command(opcode, self.nsid, epoch, arg).await.map_err(|e| self.error(g, e))
        })
    }

    /// Bytes per fabric command: whole blocks, within the peer's MDTS.
    fn step(&self, ctrl: &Controller) -> usize {
        let max = MAX_FABRIC_TRANSFER.min(ctrl.max_transfer_bytes()).max(self.block_size);
        max / self.block_size * self.block_size
    }
}
