//! TLS on NVMe/TCP as a host may speak it: PSK identities
//! (crates/strata-auth/src/tls.rs) and the server's side of the TLS 1.3
//! handshake (crates/strata-tls/src/server.rs: OpenSSL's record and
//! handshake parsers, then strata's PSK callback) fed whatever arrives,
//! from raw bytes to a real ClientHello (made by strata's own client
//! context, with a fuzzed identity) cut short, extended or bit-flipped.
//!
//! Invariants: nothing panics; an identity that parses prints text that
//! parses to the same identity; a handshake never completes (the fuzzer
//! cannot finish one: it would need the client's keys).
#![no_main]

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use openssl::ssl::{Ssl, SslContext, SslStream};
use strata_auth::{Derivation, HashFn, PskIdentity, TlsPsk};

#[derive(Arbitrary, Debug)]
enum Input {
    Identity(Vec<u8>),
    Raw(Vec<u8>),
    Hello { identity: String, known: bool, cut: u16, flips: Vec<(u16, u8)>, tail: Vec<u8> },
}

/// Bytes in, bytes out, would-block when the input is spent.
struct Mem {
    input: Vec<u8>,
    pos: usize,
    out: Vec<u8>,
}

impl Read for Mem {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.input.len() {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(self.input.len() - self.pos);
        buf[..n].copy_from_slice(&self.input[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl Write for Mem {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0c4b6c4e-0000-4000-8000-000000000001";
const SUB: &str = "nqn.2026-12.io.strata:fuzz";

fn psk() -> &'static TlsPsk {
    static PSK: OnceLock<TlsPsk> = OnceLock::new();
    PSK.get_or_init(|| TlsPsk::generate(HashFn::Sha256))
}

fn server() -> &'static SslContext {
    static CTX: OnceLock<SslContext> = OnceLock::new();
    CTX.get_or_init(|| {
        let lookup: strata_tls::PskLookup = Arc::new(|id: &PskIdentity| (id.hostnqn == HOST).then(|| psk().clone()));
        strata_tls::server::context(lookup, Derivation::Compat).expect("server context")
    })
}

/// The first flight of strata's client with `identity` as host NQN.
fn client_hello(hostnqn: &str) -> Vec<u8> {
    let Ok(ctx) = strata_tls::client::context(psk(), hostnqn, SUB, 0, Derivation::Compat) else { return Vec::new() };
    let Ok(ssl) = Ssl::new(&ctx) else { return Vec::new() };
    let Ok(mut s) = SslStream::new(ssl, Mem { input: Vec::new(), pos: 0, out: Vec::new() }) else { return Vec::new() };
    let _ = s.connect();
    std::mem::take(&mut s.get_mut().out)
}

fn serve(bytes: Vec<u8>) {
    let ssl = Ssl::new(server()).expect("ssl");
    let mut s = SslStream::new(ssl, Mem { input: bytes, pos: 0, out: Vec::new() }).expect("stream");
    assert!(s.accept().is_err(), "a handshake completed without the client's keys");
    let mut buf = [0u8; 1024];
    for _ in 0..4 {
        if s.ssl_read(&mut buf).is_err() {
            break;
        }
    }
}

fuzz_target!(|input: Input| {
    match input {
        Input::Identity(bytes) => {
            if let Ok(id) = PskIdentity::parse(&bytes) {
                let again = PskIdentity::parse(id.to_string().as_bytes()).expect("a printed identity parses");
                assert_eq!(again, id);
                let _ = psk().tls_psk(&id, Derivation::Compat);
                let _ = psk().tls_psk(&id, Derivation::Rfc8446);
            }
        }
        Input::Raw(bytes) => serve(bytes),
        Input::Hello { identity, known, cut, flips, tail } => {
            let host = if known { HOST.to_string() } else { identity };
            let mut hello = client_hello(&host);
            if hello.is_empty() {
                return;
            }
            hello.truncate(usize::from(cut).max(1).min(hello.len()));
            for (at, bits) in flips {
                let i = usize::from(at) % hello.len();
                hello[i] ^= bits;
            }
            hello.extend_from_slice(&tail);
            serve(hello);
        }
    }
});
