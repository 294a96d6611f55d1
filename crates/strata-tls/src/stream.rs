//! [`Stream`]: a queue's connection, plain TCP or TLS over it, with the
//! same calls either way.
//!
//! The queues of the target and of the initiator do not only `.await`
//! reads and writes: they write vectored without waiting (and wait for
//! writability themselves), read without waiting after a readiness
//! event, and busy-poll. For TLS these are single `SSL_read` /
//! `SSL_write` calls on an OpenSSL stream whose socket side ([`Sock`])
//! reads and writes with tokio's `try_read` / `try_write`: a would-block
//! there clears tokio's readiness, so the caller's next readiness wait
//! sleeps until the socket changes. OpenSSL reports written bytes only
//! once their record is on the socket; a record cut short stays in
//! OpenSSL, which takes the same bytes again, moved or not, on the retry.
//! Bytes OpenSSL decrypted but the caller has not read yet count as
//! readable. (An earlier version went through `tokio-openssl` with a no-op
//! waker; its read loop spun forever on a would-block it could not see,
//! under 32 commands in flight.)
//!
//! TLS writes of several slices are copied into one buffer of up to
//! [`COALESCE`] bytes first, so that a PDU header and its data go out as
//! one record instead of a record (and a send) per slice.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf, Ready};
use tokio::net::TcpStream;

/// Most bytes gathered from several slices into one TLS write.
pub const COALESCE: usize = 256 * 1024;

/// Ciphertext read from the socket at once, at most.
const SOCK_READ: usize = 256 * 1024;
/// Ciphertext held for the socket, at most: one [`COALESCE`] write's
/// records and their overhead fit.
const SOCK_WRITE: usize = COALESCE + 64 * 1024;

/// The socket as OpenSSL's BIO sees it: non-blocking reads and writes
/// through tokio (`try_read` / `try_write`, which clear tokio's readiness
/// on would-block), with buffers on both sides so that one system call
/// moves many records (OpenSSL reads a record in two calls, header then
/// body, and writes one call per record).
#[derive(Debug)]
pub(crate) struct Sock {
    tcp: TcpStream,
    /// Set when the socket would have blocked since the flag was last
    /// cleared.
    blocked: bool,
    /// Ciphertext read and not yet taken by OpenSSL: `rbuf[rpos..]`.
    rbuf: Vec<u8>,
    rpos: usize,
    /// Ciphertext OpenSSL wrote that is not on the socket yet:
    /// `wbuf[wpos..]`.
    wbuf: Vec<u8>,
    wpos: usize,
}

impl Sock {
    pub(crate) fn new(tcp: TcpStream) -> Sock {
        Sock { tcp, blocked: false, rbuf: Vec::new(), rpos: 0, wbuf: Vec::new(), wpos: 0 }
    }

    fn would_block<T>(&mut self, r: io::Result<T>) -> io::Result<T> {
        if matches!(&r, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
            self.blocked = true;
        }
        r
    }

    /// Writes the held ciphertext to the socket; `WouldBlock` when some
    /// is left.
    fn flush_out(&mut self) -> io::Result<()> {
        while self.wpos < self.wbuf.len() {
            let r = self.tcp.try_write(&self.wbuf[self.wpos..]);
            match self.would_block(r) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        Ok(())
    }

    /// Whether ciphertext read from the socket waits for OpenSSL.
    fn has_input(&self) -> bool {
        self.rpos < self.rbuf.len()
    }

    /// Whether a whole TLS record (a 5-byte header, its length in bytes
    /// 3-4, then that many bytes) waits for OpenSSL.
    fn has_record(&self) -> bool {
        let held = &self.rbuf[self.rpos..];
        match held.get(3..5) {
            Some(&[hi, lo]) => held.len() >= 5 + (usize::from(hi) << 8 | usize::from(lo)),
            _ => false,
        }
    }
}

impl std::io::Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.has_input() {
            self.rbuf.clear();
            self.rpos = 0;
            self.rbuf.reserve(SOCK_READ);
            // A plain recv first: tokio's readiness cache only changes when
            // its reactor runs, and a busy-polling queue keeps it from
            // running. When that recv finds nothing, tokio's own read
            // clears the cache (or finds what just arrived), so that the
            // next readiness wait sleeps.
            let spare = self.rbuf.spare_capacity_mut();
            let r = match socket2::SockRef::from(&self.tcp).recv(spare) {
                Ok(n) => {
                    // SAFETY: `recv` initialised the first `n` spare bytes.
                    unsafe { self.rbuf.set_len(n) };
                    Ok(n)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.tcp.try_read_buf(&mut self.rbuf),
                Err(e) => Err(e),
            };
            if self.would_block(r)? == 0 {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.rbuf.len() - self.rpos);
        buf[..n].copy_from_slice(&self.rbuf[self.rpos..self.rpos + n]);
        self.rpos += n;
        Ok(n)
    }
}

impl std::io::Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.wbuf.len() - self.wpos + buf.len() > SOCK_WRITE {
            self.flush_out()?;
        }
        self.wbuf.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        // The TLS stream flushes the held ciphertext itself, where it can
        // wait for the socket.
        Ok(())
    }
}

