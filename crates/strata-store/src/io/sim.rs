//! A crash-simulating RAM disk for tests: the fault-injection seam.
//!
//! It keeps a durable image and a volatile overlay of 4 KiB blocks. Writes
//! and zeroing land in the overlay; `sync` merges the overlay into the
//! durable image. [`SimDisk::crash`] throws the overlay away after
//! applying a random subset of it, as a power cut may persist any subset
//! of unsynced writes. It can also fail writes or syncs on demand, and cut
//! the power after a budget of mutating calls (shared by several disks, so
//! the cut hits them all at once), which lands crashes inside commits.
//!
//! In *deferred* mode ([`SimDisk::set_deferred`]) it behaves like an
//! io_uring engine towards callers that stop waiting: an async write or
//! zeroing is queued at its first poll and applied at a later one, so a
//! caller that drops its future in between leaves the mutation in flight.
//! Queued mutations land in an adversarial order: any later submission may
//! apply one of them, and a sync applies all of them first (a sync is a
//! barrier, as the real engines make it). A crash discards what is still
//! queued. Every async call returns `Pending` once, so that a test can
//! drop a future at each of its await points.
//! It can start from a given image, and record the durable prefix of the
//! disk at every sync: the history of what was ever durable, against which
//! recovery from a damaged image is checked.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const SB: u64 = 4096;

struct State {
    durable: Vec<u8>,
    overlay: BTreeMap<u64, Box<[u8]>>,
    fail_writes: bool,
    fail_syncs: bool,
    panic_syncs: bool,
    /// Deferred mode: mutations submitted and not applied yet, by id.
    queued: Vec<(u64, Mutation)>,
    /// Results of queued mutations applied before their caller asked.
    results: HashMap<u64, Result<(), String>>,
    next_id: u64,
    /// With `Some((len, images))`, every sync appends `durable[..len]`.
    history: Option<(usize, Vec<Vec<u8>>)>,
}

/// A write (`Some` bytes) or a zeroing (`None`) of `len` bytes at `off`.
struct Mutation {
    off: u64,
    len: u64,
    data: Option<Vec<u8>>,
}

/// The simulated disk, shared by the test and successive stores.
pub(crate) struct SimDisk {
    size: u64,
    state: Mutex<State>,
    /// Mutating calls left before the power cut; negative = unlimited.
    power: Arc<AtomicI64>,
    deferred: AtomicBool,
    /// Bumped by every crash: I/O through a handle from an earlier epoch
    /// (the crashed "process") fails and never lands.
    epoch: AtomicU64,
    /// The generator's state choosing which queued mutation lands when.
    rng: AtomicU64,
}

/// A store's view of a [`SimDisk`]: the I/O of one "process". After a
/// [`SimDisk::crash`], I/O through handles made before it fails, as the
/// I/O of a killed process never reaches the disk.
#[derive(Clone)]
pub(crate) struct SimHandle {
    disk: Arc<SimDisk>,
    epoch: u64,
}

impl SimDisk {
    /// A handle for a store opened now.
    pub(crate) fn handle(self: &Arc<Self>) -> SimHandle {
        SimHandle { disk: self.clone(), epoch: self.epoch.load(Ordering::SeqCst) }
    }
}

impl std::ops::Deref for SimHandle {
    type Target = SimDisk;
    fn deref(&self) -> &SimDisk {
        &self.disk
    }
}

impl SimHandle {
    /// Fails when the disk crashed since this handle was made.
    fn alive(&self) -> io::Result<()> {
        if self.disk.epoch.load(Ordering::SeqCst) != self.epoch {
            return Err(io::Error::other("sim: this process crashed"));
        }
        Ok(())
    }

    pub(crate) fn read(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.alive()?;
        self.disk.read(off, buf)
    }

    pub(crate) fn write(&self, off: u64, buf: &[u8]) -> io::Result<()> {
        self.alive()?;
        self.disk.write(off, buf)
    }

    pub(crate) fn zero(&self, off: u64, len: u64) -> io::Result<()> {
        self.alive()?;
        self.disk.zero(off, len)
    }

    pub(crate) fn sync(&self) -> io::Result<()> {
        self.alive()?;
        self.disk.sync()
    }

    pub(crate) fn submit(&self, off: u64, len: u64, data: Option<Vec<u8>>) -> io::Result<u64> {
        self.alive()?;
        self.disk.submit(off, len, data)
    }

    pub(crate) fn finish(&self, id: u64) -> io::Result<()> {
        self.alive()?;
        self.disk.finish(id)
    }
}

