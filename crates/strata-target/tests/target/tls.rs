//! NVMe/TCP inside TLS 1.3 with a PSK, between the target and strata's
//! initiator (both queue kinds), and as a raw host sees it: ports that
//! require, allow or refuse TLS, wrong and missing PSKs, a Connect that
//! claims another identity than the PSK proved, the discovery log's TREQ
//! and SECTYPE. The kernel's initiator (through tlshd) runs the same
//! checks in the VM test (tests/vm/kernel-tls.sh).

use std::time::Duration;

use strata_auth::{Derivation, DhchapSecret, HashFn, HostKeys, TlsPsk};
use strata_host::{Controller, HostConfig, HostError};
use strata_nvme::command::{ReadWrite, Sqe, io};
use strata_nvme::log_page as lp;
use strata_nvme::pdu::{self, Digests, IcReq};
use strata_target::TargetConfig;
use strata_tls::TlsMode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::raw::*;
use crate::common::{BS, NQN, Rng, start_with};

fn config(tls: TlsMode) -> TargetConfig {
    TargetConfig { tls, handshake_timeout: Duration::from_secs(3), ..TargetConfig::default() }
}

fn host(psk: Option<&TlsPsk>) -> HostConfig {
    HostConfig {
        hostnqn: HOSTNQN.into(),
        hostid: HOSTID,
        io_queues: 2,
        tls_psk: psk.cloned(),
        connect_timeout: Duration::from_secs(5),
        ..HostConfig::default()
    }
}

/// Writes a seeded pattern of `blocks` blocks through every I/O queue and
/// reads it back.
async fn verified_io(ctrl: &Controller, seed: u64, blocks: u32) {
    let mut rng = Rng::new(seed);
    for q in 0..ctrl.io_queue_count() {
        let mut data = vec![0u8; blocks as usize * BS];
        rng.fill(&mut data);
        let lba = (q as u64) * u64::from(blocks);
        let queue = ctrl.io_queue(q).unwrap();
        queue.write(1, lba, data.clone(), false).await.unwrap();
        assert!(queue.read(1, lba, blocks).await.unwrap()[..] == data[..], "queue {q}: data differs");
    }
}

