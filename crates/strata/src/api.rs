//! The JSON HTTP API (default 127.0.0.1:7420), one route table for
//! `strata serve` (S) and `strata node` (C); see `docs/api.md`.
//!
//! | method | path                         | on | body / answer                              |
//! |--------|------------------------------|----|--------------------------------------------|
//! | GET    | /, /dashboard/...            | SC | the web dashboard (`dashboard`; no token)  |
//! | GET    | /api/v1/status               | S  | version, listeners, drives, capacity       |
//! | GET    | /api/v1/stats/io             | SC | cumulative I/O counters and latency buckets per volume and host (`io_stats`) |
//! | GET    | /metrics                     | SC | Prometheus text (`metrics`)                |
//! | GET    | /api/v1/events?since=SEQ&follow=1 | SC | recent events, or followed (server-sent events; `api_events`) |
//! | GET    | /api/v1/pool                 | C  | the pool's status (`PoolStatus`)           |
//! | GET    | /api/v1/pool/settings        | C  | the pool's settings                        |
//! | PATCH  | /api/v1/pool/settings        | C  | settings to change                         |
//! | POST   | /api/v1/nodes/NAME/drain     | C  | the new map epoch                          |
//! | POST   | /api/v1/nodes/NAME/undrain   | C  | the new map epoch                          |
//! | DELETE | /api/v1/nodes/NAME           | C  | the new map epoch                          |
//! | GET    | /api/v1/volumes              | SC | list of volumes                            |
//! | POST   | /api/v1/volumes              | SC | `{"name","size","block_size"?,"nqn"?,"allowed_hosts"?,"allow_any_host"?,"protect"?}` -> 201; on a cluster `allowed_hosts` or `allow_any_host: true` is required |
//! | GET    | /api/v1/volumes/NAME         | SC | one volume                                 |
//! | PATCH  | /api/v1/volumes/NAME         | S  | `{"size","allow_shrink"?}`                 |
//! | DELETE | /api/v1/volumes/NAME         | SC | the deleted volume                         |
//! | POST   | /api/v1/volumes/NAME/check   | C  | `{"repair"?}` -> 202; at the volume's owner |
//! | GET    | /api/v1/volumes/NAME/check   | C  | the check's progress and report            |
//! | GET    | /api/v1/tokens               | SC | the API tokens (no secrets); admin         |
//! | POST   | /api/v1/tokens               | SC | `{"name","role"}` -> 201 with the token    |
//! | DELETE | /api/v1/tokens/ID            | SC | the revoked token                          |
//! | GET    | /api/v1/hosts                | SC | the hosts: which keys each has (never the keys) |
//! | POST   | /api/v1/hosts                | SC | `{"nqn","dhchap_secret"?,"dhchap_ctrl_secret"?,"dhchap_hash"?,"dhchap_dhgroup"?,"tls_psk"?}` -> 201 |
//! | PATCH  | /api/v1/hosts/NQN            | SC | the same fields; absent: unchanged, `""`: removed |
//! | DELETE | /api/v1/hosts/NQN            | SC | the removed host                           |
//! | GET    | /api/v1/audit?since=SEQ&limit=N | SC | this node's audit records after SEQ        |
//! | GET    | /api/v1/audit/verify         | SC | the audit chain checked against its checkpoint |
//!
//! Every request needs `Authorization: Bearer TOKEN`
//! (`strata_node::tokens`): a reader token may `GET`, an admin token may
//! do anything. Without one: 401; a reader's write: 403.
//!
//! Sizes are bytes (a number) or strings such as "8G". Errors are
//! `{"error": "..."}` with 400, 401, 403, 404, 409 or 500.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{Value, json};
use strata_meta::NewVolume;
use tokio::net::TcpListener;

use strata_events::{EventLog, NewEvent, Severity};
use strata_node::audit::AuditLog;

use crate::api_events::{ApiBody, events_route};
use strata_node::cluster::{Answer, ClusterNode, SettingsPatch};
use strata_node::hosts::{HostSpec, Hosts, HostsError};
use strata_node::node::{Node, NodeError};
use strata_node::tokens::{Role, TokenError, Tokens};

const MAX_BODY: usize = 64 * 1024;

