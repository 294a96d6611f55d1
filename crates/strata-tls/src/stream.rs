//! [`Stream`]: a queue's connection, plain TCP or TLS over it, with the
//! same calls either way.
//!
//! The queues of the target and of the initiator do not only `.await`
//! reads and writes: they write vectored without waiting (and wait for
//! writability themselves), read without waiting after a readiness
//! event, and busy-poll. For TLS these become one poll of the
//! `tokio_openssl` stream with a no-op waker, which is exact: a would-block
//! from the socket clears tokio's readiness, so the next readiness wait
//! sleeps until the socket changes, and OpenSSL reports written bytes only
//! once their record is on the socket (a record cut short stays in
//! OpenSSL, which takes the same bytes again, moved or not, on the retry).
//! Bytes OpenSSL decrypted but the caller has not read yet count as
//! readable.
//!
//! TLS writes of several slices are copied into one buffer of up to
//! [`COALESCE`] bytes first, so that a PDU header and its data go out as
//! one record instead of a record (and a send) per slice.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf, Ready};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

/// Most bytes gathered from several slices into one TLS write.
pub const COALESCE: usize = 256 * 1024;

/// A TLS connection: the OpenSSL stream and the buffer that gathers
/// vectored writes.
pub struct TlsStream {
    ssl: SslStream<TcpStream>,
    stage: Vec<u8>,
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream").field("peer", &self.ssl.get_ref().peer_addr().ok()).finish_non_exhaustive()
    }
}

impl TlsStream {
    pub(crate) fn new(ssl: SslStream<TcpStream>) -> TlsStream {
        TlsStream { ssl, stage: Vec::new() }
    }

    fn poll_write_vectored(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
        let Some(first) = nonempty.next() else { return Poll::Ready(Ok(0)) };
        if nonempty.next().is_none() || first.len() >= COALESCE {
            return Pin::new(&mut self.ssl).poll_write(cx, first);
        }
        // Rebuilt on every call from the caller's slices: a retry after a
        // would-block hands OpenSSL the same bytes (or more after them).
        self.stage.clear();
        for b in bufs {
            let room = COALESCE - self.stage.len();
            if room == 0 {
                break;
            }
            self.stage.extend_from_slice(&b[..b.len().min(room)]);
        }
        Pin::new(&mut self.ssl).poll_write(cx, &self.stage)
    }
}

/// A queue's connection: plain TCP, or TLS over TCP.
#[derive(Debug)]
pub enum Stream {
    /// Plain NVMe/TCP.
    Tcp(TcpStream),
    /// NVMe/TCP inside TLS 1.3.
    Tls(Box<TlsStream>),
}

/// Polls `f` once with a waker that does nothing: `Pending` becomes
/// `WouldBlock`.
fn once<T>(f: impl FnOnce(&mut Context<'_>) -> Poll<io::Result<T>>) -> io::Result<T> {
    let mut cx = Context::from_waker(Waker::noop());
    match f(&mut cx) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
    }
}

impl Stream {
    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Tcp(t) => t,
            Stream::Tls(t) => t.ssl.get_ref(),
        }
    }

    /// Whether this is a TLS connection.
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// Reads what is there into `buf`'s spare capacity without waiting;
    /// `WouldBlock` when nothing is.
    ///
    /// # Errors
    ///
    /// The socket's (or TLS's) error.
    pub fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            Stream::Tcp(t) => t.try_read_buf(buf),
            Stream::Tls(_) => {
                let len = buf.len();
                let spare = buf.spare_capacity_mut();
                let mut rb = ReadBuf::uninit(spare);
                once(|cx| Pin::new(&mut *self).poll_read(cx, &mut rb))?;
                let n = rb.filled().len();
                // SAFETY: `poll_read` initialised the first `n` spare bytes
                // (ReadBuf tracks what it filled).
                unsafe { buf.set_len(len + n) };
                Ok(n)
            }
        }
    }

    /// Reads at most `max` bytes onto the end of `buf` (reserving room)
    /// with a plain `recv`, bypassing tokio's readiness cache (which only
    /// changes when the reactor runs): for busy polling. On TLS, one poll
    /// of the TLS stream.
    ///
    /// # Errors
    ///
    /// The socket's (or TLS's) error; `WouldBlock` when nothing is there.
    pub fn recv_now(&mut self, buf: &mut BytesMut, max: usize) -> io::Result<usize> {
        buf.reserve(max);
        let len = buf.len();
        let spare = &mut buf.spare_capacity_mut()[..max];
        let n = match self {
            Stream::Tcp(t) => socket2::SockRef::from(&*t).recv(spare)?,
            Stream::Tls(_) => {
                let mut rb = ReadBuf::uninit(spare);
                once(|cx| Pin::new(&mut *self).poll_read(cx, &mut rb))?;
                rb.filled().len()
            }
        };
        // SAFETY: `recv` and `poll_read` initialised the first `n` of the
        // spare bytes they were given.
        unsafe { buf.set_len(len + n) };
        Ok(n)
    }

    /// Writes as much of `bufs` as goes without waiting.
    ///
    /// # Errors
    ///
    /// The socket's (or TLS's) error; `WouldBlock` when nothing went.
    pub fn try_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(t) => t.try_write_vectored(bufs),
            Stream::Tls(t) => once(|cx| t.poll_write_vectored(cx, bufs)),
        }
    }

    /// Waits until the connection is ready for `interest`. Bytes TLS has
    /// decrypted and not handed out make it readable at once.
    ///
    /// # Errors
    ///
    /// The socket's error.
    pub async fn ready(&self, interest: Interest) -> io::Result<Ready> {
        if let Stream::Tls(t) = self
            && interest.is_readable()
            && t.ssl.ssl().pending() > 0
        {
            return Ok(Ready::READABLE);
        }
        self.tcp().ready(interest).await
    }

    /// Waits until the socket takes more bytes.
    ///
    /// # Errors
    ///
    /// The socket's error.
    pub async fn writable(&self) -> io::Result<()> {
        self.tcp().writable().await
    }
}

impl From<TcpStream> for Stream {
    fn from(t: TcpStream) -> Stream {
        Stream::Tcp(t)
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(t) => Pin::new(t).poll_read(cx, buf),
            Stream::Tls(t) => Pin::new(&mut t.ssl).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(t) => Pin::new(t).poll_write(cx, buf),
            Stream::Tls(t) => Pin::new(&mut t.ssl).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(t) => Pin::new(t).poll_write_vectored(cx, bufs),
            Stream::Tls(t) => t.poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(t) => Pin::new(t).poll_flush(cx),
            Stream::Tls(t) => Pin::new(&mut t.ssl).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(t) => Pin::new(t).poll_shutdown(cx),
            Stream::Tls(t) => Pin::new(&mut t.ssl).poll_shutdown(cx),
        }
    }
}
