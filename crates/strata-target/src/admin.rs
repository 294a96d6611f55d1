//! The admin command set of I/O and discovery controllers, and the
//! fabrics commands that run on an established admin queue (Property
//! Get/Set, Disconnect).
//!
//! Each command is answered with a completion and, for
//! controller-to-host commands, the data to return; Asynchronous Event
//! Requests may instead be parked on the controller. Nothing here touches
//! a socket: the connection driver sends what these functions return.
//!
//! The reported capabilities follow what the Linux kernel initiator
//! expects of a fabrics controller (and what the kernel's own nvmet
//! reports): SGL support with offsets, traffic-based keep alive, a
//! volatile write cache with broadcast flush, namespace attribute notices
//! and extended Get Log Page data. Like nvmet, nothing is reported that the
//! target does not know: no temperatures, power states or spare capacity.

use std::sync::Arc;

use strata_nvme::command::{FeaturesCmd, GetLogPage, IdentifyCmd, Sqe, TemperatureThreshold, admin, feature, io};
use strata_nvme::completion::Cqe;
use strata_nvme::fabrics::{PropertyCmd, fctype, reg};
use strata_nvme::identify::{
    self as id, Cns, IdentifyController, IdentifyControllerNvm, IdentifyNamespace, IdentifyNamespaceIndependent,
    NsIdDescriptor,
};
use strata_nvme::log_page::{self as lp, LogPageId, SmartLog};
use strata_nvme::status::Status;

use crate::config::{MAX_QUEUE_SIZE, TargetConfig};
use crate::controller::{AER_LIMIT, Controller, ControllerKind, ERROR_LOG_ENTRIES};
use crate::namespace::Namespace;

/// The answer to an admin command.
#[derive(Debug)]
pub enum AdminReply {
    /// Send this completion, preceded by `data` when non-empty.
    Done(Cqe, Vec<u8>),
    /// An AER was parked; it completes when an event arrives.
    Parked,
    /// Disconnect: send the completion, then close the connection.
    Disconnect(Cqe),
}

/// What the admin commands need from outside the controller.
pub struct AdminContext<'a> {
    /// Target settings.
    pub config: &'a TargetConfig,
    /// The discovery log page for this controller's host, for discovery
    /// controllers.
    pub discovery_log: &'a (dyn Fn() -> Vec<u8> + Send + Sync),
}

fn done(cid: u16, status: Status) -> AdminReply {
    AdminReply::Done(Cqe::new(cid, status), Vec::new())
}

fn done_data(cid: u16, data: Vec<u8>) -> AdminReply {
    AdminReply::Done(Cqe::new(cid, Status::SUCCESS), data)
}

fn done_result(cid: u16, result: u64) -> AdminReply {
    let mut cqe = Cqe::new(cid, Status::SUCCESS);
    cqe.result = result;
    AdminReply::Done(cqe, Vec::new())
}

/// Executes one admin-queue command (other than Connect) on `ctrl`.
pub async fn execute(ctx: &AdminContext<'_>, ctrl: &Arc<Controller>, sqe: &Sqe, read_len: usize) -> AdminReply {
    let cid = sqe.cid();
    ctrl.touch();
    if sqe.opcode() == strata_nvme::fabrics::FABRICS_OPCODE {
        return fabrics(ctx, ctrl, sqe).await;
    }
    // Admin commands other than fabrics need an enabled controller.
    if ctrl.lock().cc & reg::CC_EN == 0 {
        return done(cid, Status::COMMAND_SEQUENCE.dnr());
    }
    let discovery = matches!(ctrl.kind(), ControllerKind::Discovery);
    let reply = match sqe.opcode() {
        admin::IDENTIFY => identify(ctx, ctrl, sqe),
        admin::GET_LOG_PAGE => get_log_page(ctx, ctrl, sqe),
        admin::KEEP_ALIVE => done(cid, Status::SUCCESS),
        admin::SET_FEATURES => set_features(ctrl, sqe),
        admin::GET_FEATURES => get_features(ctrl, sqe),
        admin::ASYNC_EVENT_REQUEST => match ctrl.park_aer(cid) {
            Ok(Some(cqe)) => AdminReply::Done(cqe, Vec::new()),
            Ok(None) => AdminReply::Parked,
            Err(s) => done(cid, s),
        },
        // Abort: we never abort; DW0 bit 0 set says "not aborted".
        admin::ABORT if !discovery => done_result(cid, 1),
        _ => done(cid, Status::INVALID_OPCODE.dnr()),
    };
    if let AdminReply::Done(cqe, mut data) = reply {
        if !cqe.status.is_success() {
            ctrl.record_error(0, cid, cqe.status, sqe.nsid(), 0);
        }
        // Controller-to-host data is exactly what the host's SGL asked for:
        // shorter structures are zero-filled, longer ones cut.
        if cqe.status.is_success() && read_len > 0 {
            data.resize(read_len, 0);
        } else {
            data.clear();
        }
        return AdminReply::Done(cqe, data);
    }
    reply
}

