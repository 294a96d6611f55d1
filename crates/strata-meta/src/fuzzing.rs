//! Internals for the fuzz targets in `fuzz/`; not API. Compiled only
//! under `cfg(fuzzing)` (which `cargo fuzz` sets) or in tests, the way
//! quinn-proto opens its internals to its fuzzers. The record codecs are
//! crate-private; these wrappers hand them out unchanged.

use crate::error::MetaError;
use crate::record::VolumeRecord;

/// Decodes the value stored under volume `name` (see `format.rs`).
///
/// # Errors
///
/// [`MetaError::Corrupt`] for anything but a valid record of that name.
pub fn decode_volume(name: &str, bytes: &[u8]) -> Result<VolumeRecord, MetaError> {
    crate::format::decode_volume(name, bytes)
}

/// Encodes a record at the current format version.
pub fn encode_volume(rec: &VolumeRecord) -> Vec<u8> {
    crate::format::encode_volume(rec)
}

/// Decodes the value stored under config `key`.
///
/// # Errors
///
/// [`MetaError::Corrupt`] for garbage or a newer format.
pub fn decode_config(key: &str, bytes: &[u8]) -> Result<Vec<u8>, MetaError> {
    crate::format::decode_config(key, bytes)
}

/// Encodes a config value at the current format version.
pub fn encode_config(value: &[u8]) -> Vec<u8> {
    crate::format::encode_config(value)
}

/// Checks every field-local invariant of a record.
///
/// # Errors
///
/// The [`MetaError`] naming the first broken rule.
pub fn check_record(rec: &VolumeRecord) -> Result<(), MetaError> {
    crate::record::check_record(rec)
}

/// What [`etcd_response`] parsed, for the fuzz target's invariants.
#[derive(Debug)]
pub enum EtcdParsed {
    /// A parser accepted the bytes.
    Ok,
    /// A parser refused them with this error.
    Err(crate::etcd::EtcdError),
}

/// Runs etcd response parser `which` (taken modulo the number of parsers:
/// range, put, delete, txn, lease grant, keep-alive, time-to-live, watch
/// message, error body) on `body`.
pub fn etcd_response(which: u8, body: &[u8]) -> EtcdParsed {
    use crate::etcd::wire;
    let r = match which % 9 {
        0 => wire::parse_range(body).map(drop),
        1 => wire::parse_put(body).map(drop),
        2 => wire::parse_delete(body).map(drop),
        3 => wire::parse_txn(body).map(drop),
        4 => wire::parse_lease_grant(body).map(drop),
        5 => wire::parse_keepalive(body).map(drop),
        6 => wire::parse_time_to_live(body).map(drop),
        7 => wire::parse_watch_message(body).map(drop),
        _ => Err(wire::parse_error("fuzz", 500, body)),
    };
    match r {
        Ok(()) => EtcdParsed::Ok,
        Err(e) => EtcdParsed::Err(e),
    }
}

/// Splits a stream fed in the given chunks into messages; `Err` if the
/// splitter refused it.
///
/// # Errors
///
/// The splitter's [`crate::etcd::EtcdError::Malformed`].
pub fn etcd_split_stream<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<Vec<u8>>, crate::etcd::EtcdError> {
    let mut splitter = crate::etcd::wire::JsonStream::default();
    let mut out = Vec::new();
    for chunk in chunks {
        splitter.push("fuzz", chunk)?;
        while let Some(m) = splitter.next_message("fuzz")? {
            out.push(m);
        }
    }
    Ok(out)
}

/// Standard base64, encoded.
pub fn base64_encode(data: &[u8]) -> String {
    crate::etcd::base64::encode(data)
}

/// Standard base64, decoded.
///
/// # Errors
///
/// [`crate::etcd::Base64Error`] for text that is not base64.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, crate::etcd::Base64Error> {
    crate::etcd::base64::decode(text)
}
