//! strata-target driven by strata-host over loopback TCP: data integrity
//! over several queues (in-capsule and R2T writes, with and without
//! digests), NVM command semantics, discovery and host access lists,
//! Connect rejections, asynchronous events, keep-alive expiry, and the
//! Identify and SMART data a kernel initiator relies on.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{BS, IDS, NQN, Rng, start};
use futures_util::future::join_all;
use strata_block::MemDevice;
use strata_host::{Controller, HostConfig, HostError, QueueFailure, discover};
use strata_nvme::command::{Sqe, feature, io};
use strata_nvme::identify::{self as id, NsIdDescriptor};
use strata_nvme::log_page::{self as lp, ChangedNsList, SmartLog};
use strata_nvme::pdu::Digests;
use strata_nvme::status::Status;
use strata_target::{Namespace, NamespaceIds, Subsystem};

const ALL_DIGESTS: Digests = Digests { header: true, data: true };

fn expect_status<T: std::fmt::Debug>(r: Result<T, HostError>, status: Status) {
    match r {
        Err(e) if e.is_status(status) => {}
        other => panic!("expected {status}, got {other:?}"),
    }
}

/// Writes random data of 4 KiB..256 KiB (so both in-capsule writes, up to
/// 8 KiB, and R2T writes, split at MAXH2CDATA for 256 KiB, run) from 4
/// queues at once, 8 commands in flight per queue, checking reads against a
/// local model along the way and reading everything back at the end.
async fn random_io_is_verified(digests: Digests, sq_flow_disabled: bool) {
    const QUEUES: usize = 4;
    const REGION_BLOCKS: u64 = 2048;
    const SLOTS: u64 = 8;
    const ROUNDS: usize = 12;
    let fx = start(REGION_BLOCKS * QUEUES as u64).await;
    let cfg = HostConfig {
        io_queues: QUEUES as u16,
        io_queue_size: 16,
        digests,
        disable_sq_flow_control: sq_flow_disabled,
        ..HostConfig::default()
    };
    let ctrl = Arc::new(Controller::connect(fx.io, NQN, &cfg).await.expect("connect"));
    assert_eq!(ctrl.io_queue_count(), QUEUES);
    assert_eq!(ctrl.digests(), digests);
    let mut tasks = Vec::new();
    for q in 0..QUEUES {
        let ctrl = ctrl.clone();
        tasks.push(tokio::spawn(async move {
            let queue = ctrl.io_queue(q).unwrap();
            let base = q as u64 * REGION_BLOCKS;
            let slot_blocks = REGION_BLOCKS / SLOTS;
            let mut model = vec![0u8; REGION_BLOCKS as usize * BS];
            let mut rng = Rng::new(q as u64 + 1);
            let mut ios = 0usize;
            for _ in 0..ROUNDS {
                // Disjoint extents, one per slot, so in-flight writes never
                // overlap and the model stays exact.
                let mut writes = Vec::new();
                for s in 0..SLOTS {
                    let nblocks = [1u64, 2, 3, 16, 33, 64][rng.below(6) as usize];
                    let lba = s * slot_blocks + rng.below(slot_blocks - nblocks + 1);
                    let data = rng.bytes(nblocks as usize * BS);
                    writes.push((lba, data));
                }
                let res =
                    join_all(writes.iter().map(|(lba, data)| queue.write(1, base + lba, data.clone(), rng_fua(*lba))))
                        .await;
                for (r, (lba, data)) in res.into_iter().zip(&writes) {
                    r.expect("write");
                    let off = *lba as usize * BS;
                    model[off..off + data.len()].copy_from_slice(data);
                }
                let reads: Vec<(u64, u32)> = (0..4)
                    .map(|_| {
                        let n = [1u32, 8, 64][rng.below(3) as usize];
                        (rng.below(REGION_BLOCKS - u64::from(n) + 1), n)
                    })
                    .collect();
                let res = join_all(reads.iter().map(|&(lba, n)| queue.read(1, base + lba, n))).await;
                for (r, (lba, n)) in res.into_iter().zip(&reads) {
                    let got = r.expect("read");
                    let off = *lba as usize * BS;
                    assert!(got[..] == model[off..off + *n as usize * BS], "queue {q} read at {lba} differs");
                }
                ios += writes.len() + reads.len();
            }
            (model, ios)
        }));
    }
    let mut total = 0;
    for (q, t) in tasks.into_iter().enumerate() {
        let (model, ios) = t.await.expect("task");
        total += ios;
        // Read back the whole region, round-robin over the queues.
        let base = q as u64 * REGION_BLOCKS;
        let chunks: Vec<u64> = (0..REGION_BLOCKS / 64).collect();
        let res = join_all(chunks.iter().map(|c| ctrl.read(1, base + c * 64, 64))).await;
        for (c, r) in chunks.iter().zip(res) {
            let off = *c as usize * 64 * BS;
            assert!(r.expect("read back")[..] == model[off..off + 64 * BS], "queue {q} chunk {c} differs");
        }
    }
    assert!(total >= 500, "ran {total} I/Os");
    Arc::try_unwrap(ctrl).expect("sole owner").disconnect().await.expect("disconnect");
}

