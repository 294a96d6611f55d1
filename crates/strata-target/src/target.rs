//! The target: subsystems, ports, controller registry, the Connect
//! command and the discovery log page. Binding a port and accepting its
//! connections is `listener`'s job, serving a connection `conn`'s; both
//! build on the [`TargetInner`] state kept here.
//!
//! One [`Target`] serves any number of NVM subsystems plus the discovery
//! subsystem. Each TCP listener is a port with a role: a discovery port
//! accepts only the discovery NQN; an I/O port accepts every subsystem
//! (and the discovery NQN too, as the kernel's nvmet does, so that
//! `nvme discover -s 4420` works). The discovery log lists, for the
//! connecting host, every subsystem it may access on every I/O port, plus
//! the discovery ports themselves.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use strata_nvme::completion::Cqe;
use strata_nvme::fabrics::{
    CNTLID_DYNAMIC, CONNECT_AUTHREQ_ATR, CONNECT_CNTLID_OFFSET, CONNECT_HOSTNQN_OFFSET, CONNECT_QID_OFFSET,
    CONNECT_RECFMT_OFFSET, CONNECT_SQSIZE_OFFSET, CONNECT_SUBNQN_OFFSET, ConnectCmd, ConnectData, DISCOVERY_NQN,
    connect_invalid_param_result,
};
use strata_nvme::log_page::{self as lp, DiscoveryEntry};
use strata_nvme::status::Status;
use tokio::sync::watch;

use strata_auth::{HostKeys, PskIdentity, TlsPsk};
use strata_tls::TlsMode;

use crate::access::{AccessEvent, AccessKind, AccessSink};
use crate::admission::{Admission, TargetStats};
use crate::budget::{Budget, DataBudget};
use crate::config::{MAX_QUEUE_SIZE, TargetConfig};
use crate::controller::{Controller, ControllerKind};
use crate::subsystem::Subsystem;
use crate::transport::Command;

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortRole {
    /// Only the discovery subsystem (default port 8009).
    Discovery,
    /// NVM subsystems, and discovery (default port 4420).
    Io,
    /// Only internal subsystems: the fabric between storage nodes. Hosts'
    /// subsystems and discovery are refused here, and internal subsystems
    /// are refused on the other roles and never listed in discovery.
    Fabric,
}

/// A subsystem served by another node of the cluster, listed in this
/// node's discovery log so that a host finds every volume at its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSubsystem {
    /// Its NQN.
    pub nqn: String,
    /// Where its owner serves it.
    pub addr: SocketAddr,
    /// Hosts allowed to connect (empty: any host).
    pub allowed_hosts: Vec<String>,
}

/// A listening port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Port {
    /// Port ID reported in the discovery log.
    pub portid: u16,
    /// Bound address.
    pub addr: SocketAddr,
    /// Role.
    pub role: PortRole,
    /// What the port asks of hosts for TLS (always off on a fabric port).
    pub tls: TlsMode,
}

/// Errors from managing a target.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// A subsystem with this NQN exists already.
    #[error("subsystem {0} already exists")]
    SubsystemExists(String),
    /// The NQN is reserved for discovery.
    #[error("{0} is the discovery NQN and cannot name an NVM subsystem")]
    ReservedNqn(String),
    /// OpenSSL cannot give the TLS a port asks for.
    #[error("TLS: {0}")]
    Tls(String),
    /// Binding a listener failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The state the [`Target`] handle and every connection of it share.
