//! Aligned, owned I/O buffers.
//!
//! Drives are opened with `O_DIRECT`, which needs buffers aligned to the
//! logical block size of the device underneath; [`IO_ALIGN`] (4096) covers
//! every device we accept. An [`IoBuf`] is handed by value to an I/O and comes
//! back with its result, so that io_uring can own the memory while the
//! kernel writes into it.
//!
//! Invariants: `ptr` is a live allocation of `cap` bytes aligned to
//! [`IO_ALIGN`] (or dangling when `cap == 0`), and bytes `0..len` are
//! initialised (the allocation is zeroed on creation).

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

/// Alignment of every [`IoBuf`], in bytes.
pub const IO_ALIGN: usize = 4096;

/// A heap buffer aligned to [`IO_ALIGN`], suitable for `O_DIRECT` I/O.
pub struct IoBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
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
            return IoBuf { ptr: NonNull::dangling(), len: 0, cap: 0 };
        }
        let layout = Self::layout(cap);
        // SAFETY: layout has a non-zero size (cap > 0 checked above).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        IoBuf { ptr, len, cap }
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> IoBuf {
        let mut buf = IoBuf::zeroed(data.len());
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
        if self.cap != 0 {
            // SAFETY: ptr came from alloc_zeroed with this exact layout.
            unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.cap)) }
        }
    }
}

impl std::ops::Deref for IoBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
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
    #[should_panic(expected = "beyond capacity")]
    fn set_len_beyond_capacity_panics() {
        IoBuf::zeroed(10).set_len(IO_ALIGN + 1);
    }
}
