#!/usr/bin/env python3
"""Measure one GPU as copus's performance model sees it, with PyTorch, and write the figures.

    python3 scripts/measure_gpu.py OUT_DIR [--quick]

Five parts (--parts; gemm, attention and train by default), each timed with CUDA events (median
of the timed repetitions after warm-ups):

  gemm       torch.matmul in BF16 (and torch._scaled_mm in FP8 E4M3 where the GPU has it) on the
             GEMM shapes of Llama-style layers at 16,384 tokens, and one 8192^3 product.
  attention  torch.nn.functional.scaled_dot_product_attention, causal, head dim 128, 32 query and
             32 key/value heads, forward and forward+backward, per SDPA backend (flash = the
             FlashAttention-2 kernels PyTorch ships, cudnn = cuDNN's fused attention, efficient =
             the memory-efficient kernel), at sequences 1K to 128K with 64K tokens per call.
  train      whole training steps of Llama-3-style models on this one GPU, written here in plain
             PyTorch eager (RMSNorm, RoPE, grouped-query attention through SDPA flash, SwiGLU,
             tied embeddings, FP32 parameters under BF16 autocast, fused AdamW, full activation
             checkpointing per layer where stated): step time and peak memory, or "oom".
  gemm-sweep every BF16 GEMM of a layer's forward and backward (forward product, data and weight
             gradients, as nn.Linear lays them out) for five layer widths, TP 1-8 and 1K-16K
             tokens (780 GEMMs).
  profile    a few small training steps under torch.profiler: the CPU time to issue them, the
             device's kernel time and count, the top CPU ops and GPU kernels.

The stack of every figure is written beside it (torch, CUDA, cuDNN versions, backend). The
train rows are what `copus predict --hardware h200 --gpus 1 --stack torchtitan-fsdp2 ...`
predicts; docs/MODEL.md compares the two. On a machine without a GPU, --quick runs every part
on the CPU at toy sizes, so the script itself is exercised; those figures mean nothing.
"""
import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from torch import nn


def timer(fn, warmup, reps, cuda):
    """Median and min of fn's time in seconds over reps calls after warmup calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(times), min(times)


# ---------------------------------------------------------------- gemm
def gemm_shapes(quick):
    """(label, M, N, K): the GEMMs of a transformer layer's forward at M tokens."""
    if quick:
        return [("toy", 64, 96, 32)]
    m = 16384
    shapes = [("square 8192", 8192, 8192, 8192)]
    for name, h, kv, ffn in (("1B", 2048, 512, 8192), ("8B", 4096, 1024, 14336),
                             ("70B/TP8", 1024, 128, 3584)):
        if name == "70B/TP8":
            # One tensor-parallel rank of a 70B layer (h 8192, TP 8): qkv and fc1 column-split.
            shapes += [(f"{name} qkv", m, 1024 + 2 * 128, 8192), (f"{name} proj", m, 8192, 1024),
                       (f"{name} fc1", m, 2 * 3584, 8192), (f"{name} fc2", m, 8192, 3584)]
            continue
        shapes += [(f"{name} qkv", m, h + 2 * kv, h), (f"{name} proj", m, h, h),
                   (f"{name} fc1", m, 2 * ffn, h), (f"{name} fc2", m, h, ffn),
                   (f"{name} logits", m, 128256, h)]
    return shapes


def measure_gemm(dev, quick):
    cuda = dev.type == "cuda"
    rows = []
    fp8 = cuda and torch.cuda.get_device_capability(dev) >= (8, 9) and hasattr(torch, "_scaled_mm")
    for label, m, n, k in gemm_shapes(quick):
        flops = 2.0 * m * n * k
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        med, best = timer(lambda: a @ w.t(), 3, 10 if not quick else 2, cuda)
        rows.append({"shape": label, "m": m, "n": n, "k": k, "dtype": "bf16", "median_s": med,
                     "best_s": best, "tflops": flops / med / 1e12})
        if fp8:
            try:
                a8 = a.to(torch.float8_e4m3fn)
                w8 = w.to(torch.float8_e4m3fn)
                one = torch.ones((), device=dev, dtype=torch.float32)
                fn = lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one,
                                              out_dtype=torch.bfloat16)
                med, best = timer(fn, 3, 10, cuda)
                rows.append({"shape": label, "m": m, "n": n, "k": k, "dtype": "fp8_e4m3",
                             "median_s": med, "best_s": best, "tflops": flops / med / 1e12})
                del a8, w8
            except Exception as e:  # an FP8 path missing in this torch: say so, go on
                rows.append({"shape": label, "dtype": "fp8_e4m3", "error": repr(e)[:300]})
                fp8 = False
        del a, w
    return rows


