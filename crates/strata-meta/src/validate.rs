//! Validation of names that come from operators: volume names and NQNs.
//!
//! These checks run in the store (so nothing invalid is ever persisted) and
//! in the CLI and HTTP API (so a user hears about a bad name before anything
//! else happens). Each error says what was wrong and what is allowed.
//!
//! NQN rules follow NVMe Base Specification 2.0, section 4.5 (NVMe Qualified
//! Names): at most 223 bytes of UTF-8, and either the UUID form
//! `nqn.2014-08.org.nvmexpress:uuid:<uuid>` or the domain form
//! `nqn.<yyyy>-<mm>.<reverse domain>[:<anything>]`. The Linux kernel accepts
//! any string up to 223 bytes; being stricter here catches typos such as
//! `nqn2026-11...` before a host fails to connect.

/// The longest volume name, in characters (all ASCII, so also bytes).
pub const MAX_VOLUME_NAME_LEN: usize = 64;

/// The longest NQN, in bytes (NVMe Base 2.0, 4.5; `NVMF_NQN_SIZE` is this plus a NUL).
pub const MAX_NQN_LEN: usize = 223;

/// The well-known discovery subsystem NQN; no volume may be served under it.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// The prefix of the NQN a volume gets when none is given: the volume name follows.
pub const DEFAULT_NQN_PREFIX: &str = "nqn.2026-11.io.strata:";

/// Why a volume name was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty.
    #[error("volume name is empty; use 1 to 64 characters of A-Z a-z 0-9 . _ -")]
    Empty,
    /// The name is longer than [`MAX_VOLUME_NAME_LEN`].
    #[error("volume name is {len} characters long; the maximum is {max}", max = MAX_VOLUME_NAME_LEN)]
    TooLong {
        /// The length that was given, in characters.
        len: usize,
    },
    /// The name holds a character outside `[A-Za-z0-9._-]`.
    #[error(
        "volume name {name:?} contains {ch:?} at position {position}; \
         only A-Z a-z 0-9 . _ - are allowed"
    )]
    InvalidChar {
        /// The rejected name.
        name: String,
        /// The first offending character.
        ch: char,
        /// Its position, in characters from 0.
        position: usize,
    },
    /// The name starts with `.` or `-`.
    #[error("volume name {name:?} starts with {first:?}; it must start with A-Z a-z 0-9 or _")]
    BadFirstChar {
        /// The rejected name.
        name: String,
        /// Its first character.
        first: char,
    },
}

/// Why an NQN was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NqnError {
    /// The NQN is longer than [`MAX_NQN_LEN`] bytes.
    #[error("NQN is {len} bytes long; the maximum is {max} bytes", max = MAX_NQN_LEN)]
    TooLong {
        /// The length that was given, in bytes.
        len: usize,
    },
    /// The NQN does not start with `nqn.`.
    #[error(
        "NQN {nqn:?} does not start with \"nqn.\"; use the form \
         nqn.yyyy-mm.reverse.domain:identifier, e.g. nqn.2026-11.io.strata:vol1"
    )]
    MissingPrefix {
        /// The rejected NQN.
        nqn: String,
    },
    /// The `yyyy-mm` date after `nqn.` is missing or malformed.
    #[error(
        "NQN {nqn:?} lacks a valid yyyy-mm date after \"nqn.\" (month 01-12); \
         use the form nqn.yyyy-mm.reverse.domain:identifier"
    )]
    BadDate {
        /// The rejected NQN.
        nqn: String,
    },
    /// The reverse domain name after the date is missing or malformed.
    #[error(
        "NQN {nqn:?} lacks a reverse domain name after the date (letters, digits, '.' and '-', \
         e.g. io.strata); use the form nqn.yyyy-mm.reverse.domain:identifier"
    )]
    BadDomain {
        /// The rejected NQN.
        nqn: String,
    },
    /// The UUID form is used but what follows `:uuid:` is not a UUID.
    #[error(
        "NQN {nqn:?} uses the UUID form but the UUID is malformed; write \
         nqn.2014-08.org.nvmexpress:uuid:xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx in hex"
    )]
    BadUuid {
        /// The rejected NQN.
        nqn: String,
    },
    /// The NQN holds a control character or whitespace, or has an empty
    /// identifier after the `:`.
    #[error(
        "NQN {nqn:?} has an empty identifier after ':' or contains whitespace or control \
         characters; use printable characters only"
    )]
    BadIdentifier {
        /// The rejected NQN.
        nqn: String,
    },
    /// The NQN is the well-known discovery NQN, which no volume may use.
    #[error("NQN {nqn:?} is the NVMe discovery subsystem's; pick another NQN for a volume")]
    Reserved {
        /// The rejected NQN.
        nqn: String,
    },
}

