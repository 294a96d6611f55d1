//! NVM subsystems and their namespaces.
//!
//! A [`Subsystem`] is what a host connects to by NQN: a set of namespaces,
//! an access list of host NQNs, and the controllers created for the hosts
//! connected to it. A [`Namespace`] is a
//! [`BlockDevice`](strata_block::BlockDevice) with the identity a host sees
//! (NSID, NGUID, UUID, EUI-64); it is defined in `namespace` and
//! re-exported here, its public path.
//!
//! Namespace changes (add, remove, resize) are announced to every
//! controller of the subsystem, which turns them into Asynchronous Event
//! notices and Changed Namespace List entries.
//!
//! Asymmetric Namespace Access: all of a subsystem's namespaces form one
//! ANA group ([`ANA_GROUP`]) whose state says how this node's ports reach
//! them: optimized where the namespaces are served here, otherwise the
//! state a cluster sets ([`Subsystem::set_ana_state`]). A change is
//! announced as an ANA Change notice, and I/O through a path that does
//! not serve gets the ANA path status, which makes a host retry on
//! another path rather than fail the I/O.
//!
//! Locking: the namespace map and the controller list each sit behind a
//! short `std::sync` lock that is never held across an `.await`.
//!
//! This module and `controller` import each other, deliberately: see the
//! controller module's doc.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use strata_nvme::log_page::{AnaGroup, AnaLog, AnaState};

use crate::controller::Controller;
use crate::io_stats::{IoCounters, NamespaceIoStats};
pub use crate::namespace::{Namespace, NamespaceIds};

/// Errors from changing a subsystem's namespaces.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubsystemError {
    /// NSID 0 and 0xFFFFFFFF are reserved, and NSIDs above the
    /// subsystem's maximum are refused.
    #[error("namespace id {nsid} is not usable (1..={max})")]
    InvalidNsid {
        /// The refused NSID.
        nsid: u32,
        /// The subsystem's highest NSID.
        max: u32,
    },
    /// The NSID is already in use.
    #[error("namespace id {0} is already in use in this subsystem")]
    NsidInUse(u32),
    /// No namespace has that NSID.
    #[error("no namespace {0} in this subsystem")]
    NoSuchNamespace(u32),
}

/// The ANA group of every namespace of a subsystem: one group, since a
/// subsystem's namespaces are served (or not) together.
pub const ANA_GROUP: u32 = 1;

/// An active namespace with its SMART I/O counters and its
/// reservations (both outlive a swap of its device).
pub(crate) struct NsEntry {
    pub(crate) ns: Arc<Namespace>,
    pub(crate) counters: Arc<IoCounters>,
    pub(crate) reservations: Arc<crate::reservation::ReservationCell>,
}

/// An NVM subsystem.
pub struct Subsystem {
    nqn: String,
    serial: String,
    model: String,
    max_nsid: u32,
    internal: bool,
    namespaces: RwLock<BTreeMap<u32, Arc<NsEntry>>>,
    allowed_hosts: RwLock<Vec<String>>,
    controllers: Mutex<Vec<Weak<Controller>>>,
    /// The namespaces' SMART I/O counters.
    pub(crate) io_stats: NamespaceIoStats,
    /// The ANA group's state and change count (see [`Subsystem::set_ana_state`]).
    ana: Mutex<(AnaState, u64)>,
    /// The state's code, read by every I/O without the lock.
    ana_code: AtomicU8,
    /// Reservations are served (see [`Subsystem::serve_reservations`]).
    reservations: std::sync::atomic::AtomicBool,
    /// Where they are kept (see [`Subsystem::keep_reservations_in`]).
    reservation_store: RwLock<Option<Arc<dyn crate::reservation::ReservationStore>>>,
    /// Itself, for the namespaces' reservations to reach its controllers.
    me: Weak<Subsystem>,
    /// Namespace masking: the hosts each masked NSID is visible to (see
    /// [`Subsystem::set_namespace_hosts`]).
    masks: RwLock<BTreeMap<u32, Vec<String>>>,
    /// True once any NSID was masked: until then the I/O path skips the
    /// masks' lock.
    masked: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Subsystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subsystem").field("nqn", &self.nqn).finish()
    }
}

impl Subsystem {
    /// A subsystem with no namespaces. `serial` is reported as the
    /// controllers' serial number (20 ASCII characters at most); an empty
    /// `allowed_hosts` lets any host connect.
    pub fn new(nqn: impl Into<String>, serial: impl Into<String>, allowed_hosts: Vec<String>) -> Arc<Subsystem> {
        Subsystem::with_max_nsid(nqn, serial, allowed_hosts, crate::config::MAX_NSID)
    }

