//! The errors of the etcd client.
//!
//! They split by what the caller can do about them:
//! - [`EtcdError::Unreachable`]: no endpoint accepted a connection; the
//!   request was certainly not applied. Check `--etcd` and that etcd runs.
//! - [`EtcdError::Timeout`] and [`EtcdError::OutcomeUnknown`]: the request
//!   may or may not have been applied. Read again before deciding.
//! - [`EtcdError::Status`]: etcd answered with an error (a gRPC status code
//!   and its message); the request was not applied.
//! - [`EtcdError::StreamBroken`]: a watch stream ended; the watcher
//!   reconnects by itself.
//! - [`EtcdError::Malformed`]: the answer could not be understood. Never a
//!   panic: whatever bytes arrive, this is what the parser says.
//! - [`EtcdError::InvalidConfig`]: the client was set up wrongly.

use std::time::Duration;

/// The gRPC status code etcd uses when a lease does not exist (`NotFound`).
pub const GRPC_NOT_FOUND: i64 = 5;

/// An error from the etcd client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// No endpoint could be connected to; nothing was sent.
    #[error(
        "no etcd endpoint could be reached ({}); check the --etcd URLs and that etcd is running",
        tried_list(.tried)
    )]
    Unreachable {
        /// Each endpoint tried and why it failed, in the order tried.
        tried: Vec<(String, String)>,
    },
    /// The deadline passed before etcd answered. A write may or may not
    /// have been applied.
    #[error(
        "etcd did not answer {op} within {after:?} (endpoints tried: {}); \
         a write may or may not have been applied; check etcd's health",
        tried_list(.tried)
    )]
    Timeout {
        /// The request, e.g. `txn`.
        op: &'static str,
        /// The deadline that passed.
        after: Duration,
        /// The endpoints tried before the deadline, with what went wrong
        /// on each (the last one may still have been waiting).
        tried: Vec<(String, String)>,
    },
    /// The connection broke after a request that is not safe to repeat was
    /// sent: it may or may not have been applied.
    #[error(
        "the connection to etcd at {endpoint} broke during {op} ({reason}); \
         the write may or may not have been applied: read before retrying"
    )]
    OutcomeUnknown {
        /// The request.
        op: &'static str,
        /// The endpoint it was sent to.
        endpoint: String,
        /// What broke.
        reason: String,
    },
    /// A streamed answer (a watch) broke off.
    #[error("the {op} stream from etcd at {endpoint} broke: {reason}")]
    StreamBroken {
        /// The request.
        op: &'static str,
        /// The endpoint the stream came from.
        endpoint: String,
        /// What happened.
        reason: String,
    },
    /// etcd refused the request with a gRPC status.
    #[error("etcd refused {op} with code {code}: {message}")]
    Status {
        /// The request.
        op: &'static str,
        /// The gRPC status code (e.g. 5 = not found, 9 = failed precondition).
        code: i64,
        /// etcd's message, e.g. `etcdserver: requested lease not found`.
        message: String,
    },
    /// etcd's answer could not be decoded.
    #[error("etcd's answer to {op} is malformed: {reason}")]
    Malformed {
        /// The request.
        op: &'static str,
        /// What was wrong with it.
        reason: String,
    },
    /// The client configuration is wrong.
    #[error("invalid etcd configuration: {0}")]
    InvalidConfig(String),
}

impl EtcdError {
    /// Whether etcd said the lease (or key) asked for does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, EtcdError::Status { code: GRPC_NOT_FOUND, .. })
    }

    /// Whether the request may have been applied even though it failed.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, EtcdError::Timeout { .. } | EtcdError::OutcomeUnknown { .. })
    }

    pub(crate) fn malformed(op: &'static str, reason: impl Into<String>) -> Self {
        EtcdError::Malformed { op, reason: reason.into() }
    }
}

fn tried_list(tried: &[(String, String)]) -> String {
    if tried.is_empty() {
        return "none".into();
    }
    tried.iter().map(|(e, why)| format!("{e}: {why}")).collect::<Vec<_>>().join("; ")
}
