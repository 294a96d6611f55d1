//! Tests of the `strata` binary as one process: `strata serve` driven by
//! strata's initiator and the volume CLI, `strata kv serve` driven by
//! redis-cli, the benchmark and simulator commands, and a minute of
//! chaos. One test binary (each one links the whole tree); the tests of
//! one module never run beside another module's
//! ([`strata_testkit::group`]), as when each was a binary of its own.

mod bench_cli;
mod chaos;
mod doctor;
mod kv_redis;
mod logs;
mod serve;
mod sim_cli;
mod topology_cli;

/// A self-signed certificate for 127.0.0.1 and its key (mode 0600) in
/// `dir`, named `NAME.crt` and `NAME.key`, made with openssl(1).
pub fn self_signed(dir: &std::path::Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let (cert, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj"])
        .arg(format!("/CN=strata-{name}"))
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl(1)");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    (cert, key)
}

/// Prometheus text parsed by the Prometheus client's own parser
/// (`tests/metrics_parse.py`, which also checks the histograms' and
/// counters' conventions): every sample, by name, as `[labels, value]`.
pub fn parse_metrics(text: &str) -> serde_json::Map<String, serde_json::Value> {
    use std::io::Write;
    let checker = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/metrics_parse.py");
    let mut child = std::process::Command::new("/usr/bin/python3")
        .arg(checker)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("/usr/bin/python3 (with python3-prometheus-client)");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the exposition failed the Prometheus parser or its checks ({}):\n{}\n--- text:\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from metrics_parse.py")
}

/// The value of sample `name` whose labels include all of `labels`;
/// panics unless exactly one matches.
pub fn sample(samples: &serde_json::Map<String, serde_json::Value>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let all = samples.get(name).and_then(|v| v.as_array()).unwrap_or_else(|| panic!("no {name}"));
    let found: Vec<f64> = all
        .iter()
        .filter(|s| labels.iter().all(|(k, v)| s[0][*k].as_str() == Some(*v)))
        .map(|s| s[1].as_f64().unwrap())
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
    found[0]
}
