#!/usr/bin/env python3
"""Time to first token on a GPU: recomputing a prompt's prefill against
loading its KV blocks from `strata kv serve` on the same machine.

A Llama-3.1-8B-shaped model is built from its config with random weights
in bf16 (nothing is downloaded). For each prompt length it

1. runs the prefill on the GPU and times it (CUDA-synchronised, best of
   --repeat), keeping every layer's K and V;
2. stores those KV blocks in the store through the same-host fast path
   (pages of --page tokens, each page one block holding every layer's K
   and V, in the engine's layout);
3. loads them back: the fast path copies each block from the store's
   shared region into pinned host memory, and from there to the GPU
   (non-blocking, overlapped with the next batch's copy), timed the same
   way;
4. checks the loaded KV bit-equal to the recomputed KV.

    strata kv serve --dram 48G --shm-region 64G &
    python3 bench/gpu-ttft.py --socket ./strata-data/kv/shm.sock \\
        --tokens 1024,2048,4096,8192,16384,32768

The ratio printed is prefill time / load time: how many times faster the
first token's KV is at hand by loading than by recomputing (the final
token's own forward pass, the same either way, is not counted).

Dry run (this repository's tests, no GPU): `--device cpu --tiny` with a
tiny shape. With PyTorch installed it runs the same code on the CPU; where
PyTorch is not installed, `--device cpu` runs the model in NumPy instead,
so the pipeline (shapes, pages, the fast path, the equality check) is
exercised by CI on machines with no PyTorch.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python"))
from strata_kv import PUT_STORED, StrataKV  # noqa: E402

LLAMA_8B = dict(hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128, inter=14336, vocab=128256,
                rope_theta=500000.0, eps=1e-5)
TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, inter=128, vocab=1000,
            rope_theta=10000.0, eps=1e-5)


class TorchOps:
    """The model's arithmetic in PyTorch (bf16 on the GPU, f32 on the CPU)."""

    def __init__(self, device):
        import torch

        self.t = torch
        self.device = torch.device(device)
        self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32

    def randn(self, shape, seed, scale):
        g = self.t.Generator(device=self.device).manual_seed(seed)
        return (self.t.randn(shape, generator=g, device=self.device, dtype=self.t.float32) * scale).to(self.dtype)

    def tokens(self, ids):
        return self.t.tensor(ids, device=self.device, dtype=self.t.long)

    def embed(self, table, ids):
        return table[ids]

    def rmsnorm(self, x, w, eps):
        xf = x.float()
        return (xf * self.t.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w

    def rope(self, x, theta):
        # x: [tokens, heads, head_dim], rotate-half form.
        n, _, d = x.shape
        inv = 1.0 / (theta ** (self.t.arange(0, d, 2, device=self.device, dtype=self.t.float32) / d))
        f = self.t.outer(self.t.arange(n, device=self.device, dtype=self.t.float32), inv)
        cos, sin = f.cos()[:, None, :], f.sin()[:, None, :]
        xf = x.float()
        a, b = xf[..., : d // 2], xf[..., d // 2 :]
        return self.t.cat([a * cos - b * sin, b * cos + a * sin], -1).to(x.dtype)

    def attention(self, q, k, v):
        # q: [n, heads, d]; k, v: [n, kv_heads, d] (grouped-query).
        rep = q.shape[1] // k.shape[1]
        qh = q.transpose(0, 1)[None]
        kh = k.repeat_interleave(rep, 1).transpose(0, 1)[None]
        vh = v.repeat_interleave(rep, 1).transpose(0, 1)[None]
        o = self.t.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
        return o[0].transpose(0, 1).reshape(q.shape[0], -1)

    def silu(self, x):
        return self.t.nn.functional.silu(x)

    def sync(self):
        if self.device.type == "cuda":
            self.t.cuda.synchronize()

    def page_bytes(self, kv, start, end):
        """One page's K and V of every layer as one contiguous uint8 host
        array (the block stored)."""
        parts = [x[start:end].contiguous().view(self.t.uint8).reshape(-1) for pair in kv for x in pair]
        return self.t.cat(parts).cpu().numpy()

    def host_buffer(self, nbytes):
        pin = self.device.type == "cuda"
        return self.t.empty(nbytes, dtype=self.t.uint8, pin_memory=pin)

    def host_view(self, buf):
        return buf.numpy()

    def to_device(self, buf):
        return buf.to(self.device, non_blocking=True)

    def equal_pages(self, loaded, kv, page, tokens):
        """Loaded device bytes of each page against the recomputed KV."""
        for i, blk in enumerate(loaded):
            start, end = i * page, min((i + 1) * page, tokens)
            want = self.t.cat([x[start:end].contiguous().view(self.t.uint8).reshape(-1) for pair in kv for x in pair])
            if not self.t.equal(blk[: want.numel()], want):
                return False
        return True


class NumpyOps(TorchOps):
    """The same arithmetic in NumPy (f32), for the CPU dry run where
    PyTorch is not installed."""

    def __init__(self, device):
        import numpy

        self.np = numpy
        self.device = device

    def randn(self, shape, seed, scale):
        return (self.np.random.default_rng(seed).standard_normal(shape) * scale).astype(self.np.float32)

    def tokens(self, ids):
        return self.np.asarray(ids)

    def rmsnorm(self, x, w, eps):
        return x / self.np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(self, x, theta):
        n, _, d = x.shape
        inv = 1.0 / (theta ** (self.np.arange(0, d, 2, dtype=self.np.float32) / d))
        f = self.np.outer(self.np.arange(n, dtype=self.np.float32), inv)
        cos, sin = self.np.cos(f)[:, None, :], self.np.sin(f)[:, None, :]
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return self.np.concatenate([a * cos - b * sin, b * cos + a * sin], -1).astype(self.np.float32)

    def attention(self, q, k, v):
        n, heads, d = q.shape
        rep = heads // k.shape[1]
        k, v = self.np.repeat(k, rep, 1), self.np.repeat(v, rep, 1)
        s = self.np.einsum("qhd,khd->hqk", q, k) / self.np.sqrt(d)
        s = s + self.np.triu(self.np.full((n, n), -self.np.inf, dtype=self.np.float32), 1)
        s = self.np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        return self.np.einsum("hqk,khd->qhd", s, v).reshape(n, -1).astype(self.np.float32)

    def silu(self, x):
        return x / (1 + self.np.exp(-x))

    def sync(self):
        pass

    def page_bytes(self, kv, start, end):
        return self.np.concatenate([self.np.ascontiguousarray(x[start:end]).view(self.np.uint8).reshape(-1)
                                    for pair in kv for x in pair])

    def host_buffer(self, nbytes):
        return self.np.empty(nbytes, dtype=self.np.uint8)

    def host_view(self, buf):
        return buf

    def to_device(self, buf):
        return buf.copy()

    def equal_pages(self, loaded, kv, page, tokens):
        for i, blk in enumerate(loaded):
            want = self.page_bytes(kv, i * page, min((i + 1) * page, tokens))
            if not self.np.array_equal(blk[: want.size], want):
                return False
        return True


class Model:
    def __init__(self, ops, cfg, seed=1):
        self.ops, self.c = ops, cfg
        h, kvd = cfg["hidden"], cfg["kv_heads"] * cfg["head_dim"]
        s = 0.02
        self.embed = ops.randn((cfg["vocab"], h), seed, s)
        self.layers = []
        for i in range(cfg["layers"]):
            r = seed * 1000 + i * 10
            self.layers.append(dict(
                n1=ops.randn((h,), r, 0.0) + 1, n2=ops.randn((h,), r + 1, 0.0) + 1,
                wq=ops.randn((h, h), r + 2, s), wk=ops.randn((h, kvd), r + 3, s), wv=ops.randn((h, kvd), r + 4, s),
                wo=ops.randn((h, h), r + 5, s), w1=ops.randn((h, cfg["inter"]), r + 6, s),
                w3=ops.randn((h, cfg["inter"]), r + 7, s), w2=ops.randn((cfg["inter"], h), r + 8, s)))

    def prefill(self, ids):
        """Every layer's (K, V), each [tokens, kv_heads, head_dim]."""
        o, c = self.ops, self.c
        x = o.embed(self.embed, ids)
        n = x.shape[0]
        kv = []
        for L in self.layers:
            a = o.rmsnorm(x, L["n1"], c["eps"])
            q = o.rope((a @ L["wq"]).reshape(n, c["heads"], c["head_dim"]), c["rope_theta"])
            k = o.rope((a @ L["wk"]).reshape(n, c["kv_heads"], c["head_dim"]), c["rope_theta"])
            v = (a @ L["wv"]).reshape(n, c["kv_heads"], c["head_dim"])
            kv.append((k, v))
            x = x + o.attention(q, k, v) @ L["wo"]
            m = o.rmsnorm(x, L["n2"], c["eps"])
            x = x + (o.silu(m @ L["w1"]) * (m @ L["w3"])) @ L["w2"]
        return kv


def timed(ops, f, repeat):
    best, out = None, None
    for _ in range(repeat):
        ops.sync()
        t = time.perf_counter()
        out = f()
        ops.sync()
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return best, out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--socket", default="./strata-data/kv/shm.sock")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tokens", default="1024,2048,4096,8192,16384,32768")
    p.add_argument("--page", type=int, default=256, help="tokens per stored block")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="blocks per fast-path request")
    p.add_argument("--tiny", action="store_true", help="a tiny model shape (dry runs)")
    args = p.parse_args()

    try:
        ops = TorchOps(args.device)
        backend = f"PyTorch on {args.device}"
    except ImportError:
        if args.device != "cpu":
            sys.exit("PyTorch is needed for --device " + args.device)
        ops = NumpyOps("cpu")
        backend = "NumPy on the CPU (PyTorch not installed)"
    cfg = TINY if args.tiny else LLAMA_8B
    model = Model(ops, cfg)
    kv_client = StrataKV(args.socket, namespace=b"gpu-ttft", staging=256 << 20)
    print(f"model: {'tiny' if args.tiny else 'Llama-3.1-8B'}-shaped, random weights; {backend}; page {args.page} tokens")
    print(f"{'tokens':>7} {'prefill ms':>11} {'load ms':>9} {'GB loaded':>9} {'GB/s':>6} {'ratio':>7}  equal")
    ok = True
    for n in [int(t) for t in args.tokens.split(",")]:
        ids = ops.tokens([(i * 7919 + 13) % cfg["vocab"] for i in range(n)])
        prefill_s, kv = timed(ops, lambda: model.prefill(ids), args.repeat)
        pages = (n + args.page - 1) // args.page
        keys = [f"t{n}-p{i}".encode() for i in range(pages)]
        blocks = [ops.page_bytes(kv, i * args.page, min((i + 1) * args.page, n)) for i in range(pages)]
        for i in range(0, pages, args.batch):
            if kv_client.put(keys[i : i + args.batch], blocks[i : i + args.batch]) != [PUT_STORED] * len(keys[i : i + args.batch]):
                sys.exit(f"storing the KV of {n} tokens failed (is --dram large enough?)")
        host = [ops.host_buffer(b.size) for b in blocks]
        views = [ops.host_view(h) for h in host]
        total = sum(b.size for b in blocks)

        def load():
            out = []
            for i in range(0, pages, args.batch):
                got = kv_client.get_into(keys[i : i + args.batch], views[i : i + args.batch])
                if any(g is None for g in got):
                    sys.exit("a block was not found")
                out.extend(ops.to_device(h) for h in host[i : i + args.batch])
            return out

        load_s, loaded = timed(ops, load, args.repeat)
        equal = ops.equal_pages(loaded, kv, args.page, n)
        ok &= equal
        print(f"{n:>7} {prefill_s * 1e3:>11.1f} {load_s * 1e3:>9.1f} {total / 1e9:>9.3f} "
              f"{total / load_s / 1e9:>6.2f} {prefill_s / load_s:>6.1f}x  {'yes' if equal else 'NO'}")
        del kv, blocks, host, views, loaded
    kv_client.close()
    if not ok:
        sys.exit("loaded KV differs from the recomputed KV")
    print("ok")


if __name__ == "__main__":
    main()
