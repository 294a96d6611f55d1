//! The long version of `pool_chaos.rs`: the faults that test applies in
//! order, here at random, round after round, on seven `strata node`
//! processes in network namespaces with a private etcd and the chaos
//! suite's verified hosts writing an `ec:4+2` and a `rep:3` volume the
//! whole time. A round is one fault, then the pool settles (both volumes
//! healthy, the hosts writing):
//!
//! - a holder killed -9 and restarted;
//! - a volume's owner killed -9 and restarted (a takeover);
//! - M + 1 = 3 holders of the `ec:4+2` volume killed -9 (it stops, and
//!   comes back with them);
//! - a node's link cut (shorter or longer than its lease) and restored,
//!   or the owner's, past its lease (another node takes over);
//! - etcd killed (SIGKILL) or frozen (SIGSTOP) for a few seconds: no host
//!   may see an error meanwhile;
//! - a node drained and the drain cancelled half way.
//!
//! At the end every block of both volumes is read back against the
//! oracle, and `strata volume check` compares every copy and shard. The
//! report (rounds, faults, bytes written and verified, anything lost,
//! read wrong, failed or hung, what the checks found) is printed, and
//! written as JSON to `STRATA_SOAK_REPORT` when set.
//!
//! `STRATA_SOAK_SECS` and `STRATA_SOAK_SEED` choose how long and which
//! faults (`STRATA_SOAK_FAULTS`, a comma list of [`Fault`] names, draws
//! from those alone); `bench/pool-soak.sh DURATION SEED` runs it. Without them (in
//! CI) it runs one round: the `ec:4+2` volume's owner cut off.
//! Needs root (CAP_NET_ADMIN) and iproute2, as in CI.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;
use strata_meta::testing::EtcdProcess;
use strata_rand::Rng;

use crate::common::{NodeProc, node_name, nodes_up, volume_status, wait_for};
use crate::netns::{Load, Net, check_clean, create_healthy, holders, settings, settled, start_node};

const NODES: usize = 7;
/// The volumes: name, size, protection.
const VOLUMES: [(&str, u64, &str); 2] = [("e", 256 << 20, "ec:4+2"), ("r", 128 << 20, "rep:3")];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillHolder,
    KillOwner,
    KillMPlusOne,
    CutLink,
    CutOwnerLink,
    EtcdKill,
    EtcdPause,
    DrainUndrain,
}

const FAULTS: [Fault; 8] = [
    Fault::KillHolder,
    Fault::KillOwner,
    Fault::KillMPlusOne,
    Fault::CutLink,
    Fault::CutOwnerLink,
    Fault::EtcdKill,
    Fault::EtcdPause,
    Fault::DrainUndrain,
];

/// The pool under test: its network, etcd, nodes, and a load per volume.
struct Pool {
    net: Net,
    etcd: EtcdProcess,
    nodes: Vec<NodeProc>,
    loads: Vec<Load>,
}

impl Pool {
    /// The index of the node with id `id`.
    fn index_of(&self, id: u64) -> usize {
        let name = node_name(&self.nodes[0], id).or_else(|| node_name(&self.nodes[1], id)).expect("a node name");
        self.nodes.iter().position(|n| n.name == name).expect("a node of ours")
    }

    /// A node that answers the API (not one of `down`).
    fn via(&self, down: &[usize]) -> usize {
        (0..NODES).find(|i| !down.contains(i)).unwrap()
    }

    fn status(&self, volume: &str, down: &[usize]) -> serde_json::Value {
        wait_for("a volume status", Duration::from_secs(30), &self.nodes, || {
            volume_status(&self.nodes[self.via(down)], volume)
        })
    }

