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
//! # Promises
//!
//! An owner keeps serving while the metadata store is out of reach only if
//! every other in-sync replica has *promised* it, lately, not to let a newer
//! owner in before a deadline ([`EpochFence::promise`]): while a promise to
//! the fence's *holder* (the sender of the current epoch's commands) lives,
//! a higher epoch from any other sender is refused with
//! [`Refused::Promised`] (its sender waits and tries again) and a raise is
//! deferred; once a newer epoch waits, the holder's promise is no longer
//! renewed. So a new owner, which must reach an in-sync replica (its own
//! included) before it serves, starts serving only after the old owner's
//! promise there ran out, by which time the old owner, counting from when
//! it asked, has stopped. The holder's own higher epochs (its membership
//! changes) pass.
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
//! - While a promise to the holder lives, the epoch is raised only by the
//!   holder: higher epochs of other senders wait in `pending` until it ends.
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
use std::time::{Duration, Instant};

/// Who sends a command: a number that names the sending node (see
/// [`sender_id`]). Equal numbers are the same sender.
pub type Sender = u64;

/// The sender of commands that name none (tests, local callers that take
/// no part in promises): never a fence's holder.
pub const ANONYMOUS: Sender = 0;

/// The longest promise a fence makes, whatever it is asked.
pub const MAX_PROMISE: Duration = Duration::from_secs(30);

/// The [`Sender`] of the node whose host NQN is `nqn`: FNV-1a, never
/// [`ANONYMOUS`].
pub fn sender_id(nqn: &str) -> Sender {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in nqn.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.max(1)
}

/// A command's epoch was older than the fence's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale epoch {offered}: this replica is fenced at epoch {current}")]
pub struct Stale {
    /// The epoch the command carried.
    pub offered: u64,
    /// The fence's epoch.
    pub current: u64,
}

/// Why a fence did not admit a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The epoch is older than the fence's: the sender was deposed.
    #[error(transparent)]
    Stale(#[from] Stale),
    /// The epoch is newer, and the fence promised its current owner to let
    /// no newer one in for `left` more: the sender waits and tries again.
    #[error("epoch {offered} must wait {left:?}: the replica promised its current owner")]
    Promised {
        /// The epoch the command carried.
        offered: u64,
        /// How long the promise still holds.
        left: Duration,
    },
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
    /// The sender of the current epoch's commands, once known.
    holder: Option<Sender>,
    /// Until when a promise to `holder` holds.
    promised_until: Option<Instant>,
    /// A higher epoch (and its owner, when known) held off by the
    /// promise: applied when it ends, and no promise is renewed meanwhile.
    pending: Option<(u64, Option<Sender>)>,
}

impl State {
    /// Ends a promise that ran out by `now`, applying what it held off.
    fn settle(&mut self, now: Instant) {
        if self.promised_until.is_some_and(|u| u <= now) {
            self.promised_until = None;
            if let Some((epoch, owner)) = self.pending.take() {
                raise_locked(self, epoch);
                self.holder = owner;
            }
        }
    }

    /// How long the promise still holds, if it holds against `sender`.
    fn held_against(&self, sender: Sender, now: Instant) -> Option<Duration> {
        let until = self.promised_until?;
        (self.holder != Some(sender) && until > now).then(|| until - now)
    }

    /// Notes `epoch` of `owner` as waiting for the promise to end.
    fn defer(&mut self, epoch: u64, owner: Option<Sender>) {
        if self.pending.is_none_or(|(e, _)| e < epoch) {
            self.pending = Some((epoch, owner));
        }
    }
}

/// The clock a fence reads (tests drive their own).
type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// The epoch fence of one replica. Cheap to share (`Arc`).
pub struct EpochFence {
    state: Mutex<State>,
    clock: Option<Clock>,
}

impl std::fmt::Debug for EpochFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("EpochFence").field("epoch", &s.epoch).field("holder", &s.holder).finish_non_exhaustive()
    }
}

impl EpochFence {
    /// A fence at `epoch`.
    pub fn new(epoch: u64) -> Arc<EpochFence> {
        Arc::new(EpochFence { state: Mutex::new(State { epoch, ..State::default() }), clock: None })
    }

