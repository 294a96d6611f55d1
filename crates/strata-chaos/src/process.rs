//! The `strata serve` child process: start it on fixed ports and a data
//! dir, kill -9 it, restart it on the same dir and ports, stop it with
//! SIGTERM, run the `strata volume` CLI against it, and sample its memory.
//!
//! strata's stderr goes to `WORK/strata.log` (appended across restarts, one
//! banner line per start) so that failures can point at its log.
//! `RUST_LOG` is passed through; when unset, strata logs at `warn`, which
//! keeps a connect flood from writing a line per connection.
//!
//! Every wait has a deadline: readiness is polled (TCP connect to the I/O
//! and HTTP ports), exit is polled, CLI calls are killed when late.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use strata_testkit::Proc;

use crate::config::Tuning;
use crate::error::Error;

/// How often readiness and exit are polled.
const POLL: Duration = Duration::from_millis(25);

/// A port on 127.0.0.1 that was free a moment ago. Another process could
/// take it before strata binds it; on a test machine that is rare, and
/// strata then fails to start with a clear message.
fn free_port() -> Result<u16, Error> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::io("finding a free port", e))
}

/// Output of a `strata volume` command.
#[derive(Debug, Clone)]
pub struct CliOutput {
    /// Exit status was success.
    pub success: bool,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

/// Why a `strata volume` command produced no output.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// It could not be started.
    #[error("cannot run strata volume: {0}")]
    Spawn(std::io::Error),
    /// It did not finish in time (and was killed).
    #[error("strata volume {0} did not finish within {1:?}")]
    Timeout(String, Duration),
}

/// A `strata serve` child process, on [`strata_testkit::Proc`].
#[derive(Debug)]
pub struct StrataProcess {
    bin: PathBuf,
    /// NVMe/TCP I/O address.
    pub io: SocketAddr,
    /// HTTP API address.
    pub http: SocketAddr,
    /// Its admin token's file.
    token_file: PathBuf,
    proc: Proc,
    pid: Arc<AtomicU32>,
}

impl StrataProcess {
    /// Prepares (does not start) strata on a data dir under `dir`, with a
    /// sparse drive of `drive_mib` MiB, a default volume of `volume_mib`
    /// MiB, and `tuning` written to its config file.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the directory or config file cannot be written.
    pub fn prepare(
        bin: &Path,
        dir: &Path,
        tuning: Option<&Tuning>,
        volume_mib: u64,
        drive_mib: u64,
    ) -> Result<StrataProcess, Error> {
        let data = dir.join("data");
        std::fs::create_dir_all(&data).map_err(|e| Error::io(format!("creating {}", data.display()), e))?;
        let config = dir.join("strata.toml");
        let mut text = String::from("# written by strata-chaos\n");
        if let Some(t) = tuning {
            text.push_str(&t.to_toml());
        }
        std::fs::write(&config, text).map_err(|e| Error::io(format!("writing {}", config.display()), e))?;
        let io: SocketAddr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let discovery = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let http = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let argv = vec![
            bin.display().to_string(),
            "serve".into(),
            "--data-dir".into(),
            data.display().to_string(),
            "--drive".into(),
            format!("{}:{drive_mib}M", data.join("drive0.img").display()),
            "--listen".into(),
            io.to_string(),
            "--discovery".into(),
            discovery.to_string(),
            "--http".into(),
            http.to_string(),
            "--default-volume-size".into(),
            format!("{volume_mib}M"),
            "--config".into(),
            config.display().to_string(),
        ];
        let mut proc = Proc::new("strata", argv, dir.join("strata.log"));
        if std::env::var_os("RUST_LOG").is_none() {
            proc = proc.env("RUST_LOG", "warn");
        }
        Ok(StrataProcess {
            bin: bin.to_path_buf(),
            io,
            http,
            token_file: data.join("api-token"),
            proc,
            pid: Arc::new(AtomicU32::new(0)),
        })
    }

    /// The command line strata is started with (for the report).
    pub fn command_line(&self) -> String {
        self.proc.command_line()
    }

    /// Where strata's stderr goes.
    pub fn log_path(&self) -> &Path {
        self.proc.log_path()
    }

    /// A cell holding the running process's pid (0 while none runs), for
    /// the RSS sampler.
    pub fn pid_cell(&self) -> Arc<AtomicU32> {
        self.pid.clone()
    }

    /// Starts strata and waits until its I/O and HTTP ports accept
    /// connections. Returns how long that took.
    ///
    /// # Errors
    ///
    /// [`Error::StrataStart`] when it exits early or is not listening
    /// within `deadline`, with the end of its log.
    pub async fn start(&mut self, deadline: Duration) -> Result<Duration, Error> {
        if self.proc.running() {
            return Ok(Duration::ZERO);
        }
        self.proc.start().map_err(|e| Error::io(format!("starting {}", self.bin.display()), e))?;
        self.pid.store(self.proc.pid().unwrap_or(0), Ordering::Release);
        let began = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return Err(self.start_error(format!("it exited with {status}")));
            }
            if TcpStream::connect_timeout(&self.io, POLL).is_ok()
                && TcpStream::connect_timeout(&self.http, POLL).is_ok()
            {
                return Ok(began.elapsed());
            }
            if began.elapsed() > deadline {
                self.kill9();
                return Err(self.start_error(format!("not listening on {} after {deadline:?}", self.io)));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn start_error(&self, reason: String) -> Error {
        Error::StrataStart { reason, log: self.log_path().display().to_string(), tail: self.log_tail(20) }
    }

    /// The exit status if strata exited by itself since the last check
    /// (it is then no longer running).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.proc.exited()?;
        self.pid.store(0, Ordering::Release);
        Some(status)
    }