async fn fabrics(_ctx: &AdminContext<'_>, ctrl: &Arc<Controller>, sqe: &Sqe) -> AdminReply {
    let cid = sqe.cid();
    match sqe.fctype() {
        fctype::PROPERTY_GET => property_get(ctrl, sqe),
        fctype::PROPERTY_SET => property_set(ctrl, sqe).await,
        fctype::DISCONNECT => AdminReply::Disconnect(Cqe::new(cid, Status::SUCCESS)),
        // Connect on an established queue is a sequence error.
        fctype::CONNECT => done(cid, Status::COMMAND_SEQUENCE.dnr()),
        _ => done(cid, Status::INVALID_OPCODE.dnr()),
    }
}

fn property_get(ctrl: &Controller, sqe: &Sqe) -> AdminReply {
    let p = PropertyCmd::decode(sqe);
    let cid = sqe.cid();
    let st = ctrl.lock();
    let (value, eight) = match p.offset {
        reg::CAP => (reg::cap(MAX_QUEUE_SIZE - 1, 30), true),
        reg::VS => (u64::from(reg::VERSION_1_4), false),
        reg::CC => (u64::from(st.cc), false),
        reg::CSTS => (u64::from(st.csts), false),
        _ => return done(cid, Status::INVALID_FIELD.dnr()),
    };
    if eight != p.eight_bytes {
        return done(cid, Status::INVALID_FIELD.dnr());
    }
    done_result(cid, value)
}

async fn property_set(ctrl: &Controller, sqe: &Sqe) -> AdminReply {
    let p = PropertyCmd::decode(sqe);
    let cid = sqe.cid();
    if p.offset != reg::CC || p.eight_bytes {
        return done(cid, Status::INVALID_FIELD.dnr());
    }
    let new = p.value as u32;
    let old = ctrl.lock().cc;
    let shutdown = (new >> reg::CC_SHN_SHIFT) & 0x3 != 0 && (old >> reg::CC_SHN_SHIFT) & 0x3 == 0;
    if shutdown {
        // Shutdown notification: the host expects its data to be durable
        // when it sees "shutdown complete".
        if let Some(sub) = ctrl.subsystem() {
            for ns in sub.namespaces() {
                if let Err(e) = ns.device.flush().await {
                    tracing::warn!(cntlid = ctrl.cntlid(), nsid = ns.nsid, "flush on controller shutdown failed: {e}");
                }
            }
        }
    }
    let mut st = ctrl.lock();
    if new & reg::CC_EN != 0 && old & reg::CC_EN == 0 {
        // I/O queue entry sizes must be 64 and 16 bytes when enabling an
        // I/O controller.
        let iosqes = (new >> reg::CC_IOSQES_SHIFT) & 0xf;
        let iocqes = (new >> reg::CC_IOCQES_SHIFT) & 0xf;
        let css = (new >> reg::CC_CSS_SHIFT) & 0x7;
        let mps = (new >> reg::CC_MPS_SHIFT) & 0xf;
        let io = matches!(ctrl.kind(), ControllerKind::Io(_));
        if (io && (iosqes != 6 || iocqes != 4)) || css != 0 || mps != 0 {
            st.cc = new;
            st.csts = reg::CSTS_CFS;
            return done(cid, Status::SUCCESS);
        }
        st.csts |= reg::CSTS_RDY;
    } else if new & reg::CC_EN == 0 && old & reg::CC_EN != 0 {
        // Controller reset.
        st.csts &= !reg::CSTS_RDY;
        drop(st);
        ctrl.clear_aers();
        st = ctrl.lock();
    }
    if shutdown {
        st.csts = (st.csts & !(0x3 << 2)) | reg::CSTS_SHST_COMPLETE;
    }
    st.cc = new;
    done(cid, Status::SUCCESS)
}

