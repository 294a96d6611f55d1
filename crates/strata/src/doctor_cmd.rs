//! `strata doctor`: checks that this machine can run strata and says what
//! to fix. Each check ends `ok`, `warn` (strata runs, but something is
//! worse than it could be) or `fail` (strata will not run, or not as
//! configured), with a one-line remedy for the last two. The exit code is
//! 1 when some check failed, else 0.
//!
//! The checks only read: they load no module, change no limit and keep no
//! file (the O_DIRECT probe removes its file). Where the machine's state
//! comes from files (`/proc`, `/sys`, `/lib/modules`) the roots are
//! options (hidden from `--help`), so tests can feed a broken machine.
//!
//! The system calls (`statvfs`, `getrlimit`, `adjtimex`) sit in the leaf
//! module [`sys`] below, each behind a safe function.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use crate::config::{self, ServeArgs};

/// Free space below which the data dir check fails.
const FAIL_FREE_BYTES: u64 = 1 << 30;
/// File descriptors strata needs besides one per connection: drives,
/// listeners, etcd, the API, logs.
const FD_MARGIN: u64 = 256;
/// How long a network check may wait for a connect or a reply.
const NET_TIMEOUT: Duration = Duration::from_secs(2);
/// The block written with O_DIRECT: a logical block of every drive.
const DIRECT_BLOCK: usize = 4096;

/// Options of `strata doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The node's config file: its data dir, ports, connection limit and
    /// ([node] etcd) etcd endpoints are checked.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Data directory. Default: the config's, else ./strata-data
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// etcd endpoints to reach, comma separated. Default: the config's
    /// [node] etcd; none: not checked.
    #[arg(long, value_name = "URL[,URL...]")]
    etcd: Option<String>,
    /// Print JSON: {"checks": [{"name", "status", "detail", "remedy"}],
    /// "warnings", "failures"}.
    #[arg(long)]
    json: bool,
    /// Where procfs is (tests).
    #[arg(long, hide = true, value_name = "DIR", default_value = "/proc")]
    proc_root: PathBuf,
    /// Where sysfs is (tests).
    #[arg(long, hide = true, value_name = "DIR", default_value = "/sys")]
    sys_root: PathBuf,
    /// Where the kernels' modules are (tests).
    #[arg(long, hide = true, value_name = "DIR", default_value = "/lib/modules")]
    modules_root: PathBuf,
}

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// strata runs, but something could be better.
    Warn,
    /// strata will not run, or not as configured.
    Fail,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked, e.g. "O_DIRECT".
    pub name: String,
    /// Its verdict.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// What to do about it (warn and fail only).
    pub remedy: Option<String>,
}

impl Check {
    fn ok(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check { name: name.into(), status: Status::Ok, detail: one_line(&detail.into()), remedy: None }
    }

    fn warn(name: impl Into<String>, detail: impl Into<String>, remedy: impl Into<String>) -> Check {
        Check { name: name.into(), status: Status::Warn, detail: one_line(&detail.into()), remedy: Some(remedy.into()) }
    }

    fn fail(name: impl Into<String>, detail: impl Into<String>, remedy: impl Into<String>) -> Check {
        Check { name: name.into(), status: Status::Fail, detail: one_line(&detail.into()), remedy: Some(remedy.into()) }
    }
}

/// `text` on one line: a TOML error's source excerpt (`1 | key = ...`,
/// `| ^^^`) is dropped, the rest joined with spaces.
fn one_line(text: &str) -> String {
    let excerpt = |l: &str| l.starts_with('|') || l.split_once(" |").is_some_and(|(n, _)| n.parse::<u32>().is_ok());
    let kept: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty() && !excerpt(l)).collect();
    kept.join(" ")
}

/// Where the machine's state is read from.
#[derive(Debug, Clone)]
pub struct Roots {
    /// procfs (`/proc`).
    pub proc: PathBuf,
    /// sysfs (`/sys`).
    pub sys: PathBuf,
    /// The modules of all kernels (`/lib/modules`).
    pub modules: PathBuf,
}

