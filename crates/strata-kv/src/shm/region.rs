//! Shared memory: a memfd mapped into this process, which a client maps
//! too from a file descriptor handed over the socket; and, over the one
//! that holds DRAM blocks, an allocator of page-aligned extents whose
//! [`Slot`]s become the store's [`Bytes`].
//!
//! Invariants:
//! - the allocator hands out disjoint extents of the region: a [`Slot`]
//!   is the only writer of its extent until it becomes [`Bytes`], after
//!   which no one writes it, and its extent returns to the free set only
//!   when the last [`Bytes`] of it is dropped (a lease is such a clone);
//! - the free set is the region minus the extents handed out, each free
//!   extent in both of its maps, adjacent free extents merged.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use std::ptr::NonNull;
use strata_block::IoBuf;

/// Extents are multiples of this, at offsets that are: pages, so that a
/// client's copy starts aligned and a later O_DIRECT read can land in
/// place.
pub const ALIGN: u64 = 4096;

/// A huge page (2 MiB): a region on huge pages is a multiple of it.
pub const HUGE_PAGE: u64 = 2 << 20;

/// A memfd mapped read-write into this process.
#[derive(Debug)]
pub struct Mapping {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is process memory that lives as long as the value;
// who writes which bytes is ruled by its users (the region's allocator,
// a client's staging area), not by which thread holds the handle.
unsafe impl Send for Mapping {}
// SAFETY: as for Send: `&Mapping` gives only raw pointers and copies.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A new memfd of `len` bytes (a multiple of [`ALIGN`], at least
    /// one), mapped shared and read-write. Its pages are made as they are
    /// first written (a large region costs nothing until used).
    ///
    /// # Errors
    ///
    /// The memfd, its size or the mapping failed (out of memory, a
    /// memory limit).
    pub fn new(name: &str, len: u64) -> io::Result<Mapping> {
        Self::with_flags(name, len, 0)
    }