pub(crate) struct TargetInner {
    pub(crate) config: TargetConfig,
    subsystems: RwLock<BTreeMap<String, Arc<Subsystem>>>,
    remote: RwLock<Vec<RemoteSubsystem>>,
    /// The ports listening now, in the order they were bound.
    pub(crate) ports: RwLock<Vec<Port>>,
    /// The discovery log's generation counter: bumped whenever what the
    /// log shows changes.
    pub(crate) genctr: AtomicU64,
    /// Live controllers by subsystem NQN and controller ID: an ID is
    /// unique within its subsystem (as hosts require), not across them.
    controllers: Mutex<HashMap<(String, u16), Weak<Controller>>>,
    /// Where the search for a free controller ID starts.
    next_cntlid: Mutex<u16>,
    pub(crate) shutdown: watch::Sender<bool>,
    pub(crate) admission: Arc<Admission>,
    /// Half of `io_buffer_budget`: what I/O queues prepay at Connect.
    pub(crate) queue_budget: Arc<Budget>,
    /// The other half: data charged as it moves (R2T buffers, large reads,
    /// large admin answers). Kept apart, so that hosts holding data
    /// buffers cannot keep new queues out, nor many queues starve data.
    pub(crate) budget: Arc<Budget>,
    /// The budget as I/O commands charge it (see `budget::DataBudget`).
    pub(crate) data_budget: DataBudget,
    executors: RwLock<Vec<tokio::runtime::Handle>>,
    next_executor: AtomicUsize,
    /// DH-HMAC-CHAP keys by host NQN: a host listed here must
    /// authenticate every queue it connects to an NVM subsystem.
    host_keys: RwLock<HashMap<String, Arc<HostKeys>>>,
    /// The keys every host of an internal subsystem (the fabric between
    /// nodes) must prove, whatever its NQN.
    fabric_keys: RwLock<Option<Arc<HostKeys>>>,
    /// Where access events go (an audit trail), if anywhere.
    access_sink: RwLock<Option<AccessSink>>,
    /// Configured TLS PSKs by host NQN (`NVMeTLSkey-1`), for ports with
    /// TLS.
    tls_psks: Arc<RwLock<HashMap<String, TlsPsk>>>,
    /// The TLS server context, built by the first port with TLS.
    tls_ctx: std::sync::OnceLock<openssl::ssl::SslContext>,
    /// Data-path metrics of volumes and hosts.
    io_metrics: crate::io_metrics::IoMetricsRegistry,
}

/// An NVMe/TCP target.
#[derive(Clone)]
pub struct Target {
    pub(crate) inner: Arc<TargetInner>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("ports", &self.ports()).finish()
    }
}

impl Target {
    /// A target with no subsystems and no listeners.
    pub fn new(config: TargetConfig) -> Target {
        let (shutdown, _) = watch::channel(false);
        let admission = Arc::new(Admission::new(config.max_connections, config.max_pending_connections));
        let queue_budget = Budget::new(config.io_buffer_budget / 2);
        let budget = Budget::new(config.io_buffer_budget - config.io_buffer_budget / 2);
        let data_budget = DataBudget { budget: budget.clone(), prepaid: config.in_capsule_data };
        let (all_lo, all_hi) = (*crate::config::CNTLIDS.start(), *crate::config::CNTLIDS.end());
        let lo = (*config.cntlids.start()).clamp(all_lo, all_hi);
        let cntlids = lo..=(*config.cntlids.end()).clamp(lo, all_hi);
        let config = TargetConfig { cntlids, ..config };
        Target {
            inner: Arc::new(TargetInner {
                subsystems: RwLock::new(BTreeMap::new()),
                remote: RwLock::new(Vec::new()),
                ports: RwLock::new(Vec::new()),
                genctr: AtomicU64::new(1),
                controllers: Mutex::new(HashMap::new()),
                next_cntlid: Mutex::new(all_lo),
                shutdown,
                admission,
                data_budget,
                queue_budget,
                budget,
                executors: RwLock::new(Vec::new()),
                next_executor: AtomicUsize::new(0),
                host_keys: RwLock::new(HashMap::new()),
                fabric_keys: RwLock::new(None),
                access_sink: RwLock::new(None),
                tls_psks: Arc::new(RwLock::new(HashMap::new())),
                tls_ctx: std::sync::OnceLock::new(),
                io_metrics: crate::io_metrics::IoMetricsRegistry::new(config.io_metrics),
                config,
            }),
        }
    }

    /// The data-path metrics of volumes and hosts: a namespace takes its
    /// volume's with [`Namespace::with_metrics`](crate::Namespace::with_metrics);
    /// controllers take their host's when created.
    pub fn io_metrics(&self) -> &crate::io_metrics::IoMetricsRegistry {
        &self.inner.io_metrics
    }

    /// Adds an NVM subsystem.
    ///
    /// # Errors
    ///
    /// [`TargetError::SubsystemExists`] or [`TargetError::ReservedNqn`].
    pub fn add_subsystem(&self, sub: Arc<Subsystem>) -> Result<(), TargetError> {
        if sub.nqn() == DISCOVERY_NQN {
            return Err(TargetError::ReservedNqn(sub.nqn().into()));
        }
        let mut map = self.inner.subsystems.write().unwrap_or_else(|e| e.into_inner());
        if map.contains_key(sub.nqn()) {
            return Err(TargetError::SubsystemExists(sub.nqn().into()));
        }
        let listed = !sub.is_internal();
        map.insert(sub.nqn().into(), sub);
        drop(map);
        if listed {
            self.inner.discovery_changed();
        }
        Ok(())
    }

