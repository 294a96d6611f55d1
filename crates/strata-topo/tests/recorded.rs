//! The reader and the analysis against recorded sysfs trees
//! (`tests/data/`): a one-socket storage node without GPUs, and a
//! two-socket GPU host with 8 NVIDIA GPUs, 4 drives, 3 NICs (two on
//! node 1) and an NVMe/TCP connection.

use std::path::{Path, PathBuf};

use strata_topo::{Flag, NvmeTransport, Plan, Topic, Topology, VENDOR_NVIDIA, analyze, read_topology};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn two_socket() -> Topology {
    read_topology(&data("two-socket")).expect("the two-socket tree parses")
}

fn one_socket() -> Topology {
    read_topology(&data("one-socket")).expect("the one-socket tree parses")
}

fn names<'a>(it: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    it.into_iter().collect()
}

#[test]
fn one_socket_has_one_node_two_drives_one_nic_and_no_gpu() {
    let t = one_socket();
    assert!(t.notes.is_empty(), "{:?}", t.notes);
    assert_eq!(t.numa_nodes.len(), 1);
    assert_eq!(t.numa_nodes[0].cpus.as_ref().map(ToString::to_string).as_deref(), Some("0-15"));
    // The ASPEED BMC's VGA is a display controller, not a GPU.
    assert!(t.gpus.is_empty());
    assert_eq!(names(t.nics.iter().map(|n| n.name.as_str())), ["enp3s0f0"], "lo is virtual and skipped");
    let nic = &t.nics[0];
    assert_eq!(nic.speed_mbps, Some(25000));
    assert_eq!(nic.pci.as_ref().map(|p| p.address.as_str()), Some("0000:03:00.0"));
    assert_eq!(nic.pci.as_ref().and_then(|p| p.driver.as_deref()), Some("ice"));
    assert_eq!(names(t.nvme.iter().map(|c| c.name.as_str())), ["nvme0", "nvme1"]);
    for c in &t.nvme {
        assert_eq!(c.transport, NvmeTransport::Pcie);
        let pci = c.pci.as_ref().expect("a local drive has a PCI function");
        // numa_node is -1: unknown as reported, node 0 by inference.
        assert_eq!(pci.numa_node, None);
        assert_eq!(t.node_of(pci), Some(0));
        assert_eq!(pci.root_complex.as_deref(), Some("pci0000:00"));
        assert_eq!(pci.class, Some(0x010802));
        assert_eq!(c.namespaces.len(), 1);
        assert_eq!(c.namespaces[0].size_bytes, Some(7_501_476_528 * 512));
    }
}

#[test]
fn one_socket_analysis_has_no_flags_and_says_there_is_no_gpu() {
    let t = one_socket();
    let r = analyze(&t, &Plan::default());
    assert!(r.flags.is_empty(), "{:?}", r.flags);
    assert_eq!(r.nodes.len(), 1);
    assert_eq!(r.nodes[0].drives, ["nvme0", "nvme1"]);
    assert_eq!(r.nodes[0].nics, ["enp3s0f0"]);
    let serve: Vec<_> = r.advice.iter().filter(|a| a.topic == Topic::Serve).collect();
    assert_eq!(serve.len(), 1);
    assert_eq!(
        serve[0].commands[0],
        "taskset -c 0-15 strata serve --runtime per-core --io-threads 16 --drive /dev/nvme0n1 --drive /dev/nvme1n1 \
         --listen <enp3s0f0-address>:4420"
    );
    assert_eq!(serve[0].commands[1], "systemd unit: CPUAffinity=0-15 NUMAPolicy=bind NUMAMask=0");
    let no_gpu = r.advice.iter().find(|a| a.topic == Topic::NoGpu).expect("no-GPU advice");
    assert!(no_gpu.summary.starts_with("no GPUs on this machine"), "{}", no_gpu.summary);
    assert!(no_gpu.commands[0].starts_with("taskset -c 0-15 strata bench --target"));
    assert!(r.advice.iter().any(|a| a.topic == Topic::Note && a.summary.starts_with("one NUMA node")));
}

