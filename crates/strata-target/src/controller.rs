//! Controllers: the per-host state behind an admin queue and its I/O
//! queues (dynamic controller model, NVMe-oF 1.1 section 3.3).
//!
//! A controller is created by a Connect on queue 0 and lives until its
//! admin connection closes, the host shuts it down, or its keep-alive
//! timer expires. It owns the controller registers (CC, CSTS), negotiated
//! features (number of queues, keep-alive timeout, asynchronous event
//! configuration), outstanding Asynchronous Event Requests and the events
//! waiting for them, the Changed Namespace List and the error log. The
//! SMART I/O counters are per namespace, not per controller
//! ([`NamespaceIoStats`]). The admin command set is implemented in
//! [`crate::admin`]; this module holds the state and its rules.
//!
//! Invariants:
//! - at most `AER_LIMIT` AER command IDs are parked;
//! - a namespace-change notice is sent once and then masked until the host
//!   reads the Changed Namespace List without RAE;
//! - `dead` only goes from false to true; every queue of the controller
//!   watches it and closes its connection when it flips.
//!
//! `controller` and `subsystem` import each other, the one cycle left
//! between this crate's files, on purpose: a controller holds its
//! subsystem ([`ControllerKind::Io`]) and a subsystem its controllers
//! (weakly, to announce namespace changes and enforce its access list),
//! and both are public types whose API names the other. Removing the cycle
//! would take merging the two modules or hiding one type behind a trait
//! object; what both share otherwise (namespaces, the SMART counters, the
//! data budget) lives in modules below them.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use strata_nvme::command::async_event;
use strata_nvme::completion::Cqe;
use strata_nvme::log_page::{ErrorLogEntry, LogPageId};
use strata_nvme::status::Status;
use tokio::sync::{Notify, watch};

use crate::budget::DataBudget;
pub use crate::io_stats::{IoCounters, IoTotals, NamespaceIoStats};
use crate::subsystem::Subsystem;

/// Most AERs a host may park (AERL + 1).
pub const AER_LIMIT: usize = 4;
/// Entries kept in the error log.
pub const ERROR_LOG_ENTRIES: usize = 64;
/// Most entries in the Changed Namespace List before it reports overflow.
const CHANGED_NS_MAX: usize = 1024;

/// One running I/O command of a controller (see
/// [`Controller::command_started`]).
pub(crate) struct InflightGuard(Arc<Controller>);

