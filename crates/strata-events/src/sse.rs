//! Server-sent events (`text/event-stream`), both ways: [`to_sse`] writes
//! one event as the node's API sends it, and [`SseParser`] splits a
//! stream back into messages as `strata events --follow` reads it (the
//! bytes come from the network; the parser never panics, and how the
//! stream is cut into chunks does not change what it yields).

use crate::Event;

/// One event as a server-sent event: its number as the id (so a
/// reconnecting browser's `Last-Event-ID` resumes after it), its kind as
/// the event name, its JSON as the data.
pub fn to_sse(e: &Event, json: &str) -> String {
    // The JSON is one line (serde_json's compact form has no newline), so
    // one data field carries it.
    format!("id: {}\nevent: {}\ndata: {}\n\n", e.seq, e.kind, json.replace('\n', " "))
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseMessage {
    /// Its `event:` name (`message` when none was given).
    pub event: String,
    /// Its `data:` lines, joined by newlines.
    pub data: String,
}

/// The most bytes of one message the parser holds while waiting for its
/// end; a longer message is dropped (a stream that never ends one must
/// not grow the reader without bound).
pub const MAX_MESSAGE: usize = 1 << 20;

/// Splits a `text/event-stream` into messages, chunk by chunk (a message
/// may straddle chunks). Comments (`:` lines) and fields other than
/// `event` and `data` are skipped; a block without data is no message.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for a blank line.
    searched: usize,
    /// Dropping the rest of an over-long message.
    skipping: bool,
}

impl SseParser {
    /// The messages completed by `chunk`.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseMessage> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        loop {
            // A blank line ends a message; search from one byte before
            // where the last search stopped (its end may straddle chunks).
            let from = self.searched.saturating_sub(1);
            let Some(end) = self.buf[from..].windows(2).position(|w| w == b"\n\n").map(|p| p + from) else {
                self.searched = self.buf.len();
                if self.buf.len() > MAX_MESSAGE {
                    // Keep the last byte: it may start the blank line.
                    let keep = self.buf.split_off(self.buf.len() - 1);
                    self.buf = keep;
                    self.searched = 0;
                    self.skipping = true;
                }
                return out;
            };
            let block: Vec<u8> = self.buf.drain(..end + 2).collect();
            self.searched = 0;
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            if let Some(m) = parse_block(&block) {
                out.push(m);
            }
        }
    }
}

/// One message's lines: its event name and data, if it has data.
fn parse_block(block: &[u8]) -> Option<SseMessage> {
    let text = String::from_utf8_lossy(block);
    let (mut event, mut data) = (String::new(), Vec::new());
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            event = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
        }
    }
    if data.is_empty() {
        return None;
    }
    Some(SseMessage { event: if event.is_empty() { "message".into() } else { event }, data: data.join("\n") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_split_across_chunks_and_comments_skipped() {
        let mut p = SseParser::default();
        assert!(p.feed(b": strata events\n\nid: 1\nevent: host.connected\ndata: {\"a\":").is_empty());
        let m = p.feed(b"1}\n\n: keep-alive\n\nevent: missed\ndata: {\"missed\": 3}\n\nid: 2\n");
        assert_eq!(
            m,
            vec![
                SseMessage { event: "host.connected".into(), data: "{\"a\":1}".into() },
                SseMessage { event: "missed".into(), data: "{\"missed\": 3}".into() },
            ]
        );
        assert_eq!(p.feed(b"data: x\ndata: y\n\n"), vec![SseMessage { event: "message".into(), data: "x\ny".into() }]);
    }

    #[test]
    fn a_blank_line_cut_between_two_chunks_still_ends_the_message() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: a\n").is_empty());
        assert_eq!(p.feed(b"\ndata: b\n\n").len(), 2);
    }

    #[test]
    fn a_message_that_never_ends_is_dropped_not_held() {
        let mut p = SseParser::default();
        let big = vec![b'x'; MAX_MESSAGE + 10];
        assert!(p.feed(b"data: ").is_empty());
        assert!(p.feed(&big).is_empty());
        assert!(p.buf.len() <= MAX_MESSAGE, "held {}", p.buf.len());
        // The over-long message is dropped at its end; the next one comes.
        assert!(p.feed(b"\n\n").is_empty());
        assert_eq!(p.feed(b"data: next\n\n"), vec![SseMessage { event: "message".into(), data: "next".into() }]);
    }
}
