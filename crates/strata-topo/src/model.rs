//! What a host is made of, as read from sysfs: NUMA nodes, PCI functions
//! and the devices strata cares about (GPUs, NICs, NVMe controllers and
//! their namespaces, RDMA devices).
//!
//! These are plain values: reading fills them ([`crate::read_topology`]),
//! analysis only looks at them ([`crate::analyze`]). A field that could
//! not be read is `None`, never a guess; the one inference made is
//! [`Topology::node_of`], which places devices with an unknown node on the
//! only node of a one-node machine.

use serde::Serialize;

use crate::CpuList;

/// The PCI vendor ID of NVIDIA.
pub const VENDOR_NVIDIA: u16 = 0x10de;
/// The PCI vendor ID of AMD (ATI).
pub const VENDOR_AMD: u16 = 0x1002;
/// The PCI vendor ID of Intel.
pub const VENDOR_INTEL: u16 = 0x8086;

/// A name for well-known PCI vendor IDs; `None` for the rest.
pub fn vendor_name(id: u16) -> Option<&'static str> {
    Some(match id {
        VENDOR_NVIDIA => "NVIDIA",
        VENDOR_AMD => "AMD",
        VENDOR_INTEL => "Intel",
        0x15b3 => "NVIDIA Networking (Mellanox)",
        0x14e4 => "Broadcom",
        0x1077 => "QLogic/Marvell",
        0x19a2 => "Emulex",
        0x8088 => "Wangxun",
        0x19e5 => "Huawei",
        0x1dd8 => "AMD Pensando",
        0x144d => "Samsung",
        0x1e0f => "KIOXIA",
        0x1c5c => "SK hynix",
        0x15b7 => "Sandisk/WD",
        0x1344 => "Micron",
        0x1bb1 => "Seagate",
        0x1d0f => "Amazon",
        0x1af4 => "Red Hat (virtio)",
        0x1a03 => "ASPEED",
        _ => return None,
    })
}

/// A NUMA node and its CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NumaNode {
    /// The node number (`nodeN`).
    pub id: u32,
    /// Its CPUs; `None` if `cpulist` was missing or malformed.
    pub cpus: Option<CpuList>,
}

/// A PCI function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PciDevice {
    /// Address, `0000:17:00.0`.
    pub address: String,
    /// The 24-bit class code (`0x030200` is a 3D controller).
    #[serde(serialize_with = "hex_class")]
    pub class: Option<u32>,
    /// Vendor ID.
    #[serde(serialize_with = "hex_id")]
    pub vendor: Option<u16>,
    /// Device ID.
    #[serde(serialize_with = "hex_id")]
    pub device: Option<u16>,
    /// The vendor's name, for well-known IDs.
    pub vendor_name: Option<&'static str>,
    /// The NUMA node the kernel reports; `None` for `-1` (no affinity
    /// known: a one-node machine, or firmware that does not say).
    pub numa_node: Option<u32>,
    /// The root complex (`pci0000:16`) the function hangs from.
    pub root_complex: Option<String>,
    /// The bound driver, if any (`nvme`, `mlx5_core`, `nvidia`).
    pub driver: Option<String>,
}

impl PciDevice {
    /// Whether this function is a GPU (or a GPU-like accelerator): any
    /// 3D controller (class 0x0302), or a VGA or other display controller
    /// (0x0300, 0x0380) from NVIDIA, AMD or Intel, or a processing
    /// accelerator (0x1200, AMD Instinct and others). Management VGA
    /// (ASPEED BMCs, emulated VGA in VMs) is not a GPU.
    pub fn is_gpu(&self) -> bool {
        let Some(class) = self.class else { return false };
        match class >> 8 {
            0x0302 | 0x1200 => true,
            0x0300 | 0x0380 => matches!(self.vendor, Some(VENDOR_NVIDIA | VENDOR_AMD | VENDOR_INTEL)),
            _ => false,
        }
    }
}

fn hex_class<S: serde::Serializer>(v: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(&format_args!("0x{v:06x}")),
        None => s.serialize_none(),
    }
}

fn hex_id<S: serde::Serializer>(v: &Option<u16>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(&format_args!("0x{v:04x}")),
        None => s.serialize_none(),
    }
}

/// A GPU (or accelerator) on PCI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    /// Its PCI function.
    pub pci: PciDevice,
}

/// A network interface backed by a device (virtual ones are skipped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Nic {
    /// Interface name, `eth0`, `ens1f0np0`.
    pub name: String,
    /// Its PCI function; `None` for a non-PCI device (a platform NIC).
    pub pci: Option<PciDevice>,
    /// `operstate`: `up`, `down`, ...
    pub operstate: Option<String>,
    /// Link speed in Mb/s; `None` when the link is down or not reported.
    pub speed_mbps: Option<u64>,
    /// RDMA devices on the same PCI function (`mlx5_0`).
    pub rdma: Vec<String>,
}

