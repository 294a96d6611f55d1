//! The reservations of one namespace (NVMe Base 2.0, 8.19): who is
//! registered with which key, who holds the reservation and of which
//! type, what each host may do, and whom each change must tell.
//!
//! Pure: no I/O, no clock, no controller. The target runs the four
//! reservation commands through [`Reservations`], answers each I/O command
//! with [`Reservations::allows`], sends the notices an [`Outcome`] lists,
//! and keeps the state where it survives ([`Reservations::to_bytes`]).
//! Hosts are known by their 128-bit host identifier (the one they gave at
//! Connect): every controller of one host shares its registration.
//!
//! # Who may do what
//!
//! | type | reads by | writes by |
//! |---|---|---|
//! | Write Exclusive | anyone | the holder |
//! | Exclusive Access | the holder | the holder |
//! | Write Exclusive, Registrants Only / All Registrants | anyone | registrants |
//! | Exclusive Access, Registrants Only / All Registrants | registrants | registrants |
//!
//! Reads are Read and Compare; writes are Write, Write Zeroes, Dataset
//! Management and Flush (as Linux nvmet); everything else, the
//! reservation commands included, is not limited. Under an All
//! Registrants type every registrant holds the reservation.
//!
//! The transitions follow the specification where it is plain and the
//! kernel's target (`drivers/nvme/target/pr.c`) where hosts depend on a
//! reading of it, so that a host that works with one works with the
//! other: IEKEY is refused on Acquire and Release (obsolete), Report
//! needs the extended data structure (host identifiers are 128-bit on
//! fabrics), a Release of another type than the reservation's is a
//! conflict, and the generation counts every successful Register and
//! Preempt and every Clear.

use strata_nvme::command::io;
use strata_nvme::reservation::{
    AcquireAction, AcquireFields, NoticeKind, PersistChange, RegisterAction, RegisterFields, RegistrantEntry,
    ReleaseAction, ReleaseFields, ReservationStatus, ReservationType,
};
use strata_nvme::status::Status;

/// A host identifier (Connect's HOSTID).
pub type HostId = [u8; 16];

/// How a command is limited by a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The read group.
    Read,
    /// The write group.
    Write,
    /// Not limited.
    Free,
}

/// The group of I/O command `opcode`.
pub fn access_of(opcode: u8) -> Access {
    match opcode {
        io::READ | io::COMPARE => Access::Read,
        io::WRITE | io::WRITE_ZEROES | io::DATASET_MANAGEMENT | io::FLUSH => Access::Write,
        _ => Access::Free,
    }
}

/// What a reservation command changed for hosts other than its sender.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Notices to queue, each for every controller of its host.
    pub notices: Vec<(HostId, NoticeKind)>,
    /// Hosts whose commands already running must end before a Preempt
    /// and Abort completes.
    pub aborted: Vec<HostId>,
    /// The state changed: keep it before the command completes.
    pub changed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Registrant {
    host: HostId,
    key: u64,
}

/// The reservation state of one namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reservations {
    generation: u32,
    /// In the order they registered.
    registrants: Vec<Registrant>,
    /// The holder and the type. Under an All Registrants type the host
    /// named is one of the registrants (every registrant holds it); the
    /// reservation ends with the last of them.
    holder: Option<(HostId, ReservationType)>,
    /// Persist Through Power Loss.
    persist: bool,
}

fn conflict() -> Status {
    Status::RESERVATION_CONFLICT.dnr()
}

fn invalid() -> Status {
    Status::INVALID_FIELD.dnr()
}

impl Reservations {
    /// The generation (PRGEN).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Whether Persist Through Power Loss is set.
    pub fn persists(&self) -> bool {
        self.persist
    }

    /// The reservation's type, when one is held.
    pub fn reservation(&self) -> Option<ReservationType> {
        self.holder.map(|(_, t)| t)
    }

    fn find(&self, host: &HostId) -> Option<usize> {
        self.registrants.iter().position(|r| r.host == *host)
    }

    /// `host` is registered.
    pub fn is_registered(&self, host: &HostId) -> bool {
        self.find(host).is_some()
    }

    /// `host` holds the reservation.
    pub fn holds(&self, host: &HostId) -> bool {
        match self.holder {
            Some((h, t)) => h == *host || (t.all_registrants() && self.is_registered(host)),
            None => false,
        }
    }

