//! How a placement group's data is protected, and so how many distinct
//! nodes it needs: its width.
//!
//! - `rep:N` keeps N full copies on N nodes (width N);
//! - `ec:K+M` cuts the data into K data shards and adds M parity shards,
//!   every shard on its own node (width K+M); any K shards rebuild the
//!   rest, so M nodes may fail.
//!
//! Everything placement does is in terms of [`Protection::width`] and an
//! ordered node list: position i holds copy i, or shard i of an `ec`
//! group, and placement keeps positions when nodes fail or remaps apply.
//! So erasure coding needs no change to the placement code; what differs
//! is what a slot holds ([`Protection::data_shards`]) and what a rebuild
//! reads.
//!
//! Limits: `rep:1` to `rep:8` ([`MAX_COPIES`]); `ec:K+M` with K >= 1,
//! M >= 1 and K+M at most [`MAX_WIDTH`] (32), the widest group placement
//! handles. `ec:K+0` is refused: without parity it is striping, not
//! protection.
//!
//! The text form (`rep:3`, `ec:8+3`) is the one operators write, the one
//! the map stores, and the one error messages print. Parsing trims and
//! ignores case, and refuses everything else with a typed error; no input
//! panics.

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
    /// `ec:K+M`: K data shards and M parity shards on K+M distinct nodes;
    /// shard i is slot i of the group's placement.
    ErasureCoded {
        /// Data shards K, at least 1.
        data: u8,
        /// Parity shards M, at least 1; K+M is at most [`MAX_WIDTH`].
        parity: u8,
    },
}

/// Why a protection string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtectionError {
    /// Not of the form `rep:N` or `ec:K+M`.
    #[error("protection {input:?} is not understood; write rep:N or ec:K+M, e.g. rep:3 or ec:8+3")]
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
    /// `ec:K+M` with K or M zero, or K+M above MAX_WIDTH.
    #[error(
        "protection {input:?} has {data} data and {parity} parity shards; ec:K+M takes K >= 1, M >= 1 and K+M <= {max}"
    )]
    ShardsOutOfRange {
        /// The rejected text.
        input: String,
        /// Data shards asked for.
        data: u64,
        /// Parity shards asked for.
        parity: u64,
        /// The largest K+M accepted.
        max: usize,
    },
}

impl Protection {
    /// `rep:copies`.
    ///
    /// # Errors
    ///
    /// [`ProtectionError::CopiesOutOfRange`] unless `1 <= copies <= MAX_COPIES`.
    pub fn replicated(copies: u8) -> Result<Protection, ProtectionError> {
        Protection::checked_replicated(&format!("rep:{copies}"), u64::from(copies))
    }

    /// `ec:data+parity`.
    ///
    /// # Errors
    ///
    /// [`ProtectionError::ShardsOutOfRange`] unless `data >= 1`,
    /// `parity >= 1` and `data + parity <= MAX_WIDTH`.
    pub fn erasure_coded(data: u8, parity: u8) -> Result<Protection, ProtectionError> {
        Protection::checked_erasure_coded(&format!("ec:{data}+{parity}"), u64::from(data), u64::from(parity))
    }

    fn checked_replicated(input: &str, copies: u64) -> Result<Protection, ProtectionError> {
        match u8::try_from(copies) {
            Ok(c) if (1..=MAX_COPIES).contains(&c) => Ok(Protection::Replicated { copies: c }),
            _ => Err(ProtectionError::CopiesOutOfRange { input: input.to_owned(), copies, max: MAX_COPIES }),
        }
    }

    fn checked_erasure_coded(input: &str, data: u64, parity: u64) -> Result<Protection, ProtectionError> {
        let fits = data >= 1 && parity >= 1 && data.saturating_add(parity) <= MAX_WIDTH as u64;
        match (u8::try_from(data), u8::try_from(parity)) {
            (Ok(data), Ok(parity)) if fits => Ok(Protection::ErasureCoded { data, parity }),
            _ => Err(ProtectionError::ShardsOutOfRange { input: input.to_owned(), data, parity, max: MAX_WIDTH }),
        }
    }

    /// How many distinct nodes one placement group spans: N for `rep:N`,
    /// K+M for `ec:K+M`.
    pub fn width(self) -> usize {
        match self {
            Protection::Replicated { copies } => usize::from(copies),
            Protection::ErasureCoded { data, parity } => usize::from(data) + usize::from(parity),
        }
    }

    /// Into how many pieces a chunk's data is cut: K for `ec:K+M`, 1 for
    /// `rep:N` (a copy is the whole chunk). Every slot of a group holds
    /// `1 / data_shards` of the group's data, and rebuilding a lost slot
    /// reads this many surviving slots.
    pub fn data_shards(self) -> usize {
        match self {
            Protection::Replicated { .. } => 1,
            Protection::ErasureCoded { data, .. } => usize::from(data),
        }
    }

    /// Bytes stored per byte of data: N for `rep:N`, (K+M)/K for `ec:K+M`
    /// (before rounding shards up to whole extents).
    pub fn raw_per_data(self) -> f64 {
        self.width() as f64 / self.data_shards() as f64
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
            Protection::ErasureCoded { data, parity } => write!(f, "ec:{data}+{parity}"),
        }
    }
}

/// A decimal number of ASCII digits only (no sign, no space); `u64::MAX`
/// if it overflows, which every range check then refuses.
fn number(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits, so the only parse failure is overflow.
    Some(digits.parse().unwrap_or(u64::MAX))
}

impl FromStr for Protection {
    type Err = ProtectionError;

