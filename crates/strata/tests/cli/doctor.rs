//! `strata doctor` as an operator runs it: a machine fit for strata
//! passes (exit 0), a broken one fails (exit 1) naming each failed check
//! with its remedy, and `--json` is one parsable document. The broken
//! machine is fed through the hidden `--proc-root`, `--sys-root` and
//! `--modules-root` options, a data dir that is a file, a port held by
//! this test and an etcd endpoint nobody listens on.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_strata");

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0)).and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

fn doctor(args: &[&str]) -> Output {
    Command::new(BIN).arg("doctor").args(args).output().expect("strata doctor")
}

/// A config file in `dir` with free ports and a small drive file.
fn config(dir: &Path, data_dir: &Path, listen: u16) -> String {
    let path = dir.join("strata.toml");
    let text = format!(
        "data_dir = {:?}\nlisten = [\"127.0.0.1:{listen}\"]\ndiscovery = [\"127.0.0.1:{}\"]\n\
         http = \"127.0.0.1:{}\"\ndrives = [{:?}]\n",
        data_dir.display().to_string(),
        free_port(),
        free_port(),
        format!("{}:256M", data_dir.join("drive0.img").display()),
    );
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A /proc without the NVMe host modules, and no modules to load, where
/// nginx (pid 4242) listens on `port`.
fn broken_roots(dir: &Path, port: u16) -> [String; 6] {
    let proc = dir.join("proc");
    std::fs::create_dir_all(proc.join("net")).unwrap();
    let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
    let listen = format!(
        "   0: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777001 1 0\n"
    );
    std::fs::write(proc.join("net/tcp"), format!("{header}{listen}")).unwrap();
    std::fs::create_dir_all(proc.join("4242/fd")).unwrap();
    std::os::unix::fs::symlink("socket:[777001]", proc.join("4242/fd/3")).unwrap();
    std::fs::write(proc.join("4242/comm"), "nginx\n").unwrap();
    std::fs::create_dir_all(proc.join("sys/kernel")).unwrap();
    std::fs::write(proc.join("sys/kernel/osrelease"), "6.1.0-broken\n").unwrap();
    std::fs::write(proc.join("modules"), "loop 32768 0 - Live 0x0\n").unwrap();
    std::fs::write(proc.join("meminfo"), "MemTotal: 1024 kB\nHugePages_Total: 0\nHugepagesize: 2048 kB\n").unwrap();
    std::fs::create_dir_all(dir.join("lib/6.1.0-broken")).unwrap();
    std::fs::write(dir.join("lib/6.1.0-broken/modules.dep"), "kernel/drivers/block/loop.ko:\n").unwrap();
    [
        "--proc-root".into(),
        proc.display().to_string(),
        "--sys-root".into(),
        dir.join("sys").display().to_string(),
        "--modules-root".into(),
        dir.join("lib").display().to_string(),
    ]
}

#[test]
fn a_fit_machine_passes() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = config(dir.path(), &data, free_port());
    let out = doctor(&["--config", &cfg]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for line in ["ok    config", "ok    O_DIRECT", "ok    open files", "(NVMe/TCP)", "0 failed"] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    assert!(!text.lines().any(|l| l.starts_with("fail")), "{text}");
    // The probe leaves nothing behind, and a missing data dir is not made.
    assert!(!data.exists());
}

#[test]
fn a_broken_machine_fails_naming_each_check_and_its_remedy() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, "x").unwrap();
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = config(dir.path(), &not_a_dir, held.local_addr().unwrap().port());
    let etcd = format!("http://127.0.0.1:{}", free_port());
    let roots = broken_roots(dir.path(), held.local_addr().unwrap().port());
    let mut args = vec!["--config", &cfg, "--etcd", &etcd];
    args.extend(roots.iter().map(String::as_str));
    let out = doctor(&args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let after = |prefix: &str| -> String {
        let mut lines = text.lines().skip_while(|l| !l.starts_with(prefix));
        let first = lines.next().unwrap_or_else(|| panic!("no {prefix:?} in:\n{text}"));
        let fix = lines.next().unwrap_or("");
        assert!(fix.trim_start().starts_with("fix: "), "{prefix:?} has no remedy:\n{text}");
        format!("{first}\n{fix}")
    };
    assert!(after("fail  O_DIRECT").contains("not a directory"), "{text}");
    let etcd_line = after(&format!("fail  etcd {etcd}"));
    assert!(etcd_line.contains("cannot connect") && etcd_line.contains("start etcd"), "{etcd_line}");
    let port = after(&format!("fail  port {}", held.local_addr().unwrap()));
    assert!(port.contains("held by nginx (pid 4242)") && port.contains("stop it"), "{port}");
    let modules = after("warn  kernel modules");
    assert!(modules.contains("nvme_tcp") && modules.contains("modprobe"), "{modules}");
    assert!(text.contains("3 failed"), "{text}");
}

