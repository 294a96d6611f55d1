//! NVMe in-band authentication for strata: DH-HMAC-CHAP (NVMe Base 2.0,
//! section 8.13.5) and the key interchange formats.
//!
//! - [`secret`]: `DHHC-1:` secrets and `NVMeTLSkey-1:` PSKs, as `nvme
//!   gen-dhchap-key` and `nvme gen-tls-key` print them, and the NQN
//!   transform.
//! - [`hash`], [`dh`]: the hash functions and FFDHE groups the protocol
//!   names, on RustCrypto's `sha2` / `hmac` and `num-bigint`.
//! - [`controller`], [`host`]: each side of a transaction as a state
//!   machine over message bytes, with no I/O: the target and strata's
//!   initiator carry the bytes in Authentication Send / Receive commands
//!   (wire formats in `strata_nvme::auth`).
//! - [`tls`]: PSK identities and the TLS PSK derivation of NVMe/TCP TLS.
//!
//! Secrets never appear in `Debug` output; responses are compared in
//! constant time.

mod chap;
mod primes;

pub mod controller;
pub mod dh;
pub mod hash;
pub mod host;
pub mod secret;
pub mod tls;

pub use controller::{ControllerAuth, HostKeys, Outcome};
pub use dh::DhGroup;
pub use hash::HashFn;
pub use host::{HostAuth, HostAuthError};
pub use secret::{DhchapSecret, KeyFormatError, TlsPsk};
pub use tls::{Derivation, IdentityError, PskIdentity};

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use strata_nvme::auth::{AuthMessage, failure};

    use super::*;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0c4b6c4e-0000-4000-8000-000000000001";
    const SUB: &str = "nqn.2026-11.io.strata:vol1";
    const AL: usize = 4096;

    /// Runs one transaction between the two machines; returns the
    /// controller's outcome and the host's error, if any.
    fn run(keys: Option<HostKeys>, host: HostAuth) -> (ControllerAuth, Result<(), HostAuthError>) {
        let mut host = host;
        let mut ctrl = ControllerAuth::new(keys.map(Arc::new), HOST, SUB);
        ctrl.send(&host.negotiate());
        let challenge = ctrl.receive(AL).unwrap();
        let reply = match host.reply(&challenge) {
            Ok(r) => r,
            Err(e) => return (ctrl, Err(e)),
        };
        ctrl.send(&reply);
        let s1 = ctrl.receive(AL).unwrap();
        match host.success1(&s1) {
            Ok(Some(s2)) => {
                ctrl.send(&s2);
                (ctrl, Ok(()))
            }
            Ok(None) => (ctrl, Ok(())),
            Err(HostAuthError::ControllerMismatch { failure2 }) => {
                ctrl.send(&failure2);
                (ctrl, Err(HostAuthError::ControllerMismatch { failure2: vec![] }))
            }
            Err(e) => (ctrl, Err(e)),
        }
    }

    #[test]
    fn every_hash_and_group_authenticates_both_ways() {
        for hash in HashFn::ALL {
            for group in [DhGroup::Null, DhGroup::Ffdhe2048, DhGroup::Ffdhe4096] {
                for bidirectional in [false, true] {
                    let host_key = DhchapSecret::generate(Some(hash));
                    let ctrl_key = bidirectional.then(|| DhchapSecret::generate(None));
                    let keys =
                        HostKeys { secret: host_key.clone(), ctrl_secret: ctrl_key.clone(), hash, dhgroup: group };
                    let host = HostAuth::new(host_key, ctrl_key, HOST, SUB, 7);
                    let (ctrl, r) = run(Some(keys), host);
                    assert_eq!(r, Ok(()), "{hash} {group} bidirectional={bidirectional}");
                    assert_eq!(ctrl.outcome(), Outcome::Authenticated, "{hash} {group}");
                    assert_eq!(ctrl.chosen(), Some((hash, group)));
                }
            }
        }
    }

    #[test]
    fn a_wrong_or_missing_key_is_refused_with_failure1() {
        let keys = HostKeys::new(DhchapSecret::generate(Some(HashFn::Sha256)), None);
        let wrong = HostAuth::new(DhchapSecret::generate(Some(HashFn::Sha256)), None, HOST, SUB, 1);
        let (ctrl, r) = run(Some(keys.clone()), wrong);
        assert_eq!(r, Err(HostAuthError::Refused { explanation: failure::FAILED }));
        assert_eq!(ctrl.outcome(), Outcome::Failed);
        assert!(ctrl.failure().unwrap().contains("does not match"), "{:?}", ctrl.failure());

        // The right key under another host NQN is a different key.
        let mut ctrl = ControllerAuth::new(Some(Arc::new(keys.clone())), HOST, SUB);
        let mut other = HostAuth::new(keys.secret.clone(), None, "nqn.2014-08.org.nvmexpress:uuid:intruder", SUB, 1);
        ctrl.send(&other.negotiate());
        let reply = other.reply(&ctrl.receive(AL).unwrap()).unwrap();
        ctrl.send(&reply);
        assert_eq!(ctrl.outcome(), Outcome::Failed);

        // No keys here for the host: NOT_USABLE at once.
        let (ctrl, r) = run(None, HostAuth::new(keys.secret.clone(), None, HOST, SUB, 1));
        assert_eq!(r, Err(HostAuthError::Refused { explanation: failure::NOT_USABLE }));
        assert_eq!(ctrl.outcome(), Outcome::Failed);
    }

    #[test]
    fn the_host_refuses_a_controller_with_the_wrong_controller_key() {
        let host_key = DhchapSecret::generate(Some(HashFn::Sha256));
        let keys = HostKeys::new(host_key.clone(), Some(DhchapSecret::generate(None)));
        let host = HostAuth::new(host_key, Some(DhchapSecret::generate(None)), HOST, SUB, 3);
        let (ctrl, r) = run(Some(keys), host);
        assert!(matches!(r, Err(HostAuthError::ControllerMismatch { .. })));
        assert_eq!(ctrl.outcome(), Outcome::Failed, "Failure2 fails the queue");

        // A host asking for bidirectional against a controller with no key.
        let host_key = DhchapSecret::generate(None);
        let keys = HostKeys::new(host_key.clone(), None);
        let host = HostAuth::new(host_key, Some(DhchapSecret::generate(None)), HOST, SUB, 3);
        let (ctrl, r) = run(Some(keys), host);
        assert_eq!(r, Err(HostAuthError::Refused { explanation: failure::FAILED }));
        assert_eq!(ctrl.outcome(), Outcome::Failed);
    }

    #[test]
    fn the_controller_falls_back_to_what_the_host_offers_and_refuses_what_it_cannot_use() {
        let key = DhchapSecret::generate(None);
        let keys = Arc::new(HostKeys { hash: HashFn::Sha512, dhgroup: DhGroup::Ffdhe8192, ..HostKeys::new(key, None) });
        let negotiate = |hashes: Vec<u8>, dhgroups: Vec<u8>| {
            AuthMessage::Negotiate {
                t_id: 1,
                sc_c: 0,
                protocols: vec![strata_nvme::auth::Protocol { authid: 1, hashes, dhgroups }],
            }
            .encode()
        };
        let mut c = ControllerAuth::new(Some(keys.clone()), HOST, SUB);
        c.send(&negotiate(vec![9, 2], vec![0]));
        assert_eq!(c.chosen(), Some((HashFn::Sha384, DhGroup::Null)));
        c.send(&negotiate(vec![9], vec![0]));
        assert_eq!(c.outcome(), Outcome::Failed);
        let f1 = AuthMessage::decode(&c.receive(AL).unwrap()).unwrap();
        assert!(matches!(f1, AuthMessage::Failure { explanation: failure::HASH_UNUSABLE, .. }), "{f1:?}");
        c.send(&negotiate(vec![1], vec![7]));
        assert!(matches!(
            AuthMessage::decode(&c.receive(AL).unwrap()).unwrap(),
            AuthMessage::Failure { explanation: failure::DHGROUP_UNUSABLE, .. }
        ));
    }

    #[test]
    fn out_of_turn_short_and_garbage_messages_fail_the_queue_without_panicking() {
        let key = DhchapSecret::generate(None);
        let keys = Arc::new(HostKeys::new(key.clone(), None));
        let mut c = ControllerAuth::new(Some(keys.clone()), HOST, SUB);
        c.send(&AuthMessage::Success2 { t_id: 0 }.encode());
        assert_eq!(c.outcome(), Outcome::Failed);
        // A receive that is too short keeps the step: asking again works.
        let host = HostAuth::new(key.clone(), None, HOST, SUB, 5);
        let mut c = ControllerAuth::new(Some(keys.clone()), HOST, SUB);
        c.send(&host.negotiate());
        assert!(c.receive(16).is_err());
        let full = c.receive(AL).unwrap();
        assert_eq!(full.len(), AL);
        // A Reply for another transaction.
        let mut wrong_tid = HostAuth::new(key.clone(), None, HOST, SUB, 6);
        let _ = wrong_tid.negotiate();
        // It refuses the challenge of transaction 5 outright.
        assert!(matches!(wrong_tid.reply(&full), Err(HostAuthError::Protocol(_))));
        for junk in [&[][..], &[1, 2, 3][..], &[1u8; 300][..]] {
            let mut c = ControllerAuth::new(Some(keys.clone()), HOST, SUB);
            c.send(junk);
            assert_eq!(c.outcome(), Outcome::Failed);
            assert!(c.receive(AL).is_ok());
        }
    }

    #[test]
    fn renegotiating_uses_the_keys_of_the_moment() {
        let old = DhchapSecret::generate(None);
        let new = DhchapSecret::generate(None);
        let mut c = ControllerAuth::new(Some(Arc::new(HostKeys::new(old.clone(), None))), HOST, SUB);
        let mut h = HostAuth::new(old.clone(), None, HOST, SUB, 1);
        c.send(&h.negotiate());
        let r = h.reply(&c.receive(AL).unwrap()).unwrap();
        c.send(&r);
        assert_eq!(h.success1(&c.receive(AL).unwrap()), Ok(None));
        assert_eq!(c.outcome(), Outcome::Authenticated);
        // Rotation: the old key no longer passes a new transaction.
        c.set_keys(Some(Arc::new(HostKeys::new(new.clone(), None))));
        let mut h = HostAuth::new(old, None, HOST, SUB, 2);
        c.send(&h.negotiate());
        assert_eq!(c.outcome(), Outcome::Pending);
        let r = h.reply(&c.receive(AL).unwrap()).unwrap();
        c.send(&r);
        assert_eq!(c.outcome(), Outcome::Failed);
        let mut h = HostAuth::new(new, None, HOST, SUB, 3);
        c.send(&h.negotiate());
        let r = h.reply(&c.receive(AL).unwrap()).unwrap();
        c.send(&r);
        assert_eq!(h.success1(&c.receive(AL).unwrap()), Ok(None));
        assert_eq!(c.outcome(), Outcome::Authenticated);
    }
}
