//! Asymmetric Namespace Access as hosts read it: the Identify fields Linux
//! checks before it enables multipath on a controller
//! (`nvme_mpath_init_identify`: CMIC.ANA, ANATT, ANACAP, NANAGRPID,
//! ANAGRPMAX, MNAN), the ANA log page it then reads, the group each
//! namespace names, the ANA Change notice, and the path status of I/O
//! through a path that does not serve.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{BS, NQN, start};
use strata_block::{BlockDevice, MemDevice};
use strata_host::{Controller, HostConfig};
use strata_nvme::command::feature;
use strata_nvme::identify as id;
use strata_nvme::log_page::{self as lp, AnaGroup, AnaLog, AnaState};
use strata_nvme::status::Status;
use strata_target::{ANA_GROUP, Namespace, NamespaceIds};

/// The ANA log as Linux reads it: a buffer sized for NANAGRPID groups and
/// MNAN namespaces.
async fn ana_log(ctrl: &Controller, groups_only: bool) -> AnaLog {
    let c = ctrl.identify_controller().await.unwrap();
    let len = lp::ANA_LOG_HEADER_LEN + c.nanagrpid as usize * lp::ANA_GROUP_DESC_LEN + c.mnan as usize * 4;
    let len = len.next_multiple_of(4);
    let lsp = if groups_only { lp::ANA_LSP_RGO } else { 0 };
    let mut sqe = strata_nvme::command::Sqe::new(strata_nvme::command::admin::GET_LOG_PAGE, 0);
    sqe.set_nsid(u32::MAX);
    let numd = (len / 4 - 1) as u32;
    sqe.set_cdw10(u32::from(lp::LogPageId::ANA.0) | u32::from(lsp) << 8 | (numd & 0xffff) << 16);
    sqe.set_cdw11(numd >> 16);
    let (cqe, data) = ctrl.admin_command(sqe, None, len).await.expect("get log page");
    assert_eq!(cqe.status, Status::SUCCESS);
    AnaLog::decode(&data).expect("an ANA log Linux parses")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_announces_ana_and_its_log_lists_every_namespace_optimized() {
    let fx = start(16).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    let c = ctrl.identify_controller().await.unwrap();
    assert_ne!(c.cmic & id::CMIC_ANA, 0, "CMIC.ANA");
    assert_ne!(c.oaes & id::OAES_ANA_CHANGE_NOTICES, 0, "ANA Change notices");
    assert!(c.anatt > 0, "ANATT");
    assert_eq!(c.anacap & 0x1f, 0x1f, "every state reported");
    assert_eq!((c.nanagrpid, c.anagrpmax), (ANA_GROUP, ANA_GROUP));
    // Linux refuses MNAN 0 or above NN, and an ANA log over MDTS.
    assert!(c.mnan > 0 && c.mnan <= c.nn, "MNAN {} NN {}", c.mnan, c.nn);
    let log_len = 16 + 32 * c.nanagrpid as usize + 4 * c.mnan as usize;
    assert!(log_len <= (4096usize << c.mdts), "the ANA log ({log_len} bytes) fits MDTS");
    assert_eq!(ctrl.identify_namespace(1).await.unwrap().anagrpid, ANA_GROUP);

    let ids2 = NamespaceIds { nguid: [0x44; 16], uuid: [0x55; 16], eui64: [0; 8] };
    fx.sub.add_namespace(Namespace::new(3, ids2, Arc::new(MemDevice::new(BS as u32, 16)))).unwrap();
    let group = |nsids| AnaGroup { grpid: ANA_GROUP, chgcnt: 0, state: AnaState::Optimized, nsids };
    assert_eq!(ana_log(&ctrl, false).await, AnaLog { chgcnt: 0, groups: vec![group(vec![1, 3])] });
    assert_eq!(ana_log(&ctrl, true).await, AnaLog { chgcnt: 0, groups: vec![group(vec![])] });
    ctrl.write(1, 0, vec![1u8; BS], false).await.unwrap();
    ctrl.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_stops_serving_raises_a_notice_and_answers_io_with_a_path_status() {
    let fx = start(16).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    ctrl.write(1, 2, vec![5u8; BS], false).await.unwrap();
    ctrl.set_features(feature::ASYNC_EVENT_CONFIG, 1 << 11).await.unwrap();
    assert_eq!(ctrl.get_features(feature::ASYNC_EVENT_CONFIG, 0).await.unwrap(), 1 << 11);

    for (state, status) in [
        (AnaState::Change, Status::ANA_TRANSITION),
        (AnaState::Inaccessible, Status::ANA_INACCESSIBLE),
        (AnaState::PersistentLoss, Status::ANA_PERSISTENT_LOSS),
    ] {
        let aer = ctrl.async_event_request().await.unwrap();
        ctrl.keep_alive().await.unwrap(); // the AER is parked once this returns
        fx.sub.set_ana_state(state);
        let dw0 = tokio::time::timeout(Duration::from_secs(5), aer).await.expect("AER completes").unwrap();
        assert_eq!(dw0, 0x000c_0302, "Notice, ANA Change, log page 0Ch");
        let log = ana_log(&ctrl, false).await;
        assert_eq!(log.groups[0].state, state);
        for err in [
            ctrl.read(1, 2, 1).await.unwrap_err(),
            ctrl.write(1, 3, vec![6u8; BS], false).await.unwrap_err(),
            ctrl.flush(1).await.unwrap_err(),
        ] {
            assert!(err.is_status(status), "{state:?}: {err}");
        }
    }
    // Set twice: no change, no notice, the count stays.
    let before = ana_log(&ctrl, false).await.chgcnt;
    fx.sub.set_ana_state(AnaState::PersistentLoss);
    assert_eq!(ana_log(&ctrl, false).await.chgcnt, before);

    let aer = ctrl.async_event_request().await.unwrap();
    ctrl.keep_alive().await.unwrap();
    fx.sub.set_ana_state(AnaState::NonOptimized);
    tokio::time::timeout(Duration::from_secs(5), aer).await.expect("AER completes").unwrap();
    assert_eq!(ana_log(&ctrl, false).await.chgcnt, before + 1);
    // A non-optimized path serves, and nothing written while it did not
    // serve landed.
    assert_eq!(ctrl.read(1, 2, 1).await.unwrap()[..], [5u8; BS][..]);
    assert_eq!(ctrl.read(1, 3, 1).await.unwrap()[..], [0u8; BS][..]);
    ctrl.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ana_notice_reaches_a_host_that_did_not_ask_for_them() {
    let fx = start(16).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    let aer = ctrl.async_event_request().await.unwrap();
    ctrl.keep_alive().await.unwrap();
    fx.sub.set_ana_state(AnaState::Inaccessible);
    assert!(tokio::time::timeout(Duration::from_millis(500), aer).await.is_err(), "an AER completed unasked");
    ctrl.disconnect().await.unwrap();
}

/// A persistent discovery controller (`nvme discover --persistent`, as
/// nvme-cli's autoconnect keeps) hears when the discovery log changes: a
/// pool node's list of paths follows the nodes, and the host connects
/// the new ones. The notice comes once until the host reads the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_discovery_controller_hears_the_log_change() {
    use strata_nvme::command::async_event::CONFIG_DISCOVERY_LOG_CHANGE;
    use strata_nvme::fabrics::DISCOVERY_NQN;
    use strata_nvme::log_page::LogPageId;
    let fx = start(16).await;
    let cfg = HostConfig { io_queues: 0, kato: Duration::from_secs(10), ..HostConfig::default() };
    let disc = Controller::connect(fx.disc, DISCOVERY_NQN, &cfg).await.expect("a discovery controller");
    let c = disc.identify_controller().await.unwrap();
    assert_eq!(c.oaes & id::OAES_DISCOVERY_LOG_CHANGE_NOTICES, id::OAES_DISCOVERY_LOG_CHANGE_NOTICES);
    // Only the discovery notice is kept on a discovery controller.
    disc.set_features(feature::ASYNC_EVENT_CONFIG, CONFIG_DISCOVERY_LOG_CHANGE | 1 << 11).await.unwrap();
    assert_eq!(disc.get_features(feature::ASYNC_EVENT_CONFIG, 0).await.unwrap(), CONFIG_DISCOVERY_LOG_CHANGE);
    let genctr = |log: Vec<u8>| u64::from_le_bytes(log[..8].try_into().unwrap());
    let before = genctr(disc.get_log_page(LogPageId::DISCOVERY.0, 0, 0, 16, false).await.unwrap());

    let other_path = |port: u16| strata_target::RemoteSubsystem {
        nqn: NQN.into(),
        addr: std::net::SocketAddr::from(([10, 0, 0, 9], port)),
        allowed_hosts: vec![],
    };
    let aer = disc.async_event_request().await.unwrap();
    disc.keep_alive().await.unwrap();
    fx.target.set_remote_subsystems(vec![other_path(4420)]);
    let dw0 = tokio::time::timeout(Duration::from_secs(5), aer).await.expect("AER completes").unwrap();
    assert_eq!(dw0, 0x0070_f002, "Notice, Discovery Log Page Change, log page 70h");
    // Unread, a second change raises nothing.
    let aer = disc.async_event_request().await.unwrap();
    tokio::pin!(aer);
    disc.keep_alive().await.unwrap();
    fx.target.set_remote_subsystems(vec![other_path(4421)]);
    let early = tokio::time::timeout(Duration::from_millis(300), &mut aer).await;
    assert!(early.is_err(), "a second notice before the log was read: {early:?}");
    // Read (without RAE): the next change raises one again.
    let after = genctr(disc.get_log_page(LogPageId::DISCOVERY.0, 0, 0, 16, false).await.unwrap());
    assert!(after >= before + 2, "the generation moved with each change: {before} then {after}");
    fx.target.add_subsystem(strata_target::Subsystem::new("nqn.2026-11.io.strata:new", "STRATANEW", vec![])).unwrap();
    let dw0 = tokio::time::timeout(Duration::from_secs(5), aer).await.expect("AER completes").unwrap();
    assert_eq!(dw0, 0x0070_f002);
    disc.disconnect().await.unwrap();
}

/// A pool node that takes a volume over swaps the device behind its path
/// for the volume itself: the host's controller stays connected, its next
/// command reaches the new device, and with the same identity and size
/// no Namespace Attribute Changed notice is sent (only the ANA change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_replaced_in_place_keeps_its_hosts_connected() {
    let fx = start(16).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    ctrl.write(1, 0, vec![1u8; BS], false).await.unwrap();
    // Namespace Attribute and ANA Change notices on.
    ctrl.set_features(feature::ASYNC_EVENT_CONFIG, 1 << 8 | 1 << 11).await.unwrap();
    fx.sub.set_ana_state(AnaState::Change);
    let first = ctrl.async_event_request().await.unwrap();
    assert_eq!(tokio::time::timeout(Duration::from_secs(5), first).await.expect("AER").unwrap(), 0x000c_0302);
    ana_log(&ctrl, false).await; // reading the log clears the notice
    let aer = ctrl.async_event_request().await.unwrap();
    ctrl.keep_alive().await.unwrap();
    let next = Arc::new(MemDevice::new(BS as u32, 16));
    next.write(0, strata_block::IoBuf::from_slice(&[9u8; BS]), false).await.1.unwrap();
    let old = fx.sub.replace_namespace(Namespace::new(1, crate::common::IDS, next.clone())).expect("replaced");
    assert!(Arc::ptr_eq(&old.device, &(fx.dev.clone() as Arc<dyn BlockDevice>)), "the old device back");
    fx.sub.set_ana_state(AnaState::Optimized);
    let dw0 = tokio::time::timeout(Duration::from_secs(5), aer).await.expect("AER completes").unwrap();
    assert_eq!(dw0, 0x000c_0302, "the ANA change comes first, not a namespace change");
    assert_eq!(ctrl.read(1, 0, 1).await.unwrap(), vec![9u8; BS], "the same connection reads the new device");
    let missing = Namespace::new(2, crate::common::IDS, next);
    assert!(fx.sub.replace_namespace(missing).is_err(), "only an active NSID is replaced");
    ctrl.disconnect().await.unwrap();
}