/// A future that returns `Pending` once (waking itself) and then `Ready`.
#[derive(Default)]
pub(crate) struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

impl SimDisk {
    pub(crate) fn new(size: u64) -> SimDisk {
        SimDisk::from_image(vec![0; size as usize])
    }

    /// A disk whose durable contents are `image`.
    pub(crate) fn from_image(image: Vec<u8>) -> SimDisk {
        let size = image.len() as u64;
        let state = State {
            durable: image,
            overlay: BTreeMap::new(),
            fail_writes: false,
            fail_syncs: false,
            panic_syncs: false,
            queued: Vec::new(),
            results: HashMap::new(),
            next_id: 0,
            history: None,
        };
        SimDisk {
            size,
            state: Mutex::new(state),
            power: Arc::new(AtomicI64::new(-1)),
            deferred: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            rng: AtomicU64::new(0x9E37_79B9_7F4A_7C15),
        }
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

    fn modify(&self, off: u64, len: u64, f: impl FnMut(u64) -> u8) -> io::Result<()> {
        self.check(off, len)?;
        let mut st = self.lock();
        self.apply(&mut st, off, len, f)
    }

    fn apply(&self, st: &mut State, off: u64, len: u64, mut f: impl FnMut(u64) -> u8) -> io::Result<()> {
        self.consume()?;
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

    /// Turns deferred mode on or off (see the module doc).
    pub(crate) fn set_deferred(&self, on: bool) {
        self.deferred.store(on, Ordering::SeqCst);
    }

    pub(crate) fn is_deferred(&self) -> bool {
        self.deferred.load(Ordering::SeqCst)
    }

    /// SplitMix64 ([`strata_rand`]'s generator) on an atomic state.
    fn random(&self) -> u64 {
        strata_rand::mix64(self.rng.fetch_add(strata_rand::GOLDEN, Ordering::Relaxed).wrapping_add(strata_rand::GOLDEN))
    }

    /// Applies the queued mutation at `index`, keeping its result for its
    /// caller.
    fn land(&self, st: &mut State, index: usize) {
        let (id, m) = st.queued.swap_remove(index);
        let r = match &m.data {
            Some(d) => self.apply(st, m.off, m.len, |i| d[i as usize]),
            None => self.apply(st, m.off, m.len, |_| 0),
        };
        st.results.insert(id, r.map_err(|e| e.to_string()));
    }

    /// Deferred mode: queues a write (`Some`) or zeroing (`None`); may
    /// land an earlier queued mutation first. Returns the ticket for
    /// [`SimDisk::finish`].
    pub(crate) fn submit(&self, off: u64, len: u64, data: Option<Vec<u8>>) -> io::Result<u64> {
        self.check(off, len)?;
        let mut st = self.lock();
        if !st.queued.is_empty() && self.random().is_multiple_of(2) {
            let i = (self.random() % st.queued.len() as u64) as usize;
            self.land(&mut st, i);
        }
        let id = st.next_id;
        st.next_id += 1;
        st.queued.push((id, Mutation { off, len, data }));
        Ok(id)
    }

    /// Deferred mode: lands mutation `id` if it is still queued and
    /// returns its result.
    pub(crate) fn finish(&self, id: u64) -> io::Result<()> {
        let mut st = self.lock();
        if let Some(i) = st.queued.iter().position(|(q, _)| *q == id) {
            self.land(&mut st, i);
        }
        match st.results.remove(&id) {
            Some(r) => r.map_err(io::Error::other),
            None => Err(io::Error::other("sim mutation lost (crash)")),
        }
    }

    /// Mutations submitted and not finished: still queued, or landed at
    /// random with their result not taken yet (in flight for a caller
    /// that went away too).
    pub(crate) fn in_flight(&self) -> usize {
        let st = self.lock();
        st.queued.len() + st.results.len()
    }

    pub(crate) fn sync(&self) -> io::Result<()> {
        let mut st = self.lock();
        // A barrier: everything in flight lands first, in random order.
        while !st.queued.is_empty() {
            let i = (self.random() % st.queued.len() as u64) as usize;
            self.land(&mut st, i);
        }
        self.consume()?;
        if st.panic_syncs {
            st.panic_syncs = false;
            drop(st);
            panic!("injected panic in a sync");
        }
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
        self.epoch.fetch_add(1, Ordering::SeqCst);
        st.queued.clear();
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

    /// Makes the next sync panic (once).
    pub(crate) fn set_panic_syncs(&self, v: bool) {
        self.lock().panic_syncs = v;
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
