//! Three `strata node` processes and a private etcd on loopback: a rep:3
//! volume keeps every flushed write through a kill -9 of its owner, another
//! node takes it over, and the killed node comes back and is resynced.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use strata_host::Controller;
use strata_meta::testing::EtcdProcess;

use crate::common::{NodeProc, connect_when_served, free_ports, host, loopback, pattern, wait_for};

const BS: usize = 4096;

#[test]
fn a_rep3_volume_keeps_flushed_writes_through_a_kill_9_of_its_owner_and_the_node_resyncs() {
    let _group = strata_testkit::group(module_path!());
    let etcd = EtcdProcess::start();
    let tmp = tempfile::tempdir().unwrap();
    let ports = free_ports(12);
    let mut nodes: Vec<NodeProc> =
        // TLS allowed: hosts choose, and the keyed host below proves a PSK.
        (1..=3)
            .map(|i| crate::common::loopback_node_with(tmp.path(), i, &etcd.url(), "512M", &ports, &["--tls", "allowed"]))
            .collect();
    wait_for("three nodes up", Duration::from_secs(30), &nodes, || {
        let s = nodes[0].api("GET", "/api/v1/pool", None)?;
        (s["nodes"].as_array()?.iter().filter(|n| n["state"] == "up").count() == 3).then_some(())
    });
    // A host cannot reach the replicas: the fabric admits only the nodes.
    let fabric: SocketAddr = format!("127.0.0.1:{}", ports[1]).parse().unwrap();
    let rt0 = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let e = rt0
        .block_on(Controller::connect(fabric, "nqn.2026-11.io.strata:fabric:n1", &host()))
        .expect_err("a host connected to a node's fabric");
    assert!(matches!(e, strata_host::HostError::ConnectRejected { .. }), "{e}");
    // Nor the volumes a node owns, which its proxy lists for the other
    // nodes' paths.
    let e = rt0
        .block_on(Controller::connect(fabric, "nqn.2026-11.io.strata:proxy:n1", &host()))
        .expect_err("a host connected to a node's proxy");
    assert!(matches!(e, strata_host::HostError::ConnectRejected { .. }), "{e}");
    // A host that claims a node's NQN gets past the list but not the
    // fabric's DH-HMAC-CHAP: it cannot send a fenced write with a forged
    // epoch, nor any other command.
    let forger = strata_host::HostConfig { hostnqn: strata_node::cluster::node_nqn("n2"), ..host() };
    for sub in ["nqn.2026-11.io.strata:fabric:n1", "nqn.2026-11.io.strata:proxy:n1"] {
        // (n1 lists n2 once its reconcile has seen it.)
        wait_for(&format!("{sub} asks n2 to authenticate"), Duration::from_secs(15), &nodes, || {
            match rt0.block_on(Controller::connect(fabric, sub, &forger)) {
                Ok(_) => panic!("a forged node connected to {sub}"),
                Err(strata_host::HostError::Authentication(_)) => Some(()),
                Err(_) => None,
            }
        });
        // Nor does a guessed key help.
        let guess = strata_host::HostConfig {
            dhchap_secret: Some(strata_host::DhchapSecret::generate(None)),
            ..forger.clone()
        };
        let e = rt0.block_on(Controller::connect(fabric, sub, &guess)).expect_err("a guessed key connected");
        assert!(matches!(e, strata_host::HostError::Authentication(_)), "{sub}: {e}");
    }
    drop(rt0);
    // A pool volume open to every host is asked for, not fallen into.
    let refused =
        nodes[0].api("POST", "/api/v1/volumes", Some(json!({"name": "open", "size": "64M", "protect": "rep:3"})));
    let why = refused.as_ref().and_then(|v| v["error"].as_str()).unwrap_or_default().to_string();
    assert!(why.contains("--allow-host") && why.contains("--allow-any-host"), "{refused:?}");
    let created = nodes[0]
        .api(
            "POST",
            "/api/v1/volumes",
            Some(json!({"name": "v1", "size": "256M", "protect": "rep:3", "allow_any_host": true})),
        )
        .expect("create answered");
    assert_eq!(created["protection"], "rep:3", "{created}");
    let nqn = created["nqn"].as_str().unwrap().to_string();

    // Who owns it, and where hosts reach it.
    let owner_of = |via: &NodeProc| -> Option<(u64, SocketAddr, Value)> {
        let s = via.api("GET", "/api/v1/pool", None)?;
        let v = s["volumes"].as_array()?.iter().find(|v| v["name"] == "v1")?.clone();
        let owner = v["owner"].as_u64()?;
        let n = s["nodes"].as_array()?.iter().find(|n| n["id"] == owner && n["state"] == "up")?;
        Some((owner, n["listen"].as_str()?.parse().ok()?, v))
    };
    let (owner, addr, _) =
        wait_for("an owner, with all three replicas in sync", Duration::from_secs(30), &nodes, || {
            owner_of(&nodes[1])
                .filter(|(_, _, v)| v["state"] == "healthy" && v["in_sync"].as_array().map(Vec::len) == Some(3))
        });

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let blocks: Vec<u64> = (0..64).map(|i| i * 977 % 65536).collect();
    rt.block_on(async {
        let c = connect_when_served(addr, &nqn).await;
        for &b in &blocks {
            c.write(1, b, pattern(b), false).await.expect("write");
        }
        c.flush(1).await.expect("flush");
    });

    // /metrics on a cluster node: the pool as it sees it, and the
    // volume's I/O counted at its owner, once.
    let owner_name = crate::common::node_name(&nodes[0], owner).expect("the owner's name");
    let owner_proc = nodes.iter().find(|n| n.name == owner_name).expect("the owner's process");
    let text = owner_proc.metrics();
    for line in [
        "strata_pool_node_up{node=\"n1\"} 1",
        "strata_pool_node_up{node=\"n2\"} 1",
        "strata_pool_node_up{node=\"n3\"} 1",
        "strata_pool_volume_state{volume=\"v1\",state=\"healthy\"} 1",
        "strata_pool_volume_in_sync_holders{volume=\"v1\"} 3",
        "strata_pool_volume_holders{volume=\"v1\"} 3",
        "strata_volume_io_total{volume=\"v1\",op=\"write\"} 64",
        "strata_volume_io_total{volume=\"v1\",op=\"flush\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} missing from the owner's /metrics:\n{text}");
    }
    let other = nodes.iter().find(|n| n.name != owner_name).unwrap().metrics();
    assert!(
        !other.lines().any(|l| l.starts_with("strata_volume_io_total{volume=\"v1\"")),
        "a node that does not own v1 counted its I/O:\n{other}"
    );

    // Hosts are the cluster's: a DH-HMAC-CHAP key added through one node
    // is asked for on every node's path within the hosts' refresh period,
    // and the key lets the host in there.
    let keyed = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-00000000c1a5";
    let key = strata_host::DhchapSecret::generate(None);
    let psk = strata_auth::TlsPsk::generate(strata_auth::HashFn::Sha256);
    let added = nodes[2].api(
        "POST",
        "/api/v1/hosts",
        Some(json!({"nqn": keyed, "dhchap_secret": key.to_interchange(), "tls_psk": psk.to_interchange()})),
    );
    assert_eq!(added.as_ref().map(|v| v["dhchap"].clone()), Some(json!(true)), "{added:?}");
    let s = nodes[0].api("GET", "/api/v1/pool", None).expect("status");
    let paths: Vec<SocketAddr> =
        s["nodes"].as_array().unwrap().iter().map(|n| n["listen"].as_str().unwrap().parse().unwrap()).collect();
    let as_keyed = |k: Option<&strata_host::DhchapSecret>| strata_host::HostConfig {
        hostnqn: keyed.into(),
        dhchap_secret: k.cloned(),
        ..host()
    };
    for path in paths {
        wait_for(&format!("{path} asks {keyed} to authenticate"), Duration::from_secs(15), &nodes, || {
            let r = rt.block_on(Controller::connect(path, &nqn, &as_keyed(None)));
            matches!(r, Err(strata_host::HostError::Authentication(_))).then_some(())
        });
        let c = rt.block_on(Controller::connect(path, &nqn, &as_keyed(Some(&key)))).expect("the key lets the host in");
        assert_eq!(rt.block_on(c.read(1, blocks[0], 1)).expect("read through the path")[..], pattern(blocks[0])[..]);
        // Its TLS PSK too: every node's port takes the host over TLS.
        let tls = strata_host::HostConfig { tls_psk: Some(psk.clone()), ..as_keyed(Some(&key)) };
        let c = rt.block_on(Controller::connect(path, &nqn, &tls)).expect("the PSK lets the host in over TLS");
        assert_eq!(rt.block_on(c.read(1, blocks[0], 1)).expect("read over TLS")[..], pattern(blocks[0])[..]);
        let wrong = strata_host::HostConfig {
            tls_psk: Some(strata_auth::TlsPsk::generate(strata_auth::HashFn::Sha256)),
            ..as_keyed(Some(&key))
        };
        let e = rt.block_on(Controller::connect(path, &nqn, &wrong)).expect_err("a wrong PSK connected");
        assert!(matches!(e, strata_host::HostError::Tls(_)), "{path}: {e}");
    }

    // kill -9 the owner; another node takes over after its lease.
    let s = nodes[0].api("GET", "/api/v1/pool", None).expect("status");
    let owner_name = s["nodes"].as_array().unwrap().iter().find(|n| n["id"] == owner).unwrap()["name"].clone();
    let k = nodes.iter().position(|n| n.name == owner_name.as_str().unwrap()).unwrap();
    nodes[k].kill9();
    let survivor = (k + 1) % 3;
    // It serves degraded: the dead node is out of the in-sync set.
    let (new_owner, new_addr, v) = wait_for("a new owner, degraded", Duration::from_secs(40), &nodes, || {
        owner_of(&nodes[survivor]).filter(|(o, _, v)| *o != owner && v["state"] == "degraded")
    });
    assert_ne!(new_owner, owner);
    assert!(!v["in_sync"].as_array().unwrap().contains(&json!(owner)), "{v}");
    rt.block_on(async {
        let c = connect_when_served(new_addr, &nqn).await;
        for &b in &blocks {
            let got = c.read(1, b, 1).await.expect("read");
            assert!(got[..] == pattern(b)[..], "block {b} lost in the failover");
        }
        c.write(1, 5000, pattern(5000), true).await.expect("write after failover");
    });

    // The killed node returns with its old data and is resynced.
    nodes[k].restart();
    wait_for("the volume healthy again", Duration::from_secs(60), &nodes, || {
        let (_, _, v) = owner_of(&nodes[survivor])?;
        (v["state"] == "healthy").then_some(())
    });
}