/// Checks a volume name: 1 to 64 characters of `[A-Za-z0-9._-]`, not
/// starting with `.` or `-`.
///
/// ```
/// use strata_meta::validate_volume_name;
/// assert!(validate_volume_name("pg-data_01.v2").is_ok());
/// assert!(validate_volume_name("-x").is_err());
/// ```
///
/// # Errors
///
/// [`NameError`] names the rule that was broken.
pub fn validate_volume_name(name: &str) -> Result<(), NameError> {
    let Some(first) = name.chars().next() else {
        return Err(NameError::Empty);
    };
    let len = name.chars().count();
    if len > MAX_VOLUME_NAME_LEN {
        return Err(NameError::TooLong { len });
    }
    if let Some((position, ch)) =
        name.chars().enumerate().find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(NameError::InvalidChar { name: name.to_owned(), ch, position });
    }
    if first == '.' || first == '-' {
        return Err(NameError::BadFirstChar { name: name.to_owned(), first });
    }
    Ok(())
}

/// Checks an NQN (subsystem or host) against NVMe Base 2.0 section 4.5.
///
/// This does not reject [`DISCOVERY_NQN`]; [`validate_subsystem_nqn`] does.
///
/// ```
/// use strata_meta::validate_nqn;
/// assert!(validate_nqn("nqn.2026-11.io.strata:vol1").is_ok());
/// assert!(validate_nqn("nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e").is_ok());
/// assert!(validate_nqn("iqn.2026-11.io.strata:vol1").is_err());
/// ```
///
/// # Errors
///
/// [`NqnError`] names the rule that was broken.
pub fn validate_nqn(nqn: &str) -> Result<(), NqnError> {
    let owned = || nqn.to_owned();
    if nqn.len() > MAX_NQN_LEN {
        return Err(NqnError::TooLong { len: nqn.len() });
    }
    let Some(rest) = nqn.strip_prefix("nqn.") else {
        return Err(NqnError::MissingPrefix { nqn: owned() });
    };
    if nqn.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(NqnError::BadIdentifier { nqn: owned() });
    }
    if let Some(uuid) = rest.strip_prefix("2014-08.org.nvmexpress:uuid:") {
        return if is_uuid_text(uuid) { Ok(()) } else { Err(NqnError::BadUuid { nqn: owned() }) };
    }
    // Domain form: yyyy-mm.domain[:identifier]
    let date_ok = rest.len() >= 8
        && rest.as_bytes()[..4].iter().all(u8::is_ascii_digit)
        && rest.as_bytes()[4] == b'-'
        && rest.as_bytes()[5..7].iter().all(u8::is_ascii_digit)
        && matches!(&rest[5..7], "01" | "02" | "03" | "04" | "05" | "06" | "07" | "08" | "09" | "10" | "11" | "12")
        && rest.as_bytes()[7] == b'.';
    if !date_ok {
        return Err(NqnError::BadDate { nqn: owned() });
    }
    let after_date = &rest[8..];
    let (domain, ident) = match after_date.split_once(':') {
        Some((d, i)) => (d, Some(i)),
        None => (after_date, None),
    };
    let domain_ok = !domain.is_empty()
        && domain
            .split('.')
            .all(|label| !label.is_empty() && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    if !domain_ok {
        return Err(NqnError::BadDomain { nqn: owned() });
    }
    if ident == Some("") {
        return Err(NqnError::BadIdentifier { nqn: owned() });
    }
    Ok(())
}

/// Checks an NQN that a volume's subsystem will be served under: a valid NQN
/// ([`validate_nqn`]) that is not [`DISCOVERY_NQN`].
///
/// # Errors
///
/// [`NqnError`] names the rule that was broken.
pub fn validate_subsystem_nqn(nqn: &str) -> Result<(), NqnError> {
    validate_nqn(nqn)?;
    if nqn == DISCOVERY_NQN {
        return Err(NqnError::Reserved { nqn: nqn.to_owned() });
    }
    Ok(())
}

/// The NQN a volume gets when its creator names none:
/// `nqn.2026-11.io.strata:<name>`.
pub fn default_nqn(volume_name: &str) -> String {
    format!("{DEFAULT_NQN_PREFIX}{volume_name}")
}

