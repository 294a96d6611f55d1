//! What the store takes from the operating system: randomness and the clock.
//!
//! Kept in one leaf so that tests and future backends see the two sources
//! of non-determinism in one place. Randomness comes from the `getrandom`
//! crate (the `getrandom(2)` system call on Linux), the project's one
//! random-bytes source; it never blocks once the kernel's pool is
//! initialised, which happens early in boot.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::MetaError;

/// 32 bytes from the operating system's random source.
pub(crate) fn random_bytes() -> Result<[u8; 32], MetaError> {
    let mut buf = [0u8; 32];
    getrandom::fill(&mut buf).map_err(|e| MetaError::Io {
        what: "reading random bytes from",
        path: PathBuf::from("the operating system (getrandom)"),
        source: e.into(),
    })?;
    Ok(buf)
}

/// Seconds since the Unix epoch; 0 if the clock is set before it.
pub(crate) fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
