//! Identify and Get Features as hosts probe them at attach, checked against
//! what Linux nvmet (`drivers/nvme/target/admin-cmd.c`) and SPDK's target
//! (`lib/nvmf/ctrlr.c`) answer: nothing reported that the target does not
//! know.

use crate::common::{NQN, start};
use strata_host::{Controller, HostConfig};
use strata_nvme::command::{Sqe, admin, feature};
use strata_nvme::identify::PowerStateDescriptor;
use strata_nvme::log_page::{self as lp, SmartLog};
use strata_nvme::status::Status;

/// Identify Controller used to claim a 25 W power state 0 with made-up
/// entry and exit latencies, and warning / critical temperature thresholds
/// of 70 C and 100 C. There is no power or thermal management behind a
/// fabrics controller: SPDK's target leaves PSD0 zero, nvmet leaves WCTEMP
/// and CCTEMP zero ("not reported").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identify_controller_reports_no_power_or_thermal_figures() {
    let fx = start(16).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    let c = ctrl.identify_controller().await.unwrap();
    assert_eq!(c.npss, 0, "one power state");
    assert_eq!(c.psd0, PowerStateDescriptor::default());
    assert_eq!((c.wctemp, c.cctemp), (0, 0));
    ctrl.disconnect().await.unwrap();
}

/// Regression (issue 23): `spdk_nvme_identify` began with
/// `get_feature(0x04) failed`, logged an error-log entry and skipped its
/// whole health section: Temperature Threshold is mandatory, and was
/// refused with Invalid Field (as nvmet does). It is answered for the
/// Composite Temperature, the only one there is, with no sensor invented:
/// over FFFFh kelvins until a host sets one, under 0, kept as set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_temperature_threshold_is_answered_for_the_composite_temperature_only() {
    use strata_nvme::command::TemperatureThreshold as T;
    let fx = start(16).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    let errors = error_count(&ctrl).await;
    let over = T { kelvins: 0, sensor: T::COMPOSITE, under: false }.encode();
    let under = T { kelvins: 0, sensor: T::COMPOSITE, under: true }.encode();
    // What SPDK's identify and `nvme get-feature -f 4` send: CDW11 0.
    assert_eq!(ctrl.get_features(feature::TEMPERATURE_THRESHOLD, 0).await.unwrap(), 0xFFFF);
    assert_eq!(ctrl.get_features(feature::TEMPERATURE_THRESHOLD, under).await.unwrap(), 0);
    assert_eq!(error_count(&ctrl).await, errors, "no error-log entry");
    // Set, and read back; every sensor means the Composite.
    ctrl.set_features(feature::TEMPERATURE_THRESHOLD, T { kelvins: 358, ..T::decode(over).unwrap() }.encode())
        .await
        .unwrap();
    assert_eq!(ctrl.get_features(feature::TEMPERATURE_THRESHOLD, over).await.unwrap(), 358);
    let all = T { kelvins: 273, sensor: T::ALL_SENSORS, under: true }.encode();
    ctrl.set_features(feature::TEMPERATURE_THRESHOLD, all).await.unwrap();
    assert_eq!(ctrl.get_features(feature::TEMPERATURE_THRESHOLD, under).await.unwrap(), 273);
    assert_eq!(ctrl.get_features(feature::TEMPERATURE_THRESHOLD, over).await.unwrap(), 358, "over kept");
    // No sensor 1-8, and reserved selects: Invalid Field.
    for cdw11 in [1 << 16, 8 << 16, 9 << 16, 2 << 20] {
        let err = ctrl.get_features(feature::TEMPERATURE_THRESHOLD, cdw11).await.unwrap_err();
        assert!(err.is_status(Status::INVALID_FIELD), "{cdw11:#x}: {err}");
        let err = ctrl.set_features(feature::TEMPERATURE_THRESHOLD, cdw11).await.unwrap_err();
        assert!(err.is_status(Status::INVALID_FIELD), "{cdw11:#x}: {err}");
    }
    // A controller of its own starts from the defaults.
    let other = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    assert_eq!(other.get_features(feature::TEMPERATURE_THRESHOLD, over).await.unwrap(), 0xFFFF);
    other.disconnect().await.unwrap();
    ctrl.disconnect().await.unwrap();
}

/// The other mandatory features a host may set (SPDK's target keeps
/// them; nvmet refused the sets): kept per controller and read back, with
/// what the controller cannot do refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mandatory_features_are_kept_as_set_and_impossible_values_refused() {
    let fx = start(16).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    for (fid, value) in [
        (feature::ARBITRATION, 0x0302_0103),
        (feature::POWER_MANAGEMENT, 0x40), // workload hint 2, power state 0
        (feature::ERROR_RECOVERY, 0x64),   // TLER 10 s
        (feature::INTERRUPT_COALESCING, 0x0a04),
        (feature::WRITE_ATOMICITY, 1),
    ] {
        assert_eq!(ctrl.get_features(fid, 0).await.unwrap(), 0, "fid {fid:#x} before a set");
        ctrl.set_features(fid, value).await.unwrap();
        assert_eq!(ctrl.get_features(fid, 0).await.unwrap(), value, "fid {fid:#x}");
    }
    for (fid, value) in [(feature::POWER_MANAGEMENT, 1), (feature::ERROR_RECOVERY, 1 << 16)] {
        let err = ctrl.set_features(fid, value).await.unwrap_err();
        assert!(err.is_status(Status::INVALID_FIELD), "fid {fid:#x} = {value:#x}: {err}");
    }
    assert_eq!(ctrl.get_features(feature::POWER_MANAGEMENT, 0).await.unwrap(), 0x40, "a refused set changes nothing");
    ctrl.disconnect().await.unwrap();
}

