//! The machine a benchmark ran on, for reports: strata version and git
//! commit (embedded at build time by `build.rs`), kernel, CPU model, core
//! count, hostname; and UTC timestamps in RFC 3339.
//!
//! Everything is read from `/proc` rather than through `uname(2)` and
//! `gethostname(2)`, so this module needs no `unsafe`. Whatever cannot be
//! read is recorded as "unknown": a report with a missing CPU model is
//! still worth writing.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The strata version this crate belongs to.
pub const STRATA_VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit this crate was built from, or "unknown".
pub const GIT_COMMIT: &str = env!("STRATA_GIT_COMMIT");

const UNKNOWN: &str = "unknown";

/// Where a benchmark ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemInfo {
    /// strata version.
    pub strata_version: String,
    /// git commit strata was built from ("unknown" outside a checkout).
    pub git_commit: String,
    /// Kernel, as `uname -srvm` prints it.
    pub kernel: String,
    /// CPU model name.
    pub cpu_model: String,
    /// CPUs this process may run on.
    pub cores: u32,
    /// Host name.
    pub hostname: String,
}

fn read_trimmed(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The CPU model from the text of `/proc/cpuinfo` (x86 `model name`, or
/// the `cpu model`/`Hardware`/`uarch` lines other architectures use).
pub fn cpu_model_from(cpuinfo: &str) -> Option<String> {
    for key in ["model name", "cpu model", "Hardware", "uarch", "cpu"] {
        for line in cpuinfo.lines() {
            if let Some((k, v)) = line.split_once(':')
                && k.trim() == key
                && !v.trim().is_empty()
            {
                return Some(v.trim().to_string());
            }
        }
    }
    None
}

impl SystemInfo {
    /// Reads the running machine.
    pub fn collect() -> SystemInfo {
        let kernel = match (read_trimmed("/proc/sys/kernel/ostype"), read_trimmed("/proc/sys/kernel/osrelease")) {
            (Some(os), Some(rel)) => {
                let ver = read_trimmed("/proc/sys/kernel/version").unwrap_or_default();
                format!("{os} {rel} {ver} {}", std::env::consts::ARCH).split_whitespace().collect::<Vec<_>>().join(" ")
            }
            _ => format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        };
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| cpu_model_from(&s))
            .unwrap_or_else(|| UNKNOWN.into());
        let cores = std::thread::available_parallelism().map_or(0, |n| u32::try_from(n.get()).unwrap_or(u32::MAX));
        SystemInfo {
            strata_version: STRATA_VERSION.into(),
            git_commit: GIT_COMMIT.into(),
            kernel,
            cpu_model,
            cores,
            hostname: read_trimmed("/proc/sys/kernel/hostname").unwrap_or_else(|| UNKNOWN.into()),
        }
    }
}

/// Formats a time as RFC 3339 UTC with milliseconds:
/// `2026-11-29T20:01:02.345Z`. Times before 1970 print as the epoch.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days);
    format!("{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z", rem / 3600, rem % 3600 / 60, rem % 60, d.subsec_millis())
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian
/// calendar (H. Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (leap day) 12:34:56.789
        let t = UNIX_EPOCH + Duration::from_millis(951_827_696_789);
        assert_eq!(rfc3339(t), "2000-02-29T12:34:56.789Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_798_761_599); // last second of 2026
        assert_eq!(rfc3339(t), "2026-12-31T23:59:59.000Z");
    }

    #[test]
    fn cpu_model_is_found_on_several_architectures() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\n";
        assert_eq!(cpu_model_from(x86).as_deref(), Some("Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"));
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n\nHardware\t: Ampere Altra\n";
        assert_eq!(cpu_model_from(arm).as_deref(), Some("Ampere Altra"));
        assert_eq!(cpu_model_from("processor : 0\nmodel name :   \n"), None);
        assert_eq!(cpu_model_from(""), None);
    }

    #[test]
    fn collect_reads_this_machine() {
        let s = SystemInfo::collect();
        assert_eq!(s.strata_version, STRATA_VERSION);
        assert!(!s.git_commit.is_empty());
        assert!(s.cores >= 1);
        assert!(s.kernel.starts_with("Linux "), "{}", s.kernel);
        assert!(!s.hostname.is_empty());
    }
}
