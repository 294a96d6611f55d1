//! Reading a sysfs tree under a root: attributes, directory listings and
//! symlink resolution, plus the PCI path conventions.
//!
//! Everything here is relative to a root so that tests run on recorded
//! trees (`tests/data/`) as well as on `/sys`. The kernel's links are
//! relative (`../../devices/pci0000:00/...`), so resolving them inside a
//! recorded tree lands inside the tree; a link that resolves outside the
//! root is treated as absent.
//!
//! Invariant: nothing here panics on file contents; a missing or
//! malformed attribute is `None`.

use std::cmp::Ordering;
use std::path::{Component, Path, PathBuf};

use crate::TopoError;

/// A sysfs tree rooted at a canonical directory.
#[derive(Debug, Clone)]
pub(crate) struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    /// Opens the tree at `root`.
    pub(crate) fn open(root: &Path) -> Result<Self, TopoError> {
        let canon =
            std::fs::canonicalize(root).map_err(|source| TopoError::Root { path: root.to_path_buf(), source })?;
        if !canon.is_dir() {
            return Err(TopoError::NotADirectory { path: root.to_path_buf() });
        }
        Ok(Self { root: canon })
    }

    /// The absolute path of `rel` in the tree.
    pub(crate) fn path(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }

    /// The attribute `rel`, trimmed; `None` if missing, unreadable or not
    /// UTF-8 (sysfs refuses some reads, such as `speed` of a link that is
    /// down, with an error).
    pub(crate) fn attr(&self, rel: &Path) -> Option<String> {
        let text = std::fs::read_to_string(self.path(rel)).ok()?;
        Some(text.trim().to_owned())
    }

    /// The attribute `rel` as a hex number (`0x030200`).
    pub(crate) fn attr_hex(&self, rel: &Path) -> Option<u32> {
        let text = self.attr(rel)?;
        let digits = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).unwrap_or(&text);
        u32::from_str_radix(digits, 16).ok()
    }

    /// The attribute `rel` as a signed decimal.
    pub(crate) fn attr_i64(&self, rel: &Path) -> Option<i64> {
        self.attr(rel)?.parse().ok()
    }

    /// The names in directory `rel`, in natural order (`eth2` before
    /// `eth10`). A directory that does not exist is empty: a kernel without
    /// the nvme or infiniband module has no such class.
    pub(crate) fn list(&self, rel: &Path) -> Result<Vec<String>, TopoError> {
        let dir = self.path(rel);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(TopoError::ReadDir { path: dir, source }),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| TopoError::ReadDir { path: dir.clone(), source })?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        names.sort_by(|a, b| natural_cmp(a, b));
        Ok(names)
    }

    /// Where `rel` (usually a symlink) leads, relative to the root; `None`
    /// if it does not exist or leaves the tree.
    pub(crate) fn resolve(&self, rel: &Path) -> Option<PathBuf> {
        let canon = std::fs::canonicalize(self.path(rel)).ok()?;
        canon.strip_prefix(&self.root).ok().map(Path::to_path_buf)
    }

    /// The final name of symlink `rel` (a driver link), if any.
    pub(crate) fn link_name(&self, rel: &Path) -> Option<String> {
        let target = std::fs::read_link(self.path(rel)).ok()?;
        target.file_name()?.to_str().map(str::to_owned)
    }
}

/// Whether `s` is a PCI function address, `DDDD:BB:DD.F` in hex. The
/// domain may be longer than four digits: devices behind an Intel VMD
/// live in domains such as `10000`.
pub(crate) fn is_pci_address(s: &str) -> bool {
    let Some((domain, rest)) = s.split_once(':') else { return false };
    let b = rest.as_bytes();
    is_domain(domain)
        && b.len() == 7
        && b[2] == b':'
        && b[5] == b'.'
        && b.iter().enumerate().all(|(i, c)| matches!(i, 2 | 5) || c.is_ascii_hexdigit())
}