fn identify(ctx: &AdminContext<'_>, ctrl: &Controller, sqe: &Sqe) -> AdminReply {
    let cmd = IdentifyCmd::decode(sqe);
    let cid = sqe.cid();
    let nsid = sqe.nsid();
    let sub = match ctrl.kind() {
        ControllerKind::Io(s) => s.clone(),
        ControllerKind::Discovery => {
            return if Cns(cmd.cns) == Cns::CONTROLLER {
                done_data(cid, identify_controller(ctx, ctrl).encode().to_vec())
            } else {
                done(cid, Status::INVALID_FIELD.dnr())
            };
        }
    };
    let cns = Cns(cmd.cns);
    // Only the NVM Command Set is implemented; nvmet and the spec refuse
    // the I/O Command Set specific structures of any other CSI.
    let csi_specific = matches!(cns, Cns::IO_CS_NAMESPACE | Cns::IO_CS_CONTROLLER | Cns::IO_CS_ACTIVE_NS_LIST);
    if csi_specific && cmd.csi != id::CSI_NVM {
        return done(cid, Status::INVALID_FIELD.dnr());
    }
    match cns {
        Cns::CONTROLLER => done_data(cid, identify_controller(ctx, ctrl).encode().to_vec()),
        Cns::IO_CS_CONTROLLER => done_data(cid, identify_controller_nvm().encode().to_vec()),
        Cns::NAMESPACE => {
            if nsid == 0 || (nsid > sub.max_nsid() && nsid != u32::MAX) {
                return done(cid, Status::INVALID_NS.dnr());
            }
            // An inactive NSID returns a zero-filled structure.
            let data = match sub.namespace_for(nsid, ctrl.hostnqn()) {
                Some(ns) => {
                    let mut id = identify_namespace(&ns);
                    if sub.serves_reservations() {
                        id.rescap = RESCAP;
                        if sub.reservation_store().is_some() {
                            id.rescap |= RESCAP_PTPL;
                        }
                    }
                    id.encode().to_vec()
                }
                None => IdentifyNamespace::default().encode().to_vec(),
            };
            done_data(cid, data)
        }
        // Every namespace is an NVM Command Set namespace, so the list for
        // CSI 00h is the whole list.
        Cns::ACTIVE_NS_LIST | Cns::IO_CS_ACTIVE_NS_LIST => {
            if nsid >= 0xFFFF_FFFE {
                return done(cid, Status::INVALID_NS.dnr());
            }
            done_data(cid, id::encode_active_ns_list(sub.nsids_for(ctrl.hostnqn()), nsid).to_vec())
        }
        Cns::NS_ID_DESCRIPTOR_LIST => {
            let Some(ns) = sub.namespace_for(nsid, ctrl.hostnqn()) else { return done(cid, Status::INVALID_NS.dnr()) };
            let mut descs = vec![NsIdDescriptor::Nguid(ns.ids.nguid), NsIdDescriptor::Uuid(ns.ids.uuid)];
            if ns.ids.eui64 != [0; 8] {
                descs.insert(0, NsIdDescriptor::Eui64(ns.ids.eui64));
            }
            descs.push(NsIdDescriptor::Csi(id::CSI_NVM));
            match id::encode_ns_id_descriptors(&descs) {
                Ok(b) => done_data(cid, b.to_vec()),
                Err(_) => done(cid, Status::INTERNAL),
            }
        }
        // An inactive NSID is Invalid Namespace here, as in nvmet
        // (`nvmet_req_find_ns`), not a zero-filled structure.
        Cns::IO_CS_NAMESPACE => match sub.namespace_for(nsid, ctrl.hostnqn()) {
            // No protection information, storage tags or extended formats:
            // every field of the NVM Command Set Identify Namespace is 0.
            Some(_) => done_data(cid, vec![0; id::IDENTIFY_DATA_LEN]),
            None => done(cid, Status::INVALID_NS.dnr()),
        },
        Cns::CS_INDEPENDENT_NAMESPACE => match sub.namespace_for(nsid, ctrl.hostnqn()) {
            Some(_) => done_data(cid, identify_namespace_independent().encode().to_vec()),
            None => done(cid, Status::INVALID_NS.dnr()),
        },
        _ => done(cid, Status::INVALID_FIELD.dnr()),
    }
}

