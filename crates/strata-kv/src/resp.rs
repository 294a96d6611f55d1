//! The Redis serialization protocol (RESP2 and RESP3), sans I/O.
//!
//! - [`parse_request`] takes a request from the front of a receive
//!   buffer: an array of bulk strings (what every client library sends) or
//!   an inline command line (what `telnet` and `redis-cli` in some modes
//!   send). Arguments are [`Bytes`] slices of the receive buffer, so a
//!   value travels from the socket to the store without a copy.
//! - [`Reply`] is what the server answers; [`Reply::encode`] writes it for
//!   the connection's protocol version (2 or 3: maps, booleans, doubles
//!   and nulls have their own types in RESP3 and are folded into RESP2's).
//!   Large bulk strings are not copied: they go out as their own chunk.
//! - [`parse_reply`] reads a reply, for the client.
//!
//! "Need more bytes" is `Ok(None)`; malformed input is a [`RespError`],
//! after which the connection is closed (there is no way to find the next
//! frame). Every declared length is checked against [`Limits`] before
//! anything is sized from it.

use bytes::{Buf, Bytes, BytesMut};

/// The largest bulk string a request may carry by default (512 MiB, as
/// in Redis's `proto-max-bulk-len`).
pub const MAX_BULK: usize = 512 << 20;
/// The most arguments a request may carry by default.
pub const MAX_ARGS: usize = 1 << 20;
/// The longest inline command line or header line.
pub const MAX_LINE: usize = 64 << 10;
/// Bulk strings shorter than this are copied into the reply buffer;
/// longer ones go out as their own chunk, uncopied.
pub const COPY_BELOW: usize = 1 << 10;
/// How deep replies may nest (arrays of arrays), for the client parser.
pub const MAX_DEPTH: usize = 32;

/// Bounds on what a peer may declare.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest bulk string, in bytes.
    pub max_bulk: usize,
    /// Most elements in one request.
    pub max_args: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_bulk: MAX_BULK, max_args: MAX_ARGS }
    }
}

/// Why bytes are not RESP.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RespError {
    /// A byte where a type marker was expected is none of RESP's.
    #[error("Protocol error: expected '{expected}', got '{}'", char::from(*.got).escape_default())]
    UnexpectedByte {
        /// What the position allows.
        expected: &'static str,
        /// The byte found.
        got: u8,
    },
    /// A length or count is not a decimal number.
    #[error("Protocol error: invalid {what} length")]
    BadLength {
        /// "multibulk" or "bulk".
        what: &'static str,
    },
    /// A declared length is past the limit.
    #[error("Protocol error: {what} length {len} is over the limit {max}")]
    TooLong {
        /// "multibulk", "bulk" or "line".
        what: &'static str,
        /// Declared (or seen) length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A bulk string is not followed by CRLF.
    #[error("Protocol error: bulk string not terminated by CRLF")]
    MissingCrlf,
    /// Unbalanced quotes in an inline command.
    #[error("Protocol error: unbalanced quotes in request")]
    Unbalanced,
    /// A reply nests deeper than [`MAX_DEPTH`].
    #[error("Protocol error: reply nests deeper than {MAX_DEPTH}")]
    TooDeep,
    /// A number in a reply does not parse.
    #[error("Protocol error: bad number in reply")]
    BadNumber,
}

/// Finds the CRLF-terminated line starting at `at`; returns its end (the
/// index of '\r'). `None`: not all there yet.
fn line_end(buf: &[u8], at: usize) -> Result<Option<usize>, RespError> {
    let hay = buf.get(at..).unwrap_or(&[]);
    match memchr::memchr(b'\n', hay) {
        Some(i) if i > 0 && hay[i - 1] == b'\r' => Ok(Some(at + i - 1)),
        Some(_) => Err(RespError::UnexpectedByte { expected: "\\r\\n", got: b'\n' }),
        None if hay.len() > MAX_LINE => {
            Err(RespError::TooLong { what: "line", len: hay.len() as u64, max: MAX_LINE as u64 })
        }
        None => Ok(None),
    }
}

/// Parses a signed decimal (as Redis writes lengths and integers).
fn parse_i64(digits: &[u8]) -> Option<i64> {
    let (neg, d) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, digits),
    };
    if d.is_empty() || d.len() > 19 {
        return None;
    }
    let mut v: i64 = 0;
    for &c in d {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(i64::from(c - b'0'))?;
    }
    Some(if neg { -v } else { v })
}

