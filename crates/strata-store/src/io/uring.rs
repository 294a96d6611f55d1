//! The io_uring engine: one thread per drive owns a ring and serves
//! requests that arrive over a channel.
//!
//! This is the crate's only module that hands memory to the kernel, and
//! with [`crate::sys`] the only one with `unsafe`. The invariant that makes
//! it sound: every buffer named by a submitted SQE is owned by an entry of
//! the thread's in-flight slab (or is the thread's own eventfd buffer)
//! until its CQE has been reaped, and the thread exits only when nothing
//! is in flight.
//!
//! Wake-up protocol: the thread keeps a read of an eventfd armed in the
//! ring. Before it blocks in `io_uring_enter` it sets `sleeping` and
//! re-checks the channel; a producer that sends and then finds `sleeping`
//! set clears it and writes the eventfd, which completes that read and
//! wakes the thread. So the thread never sleeps while work is queued, and a
//! busy thread costs producers no syscall. Requests are batched: all that
//! are queued are pushed before one `io_uring_enter`.
//!
//! A sync waits for every request taken before it to complete before its
//! fdatasync is submitted (requests behind it wait meanwhile, which costs
//! a bubble as long as the slowest write in flight, not the sync): so a
//! write whose caller stopped waiting can never land after a later sync,
//! nor after the zeroing of an extent that the sync made reusable.
//!
//! Short reads and writes are resubmitted for the remainder. Zeroing runs
//! synchronously on the thread (a hole punch or `BLKZEROOUT` is one quick
//! syscall); moving it into the ring is a possible optimisation.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use io_uring::{IoUring, opcode, squeue, types};
use strata_block::IoBuf;
use tokio::sync::oneshot;

use super::request::{Request, ZeroMethod, zero_range};

const RING_ENTRIES: u32 = 128;
/// In-flight I/O cap; with the eventfd read this stays below the SQ size,
/// so pushing an SQE after a submit never finds the queue full.
const MAX_INFLIGHT: usize = RING_ENTRIES as usize - 8;
/// `user_data` of the eventfd read.
const WAKE_TOKEN: u64 = u64::MAX;
/// Largest single read/write SQE; longer requests continue as short I/O.
const MAX_SQE_LEN: usize = 1 << 30;

/// The producer side of the wake-up protocol.
pub(crate) struct Notify {
    sleeping: AtomicBool,
    efd: File,
}

impl Notify {
    /// Wakes the thread if it is (about to be) asleep.
    pub(crate) fn wake(&self) {
        if self.sleeping.swap(false, Ordering::SeqCst) {
            self.wake_always();
        }
    }

    /// Writes the eventfd unconditionally.
    pub(crate) fn wake_always(&self) {
        // Any non-zero value wakes the reader; the byte order is irrelevant.
        let _ = (&self.efd).write(&1u64.to_le_bytes());
    }
}

enum Op {
    Rw { write: bool, off: u64, buf: IoBuf, pos: usize, done: oneshot::Sender<(IoBuf, io::Result<()>)> },
    Sync { done: oneshot::Sender<io::Result<()>> },
}

/// A ring not yet running.
pub(crate) struct Ring {
    ring: IoUring,
    notify: Arc<Notify>,
}

impl Ring {
    /// Sets up a ring; fails where io_uring is unavailable.
    pub(crate) fn new() -> io::Result<Ring> {
        let ring = IoUring::new(RING_ENTRIES)?;
        let efd = crate::sys::eventfd()?;
        Ok(Ring { ring, notify: Arc::new(Notify { sleeping: AtomicBool::new(false), efd }) })
    }

    pub(crate) fn notify(&self) -> Arc<Notify> {
        self.notify.clone()
    }

    /// Pushes one SQE, submitting first if the queue is full.
    ///
    /// # Safety
    ///
    /// Every buffer `e` points to must stay valid and unaliased by Rust
    /// code until the matching CQE is reaped.
    unsafe fn push(&mut self, e: &squeue::Entry) {
        loop {
            // SAFETY: forwarded from the caller's contract.
            if unsafe { self.ring.submission().push(e) }.is_ok() {
                return;
            }
            if let Err(err) = self.ring.submit() {
                tracing::error!(error = %err, "io_uring submit failed while the SQ was full");
            }
        }
    }

    fn rw_entry(fd: types::Fd, id: usize, op: &mut Op) -> Option<squeue::Entry> {
        let Op::Rw { write, off, buf, pos, .. } = op else { return None };
        let len = (buf.len() - *pos).min(MAX_SQE_LEN) as u32;
        let ptr = buf.as_mut_ptr().wrapping_add(*pos);
        let at = *off + *pos as u64;
        let e = if *write {
            opcode::Write::new(fd, ptr.cast_const(), len).offset(at).build()
        } else {
            opcode::Read::new(fd, ptr, len).offset(at).build()
        };
        Some(e.user_data(id as u64))
    }

