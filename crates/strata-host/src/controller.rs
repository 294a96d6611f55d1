//! A connected controller: association setup, the admin command set, and
//! I/O over one or more I/O queues.
//!
//! [`Controller::connect`] follows the order the Linux initiator uses:
//! admin queue (ICReq, Connect with the dynamic controller ID), Property
//! Get CAP and VS, Property Set CC (EN, IOSQES 6, IOCQES 4), poll CSTS.RDY
//! under a deadline, Identify Controller, Set Features Number of Queues,
//! then one TCP connection and Connect per I/O queue. A background task
//! sends Keep Alive every KATO/2 unless the config turns it off.
//!
//! Transfer sizing is done here, not in the queue engine: writes up to
//! IOCCSZ*16-64 bytes travel in-capsule on I/O queues (8 KiB on the admin
//! queue, as the kernel does), reads and writes beyond MDTS are refused
//! locally with [`HostError::TransferTooLarge`], and block counts come
//! from each namespace's formatted LBA size, learned by Identify
//! Namespace on first use and cached (a block size does not change while
//! the namespace exists; its size may, which is why the host never checks
//! LBAs against NSZE and leaves that to the controller).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::RwLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use strata_nvme::command::{
    self, DSM_MAX_RANGES, DsmRange, GetLogPage, ReadWrite, Sqe, WriteZeroes, admin, feature, fenced, io,
};
use strata_nvme::completion::Cqe;
use strata_nvme::fabrics::{
    self, CNTLID_DYNAMIC, ConnectCmd, ConnectData, ConnectInvalidParam, NQN_MAX_LEN, PropertyCmd, fctype, reg,
};
use strata_nvme::identify::{
    self as id, Cns, IDENTIFY_DATA_LEN, IdentifyController, IdentifyNamespace, NsIdDescriptor,
};
use strata_nvme::pdu::Digests;

use crate::auth::AuthSteps;
use crate::config::HostConfig;
use crate::driver::QueueDriver;
use crate::error::HostError;
use crate::proto::Command;
use crate::queue::{QueueHandle, QueueParams, TlsParams};

/// In-capsule data on the admin queue (the kernel's
/// `NVME_TCP_ADMIN_CCSZ`); Connect data (1 KiB) always fits.
pub const ADMIN_IN_CAPSULE_BYTES: usize = 8192;
/// Largest transfer of one admin command; longer log pages are read in
/// pieces.
pub const ADMIN_MAX_TRANSFER_BYTES: usize = 1 << 20;
/// Largest transfer of one I/O command when the controller reports no
/// limit (MDTS 0) or a larger one.
pub const MAX_TRANSFER_CAP_BYTES: usize = 16 << 20;
/// Most blocks in one Read, Write, Compare or Write Zeroes (NLB is a
/// 16-bit, 0-based field).
pub const MAX_BLOCKS_PER_COMMAND: u32 = 65536;

/// A controller association: an admin queue and its I/O queues.
///
/// Methods take `&self`; share a `Controller` between tasks with an
/// `Arc`. I/O methods on the controller pick I/O queues round-robin; use
/// [`Controller::io_queue`] to pin a queue.
pub struct Controller {
    subnqn: String,
    cntlid: u16,
    cap: u64,
    vs: u32,
    identity: IdentifyController,
    admin: QueueHandle,
    io: Vec<QueueHandle>,
    max_transfer: usize,
    block_sizes: RwLock<HashMap<u32, u32>>,
    next_queue: AtomicUsize,
    keep_alive: Option<tokio::task::JoinHandle<()>>,
    connect_timeout: Duration,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("subnqn", &self.subnqn)
            .field("cntlid", &self.cntlid)
            .field("io_queues", &self.io.len())
            .finish()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(k) = self.keep_alive.take() {
            k.abort();
        }
    }
}

/// The Connect command of queue `qid`, returning the controller ID.
pub(crate) async fn fabrics_connect(
    q: &QueueHandle,
    cfg: &HostConfig,
    subnqn: &str,
    sqsize: u16,
    cntlid: u16,
    kato: Duration,
) -> Result<u16, HostError> {
    let cmd = connect_command(q.qid(), cfg, subnqn, sqsize, cntlid, kato)?;
    let r = q.execute_raw(cmd).await?;
    let cntlid = connect_result(r.cqe)?;
    if auth_required(r.cqe) {
        let mut steps = AuthSteps::new(cfg, subnqn, q.qid())?;
        let mut prev = None;
        while let Some(cmd) = steps.next(prev)? {
            prev = Some(q.execute_raw(cmd).await?);
        }
    }
    Ok(cntlid)
}

/// True when a Connect completion asks the host to authenticate (ATR).
pub(crate) fn auth_required(cqe: Cqe) -> bool {
    cqe.dw0() & fabrics::CONNECT_AUTHREQ_ATR != 0
}

/// The Connect command (fabrics Connect, NVMe over Fabrics 1.1 section
/// 3.3) for queue `qid`.
pub(crate) fn connect_command(
    qid: u16,
    cfg: &HostConfig,
    subnqn: &str,
    sqsize: u16,
    cntlid: u16,
    kato: Duration,
) -> Result<Command, HostError> {
    for (what, nqn) in [("subsystem NQN", subnqn), ("host NQN", cfg.hostnqn.as_str())] {
        if nqn.is_empty() || nqn.len() > NQN_MAX_LEN {
            return Err(HostError::InvalidArgument(format!("{what} must be 1..={NQN_MAX_LEN} bytes")));
        }
    }
    let kato_ms = u32::try_from(kato.as_millis()).unwrap_or(u32::MAX);
    let mut sqe = Sqe::new(fabrics::FABRICS_OPCODE, 0);
    let cattr = if cfg.disable_sq_flow_control { 1 << 2 } else { 0 };
    ConnectCmd { recfmt: 0, qid, sqsize, cattr, kato: kato_ms }.encode(&mut sqe);
    let data = ConnectData { hostid: cfg.hostid, cntlid, subnqn: subnqn.into(), hostnqn: cfg.hostnqn.clone() };
    Ok(Command { sqe, data_out: Some(Bytes::copy_from_slice(&data.encode())), read_len: 0 })
}

/// The controller ID from a Connect completion, or the rejection.
pub(crate) fn connect_result(cqe: Cqe) -> Result<u16, HostError> {
    if !cqe.status.is_success() {
        let at = ConnectInvalidParam::from_dw0(cqe.dw0());
        return Err(HostError::ConnectRejected { status: cqe.status, iattr: at.in_data, ipo: at.offset });
    }
    Ok(cqe.dw0() as u16)
}

