//! Host settings: identity (host NQN and host ID), digests, queue counts
//! and depths, keep-alive and timeouts.
//!
//! The default identity is a fresh random UUID per [`HostConfig::default`]
//! call, in the `nqn.2014-08.org.nvmexpress:uuid:<uuid>` form nvme-cli
//! generates, with the same 16 bytes as the host ID (as the kernel does
//! when `/etc/nvme/hostid` holds the UUID of the host NQN).

use std::time::Duration;

use strata_auth::{Derivation, DhchapSecret, TlsPsk};
use strata_nvme::pdu::Digests;

/// Settings of one host (one controller association, or one discovery).
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Host NQN sent in Connect. Default: `nqn.2014-08.org.nvmexpress:uuid:`
    /// followed by a random version-4 UUID.
    pub hostnqn: String,
    /// Host identifier sent in Connect. Default: the bytes of the UUID in
    /// the default host NQN.
    pub hostid: [u8; 16],
    /// Header and data digests asked for in ICReq (the controller's ICResp
    /// decides). Default: none.
    pub digests: Digests,
    /// Keep-alive timeout sent in Connect; zero disables the controller's
    /// timer. Default: 5 s (the kernel's `NVME_DEFAULT_KATO`).
    pub kato: Duration,
    /// Whether to send Keep Alive commands every `kato / 2`. Turning it
    /// off lets tests watch the controller expire an idle host. Default:
    /// true.
    pub send_keep_alive: bool,
    /// Admin queue entries (Connect SQSIZE + 1, at most 32). Default: 32.
    pub admin_queue_size: u16,
    /// Entries per I/O queue; also the most commands in flight per queue.
    /// Default: 128.
    pub io_queue_size: u16,
    /// I/O queues to connect (each one TCP connection); fewer are used if
    /// the controller grants fewer. Default: 1.
    pub io_queues: u16,
    /// Limit on TCP connect, ICResp and controller enable. Default: 10 s.
    pub connect_timeout: Duration,
    /// Limit on each command's completion; zero waits forever. A command
    /// that times out keeps its command identifier until the controller
    /// answers (its answer is then dropped). Default: 30 s.
    pub io_timeout: Duration,
    /// Ask the controller to disable SQ flow control (Connect CATTR bit 2),
    /// which lets it complete reads with the C2HData SUCCESS flag instead
    /// of a CapsuleResp. Default: false.
    pub disable_sq_flow_control: bool,
    /// The host's DH-HMAC-CHAP secret, used when the controller asks the
    /// host to authenticate (`nvme connect --dhchap-secret`). Default: none.
    pub dhchap_secret: Option<DhchapSecret>,
    /// The controller's secret: with it the host makes the controller
    /// prove itself too (`--dhchap-ctrl-secret`). Default: none.
    pub dhchap_ctrl_secret: Option<DhchapSecret>,
    /// A configured TLS PSK (`NVMeTLSkey-1:01:...`): with it every queue
    /// runs NVMe/TCP inside TLS 1.3, proving the PSK identity
    /// `NVMe0R01 <hostnqn> <subnqn>` (`nvme connect --tls` with the key
    /// in the keyring). Default: none (plain TCP).
    pub tls_psk: Option<TlsPsk>,
    /// How the TLS PSK is derived from `tls_psk` (see `strata_auth::tls`).
    /// Default: libnvme's construction, as the kernel's keyring holds it.
    pub tls_derivation: Derivation,
}

impl Default for HostConfig {
    fn default() -> Self {
        let uuid = random_uuid();
        HostConfig {
            hostnqn: format!("nqn.2014-08.org.nvmexpress:uuid:{}", format_uuid(&uuid)),
            hostid: uuid,
            digests: Digests::default(),
            kato: Duration::from_secs(5),
            send_keep_alive: true,
            admin_queue_size: 32,
            io_queue_size: 128,
            io_queues: 1,
            connect_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(30),
            disable_sq_flow_control: false,
            dhchap_secret: None,
            dhchap_ctrl_secret: None,
            tls_psk: None,
            tls_derivation: Derivation::Compat,
        }
    }
}

/// A random version-4 UUID from the operating system (`getrandom`). If
/// that fails, falls back to std's randomly keyed hasher over the time and
/// process ID, which is unique enough for a host NQN.
pub(crate) fn random_uuid() -> [u8; 16] {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        use std::hash::{BuildHasher, Hasher};
        for (i, chunk) in b.chunks_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(i);
            h.write_u32(std::process::id());
            h.write_u128(
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
            );
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    b
}

/// The canonical 8-4-4-4-12 text form of a UUID (lower-case, as nvme-cli
/// writes host NQNs).
pub(crate) fn format_uuid(u: &[u8; 16]) -> String {
    let h = hex::encode(u);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_identity_is_a_fresh_v4_uuid_nqn() {
        let a = HostConfig::default();
        let b = HostConfig::default();
        assert_ne!(a.hostnqn, b.hostnqn);
        let uuid = a.hostnqn.strip_prefix("nqn.2014-08.org.nvmexpress:uuid:").unwrap();
        assert_eq!(uuid.len(), 36);
        assert_eq!(uuid, format_uuid(&a.hostid));
        assert_eq!(&uuid[14..15], "4", "version nibble");
        assert!(matches!(&uuid[19..20], "8" | "9" | "a" | "b"), "variant bits");
        assert_eq!((a.io_queue_size, a.io_queues, a.admin_queue_size), (128, 1, 32));
    }

    #[test]
    fn uuid_text_form() {
        let u = [0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0x4d, 0xef, 0x80, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07];
        assert_eq!(format_uuid(&u), "12345678-9abc-4def-8001-020304050607");
    }
}
