//! Choosing a path to a subsystem: ask discovery where it is served,
//! connect there, prefer an optimized path.
//!
//! Shared by [`crate::RemoteNamespace`] (whose controllers run their own
//! I/O queues) and load generators that drive their queues themselves
//! ([`connect_best_with_drivers`]), so both fail over to the same path.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use crate::{Controller, HostConfig, HostError, QueueDriver};

/// Connects to `nqn` on its best path with caller-driven queues (see
/// [`Controller::connect_with_drivers`]): the optimized path among those
/// that discovery at the first answering `seeds` lists for `nqn`, then
/// `last` and the seeds themselves; else the first non-optimized path
/// that connected. Each discovery and connect is bounded by `limit`.
/// Returns the controller, its queues and the path's address.
///
/// # Errors
///
/// The last error met when no path connected.
pub async fn connect_best_with_drivers<T>(
    seeds: &[SocketAddr],
    last: Option<SocketAddr>,
    nqn: &str,
    cfg: &HostConfig,
    limit: Duration,
) -> Result<(Controller, Vec<QueueDriver<T>>, SocketAddr), HostError> {
    find(seeds, true, last, nqn, cfg, limit, |a| Controller::connect_with_drivers::<T>(a, nqn, cfg)).await
}

/// Connects to `nqn`: at the addresses the first of `seeds` whose
/// discovery lists it gives (when `discover`), else at `last`, else at
/// each seed, keeping the first optimized path (else the first that
/// connected); each step within `limit`. `connect` brings up one path's
/// controller with whatever else it returns. Returns the controller, the
/// extra and where it is.
pub(crate) async fn find<X, F, Fut>(
    seeds: &[SocketAddr],
    discover: bool,
    last: Option<SocketAddr>,
    nqn: &str,
    cfg: &HostConfig,
    limit: Duration,
    connect: F,
) -> Result<(Controller, X, SocketAddr), HostError>
where
    F: Fn(SocketAddr) -> Fut,
    Fut: Future<Output = Result<(Controller, X), HostError>>,
{
    let mut err = None;
    let mut candidates: Vec<SocketAddr> = Vec::new();
    for &seed in seeds.iter().filter(|_| discover) {
        match tokio::time::timeout(limit, crate::discover(seed, cfg)).await {
            Ok(Ok(entries)) => {
                candidates.extend(entries.iter().filter(|e| e.subnqn == nqn).filter_map(|e| e.tcp_socket_addr()))
            }
            Ok(Err(e)) => err = Some(e),
            Err(_) => err = Some(HostError::Timeout { what: "discovery", after: limit }),
        }
        if !candidates.is_empty() {
            break;
        }
    }
    candidates.extend(last);
    candidates.extend_from_slice(seeds);
    let mut tried = Vec::new();
    // The first path that is not optimized, kept in case none is.
    let mut fallback: Option<(Controller, X, SocketAddr)> = None;
    for addr in candidates {
        if tried.contains(&addr) {
            continue;
        }
        tried.push(addr);
        let connected = tokio::time::timeout(limit, async {
            let (c, x) = connect(addr).await?;
            let optimized = c.is_optimized().await?;
            Ok::<_, HostError>((c, x, optimized))
        });
        match connected.await {
            Ok(Ok((c, x, true))) => {
                if let Some((other, _, _)) = fallback {
                    let _ = tokio::time::timeout(limit, other.disconnect()).await;
                }
                return Ok((c, x, addr));
            }
            Ok(Ok((c, x, false))) if fallback.is_none() => fallback = Some((c, x, addr)),
            Ok(Ok((c, _, false))) => {
                let _ = tokio::time::timeout(limit, c.disconnect()).await;
            }
            Ok(Err(e)) => err = Some(e),
            Err(_) => err = Some(HostError::Timeout { what: "connect", after: limit }),
        }
    }
    fallback.ok_or_else(|| err.unwrap_or_else(|| HostError::InvalidArgument(format!("no address leads to {nqn}"))))
}
