"""strata's KV-cache store from another host: the Redis protocol, pipelined
over several connections, each block read straight into its buffer.

An engine on a GPU host that does not run ``strata kv serve`` itself
reaches the store over TCP. A general Redis client (redis-py) sends one
command, waits for its reply, and builds a ``bytes`` object per value that
the engine then copies again: about 1 GB/s on two cores, whatever the
number of connections. This client instead

- splits a batch over ``connections`` sockets, each served by its own
  thread (a socket call releases the GIL, so the kernel copies of several
  connections overlap);
- sends each connection's commands in windows without waiting for the
  replies in between (pipelining), so the server always has the next
  command at hand;
- reads each bulk reply's header, then the value with ``recv_into``
  straight into the caller's buffer (a NumPy array, ``bytearray``, a pinned
  tensor's NumPy view): one copy, the kernel's;
- sends a stored block from the caller's buffer with ``sendmsg`` (no
  copy into a command string);
- asks for a prefix chain's cached length in one command (``KV.LOOKUP``),
  not one ``EXISTS`` per block.

The method names are those of the same-host client (``StrataKV``), so an
engine switches between them by construction alone:

    from strata_kv.net import NetKV
    kv = NetKV("10.0.0.5:6380", namespace=b"llama-8b", connections=4)
    kv.put([b"k1", b"k2"], [block1, block2])           # -> [True, True]
    n = kv.batch_exists([b"k1", b"k2", b"k3"])          # 2: a prefix
    kv.get_into([b"k1", b"k2"], [out1, out2])           # -> [len, len]

Pure Python; NumPy optional. Thread-safe between calls of one thread; give
each engine thread its own ``NetKV`` (as with a socket).
"""

import concurrent.futures
import socket

__all__ = ["NetKV", "NetError"]

# Commands sent before their replies are read, per connection. GET
# requests are small: a window's requests fit the socket buffers, so the
# server never waits on us while we wait on it.
GET_WINDOW = 64
# Bytes of SET payload sent before their replies are read.
PUT_WINDOW_BYTES = 16 << 20


class NetError(Exception):
    """The server answered an error, or a connection failed."""


def _bytes_view(buf):
    mv = memoryview(buf)
    if not mv.c_contiguous:
        raise ValueError("buffers must be C-contiguous")
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


