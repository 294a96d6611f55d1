//! Host topology for strata: which NUMA node and PCIe root complex each
//! GPU, NIC and NVMe drive sits on, read from sysfs, with checks for
//! cross-NUMA placements and advice on pinning `strata serve` and
//! benchmark clients.
//!
//! Reading ([`read_topology`]) takes the root of a sysfs tree, `/sys` on
//! a live host or a recorded tree in tests; it never panics on file
//! contents: what cannot be read is `None`. Analysis ([`analyze`]) is a
//! pure function of the [`Topology`] and a [`Plan`]. No I/O beyond
//! reading files, no dependencies beyond serde for JSON output.
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("strata-topo-lib-{}", std::process::id()));
//! # std::fs::create_dir_all(dir.join("devices/system/node/node0")).unwrap();
//! # std::fs::write(dir.join("devices/system/node/node0/cpulist"), "0-7\n").unwrap();
//! let topo = strata_topo::read_topology(&dir)?;
//! let report = strata_topo::analyze(&topo, &strata_topo::Plan::default());
//! assert!(report.flags.is_empty());
//! assert!(report.advice.iter().any(|a| a.topic == strata_topo::Topic::NoGpu));
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), strata_topo::TopoError>(())
//! ```

mod analysis;
mod cpulist;
mod error;
mod model;
mod scan;
mod sysfs;

pub use analysis::{Advice, Flag, NodeGroup, Plan, Report, RootComplexGroup, Topic, analyze};
pub use cpulist::{CpuList, CpuListError};
pub use error::TopoError;
pub use model::{
    Gpu, Nic, NumaNode, NvmeController, NvmeNamespace, NvmeTransport, PciDevice, RdmaDevice, Topology, VENDOR_AMD,
    VENDOR_INTEL, VENDOR_NVIDIA, vendor_name,
};
pub use scan::read_topology;