#[test]
fn two_socket_maps_gpus_drives_and_nics_to_nodes() {
    let t = two_socket();
    assert!(t.notes.is_empty(), "{:?}", t.notes);
    let cpus: Vec<String> =
        t.numa_nodes.iter().map(|n| n.cpus.as_ref().map(ToString::to_string).unwrap_or_default()).collect();
    assert_eq!(cpus, ["0-31,64-95", "32-63,96-127"]);
    assert_eq!(t.gpus.len(), 8);
    for g in &t.gpus {
        assert_eq!(g.pci.vendor, Some(VENDOR_NVIDIA));
        assert_eq!(g.pci.vendor_name, Some("NVIDIA"));
        assert_eq!(g.pci.class, Some(0x030200));
        assert_eq!(g.pci.driver.as_deref(), Some("nvidia"));
    }
    let r = analyze(&t, &Plan::default());
    assert_eq!(r.nodes.len(), 2);
    let (n0, n1) = (&r.nodes[0], &r.nodes[1]);
    assert_eq!(n0.gpus, ["0000:18:00.0", "0000:19:00.0", "0000:3a:00.0", "0000:3b:00.0"]);
    assert_eq!(n1.gpus, ["0000:9a:00.0", "0000:9b:00.0", "0000:ba:00.0", "0000:bb:00.0"]);
    assert_eq!(n0.drives, ["nvme0", "nvme1"]);
    assert_eq!(n1.drives, ["nvme2", "nvme3"]);
    assert_eq!(n0.nics, ["ens1f0np0"]);
    assert_eq!(n1.nics, ["ens2f0np0", "ens3f0np0"]);
    assert_eq!(n0.rdma, ["mlx5_0"]);
    assert_eq!(n1.rdma, ["mlx5_1", "mlx5_2"]);
    let nic = t.nics.iter().find(|n| n.name == "ens3f0np0").expect("ens3f0np0");
    assert_eq!(nic.rdma, ["mlx5_2"]);
    assert_eq!(nic.speed_mbps, Some(400_000));
    let names: Vec<&str> = t.nics.iter().map(|n| n.name.as_str()).collect();
    assert!(!names.contains(&"docker0") && !names.contains(&"lo"));
    assert_eq!(t.rdma.iter().map(|d| d.link_layers.clone()).collect::<Vec<_>>(), vec![vec!["Ethernet".to_string()]; 3]);
}

#[test]
fn two_socket_groups_devices_by_root_complex() {
    let r = analyze(&two_socket(), &Plan::default());
    let rcs: Vec<String> = r
        .root_complexes
        .iter()
        .map(|g| {
            format!("{} node {:?}: {} GPU, drives {:?}, NICs {:?}", g.name, g.node, g.gpus.len(), g.drives, g.nics)
        })
        .collect();
    assert_eq!(
        rcs,
        [
            r#"pci0000:15 node Some(0): 2 GPU, drives ["nvme0"], NICs ["ens1f0np0"]"#,
            r#"pci0000:37 node Some(0): 2 GPU, drives ["nvme1"], NICs []"#,
            r#"pci0000:97 node Some(1): 2 GPU, drives ["nvme2"], NICs ["ens2f0np0"]"#,
            r#"pci0000:b7 node Some(1): 2 GPU, drives ["nvme3"], NICs ["ens3f0np0"]"#,
        ]
    );
}

