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
//! Waiters are served first come, first served (a tokio semaphore): a
//! command that waits is not overtaken by later ones, so hosts that hoard
//! buffers can delay a well-behaved host by their deadlines, not starve it.
//! Everything charged is returned by a command finishing or by a deadline
//! (R2T, send, drain), so waiting cannot deadlock, and the target's
//! worst-case memory is this budget plus per-connection constants (see
//! `docs/operations.md`).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A byte budget shared by connections. Shared as `Arc<Budget>`.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    bytes: Arc<Semaphore>,
}

/// Bytes held from a [`Budget`]; returned on drop.
#[derive(Debug)]
pub struct Permit(OwnedSemaphorePermit);

impl Budget {
    /// A budget of `limit` bytes (at most [`Semaphore::MAX_PERMITS`]).
    pub fn new(limit: usize) -> Arc<Budget> {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Budget { limit, bytes: Arc::new(Semaphore::new(limit)) })
    }

    /// A budget that never runs out (tests, fuzzing).
    pub fn unlimited() -> Arc<Budget> {
        Budget::new(Semaphore::MAX_PERMITS)
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.limit - self.bytes.available_permits()
    }

    /// A request's size in semaphore permits: a request larger than the
    /// whole budget takes all of it (it could never be granted otherwise).
    fn permits(&self, bytes: usize) -> u32 {
        u32::try_from(bytes.min(self.limit)).unwrap_or(u32::MAX)
    }

    /// Takes `bytes` if they are available now and nobody waits for them.
    pub fn try_acquire(&self, bytes: usize) -> Option<Permit> {
        self.bytes.clone().try_acquire_many_owned(self.permits(bytes)).ok().map(Permit)
    }

    /// Waits in line until `bytes` are available and takes them.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, but a dropped wait loses its place in line: keep the
    /// future across `select!` rounds.
    pub async fn acquire(self: Arc<Self>, bytes: usize) -> Permit {
        let n = self.permits(bytes);
        // The semaphore is never closed, so acquiring cannot fail; if it
        // somehow were, an empty permit keeps the caller going.
        match self.bytes.clone().acquire_many_owned(n).await {
            Ok(p) => Permit(p),
            Err(_) => Permit(Arc::new(Semaphore::new(0)).try_acquire_many_owned(0).expect("zero permits")),
        }
    }
}

impl Permit {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.0.num_permits()
    }

    /// Takes over the bytes of `other` (of the same budget): both are
    /// returned when `self` drops.
    pub fn absorb(&mut self, other: Permit) {
        self.0.merge(other.0);
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
}
