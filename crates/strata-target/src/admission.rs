//! Connection admission: how many TCP connections a target serves, how
//! many of them may still be waiting for their Connect, and the counters
//! of what went wrong with hosts.
//!
//! - Every accepted connection takes a [`Slot`] under `max_connections`
//!   (a compare-and-swap, so that two listeners cannot overshoot), and
//!   gives it back when the slot is dropped: when the connection task
//!   ends, panics included.
//! - Until its Connect succeeds, a connection is also *pending*. Pending
//!   connections are capped separately (`max_pending_connections`); when
//!   a new one arrives at the cap, the oldest pending one is told to
//!   close. Sockets that never speak thus cannot lock hosts out: a host
//!   completes its handshake in milliseconds, an idle socket waits to be
//!   evicted or for its handshake deadline.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Counters of the target's connections and of hosts that misbehaved.
/// Monotonic except the `*_now` gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TargetStats {
    /// Connections open now.
    pub connections_now: u64,
    /// Connections open now that have not completed Connect.
    pub pending_now: u64,
    /// Connections accepted.
    pub connections_accepted: u64,
    /// Connections closed at accept because `max_connections` were open.
    pub connections_refused: u64,
    /// Pending connections closed to make room for newer ones.
    pub pending_evicted: u64,
    /// Connections closed for not completing ICReq and Connect in time.
    pub handshake_timeouts: u64,
    /// Connections closed because their TLS handshake failed or timed
    /// out (no or a wrong PSK, plain TCP on a TLS-only port).
    pub tls_failures: u64,
    /// Connections terminated because an R2T's data did not come in time.
    pub r2t_timeouts: u64,
    /// Connections closed because the host stopped reading.
    pub send_timeouts: u64,
    /// Controllers torn down by their keep-alive timer.
    pub keep_alive_expiries: u64,
    /// Commands still running when their connection ended that were
    /// abandoned after the drain deadline.
    pub commands_abandoned: u64,
    /// Panics caught in connection tasks or commands.
    pub panics: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) accepted: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) evicted: AtomicU64,
    pub(crate) handshake_timeouts: AtomicU64,
    pub(crate) tls_failures: AtomicU64,
    pub(crate) r2t_timeouts: AtomicU64,
    pub(crate) send_timeouts: AtomicU64,
    pub(crate) keep_alive_expiries: AtomicU64,
    pub(crate) commands_abandoned: AtomicU64,
    pub(crate) panics: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Admission state of a target.
#[derive(Debug)]
pub(crate) struct Admission {
    max_connections: usize,
    max_pending: usize,
    active: AtomicUsize,
    /// Pending connections, oldest first: (id, its eviction signal).
    pending: Mutex<VecDeque<(u64, Arc<Notify>)>>,
    next_id: AtomicU64,
    /// Woken when the last connection closes.
    pub(crate) idle: Notify,
    pub(crate) counters: Counters,
}

/// A connection's place in the target: released on drop.
#[derive(Debug)]
pub(crate) struct Slot {
    admission: Arc<Admission>,
    id: u64,
    /// Notified when this connection is evicted while pending.
    evict: Arc<Notify>,
    pending: bool,
}

impl Admission {
    pub(crate) fn new(max_connections: usize, max_pending: usize) -> Admission {
        Admission {
            max_connections,
            max_pending: max_pending.max(1),
            active: AtomicUsize::new(0),
            pending: Mutex::new(VecDeque::new()),
            next_id: AtomicU64::new(0),
            idle: Notify::new(),
            counters: Counters::default(),
        }
    }

    fn pending_list(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Arc<Notify>)>> {
        // Single push/remove updates: a panic cannot leave it half-done.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a new connection, pending until [`Slot::connected`]; `None`
    /// when `max_connections` are open. At the pending cap, the oldest
    /// pending connection is told to close.
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Slot> {
        let admitted = self
            .active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max_connections).then_some(n + 1))
            .is_ok();
        if !admitted {
            Counters::bump(&self.counters.refused);
            return None;
        }
        Counters::bump(&self.counters.accepted);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let evict = Arc::new(Notify::new());
        let victim = {
            let mut list = self.pending_list();
            list.push_back((id, evict.clone()));
            if list.len() > self.max_pending { list.pop_front() } else { None }
        };
        if let Some((_, victim)) = victim {
            Counters::bump(&self.counters.evicted);
            // notify_one stores a permit: the victim sees it even if it is
            // not waiting right now.
            victim.notify_one();
        }
        Some(Slot { admission: self.clone(), id, evict, pending: true })
    }

    /// Connections open now.
    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    pub(crate) fn stats(&self) -> TargetStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TargetStats {
            connections_now: self.active() as u64,
            pending_now: self.pending_list().len() as u64,
            connections_accepted: get(&c.accepted),
            connections_refused: get(&c.refused),
            pending_evicted: get(&c.evicted),
            handshake_timeouts: get(&c.handshake_timeouts),
            tls_failures: get(&c.tls_failures),
            r2t_timeouts: get(&c.r2t_timeouts),
            send_timeouts: get(&c.send_timeouts),
            keep_alive_expiries: get(&c.keep_alive_expiries),
            commands_abandoned: get(&c.commands_abandoned),
            panics: get(&c.panics),
        }
    }
}

impl Slot {
    /// The connection completed Connect: it is no longer pending (nor
    /// evictable).
    pub(crate) fn connected(&mut self) {
        if std::mem::take(&mut self.pending) {
            self.admission.pending_list().retain(|(id, _)| *id != self.id);
        }
    }

    /// Resolves when this connection was evicted to make room.
    pub(crate) async fn evicted(&self) {
        self.evict.notified().await
    }

    /// The target's counters.
    pub(crate) fn counters(&self) -> &Counters {
        &self.admission.counters
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.connected();
        if self.admission.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.admission.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_cap_holds_and_slots_come_back() {
        let a = Arc::new(Admission::new(2, 10));
        let s1 = a.admit().expect("first");
        let s2 = a.admit().expect("second");
        assert!(a.admit().is_none(), "cap reached");
        assert_eq!(a.stats().connections_refused, 1);
        drop(s1);
        let s3 = a.admit().expect("a slot came back");
        drop((s2, s3));
        assert_eq!(a.active(), 0);
        assert_eq!(a.stats().pending_now, 0);
    }

    #[test]
    fn concurrent_admissions_never_overshoot() {
        let a = Arc::new(Admission::new(64, 1000));
        let slots: Vec<Slot> = std::thread::scope(|s| {
            let handles: Vec<_> =
                (0..8).map(|_| s.spawn(|| (0..100).filter_map(|_| a.admit()).collect::<Vec<_>>())).collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(slots.len(), 64);
        assert_eq!(a.active(), 64);
    }

    #[tokio::test]
    async fn the_oldest_pending_connection_is_evicted_at_the_cap() {
        let a = Arc::new(Admission::new(100, 2));
        let oldest = a.admit().unwrap();
        let mut connected = a.admit().unwrap();
        connected.connected();
        let _second = a.admit().unwrap();
        let _third = a.admit().unwrap();
        // Pending: oldest, second, third > 2: the oldest is told to go.
        tokio::time::timeout(std::time::Duration::from_secs(5), oldest.evicted()).await.expect("evicted");
        assert_eq!(a.stats().pending_evicted, 1);
        assert_eq!(a.stats().pending_now, 2);
    }
}
