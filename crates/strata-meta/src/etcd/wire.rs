//! etcd's v3 JSON gateway on the wire: request bodies, response parsers,
//! and the splitter for streamed responses. Pure: no I/O, no clock.
//!
//! # Format
//!
//! The gateway (grpc-gateway in front of etcd's gRPC API, etcd 3.4) maps
//! each protobuf message to a JSON object with the proto field names
//! (`mod_revision`, but `ID` and `TTL` for leases):
//! - keys and values (`bytes`) are standard base64 strings;
//! - `int64` fields are decimal strings (`"revision":"5"`); numbers are
//!   accepted too;
//! - fields at their default (0, false, empty, enum value 0 such as event
//!   type `PUT`) are left out, so every field here is optional;
//! - a failed call answers a non-200 status with
//!   `{"error":"..","message":"..","code":N}` (`code` a gRPC status);
//! - a streamed call (`/v3/watch`, `/v3/lease/keepalive`) answers with one
//!   JSON object per message, `{"result":{..}}` or `{"error":{..}}`,
//!   separated by newlines, in an HTTP/1.1 chunked body.
//!
//! Unknown fields are ignored (newer etcd versions add some). Whatever the
//! bytes, a parser returns a value or [`EtcdError::Malformed`], never
//! panics; `fuzz/fuzz_targets/etcd_responses.rs` holds it to that.

use serde::Deserialize;
use serde::de::{self, Deserializer, Error as _, Visitor};
use serde_json::{Value, json};

use super::base64;
use super::error::EtcdError;
use super::types::{
    Compare, CompareOp, CompareTarget, KeyRange, KeyValue, LeaseId, RangeResponse, Txn, TxnOp, TxnOpResponse,
    TxnResponse, WatchEvent,
};

/// The largest response body or streamed message accepted, in bytes. etcd
/// limits a request to 1.5 MiB by default, and a range answer to what fits
/// in its 2 GiB gRPC limit; metadata stays far below this.
pub(crate) const MAX_MESSAGE_BYTES: usize = 64 << 20;

// ---- requests -------------------------------------------------------------

fn b64(bytes: &[u8]) -> Value {
    Value::String(base64::encode(bytes))
}

/// `key`/`range_end` members for a range.
fn range_members(range: &KeyRange) -> serde_json::Map<String, Value> {
    let (key, end) = range.bounds();
    let mut m = serde_json::Map::new();
    m.insert("key".into(), b64(&key));
    if !end.is_empty() {
        m.insert("range_end".into(), b64(&end));
    }
    m
}

pub(crate) fn range_request(range: &KeyRange) -> Value {
    Value::Object(range_members(range))
}

pub(crate) fn put_request(key: &[u8], value: &[u8], lease: Option<LeaseId>) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("key".into(), b64(key));
    m.insert("value".into(), b64(value));
    if let Some(LeaseId(id)) = lease {
        m.insert("lease".into(), Value::String(id.to_string()));
    }
    Value::Object(m)
}

pub(crate) fn delete_request(range: &KeyRange) -> Value {
    range_request(range)
}

fn compare_json(c: &Compare) -> Value {
    let mut m = range_members(&c.range);
    let result = match c.op {
        CompareOp::Equal => "EQUAL",
        CompareOp::NotEqual => "NOT_EQUAL",
        CompareOp::Greater => "GREATER",
        CompareOp::Less => "LESS",
    };
    m.insert("result".into(), result.into());
    let (target, field, value) = match &c.target {
        CompareTarget::Version(v) => ("VERSION", "version", Value::String(v.to_string())),
        CompareTarget::CreateRevision(v) => ("CREATE", "create_revision", Value::String(v.to_string())),
        CompareTarget::ModRevision(v) => ("MOD", "mod_revision", Value::String(v.to_string())),
        CompareTarget::Value(v) => ("VALUE", "value", b64(v)),
    };
    m.insert("target".into(), target.into());
    m.insert(field.into(), value);
    Value::Object(m)
}