    /// Each volume's owner, as an index (waiting, as the settle does, for
    /// one to be listed: an owner whose key moves to a new lease after
    /// etcd came back may be missing from the status for a pass).
    fn owners(&self) -> Vec<usize> {
        VOLUMES
            .iter()
            .map(|(v, ..)| {
                let owner = wait_for(&format!("an owner of {v}"), Duration::from_secs(30), &self.nodes, || {
                    volume_status(&self.nodes[self.via(&[])], v)?["owner"].as_u64()
                });
                self.index_of(owner)
            })
            .collect()
    }

    /// Marks every load disrupted (errors expected) or not.
    fn disrupted(&self, on: bool) {
        for l in &self.loads {
            l.ctx.set_disrupted(on);
        }
    }

    /// Kills `victims` with kill -9; the loads whose volume's owner is
    /// among them crash (their acknowledged, unflushed writes may be
    /// lost). Returns the owners before the kill.
    fn kill(&mut self, victims: &[usize]) -> Vec<usize> {
        let owners = self.owners();
        for &i in victims {
            self.nodes[i].kill9();
        }
        for (l, o) in self.loads.iter().zip(&owners) {
            if victims.contains(o) {
                l.ctx.oracle(|o| o.crash());
            }
        }
        owners
    }

    /// Waits until both volumes are settled and the hosts write again;
    /// then errors are no longer expected.
    fn settle(&self, what: &str) {
        for (v, ..) in VOLUMES {
            wait_for(&format!("{v} settled after {what}"), Duration::from_secs(240), &self.nodes, || {
                settled(&self.nodes[0], v).or_else(|| settled(&self.nodes[1], v))
            });
        }
        for l in &self.loads {
            l.writing_again(&self.nodes);
        }
        self.disrupted(false);
        for l in &self.loads {
            crate::netns::load_runs(&l.ctx, Duration::from_secs(2), &format!("after {what}"));
        }
    }