#[test]
fn a_bad_config_fails_and_the_defaults_are_checked_instead() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "listne = []\n").unwrap();
    let data = dir.path().display().to_string();
    let out = doctor(&["--config", &cfg.display().to_string(), "--data-dir", &data]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.lines().any(|l| l.starts_with("fail  config") && l.contains("listne")), "{text}");
    assert!(text.contains("ok    O_DIRECT"), "{text}");
}

#[test]
fn json_output_parses_and_carries_every_verdict() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = config(dir.path(), &dir.path().join("data"), held.local_addr().unwrap().port());
    let etcd = format!("http://127.0.0.1:{}", free_port());
    let out = doctor(&["--config", &cfg, "--etcd", &etcd, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let checks = v["checks"].as_array().expect("checks");
    assert_eq!(v["failures"], 2, "{v:#}");
    for c in checks {
        assert!(c["name"].is_string() && c["detail"].is_string(), "{c}");
        match c["status"].as_str() {
            Some("ok") => {}
            Some("warn" | "fail") => assert!(c["remedy"].is_string(), "{c}"),
            other => panic!("status {other:?}"),
        }
    }
    let names: Vec<&str> = checks.iter().filter(|c| c["status"] == "fail").filter_map(|c| c["name"].as_str()).collect();
    assert!(names.iter().any(|n| n.starts_with("etcd")) && names.iter().any(|n| n.starts_with("port")), "{names:?}");
}

/// tmpfs refuses O_DIRECT on older kernels (newer ones accept it): either
/// way the verdict is clear, and a refusal points at `allow_buffered`.
#[test]
fn a_data_dir_on_tmpfs_gets_a_clear_direct_io_verdict() {
    let _group = strata_testkit::group(module_path!());
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let out = doctor(&["--data-dir", &dir.path().display().to_string(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let check = v["checks"].as_array().unwrap().iter().find(|c| c["name"] == "O_DIRECT").cloned().unwrap();
    match check["status"].as_str() {
        Some("ok") => {}
        Some("fail") => {
            assert!(check["remedy"].as_str().unwrap().contains("allow_buffered"), "{check}");
            assert_eq!(out.status.code(), Some(1));
        }
        other => panic!("O_DIRECT on tmpfs: {other:?} {check}"),
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the probe file was left");
}

/// Doctor run beside the node it checks: the node's ports are held by
/// strata, which is fine.
#[test]
fn ports_held_by_a_running_strata_pass() {
    let _group = strata_testkit::group(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let io = free_port();
    let cfg = config(dir.path(), &data, io);
    let argv = [BIN, "serve", "--config", &cfg, "--default-volume-size", "0"];
    let mut serve = strata_testkit::Proc::spawn("strata-serve", argv, dir.path().join("serve.log"));
    let addr = format!("127.0.0.1:{io}").parse().unwrap();
    if let Err(e) = serve.wait_listening(&[addr], std::time::Duration::from_secs(20)) {
        panic!("strata serve: {e}");
    }
    let out = doctor(&["--config", &cfg]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let line = text.lines().find(|l| l.contains(&format!("port 127.0.0.1:{io}"))).unwrap();
    assert!(line.starts_with("ok") && line.contains("held by strata"), "{line}");
}
