//! Reading a [`Topology`] from a sysfs tree.
//!
//! Where each thing comes from (paths relative to the root, `/sys`):
//!
//! | what | where |
//! |---|---|
//! | NUMA nodes | `devices/system/node/node*/cpulist` (no nodes: one node 0 with `devices/system/cpu/online`) |
//! | PCI functions | `bus/pci/devices/*`, links into `devices/pci*/...`: `class`, `vendor`, `device`, `numa_node`, `driver` |
//! | root complex | the `pciDDDD:BB` component of the resolved path |
//! | GPUs | PCI functions that [`PciDevice::is_gpu`] |
//! | NICs | `class/net/*/device` (none: virtual, skipped), `operstate`, `speed` |
//! | NVMe | `class/nvme/*`: `transport`, `address`, `model`, `subsysnqn`, `device`; namespaces are the `nvme*n*` entries of the controller's directory |
//! | RDMA | `class/infiniband/*/device`, `ports/*/link_layer` |
//!
//! A missing class directory is an empty list (no nvme module loaded is
//! not an error); a missing attribute is `None`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::sysfs::{Sysfs, natural_cmp, pci_path};
use crate::{CpuList, Gpu, Nic, NumaNode, NvmeController, NvmeNamespace, NvmeTransport, PciDevice, RdmaDevice};
use crate::{TopoError, Topology, vendor_name};

