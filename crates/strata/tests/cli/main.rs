//! Tests of the `strata` binary as one process: `strata serve` driven by
//! strata's initiator and the volume CLI, `strata kv serve` driven by
//! redis-cli, the benchmark and simulator commands, and a minute of
//! chaos. One test binary (each one links the whole tree); the tests of
//! one module never run beside another module's
//! ([`strata_testkit::group`]), as when each was a binary of its own.

mod bench_cli;
mod chaos;
mod kv_redis;
mod serve;
mod sim_cli;

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
