//! In-band authentication: the DH-HMAC-CHAP message decoder
//! (crates/strata-nvme/src/auth.rs), the key interchange parsers
//! (crates/strata-auth/src/secret.rs) and the controller's state machine
//! (crates/strata-auth/src/controller.rs) fed whatever a host may send.
//!
//! Invariants: nothing panics; a message that decodes encodes to bytes
//! that decode to the same message; a key that parses prints text that
//! parses to the same key; the controller never reports a queue
//! authenticated without a Reply made with the host's key (here the
//! fuzzer does not know the key, so it never may).
#![no_main]

use std::sync::Arc;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use strata_auth::{ControllerAuth, DhGroup, DhchapSecret, HashFn, HostAuth, HostKeys, Outcome, TlsPsk};
use strata_nvme::auth::AuthMessage;

#[derive(Arbitrary, Debug)]
enum Step {
    Send(Vec<u8>),
    Receive(u16),
}

#[derive(Arbitrary, Debug)]
enum Input {
    Message(Vec<u8>),
    Key(String),
    Conversation { null_group: bool, steps: Vec<Step> },
    /// A valid Negotiate and Challenge first, then a Reply with fields the
    /// fuzzer picks (the DH value above all) and what follows: the paths
    /// behind negotiation.
    AfterChallenge { group: u8, response: Vec<u8>, c2: Option<Vec<u8>>, seqnum: u32, dh_value: Vec<u8>, steps: Vec<Step> },
}

fuzz_target!(|input: Input| match input {
    Input::Message(b) => {
        if let Ok(m) = AuthMessage::decode(&b) {
            assert_eq!(AuthMessage::decode(&m.encode()).as_ref(), Ok(&m));
        }
    }
    Input::Key(text) => {
        if let Ok(k) = DhchapSecret::parse(&text) {
            assert_eq!(DhchapSecret::parse(&k.to_interchange()), Ok(k));
        }
        if let Ok(k) = TlsPsk::parse(&text) {
            assert_eq!(TlsPsk::parse(&k.to_interchange()), Ok(k));
        }
    }
    Input::AfterChallenge { group, response, c2, seqnum, dh_value, steps } => {
        let secret = DhchapSecret::generate(Some(HashFn::Sha256));
        // The smaller groups only: the fuzzer's time goes to the inputs.
        let dhgroup = [DhGroup::Null, DhGroup::Ffdhe2048][usize::from(group % 2)];
        let keys = HostKeys { dhgroup, ..HostKeys::new(secret.clone(), Some(DhchapSecret::generate(None))) };
        let (hostnqn, subnqn) = ("nqn.2014-08.org.nvmexpress:uuid:h", "nqn.s");
        let mut c = ControllerAuth::new(Some(Arc::new(keys)), hostnqn, subnqn);
        let host = HostAuth::new(secret, None, hostnqn, subnqn, 9);
        c.send(&host.negotiate());
        let challenge = c.receive(4096).expect("a 4 KiB receive holds any challenge");
        assert!(matches!(AuthMessage::decode(&challenge), Ok(AuthMessage::Challenge { .. })));
        let reply = AuthMessage::Reply { t_id: 9, response, challenge: c2, seqnum, dh_value };
        c.send(&reply.encode());
        for step in steps.into_iter().take(8) {
            match step {
                Step::Send(b) => c.send(&b),
                Step::Receive(al) => {
                    let _ = c.receive(usize::from(al));
                }
            }
        }
        assert_ne!(c.outcome(), Outcome::Authenticated, "authenticated without the key");
    }
    Input::Conversation { null_group, steps } => {
        let mut keys = HostKeys::new(DhchapSecret::generate(Some(HashFn::Sha256)), Some(DhchapSecret::generate(None)));
        if null_group {
            keys.dhgroup = DhGroup::Null;
        }
        let mut c = ControllerAuth::new(Some(Arc::new(keys)), "nqn.2014-08.org.nvmexpress:uuid:h", "nqn.s");
        for step in steps.into_iter().take(16) {
            match step {
                Step::Send(b) => c.send(&b),
                Step::Receive(al) => {
                    if let Ok(b) = c.receive(usize::from(al)) {
                        assert_eq!(b.len(), usize::from(al));
                    }
                }
            }
            assert_ne!(c.outcome(), Outcome::Authenticated, "authenticated without the key");
        }
    }
});
