//! HTTP/1.1 to etcd's JSON gateway: endpoints, deadlines, fail-over.
//!
//! Each request opens its own TCP connection and closes it after the
//! answer. That costs a loopback or LAN handshake per call, which metadata
//! traffic (a few calls per volume operation, a keep-alive per lease every
//! few seconds) can afford, and it removes a hazard of pooled connections:
//! a server closing an idle connection just as a request is written, which
//! would leave a write's outcome unknown for no reason.
//!
//! # Fail-over
//!
//! Endpoints are tried in order, starting with the one that answered last.
//! A connection that cannot be made means the request was not sent, so the
//! next endpoint is tried. A connection that breaks after the request was
//! written is retried elsewhere only for requests that are safe to repeat
//! ([`Retry::Safe`]: reads, lease keep-alive and revoke); for the others
//! the outcome is unknown and the caller hears so
//! ([`EtcdError::OutcomeUnknown`]). An answer with gRPC code 14
//! (`Unavailable`, e.g. a member without a leader) is also retried
//! elsewhere for safe requests.
//!
//! # Deadlines
//!
//! Every call has a deadline (the client's request timeout unless the
//! caller passes an earlier one) covering all attempts; each connection
//! attempt is also bounded by the connect timeout so that one black-holed
//! endpoint does not eat the whole budget. When the deadline passes, the
//! call fails with [`EtcdError::Timeout`] and its connection is dropped.
//!
//! # Cancel safety
//!
//! Dropping a call's future closes its connection. A request already
//! written may still be applied by etcd; etcd applies each request
//! atomically, so it happened completely or not at all.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::error::EtcdError;
use super::wire::{self, JsonStream, MAX_MESSAGE_BYTES};

/// gRPC's `Unavailable`: the member cannot serve now (no leader, stopping).
const GRPC_UNAVAILABLE: i64 = 14;

/// One etcd client URL, `http://host:port` or `https://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    url: String,
    authority: String,
    /// `https`: TLS (see [`super::EtcdTls`]).
    tls: bool,
}

impl Endpoint {
    /// The port etcd serves clients on by default.
    pub const DEFAULT_PORT: u16 = 2379;

    /// Parses `http://host[:port][/]`, `https://host[:port][/]` or
    /// `host[:port]`; the port defaults to 2379. IPv6 addresses go in
    /// brackets: `http://[::1]:2379`.
    ///
    /// # Errors
    ///
    /// [`EtcdError::InvalidConfig`] for another scheme, a path, user info,
    /// or a bad host or port.
    pub fn parse(url: &str) -> Result<Self, EtcdError> {
        let bad = |why: &str| EtcdError::InvalidConfig(format!("etcd endpoint {url:?}: {why}"));
        let text = url.trim();
        let (rest, tls) = match text.split_once("://") {
            Some(("http", rest)) => (rest, false),
            Some(("https", rest)) => (rest, true),
            Some((scheme, _)) => {
                return Err(bad(&format!(
                    "scheme {scheme:?} is not supported; use http://host:port or https://host:port"
                )));
            }
            None => (text, false),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() {
            return Err(bad("no host; use http://host:port"));
        }
        if let Some(c) = authority.chars().find(|c| matches!(c, '/' | '?' | '#' | '@') || c.is_whitespace()) {
            return Err(bad(&format!("unexpected {c:?}; give only http://host:port")));
        }
        let (host, port) = match authority.rsplit_once(':') {
            // "[::1]" alone: the last ':' is inside the brackets.
            Some((h, p)) if !p.contains(']') => (h, Some(p)),
            _ => (authority, None),
        };
        if host.is_empty() || (host.starts_with('[') != host.ends_with(']')) || host == "[]" {
            return Err(bad("bad host"));
        }
        if !host.starts_with('[') && host.contains(':') {
            return Err(bad("an IPv6 address needs brackets, e.g. http://[::1]:2379"));
        }
        let port = match port {
            None => Self::DEFAULT_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p != 0 => p,
                _ => return Err(bad(&format!("port {p:?} is not 1 to 65535"))),
            },
        };
        let authority = format!("{host}:{port}");
        let scheme = if tls { "https" } else { "http" };
        Ok(Endpoint { url: format!("{scheme}://{authority}"), authority, tls })
    }