/// The NVM Command Set specific Identify Controller (CNS 06h, CSI 00h):
/// recommended size limits, 0 where the target has none.
///
/// A Write Zeroes moves no data, so MDTS does not bound it, and the store
/// zeroes by extent; only its 16-bit NLB does: 65536 blocks, which is at
/// least 32 MiB (512-byte blocks), 2^13 units of CAP.MPSMIN (4 KiB). Saying
/// so lets hosts zero in 32 MiB commands instead of MDTS-sized ones (Linux
/// caps Write Zeroes at MDTS when WZSL is 0). Any Dataset Management the
/// command format can carry (256 ranges of up to 2^32 - 1 blocks) is
/// accepted, so DMRL, DMRSL and DMSL report no limit; Verify and Write
/// Uncorrectable are not supported (ONCS), so VSL and WUSL are 0.
fn identify_controller_nvm() -> IdentifyControllerNvm {
    const NLB_MAX_SHIFT: u32 = 16;
    const MIN_BLOCK_SHIFT: u32 = 9;
    const MPSMIN_SHIFT: u32 = 12;
    IdentifyControllerNvm { wzsl: (NLB_MAX_SHIFT + MIN_BLOCK_SHIFT - MPSMIN_SHIFT) as u8, ..Default::default() }
}

/// The I/O Command Set Independent Identify Namespace (CNS 08h) of an
/// active namespace: shared, ready, not write protected, in the
/// subsystem's ANA group, no NVM set or endurance group, as CNS 00h
/// reports it.
fn identify_namespace_independent() -> IdentifyNamespaceIndependent {
    IdentifyNamespaceIndependent {
        nmic: id::NMIC_SHARED,
        nstat: id::NSTAT_NAMESPACE_READY,
        anagrpid: crate::subsystem::ANA_GROUP,
        ..Default::default()
    }
}

/// RESCAP of a namespace whose reservations are served: all six types,
/// and IEKEY as NVMe 1.3 defines it (bit 7).
const RESCAP: u8 = 0b1111_1110;
/// RESCAP bit 0, Persist Through Power Loss: where the subsystem keeps
/// the state in a store.
const RESCAP_PTPL: u8 = 1;

/// ANATT: the longest an ANA group stays in the Change state, seconds. A
/// host that sees Change waits this long before it gives up on the path;
/// it covers a cluster takeover (the default lease of 10 s, the 4 s a
/// volume waits for its last owner, the open) with room to spare.
pub const ANATT_SECS: u8 = 30;

/// ANACAP: every ANA state may be reported.
const ANACAP_ALL_STATES: u8 = id::ANACAP_OPTIMIZED
    | id::ANACAP_NON_OPTIMIZED
    | id::ANACAP_INACCESSIBLE
    | id::ANACAP_PERSISTENT_LOSS
    | id::ANACAP_CHANGE;

