//! The host's side of a DH-HMAC-CHAP transaction, free of I/O: strata's
//! initiator sends [`HostAuth::negotiate`], answers the Challenge it
//! receives with [`HostAuth::reply`], and checks Success1 with
//! [`HostAuth::success1`], which gives Success2 to send when the host
//! authenticates the controller too. It offers what Linux offers: every
//! hash, and every DH group.

use strata_nvme::auth::{AUTHID_DHCHAP, AuthMessage, Protocol, RESCODE_FAILED, auth_id, failure};
use subtle::ConstantTimeEq;

use crate::chap::{self, Side, Transaction};
use crate::dh::{DhError, DhGroup, Ephemeral};
use crate::hash::HashFn;
use crate::secret::DhchapSecret;

/// Why the host ends a transaction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostAuthError {
    /// The controller refused the host (Failure1).
    #[error("the controller refused authentication (Failure1, explanation {explanation:#04x}: {})", explain(*explanation))]
    Refused {
        /// RESCODE_EXP.
        explanation: u8,
    },
    /// A message that does not parse or is not the one expected.
    #[error("unexpected authentication message: {0}")]
    Protocol(String),
    /// The controller's DH value is unusable.
    #[error("the controller's DH value: {0}")]
    Dh(#[from] DhError),
    /// The controller's response does not match the controller key: send
    /// `failure2` (Failure2) and drop the connection.
    #[error("the controller's response does not match the controller key")]
    ControllerMismatch {
        /// The Failure2 message to send.
        failure2: Vec<u8>,
    },
}

/// The meaning of a Failure explanation.
pub fn explain(explanation: u8) -> &'static str {
    match explanation {
        failure::FAILED => "authentication failed (wrong or missing key)",
        failure::NOT_USABLE => "protocol not usable (no key for this host)",
        failure::CONCAT_MISMATCH => "secure channel concatenation mismatch",
        failure::HASH_UNUSABLE => "no hash function in common",
        failure::DHGROUP_UNUSABLE => "no DH group in common",
        failure::INCORRECT_PAYLOAD => "incorrect payload",
        failure::INCORRECT_MESSAGE => "incorrect message",
        _ => "unknown reason",
    }
}

/// One DH-HMAC-CHAP transaction, host side.
pub struct HostAuth {
    secret: DhchapSecret,
    ctrl_secret: Option<DhchapSecret>,
    hostnqn: String,
    subnqn: String,
    t_id: u16,
    hash: Option<HashFn>,
    session: Option<Vec<u8>>,
    c2: Option<(Vec<u8>, u32)>,
}

impl std::fmt::Debug for HostAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostAuth").field("hostnqn", &self.hostnqn).field("t_id", &self.t_id).finish_non_exhaustive()
    }
}

impl HostAuth {
    /// A transaction `t_id` of `hostnqn`, holding `secret`, with `subnqn`;
    /// with `ctrl_secret` the controller must prove itself too.
    pub fn new(
        secret: DhchapSecret,
        ctrl_secret: Option<DhchapSecret>,
        hostnqn: &str,
        subnqn: &str,
        t_id: u16,
    ) -> HostAuth {
        HostAuth {
            secret,
            ctrl_secret,
            hostnqn: hostnqn.to_owned(),
            subnqn: subnqn.to_owned(),
            t_id,
            hash: None,
            session: None,
            c2: None,
        }
    }

    fn transaction(&self, hash: HashFn) -> Transaction<'_> {
        Transaction {
            hash,
            t_id: self.t_id,
            hostnqn: &self.hostnqn,
            subnqn: &self.subnqn,
            session: self.session.as_deref(),
        }
    }

    /// The Negotiate message.
    pub fn negotiate(&self) -> Vec<u8> {
        AuthMessage::Negotiate {
            t_id: self.t_id,
            sc_c: 0,
            protocols: vec![Protocol {
                authid: AUTHID_DHCHAP,
                hashes: HashFn::ALL.iter().map(|h| h.id()).collect(),
                dhgroups: DhGroup::ALL.iter().map(|g| g.id()).collect(),
            }],
        }
        .encode()
    }

    /// Answers the controller's Challenge with the Reply to send.
    pub fn reply(&mut self, data: &[u8]) -> Result<Vec<u8>, HostAuthError> {
        let msg = AuthMessage::decode(data).map_err(|e| HostAuthError::Protocol(e.to_string()))?;
        let (hash_id, dh_group, seqnum, challenge, dh_value) = match msg {
            AuthMessage::Challenge { t_id, hash_id, dh_group, seqnum, challenge, dh_value } if t_id == self.t_id => {
                (hash_id, dh_group, seqnum, challenge, dh_value)
            }
            AuthMessage::Failure { explanation, .. } => return Err(HostAuthError::Refused { explanation }),
            m => return Err(HostAuthError::Protocol(format!("{} for transaction {}", m.name(), m.t_id()))),
        };
        let hash = HashFn::from_id(hash_id).ok_or_else(|| HostAuthError::Protocol(format!("hash {hash_id}")))?;
        let group =
            DhGroup::from_id(dh_group).ok_or_else(|| HostAuthError::Protocol(format!("DH group {dh_group}")))?;
        if challenge.len() != hash.output_len() {
            return Err(HostAuthError::Protocol(format!("a {}-byte challenge for {hash}", challenge.len())));
        }
        let mine = Ephemeral::generate(group);
        self.session = match &mine {
            None if dh_value.is_empty() => None,
            None => return Err(HostAuthError::Protocol("a DH value with the NULL group".into())),
            Some(dh) => Some(dh.shared(&dh_value)?),
        };
        self.hash = Some(hash);
        let response = self.transaction(hash).response(Side::Host, &self.secret, &challenge, seqnum);
        self.c2 = self.ctrl_secret.as_ref().map(|_| (chap::challenge(hash.output_len()), chap::seqnum()));
        Ok(AuthMessage::Reply {
            t_id: self.t_id,
            response,
            challenge: self.c2.as_ref().map(|(c, _)| c.clone()),
            seqnum: self.c2.as_ref().map_or(0, |(_, s)| *s),
            dh_value: mine.map(|d| d.public().to_vec()).unwrap_or_default(),
        }
        .encode())
    }

    /// Checks Success1; returns the Success2 to send when the controller
    /// had to prove itself, `None` when the transaction is over.
    pub fn success1(&mut self, data: &[u8]) -> Result<Option<Vec<u8>>, HostAuthError> {
        let msg = AuthMessage::decode(data).map_err(|e| HostAuthError::Protocol(e.to_string()))?;
        let response = match msg {
            AuthMessage::Success1 { t_id, response, .. } if t_id == self.t_id => response,
            AuthMessage::Failure { explanation, .. } => return Err(HostAuthError::Refused { explanation }),
            m => return Err(HostAuthError::Protocol(format!("{} for transaction {}", m.name(), m.t_id()))),
        };
        let (Some(ctrl), Some((c2, s2)), Some(hash)) = (&self.ctrl_secret, &self.c2, self.hash) else {
            return Ok(None);
        };
        let expected = self.transaction(hash).response(Side::Controller, ctrl, c2, *s2);
        if !response.is_some_and(|r| bool::from(expected.ct_eq(&r))) {
            let failure2 = AuthMessage::Failure {
                auth_id: auth_id::FAILURE2,
                t_id: self.t_id,
                rescode: RESCODE_FAILED,
                explanation: failure::FAILED,
            };
            return Err(HostAuthError::ControllerMismatch { failure2: failure2.encode() });
        }
        Ok(Some(AuthMessage::Success2 { t_id: self.t_id }.encode()))
    }
}
