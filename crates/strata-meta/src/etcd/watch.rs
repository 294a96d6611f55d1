//! [`Watcher`]: a watch on a key range that survives broken connections.
//!
//! This is etcd's streaming watch, not polling: one long-lived
//! `POST /v3/watch` whose HTTP/1.1 chunked answer carries one JSON message
//! per change batch ([`super::wire`] splits them). A background task owns
//! the stream and hands updates to the [`Watcher`] through a bounded
//! channel, so a slow reader slows the stream down rather than growing a
//! queue.
//!
//! # Reconnection
//!
//! When the stream breaks (etcd restarted, the member was lost, the
//! connection died; TCP keep-alive notices a peer that vanished silently)
//! the task reconnects, to the next endpoint if need be, with a backoff
//! from 100 ms doubling to 5 s, and asks for changes from the revision
//! after the last one it delivered. etcd delivers every change of one
//! revision in one message, so nothing is missed or repeated: updates stay
//! in revision order across reconnections. [`WatchUpdate::Disconnected`]
//! and [`WatchUpdate::Connected`] mark the gap.
//!
//! # Compaction
//!
//! If the revision to resume from has been compacted away, the changes in
//! between are lost for good. The watcher then delivers
//! [`WatchUpdate::Compacted`] and ends; the caller must read the range
//! again (which gives a revision R) and watch anew from R + 1.
//!
//! # Cancel safety
//!
//! [`Watcher::next`] is cancel safe: an update is removed from the channel
//! only when it is returned. Dropping the watcher aborts the task and
//! closes its connection.

use std::time::Duration;

use http_body_util::BodyExt;
use tokio::sync::mpsc;

use super::client::{EtcdClient, WATCH};
use super::error::EtcdError;
use super::http::AbortOnDrop;
use super::types::{KeyRange, WatchEvent};
use super::wire::{self, JsonStream, WatchMessage};

/// Updates buffered between the stream and a slow reader.
const CHANNEL_DEPTH: usize = 64;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a [`Watcher`] delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchUpdate {
    /// The stream is (re)established. The first `Connected` of a watch
    /// started "from now" (revision 0) tells the revision it starts after.
    Connected {
        /// The store revision when the watch was set up.
        revision: i64,
    },
    /// Changes, in revision order.
    Events {
        /// The store revision when they were sent (at least the last
        /// event's `mod_revision`).
        revision: i64,
        /// The changes.
        events: Vec<WatchEvent>,
    },
    /// The stream broke; the watcher is reconnecting. Changes made
    /// meanwhile are delivered after the next `Connected`.
    Disconnected {
        /// Why.
        error: EtcdError,
    },
    /// The history the watch needed was compacted: read the range again
    /// and start a new watch. The watcher delivers nothing after this.
    Compacted {
        /// etcd's compacted revision: only revisions after it are kept.
        compact_revision: i64,
    },
}

/// A watch on a key range. See the module documentation.
#[derive(Debug)]
pub struct Watcher {
    rx: mpsc::Receiver<WatchUpdate>,
    _task: AbortOnDrop<()>,
}

impl Watcher {
    pub(crate) fn start(client: EtcdClient, range: KeyRange, start_revision: i64) -> Self {
        let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
        let task = AbortOnDrop(tokio::spawn(run(client, range, start_revision, tx)));
        Watcher { rx, _task: task }
    }

    /// The next update; `None` after [`WatchUpdate::Compacted`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn next(&mut self) -> Option<WatchUpdate> {
        self.rx.recv().await
    }
}

/// How a stream ended.
enum End {
    /// Reconnect, from the next revision.
    Broken(EtcdError),
    /// Stop: compacted, or nobody listens any more.
    Stop,
}

async fn run(client: EtcdClient, range: KeyRange, start_revision: i64, tx: mpsc::Sender<WatchUpdate>) {
    // The first revision not yet delivered; 0 = "from whenever we connect".
    let mut next = start_revision.max(0);
    let mut backoff = FIRST_BACKOFF;
    let mut connected_once = false;
    loop {
        match stream_once(&client, &range, &mut next, &tx, &mut connected_once).await {
            End::Stop => return,
            End::Broken(error) => {
                if connected_once {
                    // Reset after a stream that worked for a while.
                    backoff = FIRST_BACKOFF;
                    connected_once = false;
                }
                if tx.send(WatchUpdate::Disconnected { error }).await.is_err() {
                    return;
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Opens one stream and follows it until it ends.
async fn stream_once(
    client: &EtcdClient,
    range: &KeyRange,
    next: &mut i64,
    tx: &mpsc::Sender<WatchUpdate>,
    connected: &mut bool,
) -> End {
    let op = "watch";
    let transport = client.watch_transport();
    let request = wire::watch_create_request(range, *next);
    let mut stream = match transport.stream(WATCH, &request, transport.deadline()).await {
        Ok(s) => s,
        Err(e) => return End::Broken(e),
    };
    let mut splitter = JsonStream::default();
    loop {
        loop {
            let message = match splitter.next_message(op) {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => return End::Broken(e),
            };
            let update = match wire::parse_watch_message(&message) {
                Ok(WatchMessage::Created { revision }) => {
                    *connected = true;
                    if *next == 0 {
                        *next = revision.saturating_add(1);
                    }
                    WatchUpdate::Connected { revision }
                }
                Ok(WatchMessage::Events { revision, events }) => {
                    // Events at or before `next - 1` were delivered on an
                    // earlier stream; etcd does not send them again, but
                    // a misbehaving proxy might.
                    let events: Vec<WatchEvent> = events.into_iter().filter(|e| e.kv().mod_revision >= *next).collect();
                    match events.last() {
                        Some(last) => *next = last.kv().mod_revision.saturating_add(1),
                        None => continue,
                    }
                    WatchUpdate::Events { revision, events }
                }
                Ok(WatchMessage::Compacted { compact_revision }) => {
                    let _ = tx.send(WatchUpdate::Compacted { compact_revision }).await;
                    return End::Stop;
                }
                Ok(WatchMessage::Canceled { reason }) => {
                    return End::Broken(EtcdError::Status {
                        op,
                        code: 0,
                        message: format!("watch canceled: {reason}"),
                    });
                }
                Err(e) => return End::Broken(e),
            };
            if tx.send(update).await.is_err() {
                return End::Stop;
            }
        }
        match stream.body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data()
                    && let Err(e) = splitter.push(op, &data)
                {
                    return End::Broken(e);
                }
            }
            Some(Err(e)) => {
                return End::Broken(EtcdError::StreamBroken {
                    op,
                    endpoint: stream.endpoint.clone(),
                    reason: e.to_string(),
                });
            }
            None => {
                return End::Broken(EtcdError::StreamBroken {
                    op,
                    endpoint: stream.endpoint.clone(),
                    reason: if splitter.has_partial() { "etcd ended it mid-message" } else { "etcd ended it" }.into(),
                });
            }
        }
    }
}