/// The Identify Controller data of `ctrl`.
///
/// Power and thermal fields stay zero: there is one power state (NPSS 0)
/// and nothing to say about it, and no temperature is measured, so PSD0,
/// WCTEMP and CCTEMP are not reported. SPDK's target leaves PSD0 zero as
/// well; nvmet fills it with QEMU's made-up 25 W, which we do not copy.
pub fn identify_controller(ctx: &AdminContext<'_>, ctrl: &Controller) -> IdentifyController {
    let cfg = ctx.config;
    let mut c = IdentifyController {
        mn: "strata".into(),
        fr: cfg.firmware_revision.clone(),
        rab: 6,
        cntlid: ctrl.cntlid(),
        ver: reg::VERSION_1_4,
        ctratt: id::CTRATT_HOST_ID_128 | id::CTRATT_TBKAS,
        aerl: (AER_LIMIT - 1) as u8,
        lpa: id::LPA_EXTENDED_DATA,
        elpe: (ERROR_LOG_ENTRIES - 1) as u8,
        kas: 10,
        maxcmd: MAX_QUEUE_SIZE,
        sgls: id::SGLS_SUPPORTED_BYTE_ALIGNED | id::SGLS_KEYED_DATA_BLOCK | id::SGLS_ADDRESS_AS_OFFSET,
        ioccsz: ((strata_nvme::command::SQE_LEN + cfg.in_capsule_data) / 16) as u32,
        iorcsz: 1,
        msdbd: 1,
        ofcs: id::OFCS_DISCONNECT,
        ..Default::default()
    };
    match ctrl.kind() {
        ControllerKind::Io(sub) => {
            c.sn = sub.serial().into();
            c.mn = sub.model().into();
            c.subnqn = sub.nqn().into();
            c.cntrltype = id::CNTRLTYPE_IO;
            c.cmic = id::CMIC_MULTI_PORT | id::CMIC_MULTI_CONTROLLER;
            c.mdts = cfg.mdts;
            c.oaes = id::OAES_NS_ATTRIBUTE_NOTICES;
            if !sub.is_internal() {
                // Every namespace is in one ANA group (see `subsystem`),
                // whose state may be any of the five; it changes only
                // while the namespace stays attached.
                c.cmic |= id::CMIC_ANA;
                c.oaes |= id::OAES_ANA_CHANGE_NOTICES;
                c.anatt = ANATT_SECS;
                c.anacap = ANACAP_ALL_STATES | id::ANACAP_GRPID_STATIC;
                c.anagrpmax = crate::subsystem::ANA_GROUP;
                c.nanagrpid = crate::subsystem::ANA_GROUP;
            }
            // SMART / Health per namespace, like nvmet (see `smart_log`).
            c.lpa |= id::LPA_SMART_PER_NAMESPACE | id::LPA_COMMANDS_EFFECTS;
            c.acl = 3;
            c.frmw = id::FRMW_SLOT1_READ_ONLY | (1 << id::FRMW_NUM_SLOTS_SHIFT);
            c.sqes = id::SQES_64;
            c.cqes = id::CQES_16;
            c.nn = sub.max_nsid();
            c.mnan = sub.max_nsid();
            c.oncs = id::ONCS_COMPARE | id::ONCS_DSM | id::ONCS_WRITE_ZEROES;
            if sub.serves_reservations() {
                c.oncs |= id::ONCS_RESERVATIONS;
            }
            c.vwc = id::VWC_PRESENT | id::VWC_FLUSH_BROADCAST_SUPPORTED;
            c.awun = 0;
            c.awupf = 0;
        }
        ControllerKind::Discovery => {
            c.sn = "strata-discovery".into();
            c.subnqn = strata_nvme::fabrics::DISCOVERY_NQN.into();
            c.cntrltype = id::CNTRLTYPE_DISCOVERY;
            c.mdts = cfg.mdts;
            // A persistent discovery controller hears when the log
            // changes (a pool volume's paths come and go with nodes).
            c.oaes = id::OAES_DISCOVERY_LOG_CHANGE_NOTICES;
        }
    }
    c
}

/// The Identify Namespace data of `ns`.
pub fn identify_namespace(ns: &Namespace) -> IdentifyNamespace {
    let g = ns.device.geometry();
    let usage = ns.device.usage();
    let mut lbaf = [id::LbaFormat::default(); id::LBAF_COUNT];
    lbaf[0] = id::LbaFormat { ms: 0, lbads: g.block_size.trailing_zeros() as u8, rp: 0 };
    let nuse = usage.allocated_bytes / u64::from(g.block_size);
    IdentifyNamespace {
        nsze: g.num_blocks,
        ncap: g.num_blocks,
        nuse: nuse.min(g.num_blocks),
        nsfeat: id::NSFEAT_THIN_PROVISIONING,
        nlbaf: 0,
        flbas: 0,
        nmic: id::NMIC_SHARED,
        dlfeat: id::DLFEAT_READ_ZEROES | id::DLFEAT_WRITE_ZEROES_DEALLOCATE,
        nvmcap: u128::from(g.size_bytes()),
        nguid: ns.ids.nguid,
        eui64: ns.ids.eui64,
        anagrpid: crate::subsystem::ANA_GROUP,
        lbaf,
        ..Default::default()
    }
}

