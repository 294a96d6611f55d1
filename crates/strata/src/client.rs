//! The CLI's HTTP client for the volume commands: one request per
//! connection, JSON in and out, plain HTTP or HTTPS (`https://` API
//! addresses; the server's certificate is checked against the system's
//! CAs and `$STRATA_API_CA`, and against the address's name or IP).
//!
//! hyper's client connection API does the HTTP/1.1 framing (chunked
//! bodies included) on a small current-thread tokio runtime built per
//! call; the CLI makes one request and exits, so a pool or a shared
//! runtime would buy nothing. Every call has a deadline covering connect,
//! send and the whole answer.

use std::time::Duration;

use anyhow::{Context, anyhow};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{CONNECTION, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// How long one request may take, from connect to the last byte of the
/// answer. Volume operations are metadata updates; two minutes is far
/// beyond any healthy answer.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The TLS client context of the requests a node forwards to other
/// nodes, set when the node's own API is HTTPS (see [`set_forward_tls`]).
static FORWARD_TLS: std::sync::OnceLock<openssl::ssl::SslConnector> = std::sync::OnceLock::new();

/// Makes the requests this node forwards to other nodes HTTPS, with
/// `connector` (the cluster's nodes serve their APIs alike).
pub fn set_forward_tls(connector: openssl::ssl::SslConnector) {
    let _ = FORWARD_TLS.set(connector);
}

/// `https` when forwarded requests use TLS, else `http`.
pub fn forward_scheme() -> &'static str {
    if FORWARD_TLS.get().is_some() { "https" } else { "http" }
}

/// Where the CLI's token is, as [`set_token_file`] was told.
static TOKEN_FILE: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();

/// Remembers `--token-file` / `$STRATA_TOKEN_FILE` for the requests this
/// process makes (read only when one is made, so commands that make none,
/// such as `strata node`, never look at it).
pub fn set_token_file(file: Option<&std::path::Path>) {
    let _ = TOKEN_FILE.set(file.map(std::path::Path::to_path_buf));
}

/// The API token for the CLI's requests: `$STRATA_TOKEN`, else the first
/// line of the `--token-file`, else the local admin token of `strata
/// serve`'s default data dir (`./strata-data/api-token`) when there is
/// one.
///
/// # Errors
///
/// A token file was named and cannot be read.
fn token() -> anyhow::Result<Option<String>> {
    let first_line = |text: String| text.lines().next().unwrap_or("").trim().to_string();
    if let Some(t) = std::env::var("STRATA_TOKEN").ok().filter(|t| !t.trim().is_empty()) {
        return Ok(Some(t.trim().to_string()));
    }
    match TOKEN_FILE.get().and_then(Option::as_deref) {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("reading the API token from {} (--token-file)", f.display()))?;
            Ok(Some(first_line(text)))
        }
        None => Ok(std::fs::read_to_string(std::path::Path::new("strata-data").join("api-token")).ok().map(first_line)),
    }
}

/// Sends `method path` with an optional JSON body to the API at `base`
/// (`http://HOST:PORT`) and returns the JSON answer.
///
/// # Errors
///
/// Connection failures (with a hint to start `strata serve`), no answer
/// within two minutes, non-2xx answers (with the API's error message) and
/// malformed answers.
pub fn request(base: &str, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
    request_within(base, method, path, body, TIMEOUT)
}

fn request_within(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout: Duration,
) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("starting the HTTP client's runtime")?;
    rt.block_on(async {
        tokio::time::timeout(timeout, exchange(base, method, path, body))
            .await
            .map_err(|_| anyhow!("the strata API at {base} did not answer within {timeout:?}"))?
    })
}

async fn exchange(base: &str, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
    let auth = token()?.map(|t| format!("Bearer {t}"));
    let (status, json, bytes) = send(base, method, path, body, auth.as_deref()).await?;
    if !status.is_success() {
        return Err(refusal(status, json.as_ref(), &bytes));
    }
    json.context("API answer is not JSON")
}

