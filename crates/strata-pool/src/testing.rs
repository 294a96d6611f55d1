//! In-memory stand-ins for the metadata store and for replicas that fail,
//! for this crate's tests and the node's.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use strata_block::IoBuf;

use crate::drl::NodeId;
use crate::replica::{Replica, ReplicaError, ReplicaFuture};
use crate::volume::{Control, ControlError, ControlFuture, Layout, Membership};

/// A metadata store holding one volume's membership, with compare-and-set
/// on the epoch as etcd's transactions do.
#[derive(Debug)]
pub struct MemControl {
    /// The stored membership.
    pub stored: Mutex<Membership>,
    /// When set, every change fails as if the store were unreachable.
    pub unavailable: AtomicBool,
}

impl MemControl {
    /// A store holding `in_sync` at `epoch`.
    pub fn new(epoch: u64, in_sync: impl IntoIterator<Item = NodeId>) -> Arc<MemControl> {
        Arc::new(MemControl {
            stored: Mutex::new(Membership { epoch, in_sync: in_sync.into_iter().collect() }),
            unavailable: AtomicBool::new(false),
        })
    }

    /// The stored membership.
    pub fn get(&self) -> Membership {
        self.stored.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A takeover: bumps the epoch and returns the new membership.
    pub fn take_over(&self) -> Membership {
        let mut m = self.stored.lock().unwrap_or_else(|e| e.into_inner());
        m.epoch += 1;
        m.clone()
    }

    fn change(&self, from: &Membership, f: impl FnOnce(&mut BTreeSet<NodeId>)) -> Result<Membership, ControlError> {
        if self.unavailable.load(SeqCst) {
            return Err(ControlError::Unavailable("injected".into()));
        }
        let mut m = self.stored.lock().unwrap_or_else(|e| e.into_inner());
        if m.epoch != from.epoch {
            return Err(ControlError::NotOwner(format!("epoch is {}, not {}", m.epoch, from.epoch)));
        }
        f(&mut m.in_sync);
        m.epoch += 1;
        Ok(m.clone())
    }
}

impl Control for MemControl {
    fn leave(&self, from: &Membership, nodes: &[NodeId]) -> ControlFuture<'_, Membership> {
        let (from, nodes) = (from.clone(), nodes.to_vec());
        Box::pin(async move {
            // As with etcd: the request travels, the store commits, and
            // the answer travels back; a caller may vanish at either wait.
            tokio::task::yield_now().await;
            let r = self.change(&from, |s| nodes.iter().for_each(|n| _ = s.remove(n)));
            tokio::task::yield_now().await;
            r
        })
    }

    fn rejoin(&self, from: &Membership, node: NodeId) -> ControlFuture<'_, Membership> {
        let from = from.clone();
        Box::pin(async move {
            tokio::task::yield_now().await;
            let r = self.change(&from, |s| _ = s.insert(node));
            tokio::task::yield_now().await;
            r
        })
    }
}

/// A layout from a fixed table: chunk `c` lives on `table[c % len]`.
#[derive(Debug)]
pub struct TableLayout {
    /// Bytes per chunk.
    pub chunk_bytes: u64,
    /// Replica lists, cycled over the chunks.
    pub table: Vec<Vec<NodeId>>,
}

impl Layout for TableLayout {
    fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }
    fn replicas(&self, chunk: u64) -> Vec<NodeId> {
        self.table[(chunk % self.table.len() as u64) as usize].clone()
    }
}

/// A replica that fails on demand and counts what it is asked.
#[derive(Debug)]
pub struct Faulty {
    inner: Arc<dyn Replica>,
    /// When set, every call fails with [`ReplicaError::Unavailable`].
    pub down: AtomicBool,
    /// When set, writes fail with [`ReplicaError::NoSpace`].
    pub full: AtomicBool,
    /// Reads served.
    pub reads: AtomicU64,
    /// Writes (and write-zeroes) served.
    pub writes: AtomicU64,
}

impl Faulty {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Replica>) -> Arc<Faulty> {
        Arc::new(Faulty {
            inner,
            down: AtomicBool::new(false),
            full: AtomicBool::new(false),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        })
    }

    fn check(&self) -> Result<(), ReplicaError> {
        if self.down.load(SeqCst) {
            return Err(ReplicaError::Unavailable(format!("node {} is down (injected)", self.inner.node())));
        }
        Ok(())
    }
}

impl Replica for Faulty {
    fn node(&self) -> NodeId {
        self.inner.node()
    }

    fn rearm(&self) {
        self.inner.rearm()
    }

    fn write(&self, epoch: u64, lba: u64, data: Bytes, fua: bool) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.check()?;
            if self.full.load(SeqCst) {
                return Err(ReplicaError::NoSpace);
            }
            self.writes.fetch_add(1, SeqCst);
            self.inner.write(epoch, lba, data, fua).await
        })
    }

    fn read(&self, epoch: u64, lba: u64, buf: IoBuf) -> ReplicaFuture<'_, IoBuf> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.check()?;
            self.reads.fetch_add(1, SeqCst);
            self.inner.read(epoch, lba, buf).await
        })
    }

    fn write_zeroes(&self, epoch: u64, lba: u64, blocks: u64, deallocate: bool) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.check()?;
            self.writes.fetch_add(1, SeqCst);
            self.inner.write_zeroes(epoch, lba, blocks, deallocate).await
        })
    }

    fn flush(&self, epoch: u64) -> ReplicaFuture<'_, ()> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.check()?;
            self.inner.flush(epoch).await
        })
    }
}