/// Reads a `<marker><len>\r\n` header at `at`: the length and the index
/// after the header.
fn header(buf: &[u8], at: usize, what: &'static str) -> Result<Option<(i64, usize)>, RespError> {
    let Some(end) = line_end(buf, at)? else { return Ok(None) };
    let n = parse_i64(&buf[at + 1..end]).ok_or(RespError::BadLength { what })?;
    Ok(Some((n, end + 2)))
}

/// Takes one request from the front of `buf`: its arguments, or
/// `Ok(None)` when more bytes are needed (then `buf` is untouched, and
/// its capacity is grown to hold a large bulk string that is on its way,
/// so that it arrives without being moved again). Empty inline lines and
/// empty or null arrays (`*0`, `*-1`) are skipped, as Redis skips them:
/// a request, when there is one, has at least one argument.
///
/// # Errors
///
/// Malformed input; the caller should reply with the error and close.
pub fn parse_request(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, RespError> {
    loop {
        let Some(&first) = buf.first() else { return Ok(None) };
        if first != b'*' {
            let Some(end) = line_end_inline(buf)? else { return Ok(None) };
            let line = buf.split_to(end.next).freeze();
            let args = split_inline(&line.slice(..end.len))?;
            if args.is_empty() {
                continue;
            }
            return Ok(Some(args));
        }
        match parse_multibulk(buf, limits)? {
            Some(args) if args.is_empty() => continue,
            other => return Ok(other),
        }
    }
}

struct InlineEnd {
    /// Length of the line without its terminator.
    len: usize,
    /// Index after the terminator.
    next: usize,
}

/// Inline commands end in "\n", optionally preceded by "\r".
fn line_end_inline(buf: &[u8]) -> Result<Option<InlineEnd>, RespError> {
    match memchr::memchr(b'\n', buf) {
        Some(i) => {
            let len = if i > 0 && buf[i - 1] == b'\r' { i - 1 } else { i };
            Ok(Some(InlineEnd { len, next: i + 1 }))
        }
        None if buf.len() > MAX_LINE => {
            Err(RespError::TooLong { what: "inline", len: buf.len() as u64, max: MAX_LINE as u64 })
        }
        None => Ok(None),
    }
}

/// Splits an inline command into words, with Redis's quoting: "..." with
/// backslash escapes (\n \r \t \b \a \\ \" \xHH) and '...' with \'.
fn split_inline(line: &Bytes) -> Result<Vec<Bytes>, RespError> {
    let s = &line[..];
    let mut args = Vec::new();
    let mut i = 0;
    while i < s.len() {
        while i < s.len() && s[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == s.len() {
            break;
        }
        match s[i] {
            q @ (b'"' | b'\'') => {
                let mut word = Vec::new();
                i += 1;
                loop {
                    let Some(&c) = s.get(i) else { return Err(RespError::Unbalanced) };
                    i += 1;
                    if c == q {
                        // A closing quote must end the word.
                        if s.get(i).is_some_and(|c| !c.is_ascii_whitespace()) {
                            return Err(RespError::Unbalanced);
                        }
                        break;
                    }
                    if c != b'\\' {
                        word.push(c);
                        continue;
                    }
                    let Some(&e) = s.get(i) else { return Err(RespError::Unbalanced) };
                    i += 1;
                    if q == b'\'' {
                        if e != b'\'' {
                            word.push(b'\\');
                        }
                        word.push(e);
                        continue;
                    }
                    match e {
                        b'n' => word.push(b'\n'),
                        b'r' => word.push(b'\r'),
                        b't' => word.push(b'\t'),
                        b'b' => word.push(8),
                        b'a' => word.push(7),
                        b'x' => match s
                            .get(i..i + 2)
                            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())
                        {
                            Some(v) => {
                                word.push(v);
                                i += 2;
                            }
                            None => word.push(b'x'),
                        },
                        other => word.push(other),
                    }
                }
                args.push(Bytes::from(word));
            }
            _ => {
                let start = i;
                while i < s.len() && !s[i].is_ascii_whitespace() {
                    i += 1;
                }
                args.push(line.slice(start..i));
            }
        }
    }
    Ok(args)
}

fn parse_multibulk(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, RespError> {
    let Some((count, mut at)) = header(buf, 0, "multibulk")? else { return Ok(None) };
    if count <= 0 {
        buf.advance(at);
        return Ok(Some(Vec::new()));
    }
    let count = count as u64;
    if count > limits.max_args as u64 {
        return Err(RespError::TooLong { what: "multibulk", len: count, max: limits.max_args as u64 });
    }
    // First pass: check that the whole request is here, and where each
    // argument lies. Nothing is allocated from the declared count until
    // the bytes that back it have arrived.
    let mut spans = Vec::new();
    for _ in 0..count {
        match buf.get(at) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(&got) => return Err(RespError::UnexpectedByte { expected: "$", got }),
        }
        let Some((len, body)) = header(buf, at, "bulk")? else { return Ok(None) };
        if len < 0 || len as u64 > limits.max_bulk as u64 {
            return Err(if len < 0 {
                RespError::BadLength { what: "bulk" }
            } else {
                RespError::TooLong { what: "bulk", len: len as u64, max: limits.max_bulk as u64 }
            });
        }
        let len = len as usize;
        let end = body + len;
        if buf.len() < end + 2 {
            // Make room for the rest of this argument at once.
            buf.reserve(end + 2 - buf.len());
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(RespError::MissingCrlf);
        }
        spans.push((body, end));
        at = end + 2;
    }
    let frame = buf.split_to(at).freeze();
    Ok(Some(spans.into_iter().map(|(s, e)| frame.slice(s..e)).collect()))
}

/// A reply, in RESP3's terms; [`Reply::encode`] folds it into RESP2 when
/// the connection speaks that.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`.
    Ok,
    /// A simple string (no CR or LF inside).
    Simple(String),
    /// An error line: the first word is its code (`ERR`, `WRONGTYPE`...).
    Error(String),
    /// An integer.
    Int(i64),
    /// A binary-safe string.
    Bulk(Bytes),
    /// The null value (a missing key).
    Nil,
    /// An array.
    Array(Vec<Reply>),
    /// A map: an array of pairs in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// A boolean: 1 or 0 in RESP2.
    Bool(bool),
    /// A double: a bulk string in RESP2.
    Double(f64),
}

