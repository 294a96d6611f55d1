//! Drive specs and store configuration.
//!
//! A drive spec is the string an operator writes in the node config or on
//! the command line: `PATH[:SIZE]` for a sparse file or a block device, and
//! `mem:SIZE` for a volatile RAM drive. Parsing looks at the file system
//! once, to tell a block device (used whole) from a file.

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::StoreError;

/// Default extent size: 1 MiB.
pub const DEFAULT_EXTENT_SIZE: u32 = 1 << 20;
/// Smallest extent size accepted (one 4 KiB block).
pub const MIN_EXTENT_SIZE: u32 = 4096;
/// Largest extent size accepted (1 GiB).
pub const MAX_EXTENT_SIZE: u32 = 1 << 30;

/// What backs one drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriveKind {
    /// A regular file, created sparse with `size` bytes if it does not
    /// exist. An existing formatted file keeps its size.
    File {
        /// The file.
        path: PathBuf,
        /// Size for a new file; required when the file does not exist.
        size: Option<u64>,
    },
    /// A block device, used whole.
    BlockDevice {
        /// The device node.
        path: PathBuf,
    },
    /// Volatile RAM: contents are lost when the process exits. Memory is
    /// taken lazily as data is written. For benchmarks and tests.
    Mem {
        /// Capacity in bytes.
        size: u64,
    },
}

/// One drive of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveSpec {
    /// What backs it.
    pub kind: DriveKind,
}

impl DriveSpec {
    /// A label for logs and stats: the path, or `mem:SIZE`.
    pub fn label(&self) -> String {
        match &self.kind {
            DriveKind::File { path, .. } | DriveKind::BlockDevice { path } => path.display().to_string(),
            DriveKind::Mem { size } => format!("mem:{size}"),
        }
    }
}

impl FromStr for DriveSpec {
    type Err = StoreError;

    /// Parses `mem:SIZE`, `PATH:SIZE` or `PATH`. A `PATH` naming an existing
    /// block device is used whole (a size is refused); any other path is a
    /// file. `SIZE` is in the project's size syntax
    /// ([`strata_block::parse_size`]): `4096`, `512K`, `512M`, `8G`, `1.5T`,
    /// `1GiB`, `64MB` (all powers of 1024).
    fn from_str(s: &str) -> Result<DriveSpec, StoreError> {
        let bad = |reason: String| StoreError::BadDriveSpec { spec: s.to_owned(), reason };
        if s.is_empty() {
            return Err(bad("empty; expected PATH[:SIZE] or mem:SIZE".into()));
        }
        if let Some(size) = s.strip_prefix("mem:") {
            let size = drive_size(size).map_err(bad)?;
            return Ok(DriveSpec { kind: DriveKind::Mem { size } });
        }
        if s == "mem" {
            return Err(bad("a mem drive needs a size, e.g. mem:8G".into()));
        }
        // A trailing `:SIZE` is a size only if it parses as one; otherwise
        // the colon belongs to the path (rare, but legal on Linux).
        let (path, size) = match s.rsplit_once(':') {
            Some((p, sz)) if !p.is_empty() && sz.starts_with(|c: char| c.is_ascii_digit()) => {
                (p, Some(drive_size(sz).map_err(bad)?))
            }
            _ => (s, None),
        };
        let path = PathBuf::from(path);
        let meta = std::fs::metadata(&path);
        if let Ok(meta) = &meta {
            if meta.file_type().is_block_device() {
                if size.is_some() {
                    return Err(bad(format!(
                        "{} is a block device, which is used whole; drop the :SIZE",
                        path.display()
                    )));
                }
                return Ok(DriveSpec { kind: DriveKind::BlockDevice { path } });
            }
            if !meta.file_type().is_file() {
                return Err(bad(format!("{} is neither a regular file nor a block device", path.display())));
            }
        }
        if meta.is_err() && size.is_none() {
            return Err(bad(format!(
                "{} does not exist; give a size to create it, e.g. {}:8G",
                path.display(),
                path.display()
            )));
        }
        Ok(DriveSpec { kind: DriveKind::File { path, size } })
    }
}

/// A drive size: the project's size syntax ([`strata_block::parse_size`]:
/// binary units K..E, optional `B`/`iB`, any case, exact fractions), and
/// not zero.
fn drive_size(s: &str) -> Result<u64, String> {
    match strata_block::parse_size(s) {
        Ok(0) => Err(format!("size {s:?} is zero")),
        Ok(v) => Ok(v),
        Err(e) => Err(e.to_string()),
    }
}