/// Whether `s` is the 36-character textual form of a UUID (8-4-4-4-12 hex).
fn is_uuid_text(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_names_pass() {
        for n in ["a", "vol1", "pg-data_01.v2", "_x", "9", &"a".repeat(64)] {
            assert_eq!(validate_volume_name(n), Ok(()), "{n}");
        }
    }

    #[test]
    fn bad_names_say_which_rule() {
        assert_eq!(validate_volume_name(""), Err(NameError::Empty));
        assert_eq!(validate_volume_name(&"a".repeat(65)), Err(NameError::TooLong { len: 65 }));
        assert!(matches!(validate_volume_name("a/b"), Err(NameError::InvalidChar { ch: '/', position: 1, .. })));
        assert!(matches!(validate_volume_name("a b"), Err(NameError::InvalidChar { ch: ' ', .. })));
        assert!(matches!(validate_volume_name("é"), Err(NameError::InvalidChar { ch: 'é', .. })));
        assert!(matches!(validate_volume_name(".hidden"), Err(NameError::BadFirstChar { first: '.', .. })));
        assert!(matches!(validate_volume_name("-rf"), Err(NameError::BadFirstChar { first: '-', .. })));
        assert!(matches!(validate_volume_name(".."), Err(NameError::BadFirstChar { .. })));
    }

    #[test]
    fn good_nqns_pass() {
        for n in [
            "nqn.2026-11.io.strata:vol1",
            "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950E",
            "nqn.2014-08.org.nvmexpress.discovery",
            "nqn.2016-06.io.spdk:cnode1",
            "nqn.1992-01.com.example:a:b:c",
            "nqn.2026-11.io.strata",
        ] {
            assert_eq!(validate_nqn(n), Ok(()), "{n}");
        }
        let long = format!("nqn.2026-11.io.strata:{}", "x".repeat(MAX_NQN_LEN - 22));
        assert_eq!(long.len(), MAX_NQN_LEN);
        assert_eq!(validate_nqn(&long), Ok(()));
    }

    #[test]
    fn bad_nqns_say_which_rule() {
        let long = format!("nqn.2026-11.io.strata:{}", "x".repeat(MAX_NQN_LEN - 21));
        assert_eq!(validate_nqn(&long), Err(NqnError::TooLong { len: MAX_NQN_LEN + 1 }));
        type IsExpected = fn(&NqnError) -> bool;
        let cases: &[(&str, IsExpected)] = &[
            ("iqn.2026-11.io.strata:x", |e| matches!(e, NqnError::MissingPrefix { .. })),
            ("", |e| matches!(e, NqnError::MissingPrefix { .. })),
            ("nqn2026-11.io.strata:x", |e| matches!(e, NqnError::MissingPrefix { .. })),
            ("nqn.26-11.io.strata:x", |e| matches!(e, NqnError::BadDate { .. })),
            ("nqn.2026-13.io.strata:x", |e| matches!(e, NqnError::BadDate { .. })),
            ("nqn.2026-11io.strata:x", |e| matches!(e, NqnError::BadDate { .. })),
            ("nqn.2026-11.:x", |e| matches!(e, NqnError::BadDomain { .. })),
            ("nqn.2026-11.io..strata:x", |e| matches!(e, NqnError::BadDomain { .. })),
            ("nqn.2026-11.io_strata:x", |e| matches!(e, NqnError::BadDomain { .. })),
            ("nqn.2026-11.io.strata:", |e| matches!(e, NqnError::BadIdentifier { .. })),
            ("nqn.2026-11.io.strata:a b", |e| matches!(e, NqnError::BadIdentifier { .. })),
            ("nqn.2026-11.io.strata:a\0", |e| matches!(e, NqnError::BadIdentifier { .. })),
            ("nqn.2014-08.org.nvmexpress:uuid:1234", |e| matches!(e, NqnError::BadUuid { .. })),
        ];
        for (nqn, is_expected) in cases {
            let err = validate_nqn(nqn).expect_err(nqn);
            assert!(is_expected(&err), "{nqn}: {err:?}");
        }
    }

    #[test]
    fn discovery_nqn_cannot_serve_a_volume() {
        assert!(matches!(validate_subsystem_nqn(DISCOVERY_NQN), Err(NqnError::Reserved { .. })));
        assert_eq!(validate_subsystem_nqn(&default_nqn("vol1")), Ok(()));
    }

    #[test]
    fn every_valid_name_gives_a_valid_default_nqn() {
        let longest = "a".repeat(MAX_VOLUME_NAME_LEN);
        for n in ["a", "_x", "a.b-c_d", longest.as_str()] {
            assert_eq!(validate_subsystem_nqn(&default_nqn(n)), Ok(()), "{n}");
        }
    }

    #[test]
    fn non_ascii_never_panics() {
        // Slicing at byte offsets after "nqn." must not split a character.
        for n in ["nqn.é", "nqn.2026-é", "nqn.2026-1é", "nqn.2026-11é", "nqn.ééééé"] {
            assert!(validate_nqn(n).is_err(), "{n}");
        }
    }
}
