//! Placement checks and pinning advice over a [`Topology`].
//!
//! The model: strata serves each local NVMe drive through the serving
//! NICs ([`Plan::nics`]; by default every NIC backed by a device). A
//! drive is served from its own NUMA node when a serving NIC sits there;
//! otherwise its data crosses the inter-socket link on every I/O, which
//! is flagged ([`Flag::DrivesAcrossNuma`]). On a GPU host the same holds
//! for the GPUs: storage traffic for a GPU whose node holds no serving
//! NIC lands in the other socket's memory first ([`Flag::GpusAcrossNuma`]).
//!
//! The advice follows from the same assignment: one `strata serve` per
//! node that serves drives, pinned to the CPUs of that node (the node of
//! its NIC) with `--runtime per-core --io-threads N`; benchmark clients
//! (`strata bench`, fio) pinned to the node of the GPUs they stand in
//! for. Commands name real options (docs/operations.md,
//! docs/benchmarking.md); addresses the host cannot know are left as
//! `<...>` placeholders.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::sysfs::{is_pci_address, natural_cmp};
use crate::{CpuList, NvmeController, PciDevice, Topology};

/// What the operator intends, as far as the analysis needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The NICs strata serves (or a GPU host reaches its targets)
    /// through. Default (empty): every NIC backed by a device.
    pub nics: Vec<String>,
}

/// The devices of one NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeGroup {
    /// The node; `None` gathers devices whose node is unknown.
    pub node: Option<u32>,
    /// Its CPUs, if known.
    pub cpus: Option<CpuList>,
    /// GPUs, by PCI address.
    pub gpus: Vec<String>,
    /// NICs, by name.
    pub nics: Vec<String>,
    /// Local NVMe drives, by controller name.
    pub drives: Vec<String>,
    /// RDMA devices, by name.
    pub rdma: Vec<String>,
}

/// The devices behind one PCIe root complex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RootComplexGroup {
    /// `pci0000:16`.
    pub name: String,
    /// The NUMA node of its devices (the first one known).
    pub node: Option<u32>,
    /// GPUs, by PCI address.
    pub gpus: Vec<String>,
    /// NICs, by name.
    pub nics: Vec<String>,
    /// Local NVMe drives, by controller name.
    pub drives: Vec<String>,
}

/// A placement problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Flag {
    /// Drives on `node` are served through NICs on other nodes only.
    DrivesAcrossNuma {
        /// The drives' node.
        node: u32,
        /// The drives.
        drives: Vec<String>,
        /// The NIC that serves them.
        nic: String,
        /// That NIC's node.
        nic_node: u32,
    },
    /// GPUs on `node` have no serving NIC on their node.
    GpusAcrossNuma {
        /// The GPUs' node.
        node: u32,
        /// The GPUs, by PCI address.
        gpus: Vec<String>,
        /// The serving NICs, all on other nodes.
        nics: Vec<String>,
    },
    /// On a machine with several nodes, the kernel does not know the node
    /// of these devices (`numa_node` is -1): firmware left it out.
    UnknownNuma {
        /// The devices (names or PCI addresses).
        devices: Vec<String>,
    },
    /// A NIC named in the plan does not exist or has no device.
    NoSuchNic {
        /// The name given.
        name: String,
    },
    /// There are local drives but no NIC backed by a device to serve them.
    NoNic,
}

impl std::fmt::Display for Flag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DrivesAcrossNuma { node, drives, nic, nic_node } => write!(
                f,
                "cross-NUMA: {} on node {node} would be served through {nic} on node {nic_node}; \
                 every I/O crosses the inter-socket link (use a NIC on node {node}, or move the NIC or the drives)",
                drives.join(", ")
            ),
            Self::GpusAcrossNuma { node, gpus, nics } => write!(
                f,
                "cross-NUMA: {} GPU(s) on node {node} ({}) have no serving NIC on their node (serving: {}); \
                 storage traffic for them lands on the other socket first",
                gpus.len(),
                gpus.join(", "),
                nics.join(", ")
            ),
            Self::UnknownNuma { devices } => write!(
                f,
                "unknown NUMA node (numa_node = -1) for {}: firmware does not say; placement cannot be checked",
                devices.join(", ")
            ),
            Self::NoSuchNic { name } => write!(f, "no NIC {name} backed by a device"),
            Self::NoNic => f.write_str("local NVMe drives but no NIC backed by a device to serve them"),
        }
    }
}

