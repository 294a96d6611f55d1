//! Human-readable durations: the project's one duration parser, shared by
//! the config file, the CLI (`strata`, `strata-chaos`), the HTTP API's
//! settings and the benchmark job files, as [`crate::size`] is for sizes.
//!
//! # Grammar
//!
//! One or more terms, each a non-negative number and a unit: `250us`,
//! `500ms`, `10s`, `1.5m`, `2h`, `1h30m`. Units are `ns`, `us` (or `µs`),
//! `ms`, `s`, `m` (or `min`) and `h`; the number may have a fraction and
//! `_` separators; spaces may stand around the whole and between a number
//! and its unit.
//!
//! # Choice: a bare number is refused, unless the caller reads it as seconds
//!
//! [`parse_duration`] refuses `10`: in a benchmark's latency gate it could
//! mean seconds or milliseconds, and a gate that is 1000 times looser than
//! meant passes silently. Settings that have always been whole seconds
//! (the pool's rebuild grace, the chaos suite's run length) read through
//! [`parse_duration_or_secs`], which takes a bare whole number as seconds
//! and everything else by the same grammar.
//!
//! Parsers never panic: overflow, negative and non-finite numbers are
//! [`DurationError`]s that name the input.

use std::time::Duration;

/// Why a duration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// Nothing was given.
    #[error("empty duration: write e.g. 10s, 500ms or 1h30m")]
    Empty,
    /// A number without a unit.
    #[error("duration {input:?} has no unit: write e.g. \"{input}s\" or \"{input}ms\"")]
    MissingUnit {
        /// What was given.
        input: String,
    },
    /// A unit this parser does not know.
    #[error("{input:?}: unknown unit {unit:?} (durations: ns, us, ms, s, m, h, e.g. 10s or 1h30m)")]
    UnknownUnit {
        /// What was given.
        input: String,
        /// The unit part.
        unit: String,
    },
    /// A term whose number is not a non-negative number.
    #[error("{input:?} is not a duration such as 10s, 500ms or 1h30m")]
    BadNumber {
        /// What was given.
        input: String,
    },
    /// The value does not fit a `Duration`.
    #[error("{input:?} is too long")]
    Overflow {
        /// What was given.
        input: String,
    },
}

/// Parses a duration such as `10s`, `500ms`, `1.5m` or `1h30m` (see the
/// module doc for the grammar).
///
/// ```
/// use std::time::Duration;
/// use strata_block::parse_duration;
/// assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
/// assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
/// assert!(parse_duration("10").is_err());
/// ```
///
/// # Errors
///
/// [`DurationError`]: empty input, a term without a unit or with an
/// unknown one, a bad number, or a total beyond `Duration::MAX`.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let input = s.trim();
    if input.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total = Duration::ZERO;
    let mut rest = input;
    while !rest.is_empty() {
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(rest.len());
        let (num, after) = rest.split_at(end);
        let after = after.trim_start();
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c.is_whitespace()).unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let value = number(num, input)?;
        let secs_per_unit = match unit {
            "" => return Err(DurationError::MissingUnit { input: input.to_string() }),
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            _ => return Err(DurationError::UnknownUnit { input: input.to_string(), unit: unit.to_string() }),
        };
        let term = Duration::try_from_secs_f64(value * secs_per_unit)
            .map_err(|_| DurationError::Overflow { input: input.to_string() })?;
        total = total.checked_add(term).ok_or_else(|| DurationError::Overflow { input: input.to_string() })?;
        rest = next.trim_start();
    }
    Ok(total)
}

/// [`parse_duration`], except that a bare whole number is seconds (`90`
/// is `90s`): for settings that have always been whole seconds.
///
/// ```
/// use std::time::Duration;
/// use strata_block::parse_duration_or_secs;
/// assert_eq!(parse_duration_or_secs("90").unwrap(), Duration::from_secs(90));
/// assert_eq!(parse_duration_or_secs("5m").unwrap(), Duration::from_secs(300));
/// ```
///
/// # Errors
///
/// As [`parse_duration`].
pub fn parse_duration_or_secs(s: &str) -> Result<Duration, DurationError> {
    match s.trim().parse::<u64>() {
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => parse_duration(s),
    }
}

/// Formats a duration the way [`parse_duration`] reads it back, in the
/// largest unit that divides it.
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

/// The value of one term's number part.
fn number(num: &str, input: &str) -> Result<f64, DurationError> {
    let bad = || DurationError::BadNumber { input: input.to_string() };
    if num.is_empty() || num.starts_with('_') {
        return Err(bad());
    }
    let v: f64 = num.replace('_', "").parse().map_err(|_| bad())?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_every_unit() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration(" 3 s "), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("1_000ms"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn terms_add_up() {
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2s500ms"), Ok(Duration::from_millis(2500)));
    }

    #[test]
    fn bad_durations_say_what_is_wrong() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(parse_duration("  "), Err(DurationError::Empty));
        assert!(matches!(parse_duration("10"), Err(DurationError::MissingUnit { .. })));
        assert!(matches!(parse_duration("1h30"), Err(DurationError::MissingUnit { .. })));
        assert!(
            matches!(parse_duration("10 fortnights"), Err(DurationError::UnknownUnit { unit, .. }) if unit == "fortnights")
        );
        assert!(matches!(parse_duration("10x"), Err(DurationError::UnknownUnit { .. })));
        assert!(matches!(parse_duration("-1s"), Err(DurationError::BadNumber { .. })));
        assert!(matches!(parse_duration("1.2.3s"), Err(DurationError::BadNumber { .. })));
        assert!(matches!(parse_duration("s"), Err(DurationError::BadNumber { .. })));
        assert!(matches!(parse_duration("m"), Err(DurationError::BadNumber { .. })));
        assert!(matches!(parse_duration("99999999999999999999999h"), Err(DurationError::Overflow { .. })));
        assert!(matches!(
            parse_duration(&format!("{}s{}s", u64::MAX / 2 + 1, u64::MAX / 2 + 1)),
            Err(DurationError::Overflow { .. })
        ));
        assert!(parse_duration("10").unwrap_err().to_string().contains("\"10s\""));
    }

    #[test]
    fn a_bare_number_is_seconds_only_where_asked() {
        assert_eq!(parse_duration_or_secs("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration_or_secs(" 600 "), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration_or_secs("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration_or_secs("500ms"), Ok(Duration::from_millis(500)));
        for bad in ["", "m", "10x", "-3s", "1.5"] {
            assert!(parse_duration_or_secs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for d in [Duration::ZERO, Duration::from_secs(10), Duration::from_millis(1500), Duration::from_nanos(3)] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }

    #[test]
    fn no_input_panics() {
        for s in ["\u{0}", "1\u{b5}", "µ", "1e400s", "NaNs", "infs", ".s", "1..s", "_1s", "1 1s"] {
            let _ = parse_duration(s);
            let _ = parse_duration_or_secs(s);
        }
    }
}
