//! Test tooling for strata's process-level tests and the chaos suite: one
//! harness for the child processes they start (`strata serve`, `strata
//! node`, `strata kv serve`), so that every test starts, kills, restarts
//! and reads a process the same way.
//!
//! A [`Proc`] runs one command line. Its stderr is appended to a log file
//! (never a pipe, which blocks the child once 64 KiB wait unread), one
//! banner line per start, with `NO_COLOR=1` so the log has no terminal
//! codes. It is killed with SIGKILL and reaped on drop; when the test is
//! failing and `STRATA_TEST_LOGS` names a directory, the whole log is kept
//! there as `NAME.log` (a failure message holds only the tail).
//!
//! Every wait has a deadline and says what it waited for.
//!
//! [`group`] keeps the tests of one group (one former test binary, now a
//! module of a bigger one) from running beside another group's: heavy
//! multi-process tests share a 2-core machine as they did when each group
//! was a binary of its own.
//!
//! ```no_run
//! use std::time::Duration;
//! use strata_testkit::Proc;
//!
//! let dir = std::env::temp_dir();
//! let mut p = Proc::new("sleeper", ["sleep", "60"], dir.join("sleeper.log"));
//! p.start().unwrap();
//! p.kill9();
//! assert!(!p.running());
//! p.restart().unwrap();
//! assert!(p.wait_exit(Duration::from_millis(10)).is_none());
//! ```

use std::fs::OpenOptions;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How often waits poll.
const POLL: Duration = Duration::from_millis(50);

/// A child process of a test, its stderr in a log file. Killed on drop.
#[derive(Debug)]
pub struct Proc {
    name: String,
    /// The command: the program, then its arguments (a prefix such as
    /// `ip netns exec NS` comes first).
    argv: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
    starts: u32,
}

impl Proc {
    /// A process `name` that runs `argv` (the program first), its stderr
    /// appended to `log`; not started yet.
    pub fn new<S: Into<String>>(name: &str, argv: impl IntoIterator<Item = S>, log: PathBuf) -> Proc {
        let argv: Vec<String> = argv.into_iter().map(Into::into).collect();
        assert!(!argv.is_empty(), "a command line names a program");
        Proc { name: name.to_string(), argv, env: Vec::new(), log, child: None, starts: 0 }
    }