/// What to check: the node's settings and the roots.
#[derive(Debug, Clone)]
pub struct Doctor {
    /// Where the machine's state is read from.
    pub roots: Roots,
    /// The data directory.
    pub data_dir: PathBuf,
    /// Listeners: what each is for, and its address.
    pub ports: Vec<(&'static str, SocketAddr)>,
    /// Connections served at once (`max_connections`) plus drives.
    pub max_connections: u64,
    /// Sizes of the drive files (`PATH:SIZE`; not block devices or RAM):
    /// sparse, they fill as volumes are written, so the free space should
    /// hold them.
    pub drive_file_bytes: u64,
    /// etcd endpoints (none: not checked).
    pub etcd: Vec<String>,
}

/// Runs `strata doctor`: prints the checks; exit 1 when one failed.
pub fn main(args: DoctorArgs) -> ExitCode {
    let (doctor, config_check) = doctor_of(&args);
    let mut checks: Vec<Check> = config_check.into_iter().collect();
    checks.extend(doctor.run());
    let warnings = checks.iter().filter(|c| c.status == Status::Warn).count();
    let failures = checks.iter().filter(|c| c.status == Status::Fail).count();
    if args.json {
        let v = serde_json::json!({ "checks": checks, "warnings": warnings, "failures": failures });
        match serde_json::to_string_pretty(&v) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("strata: error: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", render(&checks));
        println!("{} checks: {warnings} warnings, {failures} failed", checks.len());
    }
    if failures > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// The checks as text: `STATUS  NAME  DETAIL`, then `fix: REMEDY`.
pub fn render(checks: &[Check]) -> String {
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in checks {
        out.push_str(&format!("{:<5} {:<width$}  {}\n", c.status.label(), c.name, c.detail));
        if let Some(r) = &c.remedy {
            out.push_str(&format!("      {:<width$}  fix: {r}\n", ""));
        }
    }
    out
}

/// The settings to check: the command line over the config file over the
/// defaults; a check for the config file when one was given.
fn doctor_of(args: &DoctorArgs) -> (Doctor, Option<Check>) {
    let roots = Roots { proc: args.proc_root.clone(), sys: args.sys_root.clone(), modules: args.modules_root.clone() };
    let serve = ServeArgs { config: args.config.clone(), data_dir: args.data_dir.clone(), ..Default::default() };
    let (cfg, check) = match config::load(&serve) {
        Ok(cfg) => (cfg, args.config.as_ref().map(|p| Check::ok("config", format!("{} loads", p.display())))),
        Err(e) => {
            let check = Check::fail(
                "config",
                format!("{e:#}"),
                "fix what it names (dist/strata.toml lists every key); the checks below use the defaults",
            );
            // Without the file the settings are the built-in defaults and
            // the command line's, which load.
            let bare = ServeArgs { data_dir: args.data_dir.clone(), ..Default::default() };
            match config::load(&bare) {
                Ok(cfg) => (cfg, Some(check)),
                Err(_) => {
                    let data_dir = args.data_dir.clone().unwrap_or_else(|| config::DEFAULT_DATA_DIR.into());
                    let doctor = Doctor {
                        roots,
                        data_dir,
                        ports: Vec::new(),
                        max_connections: 0,
                        drive_file_bytes: 0,
                        etcd: Vec::new(),
                    };
                    return (doctor, Some(check));
                }
            }
        }
    };
    let etcd = match &args.etcd {
        Some(list) => list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect(),
        None => config::node_file(args.config.as_deref()).ok().and_then(|n| n.etcd).unwrap_or_default(),
    };
    let mut ports: Vec<(&'static str, SocketAddr)> = cfg.listen.iter().map(|a| ("NVMe/TCP", *a)).collect();
    ports.extend(cfg.discovery.iter().map(|a| ("discovery", *a)));
    ports.push(("HTTP API", cfg.http));
    let max_connections = u64::try_from(cfg.target.max_connections).unwrap_or(u64::MAX);
    let max_connections = max_connections.saturating_add(u64::try_from(cfg.drives.len()).unwrap_or(0));
    let drive_file_bytes = cfg.drives.iter().filter_map(|d| drive_file_size(d)).fold(0u64, u64::saturating_add);
    (Doctor { roots, data_dir: cfg.data_dir, ports, max_connections, drive_file_bytes, etcd }, check)
}

/// The size of a drive file `PATH:SIZE`; none for a block device, RAM or
/// a file without a size.
fn drive_file_size(drive: &str) -> Option<u64> {
    if drive.starts_with("mem:") || drive.starts_with("/dev/") {
        return None;
    }
    let (_, size) = drive.rsplit_once(':')?;
    strata_meta::parse_size(size).ok()
}

impl Doctor {
    /// Runs every check, in the order they print.
    pub fn run(&self) -> Vec<Check> {
        let mut checks = vec![
            check_modules(&self.roots),
            check_direct_io(&self.data_dir),
            check_free_space(&self.data_dir, self.drive_file_bytes),
            check_open_files(self.max_connections.saturating_add(FD_MARGIN)),
            check_hugepages(&self.roots.proc),
            check_clock(),
        ];
        checks.extend(self.etcd.iter().map(|e| check_etcd(e)));
        checks.extend(self.ports.iter().map(|(what, a)| check_port(what, *a, &self.roots.proc)));
        checks
    }
}

/// Where a kernel module is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModState {
    /// In `/proc/modules`, or built in.
    Present,
    /// In the running kernel's `modules.dep`: `modprobe` loads it.
    Loadable,
    /// Neither.
    Missing,
}

/// `nvme-tcp` and `nvme_tcp` name the same module.
fn module_name(file_or_name: &str) -> String {
    let base = file_or_name.rsplit('/').next().unwrap_or(file_or_name);
    let base = base.split(".ko").next().unwrap_or(base);
    base.replace('-', "_")
}

fn module_state(roots: &Roots, release: Option<&str>, name: &str) -> ModState {
    let loaded = std::fs::read_to_string(roots.proc.join("modules"))
        .is_ok_and(|m| m.lines().any(|l| l.split_whitespace().next() == Some(name)));
    if loaded || roots.sys.join("module").join(name).is_dir() {
        return ModState::Present;
    }
    let Some(release) = release else { return ModState::Missing };
    let dir = roots.modules.join(release);
    let lists = |file: &str| std::fs::read_to_string(dir.join(file)).unwrap_or_default();
    if lists("modules.builtin").lines().any(|l| module_name(l.trim()) == name) {
        return ModState::Present;
    }
    if lists("modules.dep").lines().any(|l| module_name(l.split(':').next().unwrap_or("")) == name) {
        return ModState::Loadable;
    }
    ModState::Missing
}

/// The kernel initiator's modules, for hosts of this machine; the kernel
/// target's, which strata replaces and which may hold port 4420.
fn check_modules(roots: &Roots) -> Check {
    const NAME: &str = "kernel modules";
    let release = std::fs::read_to_string(roots.proc.join("sys/kernel/osrelease")).ok();
    let release = release.as_deref().map(str::trim);
    let host = ["nvme_tcp", "nvme_fabrics"];
    let states: Vec<(&str, ModState)> = host.iter().map(|m| (*m, module_state(roots, release, m))).collect();
    let target_loaded = std::fs::read_to_string(roots.proc.join("modules"))
        .is_ok_and(|m| m.lines().any(|l| l.split_whitespace().next() == Some("nvmet_tcp")));
    let missing: Vec<&str> = states.iter().filter(|(_, s)| *s == ModState::Missing).map(|(m, _)| *m).collect();
    let loadable: Vec<&str> = states.iter().filter(|(_, s)| *s == ModState::Loadable).map(|(m, _)| *m).collect();
    if !missing.is_empty() {
        return Check::warn(
            NAME,
            format!(
                "{} neither loaded, built in nor in modules.dep of kernel {}: this machine cannot connect to \
                 volumes with the kernel's initiator (a storage node does not need them)",
                missing.join(", "),
                release.unwrap_or("?")
            ),
            "on a host, install the kernel's extra modules (e.g. linux-modules-extra-$(uname -r)), then \
             modprobe nvme_tcp",
        );
    }
    if target_loaded {
        return Check::warn(
            NAME,
            "nvmet_tcp (the kernel's NVMe/TCP target) is loaded: strata does not need it, and a port of it \
             may hold 4420",
            "nvmetcli clear && modprobe -r nvmet_tcp nvmet, unless the kernel target is used on purpose",
        );
    }
    if loadable.is_empty() {
        Check::ok(NAME, "nvme_tcp and nvme_fabrics loaded or built in (hosts; nvmet is not needed)")
    } else {
        Check::ok(
            NAME,
            format!(
                "{} loadable: modprobe nvme_tcp before nvme connect, or list it in /etc/modules-load.d/ \
                 (hosts; nvmet is not needed)",
                loadable.join(", ")
            ),
        )
    }
}

/// The directory itself, or its nearest existing ancestor when it does not
/// exist yet (strata creates it).
fn existing(dir: &Path) -> Option<PathBuf> {
    let mut p = if dir.is_absolute() { dir.to_path_buf() } else { std::env::current_dir().ok()?.join(dir) };
    loop {
        if p.exists() {
            return Some(p);
        }
        if !p.pop() {
            return None;
        }
    }
}

/// Writes one aligned block with O_DIRECT in the data dir, as the drive
/// file is written.
fn check_direct_io(dir: &Path) -> Check {
    const NAME: &str = "O_DIRECT";
    let Some(at) = existing(dir) else {
        return Check::fail(NAME, format!("no directory of {} exists", dir.display()), "use an absolute --data-dir");
    };
    if !at.is_dir() {
        return Check::fail(
            NAME,
            format!("{} is not a directory", at.display()),
            "point --data-dir (data_dir) at a directory",
        );
    }
    let probe = at.join(format!(".strata-doctor-{}", std::process::id()));
    let result = direct_write(&probe);
    let _ = std::fs::remove_file(&probe);
    let place = if at == dir { at.display().to_string() } else { format!("{} (nearest existing)", at.display()) };
    match result {
        Ok(()) => Check::ok(NAME, format!("a 4 KiB O_DIRECT write works in {place}")),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Check::fail(
            NAME,
            format!(
                "the file system of {place} refuses O_DIRECT (tmpfs on older kernels, some FUSE and network file systems)"
            ),
            "put the data dir (or the drives) on ext4 or xfs, or set allow_buffered = true (slower, fdatasync per flush)",
        ),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Check::fail(
            NAME,
            format!("cannot write in {place}: {e}"),
            "run as the owner of the data dir (chown -R strata: DIR), or choose another --data-dir",
        ),
        Err(e) => Check::fail(NAME, format!("cannot write in {place}: {e}"), "check the data dir's file system"),
    }
}

fn direct_write(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).custom_flags(libc::O_DIRECT).open(path)?;
    // An aligned block inside a buffer twice its size: no allocator tricks.
    let buf = vec![0x5au8; 2 * DIRECT_BLOCK];
    let off = buf.as_ptr().align_offset(DIRECT_BLOCK);
    let block = buf.get(off..off + DIRECT_BLOCK).ok_or_else(|| std::io::Error::other("cannot align a buffer"))?;
    f.write_all(block)?;
    f.sync_data()
}

fn gib(bytes: u64) -> String {
    // Display only: a rounded byte count.
    let g = bytes as f64 / f64::from(1u32 << 30);
    format!("{g:.1} GiB")
}

/// Fails below [`FAIL_FREE_BYTES`]; warns when the drive files could not
/// grow to their size.
fn check_free_space(dir: &Path, drive_file_bytes: u64) -> Check {
    const NAME: &str = "free space";
    let Some(at) = existing(dir) else {
        return Check::fail(NAME, format!("no directory of {} exists", dir.display()), "use an absolute --data-dir");
    };
    match sys::free_bytes(&at) {
        Err(e) => Check::fail(NAME, format!("statvfs {}: {e}", at.display()), "check the data dir"),
        Ok((free, total)) if free < FAIL_FREE_BYTES => Check::fail(
            NAME,
            format!("{} free of {} on {}", gib(free), gib(total), at.display()),
            "free space or move the data dir: metadata and drive files need room to grow",
        ),
        Ok((free, total)) if free < drive_file_bytes => Check::warn(
            NAME,
            format!(
                "{} free of {} on {}, less than the drive files' {} (sparse: they fill as volumes are written)",
                gib(free),
                gib(total),
                at.display(),
                gib(drive_file_bytes)
            ),
            "give drive_size (or each drive's :SIZE) below the free space, free space, or use block devices",
        ),
        Ok((free, total)) => Check::ok(NAME, format!("{} free of {} on {}", gib(free), gib(total), at.display())),
    }
}

fn check_open_files(need: u64) -> Check {
    const NAME: &str = "open files";
    match sys::nofile() {
        Err(e) => Check::warn(NAME, format!("getrlimit: {e}"), "check ulimit -n"),
        Ok((soft, hard)) if soft >= need => Check::ok(NAME, format!("limit {soft} (hard {hard}), {need} needed")),
        Ok((soft, hard)) => Check::warn(
            NAME,
            format!(
                "limit {soft} (hard {hard}) is below {need} (max_connections plus drives and listeners): \
                 connections past it are refused"
            ),
            "LimitNOFILE=1048576 in the unit (dist/systemd/strata.service), or ulimit -n 1048576 before \
             strata serve",
        ),
    }
}

fn meminfo_value(meminfo: &str, key: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.split(':').next() == Some(key))?;
    line.split(':').nth(1)?.split_whitespace().next()?.parse().ok()
}