# ---------------------------------------------------------------- gemm sweep
# (name, hidden, ffn columns of fc1 (2 x ffn with SwiGLU), ffn, q heads x head dim + 2 kv heads x
# head dim, tensor-parallel sizes): GPT-style (Narayanan et al. 2021) and Llama-3-style layers.
SWEEP_MODELS = [
    ("gpt-5.9b", 3840, 4 * 3840, 4 * 3840, 3 * 3840, (1, 2, 4, 8)),
    ("llama3-8b", 4096, 2 * 14336, 14336, 4096 + 2 * 1024, (1, 2, 4, 8)),
    ("llama3-70b", 8192, 2 * 28672, 28672, 8192 + 2 * 1024, (2, 4, 8)),
    ("gpt-175b", 12288, 4 * 12288, 4 * 12288, 3 * 12288, (4, 8)),
    ("gpt-91b", 15360, 4 * 15360, 4 * 15360, 3 * 15360, (8,)),
]
SWEEP_TOKENS = (1024, 2048, 4096, 8192, 16384)


def sweep_shapes(quick):
    """(label, pass, M, N, K): every GEMM of one layer's forward and backward, per model, TP
    size and tokens M; pass fwd = x @ W^T, dgrad = dy @ W, wgrad = dy^T @ x (output M x N,
    inner K of the product as run)."""
    if quick:
        return [("toy qkv", "fwd", 64, 96, 32), ("toy qkv", "dgrad", 64, 32, 96),
                ("toy qkv", "wgrad", 96, 32, 64)]
    out, seen = [], set()
    for name, h, fc1, ffn, qkv, tps in SWEEP_MODELS:
        for tp in tps:
            layer = (("qkv", qkv // tp, h), ("proj", h, h // tp), ("fc1", fc1 // tp, h),
                     ("fc2", h, ffn // tp))
            for m in SWEEP_TOKENS:
                for gemm, n, k in layer:
                    label = f"{name}/TP{tp} {gemm}"
                    for p, shape in (("fwd", (m, n, k)), ("dgrad", (m, k, n)),
                                     ("wgrad", (n, k, m))):
                        if (p, shape) not in seen:
                            seen.add((p, shape))
                            out.append((label, p, *shape))
    return out


def measure_gemm_sweep(dev, quick):
    """BF16 time of every sweep shape, run with the operand layouts of a linear layer."""
    rows = []
    for label, p, m, n, k in sweep_shapes(quick):
        try:
            rows.append(time_sweep_gemm(dev, label, p, (m, n, k), quick))
        except Exception as e:  # one shape failing (out of memory) loses only that row
            rows.append({"shape": label, "pass": p, "m": m, "n": n, "k": k, "dtype": "bf16",
                         "error": repr(e)[:300]})
    return rows


def time_sweep_gemm(dev, label, p, mnk, quick):
    """One sweep row: the BF16 GEMM of pass `p` (output M x N, inner K) timed with the
    operand layouts of a linear layer."""
    cuda = dev.type == "cuda"
    m, n, k = mnk
    bf = torch.bfloat16
    if p == "fwd":  # x (M x K) @ W^T, W stored N x K
        a, b = torch.randn(m, k, device=dev, dtype=bf), torch.randn(n, k, device=dev, dtype=bf)
        fn = lambda: a @ b.t()
    elif p == "dgrad":  # dy (M x K') @ W (K' x N): here K = the layer's output width
        a, b = torch.randn(m, k, device=dev, dtype=bf), torch.randn(k, n, device=dev, dtype=bf)
        fn = lambda: a @ b
    else:  # dy^T (M x K) @ x (K x N), dy stored K x M
        a, b = torch.randn(k, m, device=dev, dtype=bf), torch.randn(k, n, device=dev, dtype=bf)
        fn = lambda: a.t() @ b
    med, best = timer(fn, 2, 5 if not quick else 1, cuda)
    return {"shape": label, "pass": p, "m": m, "n": n, "k": k, "dtype": "bf16",
            "median_s": med, "best_s": best, "tflops": 2.0 * m * n * k / med / 1e12}


# ---------------------------------------------------------------- attention
def sdpa_backends():
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def measure_attention(dev, quick):
    from torch.nn.attention import sdpa_kernel
    cuda = dev.type == "cuda"
    heads, d = (32, 128) if not quick else (2, 16)
    tokens = 65536 if not quick else 256
    seqs = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072] if not quick else [64, 128]
    backends = sdpa_backends() if cuda else {"math": None}
    rows = []
    for seq in seqs:
        b = max(1, tokens // seq)
        # FLOPs of causal attention's forward (two matmuls over half the score matrix).
        fwd_flops = 4.0 * b * heads * seq * seq * d / 2
        for name, backend in backends.items():
            if name == "efficient" and seq > 16384:
                continue  # slow and not what training stacks run at long context
            row = {"backend": name, "seq": seq, "batch": b, "heads": heads, "head_dim": d,
                   "causal_fwd_flops": fwd_flops}
            try:
                q, k, v = (torch.randn(b, heads, seq, d, device=dev, dtype=torch.bfloat16,
                                       requires_grad=True) for _ in range(3))
                ctx = sdpa_kernel([backend]) if backend is not None else _null()
                with ctx:
                    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    with torch.no_grad():
                        row["fwd_s"], _ = timer(fwd, 2, 5 if not quick else 1, cuda)
                    out = fwd()
                    grad = torch.randn_like(out)

                    def fwd_bwd():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        o.backward(grad)

                    row["fwd_bwd_s"], _ = timer(fwd_bwd, 2, 5 if not quick else 1, cuda)
                row["bwd_s"] = row["fwd_bwd_s"] - row["fwd_s"]
                row["fwd_tflops"] = fwd_flops / row["fwd_s"] / 1e12
                # FlashAttention-2's backward: five matmuls to the forward's two (2.5x its FLOPs).
                row["bwd_tflops_at_2_5x"] = 2.5 * fwd_flops / row["bwd_s"] / 1e12
                del q, k, v, out, grad
            except Exception as e:
                row["error"] = repr(e)[:300]
            rows.append(row)
            if cuda:
                torch.cuda.empty_cache()
    return rows


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# ---------------------------------------------------------------- train
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_tables(seq, head_dim, dev, theta=500000.0):
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=dev, dtype=torch.float32) / head_dim)
    ang = torch.outer(torch.arange(seq, device=dev, dtype=torch.float32), inv)
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    return out.type_as(x)


class Block(nn.Module):
    def __init__(self, h, heads, kv_heads, ffn, checkpoint=False):
        super().__init__()
        self.checkpoint = checkpoint
        self.heads, self.kv_heads, self.hd = heads, kv_heads, h // heads
        self.wq = nn.Linear(h, h, bias=False)
        self.wk = nn.Linear(h, kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(h, kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(h, h, bias=False)
        self.w1 = nn.Linear(h, ffn, bias=False)
        self.w3 = nn.Linear(h, ffn, bias=False)
        self.w2 = nn.Linear(ffn, h, bias=False)
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)

    def forward(self, x, cos, sin):
        # Checkpointing inside the block (torchtitan's order): FSDP2's hooks on the block cast
        # and gather before the checkpoint saves its inputs, so the recomputation matches.
        if self.checkpoint:
            return torch.utils.checkpoint.checkpoint(self.body, x, cos, sin, use_reentrant=False)
        return self.body(x, cos, sin)

    def body(self, x, cos, sin):
        b, s, h = x.shape
        y = self.n1(x)
        q = apply_rope(self.wq(y).view(b, s, self.heads, self.hd), cos, sin)
        k = apply_rope(self.wk(y).view(b, s, self.kv_heads, self.hd), cos, sin)
        v = self.wv(y).view(b, s, self.kv_heads, self.hd)
        rep = self.heads // self.kv_heads
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, h))
        y = self.n2(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Llama(nn.Module):
    def __init__(self, layers, h, heads, kv_heads, ffn, vocab, checkpoint):
        super().__init__()
        self.emb = nn.Embedding(vocab, h)
        self.blocks = nn.ModuleList(Block(h, heads, kv_heads, ffn, checkpoint)
                                    for _ in range(layers))
        self.norm = RMSNorm(h)
        self.hd = h // heads

    def forward(self, tokens):
        x = self.emb(tokens)
        cos, sin = rope_tables(tokens.shape[1], self.hd, tokens.device)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return F.linear(self.norm(x), self.emb.weight)  # tied output layer


# Llama 3.2 1B and 3B shapes (tied embeddings, vocabulary 128,256, GQA with 8 KV heads).
SHAPES = {
    "llama3.2-1b": dict(layers=16, h=2048, heads=32, kv_heads=8, ffn=8192, vocab=128256),
    "llama3.2-3b": dict(layers=28, h=3072, heads=24, kv_heads=8, ffn=8192, vocab=128256),
    # Eight of Llama 3.1 8B's 32 layers (the full model's optimizer state does not fit one GPU).
    "llama3.1-8b-8l": dict(layers=8, h=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256),
    "toy": dict(layers=2, h=64, heads=4, kv_heads=2, ffn=128, vocab=256),
}
# (model, sequence, local batch, recompute[, attention, precision]): attention "flash" (SDPA's
# FlashAttention-2 kernels) or "cudnn" (cuDNN fused attention); precision "amp" (FP32
# parameters under BF16 autocast, a plain PyTorch AMP loop) or "fsdp2" (torchtitan's way: FSDP2
# on this one GPU with MixedPrecisionPolicy BF16 parameters, FP32 gradient reduction).
TRAIN_SETS = {
    "default": [  # most telling first: the time budget may stop the list early
        ("llama3.2-1b", 2048, 8, "none"),
        ("llama3.2-1b", 8192, 2, "none"),
        ("llama3.2-3b", 4096, 4, "none"),
        ("llama3.2-3b", 4096, 4, "full"),
        ("llama3.2-1b", 32768, 1, "full"),
        ("llama3.2-1b", 65536, 1, "full"),
        ("llama3.2-1b", 16384, 2, "none"),
        ("llama3.2-3b", 16384, 1, "full"),
    ],
    # One model at several local batches (the micro-batch size of a pipeline stage): how much
    # a larger batch per GEMM gains per token (issue 26).
    "mbs": [
        ("llama3.2-1b", 2048, 1, "none", "cudnn", "fsdp2"),
        ("llama3.2-1b", 2048, 2, "none", "cudnn", "fsdp2"),
        ("llama3.2-1b", 2048, 4, "none", "cudnn", "fsdp2"),
        ("llama3.2-1b", 2048, 8, "none", "cudnn", "fsdp2"),
        ("llama3.1-8b-8l", 2048, 1, "none", "cudnn", "fsdp2"),
        ("llama3.1-8b-8l", 2048, 2, "none", "cudnn", "fsdp2"),
        ("llama3.1-8b-8l", 2048, 4, "none", "cudnn", "fsdp2"),
        ("llama3.1-8b-8l", 2048, 8, "none", "cudnn", "fsdp2"),
    ],
    "fsdp2": [
        ("llama3.2-1b", 2048, 8, "none", "flash", "fsdp2"),
        ("llama3.2-1b", 32768, 1, "full", "flash", "fsdp2"),
        ("llama3.2-1b", 32768, 1, "full", "cudnn", "fsdp2"),
        ("llama3.2-1b", 8192, 2, "none", "flash", "fsdp2"),
        ("llama3.2-1b", 8192, 2, "none", "cudnn", "fsdp2"),
        ("llama3.2-3b", 4096, 4, "full", "flash", "fsdp2"),
        ("llama3.2-1b", 65536, 1, "full", "flash", "fsdp2"),
    ],
}
# Longer sequences under torchtitan's precision, each kernel on the same run: what the
# Hopper attention efficiencies are checked against (issue 26).
TRAIN_SETS["long"] = [
    ("llama3.2-1b", 16384, 1, "full", "flash", "fsdp2"),
    ("llama3.2-1b", 16384, 1, "full", "cudnn", "fsdp2"),
    ("llama3.2-3b", 8192, 2, "full", "flash", "fsdp2"),
    ("llama3.2-3b", 8192, 2, "full", "cudnn", "fsdp2"),
    ("llama3.2-3b", 32768, 1, "full", "flash", "fsdp2"),
    ("llama3.2-3b", 32768, 1, "full", "cudnn", "fsdp2"),
    ("llama3.2-1b", 49152, 1, "full", "flash", "fsdp2"),
    ("llama3.2-1b", 49152, 1, "full", "cudnn", "fsdp2"),
]
# Runs no decision about the h200 profile saw (issue 26): Llama 3.1 8B layers, and the 1B at 48K.
TRAIN_SETS["fresh"] = [
    ("llama3.1-8b-8l", 8192, 2, "none", "flash", "fsdp2"),
    ("llama3.1-8b-8l", 8192, 2, "none", "cudnn", "fsdp2"),
    ("llama3.1-8b-8l", 32768, 1, "full", "flash", "fsdp2"),
    ("llama3.1-8b-8l", 32768, 1, "full", "cudnn", "fsdp2"),
    ("llama3.2-1b", 49152, 1, "full", "flash", "fsdp2"),
    ("llama3.2-1b", 49152, 1, "full", "cudnn", "fsdp2"),
]
# Runs the host-bound caution (copus predict's caveat, chosen on the mbs set) was not chosen
# on: four it marks (a micro-batch under 0.15 s of predicted GPU work) and four it does not.
TRAIN_SETS["host"] = [
    ("llama3.2-3b", 2048, 1, "none", "cudnn", "fsdp2"),
    ("llama3.2-3b", 2048, 2, "none", "cudnn", "fsdp2"),
    ("llama3.2-3b", 2048, 4, "none", "cudnn", "fsdp2"),
    ("llama3.2-1b", 4096, 1, "none", "cudnn", "fsdp2"),
    ("llama3.2-1b", 4096, 2, "none", "cudnn", "fsdp2"),
    ("llama3.1-8b-8l", 4096, 1, "none", "cudnn", "fsdp2"),
    ("llama3.2-1b", 1024, 4, "none", "cudnn", "fsdp2"),
    ("llama3.2-1b", 1024, 16, "none", "cudnn", "fsdp2"),
]
# Runs the caution's per-layer term (added after the host set) was not chosen on: the 28-layer
# 3B where only that term marks the micro-batch (1 x 4K, 4 x 1K, 1 x 3K) and just above it
# (3 x 2K, 6 x 1K).
TRAIN_SETS["host2"] = [
    ("llama3.2-3b", 4096, 1, "none", "cudnn", "fsdp2"),
    ("llama3.2-3b", 1024, 4, "none", "cudnn", "fsdp2"),
    ("llama3.2-3b", 3072, 1, "none", "cudnn", "fsdp2"),
    ("llama3.2-3b", 2048, 3, "none", "cudnn", "fsdp2"),
    ("llama3.2-3b", 1024, 6, "none", "cudnn", "fsdp2"),
]
# The fsdp2 set's runs with activation checkpointing alone.
TRAIN_SETS["fsdp2-full"] = [r for r in TRAIN_SETS["fsdp2"] if r[3] == "full"]


def one_gpu_group(dev):
    """A process group of this one process (FSDP2 needs one), created once."""
    import torch.distributed as dist
    if not dist.is_initialized():
        import tempfile
        store = tempfile.mkdtemp()
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo",
                                init_method=f"file://{store}/rdzv", rank=0, world_size=1)