    /// Runs one `fault`, chosen details from `rng`; returns what it did.
    fn run(&mut self, fault: Fault, rng: &mut Rng) -> String {
        let owners = self.owners();
        let e = self.status("e", &[]);
        let e_holders: Vec<usize> = holders(&e).into_iter().map(|id| self.index_of(id)).collect();
        let pick = |rng: &mut Rng, from: &[usize]| from[rng.below(from.len() as u64) as usize];
        match fault {
            Fault::KillHolder => {
                let others: Vec<usize> = (0..NODES).filter(|i| !owners.contains(i)).collect();
                let victim = pick(rng, &others);
                self.disrupted(true);
                self.kill(&[victim]);
                std::thread::sleep(Duration::from_millis(rng.range(500, 8000)));
                self.nodes[victim].restart();
                format!("kill -9 of {}, a holder", self.nodes[victim].name)
            }
            Fault::KillOwner => {
                let victim = owners[rng.below(owners.len() as u64) as usize];
                self.disrupted(true);
                self.kill(&[victim]);
                // Down past its lease: another node takes over.
                std::thread::sleep(Duration::from_millis(rng.range(1000, 15_000)));
                self.nodes[victim].restart();
                format!("kill -9 of {}, an owner", self.nodes[victim].name)
            }
            Fault::KillMPlusOne => {
                let mut pool: Vec<usize> = e_holders.iter().copied().filter(|&i| i != owners[0]).collect();
                let mut victims = Vec::new();
                for _ in 0..3 {
                    victims.push(pool.remove(rng.below(pool.len() as u64) as usize));
                }
                self.disrupted(true);
                self.kill(&victims);
                let watcher = self.via(&victims);
                wait_for("the ec volume stopped", Duration::from_secs(60), &self.nodes, || {
                    let v = volume_status(&self.nodes[watcher], "e")?;
                    (v["state"] == "down" || v["state"] == "offline").then_some(())
                });
                // It crashed when its owner stopped.
                self.loads[0].ctx.oracle(|o| o.crash());
                std::thread::sleep(Duration::from_millis(rng.range(0, 5000)));
                for &i in &victims {
                    self.nodes[i].restart();
                }
                let names: Vec<&str> = victims.iter().map(|&i| self.nodes[i].name.as_str()).collect();
                format!("kill -9 of {} (M + 1 holders of e)", names.join(", "))
            }
            Fault::CutLink | Fault::CutOwnerLink => {
                // The ec volume's owner, cut off past its lease: it stops
                // (its replicas' promises lapse) and another node takes
                // over; or any node, for any time.
                let (victim, ms) = if fault == Fault::CutOwnerLink {
                    (owners[0], rng.range(11_000, 16_000))
                } else {
                    (pick(rng, &(0..NODES).collect::<Vec<_>>()), rng.range(1000, 16_000))
                };
                self.disrupted(true);
                self.net.link(victim, false);
                // No acknowledgement crosses a cut link: an owner cut off
                // crashes its volume now.
                for (l, o) in self.loads.iter().zip(&owners) {
                    if *o == victim {
                        l.ctx.oracle(|o| o.crash());
                    }
                }
                std::thread::sleep(Duration::from_millis(ms));
                self.net.link(victim, true);
                format!("link of {} cut for {:.1} s", self.nodes[victim].name, ms as f64 / 1000.0)
            }
            Fault::EtcdKill | Fault::EtcdPause => {
                let ms = if fault == Fault::EtcdKill { rng.range(2000, 30_000) } else { rng.range(1000, 10_000) };
                let before: Vec<u64> = self.loads.iter().map(|l| crate::netns::written(&l.ctx)).collect();
                if fault == Fault::EtcdKill {
                    self.etcd.kill()
                } else {
                    self.etcd.pause()
                }
                std::thread::sleep(Duration::from_millis(ms));
                for (l, b) in self.loads.iter().zip(&before) {
                    let s = l.ctx.snapshot();
                    assert!(s.bytes_written > *b, "the hosts wrote nothing while etcd was out\n{}", s.summary());
                }
                if fault == Fault::EtcdKill {
                    self.etcd.restart()
                } else {
                    self.etcd.resume()
                }
                let how = if fault == Fault::EtcdKill { "killed" } else { "frozen" };
                format!("etcd {how} for {:.1} s", ms as f64 / 1000.0)
            }
            Fault::DrainUndrain => {
                let node = pick(rng, &e_holders);
                let name = self.nodes[node].name.clone();
                settings(&self.nodes[0], json!({"rebuild_mbps": 2}));
                let d = self.nodes[0].api("POST", &format!("/api/v1/nodes/{name}/drain"), None).expect("answered");
                assert_eq!(d["state"], "out", "{d}");
                std::thread::sleep(Duration::from_millis(rng.range(1000, 6000)));
                let u = self.nodes[0].api("POST", &format!("/api/v1/nodes/{name}/undrain"), None).expect("answered");
                assert_eq!(u["state"], "up", "{u}");
                settings(&self.nodes[0], json!({"rebuild_mbps": 0}));
                format!("drain of {name}, cancelled")
            }
        }
    }
}

fn env_u64(key: &str) -> Option<u64> {
    std::env::var(key).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{key}={v} is not a number")))
}