/// A TLS connection: the OpenSSL stream over the socket, and the buffer
/// that gathers vectored writes.
pub struct TlsStream {
    ssl: openssl::ssl::SslStream<Sock>,
    stage: Vec<u8>,
    /// Bytes `SSL_write` took whose records are not all on the socket
    /// yet: reported written once they are, when the caller retries.
    unflushed: usize,
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream").field("peer", &self.ssl.get_ref().tcp.peer_addr().ok()).finish_non_exhaustive()
    }
}

/// What an OpenSSL call's error means for a non-blocking caller.
fn io_error(e: openssl::ssl::Error) -> io::Error {
    use openssl::ssl::ErrorCode;
    match e.code() {
        ErrorCode::WANT_READ | ErrorCode::WANT_WRITE => io::ErrorKind::WouldBlock.into(),
        _ => e.into_io_error().unwrap_or_else(io::Error::other),
    }
}

impl TlsStream {
    /// Runs the handshake of `ssl` (as the server when `server`) over
    /// `tcp`, waiting for the socket as OpenSSL asks.
    pub(crate) async fn handshake(
        ssl: openssl::ssl::Ssl,
        tcp: TcpStream,
        server: bool,
    ) -> Result<TlsStream, crate::TlsError> {
        use openssl::ssl::ErrorCode;
        let mut s = openssl::ssl::SslStream::new(ssl, Sock::new(tcp))?;
        loop {
            s.get_mut().blocked = false;
            let r = if server { s.accept() } else { s.connect() };
            // What the step wrote goes out before waiting for the peer.
            loop {
                match s.get_mut().flush_out() {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => s.get_ref().tcp.writable().await?,
                    Err(e) => return Err(e.into()),
                }
            }
            match r {
                Ok(()) => return Ok(TlsStream { ssl: s, stage: Vec::new(), unflushed: 0 }),
                Err(e) if e.code() == ErrorCode::WANT_READ && !s.get_ref().blocked => tokio::task::yield_now().await,
                Err(e) if e.code() == ErrorCode::WANT_READ => s.get_ref().tcp.readable().await?,
                Err(e) if e.code() == ErrorCode::WANT_WRITE => tokio::task::yield_now().await,
                Err(e) => return Err(crate::TlsError::Handshake(e.to_string())),
            }
        }
    }

    fn tcp(&self) -> &TcpStream {
        &self.ssl.get_ref().tcp
    }

    /// `SSL_read` into `buf` until it is full or no whole record is left
    /// in hand: every whole record one socket read brought in, so that a batch
    /// of commands is handled as one, as over plain TCP. `Ok(0)` at the
    /// end of the stream, `WouldBlock` when the socket has nothing.
    fn read_now(&mut self, buf: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
        use openssl::ssl::ErrorCode;
        // Whatever OpenSSL wrote while reading (an alert) goes out too.
        let _ = self.ssl.get_mut().flush_out();
        self.ssl.get_mut().blocked = false;
        let mut total = 0;
        while total < buf.len() {
            match self.ssl.ssl_read_uninit(&mut buf[total..]) {
                Ok(n) => total += n,
                Err(e) if total > 0 => {
                    // Handed out next time, if it was not just the end of
                    // what was in hand.
                    drop(e);
                    break;
                }
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => return Ok(0),
                Err(e) if e.code() == ErrorCode::SYSCALL && e.io_error().is_none() => return Ok(0),
                Err(e) => return Err(io_error(e)),
            }
            // On while OpenSSL holds decrypted bytes or a whole record is
            // in hand; a record still arriving is left for the next read.
            if self.ssl.ssl().pending() == 0 && !self.ssl.get_ref().has_record() {
                break;
            }
        }
        Ok(total)
    }

