//! `strata bench` end to end: the binary against an in-process strata
//! target serving a RAM namespace on loopback. Pins what operators and CI
//! rely on: a verified run writes a signed report that `verify` accepts
//! and that fails after any edit; a suite whose gate cannot be met exits 1;
//! configuration mistakes exit 2 before any I/O; a single run's report
//! serves as a suite's baseline; `--poll-us` and `--disable-sqflow` reach
//! the run and its report.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use strata_block::MemDevice;
use strata_target::{Namespace, NamespaceIds, PortRole, Subsystem, Target, TargetConfig};

const BIN: &str = env!("CARGO_BIN_EXE_strata");
const NQN: &str = "nqn.2026-11.io.strata:bench-cli";

/// A target on loopback with namespace 1: 16 MiB of RAM in 4 KiB blocks.
/// The runtime must outlive the test, so it is returned too.
fn start_target() -> (tokio::runtime::Runtime, Target, SocketAddr) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let (target, addr) = rt.block_on(async {
        let target = Target::new(TargetConfig::default());
        let sub = Subsystem::new(NQN, "STRATABENCHCLI", vec![]);
        let dev = Arc::new(MemDevice::new(4096, 4096));
        let ids = NamespaceIds { nguid: [4; 16], uuid: [5; 16], eui64: [6; 8] };
        sub.add_namespace(Namespace::new(1, ids, dev)).expect("namespace");
        target.add_subsystem(sub).expect("subsystem");
        let addr = target.listen("127.0.0.1:0".parse().expect("addr"), PortRole::Io).await.expect("listen").addr;
        (target, addr)
    });
    (rt, target, addr)
}