/// Binds the API address and serves it until the process ends.
///
/// # Errors
///
/// When the address cannot be bound.
pub async fn serve(
    backend: Backend,
    tokens: Arc<Tokens>,
    hosts: Arc<Hosts>,
    audit: Arc<AuditLog>,
    events: Arc<EventLog>,
    addr: SocketAddr,
    tls: Option<openssl::ssl::SslAcceptor>,
) -> anyhow::Result<SocketAddr> {
    serve_http(addr, tls, move |req| {
        let (backend, tokens, hosts, audit) = (backend.clone(), tokens.clone(), hosts.clone(), audit.clone());
        let events = events.clone();
        async move {
            if req.method() == Method::GET
                && let Some((content_type, body)) = crate::dashboard::asset(req.uri().path())
            {
                return crate::dashboard::response(content_type, body).map(ApiBody::from);
            }
            let (method, path) = (req.method().clone(), req.uri().path().to_string());
            let what = format!("{method} {path}");
            let (auth, role, actor) = match authorize(&tokens, &req).await {
                Ok(a) => a,
                Err((refused, actor)) => {
                    audit.record("api", &actor, &what, refused.status().as_str(), "refused");
                    return refused.map(ApiBody::from);
                }
            };
            if req.uri().path().trim_end_matches('/') == "/api/v1/events" {
                return events_route(&events, req).await;
            }
            let resp = match (req.method(), req.uri().path().trim_end_matches('/')) {
                (_, p) if p == "/api/v1/tokens" || p.starts_with("/api/v1/tokens/") => {
                    token_route(&tokens, req, role).await
                }
                (_, p) if p == "/api/v1/hosts" || p.starts_with("/api/v1/hosts/") => host_route(&hosts, req).await,
                (_, p) if p == "/api/v1/audit" || p == "/api/v1/audit/verify" => audit_route(&audit, req).await,
                _ => handle(&backend, req, auth).await,
            };
            if method != Method::GET {
                audit.record("api", &actor, &what, resp.status().as_str(), "");
            }
            let resp = if method != Method::GET && resp.status().is_success() {
                volume_event(&events, &method, &path, resp).await
            } else {
                resp
            };
            resp.map(ApiBody::from)
        }
    })
    .await
}

/// Tells the event log of a volume made, changed or deleted through the
/// API (`resp` is the successful reply, which names the volume).
async fn volume_event(
    events: &EventLog,
    method: &Method,
    path: &str,
    resp: Response<Full<Bytes>>,
) -> Response<Full<Bytes>> {
    let path = path.trim_end_matches('/');
    let Some(rest) = path.strip_prefix("/api/v1/volumes") else { return resp };
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let name = v.get("name").and_then(Value::as_str).map(str::to_string);
    let event = match (method, rest.trim_start_matches('/').split('/').collect::<Vec<_>>().as_slice()) {
        (&Method::POST, [""]) => name.map(|n| {
            let size = v.get("size").and_then(Value::as_str).unwrap_or("");
            NewEvent::new("volume.created", Severity::Info, format!("volume {n} created ({size})")).volume(n)
        }),
        (&Method::PATCH, [n]) => {
            let size = v.get("size").and_then(Value::as_str).unwrap_or("");
            Some(
                NewEvent::new("volume.changed", Severity::Info, format!("volume {n} changed (size {size})")).volume(*n),
            )
        }
        (&Method::DELETE, [n]) => {
            Some(NewEvent::new("volume.deleted", Severity::Info, format!("volume {n} deleted")).volume(*n))
        }
        _ => None,
    };
    if let Some(e) = event {
        events.emit(e);
    }
    Response::from_parts(parts, Full::new(bytes))
}

/// `GET /api/v1/audit?since=SEQ&limit=N` (records after SEQ, oldest
/// first) and `GET /api/v1/audit/verify` (the chain checked).
async fn audit_route(audit: &AuditLog, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return error(StatusCode::METHOD_NOT_ALLOWED, "the audit log is read only");
    }
    if req.uri().path().trim_end_matches('/').ends_with("/verify") {
        return match audit.verify().await {
            Ok(r) => reply(StatusCode::OK, r),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot read the audit log: {e}")),
        };
    }
    let query = req.uri().query().unwrap_or("");
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            .and_then(|v| v.parse().ok())
    };
    let (since, limit) = (param("since").unwrap_or(0u64), param("limit").unwrap_or(1000u64).min(100_000));
    match audit.read_since(since, limit as usize).await {
        Ok(records) => reply(StatusCode::OK, records),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot read the audit log: {e}")),
    }
}

