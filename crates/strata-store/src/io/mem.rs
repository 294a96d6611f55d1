//! The `mem:` drive: volatile RAM, allocated lazily in chunks so that a
//! large nominal size costs only what is written, and able to lend its
//! bytes to a reader instead of copying them.
//!
//! Chunks are 2 MiB, aligned to 2 MiB and advised as transparent huge
//! pages, as SPDK's malloc bdev sits in huge pages: random 4 KiB copies out
//! of a 1 GiB drive took 640 ns each with 4 KiB pages and 494 ns with huge
//! pages on the development machine, and that copy is the largest cost of
//! a read served from RAM. Lending removes it from the read path: the
//! target hands the lent bytes straight to the kernel's socket copy.
//!
//! Each chunk is split into 64 KiB stripes, each with a reader/writer lock
//! whose read side can be held by a lease ([`strata_block::Lent`]):
//! - readers that copy hold a stripe's read side only while copying;
//! - a lease holds the read side of every stripe it covers until the
//!   holder drops it, so lent bytes cannot change or be reused under it;
//! - writers (data writes, zeroing, metadata) wait for the stripe's
//!   readers and leases to end, and while one waits, new readers wait too
//!   (no writer starvation) and nothing new is lent. Waiting is a
//!   yield to the runtime, never a blocked thread: a lease may be held by
//!   a task on the same thread, which must get to run to drop it.
//!
//! Invariants:
//! - a chunk whose `populated` flag is false reads as zeros, and its
//!   memory (if allocated) is zero;
//! - whole-chunk zeroing takes every stripe of the chunk and returns the
//!   memory to the kernel (`MADV_DONTNEED`, after which anonymous memory
//!   reads as zeros), so deallocated space costs no RAM.

use std::alloc::{Layout, alloc, dealloc};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use strata_block::{Lender, Lent};

/// Allocation granule of the mem drive.
const CHUNK: u64 = 2 * 1024 * 1024;
/// Lock granule inside a chunk.
const STRIPE: u64 = 64 * 1024;
const STRIPES: usize = (CHUNK / STRIPE) as usize;

/// A lazily allocated, volatile byte array.
pub(crate) struct MemDisk {
    slots: Vec<Arc<Slot>>,
}

/// One chunk: its memory (allocated on the first write of non-zero data
/// and kept until the disk is dropped) and its stripe locks.
struct Slot {
    chunk: OnceLock<Chunk>,
    /// False: the chunk reads as zeros (see the module invariants).
    populated: AtomicBool,
    stripes: [StripeLock; STRIPES],
}

/// One zero-initialised, 2 MiB-aligned chunk.
///
/// Invariant: `ptr` is a live allocation of `CHUNK` bytes with `CHUNK`
/// alignment, all initialised, owned by this value. Bytes are read and
/// written through raw pointers only under the covering stripe locks.
struct Chunk {
    ptr: NonNull<u8>,
}

// SAFETY: a Chunk owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for Chunk {}
// SAFETY: shared access to the bytes is serialised by the stripe locks
// (readers share a stripe, a writer has it alone).
unsafe impl Sync for Chunk {}

impl Chunk {
    fn layout() -> Layout {
        // CHUNK is a power of two far below isize::MAX.
        Layout::from_size_align(CHUNK as usize, CHUNK as usize).unwrap_or_else(|_| unreachable!())
    }

    fn new() -> Chunk {
        let layout = Self::layout();
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        // Ask for huge pages before the first touch, so the zeroing below
        // faults them in as such. Advice only: failure changes nothing.
        // SAFETY: ptr..ptr+CHUNK is a live allocation we own; madvise
        // neither reads nor writes it.
        let _ = unsafe { libc::madvise(ptr.as_ptr().cast(), CHUNK as usize, libc::MADV_HUGEPAGE) };
        // SAFETY: ptr is valid for CHUNK bytes of writes.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, CHUNK as usize) };
        Chunk { ptr }
    }

