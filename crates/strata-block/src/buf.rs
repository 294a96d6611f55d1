//! Aligned, owned I/O buffers.
//!
//! Drives are opened with `O_DIRECT`, which needs buffers aligned to the
//! logical block size of the device underneath; [`IO_ALIGN`] (4096) covers
//! every device we accept. An [`IoBuf`] is handed by value to an I/O and comes
//! back with its result, so that io_uring can own the memory while the
//! kernel writes into it.
//!
//! Buffers are recycled: a dropped buffer whose capacity is a power of two
//! between 4 KiB and 2 MiB goes to a small per-thread free list, and
//! [`IoBuf::recycled`] takes from it. That removes an allocation, a free and
//! the zeroing of the memory from every I/O (measured: malloc, free and
//! memset were 12 % of the target's CPU at 250K 4 KiB reads/s). A recycled
//! buffer holds whatever its previous user left in it, so it is only for
//! callers that overwrite all of it (a read's destination). Debug builds
//! fill every recycled buffer with [`POISON`] instead, so that a path that
//! fails to overwrite part of one sends the poison (which tests look for)
//! rather than, by chance, plausible bytes of another volume.
//!
//! A buffer may also lie in memory someone else owns
//! ([`IoBuf::from_external`]): a shared region that a reader maps, so
//! that an `O_DIRECT` read lands where the reader copies from instead of
//! in the heap first. Such a buffer keeps its owner alive and hands it
//! back when dropped; it is never pooled nor freed by this module.
//!
//! Invariants: `ptr` is a live allocation of `cap` bytes aligned to
//! [`IO_ALIGN`] (or dangling when `cap == 0`), and bytes `0..cap` are
//! initialised (zeroed when first allocated, later overwritten only with
//! initialised bytes); when `owner` is set the memory is the owner's,
//! valid and exclusive to this buffer until the owner is dropped, and
//! otherwise this module allocated it. Pooled pointers are allocations
//! of exactly their class size with [`IO_ALIGN`] alignment, owned by the
//! pool alone.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::cell::RefCell;
use std::ptr::NonNull;

/// Alignment of every [`IoBuf`], in bytes.
pub const IO_ALIGN: usize = 4096;

/// The 8-byte pattern debug builds fill recycled buffers with. No block
/// a host wrote or a zeroed block contains it by accident in a test.
pub const POISON: [u8; 8] = *b"\xdePOISON!";

/// A heap buffer aligned to [`IO_ALIGN`], suitable for `O_DIRECT` I/O.
pub struct IoBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
    /// The owner of external memory ([`IoBuf::from_external`]); `None`
    /// for memory this module allocated.
    owner: Option<Box<dyn Send + Sync>>,
}

// SAFETY: IoBuf owns its allocation exclusively, like a Vec<u8>; moving it
// to another thread moves that ownership.
unsafe impl Send for IoBuf {}
// SAFETY: shared references only give out `&[u8]`, which is Sync.
unsafe impl Sync for IoBuf {}

impl IoBuf {
    /// A zero-filled buffer of `len` bytes. The capacity is `len` rounded up
    /// to [`IO_ALIGN`].
    ///
    /// # Panics
    ///
    /// Panics if the allocation fails (as `Vec` does).
    pub fn zeroed(len: usize) -> IoBuf {
        let cap = len.div_ceil(IO_ALIGN) * IO_ALIGN;
        if cap == 0 {
            return IoBuf { ptr: NonNull::dangling(), len: 0, cap: 0, owner: None };
        }
        let layout = Self::layout(cap);
        // SAFETY: layout has a non-zero size (cap > 0 checked above).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        IoBuf { ptr, len, cap, owner: None }
    }

    /// A buffer of `len` bytes whose contents are unspecified (left by a
    /// previous user), taken from this thread's free list when one of the
    /// right size is there. For buffers the caller overwrites entirely.
    pub fn recycled(len: usize) -> IoBuf {
        let cap = len.div_ceil(IO_ALIGN) * IO_ALIGN;
        #[allow(unused_mut)]
        let mut buf = match pool::take(cap) {
            Some((ptr, cap)) => IoBuf { ptr, len, cap, owner: None },
            None => IoBuf::zeroed(pool::class_size(cap).unwrap_or(cap)).with_len(len),
        };
        #[cfg(debug_assertions)]
        for chunk in buf.as_mut_slice().chunks_mut(POISON.len()) {
            chunk.copy_from_slice(&POISON[..chunk.len()]);
        }
        buf
    }