impl std::ops::Deref for InflightGuard {
    type Target = Controller;
    fn deref(&self) -> &Controller {
        &self.0
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        if self.0.inflight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

/// Why [`Controller::watch_keep_alive`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeepAliveEnd {
    /// The timer expired; the controller was torn down.
    Expired,
    /// The controller died otherwise.
    Dead,
}

/// Which kind of subsystem a controller belongs to.
#[derive(Debug, Clone)]
pub enum ControllerKind {
    /// An I/O controller of an NVM subsystem.
    Io(Arc<Subsystem>),
    /// A discovery controller.
    Discovery,
}

#[derive(Debug)]
/// The notices a controller raises (see [`Controller::raise_notice`]).
#[derive(Clone, Copy)]
enum Notice {
    /// Namespace Attribute Changed (Changed Namespace List).
    NsAttr,
    /// Asymmetric Namespace Access Change (ANA log).
    AnaChange,
    /// Discovery Log Page Change (a discovery controller's log).
    DiscoveryChange,
}

pub(crate) struct CtrlState {
    pub(crate) cc: u32,
    pub(crate) csts: u32,
    pub(crate) io_queues_granted: u16,
    pub(crate) io_queues: BTreeSet<u16>,
    pub(crate) async_event_config: u32,
    /// The Composite Temperature's over and under thresholds, in kelvins
    /// (Temperature Threshold feature): kept as set, compared with no
    /// temperature (none is measured).
    pub(crate) temperature_thresholds: [u16; 2],
    /// Arbitration, Power Management, Error Recovery, Interrupt
    /// Coalescing and Write Atomicity Normal, as a host set them (0 until
    /// then): mandatory features that change nothing behind a fabrics
    /// controller, kept and read back as SPDK's target does.
    pub(crate) kept_features: std::collections::BTreeMap<u8, u32>,
    pub(crate) kato_ms: u32,
    aer_cids: VecDeque<u16>,
    pending_events: VecDeque<u32>,
    ns_notice_masked: bool,
    /// An ANA Change notice was sent and the ANA log not read since.
    ana_notice_masked: bool,
    discovery_notice_masked: bool,
    changed_ns: BTreeSet<u32>,
    changed_ns_overflow: bool,
    error_log: VecDeque<ErrorLogEntry>,
    error_count: u64,
    /// Reservation notices not read yet, oldest first.
    reservation_log: VecDeque<strata_nvme::reservation::ReservationNotice>,
    /// The last notice's Log Page Count.
    reservation_count: u64,
    /// A Reservation Log Page Available event was sent and the log not
    /// read since.
    reservation_notice_masked: bool,
    /// The Reservation Notification Mask feature: the notices the host
    /// does not want (`NoticeKind::mask_bit`).
    pub(crate) reservation_mask: u32,
}

/// Most reservation notices a controller keeps unread; older ones are
/// dropped (the next page's count shows the gap).
const RESERVATION_LOG_MAX: usize = 64;

/// One controller.
pub struct Controller {
    cntlid: u16,
    kind: ControllerKind,
    hostnqn: String,
    /// The fence [`Sender`](strata_block::Sender) of the host NQN.
    sender: strata_block::Sender,
    hostid: [u8; 16],
    max_io_queues: u16,
    created: Instant,
    last_keepalive_ms: AtomicU64,
    state: Mutex<CtrlState>,
    events: Notify,
    /// Woken when the host sets a new keep-alive timeout.
    kato_changed: Notify,
    /// What its I/O commands' data is charged to.
    pub(crate) data_budget: DataBudget,
    /// I/O commands running on this controller's queues, including those
    /// of queues whose connection ended and that are being drained.
    inflight: AtomicUsize,
    /// Woken when `inflight` drops to zero.
    drained: Notify,
    dead: watch::Sender<bool>,
    /// The host's data-path metrics, set once when the controller is
    /// created (see [`crate::io_metrics`]).
    host_metrics: std::sync::OnceLock<Arc<crate::io_metrics::IoMetrics>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller").field("cntlid", &self.cntlid).field("hostnqn", &self.hostnqn).finish()
    }
}

impl Controller {
    pub(crate) fn new(
        cntlid: u16,
        kind: ControllerKind,
        hostnqn: String,
        hostid: [u8; 16],
        kato_ms: u32,
        max_io_queues: u16,
        data_budget: DataBudget,
    ) -> Arc<Controller> {
        let (dead, _) = watch::channel(false);
        Arc::new(Controller {
            data_budget,
            cntlid,
            kind,
            sender: strata_block::sender_id(&hostnqn),
            hostnqn,
            hostid,
            max_io_queues,
            created: Instant::now(),
            last_keepalive_ms: AtomicU64::new(0),
            state: Mutex::new(CtrlState {
                cc: 0,
                csts: 0,
                io_queues_granted: max_io_queues,
                io_queues: BTreeSet::new(),
                async_event_config: 0,
                temperature_thresholds: [crate::admin::OVER_TEMPERATURE_DEFAULT, 0],
                kept_features: std::collections::BTreeMap::new(),
                kato_ms,
                aer_cids: VecDeque::new(),
                pending_events: VecDeque::new(),
                ns_notice_masked: false,
                ana_notice_masked: false,
                discovery_notice_masked: false,
                changed_ns: BTreeSet::new(),
                changed_ns_overflow: false,
                error_log: VecDeque::new(),
                error_count: 0,
                reservation_log: VecDeque::new(),
                reservation_count: 0,
                reservation_notice_masked: false,
                reservation_mask: 0,
            }),
            events: Notify::new(),
            kato_changed: Notify::new(),
            inflight: AtomicUsize::new(0),
            drained: Notify::new(),
            dead,
            host_metrics: std::sync::OnceLock::new(),
        })
    }

