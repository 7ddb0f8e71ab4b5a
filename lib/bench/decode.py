"""`python -m lib.bench decode`: greedy decoding speed, both twins with and without the KV
cache and `transformers`' generate, on the same random weights, on this machine's CPU.

The 124M preset, batch 1, a 16-token prompt, 200 new tokens, float32 (all configurable).
The fast contenders run interleaved rep by rep (each after a short pause), so that machine
noise hits them alike; the
uncached ones (minutes each) run `--no-cache-reps` times. Reported: median tokens/s (and the
best), each as a percentage of the bound that memory bandwidth sets. Decoding one token reads
every weight once (all blocks, the tied head, one row of wpe) and does little arithmetic per
byte, so tokens/s <= read bandwidth / weight bytes. Bandwidth: the fastest of a few plain reads
of a 512 MiB array (numpy sum, torch sum, and a matrix-vector product through each library's
BLAS, which is what decoding does). Last line: one JSON object. On the CPU the torch twin decodes
through `lib.torch_twin.cpu_decode` (weights in blocks of inputs, one per thread).

On a busy shared machine wall-clock figures mostly measure the other processes (threads that
wait for a core stall everyone). `--cpu-time` then times with the process's CPU clock instead;
it needs one thread per library, so run it as
`OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 python -m lib.bench decode --cpu-time`:
tokens per CPU-second, bandwidth and bound on that same clock.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch

from .. import numpy_twin as nt
from .. import torch_twin as tt
from ..config import GPTConfig, kv_cache_bytes, param_counts
from ..weights import to_hf_config, to_hf_state

TARGETS = {"torch cache / transformers": 1.4, "numpy cache / transformers": 1.2,
           "numpy cache / no cache": 4.0, "torch cache / no cache": 4.0}


def read_bandwidth(clock, n_bytes=512 * 2**20, reps=5) -> dict[str, float]:
    """GB/s of a few ways to read n_bytes once (best of reps each)."""
    a = np.ones(n_bytes // 4, np.float32)                    # (N,)
    W = a.reshape(8192, -1)                                  # (8192, N / 8192)
    x, y = np.ones(W.shape[1], np.float32), np.ones(W.shape[0], np.float32)
    at, Wt, xt = torch.from_numpy(a), torch.from_numpy(W), torch.from_numpy(x)
    ways = {"numpy sum (1 thread)": lambda: a.sum(), "numpy BLAS W @ x": lambda: W @ x,
            "numpy BLAS y @ W": lambda: y @ W, "torch sum": lambda: at.sum(), "torch W @ x": lambda: Wt @ xt}
    out = {}
    for name, read in ways.items():
        read()
        best = min(_seconds(read, clock) for _ in range(reps))
        out[name] = n_bytes / best / 1e9
    return out


def _seconds(fn, clock) -> float:
    t0 = clock()
    fn()
    return clock() - t0


def weight_bytes_per_token(cfg: GPTConfig, itemsize=4) -> int:
    """Bytes of weights one decode step reads: everything but wpe, of which it reads one row."""
    counts = param_counts(cfg)
    return itemsize * (counts["total"] - counts["wpe"] + cfg.n_embd)


def hf_model(cfg: GPTConfig, state):
    """transformers' GPT2LMHeadModel with the course's weights (no download: built from a config)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(**to_hf_config(cfg))).eval()
    result = model.load_state_dict({k: torch.from_numpy(v) for k, v in to_hf_state(cfg, state).items()}, strict=False)
    if result.unexpected_keys or result.missing_keys != ["lm_head.weight"]:
        raise RuntimeError(f"loading into transformers: {result}")
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "head not tied"
    model.generation_config.eos_token_id = None               # never stop early: always n new tokens
    model.generation_config.pad_token_id = 0
    return model


def contenders(cfg: GPTConfig, seed: int):
    """name -> function(prompt (1, T) int64 array, n) -> (1, T + n) array; all on the same weights."""
    numpy_model, torch_model = nt.GPT(cfg, seed=seed), tt.GPT(cfg, seed=seed).eval()
    hf = hf_model(cfg, numpy_model.state_dict())

    def hf_generate(idx, n):
        with torch.inference_mode():
            return hf.generate(torch.from_numpy(idx), max_new_tokens=n, do_sample=False).numpy()

    return {
        "numpy cache": lambda idx, n: numpy_model.generate(idx, n, temperature=0),
        "torch cache": lambda idx, n: torch_model.generate(torch.from_numpy(idx), n, temperature=0).numpy(),
        "transformers": hf_generate,
        "numpy no cache": lambda idx, n: numpy_model.generate(idx, n, temperature=0, use_cache=False),
        "torch no cache": lambda idx, n: torch_model.generate(torch.from_numpy(idx), n, temperature=0,
                                                              use_cache=False).numpy(),
    }


