//! The host against a scripted fake controller on a raw socket: what it
//! does when the controller misbehaves. Each case fails the pending
//! command with an error that names the cause and closes the connection,
//! answering a malformed PDU with an H2CTermReq.

use std::time::Duration;

use strata_host::{Controller, HostConfig, HostError, QueueFailure};
use strata_nvme::pdu::{self, Digests, IcResp, PduType, fes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const NQN: &str = "nqn.2026-11.io.strata:fake";

/// Accepts one connection, reads the ICReq and answers with `resp`.
async fn accept_and_answer_icreq(listener: &TcpListener, resp: IcResp) -> TcpStream {
    let (mut s, _) = listener.accept().await.unwrap();
    let mut icreq = [0u8; pdu::IC_LEN];
    s.read_exact(&mut icreq).await.unwrap();
    assert_eq!(icreq[0], 0x00, "ICReq");
    s.write_all(&resp.encode()).await.unwrap();
    s
}

/// Reads the Connect capsule (72-byte header plus 1 KiB of in-capsule
/// Connect data, no digests).
async fn read_connect(s: &mut TcpStream) -> Vec<u8> {
    let mut capsule = vec![0u8; pdu::CAPSULE_CMD_HLEN + 1024];
    s.read_exact(&mut capsule).await.unwrap();
    assert_eq!(capsule[0], 0x04, "CapsuleCmd");
    assert_eq!(capsule[8], 0x7f, "fabrics opcode");
    capsule
}

const GOOD: IcResp = IcResp { pfv: 0, cpda: 0, digests: Digests { header: false, data: false }, maxh2cdata: 131072 };

async fn setup() -> (TcpListener, std::net::SocketAddr, HostConfig) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = HostConfig {
        connect_timeout: Duration::from_secs(5),
        io_timeout: Duration::from_secs(5),
        ..Default::default()
    };
    (listener, addr, cfg)
}

#[tokio::test]
async fn a_c2h_term_req_fails_the_pending_command_with_its_fes() {
    let (listener, addr, cfg) = setup().await;
    let fake = tokio::spawn(async move {
        let mut s = accept_and_answer_icreq(&listener, GOOD).await;
        read_connect(&mut s).await;
        s.write_all(&pdu::encode_term_req(PduType::C2H_TERM_REQ, fes::PDU_SEQUENCE_ERROR, 0, &[])).await.unwrap();
        // The host closes without answering a termination request.
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        rest
    });
    let err = Controller::connect(addr, NQN, &cfg).await.unwrap_err();
    assert!(
        matches!(
            err,
            HostError::QueueFailed { qid: 0, cause: QueueFailure::Terminated { fes: fes::PDU_SEQUENCE_ERROR, fei: 0 } }
        ),
        "{err}"
    );
    assert!(fake.await.unwrap().is_empty());
}

#[tokio::test]
async fn a_malformed_pdu_is_answered_with_an_h2c_term_req() {
    let (listener, addr, cfg) = setup().await;
    let fake = tokio::spawn(async move {
        let mut s = accept_and_answer_icreq(&listener, GOOD).await;
        read_connect(&mut s).await;
        // A CapsuleResp whose HLEN is wrong.
        let mut bad = pdu::encode_capsule_resp(
            &strata_nvme::completion::Cqe::new(0, strata_nvme::status::Status::SUCCESS),
            Digests::default(),
        )
        .as_slice()
        .to_vec();
        bad[pdu::HLEN_OFFSET] = 23;
        s.write_all(&bad).await.unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        rest
    });
    let err = Controller::connect(addr, NQN, &cfg).await.unwrap_err();
    assert!(matches!(err, HostError::QueueFailed { qid: 0, cause: QueueFailure::Malformed(_) }), "{err}");
    let term = fake.await.unwrap();
    assert_eq!(term[0], 0x02, "H2CTermReq");
    assert_eq!(u16::from_le_bytes([term[8], term[9]]), fes::INVALID_HEADER_FIELD);
    assert_eq!(u32::from_le_bytes([term[10], term[11], term[12], term[13]]), pdu::HLEN_OFFSET as u32);
}

