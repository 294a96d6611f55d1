//! The JSON HTTP API (default 127.0.0.1:7420).
//!
//! | method | path                      | body / answer                              |
//! |--------|---------------------------|--------------------------------------------|
//! | GET    | /api/v1/status            | version, listeners, drives, capacity       |
//! | GET    | /api/v1/volumes           | list of volumes                            |
//! | POST   | /api/v1/volumes           | `{"name","size","block_size"?,"nqn"?,"allowed_hosts"?}` -> 201 |
//! | GET    | /api/v1/volumes/NAME      | one volume                                 |
//! | PATCH  | /api/v1/volumes/NAME      | `{"size","allow_shrink"?}`                 |
//! | DELETE | /api/v1/volumes/NAME      | the deleted volume                         |
//! | GET    | /metrics                  | Prometheus text                            |
//!
//! Sizes are bytes (a number) or strings such as "8G". Errors are
//! `{"error": "..."}` with 400, 404, 409 or 500.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

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

use strata_node::node::{Node, NodeError};

const MAX_BODY: usize = 64 * 1024;

/// Binds the API address and serves it until the process ends.
///
/// # Errors
///
/// When the address cannot be bound.
pub async fn serve(node: Arc<Node>, addr: SocketAddr) -> anyhow::Result<SocketAddr> {
    serve_http(addr, move |req| {
        let node = node.clone();
        async move { handle(&node, req).await }
    })
    .await
}

/// Binds `addr` and answers every request with `handler`, each on a task
/// of its own: a client that hangs up does not cancel an operation half
/// way.
///
/// # Errors
///
/// When the address cannot be bound.
pub async fn serve_http<H, F>(addr: SocketAddr, handler: H) -> anyhow::Result<SocketAddr>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<Full<Bytes>>> + Send + 'static,
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
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let op = tokio::spawn(handler(req));
                    async move {
                        Ok::<_, Infallible>(op.await.unwrap_or_else(|e| {
                            error(StatusCode::INTERNAL_SERVER_ERROR, format!("the request failed: {e}"))
                        }))
                    }
                });
                if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await {
                    tracing::debug!("HTTP connection error: {e}");
                }
            });
        }
    });
    Ok(bound)
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

pub(crate) fn node_error(e: NodeError) -> Response<Full<Bytes>> {
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
pub(crate) enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    pub(crate) fn bytes(&self) -> Result<u64, NodeError> {
        match self {
            Size::Bytes(b) => Ok(*b),
            Size::Text(t) => strata_meta::parse_size(t).map_err(|e| NodeError::Invalid(format!("size {t:?}: {e}"))),
        }
    }
}

/// The body of a volume creation, on a single node or a cluster.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    name: String,
    size: Size,
    block_size: Option<u32>,
    nqn: Option<String>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    /// `rep:N`; absent means one copy.
    protect: Option<String>,
}