impl Reply {
    /// An error reply with the `ERR` code.
    pub fn err(msg: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {msg}"))
    }

    /// A bulk string from a string.
    pub fn text(s: impl Into<String>) -> Reply {
        Reply::Bulk(Bytes::from(s.into()))
    }

    /// Writes the reply for protocol `proto` (2 or 3) into `out`.
    pub fn encode(&self, proto: u8, out: &mut Out) {
        match self {
            Reply::Ok => out.put(b"+OK\r\n"),
            Reply::Simple(s) => out.line(b'+', &clean(s)),
            Reply::Error(s) => out.line(b'-', &clean(s)),
            Reply::Int(n) => out.line(b':', &n.to_string()),
            Reply::Bulk(b) => {
                out.line(b'$', &b.len().to_string());
                out.bulk(b);
                out.put(b"\r\n");
            }
            Reply::Nil if proto >= 3 => out.put(b"_\r\n"),
            Reply::Nil => out.put(b"$-1\r\n"),
            Reply::Array(items) => {
                out.line(b'*', &items.len().to_string());
                for r in items {
                    r.encode(proto, out);
                }
            }
            Reply::Map(pairs) => {
                if proto >= 3 {
                    out.line(b'%', &pairs.len().to_string());
                } else {
                    out.line(b'*', &(pairs.len() * 2).to_string());
                }
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::Bool(b) if proto >= 3 => out.put(if *b { b"#t\r\n" } else { b"#f\r\n" }),
            Reply::Bool(b) => Reply::Int(i64::from(*b)).encode(proto, out),
            Reply::Double(d) if proto >= 3 => out.line(b',', &fmt_double(*d)),
            Reply::Double(d) => Reply::text(fmt_double(*d)).encode(proto, out),
        }
    }
}

fn fmt_double(d: f64) -> String {
    if d.is_nan() {
        "nan".into()
    } else if d.is_infinite() {
        if d > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        d.to_string()
    }
}

/// Simple strings and errors may not hold CR or LF.
fn clean(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(['\r', '\n']) { s.replace(['\r', '\n'], " ").into() } else { s.into() }
}

/// Encoded replies: a list of chunks to write in order, where small
/// pieces are gathered into one buffer and large bulk strings are chunks
/// of their own (shared with the store, not copied).
#[derive(Debug, Default)]
pub struct Out {
    chunks: Vec<Bytes>,
    cur: BytesMut,
    len: usize,
}

/// The gather buffer grows by at least this much at a time: one
/// allocation for a batch of small replies, not a doubling series of
/// them, each moving what was gathered so far.
const GATHER: usize = 64 << 10;

impl Out {
    fn put(&mut self, b: &[u8]) {
        if self.cur.capacity() - self.cur.len() < b.len() {
            self.cur.reserve(b.len().max(GATHER));
        }
        self.cur.extend_from_slice(b);
        self.len += b.len();
    }

