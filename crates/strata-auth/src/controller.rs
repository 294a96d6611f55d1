//! The controller's side of a DH-HMAC-CHAP transaction on one queue, free
//! of I/O: the target feeds it the data of each Authentication Send and
//! asks it for the data of each Authentication Receive.
//!
//! ```text
//! host                                  controller (this)
//! Send     Negotiate  ───────────────▶  picks hash and DH group
//! Receive             ◀───────────────  Challenge (C1, S1, g^x)
//! Send     Reply      ───────────────▶  checks the host's response;
//!          (C2 if bidirectional)        a wrong one: Failure1
//! Receive             ◀───────────────  Success1 (its response to C2)
//! Send     Success2   ───────────────▶  (bidirectional only)
//! ```
//!
//! The choices follow Linux nvmet: the configured hash if the host offers
//! it, else the first the host offers; the same for the DH group. A
//! message out of turn, or one that does not parse, ends the transaction
//! with Failure1 (the explanation says why); so does a host without keys.
//! A Negotiate at any time starts a new transaction (re-authentication).
//! [`ControllerAuth::outcome`] becomes [`Outcome::Authenticated`] only once
//! the last message of a successful transaction has passed.

use std::sync::Arc;

use strata_nvme::auth::{AUTHID_DHCHAP, AuthMessage, RESCODE_FAILED, auth_id, failure};
use subtle::ConstantTimeEq;

use crate::chap::{self, Side, Transaction};
use crate::dh::{DhGroup, Ephemeral};
use crate::hash::HashFn;
use crate::secret::DhchapSecret;

/// What the controller knows of a host that must authenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKeys {
    /// The host's secret: the host proves it knows this.
    pub secret: DhchapSecret,
    /// The controller's secret, for hosts that authenticate the controller
    /// too (bidirectional).
    pub ctrl_secret: Option<DhchapSecret>,
    /// The hash to use when the host offers it.
    pub hash: HashFn,
    /// The DH group to use when the host offers it.
    pub dhgroup: DhGroup,
}

impl HostKeys {
    /// Keys with the default choices: SHA-256 and ffdhe2048.
    pub fn new(secret: DhchapSecret, ctrl_secret: Option<DhchapSecret>) -> HostKeys {
        HostKeys { secret, ctrl_secret, hash: HashFn::Sha256, dhgroup: DhGroup::Ffdhe2048 }
    }
}

/// Where a queue's authentication stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Not finished (or not begun).
    Pending,
    /// The last transaction succeeded.
    Authenticated,
    /// The last transaction failed; see [`ControllerAuth::failure`].
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Waiting for Negotiate.
    Negotiate,
    /// Negotiated: the next Receive gets the Challenge.
    Challenge,
    /// Waiting for the host's Reply.
    Reply,
    /// The Reply checked out: the next Receive gets Success1.
    Success1,
    /// Waiting for the host's Success2 (bidirectional).
    Success2,
    /// The next Receive gets Failure1.
    Failure1,
    /// Transaction over.
    Done,
}

/// The parameters of the transaction in progress.
struct Chosen {
    hash: HashFn,
    dh: Option<Ephemeral>,
    group: DhGroup,
    c1: Vec<u8>,
    s1: u32,
    session: Option<Vec<u8>>,
    /// C2 and S2 when the host asked the controller to authenticate.
    c2: Option<(Vec<u8>, u32)>,
}

/// One queue's DH-HMAC-CHAP state, controller side.
pub struct ControllerAuth {
    keys: Option<Arc<HostKeys>>,
    hostnqn: String,
    subnqn: String,
    step: Step,
    t_id: u16,
    chosen: Option<Chosen>,
    explanation: u8,
    outcome: Outcome,
    failure: Option<String>,
}

impl std::fmt::Debug for ControllerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerAuth")
            .field("hostnqn", &self.hostnqn)
            .field("step", &self.step)
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}

/// Why an Authentication Receive cannot be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("authentication receive of {al} bytes; the message needs {need}")]
pub struct ShortReceive {
    /// AL.
    pub al: usize,
    /// The message's length.
    pub need: usize,
}

impl ControllerAuth {
    /// A queue of `hostnqn` to `subnqn` whose host holds `keys` (`None`:
    /// the host has no keys here, and every transaction fails).
    pub fn new(keys: Option<Arc<HostKeys>>, hostnqn: &str, subnqn: &str) -> ControllerAuth {
        ControllerAuth {
            keys,
            hostnqn: hostnqn.to_owned(),
            subnqn: subnqn.to_owned(),
            step: Step::Negotiate,
            t_id: 0,
            chosen: None,
            explanation: 0,
            outcome: Outcome::Pending,
            failure: None,
        }
    }

    /// Replaces the keys, for the next transaction (a rotation).
    pub fn set_keys(&mut self, keys: Option<Arc<HostKeys>>) {
        self.keys = keys;
    }