async fn property_get(q: &QueueHandle, offset: u32, eight_bytes: bool) -> Result<u64, HostError> {
    let mut sqe = Sqe::new(fabrics::FABRICS_OPCODE, 0);
    PropertyCmd { eight_bytes, offset, value: 0 }.encode(&mut sqe, false);
    let r = q.execute(Command::new(sqe)).await?;
    Ok(if eight_bytes { r.cqe.result } else { u64::from(r.cqe.dw0()) })
}

async fn property_set(q: &QueueHandle, offset: u32, value: u32) -> Result<(), HostError> {
    let mut sqe = Sqe::new(fabrics::FABRICS_OPCODE, 0);
    PropertyCmd { eight_bytes: false, offset, value: u64::from(value) }.encode(&mut sqe, true);
    q.execute(Command::new(sqe)).await.map(|_| ())
}

/// Reads CAP and VS, sets CC.EN and waits for CSTS.RDY.
pub(crate) async fn enable(q: &QueueHandle, deadline: Duration) -> Result<(u64, u32), HostError> {
    let cap = property_get(q, reg::CAP, true).await?;
    let vs = property_get(q, reg::VS, false).await? as u32;
    let cc = reg::CC_EN | (6 << reg::CC_IOSQES_SHIFT) | (4 << reg::CC_IOCQES_SHIFT);
    property_set(q, reg::CC, cc).await?;
    // CAP.TO is the worst case in 500 ms units; the caller's deadline
    // caps it.
    let to = Duration::from_millis(500 * ((cap >> 24) & 0xff).max(1));
    wait_csts(q, deadline.min(to), |csts| csts & reg::CSTS_RDY != 0).await?;
    Ok((cap, vs))
}

