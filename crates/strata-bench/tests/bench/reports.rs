//! Suites, gates, stop-loss and signed reports wired to the real engine,
//! against an in-process strata target serving a RAM namespace: a
//! verified run's signed report verifies and fails after an edit, a gate
//! that cannot be met fails its workload, and stop-loss aborts a run
//! through the engine's hook long before its runtime is up. Reports
//! written before the busy-poll and SQ flow control options existed still
//! verify and load.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_bench::report::render_text;
use strata_bench::suite::run_suite;
use strata_bench::sysinfo::rfc3339;
use strata_bench::{
    Report, RunOptions, SecretKey, StopLossMonitor, Suite, SystemInfo, WorkloadReport, WorkloadResult, WorkloadSpec,
    html, sign,
};
use strata_block::MemDevice;
use strata_target::{Namespace, NamespaceIds, PortRole, Subsystem, Target, TargetConfig};

const NQN: &str = "nqn.2026-11.io.strata:bench-reports";

/// A target with namespace 1: 16 MiB of RAM in 4 KiB blocks.
async fn start() -> (Target, SocketAddr) {
    let target = Target::new(TargetConfig::default());
    let sub = Subsystem::new(NQN, "STRATABENCHREP", vec![]);
    let dev = Arc::new(MemDevice::new(4096, 4096));
    let ids = NamespaceIds { nguid: [7; 16], uuid: [8; 16], eui64: [9; 8] };
    sub.add_namespace(Namespace::new(1, ids, dev)).expect("namespace");
    target.add_subsystem(sub).expect("subsystem");
    let addr = target.listen("127.0.0.1:0".parse().expect("addr"), PortRole::Io).await.expect("listen").addr;
    (target, addr)
}

/// Runs a spec the way `strata bench` does: 50 ms intervals, the monitor
/// as the stop-loss hook.
async fn engine(spec: &WorkloadSpec, monitor: Option<StopLossMonitor>) -> Result<WorkloadResult, String> {
    let mut opts = RunOptions::default().interval(Duration::from_millis(50));
    if let Some(mut m) = monitor {
        opts = opts.stop_loss(move |s, h| m.observe(s, h));
    }
    strata_bench::run(spec, opts).await.map_err(|e| e.to_string())
}

fn job(addr: SocketAddr, body: &str) -> Suite {
    let text = format!("target = \"tcp://{addr}/{NQN}\"\n{body}");
    Suite::parse(&text, "test.toml", None).expect("job file")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_suite_produces_a_signed_report_that_verifies() {
    let (_target, addr) = start().await;
    let suite = job(
        addr,
        r#"
[defaults]
bs = "4k"
iodepth = 8
jobs = 2
span = "4M"
size = "4M"
verify = true

[[workload]]
name = "write"
rw = "randwrite"
gates = ["iops >= 1", "write_p99_us <= 10000000"]

# A random write covers only part of the span, and the two jobs split the
# 1024 I/Os differently from run to run: the read-back writes the verify
# pattern over the whole span first so that no read finds a block never
# written.
[[workload]]
name = "read-back"
rw = "randread"
prefill = true
gates = ["read_max_us <= 10000000"]
"#,
    );
    let gates = suite.resolve_gates(None).expect("absolute gates");
    let entries = run_suite(&suite, &gates, engine).await;
    let mut report =
        Report::new(&suite.name, vec!["test".into()], SystemInfo::collect(), rfc3339(std::time::SystemTime::now()));
    for e in entries {
        report.push(e);
    }
    for w in &report.workloads {
        let r = w.result.as_ref().unwrap_or_else(|| panic!("{} did not run: {:?}", w.name, w.error));
        assert_eq!((r.errors, r.verify_failures, r.aborted.as_deref()), (0, 0, None), "{}", w.name);
        assert_eq!(r.ios, 1024, "{}: 4 MiB of 4 KiB I/Os", w.name);
        assert_eq!(r.histogram.count(), r.ios);
    }
    assert!(report.passed, "{}", render_text(&report));

    let key = SecretKey::from_seed([42; 32]);
    let file = sign::sign_report(&report.to_json(), &key);
    let opened = sign::verify(&file, Some(&key.public())).expect("verifies");
    assert_eq!(Report::from_json(opened.body).expect("body"), report);
    // One changed digit in the read-back workload's numbers.
    let text = String::from_utf8(file.clone()).expect("utf-8");
    let at = text.rfind("\"ios\": 1024").expect("ios") + "\"ios\": ".len();
    let mut bad = file;
    bad[at] = b'2';
    assert!(matches!(sign::verify(&bad, Some(&key.public())), Err(sign::VerifyError::BadSignature)));

    let page = html::render(&report);
    assert_eq!(page.matches("<svg").count(), 6, "CDF, IOPS and p99 plots per workload");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impossible_gate_fails_and_stop_loss_aborts_early() {
    let (_target, addr) = start().await;
    let suite = job(
        addr,
        r#"
stop_loss = { margin_pct = 50, for = "200ms" }

[defaults]
bs = "4k"
iodepth = 4
span = "4M"
runtime = "60s"

[[workload]]
name = "impossible"
rw = "randread"
gates = ["iops >= 1e12"]
"#,
    );
    let gates = suite.resolve_gates(None).expect("gates");
    let started = Instant::now();
    let entries = run_suite(&suite, &gates, engine).await;
    let w: &WorkloadReport = &entries[0];
    let r = w.result.as_ref().expect("ran");
    let why = r.aborted.as_deref().expect("stop-loss aborted the run");
    assert!(why.starts_with("stop-loss: iops was"), "{why}");
    assert!(r.duration_s < 30.0 && started.elapsed() < Duration::from_secs(30), "aborted long before 60 s");
    assert!(r.timeseries.len() >= 4, "the breach lasted 200 ms of 50 ms intervals: {}", r.timeseries.len());
    assert!(!w.passed && !w.gates[0].passed);
}

/// A signed report whose body `strata bench` wrote (commit f66159b)
/// before `poll_us` and `disable_sqflow` existed, signed with the key of
/// seed `[0x5e; 32]`.
const OLD_SIGNED_REPORT: &[u8] = include_bytes!("../data/signed-report-before-poll-us.json");

#[test]
fn a_signed_report_from_before_poll_us_and_disable_sqflow_still_verifies_and_loads() {
    assert!(!text_contains(OLD_SIGNED_REPORT, "poll_us") && !text_contains(OLD_SIGNED_REPORT, "disable_sqflow"));
    let key = SecretKey::from_seed([0x5e; 32]);
    let opened = sign::verify(OLD_SIGNED_REPORT, Some(&key.public())).expect("the old signed report verifies");
    let report = Report::from_json(opened.body).expect("the old body loads");
    let r = report.result("default").expect("its workload ran");
    assert_eq!((r.ios, r.errors, r.verify_failures), (75_839, 0, 0));
    assert_eq!((r.spec.poll_us, r.spec.disable_sqflow), (0, false), "old runs neither polled nor disabled sqflow");
    assert_eq!(r.spec.iodepth, 1);
    // Written again, the spec carries the new fields.
    let again = String::from_utf8(report.to_json()).expect("utf-8");
    assert!(again.contains("\"poll_us\": 0") && again.contains("\"disable_sqflow\": false"), "{again}");
    assert!(html::render(&report).contains("<svg"));
}

fn text_contains(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}