#[test]
fn nvme_over_tcp_controller_has_no_pci_function_and_its_namespace_head() {
    let t = two_socket();
    let c = t.nvme.iter().find(|c| c.name == "nvme4").expect("nvme4");
    assert_eq!(c.transport, NvmeTransport::Tcp);
    assert!(c.transport.is_fabrics());
    assert!(c.pci.is_none());
    assert_eq!(c.address.as_deref(), Some("traddr=10.0.0.5,trsvcid=4420,src_addr=10.0.0.2"));
    assert_eq!(c.subsysnqn.as_deref(), Some("nqn.2024-01.io.strata:vol-ckpt"));
    // The multipath path device nvme4c4n1 is reported as its head nvme4n1.
    assert_eq!(c.namespaces.len(), 1);
    assert_eq!(c.namespaces[0].name, "nvme4n1");
    assert_eq!(c.namespaces[0].size_bytes, Some(2 << 40));
    assert_eq!(t.local_drives().count(), 4);
    // The fabrics namespace is what the benchmark advice reads.
    let r = analyze(&t, &Plan::default());
    let bench = r.advice.iter().find(|a| a.topic == Topic::Bench).expect("bench advice");
    assert!(bench.commands[1].contains("--filename=/dev/nvme4n1"), "{}", bench.commands[1]);
}

#[test]
fn two_socket_with_every_nic_serving_has_no_cross_numa_flag() {
    let r = analyze(&two_socket(), &Plan::default());
    assert!(r.flags.is_empty(), "{:?}", r.flags);
    assert_eq!(r.serving_nics, ["ens1f0np0", "ens2f0np0", "ens3f0np0"]);
    let serve: Vec<_> = r.advice.iter().filter(|a| a.topic == Topic::Serve).collect();
    assert_eq!(serve.len(), 2, "one strata serve per node");
    assert_eq!(
        serve[0].commands[0],
        "taskset -c 0-31,64-95 strata serve --runtime per-core --io-threads 64 --data-dir /var/lib/strata/node0 \
         --http <api-addr-0> --drive /dev/nvme0n1 --drive /dev/nvme1n1 --listen <ens1f0np0-address>:4420"
    );
    assert_eq!(serve[1].commands[1], "systemd unit: CPUAffinity=32-63,96-127 NUMAPolicy=bind NUMAMask=1");
    let bench: Vec<_> = r.advice.iter().filter(|a| a.topic == Topic::Bench).collect();
    assert_eq!(bench.iter().map(|a| a.node).collect::<Vec<_>>(), [Some(0), Some(1)]);
    assert!(
        bench[1].commands[0].starts_with("taskset -c 32-63,96-127 strata bench --target tcp://<target>:4420/<nqn>")
    );
    assert!(!r.advice.iter().any(|a| a.topic == Topic::NoGpu));
}

#[test]
fn nic_on_node1_serving_drives_on_node0_is_flagged_cross_numa() {
    let t = two_socket();
    let r = analyze(&t, &Plan { nics: vec!["ens3f0np0".into()] });
    assert_eq!(
        r.flags,
        [
            Flag::DrivesAcrossNuma {
                node: 0,
                drives: vec!["nvme0".into(), "nvme1".into()],
                nic: "ens3f0np0".into(),
                nic_node: 1,
            },
            Flag::GpusAcrossNuma {
                node: 0,
                gpus: vec!["0000:18:00.0".into(), "0000:19:00.0".into(), "0000:3a:00.0".into(), "0000:3b:00.0".into()],
                nics: vec!["ens3f0np0".into()],
            },
        ]
    );
    assert!(
        r.flags[0]
            .to_string()
            .starts_with("cross-NUMA: nvme0, nvme1 on node 0 would be served through ens3f0np0 on node 1")
    );
    // One strata serve, on the NIC's node, serving all four drives.
    let serve: Vec<_> = r.advice.iter().filter(|a| a.topic == Topic::Serve).collect();
    assert_eq!(serve.len(), 1);
    assert_eq!(serve[0].node, Some(1));
    assert!(
        serve[0].commands[0].starts_with("taskset -c 32-63,96-127 strata serve --runtime per-core --io-threads 64 ")
    );
    assert!(
        serve[0].commands[0]
            .contains("--drive /dev/nvme0n1 --drive /dev/nvme1n1 --drive /dev/nvme2n1 --drive /dev/nvme3n1")
    );
}

#[test]
fn unknown_nic_in_plan_is_flagged() {
    let r = analyze(&two_socket(), &Plan { nics: vec!["eth9".into()] });
    assert!(r.flags.contains(&Flag::NoSuchNic { name: "eth9".into() }));
}

