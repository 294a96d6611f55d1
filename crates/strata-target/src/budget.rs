//! The memory budget for command state and data, shared by every
//! connection of a target.
//!
//! What is charged, and when (see `docs/nvme-tcp.md`):
//! - an I/O queue prepays, at Connect, the state and in-capsule buffer of
//!   every command its queue can hold, as Linux nvmet and SPDK preallocate
//!   per queue (or the Connect is refused, to be retried). So reading a queue's socket never waits for budget: data a
//!   host sends for an R2T can never be stuck behind a capsule that waits
//!   for memory (that would make a well-behaved host miss its R2T
//!   deadline);
//! - an R2T buffer is charged when the R2T goes out, read data when the
//!   read starts, until it is on the wire; large admin answers while they
//!   are sent.
//!
//! An I/O command charges its data through a `DataBudget`: the target's
//! data budget seen through what each command slot of its queue prepaid.
//!
//! Waiters are served first come, first served: a command that waits is
//! not overtaken by later ones, so hosts that hoard
//! buffers can delay a well-behaved host by their deadlines, not starve it.
//! Everything charged is returned by a command finishing or by a deadline
//! (R2T, send, drain), so waiting cannot deadlock, and the target's
//! worst-case memory is this budget plus per-connection constants (see
//! `docs/operations.md`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// A byte budget shared by connections. Shared as `Arc<Budget>`.
///
/// Fast path: while nobody waits, taking and returning bytes is one
/// atomic operation each (no lock per I/O). Waiters queue in `line`;
/// `waiting` mirrors its length so that returns know, without the lock,
/// whether anyone must be served.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    used: AtomicUsize,
    waiting: AtomicUsize,
    line: Mutex<VecDeque<Waiter>>,
}

/// A request waiting in line: its size and where to send the grant.
#[derive(Debug)]
struct Waiter {
    bytes: usize,
    grant: oneshot::Sender<Permit>,
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
        Arc::new(Budget {
            limit: limit.max(1),
            used: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            line: Mutex::new(VecDeque::new()),
        })
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

