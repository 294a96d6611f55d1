//! Connect commands written byte by byte on a raw socket, for what the
//! host library cannot send (or would decode for us): refusals read as raw
//! DW0 bytes, an empty host NQN, and I/O queue Connects whose HOSTID differs
//! from the admin queue's. Expected bytes come from the NVMe over Fabrics
//! 1.1 specification (section 3.3, Connect command and response) and from
//! what Linux nvmet, SPDK and FreeBSD's nvmft send.

use crate::common::raw::*;
use crate::common::{NQN, start};
use strata_target::Subsystem;

/// Regression: a refused Connect carried IATTR in DW0 byte 0 and IPO in
/// bytes 3:2. NVMe over Fabrics 1.1 section 3.3 (Connect Response) puts IPO
/// in bits 15:00 and IATTR in bits 23:16: the bytes below are Linux nvmet's
/// `IPO_IATTR_CONNECT_DATA(subsysnqn)` = `(1 << 16) | 256`,
/// `IPO_IATTR_CONNECT_DATA(hostnqn)` = `(1 << 16) | 512`,
/// `IPO_IATTR_CONNECT_DATA(cntlid)` = `(1 << 16) | 16` and the SQE offset of
/// SQSIZE, 44, with IATTR 0 (SPDK's `SPDK_NVMF_INVALID_CONNECT_CMD(rsp,
/// sqsize)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connects_put_ipo_in_bits_15_0_and_iattr_in_bits_23_16() {
    let fx = start(16).await;
    let private =
        Subsystem::new("nqn.2026-11.io.strata:private", "PRIVATE", vec!["nqn.2026-11.io.strata:friend".into()]);
    fx.target.add_subsystem(private).unwrap();
    let cases: [(&str, u16, u16, [u8; 4], u16); 4] = [
        ("nqn.2026-11.io.strata:nope", 0xffff, 31, [0x00, 0x01, 0x01, 0x00], dnr_status(1, 0x82)),
        ("nqn.2026-11.io.strata:private", 0xffff, 31, [0x00, 0x02, 0x01, 0x00], dnr_status(1, 0x84)),
        (NQN, 7, 31, [0x10, 0x00, 0x01, 0x00], dnr_status(1, 0x82)),
        (NQN, 0xffff, 0, [44, 0x00, 0x00, 0x00], dnr_status(1, 0x82)),
    ];
    for (subnqn, cntlid, sqsize, want_dw0, want_status) in cases {
        let mut s = queue(fx.io).await;
        send_connect(&mut s, 3, 0, sqsize, &connect_data(HOSTID, cntlid, subnqn, HOSTNQN)).await;
        let cqe = read_cqe(&mut s).await;
        assert_eq!((dw0(&cqe), status(&cqe)), (want_dw0, want_status), "{subnqn} cntlid {cntlid} sqsize {sqsize}");
    }
    assert_eq!(fx.target.controller_count(), 0);
}

/// SPDK's initiator sends an empty HOSTNQN when its application set none
/// (`snprintf(nvmf_data->hostnqn, ..., "%s", ctrlr->opts.hostnqn)`), and
/// SPDK's target (`spdk_nvmf_subsystem_host_allowed` with allow_any_host)
/// and Linux nvmet (`nvmet_host_allowed` with allow_any_host) accept it.
/// We used to refuse it as a malformed field (0x182, HOSTNQN) everywhere;
/// now it connects where any host may and is Connect Invalid Host where an
/// access list decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_host_nqn_connects_only_where_any_host_may() {
    let fx = start(16).await;
    let private = Subsystem::new("nqn.2026-11.io.strata:private", "PRIVATE", vec![HOSTNQN.into()]);
    fx.target.add_subsystem(private).unwrap();

    // Any host: the fixture's subsystem and the discovery subsystem.
    for subnqn in [NQN, "nqn.2014-08.org.nvmexpress.discovery"] {
        let mut s = queue(fx.io).await;
        send_connect(&mut s, 1, 0, 31, &connect_data(HOSTID, 0xffff, subnqn, "")).await;
        let cqe = read_cqe(&mut s).await;
        assert_eq!(status(&cqe), 0, "{subnqn}");
        assert_ne!(u16::from_le_bytes([cqe[0], cqe[1]]), 0, "CNTLID");
    }
    // An access list: Connect Invalid Host, HOSTNQN (IATTR 1, IPO 512).
    let mut s = queue(fx.io).await;
    send_connect(&mut s, 2, 0, 31, &connect_data(HOSTID, 0xffff, "nqn.2026-11.io.strata:private", "")).await;
    let cqe = read_cqe(&mut s).await;
    assert_eq!((dw0(&cqe), status(&cqe)), ([0x00, 0x02, 0x01, 0x00], dnr_status(1, 0x84)));
}

