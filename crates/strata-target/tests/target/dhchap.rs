//! DH-HMAC-CHAP between the target and strata's initiator, and the target
//! as a host that does not authenticate sees it on a raw socket. The
//! kernel's initiator runs the same checks in the VM test
//! (tests/vm/kernel-dhchap.sh).

use std::time::Duration;

use strata_auth::{DhGroup, DhchapSecret, HashFn, HostKeys};
use strata_host::{Controller, HostConfig, HostError};

use crate::common::raw::*;
use crate::common::{NQN, Rng, start};

fn host(secret: Option<&DhchapSecret>, ctrl: Option<&DhchapSecret>) -> HostConfig {
    HostConfig {
        hostnqn: HOSTNQN.into(),
        hostid: HOSTID,
        io_queues: 2,
        dhchap_secret: secret.cloned(),
        dhchap_ctrl_secret: ctrl.cloned(),
        ..HostConfig::default()
    }
}

/// Writes a seeded pattern through every I/O queue and reads it back.
async fn verified_io(ctrl: &Controller, seed: u64) {
    let mut rng = Rng::new(seed);
    for q in 0..ctrl.io_queue_count() {
        let mut data = vec![0u8; 8 * 4096];
        rng.fill(&mut data);
        let lba = (q as u64) * 8;
        let queue = ctrl.io_queue(q).unwrap();
        queue.write(1, lba, data.clone(), false).await.unwrap();
        assert_eq!(queue.read(1, lba, 8).await.unwrap()[..], data[..], "queue {q}");
    }
}

fn auth_error(r: Result<Controller, HostError>) -> String {
    match r {
        Err(HostError::Authentication(why)) => why,
        Err(e) => panic!("expected an authentication error, got {e}"),
        Ok(_) => panic!("connected without the right key"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_a_key_must_prove_it_on_every_queue() {
    let fx = start(64).await;
    for (hash, group) in [(HashFn::Sha256, DhGroup::Ffdhe2048), (HashFn::Sha512, DhGroup::Null)] {
        let key = DhchapSecret::generate(Some(HashFn::Sha256));
        fx.target.set_host_keys(HOSTNQN, Some(HostKeys { hash, dhgroup: group, ..HostKeys::new(key.clone(), None) }));
        let ctrl = Controller::connect(fx.io, NQN, &host(Some(&key), None)).await.expect("the right key");
        assert_eq!(ctrl.io_queue_count(), 2);
        verified_io(&ctrl, 1).await;

        let wrong = DhchapSecret::generate(Some(HashFn::Sha256));
        let why = auth_error(Controller::connect(fx.io, NQN, &host(Some(&wrong), None)).await);
        assert!(why.contains("Failure1"), "{why}");
        let why = auth_error(Controller::connect(fx.io, NQN, &host(None, None)).await);
        assert!(why.contains("no secret"), "{why}");
        drop(ctrl);
    }
    // A host without keys is not asked to authenticate.
    let other = HostConfig::default();
    let ctrl = Controller::connect(fx.io, NQN, &other).await.expect("a host without keys");
    verified_io(&ctrl, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bidirectional_authentication_and_a_controller_with_the_wrong_key() {
    let fx = start(64).await;
    let key = DhchapSecret::generate(None);
    let ctrl_key = DhchapSecret::generate(Some(HashFn::Sha384));
    fx.target.set_host_keys(HOSTNQN, Some(HostKeys::new(key.clone(), Some(ctrl_key.clone()))));
    let ctrl = Controller::connect(fx.io, NQN, &host(Some(&key), Some(&ctrl_key))).await.expect("bidirectional");
    verified_io(&ctrl, 3).await;
    // The host expects another controller key: it refuses the controller.
    let other = DhchapSecret::generate(None);
    let why = auth_error(Controller::connect(fx.io, NQN, &host(Some(&key), Some(&other))).await);
    assert!(why.contains("controller's response"), "{why}");
}

/// Rotation: once the key changes, new connections need the new key and
/// the old one is refused, while the controller already connected keeps
/// doing I/O.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_keeps_connected_hosts_and_refuses_the_old_key() {
    let fx = start(64).await;
    let old = DhchapSecret::generate(Some(HashFn::Sha256));
    let new = DhchapSecret::generate(Some(HashFn::Sha256));
    fx.target.set_host_keys(HOSTNQN, Some(HostKeys::new(old.clone(), None)));
    let connected = Controller::connect(fx.io, NQN, &host(Some(&old), None)).await.expect("old key");
    fx.target.set_host_keys(HOSTNQN, Some(HostKeys::new(new.clone(), None)));
    auth_error(Controller::connect(fx.io, NQN, &host(Some(&old), None)).await);
    let fresh = Controller::connect(fx.io, NQN, &host(Some(&new), None)).await.expect("new key");
    verified_io(&fresh, 4).await;
    verified_io(&connected, 5).await;
    // Removing the keys lets the host in without authentication again.
    fx.target.set_host_keys(HOSTNQN, None);
    let plain = Controller::connect(fx.io, NQN, &host(None, None)).await.expect("no keys any more");
    verified_io(&plain, 6).await;
}

/// On the wire: the Connect response carries ATR (DW0 bit 17) and the
/// controller ID; until the queue authenticates, any other command is
/// Authentication Required (191h, DNR); a host that never authenticates is
/// closed at the handshake deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_queue_answers_authentication_required() {
    let config = strata_target::TargetConfig { handshake_timeout: Duration::from_secs(2), ..Default::default() };
    let fx = crate::common::start_with(config, 16).await;
    fx.target.set_host_keys(HOSTNQN, Some(HostKeys::new(DhchapSecret::generate(None), None)));
    let mut s = queue(fx.io).await;
    send_connect(&mut s, 1, 0, 31, &connect_data(HOSTID, 0xffff, NQN, HOSTNQN)).await;
    let cqe = read_cqe(&mut s).await;
    assert_eq!(status(&cqe), 0);
    let dw0 = u32::from_le_bytes(dw0(&cqe));
    assert_eq!(dw0 & (1 << 17), 1 << 17, "ATR set: {dw0:#x}");
    assert_ne!(dw0 & 0xffff, 0, "controller ID");
    send(&mut s, &property_set_cc(2, 1), &[]).await;
    let cqe = read_cqe(&mut s).await;
    assert_eq!(status(&cqe), dnr_status(1, 0x91), "Authentication Required");
    assert!(closed_within(&mut s, Duration::from_secs(5)).await, "closed at the handshake deadline");
    assert_eq!(fx.target.controller_count(), 0);
}
