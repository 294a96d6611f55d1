//! Reservations through the wire: two hosts (two host identifiers) on one
//! namespace register, acquire, preempt, release and clear; I/O that a
//! reservation keeps out gets Reservation Conflict and nothing of it
//! lands; a preempted host hears of it through the Reservation
//! Notification log page and a Reservation Log Page Available event;
//! Identify announces what is served, and a subsystem that does not
//! serve reservations refuses the commands.

use bytes::Bytes;
use strata_host::{Controller, HostConfig};
use strata_nvme::command::Sqe;
use strata_nvme::reservation::{self as rsv, NoticeKind, ReservationNotice, ReservationStatus, ReservationType};
use strata_nvme::status::Status;

use crate::common::{BS, NQN, start};

fn host(id: u8) -> HostConfig {
    HostConfig {
        hostnqn: format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000{id:02x}"),
        hostid: [id; 16],
        ..HostConfig::default()
    }
}

fn keys(a: u64, b: u64) -> Bytes {
    let mut d = a.to_le_bytes().to_vec();
    d.extend_from_slice(&b.to_le_bytes());
    Bytes::from(d)
}

/// Sends reservation command `opcode` with `cdw10` and `data`; its status.
async fn send(c: &Controller, opcode: u8, cdw10: u32, data: Bytes) -> Status {
    let mut sqe = Sqe::new(opcode, 0);
    sqe.set_nsid(1);
    sqe.set_cdw10(cdw10);
    let (cqe, _) = c.io_queue(0).unwrap().io_command(sqe, Some(data), 0).await.expect("transport");
    cqe.status
}

async fn register(c: &Controller, action: u32, crkey: u64, nrkey: u64) -> Status {
    send(c, rsv::opcode::REGISTER, action, keys(crkey, nrkey)).await
}

async fn acquire(c: &Controller, action: u32, rtype: ReservationType, crkey: u64, prkey: u64) -> Status {
    send(c, rsv::opcode::ACQUIRE, action | u32::from(rtype.code()) << 8, keys(crkey, prkey)).await
}

async fn release(c: &Controller, action: u32, rtype: ReservationType, crkey: u64) -> Status {
    send(c, rsv::opcode::RELEASE, action | u32::from(rtype.code()) << 8, Bytes::from(crkey.to_le_bytes().to_vec()))
        .await
}

async fn report(c: &Controller) -> ReservationStatus {
    let mut sqe = Sqe::new(rsv::opcode::REPORT, 0);
    sqe.set_nsid(1);
    sqe.set_cdw10(4096 / 4 - 1);
    sqe.set_cdw11(1);
    let (cqe, data) = c.io_queue(0).unwrap().io_command(sqe, None, 4096).await.expect("transport");
    assert!(cqe.status.is_success(), "{:?}", cqe.status);
    ReservationStatus::decode(&data).expect("a report")
}

async fn notice(c: &Controller) -> ReservationNotice {
    let page = c.get_log_page(rsv::NOTIFICATION_LOG_PAGE, 1, 0, 64, false).await.expect("the notification page");
    ReservationNotice::decode(&page).expect("a notice")
}

