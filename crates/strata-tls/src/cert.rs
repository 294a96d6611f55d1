//! TLS with certificates, for the surfaces that are not NVMe/TCP: the
//! HTTP API and the KV port (servers), and the CLI and nodes calling an
//! API (clients). TLS 1.2 and 1.3 with Mozilla's intermediate settings, on
//! the same system OpenSSL.

use std::path::Path;

use openssl::ssl::{SslAcceptor, SslConnector, SslFiletype, SslMethod};

/// A server context with the certificate chain `cert` and its key `key`
/// (PEM files).
///
/// # Errors
///
/// A file that cannot be read or parsed, or a key that does not match the
/// certificate, said in words.
pub fn acceptor(cert: &Path, key: &Path) -> Result<SslAcceptor, String> {
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).map_err(|e| e.to_string())?;
    b.set_certificate_chain_file(cert).map_err(|e| format!("certificate {}: {e}", cert.display()))?;
    b.set_private_key_file(key, SslFiletype::PEM).map_err(|e| format!("key {}: {e}", key.display()))?;
    b.check_private_key().map_err(|e| format!("the key does not match the certificate: {e}"))?;
    Ok(b.build())
}

/// A client context that trusts the system's CAs and, when given, the
/// CA certificate(s) in `ca` (PEM), and checks the server's name or IP
/// address against its certificate.
///
/// # Errors
///
/// A CA file that cannot be read or parsed.
pub fn connector(ca: Option<&Path>) -> Result<SslConnector, String> {
    let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
    if let Some(ca) = ca {
        b.set_ca_file(ca).map_err(|e| format!("CA certificate {}: {e}", ca.display()))?;
    }
    Ok(b.build())
}
