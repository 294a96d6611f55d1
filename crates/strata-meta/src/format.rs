//! The persisted encoding of store values: versioned JSON.
//!
//! # Format
//!
//! Every value is a JSON object whose `format` field is its version. Version 1
//! of a volume record (table `volumes`, keyed by volume name):
//!
//! | field | JSON type | meaning |
//! |---|---|---|
//! | `format` | number | always 1 |
//! | `id` | number | [`VolumeRecord::id`] |
//! | `name` | string | must equal the key |
//! | `size_bytes` | number | |
//! | `block_size` | number | |
//! | `nqn` | string | |
//! | `nsid` | number | |
//! | `nguid` | string | 32 hex digits |
//! | `uuid` | string | 32 hex digits (no dashes) |
//! | `eui64` | string | 16 hex digits |
//! | `allowed_hosts` | array of strings | |
//! | `created_unix` | number | |
//! | `generation` | number | |
//!
//! Version 1 of a config value (table `config`): `{"format":1,"hex":"<value as hex>"}`.
//!
//! # Compatibility rule
//!
//! A reader decodes every version up to [`FORMAT_VERSION`] and refuses newer
//! ones with [`MetaError::Corrupt`] ("newer than this build"), so an old
//! binary never rewrites a record it only half understands. Fields are
//! checked strictly (`deny_unknown_fields`): a new field means a new version.
//! Integrity of the bytes themselves is redb's job (it checksums its pages);
//! this layer checks that decoded records obey the invariants in
//! [`crate::record`], and reports any breach as `Corrupt`, never a panic.

use serde::{Deserialize, Serialize};

use crate::error::MetaError;
use crate::record::{VolumeRecord, check_record, hex_decode};