/// What a piece of advice is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Topic {
    /// Running `strata serve`.
    Serve,
    /// Running benchmark clients (`strata bench`, fio).
    Bench,
    /// There are no GPUs.
    NoGpu,
    /// General remarks.
    Note,
}

/// One piece of advice: what to do, and the commands that do it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Advice {
    /// What it is about.
    pub topic: Topic,
    /// The node it concerns, if one.
    pub node: Option<u32>,
    /// The advice in words.
    pub summary: String,
    /// Commands or configuration lines that follow it.
    pub commands: Vec<String>,
}

/// The analysis of a topology.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Devices by NUMA node (an unknown-node group last, if any).
    pub nodes: Vec<NodeGroup>,
    /// Devices by PCIe root complex.
    pub root_complexes: Vec<RootComplexGroup>,
    /// The NICs taken as serving (the plan's, or all).
    pub serving_nics: Vec<String>,
    /// Placement problems; empty when the placement is sound.
    pub flags: Vec<Flag>,
    /// What to do.
    pub advice: Vec<Advice>,
}

/// Groups the devices of `topo`, checks their placement against `plan`
/// and gives pinning advice.
pub fn analyze(topo: &Topology, plan: &Plan) -> Report {
    let mut flags = Vec::new();
    let serving: Vec<(&str, Option<u32>)> = if plan.nics.is_empty() {
        topo.nics.iter().map(|n| (n.name.as_str(), n.pci.as_ref().and_then(|p| topo.node_of(p)))).collect()
    } else {
        let mut v = Vec::new();
        for name in &plan.nics {
            match topo.nics.iter().find(|n| &n.name == name) {
                Some(n) => v.push((n.name.as_str(), n.pci.as_ref().and_then(|p| topo.node_of(p)))),
                None => flags.push(Flag::NoSuchNic { name: name.clone() }),
            }
        }
        v
    };
    let nodes = node_groups(topo);
    let root_complexes = root_complex_groups(topo);

    let node_of = |pci: Option<&PciDevice>| pci.and_then(|p| topo.node_of(p));
    let unknown: Vec<String> = topo
        .gpus
        .iter()
        .filter(|g| topo.node_of(&g.pci).is_none())
        .map(|g| g.pci.address.clone())
        .chain(
            topo.nics.iter().filter(|n| n.pci.is_some() && node_of(n.pci.as_ref()).is_none()).map(|n| n.name.clone()),
        )
        .chain(
            topo.local_drives()
                .filter(|d| d.pci.is_some() && node_of(d.pci.as_ref()).is_none())
                .map(|d| d.name.clone()),
        )
        .collect();
    if !unknown.is_empty() {
        flags.push(Flag::UnknownNuma { devices: unknown });
    }

    // Which node's NIC serves each drive: its own node's if there is one,
    // else the first serving NIC with a known node (flagged).
    let nic_on = |node: u32| serving.iter().find(|(_, n)| *n == Some(node)).map(|(name, _)| *name);
    let fallback = serving.iter().find_map(|&(name, n)| n.map(|n| (name, n)));
    let mut instances: BTreeMap<u32, (Vec<&str>, Vec<&NvmeController>)> = BTreeMap::new();
    let mut crossing: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let drives: Vec<&NvmeController> = topo.local_drives().collect();
    if !drives.is_empty() && serving.is_empty() && plan.nics.is_empty() {
        flags.push(Flag::NoNic);
    }
    for d in &drives {
        let dn = node_of(d.pci.as_ref());
        let at = match dn.and_then(|n| nic_on(n).map(|_| n)) {
            Some(n) => Some(n),
            None => {
                if let (Some(dn), Some((_, nn))) = (dn, fallback) {
                    crossing.entry(dn).or_default().push(d.name.clone());
                    Some(nn)
                } else {
                    fallback.map(|(_, nn)| nn).or(dn)
                }
            }
        };
        if let Some(at) = at {
            instances.entry(at).or_default().1.push(d);
        }
    }
    if let Some((nic, nic_node)) = fallback {
        for (node, drives) in crossing {
            flags.push(Flag::DrivesAcrossNuma { node, drives, nic: nic.to_owned(), nic_node });
        }
    }
    for (n, (nics, _)) in instances.iter_mut() {
        nics.extend(serving.iter().filter(|(_, nn)| *nn == Some(*n)).map(|(name, _)| *name));
    }

    // GPUs: flag nodes with GPUs and no serving NIC.
    let mut gpu_nodes: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for g in &topo.gpus {
        if let Some(n) = topo.node_of(&g.pci) {
            gpu_nodes.entry(n).or_default().push(g.pci.address.clone());
        }
    }
    if !serving.is_empty() {
        for (&node, gpus) in &gpu_nodes {
            if nic_on(node).is_none() {
                flags.push(Flag::GpusAcrossNuma {
                    node,
                    gpus: gpus.clone(),
                    nics: serving.iter().map(|(n, _)| (*n).to_owned()).collect(),
                });
            }
        }
    }

    let mut advice = Vec::new();
    serve_advice(topo, &instances, &mut advice);
    bench_advice(topo, &gpu_nodes, fallback, &mut advice);
    if topo.numa_nodes.len() == 1 {
        advice.push(Advice {
            topic: Topic::Note,
            node: None,
            summary: "one NUMA node: every device is local to every CPU; no cross-socket placement to fix".into(),
            commands: Vec::new(),
        });
    }
    Report {
        nodes,
        root_complexes,
        serving_nics: serving.iter().map(|(n, _)| (*n).to_owned()).collect(),
        flags,
        advice,
    }
}