fn get_log_page(ctx: &AdminContext<'_>, ctrl: &Controller, sqe: &Sqe) -> AdminReply {
    let cmd = GetLogPage::decode(sqe);
    let cid = sqe.cid();
    let discovery = matches!(ctrl.kind(), ControllerKind::Discovery);
    let page: Vec<u8> = match (LogPageId(cmd.lid), discovery) {
        (LogPageId::DISCOVERY, true) => {
            ctrl.discovery_log_read(cmd.rae);
            (ctx.discovery_log)()
        }
        (LogPageId::ERROR, _) => {
            let (entries, _) = ctrl.error_log();
            let mut b = Vec::with_capacity(ERROR_LOG_ENTRIES * lp::ERROR_LOG_ENTRY_LEN);
            for e in entries {
                b.extend_from_slice(&e.encode());
            }
            b.resize(ERROR_LOG_ENTRIES * lp::ERROR_LOG_ENTRY_LEN, 0);
            b
        }
        (LogPageId::SMART, false) => match smart_log(ctrl, sqe.nsid()) {
            Ok(log) => log.encode().to_vec(),
            Err(status) => return done(cid, status),
        },
        (LogPageId::FW_SLOT, false) => {
            let mut b = vec![0u8; 512];
            b[0] = 1; // AFI: slot 1 active.
            let fr = ctx.config.firmware_revision.as_bytes();
            let n = fr.len().min(8);
            b[8..16].fill(b' ');
            b[8..8 + n].copy_from_slice(&fr[..n]);
            b
        }
        (LogPageId::CHANGED_NS, false) => lp::encode_changed_ns_list(&ctrl.take_changed_namespaces(cmd.rae)).to_vec(),
        (LogPageId::CMD_EFFECTS, false) => {
            commands_effects_log(ctrl.subsystem().is_some_and(|s| s.serves_reservations()))
        }
        (LogPageId(strata_nvme::reservation::NOTIFICATION_LOG_PAGE), false) => {
            ctrl.take_reservation_notice(cmd.rae).encode().to_vec()
        }
        (LogPageId::ANA, false) => match ctrl.subsystem() {
            Some(sub) if !sub.is_internal() => {
                ctrl.ana_log_read(cmd.rae);
                sub.ana_log().encode(cmd.lsp & lp::ANA_LSP_RGO != 0)
            }
            _ => return done(cid, Status::INVALID_LOG_PAGE.dnr()),
        },
        _ => return done(cid, Status::INVALID_LOG_PAGE.dnr()),
    };
    match lp::log_window(&page, cmd.offset, cmd.len) {
        Ok(w) => done_data(cid, w.to_vec()),
        Err(_) => done(cid, Status::INVALID_FIELD.dnr()),
    }
}

/// The SMART / Health log for namespace `nsid`, or for all namespaces of
/// the subsystem when `nsid` is FFFFFFFFh (or 0h, which some hosts send for
/// controller-wide logs).
///
/// As in Linux nvmet (`nvmet_execute_get_log_page_smart`), only what the
/// target really counts is reported: the I/O counts and data units of the
/// namespaces (see [`crate::controller::NamespaceIoStats`]), the media
/// errors it returned and the controller's error log entries. There is no
/// temperature sensor, spare capacity, wear, power cycle or power-on clock
/// behind a network namespace, so those fields are zero ("not reported")
/// and no critical warning is raised.
///
/// # Errors
///
/// Invalid Namespace (DNR) for an NSID that is not active, as nvmet answers.
fn smart_log(ctrl: &Controller, nsid: u32) -> Result<SmartLog, Status> {
    let Some(sub) = ctrl.subsystem() else { return Ok(SmartLog::default()) };
    let namespaces = if nsid == 0 || nsid == u32::MAX {
        sub.namespaces()
    } else {
        vec![sub.namespace_for(nsid, ctrl.hostnqn()).ok_or(Status::INVALID_NS.dnr())?]
    };
    let t = sub.io_stats.totals(namespaces.iter().map(|ns| &**ns));
    let (_, errors) = ctrl.error_log();
    Ok(SmartLog {
        data_units_read: SmartLog::data_units_from_sectors(t.sectors_read),
        data_units_written: SmartLog::data_units_from_sectors(t.sectors_written),
        host_read_commands: t.read_commands,
        host_write_commands: t.write_commands,
        media_errors: t.media_errors,
        num_error_log_entries: errors.into(),
        ..Default::default()
    })
}