/// Informational: strata's buffers do not use huge pages.
fn check_hugepages(proc: &Path) -> Check {
    const NAME: &str = "hugepages";
    let Ok(m) = std::fs::read_to_string(proc.join("meminfo")) else {
        return Check::ok(NAME, "no meminfo (not needed by strata)");
    };
    match (meminfo_value(&m, "HugePages_Total"), meminfo_value(&m, "Hugepagesize")) {
        (Some(n), Some(kb)) => {
            Check::ok(NAME, format!("{n} reserved of {kb} kB (informational: strata does not need them)"))
        }
        _ => Check::ok(NAME, "not reported (informational: strata does not need them)"),
    }
}

/// The kernel's clock discipline: synchronised by NTP (or PTP) or not.
/// Nodes compare times in leases, audit records and logs.
fn check_clock() -> Check {
    const NAME: &str = "clock sync";
    let remedy = "enable NTP: systemctl enable --now chronyd (or systemd-timesyncd); nodes compare clocks in \
                  logs and audit records";
    match sys::clock() {
        Ok((false, maxerror_us)) => Check::ok(NAME, format!("synchronised (max error {} ms)", maxerror_us / 1000)),
        Ok((true, _)) => match timedatectl_synced() {
            Some(true) => Check::ok(NAME, "synchronised (timedatectl)"),
            _ => Check::warn(NAME, "the kernel's clock is not synchronised (adjtimex: STA_UNSYNC)", remedy),
        },
        Err(e) => match timedatectl_synced() {
            Some(true) => Check::ok(NAME, "synchronised (timedatectl)"),
            Some(false) => Check::warn(NAME, "not synchronised (timedatectl)", remedy),
            None => Check::warn(NAME, format!("cannot tell: adjtimex: {e}"), remedy),
        },
    }
}

