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
