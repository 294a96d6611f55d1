//! [`EtcdProcess`]: a private, single-member etcd for tests.
//!
//! It listens on loopback ports picked free at start, keeps its data in a
//! temp dir (under `/dev/shm` when there is one: etcd fsyncs every commit,
//! and tests need not pay for that on a shared disk), and is killed when
//! the value is dropped. Tests never skip for want of etcd: without the
//! binary they panic and say how to install it.
//!
//! The binary is `$STRATA_ETCD` if set, else `/usr/bin/etcd` (Debian's
//! `etcd-server`), else `etcd` on `PATH`.

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::etcd::{Endpoint, EtcdClient, EtcdConfig, EtcdTls};

/// How long etcd may take to become healthy.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running etcd, killed on drop. See the module documentation.
#[derive(Debug)]
pub struct EtcdProcess {
    binary: PathBuf,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    /// Another address clients may reach it on, besides loopback.
    also_on: Option<std::net::Ipv4Addr>,
    child: Option<Child>,
    /// Client TLS with certificate authentication, when started so.
    tls: Option<TlsFiles>,
}

/// The certificates of a TLS etcd, made by `openssl` in its temp dir: a
/// CA, etcd's server certificate (for 127.0.0.1), a client certificate
/// the CA signed, and one another CA signed.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA certificate.
    pub ca: PathBuf,
    /// A client certificate the CA signed, and its key.
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
    /// A client certificate from another CA (etcd refuses it), and its key.
    pub rogue_cert: PathBuf,
    /// Its key.
    pub rogue_key: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("cannot run openssl(1)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl TlsFiles {
    fn make(dir: &Path) -> TlsFiles {
        for ca in ["ca", "rogue-ca"] {
            openssl(
                dir,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "2",
                    "-subj",
                    &format!("/CN=strata test {ca}"),
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.crt"),
                ],
            );
        }
        for (ca, name, san) in
            [("ca", "server", "IP:127.0.0.1"), ("ca", "client", "DNS:client"), ("rogue-ca", "rogue", "DNS:rogue")]
        {
            std::fs::write(
                dir.join(format!("{name}.ext")),
                format!("subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n"),
            )
            .expect("ext file");
            openssl(
                dir,
                &[
                    "req",
                    "-new",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-subj",
                    &format!("/CN={name}"),
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                ],
            );
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    &format!("{ca}.crt"),
                    "-CAkey",
                    &format!("{ca}.key"),
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-extfile",
                    &format!("{name}.ext"),
                    "-out",
                    &format!("{name}.crt"),
                ],
            );
        }
        TlsFiles {
            ca: dir.join("ca.crt"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
            rogue_cert: dir.join("rogue.crt"),
            rogue_key: dir.join("rogue.key"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
        }
    }

    /// The client TLS settings with the good client certificate.
    pub fn client(&self) -> EtcdTls {
        EtcdTls { ca: Some(self.ca.clone()), cert: Some(self.client_cert.clone()), key: Some(self.client_key.clone()) }
    }
}

impl EtcdProcess {
    /// Starts etcd and waits until it reports healthy.
    ///
    /// # Panics
    ///
    /// If the etcd binary is missing ("install etcd-server"), or etcd does
    /// not become healthy within 30 s (its log is in the message).
    pub fn start() -> Self {
        Self::start_with(None, false)
    }