fn rng_fua(lba: u64) -> bool {
    lba.is_multiple_of(7)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_io_over_four_queues_reads_back_what_was_written() {
    random_io_is_verified(Digests::default(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_io_with_header_and_data_digests_reads_back_what_was_written() {
    random_io_is_verified(ALL_DIGESTS, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_completed_by_the_c2h_success_flag_carry_the_right_data() {
    random_io_is_verified(ALL_DIGESTS, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvm_commands_have_their_specified_effects_and_errors() {
    let blocks = 1024u64;
    let fx = start(blocks).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    let mut rng = Rng::new(42);
    let pattern = rng.bytes(32 * BS);
    ctrl.write(1, 0, pattern.clone(), false).await.unwrap();
    assert_eq!(ctrl.read(1, 0, 32).await.unwrap()[..], pattern[..]);

    // Write Zeroes (with and without deallocate) and Deallocate read back
    // zeros; the blocks around them keep their data.
    ctrl.write_zeroes(1, 2, 3, false).await.unwrap();
    ctrl.write_zeroes(1, 6, 1, true).await.unwrap();
    ctrl.deallocate(1, &[(10, 2), (20, 4)]).await.unwrap();
    let back = ctrl.read(1, 0, 32).await.unwrap();
    let zeroed = |lba: usize| (2..5).contains(&lba) || lba == 6 || (10..12).contains(&lba) || (20..24).contains(&lba);
    for lba in 0..32 {
        let block = &back[lba * BS..(lba + 1) * BS];
        if zeroed(lba) {
            assert!(block.iter().all(|&b| b == 0), "block {lba} not zero");
        } else {
            assert_eq!(block, &pattern[lba * BS..(lba + 1) * BS], "block {lba} changed");
        }
    }

    // Flush, of one namespace and of all.
    ctrl.flush(1).await.unwrap();
    ctrl.flush(u32::MAX).await.unwrap();

    // Compare succeeds on equal data, fails with Compare Failure otherwise.
    ctrl.compare(1, 0, pattern[..2 * BS].to_vec()).await.unwrap();
    ctrl.compare(1, 2, vec![0u8; 3 * BS]).await.unwrap();
    let mut wrong = pattern[..2 * BS].to_vec();
    wrong[BS + 17] ^= 1;
    expect_status(ctrl.compare(1, 0, wrong).await, Status::COMPARE_FAILURE);
    // A large compare goes by R2T and still compares.
    let big = rng.bytes(64 * BS);
    ctrl.write(1, 100, big.clone(), true).await.unwrap();
    ctrl.compare(1, 100, big.clone()).await.unwrap();

    // LBA Out of Range, for every command that takes an LBA.
    expect_status(ctrl.read(1, blocks, 1).await, Status::LBA_OUT_OF_RANGE);
    expect_status(ctrl.read(1, blocks - 1, 2).await, Status::LBA_OUT_OF_RANGE);
    expect_status(ctrl.write(1, blocks - 1, vec![0u8; 2 * BS], false).await, Status::LBA_OUT_OF_RANGE);
    expect_status(ctrl.write(1, blocks, big.clone(), false).await, Status::LBA_OUT_OF_RANGE);
    expect_status(ctrl.write_zeroes(1, blocks, 1, false).await, Status::LBA_OUT_OF_RANGE);
    expect_status(ctrl.deallocate(1, &[(blocks - 1, 2)]).await, Status::LBA_OUT_OF_RANGE);
    expect_status(ctrl.compare(1, u64::MAX, vec![0u8; BS]).await, Status::LBA_OUT_OF_RANGE);

    // Invalid Namespace, from the controller.
    expect_status(ctrl.flush(99).await, Status::INVALID_NS);
    expect_status(ctrl.write_zeroes(99, 0, 1, false).await, Status::INVALID_NS);
    expect_status(ctrl.deallocate(99, &[(0, 1)]).await, Status::INVALID_NS);
    let q = ctrl.io_queue(0).unwrap();
    let mut sqe = Sqe::new(io::READ, 0);
    sqe.set_nsid(99);
    let (cqe, data) = q.io_command(sqe, None, BS).await.unwrap();
    assert_eq!(cqe.status.code(), Status::INVALID_NS.code());
    assert!(data.is_empty());
    // The host itself cannot size a read for a namespace it cannot identify.
    assert!(matches!(ctrl.read(99, 0, 1).await, Err(HostError::UnknownNamespace(99))));

    // Transfers beyond MDTS (1 MiB) are refused before they are sent.
    let max = ctrl.max_transfer_bytes();
    assert_eq!(max, 1 << 20);
    assert!(matches!(ctrl.read(1, 0, 257).await, Err(HostError::TransferTooLarge { len, .. }) if len == max + BS));
    assert!(matches!(ctrl.write(1, 0, vec![0u8; 2 * max], false).await, Err(HostError::TransferTooLarge { .. })));
    // Exactly MDTS works (R2T split into MAXH2CDATA pieces).
    let whole = rng.bytes(max);
    ctrl.write(1, 256, whole.clone(), false).await.unwrap();
    assert_eq!(ctrl.read(1, 256, (max / BS) as u32).await.unwrap()[..], whole[..]);
    // Errors did not hurt the queue.
    assert_eq!(ctrl.read(1, 0, 2).await.unwrap()[..], pattern[..2 * BS]);
    ctrl.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_the_subsystem_and_hides_ones_the_host_may_not_see() {
    let fx = start(16).await;
    let allowed = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-00000000000a";
    let private = Subsystem::new("nqn.2026-11.io.strata:private", "PRIVATE", vec![allowed.to_owned()]);
    fx.target.add_subsystem(private).unwrap();

    let stranger = HostConfig::default();
    for addr in [fx.disc, fx.io] {
        let entries = discover(addr, &stranger).await.expect("discover");
        let nvme: Vec<_> = entries.iter().filter(|e| e.subtype == lp::SUBTYPE_NVME).collect();
        assert_eq!(nvme.len(), 1, "{entries:?}");
        let e = nvme[0];
        assert_eq!(e.subnqn, NQN);
        assert_eq!((e.trtype, e.adrfam), (lp::TRTYPE_TCP, lp::ADRFAM_IPV4));
        assert_eq!(e.traddr, "127.0.0.1");
        assert_eq!(e.trsvcid, fx.io.port().to_string());
        assert_eq!(e.cntlid, 0xffff);
        let disc: Vec<_> = entries.iter().filter(|e| e.subtype == lp::SUBTYPE_CURRENT_DISCOVERY).collect();
        assert_eq!(disc.len(), 1);
        assert_eq!(disc[0].trsvcid, fx.disc.port().to_string());
        assert_eq!(disc[0].subnqn, strata_nvme::fabrics::DISCOVERY_NQN);
    }

    let friend = HostConfig { hostnqn: allowed.into(), ..HostConfig::default() };
    let entries = discover(fx.disc, &friend).await.expect("discover");
    let mut nqns: Vec<_> =
        entries.iter().filter(|e| e.subtype == lp::SUBTYPE_NVME).map(|e| e.subnqn.as_str()).collect();
    nqns.sort();
    assert_eq!(nqns, vec![NQN, "nqn.2026-11.io.strata:private"]);
    // Discovery connections go away when done.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(fx.target.controller_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_rejections_name_the_offending_field() {
    let fx = start(16).await;
    let allowed = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-00000000000b";
    let private = Subsystem::new("nqn.2026-11.io.strata:private", "PRIVATE", vec![allowed.to_owned()]);
    fx.target.add_subsystem(private).unwrap();

    // Unknown subsystem: Connect Invalid Parameters, SUBNQN at byte 256 of
    // the Connect data.
    match Controller::connect(fx.io, "nqn.2026-11.io.strata:nope", &HostConfig::default()).await {
        Err(HostError::ConnectRejected { status, iattr, ipo }) => {
            assert_eq!((status.code(), iattr, ipo), (0x182, true, 256));
            assert!(status.is_dnr());
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    // A host not on the list: Connect Invalid Host, HOSTNQN at byte 512.
    match Controller::connect(fx.io, "nqn.2026-11.io.strata:private", &HostConfig::default()).await {
        Err(HostError::ConnectRejected { status, iattr, ipo }) => {
            assert_eq!((status.code(), iattr, ipo), (0x184, true, 512));
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    // An NVM subsystem is not reachable through the discovery port.
    let e = Controller::connect(fx.disc, NQN, &HostConfig::default()).await.unwrap_err();
    assert!(e.is_status(Status::CONNECT_INVALID_PARAMETERS), "{e}");
    // The listed host gets in.
    let friend = HostConfig { hostnqn: allowed.into(), ..HostConfig::default() };
    let ctrl = Controller::connect(fx.io, "nqn.2026-11.io.strata:private", &friend).await.expect("allowed host");
    assert_eq!(ctrl.identity().subnqn, "nqn.2026-11.io.strata:private");
    assert_eq!(ctrl.active_namespaces().await.unwrap(), Vec::<u32>::new());
    ctrl.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_changes_raise_an_async_event_and_the_changed_ns_log_names_them() {
    let fx = start(256).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    ctrl.set_features(feature::ASYNC_EVENT_CONFIG, 1 << 8).await.unwrap();
    assert_eq!(ctrl.get_features(feature::ASYNC_EVENT_CONFIG, 0).await.unwrap(), 1 << 8);

    // A new namespace.
    let aer = ctrl.async_event_request().await.unwrap();
    ctrl.keep_alive().await.unwrap(); // the AER is parked once this returns
    let dev2 = Arc::new(MemDevice::new(BS as u32, 512));
    let ids2 = NamespaceIds { nguid: [0x44; 16], uuid: [0x55; 16], eui64: [0; 8] };
    fx.sub.add_namespace(Namespace::new(2, ids2, dev2)).unwrap();
    let dw0 = tokio::time::timeout(Duration::from_secs(5), aer).await.expect("AER completes").unwrap();
    assert_eq!(dw0, 0x0004_0002);
    let log =
        ctrl.get_log_page(lp::LogPageId::CHANGED_NS.0, u32::MAX, 0, lp::CHANGED_NS_LIST_LEN, false).await.unwrap();
    assert_eq!(lp::decode_changed_ns_list(&log).unwrap(), ChangedNsList::Listed(vec![2]));
    assert_eq!(ctrl.identify_namespace(2).await.unwrap().nsze, 512);
    assert_eq!(ctrl.active_namespaces().await.unwrap(), vec![1, 2]);
    ctrl.write(2, 511, vec![7u8; BS], false).await.unwrap();
    assert_eq!(ctrl.read(2, 511, 1).await.unwrap()[..], [7u8; BS][..]);

    // A resized namespace.
    let aer = ctrl.async_event_request().await.unwrap();
    ctrl.keep_alive().await.unwrap();
    fx.dev.resize(1024);
    fx.sub.namespace_changed(1);
    let dw0 = tokio::time::timeout(Duration::from_secs(5), aer).await.expect("AER completes").unwrap();
    assert_eq!(dw0, 0x0004_0002);
    let log =
        ctrl.get_log_page(lp::LogPageId::CHANGED_NS.0, u32::MAX, 0, lp::CHANGED_NS_LIST_LEN, false).await.unwrap();
    assert_eq!(lp::decode_changed_ns_list(&log).unwrap(), ChangedNsList::Listed(vec![1]));
    assert_eq!(ctrl.identify_namespace(1).await.unwrap().nsze, 1024);
    ctrl.write(1, 1023, vec![9u8; BS], false).await.unwrap();
    // Read again, the list is empty.
    let log =
        ctrl.get_log_page(lp::LogPageId::CHANGED_NS.0, u32::MAX, 0, lp::CHANGED_NS_LIST_LEN, false).await.unwrap();
    assert_eq!(lp::decode_changed_ns_list(&log).unwrap(), ChangedNsList::Listed(vec![]));
    ctrl.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_host_without_keep_alives_is_torn_down_and_one_with_them_survives() {
    let fx = start(16).await;
    let silent = HostConfig { kato: Duration::from_secs(1), send_keep_alive: false, ..HostConfig::default() };
    let ctrl = Controller::connect(fx.io, NQN, &silent).await.expect("connect");
    assert_eq!(ctrl.get_features(feature::KEEP_ALIVE_TIMER, 0).await.unwrap(), 1000);
    ctrl.write(1, 0, vec![1u8; BS], false).await.unwrap();
    let gone = async {
        while fx.target.controller_count() > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), gone).await.expect("controller expires within 5 s");
    // The target closed the queues: I/O and admin commands now fail.
    let err = tokio::time::timeout(Duration::from_secs(5), ctrl.read(1, 0, 1)).await.expect("fails promptly");
    assert!(matches!(err, Err(HostError::QueueFailed { qid: 1, .. })), "{err:?}");
    let err = ctrl.keep_alive().await.unwrap_err();
    assert!(matches!(err, HostError::QueueFailed { qid: 0, cause: QueueFailure::Eof }), "{err}");

    let chatty = HostConfig { kato: Duration::from_secs(1), ..HostConfig::default() };
    let ctrl = Controller::connect(fx.io, NQN, &chatty).await.expect("connect");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(fx.target.controller_count(), 1);
    assert_eq!(ctrl.read(1, 0, 1).await.unwrap()[..], [1u8; BS][..]);
    ctrl.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identify_and_smart_data_carry_what_a_kernel_initiator_needs() {
    let fx = start(2048).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    let c = ctrl.identify_controller().await.unwrap();
    assert_eq!(c.subnqn, NQN);
    assert_eq!(c.cntlid, ctrl.cntlid());
    assert_ne!(c.cntlid, 0);
    assert_eq!(c.sn, "STRATAITEST01");
    assert_eq!(c.cntrltype, id::CNTRLTYPE_IO);
    // 64-byte SQE plus 8 KiB in-capsule data, in 16-byte units.
    assert_eq!(c.ioccsz, (64 + 8192) / 16);
    assert_eq!(c.iorcsz, 1);
    assert_ne!(c.sgls & id::SGLS_SUPPORTED_BYTE_ALIGNED, 0);
    assert_ne!(c.sgls & id::SGLS_KEYED_DATA_BLOCK, 0);
    assert_ne!(c.sgls & id::SGLS_ADDRESS_AS_OFFSET, 0);
    assert_eq!(c.mdts, 8);
    let oncs = id::ONCS_COMPARE | id::ONCS_DSM | id::ONCS_WRITE_ZEROES;
    assert_eq!(c.oncs & oncs, oncs);
    assert_eq!((c.sqes, c.cqes), (id::SQES_64, id::CQES_16));
    assert_ne!(c.vwc & id::VWC_PRESENT, 0);
    assert_ne!(c.ctratt & id::CTRATT_TBKAS, 0);
    assert_ne!(c.oaes & id::OAES_NS_ATTRIBUTE_NOTICES, 0);
    assert!(c.nn >= 1 && c.kas > 0 && c.maxcmd >= 128);
    assert_eq!(ctrl.version(), 0x0001_0400);
    assert_eq!(ctrl.cap() & 0xffff, 1023, "CAP.MQES");

    let ns = ctrl.identify_namespace(1).await.unwrap();
    assert_eq!((ns.nsze, ns.ncap), (2048, 2048));
    assert_eq!(ns.block_size_bytes(), Some(BS as u64));
    assert_eq!(ns.nguid, IDS.nguid);
    assert_eq!(ns.dlfeat & id::DLFEAT_READ_MASK, id::DLFEAT_READ_ZEROES);
    let descs = ctrl.namespace_descriptors(1).await.unwrap();
    assert!(descs.contains(&NsIdDescriptor::Eui64(IDS.eui64)), "{descs:?}");
    assert!(descs.contains(&NsIdDescriptor::Nguid(IDS.nguid)), "{descs:?}");
    assert!(descs.contains(&NsIdDescriptor::Uuid(IDS.uuid)), "{descs:?}");
    assert!(descs.contains(&NsIdDescriptor::Csi(id::CSI_NVM)), "{descs:?}");
    assert_eq!(ctrl.active_namespaces().await.unwrap(), vec![1]);
    // An inactive namespace identifies as zeros; its descriptors do not exist.
    assert_eq!(ctrl.identify_namespace(7).await.unwrap().nsze, 0);
    assert!(ctrl.namespace_descriptors(7).await.unwrap_err().is_status(Status::INVALID_NS));

    let smart = |b: Vec<u8>| SmartLog::decode(&b).unwrap();
    let before = smart(ctrl.get_log_page(lp::LogPageId::SMART.0, u32::MAX, 0, lp::SMART_LOG_LEN, false).await.unwrap());
    for i in 0..10u64 {
        ctrl.write(1, i * 64, vec![i as u8; 64 * BS], false).await.unwrap();
    }
    for i in 0..4u64 {
        ctrl.read(1, i * 64, 64).await.unwrap();
    }
    let after = smart(ctrl.get_log_page(lp::LogPageId::SMART.0, u32::MAX, 0, lp::SMART_LOG_LEN, false).await.unwrap());
    assert_eq!(after.host_write_commands - before.host_write_commands, 10);
    assert_eq!(after.host_read_commands - before.host_read_commands, 4);
    // 10 x 256 KiB = 5120 sectors of 512 bytes: 6 data units (rounded up).
    assert_eq!(after.data_units_written, SmartLog::data_units_from_sectors(5120));
    assert_eq!(after.data_units_read, SmartLog::data_units_from_sectors(2048));
    // Failed commands land in the error count.
    let _ = ctrl.read(1, 4096, 1).await.unwrap_err();
    let later = smart(ctrl.get_log_page(lp::LogPageId::SMART.0, u32::MAX, 0, lp::SMART_LOG_LEN, false).await.unwrap());
    assert_eq!(later.num_error_log_entries, after.num_error_log_entries + 1);
    ctrl.disconnect().await.unwrap();
}
