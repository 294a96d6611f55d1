//! Hosts that vanish, stall or misbehave: each test pins a defect a review
//! found in the target and that no earlier test reached. Deadlines are
//! shortened through `TargetConfig` so that every case ends in seconds;
//! every wait of the test itself has a deadline too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::raw::*;
use crate::common::{BS, NQN, Rng, serve, start_with};
use strata_block::{BlockDevice, BlockError, BlockFuture, DeviceUsage, Geometry, IoBuf, MemDevice, ReadData};
use strata_host::{Controller, HostConfig};
use strata_nvme::pdu::{self, fes};
use strata_target::TargetConfig;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn short_deadlines() -> TargetConfig {
    TargetConfig {
        handshake_timeout: Duration::from_secs(1),
        r2t_timeout: Duration::from_secs(1),
        send_timeout: Duration::from_secs(1),
        drain_timeout: Duration::from_secs(10),
        ..TargetConfig::default()
    }
}

/// Polls `cond` every 20 ms until it holds or `limit` passes.
async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// Connects with strata's initiator, writes and reads back one block.
async fn verified_io(addr: std::net::SocketAddr, seed: u64) -> Controller {
    let ctrl = Controller::connect(addr, NQN, &HostConfig::default()).await.expect("a host can connect");
    let data = Rng::new(seed).bytes(BS);
    ctrl.write(1, seed % 64, data.clone(), false).await.expect("write");
    assert_eq!(ctrl.read(1, seed % 64, 1).await.expect("read")[..], data[..]);
    ctrl
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_that_never_speak_cannot_lock_hosts_out() {
    // Regression: nothing timed out before Connect and idle sockets were
    // not capped apart from the rest, so 4096 sockets that never sent an
    // ICReq held every connection slot.
    let cfg = TargetConfig { max_connections: 64, max_pending_connections: 8, ..short_deadlines() };
    let f = start_with(cfg, 1024).await;
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(TcpStream::connect(f.io).await.unwrap());
    }
    let started = Instant::now();
    let ctrl =
        tokio::time::timeout(Duration::from_secs(10), verified_io(f.io, 7)).await.expect("host connected in time");
    assert!(started.elapsed() < Duration::from_secs(5), "a host waited {:?} behind idle sockets", started.elapsed());
    // Every idle socket is closed: evicted, or at the handshake deadline.
    for s in &mut idle {
        assert!(closed_within(s, Duration::from_secs(5)).await, "an idle socket stayed open");
    }
    let st = f.target.stats();
    assert!(st.pending_evicted > 0 && st.handshake_timeouts > 0, "{st:?}");
    // The socket closes before its task releases the pending slot.
    assert!(eventually(Duration::from_secs(2), || f.target.stats().pending_now == 0).await, "{:?}", f.target.stats());
    ctrl.disconnect().await.unwrap();
}

