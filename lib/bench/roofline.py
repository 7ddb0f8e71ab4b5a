"""The roofline of this machine for GPT-2: its peak matrix-product FLOP/s in each twin, its read
bandwidth, and GPT-2's FLOPs and bytes per token, from which the two bounds follow.

A step that does F FLOPs while reading Y bytes takes at least max(F / peak, Y / bandwidth)
seconds (Williams et al. 2009). Its arithmetic intensity F / Y, against the machine's balance
point peak / bandwidth, says which bound binds. Decoding at batch B reads every weight once for
B tokens (2 FLOPs per weight and token, 4 bytes per weight in float32): intensity about B / 2,
so a small batch is memory-bound and a batch past 2 x balance compute-bound.
"""
from __future__ import annotations

import time
import tracemalloc

import numpy as np

from ..config import GPTConfig, kv_cache_bytes, param_counts


# ---- GPT-2's arithmetic ----------------------------------------------------------------------------
def matmul_params(cfg: GPTConfig) -> int:
    """N: the weights that take part in a matrix product (every Linear's and the tied head's),
    each used once per token, 2 FLOPs each (a multiply and an add). Embedding lookups, biases
    and norms are not products."""
    C, F, L = cfg.n_embd, cfg.hidden_dim, cfg.n_layer
    qkv = (cfg.n_head + 2 * cfg.kv_heads) * cfg.head_dim
    ups = 2 if cfg.mlp == "swiglu" else 1
    return L * (C * qkv + C * C + ups * C * F + F * C) + cfg.vocab_size * C


def weight_bytes_per_token(cfg: GPTConfig, itemsize=4) -> int:
    """Bytes of weights one decode step reads: everything but wpe, of which it reads one row."""
    counts = param_counts(cfg)
    return itemsize * (counts["total"] - counts["wpe"] + cfg.n_embd)


def decode_flops_per_token(cfg: GPTConfig, context: int) -> int:
    """FLOPs of one new token that attends to `context` positions: 2 N in the products, and
    per layer 2 C context for the scores q k^T and as many for the weighted sum of v."""
    return 2 * matmul_params(cfg) + 4 * cfg.n_layer * cfg.n_embd * context


def train_flops_per_token(cfg: GPTConfig, T: int) -> int:
    """A training step's FLOPs per token: 6 N (forward 2 N, backward 4 N) plus attention's
    12 L C T, counted as PaLM's MFU counts it (the causal mask's skipped half included)."""
    return 6 * matmul_params(cfg) + 12 * cfg.n_layer * cfg.n_embd * T


def decode_bound(cfg: GPTConfig, batch: int, context: int, peak: float, bandwidth: float, itemsize=4) -> dict:
    """Tokens/s that the memory and the arithmetic each allow a decode step at `batch`, each row
    attending to `context` cached positions: its bytes are the weights once plus every row's
    KV cache; its FLOPs, batch tokens' worth. peak in FLOP/s, bandwidth in bytes/s."""
    step_bytes = weight_bytes_per_token(cfg, itemsize) + batch * kv_cache_bytes(cfg, context)
    step_flops = batch * decode_flops_per_token(cfg, context)
    return {"memory": batch * bandwidth / step_bytes, "compute": batch * peak / step_flops,
            "intensity": step_flops / step_bytes}


def balance_batch(cfg: GPTConfig, context: int, peak: float, bandwidth: float, itemsize=4) -> int:
    """The smallest batch whose decode step's intensity reaches the machine's balance point
    (peak / bandwidth FLOPs per byte): from it on, decoding is compute-bound. 0 if none up to 2^16."""
    batch = 1
    while decode_bound(cfg, batch, context, peak, bandwidth, itemsize)["intensity"] < peak / bandwidth:
        batch *= 2
        if batch > 2**16:
            return 0
    low = batch // 2
    while batch - low > 1:                                   # bisect between the last two powers of two
        mid = (low + batch) // 2
        below = decode_bound(cfg, mid, context, peak, bandwidth, itemsize)["intensity"] < peak / bandwidth
        low, batch = (mid, batch) if below else (low, mid)
    return batch


# ---- the machine ------------------------------------------------------------------------------------
def _seconds(fn, clock) -> float:
    t0 = clock()
    fn()
    return clock() - t0


def matmul_peak(twin: str, n=2048, reps=5, clock=time.perf_counter) -> float:
    """FLOP/s of the best of `reps` float32 (n, n) @ (n, n) products (2 n^3 FLOPs) in one twin's
    library: numpy's BLAS or torch's. n = 2048: on a 2-core CPU torch's best of five 1024-wide
    products ranged from 168 to 384 GFLOP/s from one call to the next, its 2048-wide ones from
    377 to 421."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    if twin == "torch":
        import torch
        a, b = torch.from_numpy(a), torch.from_numpy(b)
    elif twin != "numpy":
        raise ValueError(f"twin must be 'numpy' or 'torch', got {twin!r}")
    a @ b                                                    # warm-up: threads, packing buffers
    return 2 * n**3 / min(_seconds(lambda: a @ b, clock) for _ in range(reps))


def read_bandwidth(clock=time.perf_counter, n_bytes=512 * 2**20, reps=5) -> dict[str, float]:
    """GB/s of a few ways to read n_bytes once (best of reps each): numpy's and torch's sums and
    matrix-vector products (what decoding does)."""
    import torch

    a = np.ones(n_bytes // 4, np.float32)                    # (N,)
    W = a.reshape(8192, -1)                                  # (8192, N / 8192)
    x, y = np.ones(W.shape[1], np.float32), np.ones(W.shape[0], np.float32)
    at, Wt, xt = torch.from_numpy(a), torch.from_numpy(W), torch.from_numpy(x)
    ways = {"numpy sum (1 thread)": lambda: a.sum(), "numpy BLAS W @ x": lambda: W @ x,
            "numpy BLAS y @ W": lambda: y @ W, "torch sum": lambda: at.sum(), "torch W @ x": lambda: Wt @ xt}
    out = {}
    for name, read in ways.items():
        read()
        out[name] = n_bytes / min(_seconds(read, clock) for _ in range(reps)) / 1e9
    return out


def peak_memory(fn, *args, runs: int = 3) -> int:
    """Bytes of the most memory that numpy (and Python) held at once while fn(*args) ran,
    beyond what was held before (tracemalloc sees numpy's allocations).

    tracemalloc counts what every thread of the process allocates, so a thread left running
    by other code can only add to a run: the least of `runs` runs is fn's own peak."""
    tracing = tracemalloc.is_tracing()                        # someone else's trace stays on
    if not tracing:
        tracemalloc.start()
    try:
        peaks = []
        for _ in range(runs):
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            fn(*args)
            peaks.append(tracemalloc.get_traced_memory()[1] - before)
        return min(peaks)
    finally:
        if not tracing:
            tracemalloc.stop()