fn op_json(op: &TxnOp) -> Value {
    match op {
        TxnOp::Put { key, value, lease } => json!({ "request_put": put_request(key, value, *lease) }),
        TxnOp::Delete(range) => json!({ "request_delete_range": delete_request(range) }),
        TxnOp::Range(range) => json!({ "request_range": range_request(range) }),
    }
}

pub(crate) fn txn_request(txn: &Txn) -> Value {
    json!({
        "compare": txn.compare.iter().map(compare_json).collect::<Vec<_>>(),
        "success": txn.success.iter().map(op_json).collect::<Vec<_>>(),
        "failure": txn.failure.iter().map(op_json).collect::<Vec<_>>(),
    })
}

pub(crate) fn lease_grant_request(ttl_secs: i64) -> Value {
    json!({ "TTL": ttl_secs.to_string() })
}

pub(crate) fn lease_id_request(id: LeaseId) -> Value {
    json!({ "ID": id.0.to_string() })
}

pub(crate) fn compaction_request(revision: i64) -> Value {
    json!({ "revision": revision.to_string(), "physical": true })
}

pub(crate) fn watch_create_request(range: &KeyRange, start_revision: i64) -> Value {
    let mut m = range_members(range);
    if start_revision > 0 {
        m.insert("start_revision".into(), Value::String(start_revision.to_string()));
    }
    json!({ "create_request": Value::Object(m) })
}

// ---- response field types -------------------------------------------------

/// An `int64` as the gateway writes it: a decimal string, or a number.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct I64(i64);

