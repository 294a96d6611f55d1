//! TLS 1.3 with pre-shared keys for NVMe/TCP (NVMe/TCP Transport
//! Specification 1.0, section 3.6), on the system OpenSSL.
//!
//! - [`TlsMode`]: what a port asks of its hosts (`off`, `allowed`,
//!   `required`).
//! - [`server`]: the target's context (PSK identities looked up through a
//!   [`PskLookup`]) and its side of the handshake, with
//!   [`server::sniff`] telling a TLS ClientHello from an ICReq on an
//!   `allowed` port.
//! - [`client`]: an initiator's context and handshake.
//! - [`cert`]: certificate TLS for the HTTP API and the KV port.
//! - [`Stream`]: plain TCP or TLS over it, with the non-blocking reads and
//!   vectored writes the target's and the initiator's queues are built on.
//!
//! Why OpenSSL: TLS 1.3 with an *external* PSK (no certificates) is what
//! NVMe/TCP needs. rustls has no external PSK support for TLS 1.3 (rustls
//! issue 174; the pull request adding it was closed unmerged) and
//! BoringSSL refuses the feature; OpenSSL 1.1.1 and later do it, and the
//! system's copy is what Debian keeps patched. GnuTLS (what the kernel's
//! `tlshd` uses) is the other candidate, with no maintained Rust binding.
//!
//! Limits (OpenSSL's legacy PSK callbacks, which the `openssl` crate
//! exposes): PSKs for TLS_AES_128_GCM_SHA256 only (identities `NVMe?R01`,
//! keys `NVMeTLSkey-1:01:`, what `nvme gen-tls-key` makes by default), and
//! identities of at most 256 bytes. No session tickets are sent: the
//! kernel's initiator hands the socket to kTLS right after the handshake,
//! and a ticket arriving there would be a record it cannot take.

pub mod cert;
pub mod client;
pub mod server;
mod stream;

pub use server::PskLookup;
pub use stream::{Stream, TlsStream};

/// The cipher suite every NVMe/TCP TLS implementation must support, and
/// the one strata offers and accepts.
pub const CIPHER_SUITE: &str = "TLS_AES_128_GCM_SHA256";

/// What a port asks of the hosts that connect to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// Plain NVMe/TCP only.
    #[default]
    Off,
    /// TLS or plain, as the host chooses (its first byte tells).
    Allowed,
    /// TLS only; a plain connection is closed.
    Required,
}

impl TlsMode {
    /// The name the command line and the config use.
    pub fn name(self) -> &'static str {
        match self {
            TlsMode::Off => "off",
            TlsMode::Allowed => "allowed",
            TlsMode::Required => "required",
        }
    }
}

impl std::fmt::Display for TlsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for TlsMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(TlsMode::Off),
            "allowed" => Ok(TlsMode::Allowed),
            "required" => Ok(TlsMode::Required),
            other => Err(format!("unknown TLS mode {other:?} (off, allowed or required)")),
        }
    }
}