/// `taskset -c CPUS` for a node, or `numactl` when its CPUs are unknown.
fn pin_prefix(topo: &Topology, node: u32) -> (String, Option<usize>) {
    match topo.cpus_of(node).filter(|c| !c.is_empty()) {
        Some(cpus) => (format!("taskset -c {cpus}"), Some(cpus.len())),
        None => (format!("numactl --cpunodebind={node} --membind={node}"), None),
    }
}

fn serve_advice(
    topo: &Topology,
    instances: &BTreeMap<u32, (Vec<&str>, Vec<&NvmeController>)>,
    advice: &mut Vec<Advice>,
) {
    if instances.is_empty() {
        return;
    }
    let several = instances.len() > 1;
    for (&node, (nics, drives)) in instances {
        let (pin, ncpus) = pin_prefix(topo, node);
        let mut cmd = format!("{pin} strata serve --runtime per-core");
        if let Some(n) = ncpus {
            cmd.push_str(&format!(" --io-threads {n}"));
        }
        if several {
            cmd.push_str(&format!(" --data-dir /var/lib/strata/node{node} --http <api-addr-{node}>"));
        }
        for d in drives {
            for ns in &d.namespaces {
                cmd.push_str(&format!(" --drive /dev/{}", ns.name));
            }
        }
        let nic = nics.first().copied();
        match nic {
            Some(nic) => cmd.push_str(&format!(" --listen <{nic}-address>:4420")),
            None => cmd.push_str(" --listen <address>:4420"),
        }
        let names: Vec<&str> = drives.iter().map(|d| d.name.as_str()).collect();
        let via = if nics.is_empty() { String::new() } else { format!(" through {}", nics.join(", ")) };
        let cpus = topo.cpus_of(node).map(|c| format!(" {c}")).unwrap_or_default();
        let mut commands = vec![cmd];
        if let Some(cpus) = topo.cpus_of(node).filter(|c| !c.is_empty()) {
            commands.push(format!("systemd unit: CPUAffinity={cpus} NUMAPolicy=bind NUMAMask={node}"));
        }
        advice.push(Advice {
            topic: Topic::Serve,
            node: Some(node),
            summary: format!(
                "serve {}{via} from node {node}: pin strata to node {node}'s CPUs{cpus}, one per-core runtime per CPU{}",
                names.join(", "),
                if several { "; one strata serve per node, each with its own data dir, API and listen address" } else { "" }
            ),
            commands,
        });
    }
}

fn bench_advice(
    topo: &Topology,
    gpu_nodes: &BTreeMap<u32, Vec<String>>,
    nic: Option<(&str, u32)>,
    advice: &mut Vec<Advice>,
) {
    let fabrics_ns = topo
        .fabrics_controllers()
        .flat_map(|c| c.namespaces.iter())
        .map(|ns| format!("/dev/{}", ns.name))
        .next()
        .unwrap_or_else(|| "/dev/<nvme-of-namespace>".into());
    let commands = |node: u32| {
        let (pin, ncpus) = pin_prefix(topo, node);
        let jobs = ncpus.unwrap_or(4).clamp(1, 8);
        vec![
            format!("{pin} strata bench --target tcp://<target>:4420/<nqn> --jobs {jobs} --iodepth 32"),
            format!(
                "{pin} fio --name=read --filename={fabrics_ns} --direct=1 --ioengine=io_uring --rw=randread --bs=4k --iodepth=32 --numjobs={jobs}"
            ),
        ]
    };
    if gpu_nodes.is_empty() {
        let mut a = Advice {
            topic: Topic::NoGpu,
            node: None,
            summary: "no GPUs on this machine: nothing to place storage traffic near".into(),
            commands: Vec::new(),
        };
        if let Some((name, node)) = nic {
            a.summary.push_str(&format!(
                "; run benchmark clients on node {node}, the node of {name} (on the target machine itself, \
                 give the client CPUs of its own, apart from strata serve's)"
            ));
            a.commands = commands(node);
        }
        advice.push(a);
        return;
    }
    for (&node, gpus) in gpu_nodes {
        advice.push(Advice {
            topic: Topic::Bench,
            node: Some(node),
            summary: format!(
                "benchmark for the {} GPU(s) on node {node} from node {node}'s CPUs, as the GPU workload would read",
                gpus.len()
            ),
            commands: commands(node),
        });
    }
}

