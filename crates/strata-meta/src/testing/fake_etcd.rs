//! [`FakeEtcd`]: an in-process etcd v3 JSON gateway for tests, so that
//! [`EtcdClient`] runs unmodified against it (see `crate::etcd::wire` for
//! the format). The semantics live in [`super::fake_mvcc`]; this module
//! owns the HTTP side, the clock and the fault controls.
//!
//! # What it serves
//!
//! `POST` to `/v3/kv/range`, `/v3/kv/put`, `/v3/kv/deleterange`,
//! `/v3/kv/txn`, `/v3/kv/compaction`, `/v3/lease/grant`,
//! `/v3/lease/keepalive` (one streamed answer, then the body ends),
//! `/v3/lease/revoke`, `/v3/lease/timetolive` and `/v3/watch` (streamed:
//! `created`, then events, or `compact_revision` and the end). Request
//! fields the client never sends (`limit`, `revision`, `count_only`,
//! `keys_only`, `prev_kv`, filters, watch cancel/progress) are ignored.
//! Refusals answer HTTP 400/404 with `{"error","message","code"}`.
//!
//! # Time
//!
//! Lease deadlines use [`tokio::time::Instant`], and expiry is checked
//! every 100 ms by a tokio task: with `tokio::time::pause` the test drives
//! the clock.
//!
//! # Faults
//!
//! - [`pause`](FakeEtcd::pause) / [`resume`](FakeEtcd::resume) (alias
//!   `freeze`/`thaw`), like SIGSTOP/SIGCONT: connections are accepted but
//!   no request is answered, no watch event sent and no lease expired.
//!   Lease deadlines keep running, as etcd's monotonic clock does while it
//!   is stopped: on resume, leases whose TTL passed expire at the next
//!   check (etcd's lessor does the same; only a leader change extends
//!   them). A request that arrived while paused is applied at resume,
//!   even if its client gave up (as with a real SIGSTOP).
//! - [`kill`](FakeEtcd::kill) / [`start`](FakeEtcd::start), like SIGKILL
//!   and a restart on the same data dir: connections are refused, open
//!   ones (watches) are cut, data and revisions are kept. At start every
//!   lease gets its full TTL again from then, as etcd's lessor does when
//!   the restarted member becomes leader (etcd adds an election timeout
//!   on top; the fake does not).
//!
//! `crate::etcd::tests` checks both fault claims against a real etcd
//! (`leases_survive_a_restart_…`, `a_lease_that_ran_out_while_etcd_was_paused_…`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::fake_mvcc::{Cmp, Compare, Event, Kv, Mvcc, Op, OpResult, Range, Refusal, Target};
use crate::etcd::{Endpoint, EtcdClient, EtcdConfig, base64};

/// How often leases are checked for expiry.
const EXPIRY_TICK: Duration = Duration::from_millis(100);

/// A wrong request body: the gateway's InvalidArgument.
const BAD_REQUEST: Refusal = Refusal { code: 3, message: "etcdserver: bad request body" };

type Reply = Response<BoxBody<Bytes, Infallible>>;

