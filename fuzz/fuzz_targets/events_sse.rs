//! The event-stream parser `strata events --follow` reads the API with
//! (`strata_events::sse`), on arbitrary bytes cut into arbitrary chunks.
//! Invariants: never panic, hold at most about `MAX_MESSAGE` bytes, and
//! yield the same messages however the stream is cut (when no message is
//! long enough to be dropped).
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_events::sse::{MAX_MESSAGE, SseParser};

fuzz_target!(|data: &[u8]| {
    let Some((&cut, stream)) = data.split_first() else { return };
    let mut whole = SseParser::default();
    let at_once = whole.feed(stream);
    let mut chunked = SseParser::default();
    let mut got = Vec::new();
    let step = usize::from(cut % 7) + 1;
    for chunk in stream.chunks(step) {
        got.extend(chunked.feed(chunk));
    }
    if stream.len() < MAX_MESSAGE {
        assert_eq!(got, at_once, "the same messages however the stream is cut");
    }
});
