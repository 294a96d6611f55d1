//! The fast path's control protocol over its Unix socket: frames, the
//! requests a client sends and the replies it gets. No I/O: `server`
//! and `client` move the bytes (and, for [`Reply::Hello`], the region's
//! file descriptors beside them).
//!
//! # Format
//!
//! Every message is one frame; integers are little-endian.
//!
//! | offset | size | field  | meaning                                        |
//! |-------:|-----:|--------|------------------------------------------------|
//! | 0      | 4    | `len`  | bytes after this field (1 + the body's)        |
//! | 4      | 1    | `op`   | the message ([`op`])                           |
//! | 5      | ...  | body   | as the message says, nothing after it          |
//!
//! Bodies are built of: `ns` (u8 length, bytes), `key` (u16 length,
//! bytes), `count` (u32, then that many items), u64 values.
//!
//! | op     | message      | body                                                          |
//! |--------|--------------|---------------------------------------------------------------|
//! | `0x01` | Hello        | version u32, staging bytes wanted u64                         |
//! | `0x02` | Get          | ns, count, key × count                                        |
//! | `0x03` | Release      | count, lease u64 × count                                      |
//! | `0x04` | Exists       | ns, count, key × count                                        |
//! | `0x05` | Put          | ns, count, (key, staging offset u64, length u64) × count      |
//! | `0x06` | Lookup       | ns, count, key × count (a chain: how many lead it, present)   |
//! | `0x81` | Hello reply  | version u32, region bytes u64, staging bytes u64 (+ two fds)  |
//! | `0x82` | Get reply    | count, (status u8, lease u64, offset u64, length u64) × count |
//! | `0x83` | Release reply| released u32                                                  |
//! | `0x84` | Exists reply | count, u8 (0 absent, 1 present) × count                       |
//! | `0x85` | Put reply    | count, status u8 × count ([`PutStatus`])                      |
//! | `0x86` | Lookup reply | present u32                                                   |
//! | `0xFF` | Error        | message: u16 length, UTF-8                                    |

use thiserror::Error;

/// The protocol version this build speaks.
pub const VERSION: u32 = 1;

/// The largest frame either side accepts (`len`).
pub const MAX_FRAME: usize = 16 << 20;

/// The most keys (or leases) in one request.
pub const MAX_BATCH: usize = 65_536;

/// Bytes of a frame's `len` field.
pub const LEN_BYTES: usize = 4;

/// Message codes.
pub mod op {
    /// Hello: the version, and the staging region wanted.
    pub const HELLO: u8 = 0x01;
    /// Get: lease the blocks of keys.
    pub const GET: u8 = 0x02;
    /// Release: end leases.
    pub const RELEASE: u8 = 0x03;
    /// Exists: which keys are stored.
    pub const EXISTS: u8 = 0x04;
    /// Put: store blocks written in the staging region.
    pub const PUT: u8 = 0x05;
    /// Lookup: how many keys of a chain, from its start, are stored.
    pub const LOOKUP: u8 = 0x06;
    /// A reply's code: its request's with the top bit set.
    pub const REPLY: u8 = 0x80;
    /// Error: the request failed as a whole.
    pub const ERROR: u8 = 0xFF;
}

/// Why bytes are not a message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// The body ends before a field.
    #[error("the message ends inside {0}")]
    Short(&'static str),
    /// Bytes follow the last field.
    #[error("{0} bytes follow the message's last field")]
    Trailing(usize),
    /// An unknown message code.
    #[error("unknown message code {0:#04x}")]
    UnknownOp(u8),
    /// A frame larger than [`MAX_FRAME`] (or empty).
    #[error("a frame of {0} bytes (at most {MAX_FRAME}, at least 1)")]
    FrameSize(usize),
    /// More than [`MAX_BATCH`] items.
    #[error("a batch of {0} items (at most {MAX_BATCH})")]
    Batch(usize),
    /// A status byte no reply defines.
    #[error("status {0} is not defined")]
    Status(u8),
    /// An error message that is not UTF-8.
    #[error("the error message is not UTF-8")]
    Utf8,
    /// A miss (or no room) that carries a lease, offset or length.
    #[error("a get entry without a block carries a lease, offset or length")]
    StrayFields,
}