/// Why a TLS connection could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// OpenSSL refused a setting (a library without TLS 1.3 or PSKs).
    #[error("TLS setup: {0}")]
    Setup(#[from] openssl::error::ErrorStack),
    /// The handshake failed: no or a wrong PSK, not TLS, a reset.
    #[error("TLS handshake failed: {0}")]
    Handshake(String),
    /// The handshake did not finish in time.
    #[error("TLS handshake timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// Reading or writing the socket failed.
    #[error("TLS: {0}")]
    Io(#[from] std::io::Error),
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use strata_auth::{Derivation, HashFn, PskIdentity, TlsPsk};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0c4b6c4e-0000-4000-8000-000000000001";
    const SUB: &str = "nqn.2026-12.io.strata:vol1";

    fn lookup(psk: TlsPsk) -> PskLookup {
        Arc::new(move |id: &PskIdentity| (id.hostnqn == HOST).then(|| psk.clone()))
    }

    async fn pair(
        server_psk: TlsPsk,
        client_psk: TlsPsk,
        version: u8,
    ) -> (Result<(Stream, PskIdentity), TlsError>, Result<Stream, TlsError>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ctx = server::context(lookup(server_psk), Derivation::Compat).unwrap();
        let srv = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            server::accept(&ctx, tcp, Duration::from_secs(5)).await
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let cli =
            client::connect(tcp, &client_psk, HOST, SUB, version, Derivation::Compat, Duration::from_secs(5)).await;
        (srv.await.unwrap(), cli)
    }

    #[tokio::test]
    async fn a_host_with_the_psk_connects_and_bytes_flow_both_ways() {
        let psk = TlsPsk::generate(HashFn::Sha256);
        for version in [0, 1] {
            let (srv, cli) = pair(psk.clone(), psk.clone(), version).await;
            let (mut s, id) = srv.expect("server handshake");
            let mut c = cli.expect("client handshake");
            assert_eq!((id.hostnqn.as_str(), id.subnqn.as_str(), id.version), (HOST, SUB, version));
            let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
            let w = big.clone();
            let writer = tokio::spawn(async move {
                c.write_all(&w).await.unwrap();
                c.flush().await.unwrap();
                let mut back = vec![0u8; 5];
                c.read_exact(&mut back).await.unwrap();
                back
            });
            let mut got = vec![0u8; big.len()];
            s.read_exact(&mut got).await.unwrap();
            assert!(got == big, "bytes differ");
            s.write_all(b"hello").await.unwrap();
            s.flush().await.unwrap();
            assert_eq!(writer.await.unwrap(), b"hello");
        }
    }

    #[tokio::test]
    async fn a_wrong_psk_fails_the_handshake_on_both_sides() {
        let (srv, cli) = pair(TlsPsk::generate(HashFn::Sha256), TlsPsk::generate(HashFn::Sha256), 0).await;
        assert!(matches!(srv, Err(TlsError::Handshake(_))), "{:?}", srv.map(|_| ()));
        assert!(cli.is_err());
    }

    #[tokio::test]
    async fn plain_bytes_on_a_tls_port_fail_the_handshake_and_sniff_tells_them_apart() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut plain = TcpStream::connect(addr).await.unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        // An ICReq starts with PDU type 0.
        plain.write_all(&[0u8; 128]).await.unwrap();
        assert!(!server::sniff(&tcp).await.unwrap());
        let ctx = server::context(lookup(TlsPsk::generate(HashFn::Sha256)), Derivation::Compat).unwrap();
        let r = server::accept(&ctx, tcp, Duration::from_secs(5)).await;
        assert!(matches!(r, Err(TlsError::Handshake(_))), "{:?}", r.map(|_| ()));
        // A host that says nothing times out.
        let _silent = TcpStream::connect(addr).await.unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        let r = server::accept(&ctx, tcp, Duration::from_millis(200)).await;
        assert!(matches!(r, Err(TlsError::Timeout(_))), "{:?}", r.map(|_| ()));
    }

    #[test]
    fn modes_parse_and_print() {
        for m in [TlsMode::Off, TlsMode::Allowed, TlsMode::Required] {
            assert_eq!(m.name().parse::<TlsMode>(), Ok(m));
        }
        assert!("on".parse::<TlsMode>().unwrap_err().contains("off, allowed or required"));
    }
}

#[cfg(test)]
mod queue_pattern {
    use std::io::IoSlice;
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::BytesMut;
    use strata_auth::{Derivation, HashFn, PskIdentity, TlsPsk};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// A host's queue as strata's caller-driven queues run it: 32 writes
    /// of 4168 bytes in flight through non-blocking vectored writes, 24-byte
    /// answers read after readiness events. Through tokio-openssl with a
    /// no-op waker this spun forever inside OpenSSL's read loop.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn thirty_two_writes_in_flight_and_their_answers_flow_without_a_hang() {
        let psk = TlsPsk::generate(HashFn::Sha256);
        let p2 = psk.clone();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let lookup: PskLookup = Arc::new(move |_: &PskIdentity| Some(p2.clone()));
        let ctx = server::context(lookup, Derivation::Compat).unwrap();
        const MSG: usize = 4168;
        const N: usize = 20000;
        let srv = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let (mut s, _) = server::accept(&ctx, tcp, Duration::from_secs(5)).await.unwrap();
            let mut got = 0usize;
            let mut buf = vec![0u8; 64 * 1024];
            while got < N * MSG {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0);
                let before = got / MSG;
                got += n;
                let answers = got / MSG - before;
                if answers > 0 {
                    s.write_all(&vec![7u8; 24 * answers]).await.unwrap();
                }
            }
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut c = client::connect(tcp, &psk, "h", "s", 0, Derivation::Compat, Duration::from_secs(5)).await.unwrap();
        let msg = vec![1u8; MSG];
        let mut sent = 0usize;
        let mut acked = 0usize;
        let mut rbuf = BytesMut::with_capacity(64 * 1024);
        let mut partial = 0usize; // bytes of the current message written
        let work = async {
            while acked < N * 24 {
                // Up to 32 in flight.
                while sent < N && sent - acked / 24 < 32 {
                    let mut slices = Vec::new();
                    slices.push(IoSlice::new(&msg[partial..]));
                    let more = (32 - (sent - acked / 24)).min(N - sent);
                    for _ in 1..more {
                        slices.push(IoSlice::new(&msg));
                    }
                    match c.try_write_vectored(&slices) {
                        Ok(n) => {
                            let total = partial + n;
                            sent += total / MSG;
                            partial = total % MSG;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) => panic!("{e}"),
                    }
                }
                let interest = Interest::READABLE | Interest::WRITABLE;
                let ready = c.ready(interest).await.unwrap();
                if ready.is_readable() {
                    rbuf.reserve(8192);
                    match c.try_read_buf(&mut rbuf) {
                        Ok(0) => panic!("eof"),
                        Ok(n) => {
                            acked += n;
                            rbuf.clear();
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(20), work).await.expect("no hang");
        srv.await.unwrap();
    }
}
