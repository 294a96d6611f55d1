"""strata's KV-cache store from Python, through the same-host fast path.

An engine on the machine that runs ``strata kv serve`` reads and writes KV
blocks through shared memory instead of the Redis protocol: the server
hands the client its shared region (mapped read-only) and a staging area
of its own (mapped read-write) over a Unix socket, and the client copies
blocks straight out of the region into its own buffers (NumPy arrays,
``bytearray``, pinned host tensors' NumPy views, anything writable that
exposes the buffer protocol) and writes the blocks it stores into its
staging area. No TCP, no RESP parsing, one copy each way.

Pure Python; NumPy is optional (any buffer works). The protocol is in
``crates/strata-kv/src/shm/wire.rs``; the user guide is docs/kv.md,
"Same-host fast path".

    from strata_kv import StrataKV
    kv = StrataKV("./strata-data/kv/shm.sock", namespace=b"llama-8b")
    kv.put([b"k1", b"k2"], [block1, block2])          # buffers
    n = kv.batch_exists([b"k1", b"k2", b"k3"])         # 2: a prefix
    kv.get_into([b"k1", b"k2"], [out1, out2])          # -> [len, len]
    with kv.leased([b"k1"]) as views:                  # zero-copy
        tensor = numpy.frombuffer(views[0], dtype=...)

The method names follow the storage-backend interfaces of LMCache
(``exists`` / ``get`` / ``put``) and SGLang HiCache (``batch_exists``
returning how many keys lead the list, ``batch_get`` / ``batch_set``).
"""

import contextlib
import mmap
import socket
import struct

__all__ = ["StrataKV", "FastPathError", "PUT_STORED", "PUT_FULL", "PUT_BAD_RANGE", "PUT_FAILED"]

VERSION = 1
MAX_FRAME = 16 << 20

_HELLO, _GET, _RELEASE, _EXISTS, _PUT, _LOOKUP = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06
_REPLY, _ERROR = 0x80, 0xFF

PUT_STORED, PUT_FULL, PUT_BAD_RANGE, PUT_FAILED = 0, 1, 2, 3
_GOT = struct.Struct("<BQQQ")


class FastPathError(Exception):
    """The server refused a request, or the socket failed."""


def _keys_body(ns, keys):
    parts = [struct.pack("<B", len(ns)), ns, struct.pack("<I", len(keys))]
    for k in keys:
        parts.append(struct.pack("<H", len(k)))
        parts.append(k)
    return b"".join(parts)


def _frame(op, body):
    return struct.pack("<IB", len(body) + 1, op) + body


def _bytes_view(buf):
    """A writable or readable byte view of any C-contiguous buffer."""
    mv = memoryview(buf)
    if not mv.c_contiguous:
        raise ValueError("buffers must be C-contiguous")
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


