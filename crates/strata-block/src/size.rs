//! Human-readable byte sizes, shared by the store (drive specs), the CLI
//! and the HTTP API.
//!
//! # Choice: every unit is binary
//!
//! `K`, `M`, `G`, `T`, `P` and `E` are powers of 1024, whether written bare
//! (`8G`), with `B` (`8GB`) or with `iB` (`8GiB`), in any letter case. Storage
//! sizes here become block counts and must be multiples of 4096; a
//! 1000-based "GB" almost never is (8 GB = 8,000,000,000 bytes is not a
//! multiple of 4096), so reading "GB" as decimal would turn the obvious
//! `--size 8GB` into an error or, worse, into a volume 7% smaller than the
//! operator meant. qemu-img, fio and LVM read these suffixes the same way.
//! [`format_size`] always prints the unambiguous `KiB`/`MiB`/... spelling.
//!
//! A plain number is bytes (`4096`, `4096B`). A decimal fraction is accepted
//! when the result is a whole number of bytes (`1.5G` yes, `1.1K` no).
//! Whitespace between number and unit is allowed, so
//! `parse_size(&format_size(n))` returns `n` whenever `format_size` was exact.

/// Why a size string was rejected by [`parse_size`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// The string was empty or only whitespace.
    #[error("size is empty; write a number with an optional unit, e.g. 4096, 512M, 8G or 1.5TiB")]
    Empty,
    /// The string does not start with a decimal number.
    #[error("size {input:?} does not start with a number; write e.g. 4096, 512M, 8G or 1.5TiB")]
    NotANumber {
        /// The rejected input.
        input: String,
    },
    /// The unit after the number is not one this parser knows.
    #[error(
        "size {input:?} has unknown unit {unit:?}; use B, K, M, G, T, P or E \
         (optionally followed by B or iB; all are powers of 1024)"
    )]
    UnknownUnit {
        /// The rejected input.
        input: String,
        /// The unit text that was not recognised.
        unit: String,
    },
    /// The number has a fraction that does not come to a whole number of bytes.
    #[error("size {input:?} is not a whole number of bytes; use a smaller unit or fewer decimals")]
    FractionalBytes {
        /// The rejected input.
        input: String,
    },
    /// The value does not fit in 64 bits.
    #[error("size {input:?} is too large; the maximum is {max} bytes", max = u64::MAX)]
    TooLarge {
        /// The rejected input.
        input: String,
    },
}

/// Binary units from largest to smallest: (short name, shift).
const UNITS: [(&str, u32); 6] = [("E", 60), ("P", 50), ("T", 40), ("G", 30), ("M", 20), ("K", 10)];

/// The most fraction digits accepted; more would not change the verdict
/// for any real size and would risk overflow in the exact arithmetic below.
const MAX_FRACTION_DIGITS: usize = 18;

/// Parses a size such as `"8G"`, `"8GiB"`, `"512M"`, `"1.5T"` or `"4096"` into
/// bytes. All units are powers of 1024 (see the module doc for why).
///
/// ```
/// use strata_block::parse_size;
/// assert_eq!(parse_size("8G").unwrap(), 8 << 30);
/// assert_eq!(parse_size("8 GiB").unwrap(), 8 << 30);
/// assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
/// assert_eq!(parse_size("4096").unwrap(), 4096);
/// ```
///
/// # Errors
///
/// [`SizeError`] says what was wrong: empty input, no leading number, an
/// unknown unit, a fraction that is not a whole number of bytes, or a value
/// above `u64::MAX`.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let input = s.trim();
    if input.is_empty() {
        return Err(SizeError::Empty);
    }
    let num_end = input.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(input.len());
    let (number, unit) = input.split_at(num_end);
    let unit = unit.trim_start();
    let not_a_number = || SizeError::NotANumber { input: input.to_owned() };
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() || frac_part.contains('.') || number.ends_with('.') {
        return Err(not_a_number());
    }

    let shift =
        unit_shift(unit).ok_or_else(|| SizeError::UnknownUnit { input: input.to_owned(), unit: unit.to_owned() })?;
    let too_large = || SizeError::TooLarge { input: input.to_owned() };

    // Exact arithmetic in u128: value = (int + frac / 10^n) << shift.
    let int: u128 = int_part.parse().map_err(|_| too_large())?;
    let whole = int.checked_shl(shift).filter(|v| *v >> shift == int);
    let mut total = whole.ok_or_else(too_large)?;
    let frac_digits = frac_part.trim_end_matches('0');
    if !frac_digits.is_empty() {
        if frac_digits.len() > MAX_FRACTION_DIGITS {
            return Err(SizeError::FractionalBytes { input: input.to_owned() });
        }
        // Both fit: frac < 10^18 < 2^60 and shift <= 60, so the product < 2^120.
        let frac: u128 = frac_digits.parse().map_err(|_| not_a_number())?;
        let denom = 10u128.pow(frac_digits.len() as u32);
        let scaled = frac << shift;
        if !scaled.is_multiple_of(denom) {
            return Err(SizeError::FractionalBytes { input: input.to_owned() });
        }
        total = total.checked_add(scaled / denom).ok_or_else(too_large)?;
    }
    u64::try_from(total).map_err(|_| too_large())
}

