//! Epoch fencing: a replica refuses I/O from an owner that lost its volume.
//!
//! In a cluster one node owns a volume at a time and sends its I/O to every
//! replica. Each ownership or membership change bumps the volume's *epoch*
//! in the metadata store, and every I/O carries the epoch its sender
//! believes current. An [`EpochFence`] stands in front of one replica: it
//! admits a command whose epoch is at least the highest it has seen, raises
//! itself when a command brings a higher one, and refuses older ones with
//! [`Stale`]. An old owner that wakes up after a takeover therefore cannot
//! change a replica the new owner has reached.
//!
//! # Invariants
//!
//! - The fence's epoch never decreases.
//! - Once [`EpochFence::admit`] with epoch `e` has returned, no command
//!   admitted under an epoch below `e` is still running: raising the fence
//!   waits for the commands admitted before it to finish (their
//!   [`FenceGuard`]s to drop). A new owner that fences a replica therefore
//!   knows the old owner's in-flight writes have landed or failed before it
//!   reads the replica to repair it.
//!
//! # Cancellation
//!
//! Dropping an `admit` future is safe at any point. If it had raised the
//! fence, the fence stays raised (raising is idempotent and epochs only go
//! up); it holds no slot while waiting, so nothing leaks.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// A command's epoch was older than the fence's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale epoch {offered}: this replica is fenced at epoch {current}")]
pub struct Stale {
    /// The epoch the command carried.
    pub offered: u64,
    /// The fence's epoch.
    pub current: u64,
}

#[derive(Debug, Default)]
struct State {
    epoch: u64,
    /// Commands running under the current epoch.
    current: usize,
    /// Commands admitted under an epoch the fence has since left behind.
    older: usize,
    /// Admissions waiting for `older` to reach zero.
    waiters: Vec<Waker>,
}

/// The epoch fence of one replica. Cheap to share (`Arc`).
#[derive(Debug, Default)]
pub struct EpochFence {
    state: Mutex<State>,
}

impl EpochFence {
    /// A fence at `epoch`.
    pub fn new(epoch: u64) -> Arc<EpochFence> {
        Arc::new(EpochFence { state: Mutex::new(State { epoch, ..State::default() }) })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The highest epoch seen.
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Admits one command carrying `epoch`: raises the fence if `epoch` is
    /// higher and waits until every command admitted under a lower epoch
    /// has finished. The command runs while the returned guard lives.
    ///
    /// # Errors
    ///
    /// [`Stale`] when `epoch` is below the fence's (checked again after any
    /// wait: a higher epoch may arrive meanwhile).
    pub fn admit(self: &Arc<Self>, epoch: u64) -> Admit {
        Admit { fence: self.clone(), epoch }
    }

    /// Raises the fence to `epoch` without running a command (a replica
    /// learning the epoch from the metadata store). Lower epochs are
    /// ignored. Does not wait for older commands.
    pub fn raise(&self, epoch: u64) {
        let mut s = self.lock();
        raise_locked(&mut s, epoch);
    }
}

fn raise_locked(s: &mut State, epoch: u64) {
    if epoch > s.epoch {
        s.epoch = epoch;
        s.older += s.current;
        s.current = 0;
    }
}

/// The future of [`EpochFence::admit`].
#[derive(Debug)]
#[must_use = "a fence admits nothing until awaited"]
pub struct Admit {
    fence: Arc<EpochFence>,
    epoch: u64,
}

impl Future for Admit {
    type Output = Result<FenceGuard, Stale>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut s = this.fence.lock();
        if this.epoch < s.epoch {
            return Poll::Ready(Err(Stale { offered: this.epoch, current: s.epoch }));
        }
        raise_locked(&mut s, this.epoch);
        if s.older > 0 {
            if !s.waiters.iter().any(|w| w.will_wake(cx.waker())) {
                s.waiters.push(cx.waker().clone());
            }
            return Poll::Pending;
        }
        s.current += 1;
        drop(s);
        Poll::Ready(Ok(FenceGuard { fence: this.fence.clone(), epoch: this.epoch }))
    }
}

/// An admitted command; dropping it ends the command.
#[derive(Debug)]
pub struct FenceGuard {
    fence: Arc<EpochFence>,
    epoch: u64,
}

impl FenceGuard {
    /// The epoch the command was admitted under.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

impl Drop for FenceGuard {
    fn drop(&mut self) {
        let mut s = self.fence.lock();
        if self.epoch == s.epoch {
            s.current -= 1;
            return;
        }
        s.older -= 1;
        if s.older == 0 {
            let waiters = std::mem::take(&mut s.waiters);
            drop(s);
            waiters.into_iter().for_each(Waker::wake);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn poll<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
    }

    fn admit_now(f: &Arc<EpochFence>, e: u64) -> Result<FenceGuard, Stale> {
        match poll(&mut f.admit(e)) {
            Poll::Ready(r) => r,
            Poll::Pending => panic!("admission at epoch {e} waited"),
        }
    }

    #[test]
    fn older_epochs_are_refused_and_newer_ones_raise_the_fence() {
        let f = EpochFence::new(5);
        assert_eq!(admit_now(&f, 4).unwrap_err(), Stale { offered: 4, current: 5 });
        drop(admit_now(&f, 5).unwrap());
        drop(admit_now(&f, 7).unwrap());
        assert_eq!(f.epoch(), 7);
        assert!(admit_now(&f, 6).is_err());
        f.raise(3);
        assert_eq!(f.epoch(), 7, "epochs never go down");
        f.raise(9);
        assert!(admit_now(&f, 8).is_err());
    }

    #[test]
    fn a_new_epoch_waits_for_commands_admitted_under_the_old_one() {
        let f = EpochFence::new(1);
        let old_a = admit_now(&f, 1).unwrap();
        let old_b = admit_now(&f, 1).unwrap();
        let mut new = f.admit(2);
        assert!(poll(&mut new).is_pending(), "the old owner's writes are still running");
        // The fence is already up: the old owner can start nothing new.
        assert!(admit_now(&f, 1).is_err());
        drop(old_a);
        assert!(poll(&mut new).is_pending());
        drop(old_b);
        let g = match poll(&mut new) {
            Poll::Ready(r) => r.unwrap(),
            Poll::Pending => panic!("still waiting after the old commands ended"),
        };
        assert_eq!(g.epoch(), 2);
        // Commands of the current epoch do not hold up each other.
        drop(admit_now(&f, 2).unwrap());
    }

    #[test]
    fn a_dropped_admission_leaves_no_slot_behind() {
        let f = EpochFence::new(1);
        let old = admit_now(&f, 1).unwrap();
        let mut waiting = f.admit(3);
        assert!(poll(&mut waiting).is_pending());
        drop(waiting);
        drop(old);
        // Nothing is counted: a later epoch is admitted at once.
        drop(admit_now(&f, 4).unwrap());
        let s = f.lock();
        assert_eq!((s.current, s.older), (0, 0));
    }

    #[test]
    fn a_higher_epoch_overtaking_a_waiter_makes_it_stale() {
        let f = EpochFence::new(1);
        let old = admit_now(&f, 1).unwrap();
        let mut two = f.admit(2);
        assert!(poll(&mut two).is_pending());
        f.raise(3);
        drop(old);
        assert!(matches!(poll(&mut two), Poll::Ready(Err(Stale { offered: 2, current: 3 }))));
    }
}
