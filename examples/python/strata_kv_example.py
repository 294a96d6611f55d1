#!/usr/bin/env python3
"""A worked example: an inference engine's KV blocks in `strata kv serve`,
from Python, with nothing but redis-py.

    strata kv serve &                       # RESP on 127.0.0.1:6380
    python3 examples/python/strata_kv_example.py [--port 6380]

It walks through what an engine does with a prefix cache:

1. computes each page's key with strata's reference key scheme (so every
   process and machine names a block the same way);
2. asks how many pages of a prompt are cached (KV.LOOKUP), leases them into
   DRAM (KV.PREFETCH ... LEASE), loads them (MGET), computes the rest and
   stores the new pages (MSET);
3. serves a second prompt that shares a prefix with the first, which finds
   exactly the shared pages;
4. drives the server the way LMCache's Redis connector does (redis.asyncio,
   a pool of connections, `<key>kv_bytes` and `<key>metadata` pairs, EXISTS
   for lookups), many requests in flight at once;
5. reads the store's counters.

Every value read back is checked; the script exits non-zero on any
difference. `--keys-only` prints the reference keys of a fixed input
instead (strata's test suite compares them with the Rust implementation).
"""

import argparse
import asyncio
import hashlib
import struct
import sys

# --------------------------------------------------------------------------
# The reference key scheme (docs/kv.md, "Keys"; crates/strata-kv/src/key.rs).


def _field(h, name, value):
    h.update(struct.pack("<I", len(name)))
    h.update(name.encode())
    h.update(struct.pack("<I", len(value)))
    h.update(value)


def context(model, revision, dtype, layout, page_size, tp_rank, tp_size, tags=()):
    """The digest every block key of one model configuration starts from."""
    h = hashlib.sha256(b"strata-kv/v1")
    _field(h, "model", model.encode())
    _field(h, "revision", revision.encode())
    _field(h, "dtype", dtype.encode())
    _field(h, "layout", layout.encode())
    _field(h, "page_size", struct.pack("<I", page_size))
    _field(h, "tp_rank", struct.pack("<I", tp_rank))
    _field(h, "tp_size", struct.pack("<I", tp_size))
    for k, v in sorted(tags):
        _field(h, k, v.encode())
    return h.digest()


def chain(ctx, tokens, page_size):
    """The keys of the whole pages of `tokens`, hex-encoded, in order."""
    keys, parent = [], None
    for i in range(0, len(tokens) - len(tokens) % page_size, page_size):
        page = tokens[i : i + page_size]
        h = hashlib.sha256(ctx)
        h.update(parent if parent else b"\0")
        h.update(struct.pack("<I", len(page)))
        h.update(struct.pack("<%dI" % len(page), *page))
        parent = h.digest()
        keys.append(parent.hex())
    return keys


PINNED = "fea11f54b02fc5fabccd01d8a19e7136bf179b1e67974a1dc3b52867620b1f70"


def keys_only():
    """The keys of a fixed input, one per line, for the cross-check."""
    ctx = context("meta-llama/Llama-3.1-8B", "main", "bf16", "NHD", 16, 1, 2,
                  [("lora", "adapter-7"), ("rope", "yarn-4x")])
    tokens = [(i * 7919 + 13) % 128256 for i in range(100)] + [0xFFFFFFFF]
    for k in chain(ctx, tokens, 16):
        print(k)


# --------------------------------------------------------------------------
# A stand-in for the engine: the bytes of a page's K and V. A real engine
# copies its paged KV buffer (e.g. tensor.numpy().tobytes()); here a page's
# bytes are derived from its key, so a wrong or mixed-up value is caught.


PAGE = 64                       # tokens per page
PAGE_BYTES = 256 * 1024         # K and V of one page across the layers


