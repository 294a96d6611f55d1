//! The chaos suite, short run: about 60 s of verified I/O against a real
//! `strata serve` while it is attacked with every fault kind the suite
//! has (connection resets during Flush and R2T transfers, kill -9 and
//! restart, idle sockets, stalled readers, R2T hoarders, connect floods,
//! volume create/resize/delete under connected hosts), every block read
//! back judged by the durability oracle. The long run is
//! `bench/soak.sh`; what the suite does and how to replay a seed is in
//! docs/chaos.md.

use std::time::Duration;

use strata_chaos::{ChaosConfig, FaultKind};

/// Replay a failure of this test with
/// `strata-chaos run --strata target/debug/strata --duration 60s --seed 20261201`.
const SEED: u64 = 20261201;

#[test]
fn a_minute_of_chaos_loses_nothing_hangs_nothing_and_cuts_off_every_attacker() {
    let _group = strata_testkit::group(module_path!());
    let mut cfg = ChaosConfig::new(env!("CARGO_BIN_EXE_strata"), Duration::from_secs(60), SEED);
    // The worst case docs/operations.md promises for these settings.
    cfg.rss_limit_bytes = cfg.tuning.as_ref().map(|t| t.memory_bound_bytes());
    cfg.watchdog = Duration::from_secs(20);
    cfg.progress = true;
    let report = strata_chaos::run(&cfg).expect("the chaos run could not be carried out");
    let summary = report.summary();
    println!("{summary}");
    // The run did what it is for: several rounds, every fault kind
    // injected, data written and read back.
    assert!(report.rounds >= 3, "only {} rounds ran\n{summary}", report.rounds);
    for kind in FaultKind::ALL {
        let n = report.faults.get(kind.name()).copied().unwrap_or(0);
        assert!(n > 0, "no {} fault was injected\n{summary}", kind.name());
    }
    assert!(report.bytes_written > 0 && report.bytes_verified > 0, "{summary}");
    assert!(report.legit_probes > 0, "no legitimate host probed under attack\n{summary}");
    let failed: Vec<&String> = report.scenarios.iter().filter(|(_, s)| s.failures > 0).map(|(n, _)| n).collect();
    assert!(
        report.is_clean(),
        "the chaos run (seed {SEED}) found failures (summary above): {} blocks lost, {} wrong reads, {} hangs, \
         peak RSS {} MiB; failing scenarios: {failed:?}",
        report.blocks_lost,
        report.wrong_reads,
        report.hangs,
        report.peak_rss_bytes >> 20
    );
}