    fn line(&self) -> std::sync::MutexGuard<'_, VecDeque<Waiter>> {
        // Single push/pop updates: a panic cannot leave it half-done.
        self.line.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `bytes` if they fit now. A request larger than the whole
    /// budget takes all of it (it could never be granted otherwise).
    fn take(self: &Arc<Self>, bytes: usize) -> Option<Permit> {
        let bytes = bytes.min(self.limit);
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            if self.limit - used < bytes {
                return None;
            }
            match self.used.compare_exchange_weak(used, used + bytes, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(Permit { budget: self.clone(), bytes }),
                Err(now) => used = now,
            }
        }
    }

    /// Takes `bytes` if they are available now and nobody waits for them.
    pub fn try_acquire(self: &Arc<Self>, bytes: usize) -> Option<Permit> {
        if self.waiting.load(Ordering::Acquire) > 0 {
            return None;
        }
        self.take(bytes)
    }

    /// Waits in line until `bytes` are available and takes them.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a grant sent to a dropped wait goes back), but a
    /// dropped wait loses its place in line: keep the future across
    /// `select!` rounds.
    pub async fn acquire(self: Arc<Self>, bytes: usize) -> Permit {
        if let Some(p) = self.try_acquire(bytes) {
            return p;
        }
        let (grant, granted) = oneshot::channel();
        {
            let mut line = self.line();
            line.push_back(Waiter { bytes, grant });
            self.waiting.store(line.len(), Ordering::Release);
            // Bytes may have come back before we were in line to be told.
            self.serve(&mut line);
        }
        match granted.await {
            Ok(p) => p,
            // Unreachable: the sender is only dropped after it sent; an
            // empty permit keeps the caller going.
            Err(_) => Permit { budget: self.clone(), bytes: 0 },
        }
    }

    /// Grants waiting requests in order while the first one fits.
    fn serve(self: &Arc<Self>, line: &mut VecDeque<Waiter>) {
        while let Some(w) = line.front() {
            if w.grant.is_closed() {
                line.pop_front();
                continue;
            }
            let Some(p) = self.take(w.bytes) else { break };
            if let Some(w) = line.pop_front() {
                // A wait dropped meanwhile hands the permit back (its drop
                // returns the bytes, and serves again).
                let _ = w.grant.send(p);
            }
        }
        self.waiting.store(line.len(), Ordering::Release);
    }

    fn release(self: &Arc<Self>, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        if self.waiting.load(Ordering::Acquire) > 0 {
            let mut line = self.line();
            self.serve(&mut line);
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

/// What an I/O command's data is charged to: the shared budget, for data
/// larger than what each command slot of a queue prepaid at Connect (its
/// in-capsule buffer; a 4 KiB read fits and costs the budget nothing).
#[derive(Debug, Clone)]
pub(crate) struct DataBudget {
    /// The target's budget.
    pub budget: Arc<Budget>,
    /// Bytes of data every command slot prepaid.
    pub prepaid: usize,
}

impl DataBudget {
    /// No limit (tests).
    #[cfg(test)]
    pub fn unlimited() -> DataBudget {
        DataBudget { budget: Budget::unlimited(), prepaid: 0 }
    }

    /// Charges `bytes` of command data: nothing when the prepaid slot
    /// holds them, else a permit from the budget, waiting in line.
    pub async fn charge(&self, bytes: usize) -> Option<Permit> {
        if bytes <= self.prepaid {
            return None;
        }
        Some(match self.budget.try_acquire(bytes) {
            Some(p) => p,
            None => self.budget.clone().acquire(bytes).await,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn permits_return_their_bytes() {
        let b = Budget::new(100);
        let mut p = b.try_acquire(60).expect("fits");
        assert!(b.try_acquire(50).is_none());
        let q = b.try_acquire(40).expect("fits exactly");
        assert_eq!(b.used(), 100);
        p.absorb(q);
        assert_eq!(p.bytes(), 100);
        drop(p);
        assert_eq!(b.used(), 0);
        // Larger than the whole budget: takes all of it.
        let big = b.try_acquire(500).expect("alone");
        assert_eq!(big.bytes(), 100);
        assert!(b.try_acquire(1).is_none());
    }

    #[tokio::test]
    async fn waiters_are_served_in_order() {
        let b = Budget::new(10);
        let p = b.try_acquire(10).unwrap();
        let first = tokio::spawn(b.clone().acquire(8));
        tokio::task::yield_now().await;
        let second = tokio::spawn(b.clone().acquire(2));
        tokio::task::yield_now().await;
        assert!(b.try_acquire(1).is_none());
        drop(p);
        let first = tokio::time::timeout(Duration::from_secs(5), first).await.unwrap().unwrap();
        let second = tokio::time::timeout(Duration::from_secs(5), second).await.unwrap().unwrap();
        assert_eq!((first.bytes(), second.bytes()), (8, 2));
        // A small request behind a large one waits its turn.
        drop(second);
        let large = tokio::spawn(b.clone().acquire(5));
        tokio::task::yield_now().await;
        assert!(b.try_acquire(1).is_none(), "a newcomer does not overtake the waiting request");
        drop(first);
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), large).await.unwrap().unwrap().bytes(), 5);
    }

    #[tokio::test]
    async fn a_dropped_wait_gives_up_its_place() {
        let b = Budget::new(10);
        let p = b.try_acquire(10).unwrap();
        let gone = tokio::spawn(b.clone().acquire(10));
        tokio::task::yield_now().await;
        let next = tokio::spawn(b.clone().acquire(4));
        tokio::task::yield_now().await;
        gone.abort();
        let _ = gone.await;
        drop(p);
        let next = tokio::time::timeout(Duration::from_secs(5), next).await.unwrap().unwrap();
        assert_eq!(next.bytes(), 4);
        drop(next);
        assert_eq!(b.used(), 0, "nothing is held by the dropped wait");
        assert!(b.try_acquire(10).is_some(), "the line is empty again");
    }
}