    /// True for an `https` endpoint.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The host, without brackets or port: what its certificate names.
    fn host(&self) -> &str {
        let host = self.authority.rsplit_once(':').map_or(self.authority.as_str(), |(h, _)| h);
        host.trim_start_matches('[').trim_end_matches(']')
    }

    /// The URL, normalised to `http://host:port` (or `https://`).
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

/// Whether a request may be sent again after its connection broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Repeating it changes nothing (reads, keep-alive, revoke).
    Safe,
    /// Repeating it could apply it twice.
    Unsafe,
}

/// One call of the gateway: its name in errors, its path, and whether it
/// may be repeated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rpc {
    pub(crate) op: &'static str,
    pub(crate) path: &'static str,
    pub(crate) retry: Retry,
}

/// Aborts a spawned task (the connection driver) when dropped.
#[derive(Debug)]
pub(crate) struct AbortOnDrop<T>(pub(crate) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A streamed answer: its body and the task that drives the connection.
pub(crate) struct Stream {
    pub(crate) endpoint: String,
    pub(crate) body: Incoming,
    // Both must live as long as the body: the driver task moves the body
    // off the socket, and dropping it (it aborts) ends the connection.
    _sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    _conn: AbortOnDrop<()>,
}

/// Why one attempt on one endpoint failed.
enum Attempt {
    /// Nothing was sent.
    NotSent(String),
    /// The request may have reached etcd.
    Broken(String),
    /// etcd answered with an error.
    Answered(EtcdError),
}

/// The endpoints, timeouts and the endpoint that answered last.
pub(crate) struct Transport {
    endpoints: Vec<Endpoint>,
    preferred: AtomicUsize,
    pub(crate) request_timeout: Duration,
    connect_timeout: Duration,
    keepalive: Option<Duration>,
    /// For `https` endpoints.
    tls: Option<openssl::ssl::SslConnector>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport").field("endpoints", &self.endpoints).field("tls", &self.tls.is_some()).finish()
    }
}

impl Transport {
    pub(crate) fn new(
        endpoints: Vec<Endpoint>,
        request_timeout: Duration,
        connect_timeout: Duration,
        keepalive: Option<Duration>,
        tls: Option<openssl::ssl::SslConnector>,
    ) -> Self {
        Transport { endpoints, preferred: AtomicUsize::new(0), request_timeout, connect_timeout, keepalive, tls }
    }

    pub(crate) fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The deadline of a call that starts now.
    pub(crate) fn deadline(&self) -> Instant {
        Instant::now() + self.request_timeout
    }

    /// Sends a unary request and returns the body of its 200 answer.
    pub(crate) async fn unary(
        &self,
        rpc: Rpc,
        body: &serde_json::Value,
        deadline: Instant,
    ) -> Result<Bytes, EtcdError> {
        self.with_failover(rpc, body, deadline, |s| async move { read_all(s).await.map_err(Attempt::Broken) }).await
    }

    /// Sends a request whose answer streams, and returns the stream once a
    /// 200 status arrived. The deadline covers only getting that far.
    pub(crate) async fn stream(
        &self,
        rpc: Rpc,
        body: &serde_json::Value,
        deadline: Instant,
    ) -> Result<Stream, EtcdError> {
        self.with_failover(rpc, body, deadline, |s| async move { Ok(s) }).await
    }