    /// Whether `host` may run a command of `access` now.
    pub fn allows(&self, host: &HostId, access: Access) -> bool {
        let Some((_, rtype)) = self.holder else { return true };
        if access == Access::Free || self.holds(host) {
            return true;
        }
        let limited = access == Access::Write || rtype.exclusive_access();
        !limited || (rtype.registrants_keep_access() && self.is_registered(host))
    }

    /// The registered host `host` with key `key` (any key when
    /// `ignore_key`).
    fn registered_with(&self, host: &HostId, key: u64, ignore_key: bool) -> Result<usize, Status> {
        match self.find(host) {
            Some(i) if ignore_key || self.registrants[i].key == key => Ok(i),
            _ => Err(conflict()),
        }
    }

    /// Reservation Register from `host`.
    ///
    /// # Errors
    ///
    /// Reservation Conflict when the keys do not match what is registered.
    pub fn register(&mut self, host: &HostId, f: RegisterFields, crkey: u64, nrkey: u64) -> Result<Outcome, Status> {
        let mut out = Outcome { changed: true, ..Outcome::default() };
        match f.action {
            RegisterAction::Register => match self.find(host) {
                Some(i) if self.registrants[i].key != nrkey => return Err(conflict()),
                Some(_) => {}
                None if self.registrants.len() >= MAX_REGISTRANTS => return Err(Status::INTERNAL.dnr()),
                None => self.registrants.push(Registrant { host: *host, key: nrkey }),
            },
            RegisterAction::Unregister => {
                let i = self.registered_with(host, crkey, f.ignore_key)?;
                self.unregister(i, &mut out);
            }
            RegisterAction::Replace => {
                let i = self.registered_with(host, crkey, f.ignore_key)?;
                self.registrants[i].key = nrkey;
            }
        }
        match f.persist {
            PersistChange::Keep => {}
            PersistChange::Clear => self.persist = false,
            PersistChange::Set => self.persist = true,
        }
        self.generation = self.generation.wrapping_add(1);
        Ok(out)
    }

    /// Takes registrant `i` out; a holder's reservation goes to another
    /// registrant (All Registrants) or ends, which the others hear of
    /// under a Registrants Only type.
    fn unregister(&mut self, i: usize, out: &mut Outcome) {
        let gone = self.registrants.remove(i);
        let Some((holder, rtype)) = self.holder else { return };
        if holder != gone.host {
            return;
        }
        if rtype.all_registrants() {
            self.holder = self.registrants.first().map(|r| (r.host, rtype));
        } else {
            self.holder = None;
            if rtype.registrants_keep_access() {
                self.notify_others(&gone.host, NoticeKind::ReservationReleased, out);
            }
        }
    }

    /// Queues `kind` for every registrant other than `sender`.
    fn notify_others(&self, sender: &HostId, kind: NoticeKind, out: &mut Outcome) {
        out.notices.extend(self.registrants.iter().filter(|r| r.host != *sender).map(|r| (r.host, kind)));
    }

    /// Takes out every registrant with key `key` (other than `sender`,
    /// unless `sender_too`), telling each that its registration was
    /// preempted. False when none had it.
    fn preempt_key(&mut self, sender: &HostId, key: u64, sender_too: bool, abort: bool, out: &mut Outcome) -> bool {
        let mut any = false;
        while let Some(i) = self.registrants.iter().position(|r| r.key == key && (sender_too || r.host != *sender)) {
            let host = self.registrants[i].host;
            any = true;
            self.unregister(i, out);
            if host != *sender {
                out.notices.push((host, NoticeKind::RegistrationPreempted));
            }
            if abort {
                out.aborted.push(host);
            }
        }
        any
    }

