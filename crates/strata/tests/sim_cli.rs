//! `strata sim` end to end: the binary runs the pool's scale simulator on a
//! small cluster and prints a JSON report whose figures operators and CI
//! read; bad options are refused with a clear message and exit 2, never a
//! panic.

use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_strata");

fn sim(args: &[&str]) -> Output {
    Command::new(BIN).arg("sim").args(args).output().expect("run strata sim")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or_else(|| panic!("{key} missing or not a number in {v}"))
}

#[test]
fn json_report_of_a_small_cluster_has_sane_figures() {
    let out = sim(&["--json", "--nodes", "200", "--drives-per-node", "8", "--drive-size", "1T", "--seed", "7"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(num(&v, "nodes"), 200.0);
    assert_eq!(num(&v, "drives"), 1600.0);
    assert_eq!(num(&v, "racks"), 10.0);
    assert_eq!(num(&v, "raw_bytes"), 200.0 * 8.0 * (1u64 << 40) as f64);
    assert_eq!(v["protection"], "rep:3");
    let util = num(&v, "utilization_at_first_full");
    assert!(util > 0.97 && util <= 1.0, "utilization {util}");
    let max_fill = num(&v, "max_fill_over_mean");
    assert!((1.0..1.03).contains(&max_fill), "max fill over mean {max_fill}");
    let add = num(&v, "moved_on_add_ratio");
    assert!(add > 0.8 && add <= 1.1, "moved on add {add}");
    let fail = num(&v, "moved_on_fail_ratio");
    assert!((1.0..=1.1).contains(&fail), "moved on fail {fail}");
    let sources = num(&v, "rebuild_sources_min");
    assert!((100.0..200.0).contains(&sources), "rebuild sources {sources}");
    assert!(num(&v, "seconds") > 0.0);
    assert!(num(&v, "pgs") >= 200.0 * 100.0 / 3.0);
}

#[test]
fn summary_names_the_figures() {
    let out = sim(&["--nodes", "60", "--rack-size", "6", "--drive-size", "256G", "--drives-per-node", "2"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let s = text(&out.stdout);
    for want in [
        "60 nodes x 2 drives",
        "utilization at first full drive",
        "adding 1 nodes",
        "failing one node",
        "rebuild sources",
    ] {
        assert!(s.contains(want), "{want:?} missing from:\n{s}");
    }
}

#[test]
fn bad_options_are_refused_with_exit_2_and_a_reason() {
    let cases: [(&[&str], &str); 5] = [
        (&["--protect", "rep:0"], "1 to 8 copies"),
        (&["--protect", "ec:4+0"], "ec:K+M takes K >= 1, M >= 1 and K+M <= 32"),
        (&["--drive-size", "12X"], "unknown unit"),
        (&["--nodes", "0"], "--nodes"),
        (&["--nodes", "30", "--rack-size", "20"], "rep:3 needs 3 racks with up nodes; the cluster has 2 (r0, r1)"),
    ];
    for (args, want) in cases {
        let out = sim(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {want:?} missing from {err:?}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
