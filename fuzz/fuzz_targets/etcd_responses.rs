//! strata-meta's etcd client parsers (crates/strata-meta/src/etcd/wire.rs
//! and base64.rs): every answer body etcd's JSON gateway might send, the
//! splitter that cuts a streamed answer (watch, keep-alive) into messages,
//! and base64.
//!
//! Invariants: no parser panics, whatever the bytes; the stream splitter
//! gives the same messages (or refuses) however the stream is chunked, and
//! each message it returns starts with '{' and ends with '}'; base64 text
//! decodes back to the bytes that were encoded.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use strata_meta::fuzzing::{base64_decode, base64_encode, etcd_response, etcd_split_stream};

#[derive(Arbitrary, Debug)]
enum Input {
    /// A whole answer body for one parser.
    Body { which: u8, body: Vec<u8> },
    /// A JSON answer built to get past the syntax: one of the gateway's
    /// shapes with arbitrary field values.
    Shaped { which: u8, revision: String, key: String, kind: Option<String>, count: i64, nest: bool },
    /// A stream cut at arbitrary points.
    Stream { bytes: Vec<u8>, cuts: Vec<u16> },
    /// Base64 both ways.
    Base64 { data: Vec<u8>, text: String },
}

fuzz_target!(|input: Input| match input {
    Input::Body { which, body } => {
        let _ = etcd_response(which, &body);
    }
    Input::Shaped { which, revision, key, kind, count, nest } => {
        let kv = serde_json::json!({"key": key, "value": "djI=", "mod_revision": revision, "version": count});
        let mut event = serde_json::json!({"kv": kv});
        if let Some(k) = kind {
            event["type"] = k.into();
        }
        let inner = serde_json::json!({
            "header": {"revision": revision},
            "kvs": [kv],
            "count": count.to_string(),
            "events": [event],
            "ID": count.to_string(),
            "TTL": revision,
            "responses": if nest { serde_json::json!([{"response_range": {"kvs": [kv]}}]) } else { serde_json::json!([{}]) },
        });
        let body = if which % 2 == 0 { serde_json::json!({"result": inner}) } else { inner };
        let _ = etcd_response(which, body.to_string().as_bytes());
    }
    Input::Stream { bytes, cuts } => {
        let whole = etcd_split_stream([bytes.as_slice()]);
        let mut points: Vec<usize> = cuts.iter().map(|&c| usize::from(c) % (bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for p in points {
            chunks.push(&bytes[at..p]);
            at = p;
        }
        chunks.push(&bytes[at..]);
        let chunked = etcd_split_stream(chunks);
        match (&whole, &chunked) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "chunking changed the messages"),
            (Err(_), Err(_)) => {}
            // A refusal can come earlier or later, but not be avoided by chunking.
            _ => panic!("whole: {whole:?}, chunked: {chunked:?}"),
        }
        if let Ok(messages) = whole {
            for m in messages {
                assert_eq!((m.first(), m.last()), (Some(&b'{'), Some(&b'}')), "{m:?}");
            }
        }
    }
    Input::Base64 { data, text } => {
        assert_eq!(base64_decode(&base64_encode(&data)).unwrap(), data);
        if let Ok(decoded) = base64_decode(&text) {
            // Whatever decodes re-encodes to text of the same bytes.
            assert_eq!(base64_decode(&base64_encode(&decoded)).unwrap(), decoded);
        }
    }
});
