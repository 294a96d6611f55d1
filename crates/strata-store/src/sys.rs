//! Thin wrappers over the Linux calls std does not expose: hole punching,
//! block-device ioctls and eventfd. This is one of the two modules of the
//! crate with `unsafe` code (the other is [`crate::io::uring`]); every
//! function here is safe to call and checks the return value.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};

/// `_IO(0x12, 127)`: zero a byte range of a block device (`u64[2]` = start, len).
const BLKZEROOUT: libc::c_ulong = 0x127f;
/// `_IOR(0x12, 114, size_t)`: size of a block device in bytes.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

fn cvt(r: libc::c_int) -> io::Result<()> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

fn to_off(v: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(v).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset beyond off_t"))
}

/// Deallocates `len` bytes at `off` in a regular file, keeping its size;
/// the range reads as zeros afterwards.
pub(crate) fn punch_hole(file: &File, off: u64, len: u64) -> io::Result<()> {
    let (o, l) = (to_off(off)?, to_off(len)?);
    // SAFETY: fallocate only reads its integer arguments; the fd is open
    // for as long as `file` is borrowed.
    cvt(unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, o, l) })
}

/// Zeroes `len` bytes at `off` of a block device (the kernel may use the
/// device's Write Zeroes command).
pub(crate) fn blk_zeroout(file: &File, off: u64, len: u64) -> io::Result<()> {
    let range: [u64; 2] = [off, len];
    // SAFETY: BLKZEROOUT reads two u64s from the pointer, which points to
    // `range`, alive for the duration of the call.
    cvt(unsafe { libc::ioctl(file.as_raw_fd(), BLKZEROOUT as _, range.as_ptr()) })
}

/// Size in bytes of the block device open as `file`.
pub(crate) fn block_device_size(file: &File) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points
    // to `size`, alive and exclusively borrowed for the call.
    cvt(unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut size as *mut u64) })?;
    Ok(size)
}

/// A new close-on-exec eventfd, as a `File` that owns it.
pub(crate) fn eventfd() -> io::Result<File> {
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a freshly created descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    #[test]
    fn punched_range_reads_zeros_and_keeps_size() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[0xab; 3 * 4096]).unwrap();
        punch_hole(&f, 4096, 4096).unwrap();
        let mut b = [1u8; 3 * 4096];
        f.read_exact_at(&mut b, 0).unwrap();
        assert!(b[..4096].iter().all(|&x| x == 0xab));
        assert!(b[4096..8192].iter().all(|&x| x == 0));
        assert!(b[8192..].iter().all(|&x| x == 0xab));
        assert_eq!(f.metadata().unwrap().len(), 3 * 4096);
    }

    #[test]
    fn block_ioctls_on_a_regular_file_fail_cleanly() {
        let f = tempfile::tempfile().unwrap();
        assert!(block_device_size(&f).is_err());
        assert!(blk_zeroout(&f, 0, 4096).is_err());
    }

    #[test]
    fn eventfd_is_created() {
        let e = eventfd().unwrap();
        (&e).write_all(&1u64.to_le_bytes()).unwrap();
    }
}