    /// Where the queue stands.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// True when no transaction is in progress: the last one ended
    /// (Success1 or Success2 passed, Failure1 sent or Failure2 received).
    pub fn finished(&self) -> bool {
        matches!(self.step, Step::Done | Step::Negotiate)
    }

    /// Why the last transaction failed, for the log.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The hash and DH group of the transaction in progress or last done.
    pub fn chosen(&self) -> Option<(HashFn, DhGroup)> {
        self.chosen.as_ref().map(|c| (c.hash, c.group))
    }

    /// True when `data` is a Negotiate (a new transaction), so that the
    /// caller can load the host's current keys first.
    pub fn is_negotiate(data: &[u8]) -> bool {
        data.len() >= 2 && data[0] == strata_nvme::auth::auth_type::COMMON && data[1] == auth_id::NEGOTIATE
    }

    fn fail(&mut self, explanation: u8, why: String) {
        self.step = Step::Failure1;
        self.explanation = explanation;
        self.outcome = Outcome::Failed;
        self.failure = Some(why);
    }

    /// Takes the data of an Authentication Send.
    pub fn send(&mut self, data: &[u8]) {
        let msg = match AuthMessage::decode(data) {
            Ok(m) => m,
            Err(e) => return self.fail(failure::INCORRECT_PAYLOAD, format!("malformed message: {e}")),
        };
        if let AuthMessage::Negotiate { t_id, sc_c, protocols } = &msg {
            self.t_id = *t_id;
            self.outcome = Outcome::Pending;
            self.failure = None;
            self.chosen = None;
            return self.negotiate(*sc_c, protocols);
        }
        if let AuthMessage::Failure { explanation, .. } = msg {
            self.step = Step::Done;
            self.outcome = Outcome::Failed;
            self.failure = Some(format!("the host refused the controller (Failure2, explanation {explanation:#04x})"));
            return;
        }
        if msg.t_id() != self.t_id {
            let why = format!("{} for transaction {} during transaction {}", msg.name(), msg.t_id(), self.t_id);
            return self.fail(failure::INCORRECT_PAYLOAD, why);
        }
        match (self.step, msg) {
            (Step::Reply, AuthMessage::Reply { response, challenge, seqnum, dh_value, .. }) => {
                self.reply(&response, challenge, seqnum, &dh_value)
            }
            (Step::Success2, AuthMessage::Success2 { .. }) => {
                self.step = Step::Done;
                self.outcome = Outcome::Authenticated;
            }
            (step, m) => self.fail(failure::INCORRECT_MESSAGE, format!("{} out of turn (at {step:?})", m.name())),
        }
    }

    fn negotiate(&mut self, sc_c: u8, protocols: &[strata_nvme::auth::Protocol]) {
        let Some(keys) = self.keys.clone() else {
            return self.fail(failure::NOT_USABLE, "the host has no DH-HMAC-CHAP key here".into());
        };
        if sc_c != 0 {
            return self.fail(failure::CONCAT_MISMATCH, "secure channel concatenation asked for".into());
        }
        let Some(p) = protocols.iter().find(|p| p.authid == AUTHID_DHCHAP) else {
            return self.fail(failure::INCORRECT_PAYLOAD, "no DH-HMAC-CHAP protocol descriptor".into());
        };
        let pick = |want: u8, offered: &[u8], known: &dyn Fn(u8) -> bool| {
            offered.contains(&want).then_some(want).or_else(|| offered.iter().copied().find(|&id| known(id)))
        };
        let Some(hash) = pick(keys.hash.id(), &p.hashes, &|id| HashFn::from_id(id).is_some()).and_then(HashFn::from_id)
        else {
            return self.fail(failure::HASH_UNUSABLE, format!("no usable hash among {:?}", p.hashes));
        };
        let Some(group) =
            pick(keys.dhgroup.id(), &p.dhgroups, &|id| DhGroup::from_id(id).is_some()).and_then(DhGroup::from_id)
        else {
            return self.fail(failure::DHGROUP_UNUSABLE, format!("no usable DH group among {:?}", p.dhgroups));
        };
        self.chosen = Some(Chosen { hash, dh: None, group, c1: Vec::new(), s1: 0, session: None, c2: None });
        self.step = Step::Challenge;
    }

