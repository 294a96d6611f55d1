//! Malformed PDUs on a raw socket (NVMe/TCP 1.0, section 3.6.2.3 and
//! "Fatal Error Status"): the target answers each with a C2HTermReq naming
//! the error (FES) and, for header field errors, the offending byte (FEI),
//! then closes that connection, while a well-behaved host on another
//! connection keeps doing verified I/O before and after.

use std::time::Duration;

use crate::common::{BS, NQN, Rng, start};
use strata_host::{Controller, HostConfig};
use strata_nvme::command::{SGL_INCAPSULE_DATA, SglDescriptor, Sqe, io};
use strata_nvme::pdu::{self, DataHeader, Digests, IcReq, fes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connects, optionally performs ICReq/ICResp, sends `bad`, and returns the
/// (FES, FEI) of the C2HTermReq the target answers with, after checking
/// the target then closed the connection.
async fn term_req_for(addr: std::net::SocketAddr, handshake: bool, bad: &[u8]) -> (u16, u32) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    if handshake {
        s.write_all(&IcReq { pfv: 0, hpda: 0, digests: Digests::default(), maxr2t: 0 }.encode()).await.unwrap();
        let mut resp = [0u8; pdu::IC_LEN];
        s.read_exact(&mut resp).await.unwrap();
        assert_eq!(resp[0], 0x01, "ICResp");
    }
    s.write_all(bad).await.unwrap();
    let mut ch = [0u8; pdu::TERM_HLEN];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut ch)).await.expect("answer in time").unwrap();
    assert_eq!(ch[0], 0x03, "C2HTermReq type");
    assert_eq!(ch[2] as usize, pdu::TERM_HLEN, "HLEN");
    let plen = u32::from_le_bytes([ch[4], ch[5], ch[6], ch[7]]) as usize;
    assert!((pdu::TERM_HLEN..=pdu::TERM_HLEN + pdu::TERM_MAX_ERROR_DATA).contains(&plen));
    let mut error_data = vec![0u8; plen - pdu::TERM_HLEN];
    s.read_exact(&mut error_data).await.unwrap();
    // The offending header comes back as error data.
    let n = error_data.len().min(bad.len());
    assert_eq!(&error_data[..n], &bad[..n]);
    // Then the connection closes.
    let mut rest = [0u8; 1];
    match tokio::time::timeout(Duration::from_secs(5), s.read(&mut rest)).await.expect("closes in time") {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("connection still open after C2HTermReq: {other:?}"),
    }
    (u16::from_le_bytes([ch[8], ch[9]]), u32::from_le_bytes([ch[10], ch[11], ch[12], ch[13]]))
}

async fn verified_io(ctrl: &Controller, rng: &mut Rng, lba: u64) {
    for blocks in [1usize, 64] {
        let data = rng.bytes(blocks * BS);
        ctrl.write(1, lba, data.clone(), false).await.expect("write");
        assert_eq!(ctrl.read(1, lba, blocks as u32).await.expect("read")[..], data[..]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_pdus_get_a_c2h_term_req_and_only_their_connection_closes() {
    let fx = start(1024).await;
    let ctrl = Controller::connect(fx.io, NQN, &HostConfig::default()).await.expect("connect");
    let mut rng = Rng::new(7);
    verified_io(&ctrl, &mut rng, 0).await;

    // (a) An unknown PDU type after a good ICReq.
    let mut unknown = vec![0u8; 24];
    unknown[0] = 0x0A;
    unknown[2] = 24;
    unknown[4] = 24;
    assert_eq!(term_req_for(fx.io, true, &unknown).await, (fes::INVALID_HEADER_FIELD, 0));

    // (b) A CapsuleCmd whose HLEN is not 72.
    let mut sqe = Sqe::new(io::WRITE, 1);
    sqe.set_nsid(1);
    sqe.set_sgl(SglDescriptor { addr: 0, length: 16, sgl_type: SGL_INCAPSULE_DATA });
    let mut capsule = pdu::encode_capsule_cmd(&sqe, 16, Digests::default()).as_slice().to_vec();
    capsule.extend_from_slice(&[0u8; 16]);
    capsule[pdu::HLEN_OFFSET] = 71;
    assert_eq!(term_req_for(fx.io, true, &capsule).await, (fes::INVALID_HEADER_FIELD, pdu::HLEN_OFFSET as u32));

    // (c) Garbage as the very first PDU (no ICReq).
    let garbage: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0xde).collect();
    assert_eq!(term_req_for(fx.io, false, &garbage).await, (fes::INVALID_HEADER_FIELD, 0));
    // ... and a well-formed PDU that is not an ICReq as the first PDU.
    let mut capsule = pdu::encode_capsule_cmd(&sqe, 16, Digests::default()).as_slice().to_vec();
    capsule.extend_from_slice(&[0u8; 16]);
    assert_eq!(term_req_for(fx.io, false, &capsule).await.0, fes::PDU_SEQUENCE_ERROR);

    // (d) H2CData for a command that never asked for data.
    let h = DataHeader { cccid: 77, ttag: 0, datao: 0, datal: 16 };
    let mut h2c = pdu::encode_h2c_data(&h, pdu::FLAG_DATA_LAST, Digests::default()).as_slice().to_vec();
    h2c.extend_from_slice(&[0u8; 16]);
    assert_eq!(term_req_for(fx.io, true, &h2c).await, (fes::INVALID_HEADER_FIELD, pdu::DATA_CCCID_OFFSET as u32));

    // The proper host never noticed.
    verified_io(&ctrl, &mut rng, 100).await;
    assert_eq!(fx.target.controller_count(), 1);
    ctrl.disconnect().await.unwrap();
}