    /// A new memfd of `len` bytes (a positive multiple of
    /// [`HUGE_PAGE`]) on 2 MiB huge pages (hugetlbfs), mapped shared and
    /// read-write: the pages are reserved when it is mapped, so the
    /// kernel's pool of huge pages (`vm.nr_hugepages`) must hold them.
    ///
    /// # Errors
    ///
    /// As [`Mapping::new`], and `ENOMEM` (said plainly) when too few
    /// huge pages are free.
    pub fn huge(name: &str, len: u64) -> io::Result<Mapping> {
        if len == 0 || !len.is_multiple_of(HUGE_PAGE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{len} bytes is not a positive multiple of {HUGE_PAGE} (a 2 MiB huge page)"),
            ));
        }
        Self::with_flags(name, len, libc::MFD_HUGETLB | libc::MFD_HUGE_2MB).map_err(|e| {
            if matches!(e.raw_os_error(), Some(libc::ENOMEM) | Some(libc::EINVAL)) {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot map {len} bytes of 2 MiB huge pages ({e}): reserve them first, for example \
                         sysctl vm.nr_hugepages={} (see /proc/meminfo, HugePages_Free)",
                        len / HUGE_PAGE
                    ),
                )
            } else {
                e
            }
        })
    }

    fn with_flags(name: &str, len: u64, extra: libc::c_uint) -> io::Result<Mapping> {
        if len == 0 || !len.is_multiple_of(ALIGN) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{len} bytes is not a positive multiple of {ALIGN}"),
            ));
        }
        let size = usize::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too large"))?;
        let cname = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the name"))?;
        // SAFETY: a valid C string and flags; the result is checked.
        let raw = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | extra) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor this function owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let off = libc::off_t::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too large"))?;
        // SAFETY: a valid descriptor; the result is checked.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), off) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new shared mapping of the whole memfd; the result is
        // checked, and it is unmapped in Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { fd, base: base.cast(), len: size })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty mapping (never: [`Mapping::new`] refuses one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd, read-write.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// A new descriptor of the memfd open read-only: a client that maps
    /// it can read the region and never write it.
    ///
    /// # Errors
    ///
    /// Opening `/proc/self/fd/N` failed (no `/proc`).
    pub fn read_only_fd(&self) -> io::Result<OwnedFd> {
        let path = CString::new(format!("/proc/self/fd/{}", self.fd.as_raw_fd())).map_err(io::Error::other)?;
        // SAFETY: a valid C string; the result is checked.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor this function owns.
        Ok(unsafe { OwnedFd::from_raw_fd(raw) })
    }

    /// Copies `len` bytes at `offset` out, or `None` outside the mapping.
    /// Another process may write them meanwhile (a client's staging
    /// area): then the copy holds some of each, which is that client's
    /// own affair.
    pub fn copy_out(&self, offset: u64, len: usize, to: &mut [u8]) -> Option<()> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len)?;
        if end > self.len || to.len() < len {
            return None;
        }
        // SAFETY: `start..end` lies inside the mapping (checked above),
        // `to` holds `len` bytes, and the two do not overlap (`to` is
        // this process's own memory, never the mapping: callers copy
        // into a Slot of another mapping or a Vec).
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(start), to.as_mut_ptr(), len) };
        Some(())
    }

    /// The offset of `b` in the mapping, when it lies wholly inside it.
    pub fn offset_of(&self, b: &[u8]) -> Option<u64> {
        let (p, base) = (b.as_ptr() as usize, self.base as usize);
        (p >= base && p + b.len() <= base + self.len).then(|| (p - base) as u64)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping this value made, unmapped once; no slice of
        // it outlives the value (slots hold an Arc of their region).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Free extents, by offset and by size.
#[derive(Debug, Default)]
struct Free {
    by_offset: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    used: u64,
}

impl Free {
    fn insert(&mut self, off: u64, len: u64) {
        self.by_offset.insert(off, len);
        self.by_size.insert((len, off));
    }
    fn remove(&mut self, off: u64, len: u64) {
        self.by_offset.remove(&off);
        self.by_size.remove(&(len, off));
    }
    /// The smallest free extent of at least `len`, cut to `len`.
    fn take(&mut self, len: u64) -> Option<u64> {
        let &(have, off) = self.by_size.range((len, 0)..).next()?;
        self.remove(off, have);
        if have > len {
            self.insert(off + len, have - len);
        }
        self.used += len;
        Some(off)
    }
    /// Gives `off..off + len` back, merged with its free neighbours.
    fn give(&mut self, mut off: u64, mut len: u64) {
        self.used -= len;
        if let Some((&p, &plen)) = self.by_offset.range(..off).next_back()
            && p + plen == off
        {
            self.remove(p, plen);
            off = p;
            len += plen;
        }
        if let Some(&nlen) = self.by_offset.get(&(off + len)) {
            self.remove(off + len, nlen);
            len += nlen;
        }
        self.insert(off, len);
    }
}

/// The region DRAM blocks live in, shared with the fast path's clients,
/// and its allocator.
#[derive(Debug)]
pub struct Region {
    map: Mapping,
    free: Mutex<Free>,
}

impl Region {
    /// A region of `len` bytes (rounded up to [`ALIGN`]).
    ///
    /// # Errors
    ///
    /// As [`Mapping::new`].
    pub fn new(len: u64) -> io::Result<Arc<Region>> {
        Self::make(len, false)
    }

    /// A region of `len` bytes (rounded up to [`HUGE_PAGE`]) on 2 MiB
    /// huge pages: a client's copies out of it walk 512 times fewer page
    /// table entries, and its pages are reserved up front instead of
    /// faulted in as first used.
    ///
    /// # Errors
    ///
    /// As [`Mapping::huge`].
    pub fn new_huge(len: u64) -> io::Result<Arc<Region>> {
        Self::make(len, true)
    }

    fn make(len: u64, huge: bool) -> io::Result<Arc<Region>> {
        let unit = if huge { HUGE_PAGE } else { ALIGN };
        let len = len.max(unit).div_ceil(unit) * unit;
        let map = if huge { Mapping::huge("strata-kv-region", len)? } else { Mapping::new("strata-kv-region", len)? };
        let mut free = Free::default();
        free.insert(0, len);
        Ok(Arc::new(Region { map, free: Mutex::new(free) }))
    }

    /// The mapping.
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    /// Bytes handed out (whole extents).
    pub fn used(&self) -> u64 {
        self.lock().used
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Free> {
        // Every critical section leaves Free consistent before anything
        // that can panic.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An extent for `len` bytes, or `None` when no free extent is large
    /// enough.
    pub fn alloc(self: &Arc<Region>, len: usize) -> Option<Slot> {
        let rounded = (len as u64).max(1).div_ceil(ALIGN) * ALIGN;
        let offset = self.lock().take(rounded)?;
        Some(Slot { region: self.clone(), offset, len, extent: rounded })
    }

    /// An extent of `len` bytes as an I/O buffer, so that an `O_DIRECT`
    /// read lands in the region itself; the extent is given back when the
    /// buffer (or the last [`Bytes`] made of it) is dropped. `None` when
    /// the region has no room.
    pub fn alloc_io(self: &Arc<Region>, len: usize) -> Option<IoBuf> {
        let slot = self.alloc(len)?;
        // SAFETY: the extent's start, in a page-aligned mapping at a
        // multiple of ALIGN, is not null.
        let ptr = NonNull::new(unsafe { self.map.base.add(slot.offset as usize) })?;
        let cap = usize::try_from(slot.extent).ok()?;
        // SAFETY: the extent lies inside the mapping (the allocator's
        // invariant), starts at a multiple of ALIGN (= IO_ALIGN) from a
        // page-aligned base, and is `cap` bytes of initialised (memfd)
        // memory; the slot, the buffer's owner, is its only user until it
        // is dropped (not Clone; the extent is free again only after its
        // Drop), and clients map the region read-only.
        Some(unsafe { IoBuf::from_external(ptr, len, cap, Box::new(slot)) })
    }

    /// `b` as a new [`Bytes`] in the region (a copy), or `None` when it
    /// has no room.
    pub fn copy_in(self: &Arc<Region>, b: &[u8]) -> Option<Bytes> {
        let mut slot = self.alloc(b.len())?;
        slot.bytes_mut().copy_from_slice(b);
        Some(slot.into_bytes())
    }
}

/// An extent of a [`Region`], owned: written through
/// [`bytes_mut`](Slot::bytes_mut), then shared as [`Bytes`]; given back
/// when dropped.
#[derive(Debug)]
pub struct Slot {
    region: Arc<Region>,
    offset: u64,
    len: usize,
    extent: u64,
}

impl Slot {
    /// Offset in the region.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The slot's bytes, to fill.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the extent lies inside the mapping (the allocator's
        // invariant) and this slot is its only user (not Clone; the
        // extent is free again only after Drop), so no other reference
        // to these bytes exists in this process; clients map the region
        // read-only.
        unsafe { std::slice::from_raw_parts_mut(self.region.map.base.add(self.offset as usize), self.len) }
    }

    /// The slot as shared, immutable bytes; the extent is given back when
    /// the last of them is dropped.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for Slot {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: as in `bytes_mut`; a shared view while no `&mut` exists
        // (`bytes_mut` borrows the slot mutably).
        unsafe { std::slice::from_raw_parts(self.region.map.base.add(self.offset as usize), self.len) }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.region.lock().give(self.offset, self.extent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Free 2 MiB huge pages (`HugePages_Free` of /proc/meminfo).
    fn huge_pages_free() -> u64 {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| m.lines().find_map(|l| l.strip_prefix("HugePages_Free:").and_then(|v| v.trim().parse().ok())))
            .unwrap_or(0)
    }

    #[test]
    fn a_region_on_huge_pages_works_when_they_are_reserved_and_is_refused_plainly_when_not() {
        let free = huge_pages_free();
        // More than the pool holds: refused, saying how to reserve them.
        let Err(e) = Region::new_huge((free + 1) * HUGE_PAGE) else {
            panic!("more huge pages than are free were mapped")
        };
        assert!(e.to_string().contains("vm.nr_hugepages"), "{e}");
        if free == 0 {
            // CI reserves some (.ci/run); a machine without them checks
            // the refusal only.
            eprintln!("no free huge pages: the huge-page region itself is not exercised here");
            return;
        }
        let r = Region::new_huge(1).unwrap();
        assert_eq!(r.mapping().len() as u64, HUGE_PAGE, "rounded up to one huge page");
        let b = r.copy_in(b"on a huge page").unwrap();
        assert_eq!(&b[..], b"on a huge page");
        let mut io = r.alloc_io(8192).unwrap();
        io.as_mut_slice().fill(3);
        drop(io);
        drop(b);
        assert_eq!(r.used(), 0);
    }

    #[test]
    fn extents_are_disjoint_aligned_and_come_back_merged() {
        let r = Region::new(16 * ALIGN).unwrap();
        let a = r.alloc(1).unwrap();
        let b = r.alloc(ALIGN as usize + 1).unwrap();
        let c = r.alloc(3 * ALIGN as usize).unwrap();
        assert_eq!((a.offset(), b.offset(), c.offset()), (0, ALIGN, 3 * ALIGN));
        assert_eq!(r.used(), 6 * ALIGN);
        assert!(r.alloc(11 * ALIGN as usize).is_none(), "10 pages are left");
        drop(b);
        // Best fit: the two-page hole, not the tail.
        let d = r.alloc(2 * ALIGN as usize).unwrap();
        assert_eq!(d.offset(), ALIGN);
        drop((a, c, d));
        assert_eq!(r.used(), 0);
        assert_eq!(r.alloc(16 * ALIGN as usize).unwrap().offset(), 0, "one free extent again");
    }

    #[test]
    fn bytes_of_a_slot_hold_it_until_the_last_clone_goes() {
        let r = Region::new(4 * ALIGN).unwrap();
        let b = r.copy_in(b"hello").unwrap();
        assert_eq!(&b[..], b"hello");
        assert_eq!(r.mapping().offset_of(&b), Some(0));
        let lease = b.slice(1..3);
        drop(b);
        assert_eq!(r.used(), ALIGN, "a lease keeps the extent");
        assert_eq!(&lease[..], b"el");
        drop(lease);
        assert_eq!(r.used(), 0);
        assert_eq!(r.mapping().offset_of(b"elsewhere"), None);
    }

    #[test]
    fn a_read_only_descriptor_cannot_be_mapped_for_writing() {
        let r = Region::new(ALIGN).unwrap();
        let fd = r.mapping().read_only_fd().unwrap();
        // SAFETY: a test mapping request, checked, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_eq!(p, libc::MAP_FAILED, "a shared writable mapping of a read-only fd is refused");
        // SAFETY: as above.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the mapping just made.
        unsafe { libc::munmap(p, 4096) };
    }
}