    /// Sets (or with `None` clears) the DH-HMAC-CHAP keys of host
    /// `hostnqn`. A host with keys must authenticate each queue it
    /// connects to an NVM subsystem (the Connect response says so, ATR);
    /// new connections and re-authentications use the keys set now, and
    /// queues already authenticated stay connected (a rotation).
    pub fn set_host_keys(&self, hostnqn: &str, keys: Option<HostKeys>) {
        let mut map = self.inner.host_keys.write().unwrap_or_else(|e| e.into_inner());
        match keys {
            Some(k) => map.insert(hostnqn.to_owned(), Arc::new(k)),
            None => map.remove(hostnqn),
        };
    }

    /// Sets the keys every connection to an internal subsystem (the
    /// fabric) must authenticate with; `None`: no authentication there.
    pub fn set_fabric_keys(&self, keys: Option<HostKeys>) {
        *self.inner.fabric_keys.write().unwrap_or_else(|e| e.into_inner()) = keys.map(Arc::new);
    }

    /// Sends every access event (connects, refusals, authentication
    /// results) to `sink` from now on.
    pub fn set_access_sink(&self, sink: AccessSink) {
        *self.inner.access_sink.write().unwrap_or_else(|e| e.into_inner()) = Some(sink);
    }

    /// Replaces every host's DH-HMAC-CHAP keys at once.
    pub fn replace_host_keys(&self, keys: HashMap<String, HostKeys>) {
        let map = keys.into_iter().map(|(k, v)| (k, Arc::new(v))).collect();
        *self.inner.host_keys.write().unwrap_or_else(|e| e.into_inner()) = map;
    }

    /// Sets (or with `None` clears) the configured TLS PSK of host
    /// `hostnqn`, which it proves in the TLS handshake on ports with TLS.
    /// New handshakes use the PSK set now; connections already up stay.
    pub fn set_tls_psk(&self, hostnqn: &str, psk: Option<TlsPsk>) {
        let mut map = self.inner.tls_psks.write().unwrap_or_else(|e| e.into_inner());
        match psk {
            Some(p) => map.insert(hostnqn.to_owned(), p),
            None => map.remove(hostnqn),
        };
    }

    /// Replaces every host's TLS PSK at once.
    pub fn replace_tls_psks(&self, psks: HashMap<String, TlsPsk>) {
        *self.inner.tls_psks.write().unwrap_or_else(|e| e.into_inner()) = psks;
    }

