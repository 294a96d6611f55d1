//! A raw NVMe/TCP host: PDUs written byte by byte on a socket, for what
//! the host library cannot do (or would decode for us): refused Connects
//! read as raw DW0 bytes, hosts that stop reading, hoard R2Ts, reuse
//! command identifiers, or ask for data alignment.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use strata_nvme::command::{SGL_INCAPSULE_DATA, SGL_TRANSPORT_DATA, SglDescriptor, Sqe, io};
use strata_nvme::pdu::{self, Digests, IcReq};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// The host NQN raw hosts use unless a test says otherwise.
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000c1";
/// The host ID that goes with [`HOSTNQN`].
pub const HOSTID: [u8; 16] = [0xc1; 16];

/// Status field of a CQE (bits 15:1, phase 0) for SCT/SC with DNR.
pub fn dnr_status(sct: u16, sc: u16) -> u16 {
    ((1 << 14) | (sct << 8) | sc) << 1
}

/// A connection that has exchanged ICReq/ICResp, without digests, asking
/// for data alignment `hpda`.
pub async fn queue_with_hpda(addr: SocketAddr, hpda: u8) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&IcReq { pfv: 0, hpda, digests: Digests::default(), maxr2t: 0 }.encode()).await.unwrap();
    let mut resp = [0u8; pdu::IC_LEN];
    s.read_exact(&mut resp).await.unwrap();
    assert_eq!(resp[0], 0x01, "ICResp");
    s
}

/// A connection that has exchanged ICReq/ICResp, without digests.
pub async fn queue(addr: SocketAddr) -> TcpStream {
    queue_with_hpda(addr, 0).await
}

/// The 1024-byte Connect data, laid out by hand: HOSTID at 0, CNTLID at 16,
/// SUBNQN at 256, HOSTNQN at 512 (`struct nvmf_connect_data`).
pub fn connect_data(hostid: [u8; 16], cntlid: u16, subnqn: &str, hostnqn: &str) -> Vec<u8> {
    let mut d = vec![0u8; 1024];
    d[..16].copy_from_slice(&hostid);
    d[16..18].copy_from_slice(&cntlid.to_le_bytes());
    d[256..256 + subnqn.len()].copy_from_slice(subnqn.as_bytes());
    d[512..512 + hostnqn.len()].copy_from_slice(hostnqn.as_bytes());
    d
}

/// A Connect (fabrics opcode 7Fh, FCTYPE 01h) for `qid` with SQSIZE
/// `sqsize` and 1024 bytes of in-capsule data.
pub fn connect_sqe(cid: u16, qid: u16, sqsize: u16) -> Sqe {
    let mut sqe = Sqe::new(0x7f, cid);
    let b = sqe.bytes_mut();
    b[4] = 0x01; // FCTYPE Connect
    b[42..44].copy_from_slice(&qid.to_le_bytes());
    b[44..46].copy_from_slice(&sqsize.to_le_bytes());
    sqe.set_sgl(SglDescriptor { addr: 0, length: 1024, sgl_type: SGL_INCAPSULE_DATA });
    sqe
}

/// Sends `sqe` with `data` in the capsule.
pub async fn send<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, sqe: &Sqe, data: &[u8]) {
    let mut capsule = pdu::encode_capsule_cmd(sqe, data.len(), Digests::default()).as_slice().to_vec();
    capsule.extend_from_slice(data);
    s.write_all(&capsule).await.unwrap();
}

pub async fn send_connect<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, cid: u16, qid: u16, sqsize: u16, data: &[u8]) {
    send(s, &connect_sqe(cid, qid, sqsize), data).await;
}

/// A Property Set of CC to `cc`.
pub fn property_set_cc(cid: u16, cc: u32) -> Sqe {
    let mut sqe = Sqe::new(0x7f, cid);
    let b = sqe.bytes_mut();
    b[4] = 0x00; // FCTYPE Property Set
    b[44..48].copy_from_slice(&0x14u32.to_le_bytes()); // OFST: CC
    b[48..52].copy_from_slice(&cc.to_le_bytes());
    sqe
}

/// CC enabling an I/O controller: EN, IOSQES 6, IOCQES 4.
pub const CC_ENABLE: u32 = 1 | (6 << 16) | (4 << 20);