/// State shared by the server's tasks and the handle.
#[derive(Debug)]
struct Shared {
    mvcc: Mutex<Mvcc>,
    /// The revision after the last change (watches wait on it).
    revision: watch::Sender<i64>,
    /// Whether the server is paused.
    paused: watch::Sender<bool>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Mvcc> {
        self.mvcc.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits while paused.
    async fn running(&self) {
        let mut rx = self.paused.subscribe();
        // The sender lives as long as `self`.
        let _ = rx.wait_for(|paused| !paused).await;
    }

    /// Publishes the revision after a change.
    fn changed(&self, mvcc: &Mvcc) {
        self.revision.send_replace(mvcc.revision());
    }
}

/// An etcd JSON gateway inside the test process. See the module docs.
///
/// Must be created and used within a tokio runtime; dropping it stops the
/// server.
#[derive(Debug)]
pub struct FakeEtcd {
    shared: Arc<Shared>,
    addr: SocketAddr,
    /// The accept loop (its connections die with it) and a handle on its
    /// listening socket, while running.
    server: Option<(JoinHandle<()>, socket2::Socket)>,
    expiry: JoinHandle<()>,
}

impl FakeEtcd {
    /// Starts a fake etcd on a free loopback port.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, or if no loopback port can be bound.
    pub fn start() -> Self {
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0)));
        let addr = listener.local_addr().expect("a bound socket has an address");
        let shared = Arc::new(Shared {
            mvcc: Mutex::new(Mvcc::default()),
            revision: watch::Sender::new(1),
            paused: watch::Sender::new(false),
        });
        let expiry = tokio::spawn(expire_leases(Arc::clone(&shared)));
        let server = Some(spawn_server(listener, Arc::clone(&shared)));
        FakeEtcd { shared, addr, server, expiry }
    }

    /// The client URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The client endpoint.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint::parse(&self.url()).expect("a loopback URL parses")
    }

    /// A configuration for this server with the default timeouts.
    pub fn config(&self) -> EtcdConfig {
        EtcdConfig::new(vec![self.endpoint()]).expect("one endpoint is enough")
    }

    /// A client of this server with the default timeouts.
    pub fn client(&self) -> EtcdClient {
        EtcdClient::new(self.config())
    }

    /// Stops serving, as SIGKILL: connections are refused and open ones
    /// cut. The data stays.
    pub fn kill(&mut self) {
        if let Some((server, socket)) = self.server.take() {
            // Aborting closes the listener only when the task is next
            // polled; shutting it down refuses connections from now on.
            let _ = socket.shutdown(std::net::Shutdown::Both);
            server.abort();
        }
    }

    /// Serves again on the same port after [`kill`](Self::kill), with
    /// the data kept and every lease's TTL started afresh.
    ///
    /// # Panics
    ///
    /// If the port was taken meanwhile.
    pub fn restart(&mut self) {
        self.kill();
        let listener = bind(self.addr);
        {
            let mut mvcc = self.shared.lock();
            mvcc.refresh_leases(Instant::now());
        }
        self.server = Some(spawn_server(listener, Arc::clone(&self.shared)));
    }

    /// Alias of [`kill`](Self::kill).
    pub fn stop(&mut self) {
        self.kill();
    }

    /// Freezes the server (as SIGSTOP); see the module docs.
    pub fn pause(&self) {
        self.shared.paused.send_replace(true);
    }

    /// Undoes [`pause`](Self::pause).
    pub fn resume(&self) {
        self.shared.paused.send_replace(false);
    }

    /// Alias of [`pause`](Self::pause).
    pub fn freeze(&self) {
        self.pause();
    }

    /// Alias of [`resume`](Self::resume).
    pub fn thaw(&self) {
        self.resume();
    }

    /// The current revision.
    pub fn revision(&self) -> i64 {
        self.shared.lock().revision()
    }
}

impl Drop for FakeEtcd {
    fn drop(&mut self) {
        self.kill();
        self.expiry.abort();
    }
}

fn bind(addr: SocketAddr) -> tokio::net::TcpListener {
    let socket = tokio::net::TcpSocket::new_v4().expect("cannot create a socket");
    socket.set_reuseaddr(true).expect("cannot set SO_REUSEADDR");
    socket.bind(addr).unwrap_or_else(|e| panic!("cannot bind {addr}: {e}"));
    socket.listen(128).unwrap_or_else(|e| panic!("cannot listen on {addr}: {e}"))
}

fn spawn_server(listener: tokio::net::TcpListener, shared: Arc<Shared>) -> (JoinHandle<()>, socket2::Socket) {
    let socket = socket2::SockRef::from(&listener).try_clone().expect("cannot duplicate the listening socket");
    (tokio::spawn(serve(listener, shared)), socket)
}

async fn expire_leases(shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(EXPIRY_TICK).await;
        if *shared.paused.borrow() {
            continue;
        }
        let mut mvcc = shared.lock();
        if mvcc.expire(Instant::now()) {
            shared.changed(&mvcc);
        }
    }
}

/// Accepts connections until aborted; aborting drops (and so closes) them.
async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        // An error: the listener was shut down by `kill`.
        let Ok((tcp, _)) = listener.accept().await else { return };
        let shared = Arc::clone(&shared);
        conns.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(handle(shared, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), service).await;
        });
        // Reap finished connections.
        while conns.try_join_next().is_some() {}
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().to_owned();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return refusal(StatusCode::BAD_REQUEST, &BAD_REQUEST),
    };
    shared.running().await;
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return refusal(StatusCode::BAD_REQUEST, &BAD_REQUEST);
    };
    let now = Instant::now();
    let answer = match path.as_str() {
        "/v3/watch" => return watch_stream(shared, &body),
        "/v3/lease/keepalive" => {
            let id = int(&body, "ID");
            let ttl = shared.lock().keep_alive(id, now);
            let mut m = Map::new();
            m.insert("header".into(), header(shared.lock().revision()));
            m.insert("ID".into(), id.to_string().into());
            if let Some(ttl) = ttl {
                m.insert("TTL".into(), ttl.to_string().into());
            }
            return streamed_once(json!({ "result": Value::Object(m) }));
        }
        _ => unary(&shared, &path, &body, now),
    };
    match answer {
        Ok(v) => json_reply(StatusCode::OK, &v),
        Err(r) => {
            let status = if r.code == 5 { StatusCode::NOT_FOUND } else { StatusCode::BAD_REQUEST };
            refusal(status, &r)
        }
    }
}

