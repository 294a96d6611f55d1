//! `strata topology` end to end on the recorded sysfs trees of
//! `strata-topo` (`--sysfs`): the human report names the devices, the
//! flags and the advice; `--json` carries the same; a missing tree is an
//! error with exit 1, never a panic; the real `/sys` parses.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_strata");

fn tree(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../strata-topo/tests/data").join(name)
}

fn topology(args: &[&str]) -> Output {
    Command::new(BIN).arg("topology").args(args).output().expect("run strata topology")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn two_socket_report_flags_a_nic_serving_drives_across_sockets() {
    let _group = strata_testkit::group(module_path!());
    let root = tree("two-socket");
    let root = root.to_str().expect("utf-8 path");
    let out = topology(&["--sysfs", root, "--nic", "ens3f0np0"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("NUMA node 0: CPUs 0-31,64-95 (64)"), "{s}");
    assert!(s.contains("  GPU   0000:18:00.0 10de:2330 NVIDIA, pci0000:15"), "{s}");
    assert!(s.contains("! cross-NUMA: nvme0, nvme1 on node 0 would be served through ens3f0np0 on node 1"), "{s}");
    assert!(s.contains("taskset -c 32-63,96-127 strata serve --runtime per-core --io-threads 64"), "{s}");
    assert!(s.contains("nvme4      tcp, traddr=10.0.0.5"), "{s}");

    let out = topology(&["--sysfs", root, "--json"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["topology"]["gpus"].as_array().map(Vec::len), Some(8));
    assert_eq!(v["report"]["flags"], Value::Array(Vec::new()));
    assert_eq!(v["report"]["nodes"][1]["nics"], serde_json::json!(["ens2f0np0", "ens3f0np0"]));
}

#[test]
fn one_socket_report_says_there_is_no_gpu() {
    let _group = strata_testkit::group(module_path!());
    let root = tree("one-socket");
    let out = topology(&["--sysfs", root.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("GPUs: none on this machine."), "{s}");
    assert!(s.contains("Placement: no cross-NUMA placement (serving NICs: enp3s0f0)."), "{s}");
}

#[test]
fn missing_sysfs_tree_is_an_error() {
    let _group = strata_testkit::group(module_path!());
    let out = topology(&["--sysfs", "/nonexistent/strata-topo"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot read the topology under /nonexistent/strata-topo"));
}

#[test]
fn live_sysfs_parses() {
    let _group = strata_testkit::group(module_path!());
    if !std::path::Path::new("/sys/devices").is_dir() {
        return;
    }
    let out = topology(&["--json"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert!(v["topology"]["numa_nodes"].as_array().is_some_and(|n| !n.is_empty()));
}