/// Refuses to serve the API in clear text on an address other hosts
/// reach, unless told to.
///
/// # Errors
///
/// A routable address without `allow_remote`.
pub fn check_exposure(addr: SocketAddr, allow_remote: bool, tls: bool) -> anyhow::Result<()> {
    anyhow::ensure!(
        addr.ip().is_loopback() || allow_remote || tls,
        "refusing to serve the HTTP API on {addr}: it is plain HTTP, so its tokens would cross the network in \
         clear text. Listen on loopback (--http 127.0.0.1:7420), serve it over TLS (--http-tls-cert and \
         --http-tls-key), or pass --allow-remote-api on a trusted management network"
    );
    Ok(())
}

/// The API's TLS acceptor when `cfg` names a certificate and key (the key
/// file must be the owner's only); also makes the requests this node
/// forwards to other nodes HTTPS, trusting `http_tls_ca` besides the
/// system's CAs.
///
/// # Errors
///
/// A file that cannot be read, a key others may read, a key that does not
/// match its certificate.
pub fn tls_of(cfg: &strata_node::config::ServeConfig) -> anyhow::Result<Option<openssl::ssl::SslAcceptor>> {
    let Some((cert, key)) = &cfg.http_tls else { return Ok(None) };
    crate::config::read_secret(key).map_err(|e| anyhow::anyhow!("--http-tls-key: {e:#}"))?;
    let acceptor = strata_tls::cert::acceptor(cert, key).map_err(|e| anyhow::anyhow!("--http-tls-cert/key: {e}"))?;
    let connector =
        strata_tls::cert::connector(cfg.http_tls_ca.as_deref()).map_err(|e| anyhow::anyhow!("--http-tls-ca: {e}"))?;
    crate::client::set_forward_tls(connector);
    Ok(Some(acceptor))
}

/// The request's bearer token checked against the role its method needs
/// (`GET`: reader; anything else: admin). Returns the `Authorization`
/// header to pass on when the request is forwarded to another node, and
/// the token's role.
async fn authorize(
    tokens: &Tokens,
    req: &Request<Incoming>,
) -> Result<(String, Role, String), (Response<Full<Bytes>>, String)> {
    let header = req.headers().get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or("");
    let what = format!("{} {}", req.method(), req.uri().path());
    let unauthorized = |msg: &str, actor: &str| {
        tracing::warn!(request = %what, "API: {msg}");
        let mut r = error(StatusCode::UNAUTHORIZED, msg);
        r.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static("Bearer"));
        (r, actor.to_string())
    };
    let Some(token) = header.strip_prefix("Bearer ").map(str::trim) else {
        return Err(unauthorized(
            "this API needs a token: Authorization: Bearer TOKEN (the node's admin token is in DATA_DIR/api-token; \
             the CLI reads it with --token-file or STRATA_TOKEN_FILE; make others with strata token create)",
            "no token",
        ));
    };
    let rec = match tokens.check(token).await {
        Ok(Some(rec)) => rec,
        Ok(None) => {
            return Err(unauthorized("the token is not valid (unknown, revoked or mistyped)", "an invalid token"));
        }
        Err(e) => {
            let r = error(StatusCode::SERVICE_UNAVAILABLE, format!("cannot check the token: {e}"));
            return Err((r, "a token that could not be checked".into()));
        }
    };
    let actor = format!("token {} ({})", rec.id, rec.name);
    if req.method() != Method::GET && rec.role != Role::Admin {
        tracing::warn!(request = %what, token = %rec.id, "API: a reader token asked to change something");
        let r = error(
            StatusCode::FORBIDDEN,
            format!("token {} ({}) may only read: {what} needs an admin token", rec.id, rec.name),
        );
        return Err((r, actor));
    }
    Ok((header.to_string(), rec.role, actor))
}

