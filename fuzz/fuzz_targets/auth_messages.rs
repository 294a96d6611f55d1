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
use strata_auth::{ControllerAuth, DhGroup, DhchapSecret, HashFn, HostKeys, Outcome, TlsPsk};
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
