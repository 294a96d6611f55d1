//! What the engine threads are asked to do, shared by the dispatcher
//! ([`Engine`](super::Engine) in `io/mod.rs`) and both engine threads
//! (`threaded.rs`, `uring.rs`): the [`Request`] sent over the channel and
//! the synchronous zeroing ([`zero_range`]) every engine runs in place.
//!
//! A leaf of the `io` module: the dispatcher and the engines import it, it
//! imports neither, so no two of them import each other.
//!
//! A request owns its buffer while in flight; its completion hands the
//! buffer back, on error too (as [`Request::fail`] does).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use strata_block::IoBuf;
use tokio::sync::oneshot;

/// How a range is made to read as zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZeroMethod {
    /// `fallocate(PUNCH_HOLE | KEEP_SIZE)`, falling back to writing zeros.
    PunchHole,
    /// The `BLKZEROOUT` ioctl.
    BlkZeroOut,
}

/// One request to an engine thread.
pub(crate) enum Request {
    Read { off: u64, buf: IoBuf, done: oneshot::Sender<(IoBuf, io::Result<()>)> },
    Write { off: u64, buf: IoBuf, done: oneshot::Sender<(IoBuf, io::Result<()>)> },
    Zero { off: u64, len: u64, done: oneshot::Sender<io::Result<()>> },
    Sync { done: oneshot::Sender<io::Result<()>> },
}

impl Request {
    /// Completes the request with `err` without doing it.
    pub(super) fn fail(self, err: io::Error) {
        match self {
            Request::Read { buf, done, .. } | Request::Write { buf, done, .. } => {
                let _ = done.send((buf, Err(err)));
            }
            Request::Zero { done, .. } | Request::Sync { done } => {
                let _ = done.send(Err(err));
            }
        }
    }
}

/// Zeroes a range synchronously; shared by both engine threads.
pub(crate) fn zero_range(file: &File, method: ZeroMethod, off: u64, len: u64) -> io::Result<()> {
    match method {
        ZeroMethod::BlkZeroOut => crate::sys::blk_zeroout(file, off, len),
        ZeroMethod::PunchHole => match crate::sys::punch_hole(file, off, len) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => write_zeros(file, off, len),
            r => r,
        },
    }
}

fn write_zeros(file: &File, mut off: u64, len: u64) -> io::Result<()> {
    const CHUNK: u64 = 1 << 20;
    let zeros = IoBuf::zeroed(CHUNK.min(len) as usize);
    let end = off + len;
    while off < end {
        let n = (end - off).min(CHUNK) as usize;
        file.write_all_at(&zeros[..n], off)?;
        off += n as u64;
    }
    Ok(())
}
