//! How a placement group's data is protected, and so how many distinct
//! nodes it needs: its width.
//!
//! `rep:N` keeps N full copies. Erasure coding (`ec:K+M`: K data and M
//! parity shards, every shard on its own node) will be a second variant
//! with width K+M; everything placement does is in terms of
//! [`Protection::width`] and an ordered node list (position i holds copy
//! or shard i), so that variant needs no change to the placement code.
//! Until it exists, `ec:` is recognised and refused with a clear error.
//!
//! The text form (`rep:3`) is the one operators write, the one the map
//! stores, and the one error messages print.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The most nodes one placement group can span (copies or shards).
pub const MAX_WIDTH: usize = 32;

/// The most replicas `rep:N` accepts.
pub const MAX_COPIES: u8 = 8;

/// Data protection of a placement group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
#[non_exhaustive]
pub enum Protection {
    /// `rep:N`: N full copies on N distinct nodes.
    Replicated {
        /// Number of copies, 1..=[`MAX_COPIES`].
        copies: u8,
    },
}

/// Why a protection string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtectionError {
    /// Not of the form `rep:N` (or `ec:K+M`).
    #[error("protection {input:?} is not understood; write rep:N, e.g. rep:3")]
    Malformed {
        /// The rejected text.
        input: String,
    },
    /// `rep:N` with N outside 1..=MAX_COPIES.
    #[error("protection {input:?} has {copies} copies; rep:N takes 1 to {max} copies")]
    CopiesOutOfRange {
        /// The rejected text.
        input: String,
        /// The number that was asked for.
        copies: u64,
        /// The largest accepted.
        max: u8,
    },
    /// `ec:K+M`: recognised, not built yet.
    #[error("protection {input:?}: erasure coding is not supported yet; use rep:N")]
    ErasureCodingUnsupported {
        /// The rejected text.
        input: String,
    },
}

impl Protection {
    /// `rep:copies`.
    ///
    /// # Errors
    ///
    /// [`ProtectionError::CopiesOutOfRange`] unless `1 <= copies <= MAX_COPIES`.
    pub fn replicated(copies: u8) -> Result<Protection, ProtectionError> {
        if copies == 0 || copies > MAX_COPIES {
            return Err(ProtectionError::CopiesOutOfRange {
                input: format!("rep:{copies}"),
                copies: u64::from(copies),
                max: MAX_COPIES,
            });
        }
        Ok(Protection::Replicated { copies })
    }

    /// How many distinct nodes one placement group spans.
    pub fn width(self) -> usize {
        match self {
            Protection::Replicated { copies } => usize::from(copies),
        }
    }
}

impl Default for Protection {
    /// `rep:3`.
    fn default() -> Protection {
        Protection::Replicated { copies: 3 }
    }
}

impl fmt::Display for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Protection::Replicated { copies } => write!(f, "rep:{copies}"),
        }
    }
}

impl FromStr for Protection {
    type Err = ProtectionError;

    fn from_str(s: &str) -> Result<Protection, ProtectionError> {
        let input = s.trim();
        let malformed = || ProtectionError::Malformed { input: input.to_owned() };
        let (scheme, rest) = input.split_once(':').ok_or_else(malformed)?;
        match scheme.to_ascii_lowercase().as_str() {
            "rep" => {
                if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(malformed());
                }
                let out_of_range =
                    |copies| ProtectionError::CopiesOutOfRange { input: input.to_owned(), copies, max: MAX_COPIES };
                // All digits, so the only parse failure is overflow.
                let copies: u64 = rest.parse().map_err(|_| out_of_range(u64::MAX))?;
                match u8::try_from(copies) {
                    Ok(c) if (1..=MAX_COPIES).contains(&c) => Ok(Protection::Replicated { copies: c }),
                    _ => Err(out_of_range(copies)),
                }
            }
            "ec" => Err(ProtectionError::ErasureCodingUnsupported { input: input.to_owned() }),
            _ => Err(malformed()),
        }
    }
}

impl TryFrom<String> for Protection {
    type Error = ProtectionError;

    fn try_from(s: String) -> Result<Protection, ProtectionError> {
        s.parse()
    }
}

impl From<Protection> for String {
    fn from(p: Protection) -> String {
        p.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replication_parses_and_prints_back() {
        for n in 1..=MAX_COPIES {
            let p: Protection = format!("rep:{n}").parse().expect("valid");
            assert_eq!(p.width(), usize::from(n));
            assert_eq!(p.to_string(), format!("rep:{n}"));
        }
        assert_eq!(" REP:3 ".parse::<Protection>(), Ok(Protection::Replicated { copies: 3 }));
        assert_eq!(Protection::default().to_string(), "rep:3");
    }

    #[test]
    fn bad_protections_say_what_is_wrong() {
        for s in ["", "rep", "rep:", "rep:x", "rep:-1", "rep:+3", "mirror:2", "3"] {
            assert!(matches!(s.parse::<Protection>(), Err(ProtectionError::Malformed { .. })), "{s:?}");
        }
        for s in ["rep:0", "rep:9", "rep:256", "rep:99999999999999999999999"] {
            assert!(matches!(s.parse::<Protection>(), Err(ProtectionError::CopiesOutOfRange { .. })), "{s:?}");
        }
        let e = "ec:4+2".parse::<Protection>().expect_err("not yet");
        assert!(e.to_string().contains("not supported yet"), "{e}");
        assert!(Protection::replicated(0).is_err());
        assert!(Protection::replicated(MAX_COPIES + 1).is_err());
    }

    #[test]
    fn serde_uses_the_text_form() {
        let p = Protection::replicated(2).expect("valid");
        let json = serde_json::to_string(&p).expect("serialise");
        assert_eq!(json, "\"rep:2\"");
        assert_eq!(serde_json::from_str::<Protection>(&json).expect("parse"), p);
        assert!(serde_json::from_str::<Protection>("\"rep:0\"").is_err());
    }
}