    /// A fence at `epoch` that reads time from `clock` (for tests).
    pub fn with_clock(epoch: u64, clock: impl Fn() -> Instant + Send + Sync + 'static) -> Arc<EpochFence> {
        Arc::new(EpochFence { state: Mutex::new(State { epoch, ..State::default() }), clock: Some(Arc::new(clock)) })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> Instant {
        self.clock.as_ref().map_or_else(Instant::now, |c| c())
    }

    /// The highest epoch seen.
    pub fn epoch(&self) -> u64 {
        let now = self.now();
        let mut s = self.lock();
        s.settle(now);
        s.epoch
    }

    /// Admits one command carrying `epoch` from `sender`: raises the fence
    /// if `epoch` is higher and waits until every command admitted under a
    /// lower epoch has finished. The command runs while the returned guard
    /// lives. The first sender of an epoch becomes the fence's holder.
    ///
    /// # Errors
    ///
    /// [`Refused::Stale`] when `epoch` is below the fence's (checked again
    /// after any wait: a higher epoch may arrive meanwhile);
    /// [`Refused::Promised`] when `epoch` is higher, `sender` is not the
    /// holder, and a promise to the holder still holds.
    pub fn admit(self: &Arc<Self>, epoch: u64, sender: Sender) -> Admit {
        Admit { fence: self.clone(), epoch, sender }
    }

    /// Raises the fence to `epoch` of owner `owner` (when known) without
    /// running a command (a replica learning the epoch from the metadata
    /// store). Lower epochs are ignored. Does not wait for older commands.
    /// While a promise to another holder holds, the raise waits for it to
    /// end.
    pub fn raise(&self, epoch: u64, owner: Option<Sender>) {
        let now = self.now();
        let mut s = self.lock();
        s.settle(now);
        if epoch <= s.epoch {
            return;
        }
        if s.promised_until.is_some_and(|u| u > now) && owner.is_none_or(|o| s.holder != Some(o)) {
            s.defer(epoch, owner);
            return;
        }
        raise_locked(&mut s, epoch);
        s.holder = owner;
    }

    /// How long the promise this fence keeps to its holder still holds
    /// against `sender` (`None` when none holds, or `sender` is the
    /// holder). A node that would take a volume over asks its own replica:
    /// a promise that is still being renewed means the last owner is alive
    /// and serving, though its lease may have ended (etcd froze).
    pub fn promise_left(&self, sender: Sender) -> Option<Duration> {
        let now = self.now();
        let mut s = self.lock();
        s.settle(now);
        s.held_against(sender, now)
    }

    /// Promises `holder`, which sends commands at `epoch`, that no newer
    /// owner is let in for `duration` (at most [`MAX_PROMISE`]), and makes
    /// it the fence's holder.
    ///
    /// # Errors
    ///
    /// [`Refused::Stale`] when `epoch` is below the fence's, or a newer
    /// epoch waits (the holder is being replaced: no renewal);
    /// [`Refused::Promised`] when a promise to another holder holds.
    ///
    /// A promise of zero from the holder ends its promise at once (an
    /// owner giving the volume up): whatever it held off applies.
    pub fn promise(&self, epoch: u64, holder: Sender, duration: Duration) -> Result<(), Refused> {
        let now = self.now();
        let mut s = self.lock();
        s.settle(now);
        if duration.is_zero() {
            if s.holder == Some(holder) && s.promised_until.is_some() {
                s.promised_until = Some(now);
                s.settle(now);
            }
            return Ok(());
        }
        if epoch < s.epoch {
            return Err(Stale { offered: epoch, current: s.epoch }.into());
        }
        if let Some((newer, _)) = s.pending {
            return Err(Stale { offered: epoch, current: newer }.into());
        }
        if let Some(left) = s.held_against(holder, now) {
            return Err(Refused::Promised { offered: epoch, left });
        }
        raise_locked(&mut s, epoch);
        s.holder = Some(holder);
        s.promised_until = Some(now + duration.min(MAX_PROMISE));
        Ok(())
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
    sender: Sender,
}

impl Future for Admit {
    type Output = Result<FenceGuard, Refused>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let now = this.fence.now();
        let mut s = this.fence.lock();
        s.settle(now);
        if this.epoch < s.epoch {
            return Poll::Ready(Err(Stale { offered: this.epoch, current: s.epoch }.into()));
        }
        if this.epoch > s.epoch {
            if let Some(left) = s.held_against(this.sender, now) {
                s.defer(this.epoch, Some(this.sender));
                return Poll::Ready(Err(Refused::Promised { offered: this.epoch, left }));
            }
            if s.holder != Some(this.sender) {
                // A new owner: the old one's promise is over.
                s.promised_until = None;
            }
            raise_locked(&mut s, this.epoch);
            s.holder = Some(this.sender);
        }
        if s.holder.is_none() {
            s.holder = Some(this.sender);
        }
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

    fn admit_now(f: &Arc<EpochFence>, e: u64) -> Result<FenceGuard, Refused> {
        match poll(&mut f.admit(e, ANONYMOUS)) {
            Poll::Ready(r) => r,
            Poll::Pending => panic!("admission at epoch {e} waited"),
        }
    }

    #[test]
    fn older_epochs_are_refused_and_newer_ones_raise_the_fence() {
        let f = EpochFence::new(5);
        assert_eq!(admit_now(&f, 4).unwrap_err(), Refused::Stale(Stale { offered: 4, current: 5 }));
        drop(admit_now(&f, 5).unwrap());
        drop(admit_now(&f, 7).unwrap());
        assert_eq!(f.epoch(), 7);
        assert!(admit_now(&f, 6).is_err());
        f.raise(3, None);
        assert_eq!(f.epoch(), 7, "epochs never go down");
        f.raise(9, None);
        assert!(admit_now(&f, 8).is_err());
    }

    #[test]
    fn a_new_epoch_waits_for_commands_admitted_under_the_old_one() {
        let f = EpochFence::new(1);
        let old_a = admit_now(&f, 1).unwrap();
        let old_b = admit_now(&f, 1).unwrap();
        let mut new = f.admit(2, ANONYMOUS);
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
        let mut waiting = f.admit(3, ANONYMOUS);
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
        let mut two = f.admit(2, ANONYMOUS);
        assert!(poll(&mut two).is_pending());
        f.raise(3, None);
        drop(old);
        assert!(matches!(poll(&mut two), Poll::Ready(Err(Refused::Stale(Stale { offered: 2, current: 3 })))));
    }

    /// A clock the test moves by hand.
    fn clock() -> (Arc<Mutex<Instant>>, impl Fn() -> Instant + Send + Sync + 'static) {
        let t = Arc::new(Mutex::new(Instant::now()));
        let read = t.clone();
        (t, move || *read.lock().unwrap())
    }

    const OLD: Sender = 11;
    const NEW: Sender = 22;

    #[test]
    fn a_promise_keeps_a_new_owner_out_until_it_ends_and_is_not_renewed_meanwhile() {
        let (t, c) = clock();
        let f = EpochFence::with_clock(3, c);
        f.promise(3, OLD, Duration::from_secs(2)).unwrap();
        // The new owner's fence flush waits, however it arrives.
        let waited = poll(&mut f.admit(4, NEW));
        assert!(matches!(waited, Poll::Ready(Err(Refused::Promised { offered: 4, .. }))), "{waited:?}");
        f.raise(5, Some(NEW));
        assert_eq!(f.epoch(), 3, "a raise waits for the promise too");
        // The old owner goes on meanwhile, but cannot renew.
        drop(match poll(&mut f.admit(3, OLD)) {
            Poll::Ready(r) => r.expect("the holder's command"),
            Poll::Pending => panic!("the holder waited"),
        });
        assert!(matches!(f.promise(3, OLD, Duration::from_secs(2)), Err(Refused::Stale(_))), "renewed");
        // Once it ends, the newer epoch applies: the old owner is stale.
        *t.lock().unwrap() += Duration::from_secs(2);
        assert_eq!(f.epoch(), 5);
        assert!(matches!(poll(&mut f.admit(3, OLD)), Poll::Ready(Err(Refused::Stale(_)))));
        drop(match poll(&mut f.admit(5, NEW)) {
            Poll::Ready(r) => r.expect("the new owner's command"),
            Poll::Pending => panic!("waited"),
        });
    }

    #[test]
    fn a_promise_left_is_told_to_others_until_it_ends() {
        let (t, c) = clock();
        let f = EpochFence::with_clock(3, c);
        assert_eq!(f.promise_left(NEW), None, "no promise yet");
        f.promise(3, OLD, Duration::from_secs(2)).unwrap();
        assert_eq!(f.promise_left(NEW), Some(Duration::from_secs(2)));
        assert_eq!(f.promise_left(OLD), None, "not against its own holder");
        *t.lock().unwrap() += Duration::from_millis(1500);
        assert_eq!(f.promise_left(NEW), Some(Duration::from_millis(500)));
        *t.lock().unwrap() += Duration::from_millis(500);
        assert_eq!(f.promise_left(NEW), None, "ended: the holder stopped renewing it");
    }

    #[test]
    fn a_holder_that_gives_up_ends_its_promise_at_once() {
        let (_t, c) = clock();
        let f = EpochFence::with_clock(3, c);
        f.promise(3, OLD, Duration::from_secs(60)).unwrap();
        assert!(matches!(poll(&mut f.admit(4, NEW)), Poll::Ready(Err(Refused::Promised { .. }))));
        f.promise(3, NEW, Duration::ZERO).unwrap();
        assert!(matches!(poll(&mut f.admit(4, NEW)), Poll::Ready(Err(Refused::Promised { .. }))), "not its promise");
        f.promise(3, OLD, Duration::ZERO).unwrap();
        assert_eq!(f.epoch(), 4, "what the promise held off applies");
        drop(match poll(&mut f.admit(4, NEW)) {
            Poll::Ready(r) => r.expect("the next owner comes in"),
            Poll::Pending => panic!("waited"),
        });
    }

    #[test]
    fn the_holder_raises_its_own_epoch_through_its_promise() {
        let (_t, c) = clock();
        let f = EpochFence::with_clock(3, c);
        f.promise(3, OLD, Duration::from_secs(5)).unwrap();
        // The owner took a failed node out: epoch 4 is its own.
        drop(match poll(&mut f.admit(4, OLD)) {
            Poll::Ready(r) => r.expect("the holder's new epoch"),
            Poll::Pending => panic!("waited"),
        });
        f.raise(5, Some(OLD));
        assert_eq!(f.epoch(), 5, "a raise to the holder's own epoch passes");
        f.promise(5, OLD, Duration::from_secs(5)).expect("renewed at its new epoch");
        // Without a promise, anyone's higher epoch passes at once.
        let g = EpochFence::new(1);
        drop(match poll(&mut g.admit(2, NEW)) {
            Poll::Ready(r) => r.expect("no promise to keep"),
            Poll::Pending => panic!("waited"),
        });
        assert!(g.promise(1, OLD, Duration::from_secs(1)).is_err(), "a promise at an old epoch");
    }
}
