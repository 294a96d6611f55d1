//! Human units, as written in job files and on the command line.
//!
//! - Durations are read and written by the project's one duration parser,
//!   [`strata_block::parse_duration`]: a number and a unit (`250us`,
//!   `500ms`, `10s`, `1.5m`, `1h30m`). A bare number is refused there:
//!   "10" could mean seconds or milliseconds, and a benchmark that runs
//!   1000 times longer than meant, or a latency gate 1000 times looser, is
//!   worse than an error.
//! - Sizes are parsed by the project's one size parser,
//!   [`strata_block::parse_size`], so a job file, the bench command line,
//!   volume sizes and drive specs read `4k`, `1.5G` or `1P` alike (binary
//!   units in any case, `K`/`KB`/`KiB` spellings, exact fractions). This
//!   module only formats sizes, in fio's short style (`4k`, `128k`).

pub use strata_block::{DurationError, format_duration, parse_duration};

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
    fn sizes_round_trip() {
        for b in [0, 512, 4096, 1 << 20, 3 << 30, 12345] {
            assert_eq!(strata_block::parse_size(&format_size(b)), Ok(b));
        }
        assert_eq!(format_size(4096), "4k");
    }
}