fn conflict(s: Status) -> bool {
    s.code() == Status::RESERVATION_CONFLICT.code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_register_acquire_preempt_and_a_reservation_keeps_the_other_out() {
    let fx = start(2048).await;
    fx.sub.serve_reservations(true);
    let a = Controller::connect(fx.io, NQN, &host(0xa)).await.expect("host a");
    let b = Controller::connect(fx.io, NQN, &host(0xb)).await.expect("host b");
    let id = a.identify_controller().await.unwrap();
    assert_ne!(id.oncs & strata_nvme::identify::ONCS_RESERVATIONS, 0, "ONCS announces reservations");
    assert_eq!(a.identify_namespace(1).await.unwrap().rescap & 0x7e, 0x7e, "all six types");

    assert!(register(&a, 0, 0, 0xaaaa).await.is_success());
    assert!(register(&b, 0, 0, 0xbbbb).await.is_success());
    assert!(conflict(register(&a, 0, 0, 0x1234).await), "a second key");
    assert!(acquire(&a, 0, ReservationType::WriteExclusive, 0xaaaa, 0).await.is_success());
    assert!(conflict(acquire(&b, 0, ReservationType::WriteExclusive, 0xbbbb, 0).await), "held by a");

    // Write Exclusive: b reads but may not write; nothing of its write lands.
    a.write(1, 3, vec![0xa1; BS], false).await.expect("the holder writes");
    b.read(1, 3, 1).await.expect("another host reads");
    let e = b.write(1, 3, vec![0xb1; BS], false).await.expect_err("b's write went through");
    assert!(e.status().is_some_and(conflict), "{e}");
    assert!(b.flush(1).await.is_err_and(|e| e.status().is_some_and(conflict)), "flush is a write");
    assert_eq!(&a.read(1, 3, 1).await.unwrap()[..], &[0xa1; BS][..]);

    let s = report(&a).await;
    assert_eq!(s.rtype, Some(ReservationType::WriteExclusive));
    let listed: Vec<([u8; 16], bool, u64)> = s.registrants.iter().map(|r| (r.hostid, r.holds, r.key)).collect();
    assert_eq!(listed, vec![([0xa; 16], true, 0xaaaa), ([0xb; 16], false, 0xbbbb)]);

    // b preempts a (and aborts what a had running): b holds an Exclusive
    // Access reservation, a is unregistered and told.
    let event = a.async_event_request().await.expect("an AER posted");
    assert!(acquire(&b, 2, ReservationType::ExclusiveAccess, 0xbbbb, 0xaaaa).await.is_success());
    let dw0 = tokio::time::timeout(std::time::Duration::from_secs(5), event).await.expect("an event").unwrap();
    assert_eq!((dw0 & 7, dw0 >> 8 & 0xff, dw0 >> 16 & 0xff), (6, 0, 0x80), "Reservation Log Page Available");
    let e = a.read(1, 3, 1).await.expect_err("a reads under b's Exclusive Access");
    assert!(e.status().is_some_and(conflict), "{e}");
    let n = notice(&a).await;
    assert_eq!((n.kind, n.nsid), (NoticeKind::RegistrationPreempted, 1));
    assert_eq!(notice(&a).await.kind, NoticeKind::Empty, "read once");
    let s = report(&b).await;
    assert_eq!(s.registrants.len(), 1);
    assert_eq!(s.generation, 3, "two registrations and a preempt (a refused one counts not)");

    // b releases; a's I/O runs again. A clear drops every registrant.
    assert!(conflict(release(&b, 0, ReservationType::WriteExclusive, 0xbbbb).await), "another type");
    assert!(release(&b, 0, ReservationType::ExclusiveAccess, 0xbbbb).await.is_success());
    a.write(1, 4, vec![0xa2; BS], false).await.expect("no reservation");
    assert!(register(&a, 0, 0, 0xaaaa).await.is_success());
    assert!(release(&b, 1, ReservationType::WriteExclusive, 0xbbbb).await.is_success());
    assert_eq!(notice(&a).await.kind, NoticeKind::ReservationPreempted);
    assert!(report(&a).await.registrants.is_empty());
    // Report without the extended structure: host identifiers are 128-bit.
    let mut sqe = Sqe::new(rsv::opcode::REPORT, 0);
    sqe.set_nsid(1);
    sqe.set_cdw10(63);
    let (cqe, _) = a.io_queue(0).unwrap().io_command(sqe, None, 256).await.unwrap();
    assert_eq!(cqe.status.code(), Status::HOST_ID_INCONSISTENT.code());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subsystem_that_does_not_serve_reservations_refuses_them_and_announces_none() {
    let fx = start(64).await;
    let a = Controller::connect(fx.io, NQN, &host(0xa)).await.expect("host a");
    assert_eq!(register(&a, 0, 0, 1).await.code(), Status::INVALID_OPCODE.code());
    assert_eq!(a.identify_controller().await.unwrap().oncs & strata_nvme::identify::ONCS_RESERVATIONS, 0);
    assert_eq!(a.identify_namespace(1).await.unwrap().rescap, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masked_notice_is_not_sent_and_persistence_is_read_from_the_state() {
    let fx = start(64).await;
    fx.sub.serve_reservations(true);
    let a = Controller::connect(fx.io, NQN, &host(0xa)).await.expect("host a");
    let b = Controller::connect(fx.io, NQN, &host(0xb)).await.expect("host b");
    assert_eq!(a.set_features(rsv::FEATURE_NOTIFICATION_MASK, 0b10).await.expect("mask"), 0);
    assert_eq!(a.get_features(rsv::FEATURE_NOTIFICATION_MASK, 0).await.unwrap(), 0b10);
    assert!(a.set_features(rsv::FEATURE_NOTIFICATION_MASK, 1).await.is_err(), "bit 0 is reserved");
    assert!(register(&a, 0, 0, 1).await.is_success());
    assert!(register(&b, 0, 0, 2).await.is_success());
    assert!(acquire(&b, 1, ReservationType::WriteExclusive, 2, 1).await.is_success(), "b preempts a");
    assert_eq!(notice(&a).await.kind, NoticeKind::Empty, "a masked Registration Preempted");
    // No store behind this subsystem: PTPL is off and stays off.
    let mut sqe = Sqe::new(strata_nvme::command::admin::GET_FEATURES, 0);
    sqe.set_nsid(1);
    sqe.set_cdw10(u32::from(rsv::FEATURE_PERSISTENCE));
    let (cqe, _) = a.admin_command(sqe, None, 0).await.unwrap();
    assert!(cqe.status.is_success());
    assert_eq!(cqe.dw0(), 0);
    assert!(a.set_features(rsv::FEATURE_PERSISTENCE, 1).await.is_err(), "changed by Register's CPTPL only");
}
