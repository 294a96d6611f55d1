//! The load engine against an in-process strata-target serving a RAM
//! namespace: verify round trips, corruption detection, end conditions,
//! the rate limit, stop-loss, cancellation, and the busy-polling initiator
//! with SQ flow control disabled. No assertion depends on
//! timing; the rate test bounds the work done, not the time taken.
//!
//! `transport_limit` (ignored) measures the engine against a target named
//! by `STRATA_BENCH_TARGET` and prints the figures; see its doc.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_bench::{BenchError, Pattern, RunOptions, TargetSpec, WorkloadSpec, run};
use strata_block::{BlockDevice, IoBuf, MemDevice};
use strata_target::{Namespace, NamespaceIds, PortRole, Subsystem, Target, TargetConfig};

const NQN: &str = "nqn.2026-11.io.strata:bench-test";
const BS: u32 = 4096;
/// 16 MiB namespace.
const BLOCKS: u64 = 4096;

struct Fixture {
    _target: Target,
    dev: Arc<MemDevice>,
    addr: SocketAddr,
}

async fn start() -> Fixture {
    let target = Target::new(TargetConfig::default());
    let sub = Subsystem::new(NQN, "STRATABENCH01", vec![]);
    let dev = Arc::new(MemDevice::new(BS, BLOCKS));
    let ids = NamespaceIds { nguid: [1; 16], uuid: [2; 16], eui64: [3; 8] };
    sub.add_namespace(Namespace::new(1, ids, dev.clone())).expect("namespace");
    target.add_subsystem(sub).expect("subsystem");
    let addr = target.listen("127.0.0.1:0".parse().expect("addr"), PortRole::Io).await.expect("listen").addr;
    Fixture { _target: target, dev, addr }
}

fn spec(addr: SocketAddr, rw: Pattern) -> WorkloadSpec {
    WorkloadSpec {
        target: TargetSpec { addr, nqn: NQN.into(), nsid: 1 },
        rw,
        bs: BS,
        iodepth: 8,
        jobs: 2,
        runtime: Some(Duration::from_secs(60)),
        span: Some(4 << 20),
        ..WorkloadSpec::default()
    }
}

