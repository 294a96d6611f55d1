//! strata-meta's persisted values (crates/strata-meta/src/format.rs,
//! record.rs, validate.rs): the volume record or config value stored under
//! a key, either as arbitrary bytes or as a JSON record built from
//! arbitrary fields (mostly valid names and NQNs, hex in either case, a
//! version from 0 to 2, sometimes an unknown field), so that decoding gets
//! past the JSON syntax and reaches the record checks.
//!
//! Invariants: never panics; a volume record that decodes is stored under
//! its own name, obeys every record invariant, and re-encodes to bytes that
//! decode to the same record and encode to the same bytes again; a config
//! value that decodes round-trips; names and NQNs that validate stay
//! within their limits, and a valid name's default NQN validates.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use strata_meta::fuzzing::{check_record, decode_config, decode_volume, encode_config, encode_volume};
use strata_meta::{
    MAX_NQN_LEN, MAX_VOLUME_NAME_LEN, default_nqn, validate_nqn, validate_subsystem_nqn, validate_volume_name,
};

#[derive(Arbitrary, Debug)]
enum Input {
    Raw { key: String, value: Vec<u8> },
    Volume(Fields),
}

#[derive(Arbitrary, Debug)]
struct Fields {
    format: u8,
    other_key: Option<String>,
    id: u64,
    name: String,
    nqn: Option<String>,
    size_blocks: u32,
    block_size_4k: bool,
    nsid: u32,
    nguid: [u8; 16],
    uuid: [u8; 16],
    eui64: [u8; 8],
    upper_hex: bool,
    hosts: Vec<String>,
    created_unix: u64,
    generation: u64,
    unknown_field: bool,
}

fn hex(bytes: &[u8], upper: bool) -> String {
    bytes.iter().map(|b| if upper { format!("{b:02X}") } else { format!("{b:02x}") }).collect()
}

/// A stored volume value and its key, from arbitrary fields.
fn volume_json(f: &Fields) -> (String, Vec<u8>) {
    // Mostly valid names: keep the allowed characters, at most 70 of them.
    let name: String =
        f.name.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')).take(70).collect();
    let block_size: u64 = if f.block_size_4k { 4096 } else { 512 };
    let mut v = serde_json::json!({
        "format": f.format % 3,
        "id": f.id,
        "name": name,
        "size_bytes": u64::from(f.size_blocks) * block_size,
        "block_size": block_size,
        "nqn": f.nqn.clone().unwrap_or_else(|| default_nqn(&name)),
        "nsid": f.nsid,
        "nguid": hex(&f.nguid, f.upper_hex),
        "uuid": hex(&f.uuid, f.upper_hex),
        "eui64": hex(&f.eui64, f.upper_hex),
        "allowed_hosts": f.hosts,
        "created_unix": f.created_unix,
        "generation": f.generation,
    });
    if f.unknown_field {
        v["extra"] = serde_json::json!(1);
    }
    let key = f.other_key.clone().unwrap_or(name);
    (key, serde_json::to_vec(&v).expect("a JSON value serialises"))
}

fuzz_target!(|input: Input| {
    let (key, value) = match &input {
        Input::Raw { key, value } => (key.clone(), value.clone()),
        Input::Volume(f) => volume_json(f),
    };

    if let Ok(rec) = decode_volume(&key, &value) {
        assert_eq!(rec.name, key);
        assert!(check_record(&rec).is_ok(), "{rec:?}");
        let bytes = encode_volume(&rec);
        assert_eq!(decode_volume(&key, &bytes).ok().as_ref(), Some(&rec), "re-encoded record decodes differently");
        let again = decode_volume(&key, &bytes).map(|r| encode_volume(&r));
        assert_eq!(again.ok(), Some(bytes), "encoding is not stable");
    }
    if let Ok(v) = decode_config(&key, &value) {
        assert_eq!(decode_config(&key, &encode_config(&v)).ok(), Some(v));
    }

    for text in [key.as_str(), &String::from_utf8_lossy(&value)] {
        if validate_volume_name(text).is_ok() {
            assert!(!text.is_empty() && text.chars().count() <= MAX_VOLUME_NAME_LEN);
            assert_eq!(validate_subsystem_nqn(&default_nqn(text)), Ok(()));
        }
        if validate_nqn(text).is_ok() {
            assert!(text.len() <= MAX_NQN_LEN && text.starts_with("nqn."));
        }
    }
});