fn commands_effects_log(reservations: bool) -> Vec<u8> {
    const CSUPP: u32 = 1 << 0;
    const LBCC: u32 = 1 << 1;
    let mut b = vec![0u8; 4096];
    let mut set = |off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_le_bytes());
    for op in [
        admin::GET_LOG_PAGE,
        admin::IDENTIFY,
        admin::ABORT,
        admin::SET_FEATURES,
        admin::GET_FEATURES,
        admin::ASYNC_EVENT_REQUEST,
        admin::KEEP_ALIVE,
    ] {
        set(usize::from(op) * 4, CSUPP);
    }
    for (op, effects) in [
        (io::FLUSH, CSUPP),
        (io::WRITE, CSUPP | LBCC),
        (io::READ, CSUPP),
        (io::COMPARE, CSUPP),
        (io::WRITE_ZEROES, CSUPP | LBCC),
        (io::DATASET_MANAGEMENT, CSUPP | LBCC),
    ] {
        set(1024 + usize::from(op) * 4, effects);
    }
    if reservations {
        use strata_nvme::reservation::opcode as rsv;
        for op in [rsv::REGISTER, rsv::REPORT, rsv::ACQUIRE, rsv::RELEASE] {
            set(1024 + usize::from(op) * 4, CSUPP);
        }
    }
    b
}

fn set_features(ctrl: &Controller, sqe: &Sqe) -> AdminReply {
    let f = FeaturesCmd::decode(sqe);
    let cid = sqe.cid();
    if f.save {
        return done(cid, Status::FEATURE_NOT_SAVEABLE.dnr());
    }
    let mut st = ctrl.lock();
    match f.fid {
        feature::NUMBER_OF_QUEUES => {
            let nsqr = f.value & 0xffff;
            let ncqr = f.value >> 16;
            if nsqr == 0xffff || ncqr == 0xffff {
                return done(cid, Status::INVALID_FIELD.dnr());
            }
            if !st.io_queues.is_empty() {
                return done(cid, Status::COMMAND_SEQUENCE.dnr());
            }
            // Grant what was asked within our limit; the same number of
            // submission and completion queues (they are paired on fabrics).
            let max = u32::from(ctrl_max_queues(ctrl));
            let granted = (nsqr.min(ncqr) + 1).min(max).max(1);
            st.io_queues_granted = granted as u16;
            let g = granted - 1;
            done_result(cid, u64::from(g | (g << 16)))
        }
        feature::KEEP_ALIVE_TIMER => {
            drop(st);
            ctrl.set_kato(f.value);
            done(cid, Status::SUCCESS)
        }
        feature::ASYNC_EVENT_CONFIG => {
            use strata_nvme::command::async_event::{CONFIG_ANA_CHANGE, CONFIG_DISCOVERY_LOG_CHANGE, CONFIG_NS_ATTR};
            let supported = match ctrl.kind() {
                ControllerKind::Discovery => CONFIG_DISCOVERY_LOG_CHANGE,
                ControllerKind::Io(_) => CONFIG_NS_ATTR | CONFIG_ANA_CHANGE,
            };
            st.async_event_config = f.value & supported;
            done(cid, Status::SUCCESS)
        }
        strata_nvme::reservation::FEATURE_NOTIFICATION_MASK if serves_reservations(ctrl) => {
            if f.value & !RESERVATION_MASK_BITS != 0 {
                return done(cid, Status::INVALID_FIELD.dnr());
            }
            st.reservation_mask = f.value;
            done(cid, Status::SUCCESS)
        }
        // Changed with Reservation Register's CPTPL, which keeps it with
        // the rest of the state before completing.
        strata_nvme::reservation::FEATURE_PERSISTENCE if serves_reservations(ctrl) => {
            done(cid, Status::FEATURE_NOT_CHANGEABLE.dnr())
        }
        feature::VOLATILE_WRITE_CACHE => {
            // The cache cannot be turned off; enabling it is a no-op.
            if f.value & 1 == 1 { done(cid, Status::SUCCESS) } else { done(cid, Status::FEATURE_NOT_CHANGEABLE.dnr()) }
        }
        feature::TEMPERATURE_THRESHOLD => match composite_threshold(f.value) {
            Some(t) => {
                st.temperature_thresholds[usize::from(t.under)] = t.kelvins;
                done(cid, Status::SUCCESS)
            }
            None => done(cid, Status::INVALID_FIELD.dnr()),
        },
        // Power state 0 is the only one (NPSS 0); no Deallocated or
        // Unwritten Logical Block Error (DULBE, bit 16) without NSFEAT's
        // DAE bit.
        feature::POWER_MANAGEMENT if f.value & 0x1f != 0 => done(cid, Status::INVALID_FIELD.dnr()),
        feature::ERROR_RECOVERY if f.value & (1 << 16) != 0 => done(cid, Status::INVALID_FIELD.dnr()),
        feature::ARBITRATION
        | feature::POWER_MANAGEMENT
        | feature::ERROR_RECOVERY
        | feature::INTERRUPT_COALESCING
        | feature::WRITE_ATOMICITY => {
            st.kept_features.insert(f.fid, f.value);
            done(cid, Status::SUCCESS)
        }
        feature::HOST_IDENTIFIER => done(cid, Status::COMMAND_SEQUENCE.dnr()),
        _ => done(cid, Status::INVALID_FIELD.dnr()),
    }
}