/// Identify with CNS `cns`, CSI `csi` (CDW11 bits 31:24, where SPDK's
/// `cdw11_bits.identify.csi` and Linux's `struct nvme_identify.csi` put it)
/// and `nsid`: the status and the 4096 bytes returned.
async fn identify(ctrl: &Controller, cns: u8, csi: u8, nsid: u32) -> (Status, Vec<u8>) {
    let mut sqe = Sqe::new(admin::IDENTIFY, 0);
    sqe.set_nsid(nsid);
    sqe.set_cdw10(u32::from(cns));
    sqe.set_cdw11(u32::from(csi) << 24);
    let (cqe, data) = ctrl.admin_command(sqe, None, 4096).await.expect("identify");
    (cqe.status, data)
}

async fn error_count(ctrl: &Controller) -> u128 {
    let page = ctrl.get_log_page(lp::LogPageId::SMART.0, u32::MAX, 0, lp::SMART_LOG_LEN, false).await.unwrap();
    SmartLog::decode(&page).unwrap().num_error_log_entries
}

/// SPDK's initiator asks CNS 06h at attach and got Invalid Field (an error
/// log entry each time). NVMe Base 2.0 (Identify, CNS 05h-08h) and the NVM
/// Command Set 1.0 define the structures; nvmet answers CNS 05h, 06h, 07h
/// and 08h for CSI 00h and refuses other CSIs with Invalid Field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_command_set_identify_is_answered_for_the_nvm_command_set() {
    const NVM: u8 = 0x00;
    const ZNS: u8 = 0x02;
    let fx = start(16).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    let errors = error_count(&ctrl).await;

    // CNS 06h, CSI 00h: VSL, WZSL, WUSL, DMRL at bytes 0-3, DMRSL 7:4,
    // DMSL 15:8. Write Zeroes: 2^WZSL pages of 4 KiB (CAP.MPSMIN) =
    // 32 MiB, what NLB (16 bits) allows with 512-byte blocks; the rest
    // report no limit (0).
    let (status, b) = identify(&ctrl, 0x06, NVM, 0).await;
    assert_eq!(status, Status::SUCCESS);
    assert_eq!(b.len(), 4096);
    assert_eq!(&b[..4], &[0, 13, 0, 0]);
    assert_eq!((1u64 << b[1]) * 4096, 65536 * 512);
    assert!(b[4..].iter().all(|&x| x == 0), "DMRSL, DMSL, reserved");

    // CNS 05h, CSI 00h: no protection information or storage tags.
    let (status, b) = identify(&ctrl, 0x05, NVM, 1).await;
    assert_eq!((status, b.len()), (Status::SUCCESS, 4096));
    assert!(b.iter().all(|&x| x == 0));

    // CNS 07h, CSI 00h: the active NSIDs of that command set, after NSID 0.
    let (status, b) = identify(&ctrl, 0x07, NVM, 0).await;
    assert_eq!(status, Status::SUCCESS);
    assert_eq!(&b[..8], &[1, 0, 0, 0, 0, 0, 0, 0]);

    // CNS 08h: NMIC bit 0 (shared) at byte 1, NSTAT bit 0 (ready) at 14.
    let (status, b) = identify(&ctrl, 0x08, 0, 1).await;
    assert_eq!(status, Status::SUCCESS);
    assert_eq!((b[1], b[14]), (1, 1));
    assert!(b[15..].iter().all(|&x| x == 0));

    // None of these is an error any more.
    assert_eq!(error_count(&ctrl).await, errors);

    // Other command sets are refused; inactive namespaces are Invalid
    // Namespace (nvmet_req_find_ns).
    for (cns, csi, nsid, want) in [
        (0x06, ZNS, 0, Status::INVALID_FIELD),
        (0x06, 0x01, 0, Status::INVALID_FIELD),
        (0x05, ZNS, 1, Status::INVALID_FIELD),
        (0x07, ZNS, 0, Status::INVALID_FIELD),
        (0x05, NVM, 9, Status::INVALID_NS),
        (0x08, 0, 9, Status::INVALID_NS),
        (0x07, NVM, 0xFFFF_FFFE, Status::INVALID_NS),
    ] {
        let (status, _) = identify(&ctrl, cns, csi, nsid).await;
        assert_eq!(status, want.dnr(), "CNS {cns:#04x} CSI {csi} NSID {nsid:#x}");
    }
    ctrl.disconnect().await.unwrap();
}
