//! The reader against the real `/sys` of the machine running the tests.
//! Counts differ from machine to machine; only what holds everywhere is
//! asserted.

use std::path::Path;

use strata_topo::{Plan, Topic, analyze, read_topology};

#[test]
fn live_sysfs_parses_and_reports_gpus_only_if_there_are_some() {
    let root = Path::new("/sys");
    if !root.join("devices").is_dir() {
        eprintln!("no sysfs here; skipped");
        return;
    }
    let t = read_topology(root).expect("/sys parses");
    assert!(!t.numa_nodes.is_empty());
    let r = analyze(&t, &Plan::default());
    // A machine without GPUs (this project's VMs, most CI runners) says so.
    assert_eq!(t.gpus.is_empty(), r.advice.iter().any(|a| a.topic == Topic::NoGpu));
    // An oracle independent of the reader: no display, 3D or accelerator
    // function from a GPU vendor, and no 3D controller or processing
    // accelerator at all, means no GPU is reported (this VM's case).
    let mut gpu_like = false;
    for entry in std::fs::read_dir(root.join("bus/pci/devices")).into_iter().flatten().flatten() {
        let read = |f: &str| std::fs::read_to_string(entry.path().join(f)).unwrap_or_default();
        let (class, vendor) = (read("class"), read("vendor"));
        let (class, vendor) = (class.trim(), vendor.trim());
        gpu_like |= class.starts_with("0x0302")
            || class.starts_with("0x12")
            || (class.starts_with("0x03") && matches!(vendor, "0x10de" | "0x1002" | "0x8086"));
    }
    if !gpu_like {
        assert!(t.gpus.is_empty(), "{:?}", t.gpus);
        assert!(r.advice.iter().any(|a| a.topic == Topic::NoGpu));
    }
}