    /// Reservation Acquire from `host`.
    ///
    /// # Errors
    ///
    /// Invalid Field (IEKEY, or a Preempt of a key of 0 that names no
    /// one), Reservation Conflict (not registered with `crkey`, another
    /// holder, a key no one has).
    pub fn acquire(&mut self, host: &HostId, f: AcquireFields, crkey: u64, prkey: u64) -> Result<Outcome, Status> {
        if f.ignore_key {
            return Err(invalid());
        }
        self.registered_with(host, crkey, false)?;
        let mut out = Outcome::default();
        let abort = f.action == AcquireAction::PreemptAndAbort;
        match (f.action, self.holder) {
            (AcquireAction::Acquire, Some((_, t))) if self.holds(host) => {
                return if t == f.rtype { Ok(out) } else { Err(conflict()) };
            }
            (AcquireAction::Acquire, Some(_)) => return Err(conflict()),
            (AcquireAction::Acquire, None) => {
                self.holder = Some((*host, f.rtype));
                out.changed = true;
                return Ok(out);
            }
            // Preempt without a reservation: registrants only.
            (_, None) => {
                if !self.preempt_key(host, prkey, true, abort, &mut out) {
                    return Err(conflict());
                }
            }
            (_, Some((_, t))) if t.all_registrants() => {
                if prkey == 0 {
                    // Take it first, so that no other registrant is left
                    // holding it while the others go.
                    self.holder = Some((*host, f.rtype));
                    let others: Vec<u64> = self.registrants.iter().filter(|r| r.host != *host).map(|r| r.key).collect();
                    for key in others {
                        self.preempt_key(host, key, false, abort, &mut out);
                    }
                } else if !self.preempt_key(host, prkey, true, abort, &mut out) {
                    return Err(conflict());
                }
            }
            (_, Some((h, t))) if h == *host => {
                self.holder = Some((h, f.rtype));
                if t != f.rtype {
                    self.notify_others(host, NoticeKind::ReservationReleased, &mut out);
                }
            }
            (_, Some((h, t))) => {
                let holder_key = self.find(&h).map(|i| self.registrants[i].key);
                if holder_key == Some(prkey) {
                    self.holder = Some((*host, f.rtype));
                    self.preempt_key(host, prkey, false, abort, &mut out);
                    if t != f.rtype {
                        self.notify_others(host, NoticeKind::ReservationReleased, &mut out);
                    }
                } else if prkey == 0 {
                    return Err(invalid());
                } else if !self.preempt_key(host, prkey, true, abort, &mut out) {
                    return Err(conflict());
                }
            }
        }
        out.changed = true;
        self.generation = self.generation.wrapping_add(1);
        Ok(out)
    }

    /// Reservation Release from `host`.
    ///
    /// # Errors
    ///
    /// Invalid Field (IEKEY), Reservation Conflict (not registered with
    /// `crkey`, or a Release of another type than the reservation's).
    pub fn release(&mut self, host: &HostId, f: ReleaseFields, crkey: u64) -> Result<Outcome, Status> {
        if f.ignore_key {
            return Err(invalid());
        }
        self.registered_with(host, crkey, false)?;
        let mut out = Outcome::default();
        match f.action {
            ReleaseAction::Release => {
                let Some((_, t)) = self.holder else { return Ok(out) };
                if !self.holds(host) {
                    return Ok(out);
                }
                if t.code() != f.rtype {
                    return Err(conflict());
                }
                self.holder = None;
                out.changed = true;
                if t.registrants_keep_access() {
                    self.notify_others(host, NoticeKind::ReservationReleased, &mut out);
                }
            }
            ReleaseAction::Clear => {
                self.notify_others(host, NoticeKind::ReservationPreempted, &mut out);
                self.holder = None;
                self.registrants.clear();
                self.generation = self.generation.wrapping_add(1);
                out.changed = true;
            }
        }
        Ok(out)
    }

    /// What Reservation Report returns (controllers are dynamic: FFFFh).
    pub fn report(&self) -> ReservationStatus {
        ReservationStatus {
            generation: self.generation,
            rtype: self.reservation(),
            persist: self.persist,
            registrants: self
                .registrants
                .iter()
                .map(|r| RegistrantEntry { cntlid: 0xffff, holds: self.holds(&r.host), key: r.key, hostid: r.host })
                .collect(),
        }
    }