    /// Sets the host's data-path metrics (first call only; `None` leaves
    /// them unset: nothing is recorded).
    pub(crate) fn set_host_metrics(&self, metrics: Option<Arc<crate::io_metrics::IoMetrics>>) {
        if let Some(m) = metrics {
            let _ = self.host_metrics.set(m);
        }
    }

    /// The host's data-path metrics, if recorded.
    pub(crate) fn host_metrics(&self) -> Option<&Arc<crate::io_metrics::IoMetrics>> {
        self.host_metrics.get()
    }

    /// I/O queues connected now (the admin queue not counted).
    pub fn io_queue_count(&self) -> usize {
        self.lock().io_queues.len()
    }

    /// Controller ID.
    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }

    /// Host NQN that created it.
    pub fn hostnqn(&self) -> &str {
        &self.hostnqn
    }

    /// Who sends its fenced commands, as the epoch fences know it
    /// ([`strata_block::sender_id`] of the host NQN).
    pub fn sender(&self) -> strata_block::Sender {
        self.sender
    }

    /// Host identifier from Connect.
    pub fn hostid(&self) -> [u8; 16] {
        self.hostid
    }

    /// Most I/O queues this controller may have.
    pub fn max_io_queues(&self) -> u16 {
        self.max_io_queues
    }

    /// Its kind and subsystem.
    pub fn kind(&self) -> &ControllerKind {
        &self.kind
    }

    /// The NVM subsystem, for I/O controllers.
    pub fn subsystem(&self) -> Option<&Arc<Subsystem>> {
        match &self.kind {
            ControllerKind::Io(s) => Some(s),
            ControllerKind::Discovery => None,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, CtrlState> {
        // The state stays consistent across a panic in a holder: every
        // mutation is a single field update.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Time since the controller was created.
    pub fn uptime(&self) -> Duration {
        self.created.elapsed()
    }

    /// Resets the keep-alive timer: called for Keep Alive and, since we
    /// report traffic-based keep alive (CTRATT.TBKAS), for every command.
    pub fn touch(&self) {
        self.last_keepalive_ms.store(self.created.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// The keep-alive timeout in force (0 = disabled).
    pub fn kato(&self) -> Duration {
        Duration::from_millis(u64::from(self.lock().kato_ms))
    }

    /// How long until the keep-alive timer expires, or `None` when it is
    /// disabled. Zero means it has expired.
    pub fn keepalive_remaining(&self) -> Option<Duration> {
        let kato = self.kato();
        if kato.is_zero() {
            return None;
        }
        let last = Duration::from_millis(self.last_keepalive_ms.load(Ordering::Relaxed));
        let deadline = last + kato;
        Some(deadline.saturating_sub(self.created.elapsed()))
    }

    /// True once the controller has been torn down.
    pub fn is_dead(&self) -> bool {
        *self.dead.borrow()
    }

    /// Tears the controller down: every queue's connection closes.
    pub fn kill(&self) {
        self.dead.send_replace(true);
    }

    /// A receiver that changes to `true` when the controller dies.
    pub fn watch_dead(&self) -> watch::Receiver<bool> {
        self.dead.subscribe()
    }

    /// Waits until an asynchronous event may be ready to complete an AER.
    pub async fn event_ready(&self) {
        self.events.notified().await
    }

    /// Records that I/O queue `qid` connected. Fails when `qid` is beyond
    /// the number of queues granted or already connected.
    pub(crate) fn attach_io_queue(&self, qid: u16) -> Result<(), Status> {
        let mut st = self.lock();
        if qid == 0 || qid > st.io_queues_granted || st.io_queues.contains(&qid) {
            return Err(Status::CONNECT_INVALID_PARAMETERS);
        }
        if st.cc & strata_nvme::fabrics::reg::CC_EN == 0 {
            return Err(Status::COMMAND_SEQUENCE);
        }
        st.io_queues.insert(qid);
        Ok(())
    }

    /// Records that I/O queue `qid` went away.
    pub(crate) fn detach_io_queue(&self, qid: u16) {
        self.lock().io_queues.remove(&qid);
    }

    /// Sets the keep-alive timeout (0 disables it) and restarts the timer.
    pub(crate) fn set_kato(&self, kato_ms: u32) {
        self.lock().kato_ms = kato_ms;
        self.touch();
        self.kato_changed.notify_waiters();
    }

    /// Tears the controller down when the host stops talking: its
    /// keep-alive timer runs on this task, not on the admin queue's, so
    /// that a stuck queue cannot stop it. Returns when the controller
    /// dies (killed here or elsewhere).
    pub(crate) async fn watch_keep_alive(&self) -> KeepAliveEnd {
        let mut dead = self.watch_dead();
        loop {
            let changed = self.kato_changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            let sleep = match self.keepalive_remaining() {
                Some(left) if left.is_zero() => {
                    self.kill();
                    return KeepAliveEnd::Expired;
                }
                Some(left) => Some(tokio::time::sleep(left)),
                None => None,
            };
            tokio::select! {
                _ = async { match sleep { Some(s) => s.await, None => std::future::pending().await } } => {}
                _ = changed => {}
                _ = dead.wait_for(|&d| d) => return KeepAliveEnd::Dead,
            }
        }
    }

    /// Counts an I/O command as running until the returned guard drops.
    pub(crate) fn command_started(self: &Arc<Self>) -> InflightGuard {
        self.inflight.fetch_add(1, Ordering::AcqRel);
        InflightGuard(self.clone())
    }

    /// I/O commands running now.
    pub fn commands_in_flight(&self) -> usize {
        self.inflight.load(Ordering::Acquire)
    }

    /// Waits until no I/O command of this controller is running.
    pub(crate) async fn wait_drained(&self) {
        loop {
            let drained = self.drained.notified();
            let mut drained = std::pin::pin!(drained);
            drained.as_mut().enable();
            if self.commands_in_flight() == 0 {
                return;
            }
            drained.await;
        }
    }

    /// Forgets the parked AER `cid` without completing it: the host
    /// reused its command identifier (SPDK completes its AERs itself at
    /// detach).
    pub(crate) fn retire_aer(&self, cid: u16) {
        self.lock().aer_cids.retain(|&c| c != cid);
    }

    /// Parks an AER, or completes it at once when an event is waiting.
    pub(crate) fn park_aer(&self, cid: u16) -> Result<Option<Cqe>, Status> {
        let mut st = self.lock();
        if let Some(dw0) = st.pending_events.pop_front() {
            let mut cqe = Cqe::new(cid, Status::SUCCESS);
            cqe.result = u64::from(dw0);
            return Ok(Some(cqe));
        }
        if st.aer_cids.len() >= AER_LIMIT {
            return Err(Status::AER_LIMIT_EXCEEDED);
        }
        st.aer_cids.push_back(cid);
        Ok(None)
    }

    /// Pairs parked AERs with waiting events; the admin queue sends these.
    pub fn take_ready_aers(&self) -> Vec<Cqe> {
        let mut st = self.lock();
        let mut out = Vec::new();
        while !st.aer_cids.is_empty() && !st.pending_events.is_empty() {
            let (Some(cid), Some(dw0)) = (st.aer_cids.pop_front(), st.pending_events.pop_front()) else { break };
            let mut cqe = Cqe::new(cid, Status::SUCCESS);
            cqe.result = u64::from(dw0);
            out.push(cqe);
        }
        out
    }

    /// Drops parked AERs (controller reset); they are never completed.
    pub(crate) fn clear_aers(&self) {
        let mut st = self.lock();
        st.aer_cids.clear();
        st.pending_events.clear();
    }

    /// Adds `nsid` to the Changed Namespace List and raises a notice if
    /// the host enabled them and has not been told yet.
    pub fn notify_namespace_changed(&self, nsid: u32) {
        let mut st = self.lock();
        if st.changed_ns.len() >= CHANGED_NS_MAX {
            st.changed_ns_overflow = true;
        } else {
            st.changed_ns.insert(nsid);
        }
        self.raise_notice(st, Notice::NsAttr);
    }

    /// Raises an ANA Change notice if the host enabled them and has not
    /// read the ANA log since the last one.
    pub fn notify_ana_changed(&self) {
        self.raise_notice(self.lock(), Notice::AnaChange);
    }

    /// Raises a Discovery Log Page Change notice if the host (of a
    /// discovery controller) enabled them and has not read the log since
    /// the last one.
    pub fn notify_discovery_changed(&self) {
        self.raise_notice(self.lock(), Notice::DiscoveryChange);
    }

    /// Queues a reservation notice of `kind` about namespace `nsid`, and
    /// a Reservation Log Page Available event unless one is unread.
    pub fn notify_reservation(&self, nsid: u32, kind: strata_nvme::reservation::NoticeKind) {
        let mut st = self.lock();
        if st.reservation_mask & kind.mask_bit() != 0 {
            return;
        }
        st.reservation_count = st.reservation_count.wrapping_add(1).max(1);
        let count = st.reservation_count;
        if st.reservation_log.len() >= RESERVATION_LOG_MAX {
            st.reservation_log.pop_front();
        }
        st.reservation_log.push_back(strata_nvme::reservation::ReservationNotice { count, kind, available: 0, nsid });
        if std::mem::replace(&mut st.reservation_notice_masked, true) {
            return;
        }
        st.pending_events.push_back(async_event::dw0(
            async_event::TYPE_IO_COMMAND_SPECIFIC,
            async_event::INFO_RESERVATION_LOG_AVAILABLE,
            strata_nvme::reservation::NOTIFICATION_LOG_PAGE,
        ));
        drop(st);
        self.events.notify_one();
    }

    /// The oldest unread reservation notice (the empty page when none),
    /// with the number left after it; without RAE the next notice raises
    /// an event again.
    pub(crate) fn take_reservation_notice(&self, rae: bool) -> strata_nvme::reservation::ReservationNotice {
        let mut st = self.lock();
        let page = match st.reservation_log.pop_front() {
            Some(mut n) => {
                n.available = u8::try_from(st.reservation_log.len()).unwrap_or(u8::MAX);
                n
            }
            None => strata_nvme::reservation::ReservationNotice::EMPTY,
        };
        if !rae {
            st.reservation_notice_masked = false;
        }
        page
    }

    /// Queues `notice` for the next Asynchronous Event Request when the
    /// host enabled it and has not read its log page since the last one.
    fn raise_notice(&self, mut st: MutexGuard<'_, CtrlState>, notice: Notice) {
        let (enabled, info, lid) = match notice {
            Notice::NsAttr => (async_event::CONFIG_NS_ATTR, async_event::INFO_NS_ATTR_CHANGED, LogPageId::CHANGED_NS),
            Notice::AnaChange => (async_event::CONFIG_ANA_CHANGE, async_event::INFO_ANA_CHANGE, LogPageId::ANA),
            Notice::DiscoveryChange => {
                (async_event::CONFIG_DISCOVERY_LOG_CHANGE, async_event::INFO_DISCOVERY_LOG_CHANGE, LogPageId::DISCOVERY)
            }
        };
        if st.async_event_config & enabled == 0 {
            return;
        }
        let masked = match notice {
            Notice::NsAttr => &mut st.ns_notice_masked,
            Notice::AnaChange => &mut st.ana_notice_masked,
            Notice::DiscoveryChange => &mut st.discovery_notice_masked,
        };
        if std::mem::replace(masked, true) {
            return;
        }
        st.pending_events.push_back(async_event::dw0(async_event::TYPE_NOTICE, info, lid.0));
        drop(st);
        self.events.notify_one();
    }

    /// The host read the ANA log: without RAE the next change raises a
    /// notice again.
    pub(crate) fn ana_log_read(&self, rae: bool) {
        if !rae {
            self.lock().ana_notice_masked = false;
        }
    }

    /// The host read the discovery log: without RAE the next change
    /// raises a notice again.
    pub(crate) fn discovery_log_read(&self, rae: bool) {
        if !rae {
            self.lock().discovery_notice_masked = false;
        }
    }

    /// Returns and clears the Changed Namespace List; without RAE the
    /// notice is unmasked again.
    pub(crate) fn take_changed_namespaces(&self, rae: bool) -> Vec<u32> {
        let mut st = self.lock();
        let list = if st.changed_ns_overflow {
            vec![strata_nvme::log_page::CHANGED_NS_OVERFLOW]
        } else {
            st.changed_ns.iter().copied().collect()
        };
        st.changed_ns.clear();
        st.changed_ns_overflow = false;
        if !rae {
            st.ns_notice_masked = false;
        }
        list
    }

    /// Records a failed command in the error log.
    pub fn record_error(&self, sqid: u16, cid: u16, status: Status, nsid: u32, lba: u64) {
        let mut st = self.lock();
        st.error_count += 1;
        let entry = ErrorLogEntry {
            error_count: st.error_count,
            sqid,
            cmdid: cid,
            status_field: status.to_field(),
            param_error_location: 0xffff,
            lba,
            nsid,
            ..Default::default()
        };
        if st.error_log.len() == ERROR_LOG_ENTRIES {
            st.error_log.pop_back();
        }
        st.error_log.push_front(entry);
    }

    /// Error log entries, newest first, and the lifetime error count.
    pub(crate) fn error_log(&self) -> (Vec<ErrorLogEntry>, u64) {
        let st = self.lock();
        (st.error_log.iter().cloned().collect(), st.error_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctrl() -> Arc<Controller> {
        Controller::new(1, ControllerKind::Discovery, "nqn.host".into(), [0; 16], 0, 4, DataBudget::unlimited())
    }

    #[test]
    fn namespace_notice_is_sent_once_until_the_log_is_read() {
        let c = ctrl();
        c.lock().async_event_config = async_event::CONFIG_NS_ATTR;
        assert_eq!(c.park_aer(10), Ok(None));
        c.notify_namespace_changed(1);
        c.notify_namespace_changed(2);
        let ready = c.take_ready_aers();
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].cid, 10);
        assert_eq!(ready[0].dw0(), 0x0004_0002);
        // Masked: another change raises nothing.
        assert_eq!(c.park_aer(11), Ok(None));
        c.notify_namespace_changed(3);
        assert!(c.take_ready_aers().is_empty());
        // Reading with RAE keeps the mask; without it, unmasks.
        assert_eq!(c.take_changed_namespaces(true), vec![1, 2, 3]);
        c.notify_namespace_changed(4);
        assert!(c.take_ready_aers().is_empty());
        assert_eq!(c.take_changed_namespaces(false), vec![4]);
        c.notify_namespace_changed(5);
        assert_eq!(c.take_ready_aers().len(), 1);
    }

    #[test]
    fn notices_wait_for_the_host_to_enable_them() {
        let c = ctrl();
        assert_eq!(c.park_aer(1), Ok(None));
        c.notify_namespace_changed(1);
        assert!(c.take_ready_aers().is_empty());
        assert_eq!(c.take_changed_namespaces(false), vec![1]);
    }

    #[test]
    fn aer_limit_is_enforced() {
        let c = ctrl();
        for cid in 0..AER_LIMIT as u16 {
            assert_eq!(c.park_aer(cid), Ok(None));
        }
        assert_eq!(c.park_aer(99), Err(Status::AER_LIMIT_EXCEEDED));
    }

    #[test]
    fn error_log_keeps_the_newest_entries() {
        let c = ctrl();
        for i in 0..(ERROR_LOG_ENTRIES as u16 + 5) {
            c.record_error(1, i, Status::LBA_OUT_OF_RANGE, 1, 0);
        }
        let (log, count) = c.error_log();
        assert_eq!(log.len(), ERROR_LOG_ENTRIES);
        assert_eq!(count, ERROR_LOG_ENTRIES as u64 + 5);
        assert_eq!(log[0].cmdid, ERROR_LOG_ENTRIES as u16 + 4);
    }

    #[test]
    fn keepalive_expiry_follows_kato() {
        let c = Controller::new(1, ControllerKind::Discovery, "h".into(), [0; 16], 100, 1, DataBudget::unlimited());
        c.touch();
        let r = c.keepalive_remaining().unwrap();
        assert!(r <= Duration::from_millis(100) && r > Duration::ZERO);
        let c0 = ctrl();
        assert_eq!(c0.keepalive_remaining(), None);
    }
}
