//! The `mem:` drive: volatile RAM, allocated lazily in chunks so that a
//! large nominal size costs only what is written.
//!
//! Invariant: a chunk that is `None` reads as zeros. Whole-chunk zeroing
//! drops the chunk, so deallocated space is returned to the allocator.
//!
//! Chunks are 2 MiB, aligned to 2 MiB and advised as transparent huge
//! pages, as SPDK's malloc bdev sits in huge pages: random 4 KiB copies out
//! of a 1 GiB drive took 640 ns each with 4 KiB pages and 494 ns with huge
//! pages on the development machine, and that copy is the largest cost of
//! a read served from RAM.

use std::alloc::{Layout, alloc, dealloc};
use std::ptr::NonNull;
use std::sync::RwLock;

/// Allocation granule of the mem drive.
const CHUNK: u64 = 2 * 1024 * 1024;

/// A lazily allocated, volatile byte array.
pub(crate) struct MemDisk {
    chunks: Vec<RwLock<Option<Chunk>>>,
}

/// One zero-initialised, 2 MiB-aligned chunk.
///
/// Invariant: `ptr` is a live allocation of `CHUNK` bytes with `CHUNK`
/// alignment, all initialised, owned by this value.
struct Chunk {
    ptr: NonNull<u8>,
}

// SAFETY: a Chunk owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for Chunk {}
// SAFETY: shared access only reads through `&[u8]`.
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
}

impl std::ops::Deref for Chunk {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: per the invariant, CHUNK initialised bytes we own.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), CHUNK as usize) }
    }
}

impl std::ops::DerefMut for Chunk {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref; &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), CHUNK as usize) }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: allocated in Chunk::new with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout()) }
    }
}

impl MemDisk {
    /// A zero-filled disk of `size` bytes; allocates only the chunk table.
    pub(crate) fn new(size: u64) -> MemDisk {
        let n = size.div_ceil(CHUNK) as usize;
        MemDisk { chunks: (0..n).map(|_| RwLock::new(None)).collect() }
    }

    /// Calls `f(chunk index, offset in chunk, offset in buffer, length)`
    /// for each chunk piece of `off..off+len`. Callers stay below `size`
    /// (the drive layer checks ranges against the superblock).
    fn pieces(&self, off: u64, len: usize, mut f: impl FnMut(usize, usize, usize, usize)) {
        let mut done = 0usize;
        while done < len {
            let pos = off + done as u64;
            let ci = (pos / CHUNK) as usize;
            let co = (pos % CHUNK) as usize;
            let n = (CHUNK as usize - co).min(len - done);
            if ci >= self.chunks.len() {
                return;
            }
            f(ci, co, done, n);
            done += n;
        }
    }

    pub(crate) fn read(&self, off: u64, buf: &mut [u8]) {
        self.pieces(off, buf.len(), |ci, co, bo, n| {
            let c = self.chunks[ci].read().unwrap_or_else(|e| e.into_inner());
            match c.as_deref() {
                Some(data) => buf[bo..bo + n].copy_from_slice(&data[co..co + n]),
                None => buf[bo..bo + n].fill(0),
            }
        });
    }

    pub(crate) fn write(&self, off: u64, buf: &[u8]) {
        self.pieces(off, buf.len(), |ci, co, bo, n| {
            let src = &buf[bo..bo + n];
            let mut c = self.chunks[ci].write().unwrap_or_else(|e| e.into_inner());
            if c.is_none() {
                if src.iter().all(|&b| b == 0) {
                    return;
                }
                *c = Some(Chunk::new());
            }
            if let Some(data) = c.as_deref_mut() {
                data[co..co + n].copy_from_slice(src);
            }
        });
    }

    pub(crate) fn zero(&self, off: u64, len: u64) {
        self.pieces(off, len as usize, |ci, co, _, n| {
            let mut c = self.chunks[ci].write().unwrap_or_else(|e| e.into_inner());
            if n == CHUNK as usize {
                *c = None;
            } else if let Some(data) = c.as_deref_mut() {
                data[co..co + n].fill(0);
            }
        });
    }

    /// Bytes of RAM holding data.
    #[cfg(test)]
    pub(crate) fn resident_bytes(&self) -> u64 {
        self.chunks.iter().filter(|c| c.read().map(|c| c.is_some()).unwrap_or(false)).count() as u64 * CHUNK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_disk_is_lazy_and_reads_back() {
        let m = MemDisk::new(64 << 30);
        assert_eq!(m.resident_bytes(), 0);
        m.write(CHUNK - 3, &[1, 2, 3, 4, 5, 6]);
        assert_eq!(m.resident_bytes(), 2 * CHUNK);
        let mut b = [9u8; 8];
        m.read(CHUNK - 4, &mut b);
        assert_eq!(b, [0, 1, 2, 3, 4, 5, 6, 0]);
        m.write(5 * CHUNK, &[0; 100]);
        assert_eq!(m.resident_bytes(), 2 * CHUNK, "zeros into an empty chunk allocate nothing");
        m.zero(0, CHUNK);
        assert_eq!(m.resident_bytes(), CHUNK);
        m.zero(CHUNK, 2);
        m.read(CHUNK - 4, &mut b);
        assert_eq!(b, [0, 0, 0, 0, 0, 0, 6, 0]);
    }
}