    /// As [`Subsystem::new`], with NSIDs up to `max_nsid` (at most
    /// 0xFFFFFFFE) instead of [`MAX_NSID`](crate::MAX_NSID). The internal
    /// fabric names a replica by its volume id, so its subsystem needs the
    /// whole range.
    pub fn with_max_nsid(
        nqn: impl Into<String>,
        serial: impl Into<String>,
        allowed_hosts: Vec<String>,
        max_nsid: u32,
    ) -> Arc<Subsystem> {
        Subsystem::build(nqn.into(), serial.into(), allowed_hosts, max_nsid, false)
    }

    fn build(nqn: String, serial: String, allowed_hosts: Vec<String>, max_nsid: u32, internal: bool) -> Arc<Subsystem> {
        Arc::new_cyclic(|me| Subsystem {
            me: me.clone(),
            nqn,
            serial,
            model: "strata".into(),
            max_nsid: max_nsid.clamp(1, u32::MAX - 1),
            internal,
            namespaces: RwLock::new(BTreeMap::new()),
            allowed_hosts: RwLock::new(allowed_hosts),
            controllers: Mutex::new(Vec::new()),
            io_stats: Default::default(),
            ana: Mutex::new((AnaState::Optimized, 0)),
            ana_code: AtomicU8::new(AnaState::Optimized.code()),
            reservations: std::sync::atomic::AtomicBool::new(false),
            reservation_store: RwLock::new(None),
            masks: RwLock::new(BTreeMap::new()),
            masked: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Serves the reservation commands and enforces reservations on I/O
    /// (off by default: without it the commands are Invalid Opcode and
    /// Identify announces none). Only where one target sees every host's
    /// commands for the namespace: a pool volume's paths do not yet carry
    /// the host's identity to its owner.
    pub fn serve_reservations(&self, on: bool) {
        self.reservations.store(on, Ordering::Release);
    }

    /// Whether reservations are served.
    pub fn serves_reservations(&self) -> bool {
        self.reservations.load(Ordering::Acquire)
    }

    /// Keeps every change of a namespace's reservations in `store` before
    /// the command completes, which lets hosts set Persist Through Power
    /// Loss (without a store their request is ignored, as nvmet does).
    pub fn keep_reservations_in(&self, store: Arc<dyn crate::reservation::ReservationStore>) {
        *self.reservation_store.write().unwrap_or_else(|e| e.into_inner()) = Some(store);
    }

    /// Where reservation changes are kept, if anywhere.
    pub fn reservation_store(&self) -> Option<Arc<dyn crate::reservation::ReservationStore>> {
        self.reservation_store.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// An internal subsystem, for the fabric between storage nodes: served
    /// only on [`PortRole::Fabric`](crate::PortRole::Fabric) listeners,
    /// never listed in discovery, with NSIDs up to 0xFFFFFFFE (a replica's
    /// NSID is its volume id).
    pub fn internal(nqn: impl Into<String>, serial: impl Into<String>, allowed_hosts: Vec<String>) -> Arc<Subsystem> {
        Subsystem::build(nqn.into(), serial.into(), allowed_hosts, u32::MAX - 1, true)
    }

    /// True for an internal (fabric) subsystem.
    pub fn is_internal(&self) -> bool {
        self.internal
    }

    /// The subsystem NQN.
    pub fn nqn(&self) -> &str {
        &self.nqn
    }

    /// Serial number reported by its controllers.
    pub fn serial(&self) -> &str {
        &self.serial
    }

    /// Model number reported by its controllers.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The highest NSID a namespace may have (Identify Controller NN).
    pub fn max_nsid(&self) -> u32 {
        self.max_nsid
    }

    /// True when `hostnqn` may connect.
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        let hosts = self.allowed_hosts.read().unwrap_or_else(|e| e.into_inner());
        hosts.is_empty() || hosts.iter().any(|h| h == hostnqn)
    }

    /// The host access list (empty = any host).
    pub fn allowed_hosts(&self) -> Vec<String> {
        self.allowed_hosts.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the host access list (empty = any host). Controllers of
    /// hosts the new list leaves out are torn down: access control holds
    /// for connected hosts too.
    pub fn set_allowed_hosts(&self, hosts: Vec<String>) {
        *self.allowed_hosts.write().unwrap_or_else(|e| e.into_inner()) = hosts;
        for c in self.controllers() {
            if !self.host_allowed(c.hostnqn()) {
                tracing::info!(subnqn = %self.nqn, hostnqn = c.hostnqn(), cntlid = c.cntlid(),
                    "host no longer allowed; tearing down its controller");
                c.kill();
            }
        }
    }

    /// Masks namespace `nsid` to `hosts` (empty: no mask, every host the
    /// subsystem admits sees it). A host it is masked from does not find
    /// it in the active namespace list, reads zeroes for its Identify
    /// Namespace and gets Invalid Namespace for its commands, as if it did
    /// not exist. Controllers whose view changes get a Namespace Attribute
    /// Changed notice and the NSID in their changed-namespace log. The
    /// mask may be set before the namespace is added, so that it is never
    /// visible unmasked.
    pub fn set_namespace_hosts(&self, nsid: u32, hosts: Vec<String>) {
        let before: Vec<(Arc<Controller>, bool)> =
            self.controllers().into_iter().map(|c| (c.clone(), self.visible(nsid, c.hostnqn()))).collect();
        {
            let mut masks = self.masks.write().unwrap_or_else(|e| e.into_inner());
            if hosts.is_empty() {
                masks.remove(&nsid);
            } else {
                masks.insert(nsid, hosts);
                self.masked.store(true, Ordering::Release);
            }
        }
        let present = self.entry(nsid).is_some();
        for (c, was) in before {
            if present && was != self.visible(nsid, c.hostnqn()) {
                c.notify_namespace_changed(nsid);
            }
        }
    }

    /// The hosts namespace `nsid` is masked to (empty: not masked).
    pub fn namespace_hosts(&self, nsid: u32) -> Vec<String> {
        self.masks.read().unwrap_or_else(|e| e.into_inner()).get(&nsid).cloned().unwrap_or_default()
    }

    /// True when host `hostnqn` may see namespace `nsid` (whether or not
    /// it exists).
    pub fn visible(&self, nsid: u32, hostnqn: &str) -> bool {
        if !self.masked.load(Ordering::Acquire) {
            return true;
        }
        self.masks.read().unwrap_or_else(|e| e.into_inner()).get(&nsid).is_none_or(|h| h.iter().any(|x| x == hostnqn))
    }

    /// The namespace with `nsid` if it is active and `hostnqn` may see it.
    pub fn namespace_for(&self, nsid: u32, hostnqn: &str) -> Option<Arc<Namespace>> {
        self.namespace(nsid).filter(|_| self.visible(nsid, hostnqn))
    }

    /// The active NSIDs `hostnqn` may see, in order.
    pub fn nsids_for(&self, hostnqn: &str) -> Vec<u32> {
        self.nsids().into_iter().filter(|&n| self.visible(n, hostnqn)).collect()
    }

    /// The namespace with `nsid`, if active.
    pub fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        self.entry(nsid).map(|e| e.ns.clone())
    }

    /// The namespace with `nsid` and its SMART counters, in one lookup:
    /// the I/O path takes both per command.
    pub(crate) fn entry(&self, nsid: u32) -> Option<Arc<NsEntry>> {
        self.namespaces.read().unwrap_or_else(|e| e.into_inner()).get(&nsid).cloned()
    }

    /// All active namespaces with their counters, in NSID order.
    pub(crate) fn entries(&self) -> Vec<Arc<NsEntry>> {
        self.namespaces.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// All active namespaces in NSID order.
    pub fn namespaces(&self) -> Vec<Arc<Namespace>> {
        self.namespaces.read().unwrap_or_else(|e| e.into_inner()).values().map(|e| e.ns.clone()).collect()
    }

    /// Active NSIDs in order.
    pub fn nsids(&self) -> Vec<u32> {
        self.namespaces.read().unwrap_or_else(|e| e.into_inner()).keys().copied().collect()
    }

    /// Adds a namespace and notifies connected controllers.
    ///
    /// # Errors
    ///
    /// [`SubsystemError::InvalidNsid`] or [`SubsystemError::NsidInUse`].
    pub fn add_namespace(&self, ns: Namespace) -> Result<(), SubsystemError> {
        let nsid = ns.nsid;
        if nsid == 0 || nsid > self.max_nsid {
            return Err(SubsystemError::InvalidNsid { nsid, max: self.max_nsid });
        }
        {
            let mut map = self.namespaces.write().unwrap_or_else(|e| e.into_inner());
            if map.contains_key(&nsid) {
                return Err(SubsystemError::NsidInUse(nsid));
            }
            let counters = self.io_stats.counters_for(&ns);
            let reservations: Arc<crate::reservation::ReservationCell> = ns.reservations.clone().unwrap_or_default();
            reservations.served_in(self.me.clone(), nsid);
            map.insert(nsid, Arc::new(NsEntry { ns: Arc::new(ns), counters, reservations }));
        }
        self.namespace_changed(nsid);
        Ok(())
    }

    /// Removes a namespace and notifies connected controllers. I/O already
    /// running against it finishes; new commands get Invalid Namespace.
    ///
    /// # Errors
    ///
    /// [`SubsystemError::NoSuchNamespace`].
    pub fn remove_namespace(&self, nsid: u32) -> Result<Arc<Namespace>, SubsystemError> {
        let ns = self
            .namespaces
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&nsid)
            .ok_or(SubsystemError::NoSuchNamespace(nsid))?;
        self.masks.write().unwrap_or_else(|e| e.into_inner()).remove(&nsid);
        self.namespace_changed(nsid);
        Ok(ns.ns.clone())
    }

    /// Puts `ns` in place of the namespace with its NSID, keeping its SMART
    /// counters; I/O already running against the old one finishes there,
    /// new commands go to `ns`. Connected controllers are told only when
    /// what they see changed (identifiers or size): a pool node that
    /// takes a volume over swaps the path it served for the volume itself
    /// and its hosts stay connected. The old namespace is returned.
    ///
    /// # Errors
    ///
    /// [`SubsystemError::NoSuchNamespace`].
    pub fn replace_namespace(&self, mut ns: Namespace) -> Result<Arc<Namespace>, SubsystemError> {
        let nsid = ns.nsid;
        let (old, seen_changed) = {
            let mut map = self.namespaces.write().unwrap_or_else(|e| e.into_inner());
            let old = map.get(&nsid).cloned().ok_or(SubsystemError::NoSuchNamespace(nsid))?;
            let seen_changed = old.ns.ids != ns.ids || old.ns.device.geometry() != ns.device.geometry();
            // The reservations stay, unless the new namespace brings its
            // own (a node that took a pool volume over, with the state
            // it loaded).
            let reservations = ns.reservations.clone().unwrap_or_else(|| old.reservations.clone());
            reservations.served_in(self.me.clone(), nsid);
            let counters = old.counters.clone();
            if ns.metrics.is_none() {
                ns.metrics = old.ns.metrics.clone();
            }
            map.insert(nsid, Arc::new(NsEntry { ns: Arc::new(ns), counters, reservations }));
            (old, seen_changed)
        };
        if seen_changed {
            self.namespace_changed(nsid);
        }
        Ok(old.ns.clone())
    }

    /// Tells connected controllers that namespace `nsid` changed (e.g. its
    /// device was resized), raising a Namespace Attribute Changed event.
    pub fn namespace_changed(&self, nsid: u32) {
        for c in self.controllers() {
            c.notify_namespace_changed(nsid);
        }
    }

    /// The ANA state of this subsystem's namespaces through this node's
    /// ports ([`AnaState::Optimized`] until set).
    pub fn ana_state(&self) -> AnaState {
        AnaState::from_code(self.ana_code.load(Ordering::Acquire)).unwrap_or(AnaState::Inaccessible)
    }

    /// Sets the ANA state of this subsystem's namespaces through this
    /// node's ports. A change bumps the change count and sends connected
    /// controllers an ANA Change notice; I/O admitted from then on gets
    /// the path status of a state that does not serve.
    pub fn set_ana_state(&self, state: AnaState) {
        {
            let mut ana = self.ana.lock().unwrap_or_else(|e| e.into_inner());
            if ana.0 == state {
                return;
            }
            *ana = (state, ana.1 + 1);
            self.ana_code.store(state.code(), Ordering::Release);
        }
        tracing::info!(nqn = %self.nqn, ?state, "ANA state changed");
        for c in self.controllers() {
            c.notify_ana_changed();
        }
    }

    /// The ANA log page this subsystem's controllers return: its one group
    /// with every active namespace.
    pub(crate) fn ana_log(&self) -> AnaLog {
        let (state, chgcnt) = *self.ana.lock().unwrap_or_else(|e| e.into_inner());
        let nsids = self.namespaces.read().unwrap_or_else(|e| e.into_inner()).keys().copied().collect();
        AnaLog { chgcnt, groups: vec![AnaGroup { grpid: ANA_GROUP, chgcnt, state, nsids }] }
    }

    pub(crate) fn register_controller(&self, c: &Arc<Controller>) {
        let mut list = self.controllers.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(c));
    }

    /// Live controllers of this subsystem.
    pub fn controllers(&self) -> Vec<Arc<Controller>> {
        let mut list = self.controllers.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.iter().filter_map(Weak::upgrade).collect()
    }
}
