//! Connect commands written byte by byte on a raw socket, for what the
//! host library cannot send (or would decode for us): refusals read as raw
//! DW0 bytes, an empty host NQN, and I/O queue Connects whose HOSTID differs
//! from the admin queue's. Expected bytes come from the NVMe over Fabrics
//! 1.1 specification (section 3.3, Connect command and response) and from
//! what Linux nvmet, SPDK and FreeBSD's nvmft send.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{NQN, start};
use strata_nvme::command::{SGL_INCAPSULE_DATA, SglDescriptor, Sqe};
use strata_nvme::pdu::{self, Digests, IcReq};
use strata_target::Subsystem;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000c1";
const HOSTID: [u8; 16] = [0xc1; 16];

/// Status field of a CQE (bits 15:1, phase 0) for SCT/SC with DNR.
fn dnr_status(sct: u16, sc: u16) -> u16 {
    ((1 << 14) | (sct << 8) | sc) << 1
}

/// A connection that has exchanged ICReq/ICResp, without digests.
async fn queue(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&IcReq { pfv: 0, hpda: 0, digests: Digests::default(), maxr2t: 0 }.encode()).await.unwrap();
    let mut resp = [0u8; pdu::IC_LEN];
    s.read_exact(&mut resp).await.unwrap();
    assert_eq!(resp[0], 0x01, "ICResp");
    s
}

/// The 1024-byte Connect data, laid out by hand: HOSTID at 0, CNTLID at 16,
/// SUBNQN at 256, HOSTNQN at 512 (`struct nvmf_connect_data`).
fn connect_data(hostid: [u8; 16], cntlid: u16, subnqn: &str, hostnqn: &str) -> Vec<u8> {
    let mut d = vec![0u8; 1024];
    d[..16].copy_from_slice(&hostid);
    d[16..18].copy_from_slice(&cntlid.to_le_bytes());
    d[256..256 + subnqn.len()].copy_from_slice(subnqn.as_bytes());
    d[512..512 + hostnqn.len()].copy_from_slice(hostnqn.as_bytes());
    d
}

/// A Connect (fabrics opcode 7Fh, FCTYPE 01h) for `qid` with SQSIZE
/// `sqsize` and 1024 bytes of in-capsule data.
fn connect_sqe(cid: u16, qid: u16, sqsize: u16) -> Sqe {
    let mut sqe = Sqe::new(0x7f, cid);
    let b = sqe.bytes_mut();
    b[4] = 0x01; // FCTYPE Connect
    b[42..44].copy_from_slice(&qid.to_le_bytes());
    b[44..46].copy_from_slice(&sqsize.to_le_bytes());
    sqe.set_sgl(SglDescriptor { addr: 0, length: 1024, sgl_type: SGL_INCAPSULE_DATA });
    sqe
}

/// Sends `sqe` with `data` in the capsule.
async fn send(s: &mut TcpStream, sqe: &Sqe, data: &[u8]) {
    let mut capsule = pdu::encode_capsule_cmd(sqe, data.len(), Digests::default()).as_slice().to_vec();
    capsule.extend_from_slice(data);
    s.write_all(&capsule).await.unwrap();
}

async fn send_connect(s: &mut TcpStream, cid: u16, qid: u16, sqsize: u16, data: &[u8]) {
    send(s, &connect_sqe(cid, qid, sqsize), data).await;
}

/// Sends a Property Set of CC enabling an I/O controller (EN, IOSQES 6,
/// IOCQES 4).
async fn enable(s: &mut TcpStream, cid: u16) {
    let mut sqe = Sqe::new(0x7f, cid);
    let b = sqe.bytes_mut();
    b[4] = 0x00; // FCTYPE Property Set
    b[44..48].copy_from_slice(&0x14u32.to_le_bytes()); // OFST: CC
    b[48..52].copy_from_slice(&(1u32 | (6 << 16) | (4 << 20)).to_le_bytes());
    send(s, &sqe, &[]).await;
}

