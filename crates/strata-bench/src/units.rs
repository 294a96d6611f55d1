//! Human units, as written in job files and on the command line.
//!
//! - Durations are a number and a unit: `250us`, `500ms`, `10s`, `1.5m`,
//!   `2h` (`ns`, `us`, `ms`, `s`, `m`, `h`). A bare number is refused:
//!   "10" could mean seconds or milliseconds, and a benchmark that runs
//!   1000 times longer than meant is worse than an error.
//! - Sizes are parsed by the project's one size parser,
//!   [`strata_block::parse_size`], so a job file, the bench command line,
//!   volume sizes and drive specs read `4k`, `1.5G` or `1P` alike (binary
//!   units in any case, `K`/`KB`/`KiB` spellings, exact fractions). This
//!   module only formats sizes, in fio's short style (`4k`, `128k`).
//!
//! Parsers never panic: overflow, negative and non-finite numbers are
//! [`UnitError`]s that name the input.

use std::time::Duration;

/// Why a duration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    /// Nothing was given.
    #[error("empty value")]
    Empty,
    /// A duration without a unit.
    #[error("duration {input:?} has no unit: write e.g. \"{input}s\" or \"{input}ms\"")]
    MissingUnit {
        /// What was given.
        input: String,
    },
    /// A unit this parser does not know.
    #[error("{input:?}: unknown unit {unit:?} (durations: ns, us, ms, s, m, h)")]
    UnknownUnit {
        /// What was given.
        input: String,
        /// The unit part.
        unit: String,
    },
    /// The number part is not a non-negative number.
    #[error("{input:?} is not a non-negative number with a unit")]
    BadNumber {
        /// What was given.
        input: String,
    },
    /// The value does not fit.
    #[error("{input:?} is too large")]
    Overflow {
        /// What was given.
        input: String,
    },
}

/// Splits `"12.5ms"` into `("12.5", "ms")`.
fn split_number(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(s.len());
    (&s[..end], s[end..].trim())
}

fn number(num: &str, input: &str) -> Result<f64, UnitError> {
    let bad = || UnitError::BadNumber { input: input.to_string() };
    if num.is_empty() || num.starts_with('_') {
        return Err(bad());
    }
    let v: f64 = num.replace('_', "").parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    Ok(v)
}

/// Parses a duration such as `10s`, `500ms` or `1.5m`.
///
/// # Errors
///
/// [`UnitError`] for an empty string, a missing or unknown unit, a bad
/// number or a value beyond `Duration::MAX`.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(UnitError::Empty);
    }
    let (num, unit) = split_number(s);
    let v = number(num, s)?;
    let secs_per_unit = match unit {
        "" => return Err(UnitError::MissingUnit { input: s.to_string() }),
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(UnitError::UnknownUnit { input: s.to_string(), unit: unit.to_string() }),
    };
    Duration::try_from_secs_f64(v * secs_per_unit).map_err(|_| UnitError::Overflow { input: s.to_string() })
}

/// Formats a duration the way [`parse_duration`] reads it back.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        "0s".into()
    } else if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

/// Formats a byte count with the largest binary suffix that divides it, in
/// fio's short style (`4k`, `128k`, `1M`): a label for reports, which
/// [`strata_block::parse_size`] reads back.
pub fn format_size(bytes: u64) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "k")] {
        if bytes != 0 && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_every_unit() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration(" 3 s "), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_durations_say_what_is_wrong() {
        assert_eq!(parse_duration(""), Err(UnitError::Empty));
        assert!(matches!(parse_duration("10"), Err(UnitError::MissingUnit { .. })));
        assert!(
            matches!(parse_duration("10 fortnights"), Err(UnitError::UnknownUnit { unit, .. }) if unit == "fortnights")
        );
        assert!(matches!(parse_duration("-1s"), Err(UnitError::BadNumber { .. })));
        assert!(matches!(parse_duration("1.2.3s"), Err(UnitError::BadNumber { .. })));
        assert!(matches!(parse_duration("s"), Err(UnitError::BadNumber { .. })));
        assert!(matches!(parse_duration("99999999999999999999999h"), Err(UnitError::Overflow { .. })));
        assert!(parse_duration("10").unwrap_err().to_string().contains("\"10s\""));
    }

    #[test]
    fn formatting_round_trips() {
        for d in [Duration::ZERO, Duration::from_secs(10), Duration::from_millis(1500), Duration::from_nanos(3)] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
        for b in [0, 512, 4096, 1 << 20, 3 << 30, 12345] {
            assert_eq!(strata_block::parse_size(&format_size(b)), Ok(b));
        }
        assert_eq!(format_size(4096), "4k");
    }
}