/// The body of `POST /api/v1/tokens`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenBody {
    name: String,
    role: Role,
}

/// `/api/v1/tokens`: admin only (`role`, as [`authorize`] found it),
/// whatever the method.
async fn token_route(tokens: &Tokens, req: Request<Incoming>, role: Role) -> Response<Full<Bytes>> {
    if role != Role::Admin {
        return error(StatusCode::FORBIDDEN, "managing tokens needs an admin token");
    }
    let path = req.uri().path().trim_end_matches('/').to_string();
    let id = path.strip_prefix("/api/v1/tokens").unwrap_or("").trim_start_matches('/').to_string();
    let failed = |e: TokenError| match e {
        TokenError::NotFound(_) => error(StatusCode::NOT_FOUND, e),
        TokenError::BadName(_) => error(StatusCode::BAD_REQUEST, e),
        e => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    match (req.method().clone(), id.is_empty()) {
        (Method::GET, true) => match tokens.list().await {
            Ok(list) => reply(StatusCode::OK, list),
            Err(e) => failed(e),
        },
        (Method::POST, true) => {
            let body: TokenBody = match body_json(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            match tokens.create(&body.name, body.role).await {
                Ok((rec, token)) => {
                    let mut v = json!(rec);
                    v["token"] = json!(token);
                    reply(StatusCode::CREATED, v)
                }
                Err(e) => failed(e),
            }
        }
        (Method::DELETE, false) => match tokens.revoke(&id).await {
            Ok(rec) => reply(StatusCode::OK, rec),
            Err(e) => failed(e),
        },
        (m, _) => error(StatusCode::METHOD_NOT_ALLOWED, format!("{m} is not supported on {path}")),
    }
}

/// The body of `POST /api/v1/hosts`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewHost {
    nqn: String,
    #[serde(default)]
    dhchap_secret: Option<String>,
    #[serde(default)]
    dhchap_ctrl_secret: Option<String>,
    #[serde(default)]
    dhchap_hash: Option<String>,
    #[serde(default)]
    dhchap_dhgroup: Option<String>,
    #[serde(default)]
    tls_psk: Option<String>,
}

/// `/api/v1/hosts[/NQN]`: the hosts and their keys (never shown back).
async fn host_route(hosts: &Hosts, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let nqn = path.strip_prefix("/api/v1/hosts").unwrap_or("").trim_start_matches('/').to_string();
    let failed = |e: HostsError| match e {
        HostsError::NotFound(_) => error(StatusCode::NOT_FOUND, e),
        HostsError::Exists(_) => error(StatusCode::CONFLICT, e),
        HostsError::BadNqn { .. } | HostsError::BadValue { .. } => error(StatusCode::BAD_REQUEST, e),
        e => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    match (req.method().clone(), nqn.is_empty()) {
        (Method::GET, true) => match hosts.list().await {
            Ok(list) => reply(StatusCode::OK, list),
            Err(e) => failed(e),
        },
        (Method::POST, true) => {
            let body: NewHost = match body_json(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let spec = HostSpec {
                dhchap_secret: body.dhchap_secret,
                dhchap_ctrl_secret: body.dhchap_ctrl_secret,
                dhchap_hash: body.dhchap_hash,
                dhchap_dhgroup: body.dhchap_dhgroup,
                tls_psk: body.tls_psk,
            };
            match hosts.add(&body.nqn, &spec).await {
                Ok(v) => reply(StatusCode::CREATED, v),
                Err(e) => failed(e),
            }
        }
        (Method::PATCH, false) => {
            let spec: HostSpec = match body_json(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            match hosts.set(&nqn, &spec).await {
                Ok(v) => reply(StatusCode::OK, v),
                Err(e) => failed(e),
            }
        }
        (Method::DELETE, false) => match hosts.remove(&nqn).await {
            Ok(v) => reply(StatusCode::OK, v),
            Err(e) => failed(e),
        },
        (m, _) => error(StatusCode::METHOD_NOT_ALLOWED, format!("{m} is not supported on {path}")),
    }
}

/// What answers the API: a single-machine node (`strata serve`) or a node
/// of a cluster (`strata node`). One route table serves both; a route
/// that the other kind has answers 405 here.
#[derive(Clone)]
pub enum Backend {
    /// `strata serve`.
    Serve(Arc<Node>),
    /// `strata node`.
    Cluster(Arc<ClusterNode>),
}

/// Binds `addr` and answers every request with `handler`, each on a task
/// of its own: a client that hangs up does not cancel an operation half
/// way.
///
/// # Errors
///
/// When the address cannot be bound.
pub async fn serve_http<H, F>(
    addr: SocketAddr,
    tls: Option<openssl::ssl::SslAcceptor>,
    handler: H,
) -> anyhow::Result<SocketAddr>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<ApiBody>> + Send + 'static,
{
    let listener =
        TcpListener::bind(addr).await.map_err(|e| anyhow::anyhow!("cannot listen on {addr} for the HTTP API: {e}"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("HTTP accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let handler = handler.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    None => serve_connection(stream, handler).await,
                    Some(acceptor) => match tls_accept(&acceptor, stream).await {
                        Ok(s) => serve_connection(s, handler).await,
                        Err(e) => tracing::debug!("HTTPS handshake failed: {e}"),
                    },
                }
            });
        }
    });
    Ok(bound)
}

/// Serves HTTP/1.1 requests on one connection, plain or TLS.
async fn serve_connection<I, H, F>(io: I, handler: H)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<ApiBody>> + Send + 'static,
{
    let svc = service_fn(move |req| {
        let op = tokio::spawn(handler(req));
        async move {
            Ok::<_, Infallible>(op.await.unwrap_or_else(|e| {
                error(StatusCode::INTERNAL_SERVER_ERROR, format!("the request failed: {e}")).map(ApiBody::from)
            }))
        }
    });
    if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(io), svc).await {
        tracing::debug!("HTTP connection error: {e}");
    }
}