    /// Starts etcd serving clients over TLS only, with client certificate
    /// authentication (`--client-cert-auth`); [`tls`](Self::tls) has the
    /// files. Needs `openssl(1)`.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_tls() -> Self {
        Self::start_with(None, true)
    }

    /// The certificates, for an etcd from [`start_tls`](Self::start_tls).
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// Starts etcd listening for clients on `addr` as well as on loopback
    /// (for nodes in other network namespaces); see [`url_on`](Self::url_on).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_also_on(addr: std::net::Ipv4Addr) -> Self {
        Self::start_with(Some(addr), false)
    }

    fn start_with(also_on: Option<std::net::Ipv4Addr>, tls: bool) -> Self {
        let binary = find_binary();
        let mut last_log = String::new();
        // A port free when picked may be taken by another process before
        // etcd binds it: try again on new ports.
        for _ in 0..3 {
            let base = std::path::Path::new("/dev/shm");
            let dir = if base.is_dir() {
                tempfile::Builder::new().prefix("strata-etcd-").tempdir_in(base)
            } else {
                tempfile::Builder::new().prefix("strata-etcd-").tempdir()
            }
            .expect("cannot create a temp dir for etcd");
            let ports = super::loopback_ports(2);
            let (client_port, peer_port) = (ports[0], ports[1]);
            let tls = tls.then(|| TlsFiles::make(dir.path()));
            let mut p = EtcdProcess { binary: binary.clone(), dir, client_port, peer_port, also_on, child: None, tls };
            match p.spawn_and_wait() {
                Ok(()) => return p,
                Err(log) => last_log = log,
            }
        }
        panic!("etcd ({}) did not become healthy; its log ends:\n{last_log}", binary.display());
    }

    /// The client URL, `http://127.0.0.1:PORT` (`https` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The client URL on `addr` given to [`start_also_on`](Self::start_also_on).
    pub fn url_on(&self, addr: std::net::Ipv4Addr) -> String {
        format!("http://{addr}:{}", self.client_port)
    }

    /// The client endpoint.
    pub fn endpoint(&self) -> Endpoint {
        // The URL is built above from a loopback address and a port.
        Endpoint::parse(&self.url()).expect("a loopback URL parses")
    }

    /// A client of this etcd with the default timeouts.
    pub fn client(&self) -> EtcdClient {
        EtcdClient::new(self.config())
    }

    /// A configuration for this etcd with the default timeouts.
    pub fn config(&self) -> EtcdConfig {
        let c = EtcdConfig::new(vec![self.endpoint()]).expect("one endpoint is enough");
        match &self.tls {
            Some(t) => c.with_tls(t.client()),
            None => c,
        }
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills etcd (SIGKILL) and waits for it to exit. Its data stays.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same data dir and ports, after [`kill`](Self::kill).
    ///
    /// # Panics
    ///
    /// If it does not become healthy.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(log) = self.spawn_and_wait() {
            panic!("etcd did not come back after a restart; its log ends:\n{log}");
        }
    }

    /// Freezes etcd (SIGSTOP): connections are accepted by the kernel but
    /// never answered, as with a hung or partitioned member.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Undoes [`pause`](Self::pause) (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.pid().expect("etcd is not running");
        let status = Command::new("kill").arg(sig).arg(pid.to_string()).status().expect("cannot run kill(1)");
        assert!(status.success(), "kill {sig} {pid} failed");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// Spawns etcd and waits for `/health`; on failure returns the log tail.
    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let client = self.url();
        let listen = match self.also_on {
            Some(a) => format!("{client},http://{a}:{}", self.client_port),
            None => client.clone(),
        };
        let mut tls_args: Vec<std::ffi::OsString> = Vec::new();
        if let Some(t) = &self.tls {
            for (flag, path) in
                [("--cert-file", &t.server_cert), ("--key-file", &t.server_key), ("--trusted-ca-file", &t.ca)]
            {
                tls_args.push(flag.into());
                tls_args.push(path.into());
            }
            tls_args.push("--client-cert-auth".into());
        }
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = File::options().create(true).append(true).open(self.log_path()).expect("cannot create etcd.log");
        let child = Command::new(&self.binary)
            .args(["--name", "strata-test", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &listen, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("strata-test={peer}"), "--initial-cluster-state", "new"])
            .args(["--logger", "zap", "--log-level", "warn"])
            .args(&tls_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("cannot dup the log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}; install etcd-server", self.binary.display()));
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(format!("(etcd exited with {status})\n{}", self.log_tail()));
            }
            if healthy(self.client_port, self.tls.as_ref()) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        Err(format!("(not healthy after {START_TIMEOUT:?})\n{}", self.log_tail()))
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        // SIGKILL works on a paused process too.
        self.kill();
    }
}

/// The etcd binary, or a panic that says how to get one.
fn find_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("STRATA_ETCD") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "STRATA_ETCD={} is not a file: point it at an etcd binary, or unset it and install etcd-server",
            path.display()
        );
        return path;
    }
    let debian = Path::new("/usr/bin/etcd");
    if debian.is_file() {
        return debian.to_path_buf();
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("etcd")).find(|c| c.is_file()))
        .unwrap_or_default();
    on_path.unwrap_or_else(|| {
        panic!(
            "etcd is needed by this test but /usr/bin/etcd does not exist and no etcd is on PATH: \
             install etcd-server (apt-get install etcd-server) or set STRATA_ETCD to an etcd binary"
        )
    })
}

/// Whether etcd on `port` answers `/health` with `"health":"true"`.
fn healthy(port: u16, tls: Option<&TlsFiles>) -> bool {
    if let Some(t) = tls {
        let out = Command::new("curl")
            .args(["-s", "-m", "2", "--cacert"])
            .arg(&t.ca)
            .arg("--cert")
            .arg(&t.client_cert)
            .arg("--key")
            .arg(&t.client_key)
            .arg(format!("https://127.0.0.1:{port}/health"))
            .output();
        return out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("\"health\":\"true\""));
    }
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /health HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}