/// A request, borrowing its keys from the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    /// The client's version and the staging bytes it wants.
    Hello {
        /// Protocol version.
        version: u32,
        /// Staging region wanted, bytes (the server may give less).
        staging: u64,
    },
    /// Lease the blocks of `keys`.
    Get {
        /// Namespace.
        ns: &'a [u8],
        /// Keys.
        keys: Vec<&'a [u8]>,
    },
    /// End these leases.
    Release(Vec<u64>),
    /// Which of `keys` are stored.
    Exists {
        /// Namespace.
        ns: &'a [u8],
        /// Keys.
        keys: Vec<&'a [u8]>,
    },
    /// Store each key's block from the staging region.
    Put {
        /// Namespace.
        ns: &'a [u8],
        /// Key, staging offset, length.
        items: Vec<(&'a [u8], u64, u64)>,
    },
    /// How many keys of the chain, from its start, are stored.
    Lookup {
        /// Namespace.
        ns: &'a [u8],
        /// The chain.
        keys: Vec<&'a [u8]>,
    },
}

/// What one key of a Get found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Got {
    /// Not stored.
    Miss,
    /// Leased: the block lies at `offset..offset + len` of the region
    /// until the lease is released.
    Hit {
        /// Lease number, for Release.
        lease: u64,
        /// Offset in the shared region.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// Stored, but the region had no room to place it (read it over RESP
    /// or try again once leases are released).
    NoRoom,
}

/// What one key of a Put came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PutStatus {
    /// Stored.
    Stored = 0,
    /// DRAM (or the namespace's quota) is full of pinned or leased
    /// blocks, or the region has no room.
    Full = 1,
    /// The staging range is outside the staging region.
    BadRange = 2,
    /// The store refused it otherwise (a bad key, a failed tier).
    Failed = 3,
}

impl PutStatus {
    fn from_u8(v: u8) -> Result<PutStatus, WireError> {
        Ok(match v {
            0 => PutStatus::Stored,
            1 => PutStatus::Full,
            2 => PutStatus::BadRange,
            3 => PutStatus::Failed,
            v => return Err(WireError::Status(v)),
        })
    }
}

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Hello's answer; the region's and the staging region's file
    /// descriptors travel with it.
    Hello {
        /// Protocol version.
        version: u32,
        /// Shared region bytes (mapped read-only by the client).
        region: u64,
        /// Staging region bytes (mapped read-write).
        staging: u64,
    },
    /// One entry per key.
    Get(Vec<Got>),
    /// How many leases ended.
    Release(u32),
    /// One flag per key.
    Exists(Vec<bool>),
    /// One status per item.
    Put(Vec<PutStatus>),
    /// How many keys lead the chain.
    Lookup(u32),
    /// The request failed as a whole.
    Error(String),
}

/// Reads fields at checked offsets.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.b.len() < n {
            return Err(WireError::Short(what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        let mut a = [0; 4];
        a.copy_from_slice(self.take(4, what)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        let mut a = [0; 8];
        a.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(a))
    }
    fn ns(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u8("a namespace's length")?;
        self.take(n as usize, "a namespace")
    }
    fn key(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u16("a key's length")?;
        self.take(n as usize, "a key")
    }
    fn count(&mut self) -> Result<usize, WireError> {
        let n = self.u32("a count")? as usize;
        if n > MAX_BATCH {
            return Err(WireError::Batch(n));
        }
        Ok(n)
    }
    fn keys(&mut self) -> Result<Vec<&'a [u8]>, WireError> {
        let n = self.count()?;
        // Each key takes at least two bytes: a count larger than the
        // bytes left cannot be honest, and must not size an allocation.
        let mut v = Vec::with_capacity(n.min(self.b.len() / 2));
        for _ in 0..n {
            v.push(self.key()?);
        }
        Ok(v)
    }
    fn end(self) -> Result<(), WireError> {
        if self.b.is_empty() { Ok(()) } else { Err(WireError::Trailing(self.b.len())) }
    }
}

/// Builds a frame.
struct Writer {
    b: Vec<u8>,
}