    fn line(&mut self, marker: u8, body: &str) {
        self.cur.reserve(body.len() + 3);
        self.put(&[marker]);
        self.put(body.as_bytes());
        self.put(b"\r\n");
    }

    fn bulk(&mut self, b: &Bytes) {
        if b.len() < COPY_BELOW {
            self.put(b);
            return;
        }
        if !self.cur.is_empty() {
            self.chunks.push(self.cur.split().freeze());
        }
        self.chunks.push(b.clone());
        self.len += b.len();
    }

    /// Bytes encoded and not yet taken.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Takes everything encoded so far, as chunks to write in order.
    pub fn take(&mut self) -> Vec<Bytes> {
        if !self.cur.is_empty() {
            self.chunks.push(self.cur.split().freeze());
        }
        self.len = 0;
        std::mem::take(&mut self.chunks)
    }

    /// Everything encoded so far as one contiguous buffer (tests, small
    /// replies).
    pub fn to_vec(&mut self) -> Vec<u8> {
        self.take().concat()
    }
}

/// Reads one reply (RESP2 or RESP3) from the front of `buf`; `Ok(None)`
/// when more bytes are needed. Attributes (`|`) are skipped; pushes
/// (`>`) read as arrays; sets (`~`) as arrays; big numbers (`(`) and
/// verbatim strings (`=`) as bulk strings.
///
/// # Errors
///
/// Malformed input, or a bulk string over `limits.max_bulk`.
pub fn parse_reply(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Reply>, RespError> {
    parse_reply_hinted(buf, limits, &mut 0)
}

/// As [`parse_reply`]; when more bytes are needed, `need` is set to a
/// length the buffer must reach first (the end of the bulk string being
/// received), so that a reader can size its buffer once.
pub fn parse_reply_hinted(buf: &mut BytesMut, limits: &Limits, need: &mut usize) -> Result<Option<Reply>, RespError> {
    // Two passes: the first only checks that a whole reply is there
    // (copying nothing, so a large reply arriving in many reads costs one
    // scan per read, not one copy); the second builds it from the frozen
    // frame, bulk strings as zero-copy slices of it.
    let mut at = 0;
    *need = 0;
    if reply_at(buf, None, &mut at, limits, 0)?.is_none() {
        *need = at;
        return Ok(None);
    }
    let frame = buf.split_to(at).freeze();
    let mut at = 0;
    // The same bytes parse the same way, so this is never None.
    reply_at(&frame, Some(&frame), &mut at, limits, 0)
}

/// Parses the reply at `*at`. With `src` (the frozen buffer `buf` is) it
/// builds the reply; without, it only checks and returns placeholders.
fn reply_at(
    buf: &[u8],
    src: Option<&Bytes>,
    at: &mut usize,
    limits: &Limits,
    depth: usize,
) -> Result<Option<Reply>, RespError> {
    if depth > MAX_DEPTH {
        return Err(RespError::TooDeep);
    }
    let Some(&marker) = buf.get(*at) else { return Ok(None) };
    let Some(end) = line_end(buf, *at)? else { return Ok(None) };
    if end == *at {
        return Err(RespError::UnexpectedByte { expected: "a RESP type", got: marker });
    }
    let body = &buf[*at + 1..end];
    let text = || String::from_utf8_lossy(body).into_owned();
    let next = end + 2;
    let count = |what| -> Result<i64, RespError> { parse_i64(body).ok_or(RespError::BadLength { what }) };
    let reply = match marker {
        b'+' => Reply::Simple(text()),
        b'-' => Reply::Error(text()),
        b':' => Reply::Int(parse_i64(body).ok_or(RespError::BadNumber)?),
        b'_' => Reply::Nil,
        b'#' => Reply::Bool(body == b"t"),
        b',' => Reply::Double(text().parse().map_err(|_| RespError::BadNumber)?),
        b'(' => Reply::Bulk(Bytes::copy_from_slice(body)),
        b'$' | b'=' | b'!' => {
            let len = count("bulk")?;
            if len < 0 {
                *at = next;
                return Ok(Some(Reply::Nil));
            }
            if len as u64 > limits.max_bulk as u64 {
                return Err(RespError::TooLong { what: "bulk", len: len as u64, max: limits.max_bulk as u64 });
            }
            let stop = next + len as usize;
            if buf.len() < stop + 2 {
                // Where this bulk string ends: a size hint for the reader.
                *at = stop + 2;
                return Ok(None);
            }
            if &buf[stop..stop + 2] != b"\r\n" {
                return Err(RespError::MissingCrlf);
            }
            *at = stop + 2;
            let Some(src) = src else { return Ok(Some(Reply::Nil)) };
            let data = src.slice(next..stop);
            return Ok(Some(if marker == b'!' {
                Reply::Error(String::from_utf8_lossy(&data).into_owned())
            } else {
                Reply::Bulk(data)
            }));
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = count("multibulk")?;
            if n < 0 {
                *at = next;
                return Ok(Some(Reply::Nil));
            }
            let per = if matches!(marker, b'%' | b'|') { 2 } else { 1 };
            let items = (n as u64).saturating_mul(per);
            if items > limits.max_args as u64 {
                return Err(RespError::TooLong { what: "multibulk", len: items, max: limits.max_args as u64 });
            }
            *at = next;
            let mut got = Vec::new();
            for _ in 0..items {
                match reply_at(buf, src, at, limits, depth + 1)? {
                    Some(r) if src.is_some() => got.push(r),
                    Some(_) => {}
                    None => return Ok(None),
                }
            }
            return Ok(Some(match marker {
                b'|' => match reply_at(buf, src, at, limits, depth + 1)? {
                    // An attribute precedes the reply it describes.
                    Some(r) => r,
                    None => return Ok(None),
                },
                b'%' => {
                    let mut pairs = Vec::with_capacity(got.len() / 2);
                    let mut it = got.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                    Reply::Map(pairs)
                }
                _ => Reply::Array(got),
            }));
        }
        got => return Err(RespError::UnexpectedByte { expected: "a RESP type", got }),
    };
    *at = next;
    Ok(Some(reply))
}

/// Encodes a request (an array of bulk strings), as clients send it.
pub fn encode_request<A: AsRef<[u8]>>(args: &[A], out: &mut BytesMut) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(bytes: &[u8]) -> Result<Option<Vec<Bytes>>, RespError> {
        parse_request(&mut BytesMut::from(bytes), &Limits::default())
    }

    #[test]
    fn multibulk_requests_parse_and_wait_for_more() {
        let full = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n";
        assert_eq!(req(full).unwrap().unwrap(), vec![Bytes::from("SET"), Bytes::from("k"), Bytes::from("hello")]);
        for cut in 0..full.len() {
            let mut b = BytesMut::from(&full[..cut]);
            assert_eq!(parse_request(&mut b, &Limits::default()).unwrap(), None, "cut at {cut}");
            assert_eq!(b.len(), cut, "a partial request is left in place");
        }
        // Two pipelined requests come out one at a time.
        let mut b = BytesMut::from(&b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"[..]);
        assert_eq!(parse_request(&mut b, &Limits::default()).unwrap().unwrap().len(), 1);
        assert_eq!(parse_request(&mut b, &Limits::default()).unwrap().unwrap().len(), 2);
        assert!(b.is_empty());
    }

    #[test]
    fn empty_and_null_arrays_are_skipped_as_redis_skips_them() {
        let mut b = BytesMut::from(&b"*0\r\n*-1\r\n\r\n*1\r\n$4\r\nPING\r\n*0\r\n"[..]);
        let got = parse_request(&mut b, &Limits::default()).unwrap().unwrap();
        assert_eq!(got, vec![Bytes::from("PING")]);
        assert_eq!(parse_request(&mut b, &Limits::default()).unwrap(), None);
        assert!(b.is_empty(), "the trailing *0 was taken");
        assert_eq!(req(b"*0\r\n").unwrap(), None);
        assert_eq!(req(b"*-1\r\n*1\r\n").unwrap(), None, "the next request is not all here yet");
    }

    #[test]
    fn bad_requests_are_errors_not_panics() {
        for bad in [
            &b"*2\r\n:1\r\n"[..],
            b"*x\r\n",
            b"*1\r\n$-5\r\n",
            b"*1\r\n$3\r\nabcde\r\n",
            b"*1\r\n$3\n",
            b"*99999999999999999999\r\n",
            b"*1\r\n$9999999999999\r\n",
        ] {
            assert!(req(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let lim = Limits { max_bulk: 4, max_args: 2 };
        assert!(parse_request(&mut BytesMut::from(&b"*3\r\n"[..]), &lim).is_err());
        assert!(parse_request(&mut BytesMut::from(&b"*1\r\n$5\r\n"[..]), &lim).is_err());
        // An endless line is refused once it passes the limit.
        assert!(req(&vec![b'a'; MAX_LINE + 1]).is_err());
        assert!(req(&[b"*".as_slice(), &vec![b'1'; MAX_LINE + 1]].concat()).is_err());
    }

    #[test]
    fn inline_commands_split_like_redis() {
        let got = req(b"set k \"a b\\x41\\n\" 'it\\'s'\r\n").unwrap().unwrap();
        assert_eq!(got, vec![Bytes::from("set"), Bytes::from("k"), Bytes::from("a bA\n"), Bytes::from("it's")]);
        assert_eq!(req(b"\r\n\nPING\n").unwrap().unwrap(), vec![Bytes::from("PING")]);
        assert!(req(b"get \"k\n").is_err());
        assert!(req(b"get \"k\"x\n").is_err());
    }

    #[test]
    fn large_arguments_reserve_their_room() {
        let mut b = BytesMut::from(&b"*2\r\n$3\r\nSET\r\n$1000000\r\nxx"[..]);
        assert_eq!(parse_request(&mut b, &Limits::default()).unwrap(), None);
        assert!(b.capacity() >= 1_000_000);
    }

    fn enc(r: &Reply, proto: u8) -> Vec<u8> {
        let mut out = Out::default();
        r.encode(proto, &mut out);
        out.to_vec()
    }

    #[test]
    fn replies_fold_into_resp2() {
        let m = Reply::Map(vec![(Reply::text("a"), Reply::Bool(true)), (Reply::text("b"), Reply::Double(1.5))]);
        assert_eq!(enc(&m, 3), b"%2\r\n$1\r\na\r\n#t\r\n$1\r\nb\r\n,1.5\r\n");
        assert_eq!(enc(&m, 2), b"*4\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n$3\r\n1.5\r\n");
        assert_eq!(enc(&Reply::Nil, 2), b"$-1\r\n");
        assert_eq!(enc(&Reply::Nil, 3), b"_\r\n");
        assert_eq!(enc(&Reply::Error("ERR a\r\nb".into()), 2), b"-ERR a  b\r\n");
    }

    #[test]
    fn large_bulk_strings_are_not_copied() {
        let big = Bytes::from(vec![7u8; COPY_BELOW * 2]);
        let mut out = Out::default();
        Reply::Array(vec![Reply::Bulk(big.clone()), Reply::Int(1)]).encode(2, &mut out);
        let chunks = out.take();
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[1].as_ptr(), big.as_ptr());
    }

    #[test]
    fn replies_round_trip_through_the_client_parser() {
        let r = Reply::Array(vec![
            Reply::Simple("OK".into()),
            Reply::Int(-3),
            Reply::Bulk(Bytes::from_static(b"x\r\ny")),
            Reply::Nil,
            Reply::Error("ERR no".into()),
            Reply::Map(vec![(Reply::text("k"), Reply::Double(2.0))]),
            Reply::Bool(false),
        ]);
        for proto in [2, 3] {
            let bytes = enc(&r, proto);
            for cut in 0..bytes.len() {
                assert_eq!(parse_reply(&mut BytesMut::from(&bytes[..cut]), &Limits::default()).unwrap(), None);
            }
            let back = parse_reply(&mut BytesMut::from(&bytes[..]), &Limits::default()).unwrap().unwrap();
            if proto == 3 {
                assert_eq!(back, r);
            }
        }
        assert!(parse_reply(&mut BytesMut::from(&b"\r\n"[..]), &Limits::default()).is_err());
        let deep = "*1\r\n".repeat(MAX_DEPTH + 2);
        assert_eq!(parse_reply(&mut BytesMut::from(deep.as_bytes()), &Limits::default()), Err(RespError::TooDeep));
    }
}