#[test]
fn random_pool_faults_under_verified_load_lose_nothing_and_leave_every_copy_agreeing() {
    let _group = strata_testkit::group(module_path!());
    let secs = env_u64("STRATA_SOAK_SECS").unwrap_or(0);
    let seed = env_u64("STRATA_SOAK_SEED").unwrap_or(20261203);
    let mut rng = Rng::new(seed);
    let began = Instant::now();
    let net = Net::new(NODES);
    let etcd = EtcdProcess::start_also_on(net.gateway());
    let tmp = tempfile::tempdir().unwrap();
    let etcd_url = etcd.url_on(net.gateway());
    let nodes: Vec<NodeProc> = (0..NODES).map(|i| start_node(&net, &etcd_url, tmp.path(), i)).collect();
    wait_for("seven nodes up", Duration::from_secs(60), &nodes, || (nodes_up(&nodes[0])? == NODES).then_some(()));
    settings(&nodes[0], json!({"rebuild_grace_secs": 3600, "rebuild_mbps": 0}));
    let mut loads = Vec::new();
    for (i, (name, size, protect)) in VOLUMES.iter().enumerate() {
        let nqn = create_healthy(&nodes, name, &format!("{}M", size >> 20), protect);
        loads.push(Load::start(&net, NODES, name, nqn, size >> 12, seed + i as u64));
    }
    let mut pool = Pool { net, etcd, nodes, loads };
    for (v, ..) in VOLUMES {
        wait_for("settled", Duration::from_secs(120), &pool.nodes, || settled(&pool.nodes[0], v));
    }
    // `STRATA_SOAK_FAULTS=KillMPlusOne,EtcdPause` draws from those alone
    // (to hunt one failure faster); unset or empty, from every kind.
    let faults_in: Vec<Fault> = match std::env::var("STRATA_SOAK_FAULTS") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .map(|name| {
                *FAULTS
                    .iter()
                    .find(|f| format!("{f:?}") == name.trim())
                    .unwrap_or_else(|| panic!("STRATA_SOAK_FAULTS: no fault {name}; the faults are {FAULTS:?}"))
            })
            .collect(),
        _ => FAULTS.to_vec(),
    };
    let deadline = began + Duration::from_secs(secs);
    let mut faults: BTreeMap<String, u64> = BTreeMap::new();
    let mut rounds = 0u64;
    loop {
        rounds += 1;
        // The single round of a plain `cargo test`: a partitioned owner,
        // which pool_chaos.rs does not do.
        let fault = if secs == 0 { Fault::CutOwnerLink } else { faults_in[rng.below(faults_in.len() as u64) as usize] };
        let what = pool.run(fault, &mut rng);
        eprintln!("{:7.1}s round {rounds}: {what}", began.elapsed().as_secs_f64());
        *faults.entry(format!("{fault:?}")).or_default() += 1;
        pool.settle(&what);
        if Instant::now() >= deadline {
            break;
        }
    }

    let Pool { nodes, loads, .. } = pool;
    let reports: Vec<_> = loads.into_iter().map(Load::verify).collect();
    let checks: Vec<serde_json::Value> = VOLUMES.iter().map(|(v, size, _)| check_clean(&nodes, 0, v, *size)).collect();
    let sum = |f: fn(&strata_chaos::report::Report) -> u64| reports.iter().map(f).sum::<u64>();
    let report = json!({
        "seed": seed,
        "seconds": began.elapsed().as_secs(),
        "rounds": rounds,
        "faults": faults,
        "bytes_written": sum(|r| r.bytes_written),
        "bytes_verified": sum(|r| r.bytes_verified),
        "blocks_lost": sum(|r| r.blocks_lost),
        "wrong_reads": sum(|r| r.wrong_reads),
        "hangs": sum(|r| r.hangs),
        "clean": reports.iter().all(|r| r.is_clean()),
        "checks": VOLUMES.iter().zip(&checks).map(|((v, ..), c)| (v.to_string(), c.clone())).collect::<BTreeMap<_, _>>(),
    });
    let text = serde_json::to_string_pretty(&report).unwrap();
    eprintln!("pool soak report:\n{text}");
    for r in &reports {
        eprintln!("{}", r.summary());
    }
    if let Ok(path) = std::env::var("STRATA_SOAK_REPORT") {
        std::fs::write(&path, &text).unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
    }
    assert!(reports.iter().all(|r| r.bytes_verified > 0), "nothing was verified");
    let logs: Vec<String> = nodes.iter().map(NodeProc::log_tail).collect();
    assert!(report["clean"] == true, "the pool lost, flipped, failed or hung something:\n{text}\n{}", logs.join("\n"));
}