fn tls_error(r: Result<Controller, HostError>) -> String {
    match r {
        Err(HostError::Tls(why)) => why,
        Err(e) => panic!("expected a TLS error, got {e}"),
        Ok(_) => panic!("connected without the right PSK"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_its_psk_does_io_over_tls_and_others_are_refused() {
    let fx = start_with(config(TlsMode::Required), 1024).await;
    let psk = TlsPsk::generate(HashFn::Sha256);
    fx.target.set_tls_psk(HOSTNQN, Some(psk.clone()));
    let ctrl = Controller::connect(fx.io, NQN, &host(Some(&psk))).await.expect("TLS connect");
    assert_eq!(ctrl.io_queue_count(), 2);
    // Small (in-capsule) and large (R2T, many records) transfers.
    verified_io(&ctrl, 1, 1).await;
    verified_io(&ctrl, 2, 64).await;

    // The other queue kind: the caller-driven queues load generators use.
    let (_c, mut drivers) =
        Controller::connect_with_drivers::<u64>(fx.io, NQN, &host(Some(&psk))).await.expect("TLS drivers");
    let d = &mut drivers[0];
    let mut rng = Rng::new(3);
    let mut data = vec![0u8; 32 * BS];
    rng.fill(&mut data);
    let mut sqe = Sqe::new(io::WRITE, 0);
    sqe.set_nsid(1);
    ReadWrite { slba: 100, nlb: 32, fua: false, limited_retry: false }.encode(&mut sqe);
    d.submit(1, sqe, Some(bytes::Bytes::from(data.clone())), 0).expect("submit write");
    let mut done = Vec::new();
    while done.is_empty() {
        tokio::time::timeout(Duration::from_secs(10), d.poll(&mut done)).await.expect("write completes").unwrap();
    }
    assert!(done.remove(0).1.is_ok(), "write");
    let mut sqe = Sqe::new(io::READ, 0);
    sqe.set_nsid(1);
    ReadWrite { slba: 100, nlb: 32, fua: false, limited_retry: false }.encode(&mut sqe);
    d.submit(2, sqe, None, 32 * BS).expect("submit read");
    while done.is_empty() {
        tokio::time::timeout(Duration::from_secs(10), d.poll(&mut done)).await.expect("read completes").unwrap();
    }
    let (token, r) = done.remove(0);
    assert_eq!(token, 2);
    assert!(r.unwrap().data[..] == data[..], "driver read differs");

    // A wrong PSK, and a host the target has no PSK for.
    let why = tls_error(Controller::connect(fx.io, NQN, &host(Some(&TlsPsk::generate(HashFn::Sha256)))).await);
    assert!(why.contains("handshake"), "{why}");
    let stranger = HostConfig { tls_psk: Some(psk.clone()), ..HostConfig::default() };
    tls_error(Controller::connect(fx.io, NQN, &stranger).await);
    // Plain TCP on a TLS-only port: the target closes it.
    let plain = Controller::connect(fx.io, NQN, &host(None)).await;
    assert!(plain.is_err(), "a plain host got in");
    assert!(fx.target.stats().tls_failures >= 3, "{:?}", fx.target.stats());

    // Rotation: new handshakes need the new PSK; the connected host stays.
    let new = TlsPsk::generate(HashFn::Sha256);
    fx.target.set_tls_psk(HOSTNQN, Some(new.clone()));
    tls_error(Controller::connect(fx.io, NQN, &host(Some(&psk))).await);
    Controller::connect(fx.io, NQN, &host(Some(&new))).await.expect("the new PSK");
    verified_io(&ctrl, 4, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_port_takes_tls_and_plain_hosts_and_an_off_port_only_plain() {
    let fx = start_with(config(TlsMode::Allowed), 256).await;
    let psk = TlsPsk::generate(HashFn::Sha256);
    fx.target.set_tls_psk(HOSTNQN, Some(psk.clone()));
    let tls = Controller::connect(fx.io, NQN, &host(Some(&psk))).await.expect("TLS on an allowed port");
    verified_io(&tls, 5, 16).await;
    let plain = Controller::connect(fx.io, NQN, &host(None)).await.expect("plain on an allowed port");
    verified_io(&plain, 6, 16).await;

    let fx = start_with(config(TlsMode::Off), 256).await;
    fx.target.set_tls_psk(HOSTNQN, Some(psk.clone()));
    assert!(Controller::connect(fx.io, NQN, &host(Some(&psk))).await.is_err(), "TLS on a plain port");
    Controller::connect(fx.io, NQN, &host(None)).await.expect("plain on a plain port");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dh_hmac_chap_runs_inside_tls() {
    let fx = start_with(config(TlsMode::Required), 256).await;
    let psk = TlsPsk::generate(HashFn::Sha256);
    let key = DhchapSecret::generate(Some(HashFn::Sha256));
    fx.target.set_tls_psk(HOSTNQN, Some(psk.clone()));
    fx.target.set_host_keys(HOSTNQN, Some(HostKeys::new(key.clone(), None)));
    let cfg = HostConfig { dhchap_secret: Some(key), ..host(Some(&psk)) };
    let ctrl = Controller::connect(fx.io, NQN, &cfg).await.expect("TLS and DH-HMAC-CHAP");
    verified_io(&ctrl, 7, 4).await;
    let r = Controller::connect(fx.io, NQN, &host(Some(&psk))).await;
    assert!(matches!(r, Err(HostError::Authentication(_))), "TLS alone passed DH-HMAC-CHAP: {:?}", r.map(|_| ()));
}

/// A raw queue inside TLS as `hostnqn` proving `psk` for `subnqn`, after
/// ICReq/ICResp.
async fn tls_queue(addr: std::net::SocketAddr, psk: &TlsPsk, hostnqn: &str, subnqn: &str) -> strata_tls::Stream {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut s = strata_tls::client::connect(tcp, psk, hostnqn, subnqn, 0, Derivation::Compat, Duration::from_secs(5))
        .await
        .expect("TLS handshake");
    s.write_all(&IcReq { pfv: 0, hpda: 0, digests: Digests::default(), maxr2t: 0 }.encode()).await.unwrap();
    let mut resp = [0u8; pdu::IC_LEN];
    s.read_exact(&mut resp).await.unwrap();
    assert_eq!(resp[0], 0x01, "ICResp");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_must_name_the_host_and_subsystem_the_psk_identity_proved() {
    let fx = start_with(config(TlsMode::Required), 64).await;
    let psk = TlsPsk::generate(HashFn::Sha256);
    fx.target.set_tls_psk(HOSTNQN, Some(psk.clone()));
    let other = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000c2";
    // Another host's NQN in Connect: Connect Invalid Host (01h/84h), DNR.
    let mut s = tls_queue(fx.io, &psk, HOSTNQN, NQN).await;
    send_connect(&mut s, 1, 0, 31, &connect_data(HOSTID, 0xffff, NQN, other)).await;
    assert_eq!(status(&read_cqe(&mut s).await), dnr_status(1, 0x84));
    // Another subsystem than the identity's: Invalid Parameters (01h/82h).
    let mut s = tls_queue(fx.io, &psk, HOSTNQN, "nqn.2026-11.io.strata:elsewhere").await;
    send_connect(&mut s, 1, 0, 31, &connect_data(HOSTID, 0xffff, NQN, HOSTNQN)).await;
    assert_eq!(status(&read_cqe(&mut s).await), dnr_status(1, 0x82));
    // The identity's own NQNs: connected.
    let mut s = tls_queue(fx.io, &psk, HOSTNQN, NQN).await;
    send_connect(&mut s, 1, 0, 31, &connect_data(HOSTID, 0xffff, NQN, HOSTNQN)).await;
    assert_eq!(status(&read_cqe(&mut s).await), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_discovery_log_says_what_each_port_asks_for() {
    for (mode, treq, sectype) in [
        (TlsMode::Off, lp::TREQ_SECURE_CHANNEL_NOT_REQUIRED, lp::TCP_SECTYPE_NONE),
        (TlsMode::Allowed, lp::TREQ_SECURE_CHANNEL_NOT_REQUIRED, lp::TCP_SECTYPE_TLS13),
        (TlsMode::Required, lp::TREQ_SECURE_CHANNEL_REQUIRED, lp::TCP_SECTYPE_TLS13),
    ] {
        let fx = start_with(config(mode), 64).await;
        let psk = TlsPsk::generate(HashFn::Sha256);
        fx.target.set_tls_psk(HOSTNQN, Some(psk.clone()));
        let cfg = host((mode != TlsMode::Off).then_some(&psk));
        let entries = strata_host::discover(fx.disc, &cfg).await.expect("discovery");
        let e = entries.iter().find(|e| e.subnqn == NQN).expect("the subsystem is listed");
        assert_eq!((e.treq & lp::TREQ_SECURE_CHANNEL_MASK, e.tcp_sectype()), (treq, sectype), "{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_writes_in_flight_over_tls_complete_and_read_back() {
    let fx = start_with(config(TlsMode::Required), 1024).await;
    let psk = TlsPsk::generate(HashFn::Sha256);
    fx.target.set_tls_psk(HOSTNQN, Some(psk.clone()));
    let cfg = HostConfig { io_queues: 1, ..host(Some(&psk)) };
    let (_c, mut drivers) = Controller::connect_with_drivers::<u64>(fx.io, NQN, &cfg).await.expect("TLS drivers");
    let d = &mut drivers[0];
    let mut rng = Rng::new(9);
    let mut expected = vec![0u8; 512 * BS];
    rng.fill(&mut expected);
    for round in 0..16u64 {
        for k in 0..32u64 {
            let lba = round * 32 + k;
            let block = expected[lba as usize * BS..(lba as usize + 1) * BS].to_vec();
            let mut sqe = Sqe::new(io::WRITE, 0);
            sqe.set_nsid(1);
            ReadWrite { slba: lba, nlb: 1, fua: false, limited_retry: false }.encode(&mut sqe);
            d.submit(lba, sqe, Some(bytes::Bytes::from(block)), 0).expect("submit");
        }
        let mut done = Vec::new();
        while done.len() < 32 {
            tokio::time::timeout(Duration::from_secs(10), d.poll(&mut done)).await.expect("writes complete").unwrap();
        }
        assert!(done.iter().all(|(_, r)| r.is_ok()), "round {round}");
    }
    let ctrl = Controller::connect(fx.io, NQN, &host(Some(&psk))).await.expect("TLS connect");
    let q = ctrl.io_queue(0).unwrap();
    for half in 0..2u64 {
        let got = q.read(1, half * 256, 256).await.unwrap();
        let want = &expected[half as usize * 256 * BS..(half as usize + 1) * 256 * BS];
        assert!(got[..] == want[..], "data written at QD 32 over TLS differs (half {half})");
    }
}