def kv_bytes_of_page(key):
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (PAGE_BYTES // len(seed)))[:PAGE_BYTES]


def check(cond, what):
    if not cond:
        print("FAILED: " + what, file=sys.stderr)
        sys.exit(1)


def serve_prompt(r, ctx, tokens):
    """One request: load the cached prefix, 'compute' and store the rest.
    Returns how many pages came from the store."""
    keys = chain(ctx, tokens, PAGE)
    hit = r.execute_command("KV.LOOKUP", *keys)        # no side effects
    if hit:
        # Bring the cached pages into DRAM and keep them there while they
        # are copied into the engine's buffers.
        in_dram = r.execute_command("KV.PREFETCH", 100, "LEASE", 5000, *keys[:hit])
        check(in_dram == hit, "prefetch brought %d of %d pages" % (in_dram, hit))
        blocks = r.mget(keys[:hit])
        for k, b in zip(keys[:hit], blocks):
            check(b == kv_bytes_of_page(k), "page %s came back wrong" % k[:12])
        r.execute_command("KV.RELEASE", *keys[:hit])
    new = {k: kv_bytes_of_page(k) for k in keys[hit:]}
    if new:
        r.mset(new)
    return hit


async def lmcache_style(host, port, n):
    """What LMCache's RedisConnector does, with redis.asyncio: a pool of
    connections, for each chunk a `kv_bytes` value and then a `metadata`
    value, lookups by EXISTS on the metadata, gets of both."""
    import redis.asyncio as aredis

    pool = aredis.ConnectionPool(host=host, port=port, max_connections=32)
    conn = aredis.Redis(connection_pool=pool)
    sem = asyncio.Semaphore(32)
    names = ["lmcache@example@%d@%s" % (i, hashlib.sha256(b"%d" % i).hexdigest()[:16]) for i in range(n)]

    async def put(name):
        async with sem:
            await conn.set(name + "kv_bytes", kv_bytes_of_page(name))
            await conn.set(name + "metadata", struct.pack("<II", PAGE_BYTES, 2))

    async def get(name):
        async with sem:
            meta = await conn.get(name + "metadata")
            if meta is None:
                return None
            length, _ = struct.unpack("<II", meta)
            data = await conn.get(name + "kv_bytes")
        return data[:length] if data is not None else None

    await asyncio.gather(*(put(x) for x in names))
    present = 0
    for x in names:                                     # batched_async_contains
        if not await conn.exists(x + "metadata"):
            break
        present += 1
    check(present == n, "EXISTS found %d of %d chunks" % (present, n))
    got = await asyncio.gather(*(get(x) for x in names))
    for x, data in zip(names, got):
        check(data == kv_bytes_of_page(x), "chunk %s came back wrong" % x)
    await conn.delete(*[x + s for x in names for s in ("kv_bytes", "metadata")])
    check(await conn.exists(names[0] + "metadata") == 0, "DEL left a chunk")
    await pool.disconnect()
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=6380)
    ap.add_argument("--keys-only", action="store_true", help="print the reference keys of a fixed input")
    args = ap.parse_args()

    check(chain(context("llama", "r1", "bf16", "NHD", 4, 0, 1, [("lora", "none"), ("a", "b")]),
                [1, 2, 3, 4], 4)[0] == PINNED, "the key scheme differs from the reference")
    if args.keys_only:
        keys_only()
        return

    import redis

    # A namespace belongs to a connection (KV.NS), and redis-py opens
    # connections as it needs them (a pipeline takes its own): a connection
    # class that enters the namespace on connect keeps every one of them in
    # it. The same works for redis.asyncio.Connection.
    class NamespacedConnection(redis.Connection):
        namespace = "example-py"

        def on_connect(self):
            super().on_connect()
            self.send_command("KV.NS", self.namespace)
            if self.read_response() not in (b"OK", "OK"):
                raise redis.ConnectionError("KV.NS refused")

    pool = redis.ConnectionPool(host=args.host, port=args.port, connection_class=NamespacedConnection)
    r = redis.Redis(connection_pool=pool)
    check(r.ping(), "PING")
    check(r.execute_command("KV.NS") == b"example-py", "the connection is not in its namespace")
    r.execute_command("KV.DELNS", "example-py")         # start clean

    ctx = context("meta-llama/Llama-3.1-8B", "main", "bf16", "NHD", PAGE, 0, 1)
    system = list(range(1000, 1000 + 6 * PAGE))         # a shared system prompt
    first = system + list(range(50000, 50000 + 4 * PAGE))
    second = system + list(range(60000, 60000 + 3 * PAGE)) + [7, 8, 9]

    h1 = serve_prompt(r, ctx, first)
    check(h1 == 0, "a new prompt found %d cached pages" % h1)
    h1 = serve_prompt(r, ctx, first)
    check(h1 == 10, "the same prompt again found %d of 10 pages" % h1)
    h2 = serve_prompt(r, ctx, second)
    check(h2 == 6, "the prompt sharing 6 pages found %d" % h2)
    print("prefix reuse: repeat found %d/10 pages, shared prefix found %d/9" % (h1, h2))

    # Another tensor-parallel rank names different blocks: no false hits.
    other = context("meta-llama/Llama-3.1-8B", "main", "bf16", "NHD", PAGE, 1, 2)
    check(r.execute_command("KV.LOOKUP", *chain(other, first, PAGE)) == 0, "another rank's keys hit")

    # A pipeline batches many commands in one round trip.
    p = r.pipeline(transaction=False)
    keys = chain(ctx, first, PAGE)
    for k in keys:
        p.strlen(k)
    check(p.execute() == [PAGE_BYTES] * len(keys), "pipelined STRLEN")

    # One large value (a long prompt's KV in one block) goes in and out whole.
    big = bytes(range(256)) * (32 * 1024 * 1024 // 256)
    r.set("example-32MiB", big)
    check(r.get("example-32MiB") == big, "the 32 MiB value came back wrong")
    r.delete("example-32MiB")

    # Keys of different namespaces never meet: the default namespace does
    # not see this one's pages.
    plain = redis.Redis(host=args.host, port=args.port)
    check(plain.execute_command("KV.LOOKUP", *keys) == 0, "another namespace sees the pages")
    quota = r.execute_command("KV.QUOTA", "example-py")
    if isinstance(quota, list):
        quota = dict(zip(quota[::2], quota[1::2]))
    check(quota[b"keys"] == 13, "the namespace holds %r keys, not 13" % quota[b"keys"])

    n = asyncio.run(lmcache_style(args.host, args.port, 200))
    print("LMCache-style async access: %d chunks put, found and read back" % n)

    stats = r.execute_command("KV.STATS")
    if isinstance(stats, list):                         # RESP2: a flat list
        stats = dict(zip(stats[::2], stats[1::2]))
    stats = {k.decode() if isinstance(k, bytes) else k: v for k, v in stats.items()}
    check(stats["hits_dram"] + stats["hits_ssd"] + stats["hits_pool"] > 0, "no hits counted")
    print("store: %d keys, %d DRAM hits, %d SSD hits, %d misses" % (
        stats["keys"], stats["hits_dram"], stats["hits_ssd"], stats["misses"]))
    r.execute_command("KV.DELNS", "example-py")
    print("ok")


if __name__ == "__main__":
    main()