#[tokio::test]
async fn a_connection_without_connect_is_closed_at_the_handshake_deadline() {
    let f = start_with(short_deadlines(), 64).await;
    // ICReq, then nothing: the deadline covers Connect too.
    let mut s = queue(f.io).await;
    let t = Instant::now();
    assert!(closed_within(&mut s, Duration::from_secs(5)).await);
    assert!(t.elapsed() >= Duration::from_millis(500), "closed too early: {:?}", t.elapsed());
    assert_eq!(f.target.stats().handshake_timeouts, 1);
    assert!(eventually(Duration::from_secs(2), || f.target.stats().connections_now == 0).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_stops_reading_is_dropped_without_holding_others() {
    // Regression: flush() waited for writability with no deadline, so a
    // host that stopped reading hung its connection (and, on the admin
    // queue, keep-alive and everything else with it).
    let f = start_with(short_deadlines(), 4096).await;
    let (mut admin, cntlid) = admin_queue(f.io, NQN, HOSTNQN, 0).await;
    let mut io = io_queue(f.io, NQN, HOSTNQN, cntlid, 1, 128).await;
    // 128 reads of 256 KiB that the host never reads back: far more than
    // the socket buffers hold.
    for cid in 0..128u16 {
        send(&mut io, &read_sqe(cid, u64::from(cid % 8) * 64, 64), &[]).await;
    }
    assert!(
        eventually(Duration::from_secs(10), || f.target.stats().send_timeouts >= 1).await,
        "the stalled connection was not dropped: {:?}",
        f.target.stats()
    );
    assert!(closed_within(&mut io, Duration::from_secs(5)).await);
    // Another host writes the blocks the stalled one read, meanwhile and after.
    let other = verified_io(f.io, 3).await;
    other.disconnect().await.unwrap();
    assert_eq!(f.target.buffer_bytes_in_use(), 0, "the stalled reads' buffers came back");
    drop(admin.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_queue_whose_host_stopped_reading_is_torn_down() {
    let f = start_with(short_deadlines(), 64).await;
    let (mut admin, _) = admin_queue(f.io, NQN, HOSTNQN, 0).await;
    // As many Identify commands as the queue holds, each asking for
    // 1 MiB (the data is zero-filled to the SGL length), never reading
    // the answers: 32 MiB is far more than the socket buffers hold.
    let flood = async {
        for cid in 10..42u16 {
            let mut sqe = strata_nvme::command::Sqe::new(0x06, cid);
            sqe.bytes_mut()[40] = 1; // CNS 1
            sqe.set_sgl(strata_nvme::command::SglDescriptor { addr: 0, length: 1 << 20, sgl_type: 0x5a });
            let capsule = pdu::encode_capsule_cmd(&sqe, 0, pdu::Digests::default());
            if admin.write_all(capsule.as_slice()).await.is_err() {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), flood).await;
    assert!(
        eventually(Duration::from_secs(10), || f.target.controller_count() == 0).await,
        "the controller of a host that stopped reading stayed: {:?}",
        f.target.stats()
    );
    assert!(f.target.stats().send_timeouts >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2t_hoarders_are_bounded_by_the_budget_and_cut_off() {
    // Regression: each connection could pin queue depth x MAXH2CDATA of
    // R2T buffers, forever: 64 queues that asked for R2Ts and never sent
    // data grew the process to 2.1 GiB.
    const BUDGET: usize = 16 << 20;
    let cfg = TargetConfig { io_buffer_budget: BUDGET, ..short_deadlines() };
    let f = start_with(cfg, 4096).await;
    // Queues first (each prepays its commands), the well-behaved host's
    // too; then the hoarders ask for R2Ts and never send data.
    let mut hoarders = Vec::new();
    for h in 0..4u16 {
        let hostnqn = format!("{HOSTNQN}{h}");
        let (admin, cntlid) = admin_queue(f.io, NQN, &hostnqn, 0).await;
        let io = io_queue(f.io, NQN, &hostnqn, cntlid, 1, 64).await;
        hoarders.push((admin, io));
    }
    let host = Controller::connect(f.io, NQN, &HostConfig::default()).await.expect("a host can connect");
    for (_, io) in &mut hoarders {
        for cid in 0..64u16 {
            send(io, &write_sqe(cid, 0, 64), &[]).await;
        }
    }
    let peak = Arc::new(AtomicU64::new(0));
    let watch = {
        let (target, peak) = (f.target.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                peak.fetch_max(target.buffer_bytes_in_use() as u64, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    // A legitimate host's writes get through: small ones at once (their
    // buffers were prepaid with the queue), large ones (R2T) once the
    // hoarders are cut; its data is read even while it waits for budget,
    // so it never misses its own R2T deadline.
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), async {
        let small = Rng::new(11).bytes(BS);
        host.write(1, 7, small.clone(), false).await.expect("a small write");
        assert_eq!(host.read(1, 7, 1).await.expect("read")[..], small[..]);
        let big = Rng::new(12).bytes(64 * BS);
        let writes = (0..8u64).map(|i| host.write(1, 1024 + 64 * i, big.clone(), false));
        for r in futures_util::future::join_all(writes).await {
            r.expect("a large write of a well-behaved host");
        }
        assert_eq!(host.read(1, 1024, 64).await.expect("read")[..], big[..]);
    })
    .await
    .expect("host served in time");
    for (_, io) in &mut hoarders {
        assert!(closed_within(io, Duration::from_secs(10)).await, "a hoarder stayed connected");
    }
    watch.abort();
    let st = f.target.stats();
    assert!(st.r2t_timeouts >= 4, "{st:?}");
    assert!(peak.load(Ordering::Relaxed) <= BUDGET as u64, "buffers {} over the budget", peak.load(Ordering::Relaxed));
    assert!(peak.load(Ordering::Relaxed) > 0);
    assert!(started.elapsed() < Duration::from_secs(15));
    host.disconnect().await.unwrap();
}

/// A RAM device with injected faults: a panic on reads of `panic_lba`
/// and (once, when set) in `usage()`; a first write to `slow_lba` that
/// takes `delay`; every read, write and flush failing with
/// [`BlockError::PathUnavailable`] while `path_lost` is set.
struct Faulty {
    inner: MemDevice,
    path_lost: AtomicBool,
    panic_lba: u64,
    panic_usage: AtomicBool,
    slow_lba: u64,
    delay: Duration,
    slowed: AtomicBool,
}

impl Faulty {
    fn new() -> Faulty {
        Faulty {
            inner: MemDevice::new(BS as u32, 64),
            path_lost: false.into(),
            panic_lba: u64::MAX,
            panic_usage: false.into(),
            slow_lba: u64::MAX,
            delay: Duration::ZERO,
            slowed: false.into(),
        }
    }
}

impl BlockDevice for Faulty {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn usage(&self) -> DeviceUsage {
        assert!(!self.panic_usage.swap(false, Ordering::SeqCst), "injected panic in usage()");
        self.inner.usage()
    }
    fn read(&self, lba: u64, buf: IoBuf) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        assert_ne!(lba, self.panic_lba, "injected panic in read()");
        if self.path_lost.load(Ordering::SeqCst) {
            return Box::pin(async move { (buf, Err(lost())) });
        }
        self.inner.read(lba, buf)
    }
    fn read_data(&self, lba: u64, blocks: u64) -> BlockFuture<'_, Result<ReadData, BlockError>> {
        Box::pin(async move {
            assert_ne!(lba, self.panic_lba, "injected panic in read_data()");
            if self.path_lost.load(Ordering::SeqCst) {
                return Err(lost());
            }
            self.inner.read_data(lba, blocks).await
        })
    }
    fn write(&self, lba: u64, buf: IoBuf, fua: bool) -> BlockFuture<'_, (IoBuf, Result<(), BlockError>)> {
        Box::pin(async move {
            if self.path_lost.load(Ordering::SeqCst) {
                return (buf, Err(lost()));
            }
            if lba == self.slow_lba && !self.slowed.swap(true, Ordering::SeqCst) {
                tokio::time::sleep(self.delay).await;
            }
            self.inner.write(lba, buf, fua).await
        })
    }
    fn write_zeroes(&self, lba: u64, blocks: u64, d: bool) -> BlockFuture<'_, Result<(), BlockError>> {
        self.inner.write_zeroes(lba, blocks, d)
    }
    fn deallocate(&self, ranges: Vec<(u64, u64)>) -> BlockFuture<'_, Result<(), BlockError>> {
        self.inner.deallocate(ranges)
    }
    fn flush(&self) -> BlockFuture<'_, Result<(), BlockError>> {
        if self.path_lost.load(Ordering::SeqCst) {
            return Box::pin(async { Err(lost()) });
        }
        self.inner.flush()
    }
}

fn lost() -> BlockError {
    BlockError::PathUnavailable("the owner is out of reach (injected)".into())
}

/// A device that cannot reach what serves it (a pool node's path whose
/// owner died) answers ANA Transition, a path status a multipath host
/// retries on another path, never a media error that fails the I/O; the
/// path serves again once its device does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_that_lost_its_path_answers_a_path_status_the_host_retries_elsewhere() {
    let dev = Arc::new(Faulty::new());
    let (_target, _sub, io, _) = serve(short_deadlines(), dev.clone()).await;
    let ctrl = Controller::connect(io, NQN, &HostConfig::default()).await.unwrap();
    ctrl.write(1, 4, vec![7u8; BS], false).await.unwrap();
    dev.path_lost.store(true, Ordering::SeqCst);
    for err in [
        ctrl.read(1, 4, 1).await.unwrap_err(),
        ctrl.write(1, 5, vec![8u8; BS], false).await.unwrap_err(),
        ctrl.flush(1).await.unwrap_err(),
    ] {
        let status = err.status().expect("a status");
        assert_eq!(status, strata_nvme::status::Status::ANA_TRANSITION, "{err}");
        assert!(status.is_path_error() && !status.is_dnr(), "{err}");
    }
    dev.path_lost.store(false, Ordering::SeqCst);
    assert_eq!(ctrl.read(1, 4, 1).await.unwrap()[..], [7u8; BS][..]);
    assert_eq!(ctrl.read(1, 5, 1).await.unwrap()[..], [0u8; BS][..], "a write refused for its path landed");
    ctrl.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_are_contained_to_their_connection_and_counted() {
    let dev = Arc::new(Faulty { panic_lba: 13, ..Faulty::new() });
    let (target, _sub, io, _) = serve(short_deadlines(), dev.clone()).await;
    let bystander = Controller::connect(io, NQN, &HostConfig::default()).await.unwrap();
    bystander.write(1, 20, vec![6u8; BS], false).await.unwrap();
    // An admin command that panics fails alone; the queue carries on.
    let ctrl = Controller::connect(io, NQN, &HostConfig::default()).await.unwrap();
    dev.panic_usage.store(true, Ordering::SeqCst);
    let e = ctrl.identify_namespace(1).await.expect_err("the panicking Identify fails");
    assert!(e.is_status(strata_nvme::status::Status::INTERNAL), "{e}");
    ctrl.identify_namespace(1).await.expect("the admin queue keeps serving");
    // An I/O command that panics ends its connection, nothing else.
    assert!(ctrl.read(1, 13, 1).await.is_err(), "the panicking read fails");
    // The socket closes as the panic unwinds, before the count is taken.
    assert!(eventually(Duration::from_secs(2), || target.stats().panics == 2).await, "{:?}", target.stats());
    assert_eq!(bystander.read(1, 20, 1).await.unwrap()[..], [6u8; BS][..], "other hosts keep being served");
    drop(ctrl);
    let again = Controller::connect(io, NQN, &HostConfig::default()).await.expect("the host reconnects");
    again.write(1, 14, vec![5u8; BS], false).await.unwrap();
    assert_eq!(again.read(1, 14, 1).await.unwrap()[..], [5u8; BS][..]);
    again.disconnect().await.unwrap();
    bystander.disconnect().await.unwrap();
    assert!(eventually(Duration::from_secs(5), || target.stats().connections_now == 0).await, "a slot leaked");
    assert!(eventually(Duration::from_secs(5), || target.controller_count() == 0).await, "a controller leaked");
}

#[tokio::test]
async fn reusing_a_parked_aer_cid_retires_the_aer() {
    // Regression: SPDK's initiator completes its outstanding AERs locally
    // at detach (nvme_tcp_admin_qpair_abort_aers) and then sends the
    // shutdown Property Set with one of their CIDs; strata answered with a
    // C2HTermReq ("command identifier 3 reused while outstanding"), so
    // spdk_nvme_perf, spdk_dd and bdevperf hung at exit. Linux nvmet and
    // SPDK's target accept it.
    let f = start_with(short_deadlines(), 64).await;
    let (mut admin, _) = admin_queue(f.io, NQN, HOSTNQN, 0).await;
    for cid in [3u16, 4, 5, 6] {
        send(&mut admin, &strata_nvme::command::Sqe::new(0x0c, cid), &[]).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // CC.SHN = 01b (normal shutdown), reusing the CID of the AER 3.
    send(&mut admin, &property_set_cc(3, CC_ENABLE | (1 << 14)), &[]).await;
    let cqe = read_cqe(&mut admin).await;
    assert_eq!((cid_of(&cqe), status(&cqe)), (3, 0), "the Property Set completes");
    // The other AERs are still parked; a reuse of a CID that is not a
    // parked AER is still fatal.
    send(&mut admin, &strata_nvme::command::Sqe::new(0x18, 7), &[]).await; // Keep Alive
    assert_eq!(status(&read_cqe(&mut admin).await), 0);
    // Two Keep Alives with one CID in one write: the second arrives while
    // the first is outstanding.
    let mut two = Vec::new();
    for _ in 0..2 {
        let sqe = strata_nvme::command::Sqe::new(0x18, 9);
        two.extend_from_slice(pdu::encode_capsule_cmd(&sqe, 0, pdu::Digests::default()).as_slice());
    }
    admin.write_all(&two).await.unwrap();
    let mut pdu = read_pdu(&mut admin).await;
    if pdu[0] == 0x05 {
        pdu = read_pdu(&mut admin).await;
    }
    assert_eq!(pdu[0], 0x03, "C2HTermReq for a reused CID that is not a retired AER");
}

#[tokio::test]
async fn c2h_data_honours_hpda_and_a_bad_hpda_is_refused() {
    let f = start_with(short_deadlines(), 64).await;
    let data = Rng::new(5).bytes(BS);
    f.dev.write(9, IoBuf::from_slice(&data), false).await.1.unwrap();
    // HPDA 31: data at a multiple of 128 bytes.
    let mut s = queue_with_hpda(f.io, 31).await;
    send(&mut s, &connect_sqe(1, 0, 31), &connect_data(HOSTID, 0xffff, NQN, HOSTNQN)).await;
    let cntlid = u16::from_le_bytes(read_cqe(&mut s).await[..2].try_into().unwrap());
    enable(&mut s, 2).await;
    read_cqe(&mut s).await;
    let mut io = queue_with_hpda(f.io, 31).await;
    send(&mut io, &connect_sqe(1, 1, 31), &connect_data(HOSTID, cntlid, NQN, HOSTNQN)).await;
    read_cqe(&mut io).await;
    send(&mut io, &read_sqe(5, 9, 1), &[]).await;
    let c2h = read_pdu(&mut io).await;
    assert_eq!(c2h[0], 0x07, "C2HData");
    let pdo = usize::from(c2h[pdu::PDO_OFFSET]);
    assert_eq!(pdo % 128, 0, "PDO {pdo}");
    assert_eq!(&c2h[pdo..pdo + BS], &data[..]);
    assert!(c2h[pdu::DATA_HLEN..pdo].iter().all(|&b| b == 0), "padding is zeros");
    // HPDA 32 is reserved: C2HTermReq, Invalid Header Field at HPDA.
    let mut bad = TcpStream::connect(f.io).await.unwrap();
    let mut icreq = pdu::IcReq { pfv: 0, hpda: 0, digests: pdu::Digests::default(), maxr2t: 0 }.encode();
    icreq[pdu::IC_PDA_OFFSET] = 32;
    bad.write_all(&icreq).await.unwrap();
    let term = read_pdu(&mut bad).await;
    assert_eq!(term[0], 0x03);
    assert_eq!(u16::from_le_bytes([term[8], term[9]]), fes::INVALID_HEADER_FIELD);
    assert_eq!(u32::from_le_bytes(term[10..14].try_into().unwrap()), pdu::IC_PDA_OFFSET as u32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_tears_down_a_silent_host_but_io_traffic_counts() {
    let f = start_with(short_deadlines(), 64).await;
    // Silent: KATO 1 s, then nothing. Its I/O queue closes with it.
    let (_admin, cntlid) = admin_queue(f.io, NQN, HOSTNQN, 1000).await;
    let mut io = io_queue(f.io, NQN, HOSTNQN, cntlid, 1, 32).await;
    assert!(closed_within(&mut io, Duration::from_secs(5)).await, "the silent host's I/O queue stayed open");
    assert_eq!(f.target.stats().keep_alive_expiries, 1);
    // Busy on its I/O queue only (traffic-based keep alive): it stays.
    let cfg = HostConfig { kato: Duration::from_secs(1), send_keep_alive: false, ..HostConfig::default() };
    let ctrl = Controller::connect(f.io, NQN, &cfg).await.unwrap();
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        ctrl.read(1, 0, 1).await.expect("I/O keeps the controller alive");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(f.target.stats().keep_alive_expiries, 1);
    ctrl.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_of_a_dead_connection_cannot_overtake_the_hosts_retry() {
    // The connection dies with a write in flight; the host reconnects and
    // writes the same block again. The old write must not land after the
    // new one: commands in flight are drained, and the host's new
    // association waits for them.
    let dev = Arc::new(Faulty { slow_lba: 7, delay: Duration::from_millis(500), ..Faulty::new() });
    let (target, _sub, io, _) = serve(short_deadlines(), dev.clone()).await;
    let (admin, cntlid) = admin_queue(io, NQN, HOSTNQN, 0).await;
    let mut q = io_queue(io, NQN, HOSTNQN, cntlid, 1, 32).await;
    let mut sqe = read_sqe(1, 7, 1);
    sqe.bytes_mut()[0] = strata_nvme::command::io::WRITE;
    sqe.set_sgl(strata_nvme::command::SglDescriptor {
        addr: 0,
        length: BS as u32,
        sgl_type: strata_nvme::command::SGL_INCAPSULE_DATA,
    });
    send(&mut q, &sqe, &[0xaa; BS]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Reset both connections (RST, not FIN).
    for s in [admin, q] {
        socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO)).unwrap();
        drop(s);
    }
    let cfg = HostConfig { hostnqn: HOSTNQN.into(), hostid: HOSTID, ..HostConfig::default() };
    let ctrl = Controller::connect(io, NQN, &cfg).await.unwrap();
    ctrl.write(1, 7, vec![0xbb; BS], false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(ctrl.read(1, 7, 1).await.unwrap()[..], [0xbb; BS][..], "the dead connection's write landed last");
    ctrl.disconnect().await.unwrap();
    assert!(eventually(Duration::from_secs(5), || target.stats().connections_now == 0).await);
}

#[tokio::test]
async fn narrowing_the_access_list_disconnects_hosts_left_out() {
    let f = start_with(short_deadlines(), 64).await;
    let ctrl = Controller::connect(f.io, NQN, &HostConfig::default()).await.unwrap();
    ctrl.read(1, 0, 1).await.unwrap();
    f.sub.set_allowed_hosts(vec!["nqn.2014-08.org.nvmexpress:uuid:someone-else".into()]);
    assert!(eventually(Duration::from_secs(5), || f.target.controller_count() == 0).await);
    assert!(ctrl.read(1, 0, 1).await.is_err(), "a host left out of the list keeps doing I/O");
    assert!(Controller::connect(f.io, NQN, &HostConfig::default()).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_queues_prepay_their_commands_or_are_refused_until_memory_frees() {
    // 128 entries x (3 KiB state + 8 KiB in-capsule buffer) = 1.4 MiB, of
    // the 2 MiB (half the budget) that queues prepay from.
    let cfg = TargetConfig { io_buffer_budget: 4 << 20, ..short_deadlines() };
    let f = start_with(cfg, 64).await;
    let host = HostConfig { io_queue_size: 128, ..HostConfig::default() };
    let first = Controller::connect(f.io, NQN, &host).await.expect("the first queue fits");
    assert!(f.target.buffer_bytes_in_use() >= 128 * 11 * 1024);
    let e = Controller::connect(f.io, NQN, &host).await.expect_err("a second queue does not fit");
    assert!(e.to_string().contains("busy"), "{e}");
    first.disconnect().await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || f.target.buffer_bytes_in_use() == 0).await,
        "the queue's memory came back"
    );
    let second = verified_io(f.io, 9).await;
    second.disconnect().await.unwrap();
}