#[test]
fn report_serialises_to_json() {
    let t = two_socket();
    let r = analyze(&t, &Plan { nics: vec!["ens3f0np0".into()] });
    let v = serde_json::to_value((&t, &r)).expect("serialisable");
    assert_eq!(v[0]["gpus"][0]["pci"]["class"], "0x030200");
    assert_eq!(v[0]["gpus"][0]["pci"]["vendor"], "0x10de");
    assert_eq!(v[0]["numa_nodes"][1]["cpus"], "32-63,96-127");
    assert_eq!(v[0]["nvme"][4]["transport"], "tcp");
    assert_eq!(v[1]["flags"][0]["kind"], "drives_across_numa");
}

#[test]
fn missing_root_is_an_error_and_empty_root_is_one_node_without_devices() {
    assert!(read_topology(&data("no-such-tree")).is_err());
    let dir = std::env::temp_dir().join(format!("strata-topo-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let t = read_topology(&dir).expect("an empty tree parses");
    assert_eq!(t.numa_nodes.len(), 1);
    assert_eq!(t.numa_nodes[0].cpus, None);
    assert_eq!(t.notes.len(), 1, "{:?}", t.notes);
    assert!(t.gpus.is_empty() && t.nics.is_empty() && t.nvme.is_empty());
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn malformed_attributes_read_as_unknown() {
    let dir = std::env::temp_dir().join(format!("strata-topo-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let f = dir.join("devices/pci0000:00/0000:00:02.0");
    std::fs::create_dir_all(&f).expect("dirs");
    std::fs::create_dir_all(dir.join("devices/system/node/node0")).expect("dirs");
    std::fs::write(dir.join("devices/system/node/node0/cpulist"), "0-x\n").expect("write");
    std::fs::write(f.join("class"), "garbage").expect("write");
    std::fs::write(f.join("numa_node"), "-1\n").expect("write");
    std::fs::write(f.join("vendor"), [0xff, 0xfe]).expect("write");
    std::fs::create_dir_all(dir.join("bus/pci/devices")).expect("dirs");
    std::os::unix::fs::symlink("../../../devices/pci0000:00/0000:00:02.0", dir.join("bus/pci/devices/0000:00:02.0"))
        .expect("symlink");
    let t = read_topology(&dir).expect("malformed attributes are not errors");
    assert_eq!(t.numa_nodes[0].cpus, None);
    assert_eq!(t.notes.len(), 1);
    assert!(t.gpus.is_empty());
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn unknown_node_on_a_two_node_machine_is_flagged() {
    let dir = std::env::temp_dir().join(format!("strata-topo-unknown-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (n, cpus) in [(0, "0-3"), (1, "4-7")] {
        let node = dir.join(format!("devices/system/node/node{n}"));
        std::fs::create_dir_all(&node).expect("dirs");
        std::fs::write(node.join("cpulist"), cpus).expect("write");
    }
    let f = dir.join("devices/pci0000:00/0000:00:03.0");
    std::fs::create_dir_all(f.join("net/eth0")).expect("dirs");
    std::fs::write(f.join("class"), "0x020000\n").expect("write");
    std::fs::write(f.join("numa_node"), "-1\n").expect("write");
    std::os::unix::fs::symlink("../../../0000:00:03.0", f.join("net/eth0/device")).expect("symlink");
    std::fs::create_dir_all(dir.join("class/net")).expect("dirs");
    std::os::unix::fs::symlink("../../devices/pci0000:00/0000:00:03.0/net/eth0", dir.join("class/net/eth0"))
        .expect("symlink");
    let t = read_topology(&dir).expect("parses");
    let r = analyze(&t, &Plan::default());
    assert_eq!(r.flags, [Flag::UnknownNuma { devices: vec!["eth0".into()] }]);
    assert_eq!(r.nodes.last().map(|g| (g.node, g.nics.clone())), Some((None, vec!["eth0".to_string()])));
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