    /// True when the bytes hold the [`POISON`] pattern at an 8-byte
    /// aligned offset: data that came from a recycled buffer nobody
    /// filled (debug builds).
    pub fn holds_poison(bytes: &[u8]) -> bool {
        bytes.chunks_exact(POISON.len()).any(|c| c == POISON)
    }

    /// A buffer of `len` bytes over `cap` bytes of memory at `ptr` that
    /// `owner` keeps alive: an I/O reads into (or writes from) that memory
    /// itself. `owner` is dropped when the buffer is, never before.
    ///
    /// # Safety
    ///
    /// `ptr` must be aligned to [`IO_ALIGN`], valid for reads and writes
    /// of `cap` initialised bytes for as long as `owner` lives, and used
    /// by no one else (no other reference, in this process, to those bytes)
    /// until `owner` is dropped; `cap` a multiple of [`IO_ALIGN`] and
    /// `len <= cap`.
    pub unsafe fn from_external(ptr: NonNull<u8>, len: usize, cap: usize, owner: Box<dyn Send + Sync>) -> IoBuf {
        debug_assert!((ptr.as_ptr() as usize).is_multiple_of(IO_ALIGN) && cap.is_multiple_of(IO_ALIGN) && len <= cap);
        IoBuf { ptr, len, cap, owner: Some(owner) }
    }

    /// True when the memory is an owner's ([`IoBuf::from_external`]).
    pub fn is_external(&self) -> bool {
        self.owner.is_some()
    }

    fn with_len(mut self, len: usize) -> IoBuf {
        self.len = len;
        self
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> IoBuf {
        let mut buf = IoBuf::recycled(data.len());
        buf.as_mut_slice().copy_from_slice(data);
        buf
    }

    fn layout(cap: usize) -> Layout {
        // cap is a non-zero multiple of IO_ALIGN, a power of two, so the
        // layout is valid unless cap overflows isize, which alloc would
        // refuse anyway.
        Layout::from_size_align(cap, IO_ALIGN).unwrap_or_else(|_| panic!("IoBuf too large: {cap}"))
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Allocated bytes (a multiple of [`IO_ALIGN`]).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Changes the length within the capacity. New bytes are zero if they
    /// were never written, or hold what was written there before.
    ///
    /// # Panics
    ///
    /// Panics if `len > capacity()`.
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.cap, "IoBuf::set_len({len}) beyond capacity {}", self.cap);
        self.len = len;
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap >= len initialised bytes (zeroed at
        // allocation), or dangling with len == 0, which is allowed.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Raw pointer for handing to the kernel (io_uring). It stays valid for
    /// `capacity()` bytes until the buffer is dropped; moving the `IoBuf`
    /// value does not move the heap allocation it points to.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        // External memory goes back with its owner (dropped after this).
        if self.owner.is_none() && self.cap != 0 && !pool::give(self.ptr, self.cap) {
            // SAFETY: ptr came from alloc_zeroed with this exact layout and
            // the pool did not take it.
            unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.cap)) }
        }
    }
}

/// The per-thread free lists behind [`IoBuf::recycled`].
mod pool {
    use super::*;

    /// Smallest pooled size (class 0).
    const MIN_SHIFT: u32 = 12;
    /// Number of classes: 4 KiB .. 2 MiB.
    const CLASSES: usize = 10;
    /// Most bytes kept per class and thread.
    const BYTES_PER_CLASS: usize = 4 << 20;

    struct Pool {
        lists: [Vec<NonNull<u8>>; CLASSES],
    }

    impl Drop for Pool {
        fn drop(&mut self) {
            for (class, list) in self.lists.iter_mut().enumerate() {
                let layout = IoBuf::layout(1 << (MIN_SHIFT as usize + class));
                for ptr in list.drain(..) {
                    // SAFETY: pooled pointers are allocations of exactly the
                    // class size with IO_ALIGN alignment, owned by the pool.
                    unsafe { dealloc(ptr.as_ptr(), layout) }
                }
            }
        }
    }

    thread_local! {
        static POOL: RefCell<Pool> = RefCell::new(Pool { lists: Default::default() });
    }

    fn class_of(cap: usize) -> Option<usize> {
        (cap.is_power_of_two() && cap >= 1 << MIN_SHIFT)
            .then(|| (cap.trailing_zeros() - MIN_SHIFT) as usize)
            .filter(|&c| c < CLASSES)
    }

    /// The pooled size a request of `cap` bytes is rounded up to, if any.
    pub(super) fn class_size(cap: usize) -> Option<usize> {
        let size = cap.max(1 << MIN_SHIFT).checked_next_power_of_two()?;
        class_of(size).map(|_| size)
    }