    /// The state as bytes, for the metadata store (see
    /// [`Self::from_bytes`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(STATE_HEADER + self.registrants.len() * STATE_ENTRY);
        b.extend_from_slice(STATE_MAGIC);
        b.push(STATE_VERSION);
        b.extend_from_slice(&self.generation.to_le_bytes());
        b.push(u8::from(self.persist));
        let (holder, rtype) = self.holder.map_or(([0u8; 16], 0), |(h, t)| (h, t.code()));
        b.push(rtype);
        b.extend_from_slice(&holder);
        b.extend_from_slice(&u16::try_from(self.registrants.len()).unwrap_or(u16::MAX).to_le_bytes());
        for r in self.registrants.iter().take(usize::from(u16::MAX)) {
            b.extend_from_slice(&r.host);
            b.extend_from_slice(&r.key.to_le_bytes());
        }
        b
    }

    /// Reads what [`Self::to_bytes`] wrote.
    ///
    /// # Errors
    ///
    /// A wrong magic or version, a length that does not match the
    /// registrant count, an undefined type, a holder that is not
    /// registered, or a host registered twice.
    pub fn from_bytes(b: &[u8]) -> Result<Reservations, StateError> {
        if b.len() < STATE_HEADER || &b[..4] != STATE_MAGIC {
            return Err(StateError("not a reservation state".into()));
        }
        if b[4] != STATE_VERSION {
            return Err(StateError(format!("reservation state version {} (this build reads {STATE_VERSION})", b[4])));
        }
        let generation = u32::from_le_bytes([b[5], b[6], b[7], b[8]]);
        let persist = match b[9] {
            0 => false,
            1 => true,
            other => return Err(StateError(format!("persist flag {other}"))),
        };
        let rtype = b[10];
        let mut holder_id = [0u8; 16];
        holder_id.copy_from_slice(&b[11..27]);
        let count = usize::from(u16::from_le_bytes([b[27], b[28]]));
        if b.len() != STATE_HEADER + count * STATE_ENTRY {
            return Err(StateError(format!("{} bytes for {count} registrants", b.len())));
        }
        let mut registrants: Vec<Registrant> = Vec::with_capacity(count);
        for e in b[STATE_HEADER..].chunks_exact(STATE_ENTRY) {
            let mut host = [0u8; 16];
            host.copy_from_slice(&e[..16]);
            let mut key = [0u8; 8];
            key.copy_from_slice(&e[16..24]);
            if registrants.iter().any(|r| r.host == host) {
                return Err(StateError("a host registered twice".into()));
            }
            registrants.push(Registrant { host, key: u64::from_le_bytes(key) });
        }
        let holder = match rtype {
            0 => None,
            code => {
                let t = ReservationType::from_code(code).map_err(|e| StateError(e.to_string()))?;
                if !registrants.iter().any(|r| r.host == holder_id) {
                    return Err(StateError("the holder is not registered".into()));
                }
                Some((holder_id, t))
            }
        };
        Ok(Reservations { generation, registrants, holder, persist })
    }
}

/// Most registrants one namespace keeps: the state stays within what a
/// metadata store value holds (64 KiB).
pub const MAX_REGISTRANTS: usize = 1024;

/// Where a subsystem keeps its namespaces' reservation states, so that
/// they survive a restart (Persist Through Power Loss).
pub trait ReservationStore: Send + Sync {
    /// Keeps `state` ([`Reservations::to_bytes`]) of namespace `nsid`
    /// durably; the command that changed it completes after this.
    fn save(&self, nsid: u32, state: Vec<u8>) -> crate::reservation::SaveFuture<'_>;
}

/// What [`ReservationStore::save`] returns.
pub type SaveFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>>;

/// A namespace's reservations as the target shares them between its
/// queues: the state behind a lock, a flag that lets I/O skip the lock
/// while no reservation is held (the common case), and a lock that runs
/// the reservation commands one at a time (a change is kept before it is
/// seen).
#[derive(Debug, Default)]
pub struct ReservationCell {
    state: std::sync::Mutex<Reservations>,
    held: std::sync::atomic::AtomicBool,
    commands: tokio::sync::Mutex<()>,
    /// Some host is registered: I/O is counted by host (see
    /// [`ReservationCell::track`]).
    tracking: std::sync::atomic::AtomicBool,
    /// I/O commands running, by host, while tracking.
    running: std::sync::Mutex<std::collections::HashMap<HostId, usize>>,
    /// Woken when a host's count drops to zero.
    drained: tokio::sync::Notify,
    /// The subsystems that serve the namespace, with its NSID in each
    /// (a pool volume's own, as hosts see it, and its owner's proxy):
    /// where the notices go.
    served_in: std::sync::Mutex<Vec<(std::sync::Weak<crate::Subsystem>, u32)>>,
}

/// A command counted as running for its host until this drops (see
/// [`ReservationCell::track`]).
pub struct Running<'a> {
    cell: &'a ReservationCell,
    host: HostId,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut running = self.cell.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = running.get_mut(&self.host) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.host);
                self.cell.drained.notify_waiters();
            }
        }
    }
}

impl ReservationCell {
    /// A cell starting from `state` (one kept across a restart).
    pub fn with_state(state: Reservations) -> ReservationCell {
        let cell = ReservationCell::default();
        cell.with(|r| *r = state);
        cell
    }

