//! `GET /api/v1/events`: the node's recent events as JSON, or followed
//! live as server-sent events; and the response body that can be either
//! a whole JSON reply or such a stream ([`ApiBody`]).
//!
//! | request | answer |
//! |---|---|
//! | `GET /api/v1/events?since=SEQ&limit=N` | `{"events": [...], "missed": M, "last_seq": L}`: events numbered after SEQ (default 0), oldest first, at most N (default 1000) |
//! | `GET /api/v1/events?follow=1[&since=SEQ]`, or `Accept: text/event-stream` | `text/event-stream`: the events after SEQ (default: the newest so far, so only new ones; a browser's `Last-Event-ID` resumes), then each new event as it happens; a comment every 15 s keeps proxies from closing it; an `event: missed` when the follower fell behind the ring |

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use strata_events::{EventLog, to_sse};
use tokio::sync::mpsc;

/// How often an idle event stream sends a comment.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// An API response body: a whole reply, or a stream of chunks that ends
/// when its sender does.
pub enum ApiBody {
    /// A whole reply.
    Full(Full<Bytes>),
    /// Chunks as they come.
    Stream(mpsc::Receiver<Bytes>),
}

impl From<Full<Bytes>> for ApiBody {
    fn from(b: Full<Bytes>) -> ApiBody {
        ApiBody::Full(b)
    }
}

impl Body for ApiBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ApiBody::Full(b) => Pin::new(b).poll_frame(cx),
            ApiBody::Stream(rx) => rx.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ApiBody::Full(b) => b.is_end_stream(),
            ApiBody::Stream(_) => false,
        }
    }
}

/// A query parameter parsed, if present and well formed.
fn param<T: std::str::FromStr>(query: &str, name: &str) -> Option<T> {
    query.split('&').find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('='))).and_then(|v| v.parse().ok())
}

/// Serves `GET /api/v1/events`.
pub async fn events_route(events: &Arc<EventLog>, req: Request<Incoming>) -> Response<ApiBody> {
    if req.method() != Method::GET {
        return crate::api::error(StatusCode::METHOD_NOT_ALLOWED, "events are read only").map(ApiBody::from);
    }
    let query = req.uri().query().unwrap_or("");
    let wants_stream = param::<String>(query, "follow").is_some_and(|v| v != "0" && v != "false")
        || req
            .headers()
            .get(hyper::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/event-stream"));
    if !wants_stream {
        let since = param(query, "since").unwrap_or(0u64);
        let limit = param(query, "limit").unwrap_or(1000usize).min(100_000);
        return crate::api::reply(StatusCode::OK, events.since(since, limit)).map(ApiBody::from);
    }
    let resume = req.headers().get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    let since = param(query, "since").or(resume).unwrap_or_else(|| events.last_seq());
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(follow(events.clone(), since, tx));
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(ApiBody::Stream(rx))
        .unwrap_or_else(|_| Response::new(ApiBody::Full(Full::new(Bytes::new()))))
}

/// Sends the events after `cursor`, then each new one, until the client
/// goes (its receiver is dropped and a send fails).
async fn follow(events: Arc<EventLog>, mut cursor: u64, tx: mpsc::Sender<Bytes>) {
    let mut changed = events.subscribe();
    if tx.send(Bytes::from_static(b": strata events\n\n")).await.is_err() {
        return;
    }
    loop {
        // Mark what is current before reading, so an event emitted after
        // the read wakes the wait below.
        changed.borrow_and_update();
        loop {
            let page = events.since(cursor, 256);
            if page.missed > 0 {
                let note = format!("event: missed\ndata: {{\"missed\": {}}}\n\n", page.missed);
                if tx.send(Bytes::from(note)).await.is_err() {
                    return;
                }
            }
            if page.events.is_empty() {
                break;
            }
            for e in &page.events {
                let json = serde_json::to_string(e).unwrap_or_default();
                if tx.send(Bytes::from(to_sse(e, &json))).await.is_err() {
                    return;
                }
                cursor = e.seq;
            }
        }
        match tokio::time::timeout(HEARTBEAT, changed.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return, // the log is gone: the node is stopping
            Err(_) => {
                if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                    return;
                }
            }
        }
    }
}