impl Writer {
    fn new(op: u8) -> Writer {
        let mut b = Vec::with_capacity(64);
        b.extend_from_slice(&[0; LEN_BYTES]);
        b.push(op);
        Writer { b }
    }
    fn u8(&mut self, v: u8) {
        self.b.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.b.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.b.extend_from_slice(v);
    }
    /// A namespace: at most 255 bytes (longer ones are cut, and the
    /// store refuses what it does not know).
    fn ns(&mut self, ns: &[u8]) {
        let ns = &ns[..ns.len().min(255)];
        self.u8(ns.len() as u8);
        self.bytes(ns);
    }
    /// A key: at most 65,535 bytes (longer ones are cut).
    fn key(&mut self, k: &[u8]) {
        let k = &k[..k.len().min(u16::MAX as usize)];
        self.u16(k.len() as u16);
        self.bytes(k);
    }
    fn count(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.b.len() - LEN_BYTES).unwrap_or(u32::MAX);
        self.b[..LEN_BYTES].copy_from_slice(&len.to_le_bytes());
        self.b
    }
}

/// The length of the frame that starts `head` (its first [`LEN_BYTES`]
/// bytes): the bytes to read after them.
///
/// # Errors
///
/// [`WireError::FrameSize`] for an empty frame or one over [`MAX_FRAME`].
pub fn frame_len(head: [u8; LEN_BYTES]) -> Result<usize, WireError> {
    let n = u32::from_le_bytes(head) as usize;
    if n == 0 || n > MAX_FRAME {
        return Err(WireError::FrameSize(n));
    }
    Ok(n)
}

impl<'a> Request<'a> {
    /// Decodes a frame's contents (`op` and body, after `len`).
    ///
    /// # Errors
    ///
    /// [`WireError`] for anything that is not exactly one request.
    pub fn decode(frame: &'a [u8]) -> Result<Request<'a>, WireError> {
        let (&op, body) = frame.split_first().ok_or(WireError::Short("the message code"))?;
        let mut r = Reader { b: body };
        let req = match op {
            op::HELLO => Request::Hello { version: r.u32("the version")?, staging: r.u64("the staging size")? },
            op::GET => Request::Get { ns: r.ns()?, keys: r.keys()? },
            op::EXISTS => Request::Exists { ns: r.ns()?, keys: r.keys()? },
            op::LOOKUP => Request::Lookup { ns: r.ns()?, keys: r.keys()? },
            op::RELEASE => {
                let n = r.count()?;
                let mut v = Vec::with_capacity(n.min(r.b.len() / 8));
                for _ in 0..n {
                    v.push(r.u64("a lease")?);
                }
                Request::Release(v)
            }
            op::PUT => {
                let ns = r.ns()?;
                let n = r.count()?;
                let mut items = Vec::with_capacity(n.min(r.b.len() / 18));
                for _ in 0..n {
                    items.push((r.key()?, r.u64("a staging offset")?, r.u64("a length")?));
                }
                Request::Put { ns, items }
            }
            other => return Err(WireError::UnknownOp(other)),
        };
        r.end()?;
        Ok(req)
    }

    /// The request as a frame.
    pub fn encode(&self) -> Vec<u8> {
        let keyed = |code: u8, ns: &[u8], keys: &[&[u8]]| {
            let mut w = Writer::new(code);
            w.ns(ns);
            w.count(keys.len());
            for k in keys {
                w.key(k);
            }
            w.finish()
        };
        match self {
            Request::Hello { version, staging } => {
                let mut w = Writer::new(op::HELLO);
                w.u32(*version);
                w.u64(*staging);
                w.finish()
            }
            Request::Get { ns, keys } => keyed(op::GET, ns, keys),
            Request::Exists { ns, keys } => keyed(op::EXISTS, ns, keys),
            Request::Lookup { ns, keys } => keyed(op::LOOKUP, ns, keys),
            Request::Release(leases) => {
                let mut w = Writer::new(op::RELEASE);
                w.count(leases.len());
                for l in leases {
                    w.u64(*l);
                }
                w.finish()
            }
            Request::Put { ns, items } => {
                let mut w = Writer::new(op::PUT);
                w.ns(ns);
                w.count(items.len());
                for (k, off, len) in items {
                    w.key(k);
                    w.u64(*off);
                    w.u64(*len);
                }
                w.finish()
            }
        }
    }
}

impl Reply {
    /// Decodes a frame's contents (`op` and body, after `len`).
    ///
    /// # Errors
    ///
    /// [`WireError`] for anything that is not exactly one reply.
    pub fn decode(frame: &[u8]) -> Result<Reply, WireError> {
        let (&code, body) = frame.split_first().ok_or(WireError::Short("the message code"))?;
        let mut r = Reader { b: body };
        let reply = match code {
            c if c == op::REPLY | op::HELLO => Reply::Hello {
                version: r.u32("the version")?,
                region: r.u64("the region's size")?,
                staging: r.u64("the staging size")?,
            },
            c if c == op::REPLY | op::GET => {
                let n = r.count()?;
                let mut v = Vec::with_capacity(n.min(r.b.len() / 25));
                for _ in 0..n {
                    let status = r.u8("a status")?;
                    let (lease, offset, len) = (r.u64("a lease")?, r.u64("an offset")?, r.u64("a length")?);
                    let none = (lease, offset, len) == (0, 0, 0);
                    v.push(match status {
                        0 if none => Got::Miss,
                        1 => Got::Hit { lease, offset, len },
                        2 if none => Got::NoRoom,
                        0 | 2 => return Err(WireError::StrayFields),
                        s => return Err(WireError::Status(s)),
                    });
                }
                Reply::Get(v)
            }
            c if c == op::REPLY | op::RELEASE => Reply::Release(r.u32("a count")?),
            c if c == op::REPLY | op::EXISTS => {
                let n = r.count()?;
                let flags = r.take(n, "the flags")?;
                Reply::Exists(
                    flags
                        .iter()
                        .map(|&f| match f {
                            0 => Ok(false),
                            1 => Ok(true),
                            s => Err(WireError::Status(s)),
                        })
                        .collect::<Result<_, _>>()?,
                )
            }
            c if c == op::REPLY | op::PUT => {
                let n = r.count()?;
                let s = r.take(n, "the statuses")?;
                Reply::Put(s.iter().map(|&v| PutStatus::from_u8(v)).collect::<Result<_, _>>()?)
            }
            c if c == op::REPLY | op::LOOKUP => Reply::Lookup(r.u32("a count")?),
            op::ERROR => {
                let n = r.u16("the message's length")?;
                let m = r.take(n as usize, "the message")?;
                Reply::Error(String::from_utf8(m.to_vec()).map_err(|_| WireError::Utf8)?)
            }
            other => return Err(WireError::UnknownOp(other)),
        };
        r.end()?;
        Ok(reply)
    }