    /// Bytes `off..off+len` for reading.
    ///
    /// # Safety
    ///
    /// The caller holds the read side of every stripe the range touches,
    /// for as long as the slice lives; `off + len <= CHUNK`.
    unsafe fn bytes(&self, off: usize, len: usize) -> &[u8] {
        // SAFETY: in bounds per the caller; no writer can hold those
        // stripes, so nothing mutates the bytes while the slice lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// Bytes `off..off+len` for writing.
    ///
    /// # Safety
    ///
    /// The caller holds the write side of every stripe the range touches,
    /// for as long as the slice lives; `off + len <= CHUNK`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self, off: usize, len: usize) -> &mut [u8] {
        // SAFETY: in bounds per the caller; the write locks exclude every
        // other slice over these bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) }
    }

    /// Gives the memory back to the kernel; it reads as zeros afterwards.
    ///
    /// # Safety
    ///
    /// The caller holds the write side of every stripe of the chunk.
    unsafe fn discard(&self) {
        // SAFETY: our own private anonymous memory; MADV_DONTNEED makes it
        // read as zeros, which keeps the "all initialised" invariant. If
        // the advice fails, zero it by hand.
        let r = unsafe { libc::madvise(self.ptr.as_ptr().cast(), CHUNK as usize, libc::MADV_DONTNEED) };
        if r != 0 {
            // SAFETY: exclusive per the caller; in bounds.
            unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, CHUNK as usize) };
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: allocated in Chunk::new with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout()) }
    }
}

/// A stripe's reader/writer lock: `WRITER`, `WAITING` (a writer waits for
/// the readers to leave; new readers stay out) and a reader count.
struct StripeLock(AtomicU32);

const WRITER: u32 = 1 << 31;
const WAITING: u32 = 1 << 30;
const READERS: u32 = WAITING - 1;

impl StripeLock {
    fn try_read(&self) -> bool {
        let mut s = self.0.load(Ordering::Relaxed);
        loop {
            if s & (WRITER | WAITING) != 0 || s & READERS == READERS {
                return false;
            }
            match self.0.compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    fn read_unlock(&self) {
        self.0.fetch_sub(1, Ordering::Release);
    }

    /// Takes the write side if nobody holds the stripe; otherwise marks a
    /// writer as waiting, which keeps new readers out.
    fn try_write(&self) -> bool {
        let s = self.0.load(Ordering::Relaxed);
        if s & (WRITER | READERS) == 0
            && self.0.compare_exchange(s, WRITER, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            return true;
        }
        self.0.fetch_or(WAITING, Ordering::Relaxed);
        false
    }

    fn write_unlock(&self) {
        // Readers cannot enter while WRITER is set, so the count is zero;
        // other waiting writers set WAITING again on their next attempt.
        self.0.store(0, Ordering::Release);
    }
}

/// The write side of a stripe, released on drop.
struct WriteGuard<'a>(&'a StripeLock);

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.0.write_unlock();
    }
}

/// Takes the write side of `lock`, waiting with `wait`. Cancel safe: a
/// writer dropped while waiting withdraws its `WAITING` mark (any other
/// waiting writer sets it again on its next attempt).
async fn write_lock<'a>(lock: &'a StripeLock, wait: &impl Wait) -> WriteGuard<'a> {
    struct Withdraw<'a>(&'a StripeLock);
    impl Drop for Withdraw<'_> {
        fn drop(&mut self) {
            self.0.0.fetch_and(!WAITING, Ordering::Relaxed);
        }
    }
    if lock.try_write() {
        return WriteGuard(lock);
    }
    let withdraw = Withdraw(lock);
    loop {
        wait.pause().await;
        if lock.try_write() {
            // Taking the lock cleared WAITING; nothing to withdraw.
            std::mem::forget(withdraw);
            return WriteGuard(lock);
        }
    }
}

/// Lease tags are bitmasks of the stripes a lease holds.
const _: () = assert!(STRIPES <= 64);

// SAFETY: `MemDisk::lend` creates a lease only while holding the read side
// of every stripe in its tag, and `release` gives up exactly those; while
// they are held no writer can modify or discard the bytes, and the chunk
// memory lives as long as the Slot, which the lease's Arc keeps alive.
unsafe impl Lender for Slot {
    fn release(&self, tag: u64) {
        for (i, s) in self.stripes.iter().enumerate() {
            if tag & (1 << i) != 0 {
                s.read_unlock();
            }
        }
    }
}

