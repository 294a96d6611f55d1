//! An initiator's side: the context and the handshake with a configured
//! PSK.

use std::time::Duration;

use openssl::ssl::{Ssl, SslContext, SslMethod};
use strata_auth::{Derivation, TlsPsk};
use tokio::net::TcpStream;

use crate::{Stream, TlsError, TlsStream};

/// Connects TLS over `tcp` as `hostnqn` to `subnqn` with the configured
/// `psk`, presenting an identity of `version` (0 or 1) derived with
/// `derivation`, within `timeout`.
///
/// # Errors
///
/// [`TlsError::Handshake`] (the target has another PSK, or none),
/// [`TlsError::Timeout`], [`TlsError::Setup`].
pub async fn connect(
    tcp: TcpStream,
    psk: &TlsPsk,
    hostnqn: &str,
    subnqn: &str,
    version: u8,
    derivation: Derivation,
    timeout: Duration,
) -> Result<Stream, TlsError> {
    let ctx = context(psk, hostnqn, subnqn, version, derivation)?;
    let ssl = Ssl::new(&ctx)?;
    match tokio::time::timeout(timeout, TlsStream::handshake(ssl, tcp, false)).await {
        Err(_) => Err(TlsError::Timeout(timeout)),
        Ok(r) => r.map(|t| Stream::Tls(Box::new(t))),
    }
}

/// The client context of a host `hostnqn` with the configured `psk`
/// toward `subnqn`: the identity of `version` (0 or 1) and its TLS PSK
/// derived with `derivation`.
///
/// # Errors
///
/// [`TlsError::Handshake`] when the PSK cannot make the identity's key,
/// [`TlsError::Setup`] when OpenSSL lacks TLS 1.3 or PSKs.
pub fn context(
    psk: &TlsPsk,
    hostnqn: &str,
    subnqn: &str,
    version: u8,
    derivation: Derivation,
) -> Result<SslContext, TlsError> {
    let identity = psk.identity(hostnqn, subnqn, version, derivation);
    let key = psk.tls_psk(&identity, derivation).map_err(|e| TlsError::Handshake(e.to_string()))?;
    let identity = identity.to_string().into_bytes();
    let mut b = SslContext::builder(SslMethod::tls_client())?;
    crate::server::common(&mut b)?;
    b.set_psk_client_callback(move |_ssl, _hint, id_out, psk_out| {
        // The identity goes out NUL-terminated.
        if identity.len() >= id_out.len() || key.len() > psk_out.len() {
            return Ok(0);
        }
        id_out[..identity.len()].copy_from_slice(&identity);
        id_out[identity.len()] = 0;
        psk_out[..key.len()].copy_from_slice(&key);
        Ok(key.len())
    });
    Ok(b.build())
}
