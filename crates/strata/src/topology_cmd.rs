//! `strata topology`: where the GPUs, NICs and NVMe drives of this host
//! sit (NUMA node, PCIe root complex), which placements cross sockets,
//! and how to pin `strata serve` and benchmark clients.
//!
//! Reading and analysis live in `strata-topo`; this module only parses
//! the options and prints the result, as text or (`--json`) as
//! `{"topology": ..., "report": ...}`. Exit status: 0 whether or not
//! flags were raised (they are advice, not failures), 1 if the sysfs
//! tree cannot be read.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use strata_topo::{NvmeController, PciDevice, Plan, Report, Topic, Topology, analyze, read_topology};

/// `strata topology` arguments.
#[derive(Args, Debug)]
pub struct TopologyArgs {
    /// Print the topology and the analysis as JSON.
    #[arg(long)]
    json: bool,
    /// Root of the sysfs tree to read (a recorded copy, for another host).
    #[arg(long, value_name = "ROOT", default_value = "/sys")]
    sysfs: PathBuf,
    /// A NIC strata serves through (repeatable). Default: every NIC
    /// backed by a device. Drives and GPUs on a node without one of these
    /// NICs are flagged as cross-NUMA.
    #[arg(long, value_name = "NAME")]
    nic: Vec<String>,
}

/// Runs `strata topology`.
pub fn main(args: TopologyArgs) -> anyhow::Result<()> {
    let topo = read_topology(&args.sysfs)
        .with_context(|| format!("cannot read the topology under {}", args.sysfs.display()))?;
    let report = analyze(&topo, &Plan { nics: args.nic });
    if args.json {
        let out = serde_json::json!({ "topology": topo, "report": report });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", render(&topo, &report));
    }
    Ok(())
}

fn pci_tag(p: &PciDevice) -> String {
    let mut s = p.address.clone();
    if let (Some(v), Some(d)) = (p.vendor, p.device) {
        let _ = write!(s, " {v:04x}:{d:04x}");
    }
    if let Some(name) = p.vendor_name {
        let _ = write!(s, " {name}");
    }
    if let Some(rc) = &p.root_complex {
        let _ = write!(s, ", {rc}");
    }
    s
}

fn size(bytes: Option<u64>) -> String {
    match bytes {
        // Decimal units, as drive labels use.
        Some(b) if b >= 1_000_000_000_000 => format!("{:.2} TB", b as f64 / 1e12),
        Some(b) => format!("{:.1} GB", b as f64 / 1e9),
        None => "size unknown".into(),
    }
}

fn drive_line(c: &NvmeController) -> String {
    let mut s = format!("{:<10}", c.name);
    if let Some(p) = &c.pci {
        let _ = write!(s, " {}", pci_tag(p));
    }
    if let Some(m) = &c.model {
        let _ = write!(s, ", {m}");
    }
    for ns in &c.namespaces {
        let _ = write!(s, ", {} {}", ns.name, size(ns.size_bytes));
    }
    s
}

/// The human report: devices by node, NVMe-oF connections, root
/// complexes, flags, advice.
fn render(topo: &Topology, report: &Report) -> String {
    let mut o = String::new();
    for g in &report.nodes {
        match (g.node, &g.cpus) {
            (Some(n), Some(c)) => {
                let _ = writeln!(o, "NUMA node {n}: CPUs {c} ({})", c.len());
            }
            (Some(n), None) => {
                let _ = writeln!(o, "NUMA node {n}: CPUs unknown");
            }
            (None, _) => {
                let _ = writeln!(o, "NUMA node unknown (numa_node = -1):");
            }
        }
        if g.gpus.is_empty() && g.nics.is_empty() && g.drives.is_empty() {
            let _ = writeln!(o, "  (no GPU, NIC or NVMe drive)");
        }
        for addr in &g.gpus {
            if let Some(gpu) = topo.gpus.iter().find(|x| &x.pci.address == addr) {
                let _ = writeln!(o, "  GPU   {}", pci_tag(&gpu.pci));
            }
        }
        for name in &g.nics {
            if let Some(n) = topo.nics.iter().find(|x| &x.name == name) {
                let mut s = format!("{name:<10}");
                if let Some(p) = &n.pci {
                    let _ = write!(s, " {}", pci_tag(p));
                }
                if let Some(st) = &n.operstate {
                    let _ = write!(s, ", {st}");
                }
                if let Some(m) = n.speed_mbps {
                    let _ = write!(s, " {} Gb/s", m / 1000);
                }
                if !n.rdma.is_empty() {
                    let _ = write!(s, ", RDMA {}", n.rdma.join(" "));
                }
                let _ = writeln!(o, "  NIC   {s}");
            }
        }
        for name in &g.drives {
            if let Some(c) = topo.nvme.iter().find(|x| &x.name == name) {
                let _ = writeln!(o, "  NVMe  {}", drive_line(c));
            }
        }
    }
    let fabrics: Vec<&NvmeController> = topo.fabrics_controllers().collect();
    if !fabrics.is_empty() {
        let _ = writeln!(o, "NVMe-oF controllers (remote targets):");
        for c in fabrics {
            let mut s = format!("{:<10} {}", c.name, c.transport);
            for v in [&c.address, &c.subsysnqn].into_iter().flatten() {
                let _ = write!(s, ", {v}");
            }
            for ns in &c.namespaces {
                let _ = write!(s, ", {} {}", ns.name, size(ns.size_bytes));
            }
            let _ = writeln!(o, "  {s}");
        }
    }
    if topo.gpus.is_empty() {
        let _ = writeln!(o, "GPUs: none on this machine.");
    }
    if !report.root_complexes.is_empty() {
        let _ = writeln!(o, "Root complexes:");
        for rc in &report.root_complexes {
            let node = rc.node.map_or_else(|| "node ?".to_string(), |n| format!("node {n}"));
            let mut parts = Vec::new();
            if !rc.gpus.is_empty() {
                parts.push(format!("{} GPU", rc.gpus.len()));
            }
            if !rc.nics.is_empty() {
                parts.push(format!("NIC {}", rc.nics.join(" ")));
            }
            if !rc.drives.is_empty() {
                parts.push(format!("NVMe {}", rc.drives.join(" ")));
            }
            let _ = writeln!(o, "  {:<11} {node}: {}", rc.name, parts.join(", "));
        }
    }
    if report.flags.is_empty() {
        let _ =
            writeln!(o, "Placement: no cross-NUMA placement (serving NICs: {}).", list_or_none(&report.serving_nics));
    } else {
        let _ = writeln!(o, "Placement (serving NICs: {}):", list_or_none(&report.serving_nics));
        for f in &report.flags {
            let _ = writeln!(o, "  ! {f}");
        }
    }
    if !topo.notes.is_empty() {
        let _ = writeln!(o, "Not read:");
        for n in &topo.notes {
            let _ = writeln!(o, "  {n}");
        }
    }
    let _ = writeln!(o, "Advice:");
    for a in &report.advice {
        let tag = match a.topic {
            Topic::Serve => "serve",
            Topic::Bench => "bench",
            Topic::NoGpu => "no GPU",
            Topic::Note => "note",
        };
        let _ = writeln!(o, "  [{tag}] {}", a.summary);
        for c in &a.commands {
            let _ = writeln!(o, "      {c}");
        }
    }
    o
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() { "none".into() } else { v.join(", ") }
}
