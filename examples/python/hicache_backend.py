#!/usr/bin/env python3
"""A worked example: strata's KV store as an inference engine's storage
backend, through the same-host fast path (shared memory, no RESP).

    strata kv serve &          # the fast path on ./strata-data/kv/shm.sock
    python3 examples/python/hicache_backend.py [--socket PATH]

An engine keeps a *host KV pool*: page-sized slots of pinned host memory
its GPU copies pages to and from. Its KV-cache layer asks a storage
backend which pages of a prompt are stored, loads them into pool slots,
and stores the pages it computed. Two such interfaces, in the shape they
have in the engines (method names and arguments; the engines' own base
classes are not imported, so this runs with NumPy alone):

- ``StrataHiCacheStorage``: SGLang HiCache's storage backend
  (``batch_exists`` -> how many keys lead the list, ``batch_get`` into
  target locations, ``batch_set`` from them);
- ``StrataLMCacheBackend``: LMCache's storage-backend calls
  (``contains``, ``get`` -> bytes, ``put``; ``batch_get_into`` for the
  zero-copy path).

The demo serves two prompts that share a prefix: the second finds exactly
the shared pages, loads them into the pool, and every page loaded is
checked against the engine's own computation. Exits non-zero on a
difference; prints "ok" last.
"""

import argparse
import hashlib
import os
import sys

import numpy

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
sys.path.insert(0, HERE)

from strata_kv import PUT_STORED, StrataKV  # noqa: E402
from strata_kv_example import chain, context  # noqa: E402  (the reference key scheme)

PAGE = 16                                   # tokens per page
LAYERS, KV_HEADS, HEAD_DIM = 4, 8, 128      # a small Llama-shaped model
PAGE_ELEMS = 2 * LAYERS * PAGE * KV_HEADS * HEAD_DIM   # K and V, bf16-sized
DTYPE = numpy.float16


class StrataHiCacheStorage:
    """SGLang HiCache's storage interface over the fast path."""

    def __init__(self, socket_path, namespace):
        self.kv = StrataKV(socket_path, namespace=namespace, staging=64 << 20)

    def exists(self, key):
        return self.kv.exists([key.encode()])[0]

    def batch_exists(self, keys):
        """How many of ``keys``, from the first, are stored."""
        return self.kv.batch_exists([k.encode() for k in keys])

    def get(self, key, target_location=None, target_sizes=None):
        return self.batch_get([key], [target_location])[0]

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """Loads each key's page into its target (a pool slot); returns the
        targets, None where a key is missing."""
        got = self.kv.get_into([k.encode() for k in keys], target_locations)
        return [t if n is not None else None for t, n in zip(target_locations, got)]

    def set(self, key, value=None, target_location=None, target_sizes=None):
        return self.batch_set([key], [value if value is not None else target_location])

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        src = values if values is not None else target_locations
        return all(s == PUT_STORED for s in self.kv.put([k.encode() for k in keys], src))

    def close(self):
        self.kv.close()


class StrataLMCacheBackend:
    """LMCache's storage-backend calls over the fast path."""

    def __init__(self, socket_path, namespace):
        self.kv = StrataKV(socket_path, namespace=namespace)

    def contains(self, key):
        return self.kv.exists([key.encode()])[0]

    def get(self, key):
        return self.kv.get([key.encode()])[0]

    def put(self, key, obj):
        return self.kv.put([key.encode()], [obj]) == [PUT_STORED]

    def batch_get_into(self, keys, buffers):
        return self.kv.get_into([k.encode() for k in keys], buffers)

    def close(self):
        self.kv.close()


class Engine:
    """A stand-in engine: a host KV pool, and a "prefill" whose pages are a
    deterministic function of the tokens before them (as real KV is)."""

    def __init__(self, backend, pool_pages=64):
        self.backend = backend
        self.pool = numpy.zeros((pool_pages, PAGE_ELEMS), dtype=DTYPE)
        self.ctx = context("meta-llama/Llama-3.1-8B", "main", "bf16", "NHD", PAGE, 0, 1)

    @staticmethod
    def compute_page(key):
        seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
        return numpy.random.default_rng(seed).standard_normal(PAGE_ELEMS).astype(DTYPE)

    def serve(self, tokens):
        """Loads the stored prefix into the pool, computes and stores the
        rest; returns (pages loaded, pages computed)."""
        keys = chain(self.ctx, tokens, PAGE)
        hit = self.backend.batch_exists(keys)
        slots = [self.pool[i] for i in range(len(keys))]
        if hit:
            loaded = self.backend.batch_get(keys[:hit], slots[:hit])
            for k, slot, got in zip(keys[:hit], slots[:hit], loaded):
                if got is None or not numpy.array_equal(slot, self.compute_page(k)):
                    sys.exit(f"FAILED: page {k[:12]} loaded wrong")
        for k, slot in zip(keys[hit:], slots[hit:]):
            slot[:] = self.compute_page(k)
        if keys[hit:] and not self.backend.batch_set(keys[hit:], slots[hit:]):
            sys.exit("FAILED: pages not stored")
        return hit, len(keys) - hit


def main(socket_path, namespace="hicache-example"):
    # Two prompts with a shared prefix of 6 pages.
    prefix = [(i * 7919 + 13) % 128256 for i in range(6 * PAGE)]
    a = prefix + [(i * 31 + 7) % 128256 for i in range(4 * PAGE)]
    b = prefix + [(i * 17 + 3) % 128256 for i in range(3 * PAGE)]

    hicache = StrataHiCacheStorage(socket_path, namespace)
    engine = Engine(hicache)
    first = engine.serve(a)
    again = engine.serve(a)
    shared = engine.serve(b)
    print(f"HiCache: first prompt loaded {first[0]} computed {first[1]}; "
          f"repeat loaded {again[0]}/{sum(again)}; shared prefix loaded {shared[0]}/{sum(shared)}")
    if first != (0, 10) or again != (10, 0) or shared != (6, 3):
        sys.exit("FAILED: unexpected hit counts")
    hicache.close()

    # LMCache's calls on the same pages (another connection, same store).
    lm = StrataLMCacheBackend(socket_path, namespace)
    keys = chain(Engine(None).ctx, a, PAGE)
    if not all(lm.contains(k) for k in keys):
        sys.exit("FAILED: LMCache contains")
    raw = lm.get(keys[0])
    if numpy.frombuffer(raw, dtype=DTYPE).tolist() != Engine.compute_page(keys[0]).tolist():
        sys.exit("FAILED: LMCache get")
    outs = [numpy.empty(PAGE_ELEMS, dtype=DTYPE) for _ in keys]
    if lm.batch_get_into(keys, outs) != [PAGE_ELEMS * 2] * len(keys):
        sys.exit("FAILED: LMCache batch load")
    lm.close()
    print("LMCache: contains, get and batched loads agree")
    print("ok")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--socket", default="./strata-data/kv/shm.sock")
    main(p.parse_args().socket)
