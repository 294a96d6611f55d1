//! What the store takes from the operating system: randomness and the clock.
//!
//! Kept in one leaf so that tests and future backends see the two sources
//! of non-determinism in one place. Randomness comes from `/dev/urandom`
//! through `std` (no `unsafe`, no extra crate); on Linux it never blocks
//! once the kernel's pool is initialised, which happens early in boot.

use std::io::Read;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::MetaError;

const URANDOM: &str = "/dev/urandom";

/// 32 bytes from the operating system's random source.
pub(crate) fn random_bytes() -> Result<[u8; 32], MetaError> {
    let io =
        |source| MetaError::Io { what: "reading random bytes from", path: Path::new(URANDOM).to_path_buf(), source };
    let mut buf = [0u8; 32];
    std::fs::File::open(URANDOM).and_then(|mut f| f.read_exact(&mut buf)).map_err(io)?;
    Ok(buf)
}

/// Seconds since the Unix epoch; 0 if the clock is set before it.
pub(crate) fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
