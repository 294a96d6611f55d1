//! Volumes as the store holds them, and the rules every record obeys.
//!
//! A [`VolumeRecord`] is the whole truth about one volume: its size and
//! block size, and the NVMe identity hosts see (subsystem NQN, namespace id,
//! NGUID, UUID, EUI-64). Hosts cache that identity (multipath matches paths
//! by it), so it is fixed at creation and [`check_record`] plus the update
//! rules in [`crate::store`] keep it fixed.
//!
//! Invariants of every stored record (checked on write and again on read):
//! - `name` passes [`validate_volume_name`], `nqn` passes
//!   [`validate_subsystem_nqn`], each host NQN passes [`validate_nqn`] and
//!   appears once;
//! - `block_size` is 512 or 4096, `size_bytes` a positive multiple of it;
//! - `nsid` is in 1..=0xFFFF_FFFE and unique among the volumes of one NQN.

use crate::error::MetaError;
use crate::validate::{validate_nqn, validate_subsystem_nqn, validate_volume_name};

/// The block sizes a volume may have, in bytes.
pub const BLOCK_SIZES: [u32; 2] = [512, 4096];

/// One volume and its NVMe identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRecord {
    /// Store-level id: unique, never reused, even after the volume is deleted.
    pub id: u64,
    /// The volume name: 1 to 64 characters of `[A-Za-z0-9._-]`, not starting
    /// with `.` or `-`. The key of the record; fixed.
    pub name: String,
    /// Size in bytes: a positive multiple of `block_size`.
    pub size_bytes: u64,
    /// Logical block size in bytes: 512 or 4096. Fixed.
    pub block_size: u32,
    /// The NQN of the subsystem that serves the volume.
    pub nqn: String,
    /// Namespace id within that subsystem, unique per NQN (1 unless several
    /// volumes share an NQN).
    pub nsid: u32,
    /// NVMe namespace globally unique identifier (random). Fixed.
    pub nguid: [u8; 16],
    /// Namespace UUID (random, RFC 4122 version 4). Fixed.
    pub uuid: [u8; 16],
    /// IEEE EUI-64. All zero, which NVMe reads as "not reported": an EUI-64
    /// needs an IEEE OUI strata does not have; NGUID and UUID identify the
    /// namespace. Fixed.
    pub eui64: [u8; 8],
    /// Host NQNs allowed to see the volume; empty allows every host.
    pub allowed_hosts: Vec<String>,
    /// Creation time, seconds since the Unix epoch. Fixed.
    pub created_unix: u64,
    /// Bumped by every successful update; an update must carry the
    /// generation it read (optimistic concurrency).
    pub generation: u64,
}

impl VolumeRecord {
    /// The size in logical blocks.
    pub fn block_count(&self) -> u64 {
        self.size_bytes / u64::from(self.block_size.max(1))
    }

    /// The UUID in its 8-4-4-4-12 lower-case text form.
    pub fn uuid_string(&self) -> String {
        let h = hex::encode(self.uuid);
        format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
    }

    /// The NGUID as 32 lower-case hex digits.
    pub fn nguid_hex(&self) -> String {
        hex::encode(self.nguid)
    }

    /// The EUI-64 as 16 lower-case hex digits.
    pub fn eui64_hex(&self) -> String {
        hex::encode(self.eui64)
    }

    /// Whether `host_nqn` may see this volume.
    pub fn allows_host(&self, host_nqn: &str) -> bool {
        self.allowed_hosts.is_empty() || self.allowed_hosts.iter().any(|h| h == host_nqn)
    }
}

/// A request to create a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewVolume {
    /// The volume name (see [`validate_volume_name`]).
    pub name: String,
    /// Size in bytes: a positive multiple of `block_size`.
    pub size_bytes: u64,
    /// 512 or 4096.
    pub block_size: u32,
    /// The subsystem NQN. Default: `nqn.2026-11.io.strata:<name>`.
    pub nqn: Option<String>,
    /// Host NQNs allowed to see the volume; empty allows every host.
    pub allowed_hosts: Vec<String>,
}

impl NewVolume {
    /// A request with block size 4096, the default NQN and no host list.
    pub fn new(name: impl Into<String>, size_bytes: u64) -> Self {
        NewVolume { name: name.into(), size_bytes, block_size: 4096, nqn: None, allowed_hosts: Vec::new() }
    }
}

/// The random identity of a new namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub nguid: [u8; 16],
    pub uuid: [u8; 16],
    pub eui64: [u8; 8],
}

impl Identity {
    /// Builds an identity from 32 random bytes.
    pub(crate) fn from_random(bytes: [u8; 32]) -> Self {
        let mut nguid = [0u8; 16];
        let mut uuid = [0u8; 16];
        nguid.copy_from_slice(&bytes[..16]);
        uuid.copy_from_slice(&bytes[16..]);
        // An all-zero NGUID means "not reported"; 2^-128 odds, but be exact.
        if nguid == [0; 16] {
            nguid[15] = 1;
        }
        // RFC 4122: version 4 (random), variant 10xx.
        uuid[6] = (uuid[6] & 0x0f) | 0x40;
        uuid[8] = (uuid[8] & 0x3f) | 0x80;
        Identity { nguid, uuid, eui64: [0; 8] }
    }

    /// A fresh identity from the operating system's random source.
    pub(crate) fn generate() -> Result<Self, MetaError> {
        Ok(Self::from_random(crate::sys::random_bytes()?))
    }
}