    /// A pooled buffer of at least `cap` bytes, with its capacity.
    pub(super) fn take(cap: usize) -> Option<(NonNull<u8>, usize)> {
        let size = class_size(cap)?;
        let class = class_of(size)?;
        POOL.try_with(|p| p.borrow_mut().lists[class].pop()).ok().flatten().map(|ptr| (ptr, size))
    }

    /// Keeps a dropped buffer for reuse; false when it is not poolable or
    /// the list is full (the caller frees it).
    pub(super) fn give(ptr: NonNull<u8>, cap: usize) -> bool {
        let Some(class) = class_of(cap) else { return false };
        POOL.try_with(|p| {
            let mut p = p.borrow_mut();
            let list = &mut p.lists[class];
            if list.len() * cap >= BYTES_PER_CLASS {
                return false;
            }
            list.push(ptr);
            true
        })
        .unwrap_or(false)
    }
}

impl std::ops::Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for IoBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::ops::DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoBuf").field("len", &self.len).field("cap", &self.cap).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        for len in [1, 512, 4096, 4097, 1 << 20] {
            let mut b = IoBuf::zeroed(len);
            assert_eq!(b.as_mut_ptr() as usize % IO_ALIGN, 0);
            assert_eq!(b.len(), len);
            assert!(b.capacity() >= len && b.capacity().is_multiple_of(IO_ALIGN));
            assert!(b.iter().all(|&x| x == 0));
        }
        assert!(IoBuf::zeroed(0).is_empty());
    }

    #[test]
    fn set_len_keeps_contents() {
        let mut b = IoBuf::from_slice(&[1, 2, 3]);
        b.set_len(2);
        assert_eq!(&b[..], &[1, 2]);
        b.set_len(3);
        assert_eq!(&b[..], &[1, 2, 3]);
    }

    #[test]
    fn recycled_buffers_are_reused_aligned_and_sized() {
        let mut a = IoBuf::recycled(4096);
        a.fill(0xab);
        let pa = a.as_mut_ptr();
        drop(a);
        let mut b = IoBuf::recycled(3000);
        assert_eq!(b.as_mut_ptr(), pa, "the freed buffer comes back");
        assert_eq!((b.len(), b.capacity()), (3000, 4096));
        if cfg!(debug_assertions) {
            assert!(IoBuf::holds_poison(&b) && !b.contains(&0xab), "debug builds poison recycled buffers");
        } else {
            assert!(b.iter().all(|&x| x == 0xab), "contents are what the last user left");
        }
        // Sizes between classes round up to the next power of two.
        let mut c = IoBuf::recycled(12 * 1024);
        assert_eq!(c.capacity(), 16 * 1024);
        assert_eq!(c.as_mut_ptr() as usize % IO_ALIGN, 0);
        // Beyond the largest class: a plain allocation.
        assert_eq!(IoBuf::recycled(3 << 20).capacity(), 3 << 20);
        assert!(IoBuf::recycled(0).is_empty());
        // zeroed() never hands out old contents.
        drop(b);
        assert!(IoBuf::zeroed(4096).iter().all(|&x| x == 0));
    }

    #[test]
    #[should_panic(expected = "beyond capacity")]
    fn set_len_beyond_capacity_panics() {
        IoBuf::zeroed(10).set_len(IO_ALIGN + 1);
    }

    #[test]
    fn an_external_buffer_is_the_owners_memory_and_goes_back_with_it() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};

        struct Owner {
            dropped: Arc<AtomicBool>,
        }
        impl Drop for Owner {
            fn drop(&mut self) {
                self.dropped.store(true, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicBool::new(false));
        // Memory no one frees (leaked for the test), so that no later
        // allocation can be at its address.
        let layout = IoBuf::layout(2 * IO_ALIGN);
        // SAFETY: a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).unwrap();
        let owner = Box::new(Owner { dropped: dropped.clone() });
        // SAFETY: the memory is aligned, 8 KiB, zeroed, never freed, and
        // touched by no one but `ext`.
        let mut ext = unsafe { IoBuf::from_external(ptr, 5000, 2 * IO_ALIGN, owner) };
        assert!(ext.is_external());
        assert_eq!((ext.len(), ext.capacity(), ext.as_mut_ptr()), (5000, 2 * IO_ALIGN, ptr.as_ptr()));
        ext.as_mut_slice()[4999] = 7;
        drop(ext);
        assert!(dropped.load(Ordering::SeqCst), "the owner is dropped with the buffer");
        // Not put on the free list: the next buffer of that class is not it.
        let mut next = IoBuf::recycled(2 * IO_ALIGN);
        assert_ne!(next.as_mut_ptr(), ptr.as_ptr());
    }
}