/// How an NVMe controller is reached (`transport`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NvmeTransport {
    /// A local drive on PCIe.
    Pcie,
    /// NVMe/TCP (a remote target, strata's own protocol).
    Tcp,
    /// NVMe/RDMA.
    Rdma,
    /// NVMe/FC.
    Fc,
    /// The kernel's loopback target.
    Loop,
    /// A transport this crate does not know.
    Other(String),
    /// No `transport` attribute (old kernels): PCIe if there is a PCI
    /// device, unknown otherwise.
    Unknown,
}

impl NvmeTransport {
    /// Parses the `transport` attribute.
    pub fn parse(s: &str) -> Self {
        match s {
            "pcie" => Self::Pcie,
            "tcp" => Self::Tcp,
            "rdma" => Self::Rdma,
            "fc" => Self::Fc,
            "loop" => Self::Loop,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Whether this is an NVMe-over-Fabrics controller (a remote target).
    pub fn is_fabrics(&self) -> bool {
        matches!(self, Self::Tcp | Self::Rdma | Self::Fc | Self::Loop | Self::Other(_))
    }
}

impl std::fmt::Display for NvmeTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Pcie => "pcie",
            Self::Tcp => "tcp",
            Self::Rdma => "rdma",
            Self::Fc => "fc",
            Self::Loop => "loop",
            Self::Other(s) => s,
            Self::Unknown => "unknown",
        })
    }
}

/// An NVMe namespace (a block device, `nvme0n1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvmeNamespace {
    /// Block device name (`nvme0n1`; a multipath path `nvme0c0n1` is
    /// reported as its head `nvme0n1`).
    pub name: String,
    /// Size in bytes (`size` is in 512-byte sectors).
    pub size_bytes: Option<u64>,
}

/// An NVMe controller: a local drive or an NVMe-oF connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvmeController {
    /// Controller name, `nvme0`.
    pub name: String,
    /// How it is reached.
    pub transport: NvmeTransport,
    /// Its PCI function (local drives only).
    pub pci: Option<PciDevice>,
    /// `address`: the PCI address, or `traddr=...,trsvcid=...` for fabrics.
    pub address: Option<String>,
    /// `model`.
    pub model: Option<String>,
    /// `subsysnqn`.
    pub subsysnqn: Option<String>,
    /// Its namespaces.
    pub namespaces: Vec<NvmeNamespace>,
}

/// An RDMA (InfiniBand / RoCE) device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RdmaDevice {
    /// Device name, `mlx5_0`.
    pub name: String,
    /// Its PCI function.
    pub pci: Option<PciDevice>,
    /// Link layer of each port (`InfiniBand`, `Ethernet`), in port order.
    pub link_layers: Vec<String>,
}

/// Everything read from one sysfs tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Topology {
    /// NUMA nodes, by number. A kernel without NUMA shows one node 0.
    pub numa_nodes: Vec<NumaNode>,
    /// GPUs and accelerators, by PCI address.
    pub gpus: Vec<Gpu>,
    /// NICs backed by a device, by name.
    pub nics: Vec<Nic>,
    /// NVMe controllers, by name: local drives and NVMe-oF connections.
    pub nvme: Vec<NvmeController>,
    /// RDMA devices, by name.
    pub rdma: Vec<RdmaDevice>,
    /// What could not be read, in words (a malformed `cpulist`, ...).
    pub notes: Vec<String>,
}

impl Topology {
    /// The NUMA node of a PCI function: the reported one, or on a machine
    /// with a single node that node (the kernel reports `-1` there).
    pub fn node_of(&self, pci: &PciDevice) -> Option<u32> {
        match (pci.numa_node, self.numa_nodes.as_slice()) {
            (Some(n), _) => Some(n),
            (None, [only]) => Some(only.id),
            (None, _) => None,
        }
    }

    /// The CPUs of node `id`, if known.
    pub fn cpus_of(&self, id: u32) -> Option<&CpuList> {
        self.numa_nodes.iter().find(|n| n.id == id)?.cpus.as_ref()
    }

    /// The local (PCIe) NVMe drives.
    pub fn local_drives(&self) -> impl Iterator<Item = &NvmeController> {
        self.nvme.iter().filter(|c| !c.transport.is_fabrics())
    }

    /// The NVMe-oF controllers (connections to remote targets).
    pub fn fabrics_controllers(&self) -> impl Iterator<Item = &NvmeController> {
        self.nvme.iter().filter(|c| c.transport.is_fabrics())
    }
}