    /// Sets environment variable `key` for every start.
    #[must_use]
    pub fn env(mut self, key: &str, value: &str) -> Proc {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// [`Proc::new`] and [`Proc::start`]; panics (this is test code) when
    /// it cannot be started.
    pub fn spawn<S: Into<String>>(name: &str, argv: impl IntoIterator<Item = S>, log: PathBuf) -> Proc {
        let mut p = Proc::new(name, argv, log);
        p.start().unwrap_or_else(|e| panic!("starting {}: {e}", p.name));
        p
    }

    /// Starts the command (nothing happens while it runs), a banner line
    /// in its log first.
    ///
    /// # Errors
    ///
    /// The log cannot be opened or the program cannot be run.
    pub fn start(&mut self) -> std::io::Result<()> {
        if self.running() {
            return Ok(());
        }
        if let Some(dir) = self.log.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut log = OpenOptions::new().create(true).append(true).open(&self.log)?;
        self.starts += 1;
        writeln!(log, "===== {}: start #{} =====", self.name, self.starts)?;
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]).env("NO_COLOR", "1").stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        self.child = Some(cmd.spawn()?);
        Ok(())
    }

    /// Its name, as its log banner and kept log file show it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The command line, for a report.
    pub fn command_line(&self) -> String {
        self.argv.join(" ")
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while it runs (as far as the last [`Proc::exited`] knows).
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Its exit status if it exited by itself since the last check (it
    /// is then no longer running).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// SIGKILL, and reap it. Nothing happens when it is not running.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (`-STOP`, `-CONT`, `-TERM`...) with kill(1).
    /// False when it does not run or kill(1) failed.
    pub fn signal(&self, signal: &str) -> bool {
        let Some(pid) = self.pid() else { return false };
        Command::new("kill").args([signal, &pid.to_string()]).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    }

    /// Waits up to `limit` for it to exit by itself: its exit status, or
    /// `None` if it still runs.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if !self.running() || Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Kills it (when it runs) and starts the same command again.
    ///
    /// # Errors
    ///
    /// As [`Proc::start`].
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.kill9();
        self.start()
    }

    /// Waits up to `limit` until every one of `addrs` accepts a TCP
    /// connection; how long that took.
    ///
    /// # Errors
    ///
    /// It exited, or is not listening after `limit`: the reason with the
    /// end of its log.
    pub fn wait_listening(&mut self, addrs: &[SocketAddr], limit: Duration) -> Result<Duration, String> {
        self.wait_until(&format!("listening on {addrs:?}"), limit, |_| {
            addrs.iter().all(|a| TcpStream::connect_timeout(a, POLL).is_ok()).then_some(())
        })
        .map(|((), took)| took)
    }

    /// Polls `f` with its log so far until it gives a value, for up to
    /// `limit`; the value and how long it took.
    ///
    /// # Errors
    ///
    /// It exited first, or `limit` passed: why, with the end of its log.
    pub fn wait_until<T>(
        &mut self,
        what: &str,
        limit: Duration,
        mut f: impl FnMut(&str) -> Option<T>,
    ) -> Result<(T, Duration), String> {
        let began = Instant::now();
        loop {
            if let Some(v) = f(&self.log_text()) {
                return Ok((v, began.elapsed()));
            }
            if let Some(status) = self.exited() {
                return Err(format!("{} exited ({status}) before {what}:\n{}", self.name, self.log_tail(30)));
            }
            if !self.running() {
                return Err(format!("{} does not run: not {what}", self.name));
            }
            if began.elapsed() > limit {
                return Err(format!("{} not {what} after {limit:?}:\n{}", self.name, self.log_tail(30)));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Where its stderr goes.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Its whole log (lossy UTF-8; empty when there is none yet).
    pub fn log_text(&self) -> String {
        std::fs::read(&self.log).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
    }

    /// The last `n` lines of its log.
    pub fn last_lines(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The last `n` lines of its log, under a header with its name.
    pub fn log_tail(&self, n: usize) -> String {
        format!("== {} ==\n{}", self.name, self.last_lines(n))
    }
}

impl Drop for Proc {
    /// Kills it; when the test is failing and `STRATA_TEST_LOGS` names a
    /// directory, keeps its whole log there.
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking()
            && let Some(dir) = std::env::var_os("STRATA_TEST_LOGS")
        {
            let dir = PathBuf::from(dir);
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::copy(&self.log, dir.join(format!("{}.log", self.name)));
        }
    }
}

/// Polls `f` every 100 ms until it gives a value; panics after `limit`
/// saying `what` it waited for, with the end of each of `procs`' logs.
pub fn wait_for<T>(what: &str, limit: Duration, procs: &[&Proc], mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(v) = f() {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let logs: Vec<String> = procs.iter().map(|p| p.log_tail(30)).collect();
    panic!("timed out after {limit:?} waiting for {what}\n{}", logs.join("\n"));
}

/// Which group of tests runs now, and how many of its tests.
static GROUPS: std::sync::Mutex<(Option<&'static str>, usize)> = std::sync::Mutex::new((None, 0));
static GROUP_LEFT: std::sync::Condvar = std::sync::Condvar::new();

/// Held by a test of group `name` while it runs: see [`group`].
#[derive(Debug)]
#[must_use = "the group is left when the guard is dropped"]
pub struct GroupGuard(());

/// Waits until no test of another group runs, then enters group `name`
/// (pass `module_path!()`): tests of one group run beside each other,
/// never beside another group's. Left when the guard drops, also when the
/// test panics.
pub fn group(name: &'static str) -> GroupGuard {
    let mut g = GROUPS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    while g.0.is_some_and(|running| running != name) {
        g = GROUP_LEFT.wait(g).unwrap_or_else(std::sync::PoisonError::into_inner);
    }
    *g = (Some(name), g.1 + 1);
    GroupGuard(())
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let mut g = GROUPS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        g.1 -= 1;
        if g.1 == 0 {
            g.0 = None;
            GROUP_LEFT.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, script: &str) -> Proc {
        Proc::new("sh", ["sh", "-c", script], dir.join("sh.log"))
    }

    #[test]
    fn a_process_is_started_killed_restarted_and_logged() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = sh(dir.path(), "echo hello from $NO_COLOR >&2; exec sleep 60");
        p.start().unwrap();
        let pid = p.pid().unwrap();
        let (line, _) = p
            .wait_until("saying hello", Duration::from_secs(10), |log| {
                log.lines().find(|l| l.contains("hello")).map(str::to_owned)
            })
            .unwrap();
        assert_eq!(line, "hello from 1", "NO_COLOR is set");
        assert!(p.signal("-STOP") && p.signal("-CONT"));
        p.kill9();
        assert!(!p.running() && p.pid().is_none() && !p.signal("-CONT"));
        p.restart().unwrap();
        assert_ne!(p.pid(), Some(pid), "a new process");
        assert!(p.wait_exit(Duration::from_millis(100)).is_none(), "it still runs");
        let log = p.log_text();
        assert!(log.contains("===== sh: start #1 =====") && log.contains("===== sh: start #2 ====="), "{log}");
        assert_eq!(log.matches("hello from 1").count(), 2, "the log is appended across starts: {log}");
        assert!(p.log_tail(1).ends_with("hello from 1"), "{}", p.log_tail(1));
    }

    #[test]
    fn waits_end_with_the_exit_and_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = sh(dir.path(), "echo giving up >&2; exit 3");
        p.start().unwrap();
        let e = p.wait_listening(&["127.0.0.1:9".parse().unwrap()], Duration::from_secs(10)).unwrap_err();
        assert!(e.contains("exited") && e.contains("giving up"), "{e}");
        assert!(!p.running());
        let mut q = sh(dir.path(), "exec sleep 60");
        q.start().unwrap();
        let e = q.wait_until("never", Duration::from_millis(200), |_| None::<()>).unwrap_err();
        assert!(e.contains("not never after"), "{e}");
        assert_eq!(sh(dir.path(), "exit 4").wait_exit(Duration::ZERO), None, "never started");
        let mut r = sh(dir.path(), "exit 4");
        r.start().unwrap();
        assert_eq!(r.wait_exit(Duration::from_secs(10)).and_then(|s| s.code()), Some(4));
    }

    #[test]
    fn groups_never_overlap() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        static INSIDE: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
        let threads: Vec<_> = (0..6)
            .map(|i| {
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let (me, other) = (i % 2, 1 - i % 2);
                        let _g = group(["testkit-a", "testkit-b"][me]);
                        INSIDE[me].fetch_add(1, SeqCst);
                        assert_eq!(INSIDE[other].load(SeqCst), 0, "two groups at once");
                        std::thread::yield_now();
                        INSIDE[me].fetch_sub(1, SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn a_listening_process_is_ready() {
        let dir = tempfile::tempdir().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut p = sh(dir.path(), "exec sleep 60");
        p.start().unwrap();
        assert!(p.wait_listening(&[addr], Duration::from_secs(10)).is_ok());
    }
}