/// Whether `s` names a PCI root bus directory, `pciDDDD:BB`.
pub(crate) fn is_root_complex(s: &str) -> bool {
    let Some((domain, bus)) = s.strip_prefix("pci").and_then(|r| r.split_once(':')) else { return false };
    is_domain(domain) && bus.len() == 2 && bus.bytes().all(|c| c.is_ascii_hexdigit())
}

fn is_domain(d: &str) -> bool {
    (4..=8).contains(&d.len()) && d.bytes().all(|c| c.is_ascii_hexdigit())
}

/// Where a resolved device path sits on PCI: the directory of the last
/// PCI function on it (a NIC's `device` may be a virtio device below its
/// PCI function) and the root complex it hangs from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PciPath {
    /// Path of the PCI function's directory, relative to the root.
    pub(crate) function_dir: PathBuf,
    /// Its address, `0000:17:00.0`.
    pub(crate) address: String,
    /// The `pci0000:16` component, if the path has one.
    pub(crate) root_complex: Option<String>,
}

/// Finds the PCI function and root complex on a resolved path; `None` if
/// no component is a PCI address (platform and virtual devices).
pub(crate) fn pci_path(resolved: &Path) -> Option<PciPath> {
    let mut dir = PathBuf::new();
    let mut found = None;
    let mut root_complex = None;
    for comp in resolved.components() {
        let Component::Normal(name) = comp else { continue };
        dir.push(name);
        let Some(name) = name.to_str() else { continue };
        // The first root bus is the host bridge; a later one is a
        // domain behind it (Intel VMD), not a root complex of its own.
        if is_root_complex(name) {
            root_complex.get_or_insert_with(|| name.to_owned());
        } else if is_pci_address(name) {
            found = Some((dir.clone(), name.to_owned()));
        }
    }
    let (function_dir, address) = found?;
    Some(PciPath { function_dir, address, root_complex })
}

/// Compares names so that digit runs compare as numbers: `nvme2` <
/// `nvme10`, `node9` < `node10`.
pub(crate) fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let na = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let nb = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (da, db) = (trim_zeros(&a[..na]), trim_zeros(&b[..nb]));
                let ord = da.len().cmp(&db.len()).then_with(|| da.cmp(db));
                if ord != Ordering::Equal {
                    return ord;
                }
                a = &a[na..];
                b = &b[nb..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let n = d.iter().take_while(|&&c| c == b'0').count();
    &d[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_function_and_root_complex_are_found_below_bridges() {
        let p = pci_path(Path::new("devices/pci0000:16/0000:16:02.0/0000:17:00.0/net/eth0")).unwrap();
        assert_eq!(p.address, "0000:17:00.0");
        assert_eq!(p.root_complex.as_deref(), Some("pci0000:16"));
        assert_eq!(p.function_dir, Path::new("devices/pci0000:16/0000:16:02.0/0000:17:00.0"));
    }

    #[test]
    fn virtio_device_maps_to_its_pci_function() {
        let p = pci_path(Path::new("devices/pci0000:00/0000:00:03.0/virtio2")).unwrap();
        assert_eq!(p.address, "0000:00:03.0");
    }

    #[test]
    fn drive_behind_vmd_keeps_the_host_root_complex() {
        let p =
            pci_path(Path::new("devices/pci0000:00/0000:00:0e.0/pci10000:00/10000:00:02.0/10000:01:00.0/nvme/nvme0"))
                .unwrap();
        assert_eq!(p.address, "10000:01:00.0");
        assert_eq!(p.root_complex.as_deref(), Some("pci0000:00"));
    }

    #[test]
    fn virtual_devices_have_no_pci_path() {
        assert!(pci_path(Path::new("devices/virtual/nvme-fabrics/ctl/nvme4")).is_none());
        assert!(!is_pci_address("0000:17:00"));
        assert!(!is_root_complex("pci_bus"));
    }

    #[test]
    fn names_sort_naturally() {
        let mut v = vec!["nvme10", "nvme2", "nvme1", "eth0"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["eth0", "nvme1", "nvme2", "nvme10"]);
    }
}