#[tokio::test]
async fn data_for_an_unknown_command_is_a_protocol_error() {
    let (listener, addr, cfg) = setup().await;
    let fake = tokio::spawn(async move {
        let mut s = accept_and_answer_icreq(&listener, GOOD).await;
        read_connect(&mut s).await;
        let h = pdu::DataHeader { cccid: 999, ttag: 0, datao: 0, datal: 4 };
        let mut c2h = pdu::encode_c2h_data(&h, pdu::FLAG_DATA_LAST, Digests::default()).as_slice().to_vec();
        c2h.extend_from_slice(&[1, 2, 3, 4]);
        s.write_all(&c2h).await.unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        rest
    });
    let err = Controller::connect(addr, NQN, &cfg).await.unwrap_err();
    assert!(matches!(err, HostError::QueueFailed { qid: 0, cause: QueueFailure::Protocol(_) }), "{err}");
    let term = fake.await.unwrap();
    assert_eq!((term[0], term[8]), (0x02, fes::INVALID_HEADER_FIELD as u8));
}

#[tokio::test]
async fn unsupported_icresp_parameters_and_silence_are_refused() {
    let (listener, addr, cfg) = setup().await;
    let fake = tokio::spawn(async move {
        let _s = accept_and_answer_icreq(&listener, IcResp { cpda: 3, ..GOOD }).await;
        let _t = accept_and_answer_icreq(&listener, IcResp { maxh2cdata: 512, ..GOOD }).await;
        // Accept and say nothing.
        let (silent, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(silent);
    });
    assert!(matches!(Controller::connect(addr, NQN, &cfg).await, Err(HostError::Handshake(_))));
    assert!(matches!(Controller::connect(addr, NQN, &cfg).await, Err(HostError::Handshake(_))));
    let quick = HostConfig { connect_timeout: Duration::from_millis(300), ..cfg };
    assert!(matches!(Controller::connect(addr, NQN, &quick).await, Err(HostError::Timeout { .. })));
    fake.await.unwrap();
}

/// A CapsuleResp for the Connect in `capsule` with Connect Invalid
/// Parameters (SCT 1h, SC 82h) and DNR, carrying `dw0` as written here byte
/// by byte rather than by this crate's encoder.
fn connect_invalid_parameters(capsule: &[u8], dw0: [u8; 4]) -> Vec<u8> {
    let cid = [capsule[pdu::CH_LEN + 2], capsule[pdu::CH_LEN + 3]];
    // Status field: (DNR | SCT 1 | SC 82h) << 1, phase 0: 0x4182 << 1.
    let status = (0x4182u16 << 1).to_le_bytes();
    let mut resp = vec![0x05, 0, 24, 0, 24, 0, 0, 0];
    resp.extend_from_slice(&dw0);
    resp.extend_from_slice(&[0; 8]); // DW1, SQHD, SQID
    resp.extend_from_slice(&cid);
    resp.extend_from_slice(&status);
    resp
}

/// Regression: the host read IATTR from bit 0 and IPO from bits 31:16 of a
/// refused Connect's DW0. NVMe over Fabrics 1.1 section 3.3 (Connect
/// Response) puts IPO in bits 15:00 and IATTR in bits 23:16; the DW0 values
/// here are what Linux nvmet sends: `IPO_IATTR_CONNECT_DATA(subsysnqn)` =
/// `(1 << 16) | 256` and `IPO_IATTR_CONNECT_SQE(qid)` = 42
/// (`drivers/nvme/target/nvmet.h`).
#[tokio::test]
async fn a_refused_connect_reports_ipo_and_iattr_as_nvmet_encodes_them() {
    let (listener, addr, cfg) = setup().await;
    let fake = tokio::spawn(async move {
        for dw0 in [[0x00, 0x01, 0x01, 0x00], [42, 0, 0, 0]] {
            let mut s = accept_and_answer_icreq(&listener, GOOD).await;
            let capsule = read_connect(&mut s).await;
            s.write_all(&connect_invalid_parameters(&capsule, dw0)).await.unwrap();
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
        }
    });
    for (iattr, ipo) in [(true, 256), (false, 42)] {
        match Controller::connect(addr, NQN, &cfg).await {
            Err(HostError::ConnectRejected { status, iattr: got_iattr, ipo: got_ipo }) => {
                assert_eq!((status.code(), status.is_dnr()), (0x182, true));
                assert_eq!((got_iattr, got_ipo), (iattr, ipo));
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
    fake.await.unwrap();
}