/// The newest value format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Only the version, read first so the rest can be decoded by version.
#[derive(Deserialize)]
struct Probe {
    format: u32,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct VolumeV1 {
    format: u32,
    id: u64,
    name: String,
    size_bytes: u64,
    block_size: u32,
    nqn: String,
    nsid: u32,
    nguid: String,
    uuid: String,
    eui64: String,
    allowed_hosts: Vec<String>,
    created_unix: u64,
    generation: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigV1 {
    format: u32,
    hex: String,
}

/// The `table/key` label used in [`MetaError::Corrupt`] for a volume.
pub(crate) fn volume_key_label(name: &str) -> String {
    format!("volumes/{name}")
}

/// The `table/key` label used in [`MetaError::Corrupt`] for a config entry.
pub(crate) fn config_key_label(key: &str) -> String {
    format!("config/{key}")
}

/// Encodes a record at the current format version.
pub(crate) fn encode_volume(rec: &VolumeRecord) -> Vec<u8> {
    let v = VolumeV1 {
        format: FORMAT_VERSION,
        id: rec.id,
        name: rec.name.clone(),
        size_bytes: rec.size_bytes,
        block_size: rec.block_size,
        nqn: rec.nqn.clone(),
        nsid: rec.nsid,
        nguid: hex::encode(rec.nguid),
        uuid: hex::encode(rec.uuid),
        eui64: hex::encode(rec.eui64),
        allowed_hosts: rec.allowed_hosts.clone(),
        created_unix: rec.created_unix,
        generation: rec.generation,
    };
    // Serialising a struct of strings and integers to a Vec cannot fail
    // (serde_json errors only on non-string map keys or a failing writer).
    serde_json::to_vec(&v).expect("serialising a VolumeV1 cannot fail")
}

/// Reads the version of a value, refusing versions newer than this build.
fn probe_version(label: &str, bytes: &[u8]) -> Result<u32, MetaError> {
    let probe: Probe = serde_json::from_slice(bytes)
        .map_err(|e| MetaError::corrupt(label, format!("not a versioned JSON object: {e}")))?;
    match probe.format {
        0 => Err(MetaError::corrupt(label, "format version 0 does not exist")),
        v if v > FORMAT_VERSION => Err(MetaError::corrupt(
            label,
            format!(
                "format version {v} is newer than this build of strata understands \
                 (up to {FORMAT_VERSION}); upgrade strata"
            ),
        )),
        v => Ok(v),
    }
}

/// Decodes the value stored under volume `name`.
///
/// # Errors
///
/// [`MetaError::Corrupt`] for garbage, a newer format, a record whose name
/// differs from its key, or one that breaks a record invariant.
pub(crate) fn decode_volume(name: &str, bytes: &[u8]) -> Result<VolumeRecord, MetaError> {
    let label = volume_key_label(name);
    let version = probe_version(&label, bytes)?;
    debug_assert_eq!(version, 1, "probe_version admits only known versions");
    let v: VolumeV1 = serde_json::from_slice(bytes)
        .map_err(|e| MetaError::corrupt(&label, format!("bad version-1 volume record: {e}")))?;
    let hex_field = |field: &str, text: &str, len: usize| {
        MetaError::corrupt(&label, format!("{field} {text:?} is not {len} hex digits"))
    };
    let rec = VolumeRecord {
        id: v.id,
        size_bytes: v.size_bytes,
        block_size: v.block_size,
        nsid: v.nsid,
        nguid: hex_decode(&v.nguid).ok_or_else(|| hex_field("nguid", &v.nguid, 32))?,
        uuid: hex_decode(&v.uuid).ok_or_else(|| hex_field("uuid", &v.uuid, 32))?,
        eui64: hex_decode(&v.eui64).ok_or_else(|| hex_field("eui64", &v.eui64, 16))?,
        name: v.name,
        nqn: v.nqn,
        allowed_hosts: v.allowed_hosts,
        created_unix: v.created_unix,
        generation: v.generation,
    };
    if rec.name != name {
        return Err(MetaError::corrupt(
            &label,
            format!("record names volume {:?} but is stored under {name:?}", rec.name),
        ));
    }
    check_record(&rec).map_err(|e| MetaError::corrupt(&label, format!("invalid record: {e}")))?;
    Ok(rec)
}

/// Encodes a config value at the current format version.
pub(crate) fn encode_config(value: &[u8]) -> Vec<u8> {
    let v = ConfigV1 { format: FORMAT_VERSION, hex: hex::encode(value) };
    // As in `encode_volume`: cannot fail.
    serde_json::to_vec(&v).expect("serialising a ConfigV1 cannot fail")
}

/// Decodes the value stored under config `key`.
///
/// # Errors
///
/// [`MetaError::Corrupt`] for garbage or a newer format.
pub(crate) fn decode_config(key: &str, bytes: &[u8]) -> Result<Vec<u8>, MetaError> {
    let label = config_key_label(key);
    probe_version(&label, bytes)?;
    let v: ConfigV1 = serde_json::from_slice(bytes)
        .map_err(|e| MetaError::corrupt(&label, format!("bad version-1 config value: {e}")))?;
    hex::decode(&v.hex).map_err(|_| MetaError::corrupt(&label, "value is not an even number of hex digits"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> VolumeRecord {
        VolumeRecord {
            id: 7,
            name: "vol1".into(),
            size_bytes: 1 << 30,
            block_size: 512,
            nqn: "nqn.2026-11.io.strata:vol1".into(),
            nsid: 3,
            nguid: [1; 16],
            uuid: [2; 16],
            eui64: [3; 8],
            allowed_hosts: vec!["nqn.2026-11.io.example:h1".into()],
            created_unix: 1_800_000_000,
            generation: 9,
        }
    }

    #[test]
    fn volume_round_trips() {
        let r = sample();
        assert_eq!(decode_volume("vol1", &encode_volume(&r)).unwrap(), r);
    }

    #[test]
    fn version_1_bytes_written_by_this_release_still_decode() {
        // Pinned encoding: if this test breaks, old stores would stop opening.
        let bytes = br#"{"format":1,"id":7,"name":"vol1","size_bytes":1073741824,"block_size":512,"nqn":"nqn.2026-11.io.strata:vol1","nsid":3,"nguid":"01010101010101010101010101010101","uuid":"02020202020202020202020202020202","eui64":"0303030303030303","allowed_hosts":["nqn.2026-11.io.example:h1"],"created_unix":1800000000,"generation":9}"#;
        assert_eq!(decode_volume("vol1", bytes).unwrap(), sample());
        assert_eq!(encode_volume(&sample()), bytes.to_vec());
        assert_eq!(decode_config("k", br#"{"format":1,"hex":"00ff"}"#).unwrap(), vec![0, 0xff]);
    }

    fn corrupt_reason(name: &str, bytes: &[u8]) -> String {
        match decode_volume(name, bytes) {
            Err(MetaError::Corrupt { key, reason }) => {
                assert_eq!(key, format!("volumes/{name}"));
                reason
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    fn mutate(f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> Vec<u8> {
        let mut v: serde_json::Value = serde_json::from_slice(&encode_volume(&sample())).unwrap();
        f(v.as_object_mut().unwrap());
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn garbage_is_corrupt() {
        assert!(corrupt_reason("vol1", b"\xff\x00garbage").contains("not a versioned JSON"));
        assert!(corrupt_reason("vol1", b"").contains("not a versioned JSON"));
        assert!(corrupt_reason("vol1", b"[1,2]").contains("not a versioned JSON"));
        assert!(corrupt_reason("vol1", br#"{"id":1}"#).contains("not a versioned JSON"));
    }

    #[test]
    fn newer_version_is_corrupt_and_says_upgrade() {
        let b = mutate(|m| {
            m.insert("format".into(), 2.into());
        });
        assert!(corrupt_reason("vol1", &b).contains("upgrade strata"));
        let b = mutate(|m| {
            m.insert("format".into(), 0.into());
        });
        assert!(corrupt_reason("vol1", &b).contains("version 0"));
    }

    #[test]
    fn each_broken_field_is_corrupt() {
        let cases: Vec<Vec<u8>> = vec![
            mutate(|m| {
                m.insert("extra".into(), 1.into());
            }),
            mutate(|m| {
                m.remove("nsid");
            }),
            mutate(|m| {
                m.insert("id".into(), (-1).into());
            }),
            mutate(|m| {
                m.insert("nguid".into(), "xyz".into());
            }),
            mutate(|m| {
                m.insert("uuid".into(), "00".into());
            }),
            mutate(|m| {
                m.insert("eui64".into(), "zz03030303030303".into());
            }),
            mutate(|m| {
                m.insert("block_size".into(), 1000.into());
            }),
            mutate(|m| {
                m.insert("size_bytes".into(), 0.into());
            }),
            mutate(|m| {
                m.insert("nsid".into(), 0.into());
            }),
            mutate(|m| {
                m.insert("nqn".into(), "nope".into());
            }),
        ];
        for b in cases {
            corrupt_reason("vol1", &b);
        }
        // Stored under another name than the record carries.
        assert!(corrupt_reason("vol2", &encode_volume(&sample())).contains("stored under"));
    }

    #[test]
    fn config_round_trips_and_rejects_garbage() {
        for v in [&b""[..], b"x", b"\x00\xff node uuid"] {
            assert_eq!(decode_config("k", &encode_config(v)).unwrap(), v);
        }
        for bad in
            [&b"nope"[..], br#"{"format":1,"hex":"abc"}"#, br#"{"format":1,"hex":"zz"}"#, br#"{"format":2,"hex":""}"#]
        {
            assert!(matches!(decode_config("k", bad), Err(MetaError::Corrupt { .. })));
        }
    }

    proptest::proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = decode_volume("vol1", &bytes);
            let _ = decode_config("k", &bytes);
        }
    }
}