/// The shift for a unit suffix, or `None` if the suffix is unknown.
fn unit_shift(unit: &str) -> Option<u32> {
    let u = unit.to_ascii_uppercase();
    if u.is_empty() || u == "B" {
        return Some(0);
    }
    UNITS.iter().find_map(|(name, shift)| {
        let rest = u.strip_prefix(name)?;
        matches!(rest, "" | "B" | "IB").then_some(*shift)
    })
}

/// Formats a byte count for people, exactly: `"8 GiB"`, `"1.5 GiB"`,
/// `"1025 MiB"`, `"512 B"`.
///
/// Uses the largest binary unit in which the value is a number with at most
/// two decimals, so the text is never rounded and [`parse_size`] always reads
/// it back to the same number. Volume sizes are multiples of 512, so in
/// practice the figure stays short.
///
/// ```
/// use strata_block::format_size;
/// assert_eq!(format_size(8 << 30), "8 GiB");
/// assert_eq!(format_size(3 << 29), "1.5 GiB");
/// assert_eq!(format_size(1025 << 20), "1025 MiB");
/// assert_eq!(format_size(1000), "1000 B");
/// ```
pub fn format_size(bytes: u64) -> String {
    for (name, shift) in UNITS {
        if bytes >> shift == 0 {
            continue;
        }
        let unit = 1u128 << shift;
        // `bytes * 100` in u128 cannot overflow.
        let scaled = u128::from(bytes) * 100;
        if !scaled.is_multiple_of(unit) {
            continue;
        }
        let hundredths = scaled / unit;
        let (whole, frac) = (hundredths / 100, hundredths % 100);
        return match frac {
            0 => format!("{whole} {name}iB"),
            f if f % 10 == 0 => format!("{whole}.{} {name}iB", f / 10),
            f => format!("{whole}.{f:02} {name}iB"),
        };
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_are_bytes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size(" 0 "), Ok(0));
    }

    #[test]
    fn every_unit_spelling_is_binary() {
        for s in ["8G", "8g", "8GB", "8gb", "8GiB", "8gib", "8 GiB", "8 G"] {
            assert_eq!(parse_size(s), Ok(8 << 30), "{s}");
        }
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("2P"), Ok(2 << 50));
        assert_eq!(parse_size("15E"), Ok(15 << 60));
    }

    #[test]
    fn fractions_that_come_to_whole_bytes_are_accepted() {
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("0.5K"), Ok(512));
        assert_eq!(parse_size("1.50000G"), Ok(3 << 29));
        assert_eq!(parse_size("2.0"), Ok(2));
    }

    #[test]
    fn fractions_of_a_byte_are_rejected() {
        assert!(matches!(parse_size("1.1K"), Err(SizeError::FractionalBytes { .. })));
        assert!(matches!(parse_size("1.5"), Err(SizeError::FractionalBytes { .. })));
        assert!(matches!(parse_size("1.0000000000000000001G"), Err(SizeError::FractionalBytes { .. })));
    }

    #[test]
    fn malformed_sizes_say_what_is_wrong() {
        assert_eq!(parse_size("  "), Err(SizeError::Empty));
        for s in ["G", "-1G", ".5G", "1.G", "1..5G", "1.2.3G", "abc"] {
            assert!(matches!(parse_size(s), Err(SizeError::NotANumber { .. })), "{s}");
        }
        for s in ["8X", "8GG", "8Gi", "8 gigabytes", "8G 1"] {
            assert!(matches!(parse_size(s), Err(SizeError::UnknownUnit { .. })), "{s}");
        }
    }

    #[test]
    fn values_above_u64_are_rejected() {
        assert!(matches!(parse_size("16E"), Err(SizeError::TooLarge { .. })));
        assert!(matches!(parse_size("99999999999999999999999999999999999999999"), Err(SizeError::TooLarge { .. })));
        assert_eq!(parse_size(&u64::MAX.to_string()), Ok(u64::MAX));
    }

    #[test]
    fn format_uses_the_largest_unit() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(1024), "1 KiB");
        assert_eq!(format_size(8 << 30), "8 GiB");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size((1 << 30) + (1 << 30) / 4), "1.25 GiB");
        assert_eq!(format_size((1 << 30) + (1 << 30) / 8), "1152 MiB");
        assert_eq!(format_size((1 << 30) + 1), "1073741825 B");
        assert_eq!(format_size(u64::MAX), "18446744073709551615 B");
        assert_eq!(format_size(15 << 60), "15 EiB");
    }

    #[test]
    fn exact_formats_parse_back() {
        for n in [512, 4096, 8 << 30, 3 << 29, 5 << 40, (1 << 20) * 1025] {
            let s = format_size(n);
            assert_eq!(parse_size(&s), Ok(n), "{s}");
        }
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,40}") {
            let _ = parse_size(&s);
        }

        #[test]
        fn whole_units_print_without_decimals(n in 1u64..1024, shift in proptest::sample::select(vec![0u32, 10, 20, 30, 40, 50])) {
            let s = format_size(n << shift);
            proptest::prop_assert!(!s.contains('.'), "{}", s);
        }

        #[test]
        fn format_always_parses_back(n in proptest::num::u64::ANY, shift in 0u32..64) {
            let bytes = n >> shift;
            proptest::prop_assert_eq!(parse_size(&format_size(bytes)), Ok(bytes));
        }
    }
}