/// The server's TLS handshake, within 10 s.
async fn tls_accept(
    acceptor: &openssl::ssl::SslAcceptor,
    tcp: tokio::net::TcpStream,
) -> anyhow::Result<tokio_openssl::SslStream<tokio::net::TcpStream>> {
    let ssl = openssl::ssl::Ssl::new(acceptor.context())?;
    let mut s = tokio_openssl::SslStream::new(ssl, tcp)?;
    tokio::time::timeout(Duration::from_secs(10), std::pin::Pin::new(&mut s).accept())
        .await
        .map_err(|_| anyhow::anyhow!("timed out"))??;
    Ok(s)
}

pub(crate) fn reply(status: StatusCode, body: impl serde::Serialize) -> Response<Full<Bytes>> {
    let mut text = serde_json::to_vec_pretty(&body).unwrap_or_default();
    text.push(b'\n');
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(text)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

pub(crate) fn error(status: StatusCode, msg: impl std::fmt::Display) -> Response<Full<Bytes>> {
    reply(status, json!({ "error": msg.to_string() }))
}

fn node_error(e: NodeError) -> Response<Full<Bytes>> {
    let status = match &e {
        NodeError::Invalid(_) => StatusCode::BAD_REQUEST,
        NodeError::NotFound(_) => StatusCode::NOT_FOUND,
        NodeError::Conflict(_) => StatusCode::CONFLICT,
        NodeError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, e)
}

/// A size given as a number of bytes or a string such as "8G".
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    fn bytes(&self) -> Result<u64, NodeError> {
        match self {
            Size::Bytes(b) => Ok(*b),
            Size::Text(t) => strata_meta::parse_size(t).map_err(|e| NodeError::Invalid(format!("size {t:?}: {e}"))),
        }
    }
}

/// The body of a volume creation, on a single node or a cluster.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    size: Size,
    block_size: Option<u32>,
    nqn: Option<String>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    /// On a cluster, an empty `allowed_hosts` must be asked for with this.
    #[serde(default)]
    allow_any_host: bool,
    /// `rep:N`; absent means one copy.
    protect: Option<String>,
}

