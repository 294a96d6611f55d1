//! [`LeaseKeeper`]: keeps an etcd lease alive from a background task and
//! says when it is lost.
//!
//! A lease is how a node proves it is alive (its registration key dies
//! with the lease) and how a gateway holds a volume (the ownership key dies
//! with it). The holder must stop acting on a lease it may have lost, so
//! the keeper errs early: it counts the lease's life from the moment the
//! grant or each renewal was *sent* ([`Lease::requested_at`]), which is no
//! later than etcd's own count, and reports
//! [`LeaseStatus::Lost`] once that time has passed without a renewal
//! getting through. etcd may keep the lease a little longer; never the
//! other way round (barring clock rate differences between the two
//! machines, which etcd bounds by its own lease checks).
//!
//! # Schedule
//!
//! A renewal is sent every TTL/3. When one fails (etcd unreachable, no
//! leader), the next is tried after 1/10 of the TTL (at least 100 ms),
//! and each try's deadline is the lease's expected end, so two failures
//! in a row still leave time for a third. An answer that the lease does
//! not exist ends the keeper at once with [`LeaseLoss::Gone`].
//!
//! # Ownership and cancellation
//!
//! The task is owned by the [`LeaseKeeper`]: dropping the keeper aborts it
//! (an in-flight renewal may still reach etcd) and the lease then expires
//! after its TTL; [`LeaseKeeper::revoke`] ends it at once instead.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::client::EtcdClient;
use super::error::EtcdError;
use super::http::AbortOnDrop;
use super::types::{Lease, LeaseId};

/// What the keeper knows about its lease.
#[derive(Debug, Clone)]
pub enum LeaseStatus {
    /// Renewed; it lives at least until `expires` unless revoked.
    Alive {
        /// The TTL etcd granted at the last renewal, in seconds.
        ttl_secs: i64,
        /// The earliest time it can expire, counted from the sending of
        /// the last renewal that succeeded.
        expires: Instant,
    },
    /// The lease is lost (or may be); the keeper has stopped.
    Lost(LeaseLoss),
}

/// Why a lease was lost.
#[derive(Debug, Clone)]
pub enum LeaseLoss {
    /// etcd says the lease does not exist: it expired or was revoked.
    Gone,
    /// No renewal got through before the lease's expected end; etcd has
    /// probably expired it. The last error says why.
    Unreachable(EtcdError),
}

/// Renews a lease in the background. See the module documentation.
#[derive(Debug)]
pub struct LeaseKeeper {
    lease: Lease,
    client: EtcdClient,
    status: watch::Receiver<LeaseStatus>,
    _task: AbortOnDrop<()>,
}

impl LeaseKeeper {
    pub(crate) fn start(client: EtcdClient, lease: Lease) -> Self {
        let expires = lease.requested_at + secs(lease.ttl_secs);
        let (tx, status) = watch::channel(LeaseStatus::Alive { ttl_secs: lease.ttl_secs, expires });
        let task = AbortOnDrop(tokio::spawn(keep(client.clone(), lease, expires, tx)));
        LeaseKeeper { lease, client, status, _task: task }
    }

    /// The lease kept.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// The lease id.
    pub fn id(&self) -> LeaseId {
        self.lease.id
    }

    /// The current status.
    pub fn status(&self) -> LeaseStatus {
        self.status.borrow().clone()
    }

    /// A receiver that sees every status change (for `select!` loops).
    pub fn subscribe(&self) -> watch::Receiver<LeaseStatus> {
        self.status.clone()
    }

    /// Waits until the lease is lost and says why.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future changes nothing.
    pub async fn lost(&self) -> LeaseLoss {
        let mut rx = self.status.clone();
        loop {
            if let LeaseStatus::Lost(loss) = &*rx.borrow_and_update() {
                return loss.clone();
            }
            if rx.changed().await.is_err() {
                // The task ended without saying why: it was aborted, which
                // only happens when the keeper is dropped, so this is not
                // reachable while `self` is borrowed; report it plainly.
                return LeaseLoss::Gone;
            }
        }
    }

    /// Stops renewing and revokes the lease, deleting its keys now.
    ///
    /// # Errors
    ///
    /// The client's errors; the lease then expires after its TTL anyway.
    pub async fn revoke(self) -> Result<(), EtcdError> {
        let LeaseKeeper { lease, client, _task, .. } = self;
        drop(_task);
        client.lease_revoke(lease.id).await
    }
}

fn secs(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

/// The keeper task: renews until the lease is gone or the keeper dropped.
async fn keep(client: EtcdClient, lease: Lease, mut expires: Instant, tx: watch::Sender<LeaseStatus>) {
    let mut ttl = lease.ttl_secs.max(1);
    let mut next = lease.requested_at + secs(ttl) / 3;
    loop {
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        if sent >= expires {
            let e = EtcdError::Timeout { op: "lease keepalive", after: secs(ttl), tried: Vec::new() };
            tx.send_replace(LeaseStatus::Lost(LeaseLoss::Unreachable(e)));
            return;
        }
        // Past `expires` a renewal is useless to the holder: it must have
        // stopped acting on the lease by then.
        let deadline = expires.min(sent + client.request_timeout());
        match client.keep_alive_by(lease.id, deadline).await {
            Ok(Some(new_ttl)) => {
                ttl = new_ttl;
                expires = sent + secs(new_ttl);
                next = sent + secs(new_ttl) / 3;
                tx.send_replace(LeaseStatus::Alive { ttl_secs: new_ttl, expires });
            }
            Ok(None) => {
                tx.send_replace(LeaseStatus::Lost(LeaseLoss::Gone));
                return;
            }
            Err(e) if e.is_not_found() => {
                tx.send_replace(LeaseStatus::Lost(LeaseLoss::Gone));
                return;
            }
            Err(e) => {
                if Instant::now() >= expires {
                    tx.send_replace(LeaseStatus::Lost(LeaseLoss::Unreachable(e)));
                    return;
                }
                next = Instant::now() + (secs(ttl) / 10).max(Duration::from_millis(100));
            }
        }
    }
}
