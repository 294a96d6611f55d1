//! Drive backends: where a drive's bytes live and how I/O reaches them.
//!
//! [`Backend`] is the seam between the allocator/journal logic and the
//! media. It has two faces: synchronous calls used only while opening
//! (before any engine thread matters, and so that `Store::open` can run
//! inside or outside a tokio runtime), and async calls used at run time.
//!
//! - `Mem`: volatile RAM, completes inline.
//! - `Engine`: a file or block device served by one dedicated thread
//!   (io_uring, or pread/pwrite when io_uring is unavailable); requests go
//!   over a channel and results come back through `tokio::sync::oneshot`.
//! - `Sim` (tests and fuzzing only): a RAM disk that keeps a durable image
//!   and a volatile overlay, to simulate crashes.
//!
//! Every buffer is an [`IoBuf`] owned by the request while in flight and
//! handed back with the result, even on error.

mod mem;
mod request;
#[cfg(any(test, fuzzing))]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod sim;
mod threaded;
mod uring;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, mpsc};

use strata_block::IoBuf;
use tokio::sync::oneshot;

pub(crate) use mem::MemDisk;
pub(crate) use request::ZeroMethod;
use request::{Request, zero_range};

/// A file or block device served by a dedicated I/O thread.
pub(crate) struct Engine {
    file: Arc<File>,
    zero: ZeroMethod,
    tx: Option<mpsc::Sender<Request>>,
    /// Wakes an io_uring thread; `None` for the blocking thread, which
    /// sleeps in `recv`.
    notify: Option<Arc<uring::Notify>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Engine {
    /// Starts the I/O thread for `file`: io_uring if `use_uring` and the
    /// kernel allows it, otherwise a pread/pwrite thread.
    pub(crate) fn start(file: Arc<File>, zero: ZeroMethod, label: &str, use_uring: bool) -> io::Result<Engine> {
        let (tx, rx) = mpsc::channel();
        let name = format!("strata-io-{}", label.rsplit('/').next().unwrap_or(label));
        if use_uring {
            match uring::Ring::new() {
                Ok(ring) => {
                    let notify = ring.notify();
                    let f = file.clone();
                    let thread = std::thread::Builder::new().name(name).spawn(move || ring.run(f, zero, rx))?;
                    return Ok(Engine { file, zero, tx: Some(tx), notify: Some(notify), thread: Some(thread) });
                }
                Err(e) => tracing::warn!(
                    drive = label,
                    error = %e,
                    "io_uring is unavailable (seccomp or old kernel?); using a pread/pwrite thread"
                ),
            }
        }
        let f = file.clone();
        let thread = std::thread::Builder::new().name(name).spawn(move || threaded::run(f, zero, rx))?;
        Ok(Engine { file, zero, tx: Some(tx), notify: None, thread: Some(thread) })
    }

    fn submit(&self, req: Request) {
        match &self.tx {
            Some(tx) => {
                if let Err(mpsc::SendError(req)) = tx.send(req) {
                    req.fail(io::Error::other("drive I/O thread has stopped"));
                    return;
                }
                if let Some(n) = &self.notify {
                    n.wake();
                }
            }
            None => req.fail(io::Error::other("drive I/O thread has stopped")),
        }
    }

    /// True when the thread uses io_uring.
    pub(crate) fn is_uring(&self) -> bool {
        self.notify.is_some()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Closing the channel tells the thread to finish in-flight work
        // and exit; a forced wake makes an io_uring thread notice.
        self.tx = None;
        if let Some(n) = &self.notify {
            n.wake_always();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn stopped() -> io::Error {
    io::Error::other("drive I/O thread stopped before completing the request")
}

/// Where a drive's bytes live.
pub(crate) enum Backend {
    Mem(MemDisk),
    Engine(Engine),
    #[cfg(any(test, fuzzing))]
    Sim(sim::SimHandle),
}

impl Backend {
    /// Reads `buf.len()` bytes at `off`, blocking. Open-time only.
    pub(crate) fn read_sync(&self, off: u64, buf: &mut IoBuf) -> io::Result<()> {
        match self {
            Backend::Mem(m) => {
                m.read_sync(off, buf);
                Ok(())
            }
            Backend::Engine(e) => e.file.read_exact_at(buf, off),
            #[cfg(any(test, fuzzing))]
            Backend::Sim(s) => s.read(off, buf),
        }
    }

    /// Writes `buf` at `off`, blocking. Open-time only.
    pub(crate) fn write_sync(&self, off: u64, buf: &IoBuf) -> io::Result<()> {
        match self {
            Backend::Mem(m) => {
                m.write_sync(off, buf);
                Ok(())
            }
            Backend::Engine(e) => e.file.write_all_at(buf, off),
            #[cfg(any(test, fuzzing))]
            Backend::Sim(s) => s.write(off, buf),
        }
    }

    /// Makes `len` bytes at `off` read as zeros, blocking. Open-time only.
    pub(crate) fn zero_sync(&self, off: u64, len: u64) -> io::Result<()> {
        match self {
            Backend::Mem(m) => {
                m.zero_sync(off, len);
                Ok(())
            }
            Backend::Engine(e) => zero_range(&e.file, e.zero, off, len),
            #[cfg(any(test, fuzzing))]
            Backend::Sim(s) => s.zero(off, len),
        }
    }

    /// Makes completed writes durable, blocking. Open-time only.
    pub(crate) fn sync_sync(&self) -> io::Result<()> {
        match self {
            Backend::Mem(_) => Ok(()),
            Backend::Engine(e) => e.file.sync_data(),
            #[cfg(any(test, fuzzing))]
            Backend::Sim(s) => s.sync(),
        }
    }

    /// Reads `buf.len()` bytes at `off`.
    pub(crate) async fn read(&self, off: u64, mut buf: IoBuf) -> (IoBuf, io::Result<()>) {
        match self {
            Backend::Mem(m) => {
                m.read(off, &mut buf).await;
                (buf, Ok(()))
            }
            Backend::Engine(e) => {
                let len = buf.len();
                let (done, rx) = oneshot::channel();
                e.submit(Request::Read { off, buf, done });
                rx.await.unwrap_or_else(|_| (IoBuf::zeroed(len), Err(stopped())))
            }
            #[cfg(any(test, fuzzing))]
            Backend::Sim(s) => {
                sim::YieldOnce::default().await;
                let r = s.read(off, &mut buf);
                (buf, r)
            }
        }
    }

    /// Lends `len` bytes at `off` instead of reading them, when the
    /// backend is RAM and nothing is writing there; `None`: read instead.
    pub(crate) fn lend(&self, off: u64, len: usize) -> Option<strata_block::Lent> {
        match self {
            Backend::Mem(m) => m.lend(off, len),
            _ => None,
        }
    }

    /// Writes `buf` at `off`.
    pub(crate) async fn write(&self, off: u64, buf: IoBuf) -> (IoBuf, io::Result<()>) {
        match self {
            Backend::Mem(m) => {
                m.write(off, &buf).await;
                (buf, Ok(()))
            }
            Backend::Engine(e) => {
                let len = buf.len();
                let (done, rx) = oneshot::channel();
                e.submit(Request::Write { off, buf, done });
                rx.await.unwrap_or_else(|_| (IoBuf::zeroed(len), Err(stopped())))
            }
            #[cfg(any(test, fuzzing))]
            Backend::Sim(s) => {
                if !s.is_deferred() {
                    let r = s.write(off, &buf);
                    return (buf, r);
                }
                let id = match s.submit(off, buf.len() as u64, Some(buf.to_vec())) {
                    Ok(id) => id,
                    Err(e) => return (buf, Err(e)),
                };
                sim::YieldOnce::default().await;
                let r = s.finish(id);
                (buf, r)
            }
        }
    }

    /// Makes `len` bytes at `off` read as zeros.
    pub(crate) async fn zero(&self, off: u64, len: u64) -> io::Result<()> {
        match self {
            Backend::Mem(m) => {
                m.zero(off, len).await;
                Ok(())
            }
            Backend::Engine(e) => {
                let (done, rx) = oneshot::channel();
                e.submit(Request::Zero { off, len, done });
                rx.await.unwrap_or_else(|_| Err(stopped()))
            }
            #[cfg(any(test, fuzzing))]
            Backend::Sim(s) => {
                if !s.is_deferred() {
                    return s.zero(off, len);
                }
                let id = s.submit(off, len, None)?;
                sim::YieldOnce::default().await;
                s.finish(id)
            }
        }
    }

    /// Makes every write completed before this call durable (fdatasync),
    /// after waiting for every request submitted before it to complete:
    /// a sync is a barrier. A write whose future was dropped may still be
    /// in flight in the engine; once a later sync completes it has landed
    /// and is durable, so nothing issued after the sync can be overtaken
    /// by it. Commits rely on this before they make freed extents
    /// reusable.
    pub(crate) async fn sync(&self) -> io::Result<()> {
        match self {
            Backend::Mem(_) => Ok(()),
            Backend::Engine(e) => {
                let (done, rx) = oneshot::channel();
                e.submit(Request::Sync { done });
                rx.await.unwrap_or_else(|_| Err(stopped()))
            }
            #[cfg(any(test, fuzzing))]
            Backend::Sim(s) => {
                if s.is_deferred() {
                    sim::YieldOnce::default().await;
                }
                s.sync()
            }
        }
    }

    /// True when contents do not survive the process.
    pub(crate) fn volatile(&self) -> bool {
        matches!(self, Backend::Mem(_))
    }

    /// Short name of the I/O path, for stats.
    pub(crate) fn engine_name(&self) -> &'static str {
        match self {
            Backend::Mem(_) => "memory",
            Backend::Engine(e) if e.is_uring() => "io_uring",
            Backend::Engine(_) => "thread",
            #[cfg(any(test, fuzzing))]
            Backend::Sim(_) => "sim",
        }
    }
}
