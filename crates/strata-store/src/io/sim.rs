//! A crash-simulating RAM disk for tests: the fault-injection seam.
//!
//! It keeps a durable image and a volatile overlay of 4 KiB blocks. Writes
//! and zeroing land in the overlay; `sync` merges the overlay into the
//! durable image. [`SimDisk::crash`] throws the overlay away after
//! applying a random subset of it, as a power cut may persist any subset
//! of unsynced writes. It can also fail writes or syncs on demand, and cut
//! the power after a budget of mutating calls (shared by several disks, so
//! the cut hits them all at once), which lands crashes inside commits.
//! It can start from a given image, and record the durable prefix of the
//! disk at every sync: the history of what was ever durable, against which
//! recovery from a damaged image is checked.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

const SB: u64 = 4096;

struct State {
    durable: Vec<u8>,
    overlay: BTreeMap<u64, Box<[u8]>>,
    fail_writes: bool,
    fail_syncs: bool,
    /// With `Some((len, images))`, every sync appends `durable[..len]`.
    history: Option<(usize, Vec<Vec<u8>>)>,
}

/// The simulated disk, shared by the test and successive stores.
pub(crate) struct SimDisk {
    size: u64,
    state: Mutex<State>,
    /// Mutating calls left before the power cut; negative = unlimited.
    power: Arc<AtomicI64>,
}

impl SimDisk {
    pub(crate) fn new(size: u64) -> SimDisk {
        SimDisk::from_image(vec![0; size as usize])
    }

    /// A disk whose durable contents are `image`.
    pub(crate) fn from_image(image: Vec<u8>) -> SimDisk {
        let size = image.len() as u64;
        let state =
            State { durable: image, overlay: BTreeMap::new(), fail_writes: false, fail_syncs: false, history: None };
        SimDisk { size, state: Mutex::new(state), power: Arc::new(AtomicI64::new(-1)) }
    }

    /// From now on, every sync records the first `len` durable bytes.
    pub(crate) fn record_history(&self, len: usize) {
        self.lock().history = Some((len.min(self.size as usize), Vec::new()));
    }

    /// The prefixes recorded since [`SimDisk::record_history`].
    pub(crate) fn take_history(&self) -> Vec<Vec<u8>> {
        self.lock().history.take().map(|(_, h)| h).unwrap_or_default()
    }

    /// A copy of the durable contents.
    pub(crate) fn durable_image(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }

    /// A disk sharing `power` with others.
    pub(crate) fn with_power(size: u64, power: Arc<AtomicI64>) -> SimDisk {
        SimDisk { power, ..SimDisk::new(size) }
    }

    /// Spends one mutating call of the power budget.
    fn consume(&self) -> io::Result<()> {
        let left = self.power.load(Ordering::SeqCst);
        if left < 0 {
            return Ok(());
        }
        if left == 0 {
            return Err(io::Error::other("power cut"));
        }
        self.power.store(left - 1, Ordering::SeqCst);
        Ok(())
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check(&self, off: u64, len: u64) -> io::Result<()> {
        if off.checked_add(len).is_none_or(|e| e > self.size) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "beyond the sim disk"));
        }
        Ok(())
    }

    pub(crate) fn read(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check(off, buf.len() as u64)?;
        let st = self.lock();
        // Block by block: from the overlay where a block has one.
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let (bi, within) = (pos / SB, (pos % SB) as usize);
            let n = (SB as usize - within).min(buf.len() - done);
            let src = match st.overlay.get(&bi) {
                Some(blk) => &blk[within..within + n],
                None => &st.durable[pos as usize..pos as usize + n],
            };
            buf[done..done + n].copy_from_slice(src);
            done += n;
        }
        Ok(())
    }

    fn modify(&self, off: u64, len: u64, mut f: impl FnMut(u64) -> u8) -> io::Result<()> {
        self.check(off, len)?;
        self.consume()?;
        let mut st = self.lock();
        if st.fail_writes {
            return Err(io::Error::other("injected write failure"));
        }
        let mut pos = off;
        while pos < off + len {
            let bi = pos / SB;
            let st = &mut *st;
            let blk = st.overlay.entry(bi).or_insert_with(|| {
                let s = (bi * SB) as usize;
                st.durable[s..s + SB as usize].to_vec().into_boxed_slice()
            });
            let end = ((bi + 1) * SB).min(off + len);
            for p in pos..end {
                blk[(p % SB) as usize] = f(p - off);
            }
            pos = end;
        }
        Ok(())
    }

    pub(crate) fn write(&self, off: u64, buf: &[u8]) -> io::Result<()> {
        self.modify(off, buf.len() as u64, |i| buf[i as usize])
    }

    pub(crate) fn zero(&self, off: u64, len: u64) -> io::Result<()> {
        self.modify(off, len, |_| 0)
    }

    pub(crate) fn sync(&self) -> io::Result<()> {
        self.consume()?;
        let mut st = self.lock();
        if st.fail_syncs {
            return Err(io::Error::other("injected sync failure"));
        }
        let overlay = std::mem::take(&mut st.overlay);
        for (bi, blk) in overlay {
            let s = (bi * SB) as usize;
            st.durable[s..s + SB as usize].copy_from_slice(&blk);
        }
        let st = &mut *st;
        if let Some((len, images)) = &mut st.history {
            images.push(st.durable[..*len].to_vec());
        }
        Ok(())
    }

    /// Power cut: each unsynced block persists if `keep(block)` says so.
    pub(crate) fn crash(&self, mut keep: impl FnMut(u64) -> bool) {
        let mut st = self.lock();
        let overlay = std::mem::take(&mut st.overlay);
        for (bi, blk) in overlay {
            if keep(bi) {
                let s = (bi * SB) as usize;
                st.durable[s..s + SB as usize].copy_from_slice(&blk);
            }
        }
        st.fail_writes = false;
        st.fail_syncs = false;
    }

    pub(crate) fn set_fail_writes(&self, v: bool) {
        self.lock().fail_writes = v;
    }

    pub(crate) fn set_fail_syncs(&self, v: bool) {
        self.lock().fail_syncs = v;
    }

    /// Direct access to the durable image, for corruption tests.
    pub(crate) fn corrupt(&self, off: u64, f: impl FnOnce(&mut [u8])) {
        let mut st = self.lock();
        let s = off as usize;
        f(&mut st.durable[s..]);
    }
}