    /// Removes an NVM subsystem and disconnects its controllers.
    pub fn remove_subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        let sub = self.inner.subsystems.write().unwrap_or_else(|e| e.into_inner()).remove(nqn)?;
        if !sub.is_internal() {
            self.inner.discovery_changed();
        }
        for c in sub.controllers() {
            c.kill();
        }
        Some(sub)
    }

    /// Removes subsystem `sub` (and disconnects its controllers) if it is
    /// still the one registered under its NQN, not one added since.
    pub fn remove_this_subsystem(&self, sub: &Arc<Subsystem>) -> bool {
        let mut map = self.inner.subsystems.write().unwrap_or_else(|e| e.into_inner());
        if !map.get(sub.nqn()).is_some_and(|s| Arc::ptr_eq(s, sub)) {
            return false;
        }
        map.remove(sub.nqn());
        drop(map);
        if !sub.is_internal() {
            self.inner.discovery_changed();
        }
        for c in sub.controllers() {
            c.kill();
        }
        true
    }

    /// Replaces the subsystems other nodes serve, which the discovery log
    /// lists after this node's own: other nodes' subsystems, and other
    /// paths to this node's own (a pool volume is served by every node).
    /// An entry for an NQN at an address already listed is left out.
    pub fn set_remote_subsystems(&self, remote: Vec<RemoteSubsystem>) {
        let mut cur = self.inner.remote.write().unwrap_or_else(|e| e.into_inner());
        if *cur != remote {
            *cur = remote;
            drop(cur);
            self.inner.discovery_changed();
        }
    }

    /// The subsystem named `nqn`.
    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.inner.subsystem(nqn)
    }

    /// All NVM subsystems.
    pub fn subsystems(&self) -> Vec<Arc<Subsystem>> {
        self.inner.subsystems.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// The ports listening now.
    pub fn ports(&self) -> Vec<Port> {
        self.inner.ports.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Counters of connections and of hosts that misbehaved.
    pub fn stats(&self) -> TargetStats {
        self.inner.admission.stats()
    }

    /// Bytes of command data buffers held now, against
    /// [`TargetConfig::io_buffer_budget`].
    pub fn buffer_bytes_in_use(&self) -> usize {
        self.inner.queue_budget.used() + self.inner.budget.used()
    }

    /// Number of live controllers.
    pub fn controller_count(&self) -> usize {
        let mut map = self.inner.controllers.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, w| w.strong_count() > 0);
        map.len()
    }

    /// Runs new connections on these runtimes, round robin, instead of the
    /// runtime that accepts them: with one single-threaded runtime per
    /// core, a connection's PDUs, commands and completions stay on one
    /// thread (no work stealing, no cross-thread wake-ups). Each handle
    /// must belong to a runtime that keeps running (e.g. a thread in
    /// `block_on`) for as long as the target serves.
    pub fn set_executors(&self, handles: Vec<tokio::runtime::Handle>) {
        *self.inner.executors.write().unwrap_or_else(|e| e.into_inner()) = handles;
    }

    /// Stops accepting, closes every connection and waits up to `timeout`
    /// for the connection tasks to finish. Data written to the devices is
    /// not flushed here: flush the devices after this returns.
    pub async fn shutdown(&self, timeout: Duration) {
        self.inner.shutdown.send_replace(true);
        let wait = async {
            loop {
                let idle = self.inner.admission.idle.notified();
                if self.inner.admission.active() == 0 {
                    return;
                }
                idle.await;
            }
        };
        if tokio::time::timeout(timeout, wait).await.is_err() {
            tracing::warn!("connections still open after {timeout:?} at shutdown");
        }
    }
}

/// A Connect that succeeded.
pub(crate) struct Connected {
    pub(crate) ctrl: Arc<Controller>,
    pub(crate) qid: u16,
    pub(crate) sqsize: u16,
    pub(crate) sq_flow_disabled: bool,
    pub(crate) response: Cqe,
    /// The host's keys when the queue must authenticate before use.
    pub(crate) auth: Option<Arc<HostKeys>>,
}

fn invalid_param(cid: u16, in_data: bool, offset: usize) -> Cqe {
    let mut cqe = Cqe::new(cid, Status::CONNECT_INVALID_PARAMETERS.dnr());
    cqe.result = u64::from(connect_invalid_param_result(in_data, offset as u16));
    cqe
}

impl TargetInner {
    pub(crate) fn next_executor(&self) -> Option<tokio::runtime::Handle> {
        let ex = self.executors.read().unwrap_or_else(|e| e.into_inner());
        if ex.is_empty() {
            return None;
        }
        let i = self.next_executor.fetch_add(1, Ordering::Relaxed) % ex.len();
        Some(ex[i].clone())
    }

    /// Reports an access event to the sink, if there is one.
    pub(crate) fn access(&self, event: impl FnOnce() -> AccessEvent) {
        let sink = self.access_sink.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(sink) = sink {
            sink(event());
        }
    }

    /// The DH-HMAC-CHAP keys `hostnqn` must prove on `sub`: the fabric's
    /// on an internal subsystem, the host's own elsewhere; `None` when it
    /// need not authenticate.
    pub(crate) fn auth_keys(&self, sub: &Subsystem, hostnqn: &str) -> Option<Arc<HostKeys>> {
        if sub.is_internal() {
            return self.fabric_keys.read().unwrap_or_else(|e| e.into_inner()).clone();
        }
        self.host_keys.read().unwrap_or_else(|e| e.into_inner()).get(hostnqn).cloned()
    }