    /// Sends a streamed request and returns its first message.
    pub(crate) async fn first_message(
        &self,
        rpc: Rpc,
        body: &serde_json::Value,
        deadline: Instant,
    ) -> Result<Vec<u8>, EtcdError> {
        let op = rpc.op;
        self.with_failover(rpc, body, deadline, |s| async move {
            // Own the whole stream here: a closure captures only the
            // fields it names, and dropping the rest closes the connection.
            let mut s = s;
            let mut splitter = JsonStream::default();
            loop {
                if let Some(m) = splitter.next_message(op).map_err(Attempt::Answered)? {
                    return Ok(m);
                }
                match s.body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            splitter.push(op, &data).map_err(Attempt::Answered)?;
                        }
                    }
                    Some(Err(e)) => return Err(Attempt::Broken(format!("reading the answer: {e}"))),
                    None => return Err(Attempt::Broken("the answer ended before its first message".into())),
                }
            }
        })
        .await
    }

    /// Runs `finish` on the first 200 answer, trying endpoints in turn,
    /// within `deadline`.
    async fn with_failover<T, F, Fut>(
        &self,
        rpc: Rpc,
        body: &serde_json::Value,
        deadline: Instant,
        finish: F,
    ) -> Result<T, EtcdError>
    where
        F: Fn(Stream) -> Fut,
        Fut: Future<Output = Result<T, Attempt>>,
    {
        let Rpc { op, path, retry } = rpc;
        let budget = deadline.saturating_duration_since(Instant::now());
        // Serialising a serde_json::Value cannot fail.
        let payload = Bytes::from(body.to_string());
        let mut tried: Vec<(String, String)> = Vec::new();
        let attempts = async {
            let n = self.endpoints.len();
            let first = self.preferred.load(Ordering::Relaxed) % n.max(1);
            for i in 0..n {
                let index = (first + i) % n;
                let ep = &self.endpoints[index];
                tried.push((ep.url.clone(), "no answer before the deadline".into()));
                let outcome = match self.send(ep, path, payload.clone(), deadline).await {
                    Ok((status, stream)) if status == StatusCode::OK => finish(stream).await,
                    Ok((status, stream)) => match read_all(stream).await {
                        Ok(b) => Err(Attempt::Answered(wire::parse_error(op, status.as_u16(), &b))),
                        Err(e) => Err(Attempt::Broken(e)),
                    },
                    Err(e) => Err(e),
                };
                let reason = match outcome {
                    Ok(v) => {
                        self.preferred.store(index, Ordering::Relaxed);
                        return Ok(v);
                    }
                    Err(Attempt::NotSent(reason)) => reason,
                    Err(Attempt::Broken(reason)) if retry == Retry::Safe => reason,
                    Err(Attempt::Broken(reason)) => {
                        return Err(EtcdError::OutcomeUnknown { op, endpoint: ep.url.clone(), reason });
                    }
                    Err(Attempt::Answered(EtcdError::Status { code: GRPC_UNAVAILABLE, message, .. }))
                        if retry == Retry::Safe =>
                    {
                        format!("unavailable: {message}")
                    }
                    Err(Attempt::Answered(e)) => return Err(e),
                };
                if let Some(last) = tried.last_mut() {
                    last.1 = reason;
                }
            }
            // Every endpoint failed; `tried` (borrowed here) fills this in below.
            Err(EtcdError::Unreachable { tried: Vec::new() })
        };
        // Bound to a variable so that `attempts`, which borrows `tried`, is
        // dropped before `tried` is moved into the error.
        let outcome = tokio::time::timeout_at(deadline, attempts).await;
        match outcome {
            Ok(Err(EtcdError::Unreachable { .. })) => Err(EtcdError::Unreachable { tried }),
            Ok(result) => result,
            Err(_) => Err(EtcdError::Timeout { op, after: budget, tried }),
        }
    }

    /// Connects to `ep`, sends one POST and waits for the answer's head.
    async fn send(
        &self,
        ep: &Endpoint,
        path: &'static str,
        payload: Bytes,
        deadline: Instant,
    ) -> Result<(StatusCode, Stream), Attempt> {
        let connect_by = deadline.min(Instant::now() + self.connect_timeout);
        let tcp = match tokio::time::timeout_at(connect_by, TcpStream::connect(&ep.authority)).await {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) => return Err(Attempt::NotSent(format!("connect: {e}"))),
            Err(_) => return Err(Attempt::NotSent(format!("connect: no answer within {:?}", self.connect_timeout))),
        };
        // Small requests: send them at once rather than wait for Nagle.
        let _ = tcp.set_nodelay(true);
        if let Some(idle) = self.keepalive {
            // A long-lived stream (watch) must notice a peer that vanished
            // without a FIN; the kernel's keep-alive probes do that.
            let ka = socket2::TcpKeepalive::new().with_time(idle).with_interval(idle);
            let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(&ka);
        }
        let (mut sender, conn) = if ep.tls {
            let Some(connector) = &self.tls else {
                return Err(Attempt::NotSent("an https endpoint, and no TLS configuration".into()));
            };
            let tls = tls_connect(connector, ep, tcp, connect_by).await.map_err(Attempt::NotSent)?;
            http_handshake(tls).await?
        } else {
            http_handshake(tcp).await?
        };
        let request = Request::post(path)
            .header(hyper::header::HOST, &ep.authority)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(payload))
            .map_err(|e| Attempt::NotSent(format!("building the request: {e}")))?;
        let response = sender.send_request(request).await.map_err(|e| {
            // With TLS 1.3 the server checks our certificate after the
            // handshake returned: a refusal shows up as a dropped request.
            let hint = if ep.tls {
                " (TLS: etcd may have refused our client certificate: check it, its key and its CA)"
            } else {
                ""
            };
            Attempt::Broken(format!("{e}{hint}"))
        })?;
        let status = response.status();
        Ok((status, Stream { endpoint: ep.url.clone(), body: response.into_body(), _sender: sender, _conn: conn }))
    }
}