/// An API's error answer as an error: its `error` message, or its text.
fn refusal(status: hyper::StatusCode, json: Option<&Value>, bytes: &[u8]) -> anyhow::Error {
    let msg = match json {
        Some(v) => v.get("error").and_then(Value::as_str).unwrap_or("(no message)").to_owned(),
        None => String::from_utf8_lossy(bytes).trim().to_owned(),
    };
    anyhow!("{msg} (HTTP {})", status.as_u16())
}

/// Sends `method path` to another node's API at `base` from inside a
/// node (which runs a runtime already) and returns its status and JSON
/// answer as they are, within `timeout`: a node answers for a volume
/// another node owns by asking that one.
///
/// # Errors
///
/// The other node cannot be reached, does not answer in time, or answers
/// something that is not JSON.
pub async fn forward(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    authorization: &str,
    timeout: Duration,
) -> anyhow::Result<(u16, Value)> {
    let (status, json, _) = tokio::time::timeout(timeout, send(base, method, path, body, Some(authorization)))
        .await
        .map_err(|_| anyhow!("the strata API at {base} did not answer within {timeout:?}"))??;
    Ok((status.as_u16(), json.context("API answer is not JSON")?))
}

/// One request: the answer's status, its JSON (if it is JSON) and bytes.
async fn send(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    authorization: Option<&str>,
) -> anyhow::Result<(hyper::StatusCode, Option<Value>, Bytes)> {
    let resp = start(base, method, path, body, authorization, "application/json").await?;
    let status = resp.status();
    let bytes = resp.into_body().collect().await.context("reading the API answer")?.to_bytes();
    let json: Option<Value> =
        if bytes.trim_ascii().is_empty() { Some(Value::Null) } else { serde_json::from_slice(&bytes).ok() };
    Ok((status, json, bytes))
}

/// Connects to the API at `base` and sends one request; the answer's
/// head, its body still to be read.
async fn start(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    authorization: Option<&str>,
    accept: &str,
) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
    let (tls, hostport) = match base.strip_prefix("https://") {
        Some(rest) => (true, rest),
        None => (false, base.strip_prefix("http://").unwrap_or(base)),
    };
    let hostport = hostport.trim_end_matches('/');
    let stream = tokio::net::TcpStream::connect(hostport).await.with_context(|| {
        format!("cannot reach the strata API at {base}: is `strata serve` running? (--api or STRATA_API)")
    })?;
    let mut sender = if tls {
        http_handshake(base, tls_connect(base, hostport, stream).await?).await?
    } else {
        http_handshake(base, stream).await?
    };
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(HOST, hostport)
        .header(CONTENT_TYPE, "application/json")
        .header(hyper::header::ACCEPT, accept)
        .header(CONNECTION, "close");
    if let Some(a) = authorization.filter(|a| !a.is_empty()) {
        req = req.header(hyper::header::AUTHORIZATION, a);
    }
    let req =
        req.body(Full::new(Bytes::from(payload))).with_context(|| format!("building the request {method} {path}"))?;
    sender.send_request(req).await.context("sending the request to the API")
}

/// `GET path` as a stream (server-sent events): calls `each` with every
/// chunk of the answer as it arrives, until the server ends it, `each`
/// returns false, or the connection fails. No deadline: a follower waits
/// as long as it is left running.
///
/// # Errors
///
/// The API cannot be reached, refuses (with its message), or the
/// connection breaks.
pub fn follow(base: &str, path: &str, mut each: impl FnMut(&[u8]) -> bool) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("starting the HTTP client's runtime")?;
    rt.block_on(async {
        let auth = token()?.map(|t| format!("Bearer {t}"));
        let mut resp =
            tokio::time::timeout(TIMEOUT, start(base, "GET", path, None, auth.as_deref(), "text/event-stream"))
                .await
                .map_err(|_| anyhow!("the strata API at {base} did not answer within {TIMEOUT:?}"))??;
        if !resp.status().is_success() {
            let status = resp.status();
            let bytes = resp.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
            return Err(refusal(status, serde_json::from_slice::<Value>(&bytes).ok().as_ref(), &bytes));
        }
        while let Some(frame) = resp.body_mut().frame().await {
            let frame = frame.context("reading the event stream")?;
            if let Some(data) = frame.data_ref()
                && !each(data)
            {
                return Ok(());
            }
        }
        Ok(())
    })
}