async fn wait_csts(q: &QueueHandle, limit: Duration, done: impl Fn(u32) -> bool) -> Result<u32, HostError> {
    let start = Instant::now();
    loop {
        let csts = property_get(q, reg::CSTS, false).await? as u32;
        if csts & reg::CSTS_CFS != 0 {
            return Err(HostError::ControllerFatal { csts });
        }
        if done(csts) {
            return Ok(csts);
        }
        if start.elapsed() >= limit {
            return Err(HostError::Timeout { what: "waiting for CSTS", after: limit });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends the fabrics Disconnect on `q` and waits for its completion.
pub(crate) async fn fabrics_disconnect(q: &QueueHandle) -> Result<(), HostError> {
    let mut sqe = Sqe::new(fabrics::FABRICS_OPCODE, 0);
    sqe.set_fctype(fctype::DISCONNECT);
    q.execute(Command::new(sqe)).await.map(|_| ())
}

/// Identify with `cns` for `nsid`: the 4096-byte data.
pub(crate) async fn identify(q: &QueueHandle, cns: Cns, nsid: u32) -> Result<Bytes, HostError> {
    let mut sqe = Sqe::new(admin::IDENTIFY, 0);
    sqe.set_nsid(nsid);
    sqe.set_cdw10(u32::from(cns.0));
    let cmd = Command { sqe, data_out: None, read_len: IDENTIFY_DATA_LEN };
    Ok(q.execute(cmd).await?.data)
}

/// Get Log Page, read in pieces of at most `max_transfer` bytes.
pub(crate) async fn get_log_page(
    q: &QueueHandle,
    max_transfer: usize,
    lid: u8,
    nsid: u32,
    offset: u64,
    len: usize,
    rae: bool,
) -> Result<Vec<u8>, HostError> {
    if len == 0 || !len.is_multiple_of(4) || !offset.is_multiple_of(4) {
        return Err(HostError::InvalidArgument(format!(
            "log page offset {offset} and length {len} must be whole dwords, length non-zero"
        )));
    }
    let step = max_transfer.min(ADMIN_MAX_TRANSFER_BYTES) & !3;
    let mut page = Vec::with_capacity(len.min(ADMIN_MAX_TRANSFER_BYTES));
    while page.len() < len {
        let n = (len - page.len()).min(step.max(4));
        let mut sqe = Sqe::new(admin::GET_LOG_PAGE, 0);
        sqe.set_nsid(nsid);
        // Keep the event retained until the last piece, as the kernel does.
        let last = page.len() + n == len;
        GetLogPage { lid, lsp: 0, rae: rae || !last, len: n, offset: offset + page.len() as u64 }.encode(&mut sqe);
        let r = q.execute(Command { sqe, data_out: None, read_len: n }).await?;
        page.extend_from_slice(&r.data);
    }
    Ok(page)
}

fn max_transfer_bytes(mdts: u8, cap: u64) -> usize {
    let mpsmin = ((cap >> 48) & 0xf) as u32;
    if mdts == 0 {
        return MAX_TRANSFER_CAP_BYTES;
    }
    4096usize
        .checked_shl(mpsmin)
        .and_then(|page| page.checked_shl(u32::from(mdts)))
        .map_or(MAX_TRANSFER_CAP_BYTES, |b| b.min(MAX_TRANSFER_CAP_BYTES))
}

impl Controller {
    /// Connects to subsystem `subnqn` at `addr` and brings the controller
    /// up with `cfg.io_queues` I/O queues (fewer if it grants fewer).
    ///
    /// # Errors
    ///
    /// [`HostError::ConnectRejected`] with the controller's status, IATTR
    /// and IPO when it refuses the admin or an I/O queue Connect (e.g.
    /// Connect Invalid Parameters 0x182 at offset 256 for an unknown
    /// subsystem, Connect Invalid Host 0x184 at 512 for a host not on its
    /// list); [`HostError::Io`], [`HostError::Timeout`] or
    /// [`HostError::Handshake`] for transport failures; other errors from
    /// the setup commands.
    pub async fn connect(addr: SocketAddr, subnqn: &str, cfg: &HostConfig) -> Result<Controller, HostError> {
        let (ctrl, _) = Controller::connect_inner::<()>(addr, subnqn, cfg, false).await?;
        Ok(ctrl)
    }

    /// As [`Controller::connect`], but the I/O queues come back as
    /// caller-driven [`QueueDriver`]s (one TCP connection each, queue IDs
    /// 1, 2, ...) instead of being driven by a task per queue. The
    /// controller itself then has no I/O queues of its own
    /// ([`Controller::io_queue_count`] is 0); it keeps the admin queue and
    /// the keep-alive, so keep it alive while the drivers are in use.
    ///
    /// This is the path for load generators: submitting and reaping on the
    /// caller's task costs no channel, no oneshot and no task switch per
    /// command.
    ///
    /// # Errors
    ///
    /// As [`Controller::connect`].
    pub async fn connect_with_drivers<T>(
        addr: SocketAddr,
        subnqn: &str,
        cfg: &HostConfig,
    ) -> Result<(Controller, Vec<QueueDriver<T>>), HostError> {
        Controller::connect_inner(addr, subnqn, cfg, true).await
    }

    async fn connect_inner<T>(
        addr: SocketAddr,
        subnqn: &str,
        cfg: &HostConfig,
        drivers: bool,
    ) -> Result<(Controller, Vec<QueueDriver<T>>), HostError> {
        if cfg.admin_queue_size < 2 || cfg.io_queue_size < 2 {
            return Err(HostError::InvalidArgument("queue sizes must be at least 2".into()));
        }
        let admin_params = QueueParams {
            qid: 0,
            depth: cfg.admin_queue_size,
            digests: cfg.digests,
            in_capsule: ADMIN_IN_CAPSULE_BYTES,
            max_read: ADMIN_MAX_TRANSFER_BYTES,
            connect_timeout: cfg.connect_timeout,
            io_timeout: cfg.io_timeout,
            tls: TlsParams::of(cfg, subnqn),
        };
        let admin_q = QueueHandle::open(addr, admin_params).await?;
        let cntlid = fabrics_connect(&admin_q, cfg, subnqn, cfg.admin_queue_size - 1, CNTLID_DYNAMIC, cfg.kato).await?;
        let (cap, vs) = enable(&admin_q, cfg.connect_timeout).await?;
        let identity = IdentifyController::decode(&identify(&admin_q, Cns::CONTROLLER, 0).await?)?;
        let max_transfer = max_transfer_bytes(identity.mdts, cap);
        let mut ctrl = Controller {
            subnqn: subnqn.to_owned(),
            cntlid,
            cap,
            vs,
            identity,
            admin: admin_q,
            io: Vec::new(),
            max_transfer,
            block_sizes: RwLock::new(HashMap::new()),
            next_queue: AtomicUsize::new(0),
            keep_alive: None,
            connect_timeout: cfg.connect_timeout,
        };
        let mut io_drivers = Vec::new();
        if cfg.io_queues > 0 {
            let n = u32::from(cfg.io_queues - 1);
            let granted = ctrl.set_features(feature::NUMBER_OF_QUEUES, n | (n << 16)).await?;
            let granted = (granted & 0xffff).min(granted >> 16) + 1;
            let count = u32::from(cfg.io_queues).min(granted) as u16;
            // IOCCSZ counts the 64-byte SQE in 16-byte units.
            let in_capsule = (ctrl.identity.ioccsz as usize * 16).saturating_sub(command::SQE_LEN);
            for qid in 1..=count {
                let params = QueueParams {
                    qid,
                    depth: cfg.io_queue_size,
                    digests: cfg.digests,
                    in_capsule,
                    max_read: max_transfer,
                    connect_timeout: cfg.connect_timeout,
                    io_timeout: cfg.io_timeout,
                    tls: TlsParams::of(cfg, subnqn),
                };
                // I/O queues carry no keep-alive timeout of their own.
                if drivers {
                    let mut d = QueueDriver::open(addr, params, max_transfer).await?;
                    let cmd = connect_command(qid, cfg, subnqn, cfg.io_queue_size - 1, cntlid, Duration::ZERO)?;
                    let r = d.execute_internal(cmd, cfg.connect_timeout).await?;
                    connect_result(r.cqe)?;
                    if auth_required(r.cqe) {
                        let mut steps = AuthSteps::new(cfg, subnqn, qid)?;
                        let mut prev = None;
                        while let Some(cmd) = steps.next(prev)? {
                            prev = Some(d.execute_internal(cmd, cfg.connect_timeout).await?);
                        }
                    }
                    io_drivers.push(d);
                } else {
                    let q = QueueHandle::open(addr, params).await?;
                    fabrics_connect(&q, cfg, subnqn, cfg.io_queue_size - 1, cntlid, Duration::ZERO).await?;
                    ctrl.io.push(q);
                }
            }
        }
        if cfg.send_keep_alive && !cfg.kato.is_zero() {
            let admin_q = ctrl.admin.clone();
            let period = cfg.kato / 2;
            ctrl.keep_alive = Some(tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                loop {
                    tick.tick().await;
                    match admin_q.execute(Command::new(Sqe::new(admin::KEEP_ALIVE, 0))).await {
                        Ok(_) => {}
                        Err(HostError::QueueFailed { .. }) => return,
                        Err(e) => tracing::warn!("keep alive failed: {e}"),
                    }
                }
            }));
        }
        tracing::info!(%addr, subnqn, cntlid, io_queues = ctrl.io.len() + io_drivers.len(), "controller connected");
        Ok((ctrl, io_drivers))
    }

    /// The subsystem NQN this controller belongs to.
    pub fn subnqn(&self) -> &str {
        &self.subnqn
    }

    /// Controller ID assigned by the subsystem.
    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }

    /// The CAP property read at connect.
    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// The VS property read at connect.
    pub fn version(&self) -> u32 {
        self.vs
    }

    /// Identify Controller data read at connect.
    pub fn identity(&self) -> &IdentifyController {
        &self.identity
    }

    /// Largest transfer of one I/O command, from MDTS.
    pub fn max_transfer_bytes(&self) -> usize {
        self.max_transfer
    }

    /// Number of connected I/O queues.
    pub fn io_queue_count(&self) -> usize {
        self.io.len()
    }

    /// Digests in force on the admin queue.
    pub fn digests(&self) -> Digests {
        self.admin.digests()
    }

    /// I/O queue `index` (0-based; its queue ID is `index + 1`).
    ///
    /// # Errors
    ///
    /// [`HostError::NoIoQueue`] if there is no such queue.
    pub fn io_queue(&self, index: usize) -> Result<IoQueue<'_>, HostError> {
        if index >= self.io.len() {
            return Err(HostError::NoIoQueue(index));
        }
        Ok(IoQueue { ctrl: self, q: &self.io[index] })
    }

    /// The next I/O queue in round-robin order.
    /// The next I/O queue in round-robin order, for commands the
    /// controller-level methods do not cover (the fenced ones).
    ///
    /// # Errors
    ///
    /// [`HostError::NoIoQueue`] when the controller has no I/O queue.
    pub fn next_io_queue(&self) -> Result<IoQueue<'_>, HostError> {
        self.pick()
    }

    fn pick(&self) -> Result<IoQueue<'_>, HostError> {
        if self.io.is_empty() {
            return Err(HostError::NoIoQueue(0));
        }
        let i = self.next_queue.fetch_add(1, Ordering::Relaxed) % self.io.len();
        Ok(IoQueue { ctrl: self, q: &self.io[i] })
    }

    // ----- admin commands -------------------------------------------------

    /// Runs any admin command and returns its completion, whatever the
    /// status, with the data it returned. `data_out` goes in-capsule up to
    /// 8 KiB, else by R2T; `read_len` bytes are expected back.
    ///
    /// # Errors
    ///
    /// Transport errors only; check `cqe.status` for the command's outcome.
    pub async fn admin_command(
        &self,
        sqe: Sqe,
        data_out: Option<&[u8]>,
        read_len: usize,
    ) -> Result<(Cqe, Vec<u8>), HostError> {
        let cmd = Command { sqe, data_out: data_out.map(Bytes::copy_from_slice), read_len };
        let r = self.admin.execute_raw(cmd).await?;
        Ok((r.cqe, r.data.to_vec()))
    }

    async fn identify_raw(&self, cns: Cns, nsid: u32) -> Result<Bytes, HostError> {
        identify(&self.admin, cns, nsid).await
    }

    /// Identify Controller (CNS 01h), read afresh.
    ///
    /// # Errors
    ///
    /// [`HostError::Status`] or a transport error; [`HostError::Identify`]
    /// if the data does not decode.
    pub async fn identify_controller(&self) -> Result<IdentifyController, HostError> {
        Ok(IdentifyController::decode(&self.identify_raw(Cns::CONTROLLER, 0).await?)?)
    }

    /// Identify Namespace (CNS 00h). An inactive NSID returns an all-zero
    /// structure (NSZE 0). Refreshes the cached block size.
    ///
    /// # Errors
    ///
    /// [`HostError::Status`] (e.g. Invalid Namespace for NSID 0) or a
    /// transport error; [`HostError::Identify`] if the data does not decode.
    pub async fn identify_namespace(&self, nsid: u32) -> Result<IdentifyNamespace, HostError> {
        let ns = IdentifyNamespace::decode(&self.identify_raw(Cns::NAMESPACE, nsid).await?)?;
        let mut cache = self.block_sizes.write().unwrap_or_else(|e| e.into_inner());
        match ns.block_size_bytes().and_then(|b| u32::try_from(b).ok()).filter(|_| ns.nsze > 0) {
            Some(bs) => cache.insert(nsid, bs),
            None => cache.remove(&nsid),
        };
        Ok(ns)
    }

    /// The active namespace IDs (CNS 02h), all of them.
    ///
    /// # Errors
    ///
    /// [`HostError::Status`], a transport error or [`HostError::Identify`].
    pub async fn active_namespaces(&self) -> Result<Vec<u32>, HostError> {
        let mut all = Vec::new();
        let mut after = 0u32;
        loop {
            let list = id::decode_active_ns_list(&self.identify_raw(Cns::ACTIVE_NS_LIST, after).await?)?;
            let full = list.len() == id::ACTIVE_NS_LIST_MAX;
            let Some(&last) = list.last() else { break };
            all.extend_from_slice(&list);
            // The list ascends, so `last` moves forward; stop at the top.
            if !full || last >= 0xFFFF_FFFD {
                break;
            }
            after = last;
        }
        Ok(all)
    }

    /// The Namespace Identification Descriptor list (CNS 03h).
    ///
    /// # Errors
    ///
    /// [`HostError::Status`], a transport error or [`HostError::Identify`].
    pub async fn namespace_descriptors(&self, nsid: u32) -> Result<Vec<NsIdDescriptor>, HostError> {
        Ok(id::decode_ns_id_descriptors(&self.identify_raw(Cns::NS_ID_DESCRIPTOR_LIST, nsid).await?)?)
    }

    /// Get Log Page `lid` for `nsid`: `len` bytes from byte `offset` (both
    /// whole dwords), read in MDTS-sized pieces. `rae` retains the
    /// asynchronous event.
    ///
    /// # Errors
    ///
    /// [`HostError::InvalidArgument`] for unaligned or empty ranges,
    /// [`HostError::Status`] or a transport error.
    pub async fn get_log_page(
        &self,
        lid: u8,
        nsid: u32,
        offset: u64,
        len: usize,
        rae: bool,
    ) -> Result<Vec<u8>, HostError> {
        get_log_page(&self.admin, self.max_transfer, lid, nsid, offset, len, rae).await
    }

    /// The ANA log page (0Ch), read as Linux reads it: sized for the
    /// controller's NANAGRPID groups and MNAN namespaces.
    ///
    /// # Errors
    ///
    /// [`HostError::Status`] (a controller without ANA refuses the log),
    /// [`HostError::LogPage`] for a log that does not parse, or a
    /// transport error.
    pub async fn ana_log(&self) -> Result<strata_nvme::log_page::AnaLog, HostError> {
        use strata_nvme::log_page as lp;
        let c = self.identify_controller().await?;
        let len = lp::ANA_LOG_HEADER_LEN + c.nanagrpid as usize * lp::ANA_GROUP_DESC_LEN + c.mnan as usize * 4;
        let data = self.get_log_page(lp::LogPageId::ANA.0, u32::MAX, 0, len.next_multiple_of(4), false).await?;
        Ok(lp::AnaLog::decode(&data)?)
    }

    /// Whether this controller is an optimized path to its namespaces:
    /// every ANA group it reports is optimized, or it reports no ANA (one
    /// path). A strata pool serves each volume through every node, the
    /// owner's path optimized and the others forwarding to it.
    ///
    /// # Errors
    ///
    /// As [`ana_log`](Self::ana_log).
    pub async fn is_optimized(&self) -> Result<bool, HostError> {
        use strata_nvme::log_page::AnaState;
        if self.identity.cmic & strata_nvme::identify::CMIC_ANA == 0 {
            return Ok(true);
        }
        Ok(self.ana_log().await?.groups.iter().all(|g| g.state == AnaState::Optimized))
    }

    /// Get Features `fid` (current value) with `cdw11`; returns DW0.
    ///
    /// # Errors
    ///
    /// [`HostError::Status`] or a transport error.
    pub async fn get_features(&self, fid: u8, cdw11: u32) -> Result<u32, HostError> {
        let mut sqe = Sqe::new(admin::GET_FEATURES, 0);
        sqe.set_cdw10(u32::from(fid));
        sqe.set_cdw11(cdw11);
        Ok(self.admin.execute(Command::new(sqe)).await?.cqe.dw0())
    }

    /// Set Features `fid` to `value` (CDW11); returns DW0 (e.g. the queues
    /// granted for Number of Queues).
    ///
    /// # Errors
    ///
    /// [`HostError::Status`] or a transport error.
    pub async fn set_features(&self, fid: u8, value: u32) -> Result<u32, HostError> {
        let mut sqe = Sqe::new(admin::SET_FEATURES, 0);
        sqe.set_cdw10(u32::from(fid));
        sqe.set_cdw11(value);
        Ok(self.admin.execute(Command::new(sqe)).await?.cqe.dw0())
    }

    /// Sends one Keep Alive.
    ///
    /// # Errors
    ///
    /// [`HostError::Status`] or a transport error.
    pub async fn keep_alive(&self) -> Result<(), HostError> {
        self.admin.execute(Command::new(Sqe::new(admin::KEEP_ALIVE, 0))).await.map(|_| ())
    }

    /// Posts an Asynchronous Event Request. Returns once the command has
    /// been handed to the admin queue; the returned future completes with
    /// the event's DW0 (no timeout applies: an AER waits until an event
    /// happens). Follow with any admin command (e.g. [`Self::keep_alive`])
    /// to be sure the controller holds the request: admin commands are
    /// answered in order.
    ///
    /// # Errors
    ///
    /// A transport error when posting; the future yields
    /// [`HostError::Status`] (e.g. AER Limit Exceeded) or a queue failure.
    pub async fn async_event_request(
        &self,
    ) -> Result<impl Future<Output = Result<u32, HostError>> + Send + 'static, HostError> {
        let rx = self.admin.submit(Command::new(Sqe::new(admin::ASYNC_EVENT_REQUEST, 0))).await?;
        let q = self.admin.clone();
        Ok(async move {
            let resp = q.wait(rx).await?;
            let resp = crate::queue::check_status(resp, 0, admin::ASYNC_EVENT_REQUEST)?;
            Ok(resp.cqe.dw0())
        })
    }

    /// Orderly shutdown: Disconnect on each I/O queue, a normal shutdown
    /// notification (CC.SHN, so the controller flushes its cache) waited
    /// for in CSTS.SHST, then Disconnect on the admin queue. The
    /// connections close when this returns.
    ///
    /// # Errors
    ///
    /// The first error met; the connections are closed regardless.
    pub async fn disconnect(mut self) -> Result<(), HostError> {
        if let Some(k) = self.keep_alive.take() {
            k.abort();
        }
        let mut first_err = None;
        for q in &self.io {
            if let Err(e) = fabrics_disconnect(q).await {
                first_err.get_or_insert(e);
            }
        }
        let shutdown = async {
            let cc = reg::CC_EN | (6 << reg::CC_IOSQES_SHIFT) | (4 << reg::CC_IOCQES_SHIFT) | (1 << reg::CC_SHN_SHIFT);
            property_set(&self.admin, reg::CC, cc).await?;
            wait_csts(&self.admin, self.connect_timeout, |csts| csts & (0x3 << 2) == reg::CSTS_SHST_COMPLETE).await?;
            fabrics_disconnect(&self.admin).await
        };
        if let Err(e) = shutdown.await {
            first_err.get_or_insert(e);
        }
        first_err.map_or(Ok(()), Err)
    }

    // ----- I/O, round-robin over the I/O queues --------------------------

    /// Reads `nblocks` blocks at `slba` on the next I/O queue. See
    /// [`IoQueue::read`].
    ///
    /// # Errors
    ///
    /// As [`IoQueue::read`], or [`HostError::NoIoQueue`].
    pub async fn read(&self, nsid: u32, slba: u64, nblocks: u32) -> Result<Bytes, HostError> {
        self.pick()?.read(nsid, slba, nblocks).await
    }

    /// Writes `data` (whole blocks) at `slba` on the next I/O queue. See
    /// [`IoQueue::write`].
    ///
    /// # Errors
    ///
    /// As [`IoQueue::write`], or [`HostError::NoIoQueue`].
    pub async fn write(&self, nsid: u32, slba: u64, data: impl Into<Bytes>, fua: bool) -> Result<(), HostError> {
        self.pick()?.write(nsid, slba, data, fua).await
    }

    /// Flush on the next I/O queue. See [`IoQueue::flush`].
    ///
    /// # Errors
    ///
    /// As [`IoQueue::flush`], or [`HostError::NoIoQueue`].
    pub async fn flush(&self, nsid: u32) -> Result<(), HostError> {
        self.pick()?.flush(nsid).await
    }

    /// Write Zeroes on the next I/O queue. See [`IoQueue::write_zeroes`].
    ///
    /// # Errors
    ///
    /// As [`IoQueue::write_zeroes`], or [`HostError::NoIoQueue`].
    pub async fn write_zeroes(&self, nsid: u32, slba: u64, nblocks: u32, deallocate: bool) -> Result<(), HostError> {
        self.pick()?.write_zeroes(nsid, slba, nblocks, deallocate).await
    }

    /// Dataset Management deallocate on the next I/O queue. See
    /// [`IoQueue::deallocate`].
    ///
    /// # Errors
    ///
    /// As [`IoQueue::deallocate`], or [`HostError::NoIoQueue`].
    pub async fn deallocate(&self, nsid: u32, ranges: &[(u64, u32)]) -> Result<(), HostError> {
        self.pick()?.deallocate(nsid, ranges).await
    }

    /// Compare on the next I/O queue. See [`IoQueue::compare`].
    ///
    /// # Errors
    ///
    /// As [`IoQueue::compare`], or [`HostError::NoIoQueue`].
    pub async fn compare(&self, nsid: u32, slba: u64, data: impl Into<Bytes>) -> Result<(), HostError> {
        self.pick()?.compare(nsid, slba, data).await
    }

    /// The block size of `nsid`, from the cache or Identify Namespace.
    async fn block_size(&self, nsid: u32) -> Result<u32, HostError> {
        if let Some(&bs) = self.block_sizes.read().unwrap_or_else(|e| e.into_inner()).get(&nsid) {
            return Ok(bs);
        }
        self.identify_namespace(nsid).await?;
        self.block_sizes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&nsid)
            .copied()
            .ok_or(HostError::UnknownNamespace(nsid))
    }
}