/// The TLS handshake with `ep` over `tcp`, checking its certificate
/// against the host name (or IP address) in its URL.
async fn tls_connect(
    connector: &openssl::ssl::SslConnector,
    ep: &Endpoint,
    tcp: TcpStream,
    by: Instant,
) -> Result<tokio_openssl::SslStream<TcpStream>, String> {
    let ssl = connector
        .configure()
        .and_then(|c| c.into_ssl(ep.host()))
        .map_err(|e| format!("TLS setup for {}: {e}", ep.url))?;
    let mut stream = tokio_openssl::SslStream::new(ssl, tcp).map_err(|e| format!("TLS setup: {e}"))?;
    match tokio::time::timeout_at(by, std::pin::Pin::new(&mut stream).connect()).await {
        Ok(Ok(())) => Ok(stream),
        Ok(Err(e)) => {
            let verify = stream.ssl().verify_result();
            let why =
                if verify == openssl::x509::X509VerifyResult::OK { String::new() } else { format!(" ({verify})") };
            Err(format!("TLS handshake with {}: {e}{why}", ep.url))
        }
        Err(_) => Err(format!("TLS handshake with {}: no answer in time", ep.url)),
    }
}

/// HTTP/1.1 over `io`; the connection runs on a task of its own, aborted
/// with the returned guard.
async fn http_handshake<I>(
    io: I,
) -> Result<(hyper::client::conn::http1::SendRequest<Full<Bytes>>, AbortOnDrop<()>), Attempt>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(io))
        .await
        .map_err(|e| Attempt::NotSent(format!("HTTP handshake: {e}")))?;
    let conn = AbortOnDrop(tokio::spawn(async move {
        // The error, if any, surfaces through the request or the body.
        let _ = conn.await;
    }));
    Ok((sender, conn))
}

/// Reads a whole answer body, up to [`MAX_MESSAGE_BYTES`]. Takes the
/// whole [`Stream`] so that the connection lives until the body is read.
async fn read_all(stream: Stream) -> Result<Bytes, String> {
    let Stream { body, _sender, _conn, .. } = stream;
    match Limited::new(body, MAX_MESSAGE_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) => Err(format!("reading the answer: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_normalise() {
        let ok = [
            ("http://127.0.0.1:2379", "http://127.0.0.1:2379"),
            ("http://127.0.0.1:2379/", "http://127.0.0.1:2379"),
            ("127.0.0.1:4001", "http://127.0.0.1:4001"),
            ("http://etcd-1", "http://etcd-1:2379"),
            (" http://[::1]:2379 ", "http://[::1]:2379"),
            ("[::1]", "http://[::1]:2379"),
            ("https://etcd-1", "https://etcd-1:2379"),
            ("https://[::1]:2379/", "https://[::1]:2379"),
        ];
        for (input, url) in ok {
            let ep = Endpoint::parse(input).unwrap();
            assert_eq!(ep.url(), url, "{input}");
            assert_eq!(ep.is_tls(), url.starts_with("https"), "{input}");
        }
        assert_eq!(Endpoint::parse("https://[::1]:2379").unwrap().host(), "::1");
        assert_eq!(Endpoint::parse("https://etcd-1").unwrap().host(), "etcd-1");
        for bad in [
            "",
            "http://",
            "https://",
            "unix:///run/etcd.sock",
            "http://127.0.0.1:2379/v3",
            "http://user@127.0.0.1:2379",
            "http://127.0.0.1:0",
            "http://127.0.0.1:99999",
            "http://127.0.0.1:x",
            "http://::1:2379",
            "http://[::1:2379",
            "http://[]:2379",
        ] {
            let e = Endpoint::parse(bad).unwrap_err();
            assert!(matches!(e, EtcdError::InvalidConfig(_)), "{bad:?}: {e:?}");
        }
    }
}