/// HTTP/1.1 over `io` to the API at `base`. The connection future moves
/// the bytes; it ends when the answer is read and the sender is dropped,
/// or with the runtime on a timeout.
async fn http_handshake<I>(base: &str, io: I) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .with_context(|| format!("HTTP handshake with the strata API at {base}"))?;
    tokio::spawn(conn);
    Ok(sender)
}

/// The TLS handshake with the API at `hostport`: the node's forwarding
/// context, or one trusting the system's CAs and `$STRATA_API_CA`; the
/// certificate must name the host (or IP address) of `hostport`.
async fn tls_connect(
    base: &str,
    hostport: &str,
    tcp: tokio::net::TcpStream,
) -> anyhow::Result<tokio_openssl::SslStream<tokio::net::TcpStream>> {
    let connector = match FORWARD_TLS.get() {
        Some(c) => c.clone(),
        None => {
            let ca = std::env::var_os("STRATA_API_CA").map(std::path::PathBuf::from);
            strata_tls::cert::connector(ca.as_deref()).map_err(|e| anyhow!("STRATA_API_CA: {e}"))?
        }
    };
    let host = match hostport.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => hostport,
    };
    let ssl = connector.configure()?.into_ssl(host)?;
    let mut s = tokio_openssl::SslStream::new(ssl, tcp)?;
    std::pin::Pin::new(&mut s).connect().await.with_context(|| {
        format!("TLS with the strata API at {base} (a CA the system does not trust? set STRATA_API_CA)")
    })?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;

    /// A one-shot server: accepts one connection, reads the request head,
    /// writes `answer` (unless `None`: then it stays silent) and returns
    /// the request head it read.
    fn serve_once(answer: Option<&'static str>) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let t = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap() == 1 {
                head.push(byte[0]);
            }
            match answer {
                Some(a) => s.write_all(a.as_bytes()).unwrap(),
                None => std::thread::sleep(Duration::from_millis(500)),
            }
            String::from_utf8(head).unwrap()
        });
        (base, t)
    }

    #[test]
    fn chunked_answers_are_joined() {
        let (base, t) = serve_once(Some(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n\
             4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n",
        ));
        let v = request(&base, "GET", "/api/v1/volumes", None).unwrap();
        assert_eq!(v, serde_json::json!({"a": 1}));
        let head = t.join().unwrap();
        assert!(head.starts_with("GET /api/v1/volumes HTTP/1.1\r\n"), "{head}");
        assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    }

    #[test]
    fn api_errors_carry_the_api_message_and_status() {
        let (base, t) = serve_once(Some(
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n\
             1d\r\n{\"error\":\"no volume named x\"}\r\n0\r\n\r\n",
        ));
        let e = request(&base, "DELETE", "/api/v1/volumes/x", None).unwrap_err();
        assert_eq!(e.to_string(), "no volume named x (HTTP 404)");
        t.join().unwrap();
    }

    #[test]
    fn a_silent_api_times_out() {
        let (base, t) = serve_once(None);
        let e = request_within(&base, "GET", "/api/v1/volumes", None, Duration::from_millis(200)).unwrap_err();
        assert!(e.to_string().contains("did not answer"), "{e}");
        t.join().unwrap();
    }

    #[test]
    fn unreachable_api_says_what_to_do() {
        let e = request("http://127.0.0.1:1", "GET", "/api/v1/volumes", None).unwrap_err();
        assert!(format!("{e:#}").contains("strata serve"));
    }
}
