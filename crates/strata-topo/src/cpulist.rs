//! The kernel's CPU list format (`cpulist` files): `0-3,8-11`, `5`, or
//! empty for a node without CPUs (memory only, CXL).
//!
//! [`CpuList`] keeps the ranges as read, merged and sorted, and prints
//! them back in the same format, which is also what `taskset -c` and
//! systemd's `CPUAffinity=` accept.

use std::fmt;

/// A set of CPU numbers as inclusive ranges, sorted and merged.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuList {
    ranges: Vec<(u32, u32)>,
}

/// A `cpulist` string that is not in the kernel's format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed CPU list {text:?}")]
pub struct CpuListError {
    /// The text that was read.
    pub text: String,
}

impl CpuList {
    /// Parses `0-3,8-11` (whitespace around it is ignored; empty is the
    /// empty set).
    ///
    /// # Errors
    ///
    /// [`CpuListError`] for anything else, including a range whose end is
    /// below its start.
    pub fn parse(text: &str) -> Result<Self, CpuListError> {
        let bad = || CpuListError { text: text.to_owned() };
        let mut ranges = Vec::new();
        let trimmed = text.trim();
        if !trimmed.is_empty() {
            for part in trimmed.split(',') {
                let (lo, hi) = match part.split_once('-') {
                    Some((lo, hi)) => (lo.trim(), hi.trim()),
                    None => (part.trim(), part.trim()),
                };
                let lo: u32 = lo.parse().map_err(|_| bad())?;
                let hi: u32 = hi.parse().map_err(|_| bad())?;
                if hi < lo {
                    return Err(bad());
                }
                ranges.push((lo, hi));
            }
        }
        ranges.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match merged.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        Ok(Self { ranges: merged })
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.ranges.iter().map(|&(lo, hi)| (hi - lo) as usize + 1).sum()
    }

    /// Whether the set holds no CPU.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        self.ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&cpu))
    }
}

impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(lo, hi)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if lo == hi { write!(f, "{lo}")? } else { write!(f, "{lo}-{hi}")? }
        }
        Ok(())
    }
}

impl serde::Serialize for CpuList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_singles_round_trip() {
        let l = CpuList::parse("0-3,8-11,16\n").unwrap();
        assert_eq!(l.len(), 9);
        assert_eq!(l.to_string(), "0-3,8-11,16");
        assert!(l.contains(9) && !l.contains(4));
    }

    #[test]
    fn adjacent_and_unsorted_ranges_merge() {
        assert_eq!(CpuList::parse("4-7,0-3,9").unwrap().to_string(), "0-7,9");
    }

    #[test]
    fn empty_list_is_a_node_without_cpus() {
        let l = CpuList::parse("\n").unwrap();
        assert!(l.is_empty());
        assert_eq!(l.to_string(), "");
    }

    #[test]
    fn malformed_lists_are_rejected() {
        for bad in ["a", "3-1", "1-", "1,,2", "-1"] {
            assert!(CpuList::parse(bad).is_err(), "{bad}");
        }
    }
}