fn timedatectl_synced() -> Option<bool> {
    let out = std::process::Command::new("timedatectl")
        .args(["show", "-p", "NTPSynchronized", "--value"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    match String::from_utf8_lossy(&out.stdout).trim() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

/// `scheme://host:port[/path]` into (https, host:port).
fn endpoint(url: &str) -> Result<(bool, String), String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else {
        (false, url)
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    if authority.is_empty() {
        return Err(format!("{url:?} is not http://HOST:PORT"));
    }
    let has_port =
        authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) && !authority.ends_with(']');
    Ok((tls, if has_port { authority.to_string() } else { format!("{authority}:2379") }))
}

/// etcd answers: TCP connect, then `GET /health` over plain HTTP (an
/// https endpoint is only connected to).
fn check_etcd(url: &str) -> Check {
    let name = format!("etcd {url}");
    let remedy = "start etcd, or fix --etcd ([node] etcd): the URL, a firewall, etcd's --listen-client-urls";
    let (tls, authority) = match endpoint(url) {
        Ok(e) => e,
        Err(e) => return Check::fail(name, e, "give endpoints as http://HOST:PORT, comma separated"),
    };
    let addrs: Vec<SocketAddr> = match authority.to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => return Check::fail(name, format!("cannot resolve {authority}: {e}"), remedy),
    };
    let mut last = String::from("no address");
    let Some(mut s) = addrs.iter().find_map(|a| match TcpStream::connect_timeout(a, NET_TIMEOUT) {
        Ok(s) => Some(s),
        Err(e) => {
            last = format!("{a}: {e}");
            None
        }
    }) else {
        return Check::fail(name, format!("cannot connect: {last}"), remedy);
    };
    if tls {
        return Check::ok(name, "TCP connect works (TLS and health not checked)");
    }
    match http_get(&mut s, &authority, "/health") {
        Err(e) => Check::fail(name, format!("connects, but GET /health: {e}"), remedy),
        Ok((200, body)) if body.contains("\"health\":\"true\"") => Check::ok(name, "healthy (GET /health)"),
        Ok((code, body)) => Check::fail(
            name,
            format!("GET /health: {code} {}", body.trim().chars().take(120).collect::<String>()),
            "etcd answers but is not healthy: check etcdctl endpoint health and its quorum",
        ),
    }
}

/// A minimal HTTP/1.0 GET: (status code, body).
fn http_get(s: &mut TcpStream, host: &str, path: &str) -> std::io::Result<(u16, String)> {
    s.set_read_timeout(Some(NET_TIMEOUT))?;
    s.set_write_timeout(Some(NET_TIMEOUT))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n")?;
    let mut buf = Vec::new();
    // A health reply is tiny; never read without bound.
    s.take(64 * 1024).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP reply"))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((code, body))
}

/// A port is free, or held by strata (a node already runs); held by
/// anything else, strata cannot start. A holder this user cannot see (in
/// another user's `/proc/PID/fd`) only warns.
fn check_port(what: &str, addr: SocketAddr, proc: &Path) -> Check {
    let name = format!("port {addr} ({what})");
    match TcpListener::bind(addr) {
        Ok(_) => Check::ok(name, "free"),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => match port_owner(proc, addr.port()) {
            Some((pid, comm)) if comm == "strata" => Check::ok(name, format!("held by strata (pid {pid}): it runs")),
            Some((pid, comm)) => Check::fail(
                name,
                format!("held by {comm} (pid {pid})"),
                "stop it (the kernel target: nvmetcli clear), or give strata another address in the config",
            ),
            // Another user's process: perhaps the strata service itself.
            None => Check::warn(
                name,
                "held by a process this user cannot see (strata's own is fine)",
                "run strata doctor as root to see which; if not strata, stop it or give strata another address",
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => Check::fail(
            name,
            format!("{}: not an address of this machine", addr.ip()),
            "listen on an address of this machine, or 0.0.0.0",
        ),
        Err(e) => Check::fail(name, format!("cannot listen: {e}"), "choose another address or port in the config"),
    }
}

/// The process listening on TCP `port`: the socket's inode from
/// `net/tcp` and `net/tcp6`, then the process with that socket open.
fn port_owner(proc: &Path, port: u16) -> Option<(u32, String)> {
    let mut inodes = Vec::new();
    for table in ["net/tcp", "net/tcp6"] {
        let text = std::fs::read_to_string(proc.join(table)).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else { continue };
            let p = local.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            // 0A: TCP_LISTEN.
            if p == Some(port) && *state == "0A" && *inode != "0" {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    if inodes.is_empty() {
        return None;
    }
    for entry in std::fs::read_dir(proc).ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
        let holds = fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str())));
        if holds {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            return Some((pid, comm.trim().to_string()));
        }
    }
    None
}

/// The system calls of the checks, each behind a safe function.
mod sys {
    use std::path::Path;

    /// Bytes free to unprivileged users, and the size, of the file system
    /// holding `path`.
    // The fields are 32 bits wide on some targets.
    #[allow(clippy::useless_conversion)]
    pub fn free_bytes(path: &Path) -> std::io::Result<(u64, u64)> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        // SAFETY: statvfs is plain integers, for which all zeroes is a
        // valid value.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a NUL-terminated string and `st` a valid, owned
        // statvfs that the call fills; neither outlives this function.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let frsize = u64::from(st.f_frsize);
        Ok((u64::from(st.f_bavail).saturating_mul(frsize), u64::from(st.f_blocks).saturating_mul(frsize)))
    }

    /// RLIMIT_NOFILE: (soft, hard).
    pub fn nofile() -> std::io::Result<(u64, u64)> {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: `r` is a valid, owned rlimit that the call fills.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((r.rlim_cur, r.rlim_max))
    }

    /// The kernel clock: (unsynchronised, max error in µs), read with
    /// adjtimex(2) and `modes` 0 (which changes nothing).
    // `maxerror` is a C long: 32 bits on some targets.
    #[allow(clippy::useless_conversion)]
    pub fn clock() -> std::io::Result<(bool, i64)> {
        // SAFETY: timex is plain integers, for which all zeroes is a
        // valid value; `modes` 0 asks only to read.
        let mut tx: libc::timex = unsafe { std::mem::zeroed() };
        // SAFETY: `tx` is a valid, owned timex that the call fills.
        if unsafe { libc::adjtimex(&mut tx) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((tx.status & libc::STA_UNSYNC != 0, i64::from(tx.maxerror)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_roots(dir: &Path, modules: &str, dep: &str) -> Roots {
        let proc = dir.join("proc");
        std::fs::create_dir_all(proc.join("sys/kernel")).unwrap();
        std::fs::write(proc.join("sys/kernel/osrelease"), "6.1.0-test\n").unwrap();
        std::fs::write(proc.join("modules"), modules).unwrap();
        let lib = dir.join("lib");
        std::fs::create_dir_all(lib.join("6.1.0-test")).unwrap();
        std::fs::write(lib.join("6.1.0-test/modules.dep"), dep).unwrap();
        std::fs::write(lib.join("6.1.0-test/modules.builtin"), "kernel/drivers/block/loop.ko\n").unwrap();
        Roots { proc, sys: dir.join("sys"), modules: lib }
    }

    #[test]
    fn modules_loaded_loadable_or_missing_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = "nvme_tcp 53248 0 - Live 0x0\nnvme_fabrics 32768 1 nvme_tcp, Live 0x0\n";
        let c = check_modules(&fake_roots(&dir.path().join("a"), loaded, ""));
        assert_eq!(c.status, Status::Ok, "{c:?}");
        let dep = "kernel/drivers/nvme/host/nvme-tcp.ko.zst: kernel/drivers/nvme/host/nvme-fabrics.ko.zst\n\
                   kernel/drivers/nvme/host/nvme-fabrics.ko.zst:\n";
        let c = check_modules(&fake_roots(&dir.path().join("b"), "", dep));
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(c.detail.contains("loadable") && c.detail.contains("nvme_tcp"), "{c:?}");
        let c = check_modules(&fake_roots(&dir.path().join("c"), "loop 1 0 - Live 0x0\n", ""));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.contains("nvme_tcp") && c.remedy.unwrap().contains("modprobe"));
        let c = check_modules(&fake_roots(&dir.path().join("d"), &format!("{loaded}nvmet_tcp 1 0 - Live 0x0\n"), ""));
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.contains("nvmet_tcp"), "{c:?}");
    }

    #[test]
    fn a_data_dir_that_is_a_file_fails_and_a_missing_one_is_probed_above() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let c = check_direct_io(&file);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.detail.contains("not a directory"), "{c:?}");
        let c = check_direct_io(&dir.path().join("not/yet"));
        assert!(c.detail.contains("nearest existing"), "{c:?}");
        // Nothing is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_closed_etcd_port_fails_and_a_healthy_one_passes() {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let c = check_etcd(&format!("http://127.0.0.1:{port}"));
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.detail.contains("cannot connect") && c.remedy.is_some(), "{c:?}");
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", l.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            // The whole request first: closing with unread bytes would
            // reset the connection under the client's read.
            let mut req = Vec::new();
            let mut buf = [0u8; 512];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"health\":\"true\",\"reason\":\"\"}",
            )
            .unwrap();
            let _ = s.shutdown(std::net::Shutdown::Write);
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        });
        let c = check_etcd(&url);
        server.join().unwrap();
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(check_etcd("http://").status == Status::Fail);
    }

    #[test]
    fn a_port_held_by_another_process_names_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let c = check_port("NVMe/TCP", addr, Path::new("/proc"));
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.detail.contains(&std::process::id().to_string()), "{c:?}");
        drop(l);
        assert_eq!(check_port("NVMe/TCP", addr, Path::new("/proc")).status, Status::Ok);
    }

    #[test]
    fn meminfo_and_endpoints_parse() {
        let m = "MemTotal: 1 kB\nHugePages_Total:      16\nHugepagesize:       2048 kB\n";
        assert_eq!(meminfo_value(m, "HugePages_Total"), Some(16));
        assert_eq!(meminfo_value(m, "Hugepagesize"), Some(2048));
        assert_eq!(endpoint("http://10.0.0.1:2379"), Ok((false, "10.0.0.1:2379".into())));
        assert_eq!(endpoint("https://etcd.example/x"), Ok((true, "etcd.example:2379".into())));
        assert_eq!(endpoint("[::1]:2380"), Ok((false, "[::1]:2380".into())));
        assert_eq!(module_name("kernel/drivers/nvme/host/nvme-tcp.ko.xz"), "nvme_tcp");
        let toml =
            "bad: TOML parse error at line 1, column 1\n  |\n1 | listne = []\n  | ^^^^^^\nunknown field `listne`\n";
        assert_eq!(one_line(toml), "bad: TOML parse error at line 1, column 1 unknown field `listne`");
    }
}