/// How a caller waits for a stripe: by yielding to the runtime, or (open
/// time, when no lease can exist) by yielding the thread.
trait Wait {
    async fn pause(&self);
}

struct Yield;
impl Wait for Yield {
    async fn pause(&self) {
        tokio::task::yield_now().await;
    }
}

struct Spin;
impl Wait for Spin {
    async fn pause(&self) {
        std::thread::yield_now();
    }
}

/// Runs a future that only ever waits by spinning ([`Spin`]) to the end.
fn run_spinning<T>(fut: impl std::future::Future<Output = T>) -> T {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// One stripe-sized piece of a request.
struct Piece {
    slot: usize,
    stripe: usize,
    /// Offset within the chunk.
    off: usize,
    /// Offset within the caller's buffer.
    buf_off: usize,
    len: usize,
}

impl MemDisk {
    /// A zero-filled disk of `size` bytes; allocates only the chunk table.
    pub(crate) fn new(size: u64) -> MemDisk {
        let n = size.div_ceil(CHUNK) as usize;
        let slots = (0..n)
            .map(|_| {
                Arc::new(Slot {
                    chunk: OnceLock::new(),
                    populated: AtomicBool::new(false),
                    stripes: std::array::from_fn(|_| StripeLock(AtomicU32::new(0))),
                })
            })
            .collect();
        MemDisk { slots }
    }

    /// The stripe pieces of `off..off+len`. Callers stay below `size` (the
    /// drive layer checks ranges against the superblock); pieces past the
    /// end are dropped.
    fn pieces(&self, off: u64, len: usize) -> impl Iterator<Item = Piece> + '_ {
        let mut done = 0usize;
        std::iter::from_fn(move || {
            if done >= len {
                return None;
            }
            let pos = off + done as u64;
            let slot = (pos / CHUNK) as usize;
            if slot >= self.slots.len() {
                return None;
            }
            let co = (pos % CHUNK) as usize;
            let n = (STRIPE as usize - co % STRIPE as usize).min(len - done);
            let p = Piece { slot, stripe: co / STRIPE as usize, off: co, buf_off: done, len: n };
            done += n;
            Some(p)
        })
    }

    /// Lends `off..off+len` if it lies in one populated chunk and no
    /// writer holds or waits for its stripes; `None` means "copy instead".
    pub(crate) fn lend(&self, off: u64, len: usize) -> Option<Lent> {
        let slot_i = (off / CHUNK) as usize;
        let co = (off % CHUNK) as usize;
        let slot = self.slots.get(slot_i)?;
        if len == 0 || co + len > CHUNK as usize || !slot.populated.load(Ordering::Acquire) {
            return None;
        }
        let (first, last) = (co / STRIPE as usize, (co + len - 1) / STRIPE as usize);
        let mut tag = 0u64;
        for i in first..=last {
            if !slot.stripes[i].try_read() {
                slot.release(tag);
                return None;
            }
            tag |= 1 << i;
        }
        // Re-check under the locks: whole-chunk zeroing clears the flag
        // while holding every stripe.
        let chunk = match (slot.populated.load(Ordering::Acquire), slot.chunk.get()) {
            (true, Some(c)) => c,
            _ => {
                slot.release(tag);
                return None;
            }
        };
        // SAFETY: co + len <= CHUNK, so the pointer stays in the chunk.
        let ptr = unsafe { NonNull::new_unchecked(chunk.ptr.as_ptr().add(co)) };
        // SAFETY: we hold the read side of every stripe covering the
        // range (recorded in `tag`), which the Lender impl relies on.
        Some(unsafe { Lent::new(ptr, len, tag, slot.clone()) })
    }

    async fn read_with(&self, off: u64, buf: &mut [u8], wait: impl Wait) {
        for p in self.pieces(off, buf.len()) {
            let slot = &self.slots[p.slot];
            let lock = &slot.stripes[p.stripe];
            while !lock.try_read() {
                wait.pause().await;
            }
            let dst = &mut buf[p.buf_off..p.buf_off + p.len];
            match (slot.populated.load(Ordering::Acquire), slot.chunk.get()) {
                // SAFETY: we hold the stripe's read side; in bounds.
                (true, Some(c)) => dst.copy_from_slice(unsafe { c.bytes(p.off, p.len) }),
                _ => dst.fill(0),
            }
            lock.read_unlock();
        }
    }

    async fn write_with(&self, off: u64, buf: &[u8], wait: impl Wait) {
        for p in self.pieces(off, buf.len()) {
            let slot = &self.slots[p.slot];
            let _g = write_lock(&slot.stripes[p.stripe], &wait).await;
            let src = &buf[p.buf_off..p.buf_off + p.len];
            let populated = slot.populated.load(Ordering::Acquire);
            if populated || src.iter().any(|&b| b != 0) {
                let chunk = slot.chunk.get_or_init(Chunk::new);
                // SAFETY: we hold the stripe's write side; in bounds.
                unsafe { chunk.bytes_mut(p.off, p.len) }.copy_from_slice(src);
                if !populated {
                    slot.populated.store(true, Ordering::Release);
                }
            }
        }
    }

    async fn zero_with(&self, off: u64, len: u64, wait: impl Wait) {
        let mut pos = off;
        let end = off.saturating_add(len);
        while pos < end {
            let slot_i = (pos / CHUNK) as usize;
            let Some(slot) = self.slots.get(slot_i) else { return };
            let co = pos % CHUNK;
            let n = (CHUNK - co).min(end - pos);
            if n == CHUNK {
                // Whole chunk: take every stripe, in order, and give the
                // memory back.
                let mut held = Vec::with_capacity(STRIPES);
                for lock in &slot.stripes {
                    held.push(write_lock(lock, &wait).await);
                }
                if slot.populated.swap(false, Ordering::AcqRel)
                    && let Some(c) = slot.chunk.get()
                {
                    // SAFETY: we hold the write side of every stripe.
                    unsafe { c.discard() };
                }
            } else {
                for p in self.pieces(pos, n as usize) {
                    let _g = write_lock(&slot.stripes[p.stripe], &wait).await;
                    if slot.populated.load(Ordering::Acquire)
                        && let Some(c) = slot.chunk.get()
                    {
                        // SAFETY: we hold the stripe's write side; in bounds.
                        unsafe { c.bytes_mut(p.off, p.len) }.fill(0);
                    }
                }
            }
            pos += n;
        }
    }

    /// Copies `off..off+buf.len()` into `buf`, waiting out writers.
    pub(crate) async fn read(&self, off: u64, buf: &mut [u8]) {
        self.read_with(off, buf, Yield).await
    }

    /// Writes `buf` at `off`, waiting for readers and leases to end.
    pub(crate) async fn write(&self, off: u64, buf: &[u8]) {
        self.write_with(off, buf, Yield).await
    }

    /// Makes `off..off+len` read as zeros; whole chunks give their memory
    /// back.
    pub(crate) async fn zero(&self, off: u64, len: u64) {
        self.zero_with(off, len, Yield).await
    }

    /// [`MemDisk::read`] for open time, outside any runtime's I/O.
    pub(crate) fn read_sync(&self, off: u64, buf: &mut [u8]) {
        run_spinning(self.read_with(off, buf, Spin))
    }

    /// [`MemDisk::write`] for open time. Spins if a writer or lease is in
    /// the way, which at open time (no volume serving yet) never lasts.
    pub(crate) fn write_sync(&self, off: u64, buf: &[u8]) {
        run_spinning(self.write_with(off, buf, Spin))
    }

    /// [`MemDisk::zero`] for open time (spins, as `write_sync` does).
    pub(crate) fn zero_sync(&self, off: u64, len: u64) {
        run_spinning(self.zero_with(off, len, Spin))
    }

    /// Bytes of RAM holding data.
    #[cfg(test)]
    pub(crate) fn resident_bytes(&self) -> u64 {
        self.slots.iter().filter(|s| s.populated.load(Ordering::Acquire)).count() as u64 * CHUNK
    }
}

