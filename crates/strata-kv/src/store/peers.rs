//! The other writers on a shared pool volume: each writes its own region
//! (its log), and this store reads those logs, read only, so that a
//! lookup here sees the blocks they wrote. [`Peer::refresh`] reads what
//! a peer added since the last look into the index's peer index; a get
//! reads a block through [`Peer::reader`] (the `read` module).
//!
//! Invariant: the peer index holds only records that were current in
//! their peer's log when last read, and none of a peer whose log was
//! formatted again since. A peer's log lock is held from its read to its
//! indexing, so two refreshes cannot index one peer's records out of
//! order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_block::BlockDevice;

use super::index::{Inner, PeerLoc, lock};
use crate::format::Kind;
use crate::log::{LogDev, PeerLog};

/// How often the logs of the other writers on a shared pool volume are
/// read for what they added.
pub const PEER_REFRESH: Duration = Duration::from_secs(1);

/// A peer's log, as this store reads it.
pub(super) struct Peer {
    dev: Arc<dyn BlockDevice>,
    /// Opened once the peer has formatted its log; held across a refresh.
    log: tokio::sync::Mutex<Option<PeerLog>>,
    /// Its device side for reads, without waiting for a refresh.
    reader: Mutex<Option<Arc<LogDev>>>,
}

impl Peer {
    /// The peer writing the region `dev`; its log is opened by the first
    /// refresh that finds it formatted.
    pub(super) fn new(dev: Arc<dyn BlockDevice>) -> Peer {
        Peer { dev, log: tokio::sync::Mutex::new(None), reader: Mutex::new(None) }
    }

    /// Its log's device side for reads; `None` until its log is open.
    pub(super) fn reader(&self) -> Option<Arc<LogDev>> {
        self.reader.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads what this peer, number `p`, added to its log since the last
    /// look, and indexes it in `index`'s peer index, taking `clock`'s
    /// time to leave out what has expired. A log not yet formatted, not
    /// readable, or whose refresh fails is tried again next time.
    pub(super) async fn refresh(&self, p: usize, index: &Mutex<Inner>, clock: &(dyn Fn() -> u64 + Send + Sync)) {
        let mut log = self.log.lock().await;
        if log.is_none() {
            match PeerLog::open(self.dev.clone()).await {
                Ok(Some(l)) => {
                    *self.reader.lock().unwrap_or_else(|e| e.into_inner()) = Some(l.dev().clone());
                    *log = Some(l);
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(peer = p, error = %e, "KV peer log not readable");
                    return;
                }
            }
        }
        let Some(l) = log.as_mut() else { return };
        let found = match l.refresh().await {
            Ok(Some(found)) => found,
            Ok(None) => {
                // The peer formatted its log afresh: what it had is gone.
                tracing::info!(peer = p, "KV peer log was formatted again");
                *log = None;
                *self.reader.lock().unwrap_or_else(|e| e.into_inner()) = None;
                lock(index).peer_index.retain(|_, pl| pl.peer != p);
                return;
            }
            Err(e) => {
                tracing::warn!(peer = p, error = %e, "KV peer log refresh failed; trying again in a second");
                return;
            }
        };
        let now = clock();
        let mut g = lock(index);
        for f in found {
            let h = f.head;
            match h.kind {
                Kind::Put if h.expires_ms == 0 || h.expires_ms > now => {
                    let pl = PeerLoc { peer: p, loc: f.loc, expires_ms: h.expires_ms, version: h.version };
                    g.peer_index.insert(f.key, pl);
                }
                // A namespace deleted: the peer's keys under it, found
                // before this record, are gone (later ones are newer).
                Kind::DeletePrefix => g.peer_index.retain(|k, pl| !(pl.peer == p && k.starts_with(&f.key))),
                Kind::Expiry => {
                    if let Some(pl) = g.peer_index.get_mut(&f.key)
                        && pl.peer == p
                        && Some(pl.version) == f.applies_to
                    {
                        pl.expires_ms = h.expires_ms;
                        if pl.expired(now) {
                            g.peer_index.remove(&f.key);
                        }
                    }
                }
                Kind::Put | Kind::Delete => {
                    if g.peer_index.get(&f.key).is_some_and(|pl| pl.peer == p) {
                        g.peer_index.remove(&f.key);
                    }
                }
            }
        }
    }
}