    /// Counts an I/O command of `host` as running until the guard drops,
    /// while any host is registered (only then can a Preempt and Abort
    /// name the host): the wait of [`Self::drain`], across every
    /// subsystem that serves the namespace (a pool volume's own and the
    /// one its paths forward to).
    pub fn track(&self, host: &HostId) -> Option<Running<'_>> {
        if !self.tracking.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        *self.running.lock().unwrap_or_else(|e| e.into_inner()).entry(*host).or_default() += 1;
        Some(Running { cell: self, host: *host })
    }

    /// Notes that `sub` serves the namespace as `nsid`.
    pub(crate) fn served_in(&self, sub: std::sync::Weak<crate::Subsystem>, nsid: u32) {
        let mut list = self.served_in.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|(s, _)| s.strong_count() > 0);
        if !list.iter().any(|(s, n)| s.ptr_eq(&sub) && *n == nsid) {
            list.push((sub, nsid));
        }
    }

    /// Queues each notice for every controller of its host, in every
    /// subsystem that still serves the namespace.
    pub(crate) fn deliver(self: &std::sync::Arc<Self>, notices: &[(HostId, NoticeKind)]) {
        if notices.is_empty() {
            return;
        }
        let subs: Vec<(std::sync::Arc<crate::Subsystem>, u32)> = {
            let mut list = self.served_in.lock().unwrap_or_else(|e| e.into_inner());
            list.retain(|(s, _)| s.strong_count() > 0);
            list.iter().filter_map(|(s, n)| s.upgrade().map(|s| (s, *n))).collect()
        };
        for (sub, nsid) in subs {
            if !sub.entry(nsid).is_some_and(|e| std::sync::Arc::ptr_eq(&e.reservations, self)) {
                continue;
            }
            let controllers = sub.controllers();
            for (to, kind) in notices {
                for c in controllers.iter().filter(|c| c.hostid() == *to) {
                    c.notify_reservation(nsid, *kind);
                }
            }
        }
    }

    /// Waits until no counted command of `host` runs.
    pub async fn drain(&self, host: &HostId) {
        loop {
            let drained = self.drained.notified();
            let mut drained = std::pin::pin!(drained);
            drained.as_mut().enable();
            if !self.running.lock().unwrap_or_else(|e| e.into_inner()).contains_key(host) {
                return;
            }
            drained.await;
        }
    }

    /// Runs one reservation command: `f` changes a copy of the state;
    /// when it changed, `keep` stores the copy's bytes, and only then does
    /// the copy become the state. A failed `keep` leaves the state as it
    /// was and fails the command with Internal Error.
    pub async fn command<K>(
        &self,
        f: impl FnOnce(&mut Reservations) -> Result<Outcome, Status>,
        keep: K,
    ) -> Result<Outcome, Status>
    where
        K: AsyncFnOnce(Vec<u8>) -> Result<(), String>,
    {
        let _one = self.commands.lock().await;
        let mut next = self.lock().clone();
        let out = f(&mut next)?;
        if out.changed {
            if let Err(e) = keep(next.to_bytes()).await {
                tracing::error!("keeping a reservation change: {e}; the command fails, nothing changed");
                return Err(Status::INTERNAL.dnr());
            }
            self.with(|r| *r = next);
        }
        Ok(out)
    }
    /// Whether `host` may run a command of `access` now.
    pub fn allows(&self, host: &HostId, access: Access) -> bool {
        if access == Access::Free || !self.held.load(std::sync::atomic::Ordering::Acquire) {
            return true;
        }
        self.lock().allows(host, access)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Reservations> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the state (one command at a time), keeping the flag
    /// in step.
    pub fn with<T>(&self, f: impl FnOnce(&mut Reservations) -> T) -> T {
        let mut st = self.lock();
        let out = f(&mut st);
        self.held.store(st.holder.is_some(), std::sync::atomic::Ordering::Release);
        self.tracking.store(!st.registrants.is_empty(), std::sync::atomic::Ordering::Release);
        out
    }
}

const STATE_MAGIC: &[u8; 4] = b"SRSV";
const STATE_VERSION: u8 = 1;
/// Magic 4, version 1, generation 4, persist 1, type 1, holder 16,
/// count 2.
const STATE_HEADER: usize = 29;
/// Host 16, key 8.
const STATE_ENTRY: usize = 24;

/// A stored reservation state that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("reservation state: {0}")]
pub struct StateError(String);

#[cfg(test)]
mod tests {
    use super::*;
    use strata_nvme::reservation::ReservationType as T;

    const A: HostId = [1; 16];
    const B: HostId = [2; 16];
    const C: HostId = [3; 16];