/// Sends a Property Set of CC enabling an I/O controller.
pub async fn enable<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, cid: u16) {
    send(s, &property_set_cc(cid, CC_ENABLE), &[]).await;
}

/// Reads one CapsuleResp and returns its 16-byte CQE.
pub async fn read_cqe<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> [u8; 16] {
    let mut resp = [0u8; pdu::CAPSULE_RESP_HLEN];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut resp)).await.expect("answer in time").unwrap();
    assert_eq!(resp[0], 0x05, "CapsuleResp, got PDU type {:#x}", resp[0]);
    resp[pdu::CH_LEN..].try_into().unwrap()
}

/// Reads one whole PDU (no digests) and returns it.
pub async fn read_pdu<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> Vec<u8> {
    let mut ch = [0u8; pdu::CH_LEN];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut ch)).await.expect("a PDU in time").unwrap();
    let plen = u32::from_le_bytes([ch[4], ch[5], ch[6], ch[7]]) as usize;
    let mut v = ch.to_vec();
    v.resize(plen, 0);
    s.read_exact(&mut v[pdu::CH_LEN..]).await.unwrap();
    v
}

pub fn dw0(cqe: &[u8; 16]) -> [u8; 4] {
    cqe[..4].try_into().unwrap()
}

pub fn status(cqe: &[u8; 16]) -> u16 {
    u16::from_le_bytes([cqe[14], cqe[15]])
}

pub fn cid_of(cqe: &[u8; 16]) -> u16 {
    u16::from_le_bytes([cqe[12], cqe[13]])
}

/// An admin queue: ICReq, Connect (dynamic controller), CC.EN. Returns the
/// socket and the controller ID.
pub async fn admin_queue(addr: SocketAddr, subnqn: &str, hostnqn: &str, kato_ms: u32) -> (TcpStream, u16) {
    let mut s = queue(addr).await;
    let mut sqe = connect_sqe(1, 0, 31);
    sqe.bytes_mut()[48..52].copy_from_slice(&kato_ms.to_le_bytes());
    send(&mut s, &sqe, &connect_data(HOSTID, 0xffff, subnqn, hostnqn)).await;
    let cqe = read_cqe(&mut s).await;
    assert_eq!(status(&cqe), 0, "admin Connect");
    let cntlid = u16::from_le_bytes([cqe[0], cqe[1]]);
    enable(&mut s, 2).await;
    assert_eq!(status(&read_cqe(&mut s).await), 0, "CC.EN");
    (s, cntlid)
}

/// I/O queue `qid` of controller `cntlid` with `depth` entries.
pub async fn io_queue(addr: SocketAddr, subnqn: &str, hostnqn: &str, cntlid: u16, qid: u16, depth: u16) -> TcpStream {
    let mut s = queue(addr).await;
    send_connect(&mut s, 1, qid, depth - 1, &connect_data(HOSTID, cntlid, subnqn, hostnqn)).await;
    assert_eq!(status(&read_cqe(&mut s).await), 0, "I/O queue Connect");
    s
}

/// A Read or Write of `blocks` 4 KiB blocks at `lba` on namespace 1 whose
/// data moves by C2HData / R2T (transport SGL).
pub fn rw_sqe(opcode: u8, cid: u16, lba: u64, blocks: u32) -> Sqe {
    let mut sqe = Sqe::new(opcode, cid);
    let b = sqe.bytes_mut();
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    b[40..48].copy_from_slice(&lba.to_le_bytes());
    b[48..50].copy_from_slice(&((blocks - 1) as u16).to_le_bytes());
    sqe.set_sgl(SglDescriptor { addr: 0, length: blocks * 4096, sgl_type: SGL_TRANSPORT_DATA });
    sqe
}

/// A Read of `blocks` blocks at `lba`.
pub fn read_sqe(cid: u16, lba: u64, blocks: u32) -> Sqe {
    rw_sqe(io::READ, cid, lba, blocks)
}

/// A Write of `blocks` blocks at `lba` that asks for an R2T.
pub fn write_sqe(cid: u16, lba: u64, blocks: u32) -> Sqe {
    rw_sqe(io::WRITE, cid, lba, blocks)
}

/// Waits until the peer closes `s` (EOF or reset), at most `limit`;
/// discards what it sends meanwhile. Returns true if it closed.
pub async fn closed_within<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, limit: Duration) -> bool {
    let mut sink = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut sink)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}
