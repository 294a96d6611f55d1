//! Events: what an operator is told happened, as it happens.
//!
//! A node keeps its recent events in an [`EventLog`]: a bounded ring,
//! numbered from 1 without gaps, that the HTTP API serves
//! (`GET /api/v1/events`, and as server-sent events to followers) and
//! `strata events` prints. Emitting takes one short lock and never
//! waits on a reader: a follower that falls more than the ring's length
//! behind is told how many events it missed ([`Page::missed`]) rather
//! than slowing the node. Events are for people and alerting, not for
//! the data path: nothing here is called per I/O.
//!
//! What is kept is the last [`DEFAULT_CAPACITY`] events since the process
//! started; the tamper-evident record of management operations is the
//! audit log (`strata audit`), which persists.
//!
//! Invariant: the ring holds events `first_seq ..= last_seq`, in order,
//! and `last_seq` is what the watch channel last carried.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

pub mod sse;
pub use sse::to_sse;

/// Events kept by [`EventLog::default`].
pub const DEFAULT_CAPACITY: usize = 10_000;

/// How much an event matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Expected and fine (a host connected, a volume was made).
    Info,
    /// Needs attention soon (a drive 90% full, a degraded volume).
    Warning,
    /// Needs attention now (a drive error, data at risk).
    Error,
}

impl Severity {
    /// The lowercase name, as in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Its number: 1 for the first event of the process, then one more
    /// for each.
    pub seq: u64,
    /// When, in milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// What happened, dotted: `host.connected`, `host.disconnected`,
    /// `host.refused`, `volume.created`, `drive.error`,
    /// `drive.fill`, `node.state`, `volume.degraded`, ...
    pub kind: String,
    /// How much it matters.
    pub severity: Severity,
    /// One line for a person.
    pub message: String,
    /// The volume it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// The host (NQN) it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The node it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The drive it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drive: Option<String>,
    /// Why, in a few words (a refused connect's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// An event to emit: [`EventLog::emit`] gives it its number and time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    kind: String,
    severity: Severity,
    message: String,
    volume: Option<String>,
    host: Option<String>,
    node: Option<String>,
    drive: Option<String>,
    reason: Option<String>,
}

impl NewEvent {
    /// An event of `kind` and `severity`, told as `message`.
    pub fn new(kind: &str, severity: Severity, message: impl Into<String>) -> NewEvent {
        NewEvent {
            kind: kind.to_string(),
            severity,
            message: message.into(),
            volume: None,
            host: None,
            node: None,
            drive: None,
            reason: None,
        }
    }

    /// About this volume.
    pub fn volume(mut self, name: impl Into<String>) -> NewEvent {
        self.volume = Some(name.into());
        self
    }

    /// About this host.
    pub fn host(mut self, nqn: impl Into<String>) -> NewEvent {
        self.host = Some(nqn.into());
        self
    }

    /// About this node.
    pub fn node(mut self, name: impl Into<String>) -> NewEvent {
        self.node = Some(name.into());
        self
    }

    /// About this drive.
    pub fn drive(mut self, path: impl Into<String>) -> NewEvent {
        self.drive = Some(path.into());
        self
    }

    /// Because of this.
    pub fn reason(mut self, why: impl Into<String>) -> NewEvent {
        self.reason = Some(why.into());
        self
    }
}

/// Events after a given number ([`EventLog::since`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// The events, oldest first.
    pub events: Vec<Event>,
    /// Events after the asked-for number that the ring no longer holds.
    pub missed: u64,
    /// The newest event's number (0: none yet): ask `since` this next.
    pub last_seq: u64,
}

/// The ring and its followers' signal.
#[derive(Debug)]
pub struct EventLog {
    ring: Mutex<Ring>,
    last: watch::Sender<u64>,
}

#[derive(Debug)]
struct Ring {
    events: VecDeque<Event>,
    capacity: usize,
    next_seq: u64,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog::new(DEFAULT_CAPACITY)
    }
}