/// Bytes allocated on every node, from the pool status of `via`.
fn allocated(via: &NodeProc) -> Option<Vec<u64>> {
    let s = via.api("GET", "/api/v1/pool", None)?;
    s["nodes"].as_array()?.iter().map(|n| n["allocated_bytes"].as_u64()).collect()
}

#[test]
fn a_full_pool_fails_writes_with_capacity_exceeded_keeps_what_it_acknowledged_and_delete_gives_the_space_back() {
    let _group = strata_testkit::group(module_path!());
    let etcd = EtcdProcess::start();
    let tmp = tempfile::tempdir().unwrap();
    let ports = free_ports(12);
    let nodes: Vec<NodeProc> = (1..=3)
        .map(|i| {
            let dir = tmp.path().join(format!("n{i}"));
            let addrs = loopback(&ports[(i - 1) * 4..i * 4]);
            NodeProc::start(&dir, &format!("n{i}"), &format!("r{i}"), &etcd.url(), "64M", addrs, &[])
        })
        .collect();
    wait_for("three nodes up", Duration::from_secs(30), &nodes, || {
        (crate::common::nodes_up(&nodes[0])? == 3).then_some(())
    });
    let s = nodes[0].api("GET", "/api/v1/pool", None).unwrap();
    for n in s["nodes"].as_array().unwrap() {
        let drives = n["drives"].as_array().expect("drives listed");
        assert_eq!(drives.len(), 1, "{n}");
        assert!(drives[0]["capacity_bytes"].as_u64().unwrap() > 0, "{n}");
    }
    // A volume larger than the pool could ever hold is refused, naming the
    // limit (three copies on 64 MiB drives: 64 MiB).
    let refused = nodes[1]
        .api(
            "POST",
            "/api/v1/volumes",
            Some(json!({"name": "huge", "size": "1G", "protect": "rep:3", "allow_any_host": true})),
        )
        .expect("create answered");
    let why = refused["error"].as_str().unwrap_or_default();
    assert!(why.contains("more than the pool can ever hold as rep:3: 64 MiB"), "{refused}");
    // As large as the drives: it cannot be filled, the drives' own
    // metadata takes some of them.
    let created = nodes[1]
        .api(
            "POST",
            "/api/v1/volumes",
            Some(json!({"name": "big", "size": "64M", "protect": "rep:3", "allow_any_host": true})),
        )
        .expect("create answered");
    assert_eq!(created["protection"], "rep:3", "{created}");
    let nqn = created["nqn"].as_str().unwrap().to_string();
    let addr = wait_for("an owner", Duration::from_secs(30), &nodes, || crate::common::owner_addr(&nodes[0], "big"));

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    const MIB_BLOCKS: u64 = (1 << 20) / BS as u64;
    let mib = |m: u64| -> Vec<u8> { (0..MIB_BLOCKS).flat_map(|b| pattern(m * MIB_BLOCKS + b)).collect() };
    let written = rt.block_on(async {
        let c = connect_when_served(addr, &nqn).await;
        let mut written = 0;
        loop {
            assert!(written < 64, "64 MiB fitted on 64 MiB drives and their metadata");
            match c.write(1, written * MIB_BLOCKS, mib(written), false).await {
                Ok(()) => written += 1,
                Err(e) => {
                    assert!(e.is_status(strata_nvme::status::Status::CAPACITY_EXCEEDED), "a full pool answered {e}");
                    break;
                }
            }
        }
        // Still full, still the same answer; what was acknowledged is intact.
        let e = c.write(1, written * MIB_BLOCKS, mib(written), false).await.expect_err("the pool is full");
        assert!(e.is_status(strata_nvme::status::Status::CAPACITY_EXCEEDED), "{e}");
        c.flush(1).await.expect("flush of a full pool");
        for m in 0..written {
            let got = c.read(1, m * MIB_BLOCKS, MIB_BLOCKS as u32).await.expect("read");
            assert!(got[..] == mib(m)[..], "MiB {m} changed after the pool filled");
        }
        written
    });
    assert!(written > 32, "only {written} MiB of 64 fitted");
    // Full is not failed: every replica stays in sync.
    let v = crate::common::volume_status(&nodes[2], "big").unwrap();
    assert_eq!(v["state"], "healthy", "{v}");

    // What one copy allocates is reported, from the holders' records.
    wait_for("the volume's allocation reported", Duration::from_secs(10), &nodes, || {
        let v = crate::common::volume_status(&nodes[0], "big")?;
        (v["allocated_bytes"].as_u64()? >= written << 20).then_some(())
    });

    // Deleting the volume gives its space back on every node.
    let full = allocated(&nodes[0]).unwrap();
    assert!(full.iter().all(|&a| a >= written << 20), "{full:?}");
    let d = nodes[2].api("DELETE", "/api/v1/volumes/big", None).expect("delete answered");
    assert_eq!(d["deleted"], true, "{d}");
    assert!(nodes[0].api("GET", "/api/v1/volumes/big", None).unwrap()["error"].is_string());
    wait_for("the space freed on every node", Duration::from_secs(30), &nodes, || {
        allocated(&nodes[1]).filter(|a| a.iter().all(|&x| x < 16 << 20))
    });
    // And it is usable again.
    let created = nodes[0]
        .api(
            "POST",
            "/api/v1/volumes",
            Some(json!({"name": "again", "size": "64M", "protect": "rep:3", "allow_any_host": true})),
        )
        .expect("create answered");
    let nqn = created["nqn"].as_str().expect("created").to_string();
    let addr = wait_for("an owner", Duration::from_secs(30), &nodes, || crate::common::owner_addr(&nodes[0], "again"));
    rt.block_on(async {
        let c = connect_when_served(addr, &nqn).await;
        for m in 0..32 {
            c.write(1, m * MIB_BLOCKS, mib(m), false).await.expect("a write into freed space");
        }
        c.flush(1).await.unwrap();
    });
}