    pub(crate) fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.subsystems.read().unwrap_or_else(|e| e.into_inner()).get(nqn).cloned()
    }

    /// A controller ID in `range` that no live controller of subsystem
    /// `subnqn` has, round robin.
    fn allocate_cntlid(&self, subnqn: &str, range: std::ops::RangeInclusive<u16>) -> Option<u16> {
        let mut ctrls = self.controllers.lock().unwrap_or_else(|e| e.into_inner());
        ctrls.retain(|_, w| w.strong_count() > 0);
        let mut next = self.next_cntlid.lock().unwrap_or_else(|e| e.into_inner());
        let (lo, hi) = (*range.start(), *range.end());
        let mut key = (subnqn.to_string(), 0);
        for _ in range {
            let id = if (lo..=hi).contains(&*next) { *next } else { lo };
            *next = if id >= hi { lo } else { id + 1 };
            key.1 = id;
            if !ctrls.contains_key(&key) {
                return Some(id);
            }
        }
        None
    }

    /// Dead controllers of the same host (NQN and host ID) and subsystem
    /// as `ctrl` whose commands are still running.
    pub(crate) fn predecessors(&self, ctrl: &Controller) -> Vec<Arc<Controller>> {
        let same_sub = |c: &Controller| match (c.subsystem(), ctrl.subsystem()) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        self.controllers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .filter(|c| {
                c.cntlid() != ctrl.cntlid()
                    && c.is_dead()
                    && c.commands_in_flight() > 0
                    && c.hostnqn() == ctrl.hostnqn()
                    && c.hostid() == ctrl.hostid()
                    && same_sub(c)
            })
            .collect()
    }

    fn controller(&self, subnqn: &str, cntlid: u16) -> Option<Arc<Controller>> {
        let key = (subnqn.to_string(), cntlid);
        self.controllers.lock().unwrap_or_else(|e| e.into_inner()).get(&key).and_then(Weak::upgrade)
    }

    /// Executes a Connect arriving on a port with `role`.
    ///
    /// Every refusal is logged once, here, with its reason, the queue, the
    /// host and subsystem NQNs (as sent, even when they do not decode) and
    /// where the completion says the bad field is.
    ///
    /// An I/O queue joins only the controller of the same subsystem, HOSTID
    /// and host NQN.
    ///
    /// An empty host NQN is accepted wherever any host may connect (the
    /// discovery subsystem, subsystems without an access list) and refused
    /// with Connect Invalid Host elsewhere: SPDK's initiator sends one when
    /// its application set none, and SPDK's target and Linux nvmet both
    /// accept it on subsystems that allow any host.
    /// The TLS server context (built once): host PSKs come from
    /// `tls_psks` as they are at each handshake.
    ///
    /// # Errors
    ///
    /// [`TargetError::Tls`] when OpenSSL cannot do TLS 1.3 with PSKs.
    pub(crate) fn tls_context(&self) -> Result<openssl::ssl::SslContext, TargetError> {
        if let Some(c) = self.tls_ctx.get() {
            return Ok(c.clone());
        }
        let psks = self.tls_psks.clone();
        let lookup: strata_tls::PskLookup =
            Arc::new(move |id: &PskIdentity| psks.read().unwrap_or_else(|e| e.into_inner()).get(&id.hostnqn).cloned());
        let ctx = strata_tls::server::context(lookup, self.config.tls_derivation)
            .map_err(|e| TargetError::Tls(e.to_string()))?;
        Ok(self.tls_ctx.get_or_init(|| ctx).clone())
    }

    pub(crate) fn connect(
        &self,
        role: PortRole,
        peer: SocketAddr,
        cmd: &Command,
        tls: Option<&PskIdentity>,
    ) -> Result<Connected, Cqe> {
        use strata_nvme::fabrics::{CONNECT_HOSTID_OFFSET, ConnectInvalidParam};
        let sqe = &cmd.sqe;
        let cid = sqe.cid();
        let c = ConnectCmd::decode(sqe);
        let refuse = |cqe: Cqe, reason: &dyn std::fmt::Display| -> Cqe {
            let (subnqn, hostnqn) = cmd.data.as_deref().map(ConnectData::nqns_lossy).unwrap_or_default();
            let at = ConnectInvalidParam::from_dw0(cqe.dw0());
            tracing::info!(
                qid = c.qid, ?subnqn, ?hostnqn, status = %cqe.status, in_data = at.in_data, offset = at.offset,
                "connect refused: {reason}"
            );
            self.access(|| AccessEvent {
                kind: AccessKind::ConnectRefused,
                peer,
                hostnqn,
                subnqn,
                qid: c.qid,
                detail: format!("{reason} ({})", cqe.status),
            });
            cqe
        };
        if c.recfmt != 0 {
            let mut cqe = Cqe::new(cid, Status::CONNECT_INCOMPATIBLE_FORMAT.dnr());
            cqe.result = u64::from(connect_invalid_param_result(false, CONNECT_RECFMT_OFFSET as u16));
            return Err(refuse(cqe, &format_args!("record format {} is not 0", c.recfmt)));
        }
        let Some(data) = cmd.data.as_ref() else {
            return Err(refuse(Cqe::new(cid, Status::SGL_INVALID_DATA.dnr()), &"no Connect data"));
        };
        let d = ConnectData::decode(data).map_err(|e| refuse(invalid_param(cid, true, e.offset()), &e))?;
        // TLS binds the connection to the identity the host proved: it
        // may not connect as another host, nor to another subsystem.
        if let Some(id) = tls {
            if id.hostnqn != d.hostnqn {
                let mut cqe = Cqe::new(cid, Status::CONNECT_INVALID_HOST.dnr());
                cqe.result = u64::from(connect_invalid_param_result(true, CONNECT_HOSTNQN_OFFSET as u16));
                let reason = format_args!("host NQN differs from the TLS PSK identity's ({})", id.hostnqn);
                return Err(refuse(cqe, &reason));
            }
            if id.subnqn != d.subnqn {
                let reason = format_args!("subsystem NQN differs from the TLS PSK identity's ({})", id.subnqn);
                return Err(refuse(invalid_param(cid, true, CONNECT_SUBNQN_OFFSET), &reason));
            }
        }
        let max_sqsize = if c.qid == 0 { 31 } else { MAX_QUEUE_SIZE - 1 };
        if c.sqsize == 0 || c.sqsize > max_sqsize {
            let reason = format_args!("SQSIZE {} is outside 1..={max_sqsize}", c.sqsize);
            return Err(refuse(invalid_param(cid, false, CONNECT_SQSIZE_OFFSET), &reason));
        }
        let sq_flow_disabled = c.cattr & (1 << 2) != 0;
        let kind = if d.subnqn == DISCOVERY_NQN {
            if role == PortRole::Fabric {
                let cqe = invalid_param(cid, true, CONNECT_SUBNQN_OFFSET);
                return Err(refuse(cqe, &"discovery asked for on a fabric port"));
            }
            if c.qid != 0 {
                let reason = format_args!("I/O queue {} for the discovery subsystem", c.qid);
                return Err(refuse(invalid_param(cid, false, CONNECT_QID_OFFSET), &reason));
            }
            ControllerKind::Discovery
        } else {
            let sub = match (role, self.subsystem(&d.subnqn)) {
                (PortRole::Io, Some(sub)) if !sub.is_internal() => sub,
                (PortRole::Fabric, Some(sub)) if sub.is_internal() => sub,
                (PortRole::Discovery, Some(_)) => {
                    let cqe = invalid_param(cid, true, CONNECT_SUBNQN_OFFSET);
                    return Err(refuse(cqe, &"NVM subsystem asked for on a discovery port"));
                }
                (PortRole::Fabric, Some(_)) => {
                    let cqe = invalid_param(cid, true, CONNECT_SUBNQN_OFFSET);
                    return Err(refuse(cqe, &"a host subsystem asked for on a fabric port"));
                }
                // An internal subsystem does not exist for hosts.
                (PortRole::Io, None) if self.config.retry_unknown_subsystems => {
                    let mut cqe = invalid_param(cid, true, CONNECT_SUBNQN_OFFSET);
                    cqe.status = Status::CONNECT_INVALID_PARAMETERS;
                    return Err(refuse(cqe, &"no such subsystem here now (retryable)"));
                }
                (_, _) => return Err(refuse(invalid_param(cid, true, CONNECT_SUBNQN_OFFSET), &"no such subsystem")),
            };
            if !sub.host_allowed(&d.hostnqn) {
                let mut cqe = Cqe::new(cid, Status::CONNECT_INVALID_HOST.dnr());
                cqe.result = u64::from(connect_invalid_param_result(true, CONNECT_HOSTNQN_OFFSET as u16));
                return Err(refuse(cqe, &"host not allowed"));
            }
            ControllerKind::Io(sub)
        };
        // A host with keys authenticates every queue to an NVM subsystem,
        // as Linux nvmet asks, and every node every queue of the fabric
        // (discovery is not covered).
        let auth = match &kind {
            ControllerKind::Io(sub) => self.auth_keys(sub, &d.hostnqn),
            ControllerKind::Discovery => None,
        };
        let atr = if auth.is_some() { CONNECT_AUTHREQ_ATR } else { 0 };
        if c.qid == 0 {
            if d.cntlid != CNTLID_DYNAMIC {
                let reason = format_args!("CNTLID {:#x} on an admin queue (only FFFFh, dynamic)", d.cntlid);
                return Err(refuse(invalid_param(cid, true, CONNECT_CNTLID_OFFSET), &reason));
            }
            // The target's range keeps a host's paths to one subsystem
            // through several nodes apart; the fabric and discovery are
            // not paths, and take from every ID (a fabric subsystem has a
            // controller per peer).
            let range = match &kind {
                ControllerKind::Io(sub) if !sub.is_internal() => self.config.cntlids.clone(),
                _ => crate::config::CNTLIDS,
            };
            let Some(cntlid) = self.allocate_cntlid(&d.subnqn, range) else {
                return Err(refuse(Cqe::new(cid, Status::CONNECT_CONTROLLER_BUSY), &"no controller ID free"));
            };
            let ctrl = Controller::new(
                cntlid,
                kind.clone(),
                d.hostnqn.clone(),
                d.hostid,
                c.kato,
                self.config.max_io_queues,
                self.data_budget.clone(),
            );
            ctrl.touch();
            if let ControllerKind::Io(sub) = &kind {
                if !sub.is_internal() {
                    ctrl.set_host_metrics(self.io_metrics.host(&d.hostnqn));
                }
                sub.register_controller(&ctrl);
            }
            let key = (d.subnqn.clone(), cntlid);
            self.controllers.lock().unwrap_or_else(|e| e.into_inner()).insert(key, Arc::downgrade(&ctrl));
            tracing::info!(cntlid, subnqn = %d.subnqn, hostnqn = %d.hostnqn, kato_ms = c.kato, "controller created");
            self.access(|| AccessEvent {
                kind: AccessKind::Connected,
                peer,
                hostnqn: d.hostnqn.clone(),
                subnqn: d.subnqn.clone(),
                qid: 0,
                detail: format!("controller {cntlid}{}", if atr != 0 { ", authentication required" } else { "" }),
            });
            let mut response = Cqe::new(cid, Status::SUCCESS);
            response.result = u64::from(u32::from(cntlid) | atr);
            return Ok(Connected { ctrl, qid: 0, sqsize: c.sqsize, sq_flow_disabled, response, auth });
        }
        // An I/O queue joins an existing controller of the same host and
        // subsystem.
        let Some(ctrl) = self.controller(&d.subnqn, d.cntlid).filter(|ctrl| !ctrl.is_dead()) else {
            let reason = format_args!("no controller {:#x}", d.cntlid);
            return Err(refuse(invalid_param(cid, true, CONNECT_CNTLID_OFFSET), &reason));
        };
        let same_subsystem = ctrl.subsystem().is_some_and(|s| s.nqn() == d.subnqn);
        if !same_subsystem {
            let reason = format_args!("controller {:#x} belongs to another subsystem", d.cntlid);
            return Err(refuse(invalid_param(cid, true, CONNECT_SUBNQN_OFFSET), &reason));
        }
        // The association's host is its HOSTID and HOSTNQN (NVMe-oF 1.1
        // section 3.3); FreeBSD's nvmft checks both, HOSTID first, while
        // nvmet compares only the NQN. Linux, SPDK and strata hosts send
        // one HOSTID for all queues.
        if ctrl.hostid() != d.hostid {
            let reason = format_args!("HOSTID differs from controller {:#x}'s", d.cntlid);
            return Err(refuse(invalid_param(cid, true, CONNECT_HOSTID_OFFSET), &reason));
        }
        if ctrl.hostnqn() != d.hostnqn {
            let reason = format_args!("host NQN differs from controller {:#x}'s", d.cntlid);
            return Err(refuse(invalid_param(cid, true, CONNECT_HOSTNQN_OFFSET), &reason));
        }
        ctrl.attach_io_queue(c.qid).map_err(|status| {
            if status == Status::COMMAND_SEQUENCE {
                refuse(Cqe::new(cid, status.dnr()), &"controller not enabled (CC.EN is 0)")
            } else {
                let reason = format_args!("QID {} not granted or already connected", c.qid);
                refuse(invalid_param(cid, false, CONNECT_QID_OFFSET), &reason)
            }
        })?;
        ctrl.touch();
        let mut response = Cqe::new(cid, Status::SUCCESS);
        response.result = u64::from(u32::from(ctrl.cntlid()) | atr);
        Ok(Connected { ctrl, qid: c.qid, sqsize: c.sqsize, sq_flow_disabled, response, auth })
    }

    /// The discovery log changed: a new generation, and a Discovery Log
    /// Page Change notice to every discovery controller that asked for
    /// them (a persistent one, `nvme discover --persistent`).
    fn discovery_changed(&self) {
        self.genctr.fetch_add(1, Ordering::Relaxed);
        let discovery: Vec<Arc<Controller>> = self
            .controllers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|((nqn, _), _)| nqn == DISCOVERY_NQN)
            .filter_map(|(_, w)| w.upgrade())
            .collect();
        for c in discovery {
            c.notify_discovery_changed();
        }
    }

    /// The discovery log page as seen by `hostnqn` connected through
    /// `local`: NVM subsystems it may access on each I/O port, then the
    /// discovery ports.
    pub(crate) fn discovery_log(&self, hostnqn: &str, local: SocketAddr) -> Vec<u8> {
        let ports = self.ports.read().unwrap_or_else(|e| e.into_inner()).clone();
        let subs: Vec<Arc<Subsystem>> =
            self.subsystems.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        let entry = |port: &Port, subtype: u8, nqn: &str| {
            // A wildcard listener is reported with the address the host
            // reached us on, which is one it can connect to.
            let ip = if port.addr.ip().is_unspecified() { local.ip() } else { port.addr.ip() };
            let adrfam = if ip.is_ipv4() { lp::ADRFAM_IPV4 } else { lp::ADRFAM_IPV6 };
            let mut e =
                DiscoveryEntry::tcp(adrfam, subtype, port.portid, &ip.to_string(), &port.addr.port().to_string(), nqn);
            set_secure_channel(&mut e, port.tls);
            e
        };
        let mut entries = Vec::new();
        for port in ports.iter().filter(|p| p.role == PortRole::Io) {
            for sub in subs.iter().filter(|s| !s.is_internal() && s.host_allowed(hostnqn)) {
                entries.push(entry(port, lp::SUBTYPE_NVME, sub.nqn()));
            }
        }
        let remote = self.remote.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut listed: Vec<(String, SocketAddr)> = Vec::new();
        for port in ports.iter().filter(|p| p.role == PortRole::Io) {
            for sub in subs.iter().filter(|s| !s.is_internal()) {
                listed.push((sub.nqn().to_string(), port.addr));
                if port.addr.ip().is_unspecified() {
                    listed.push((sub.nqn().to_string(), SocketAddr::new(local.ip(), port.addr.port())));
                }
            }
        }
        for r in remote.iter().filter(|r| r.allowed_hosts.is_empty() || r.allowed_hosts.iter().any(|h| h == hostnqn)) {
            if listed.iter().any(|(nqn, at)| *nqn == r.nqn && *at == r.addr) {
                continue;
            }
            listed.push((r.nqn.clone(), r.addr));
            let adrfam = if r.addr.is_ipv4() { lp::ADRFAM_IPV4 } else { lp::ADRFAM_IPV6 };
            let mut e = DiscoveryEntry::tcp(
                adrfam,
                lp::SUBTYPE_NVME,
                0,
                &r.addr.ip().to_string(),
                &r.addr.port().to_string(),
                &r.nqn,
            );
            set_secure_channel(&mut e, self.config.tls);
            entries.push(e);
        }
        for port in ports.iter().filter(|p| p.role == PortRole::Discovery) {
            entries.push(entry(port, lp::SUBTYPE_CURRENT_DISCOVERY, DISCOVERY_NQN));
        }
        lp::encode_discovery_log(self.genctr.load(Ordering::Relaxed), &entries)
    }
}

/// TREQ and SECTYPE of a discovery entry for a port in `mode`: what nvmet
/// reports for `addr_tsas` none / tls1.3 (with `addr_treq` not required or
/// required).
fn set_secure_channel(e: &mut DiscoveryEntry, mode: TlsMode) {
    let (treq, sectype) = match mode {
        TlsMode::Off => (lp::TREQ_SECURE_CHANNEL_NOT_REQUIRED, lp::TCP_SECTYPE_NONE),
        TlsMode::Allowed => (lp::TREQ_SECURE_CHANNEL_NOT_REQUIRED, lp::TCP_SECTYPE_TLS13),
        TlsMode::Required => (lp::TREQ_SECURE_CHANNEL_REQUIRED, lp::TCP_SECTYPE_TLS13),
    };
    e.treq = treq;
    e.set_tcp_sectype(sectype);
}
