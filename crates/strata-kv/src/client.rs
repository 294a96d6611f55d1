//! A small async client for the KV server (or any Redis server): one
//! connection, requests sent whole, replies read in order, with
//! pipelining for batches.
//!
//! ```no_run
//! # async fn f() -> Result<(), strata_kv::client::ClientError> {
//! let mut c = strata_kv::client::Client::connect("127.0.0.1:6380").await?;
//! c.set(b"block-0", b"kv bytes").await?;
//! assert_eq!(c.lookup(&[&b"block-0"[..], b"block-1"]).await?, 1);
//! # Ok(()) }
//! ```

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs};

use crate::resp::{Limits, Reply, RespError, encode_request, parse_reply_hinted};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The connection failed.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// The server sent bytes that are not RESP.
    #[error("bad reply: {0}")]
    Protocol(#[from] RespError),
    /// The server answered with an error.
    #[error("server error: {0}")]
    Server(String),
    /// The reply has another type than the command's.
    #[error("unexpected reply: {0:?}")]
    Unexpected(Reply),
}

/// One connection to a server.
pub struct Client {
    sock: TcpStream,
    buf: BytesMut,
    limits: Limits,
}

impl Client {
    /// Connects.
    ///
    /// # Errors
    ///
    /// The connection cannot be made.
    pub async fn connect(addr: impl ToSocketAddrs) -> Result<Client, ClientError> {
        let sock = TcpStream::connect(addr).await?;
        let _ = sock.set_nodelay(true);
        Ok(Client { sock, buf: BytesMut::with_capacity(64 << 10), limits: Limits::default() })
    }

    /// Sends one request and reads its reply (an error reply is returned
    /// as [`Reply::Error`], not as `Err`).
    ///
    /// # Errors
    ///
    /// The connection failed or the reply is not RESP.
    pub async fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply, ClientError> {
        Ok(self.pipeline(std::slice::from_ref(&args)).await?.remove(0))
    }

    /// Sends requests back to back, then reads their replies in order.
    ///
    /// # Errors
    ///
    /// The connection failed or a reply is not RESP.
    pub async fn pipeline<R: AsRef<[A]>, A: AsRef<[u8]>>(&mut self, reqs: &[R]) -> Result<Vec<Reply>, ClientError> {
        let mut out = BytesMut::new();
        for r in reqs {
            encode_request(r.as_ref(), &mut out);
        }
        self.sock.write_all(&out).await?;
        let mut replies = Vec::with_capacity(reqs.len());
        while replies.len() < reqs.len() {
            replies.push(self.read_reply().await?);
        }
        Ok(replies)
    }