def agreement(a, b) -> int:
    """How many new tokens two outputs share before they first differ."""
    differ = np.flatnonzero(a[0] != b[0])
    return int(differ[0] if differ.size else a.shape[1])


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lib.bench decode", description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=("small", "gpt2", "gpt2_medium"), default="gpt2")
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    p.add_argument("--new", type=int, default=200, help="new tokens per run")
    p.add_argument("--reps", type=int, default=3, help="timed runs of each cached contender and transformers")
    p.add_argument("--no-cache-reps", type=int, default=1, help="timed runs of each uncached contender (0: skip)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu-time", action="store_true", help="time with the CPU clock, one thread (busy machines)")
    args = p.parse_args(argv)
    clock = time.process_time if args.cpu_time else time.perf_counter
    if args.cpu_time and (torch.get_num_threads() != 1 or os.environ.get("OPENBLAS_NUM_THREADS") != "1"):
        p.error("--cpu-time needs one thread per library: set OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "
                "MKL_NUM_THREADS=1 in the environment")

    cfg = GPTConfig.preset(args.preset)
    if args.prompt < 1 or args.new < 1 or args.prompt + args.new > cfg.n_ctx:
        p.error(f"--prompt {args.prompt} + --new {args.new} must be >= 1 each and fit the context, "
                f"{cfg.n_ctx} ({args.preset}): transformers' GPT-2 cannot go past it")
    load_before = os.getloadavg()
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}, "
          f"{os.cpu_count()} CPUs, load average {load_before[0]:.1f}")
    bandwidth = read_bandwidth(clock)
    best_bw = max(bandwidth.values())
    w_bytes = weight_bytes_per_token(cfg)
    bound = best_bw * 1e9 / w_bytes
    for name, gbs in bandwidth.items():
        print(f"  read bandwidth, {name:<22} {gbs:6.1f} GB/s")
    print(f"bound: {best_bw:.1f} GB/s / {w_bytes / 1e6:.1f} MB of weights per token = {bound:.1f} tokens/s")
    print(f"KV cache: {kv_cache_bytes(cfg, 1)} bytes per token, {kv_cache_bytes(cfg, args.prompt + args.new) / 2**20:.1f} "
          f"MiB for this run, {kv_cache_bytes(cfg, cfg.n_ctx) / 2**20:.1f} MiB pre-allocated for the whole context")

    runs = contenders(cfg, args.seed)
    idx = np.random.default_rng(args.seed).integers(0, cfg.vocab_size, (1, args.prompt))
    fast = ["numpy cache", "torch cache", "transformers"]
    slow = [name for name in runs if name not in fast] if args.no_cache_reps else []
    outputs, times = {}, {name: [] for name in fast + slow}
    for name in fast + slow:
        runs[name](idx, 2)                                   # warm-up: allocation, BLAS threads
    for _ in range(args.reps):
        for name in fast:
            time.sleep(0.5)                                  # let the last contender's BLAS threads stop spinning
            t0 = clock()
            outputs[name] = runs[name](idx, args.new)
            times[name].append(clock() - t0)
    for _ in range(args.no_cache_reps):
        for name in slow:
            t0 = clock()
            outputs[name] = runs[name](idx, args.new)
            times[name].append(clock() - t0)
    for name, out in outputs.items():
        assert out.shape == (1, args.prompt + args.new), (name, out.shape)

    tok_s = {name: args.new / statistics.median(t) for name, t in times.items()}
    best = {name: args.new / min(t) for name, t in times.items()}
    unit = "tokens per CPU-second, one thread" if args.cpu_time else "tokens per second"
    print(f"\n{cfg.n_layer} layers, batch 1, {args.prompt}-token prompt, {args.new} new tokens, float32, greedy; {unit}")
    print(f"{'contender':<16} {'tokens/s':>9} {'best':>7} {'% of bound':>11} {'runs':>5} {'same tokens as transformers':>28}")
    for name in times:
        same = agreement(outputs[name][:, args.prompt:], outputs["transformers"][:, args.prompt:])
        print(f"{name:<16} {tok_s[name]:>9.1f} {best[name]:>7.1f} {100 * tok_s[name] / bound:>10.0f}% "
              f"{len(times[name]):>5} {f'first {same} of {args.new}':>28}")
    ratios = {"torch cache / transformers": tok_s["torch cache"] / tok_s["transformers"],
              "numpy cache / transformers": tok_s["numpy cache"] / tok_s["transformers"]}
    for twin in ("numpy", "torch"):
        if f"{twin} no cache" in tok_s:
            ratios[f"{twin} cache / no cache"] = tok_s[f"{twin} cache"] / tok_s[f"{twin} no cache"]
    met = {name: ratio >= TARGETS[name] for name, ratio in ratios.items()}
    print()
    for name, ratio in ratios.items():
        print(f"{name:<28} {ratio:6.2f}x  (target >= {TARGETS[name]}x: {'met' if met[name] else 'NOT met'})")
    load_after = os.getloadavg()
    if max(load_before[0], load_after[0]) > 1.5 * (os.cpu_count() or 1):
        print(f"warning: the machine was busy (load average {load_before[0]:.1f} -> {load_after[0]:.1f}); "
              f"figures are noisy")
    print("GPU figures (bf16, beside transformers): python -m lib.bench gpu")
    print(json.dumps({"benchmark": "decode", "clock": "cpu, one thread" if args.cpu_time else "wall",
                      "preset": args.preset, "prompt_tokens": args.prompt,
                      "new_tokens": args.new, "tokens_per_s": tok_s, "best_tokens_per_s": best,
                      "bandwidth_gb_s": bandwidth, "weight_bytes_per_token": w_bytes, "bound_tokens_per_s": bound,
                      "percent_of_bound": {k: 100 * v / bound for k, v in tok_s.items()},
                      "ratios": ratios, "targets": TARGETS, "met": met,
                      "kv_cache_bytes_per_token": kv_cache_bytes(cfg, 1),
                      "load_average": [load_before[0], load_after[0]]}))


if __name__ == "__main__":
    main()