    /// The reply as a frame.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Hello { version, region, staging } => {
                let mut w = Writer::new(op::REPLY | op::HELLO);
                w.u32(*version);
                w.u64(*region);
                w.u64(*staging);
                w.finish()
            }
            Reply::Get(v) => {
                let mut w = Writer::new(op::REPLY | op::GET);
                w.count(v.len());
                for g in v {
                    let (s, lease, offset, len) = match *g {
                        Got::Miss => (0, 0, 0, 0),
                        Got::Hit { lease, offset, len } => (1, lease, offset, len),
                        Got::NoRoom => (2, 0, 0, 0),
                    };
                    w.u8(s);
                    w.u64(lease);
                    w.u64(offset);
                    w.u64(len);
                }
                w.finish()
            }
            Reply::Release(n) => {
                let mut w = Writer::new(op::REPLY | op::RELEASE);
                w.u32(*n);
                w.finish()
            }
            Reply::Exists(v) => {
                let mut w = Writer::new(op::REPLY | op::EXISTS);
                w.count(v.len());
                for &f in v {
                    w.u8(u8::from(f));
                }
                w.finish()
            }
            Reply::Put(v) => {
                let mut w = Writer::new(op::REPLY | op::PUT);
                w.count(v.len());
                for &s in v {
                    w.u8(s as u8);
                }
                w.finish()
            }
            Reply::Lookup(n) => {
                let mut w = Writer::new(op::REPLY | op::LOOKUP);
                w.u32(*n);
                w.finish()
            }
            Reply::Error(m) => {
                let mut w = Writer::new(op::ERROR);
                // Cut at a character boundary to at most 65,535 bytes.
                let mut end = m.len().min(u16::MAX as usize);
                while !m.is_char_boundary(end) {
                    end -= 1;
                }
                w.u16(end as u16);
                w.bytes(&m.as_bytes()[..end]);
                w.finish()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(frame: &[u8]) -> &[u8] {
        let n = frame_len(frame[..4].try_into().unwrap()).unwrap();
        assert_eq!(n, frame.len() - 4, "len counts what follows it");
        &frame[4..]
    }

    #[test]
    fn requests_round_trip() {
        let reqs = [
            Request::Hello { version: VERSION, staging: 64 << 20 },
            Request::Get { ns: b"m", keys: vec![b"a", b"bb", b""] },
            Request::Exists { ns: b"", keys: vec![] },
            Request::Lookup { ns: b"ns", keys: vec![b"k1", b"k2"] },
            Request::Release(vec![1, u64::MAX]),
            Request::Put { ns: b"m", items: vec![(b"k", 4096, 1 << 20)] },
        ];
        for r in reqs {
            let f = r.encode();
            assert_eq!(Request::decode(body(&f)).unwrap(), r);
        }
    }

    #[test]
    fn replies_round_trip() {
        let replies = [
            Reply::Hello { version: 1, region: 1 << 30, staging: 1 << 26 },
            Reply::Get(vec![Got::Miss, Got::Hit { lease: 7, offset: 4096, len: 100 }, Got::NoRoom]),
            Reply::Release(3),
            Reply::Exists(vec![true, false]),
            Reply::Put(vec![PutStatus::Stored, PutStatus::Full, PutStatus::BadRange, PutStatus::Failed]),
            Reply::Lookup(9),
            Reply::Error("no such thing".into()),
        ];
        for r in replies {
            let f = r.encode();
            assert_eq!(Reply::decode(body(&f)).unwrap(), r);
        }
    }

    #[test]
    fn the_layout_is_pinned() {
        let f = Request::Get { ns: b"n", keys: vec![b"ab"] }.encode();
        assert_eq!(f, [11, 0, 0, 0, 0x02, 1, b'n', 1, 0, 0, 0, 2, 0, b'a', b'b']);
        let f = Reply::Get(vec![Got::Hit { lease: 1, offset: 2, len: 3 }]).encode();
        assert_eq!(f.len(), 4 + 1 + 4 + 25);
        assert_eq!(&f[4..10], &[0x82, 1, 0, 0, 0, 1]);
        assert_eq!(&f[10..18], &1u64.to_le_bytes());
        assert_eq!(&f[18..26], &2u64.to_le_bytes());
        assert_eq!(&f[26..34], &3u64.to_le_bytes());
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        assert_eq!(frame_len([0; 4]), Err(WireError::FrameSize(0)));
        assert_eq!(frame_len(((MAX_FRAME + 1) as u32).to_le_bytes()), Err(WireError::FrameSize(MAX_FRAME + 1)));
        assert_eq!(Request::decode(&[]), Err(WireError::Short("the message code")));
        assert_eq!(Request::decode(&[0x7e]), Err(WireError::UnknownOp(0x7e)));
        // A count far past the bytes: refused without allocating for it.
        assert_eq!(Request::decode(&[0x02, 0, 0xff, 0xff, 0, 0]), Err(WireError::Short("a key's length")));
        assert_eq!(Request::decode(&[0x02, 0, 0xff, 0xff, 0xff, 0xff]), Err(WireError::Batch(u32::MAX as usize)));
        assert_eq!(Request::decode(&[0x02, 0, 0, 0, 0, 0, 9]), Err(WireError::Trailing(1)));
        assert_eq!(Request::decode(&[0x02, 5, b'a']), Err(WireError::Short("a namespace")));
        assert_eq!(Reply::decode(&[0x85, 1, 0, 0, 0, 9]), Err(WireError::Status(9)));
        let mut miss = Reply::Get(vec![Got::Miss]).encode();
        miss[10] = 1;
        assert_eq!(Reply::decode(&miss[4..]), Err(WireError::StrayFields), "one encoding per message");
        assert_eq!(Reply::decode(&[0xff, 2, 0, 0xc3, 0x28]), Err(WireError::Utf8));
        // Every prefix of a valid request is refused cleanly.
        let f = Request::Put { ns: b"m", items: vec![(b"key", 1, 2)] }.encode();
        for n in 0..f.len() - 4 {
            assert!(Request::decode(&f[4..4 + n]).is_err());
        }
    }
}