/// One I/O queue of a [`Controller`]: the NVM command set on a chosen
/// queue. Obtained from [`Controller::io_queue`]; cheap to create.
#[derive(Debug, Clone, Copy)]
pub struct IoQueue<'a> {
    ctrl: &'a Controller,
    q: &'a QueueHandle,
}

/// A command for `nsid`: the standard `opcode`, or with an epoch its fenced
/// twin (see [`strata_nvme::command::fenced`]).
fn io_sqe(opcode: u8, nsid: u32, epoch: Option<u64>) -> Sqe {
    let mut sqe = match epoch.and_then(|_| fenced::of(opcode)) {
        Some(f) => Sqe::new(f, 0),
        None => Sqe::new(opcode, 0),
    };
    sqe.set_nsid(nsid);
    if let Some(e) = epoch {
        sqe.set_epoch(e);
    }
    sqe
}

/// An undo-log command for `nsid` at `epoch`.
fn undo_sqe(opcode: u8, nsid: u32, epoch: u64) -> Sqe {
    let mut sqe = Sqe::new(opcode, 0);
    sqe.set_nsid(nsid);
    sqe.set_epoch(epoch);
    sqe
}

/// An undo-log or owner command that carries data ([`fenced::UNDO_RECORDS`],
/// [`fenced::ROLL_BACK_ONLY`], the notes): `arg` in CDW10-CDW11 and the
/// data's length in CDW12 as for Read (`blocks`, 1-based).
///
/// The argument is written last and nothing else touches CDW10-CDW11: an
/// earlier version encoded the length as a whole Read (`ReadWrite`, whose
/// starting LBA is CDW10-CDW11) after setting the argument, so every
/// shard answered Undo Records after update 0 and Roll Back Only raised
/// no mark. A shard that had missed a commit then reported committed
/// updates, a takeover undid them there alone, and degraded reads of
/// `ec:K+M` decoded garbage (the pool soak's M+1 kills).
fn undo_list_sqe(opcode: u8, nsid: u32, epoch: u64, arg: u64, blocks: u32) -> Sqe {
    let mut sqe = undo_sqe(opcode, nsid, epoch);
    sqe.set_cdw12(blocks.saturating_sub(1) & 0xffff);
    sqe.set_arg64(arg);
    sqe
}

