//! Discovery: read a discovery controller's log page (NVMe-oF 1.1,
//! section 5.3).
//!
//! [`discover`] connects to the well-known discovery NQN without a
//! keep-alive timeout (a non-persistent discovery association), enables
//! the controller, reads the log page header to learn NUMREC and GENCTR,
//! reads the whole page, and reads the header again: if GENCTR moved the
//! log changed underneath and the read is repeated. NUMREC from the
//! controller is capped before it sizes a transfer.

use std::net::SocketAddr;
use std::time::Duration;

use strata_nvme::fabrics::{CNTLID_DYNAMIC, DISCOVERY_NQN};
use strata_nvme::identify::{Cns, IdentifyController};
use strata_nvme::log_page::{
    DISCOVERY_LOG_ENTRY_LEN, DISCOVERY_LOG_HEADER_LEN, DiscoveryEntry, DiscoveryLogHeader, LogPageId,
};

use crate::config::HostConfig;
use crate::controller::{
    ADMIN_IN_CAPSULE_BYTES, ADMIN_MAX_TRANSFER_BYTES, enable, fabrics_connect, fabrics_disconnect, get_log_page,
    identify,
};
use crate::error::HostError;
use crate::queue::{QueueHandle, QueueParams, TlsParams};

/// Most discovery log records read (4 MiB of log).
pub const MAX_DISCOVERY_RECORDS: u64 = 4096;
/// Reads of a changing log before giving up.
const MAX_ATTEMPTS: u32 = 8;

/// Lists the subsystems the discovery controller at `addr` offers to
/// `cfg.hostnqn`.
///
/// # Errors
///
/// Connection and command errors as for
/// [`Controller::connect`](crate::Controller::connect);
/// [`HostError::LogPage`] if the log does not decode;
/// [`HostError::DiscoveryLogUnstable`] if it keeps changing while read.
pub async fn discover(addr: SocketAddr, cfg: &HostConfig) -> Result<Vec<DiscoveryEntry>, HostError> {
    let params = QueueParams {
        qid: 0,
        depth: cfg.admin_queue_size.max(2),
        digests: cfg.digests,
        in_capsule: ADMIN_IN_CAPSULE_BYTES,
        max_read: ADMIN_MAX_TRANSFER_BYTES,
        connect_timeout: cfg.connect_timeout,
        io_timeout: cfg.io_timeout,
        tls: TlsParams::of(cfg, DISCOVERY_NQN),
    };
    let depth = params.depth;
    let q = QueueHandle::open(addr, params).await?;
    fabrics_connect(&q, cfg, DISCOVERY_NQN, depth - 1, CNTLID_DYNAMIC, Duration::ZERO).await?;
    enable(&q, cfg.connect_timeout).await?;
    let id = IdentifyController::decode(&identify(&q, Cns::CONTROLLER, 0).await?)?;
    let max_transfer = if id.mdts == 0 { ADMIN_MAX_TRANSFER_BYTES } else { 4096usize << id.mdts.min(8) };
    let entries = read_log(&q, max_transfer).await;
    // Leave politely whatever happened; the log (or its error) matters more.
    let _ = fabrics_disconnect(&q).await;
    entries
}

async fn read_log(q: &QueueHandle, max_transfer: usize) -> Result<Vec<DiscoveryEntry>, HostError> {
    let lid = LogPageId::DISCOVERY.0;
    let header = |b: Vec<u8>| DiscoveryLogHeader::decode(&b).map_err(HostError::from);
    let mut before = header(get_log_page(q, max_transfer, lid, 0, 0, DISCOVERY_LOG_HEADER_LEN, false).await?)?;
    for _ in 0..MAX_ATTEMPTS {
        let numrec = before.numrec.min(MAX_DISCOVERY_RECORDS) as usize;
        let len = DISCOVERY_LOG_HEADER_LEN + numrec * DISCOVERY_LOG_ENTRY_LEN;
        let page = get_log_page(q, max_transfer, lid, 0, 0, len, false).await?;
        let after = header(get_log_page(q, max_transfer, lid, 0, 0, DISCOVERY_LOG_HEADER_LEN, false).await?)?;
        if after.genctr == before.genctr {
            // NUMREC may have been capped above: decode the records read.
            return page[DISCOVERY_LOG_HEADER_LEN..]
                .chunks_exact(DISCOVERY_LOG_ENTRY_LEN)
                .map(|e| DiscoveryEntry::decode(e).map_err(HostError::from))
                .collect();
        }
        before = after;
    }
    Err(HostError::DiscoveryLogUnstable(MAX_ATTEMPTS))
}