/// Configuration of a [`crate::Store`].
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The drives to pool. Default: none (open fails).
    pub drives: Vec<DriveSpec>,
    /// Allocation unit in bytes: a power of two between 4 KiB and 1 GiB,
    /// recorded in each drive's superblock. Default: 1 MiB.
    pub extent_size: u32,
    /// Format a drive that holds unknown, non-zero data at offset 0,
    /// destroying it. Default: false.
    pub force_format: bool,
    /// When a drive file's file system refuses `O_DIRECT`, fall back to
    /// buffered I/O with `fdatasync` (with a warning) instead of failing.
    /// Default: false.
    pub allow_buffered: bool,
    /// Use io_uring for file and block-device drives; when false, or when
    /// io_uring is unavailable, a pread/pwrite thread serves each drive.
    /// Default: true.
    pub use_io_uring: bool,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            drives: Vec::new(),
            extent_size: DEFAULT_EXTENT_SIZE,
            force_format: false,
            allow_buffered: false,
            use_io_uring: true,
        }
    }
}

impl StoreConfig {
    /// A default configuration over `drives`.
    pub fn new(drives: Vec<DriveSpec>) -> StoreConfig {
        StoreConfig { drives, ..StoreConfig::default() }
    }

    pub(crate) fn validate(&self) -> Result<(), StoreError> {
        if self.drives.is_empty() {
            return Err(StoreError::BadConfig("no drives configured".into()));
        }
        let e = self.extent_size;
        if !e.is_power_of_two() || !(MIN_EXTENT_SIZE..=MAX_EXTENT_SIZE).contains(&e) {
            return Err(StoreError::BadConfig(format!(
                "extent_size {e} must be a power of two between {MIN_EXTENT_SIZE} and {MAX_EXTENT_SIZE}"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drive_sizes_use_the_shared_parser_and_refuse_zero() {
        assert_eq!(drive_size("8G"), Ok(8 << 30));
        assert_eq!(drive_size("64mb"), Ok(64 << 20));
        assert!(drive_size("0").unwrap_err().contains("zero"));
        assert!(drive_size("").unwrap_err().contains("empty"));
        assert!(drive_size("8X").unwrap_err().contains("unknown unit"));
        assert!(drive_size("99999999999P").unwrap_err().contains("too large"));
    }

    #[test]
    fn mem_and_file_specs_parse() {
        let m: DriveSpec = "mem:8G".parse().unwrap();
        assert_eq!(m.kind, DriveKind::Mem { size: 8 << 30 });
        let f: DriveSpec = "/nonexistent-dir/d0.img:1G".parse().unwrap();
        assert_eq!(f.kind, DriveKind::File { path: "/nonexistent-dir/d0.img".into(), size: Some(1 << 30) });
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.img");
        std::fs::write(&p, b"").unwrap();
        let e: DriveSpec = p.to_str().unwrap().parse().unwrap();
        assert_eq!(e.kind, DriveKind::File { path: p, size: None });
    }

    #[test]
    fn bad_specs_are_rejected_with_reasons() {
        let err = |s: &str| s.parse::<DriveSpec>().unwrap_err().to_string();
        assert!(err("").contains("empty"));
        assert!(err("mem").contains("needs a size"));
        assert!(err("mem:lots").contains("number"));
        assert!(err("/nonexistent-dir/d0.img").contains("does not exist"));
        assert!(err("/tmp/x.img:8Q").contains("unknown unit"));
        assert!(err("/tmp").contains("neither a regular file"));
    }

    #[test]
    fn block_device_is_used_whole() {
        // /dev/loop-control is a char device; look for any block device.
        let Some(dev) = std::fs::read_dir("/dev").ok().and_then(|mut d| {
            d.find_map(|e| {
                let e = e.ok()?;
                e.file_type().ok()?.is_block_device().then(|| e.path())
            })
        }) else {
            return;
        };
        let s: DriveSpec = dev.to_str().unwrap().parse().unwrap();
        assert_eq!(s.kind, DriveKind::BlockDevice { path: dev.clone() });
        let with_size = format!("{}:1G", dev.display());
        assert!(with_size.parse::<DriveSpec>().unwrap_err().to_string().contains("used whole"));
    }

    #[test]
    fn config_validation_checks_extent_size() {
        let mut c = StoreConfig::new(vec!["mem:1G".parse().unwrap()]);
        c.validate().unwrap();
        c.extent_size = 3 << 20;
        assert!(c.validate().is_err());
        c.extent_size = 2048;
        assert!(c.validate().is_err());
        assert!(StoreConfig::default().validate().is_err());
    }
}