    /// One `SSL_write` of `buf` (at most [`COALESCE`] bytes of it): its
    /// records go to the socket in as few calls as it takes. Bytes are
    /// reported written once all their records are on the socket; until
    /// then `WouldBlock`, and the caller's retry (with the same bytes
    /// first) finishes the job.
    fn write_now(&mut self, buf: &[u8]) -> io::Result<usize> {
        let sock = self.ssl.get_mut();
        sock.blocked = false;
        sock.flush_out()?;
        if self.unflushed > 0 {
            // The retry repeats the bytes first given (or more after them).
            if buf.len() < self.unflushed {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a TLS write retried with fewer bytes than it was first given",
                ));
            }
            return Ok(std::mem::take(&mut self.unflushed));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let n = self.ssl.ssl_write(&buf[..buf.len().min(COALESCE)]).map_err(io_error)?;
        match self.ssl.get_mut().flush_out() {
            Ok(()) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.unflushed = n;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Writes what it can of `bufs` without waiting.
    fn write_vectored_now(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
        let Some(first) = nonempty.next() else { return Ok(0) };
        if nonempty.next().is_none() || first.len() >= COALESCE {
            return self.write_now(first);
        }
        // Rebuilt on every call from the caller's slices: a retry after a
        // would-block hands OpenSSL the same bytes (or more after them).
        let mut stage = std::mem::take(&mut self.stage);
        stage.clear();
        for b in bufs {
            let room = COALESCE - stage.len();
            if room == 0 {
                break;
            }
            stage.extend_from_slice(&b[..b.len().min(room)]);
        }
        let r = self.write_now(&stage);
        self.stage = stage;
        r
    }

    /// Runs `op` until it does not would-block, waiting for `interest` on
    /// the socket between tries.
    fn poll_op<T>(
        &mut self,
        cx: &mut Context<'_>,
        write: bool,
        mut op: impl FnMut(&mut TlsStream) -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        loop {
            match op(self) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !self.ssl.get_ref().blocked {
                        // OpenSSL wants to wait without the socket having
                        // blocked: try again on the next poll, not in a
                        // loop here.
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    let ready = if write { self.tcp().poll_write_ready(cx) } else { self.tcp().poll_read_ready(cx) };
                    match ready {
                        Poll::Ready(Ok(())) => continue,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => return Poll::Pending,
                    }
                }
                r => return Poll::Ready(r),
            }
        }
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

impl Stream {
    /// The TCP socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Tcp(t) => t,
            Stream::Tls(t) => t.tcp(),
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
            Stream::Tls(t) => {
                let len = buf.len();
                let n = t.read_now(buf.spare_capacity_mut())?;
                // SAFETY: `SSL_read` initialised the first `n` spare bytes.
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
            Stream::Tls(t) => t.read_now(spare)?,
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
            Stream::Tls(t) => t.write_vectored_now(bufs),
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
            && (t.ssl.ssl().pending() > 0 || t.ssl.get_ref().has_input())
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
            Stream::Tls(t) => {
                // SAFETY: `SSL_read` only writes, never de-initialises.
                let unfilled = unsafe { buf.unfilled_mut() };
                match t.poll_op(cx, false, |t| t.read_now(unfilled)) {
                    Poll::Ready(Ok(n)) => {
                        // SAFETY: `SSL_read` initialised the first `n` bytes.
                        unsafe { buf.assume_init(n) };
                        buf.advance(n);
                        Poll::Ready(Ok(()))
                    }
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(t) => Pin::new(t).poll_write(cx, buf),
            Stream::Tls(t) => t.poll_op(cx, true, |t| t.write_now(buf)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(t) => Pin::new(t).poll_write_vectored(cx, bufs),
            Stream::Tls(t) => t.poll_op(cx, true, |t| t.write_vectored_now(bufs)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(t) => Pin::new(t).poll_flush(cx),
            Stream::Tls(_) => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(t) => Pin::new(t).poll_shutdown(cx),
            Stream::Tls(t) => {
                // A close_notify, best effort, then the socket's FIN.
                let _ = t.ssl.shutdown();
                let _ = t.ssl.get_mut().flush_out();
                Pin::new(&mut t.ssl.get_mut().tcp).poll_shutdown(cx)
            }
        }
    }
}