def wrap_fsdp2(model, dev):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    one_gpu_group(dev)
    mesh = init_device_mesh(dev.type, (1,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


def release(cuda):
    """Free what the last run left: Python's reference cycles, then the CUDA cache."""
    import gc
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def make_step(dev, name, seq, batch, recompute, attention, precision):
    """A training step of model `name` on `batch` x `seq` tokens as measure_train runs it:
    (step, model, optimizer, row fields); the step closure holds the model, the optimizer and
    the tokens until it is dropped. Raises what building the model or optimizer raises."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    cuda = dev.type == "cuda"
    shape = SHAPES[name]
    fields = {}
    torch.manual_seed(0)
    model = Llama(**shape, checkpoint=recompute == "full").to(dev)
    fields["params"] = sum(p.numel() for p in model.parameters())
    if precision == "fsdp2":
        model = wrap_fsdp2(model, dev)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
        fields["optimizer"] = "AdamW fused" if cuda else "AdamW"
    except Exception:  # no fused AdamW for these parameters (DTensor) in this torch
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        fields["optimizer"] = "AdamW foreach"
    tokens = torch.randint(0, shape["vocab"], (batch, seq + 1), device=dev)
    inp, tgt = tokens[:, :-1], tokens[:, 1:]
    kernel = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    backends = [kernel[attention]] if cuda else [SDPBackend.MATH]
    autocast = precision == "amp"

    def forward_backward():
        # The backward inside the SDPA choice too: checkpointed layers recompute there.
        with sdpa_kernel(backends):
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
                logits = model(inp)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt.flatten())
            loss.backward()

    def optimizer_step():
        opt.step()
        opt.zero_grad(set_to_none=True)

    def step():
        forward_backward()
        optimizer_step()

    step.forward_backward = forward_backward
    step.optimizer_step = optimizer_step
    return step, model, opt, fields


def measure_train(dev, quick, budget_s, train_set):
    cuda = dev.type == "cuda"
    runs = TRAIN_SETS[train_set]
    if quick:
        runs = [("toy", 32, 2, "none"), ("toy", 32, 2, "full"), ("toy", 32, 2, "full", "flash", "fsdp2")]
    rows = []
    t_end = time.monotonic() + budget_s
    for run in runs:
        name, seq, batch, recompute = run[:4]
        attention, precision = (run[4], run[5]) if len(run) > 4 else ("flash", "amp")
        shape = SHAPES[name]
        row = {"model": name, **shape, "seq": seq, "local_batch": batch, "recompute": recompute,
               "attention": f"sdpa {attention}" if cuda else "sdpa math", "precision": precision}
        if time.monotonic() > t_end:
            row["error"] = "skipped: time budget spent"
            rows.append(row)
            continue
        step = model = opt = None
        try:
            step, model, opt, fields = make_step(dev, name, seq, batch, recompute, attention,
                                                 precision)
            row.update(fields)
            if cuda:
                step()
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats(dev)
            med, best = timer(step, 1, 3 if not quick else 1, cuda)
            row.update(step_s=med, best_step_s=best, tokens_per_s=batch * seq / med)
            if cuda:
                row["max_allocated_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
                row["max_reserved_gib"] = torch.cuda.max_memory_reserved(dev) / 2**30
        except torch.OutOfMemoryError as e:
            row["error"] = "oom"
            row["detail"] = str(e).splitlines()[0][:300]
        except Exception as e:
            row["error"] = repr(e)[:300]
        # The step closure holds the model, optimizer and tokens: drop it too, and collect
        # FSDP's reference cycles, before the next run allocates (for a few hours on
        # 2026-12-04 it stayed alive: the `host` and `host2` calls' memory figures may include
        # the previous run's model and were withdrawn, copus-h200-batch.csv).
        step = model = opt = None
        release(cuda)
        rows.append(row)
        print("train", json.dumps(row), flush=True)
    return rows


# ---------------------------------------------------------------- profile
# (model, sequence, batch, precision): where a small step's time goes (issue 26: the 1B at one
# 2K sequence takes 0.128 s where its kernels need about 0.05 s).
PROFILE_RUNS = [
    ("llama3.2-1b", 2048, 1, "fsdp2"),
    ("llama3.2-1b", 2048, 1, "amp"),
    ("llama3.1-8b-8l", 2048, 1, "fsdp2"),
    ("llama3.2-1b", 2048, 8, "fsdp2"),
]


def is_annotation(event):
    """Whether a profiler event is a named range (record_function: the optimizer's step,
    FSDP's hooks), not a kernel or a copy."""
    if getattr(event, "is_user_annotation", False):
        return True
    return event.name.startswith(("Optimizer.", "FSDP::", "ProfilerStep"))


def busy_seconds(events):
    """Seconds in which at least one of `events` ran on the device (the union of their time
    ranges: kernels on several streams at once count once)."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    busy, end = 0.0, None
    for start, stop in spans:
        if end is None or start > end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    return busy / 1e6


def measure_profile(dev, quick):
    """Per run: the step's wall time, the CPU time to issue its forward+backward and its
    optimizer step (perf_counter without synchronising), the device's kernel time (the sum of
    its kernels' and copies' durations under torch.profiler, annotation ranges left out), its
    busy time (their union), the kernel count, and the top CPU ops and GPU kernels."""
    cuda = dev.type == "cuda"
    runs = [("toy", 32, 2, "fsdp2"), ("toy", 32, 2, "amp")] if quick else PROFILE_RUNS
    rows = []
    for name, seq, batch, precision in runs:
        row = {"model": name, "seq": seq, "local_batch": batch, "precision": precision,
               "attention": "sdpa cudnn" if cuda else "sdpa math"}
        step = model = opt = None
        try:
            step, model, opt, fields = make_step(dev, name, seq, batch, "none",
                                                 "cudnn" if cuda else "flash", precision)
            row.update(fields)
            for _ in range(2):
                step()
            sync = torch.cuda.synchronize if cuda else (lambda: None)
            sync()
            med, _ = timer(step, 0, 3 if not quick else 1, cuda)
            row["step_s"] = med
            issue_fb, issue_opt, done = [], [], []
            for _ in range(3 if not quick else 1):
                sync()
                t0 = time.perf_counter()
                step.forward_backward()
                t1 = time.perf_counter()
                step.optimizer_step()
                t2 = time.perf_counter()
                sync()
                t3 = time.perf_counter()
                issue_fb.append(t1 - t0)
                issue_opt.append(t2 - t1)
                done.append(t3 - t0)
            row["cpu_issue_forward_backward_s"] = statistics.median(issue_fb)
            row["cpu_issue_optimizer_s"] = statistics.median(issue_opt)
            row["wall_synchronised_s"] = statistics.median(done)
            from torch.profiler import ProfilerActivity, profile
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            with profile(activities=acts) as prof:
                step()
                sync()
            events = prof.key_averages()
            if cuda:
                # Device events without the profiler's annotation ranges (the optimizer's and
                # FSDP's), which span the kernels they contain and would count them twice.
                kernels = [e for e in prof.events() if e.device_type.name == "CUDA"
                           and not is_annotation(e)]
                row["gpu_kernel_s"] = sum(e.device_time_total for e in kernels) / 1e6
                row["gpu_busy_s"] = busy_seconds(kernels)
                row["gpu_kernels"] = len(kernels)
                by_name = {}
                for e in kernels:
                    n, t = by_name.get(e.name, (0, 0.0))
                    by_name[e.name] = (n + 1, t + e.device_time_total / 1e6)
                top_gpu = sorted(by_name.items(), key=lambda kv: kv[1][1], reverse=True)[:25]
                row["top_gpu"] = [(k[:160], n, t) for k, (n, t) in top_gpu]
            row["cpu_ops"] = sum(e.count for e in events if e.device_type.name == "CPU")
            top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:10]
            row["top_cpu_self"] = [(e.key, e.count, e.self_cpu_time_total / 1e6) for e in top]
        except Exception as e:
            row["error"] = repr(e)[:300]
        step = model = opt = None
        release(cuda)
        rows.append(row)
        print("profile", json.dumps({k: v for k, v in row.items()
                                     if k not in ("top_cpu_self", "top_gpu")}),
              flush=True)
    return rows

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--quick", action="store_true", help="toy sizes (exercise the script on a CPU)")
    p.add_argument("--train-budget-s", type=float, default=150.0)
    p.add_argument("--parts", default="gemm,attention,train",
                   help="comma-separated: gemm, attention, train, gemm-sweep (every GEMM of a "
                        "layer's forward and backward over models, TP sizes and 1K-16K tokens), "
                        "profile (where a small training step's time goes)")
    p.add_argument("--train-set", default="default", choices=sorted(TRAIN_SETS),
                   help="which training runs (default: AMP; fsdp2: torchtitan's precision)")
    args = p.parse_args()
    known = ("gemm", "attention", "train", "gemm-sweep", "profile")
    unknown = [x for x in args.parts.split(",") if x not in known]
    if unknown:
        p.error(f"--parts: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    os.makedirs(args.out_dir, exist_ok=True)
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    if not cuda and not args.quick:
        sys.exit("measure_gpu: no CUDA device (use --quick to exercise the script on a CPU)")
    env = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if cuda else None,
           "device": torch.cuda.get_device_name(dev) if cuda else platform.processor(),
           "python": platform.python_version(),
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    if cuda:
        props = torch.cuda.get_device_properties(dev)
        env.update(sms=props.multi_processor_count, memory_gib=props.total_memory / 2**30)
    result = {"env": env}
    parts = {"gemm": lambda: measure_gemm(dev, args.quick),
             "attention": lambda: measure_attention(dev, args.quick),
             "gemm-sweep": lambda: measure_gemm_sweep(dev, args.quick),
             "profile": lambda: measure_profile(dev, args.quick),
             "train": lambda: measure_train(dev, args.quick, args.train_budget_s, args.train_set)}
    for part in args.parts.split(","):
        t = time.monotonic()
        try:
            result[part] = parts[part]()
        except Exception:
            result[part] = {"error": traceback.format_exc()[-2000:]}
        print(f"measure_gpu: {part} done in {time.monotonic() - t:.1f}s", flush=True)
        with open(os.path.join(args.out_dir, "measure_gpu.json"), "w") as f:
            json.dump(result, f, indent=1)
    summarize(result)
    if args.quick and failures(result):
        # The toy run exercises the script: any part or row that failed is a failure.
        sys.exit("measure_gpu: --quick: " + "; ".join(failures(result)))


def failures(result):
    """What failed in `result`: whole parts, and rows with an error other than running out
    of memory or the time budget."""
    out = []
    for part, value in result.items():
        if isinstance(value, dict) and "error" in value and part != "env":
            out.append(f"{part}: {value['error'].strip().splitlines()[-1]}")
        for row in value if isinstance(value, list) else []:
            err = row.get("error")
            if err and err != "oom" and not err.startswith("skipped"):
                out.append(f"{part}: {err}")
    return out


def summarize(r):
    print(json.dumps(r["env"]))
    for row in r.get("gemm", []) if isinstance(r.get("gemm"), list) else []:
        if "tflops" in row:
            print(f"gemm {row['dtype']:9} {row['shape']:16} {row['tflops']:8.1f} TFLOP/s")
    for row in r.get("gemm-sweep", []) if isinstance(r.get("gemm-sweep"), list) else []:
        what = f"{row['tflops']:7.1f} TFLOP/s" if "tflops" in row else row.get("error")
        print(f"sweep {row['shape']:20} {row['pass']:5} {row['m']:6} {row['n']:6} {row['k']:6} "
              f"{what}")
    for row in r.get("attention", []) if isinstance(r.get("attention"), list) else []:
        if "fwd_s" in row:
            print(f"attn {row['backend']:9} seq {row['seq']:6} fwd {row['fwd_tflops']:6.1f} "
                  f"bwd(2.5x) {row['bwd_tflops_at_2_5x']:6.1f} TFLOP/s  bwd/fwd time "
                  f"{row['bwd_s'] / row['fwd_s']:.2f}")
        else:
            print(f"attn {row['backend']:9} seq {row['seq']:6} {row.get('error')}")
    for row in r.get("profile", []) if isinstance(r.get("profile"), list) else []:
        print("profile", {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                          if k not in ("top_cpu_self", "top_gpu")})
    for row in r.get("train", []) if isinstance(r.get("train"), list) else []:
        print("train", {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                        if k not in ("detail",)})


if __name__ == "__main__":
    main()
