//! Access events: what hosts did at the door (connects, refusals,
//! authentication results), handed to whoever keeps an audit trail. The
//! target only reports them; it keeps no trail of its own and never waits
//! for the receiver (which must not block).

use std::net::SocketAddr;
use std::sync::Arc;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessKind {
    /// A host's admin queue connected: a new controller.
    Connected,
    /// A Connect was refused.
    ConnectRefused,
    /// A queue passed DH-HMAC-CHAP.
    Authenticated,
    /// A queue failed DH-HMAC-CHAP, or did not try in time.
    AuthenticationFailed,
    /// A host's admin queue closed: its controller is gone (the host
    /// disconnected, the connection failed, or keep-alive expired).
    Disconnected,
    /// A controller's keep-alive timer expired (the host went silent); a
    /// `Disconnected` follows.
    KeepAliveExpired,
}

impl AccessKind {
    /// The name an audit record uses.
    pub fn name(self) -> &'static str {
        match self {
            AccessKind::Connected => "connect",
            AccessKind::ConnectRefused => "connect-refused",
            AccessKind::Authenticated => "auth-ok",
            AccessKind::AuthenticationFailed => "auth-failed",
            AccessKind::Disconnected => "disconnect",
            AccessKind::KeepAliveExpired => "keep-alive-expired",
        }
    }
}

/// One access event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessEvent {
    /// What happened.
    pub kind: AccessKind,
    /// Where the host connected from.
    pub peer: SocketAddr,
    /// The host NQN it gave.
    pub hostnqn: String,
    /// The subsystem it asked for.
    pub subnqn: String,
    /// The queue.
    pub qid: u16,
    /// Why (a refusal's reason), or how (hash and group).
    pub detail: String,
}

/// Receives access events; called on the connection's task, so it must
/// return at once (queue the event, do not write it).
pub type AccessSink = Arc<dyn Fn(AccessEvent) + Send + Sync>;
