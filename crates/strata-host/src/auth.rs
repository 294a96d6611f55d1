//! DH-HMAC-CHAP on a queue the controller asked to authenticate (the
//! Connect response's ATR bit): the commands of one transaction, free of
//! I/O. The caller executes each command [`AuthSteps::next`] gives on the
//! queue and hands back its response, until it gives none.

use bytes::Bytes;
use strata_auth::{HostAuth, HostAuthError};
use strata_nvme::auth::AuthCmd;
use strata_nvme::command::Sqe;
use strata_nvme::fabrics::{self, fctype};

use crate::config::HostConfig;
use crate::error::HostError;
use crate::proto::{Command, Response};

/// Room asked for in each Authentication Receive: the largest Challenge
/// (SHA-512 and ffdhe8192) is 16 + 64 + 1024 bytes. Linux asks for 4 KiB.
const RECEIVE_LEN: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Send Negotiate.
    Negotiate,
    /// Negotiate sent: receive the Challenge.
    Challenge,
    /// Reply sent: receive Success1.
    Success1,
    /// Success2 (or Failure2) sent: done.
    Last,
    Done,
}

/// One transaction's commands.
pub(crate) struct AuthSteps {
    host: HostAuth,
    qid: u16,
    step: Step,
    /// The error to report after Failure2 has been sent.
    failed: Option<HostError>,
}

fn send(data: Vec<u8>) -> Command {
    let mut sqe = Sqe::new(fabrics::FABRICS_OPCODE, 0);
    AuthCmd::dhchap(data.len() as u32).encode(&mut sqe, fctype::AUTH_SEND);
    Command { sqe, data_out: Some(Bytes::from(data)), read_len: 0 }
}

fn receive() -> Command {
    let mut sqe = Sqe::new(fabrics::FABRICS_OPCODE, 0);
    AuthCmd::dhchap(RECEIVE_LEN as u32).encode(&mut sqe, fctype::AUTH_RECEIVE);
    Command { sqe, data_out: None, read_len: RECEIVE_LEN }
}

impl AuthSteps {
    /// The transaction for queue `qid` to `subnqn`.
    ///
    /// # Errors
    ///
    /// [`HostError::Authentication`] when the host has no DH-HMAC-CHAP
    /// secret configured.
    pub(crate) fn new(cfg: &HostConfig, subnqn: &str, qid: u16) -> Result<AuthSteps, HostError> {
        let Some(secret) = cfg.dhchap_secret.clone() else {
            return Err(HostError::Authentication(format!(
                "qid {qid}: the controller requires DH-HMAC-CHAP authentication and no secret is configured"
            )));
        };
        // The transaction ID is the queue ID, as Linux uses.
        let host = HostAuth::new(secret, cfg.dhchap_ctrl_secret.clone(), &cfg.hostnqn, subnqn, qid);
        Ok(AuthSteps { host, qid, step: Step::Negotiate, failed: None })
    }

    /// The next command to execute, given the response to the previous one
    /// (`None` the first time); `Ok(None)` when the queue is authenticated.
    pub(crate) fn next(&mut self, prev: Option<Response>) -> Result<Option<Command>, HostError> {
        let qid = self.qid;
        if let Some(r) = &prev
            && !r.cqe.status.is_success()
        {
            return Err(HostError::Authentication(format!(
                "qid {qid}: authentication command failed: {}",
                r.cqe.status
            )));
        }
        let fail = |e: HostAuthError| HostError::Authentication(format!("qid {qid}: {e}"));
        match self.step {
            Step::Negotiate => {
                self.step = Step::Challenge;
                Ok(Some(send(self.host.negotiate())))
            }
            Step::Challenge => match prev {
                // Negotiate went through: fetch the Challenge.
                Some(r) if r.data.is_empty() => Ok(Some(receive())),
                Some(r) => {
                    let reply = self.host.reply(&r.data).map_err(fail)?;
                    self.step = Step::Success1;
                    Ok(Some(send(reply)))
                }
                None => Err(HostError::Authentication(format!("qid {qid}: authentication out of step"))),
            },
            Step::Success1 => match prev {
                // The Reply went through: fetch Success1.
                Some(r) if r.data.is_empty() => Ok(Some(receive())),
                Some(r) => match self.host.success1(&r.data) {
                    Ok(None) => {
                        self.step = Step::Done;
                        Ok(None)
                    }
                    Ok(Some(success2)) => {
                        self.step = Step::Last;
                        Ok(Some(send(success2)))
                    }
                    Err(HostAuthError::ControllerMismatch { failure2 }) => {
                        self.step = Step::Last;
                        self.failed = Some(fail(HostAuthError::ControllerMismatch { failure2: Vec::new() }));
                        Ok(Some(send(failure2)))
                    }
                    Err(e) => Err(fail(e)),
                },
                None => Err(HostError::Authentication(format!("qid {qid}: authentication out of step"))),
            },
            Step::Last => {
                self.step = Step::Done;
                match self.failed.take() {
                    Some(e) => Err(e),
                    None => Ok(None),
                }
            }
            Step::Done => Ok(None),
        }
    }
}