    async fn read_reply(&mut self) -> Result<Reply, ClientError> {
        loop {
            let mut need = 0;
            if let Some(r) = parse_reply_hinted(&mut self.buf, &self.limits, &mut need)? {
                return Ok(r);
            }
            // Room for the bulk string being received (one allocation
            // for a large value), growing at least geometrically (an
            // array of large values), and at least a useful read.
            let room = need.saturating_sub(self.buf.len()).max(self.buf.len()).max(64 << 10);
            if self.buf.capacity() - self.buf.len() < room.min(16 << 10) {
                self.buf.reserve(room);
            }
            if self.sock.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
            }
        }
    }

    /// Calls and turns an error reply into `Err`.
    async fn ok_call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply, ClientError> {
        match self.call(args).await? {
            Reply::Error(e) => Err(ClientError::Server(e)),
            r => Ok(r),
        }
    }

    /// `AUTH user password` (`user` `None`: `AUTH password`, the
    /// default user).
    ///
    /// # Errors
    ///
    /// As [`Client::call`], or an error reply (`WRONGPASS`).
    pub async fn auth(&mut self, user: Option<&str>, password: &[u8]) -> Result<(), ClientError> {
        match user {
            Some(u) => self.ok_call(&[b"AUTH", u.as_bytes(), password]).await.map(drop),
            None => self.ok_call(&[&b"AUTH"[..], password]).await.map(drop),
        }
    }

    /// `GET`.
    ///
    /// # Errors
    ///
    /// As [`Client::call`], or an error reply.
    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Bytes>, ClientError> {
        bulk(self.ok_call(&[b"GET", key]).await?)
    }

    /// `SET`.
    ///
    /// # Errors
    ///
    /// As [`Client::call`], or an error reply.
    pub async fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), ClientError> {
        self.ok_call(&[b"SET", key, value]).await.map(drop)
    }

    /// `MGET`: values in the keys' order.
    ///
    /// # Errors
    ///
    /// As [`Client::call`], or an error reply.
    pub async fn mget<K: AsRef<[u8]>>(&mut self, keys: &[K]) -> Result<Vec<Option<Bytes>>, ClientError> {
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(keys.iter().map(AsRef::as_ref));
        match self.ok_call(&args).await? {
            Reply::Array(items) => items.into_iter().map(bulk).collect(),
            r => Err(ClientError::Unexpected(r)),
        }
    }

    /// `MSET`.
    ///
    /// # Errors
    ///
    /// As [`Client::call`], or an error reply.
    pub async fn mset<K: AsRef<[u8]>, V: AsRef<[u8]>>(&mut self, pairs: &[(K, V)]) -> Result<(), ClientError> {
        let mut args: Vec<&[u8]> = vec![b"MSET"];
        for (k, v) in pairs {
            args.push(k.as_ref());
            args.push(v.as_ref());
        }
        self.ok_call(&args).await.map(drop)
    }

    /// `KV.LOOKUP`: how many consecutive keys of `chain` are stored.
    ///
    /// # Errors
    ///
    /// As [`Client::call`], or an error reply.
    pub async fn lookup<K: AsRef<[u8]>>(&mut self, chain: &[K]) -> Result<usize, ClientError> {
        self.int_call(b"KV.LOOKUP", &[], chain).await
    }

    /// `KV.PREFETCH`: brings the chain into DRAM (leased for `lease_ms`
    /// when non-zero) within `deadline_ms`; how many are there.
    ///
    /// # Errors
    ///
    /// As [`Client::call`], or an error reply.
    pub async fn prefetch<K: AsRef<[u8]>>(
        &mut self,
        chain: &[K],
        deadline_ms: u64,
        lease_ms: u64,
    ) -> Result<usize, ClientError> {
        let d = deadline_ms.to_string();
        let l = lease_ms.to_string();
        let pre: Vec<&[u8]> =
            if lease_ms > 0 { vec![d.as_bytes(), b"LEASE", l.as_bytes()] } else { vec![d.as_bytes()] };
        self.int_call(b"KV.PREFETCH", &pre, chain).await
    }

    async fn int_call<K: AsRef<[u8]>>(&mut self, cmd: &[u8], pre: &[&[u8]], keys: &[K]) -> Result<usize, ClientError> {
        let mut args: Vec<&[u8]> = vec![cmd];
        args.extend_from_slice(pre);
        args.extend(keys.iter().map(AsRef::as_ref));
        match self.ok_call(&args).await? {
            Reply::Int(n) if n >= 0 => Ok(n as usize),
            r => Err(ClientError::Unexpected(r)),
        }
    }

    /// `KV.STATS` as name/value pairs.
    ///
    /// # Errors
    ///
    /// As [`Client::call`], or an error reply.
    pub async fn stats(&mut self) -> Result<Vec<(String, i64)>, ClientError> {
        let items = match self.ok_call(&[b"KV.STATS"]).await? {
            Reply::Map(pairs) => pairs,
            Reply::Array(flat) => {
                let mut it = flat.into_iter();
                std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
            }
            r => return Err(ClientError::Unexpected(r)),
        };
        items
            .into_iter()
            .map(|(k, v)| match (k, v) {
                (Reply::Bulk(k), Reply::Int(v)) => Ok((String::from_utf8_lossy(&k).into_owned(), v)),
                (k, _) => Err(ClientError::Unexpected(k)),
            })
            .collect()
    }
}

fn bulk(r: Reply) -> Result<Option<Bytes>, ClientError> {
    match r {
        Reply::Bulk(b) => Ok(Some(b)),
        Reply::Nil => Ok(None),
        Reply::Error(e) => Err(ClientError::Server(e)),
        r => Err(ClientError::Unexpected(r)),
    }
}