fn unary(shared: &Shared, path: &str, body: &Value, now: Instant) -> Result<Value, Refusal> {
    let mut mvcc = shared.lock();
    let before = mvcc.revision();
    let answer = match path {
        "/v3/kv/range" => Ok(range_json(mvcc.revision(), &mvcc.range(&range_of(body)?))),
        "/v3/kv/put" => {
            let rev = mvcc.put(&bytes(body, "key")?, &bytes(body, "value")?, int(body, "lease"))?;
            Ok(json!({ "header": header(rev) }))
        }
        "/v3/kv/deleterange" => {
            let n = mvcc.delete(&range_of(body)?);
            Ok(with_count(json!({ "header": header(mvcc.revision()) }), "deleted", n))
        }
        "/v3/kv/txn" => txn(&mut mvcc, body),
        "/v3/kv/compaction" => {
            mvcc.compact(int(body, "revision")).map(|()| json!({ "header": header(mvcc.revision()) }))
        }
        "/v3/lease/grant" => {
            let (id, ttl) = mvcc.grant(int(body, "TTL"), now);
            Ok(json!({ "header": header(mvcc.revision()), "ID": id.to_string(), "TTL": ttl.to_string() }))
        }
        "/v3/lease/revoke" => mvcc.revoke(int(body, "ID")).map(|()| json!({ "header": header(mvcc.revision()) })),
        "/v3/lease/timetolive" => {
            let id = int(body, "ID");
            let (ttl, granted) = mvcc.time_to_live(id, now).unwrap_or((-1, 0));
            let mut v = json!({ "header": header(mvcc.revision()), "ID": id.to_string(), "TTL": ttl.to_string() });
            v = with_count(v, "grantedTTL", granted);
            Ok(v)
        }
        _ => Err(Refusal { code: 12, message: "Not Implemented" }),
    };
    if mvcc.revision() != before || path == "/v3/kv/compaction" {
        shared.changed(&mvcc);
    }
    answer
}

fn txn(mvcc: &mut Mvcc, body: &Value) -> Result<Value, Refusal> {
    let list = |name: &str| body.get(name).and_then(Value::as_array).cloned().unwrap_or_default();
    let compare = list("compare").iter().map(compare_of).collect::<Result<Vec<_>, _>>()?;
    let success = list("success").iter().map(op_of).collect::<Result<Vec<_>, _>>()?;
    let failure = list("failure").iter().map(op_of).collect::<Result<Vec<_>, _>>()?;
    let (ok, results) = mvcc.txn(&compare, &success, &failure)?;
    let rev = mvcc.revision();
    let responses: Vec<Value> = results
        .iter()
        .map(|r| match r {
            OpResult::Range(kvs) => json!({ "response_range": range_json(rev, kvs) }),
            OpResult::Put => json!({ "response_put": { "header": header(rev) } }),
            OpResult::Delete(n) => {
                json!({ "response_delete_range": with_count(json!({ "header": header(rev) }), "deleted", *n) })
            }
        })
        .collect();
    let mut v = json!({ "header": header(rev) });
    if ok {
        v["succeeded"] = true.into();
    }
    if !responses.is_empty() {
        v["responses"] = responses.into();
    }
    Ok(v)
}

fn compare_of(c: &Value) -> Result<Compare, Refusal> {
    let cmp = match c.get("result").and_then(Value::as_str).unwrap_or("EQUAL") {
        "EQUAL" => Cmp::Equal,
        "NOT_EQUAL" => Cmp::NotEqual,
        "GREATER" => Cmp::Greater,
        "LESS" => Cmp::Less,
        _ => return Err(BAD_REQUEST),
    };
    let target = match c.get("target").and_then(Value::as_str).unwrap_or("VERSION") {
        "VERSION" => Target::Version(int(c, "version")),
        "CREATE" => Target::Create(int(c, "create_revision")),
        "MOD" => Target::Mod(int(c, "mod_revision")),
        "VALUE" => Target::Value(bytes(c, "value")?),
        "LEASE" => Target::Lease(int(c, "lease")),
        _ => return Err(BAD_REQUEST),
    };
    Ok(Compare { range: range_of(c)?, cmp, target })
}

fn op_of(op: &Value) -> Result<Op, Refusal> {
    if let Some(r) = op.get("request_range") {
        Ok(Op::Range(range_of(r)?))
    } else if let Some(p) = op.get("request_put") {
        Ok(Op::Put { key: bytes(p, "key")?, value: bytes(p, "value")?, lease: int(p, "lease") })
    } else if let Some(d) = op.get("request_delete_range") {
        Ok(Op::Delete(range_of(d)?))
    } else {
        Err(BAD_REQUEST)
    }
}

// ---- JSON in and out ------------------------------------------------------

