"""`python -m lib.bench forward`: the numpy twin against the torch twin, same CPU, one run.

Times forward and forward+backward for the small preset (batch 12 x 64) and the 124M preset
(batch 1 x 256), the twins alternating in blocks of 5 reps, each block after a pause and an
untimed rep (as `lib.bench train` does: one library's BLAS threads spin for a while after its
last call and slow the other), so that machine noise hits both alike; reports medians and the
ratio numpy / torch (target: <= 1.5). Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics

import numpy as np
import torch

from .. import numpy_twin as nt
from .. import torch_twin as tt
from ..allocator import keep_freed_memory
from ..config import GPTConfig
from . import time_in_blocks

CASES = {"small": (GPTConfig.small, 12, 64), "gpt2": (GPTConfig.gpt2, 1, 256)}


def _numpy_step(model, idx, G, backward):
    model.forward(idx)
    if backward:
        model.zero_grad()
        model.backward(G)
    else:
        model._cache = None


def _torch_step(model, idx, G, backward):
    if backward:
        model.zero_grad(set_to_none=False)
        (model(idx) * G).sum().backward()
    else:
        with torch.no_grad():
            model(idx)


def measure(case: str, reps: int) -> dict:
    make, B, T = CASES[case]
    cfg = make()
    numpy_model, torch_model = nt.GPT(cfg), tt.GPT(cfg)
    idx = np.random.default_rng(0).integers(0, cfg.vocab_size, (B, T))
    G = np.random.default_rng(1).standard_normal((B, T, cfg.vocab_size)).astype(np.float32)
    idx_t, G_t = torch.as_tensor(idx), torch.as_tensor(G)
    out = {}
    for mode, backward in (("forward", False), ("forward+backward", True)):
        times = time_in_blocks({"numpy": lambda: _numpy_step(numpy_model, idx, G, backward),
                                "torch": lambda: _torch_step(torch_model, idx_t, G_t, backward)}, reps)
        n, t = statistics.median(times["numpy"]), statistics.median(times["torch"])
        out[mode] = {"numpy_ms": 1e3 * n, "torch_ms": 1e3 * t, "ratio": n / t, "reps": len(times["numpy"])}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lib.bench forward", description=__doc__.split("\n")[0])
    p.add_argument("--cases", nargs="+", choices=sorted(CASES), default=["small", "gpt2"])
    p.add_argument("--reps", type=int, default=10, help="timed repetitions per twin (median reported)")
    args = p.parse_args(argv)
    keep_freed_memory()                                      # as a numpy Trainer does (lib/allocator.py)
    results = {}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; numpy {np.__version__}")
    print(f"{'case':<8} {'batch':<9} {'pass':<17} {'numpy ms':>10} {'torch ms':>10} {'numpy/torch':>12}")
    for case in args.cases:
        _, B, T = CASES[case]
        results[case] = measure(case, args.reps)
        for mode, r in results[case].items():
            print(f"{case:<8} {f'{B} x {T}':<9} {mode:<17} {r['numpy_ms']:>10.1f} {r['torch_ms']:>10.1f} "
                  f"{r['ratio']:>11.2f}x")
    worst = max(r["ratio"] for c in results.values() for r in c.values())
    print(f"worst numpy/torch ratio {worst:.2f} (target <= 1.5): {'met' if worst <= 1.5 else 'NOT met'}")
    print(json.dumps({"benchmark": "forward", "results": results, "worst_ratio": worst, "target_ratio": 1.5}))


if __name__ == "__main__":
    main()