fn bench(args: &[&str]) -> Output {
    Command::new(BIN).arg("bench").args(args).output().expect("run strata bench")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn verified_run_writes_a_signed_report_that_verify_accepts_and_any_edit_breaks() {
    let _group = strata_testkit::group(module_path!());
    let (_rt, _target, addr) = start_target();
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("bench.key");
    let pubkey = dir.path().join("bench.key.pub");
    let report = dir.path().join("run.json");
    let page = dir.path().join("run.html");

    let o = bench(&["keygen", path(&key)]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let hex = text(&o.stdout).trim().to_string();
    assert_eq!(hex.len(), 64);
    assert!(std::fs::read_to_string(&pubkey).expect("pub file").contains(&hex));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&key).expect("key").permissions().mode() & 0o777, 0o600);
    assert_eq!(code(&bench(&["keygen", path(&key)])), 2, "keygen never overwrites");

    let target = format!("tcp://{addr}/{NQN}");
    let o = bench(&[
        "--target",
        &target,
        "--rw",
        "randrw",
        "--rwmixread",
        "70",
        "--bs",
        "4k",
        "--iodepth",
        "8",
        "--jobs",
        "2",
        "--size",
        "8M",
        "--span",
        "4M",
        "--verify",
        "--prefill",
        "--interval",
        "100ms",
        "--report",
        path(&report),
        "--html",
        path(&page),
        "--sign",
        path(&key),
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(code(&o), 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("IOPS") && out.contains("p99.99") && out.contains("PASSED"), "{out}");

    // The report is signed JSON whose body holds the run.
    let bytes = std::fs::read(&report).expect("report");
    let v: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    let body = &v["signed"];
    assert_eq!(body["format"], "strata-bench-report");
    assert_eq!(v["signature"]["public_key"], hex.as_str());
    let w = &body["workloads"][0]["result"];
    assert_eq!(w["ios"].as_u64(), Some(2048), "8 MiB of 4 KiB I/Os");
    assert_eq!(w["verify_failures"], 0);
    assert!(w["histogram"]["count"].as_u64() == Some(2048));
    assert!(body["command_line"].as_array().expect("argv").iter().any(|a| a == "--verify"));
    assert!(body["system"]["cores"].as_u64().unwrap_or(0) >= 1);
    assert!(std::fs::read_to_string(&page).expect("html").contains("<svg"));

    let o = bench(&["verify", path(&report), "--pubkey", path(&pubkey)]);
    assert_eq!(code(&o), 0, "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("OK: signed by"));

    // A single changed byte anywhere fails: at the start of the body, in a
    // number deep inside it, and in the signature block.
    let number = text(&bytes).find("\"ios\": 2048").expect("ios") + "\"ios\": ".len();
    for at in [1, 40, bytes.len() / 2, number, bytes.len() - 3] {
        let mut bad = bytes.clone();
        bad[at] = if bad[at] == b'1' { b'2' } else { b'1' };
        let tampered = dir.path().join(format!("tampered-{at}.json"));
        std::fs::write(&tampered, &bad).expect("write");
        let o = bench(&["verify", path(&tampered)]);
        assert_eq!(code(&o), 1, "byte {at}: {}", text(&o.stdout));
        assert!(text(&o.stderr).contains("verification FAILED"), "{}", text(&o.stderr));
    }

    // Another key is refused; an unsigned report says so.
    let other = dir.path().join("other.key");
    assert_eq!(code(&bench(&["keygen", path(&other)])), 0);
    let o = bench(&["verify", path(&report), "--pubkey", &format!("{}.pub", path(&other))]);
    assert_eq!(code(&o), 1);
    assert!(text(&o.stderr).contains("not by the expected key"), "{}", text(&o.stderr));
    let unsigned = dir.path().join("unsigned.json");
    std::fs::write(&unsigned, serde_json::to_vec(body).expect("body")).expect("write");
    let o = bench(&["verify", path(&unsigned)]);
    assert_eq!(code(&o), 1);
    assert!(text(&o.stderr).contains("not signed"), "{}", text(&o.stderr));

    // The signed run report is a baseline for a suite whose workload has
    // the same name ("default").
    let job = dir.path().join("baseline.toml");
    std::fs::write(
        &job,
        format!(
            "target = \"{target}\"\n[[workload]]\nname = \"default\"\nrw = \"randread\"\nsize = \"4M\"\nspan = \"4M\"\n\
             gates = [\"iops >= baseline * 0.000001\", \"p99_us <= baseline * 1000000\"]\n"
        ),
    )
    .expect("job");
    let o = bench(&["suite", path(&job), "--baseline", path(&report), "--json", "-q"]);
    assert_eq!(code(&o), 0, "{}{}", text(&o.stdout), text(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("report on stdout");
    assert_eq!(r["passed"], true);
    assert_eq!(r["baseline"]["signed_by"], hex.as_str());
    assert_eq!(r["workloads"][0]["gates"].as_array().map(Vec::len), Some(2));
}

#[test]
fn a_suite_with_an_impossible_gate_exits_1_and_reports_the_verdict() {
    let _group = strata_testkit::group(module_path!());
    let (_rt, _target, addr) = start_target();
    let dir = tempfile::tempdir().expect("tempdir");
    let job = dir.path().join("impossible.toml");
    std::fs::write(
        &job,
        format!(
            r#"name = "impossible"
target = "tcp://{addr}/{NQN}"

[defaults]
bs = "4k"
iodepth = 4
span = "2M"
size = "1M"

[[workload]]
name = "fine"
rw = "randread"
gates = ["p99_us <= 10000000", "iops >= 1"]

[[workload]]
name = "too-fast"
rw = "randwrite"
gates = ["iops >= 1e12"]
"#
        ),
    )
    .expect("job");
    let report = dir.path().join("suite.json");
    let o = bench(&["suite", path(&job), "--report", path(&report), "-q"]);
    let out = text(&o.stdout);
    assert_eq!(code(&o), 1, "stdout:\n{out}\nstderr:\n{}", text(&o.stderr));
    assert!(out.contains("FAILED: too-fast"), "{out}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    assert_eq!(r["passed"], false);
    assert_eq!(r["workloads"][0]["passed"], true);
    assert_eq!(r["workloads"][1]["gates"][0]["passed"], false);
    assert_eq!(r["workloads"][1]["gates"][0]["threshold"], 1e12);
    assert!(r["job_file"]["contents"].as_str().expect("job text").contains("iops >= 1e12"));
}

#[test]
fn configuration_mistakes_exit_2_before_any_io() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().expect("tempdir");
    let job = dir.path().join("job.toml");
    // Nothing listens on port 9: these must fail on the configuration, not
    // on connecting.
    let target = "tcp://127.0.0.1:9/nqn.x";
    let cases = [
        ("[[workload]]\nname = \"a\"\ngates = [\"p99_us <= baseline * 1.1\"]\n", "--baseline"),
        ("[[workload]]\nname = \"a\"\nio_depth = 3\n", "unknown field `io_depth`"),
        ("[[workload]]\nname = \"a\"\nruntime = \"10\"\n", "has no unit"),
        ("[[workload]]\nname = \"a\"\ngates = [\"p98_us <= 1\"]\n", "unknown metric"),
    ];
    for (toml, want) in cases {
        std::fs::write(&job, format!("target = \"{target}\"\n{toml}")).expect("job");
        let o = bench(&["suite", path(&job)]);
        assert_eq!(code(&o), 2, "{toml}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(want), "{toml}: {}", text(&o.stderr));
    }
    assert_eq!(code(&bench(&["suite", "/nonexistent/job.toml"])), 2);
    assert_eq!(code(&bench(&["--rw", "randread"])), 2, "no --target");
    assert_eq!(code(&bench(&["--target", target, "--bs", "1000"])), 2);
    assert_eq!(code(&bench(&["--target", target, "--runtime", "5"])), 2);
    assert_eq!(code(&bench(&["--target", target, "--sign", "/nonexistent/key", "--report", "r.json"])), 2);
    // A run that cannot connect is a failed run, not a usage error.
    assert_eq!(code(&bench(&["--target", target, "--runtime", "1s", "-q"])), 1);
}

#[test]
fn poll_us_and_disable_sqflow_reach_the_run_and_its_report() {
    let _group = strata_testkit::group(module_path!());
    let (_rt, _target, addr) = start_target();
    let target = format!("tcp://{addr}/{NQN}");
    let o = bench(&[
        "--target",
        &target,
        "--rw",
        "randrw",
        "--iodepth",
        "8",
        "--size",
        "2M",
        "--span",
        "2M",
        "--verify",
        "--prefill",
        "--poll-us",
        "100",
        "--disable-sqflow",
        "--json",
        "-q",
    ]);
    assert_eq!(code(&o), 0, "{}{}", text(&o.stdout), text(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("report on stdout");
    let w = &r["workloads"][0]["result"];
    assert_eq!(w["spec"]["poll_us"], 100);
    assert_eq!(w["spec"]["disable_sqflow"], true);
    assert_eq!((w["ios"].as_u64(), w["errors"].as_u64(), w["verify_failures"].as_u64()), (Some(512), Some(0), Some(0)));

    // Out of range: a usage error before any I/O (nothing listens on 9).
    let o = bench(&["--target", "tcp://127.0.0.1:9/nqn.x", "--poll-us", "1000001"]);
    assert_eq!(code(&o), 2);
    assert!(text(&o.stderr).contains("poll_us = 1000001"), "{}", text(&o.stderr));
}

#[test]
fn kv_trace_replays_hit_rates_and_refuses_a_bad_trace() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("t.jsonl");
    // Block 0..3 asked for, then 0,1 again with a new tail, then all again:
    // 2 + 3 of 9 blocks hit with room for everything.
    std::fs::write(&trace, "{\"hash_ids\":[0,1,2]}\n{\"hash_ids\":[0,1,3]}\n\n{\"hash_ids\":[0,1,2]}\n").unwrap();
    let out = bench(&["kv-trace", path(&trace), "--capacity", "100,1", "--small-percent", "0,50"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains("3 requests, 9 blocks asked for, 4 distinct"), "{table}");
    assert!(table.contains("unbounded capacity 55.6%"), "{table}");
    let row100 = table.lines().find(|l| l.trim_start().starts_with("100 ")).expect("row for 100");
    // MIN, S3-FIFO, LRU, both tail first, and the two S3-FIFO shapes.
    assert_eq!(row100.matches("55.6%").count(), 7, "every policy holds it all: {row100}");
    let json = bench(&["kv-trace", path(&trace), "--capacity", "1", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(v["rows"][0]["capacity_blocks"], 1);
    let rate = |k: &str| v["rows"][0][k].as_f64().expect(k);
    assert!(rate("min_hit_rate") >= rate("lru_hit_rate") && rate("min_hit_rate") >= rate("s3fifo_hit_rate"));
    std::fs::write(&trace, "{\"hash_ids\":[0,\"x\"]}\n").unwrap();
    let bad = bench(&["kv-trace", path(&trace)]);
    assert_eq!(code(&bad), 2);
    assert!(text(&bad.stderr).contains("t.jsonl:1: a hash id is not an integer"), "{}", text(&bad.stderr));
}

#[test]
fn kv_tier_reads_every_block_back_from_the_ssd_tier() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().expect("tempdir");
    let ssd = format!("{}:160M", dir.path().join("t.log").display());
    // The SSD run has 64 MiB of DRAM: 100 MiB of 1 MiB values overflow it.
    let out = bench(&["kv-tier", "--ssd", &ssd, "--total", "100M", "--value", "1M", "--json"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["blocks"], 100);
    assert!(v["hits_ssd"].as_u64().unwrap() > 30, "{v}");
    assert_eq!(v["phases"].as_array().map(Vec::len), Some(4));
    assert!(v["phases"].as_array().unwrap().iter().all(|p| p["bytes"] == 100u64 << 20));
    let too_big = bench(&["kv-tier", "--ssd", &ssd, "--total", "1G"]);
    assert_eq!(code(&too_big), 2);
    assert!(text(&too_big.stderr).contains("does not fit in the SSD tier"), "{}", text(&too_big.stderr));
}

#[test]
fn ttft_loads_verified_blocks_from_each_tier_and_replays_a_trace() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().expect("tempdir");
    let ssd = format!("{}:64M", dir.path().join("ttft.log").display());
    let trace = dir.path().join("t.jsonl");
    // Without an engine cache, the store serves 2 blocks of the second
    // request and 3 of the third: 5 blocks of 16 tokens.
    std::fs::write(&trace, "{\"hash_ids\":[0,1,2]}\n{\"hash_ids\":[0,1,3]}\n{\"hash_ids\":[0,1,2,4]}\n").unwrap();
    let args = [
        "ttft",
        "--prompts",
        "256,512",
        "--block-tokens",
        "128",
        "--ssd",
        &ssd,
        "--replay",
        path(&trace),
        "--replay-block-tokens",
        "16",
        "--replay-engine-blocks",
        "0",
        "--json",
    ];
    let out = bench(&args);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = v["prompts"].as_array().expect("prompts");
    assert_eq!(rows.len(), 2);
    // 4 KiB of f32 KV a token for the tiny model; every block came back
    // from DRAM, then from the SSD tier after a restart.
    for (row, tokens) in rows.iter().zip([256u64, 512]) {
        assert_eq!(row["tokens"], tokens);
        let tiers: Vec<&str> = row["tiers"].as_array().unwrap().iter().map(|t| t["tier"].as_str().unwrap()).collect();
        assert_eq!(tiers, ["dram", "ssd"]);
        assert!(row["tiers"].as_array().unwrap().iter().all(|t| t["bytes"] == tokens * 4096), "{row}");
    }
    let r = &v["replay"];
    assert_eq!((r["requests"].as_u64(), r["prompt_tokens"].as_u64()), (Some(3), Some(10 * 16)));
    assert_eq!((r["alone_hit_tokens"].as_u64(), r["store_hit_tokens"].as_u64()), (Some(0), Some(5 * 16)), "{r}");
    assert!(v["projection"].as_array().is_some_and(|p| p.len() == 4), "two prompts and 64k, 128k");

    let cuda = bench(&["ttft", "--device", "cuda"]);
    assert_eq!(code(&cuda), 2);
    assert!(text(&cuda.stderr).contains("CPU only"), "{}", text(&cuda.stderr));
    let ragged = bench(&["ttft", "--prompts", "300", "--ssd", "none", "--replay", "none"]);
    assert_eq!(code(&ragged), 2);
    assert!(text(&ragged.stderr).contains("not a whole number of 256-token blocks"), "{}", text(&ragged.stderr));
}

/// `strata bench` as a host that must authenticate: with its NQN and
/// DH-HMAC-CHAP secret it runs verified I/O; without the secret the run
/// cannot start and says why.
#[test]
fn bench_authenticates_with_dhchap_when_the_target_asks() {
    let _group = strata_testkit::group(module_path!());
    let (_rt, target_handle, addr) = start_target();
    let hostnqn = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000be7c4";
    let key = strata_host::DhchapSecret::generate(None);
    target_handle.set_host_keys(hostnqn, Some(strata_auth::HostKeys::new(key.clone(), None)));
    let target = format!("tcp://{addr}/{NQN}");
    let common = [
        "--target",
        &target,
        "--rw",
        "randrw",
        "--size",
        "1M",
        "--span",
        "1M",
        "--verify",
        "--prefill",
        "--json",
        "-q",
    ];
    let o = bench(&[&common[..], &["--hostnqn", hostnqn, "--dhchap-secret", &key.to_interchange()]].concat());
    assert_eq!(code(&o), 0, "{}{}", text(&o.stdout), text(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).expect("report on stdout");
    let w = &r["workloads"][0]["result"];
    assert_eq!((w["errors"].as_u64(), w["verify_failures"].as_u64()), (Some(0), Some(0)), "{w}");
    let o = bench(&[&common[..], &["--hostnqn", hostnqn]].concat());
    assert_ne!(code(&o), 0);
    let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert!(all.contains("authentication"), "{all}");
}
