//! The `mem:` drive: volatile RAM, allocated lazily in chunks so that a
//! large nominal size costs only what is written.
//!
//! Invariant: a chunk that is `None` reads as zeros. Whole-chunk zeroing
//! drops the chunk, so deallocated space is returned to the allocator.

use std::sync::RwLock;

/// Allocation granule of the mem drive.
const CHUNK: u64 = 64 * 1024;

/// A lazily allocated, volatile byte array.
pub(crate) struct MemDisk {
    chunks: Vec<RwLock<Option<Box<[u8]>>>>,
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
                *c = Some(vec![0u8; CHUNK as usize].into_boxed_slice());
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
        let m = MemDisk::new(8 << 30);
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
