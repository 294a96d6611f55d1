//! The SMART / Health Information log (NVMe Base 2.0, section 5.16.1.3) as
//! hosts read it: `nvme smart-log` asks for NSID FFFFFFFFh on whatever
//! controller it opens, often not the one that did the I/O. Linux nvmet
//! reports each namespace's block device counts (`nvmet_get_smart_log_nsid`,
//! `nvmet_get_smart_log_all`) and nothing it cannot measure; so must we.

use std::sync::Arc;

use crate::common::{BS, NQN, Rng, start};
use strata_block::MemDevice;
use strata_host::{Controller, HostConfig};
use strata_nvme::identify as id;
use strata_nvme::log_page::{self as lp, SmartLog};
use strata_nvme::status::Status;
use strata_target::{Namespace, NamespaceIds};

const CHUNK_BLOCKS: u32 = 64; // 256 KiB

async fn smart(ctrl: &Controller, nsid: u32) -> SmartLog {
    let page = ctrl.get_log_page(lp::LogPageId::SMART.0, nsid, 0, lp::SMART_LOG_LEN, false).await.expect("SMART log");
    SmartLog::decode(&page).unwrap()
}

/// Regression: the counters lived on the controller that did the I/O, so a
/// host that read the log on another controller (a reconnect, a second
/// path, `nvme smart-log` after `strata bench`) saw 0 after gigabytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smart_log_counts_the_io_of_every_controller_per_namespace_and_in_total() {
    let fx = start(2048).await;
    let ids2 = NamespaceIds { nguid: [0x44; 16], uuid: [0x55; 16], eui64: [0; 8] };
    fx.sub.add_namespace(Namespace::new(2, ids2, Arc::new(MemDevice::new(BS as u32, 1024)))).unwrap();

    // One host writes 4 MiB to namespace 1 and 1 MiB to namespace 2, reads
    // 2 MiB back from namespace 1, then goes away.
    let writer = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    let mut rng = Rng::new(5);
    for i in 0..16u64 {
        writer.write(1, i * u64::from(CHUNK_BLOCKS), rng.bytes(CHUNK_BLOCKS as usize * BS), false).await.unwrap();
    }
    for i in 0..4u64 {
        writer.write(2, i * u64::from(CHUNK_BLOCKS), rng.bytes(CHUNK_BLOCKS as usize * BS), false).await.unwrap();
    }
    for i in 0..8u64 {
        writer.read(1, i * u64::from(CHUNK_BLOCKS), CHUNK_BLOCKS).await.unwrap();
    }
    writer.disconnect().await.unwrap();

    // Another host, on a new controller, reads the log.
    let other = HostConfig { hostnqn: "nqn.2026-11.io.strata:smart-reader".into(), ..HostConfig::default() };
    let reader = Controller::connect(fx.io, NQN, &other).await.expect("connect");
    // Data Units are thousands of 512-byte units, rounded up (NVMe Base
    // 2.0, figure "SMART / Health Information Log Page").
    let all = smart(&reader, u32::MAX).await;
    assert_eq!((all.host_write_commands, all.host_read_commands), (20, 8));
    assert_eq!(all.data_units_written, 11, "4 MiB + 1 MiB = 10240 sectors");
    assert_eq!(all.data_units_read, 5, "2 MiB = 4096 sectors");
    let ns1 = smart(&reader, 1).await;
    assert_eq!((ns1.host_write_commands, ns1.data_units_written), (16, 9), "8192 sectors");
    assert_eq!((ns1.host_read_commands, ns1.data_units_read), (8, 5));
    let ns2 = smart(&reader, 2).await;
    assert_eq!((ns2.host_write_commands, ns2.data_units_written), (4, 3), "2048 sectors");
    assert_eq!((ns2.host_read_commands, ns2.data_units_read), (0, 0));
    // An inactive NSID is refused, as nvmet does (nvmet_req_find_ns).
    let err = reader.get_log_page(lp::LogPageId::SMART.0, 7, 0, lp::SMART_LOG_LEN, false).await.unwrap_err();
    assert!(err.is_status(Status::INVALID_NS), "{err}");
    // The log is per namespace (LPA bit 0), as nvmet reports it.
    assert_ne!(reader.identify_controller().await.unwrap().lpa & id::LPA_SMART_PER_NAMESPACE, 0);

    // I/O after the log was read is counted at once, on any controller.
    reader.write(2, 512, vec![9u8; BS], true).await.unwrap();
    assert_eq!(smart(&reader, 2).await.host_write_commands, 5);
    reader.disconnect().await.unwrap();
}

/// Nothing behind a network namespace measures temperature, spare
/// capacity, wear or power: nvmet leaves those fields zero ("not
/// reported") and raises no critical warning. A made-up 41 C and 100 %
/// spare would be reported to monitoring as if read from a drive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smart_log_reports_no_invented_health_figures() {
    let fx = start(16).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    // A miscompare is an error log entry, not a media error.
    let err = ctrl.compare(1, 0, vec![1u8; BS]).await.unwrap_err();
    assert!(err.is_status(Status::COMPARE_FAILURE), "{err}");
    let log = smart(&ctrl, u32::MAX).await;
    assert_eq!((log.media_errors, log.num_error_log_entries), (0, 1));
    let invented = SmartLog {
        data_units_read: log.data_units_read,
        data_units_written: log.data_units_written,
        host_read_commands: log.host_read_commands,
        host_write_commands: log.host_write_commands,
        media_errors: log.media_errors,
        num_error_log_entries: log.num_error_log_entries,
        ..SmartLog::default()
    };
    assert_eq!(log, invented);
    ctrl.disconnect().await.unwrap();
}