    fn reply(&mut self, response: &[u8], challenge: Option<Vec<u8>>, seqnum: u32, dh_value: &[u8]) {
        let Some(keys) = self.keys.clone() else {
            return self.fail(failure::FAILED, "the host has no key".into());
        };
        let Some(c) = self.chosen.as_mut() else {
            return self.fail(failure::INCORRECT_MESSAGE, "Reply before a challenge".into());
        };
        if response.len() != c.hash.output_len() {
            let why = format!("response of {} bytes for {}", response.len(), c.hash);
            return self.fail(failure::INCORRECT_PAYLOAD, why);
        }
        c.session = match (&c.dh, dh_value.is_empty()) {
            (None, true) => None,
            (None, false) => return self.fail(failure::INCORRECT_PAYLOAD, "a DH value with the NULL group".into()),
            (Some(_), true) => return self.fail(failure::INCORRECT_PAYLOAD, "no DH value".into()),
            (Some(dh), false) => match dh.shared(dh_value) {
                Ok(s) => Some(s),
                Err(e) => return self.fail(failure::DHGROUP_UNUSABLE, format!("the host's DH value: {e}")),
            },
        };
        let tx = Transaction {
            hash: c.hash,
            t_id: self.t_id,
            hostnqn: &self.hostnqn,
            subnqn: &self.subnqn,
            session: c.session.as_deref(),
        };
        let expected = tx.response(Side::Host, &keys.secret, &c.c1, c.s1);
        if !bool::from(expected.ct_eq(response)) {
            return self.fail(failure::FAILED, "the host's response does not match its key".into());
        }
        if let Some(c2) = challenge {
            if keys.ctrl_secret.is_none() {
                return self.fail(
                    failure::FAILED,
                    "the host asks the controller to authenticate, and it has no controller key".into(),
                );
            }
            c.c2 = Some((c2, seqnum));
        }
        self.step = Step::Success1;
    }

    /// The data of an Authentication Receive of `al` bytes (the message,
    /// zero-padded to `al`).
    pub fn receive(&mut self, al: usize) -> Result<Vec<u8>, ShortReceive> {
        let (step, outcome) = (self.step, self.outcome);
        let msg = match self.step {
            Step::Challenge => self.challenge(),
            Step::Success1 => self.success1(),
            Step::Failure1 => {
                self.step = Step::Done;
                self.outcome = Outcome::Failed;
                AuthMessage::Failure {
                    auth_id: auth_id::FAILURE1,
                    t_id: self.t_id,
                    rescode: RESCODE_FAILED,
                    explanation: self.explanation,
                }
            }
            step => {
                self.fail(failure::INCORRECT_MESSAGE, format!("Authentication Receive out of turn (at {step:?})"));
                return self.receive(al);
            }
        };
        let mut b = msg.encode();
        if b.len() > al {
            // The host can ask again with room: the step is kept (and C1,
            // S1 and the DH key with it).
            (self.step, self.outcome) = (step, outcome);
            return Err(ShortReceive { al, need: b.len() });
        }
        if let AuthMessage::Success1 { response: None, .. } = msg {
            self.step = Step::Done;
            self.outcome = Outcome::Authenticated;
        }
        b.resize(al, 0);
        Ok(b)
    }

    fn challenge(&mut self) -> AuthMessage {
        let t_id = self.t_id;
        let Some(c) = self.chosen.as_mut() else {
            self.fail(failure::FAILED, "challenge without negotiation".into());
            return self.failure1();
        };
        if c.c1.is_empty() {
            c.c1 = chap::challenge(c.hash.output_len());
            c.s1 = chap::seqnum();
            c.dh = Ephemeral::generate(c.group);
        }
        let dh_value = c.dh.as_ref().map(|d| d.public().to_vec()).unwrap_or_default();
        let m = AuthMessage::Challenge {
            t_id,
            hash_id: c.hash.id(),
            dh_group: c.group.id(),
            seqnum: c.s1,
            challenge: c.c1.clone(),
            dh_value,
        };
        self.step = Step::Reply;
        m
    }

    fn success1(&mut self) -> AuthMessage {
        let Some(c) = self.chosen.as_ref() else {
            self.fail(failure::FAILED, "success without negotiation".into());
            return self.failure1();
        };
        let hash_len = c.hash.output_len() as u8;
        let Some((c2, s2)) = &c.c2 else {
            return AuthMessage::Success1 { t_id: self.t_id, hash_len, response: None };
        };
        let Some(ctrl) = self.keys.as_ref().and_then(|k| k.ctrl_secret.clone()) else {
            self.fail(failure::FAILED, "no controller key".into());
            return self.failure1();
        };
        let tx = Transaction {
            hash: c.hash,
            t_id: self.t_id,
            hostnqn: &self.hostnqn,
            subnqn: &self.subnqn,
            session: c.session.as_deref(),
        };
        let response = tx.response(Side::Controller, &ctrl, c2, *s2);
        self.step = Step::Success2;
        AuthMessage::Success1 { t_id: self.t_id, hash_len, response: Some(response) }
    }

    fn failure1(&mut self) -> AuthMessage {
        self.step = Step::Done;
        AuthMessage::Failure {
            auth_id: auth_id::FAILURE1,
            t_id: self.t_id,
            rescode: RESCODE_FAILED,
            explanation: self.explanation,
        }
    }
}
