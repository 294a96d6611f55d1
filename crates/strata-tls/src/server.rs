//! The target's side: a context that finds each host's PSK from the
//! identity in its ClientHello, and the handshake.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use openssl::ssl::{Ssl, SslContext, SslContextBuilder, SslMethod, SslMode, SslOptions, SslVersion};
use strata_auth::{Derivation, PskIdentity, TlsPsk};
use tokio::net::TcpStream;

use crate::{CIPHER_SUITE, Stream, TlsError, TlsStream};

/// Finds the configured PSK of the host an identity names (`None`: no PSK
/// for that host, the handshake fails).
pub type PskLookup = Arc<dyn Fn(&PskIdentity) -> Option<TlsPsk> + Send + Sync>;

/// What the PSK callback found: the identity it accepted, or why it
/// accepted none; shared between the connection (its ex data) and the
/// code that runs the handshake, which outlives a failed one.
type Found = Arc<Mutex<Option<Result<PskIdentity, String>>>>;

fn found_index() -> Result<openssl::ex_data::Index<Ssl, Found>, TlsError> {
    static INDEX: OnceLock<openssl::ex_data::Index<Ssl, Found>> = OnceLock::new();
    if let Some(i) = INDEX.get() {
        return Ok(*i);
    }
    let i = Ssl::new_ex_index::<Found>()?;
    Ok(*INDEX.get_or_init(|| i))
}

/// The settings both sides share: TLS 1.3 only, the one cipher suite, no
/// tickets, whole writes (records of every byte given; the stream
/// buffers them for the socket).
pub(crate) fn common(b: &mut SslContextBuilder) -> Result<(), TlsError> {
    b.set_min_proto_version(Some(SslVersion::TLS1_3))?;
    b.set_max_proto_version(Some(SslVersion::TLS1_3))?;
    b.set_ciphersuites(CIPHER_SUITE)?;
    b.set_options(SslOptions::NO_TICKET | SslOptions::NO_COMPRESSION);
    b.set_mode(SslMode::ACCEPT_MOVING_WRITE_BUFFER);
    Ok(())
}

/// The server context: each ClientHello's identity is parsed, its host's
/// PSK found through `lookup`, and the TLS PSK derived with `derivation`.
///
/// # Errors
///
/// [`TlsError::Setup`] when OpenSSL lacks TLS 1.3 or PSKs.
pub fn context(lookup: PskLookup, derivation: Derivation) -> Result<SslContext, TlsError> {
    let index = found_index()?;
    let mut b = SslContext::builder(SslMethod::tls_server())?;
    common(&mut b)?;
    b.set_num_tickets(0)?;
    b.set_psk_server_callback(move |ssl, identity, out| {
        let found = (|| {
            let id = PskIdentity::parse(identity.unwrap_or_default()).map_err(|e| e.to_string())?;
            let psk = lookup(&id).ok_or_else(|| format!("no TLS PSK for host {}", id.hostnqn))?;
            let key = psk.tls_psk(&id, derivation).map_err(|e| format!("host {}: {e}", id.hostnqn))?;
            if key.len() > out.len() {
                return Err("the PSK is longer than OpenSSL takes".to_string());
            }
            out[..key.len()].copy_from_slice(&key);
            Ok((id, key.len()))
        })();
        let len = *found.as_ref().map(|(_, len)| len).unwrap_or(&0);
        if let Some(slot) = ssl.ex_data(index) {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(found.map(|(id, _)| id));
        }
        // Zero: no PSK; the handshake fails.
        Ok(len)
    });
    Ok(b.build())
}

/// Whether the first byte a host sent opens a TLS record (a handshake
/// record, 16h) rather than an NVMe/TCP PDU (an ICReq, type 0): how an
/// `allowed` port tells the two apart. Waits for that byte; reads nothing.
///
/// # Errors
///
/// The socket's error; end of stream as `UnexpectedEof`.
pub async fn sniff(tcp: &TcpStream) -> std::io::Result<bool> {
    let mut first = [0u8; 1];
    match tcp.peek(&mut first).await? {
        0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
        _ => Ok(first[0] == 0x16),
    }
}

/// Runs the server's handshake on `tcp` (within `timeout`) and returns the
/// stream with the identity the host proved.
///
/// # Errors
///
/// [`TlsError::Handshake`] (with the reason the PSK lookup gave, when it
/// refused the identity), [`TlsError::Timeout`], [`TlsError::Setup`].
pub async fn accept(ctx: &SslContext, tcp: TcpStream, timeout: Duration) -> Result<(Stream, PskIdentity), TlsError> {
    let mut ssl = Ssl::new(ctx)?;
    let found: Found = Arc::default();
    ssl.set_ex_data(found_index()?, found.clone());
    let r = tokio::time::timeout(timeout, TlsStream::handshake(ssl, tcp, true))
        .await
        .map_err(|_| TlsError::Timeout(timeout))?;
    let found = found.lock().unwrap_or_else(|e| e.into_inner()).take();
    match (r, found) {
        (Ok(t), Some(Ok(id))) => Ok((Stream::Tls(Box::new(t)), id)),
        (Ok(_), _) => Err(TlsError::Handshake("no PSK identity was accepted".into())),
        (Err(TlsError::Handshake(_)), Some(Err(why))) => Err(TlsError::Handshake(why)),
        (Err(e), _) => Err(e),
    }
}
