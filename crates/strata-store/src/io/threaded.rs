//! The fallback engine: one thread doing blocking pread/pwrite/fdatasync,
//! used when io_uring is disabled or refused by the kernel. Safe code only.
//! Requests run one at a time in arrival order, so a sync is a barrier
//! (everything taken before it has completed) by construction.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, mpsc};

use super::request::{Request, ZeroMethod, zero_range};

/// Serves requests until every sender is dropped.
pub(super) fn run(file: Arc<File>, zero: ZeroMethod, rx: mpsc::Receiver<Request>) {
    while let Ok(req) = rx.recv() {
        match req {
            Request::Read { off, mut buf, done } => {
                let r = file.read_exact_at(&mut buf, off);
                let _ = done.send((buf, r));
            }
            Request::Write { off, buf, done } => {
                let r = file.write_all_at(&buf, off);
                let _ = done.send((buf, r));
            }
            Request::Zero { off, len, done } => {
                let _ = done.send(zero_range(&file, zero, off, len));
            }
            Request::Sync { done } => {
                let _ = done.send(file.sync_data());
            }
        }
    }
}