    fn reg(action: RegisterAction, ignore_key: bool) -> RegisterFields {
        RegisterFields { action, ignore_key, persist: PersistChange::Keep }
    }

    fn acq(action: AcquireAction, rtype: T) -> AcquireFields {
        AcquireFields { action, ignore_key: false, rtype }
    }

    fn rel(action: ReleaseAction, rtype: T) -> ReleaseFields {
        ReleaseFields { action, ignore_key: false, rtype: rtype.code() }
    }

    /// A, B and C registered with keys 1, 2 and 3.
    fn three() -> Reservations {
        let mut r = Reservations::default();
        for (h, k) in [(A, 1), (B, 2), (C, 3)] {
            r.register(&h, reg(RegisterAction::Register, false), 0, k).unwrap();
        }
        r
    }

    #[test]
    fn register_unregister_and_replace_check_the_keys_and_count_generations() {
        let mut r = three();
        assert_eq!(r.generation(), 3);
        assert!(r.register(&A, reg(RegisterAction::Register, false), 0, 1).is_ok(), "the same key again");
        assert_eq!(r.register(&A, reg(RegisterAction::Register, false), 0, 9), Err(conflict()));
        assert_eq!(r.register(&A, reg(RegisterAction::Replace, false), 7, 5), Err(conflict()), "wrong current key");
        r.register(&A, reg(RegisterAction::Replace, false), 1, 5).unwrap();
        r.register(&A, reg(RegisterAction::Replace, true), 0, 6).unwrap();
        assert_eq!(r.report().registrants[0].key, 6);
        assert_eq!(r.register(&[9; 16], reg(RegisterAction::Replace, true), 0, 1), Err(conflict()), "not registered");
        assert_eq!(r.register(&B, reg(RegisterAction::Unregister, false), 9, 0), Err(conflict()));
        r.register(&B, reg(RegisterAction::Unregister, false), 2, 0).unwrap();
        assert!(!r.is_registered(&B));
        assert_eq!(r.generation(), 7);
        let set = RegisterFields { persist: PersistChange::Set, ..reg(RegisterAction::Register, false) };
        r.register(&B, set, 0, 2).unwrap();
        assert!(r.persists());
    }

    #[test]
    fn each_type_limits_reads_and_writes_as_its_table_says() {
        let outsider: HostId = [9; 16];
        // (type, registrant reads, registrant writes, outsider reads, outsider writes)
        let table = [
            (T::WriteExclusive, true, false, true, false),
            (T::ExclusiveAccess, false, false, false, false),
            (T::WriteExclusiveRegistrantsOnly, true, true, true, false),
            (T::ExclusiveAccessRegistrantsOnly, true, true, false, false),
            (T::WriteExclusiveAllRegistrants, true, true, true, false),
            (T::ExclusiveAccessAllRegistrants, true, true, false, false),
        ];
        for (t, rr, rw, or, ow) in table {
            let mut r = three();
            r.acquire(&A, acq(AcquireAction::Acquire, t), 1, 0).unwrap();
            assert!(r.allows(&A, Access::Read) && r.allows(&A, Access::Write), "{t:?}: the holder");
            assert_eq!((r.allows(&B, Access::Read), r.allows(&B, Access::Write)), (rr, rw), "{t:?}: a registrant");
            let got = (r.allows(&outsider, Access::Read), r.allows(&outsider, Access::Write));
            assert_eq!(got, (or, ow), "{t:?}: not registered");
            assert!(r.allows(&outsider, Access::Free), "{t:?}: admin and reservation commands");
        }
        assert_eq!(access_of(io::FLUSH), Access::Write);
        assert_eq!(access_of(io::COMPARE), Access::Read);
        assert_eq!(access_of(strata_nvme::reservation::opcode::REPORT), Access::Free);
    }