/// A node whose etcd speaks only TLS with client certificates: with the
/// CA, its certificate and key it joins, and serves a volume it created.
#[test]
fn a_node_uses_an_etcd_that_requires_tls_client_certificates() {
    let _group = strata_testkit::group(module_path!());
    let etcd = EtcdProcess::start_tls();
    let tls = etcd.tls().unwrap().clone();
    let tmp = tempfile::tempdir().unwrap();
    let ports = free_ports(4);
    let extra: Vec<String> =
        [("--etcd-ca", &tls.ca), ("--etcd-cert", &tls.client_cert), ("--etcd-key", &tls.client_key)]
            .iter()
            .flat_map(|(flag, path)| [flag.to_string(), path.display().to_string()])
            .collect();
    let node =
        NodeProc::start_with(&tmp.path().join("n1"), "n1", "r1", &etcd.url(), "256M", loopback(&ports), &[], &extra);
    let nodes = [node];
    wait_for("the node up through TLS etcd", Duration::from_secs(30), &nodes, || {
        (crate::common::nodes_up(&nodes[0])? == 1).then_some(())
    });
    let created = nodes[0]
        .api("POST", "/api/v1/volumes", Some(json!({"name": "t", "size": "64M", "allow_any_host": true})))
        .expect("create answered");
    let nqn = created["nqn"].as_str().unwrap_or_else(|| panic!("{created}")).to_string();
    wait_for("the volume served", Duration::from_secs(30), &nodes, || {
        let v = crate::common::volume_status(&nodes[0], "t")?;
        (v["state"] == "healthy" && v["owner"].is_u64()).then_some(())
    });
    let addr: SocketAddr = nodes[0].addrs.listen.parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = connect_when_served(addr, &nqn).await;
        // The owner may still be taking the volume on (ANA Transition).
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while let Err(e) = c.write(1, 7, pattern(7), true).await {
            assert!(
                e.status().is_some_and(|s| s.is_path_error()) && std::time::Instant::now() < deadline,
                "write: {e}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(c.read(1, 7, 1).await.expect("read")[..], pattern(7)[..]);
    });
}
