//! The log of `strata serve` as a service manager or a log shipper sees
//! it: stderr redirected to a file, `NO_COLOR` unset.
//!
//! Regression: the serving commands coloured their log with ANSI escapes
//! whatever stderr was, so a log file or the journal was full of ESC
//! bytes. Text logs are coloured only on a terminal now, and
//! `--log-format json` writes one JSON object per line.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_strata");

fn free_port() -> u16 {
    // Bind port 0 and release it: another process could take it in
    // between, which on a test machine is rare enough.
    TcpListener::bind(("127.0.0.1", 0)).and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// Runs `strata serve` with `extra` options until it listens, then stops
/// it with SIGTERM; its stderr, which must have been a clean exit.
fn serve_log(dir: &Path, extra: &[&str]) -> Vec<u8> {
    let io: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = dir.join("stderr.log");
    let mut child: Child = Command::new(BIN)
        .arg("serve")
        .args(["--data-dir", &dir.display().to_string(), "--listen", &io.to_string()])
        .args(["--discovery", &format!("127.0.0.1:{}", free_port()), "--http", &api.to_string()])
        .args(["--default-volume-size", "64M", "--drive", &format!("{}:256M", dir.join("drive0.img").display())])
        .args(extra)
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .env_remove("STRATA_LOG_FORMAT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("strata serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    while ![io, api].iter().all(|a| TcpStream::connect_timeout(a, Duration::from_millis(100)).is_ok()) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("strata serve exited ({status}): {}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        assert!(Instant::now() < deadline, "strata serve is not listening after 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid, which we have not reaped,
    // so it cannot name another process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("strata serve did not exit on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let bytes = std::fs::read(&log).unwrap();
    assert!(status.success(), "exit {status}: {}", String::from_utf8_lossy(&bytes));
    bytes
}

#[test]
fn a_text_log_in_a_file_has_no_colour_and_the_startup_lines() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let log = serve_log(dir.path(), &[]);
    let text = String::from_utf8(log).expect("UTF-8 log");
    assert!(!text.as_bytes().contains(&0x1b), "ESC in a log file:\n{text}");
    for line in [
        "drive ready",
        "created the default volume",
        "listening for NVMe/TCP",
        "SIGTERM: shutting down",
        "all drives flushed; bye",
    ] {
        assert!(text.lines().any(|l| l.contains(" INFO ") && l.contains(line)), "no INFO {line:?} in:\n{text}");
    }
}

#[test]
fn a_json_log_is_one_object_per_line() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let log = serve_log(dir.path(), &["--log-format", "json"]);
    assert!(!log.contains(&0x1b), "ESC in a JSON log");
    let text = String::from_utf8(log).expect("UTF-8 log");
    let mut messages = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["timestamp"].is_string() && v["target"].is_string(), "{line}");
        assert!(["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&v["level"].as_str().unwrap_or("")), "{line}");
        let message = v["fields"]["message"].as_str().unwrap_or_else(|| panic!("no fields.message: {line}"));
        messages.push(message.to_string());
    }
    for m in ["listening for NVMe/TCP", "all drives flushed; bye"] {
        assert!(messages.iter().any(|x| x == m), "no {m:?} in {messages:?}");
    }
    // Fields stay typed values, not text: the listener's address.
    let listening = text.lines().find(|l| l.contains("listening for NVMe/TCP")).unwrap();
    let v: serde_json::Value = serde_json::from_str(listening).unwrap();
    assert!(v["fields"]["bound"].as_str().is_some_and(|b| b.starts_with("127.0.0.1:")), "{listening}");
}

#[test]
fn the_config_file_sets_the_log_format() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strata.toml");
    std::fs::write(&config, "log_format = \"json\"\n").unwrap();
    let log = serve_log(dir.path(), &["--config", &config.display().to_string()]);
    let text = String::from_utf8(log).unwrap();
    assert!(text.lines().count() > 2 && text.lines().all(|l| l.starts_with('{')), "{text}");
}