    #[test]
    fn acquire_needs_the_key_and_the_reservation_free_or_already_ours() {
        let mut r = three();
        assert_eq!(r.acquire(&A, acq(AcquireAction::Acquire, T::WriteExclusive), 9, 0), Err(conflict()));
        r.acquire(&A, acq(AcquireAction::Acquire, T::WriteExclusive), 1, 0).unwrap();
        assert!(r.acquire(&A, acq(AcquireAction::Acquire, T::WriteExclusive), 1, 0).is_ok(), "again, same type");
        assert_eq!(r.acquire(&A, acq(AcquireAction::Acquire, T::ExclusiveAccess), 1, 0), Err(conflict()));
        assert_eq!(r.acquire(&B, acq(AcquireAction::Acquire, T::WriteExclusive), 2, 0), Err(conflict()));
        let iekey = AcquireFields { ignore_key: true, ..acq(AcquireAction::Acquire, T::WriteExclusive) };
        assert_eq!(r.acquire(&A, iekey, 1, 0), Err(invalid()));
        // Under All Registrants, every registrant holds it.
        let mut r = three();
        r.acquire(&A, acq(AcquireAction::Acquire, T::WriteExclusiveAllRegistrants), 1, 0).unwrap();
        assert!(r.holds(&B));
        assert!(r.acquire(&B, acq(AcquireAction::Acquire, T::WriteExclusiveAllRegistrants), 2, 0).is_ok());
    }

    #[test]
    fn preempt_takes_the_reservation_from_the_holder_and_tells_the_preempted() {
        let mut r = three();
        r.acquire(&A, acq(AcquireAction::Acquire, T::WriteExclusive), 1, 0).unwrap();
        let g = r.generation();
        let out = r.acquire(&B, acq(AcquireAction::PreemptAndAbort, T::ExclusiveAccess), 2, 1).unwrap();
        assert!(r.holds(&B) && !r.is_registered(&A));
        assert_eq!(r.reservation(), Some(T::ExclusiveAccess));
        assert!(out.notices.contains(&(A, NoticeKind::RegistrationPreempted)), "{out:?}");
        assert!(out.notices.contains(&(C, NoticeKind::ReservationReleased)), "the type changed: {out:?}");
        assert_eq!(out.aborted, vec![A]);
        assert_eq!(r.generation(), g + 1);
        // A key no one has: conflict; a key of 0 with a single holder:
        // invalid.
        assert_eq!(r.acquire(&C, acq(AcquireAction::Preempt, T::ExclusiveAccess), 3, 77), Err(conflict()));
        assert_eq!(r.acquire(&C, acq(AcquireAction::Preempt, T::ExclusiveAccess), 3, 0), Err(invalid()));
        // Another key than the holder's: those registrants go, the
        // reservation stays.
        r.register(&A, reg(RegisterAction::Register, false), 0, 1).unwrap();
        let out = r.acquire(&C, acq(AcquireAction::Preempt, T::ExclusiveAccess), 3, 1).unwrap();
        assert!(!r.is_registered(&A) && r.holds(&B));
        assert_eq!(out.notices, vec![(A, NoticeKind::RegistrationPreempted)]);
        assert!(out.aborted.is_empty(), "a Preempt aborts nothing");
    }

    #[test]
    fn all_registrants_preempt_with_key_zero_takes_it_and_unregisters_the_others() {
        let mut r = three();
        r.acquire(&A, acq(AcquireAction::Acquire, T::ExclusiveAccessAllRegistrants), 1, 0).unwrap();
        let out = r.acquire(&C, acq(AcquireAction::Preempt, T::WriteExclusive), 3, 0).unwrap();
        assert_eq!(r.reservation(), Some(T::WriteExclusive));
        assert!(r.holds(&C) && !r.is_registered(&A) && !r.is_registered(&B));
        let mut told: Vec<HostId> = out.notices.iter().map(|(h, _)| *h).collect();
        told.sort();
        assert_eq!(told, vec![A, B]);
    }

    #[test]
    fn a_holder_that_unregisters_ends_or_passes_on_the_reservation() {
        let mut r = three();
        r.acquire(&A, acq(AcquireAction::Acquire, T::WriteExclusiveRegistrantsOnly), 1, 0).unwrap();
        let out = r.register(&A, reg(RegisterAction::Unregister, false), 1, 0).unwrap();
        assert_eq!(r.reservation(), None);
        assert_eq!(out.notices, vec![(B, NoticeKind::ReservationReleased), (C, NoticeKind::ReservationReleased)]);
        // All Registrants: it stays while one registrant is left.
        let mut r = three();
        r.acquire(&A, acq(AcquireAction::Acquire, T::WriteExclusiveAllRegistrants), 1, 0).unwrap();
        r.register(&A, reg(RegisterAction::Unregister, false), 1, 0).unwrap();
        r.register(&B, reg(RegisterAction::Unregister, false), 2, 0).unwrap();
        assert!(r.holds(&C));
        r.register(&C, reg(RegisterAction::Unregister, false), 3, 0).unwrap();
        assert_eq!(r.reservation(), None);
    }