impl<'de> Deserialize<'de> for I64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = I64;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an int64 as a decimal string or a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<I64, E> {
                Ok(I64(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<I64, E> {
                i64::try_from(v).map(I64).map_err(|_| E::custom(format!("{v} is out of int64 range")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<I64, E> {
                v.parse().map(I64).map_err(|_| E::custom(format!("{v:?} is not an int64")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A `bytes` field: base64 text, decoded.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct B64(Vec<u8>);

impl<'de> Deserialize<'de> for B64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        base64::decode(&text).map(B64).map_err(|e| D::Error::custom(format!("bad base64: {e}")))
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawHeader {
    revision: I64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawKv {
    key: B64,
    value: B64,
    create_revision: I64,
    mod_revision: I64,
    version: I64,
    lease: I64,
}

impl From<RawKv> for KeyValue {
    fn from(r: RawKv) -> Self {
        KeyValue {
            key: r.key.0,
            value: r.value.0,
            create_revision: r.create_revision.0,
            mod_revision: r.mod_revision.0,
            version: r.version.0,
            lease: (r.lease.0 != 0).then_some(LeaseId(r.lease.0)),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawRange {
    header: RawHeader,
    kvs: Vec<RawKv>,
    more: bool,
    count: I64,
}

impl From<RawRange> for RangeResponse {
    fn from(r: RawRange) -> Self {
        RangeResponse {
            revision: r.header.revision.0,
            kvs: r.kvs.into_iter().map(KeyValue::from).collect(),
            more: r.more,
            count: r.count.0,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawDelete {
    header: RawHeader,
    deleted: I64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawOpResponse {
    response_range: Option<RawRange>,
    response_put: Option<Value>,
    response_delete_range: Option<RawDelete>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawTxn {
    header: RawHeader,
    succeeded: bool,
    responses: Vec<RawOpResponse>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawLease {
    #[serde(rename = "ID")]
    id: I64,
    #[serde(rename = "TTL")]
    ttl: I64,
    error: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawEvent {
    #[serde(rename = "type")]
    kind: Option<String>,
    kv: RawKv,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawWatch {
    header: RawHeader,
    created: bool,
    canceled: bool,
    compact_revision: I64,
    cancel_reason: String,
    events: Vec<RawEvent>,
}

/// A failed unary call's body, or the `error` member of a streamed message.
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawError {
    error: Option<Value>,
    message: String,
    code: I64,
    grpc_code: I64,
}

/// One message of a streamed response.
#[derive(Deserialize)]
struct RawStreamed<T> {
    result: Option<T>,
    error: Option<RawError>,
}

// ---- response parsers -----------------------------------------------------

fn from_json<'a, T: Deserialize<'a>>(op: &'static str, body: &'a [u8]) -> Result<T, EtcdError> {
    // serde reads a struct from a JSON array too; the gateway only sends objects.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(EtcdError::malformed(op, format!("not a JSON object; body starts {}", snippet(body))));
    }
    serde_json::from_slice(body).map_err(|e| EtcdError::malformed(op, format!("{e}; body starts {}", snippet(body))))
}

/// The first bytes of a body, printable, for error messages.
fn snippet(body: &[u8]) -> String {
    let head = &body[..body.len().min(120)];
    format!("{:?}", String::from_utf8_lossy(head))
}

/// The error etcd answered a unary call with, from its HTTP status and body.
pub(crate) fn parse_error(op: &'static str, http_status: u16, body: &[u8]) -> EtcdError {
    match serde_json::from_slice::<RawError>(body) {
        Ok(e) if !e.message.is_empty() || e.code.0 != 0 => {
            EtcdError::Status { op, code: e.code.0.max(e.grpc_code.0), message: e.message }
        }
        _ => EtcdError::malformed(op, format!("HTTP status {http_status} with body {}", snippet(body))),
    }
}

pub(crate) fn parse_range(body: &[u8]) -> Result<RangeResponse, EtcdError> {
    from_json::<RawRange>("range", body).map(RangeResponse::from)
}

/// The revision a put was applied at.
pub(crate) fn parse_put(body: &[u8]) -> Result<i64, EtcdError> {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct RawPut {
        header: RawHeader,
    }
    from_json::<RawPut>("put", body).map(|p| p.header.revision.0)
}

/// `(revision, keys deleted)`.
pub(crate) fn parse_delete(body: &[u8]) -> Result<(i64, i64), EtcdError> {
    from_json::<RawDelete>("delete", body).map(|d| (d.header.revision.0, d.deleted.0))
}

pub(crate) fn parse_txn(body: &[u8]) -> Result<TxnResponse, EtcdError> {
    let raw: RawTxn = from_json("txn", body)?;
    let mut responses = Vec::with_capacity(raw.responses.len());
    for (i, r) in raw.responses.into_iter().enumerate() {
        let one = match (r.response_range, r.response_put, r.response_delete_range) {
            (Some(range), None, None) => TxnOpResponse::Range(range.into()),
            (None, Some(_), None) => TxnOpResponse::Put,
            (None, None, Some(d)) => TxnOpResponse::Delete { deleted: d.deleted.0 },
            _ => {
                return Err(EtcdError::malformed(
                    "txn",
                    format!("response {i} is not exactly one of range/put/delete"),
                ));
            }
        };
        responses.push(one);
    }
    Ok(TxnResponse { succeeded: raw.succeeded, revision: raw.header.revision.0, responses })
}

/// The `(id, TTL)` of a grant or keep-alive answer.
fn lease_of(op: &'static str, raw: RawLease) -> Result<(LeaseId, i64), EtcdError> {
    if !raw.error.is_empty() {
        return Err(EtcdError::Status { op, code: 0, message: raw.error });
    }
    Ok((LeaseId(raw.id.0), raw.ttl.0))
}

/// The `(id, TTL in seconds)` of a granted lease.
pub(crate) fn parse_lease_grant(body: &[u8]) -> Result<(LeaseId, i64), EtcdError> {
    let (id, ttl) = lease_of("lease grant", from_json("lease grant", body)?)?;
    if id.0 == 0 || ttl <= 0 {
        return Err(EtcdError::malformed("lease grant", format!("granted lease {} with TTL {ttl}", id.0)));
    }
    Ok((id, ttl))
}

/// The remaining TTL after a keep-alive; 0 if the lease no longer exists.
pub(crate) fn parse_keepalive(message: &[u8]) -> Result<i64, EtcdError> {
    let op = "lease keepalive";
    let raw: RawStreamed<RawLease> = from_json(op, message)?;
    match (raw.result, raw.error) {
        (_, Some(e)) => Err(stream_error(op, e)),
        (Some(r), None) => Ok(lease_of(op, r)?.1.max(0)),
        (None, None) => Err(EtcdError::malformed(op, "message has neither result nor error")),
    }
}

/// The remaining TTL in seconds, or `None` if the lease does not exist.
pub(crate) fn parse_time_to_live(body: &[u8]) -> Result<Option<i64>, EtcdError> {
    let raw: RawLease = from_json("lease timetolive", body)?;
    Ok((raw.ttl.0 >= 0).then_some(raw.ttl.0))
}

/// Checks that a body is a JSON object (revoke, compaction answers).
pub(crate) fn parse_empty(op: &'static str, body: &[u8]) -> Result<(), EtcdError> {
    from_json::<serde_json::Map<String, Value>>(op, body).map(|_| ())
}

fn stream_error(op: &'static str, e: RawError) -> EtcdError {
    let message = match (e.message.is_empty(), e.error) {
        (false, _) => e.message,
        (true, Some(Value::String(s))) => s,
        (true, Some(Value::Object(m))) => m.get("message").and_then(Value::as_str).unwrap_or("").to_owned(),
        (true, _) => String::new(),
    };
    EtcdError::Status { op, code: e.code.0.max(e.grpc_code.0), message }
}

/// One message of a watch stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WatchMessage {
    /// The watch is set up; `revision` is the store's revision then.
    Created { revision: i64 },
    /// Changes, in revision order; `revision` is the store's revision when
    /// they were sent (at least that of the last event).
    Events { revision: i64, events: Vec<WatchEvent> },
    /// The revision asked for was compacted away; etcd no longer has the
    /// changes since. The stream carries nothing more.
    Compacted { compact_revision: i64 },
    /// etcd ended the watch for another reason.
    Canceled { reason: String },
}

pub(crate) fn parse_watch_message(message: &[u8]) -> Result<WatchMessage, EtcdError> {
    let op = "watch";
    let raw: RawStreamed<RawWatch> = from_json(op, message)?;
    let w = match (raw.result, raw.error) {
        (_, Some(e)) => return Err(stream_error(op, e)),
        (Some(w), None) => w,
        (None, None) => return Err(EtcdError::malformed(op, "message has neither result nor error")),
    };
    if w.compact_revision.0 != 0 {
        return Ok(WatchMessage::Compacted { compact_revision: w.compact_revision.0 });
    }
    if w.canceled {
        return Ok(WatchMessage::Canceled { reason: w.cancel_reason });
    }
    if w.created {
        return Ok(WatchMessage::Created { revision: w.header.revision.0 });
    }
    let mut events = Vec::with_capacity(w.events.len());
    for e in w.events {
        let kv = KeyValue::from(e.kv);
        events.push(match e.kind.as_deref() {
            None | Some("PUT") => WatchEvent::Put(kv),
            Some("DELETE") => WatchEvent::Delete(kv),
            Some(other) => return Err(EtcdError::malformed(op, format!("unknown event type {other:?}"))),
        });
    }
    if events.windows(2).any(|w| w[0].kv().mod_revision > w[1].kv().mod_revision) {
        return Err(EtcdError::malformed(op, "events are not in revision order"));
    }
    Ok(WatchMessage::Events { revision: w.header.revision.0, events })
}

// ---- streamed bodies ------------------------------------------------------

/// Cuts a stream of concatenated JSON objects into one slice per object,
/// whatever the chunk boundaries. Whitespace between objects is skipped;
/// anything else outside an object is malformed.
///
/// Invariant: `buf[..scan]` has been scanned, and `depth`, `in_string`
/// and `escaped` describe the state after it; `buf[0]` is the first byte
/// of the object being assembled whenever `depth > 0`.
#[derive(Debug, Default)]
pub(crate) struct JsonStream {
    buf: Vec<u8>,
    scan: usize,
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl JsonStream {
    /// Appends received bytes.
    ///
    /// # Errors
    ///
    /// [`EtcdError::Malformed`] if an object would exceed
    /// [`MAX_MESSAGE_BYTES`].
    pub(crate) fn push(&mut self, op: &'static str, data: &[u8]) -> Result<(), EtcdError> {
        if self.buf.len().saturating_add(data.len()) > MAX_MESSAGE_BYTES {
            return Err(EtcdError::malformed(op, format!("a streamed message exceeds {MAX_MESSAGE_BYTES} bytes")));
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    /// The next complete object, `None` if more bytes are needed.
    ///
    /// # Errors
    ///
    /// [`EtcdError::Malformed`] if a byte outside an object is not
    /// whitespace or the nesting is unbalanced.
    pub(crate) fn next_message(&mut self, op: &'static str) -> Result<Option<Vec<u8>>, EtcdError> {
        while self.scan < self.buf.len() {
            let b = self.buf[self.scan];
            if self.depth == 0 {
                match b {
                    b' ' | b'\t' | b'\r' | b'\n' => {
                        // Between objects `scan` is 0: the byte is buf[0].
                        debug_assert_eq!(self.scan, 0);
                        self.buf.remove(0);
                        continue;
                    }
                    b'{' => {}
                    other => {
                        return Err(EtcdError::malformed(
                            op,
                            format!("byte {other:#04x} outside a JSON object in the stream"),
                        ));
                    }
                }
            }
            self.scan += 1;
            if self.in_string {
                match (self.escaped, b) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self
                        .depth
                        .checked_sub(1)
                        .ok_or_else(|| EtcdError::malformed(op, "unbalanced brackets in the stream"))?;
                    if self.depth == 0 {
                        // Inner brackets are only counted (the JSON parser
                        // checks them); the outer pair must match.
                        if b != b'}' {
                            return Err(EtcdError::malformed(op, "a streamed object ends with ']'"));
                        }
                        let rest = self.buf.split_off(self.scan);
                        let message = std::mem::replace(&mut self.buf, rest);
                        self.scan = 0;
                        return Ok(Some(message));
                    }
                }
                _ => {}
            }
        }
        Ok(None)
    }

    /// Whether bytes of an unfinished object are buffered.
    pub(crate) fn has_partial(&self) -> bool {
        !self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#""header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"3","raft_term":"2"}"#;

    #[test]
    fn range_answer_from_etcd_3_4_decodes() {
        let body = format!(
            r#"{{{HEADER},"kvs":[{{"key":"Zm9v","create_revision":"2","mod_revision":"3","version":"2","value":"djI=","lease":"7587"}}],"count":"1"}}"#
        );
        let r = parse_range(body.as_bytes()).unwrap();
        assert_eq!(r.revision, 3);
        assert_eq!(r.count, 1);
        assert_eq!(
            r.kvs,
            vec![KeyValue {
                key: b"foo".to_vec(),
                value: b"v2".to_vec(),
                create_revision: 2,
                mod_revision: 3,
                version: 2,
                lease: Some(LeaseId(7587)),
            }]
        );
        // A miss leaves out kvs and count.
        let miss = parse_range(format!("{{{HEADER}}}").as_bytes()).unwrap();
        assert_eq!((miss.kvs.len(), miss.count, miss.revision), (0, 0, 3));
    }

    #[test]
    fn txn_answers_decode_in_branch_order() {
        let ok = format!(
            r#"{{{HEADER},"succeeded":true,"responses":[{{"response_put":{{"header":{{"revision":"3"}}}}}},{{"response_range":{{"header":{{"revision":"3"}},"kvs":[{{"key":"Zm9v","value":"djI="}}],"count":"1"}}}},{{"response_delete_range":{{"header":{{"revision":"3"}}}}}}]}}"#
        );
        let t = parse_txn(ok.as_bytes()).unwrap();
        assert!(t.succeeded);
        assert_eq!(t.revision, 3);
        assert!(matches!(t.responses[0], TxnOpResponse::Put));
        assert!(matches!(&t.responses[1], TxnOpResponse::Range(r) if r.kvs[0].value == b"v2"));
        assert_eq!(t.responses[2], TxnOpResponse::Delete { deleted: 0 });
        // Failed compare: `succeeded` is left out.
        let failed = parse_txn(format!("{{{HEADER}}}").as_bytes()).unwrap();
        assert!(!failed.succeeded);
        let two = r#"{"responses":[{"response_put":{},"response_range":{}}]}"#;
        assert!(matches!(parse_txn(two.as_bytes()), Err(EtcdError::Malformed { .. })));
        let none = r#"{"responses":[{}]}"#;
        assert!(matches!(parse_txn(none.as_bytes()), Err(EtcdError::Malformed { .. })));
    }

    #[test]
    fn bad_fields_are_malformed_not_panics() {
        for body in [
            r#"{"header":{"revision":"x"}}"#,
            r#"{"header":{"revision":"99999999999999999999"}}"#,
            r#"{"header":{"revision":18446744073709551615}}"#,
            r#"{"kvs":[{"key":"!!!"}]}"#,
            r#"{"kvs":[{"key":5}]}"#,
            r#"{"kvs":{}}"#,
            "",
            "[]",
            "null",
            "{",
        ] {
            let err = parse_range(body.as_bytes()).unwrap_err();
            assert!(matches!(err, EtcdError::Malformed { op: "range", .. }), "{body}: {err:?}");
        }
    }

    #[test]
    fn lease_answers() {
        let g = r#"{"header":{},"ID":"2324035746732030990","TTL":"2"}"#;
        assert_eq!(parse_lease_grant(g.as_bytes()).unwrap(), (LeaseId(2324035746732030990), 2));
        assert!(parse_lease_grant(br#"{"TTL":"2"}"#).is_err(), "no id");
        assert!(matches!(
            parse_lease_grant(br#"{"ID":"1","TTL":"2","error":"too many"}"#),
            Err(EtcdError::Status { .. })
        ));
        assert_eq!(parse_keepalive(br#"{"result":{"header":{},"ID":"5","TTL":"30"}}"#).unwrap(), 30);
        // A lease that is gone: TTL left out.
        assert_eq!(parse_keepalive(br#"{"result":{"header":{},"ID":"5"}}"#).unwrap(), 0);
        let e = parse_keepalive(br#"{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader"}}"#);
        assert!(
            matches!(e, Err(EtcdError::Status { code: 14, ref message, .. }) if message == "etcdserver: no leader")
        );
        assert_eq!(parse_time_to_live(br#"{"ID":"5","TTL":"29","grantedTTL":"30"}"#).unwrap(), Some(29));
        assert_eq!(parse_time_to_live(br#"{"ID":"5","TTL":"-1"}"#).unwrap(), None);
    }

    #[test]
    fn error_bodies_carry_code_and_message() {
        let body = br#"{"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}"#;
        let e = parse_error("lease revoke", 404, body);
        assert!(e.is_not_found(), "{e:?}");
        assert!(e.to_string().contains("requested lease not found"));
        let e = parse_error("range", 502, b"<html>bad gateway</html>");
        assert!(matches!(&e, EtcdError::Malformed { reason, .. } if reason.contains("502")), "{e:?}");
    }

    #[test]
    fn watch_messages_from_etcd_3_4_decode() {
        let created = r#"{"result":{"header":{"revision":"4"},"created":true}}"#;
        assert_eq!(parse_watch_message(created.as_bytes()).unwrap(), WatchMessage::Created { revision: 4 });
        let put = r#"{"result":{"header":{"revision":"5"},"events":[{"kv":{"key":"dy9h","create_revision":"5","mod_revision":"5","version":"1","value":"MQ=="}}]}}"#;
        match parse_watch_message(put.as_bytes()).unwrap() {
            WatchMessage::Events { revision: 5, events } => {
                assert!(matches!(&events[..], [WatchEvent::Put(kv)] if kv.key == b"w/a" && kv.value == b"1"));
            }
            other => panic!("{other:?}"),
        }
        let del = r#"{"result":{"header":{"revision":"6"},"events":[{"type":"DELETE","kv":{"key":"dy9h","mod_revision":"6"}}]}}"#;
        assert!(matches!(
            parse_watch_message(del.as_bytes()).unwrap(),
            WatchMessage::Events { events, .. } if matches!(&events[..], [WatchEvent::Delete(kv)] if kv.mod_revision == 6)
        ));
        let compacted = r#"{"result":{"header":{"raft_term":"2"},"canceled":true,"compact_revision":"5"}}"#;
        assert_eq!(parse_watch_message(compacted.as_bytes()).unwrap(), WatchMessage::Compacted { compact_revision: 5 });
        let weird = r#"{"result":{"events":[{"type":"EXPLODE","kv":{}}]}}"#;
        assert!(matches!(parse_watch_message(weird.as_bytes()), Err(EtcdError::Malformed { .. })));
        let unordered = r#"{"result":{"events":[{"kv":{"mod_revision":"6"}},{"kv":{"mod_revision":"5"}}]}}"#;
        assert!(matches!(parse_watch_message(unordered.as_bytes()), Err(EtcdError::Malformed { .. })));
    }

    #[test]
    fn stream_splits_objects_at_any_chunk_boundary() {
        let text = "{\"a\":\"}{\\\"\"}\n {\"b\":[{}]}\r\n{\"c\":1}";
        let whole: Vec<Vec<u8>> = {
            let mut s = JsonStream::default();
            s.push("t", text.as_bytes()).unwrap();
            std::iter::from_fn(|| s.next_message("t").unwrap()).collect()
        };
        assert_eq!(whole, vec![b"{\"a\":\"}{\\\"\"}".to_vec(), b"{\"b\":[{}]}".to_vec(), b"{\"c\":1}".to_vec()]);
        for cut in 0..text.len() {
            let mut s = JsonStream::default();
            let mut got = Vec::new();
            for part in [&text.as_bytes()[..cut], &text.as_bytes()[cut..]] {
                s.push("t", part).unwrap();
                while let Some(m) = s.next_message("t").unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(got, whole, "cut at {cut}");
            assert!(!s.has_partial());
        }
        let mut s = JsonStream::default();
        s.push("t", b"{}x").unwrap();
        assert_eq!(s.next_message("t").unwrap(), Some(b"{}".to_vec()));
        assert!(matches!(s.next_message("t"), Err(EtcdError::Malformed { .. })));
        let mut s = JsonStream::default();
        s.push("t", b"{[}").unwrap();
        assert_eq!(s.next_message("t").unwrap(), None, "inner brackets are counted, not matched");
        let mut s = JsonStream::default();
        s.push("t", b"{]").unwrap();
        assert!(matches!(s.next_message("t"), Err(EtcdError::Malformed { .. })), "the outer pair must match");
    }

    #[test]
    fn requests_use_the_gateway_field_names() {
        let txn = Txn {
            compare: vec![Compare::mod_revision_is("k", 0), Compare::unchanged_since("p/", 7)],
            success: vec![TxnOp::Put { key: b"k".to_vec(), value: b"v".to_vec(), lease: Some(LeaseId(9)) }],
            failure: vec![TxnOp::Range(KeyRange::prefix("p/")), TxnOp::Delete(KeyRange::key("k"))],
        };
        let v = txn_request(&txn);
        assert_eq!(v["compare"][0], json!({"key":"aw==","target":"MOD","result":"EQUAL","mod_revision":"0"}));
        assert_eq!(
            v["compare"][1],
            json!({"key":"cC8=","range_end":"cDA=","target":"MOD","result":"LESS","mod_revision":"8"})
        );
        assert_eq!(v["success"][0], json!({"request_put":{"key":"aw==","value":"dg==","lease":"9"}}));
        assert_eq!(v["failure"][0], json!({"request_range":{"key":"cC8=","range_end":"cDA="}}));
        assert_eq!(v["failure"][1], json!({"request_delete_range":{"key":"aw=="}}));
        assert_eq!(
            watch_create_request(&KeyRange::prefix("w/"), 12),
            json!({"create_request":{"key":"dy8=","range_end":"dzA=","start_revision":"12"}})
        );
    }
}
