//! Errors of the host library.
//!
//! Two layers: [`QueueFailure`] says why one queue (one TCP connection)
//! stopped, and is shared by every command that was pending on it;
//! [`HostError`] is what each public call returns, and carries the NVMe
//! status of a command that completed with an error so that callers can
//! match on it (`err.status() == Some(Status::LBA_OUT_OF_RANGE)` compares
//! codes without the DNR and More bits, see [`HostError::is_status`]).

use std::time::Duration;

use strata_nvme::identify::IdentifyError;
use strata_nvme::log_page::LogPageError;
use strata_nvme::pdu::PduError;
use strata_nvme::status::Status;

/// Why a queue stopped. Every command pending on the queue fails with
/// [`HostError::QueueFailed`] carrying a clone of this value, and so does
/// every command submitted afterwards.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueueFailure {
    /// The controller sent a C2HTermReq.
    #[error("controller terminated the connection (C2HTermReq FES {fes:#x}, FEI {fei:#x})")]
    Terminated {
        /// Fatal error status.
        fes: u16,
        /// Fatal error information.
        fei: u32,
    },
    /// The controller sent bytes that are not a valid PDU.
    #[error("malformed PDU from the controller: {0}")]
    Malformed(PduError),
    /// A well-formed PDU that breaks the protocol at this point (unknown
    /// command identifier, data outside the command's buffer, ...).
    #[error("protocol violation by the controller: {0}")]
    Protocol(String),
    /// The controller closed the connection.
    #[error("connection closed by the controller")]
    Eof,
    /// A socket error.
    #[error("socket error: {kind:?}: {message}")]
    Io {
        /// The error kind.
        kind: std::io::ErrorKind,
        /// The error text.
        message: String,
    },
    /// The host closed the queue (disconnect or drop).
    #[error("queue closed by the host")]
    Closed,
}

impl From<std::io::Error> for QueueFailure {
    fn from(e: std::io::Error) -> Self {
        QueueFailure::Io { kind: e.kind(), message: e.to_string() }
    }
}

/// Errors of the host library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// A socket operation during connection setup failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The socket error.
        source: std::io::Error,
    },
    /// In-band authentication (DH-HMAC-CHAP) failed or could not start.
    #[error("authentication failed: {0}")]
    Authentication(String),
    /// A step did not finish in time.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// The step.
        what: &'static str,
        /// The limit that expired.
        after: Duration,
    },
    /// The ICReq/ICResp exchange failed or the controller asked for
    /// something this host does not do.
    #[error("connection initialisation failed: {0}")]
    Handshake(String),
    /// The TLS handshake failed (the target has another PSK for this
    /// host, or none, or does not do TLS) or timed out.
    #[error("TLS: {0}")]
    Tls(String),
    /// The controller refused a Connect command.
    #[error("connect rejected: {status} (invalid parameter in {where_}, offset {ipo})", where_ = if *.iattr { "connect data" } else { "command" })]
    ConnectRejected {
        /// Status of the Connect completion.
        status: Status,
        /// IATTR bit 0: the invalid parameter is in the Connect data (else
        /// in the SQE).
        iattr: bool,
        /// IPO: byte offset of the invalid parameter.
        ipo: u16,
    },
    /// A command completed with an error status.
    #[error("command {opcode:#04x} (cid {cid} on queue {qid}) failed: {status}")]
    Status {
        /// The completion status.
        status: Status,
        /// Command identifier.
        cid: u16,
        /// Queue the command ran on (0 = admin).
        qid: u16,
        /// Opcode of the command.
        opcode: u8,
        /// DW0 of the completion.
        dw0: u32,
    },
    /// The queue stopped; see the cause.
    #[error("queue {qid} failed: {cause}")]
    QueueFailed {
        /// Queue ID (0 = admin).
        qid: u16,
        /// Why.
        cause: QueueFailure,
    },
    /// A C2HData PDU for this command failed its data digest; the command
    /// is failed, the connection stays up.
    #[error("data digest mismatch on command {cid} of queue {qid}")]
    DataDigest {
        /// Queue ID.
        qid: u16,
        /// Command identifier.
        cid: u16,
    },
    /// The controller completed a read successfully without sending all
    /// the data asked for.
    #[error("controller returned {received} of {expected} bytes for command {cid} of queue {qid}")]
    ShortTransfer {
        /// Queue ID.
        qid: u16,
        /// Command identifier.
        cid: u16,
        /// Bytes asked for.
        expected: usize,
        /// Bytes received.
        received: usize,
    },
    /// The transfer exceeds what the controller accepts in one command
    /// (MDTS); split it.
    #[error("transfer of {len} bytes exceeds the controller's limit of {max} bytes (MDTS)")]
    TransferTooLarge {
        /// Requested bytes.
        len: usize,
        /// Largest transfer allowed.
        max: usize,
    },
    /// An argument cannot be encoded in a command.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The namespace is not active, so its block size (needed to size a
    /// transfer) is unknown.
    #[error("namespace {0} is not active on this controller")]
    UnknownNamespace(u32),
    /// The controller reported a fatal status (CSTS.CFS) while enabling.
    #[error("controller fatal status while enabling (CSTS {csts:#x})")]
    ControllerFatal {
        /// CSTS value read.
        csts: u32,
    },
    /// The controller has no I/O queues connected.
    #[error("no I/O queue {0} on this controller")]
    NoIoQueue(usize),
    /// Identify data returned by the controller did not decode.
    #[error("bad identify data: {0}")]
    Identify(#[from] IdentifyError),
    /// A log page returned by the controller did not decode.
    #[error("bad log page: {0}")]
    LogPage(#[from] LogPageError),
    /// The discovery log kept changing while it was read.
    #[error("discovery log changed during {0} consecutive reads")]
    DiscoveryLogUnstable(u32),
}

impl HostError {
    /// The NVMe status of a command or Connect that completed with an
    /// error, if that is what this error is.
    pub fn status(&self) -> Option<Status> {
        match self {
            HostError::Status { status, .. } | HostError::ConnectRejected { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when this is a command error whose status type and code equal
    /// `status`'s (DNR, More and CRD are ignored).
    pub fn is_status(&self, status: Status) -> bool {
        self.status().is_some_and(|s| s.code() == status.code())
    }
}