class StrataKV:
    """A connection to ``strata kv serve``'s fast path.

    Not thread-safe: give each thread (or process) its own connection.
    """

    def __init__(self, socket_path, namespace=b"", staging=64 << 20):
        self.namespace = namespace.encode() if isinstance(namespace, str) else bytes(namespace)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(str(socket_path))
        self._sock.sendall(_frame(_HELLO, struct.pack("<IQ", VERSION, staging)))
        head, fds = self._recv_with_fds(4)
        body = self._read_body(head)
        if body[0] == _ERROR:
            for fd in fds:
                socket.close(fd)
            raise FastPathError(self._error(body))
        if body[0] != _REPLY | _HELLO or len(fds) != 2:
            raise FastPathError("unexpected Hello reply")
        _version, region_len, staging_len = struct.unpack_from("<IQQ", body, 1)
        try:
            self._region = mmap.mmap(fds[0], region_len, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            self._staging = mmap.mmap(fds[1], staging_len, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            for fd in fds:
                socket.close(fd)
        self._region_view = memoryview(self._region)
        self._staging_view = memoryview(self._staging)
        self.staging_bytes = staging_len

    # ------------------------------------------------------------------
    # The socket.

    def _recv_with_fds(self, n):
        msg, fds, _flags, _addr = socket.recv_fds(self._sock, n, 4)
        if not msg:
            raise FastPathError("the server closed the socket")
        return msg + self._recv_exact(n - len(msg)), list(fds)

    def _recv_exact(self, n):
        out = bytearray()
        while len(out) < n:
            chunk = self._sock.recv(n - len(out))
            if not chunk:
                raise FastPathError("the server closed the socket")
            out += chunk
        return bytes(out)

    def _read_body(self, head):
        (n,) = struct.unpack("<I", head)
        if n == 0 or n > MAX_FRAME:
            raise FastPathError(f"a reply frame of {n} bytes")
        return self._recv_exact(n)

    @staticmethod
    def _error(body):
        (n,) = struct.unpack_from("<H", body, 1)
        return body[3 : 3 + n].decode("utf-8", "replace")

    def _call(self, op, body):
        self._sock.sendall(_frame(op, body))
        reply = self._read_body(self._recv_exact(4))
        if reply[0] == _ERROR:
            raise FastPathError(self._error(reply))
        if reply[0] != _REPLY | op:
            raise FastPathError(f"reply {reply[0]:#x} to request {op:#x}")
        return reply

    # ------------------------------------------------------------------
    # Lookups.

    def exists(self, keys):
        """Which of ``keys`` are stored: a list of bools."""
        keys = [bytes(k) for k in keys]
        r = self._call(_EXISTS, _keys_body(self.namespace, keys))
        (n,) = struct.unpack_from("<I", r, 1)
        return [b == 1 for b in r[5 : 5 + n]]

    def batch_exists(self, keys):
        """How many of ``keys``, from the first, are stored (a prefix
        chain's cached length; SGLang HiCache's ``batch_exists``)."""
        keys = [bytes(k) for k in keys]
        r = self._call(_LOOKUP, _keys_body(self.namespace, keys))
        return struct.unpack_from("<I", r, 1)[0]

    # ------------------------------------------------------------------
    # Loads.

    def _lease(self, keys):
        r = self._call(_GET, _keys_body(self.namespace, keys))
        (n,) = struct.unpack_from("<I", r, 1)
        out = []
        for i in range(n):
            status, lease, offset, length = _GOT.unpack_from(r, 5 + i * _GOT.size)
            if status == 1:
                if offset + length > len(self._region):
                    raise FastPathError(f"a block at {offset}+{length} outside the region")
                out.append((lease, offset, length))
            else:
                out.append(None)
        return out

    def _release(self, leases):
        ids = [l[0] for l in leases if l is not None]
        if ids:
            self._call(_RELEASE, struct.pack("<I", len(ids)) + struct.pack(f"<{len(ids)}Q", *ids))

    def get_into(self, keys, buffers):
        """Copies each key's block into its buffer (C-contiguous, at least
        as long as the block): the block's length, or None for a miss."""
        keys = [bytes(k) for k in keys]
        if len(buffers) != len(keys):
            raise ValueError("one buffer per key")
        leases = self._lease(keys)
        try:
            out = []
            for lease, buf in zip(leases, buffers):
                if lease is None:
                    out.append(None)
                    continue
                _id, offset, length = lease
                dst = _bytes_view(buf)
                if dst.readonly or len(dst) < length:
                    raise ValueError(f"a buffer of {len(dst)} bytes for a block of {length} (or read-only)")
                dst[:length] = self._region_view[offset : offset + length]
                out.append(length)
            return out
        finally:
            self._release(leases)

    def get(self, keys):
        """Each key's block as ``bytes``, or None for a miss."""
        keys = [bytes(k) for k in keys]
        leases = self._lease(keys)
        try:
            return [None if l is None else bytes(self._region_view[l[1] : l[1] + l[2]]) for l in leases]
        finally:
            self._release(leases)

    @contextlib.contextmanager
    def leased(self, keys):
        """Zero-copy: read-only memoryviews of each key's block in the
        shared region (None for a miss), valid inside the ``with`` block;
        the blocks stay unchanged until it ends, however the store moves."""
        keys = [bytes(k) for k in keys]
        leases = self._lease(keys)
        views = [None if l is None else self._region_view[l[1] : l[1] + l[2]] for l in leases]
        try:
            yield views
        finally:
            for v in views:
                if v is not None:
                    v.release()
            self._release(leases)

    # ------------------------------------------------------------------
    # Stores.

    def put(self, keys, buffers):
        """Stores each buffer under its key: a list of statuses
        (``PUT_STORED``, ``PUT_FULL`` when DRAM is full of pinned or leased
        blocks, ...)."""
        keys = [bytes(k) for k in keys]
        if len(buffers) != len(keys):
            raise ValueError("one buffer per key")
        views = [_bytes_view(b) for b in buffers]
        out = []
        i = 0
        while i < len(keys):
            at, items = 0, []
            while i < len(keys):
                n = len(views[i])
                if n > self.staging_bytes:
                    raise ValueError(f"a block of {n} bytes is larger than the {self.staging_bytes}-byte staging area")
                if at + n > self.staging_bytes:
                    break
                self._staging_view[at : at + n] = views[i]
                items.append((keys[i], at, n))
                at = (at + n + 63) // 64 * 64
                i += 1
            parts = [struct.pack("<B", len(self.namespace)), self.namespace, struct.pack("<I", len(items))]
            for k, off, n in items:
                parts.append(struct.pack("<H", len(k)) + k + struct.pack("<QQ", off, n))
            r = self._call(_PUT, b"".join(parts))
            (n,) = struct.unpack_from("<I", r, 1)
            out.extend(r[5 : 5 + n])
        return list(out)

    # SGLang HiCache-style names.
    def batch_get(self, keys, target_locations):
        return self.get_into(keys, target_locations)

    def batch_set(self, keys, values):
        return [s == PUT_STORED for s in self.put(keys, values)]

    def close(self):
        """Closes the connection and unmaps the regions (views handed out
        by ``leased`` must be gone)."""
        self._region_view.release()
        self._staging_view.release()
        self._region.close()
        self._staging.close()
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