impl CreateBody {
    /// The request and its protection.
    pub(crate) fn into_request(self) -> Result<(NewVolume, Option<String>), NodeError> {
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

pub(crate) async fn body_json<T: serde::de::DeserializeOwned>(
    req: Request<Incoming>,
) -> Result<T, Response<Full<Bytes>>> {
    let bytes = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Err(error(StatusCode::BAD_REQUEST, format!("cannot read the request body: {e}"))),
    };
    serde_json::from_slice(&bytes).map_err(|e| error(StatusCode::BAD_REQUEST, format!("invalid JSON body: {e}")))
}

async fn handle(node: &Node, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let method = req.method().clone();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match (&method, segments.as_slice()) {
        (&Method::GET, ["api", "v1", "status"]) => reply(StatusCode::OK, status(node)),
        (&Method::GET, ["metrics"]) => metrics(node).await,
        (&Method::GET, ["api", "v1", "volumes"]) => match node.list_volumes().await {
            Ok(v) => reply(StatusCode::OK, json!(v)),
            Err(e) => node_error(e),
        },
        (&Method::POST, ["api", "v1", "volumes"]) => {
            let body: CreateBody = match body_json(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let nv = match body.into_request() {
                Ok((nv, None)) => nv,
                Ok((nv, Some(p))) if p == "rep:1" => nv,
                Ok((_, Some(p))) => {
                    return node_error(NodeError::Invalid(format!(
                        "protection {p}: strata serve keeps one copy on one machine; run a cluster (strata node) for more"
                    )));
                }
                Err(e) => return node_error(e),
            };
            match node.create_volume(nv).await {
                Ok(v) => reply(StatusCode::CREATED, json!(v)),
                Err(e) => node_error(e),
            }
        }
        (_, ["api", "v1", "volumes", name, "check"]) => match node.get_volume(name).await {
            Ok(_) => error(
                StatusCode::CONFLICT,
                format!(
                    "{name} is a volume of strata serve: one copy on one machine, with nothing to compare it with; \
                     strata volume check compares the copies or shards of a pool volume (strata node)"
                ),
            ),
            Err(e) => node_error(e),
        },
        (&Method::GET, ["api", "v1", "volumes", name]) => match node.get_volume(name).await {
            Ok(v) => reply(StatusCode::OK, json!(v)),
            Err(e) => node_error(e),
        },
        (&Method::PATCH, ["api", "v1", "volumes", name]) => {
            let name = name.to_string();
            let body: ResizeBody = match body_json(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let size = match body.size.bytes() {
                Ok(s) => s,
                Err(e) => return node_error(e),
            };
            match node.resize_volume(&name, size, body.allow_shrink).await {
                Ok(v) => reply(StatusCode::OK, json!(v)),
                Err(e) => node_error(e),
            }
        }
        (&Method::DELETE, ["api", "v1", "volumes", name]) => match node.delete_volume(name).await {
            Ok(v) => reply(StatusCode::OK, json!(v)),
            Err(e) => node_error(e),
        },
        (_, ["api", "v1", ..]) | (_, ["metrics"]) => {
            error(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not supported on {path}"))
        }
        _ => error(StatusCode::NOT_FOUND, format!("no such endpoint {path}; see /api/v1/status and /api/v1/volumes")),
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
        "target": target_stats(node).into_iter().map(|(k, v, _, _)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
    })
}

/// The target's counters: name, value, whether it is a counter (else a
/// gauge), and its help text.
fn target_stats(node: &Node) -> Vec<(&'static str, u64, bool, &'static str)> {
    let t = node.target().stats();
    let buffers = node.target().buffer_bytes_in_use() as u64;
    vec![
        ("connections", t.connections_now, false, "NVMe/TCP connections open."),
        ("pending_connections", t.pending_now, false, "Connections that have not completed Connect."),
        ("buffer_bytes_in_use", buffers, false, "Bytes of command data buffers held (io_buffer_budget)."),
        ("connections_accepted", t.connections_accepted, true, "Connections accepted."),
        ("connections_refused", t.connections_refused, true, "Connections refused at max_connections."),
        ("pending_evicted", t.pending_evicted, true, "Pending connections closed to make room."),
        ("handshake_timeouts", t.handshake_timeouts, true, "Connections without ICReq and Connect in time."),
        ("r2t_timeouts", t.r2t_timeouts, true, "Connections whose R2T data did not come in time."),
        ("send_timeouts", t.send_timeouts, true, "Connections closed because the host stopped reading."),
        ("keep_alive_expiries", t.keep_alive_expiries, true, "Controllers torn down by keep-alive."),
        ("commands_abandoned", t.commands_abandoned, true, "Commands of closed connections abandoned at drain."),
        ("panics", t.panics, true, "Panics caught in connections and commands."),
    ]
}

async fn metrics(node: &Node) -> Response<Full<Bytes>> {
    use std::fmt::Write;
    let stats = node.store().stats();
    let mut out = String::new();
    let _ = writeln!(out, "# HELP strata_drive_capacity_bytes Bytes of drive space usable for extents.");
    let _ = writeln!(out, "# TYPE strata_drive_capacity_bytes gauge");
    for d in &stats.drives {
        let _ = writeln!(out, "strata_drive_capacity_bytes{{drive=\"{}\"}} {}", d.path, d.capacity_bytes);
    }
    let _ = writeln!(out, "# HELP strata_drive_allocated_bytes Bytes of drive space allocated to volumes.");
    let _ = writeln!(out, "# TYPE strata_drive_allocated_bytes gauge");
    for d in &stats.drives {
        let _ = writeln!(
            out,
            "strata_drive_allocated_bytes{{drive=\"{}\"}} {}",
            d.path,
            d.extents_allocated * u64::from(stats.extent_size)
        );
    }
    if let Ok(vols) = node.list_volumes().await {
        let _ = writeln!(out, "# HELP strata_volume_size_bytes Provisioned size of a volume.");
        let _ = writeln!(out, "# TYPE strata_volume_size_bytes gauge");
        for v in &vols {
            let _ = writeln!(out, "strata_volume_size_bytes{{volume=\"{}\"}} {}", v.name, v.size_bytes);
        }
        let _ = writeln!(out, "# HELP strata_volume_allocated_bytes Backing bytes allocated to a volume.");
        let _ = writeln!(out, "# TYPE strata_volume_allocated_bytes gauge");
        for v in &vols {
            let _ = writeln!(out, "strata_volume_allocated_bytes{{volume=\"{}\"}} {}", v.name, v.allocated_bytes);
        }
    }
    let _ = writeln!(out, "# HELP strata_controllers Live NVMe controllers.");
    let _ = writeln!(out, "# TYPE strata_controllers gauge");
    let _ = writeln!(out, "strata_controllers {}", node.target().controller_count());
    for (name, value, counter, help) in target_stats(node) {
        let kind = if counter { "counter" } else { "gauge" };
        let _ = writeln!(out, "# HELP strata_target_{name} {help}");
        let _ = writeln!(out, "# TYPE strata_target_{name} {kind}");
        let _ = writeln!(out, "strata_target_{name} {value}");
    }
    Response::builder()
        .header("content-type", "text/plain; version=0.0.4")
        .body(Full::new(Bytes::from(out)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}