    #[test]
    fn release_and_clear() {
        let mut r = three();
        r.acquire(&A, acq(AcquireAction::Acquire, T::ExclusiveAccessRegistrantsOnly), 1, 0).unwrap();
        assert!(r.release(&B, rel(ReleaseAction::Release, T::ExclusiveAccessRegistrantsOnly), 2).is_ok());
        assert!(r.holds(&A), "a non-holder's release changes nothing");
        assert_eq!(r.release(&A, rel(ReleaseAction::Release, T::WriteExclusive), 1), Err(conflict()), "type");
        assert_eq!(r.release(&A, rel(ReleaseAction::Release, T::ExclusiveAccessRegistrantsOnly), 9), Err(conflict()));
        let out = r.release(&A, rel(ReleaseAction::Release, T::ExclusiveAccessRegistrantsOnly), 1).unwrap();
        assert_eq!(r.reservation(), None);
        assert_eq!(out.notices.len(), 2);
        r.acquire(&B, acq(AcquireAction::Acquire, T::WriteExclusive), 2, 0).unwrap();
        let g = r.generation();
        let out = r.release(&C, rel(ReleaseAction::Clear, T::WriteExclusive), 3).unwrap();
        assert_eq!(r.reservation(), None);
        assert!(r.report().registrants.is_empty());
        assert_eq!(out.notices, vec![(A, NoticeKind::ReservationPreempted), (B, NoticeKind::ReservationPreempted)]);
        assert_eq!(r.generation(), g + 1);
        let iekey = ReleaseFields { ignore_key: true, ..rel(ReleaseAction::Clear, T::WriteExclusive) };
        assert_eq!(r.release(&C, iekey, 3), Err(invalid()));
    }

    #[test]
    fn the_report_lists_registrants_in_order_with_the_holders() {
        let mut r = three();
        r.acquire(&B, acq(AcquireAction::Acquire, T::WriteExclusive), 2, 0).unwrap();
        let s = r.report();
        assert_eq!(s.rtype, Some(T::WriteExclusive));
        let got: Vec<(HostId, bool, u64)> = s.registrants.iter().map(|e| (e.hostid, e.holds, e.key)).collect();
        assert_eq!(got, vec![(A, false, 1), (B, true, 2), (C, false, 3)]);
    }

    #[test]
    fn the_state_round_trips_and_damaged_bytes_are_refused() {
        let mut r = three();
        r.acquire(&B, acq(AcquireAction::Acquire, T::ExclusiveAccessAllRegistrants), 2, 0).unwrap();
        let set = RegisterFields { persist: PersistChange::Set, ..reg(RegisterAction::Replace, false) };
        r.register(&C, set, 3, 33).unwrap();
        let b = r.to_bytes();
        assert_eq!(b.len(), 29 + 3 * 24);
        assert_eq!(Reservations::from_bytes(&b), Ok(r.clone()));
        assert_eq!(Reservations::from_bytes(&Reservations::default().to_bytes()), Ok(Reservations::default()));
        for cut in [0, 4, 28, b.len() - 1] {
            assert!(Reservations::from_bytes(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = b.clone();
        bad[4] = 2;
        assert!(Reservations::from_bytes(&bad).is_err(), "version");
        let mut bad = b.clone();
        bad[10] = 7;
        assert!(Reservations::from_bytes(&bad).is_err(), "type");
        let mut bad = b.clone();
        bad[11] = 0x55;
        assert!(Reservations::from_bytes(&bad).is_err(), "an unregistered holder");
        let mut bad = b.clone();
        bad.copy_within(29..45, 53);
        assert!(Reservations::from_bytes(&bad).is_err(), "a host twice");
    }

    #[tokio::test]
    async fn a_drain_waits_for_the_running_commands_of_its_host_only() {
        let cell = ReservationCell::default();
        assert!(cell.track(&A).is_none(), "nothing is counted while no host is registered");
        cell.with(|r| r.register(&A, reg(RegisterAction::Register, false), 0, 1)).unwrap();
        let a = cell.track(&A).expect("counted");
        let _b = cell.track(&B).expect("counted");
        let drain = cell.drain(&A);
        tokio::pin!(drain);
        let short = std::time::Duration::from_millis(20);
        assert!(tokio::time::timeout(short, &mut drain).await.is_err(), "a's command still runs");
        drop(a);
        assert!(tokio::time::timeout(std::time::Duration::from_secs(5), &mut drain).await.is_ok(), "b's is not a's");
        cell.drain(&C).await;
    }
}
