//! The memory budget for command data buffers, shared by every connection
//! of a target.
//!
//! Host-to-controller data (in-capsule data, R2T buffers), read data until
//! it is on the wire, and admin-command data are charged to one
//! [`Budget`] for as long as they are held. When it is spent, new work
//! waits instead of allocating: a connection stops reading its socket
//! (TCP pushes back on the host), R2Ts are not sent, reads do not start.
//! Everything charged is released by a deadline (R2T, send, drain) or by
//! the command finishing, so waiting cannot deadlock: the worst-case
//! memory of the target is this budget plus per-connection constants
//! (see `docs/operations.md`).
//!
//! A [`Permit`] returns its bytes when dropped. Releasing wakes waiters
//! only when some are registered, so the fast path is two atomic
//! operations per buffer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// A byte budget shared by connections. Shared as `Arc<Budget>`.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    used: AtomicUsize,
    /// Tasks waiting in [`Budget::acquire`] or [`Budget::wait_for`].
    waiters: AtomicUsize,
    released: Notify,
}

/// Bytes held from a [`Budget`]; returned on drop.
#[derive(Debug)]
pub struct Permit {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<Budget> {
        Arc::new(Budget { limit, used: AtomicUsize::new(0), waiters: AtomicUsize::new(0), released: Notify::new() })
    }

    /// A budget that never runs out (tests, fuzzing).
    pub fn unlimited() -> Arc<Budget> {
        Budget::new(usize::MAX)
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// Takes `bytes` if they are available now. A request larger than the
    /// whole budget is granted when nothing else is held, so that it
    /// cannot wait forever.
    pub fn try_acquire(self: &Arc<Self>, bytes: usize) -> Option<Permit> {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let fits = used.checked_add(bytes).is_some_and(|n| n <= self.limit) || used == 0;
            if !fits {
                return None;
            }
            match self.used.compare_exchange_weak(used, used.saturating_add(bytes), Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Some(Permit { budget: self.clone(), bytes }),
                Err(now) => used = now,
            }
        }
    }

    /// Waits until `bytes` are available and takes them.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is taken until it returns.
    pub async fn acquire(self: &Arc<Self>, bytes: usize) -> Permit {
        loop {
            if let Some(p) = self.try_acquire(bytes) {
                return p;
            }
            self.wait_for(bytes).await;
        }
    }

    /// Waits until `bytes` may be available (some were released since the
    /// call, or they fit now). A hint: the caller tries again and may
    /// find them taken by someone else.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_for(&self, bytes: usize) {
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let released = self.released.notified();
        let mut released = std::pin::pin!(released);
        released.as_mut().enable();
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.waiters);
        let used = self.used.load(Ordering::Acquire);
        if used.checked_add(bytes).is_some_and(|n| n <= self.limit) || used == 0 {
            return;
        }
        released.await;
    }

    fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.released.notify_waiters();
        }
    }
}

impl Permit {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes over the bytes of `other` (of the same budget): both are
    /// returned when `self` drops.
    pub fn absorb(&mut self, mut other: Permit) {
        debug_assert!(Arc::ptr_eq(&self.budget, &other.budget), "permits of two budgets");
        self.bytes += std::mem::take(&mut other.bytes);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.release(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_return_their_bytes() {
        let b = Budget::new(100);
        let p = b.try_acquire(60).expect("fits");
        assert!(b.try_acquire(50).is_none());
        let q = b.try_acquire(40).expect("fits exactly");
        assert_eq!(b.used(), 100);
        drop(p);
        assert_eq!(b.used(), 40);
        drop(q);
        assert_eq!(b.used(), 0);
        // Larger than the whole budget: granted only when nothing is held.
        let big = b.try_acquire(500).expect("alone");
        assert!(b.try_acquire(1).is_none());
        drop(big);
    }

    #[tokio::test]
    async fn waiters_wake_when_bytes_come_back() {
        let b = Budget::new(10);
        let p = b.try_acquire(10).unwrap();
        let b2 = b.clone();
        let waiter = tokio::spawn(async move { b2.acquire(5).await.bytes() });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(p);
        assert_eq!(tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.unwrap().unwrap(), 5);
        assert_eq!(b.used(), 0);
        assert_eq!(b.waiters.load(Ordering::Acquire), 0, "a finished wait deregisters");
    }

    #[tokio::test]
    async fn a_dropped_wait_deregisters() {
        let b = Budget::new(1);
        let _p = b.try_acquire(1).unwrap();
        let wait = b.wait_for(1);
        assert!(tokio::time::timeout(std::time::Duration::from_millis(10), wait).await.is_err());
        assert_eq!(b.waiters.load(Ordering::Acquire), 0);
    }
}
