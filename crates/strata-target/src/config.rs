//! The target's settings ([`TargetConfig`]) and the fixed limits it
//! advertises to hosts ([`MAX_NSID`], [`MAX_QUEUE_SIZE`]).
//!
//! A leaf: every other module may read these, and this module imports
//! none of them. A `TargetConfig` is fixed once the target is built
//! (`Target::new` takes it by value); each setting's doc gives its default.

/// Largest namespace ID a subsystem hands out (Identify Controller NN).
pub const MAX_NSID: u32 = 1024;
/// Entries per queue (CAP.MQES + 1).
pub const MAX_QUEUE_SIZE: u16 = 1024;
/// The dynamic controller IDs (FFF0h-FFFFh are reserved).
pub const CNTLIDS: std::ops::RangeInclusive<u16> = 1..=0xFFEF;

/// Target settings.
#[derive(Debug, Clone)]
pub struct TargetConfig {
    /// Firmware revision reported in Identify (8 ASCII characters at most).
    /// Default: the crate version.
    pub firmware_revision: String,
    /// Most I/O queues per controller. Default: 64.
    pub max_io_queues: u16,
    /// In-capsule data accepted per command, in bytes (IOCCSZ). Default:
    /// 8192.
    pub in_capsule_data: usize,
    /// MAXH2CDATA: most bytes per H2CData PDU. Default: 131072.
    pub max_h2c_data: u32,
    /// MDTS as a power of two of 4 KiB pages. Default: 8 (1 MiB).
    pub mdts: u8,
    /// Commands per queue that may hold an R2T (and its buffer) at once.
    /// Default: 32.
    pub max_r2t_inflight: usize,
    /// Most TCP connections served at once, over all ports; further ones
    /// are closed at accept. Default: 4096.
    pub max_connections: usize,
    /// How long an I/O queue busy-polls its socket and commands before it
    /// sleeps waiting for events; zero disables polling. Polling spends
    /// CPU to avoid a wake-up per round trip (like SPDK's poll mode, but
    /// bounded). Default: zero.
    pub poll: std::time::Duration,
    /// Most connections that have not completed Connect, over all ports.
    /// When a new one arrives at the limit, the oldest of them is closed:
    /// sockets that never speak cannot lock hosts out. Default: 256.
    pub max_pending_connections: usize,
    /// Time from accept to a successful Connect (ICReq included); a
    /// connection that takes longer is closed. Default: 10 s.
    pub handshake_timeout: std::time::Duration,
    /// Time a host has to send the data an R2T asked for; a connection
    /// with an R2T older than this is terminated, freeing its buffers.
    /// Default: 10 s.
    pub r2t_timeout: std::time::Duration,
    /// Time a send may make no progress (a host that stopped reading its
    /// socket) before the connection is closed. Default: 30 s.
    pub send_timeout: std::time::Duration,
    /// Bytes of command state and data held at once over all
    /// connections. Half is what I/O queues prepay at Connect (state and
    /// in-capsule buffer per entry; a queue that does not fit is refused
    /// with Controller Busy), half is data charged as it moves (R2T
    /// buffers, reads larger than a slot, large admin answers), which
    /// waits in line when spent. See `docs/nvme-tcp.md`. Default: 1 GiB.
    pub io_buffer_budget: usize,
    /// How long commands still running when their connection ends are
    /// waited for before they are abandoned (see `docs/nvme-tcp.md`).
    /// Default: 30 s.
    pub drain_timeout: std::time::Duration,
    /// The controller IDs this target gives out for host subsystems,
    /// unique within each subsystem. Nodes that serve one subsystem side
    /// by side (paths to one volume) give each a range of its own, since a
    /// host refuses a second controller with an ID the subsystem already
    /// showed it. Internal (fabric) and discovery controllers take from
    /// all of [`CNTLIDS`]. Clamped to [`CNTLIDS`]. Default: all of them.
    pub cntlids: std::ops::RangeInclusive<u16>,
    /// Whether a Connect to a host subsystem this target does not serve
    /// *now* may be retried: refused with Connect Invalid Parameters
    /// without Do Not Retry, so that a host reconnecting to a pool node
    /// that restarts, or that is between serving a volume as a path and
    /// as its owner, keeps trying (Linux deletes a controller whose
    /// reconnect is refused with DNR). A first connect fails either way.
    /// Default: false (DNR, as Linux nvmet answers).
    pub retry_unknown_subsystems: bool,
    /// TLS on the host-facing ports (I/O and discovery; fabric ports
    /// never): off, allowed (the host's first byte tells) or required.
    /// Hosts prove the TLS PSK set with `Target::set_tls_psk`. Default:
    /// off.
    pub tls: strata_tls::TlsMode,
    /// How TLS PSKs are derived from configured ones (see
    /// `strata_auth::tls`). Default: libnvme's construction.
    pub tls_derivation: strata_auth::Derivation,
    /// Record per-volume and per-host data-path metrics
    /// ([`crate::io_metrics`]). Off saves a few relaxed atomic adds and a
    /// clock read per command (for benchmarks). Default: true.
    pub io_metrics: bool,
}

impl TargetConfig {
    /// Largest transfer of one command, in bytes.
    pub fn max_transfer(&self) -> usize {
        4096usize << self.mdts
    }
}

impl Default for TargetConfig {
    fn default() -> Self {
        TargetConfig {
            firmware_revision: env!("CARGO_PKG_VERSION").chars().take(8).collect(),
            max_io_queues: 64,
            in_capsule_data: 8192,
            max_h2c_data: 128 * 1024,
            mdts: 8,
            max_r2t_inflight: 32,
            max_connections: 4096,
            poll: std::time::Duration::ZERO,
            max_pending_connections: 256,
            handshake_timeout: std::time::Duration::from_secs(10),
            r2t_timeout: std::time::Duration::from_secs(10),
            send_timeout: std::time::Duration::from_secs(30),
            io_buffer_budget: 1 << 30,
            drain_timeout: std::time::Duration::from_secs(30),
            cntlids: CNTLIDS,
            retry_unknown_subsystems: false,
            tls: strata_tls::TlsMode::Off,
            tls_derivation: strata_auth::Derivation::Compat,
            io_metrics: true,
        }
    }
}
