//! A blocking client of the fast path, for engines written in Rust, the
//! tests and `strata bench kv-shm`. The Python client
//! (`clients/python/strata_kv`) speaks the same protocol.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use thiserror::Error;

use super::wire::{self, Got, PutStatus, Reply, Request};

/// Why a fast-path call failed.
#[derive(Debug, Error)]
pub enum ShmError {
    /// The socket failed.
    #[error("fast path socket: {0}")]
    Io(#[from] io::Error),
    /// The server sent bytes that are not a reply.
    #[error("fast path: a bad reply: {0}")]
    Wire(#[from] wire::WireError),
    /// The server refused the request.
    #[error("fast path: {0}")]
    Refused(String),
    /// A reply of another kind, or of another length, than asked for.
    #[error("fast path: an unexpected reply: {0}")]
    Unexpected(String),
    /// The blocks to put do not fit the staging area.
    #[error("{need} bytes to put do not fit the {have}-byte staging area")]
    TooLarge {
        /// Bytes of one block.
        need: u64,
        /// Bytes of the staging area.
        have: u64,
    },
}

/// A read-only or read-write mapping of a descriptor the server sent.
struct Map {
    base: *mut u8,
    len: usize,
}

impl Map {
    fn new(fd: &OwnedFd, len: u64, write: bool) -> io::Result<Map> {
        let len = usize::try_from(len).map_err(|_| io::Error::other("region too large"))?;
        let prot = if write { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: a new shared mapping of `len` bytes of the memfd the
        // server sized to at least that; checked, unmapped in Drop.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map { base: base.cast(), len })
    }

    fn range(&self, offset: u64, len: u64) -> Option<(usize, usize)> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        (end <= self.len).then_some((start, end))
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// A block leased from the region ([`ShmClient::lease`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The server's number for it.
    pub id: u64,
    offset: u64,
    len: u64,
}

impl Lease {
    /// Where the block lies in the shared region.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The block's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty block.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A connection to the fast path.
pub struct ShmClient {
    sock: UnixStream,
    region: Map,
    staging: Map,
    frame: Vec<u8>,
}

// SAFETY: the mappings are plain process memory owned by the client; the
// raw pointers are only dereferenced through `&mut self` or `&self`
// methods that copy.
unsafe impl Send for ShmClient {}

impl ShmClient {
    /// Connects and says Hello, asking for `staging` bytes of staging.
    ///
    /// # Errors
    ///
    /// The socket, the handshake or a mapping failed.
    pub fn connect(path: &Path, staging: u64) -> Result<ShmClient, ShmError> {
        let mut sock = UnixStream::connect(path)?;
        sock.write_all(&Request::Hello { version: wire::VERSION, staging }.encode())?;
        let (frame, fds) = recv_frame_with_fds(&sock)?;
        let (region_len, staging_len) = match Reply::decode(&frame)? {
            Reply::Hello { region, staging, .. } => (region, staging),
            Reply::Error(m) => return Err(ShmError::Refused(m)),
            other => return Err(ShmError::Unexpected(format!("{other:?}"))),
        };
        let [region_fd, staging_fd] = <[OwnedFd; 2]>::try_from(fds)
            .map_err(|f| ShmError::Unexpected(format!("{} descriptors with Hello, not 2", f.len())))?;
        let region = Map::new(&region_fd, region_len, false)?;
        let staging = Map::new(&staging_fd, staging_len, true)?;
        Ok(ShmClient { sock, region, staging, frame: Vec::new() })
    }

    /// Bytes of the staging area.
    pub fn staging_bytes(&self) -> u64 {
        self.staging.len as u64
    }

    fn call(&mut self, req: &Request<'_>) -> Result<Reply, ShmError> {
        // The wire carries a namespace of at most 255 bytes and keys of
        // at most 65,535: refuse longer ones rather than cut them (a cut
        // one names another block).
        let (ns, keys): (&[u8], Vec<&[u8]>) = match req {
            Request::Get { ns, keys } | Request::Exists { ns, keys } | Request::Lookup { ns, keys } => {
                (ns, keys.clone())
            }
            Request::Put { ns, items } => (ns, items.iter().map(|i| i.0).collect()),
            Request::Hello { .. } | Request::Release(_) => (&[], Vec::new()),
        };
        if ns.len() > usize::from(u8::MAX) || keys.iter().any(|k| k.len() > usize::from(u16::MAX)) {
            return Err(ShmError::Refused("a namespace over 255 bytes or a key over 65,535 bytes".into()));
        }
        self.sock.write_all(&req.encode())?;
        let mut head = [0u8; wire::LEN_BYTES];
        self.sock.read_exact(&mut head)?;
        let n = wire::frame_len(head)?;
        self.frame.resize(n, 0);
        self.sock.read_exact(&mut self.frame)?;
        match Reply::decode(&self.frame)? {
            Reply::Error(m) => Err(ShmError::Refused(m)),
            r => Ok(r),
        }
    }

    /// Which of `keys` are stored.
    ///
    /// # Errors
    ///
    /// As [`ShmClient::connect`], or a refusal.
    pub fn exists(&mut self, ns: &[u8], keys: &[&[u8]]) -> Result<Vec<bool>, ShmError> {
        match self.call(&Request::Exists { ns, keys: keys.to_vec() })? {
            Reply::Exists(v) if v.len() == keys.len() => Ok(v),
            other => Err(ShmError::Unexpected(format!("{other:?}"))),
        }
    }

    /// How many keys of `chain`, from its start, are stored.
    ///
    /// # Errors
    ///
    /// As [`ShmClient::exists`].
    pub fn lookup(&mut self, ns: &[u8], chain: &[&[u8]]) -> Result<usize, ShmError> {
        match self.call(&Request::Lookup { ns, keys: chain.to_vec() })? {
            Reply::Lookup(n) => Ok(n as usize),
            other => Err(ShmError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Leases the blocks of `keys`: each stays where it lies in the
    /// region, unchanged, until released ([`ShmClient::leased`] reads it
    /// in place). `None` for a miss, or a block the region had no room to
    /// place.
    ///
    /// # Errors
    ///
    /// As [`ShmClient::exists`]; a block outside the region is
    /// [`ShmError::Unexpected`] (its lease is released first).
    pub fn lease(&mut self, ns: &[u8], keys: &[&[u8]]) -> Result<Vec<Option<Lease>>, ShmError> {
        let got = match self.call(&Request::Get { ns, keys: keys.to_vec() })? {
            Reply::Get(v) if v.len() == keys.len() => v,
            other => return Err(ShmError::Unexpected(format!("{other:?}"))),
        };
        let leases: Vec<Option<Lease>> = got
            .iter()
            .map(|g| match *g {
                Got::Hit { lease, offset, len } => Some(Lease { id: lease, offset, len }),
                Got::Miss | Got::NoRoom => None,
            })
            .collect();
        if let Some(bad) = leases.iter().flatten().find(|l| self.region.range(l.offset, l.len).is_none()) {
            let bad = *bad;
            self.release(&leases.iter().flatten().copied().collect::<Vec<_>>())?;
            return Err(ShmError::Unexpected(format!("a block at {}+{} outside the region", bad.offset, bad.len)));
        }
        Ok(leases)
    }

    /// The bytes of a block this client leased (and has not released).
    pub fn leased(&self, lease: &Lease) -> &[u8] {
        let (start, end) = self.region.range(lease.offset, lease.len).unwrap_or((0, 0));
        // SAFETY: start..end lies inside the read-only mapping (checked
        // when leased; (0, 0) otherwise), and the server never writes a
        // block's extent while it is leased: the borrow of `self` ends
        // before `release` (which takes `&mut self`) can run.
        unsafe { std::slice::from_raw_parts(self.region.base.add(start), end - start) }
    }

    /// Ends `leases`; returns how many were held.
    ///
    /// # Errors
    ///
    /// As [`ShmClient::exists`].
    pub fn release(&mut self, leases: &[Lease]) -> Result<u32, ShmError> {
        if leases.is_empty() {
            return Ok(0);
        }
        match self.call(&Request::Release(leases.iter().map(|l| l.id).collect()))? {
            Reply::Release(n) => Ok(n),
            other => Err(ShmError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Copies the blocks of `keys` into `bufs` (one per key, at least as
    /// long as its block): the length of each block found, `None` for a
    /// miss (or a block the region had no room to place). A block longer
    /// than its buffer is an error, after every lease is released.
    ///
    /// # Errors
    ///
    /// As [`ShmClient::lease`]; [`ShmError::TooLarge`] for a short
    /// buffer.
    pub fn get_into(
        &mut self,
        ns: &[u8],
        keys: &[&[u8]],
        bufs: &mut [&mut [u8]],
    ) -> Result<Vec<Option<usize>>, ShmError> {
        let leases = self.lease(ns, keys)?;
        let mut out = Vec::with_capacity(leases.len());
        let mut short = None;
        for (l, buf) in leases.iter().zip(bufs.iter_mut()) {
            match l {
                Some(l) => {
                    let b = self.leased(l);
                    match buf.get_mut(..b.len()) {
                        Some(dst) => {
                            dst.copy_from_slice(b);
                            out.push(Some(b.len()));
                        }
                        None => {
                            short = Some(ShmError::TooLarge { need: l.len, have: buf.len() as u64 });
                            out.push(None);
                        }
                    }
                }
                None => out.push(None),
            }
        }
        self.release(&leases.iter().flatten().copied().collect::<Vec<_>>())?;
        match short {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Stores `blocks` under `keys`, through the staging area (as many
    /// Puts as it takes): each key's status.
    ///
    /// # Errors
    ///
    /// As [`ShmClient::exists`]; [`ShmError::TooLarge`] for a block
    /// larger than the staging area.
    pub fn put(&mut self, ns: &[u8], keys: &[&[u8]], blocks: &[&[u8]]) -> Result<Vec<PutStatus>, ShmError> {
        let mut out = Vec::with_capacity(keys.len());
        let mut i = 0;
        while i < keys.len().min(blocks.len()) {
            let mut at = 0u64;
            let mut items = Vec::new();
            while i < keys.len().min(blocks.len()) {
                let len = blocks[i].len() as u64;
                if len > self.staging.len as u64 {
                    return Err(ShmError::TooLarge { need: len, have: self.staging.len as u64 });
                }
                let Some((start, end)) = self.staging.range(at, len) else { break };
                // SAFETY: start..end lies inside the read-write staging
                // mapping (checked); the server reads it only while it
                // handles the Put this loop sends after the copy.
                unsafe { std::ptr::copy_nonoverlapping(blocks[i].as_ptr(), self.staging.base.add(start), end - start) };
                items.push((keys[i], at, len));
                at = (end as u64).div_ceil(64) * 64;
                i += 1;
            }
            match self.call(&Request::Put { ns, items: items.clone() })? {
                Reply::Put(v) if v.len() == items.len() => out.extend(v),
                other => return Err(ShmError::Unexpected(format!("{other:?}"))),
            }
        }
        Ok(out)
    }
}

/// Reads one frame, with the descriptors sent beside its first bytes.
fn recv_frame_with_fds(sock: &UnixStream) -> Result<(Vec<u8>, Vec<OwnedFd>), ShmError> {
    let mut head = [0u8; wire::LEN_BYTES];
    let (got, fds) = recvmsg_fds(sock.as_raw_fd(), &mut head)?;
    let mut s = sock;
    if got < head.len() {
        s.read_exact(&mut head[got..])?;
    }
    let n = wire::frame_len(head)?;
    let mut frame = vec![0; n];
    s.read_exact(&mut frame)?;
    Ok((frame, fds))
}

/// One `recvmsg` into `buf`, taking up to 4 descriptors sent with it.
fn recvmsg_fds(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    const MAX_FDS: usize = 4;
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: msg points at live buffers; the result is checked.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the socket"));
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of
    // well-formed headers; CMSG_FIRSTHDR/NXTHDR walk them and stop at
    // null, and each SCM_RIGHTS payload holds whole descriptors that are
    // now this process's to own.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let payload = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..payload / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, fds))
}