    fn from_str(s: &str) -> Result<Protection, ProtectionError> {
        let input = s.trim();
        let malformed = || ProtectionError::Malformed { input: input.to_owned() };
        let (scheme, rest) = input.split_once(':').ok_or_else(malformed)?;
        match scheme.to_ascii_lowercase().as_str() {
            "rep" => Protection::checked_replicated(input, number(rest).ok_or_else(malformed)?),
            "ec" => {
                let (data, parity) = rest.split_once('+').ok_or_else(malformed)?;
                let (data, parity) = (number(data).ok_or_else(malformed)?, number(parity).ok_or_else(malformed)?);
                Protection::checked_erasure_coded(input, data, parity)
            }
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
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn replication_parses_and_prints_back() {
        for n in 1..=MAX_COPIES {
            let p: Protection = format!("rep:{n}").parse().expect("valid");
            assert_eq!(p.width(), usize::from(n));
            assert_eq!((p.data_shards(), p.raw_per_data()), (1, f64::from(n)));
            assert_eq!(p.to_string(), format!("rep:{n}"));
        }
        assert_eq!(" REP:3 ".parse::<Protection>(), Ok(Protection::Replicated { copies: 3 }));
        assert_eq!(Protection::default().to_string(), "rep:3");
    }

    #[test]
    fn erasure_coding_parses_and_prints_back() {
        let p: Protection = "ec:8+3".parse().expect("valid");
        assert_eq!(p, Protection::ErasureCoded { data: 8, parity: 3 });
        assert_eq!((p.width(), p.data_shards(), p.raw_per_data()), (11, 8, 11.0 / 8.0));
        assert_eq!(p.to_string(), "ec:8+3");
        assert_eq!(" EC:4+2\n".parse::<Protection>(), Protection::erasure_coded(4, 2));
        assert_eq!("ec:04+02".parse::<Protection>().map(|p| p.to_string()), Ok("ec:4+2".into()));
        for (k, m) in [(1, 1), (1, 31), (31, 1), (16, 16), (10, 4)] {
            let p = Protection::erasure_coded(k, m).expect("in range");
            assert_eq!(p.width(), usize::from(k + m));
            assert_eq!(p.to_string().parse::<Protection>(), Ok(p));
        }
    }

    #[test]
    fn bad_protections_say_what_is_wrong() {
        for s in [
            "", "rep", "rep:", "rep:x", "rep:-1", "rep:+3", "mirror:2", "3", "ec", "ec:", "ec:4", "ec:4+", "ec:+2",
            "ec:4-2", "ec:4+2+1", "ec:-4+2", "ec:4 + 2", "ec:4+x", "ec:+4+2", "ec4+2", ":4+2",
        ] {
            let e = s.parse::<Protection>().expect_err(s);
            assert!(matches!(e, ProtectionError::Malformed { .. }), "{s:?}: {e:?}");
            assert!(e.to_string().contains("write rep:N or ec:K+M"), "{e}");
        }
        for s in ["rep:0", "rep:9", "rep:256", "rep:99999999999999999999999"] {
            assert!(matches!(s.parse::<Protection>(), Err(ProtectionError::CopiesOutOfRange { .. })), "{s:?}");
        }
        for s in ["ec:0+2", "ec:4+0", "ec:0+0", "ec:30+3", "ec:32+1", "ec:256+1", "ec:1+99999999999999999999999"] {
            assert!(matches!(s.parse::<Protection>(), Err(ProtectionError::ShardsOutOfRange { .. })), "{s:?}");
        }
        assert_eq!(
            "ec:30+3".parse::<Protection>().map_err(|e| e.to_string()),
            Err("protection \"ec:30+3\" has 30 data and 3 parity shards; ec:K+M takes K >= 1, M >= 1 and K+M <= 32"
                .into())
        );
        assert!(Protection::replicated(0).is_err());
        assert!(Protection::replicated(MAX_COPIES + 1).is_err());
        assert!(Protection::erasure_coded(0, 1).is_err());
        assert!(Protection::erasure_coded(1, 0).is_err());
        assert!(Protection::erasure_coded(u8::MAX, u8::MAX).is_err());
    }

    #[test]
    fn serde_uses_the_text_form() {
        for p in [Protection::replicated(2).expect("valid"), Protection::erasure_coded(4, 2).expect("valid")] {
            let json = serde_json::to_string(&p).expect("serialise");
            assert_eq!(json, format!("\"{p}\""));
            assert_eq!(serde_json::from_str::<Protection>(&json).expect("parse"), p);
        }
        assert!(serde_json::from_str::<Protection>("\"rep:0\"").is_err());
        assert!(serde_json::from_str::<Protection>("\"ec:4+0\"").is_err());
    }

    proptest! {
        #[test]
        fn any_text_parses_or_is_refused_without_panicking(
            s in "[ \\t]{0,2}(?i:rep|ec|mirror)?:?[0-9+ x-]{0,10}[ \\t]{0,2}|\\PC{0,12}"
        ) {
            if let Ok(p) = s.parse::<Protection>() {
                prop_assert!((1..=MAX_WIDTH).contains(&p.width()));
                prop_assert_eq!(p.to_string().parse::<Protection>(), Ok(p));
            }
        }

        #[test]
        fn ec_is_accepted_exactly_within_its_limits(k in 0u64..40, m in 0u64..40) {
            let want_ok = k >= 1 && m >= 1 && k + m <= MAX_WIDTH as u64;
            let got = format!("ec:{k}+{m}").parse::<Protection>();
            prop_assert_eq!(got.is_ok(), want_ok, "{:?}", got);
            if let Ok(p) = got {
                prop_assert_eq!((p.width() as u64, p.data_shards() as u64), (k + m, k));
            } else {
                let is_range_error = matches!(got, Err(ProtectionError::ShardsOutOfRange { .. }));
                prop_assert!(is_range_error);
            }
        }
    }
}