/// Checks the geometry of a volume.
pub(crate) fn check_geometry(size_bytes: u64, block_size: u32) -> Result<(), MetaError> {
    if !BLOCK_SIZES.contains(&block_size) {
        return Err(MetaError::InvalidBlockSize { block_size });
    }
    if size_bytes == 0 || !size_bytes.is_multiple_of(u64::from(block_size)) {
        return Err(MetaError::InvalidSize { size_bytes, block_size });
    }
    Ok(())
}

/// Checks a host list: every entry a valid NQN, none repeated.
pub(crate) fn check_hosts(hosts: &[String]) -> Result<(), MetaError> {
    for (i, host) in hosts.iter().enumerate() {
        validate_nqn(host).map_err(MetaError::InvalidHostNqn)?;
        if hosts[..i].contains(host) {
            return Err(MetaError::DuplicateHost { host: host.clone() });
        }
    }
    Ok(())
}

/// Checks every field-local invariant of a record (not nsid uniqueness,
/// which needs the other records).
pub(crate) fn check_record(rec: &VolumeRecord) -> Result<(), MetaError> {
    validate_volume_name(&rec.name)?;
    check_geometry(rec.size_bytes, rec.block_size)?;
    validate_subsystem_nqn(&rec.nqn).map_err(MetaError::InvalidNqn)?;
    if rec.nsid == 0 || rec.nsid == u32::MAX {
        return Err(MetaError::InvalidNsid { nsid: rec.nsid });
    }
    check_hosts(&rec.allowed_hosts)
}

/// Decodes hex (either case) into exactly `N` bytes, or `None`.
pub(crate) fn hex_decode<const N: usize>(s: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> VolumeRecord {
        VolumeRecord {
            id: 1,
            name: "vol1".into(),
            size_bytes: 8 << 30,
            block_size: 4096,
            nqn: "nqn.2026-11.io.strata:vol1".into(),
            nsid: 1,
            nguid: [0xab; 16],
            uuid: Identity::from_random([0x11; 32]).uuid,
            eui64: [0; 8],
            allowed_hosts: vec![],
            created_unix: 0,
            generation: 0,
        }
    }

    #[test]
    fn random_identity_is_a_v4_uuid_and_nonzero_nguid() {
        let id = Identity::from_random([0; 32]);
        assert_ne!(id.nguid, [0; 16]);
        assert_eq!(id.uuid[6] >> 4, 4);
        assert_eq!(id.uuid[8] >> 6, 0b10);
        assert_eq!(id.eui64, [0; 8]);
        let a = Identity::generate().unwrap();
        let b = Identity::generate().unwrap();
        assert_ne!(a.nguid, b.nguid);
        assert_ne!(a.uuid, b.uuid);
    }

    #[test]
    fn text_forms() {
        let r = sample();
        assert_eq!(r.uuid_string(), "11111111-1111-4111-9111-111111111111");
        assert_eq!(r.nguid_hex(), "ab".repeat(16));
        assert_eq!(r.eui64_hex(), "0".repeat(16));
        assert_eq!(r.block_count(), 2 << 20);
    }

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        let b = [0x00, 0x7f, 0x80, 0xff];
        assert_eq!(hex_decode::<4>(&hex::encode(b)), Some(b));
        assert_eq!(hex_decode::<4>("007F80FF"), Some(b));
        assert_eq!(hex_decode::<4>("007f80f"), None);
        assert_eq!(hex_decode::<4>("007f80fg"), None);
        assert_eq!(hex_decode::<2>("ééé"), None);
    }

    #[test]
    fn record_checks_name_each_rule() {
        assert!(check_record(&sample()).is_ok());
        let bad = |f: fn(&mut VolumeRecord)| {
            let mut r = sample();
            f(&mut r);
            check_record(&r).unwrap_err()
        };
        assert!(matches!(bad(|r| r.name = "-x".into()), MetaError::InvalidName(_)));
        assert!(matches!(bad(|r| r.block_size = 1024), MetaError::InvalidBlockSize { block_size: 1024 }));
        assert!(matches!(bad(|r| r.size_bytes = 0), MetaError::InvalidSize { .. }));
        assert!(matches!(bad(|r| r.size_bytes = 4097), MetaError::InvalidSize { .. }));
        assert!(matches!(bad(|r| r.nqn = "bogus".into()), MetaError::InvalidNqn(_)));
        assert!(matches!(bad(|r| r.nsid = 0), MetaError::InvalidNsid { nsid: 0 }));
        assert!(matches!(bad(|r| r.nsid = u32::MAX), MetaError::InvalidNsid { .. }));
        assert!(matches!(bad(|r| r.allowed_hosts = vec!["x".into()]), MetaError::InvalidHostNqn(_)));
        let h = "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e".to_string();
        assert!(matches!(bad(|r| r.allowed_hosts = vec![
            "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e".into(),
            "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e".into(),
        ]), MetaError::DuplicateHost { host } if host == h));
    }

    #[test]
    fn host_list_filters_hosts() {
        let mut r = sample();
        assert!(r.allows_host("nqn.2026-11.io.example:any"));
        r.allowed_hosts = vec!["nqn.2026-11.io.example:a".into()];
        assert!(r.allows_host("nqn.2026-11.io.example:a"));
        assert!(!r.allows_host("nqn.2026-11.io.example:b"));
    }
}