/// Reads one CapsuleResp and returns its 16-byte CQE.
async fn read_cqe(s: &mut TcpStream) -> [u8; 16] {
    let mut resp = [0u8; pdu::CAPSULE_RESP_HLEN];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut resp)).await.expect("answer in time").unwrap();
    assert_eq!(resp[0], 0x05, "CapsuleResp");
    resp[pdu::CH_LEN..].try_into().unwrap()
}

fn dw0(cqe: &[u8; 16]) -> [u8; 4] {
    cqe[..4].try_into().unwrap()
}

fn status(cqe: &[u8; 16]) -> u16 {
    u16::from_le_bytes([cqe[14], cqe[15]])
}

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

/// What a test thread logged.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn lines_with(&self, needle: &str) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        text.lines().filter(|l| l.contains(needle)).map(str::to_owned).collect()
    }
}

/// Only two of the refusals were logged (no such subsystem, host not
/// allowed); an operator could not tell why a host's other Connects
/// failed. Each refusal is now logged exactly once, with the reason, the
/// host NQN and the subsystem NQN. (The runtime is single threaded so the
/// connection tasks log to this thread's subscriber.)
#[tokio::test]
async fn every_refused_connect_is_logged_once_with_its_reason_and_nqns() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let fx = start(16).await;
    let private = Subsystem::new("nqn.2026-11.io.strata:private", "PRIVATE", vec![HOSTNQN.into()]);
    fx.target.add_subsystem(private).unwrap();
    let disc = "nqn.2014-08.org.nvmexpress.discovery";

    // (host NQN marking the case, SUBNQN, QID, SQSIZE, CNTLID, reason).
    let cases = [
        ("nqn.h:recfmt", NQN, 0, 31, 0xffff, "record format 1 is not 0"),
        ("nqn.h:sqsize", NQN, 0, 0, 0xffff, "SQSIZE 0 is outside 1..=31"),
        ("nqn.h:nosub", "nqn.2026-11.io.strata:nope", 0, 31, 0xffff, "no such subsystem"),
        ("nqn.h:stranger", "nqn.2026-11.io.strata:private", 0, 31, 0xffff, "host not allowed"),
        ("nqn.h:cntlid", NQN, 0, 31, 7, "CNTLID 0x7 on an admin queue"),
        ("nqn.h:noctrl", NQN, 1, 31, 0x1234, "no controller 0x1234"),
        ("nqn.h:discio", disc, 1, 31, 0xffff, "I/O queue 1 for the discovery subsystem"),
        ("nqn.h:\u{e9}\u{301}", NQN, 0, 31, 0xffff, "HOSTNQN in connect data is not a valid NQN"),
    ];
    for (i, (hostnqn, subnqn, qid, sqsize, cntlid, _)) in cases.iter().enumerate() {
        let mut sqe = connect_sqe(i as u16, *qid, *sqsize);
        if hostnqn.ends_with("recfmt") {
            sqe.bytes_mut()[40] = 1;
        }
        let mut data = connect_data(HOSTID, *cntlid, subnqn, hostnqn);
        if !hostnqn.is_ascii() {
            data[512 + hostnqn.len() - 1] = 0xff; // not UTF-8 any more
        }
        let mut s = queue(fx.io).await;
        send(&mut s, &sqe, &data).await;
        assert_ne!(status(&read_cqe(&mut s).await), 0, "{hostnqn} refused");
    }
    for (hostnqn, subnqn, _, _, _, reason) in cases {
        let marker = if hostnqn.is_ascii() { hostnqn } else { "nqn.h:\u{e9}" };
        let lines = logs.lines_with(marker);
        let refusals: Vec<_> = lines.iter().filter(|l| l.contains("connect refused")).collect();
        assert_eq!(refusals.len(), 1, "{hostnqn}: {lines:#?}");
        assert!(refusals[0].contains(reason), "{hostnqn}: {}", refusals[0]);
        assert!(refusals[0].contains(subnqn), "{hostnqn}: {}", refusals[0]);
    }
}