def _command(*args):
    """One RESP array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else bytes(a)
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


def _split(n, parts):
    """``parts`` contiguous ranges covering ``range(n)``, none empty."""
    parts = max(1, min(parts, n))
    step, extra = divmod(n, parts)
    out, at = [], 0
    for i in range(parts):
        size = step + (1 if i < extra else 0)
        out.append(range(at, at + size))
        at += size
    return out


def _pipelined(conn, idx, command, read):
    """Sends ``command(i)`` for each ``i`` of ``idx`` in windows of
    GET_WINDOW, the next window sent before the replies of the one before
    it are read, and calls ``read(i)`` for each reply in order. The
    requests in flight stay small, so neither side can block the other
    (the server waits to write replies only while we read them)."""
    windows = [idx[w : w + GET_WINDOW] for w in range(0, len(idx), GET_WINDOW)]
    if not windows:
        return
    conn.send([b"".join(command(i) for i in windows[0])])
    for n, win in enumerate(windows):
        if n + 1 < len(windows):
            conn.send([b"".join(command(i) for i in windows[n + 1])])
        for i in win:
            read(i)


class _Conn:
    """One RESP2 connection with its own read buffer."""

    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, 4 << 20)
            except OSError:
                pass
        self.buf = bytearray()
        self.pos = 0

    # -- reading -------------------------------------------------------

    def _fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise NetError("the server closed the connection")
        if self.pos:
            del self.buf[: self.pos]
            self.pos = 0
        self.buf += chunk

    def _line(self):
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                line = bytes(self.buf[self.pos : end])
                self.pos = end + 2
                return line
            if len(self.buf) - self.pos > 1 << 20:
                raise NetError("a reply line longer than 1 MiB")
            self._fill()

    def _into(self, dst):
        """Fills ``dst`` (a byte memoryview) from the stream."""
        have = min(len(self.buf) - self.pos, len(dst))
        if have:
            dst[:have] = self.buf[self.pos : self.pos + have]
            self.pos += have
        got = have
        while got < len(dst):
            n = self.sock.recv_into(dst[got:])
            if n == 0:
                raise NetError("the server closed the connection")
            got += n

    def _skip(self, n):
        scratch = memoryview(bytearray(min(n, 1 << 20)))
        while n:
            step = min(n, len(scratch))
            self._into(scratch[:step])
            n -= step

    def _crlf(self):
        if self._line() != b"":
            raise NetError("a bulk reply not ended by CRLF")

    def reply(self):
        """One reply as a Python value (simple string, integer, bulk as
        bytes, array as list, None for nil); an error reply as NetError
        (returned, not raised, so a pipeline's other replies are read)."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            return NetError(rest.decode("utf-8", "replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            out = bytearray(n)
            self._into(memoryview(out))
            self._crlf()
            return bytes(out)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise NetError(f"a reply starting {line[:16]!r}")

    def bulk_into(self, dst):
        """A bulk reply read into ``dst``: its length, None for nil, or a
        NetError / ValueError returned (the reply is consumed either way,
        so the connection stays in step)."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            return NetError(rest.decode("utf-8", "replace"))
        if kind != b"$":
            raise NetError(f"a GET answered {line[:16]!r}")
        n = int(rest)
        if n < 0:
            return None
        if dst is None or dst.readonly or len(dst) < n:
            self._skip(n)
            self._crlf()
            size = "no buffer" if dst is None else f"a buffer of {len(dst)} bytes"
            return ValueError(f"{size} for a block of {n} (or read-only)")
        self._into(dst[:n])
        self._crlf()
        return n

    # -- writing -------------------------------------------------------

    def send(self, parts):
        """Sends buffers in order with as few system calls as it can."""
        views = [memoryview(p).cast("B") for p in parts if len(p)]
        while views:
            sent = self.sock.sendmsg(views[:512])
            while sent:
                if sent >= len(views[0]):
                    sent -= len(views[0])
                    views.pop(0)
                else:
                    views[0] = views[0][sent:]
                    sent = 0

    def call(self, *args):
        self.send([_command(*args)])
        r = self.reply()
        if isinstance(r, NetError):
            raise r
        return r

    def close(self):
        self.sock.close()


class NetKV:
    """Connections to ``strata kv serve``'s Redis port.

    ``address`` is ``"host:port"`` (``"[v6]:port"`` for IPv6) or a
    ``(host, port)`` tuple; ``username`` / ``password`` authenticate each
    connection when the server has users; ``namespace`` is selected on each
    (``KV.NS``).
    """

    def __init__(self, address, namespace=b"", connections=4, username=None, password=None, timeout=30.0):
        if isinstance(address, str):
            host, _, port = address.rpartition(":")
            host = host.strip("[]") or "127.0.0.1"
            address = (host, int(port))
        if connections < 1:
            raise ValueError("at least one connection")
        self.namespace = namespace.encode() if isinstance(namespace, str) else bytes(namespace)
        self._conns = []
        self._pool = None
        try:
            for _ in range(connections):
                c = _Conn(address[0], address[1], timeout)
                self._conns.append(c)
                if password is not None:
                    auth = ("AUTH", username, password) if username else ("AUTH", password)
                    c.call(*auth)
                if self.namespace:
                    c.call("KV.NS", self.namespace)
        except Exception:
            self.close()
            raise

    def _each(self, work):
        """Runs ``work[i](connection i)`` for each share, in parallel on
        the client's threads (one per connection, made once); re-raises
        the first failure after every share has finished, so no thread is
        still using a connection when the call returns."""
        if len(work) == 1:
            work[0](self._conns[0])
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(self._conns))
        futures = [self._pool.submit(fn, self._conns[i]) for i, fn in enumerate(work)]
        errors = [f.exception() for f in futures]
        for e in errors:
            if e is not None:
                raise e

    # -- lookups --------------------------------------------------------

    def batch_exists(self, keys):
        """How many of ``keys``, from the first, are stored in any tier:
        one ``KV.LOOKUP`` (SGLang HiCache's ``batch_exists``)."""
        keys = [bytes(k) for k in keys]
        if not keys:
            return 0
        return self._conns[0].call("KV.LOOKUP", *keys)

    def exists(self, keys):
        """Which of ``keys`` are stored: a list of bools (pipelined
        ``EXISTS``, one per key)."""
        keys = [bytes(k) for k in keys]
        replies = [None] * len(keys)

        def read(i):
            replies[i] = self._conns[0].reply()  # all read: the connection stays in step

        _pipelined(self._conns[0], list(range(len(keys))), lambda i: _command("EXISTS", keys[i]), read)
        for r in replies:
            if isinstance(r, NetError):
                raise r
        return [r == 1 for r in replies]

    # -- loads ----------------------------------------------------------

    def get_into(self, keys, buffers):
        """Reads each key's block into its buffer (C-contiguous, writable,
        at least as long as the block): the block's length, or None for a
        miss. The batch is shared among the connections, each pipelined."""
        keys = [bytes(k) for k in keys]
        if len(buffers) != len(keys):
            raise ValueError("one buffer per key")
        out = [None] * len(keys)
        failures = [None] * len(keys)
        views = [_bytes_view(b) for b in buffers]

        def read(c, i):
            r = c.bulk_into(views[i])
            if isinstance(r, Exception):
                failures[i] = r
            else:
                out[i] = r

        def share(rng):
            return lambda c: _pipelined(c, list(rng), lambda i: _command("GET", keys[i]), lambda i: read(c, i))

        ranges = _split(len(keys), len(self._conns)) if keys else []
        if ranges:
            self._each([share(r) for r in ranges])
        for f in failures:
            if f is not None:
                raise f
        return out

    def get(self, keys):
        """Each key's block as ``bytes``, or None for a miss."""
        keys = [bytes(k) for k in keys]
        out = [None] * len(keys)

        def share(rng):
            def load(c):
                def read(i):
                    out[i] = c.reply()

                _pipelined(c, list(rng), lambda i: _command("GET", keys[i]), read)

            return load

        if keys:
            self._each([share(r) for r in _split(len(keys), len(self._conns))])
        for r in out:
            if isinstance(r, NetError):
                raise r
        return out

    # -- stores ---------------------------------------------------------

    def put(self, keys, buffers):
        """Stores each buffer under its key, sent from the buffer itself:
        a list of bools (False where the server refused the block, for
        example because DRAM is full of pinned blocks)."""
        keys = [bytes(k) for k in keys]
        if len(buffers) != len(keys):
            raise ValueError("one buffer per key")
        views = [_bytes_view(b) for b in buffers]
        out = [False] * len(keys)

        def share(rng):
            def store(c):
                idx = list(rng)
                at = 0
                while at < len(idx):
                    parts, window, size = [], [], 0
                    while at < len(idx) and (not window or size + len(views[idx[at]]) <= PUT_WINDOW_BYTES):
                        i = idx[at]
                        k, v = keys[i], views[i]
                        parts.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(k), k, len(v)))
                        parts.append(v)
                        parts.append(b"\r\n")
                        window.append(i)
                        size += len(v)
                        at += 1
                    c.send(parts)
                    for i in window:
                        out[i] = c.reply() == b"OK"

            return store

        if keys:
            self._each([share(r) for r in _split(len(keys), len(self._conns))])
        return out

    # SGLang HiCache-style names.
    def batch_get(self, keys, target_locations):
        return self.get_into(keys, target_locations)

    def batch_set(self, keys, values):
        return self.put(keys, values)

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for c in self._conns:
            c.close()
        self._conns = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
