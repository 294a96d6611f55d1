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
    let _group = strata_testkit::group(module_path!());
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
    let data = num(&v, "data_at_first_full");
    assert!((data - util / 3.0).abs() < 0.001, "data at first full {data}, utilization {util}");
    assert_eq!(num(&v, "rebuild_mbps"), 1000.0);
    assert!(num(&v, "rebuild_seconds") > 0.0);
    assert!(num(&v, "rebuild_bytes_read") >= num(&v, "rebuild_lost_bytes"));
    assert!(num(&v, "seconds") > 0.0);
    assert!(num(&v, "pgs") >= 200.0 * 100.0 / 3.0);
}

#[test]
fn summary_names_the_figures() {
    let _group = strata_testkit::group(module_path!());
    let out = sim(&["--nodes", "60", "--rack-size", "6", "--drive-size", "256G", "--drives-per-node", "2"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let s = text(&out.stdout);
    for want in [
        "60 nodes x 2 drives",
        "utilization at first full drive",
        "adding 1 nodes",
        "failing one node",
        "rebuild sources",
        "data at first full drive",
        "rebuild of one node (slowest of 3) at 1000 MB/s a node",
    ] {
        assert!(s.contains(want), "{want:?} missing from:\n{s}");
    }
}

#[test]
fn erasure_coding_holds_more_data_and_rebuilds_from_k_shards() {
    let _group = strata_testkit::group(module_path!());
    let small = ["--json", "--nodes", "48", "--rack-size", "3", "--drives-per-node", "2", "--drive-size", "256G"];
    let report = |extra: &[&str]| -> Value {
        let out = sim(&[&small[..], extra].concat());
        assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("stdout is JSON")
    };
    let ec = report(&["--protect", "EC:4+2", "--rebuild-mbps", "500"]);
    assert_eq!(ec["protection"], "ec:4+2");
    assert_eq!(num(&ec, "rebuild_mbps"), 500.0);
    let util = num(&ec, "utilization_at_first_full");
    let data = num(&ec, "data_at_first_full");
    assert!(util > 0.97 && (data - util * 4.0 / 6.0).abs() < 0.001, "utilization {util}, data {data}");
    let read = num(&ec, "rebuild_bytes_read");
    assert!(read >= 4.0 * num(&ec, "rebuild_lost_bytes"), "ec:4+2 reads 4 shards per lost shard: {ec}");
    let rep = report(&[]);
    assert!(data > 1.9 * num(&rep, "data_at_first_full"), "ec:4+2 holds about twice rep:3's data: {data}");
}

#[test]
fn bad_options_are_refused_with_exit_2_and_a_reason() {
    let _group = strata_testkit::group(module_path!());
    let cases: [(&[&str], &str); 8] = [
        (&["--protect", "rep:0"], "1 to 8 copies"),
        (&["--protect", "ec:4+0"], "ec:K+M takes K >= 1, M >= 1 and K+M <= 32"),
        (&["--protect", "ec:4"], "write rep:N or ec:K+M"),
        (&["--rebuild-mbps", "0"], "--rebuild-mbps = 0: give 1 to 1000000"),
        (&["--nodes", "200", "--protect", "ec:8+3"], "ec:8+3 needs 11 racks with up nodes; the cluster has 10"),
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