#[cfg(test)]
mod tests {
    use std::task::Poll;

    use super::*;

    fn now<T>(f: impl std::future::Future<Output = T>) -> T {
        run_spinning(f)
    }

    /// Polls `f` once; `Some` if it finished.
    fn poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.poll(&mut cx) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        }
    }

    #[test]
    fn mem_disk_is_lazy_and_reads_back() {
        let m = MemDisk::new(64 << 30);
        assert_eq!(m.resident_bytes(), 0);
        now(m.write(CHUNK - 3, &[1, 2, 3, 4, 5, 6]));
        assert_eq!(m.resident_bytes(), 2 * CHUNK);
        let mut b = [9u8; 8];
        now(m.read(CHUNK - 4, &mut b));
        assert_eq!(b, [0, 1, 2, 3, 4, 5, 6, 0]);
        now(m.write(5 * CHUNK, &[0; 100]));
        assert_eq!(m.resident_bytes(), 2 * CHUNK, "zeros into an empty chunk allocate nothing");
        now(m.zero(0, CHUNK));
        assert_eq!(m.resident_bytes(), CHUNK);
        now(m.zero(CHUNK, 2));
        now(m.read(CHUNK - 4, &mut b));
        assert_eq!(b, [0, 0, 0, 0, 0, 0, 6, 0]);
        // A discarded chunk reads as zeros when written again in part.
        now(m.write(100, &[7]));
        let mut c = [9u8; 4];
        now(m.read(0, &mut c));
        assert_eq!(c, [0, 0, 0, 0]);
        m.read_sync(100, &mut c[..1]);
        assert_eq!(c[0], 7);
    }

    #[test]
    fn lent_bytes_do_not_change_until_the_lease_ends() {
        let m = MemDisk::new(4 * CHUNK);
        assert!(m.lend(0, 4096).is_none(), "never-written memory is not lent");
        m.write_sync(STRIPE - 4096, &[1u8; 8192]);
        let lent = m.lend(STRIPE - 4096, 8192).expect("populated, unlocked: lent");
        assert_eq!(&lent[..], &[1u8; 8192][..]);
        assert!(m.lend(3 * CHUNK - 10, 20).is_none(), "no lease across chunks");

        // A write into the lent range waits; one elsewhere does not.
        now(m.write(CHUNK / 2, &[5u8; 16]));
        let mut w = std::pin::pin!(m.write(STRIPE, &[2u8; 4096]));
        assert!(poll_once(w.as_mut()).is_none(), "the write waits for the lease");
        assert_eq!(&lent[4096..], &[1u8; 4096][..], "lent bytes unchanged");
        assert!(m.lend(STRIPE, 4096).is_none(), "no new lease while a writer waits");
        let mut whole = std::pin::pin!(m.zero(0, CHUNK));
        assert!(poll_once(whole.as_mut()).is_none(), "whole-chunk zeroing waits too");
        drop(lent);
        assert!(poll_once(w.as_mut()).is_some(), "the write proceeds once the lease ends");
        assert!(poll_once(whole.as_mut()).is_some());
        let mut b = [9u8; 4];
        now(m.read(STRIPE, &mut b));
        assert_eq!(b, [0; 4], "zeroed after the write");
    }

    #[test]
    fn leases_end_on_drop_so_writers_never_starve() {
        let m = MemDisk::new(CHUNK);
        m.write_sync(0, &[3u8; 4096]);
        let a = m.lend(0, 4096).expect("lent");
        let b = m.lend(0, 4096).expect("readers share a stripe");
        drop(a);
        let mut w = std::pin::pin!(m.write(0, &[4u8; 4096]));
        assert!(poll_once(w.as_mut()).is_none());
        drop(b);
        assert!(poll_once(w.as_mut()).is_some());
        // A writer given up while waiting does not keep readers out.
        let c = m.lend(0, 4096).expect("lent");
        {
            let mut w2 = std::pin::pin!(m.write(0, &[6u8; 4096]));
            assert!(poll_once(w2.as_mut()).is_none());
            assert!(m.lend(0, 4096).is_none());
        }
        assert!(m.lend(0, 4096).is_some(), "the dropped writer withdrew");
        drop(c);
        let l = m.lend(0, 4096).expect("lent again after the write");
        assert_eq!(&l[..8], &[4u8; 8]);
    }
}