/// Reads the whole topology from the sysfs tree at `root` (`/sys` on a
/// live system).
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("strata-topo-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(dir.join("devices/system/node/node0")).unwrap();
/// # std::fs::write(dir.join("devices/system/node/node0/cpulist"), "0-3\n").unwrap();
/// let topo = strata_topo::read_topology(&dir).unwrap();
/// assert_eq!(topo.numa_nodes[0].cpus.as_ref().unwrap().to_string(), "0-3");
/// assert!(topo.gpus.is_empty());
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
///
/// # Errors
///
/// [`TopoError`] if the root cannot be opened or a directory that exists
/// cannot be listed; unreadable attributes are `None` instead.
pub fn read_topology(root: &Path) -> Result<Topology, TopoError> {
    let sys = Sysfs::open(root)?;
    let mut notes = Vec::new();
    let numa_nodes = numa_nodes(&sys, &mut notes)?;
    let pci = pci_devices(&sys)?;
    let gpus = pci.values().filter(|d| d.is_gpu()).map(|d| Gpu { pci: d.clone() }).collect();
    let rdma = rdma_devices(&sys)?;
    let nics = nics(&sys, &rdma)?;
    let nvme = nvme_controllers(&sys)?;
    Ok(Topology { numa_nodes, gpus, nics, nvme, rdma, notes })
}

fn numa_nodes(sys: &Sysfs, notes: &mut Vec<String>) -> Result<Vec<NumaNode>, TopoError> {
    let dir = Path::new("devices/system/node");
    let mut nodes = Vec::new();
    for name in sys.list(dir)? {
        let Some(id) = name.strip_prefix("node").and_then(|n| n.parse::<u32>().ok()) else { continue };
        let rel = dir.join(&name).join("cpulist");
        let cpus = cpulist(sys, &rel, notes);
        nodes.push(NumaNode { id, cpus });
    }
    if nodes.is_empty() {
        // A kernel built without NUMA has no node directory: the whole
        // machine is one node.
        let cpus = cpulist(sys, Path::new("devices/system/cpu/online"), notes);
        nodes.push(NumaNode { id: 0, cpus });
    }
    nodes.sort_by_key(|n| n.id);
    Ok(nodes)
}

fn cpulist(sys: &Sysfs, rel: &Path, notes: &mut Vec<String>) -> Option<CpuList> {
    let Some(text) = sys.attr(rel) else {
        notes.push(format!("{} is missing: CPUs unknown", rel.display()));
        return None;
    };
    match CpuList::parse(&text) {
        Ok(l) => Some(l),
        Err(e) => {
            notes.push(format!("{}: {e}", rel.display()));
            None
        }
    }
}

/// The PCI function whose directory is `function_dir` (relative to the
/// root), with the root complex found on the way.
fn pci_device(sys: &Sysfs, function_dir: &Path, address: &str, root_complex: Option<String>) -> PciDevice {
    let vendor = sys.attr_hex(&function_dir.join("vendor")).and_then(|v| u16::try_from(v).ok());
    PciDevice {
        address: address.to_owned(),
        class: sys.attr_hex(&function_dir.join("class")),
        vendor,
        device: sys.attr_hex(&function_dir.join("device")).and_then(|v| u16::try_from(v).ok()),
        vendor_name: vendor.and_then(vendor_name),
        // -1 (and anything else negative or absurd) is "no affinity known".
        numa_node: sys.attr_i64(&function_dir.join("numa_node")).and_then(|n| u32::try_from(n).ok()),
        root_complex,
        driver: sys.link_name(&function_dir.join("driver")),
    }
}

/// The PCI function behind the link `rel` (a class device's `device`),
/// if it leads to one.
fn pci_behind(sys: &Sysfs, rel: &Path) -> Option<PciDevice> {
    let resolved = sys.resolve(rel)?;
    let p = pci_path(&resolved)?;
    Some(pci_device(sys, &p.function_dir, &p.address, p.root_complex))
}

fn pci_devices(sys: &Sysfs) -> Result<BTreeMap<String, PciDevice>, TopoError> {
    let dir = Path::new("bus/pci/devices");
    let mut out = BTreeMap::new();
    for name in sys.list(dir)? {
        if let Some(dev) = pci_behind(sys, &dir.join(&name)) {
            out.insert(dev.address.clone(), dev);
        }
    }
    Ok(out)
}

fn nics(sys: &Sysfs, rdma: &[RdmaDevice]) -> Result<Vec<Nic>, TopoError> {
    let dir = Path::new("class/net");
    let mut out = Vec::new();
    for name in sys.list(dir)? {
        let base = dir.join(&name);
        // Virtual interfaces (lo, bridges, bonds, veth, ifb) have no device.
        if sys.resolve(&base.join("device")).is_none() {
            continue;
        }
        let pci = pci_behind(sys, &base.join("device"));
        let rdma = match &pci {
            Some(p) => rdma
                .iter()
                .filter(|r| r.pci.as_ref().is_some_and(|rp| rp.address == p.address))
                .map(|r| r.name.clone())
                .collect(),
            None => Vec::new(),
        };
        out.push(Nic {
            operstate: sys.attr(&base.join("operstate")),
            // `speed` is -1 or refused (EINVAL) while the link is down.
            speed_mbps: sys.attr_i64(&base.join("speed")).and_then(|s| u64::try_from(s).ok()).filter(|&s| s > 0),
            name,
            pci,
            rdma,
        });
    }
    Ok(out)
}

fn nvme_controllers(sys: &Sysfs) -> Result<Vec<NvmeController>, TopoError> {
    let dir = Path::new("class/nvme");
    let mut out = Vec::new();
    for name in sys.list(dir)? {
        let base = dir.join(&name);
        let pci = pci_behind(sys, &base.join("device"));
        let transport = match sys.attr(&base.join("transport")) {
            Some(t) => NvmeTransport::parse(&t),
            None if pci.is_some() => NvmeTransport::Pcie,
            None => NvmeTransport::Unknown,
        };
        // A fabrics controller's `device` is the virtual `nvme-fabrics/ctl`:
        // no PCI function, whatever the link says.
        let pci = if transport.is_fabrics() { None } else { pci };
        let namespaces = match sys.resolve(&base) {
            Some(ctrl_dir) => namespaces(sys, &ctrl_dir)?,
            None => Vec::new(),
        };
        out.push(NvmeController {
            transport,
            pci,
            address: sys.attr(&base.join("address")).filter(|a| !a.is_empty()),
            model: sys.attr(&base.join("model")),
            subsysnqn: sys.attr(&base.join("subsysnqn")),
            namespaces,
            name,
        });
    }
    Ok(out)
}

/// The namespaces under a controller's directory: `nvme0n1`, or with
/// native multipath the path devices `nvme0c0n1`, reported as their head
/// `nvme0n1`.
fn namespaces(sys: &Sysfs, ctrl_dir: &Path) -> Result<Vec<NvmeNamespace>, TopoError> {
    let mut out: Vec<NvmeNamespace> = Vec::new();
    for entry in sys.list(ctrl_dir)? {
        let Some(head) = namespace_head(&entry) else { continue };
        let sectors = sys.attr(&ctrl_dir.join(&entry).join("size")).and_then(|s| s.parse::<u64>().ok());
        if out.iter().any(|n| n.name == head) {
            continue;
        }
        out.push(NvmeNamespace { name: head, size_bytes: sectors.and_then(|s| s.checked_mul(512)) });
    }
    out.sort_by(|a, b| natural_cmp(&a.name, &b.name));
    Ok(out)
}

/// `nvme0n1` -> `nvme0n1`, `nvme0c1n2` -> `nvme0n2`; anything else
/// (partitions `nvme0n1p1`, attributes) -> `None`.
fn namespace_head(name: &str) -> Option<String> {
    let rest = name.strip_prefix("nvme")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    let (ctrl, rest) = rest.split_once('n')?;
    if !digits(rest) {
        return None;
    }
    let subsys = match ctrl.split_once('c') {
        Some((s, c)) if digits(s) && digits(c) => s,
        None if digits(ctrl) => ctrl,
        _ => return None,
    };
    Some(format!("nvme{subsys}n{rest}"))
}

fn rdma_devices(sys: &Sysfs) -> Result<Vec<RdmaDevice>, TopoError> {
    let dir = Path::new("class/infiniband");
    let mut out = Vec::new();
    for name in sys.list(dir)? {
        let base = dir.join(&name);
        let ports: PathBuf = base.join("ports");
        let link_layers =
            sys.list(&ports)?.iter().filter_map(|p| sys.attr(&ports.join(p).join("link_layer"))).collect();
        out.push(RdmaDevice { pci: pci_behind(sys, &base.join("device")), link_layers, name });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_map_to_their_heads() {
        assert_eq!(namespace_head("nvme0n1").as_deref(), Some("nvme0n1"));
        assert_eq!(namespace_head("nvme3c12n2").as_deref(), Some("nvme3n2"));
        for not in ["nvme0n1p1", "nvme0", "nvme", "nvmexn1", "ng0n1", "nvme0n"] {
            assert_eq!(namespace_head(not), None, "{not}");
        }
    }
}