/// An `int64` field: a decimal string or a number; 0 when absent or bad.
fn int(v: &Value, name: &str) -> i64 {
    match v.get(name) {
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// A `bytes` field, decoded; empty when absent.
fn bytes(v: &Value, name: &str) -> Result<Vec<u8>, Refusal> {
    match v.get(name).and_then(Value::as_str) {
        Some(s) => base64::decode(s).map_err(|_| BAD_REQUEST),
        None => Ok(Vec::new()),
    }
}

fn range_of(v: &Value) -> Result<Range, Refusal> {
    Ok(Range { start: bytes(v, "key")?, end: bytes(v, "range_end")? })
}

fn header(revision: i64) -> Value {
    json!({ "cluster_id": "1", "member_id": "1", "revision": revision.to_string(), "raft_term": "2" })
}

/// Adds `name` as an int64 string unless it is 0 (the gateway leaves
/// defaults out).
fn with_count(mut v: Value, name: &str, n: i64) -> Value {
    if n != 0 {
        v[name] = n.to_string().into();
    }
    v
}

fn kv_json(kv: &Kv) -> Value {
    let mut m = Map::new();
    m.insert("key".into(), base64::encode(&kv.key).into());
    for (name, n) in [
        ("create_revision", kv.create_revision),
        ("mod_revision", kv.mod_revision),
        ("version", kv.version),
        ("lease", kv.lease),
    ] {
        if n != 0 {
            m.insert(name.into(), n.to_string().into());
        }
    }
    if !kv.value.is_empty() {
        m.insert("value".into(), base64::encode(&kv.value).into());
    }
    Value::Object(m)
}

fn range_json(revision: i64, kvs: &[Kv]) -> Value {
    let mut v = json!({ "header": header(revision) });
    if !kvs.is_empty() {
        v["kvs"] = kvs.iter().map(kv_json).collect::<Vec<_>>().into();
    }
    with_count(v, "count", i64::try_from(kvs.len()).unwrap_or(i64::MAX))
}

fn event_json(e: &Event) -> Value {
    match e {
        Event::Put(kv) => json!({ "kv": kv_json(kv) }),
        Event::Delete { key, revision } => json!({
            "type": "DELETE",
            "kv": { "key": base64::encode(key), "mod_revision": revision.to_string() },
        }),
    }
}

fn json_reply(status: StatusCode, v: &Value) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}

fn refusal(status: StatusCode, r: &Refusal) -> Reply {
    json_reply(status, &json!({ "error": r.message, "message": r.message, "code": r.code }))
}

// ---- streamed answers -----------------------------------------------------

/// A body fed message by message from a channel; it ends when the sender
/// is dropped. Sent with chunked transfer encoding.
struct ChannelBody(mpsc::UnboundedReceiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|m| m.map(|b| Ok(Frame::data(b))))
    }
}

fn message(v: &Value) -> Bytes {
    Bytes::from(format!("{v}\n"))
}

fn streamed(rx: mpsc::UnboundedReceiver<Bytes>) -> Reply {
    let mut r = Response::new(ChannelBody(rx).boxed());
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}

fn streamed_once(v: Value) -> Reply {
    let (tx, rx) = mpsc::unbounded_channel();
    let _ = tx.send(message(&v));
    streamed(rx)
}

fn watch_stream(shared: Arc<Shared>, body: &Value) -> Reply {
    let create = body.get("create_request").cloned().unwrap_or(Value::Null);
    let Ok(range) = range_of(&create) else {
        return refusal(StatusCode::BAD_REQUEST, &BAD_REQUEST);
    };
    let start = int(&create, "start_revision");
    let (tx, rx) = mpsc::unbounded_channel();
    let mut changes = shared.revision.subscribe();
    let current = {
        let mvcc = shared.lock();
        changes.mark_changed();
        mvcc.revision()
    };
    let _ = tx.send(message(&json!({ "result": { "header": header(current), "created": true } })));
    let mut next = if start > 0 { start } else { current + 1 };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tx.closed() => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
            shared.running().await;
            let (revision, found) = {
                let mvcc = shared.lock();
                (mvcc.revision(), mvcc.events_since(&range, next).map_err(|_| mvcc.compacted()))
            };
            match found {
                Err(compacted) => {
                    let v = json!({ "result": {
                        "header": header(revision), "canceled": true, "compact_revision": compacted.to_string(),
                    }});
                    let _ = tx.send(message(&v));
                    return;
                }
                Ok(events) if events.is_empty() => {}
                Ok(events) => {
                    next = events.last().map_or(next, |e| e.revision() + 1);
                    let v = json!({ "result": {
                        "header": header(revision), "events": events.iter().map(event_json).collect::<Vec<_>>(),
                    }});
                    if tx.send(message(&v)).is_err() {
                        return;
                    }
                }
            }
        }
    });
    streamed(rx)
}