fn check_blocks(nblocks: u32) -> Result<(), HostError> {
    if nblocks == 0 || nblocks > MAX_BLOCKS_PER_COMMAND {
        return Err(HostError::InvalidArgument(format!("block count {nblocks} is outside 1..=65536")));
    }
    Ok(())
}

impl IoQueue<'_> {
    /// Queue ID (1-based).
    pub fn qid(&self) -> u16 {
        self.q.qid()
    }

    fn check_len(&self, len: usize) -> Result<(), HostError> {
        if len > self.ctrl.max_transfer {
            return Err(HostError::TransferTooLarge { len, max: self.ctrl.max_transfer });
        }
        Ok(())
    }

    /// Byte length of `nblocks` blocks of `nsid`, checked against MDTS.
    async fn transfer_len(&self, nsid: u32, nblocks: u32) -> Result<usize, HostError> {
        check_blocks(nblocks)?;
        let bs = self.ctrl.block_size(nsid).await?;
        let len = nblocks as usize * bs as usize;
        self.check_len(len)?;
        Ok(len)
    }

    /// Blocks in `len` bytes of `nsid`, which must be whole blocks.
    async fn blocks_of(&self, nsid: u32, len: usize) -> Result<u32, HostError> {
        self.check_len(len)?;
        let bs = self.ctrl.block_size(nsid).await? as usize;
        if len == 0 || !len.is_multiple_of(bs) {
            return Err(HostError::InvalidArgument(format!("{len} bytes is not a whole number of {bs}-byte blocks")));
        }
        let n = u32::try_from(len / bs).unwrap_or(u32::MAX);
        check_blocks(n)?;
        Ok(n)
    }

    /// Runs any I/O command on this queue and returns its completion,
    /// whatever the status, with the data it returned.
    ///
    /// # Errors
    ///
    /// Transport errors only; check `cqe.status` for the outcome.
    pub async fn io_command(
        &self,
        sqe: Sqe,
        data_out: Option<Bytes>,
        read_len: usize,
    ) -> Result<(Cqe, Bytes), HostError> {
        self.check_len(read_len.max(data_out.as_ref().map_or(0, Bytes::len)))?;
        let r = self.q.execute_raw(Command { sqe, data_out, read_len }).await?;
        Ok((r.cqe, r.data))
    }

    /// Reads `nblocks` blocks at `slba`.
    ///
    /// # Errors
    ///
    /// [`HostError::Status`] (LBA Out of Range, Invalid Namespace, ...),
    /// [`HostError::TransferTooLarge`] beyond MDTS,
    /// [`HostError::UnknownNamespace`] for an inactive namespace,
    /// [`HostError::InvalidArgument`] for 0 or more than 65536 blocks, or a
    /// transport error.
    pub async fn read(&self, nsid: u32, slba: u64, nblocks: u32) -> Result<Bytes, HostError> {
        self.read_at(nsid, None, slba, nblocks).await
    }

    async fn read_at(&self, nsid: u32, epoch: Option<u64>, slba: u64, nblocks: u32) -> Result<Bytes, HostError> {
        let len = self.transfer_len(nsid, nblocks).await?;
        let mut sqe = io_sqe(io::READ, nsid, epoch);
        ReadWrite { slba, nlb: nblocks, fua: false, limited_retry: false }.encode(&mut sqe);
        Ok(self.q.execute(Command { sqe, data_out: None, read_len: len }).await?.data)
    }

    /// Writes `data`, a whole number of blocks, at `slba`; `fua` makes it
    /// durable before completion.
    ///
    /// # Errors
    ///
    /// As [`IoQueue::read`]; [`HostError::InvalidArgument`] when `data` is
    /// not whole blocks.
    pub async fn write(&self, nsid: u32, slba: u64, data: impl Into<Bytes>, fua: bool) -> Result<(), HostError> {
        self.data_command(io_sqe(io::WRITE, nsid, None), slba, data.into(), fua).await
    }

    /// Compare: succeeds when the blocks at `slba` equal `data`.
    ///
    /// # Errors
    ///
    /// [`HostError::Status`] with Compare Failure when they differ; else as
    /// [`IoQueue::write`].
    pub async fn compare(&self, nsid: u32, slba: u64, data: impl Into<Bytes>) -> Result<(), HostError> {
        self.data_command(io_sqe(io::COMPARE, nsid, None), slba, data.into(), false).await
    }

    async fn data_command(&self, mut sqe: Sqe, slba: u64, data: Bytes, fua: bool) -> Result<(), HostError> {
        let nlb = self.blocks_of(sqe.nsid(), data.len()).await?;
        ReadWrite { slba, nlb, fua, limited_retry: false }.encode(&mut sqe);
        self.q.execute(Command { sqe, data_out: Some(data), read_len: 0 }).await.map(|_| ())
    }

    /// Flush (`nsid` 0xFFFFFFFF flushes every namespace).
    ///
    /// # Errors
    ///
    /// [`HostError::Status`] or a transport error.
    pub async fn flush(&self, nsid: u32) -> Result<(), HostError> {
        self.q.execute(Command::new(io_sqe(io::FLUSH, nsid, None))).await.map(|_| ())
    }

    /// Write Zeroes of `nblocks` at `slba`, optionally deallocating them.
    ///
    /// # Errors
    ///
    /// [`HostError::InvalidArgument`] for 0 or more than 65536 blocks,
    /// [`HostError::Status`] or a transport error.
    pub async fn write_zeroes(&self, nsid: u32, slba: u64, nblocks: u32, deallocate: bool) -> Result<(), HostError> {
        self.write_zeroes_at(nsid, None, slba, nblocks, deallocate).await
    }

    async fn write_zeroes_at(
        &self,
        nsid: u32,
        epoch: Option<u64>,
        slba: u64,
        nblocks: u32,
        deallocate: bool,
    ) -> Result<(), HostError> {
        check_blocks(nblocks)?;
        let mut sqe = io_sqe(io::WRITE_ZEROES, nsid, epoch);
        WriteZeroes { slba, nlb: nblocks, deallocate, fua: false }.encode(&mut sqe);
        self.q.execute(Command::new(sqe)).await.map(|_| ())
    }

    /// A fenced Read (strata's internal fabric): as [`IoQueue::read`],
    /// carrying the sender's volume `epoch`.
    ///
    /// # Errors
    ///
    /// As [`IoQueue::read`]; [`HostError::Status`] with
    /// [`Status::STALE_EPOCH`](strata_nvme::status::Status::STALE_EPOCH)
    /// when the replica has seen a newer epoch.
    pub async fn fenced_read(&self, nsid: u32, epoch: u64, slba: u64, nblocks: u32) -> Result<Bytes, HostError> {
        self.read_at(nsid, Some(epoch), slba, nblocks).await
    }

    /// A fenced Write: as [`IoQueue::write`], carrying `epoch`.
    ///
    /// # Errors
    ///
    /// As [`IoQueue::fenced_read`].
    pub async fn fenced_write(
        &self,
        nsid: u32,
        epoch: u64,
        slba: u64,
        data: impl Into<Bytes>,
        fua: bool,
    ) -> Result<(), HostError> {
        self.data_command(io_sqe(io::WRITE, nsid, Some(epoch)), slba, data.into(), fua).await
    }

    /// A fenced Flush of `nsid`. A replica admits it only after every
    /// command of an older epoch has finished, so a new owner's first
    /// fenced flush tells it the old owner's writes are over.
    ///
    /// # Errors
    ///
    /// As [`IoQueue::fenced_read`].
    pub async fn fenced_flush(&self, nsid: u32, epoch: u64) -> Result<(), HostError> {
        self.q.execute(Command::new(io_sqe(io::FLUSH, nsid, Some(epoch)))).await.map(|_| ())
    }

    /// A logged Write to an erasure-coded shard: as
    /// [`IoQueue::fenced_write`], the shard keeping the bytes it overwrites
    /// as update `seq` until committed, with the stripe positions the
    /// update is sent to (`targets`, one bit per position)
    /// ([`fenced::WRITE_LOGGED`]).
    ///
    /// # Errors
    ///
    /// [`HostError::InvalidArgument`] for targets past position 31 (a
    /// stripe is at most 32 wide); otherwise as [`IoQueue::fenced_read`].
    pub async fn fenced_write_logged(
        &self,
        nsid: u32,
        epoch: u64,
        seq: u64,
        targets: u64,
        slba: u64,
        data: impl Into<Bytes>,
    ) -> Result<(), HostError> {
        let targets = u32::try_from(targets)
            .map_err(|_| HostError::InvalidArgument(format!("update targets {targets:#x} name a position past 31")))?;
        let mut sqe = undo_sqe(fenced::WRITE_LOGGED, nsid, epoch);
        sqe.set_update_seq(seq);
        sqe.set_update_targets(targets);
        self.data_command(sqe, slba, data.into(), false).await
    }

    /// An undo-log command without data to a shard: [`fenced::COMMIT`],
    /// [`fenced::ROLL_BACK`], [`fenced::COMMITTED`] or
    /// [`fenced::DISCARD_UNDO`], with `arg` in CDW10-CDW11. Returns the
    /// completion's result.
    ///
    /// # Errors
    ///
    /// [`HostError::InvalidArgument`] for another opcode; otherwise as
    /// [`IoQueue::fenced_read`].
    pub async fn undo_command(&self, opcode: u8, nsid: u32, epoch: u64, arg: u64) -> Result<u64, HostError> {
        let with_data = [fenced::WRITE_LOGGED, fenced::UNDO_RECORDS, fenced::ROLL_BACK_ONLY];
        if !fenced::is_undo(opcode) || with_data.contains(&opcode) {
            return Err(HostError::InvalidArgument(format!("{opcode:#04x} is not an undo-log command without data")));
        }
        let mut sqe = undo_sqe(opcode, nsid, epoch);
        sqe.set_arg64(arg);
        self.q.execute(Command::new(sqe)).await.map(|r| r.cqe.result)
    }

    /// Undo Records ([`fenced::UNDO_RECORDS`]): the records shard `nsid`
    /// keeps of the updates after `after`, oldest first, as (seq, lba,
    /// blocks, targets).
    ///
    /// # Errors
    ///
    /// As [`IoQueue::fenced_read`]; [`HostError::QueueFailed`] with
    /// [`QueueFailure::Protocol`](crate::QueueFailure::Protocol) for a
    /// reply that does not hold a list.
    pub async fn fenced_undo_records(&self, nsid: u32, epoch: u64, after: u64) -> Result<Vec<[u64; 4]>, HostError> {
        let block = self.transfer_len(nsid, 1).await?;
        let len =
            (fenced::LIST_COUNT_LEN + fenced::MAX_LIST * strata_block::UndoRecord::WIRE_LEN).div_ceil(block) * block;
        let len = len.min(self.ctrl.max_transfer / block * block).max(block);
        let protocol = |why: String| HostError::QueueFailed {
            qid: self.qid(),
            cause: crate::error::QueueFailure::Protocol(format!("undo records: {why}")),
        };
        // Page by page: a shard answers what the blocks hold, whole
        // updates, and says when more are left (result 1).
        let (mut out, mut from) = (Vec::new(), after);
        loop {
            let sqe = undo_list_sqe(fenced::UNDO_RECORDS, nsid, epoch, from, (len / block) as u32);
            let reply = self.q.execute(Command { sqe, data_out: None, read_len: len }).await?;
            let values = fenced::decode_list(&reply.data, 4).map_err(|e| protocol(e.to_string()))?;
            let page: Vec<[u64; 4]> = values.chunks_exact(4).map(|v| [v[0], v[1], v[2], v[3]]).collect();
            let more = reply.cqe.result != 0;
            match page.last() {
                Some(last) if more => {
                    if last[0] <= from {
                        return Err(protocol(format!("a page ends at update {} after {from}", last[0])));
                    }
                    from = last[0];
                }
                None if more => return Err(protocol("an empty page with more to come".into())),
                _ => {}
            }
            out.extend(page);
            if !more {
                return Ok(out);
            }
        }
    }

    /// Roll Back Only ([`fenced::ROLL_BACK_ONLY`]): shard `nsid` puts back
    /// what updates `undo` overwrote, forgets every record and raises its
    /// committed mark to `mark`. Returns how many records it undid.
    ///
    /// # Errors
    ///
    /// [`HostError::InvalidArgument`] for a list too long; otherwise as
    /// [`IoQueue::fenced_read`].
    pub async fn fenced_roll_back_only(
        &self,
        nsid: u32,
        epoch: u64,
        undo: &[u64],
        mark: u64,
    ) -> Result<u64, HostError> {
        let block = self.transfer_len(nsid, 1).await?;
        let wire = fenced::encode_list(undo, 1, block)
            .ok_or_else(|| HostError::InvalidArgument(format!("a roll back of {} updates is too long", undo.len())))?;
        self.check_len(wire.len())?;
        let sqe = undo_list_sqe(fenced::ROLL_BACK_ONLY, nsid, epoch, mark, (wire.len() / block) as u32);
        self.q.execute(Command { sqe, data_out: Some(Bytes::from(wire)), read_len: 0 }).await.map(|r| r.cqe.result)
    }

    /// A Promise ([`fenced::PROMISE`]): asks the replica `nsid` to let no
    /// owner newer than `epoch` in for `duration`.
    ///
    /// # Errors
    ///
    /// As [`IoQueue::fenced_read`].
    pub async fn fenced_promise(&self, nsid: u32, epoch: u64, duration: std::time::Duration) -> Result<(), HostError> {
        let mut sqe = undo_sqe(fenced::PROMISE, nsid, epoch);
        sqe.set_arg64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
        self.q.execute(Command::new(sqe)).await.map(|_| ())
    }

    /// Note Save ([`fenced::NOTE_SAVE`]): the replica's node keeps `note`
    /// (at most [`fenced::MAX_NOTE`] bytes) for the owner of `nsid`.
    ///
    /// # Errors
    ///
    /// [`HostError::InvalidArgument`] for a note too large; otherwise as
    /// [`IoQueue::fenced_read`].
    pub async fn fenced_note_save(&self, nsid: u32, epoch: u64, note: &[u8]) -> Result<(), HostError> {
        let block = self.transfer_len(nsid, 1).await?;
        let wire = fenced::encode_note(note, block)
            .ok_or_else(|| HostError::InvalidArgument(format!("a note of {} bytes is too large", note.len())))?;
        self.check_len(wire.len())?;
        let sqe = undo_list_sqe(fenced::NOTE_SAVE, nsid, epoch, 0, (wire.len() / block) as u32);
        self.q.execute(Command { sqe, data_out: Some(Bytes::from(wire)), read_len: 0 }).await.map(|_| ())
    }

    /// Note Load ([`fenced::NOTE_LOAD`]): the note the replica's node keeps
    /// for the owner of `nsid` (empty when none).
    ///
    /// # Errors
    ///
    /// As [`IoQueue::fenced_read`]; [`HostError::QueueFailed`] with
    /// [`QueueFailure::Protocol`](crate::QueueFailure::Protocol) for a
    /// reply that does not hold a note.
    pub async fn fenced_note_load(&self, nsid: u32, epoch: u64) -> Result<Vec<u8>, HostError> {
        let block = self.transfer_len(nsid, 1).await?;
        let len = (fenced::NOTE_LEN_LEN + fenced::MAX_NOTE).div_ceil(block) * block;
        let len = len.min(self.ctrl.max_transfer / block * block);
        let sqe = undo_list_sqe(fenced::NOTE_LOAD, nsid, epoch, 0, (len / block) as u32);
        let data = self.q.execute(Command { sqe, data_out: None, read_len: len }).await?.data;
        fenced::decode_note(&data).map(<[u8]>::to_vec).map_err(|e| HostError::QueueFailed {
            qid: self.qid(),
            cause: crate::error::QueueFailure::Protocol(format!("note load: {e}")),
        })
    }

    /// A fenced Write Zeroes: as [`IoQueue::write_zeroes`], carrying `epoch`.
    ///
    /// # Errors
    ///
    /// As [`IoQueue::fenced_read`].
    pub async fn fenced_write_zeroes(
        &self,
        nsid: u32,
        epoch: u64,
        slba: u64,
        nblocks: u32,
        deallocate: bool,
    ) -> Result<(), HostError> {
        self.write_zeroes_at(nsid, Some(epoch), slba, nblocks, deallocate).await
    }

    /// Dataset Management with the Deallocate attribute over `ranges`
    /// (`(slba, nblocks)`, 1 to 256 of them).
    ///
    /// # Errors
    ///
    /// [`HostError::InvalidArgument`] for 0 or more than 256 ranges,
    /// [`HostError::Status`] or a transport error.
    pub async fn deallocate(&self, nsid: u32, ranges: &[(u64, u32)]) -> Result<(), HostError> {
        if ranges.is_empty() || ranges.len() > DSM_MAX_RANGES {
            return Err(HostError::InvalidArgument(format!("{} ranges is outside 1..=256", ranges.len())));
        }
        let mut data = Vec::with_capacity(ranges.len() * command::DSM_RANGE_LEN);
        for &(slba, nlb) in ranges {
            data.extend_from_slice(&DsmRange { attributes: 0, nlb, slba }.encode());
        }
        let mut sqe = Sqe::new(io::DATASET_MANAGEMENT, 0);
        sqe.set_nsid(nsid);
        sqe.set_cdw10((ranges.len() - 1) as u32);
        // CDW11 bit 2: Attribute - Deallocate.
        sqe.set_cdw11(1 << 2);
        self.q.execute(Command { sqe, data_out: Some(data.into()), read_len: 0 }).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mdts_is_pages_of_cap_mpsmin() {
        assert_eq!(max_transfer_bytes(8, 0), 1 << 20);
        assert_eq!(max_transfer_bytes(1, 1 << 48), 16384);
        assert_eq!(max_transfer_bytes(0, 0), MAX_TRANSFER_CAP_BYTES);
        assert_eq!(max_transfer_bytes(255, 0), MAX_TRANSFER_CAP_BYTES);
    }

    #[test]
    fn undo_list_commands_carry_their_argument_and_length() {
        for opcode in [fenced::UNDO_RECORDS, fenced::ROLL_BACK_ONLY] {
            let sqe = undo_list_sqe(opcode, 7, 42, 0x0123_4567_89ab_cdef, 3);
            assert_eq!(sqe.opcode(), opcode);
            assert_eq!((sqe.nsid(), sqe.epoch()), (7, 42));
            assert_eq!(sqe.arg64(), 0x0123_4567_89ab_cdef, "the sequence number or mark survives");
            assert_eq!(ReadWrite::decode(&sqe).nlb, 3, "CDW12 as for Read");
        }
    }

    #[test]
    fn block_counts_are_checked_before_encoding() {
        assert!(check_blocks(0).is_err());
        assert!(check_blocks(65537).is_err());
        assert!(check_blocks(65536).is_ok());
    }
}