/// The over temperature threshold of the Composite Temperature before a
/// host sets one: FFFFh kelvins, which nothing reaches (no temperature is
/// measured behind a fabrics controller, and WCTEMP is 0, "not
/// reported", so there is no warning threshold to default to).
pub(crate) const OVER_TEMPERATURE_DEFAULT: u16 = 0xFFFF;

/// The Temperature Threshold feature (mandatory, NVMe Base 2.0 5.27.1.3)
/// for the one temperature there is, the Composite: TMPSEL 0h, or Fh
/// (every implemented sensor, which is the Composite alone). A sensor
/// 1-8 is not implemented (their SMART log fields are 0): `None`, as for
/// a reserved select. SPDK's target answers it the same way, without a
/// sensor; nvmet refuses the feature, and SPDK's `identify` then skips
/// the whole health section.
fn composite_threshold(cdw11: u32) -> Option<TemperatureThreshold> {
    TemperatureThreshold::decode(cdw11)
        .filter(|t| matches!(t.sensor, TemperatureThreshold::COMPOSITE | TemperatureThreshold::ALL_SENSORS))
}

fn ctrl_max_queues(ctrl: &Controller) -> u16 {
    ctrl.max_io_queues()
}

/// The Reservation Notification Mask bits: Registration Preempted,
/// Reservation Released, Reservation Preempted.
const RESERVATION_MASK_BITS: u32 = 0b1110;

fn serves_reservations(ctrl: &Controller) -> bool {
    ctrl.subsystem().is_some_and(|s| s.serves_reservations())
}

fn get_features(ctrl: &Controller, sqe: &Sqe) -> AdminReply {
    let f = FeaturesCmd::decode(sqe);
    let cid = sqe.cid();
    let st = ctrl.lock();
    let value: u32 = match f.fid {
        feature::NUMBER_OF_QUEUES => {
            let g = u32::from(st.io_queues_granted.max(1) - 1);
            g | (g << 16)
        }
        feature::KEEP_ALIVE_TIMER => st.kato_ms,
        feature::ASYNC_EVENT_CONFIG => st.async_event_config,
        feature::VOLATILE_WRITE_CACHE => 1,
        feature::TEMPERATURE_THRESHOLD => match composite_threshold(f.value) {
            Some(t) => u32::from(st.temperature_thresholds[usize::from(t.under)]),
            None => return done(cid, Status::INVALID_FIELD.dnr()),
        },
        feature::ARBITRATION
        | feature::POWER_MANAGEMENT
        | feature::ERROR_RECOVERY
        | feature::INTERRUPT_COALESCING
        | feature::WRITE_ATOMICITY => st.kept_features.get(&f.fid).copied().unwrap_or(0),
        strata_nvme::reservation::FEATURE_NOTIFICATION_MASK if serves_reservations(ctrl) => st.reservation_mask,
        strata_nvme::reservation::FEATURE_PERSISTENCE if serves_reservations(ctrl) => {
            let Some(sub) = ctrl.subsystem() else { return done(cid, Status::INVALID_FIELD.dnr()) };
            match sub.entry(sqe.nsid()).filter(|_| sub.visible(sqe.nsid(), ctrl.hostnqn())) {
                Some(e) => u32::from(e.reservations.with(|r| r.persists())),
                None => return done(cid, Status::INVALID_NS.dnr()),
            }
        }
        feature::HOST_IDENTIFIER => {
            // EXHID (CDW11 bit 0) must be set: we report 128-bit host IDs.
            if f.value & 1 == 0 {
                return done(cid, Status::INVALID_FIELD.dnr());
            }
            return done_data(cid, ctrl.hostid().to_vec());
        }
        _ => return done(cid, Status::INVALID_FIELD.dnr()),
    };
    done_result(cid, u64::from(value))
}