/// Adds a name in order: interface and controller names naturally
/// (`nvme2` before `nvme10`), PCI addresses (fixed-width hex) as text.
fn push_sorted(v: &mut Vec<String>, s: String) {
    v.push(s);
    v.sort_by(|a, b| if is_pci_address(a) && is_pci_address(b) { a.cmp(b) } else { natural_cmp(a, b) });
}

/// Which list of a group a device goes in.
#[derive(Clone, Copy)]
enum Kind {
    Gpu,
    Nic,
    Drive,
    Rdma,
}

/// Every device with a PCI function: its kind, name and function.
fn placed(topo: &Topology) -> Vec<(Kind, String, &PciDevice)> {
    let mut v: Vec<(Kind, String, &PciDevice)> = Vec::new();
    v.extend(topo.gpus.iter().map(|g| (Kind::Gpu, g.pci.address.clone(), &g.pci)));
    v.extend(topo.nics.iter().filter_map(|n| Some((Kind::Nic, n.name.clone(), n.pci.as_ref()?))));
    v.extend(topo.local_drives().filter_map(|d| Some((Kind::Drive, d.name.clone(), d.pci.as_ref()?))));
    v.extend(topo.rdma.iter().filter_map(|r| Some((Kind::Rdma, r.name.clone(), r.pci.as_ref()?))));
    v
}

fn node_groups(topo: &Topology) -> Vec<NodeGroup> {
    let mut groups: BTreeMap<Option<u32>, NodeGroup> = BTreeMap::new();
    for n in &topo.numa_nodes {
        groups.insert(Some(n.id), empty_group(Some(n.id), n.cpus.clone()));
    }
    for (kind, name, pci) in placed(topo) {
        let node = topo.node_of(pci);
        let g = groups.entry(node).or_insert_with(|| empty_group(node, None));
        let list = match kind {
            Kind::Gpu => &mut g.gpus,
            Kind::Nic => &mut g.nics,
            Kind::Drive => &mut g.drives,
            Kind::Rdma => &mut g.rdma,
        };
        push_sorted(list, name);
    }
    // BTreeMap orders None first; the unknown group reads better last.
    let mut out: Vec<NodeGroup> = groups.into_values().collect();
    out.sort_by_key(|g| (g.node.is_none(), g.node));
    out
}

fn empty_group(node: Option<u32>, cpus: Option<CpuList>) -> NodeGroup {
    NodeGroup { node, cpus, gpus: Vec::new(), nics: Vec::new(), drives: Vec::new(), rdma: Vec::new() }
}

fn root_complex_groups(topo: &Topology) -> Vec<RootComplexGroup> {
    let mut groups: BTreeMap<String, RootComplexGroup> = BTreeMap::new();
    for (kind, name, pci) in placed(topo) {
        let Some(rc) = pci.root_complex.clone() else { continue };
        let g = groups.entry(rc.clone()).or_insert_with(|| RootComplexGroup {
            name: rc,
            node: None,
            gpus: Vec::new(),
            nics: Vec::new(),
            drives: Vec::new(),
        });
        g.node = g.node.or_else(|| topo.node_of(pci));
        match kind {
            Kind::Gpu => push_sorted(&mut g.gpus, name),
            Kind::Nic => push_sorted(&mut g.nics, name),
            Kind::Drive => push_sorted(&mut g.drives, name),
            Kind::Rdma => {}
        }
    }
    let mut out: Vec<RootComplexGroup> = groups.into_values().collect();
    out.sort_by(|a, b| natural_cmp(&a.name, &b.name));
    out
}