impl EventLog {
    /// A log keeping the last `capacity` events (at least one).
    pub fn new(capacity: usize) -> EventLog {
        let capacity = capacity.max(1);
        EventLog {
            ring: Mutex::new(Ring { events: VecDeque::with_capacity(capacity.min(1024)), capacity, next_seq: 1 }),
            last: watch::channel(0).0,
        }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        // A panic while holding the lock leaves the ring whole (every
        // change is one push or pop), so a poisoned lock is still usable.
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `e` now; returns its number.
    pub fn emit(&self, e: NewEvent) -> u64 {
        let time_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        let seq = {
            let mut r = self.ring();
            let seq = r.next_seq;
            r.next_seq += 1;
            if r.events.len() == r.capacity {
                r.events.pop_front();
            }
            r.events.push_back(Event {
                seq,
                time_ms,
                kind: e.kind,
                severity: e.severity,
                message: e.message,
                volume: e.volume,
                host: e.host,
                node: e.node,
                drive: e.drive,
                reason: e.reason,
            });
            seq
        };
        self.last.send_replace(seq);
        seq
    }

    /// At most `limit` events numbered after `seq`, oldest first.
    pub fn since(&self, seq: u64, limit: usize) -> Page {
        let r = self.ring();
        let last_seq = r.next_seq - 1;
        let first = r.events.front().map_or(r.next_seq, |e| e.seq);
        let missed = first.saturating_sub(seq.saturating_add(1));
        let skip = seq.saturating_add(1).saturating_sub(first) as usize;
        let events: Vec<Event> = r.events.iter().skip(skip).take(limit).cloned().collect();
        Page { events, missed, last_seq }
    }

    /// The newest `n` events, oldest first.
    pub fn recent(&self, n: usize) -> Vec<Event> {
        let r = self.ring();
        r.events.iter().skip(r.events.len().saturating_sub(n)).cloned().collect()
    }

    /// The newest event's number (0: none yet).
    pub fn last_seq(&self) -> u64 {
        *self.last.borrow()
    }

    /// A receiver that changes whenever an event is emitted (it carries
    /// the newest number): a follower waits on it, then asks
    /// [`since`](Self::since).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.last.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(n: usize) -> NewEvent {
        NewEvent::new("test.event", Severity::Info, format!("event {n}"))
    }

    #[test]
    fn events_are_numbered_in_order_and_paged_after_a_number() {
        let log = EventLog::new(100);
        assert_eq!(log.since(0, 10), Page { events: vec![], missed: 0, last_seq: 0 });
        for i in 0..5 {
            assert_eq!(log.emit(ev(i)), i as u64 + 1);
        }
        let p = log.since(0, 10);
        assert_eq!(p.events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
        assert_eq!((p.missed, p.last_seq), (0, 5));
        let p = log.since(3, 1);
        assert_eq!(p.events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4]);
        assert!(log.since(5, 10).events.is_empty());
        assert!(log.since(u64::MAX, 10).events.is_empty(), "a number from the future is no panic");
        assert_eq!(log.recent(2).iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4, 5]);
    }

    #[test]
    fn a_reader_behind_the_ring_is_told_what_it_missed() {
        let log = EventLog::new(3);
        for i in 0..10 {
            log.emit(ev(i));
        }
        let p = log.since(2, 100);
        assert_eq!(p.events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![8, 9, 10]);
        assert_eq!(p.missed, 5, "events 3 to 7 are gone");
        assert_eq!(log.since(0, 100).missed, 7);
        assert_eq!(log.since(7, 100).missed, 0);
    }

    #[test]
    fn fields_serialise_and_absent_ones_are_left_out() {
        let log = EventLog::default();
        log.emit(
            NewEvent::new("host.refused", Severity::Warning, "refused a connect")
                .host("nqn.2014-08.org.nvmexpress:uuid:1")
                .reason("DH-HMAC-CHAP failed"),
        );
        let e = &log.since(0, 1).events[0];
        let j = serde_json::to_value(e).unwrap();
        assert_eq!(j["kind"], "host.refused");
        assert_eq!(j["severity"], "warning");
        assert_eq!(j["reason"], "DH-HMAC-CHAP failed");
        assert!(j.get("volume").is_none());
        let back: Event = serde_json::from_value(j).unwrap();
        assert_eq!(&back, e);
        let sse = to_sse(e, &serde_json::to_string(e).unwrap());
        assert!(sse.starts_with("id: 1\nevent: host.refused\ndata: {") && sse.ends_with("}\n\n"), "{sse}");
    }

    #[tokio::test]
    async fn a_follower_wakes_when_an_event_is_emitted() {
        let log = std::sync::Arc::new(EventLog::default());
        let mut rx = log.subscribe();
        let l = log.clone();
        let t = tokio::spawn(async move {
            rx.changed().await.unwrap();
            l.since(0, 10).events.len()
        });
        tokio::task::yield_now().await;
        log.emit(ev(1));
        assert_eq!(t.await.unwrap(), 1);
    }
}