    /// Serves requests until the channel is closed and nothing is in flight.
    pub(crate) fn run(mut self, file: Arc<File>, zero: ZeroMethod, rx: mpsc::Receiver<Request>) {
        let fd = types::Fd(file.as_raw_fd());
        let mut slab: Vec<Option<Op>> = Vec::new();
        let mut free_ids: Vec<usize> = Vec::new();
        let mut inflight = 0usize;
        let mut backlog: VecDeque<Request> = VecDeque::new();
        let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(RING_ENTRIES as usize);
        let mut efd_buf = Box::new([0u8; 8]);
        let mut efd_armed = false;
        let mut closed = false;
        loop {
            loop {
                match rx.try_recv() {
                    Ok(r) => backlog.push_back(r),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        if !closed {
                            closed = true;
                            // Completes our own armed eventfd read so we can exit.
                            self.notify.wake_always();
                        }
                        break;
                    }
                }
            }
            while inflight < MAX_INFLIGHT {
                // A sync is a barrier: it starts only once every request
                // taken before it has completed (see `Backend::sync`).
                if inflight > 0 && matches!(backlog.front(), Some(Request::Sync { .. })) {
                    break;
                }
                let Some(req) = backlog.pop_front() else { break };
                let op = match req {
                    Request::Zero { off, len, done } => {
                        let _ = done.send(zero_range(&file, zero, off, len));
                        continue;
                    }
                    Request::Read { off, buf, done } => Op::Rw { write: false, off, buf, pos: 0, done },
                    Request::Write { off, buf, done } => Op::Rw { write: true, off, buf, pos: 0, done },
                    Request::Sync { done } => Op::Sync { done },
                };
                let id = free_ids.pop().unwrap_or_else(|| {
                    slab.push(None);
                    slab.len() - 1
                });
                let slot = slab[id].insert(op);
                let entry = match Self::rw_entry(fd, id, slot) {
                    Some(e) => e,
                    None => opcode::Fsync::new(fd).flags(types::FsyncFlags::DATASYNC).build().user_data(id as u64),
                };
                // SAFETY: the buffer (if any) is owned by slab[id], whose
                // heap allocation does not move, and stays there until the
                // CQE with user_data == id is reaped below.
                unsafe { self.push(&entry) };
                inflight += 1;
            }
            if !efd_armed && !closed {
                let e = opcode::Read::new(types::Fd(self.notify.efd.as_raw_fd()), efd_buf.as_mut_ptr(), 8)
                    .build()
                    .user_data(WAKE_TOKEN);
                // SAFETY: efd_buf is a heap box owned by this function and
                // is not touched until the WAKE_TOKEN CQE is reaped; the
                // loop exits only once that read has completed.
                unsafe { self.push(&e) };
                efd_armed = true;
            }
            if closed && backlog.is_empty() && inflight == 0 && !efd_armed {
                break;
            }
            let res = if backlog.is_empty() && !closed {
                self.notify.sleeping.store(true, Ordering::SeqCst);
                match rx.try_recv() {
                    Ok(r) => {
                        backlog.push_back(r);
                        self.ring.submit()
                    }
                    Err(mpsc::TryRecvError::Empty) => self.ring.submit_and_wait(1),
                    Err(mpsc::TryRecvError::Disconnected) => self.ring.submit(),
                }
            } else if inflight > 0 || efd_armed {
                self.ring.submit_and_wait(1)
            } else {
                self.ring.submit()
            };
            self.notify.sleeping.store(false, Ordering::SeqCst);
            if let Err(e) = res
                && e.raw_os_error() != Some(libc::EINTR)
                && e.raw_os_error() != Some(libc::EBUSY)
            {
                tracing::error!(error = %e, "io_uring_enter failed");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            cqes.clear();
            cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            for &(ud, res) in &cqes {
                if ud == WAKE_TOKEN {
                    efd_armed = false;
                    continue;
                }
                let id = ud as usize;
                let Some(mut op) = slab.get_mut(id).and_then(Option::take) else {
                    tracing::error!(user_data = ud, "io_uring completion for an unknown request");
                    continue;
                };
                if let Op::Rw { pos, buf, .. } = &mut op
                    && res > 0
                {
                    *pos += res as usize;
                    if *pos < buf.len() {
                        let slot = slab[id].insert(op);
                        if let Some(e) = Self::rw_entry(fd, id, slot) {
                            // SAFETY: as above; the buffer stays in slab[id].
                            unsafe { self.push(&e) };
                        }
                        continue;
                    }
                }
                inflight -= 1;
                free_ids.push(id);
                let result = if res < 0 {
                    Err(io::Error::from_raw_os_error(-res))
                } else if res == 0 && matches!(op, Op::Rw { .. }) {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "zero-length transfer before the end of the request",
                    ))
                } else {
                    Ok(())
                };
                match op {
                    Op::Rw { buf, done, .. } => {
                        let _ = done.send((buf, result));
                    }
                    Op::Sync { done } => {
                        let _ = done.send(result);
                    }
                }
            }
        }
    }
}