impl CreateBody {
    /// The request and its protection.
    fn into_request(self) -> Result<(NewVolume, Option<String>), NodeError> {
        let mut nv = NewVolume::new(self.name, self.size.bytes()?);
        if let Some(bs) = self.block_size {
            nv.block_size = bs;
        }
        nv.nqn = self.nqn;
        nv.allowed_hosts = self.allowed_hosts;
        Ok((nv, self.protect))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResizeBody {
    size: Size,
    #[serde(default)]
    allow_shrink: bool,
}

async fn body_json<T: serde::de::DeserializeOwned>(req: Request<Incoming>) -> Result<T, Response<Full<Bytes>>> {
    let bytes = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Err(error(StatusCode::BAD_REQUEST, format!("cannot read the request body: {e}"))),
    };
    serde_json::from_slice(&bytes).map_err(|e| error(StatusCode::BAD_REQUEST, format!("invalid JSON body: {e}")))
}

async fn handle(backend: &Backend, req: Request<Incoming>, auth: String) -> Response<Full<Bytes>> {
    use Backend::{Cluster, Serve};
    let path = req.uri().path().trim_end_matches('/').to_string();
    let method = req.method().clone();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let answer = |r: Result<Value, NodeError>, ok: StatusCode| match r {
        Ok(v) => reply(ok, v),
        Err(e) => node_error(e),
    };
    match (&method, segments.as_slice(), backend) {
        // Both kinds.
        (&Method::GET, ["api", "v1", "volumes"], Serve(node)) => {
            answer(node.list_volumes().await.map(|v| json!(v)), StatusCode::OK)
        }
        (&Method::GET, ["api", "v1", "volumes"], Cluster(c)) => match c.status().await {
            Ok(v) => reply(StatusCode::OK, v.volumes),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
        },
        (&Method::POST, ["api", "v1", "volumes"], _) => {
            let body: CreateBody = match body_json(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            answer(create_volume(backend, body).await, StatusCode::CREATED)
        }
        (&Method::GET, ["api", "v1", "volumes", name], Serve(node)) => {
            answer(node.get_volume(name).await.map(|v| json!(v)), StatusCode::OK)
        }
        (&Method::GET, ["api", "v1", "volumes", name], Cluster(c)) => {
            answer(c.volume(name).await.map(|v| json!(v)), StatusCode::OK)
        }
        (&Method::DELETE, ["api", "v1", "volumes", name], Serve(node)) => {
            answer(node.delete_volume(name).await.map(|v| json!(v)), StatusCode::OK)
        }
        (&Method::DELETE, ["api", "v1", "volumes", name], Cluster(c)) => {
            answer(c.delete_volume(name).await, StatusCode::OK)
        }
        (&Method::PATCH, ["api", "v1", "volumes", name], Serve(node)) => {
            let name = name.to_string();
            let body: ResizeBody = match body_json(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let size = match body.size.bytes() {
                Ok(s) => s,
                Err(e) => return node_error(e),
            };
            answer(node.resize_volume(&name, size, body.allow_shrink).await.map(|v| json!(v)), StatusCode::OK)
        }
        (&Method::PATCH, ["api", "v1", "volumes", _], Cluster(_)) => error(
            StatusCode::CONFLICT,
            "resizing a pool volume is not supported yet: create a new volume and copy, or use strata serve",
        ),
        (_, ["api", "v1", "volumes", name, "check"], Serve(node)) => match node.get_volume(name).await {
            Ok(_) => error(
                StatusCode::CONFLICT,
                format!(
                    "{name} is a volume of strata serve: one copy on one machine, with nothing to compare it with; \
                     strata volume check compares the copies or shards of a pool volume (strata node)"
                ),
            ),
            Err(e) => node_error(e),
        },
        (&Method::POST, ["api", "v1", "volumes", name, "check"], Cluster(c)) => {
            let body: CheckBody = match body_json(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            match c.start_check(name, body.repair).await {
                Ok(Answer::Here(v)) => reply(StatusCode::ACCEPTED, v),
                Ok(Answer::Owner(at)) => {
                    forwarded(at, "POST", &path, Some(&json!({"repair": body.repair})), &auth).await
                }
                Err(e) => node_error(e),
            }
        }
        (&Method::GET, ["api", "v1", "volumes", name, "check"], Cluster(c)) => match c.check_status(name).await {
            Ok(Answer::Here(v)) => reply(StatusCode::OK, v),
            Ok(Answer::Owner(at)) => forwarded(at, "GET", &path, None, &auth).await,
            Err(e) => node_error(e),
        },
        (&Method::GET, ["api", "v1", "stats", "io"], Serve(node)) => {
            reply(StatusCode::OK, crate::io_stats::snapshot(node.target()))
        }
        (&Method::GET, ["api", "v1", "stats", "io"], Cluster(c)) => {
            reply(StatusCode::OK, crate::io_stats::snapshot(c.target()))
        }
        // A single node.
        (&Method::GET, ["api", "v1", "status"], Serve(node)) => reply(StatusCode::OK, status(node)),
        (&Method::GET, ["metrics"], Serve(node)) => metrics(node).await,
        (&Method::GET, ["metrics"], Cluster(c)) => {
            let out = crate::metrics::cluster_exposition(c, target_stats(c.target())).await;
            metrics_reply(out)
        }
        // A cluster.
        (&Method::GET, ["api", "v1", "pool"], Cluster(c)) => match c.status().await {
            Ok(v) => reply(StatusCode::OK, v),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
        },
        (&Method::GET, ["api", "v1", "pool", "settings"], Cluster(c)) => answer(c.settings().await, StatusCode::OK),
        (&Method::PATCH, ["api", "v1", "pool", "settings"], Cluster(c)) => {
            let patch: SettingsPatch = match body_json(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            answer(c.update_settings(patch).await, StatusCode::OK)
        }
        (&Method::POST, ["api", "v1", "nodes", name, "drain"], Cluster(c)) => {
            answer(c.drain_node(name).await, StatusCode::OK)
        }
        (&Method::POST, ["api", "v1", "nodes", name, "undrain"], Cluster(c)) => {
            answer(c.undrain_node(name).await, StatusCode::OK)
        }
        (&Method::DELETE, ["api", "v1", "nodes", name], Cluster(c)) => {
            answer(c.remove_node(name).await, StatusCode::OK)
        }
        (_, ["api", "v1", ..], _) | (_, ["metrics"], _) => {
            error(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not supported on {path}"))
        }
        (_, _, Serve(_)) => {
            error(StatusCode::NOT_FOUND, format!("no such endpoint {path}; see /api/v1/status and /api/v1/volumes"))
        }
        (_, _, Cluster(_)) => {
            error(StatusCode::NOT_FOUND, format!("no such endpoint {path}; see /api/v1/pool and /api/v1/volumes"))
        }
    }
}

/// Creates the volume `body` asks for: one copy on a single node, any
/// protection in a cluster (one copy when none is given).
async fn create_volume(backend: &Backend, body: CreateBody) -> Result<Value, NodeError> {
    let any_host = body.allow_any_host;
    if any_host && !body.allowed_hosts.is_empty() {
        return Err(NodeError::Invalid("allow_any_host and allowed_hosts contradict each other: give one".into()));
    }
    // A pool serves many tenants: a volume every host on the network may
    // open is asked for, not fallen into. (strata serve, one machine, keeps
    // the no-setup default.)
    if matches!(backend, Backend::Cluster(_)) && body.allowed_hosts.is_empty() && !any_host {
        return Err(NodeError::Invalid(
            "a pool volume needs the hosts that may connect to it: --allow-host NQN (repeatable; the host's \
             /etc/nvme/hostnqn), or --allow-any-host to let every host that reaches the pool in"
                .into(),
        ));
    }
    let (nv, protect) = body.into_request()?;
    match backend {
        Backend::Serve(node) => match protect {
            Some(p) if p != "rep:1" => Err(NodeError::Invalid(format!(
                "protection {p}: strata serve keeps one copy on one machine; run a cluster (strata node) for more"
            ))),
            _ => node.create_volume(nv).await.map(|v| json!(v)),
        },
        Backend::Cluster(c) => c.create_volume(nv, protect.as_deref().unwrap_or("rep:1")).await,
    }
}

/// The body of `POST /api/v1/volumes/NAME/check`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody {
    /// Make what differs agree again.
    #[serde(default)]
    repair: bool,
}

/// The answer of the volume owner's API at `at` to the same request, as
/// it gave it.
async fn forwarded(
    at: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
    auth: &str,
) -> Response<Full<Bytes>> {
    let base = format!("{}://{at}", crate::client::forward_scheme());
    match crate::client::forward(&base, method, path, body, auth, Duration::from_secs(10)).await {
        Ok((status, v)) => reply(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY), v),
        Err(e) => error(StatusCode::BAD_GATEWAY, format!("the volume's owner (API {at}) did not answer: {e:#}")),
    }
}

fn status(node: &Node) -> Value {
    let stats = node.store().stats();
    let drives: Vec<Value> = stats
        .drives
        .iter()
        .map(|d| {
            json!({
                "path": d.path, "kind": d.kind, "engine": d.engine, "capacity_bytes": d.capacity_bytes,
                "extents_total": d.extents_total, "extents_allocated": d.extents_allocated,
                "extents_free": d.extents_free, "volatile": d.volatile, "failed": d.failed,
            })
        })
        .collect();
    let ports: Vec<Value> = node
        .target()
        .ports()
        .iter()
        .map(
            |p| json!({"portid": p.portid, "addr": p.addr.to_string(), "role": format!("{:?}", p.role).to_lowercase()}),
        )
        .collect();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "ports": ports,
        "extent_size": stats.extent_size,
        "capacity_bytes": stats.capacity_bytes,
        "allocated_bytes": stats.extents_allocated * u64::from(stats.extent_size),
        "volatile": stats.volatile,
        "drives": drives,
        "subsystems": node.target().subsystems().len(),
        "controllers": node.target().controller_count(),
        "target": target_stats(node.target()).into_iter().map(|(k, v, _, _)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
    })
}

/// The target's counters: name, value, whether it is a counter (else a
/// gauge), and its help text.
fn target_stats(target: &strata_target::Target) -> Vec<(&'static str, u64, bool, &'static str)> {
    let t = target.stats();
    let buffers = target.buffer_bytes_in_use() as u64;
    vec![
        ("connections", t.connections_now, false, "NVMe/TCP connections open."),
        ("pending_connections", t.pending_now, false, "Connections that have not completed Connect."),
        ("buffer_bytes_in_use", buffers, false, "Bytes of command data buffers held (io_buffer_budget)."),
        ("connections_accepted", t.connections_accepted, true, "Connections accepted."),
        ("connections_refused", t.connections_refused, true, "Connections refused at max_connections."),
        ("pending_evicted", t.pending_evicted, true, "Pending connections closed to make room."),
        ("handshake_timeouts", t.handshake_timeouts, true, "Connections without ICReq and Connect in time."),
        ("tls_failures", t.tls_failures, true, "Connections whose TLS handshake failed or timed out."),
        ("r2t_timeouts", t.r2t_timeouts, true, "Connections whose R2T data did not come in time."),
        ("send_timeouts", t.send_timeouts, true, "Connections closed because the host stopped reading."),
        ("keep_alive_expiries", t.keep_alive_expiries, true, "Controllers torn down by keep-alive."),
        ("commands_abandoned", t.commands_abandoned, true, "Commands of closed connections abandoned at drain."),
        ("panics", t.panics, true, "Panics caught in connections and commands."),
    ]
}

async fn metrics(node: &Node) -> Response<Full<Bytes>> {
    metrics_reply(crate::metrics::exposition(node, target_stats(node.target())).await)
}

fn metrics_reply(out: String) -> Response<Full<Bytes>> {
    Response::builder()
        .header("content-type", crate::metrics::CONTENT_TYPE)
        .body(Full::new(Bytes::from(out)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_routable_api_address_needs_tls_or_the_flag() {
        let any: SocketAddr = "0.0.0.0:7420".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:7420".parse().unwrap();
        assert!(check_exposure(lo, false, false).is_ok());
        let e = check_exposure(any, false, false).unwrap_err().to_string();
        assert!(e.contains("--http-tls-cert") && e.contains("--allow-remote-api"), "{e}");
        assert!(check_exposure(any, true, false).is_ok());
        assert!(check_exposure(any, false, true).is_ok());
    }
}