    /// True while strata runs.
    pub fn running(&self) -> bool {
        self.proc.running()
    }

    /// SIGKILL, and reap it. Nothing happens when it is not running.
    pub fn kill9(&mut self) {
        self.proc.kill9();
        self.pid.store(0, Ordering::Release);
    }

    /// SIGTERM, then wait up to `deadline` for a clean exit; SIGKILL if it
    /// does not come. Returns the exit status, `None` if it had to be
    /// killed or was not running.
    pub async fn stop(&mut self, deadline: Duration) -> Option<ExitStatus> {
        if !self.proc.signal("-TERM") {
            return None;
        }
        let began = Instant::now();
        while began.elapsed() < deadline {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            tokio::time::sleep(POLL).await;
        }
        self.kill9();
        None
    }

    /// The last `n` lines of strata's log.
    pub fn log_tail(&self, n: usize) -> String {
        self.proc.last_lines(n)
    }

    /// Lines of strata's log that show a panic.
    pub fn panics_in_log(&self) -> Vec<String> {
        self.proc.log_text().lines().filter(|l| l.contains("panicked at")).map(str::to_owned).collect()
    }

    /// A handle for running `strata volume` against this strata.
    pub fn cli(&self) -> VolumeCli {
        VolumeCli { bin: self.bin.clone(), api: format!("http://{}", self.http), token_file: self.token_file.clone() }
    }
}

/// Runs the `strata volume` CLI against a strata's HTTP API.
#[derive(Debug, Clone)]
pub struct VolumeCli {
    bin: PathBuf,
    api: String,
    /// The node's admin token (its data dir's `api-token`).
    token_file: PathBuf,
}

impl VolumeCli {
    /// Runs `strata volume ARGS --api http://HTTP`, killed after
    /// `deadline`.
    ///
    /// # Errors
    ///
    /// [`CliError`] when it cannot run or does not finish in time.
    pub async fn run(&self, args: &[&str], deadline: Duration) -> Result<CliOutput, CliError> {
        let mut child = Command::new(&self.bin)
            .arg("volume")
            .args(args)
            .args(["--api", &self.api])
            .arg("--token-file")
            .arg(&self.token_file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(CliError::Spawn)?;
        let began = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if began.elapsed() < deadline => tokio::time::sleep(POLL).await,
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(CliError::Timeout(args.join(" "), deadline));
                }
            }
        }
        // It has exited: reading its pipes to the end cannot block.
        let out = child.wait_with_output().map_err(CliError::Spawn)?;
        Ok(CliOutput {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// `VmHWM` and `VmRSS` of `/proc/PID/status` text, in bytes.
pub fn parse_status_memory(status: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        status.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.trim();
            let kb: u64 = rest.strip_suffix("kB")?.trim().parse().ok()?;
            Some(kb * 1024)
        })
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Samples strata's memory every few milliseconds on its own thread, over
/// restarts (it follows the pid cell).
#[derive(Debug)]
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    /// Starts sampling the process whose pid is in `pid` every `every`.
    pub fn start(pid: Arc<AtomicU32>, every: Duration) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::Builder::new()
            .name("chaos-rss".into())
            .spawn(move || {
                while !s.load(Ordering::Acquire) {
                    let id = pid.load(Ordering::Acquire);
                    if id != 0
                        && let Ok(text) = std::fs::read_to_string(format!("/proc/{id}/status"))
                    {
                        let (hwm, rss) = parse_status_memory(&text);
                        p.fetch_max(hwm.unwrap_or(0).max(rss.unwrap_or(0)), Ordering::AcqRel);
                    }
                    std::thread::sleep(every);
                }
            })
            .ok();
        RssSampler { stop, peak, thread }
    }

    /// Largest VmHWM (or VmRSS) seen so far, bytes.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_status_memory_fields() {
        let text = "Name:\tstrata\nVmPeak:\t  999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n";
        assert_eq!(parse_status_memory(text), (Some(2048 * 1024), Some(1024 * 1024)));
        assert_eq!(parse_status_memory("garbage\nVmHWM: lots\n"), (None, None));
    }

    #[test]
    fn sampler_sees_this_process() {
        let pid = Arc::new(AtomicU32::new(std::process::id()));
        let s = RssSampler::start(pid, Duration::from_millis(5));
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.peak() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(s.peak() > 1024 * 1024, "a test process has more than 1 MiB resident: {}", s.peak());
    }
}