/// An I/O queue joined any controller of the same host NQN, whatever
/// HOSTID it sent. A queue's HOSTID must be the one its association was
/// created with (NVMe over Fabrics 1.1 section 3.3: the host is identified
/// by HOSTID and HOSTNQN); FreeBSD's nvmft (`nvmft_handoff_io_queue`) answers
/// a different one with Connect Invalid Parameters, IATTR 1, IPO
/// `offsetof(struct nvmf_fabric_connect_data, hostid)` = 0, before it
/// compares the host NQN. (Linux nvmet's `nvmet_ctrl_find_get` compares
/// only the host NQN.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_io_queue_with_another_hostid_is_refused_pointing_at_hostid() {
    let fx = start(16).await;
    let mut admin = queue(fx.io).await;
    send_connect(&mut admin, 1, 0, 31, &connect_data(HOSTID, 0xffff, NQN, HOSTNQN)).await;
    let cqe = read_cqe(&mut admin).await;
    assert_eq!(status(&cqe), 0);
    let cntlid = u16::from_le_bytes([cqe[0], cqe[1]]);
    enable(&mut admin, 2).await;
    assert_eq!(status(&read_cqe(&mut admin).await), 0);

    let mut io = queue(fx.io).await;
    send_connect(&mut io, 1, 1, 127, &connect_data([0xee; 16], cntlid, NQN, HOSTNQN)).await;
    let cqe = read_cqe(&mut io).await;
    assert_eq!((dw0(&cqe), status(&cqe)), ([0x00, 0x00, 0x01, 0x00], dnr_status(1, 0x82)));

    // The same queue with the admin queue's HOSTID joins.
    let mut io = queue(fx.io).await;
    send_connect(&mut io, 1, 1, 127, &connect_data(HOSTID, cntlid, NQN, HOSTNQN)).await;
    let cqe = read_cqe(&mut io).await;
    assert_eq!((status(&cqe), u16::from_le_bytes([cqe[0], cqe[1]])), (0, cntlid));
}

/// Controller IDs come from the target's range and are unique within a
/// subsystem, not across subsystems: nodes that serve one volume side by
/// side give out disjoint ranges, since Linux refuses a path whose
/// controller ID another path of the subsystem already has ("Duplicate
/// cntlid"), and a node serving many volumes must not run out of IDs
/// because of the other volumes' hosts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_ids_come_from_the_targets_range_and_repeat_only_across_subsystems() {
    use strata_host::{Controller, HostConfig, HostError};
    use strata_nvme::status::Status;
    use strata_target::TargetConfig;
    const OTHER: &str = "nqn.2026-11.io.strata:itest-other";
    let fx = crate::common::start_with(TargetConfig { cntlids: 7..=8, ..TargetConfig::default() }, 16).await;
    fx.target.add_subsystem(Subsystem::new(OTHER, "STRATAITEST02", vec![])).unwrap();
    let cfg = HostConfig::default();
    let a = Controller::connect(fx.io, NQN, &cfg).await.expect("first");
    let b = Controller::connect(fx.io, NQN, &cfg).await.expect("second");
    let mut ids = [a.cntlid(), b.cntlid()];
    ids.sort_unstable();
    assert_eq!(ids, [7, 8]);
    // The range is spent for this subsystem...
    let err = Controller::connect(fx.io, NQN, &cfg).await.unwrap_err();
    assert!(
        matches!(err, HostError::ConnectRejected { .. }) && err.is_status(Status::CONNECT_CONTROLLER_BUSY),
        "{err}"
    );
    // ...not for another one, whose controllers reuse the IDs.
    let c = Controller::connect(fx.io, OTHER, &cfg).await.expect("another subsystem");
    assert!((7..=8).contains(&c.cntlid()), "{}", c.cntlid());
    // I/O queues join the controller of their own subsystem.
    a.write(1, 0, vec![3u8; crate::common::BS], false).await.unwrap();
    assert_eq!(a.read(1, 0, 1).await.unwrap()[..], [3u8; crate::common::BS][..]);
    // The fabric is not a path: a node's internal subsystem has a
    // controller per peer, beyond the range.
    const FABRIC: &str = "nqn.2026-11.io.strata:fabric:itest";
    fx.target.add_subsystem(Subsystem::internal(FABRIC, "STRATAFAB01", vec![])).unwrap();
    let port = fx.target.listen("127.0.0.1:0".parse().unwrap(), strata_target::PortRole::Fabric).await.unwrap();
    let mut peers = Vec::new();
    for _ in 0..3 {
        peers.push(Controller::connect(port.addr, FABRIC, &cfg).await.expect("a peer's controller"));
    }
    assert!(peers.iter().any(|p| !(7..=8).contains(&p.cntlid())));
    for ctrl in peers {
        ctrl.disconnect().await.unwrap();
    }
    // A freed ID is given out again.
    let freed = b.cntlid();
    b.disconnect().await.unwrap();
    let d = Controller::connect(fx.io, NQN, &cfg).await.expect("after a disconnect");
    assert_eq!(d.cntlid(), freed);
    for ctrl in [a, c, d] {
        ctrl.disconnect().await.unwrap();
    }
}

/// An unknown subsystem is refused with Do Not Retry, as Linux nvmet
/// does; a pool node, whose volumes' subsystems come and go with
/// ownership, refuses it without (Linux 6.12 deletes a controller whose
/// reconnect is refused with DNR, and a host reconnecting to a node that
/// restarts would lose that path for good). Once the subsystem is there
/// the same host connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_subsystem_is_refused_with_dnr_unless_the_target_says_retry() {
    use strata_host::{Controller, HostConfig};
    use strata_nvme::status::Status;
    use strata_target::TargetConfig;
    const LATER: &str = "nqn.2026-11.io.strata:itest-later";
    let cfg = HostConfig::default();
    for retry in [false, true] {
        let fx =
            crate::common::start_with(TargetConfig { retry_unknown_subsystems: retry, ..TargetConfig::default() }, 16)
                .await;
        let err = Controller::connect(fx.io, LATER, &cfg).await.unwrap_err();
        let status = err.status().expect("a Connect status");
        assert_eq!(status.sc(), Status::CONNECT_INVALID_PARAMETERS.sc(), "{err}");
        assert_eq!(status.is_dnr(), !retry, "retry={retry}: {err}");
        fx.target.add_subsystem(Subsystem::new(LATER, "STRATAITEST03", vec![])).unwrap();
        Controller::connect(fx.io, LATER, &cfg).await.expect("served now").disconnect().await.unwrap();
    }
}