fn quick() -> RunOptions {
    RunOptions::default().interval(Duration::from_millis(50))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randwrite_then_randread_with_verify_counts_consistently() {
    let fx = start().await;
    let w = WorkloadSpec { verify: true, size: Some(2000 * u64::from(BS)), ..spec(fx.addr, Pattern::RandWrite) };
    let r = run(&w, quick()).await.expect("write run");
    assert_eq!((r.errors, r.verify_failures, r.aborted.as_deref()), (0, 0, None));
    assert_eq!(r.ios, 2000);
    assert_eq!(r.bytes, r.ios * u64::from(BS));
    assert_eq!(r.histogram.count(), r.ios);
    assert!(r.write_latency.max_us > 0.0 && r.read_latency.max_us == 0.0);

    // A verify read never writes: blocks the random write missed read as
    // zeros, and fail.
    let rd = WorkloadSpec { verify: true, size: Some(3000 * u64::from(BS)), ..spec(fx.addr, Pattern::RandRead) };
    let r = run(&rd, quick()).await.expect("read run");
    assert!(r.verify_failures > 0, "{r:?}");
    let why = r.aborted.expect("aborted");
    assert!(why.contains("found zeros"), "{why}");
    // With a prefill, every block of the span holds the pattern first.
    let rd = WorkloadSpec { prefill: true, ..rd };
    let r = run(&rd, quick()).await.expect("read run");
    assert_eq!((r.errors, r.verify_failures, r.aborted.as_deref()), (0, 0, None));
    assert_eq!(r.ios, 3000);
    assert_eq!(r.bytes, r.ios * u64::from(BS));
    assert!(r.read_latency.max_us > 0.0 && r.write_latency.max_us == 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_block_is_reported_with_its_lba() {
    let fx = start().await;
    let span = 1u64 << 20;
    // One job writes the whole span once (several would share the size,
    // unevenly).
    let w = WorkloadSpec {
        verify: true,
        size: Some(span),
        span: Some(span),
        bs: 16384,
        jobs: 1,
        ..spec(fx.addr, Pattern::Write)
    };
    let r = run(&w, quick()).await.expect("write run");
    assert_eq!((r.errors, r.aborted.as_deref()), (0, None));
    assert_eq!(r.bytes, span);

    // Flip one byte in the middle of block 37, behind the target's back.
    let (mut buf, res) = fx.dev.read(37, IoBuf::zeroed(BS as usize)).await;
    res.expect("device read");
    buf[1000] ^= 0x5a;
    let (_, res) = fx.dev.write(37, buf, false).await;
    res.expect("device write");

    let rd = WorkloadSpec { verify: true, span: Some(span), ..spec(fx.addr, Pattern::RandRead) };
    let r = run(&rd, quick()).await.expect("read run");
    assert!(r.verify_failures > 0, "{r:?}");
    let why = r.aborted.expect("aborted");
    assert!(why.contains("LBA 37") && why.contains("byte 1000"), "{why}");
}

/// Regression (issue 21): a verify read first wrote the pattern over every
/// all-zero block, so a block lost to zeros after a failure passed. Now a
/// read never writes and the lost block fails, by LBA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_lost_to_zeros_fails_a_verify_read_and_is_not_rewritten() {
    let fx = start().await;
    let span = 1u64 << 20;
    let w = WorkloadSpec { verify: true, size: Some(span), span: Some(span), jobs: 1, ..spec(fx.addr, Pattern::Write) };
    let r = run(&w, quick()).await.expect("write run");
    assert_eq!((r.errors, r.aborted.as_deref()), (0, None));
    // Block 100 is lost: it reads as zeros.
    let (_, res) = fx.dev.write(100, IoBuf::zeroed(BS as usize), false).await;
    res.expect("device write");
    let rd = WorkloadSpec { verify: true, span: Some(span), jobs: 1, ..spec(fx.addr, Pattern::Read) };
    let r = run(&WorkloadSpec { size: Some(span), runtime: None, ..rd }, quick()).await.expect("read run");
    assert!(r.verify_failures > 0, "{r:?}");
    let why = r.aborted.expect("aborted");
    assert!(why.contains("LBA 100") && why.contains("zeros"), "{why}");
    let (b, res) = fx.dev.read(100, IoBuf::zeroed(BS as usize)).await;
    res.expect("device read");
    assert!(b.iter().all(|&x| x == 0), "the verify read wrote over the lost block");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_read_of_the_pattern_left_by_a_sequential_write_passes() {
    let fx = start().await;
    // One job writes the span once (jobs share the size, unevenly).
    let w = WorkloadSpec {
        verify: true,
        runtime: None,
        size: Some(4 << 20),
        bs: 65536,
        jobs: 1,
        ..spec(fx.addr, Pattern::Write)
    };
    let r = run(&w, quick()).await.expect("write run");
    assert_eq!((r.errors, r.aborted.as_deref()), (0, None));
    let rd = WorkloadSpec { verify: true, size: Some(8 << 20), bs: 8192, ..spec(fx.addr, Pattern::Read) };
    let r = run(&rd, quick()).await.expect("read run");
    assert_eq!((r.errors, r.verify_failures, r.aborted.as_deref()), (0, 0, None));
    assert_eq!(r.bytes, 8 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_ends_the_run_after_exactly_that_many_bytes() {
    let fx = start().await;
    for (jobs, iodepth) in [(1, 1), (3, 7), (4, 32)] {
        let s = WorkloadSpec { jobs, iodepth, size: Some(1001 * u64::from(BS)), ..spec(fx.addr, Pattern::RandRead) };
        let r = run(&s, quick()).await.expect("run");
        assert_eq!((r.ios, r.bytes), (1001, 1001 * u64::from(BS)), "jobs {jobs} iodepth {iodepth}");
        assert!(r.aborted.is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_bounds_the_work_done() {
    let fx = start().await;
    let s = WorkloadSpec {
        rate_iops: Some(2000),
        runtime: Some(Duration::from_millis(600)),
        ramp: Duration::from_millis(100),
        ..spec(fx.addr, Pattern::RandRead)
    };
    let r = run(&s, quick()).await.expect("run");
    // Unlimited, this target does far more than 2000 IOPS.
    let allowed = 2000.0 * r.duration_s * 1.5 + 50.0;
    assert!((r.ios as f64) < allowed, "{} I/Os in {} s at 2000 IOPS", r.ios, r.duration_s);
    assert!(r.ios > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_loss_aborts_the_run_with_its_reason() {
    let fx = start().await;
    let calls = Arc::new(Mutex::new(0));
    let seen = calls.clone();
    let opts = quick().stop_loss(move |sample, hist| {
        *seen.lock().unwrap() += 1;
        assert!(hist.count() > 0 && sample.iops > 0.0);
        Some(format!("p99 {:.0}us over budget", sample.p99_us.max(1e9)))
    });
    let s = spec(fx.addr, Pattern::RandRead);
    let r = run(&s, opts).await.expect("run");
    assert_eq!(r.aborted.as_deref(), Some("stop-loss: p99 1000000000us over budget"));
    assert_eq!(*calls.lock().unwrap(), 1);
    assert!(r.ios > 0);
    assert_eq!(r.errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_ends_the_run_with_partial_results() {
    let fx = start().await;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let progress = Arc::new(Mutex::new(Vec::new()));
    let p = progress.clone();
    let opts = quick().cancel_on(rx).on_progress(move |pr| {
        p.lock().unwrap().push(pr.to_string());
        // Cancel from the second interval on, as Ctrl-C would.
        if p.lock().unwrap().len() >= 2 {
            let _ = tx.send(true);
        }
    });
    let r = run(&spec(fx.addr, Pattern::RandRead), opts).await.expect("run");
    assert_eq!(r.aborted.as_deref(), Some("cancelled"));
    assert!(r.ios > 0 && r.timeseries.len() >= 2);
    let lines = progress.lock().unwrap();
    assert!(lines[0].contains("IOPS") && lines[0].contains("/60s"), "{}", lines[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_during_the_prefill_is_reported_as_such() {
    let fx = start().await;
    let (_tx, rx) = tokio::sync::watch::channel(true);
    let s = WorkloadSpec {
        verify: true,
        prefill: true,
        span: Some(BLOCKS * u64::from(BS)),
        ..spec(fx.addr, Pattern::RandRead)
    };
    let r = run(&s, quick().cancel_on(rx)).await.expect("run");
    assert_eq!(r.aborted.as_deref(), Some("cancelled (during the prefill)"));
    assert_eq!((r.ios, r.errors, r.verify_failures), (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randrw_with_digests_records_read_and_write_latencies() {
    let fx = start().await;
    let s = WorkloadSpec {
        read_pct: 70,
        size: Some(4000 * u64::from(BS)),
        verify: true,
        prefill: true,
        ..spec(fx.addr, Pattern::RandRw)
    };
    let r = run(&s, quick()).await.expect("run");
    assert_eq!((r.errors, r.verify_failures, r.aborted.as_deref()), (0, 0, None));
    assert!(r.read_latency.max_us > 0.0 && r.write_latency.max_us > 0.0, "{r:?}");
    assert!(r.read_latency.p50_us > 0.0 && r.write_latency.p50_us > 0.0);
    assert_eq!(r.ios, 4000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_polling_without_sq_flow_control_verifies_writes_and_reads() {
    let fx = start().await;
    // Polling jobs and the in-process target share the runtime's two
    // threads: the spin must yield, or the target never answers.
    let poll = |s: WorkloadSpec| WorkloadSpec { poll_us: 200, disable_sqflow: true, verify: true, prefill: true, ..s };
    let w = poll(WorkloadSpec { size: Some(1500 * u64::from(BS)), ..spec(fx.addr, Pattern::RandWrite) });
    let r = run(&w, quick()).await.expect("write run");
    assert_eq!((r.errors, r.verify_failures, r.aborted.as_deref()), (0, 0, None));
    assert_eq!(r.ios, 1500);
    assert_eq!((r.spec.poll_us, r.spec.disable_sqflow), (200, true), "the result records how it ran");

    // Reads are what the SUCCESS flag completes: random 4 KiB reads of the
    // pattern just written, and 64 KiB sequential reads, all checked byte
    // by byte.
    let rd = poll(WorkloadSpec { size: Some(3000 * u64::from(BS)), ..spec(fx.addr, Pattern::RandRead) });
    let r = run(&rd, quick()).await.expect("random read run");
    assert_eq!((r.errors, r.verify_failures, r.aborted.as_deref()), (0, 0, None));
    assert_eq!(r.ios, 3000);
    assert!(r.read_latency.max_us > 0.0 && r.histogram.count() == r.ios);
    let seq = poll(WorkloadSpec { bs: 65536, size: Some(8 << 20), ..spec(fx.addr, Pattern::Read) });
    let r = run(&seq, quick()).await.expect("sequential read run");
    assert_eq!((r.errors, r.verify_failures, r.aborted.as_deref()), (0, 0, None));
    assert_eq!(r.bytes, 8 << 20);

    // A mix under a runtime rather than a size: the spin must not keep a
    // job from seeing its deadline.
    let mix = poll(WorkloadSpec {
        read_pct: 70,
        runtime: Some(Duration::from_millis(300)),
        ..spec(fx.addr, Pattern::RandRw)
    });
    let r = run(&mix, quick()).await.expect("mixed run");
    assert_eq!((r.errors, r.verify_failures, r.aborted.as_deref()), (0, 0, None));
    assert!(r.ios > 0 && r.read_latency.max_us > 0.0 && r.write_latency.max_us > 0.0, "{r:?}");
    assert!(r.duration_s < 30.0, "{}", r.duration_s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_poll_budget_above_one_second_is_refused_naming_the_field() {
    // Nothing listens on port 9: the spec is refused before connecting.
    let s = WorkloadSpec { poll_us: 1_000_001, ..spec("127.0.0.1:9".parse().expect("addr"), Pattern::RandRead) };
    let e = run(&s, quick()).await.unwrap_err();
    assert!(matches!(e, BenchError::BadSpec { field: "poll_us", .. }), "{e}");
    assert!(e.to_string().contains("poll_us"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_specs_and_unknown_namespaces_are_typed_errors() {
    let fx = start().await;
    let s = WorkloadSpec { bs: 6000, ..spec(fx.addr, Pattern::RandRead) };
    assert!(matches!(run(&s, quick()).await, Err(BenchError::BadSpec { field: "bs", .. })));
    let s = WorkloadSpec { span: Some(1 << 40), ..spec(fx.addr, Pattern::RandRead) };
    assert!(matches!(run(&s, quick()).await, Err(BenchError::BadSpec { field: "span", .. })));
    let mut s = spec(fx.addr, Pattern::RandRead);
    s.target.nsid = 9;
    let e = run(&s, quick()).await.unwrap_err();
    assert!(matches!(e, BenchError::Namespace { nsid: 9, .. } | BenchError::Identify { nsid: 9, .. }), "{e}");
    let mut s = spec(fx.addr, Pattern::RandRead);
    s.target.nqn = "nqn.2026-11.io.strata:nobody".into();
    assert!(matches!(run(&s, quick()).await, Err(BenchError::Connect { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_io_error_ends_the_run_and_is_counted() {
    let fx = start().await;
    // Shrink the namespace under a run that was sized for the old one:
    // its I/Os beyond the new end fail with LBA Out of Range.
    let dev = fx.dev.clone();
    let opts = quick().on_progress(move |_| dev.resize(16));
    let s = WorkloadSpec { span: Some(BLOCKS * u64::from(BS)), ..spec(fx.addr, Pattern::RandRead) };
    let r = run(&s, opts).await.expect("run");
    assert!(r.errors > 0, "{r:?}");
    let why = r.aborted.expect("aborted");
    assert!(why.contains("read of 1 blocks at LBA") && why.contains("failed"), "{why}");
}
