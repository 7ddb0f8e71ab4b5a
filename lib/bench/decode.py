"""`python -m lib.bench decode`: greedy decoding speed on this machine's CPU, float32 and int8,
both twins with and without the KV cache and `transformers`' generate, on the same random
weights, against the machine's roofline.

The 124M preset, batch 1, a 16-token prompt, 200 new tokens (all configurable). The cached
contenders run interleaved rep by rep (each after a short pause), so that machine noise hits
them alike; the uncached ones (minutes each) run `--no-cache-reps` times. Contenders: the
taught cached decoding of each twin in float32 (the torch twin's on the CPU multiplies through
`lib.torch_twin.cpu_decode`), the numpy twin's fast path (`lib.numpy_twin.fast_decode`) in
float32 and int8, the torch twin in int8 (`lib.torch_twin.quant`), transformers. Reported:
median tokens/s (and the best), each as a percentage of the bound that memory bandwidth sets
for its precision: decoding one token reads every weight once and does little arithmetic per
byte, so tokens/s <= read bandwidth / weight bytes (`lib.bench.roofline`; the bandwidth is the
fastest of a few plain reads of a 512 MiB array). `--batches 1,2,4,...` adds decode steps per
second at each batch (the prompt's prefill untimed) beside both bounds, memory and compute (the
measured peak of a float32 matrix product in each twin's library). Last line: one JSON object
(`--json`: that line alone).

On a busy shared machine wall-clock figures mostly measure the other processes (threads that
wait for a core stall everyone). `--cpu-time` then times with the process's CPU clock instead;
it needs one thread per library, so run it as
`OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 python -m lib.bench decode --cpu-time`:
tokens per CPU-second, bandwidth and bound on that same clock.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import time

import numpy as np
import torch

from .. import numpy_twin as nt
from .. import torch_twin as tt
from ..config import GPTConfig, kv_cache_bytes
from ..numpy_twin import fast_decode
from ..torch_twin import quant
from ..weights import to_hf_config, to_hf_state
from . import roofline

TARGETS = {"torch cache fp32 / transformers fp32": 1.4, "numpy cache fp32 / transformers fp32": 1.2,
           "numpy cache fp32 / no cache": 4.0, "torch cache fp32 / no cache": 4.0,
           "torch int8 / torch cache fp32": 1.8, "numpy int8 / numpy fast fp32": 1.3}
BOUND_TARGET = 70                                            # % of the bound for batch-1 fp32 decoding
FP32_FAST = ("numpy fast fp32", "torch cache fp32")          # the fast paths held to BOUND_TARGET


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


class Models:
    """Both twins on one seed's weights, with their fast layouts built once: `np_fp32` and
    `np_int8` (numpy fast-path products), `torch_int8` (packed int8 weights)."""

    def __init__(self, cfg: GPTConfig, seed: int):
        self.numpy, self.torch = nt.GPT(cfg, seed=seed).eval(), tt.GPT(cfg, seed=seed).eval()
        self.np_fp32 = fast_decode.products(self.numpy, "fp32")
        self.np_int8 = fast_decode.products(self.numpy, "int8")
        self.torch_int8 = quant.pack_model(self.torch)

    def weight_bytes(self) -> dict[str, int]:
        """Bytes of the matrix products' weights each precision reads, measured from the arrays."""
        return {"fp32": fast_decode.weight_bytes(self.np_fp32), "numpy int8": fast_decode.weight_bytes(self.np_int8),
                "torch int8": quant.weight_bytes(self.torch)}

    def streams(self):
        """name -> (layout, make_stream): make_stream(prompt (B, T) int64 array, n), called and
        consumed inside `layout()`, streams n new tokens."""
        n, t, plain = self.numpy, self.torch, contextlib.nullcontext
        numpy_stream = lambda idx, k: n.stream(idx, k, temperature=0)
        torch_stream = lambda idx, k: t.stream(torch.from_numpy(idx), k, temperature=0)
        return {"numpy cache fp32": (plain, numpy_stream),
                "numpy fast fp32": (lambda: fast_decode.decode_layout(n, table=self.np_fp32), numpy_stream),
                "numpy int8": (lambda: fast_decode.decode_layout(n, table=self.np_int8), numpy_stream),
                "torch cache fp32": (plain, torch_stream),
                "torch int8": (lambda: quant.int8_layout(t, self.torch_int8), torch_stream)}


def generate(layout, make_stream, idx, n):
    """(B, T) prompt -> (B, T + n): the prompt and the n tokens that make_stream streams inside layout."""
    with layout():
        ids = [np.asarray(i.cpu() if torch.is_tensor(i) else i)[:, None] for i in make_stream(idx, n)]
    return np.concatenate([idx, *ids], axis=1)


def contenders(models: Models, cfg: GPTConfig, uncached: bool):
    """name -> function(prompt, n) -> (B, T + n) array; all on the same weights."""
    runs = {name: (lambda idx, n, s=s: generate(*s, idx, n)) for name, s in models.streams().items()}
    hf = hf_model(cfg, models.numpy.state_dict())

    def hf_generate(idx, n):
        with torch.inference_mode():
            return hf.generate(torch.from_numpy(idx), max_new_tokens=n, do_sample=False).numpy()

    runs["transformers fp32"] = hf_generate
    if uncached:
        runs["numpy no cache fp32"] = lambda idx, n: models.numpy.generate(idx, n, temperature=0, use_cache=False)
        runs["torch no cache fp32"] = lambda idx, n: models.torch.generate(
            torch.from_numpy(idx), n, temperature=0, use_cache=False).numpy()
    return runs


def agreement(a, b) -> int:
    """How many new tokens two outputs share before they first differ."""
    differ = np.flatnonzero(a[0] != b[0])
    return int(differ[0] if differ.size else a.shape[1])


def time_runs(runs, names, reps, idx, n, clock, pause=0.5):
    """{name: [seconds per run]}, {name: last output}: the named runs interleaved rep by rep."""
    times, outputs = {name: [] for name in names}, {}
    for _ in range(reps):
        for name in names:
            time.sleep(pause)                                # let the last one's BLAS threads stop spinning
            t0 = clock()
            outputs[name] = runs[name](idx, n)
            times[name].append(clock() - t0)
    return times, outputs


def batch_sweep(models: Models, cfg: GPTConfig, batches, n, clock, names=None) -> dict[str, dict[int, float]]:
    """{name: {batch: tokens/s}}: n decode steps after a 1-token prompt (whose prefill and first
    step are untimed), batch x steps / seconds, each contender after a pause; every contender of
    `models.streams()`, or those named."""
    streams = {name: s for name, s in models.streams().items() if names is None or name in names}
    out = {name: {} for name in streams}
    for batch in batches:
        idx = np.random.default_rng(batch).integers(0, cfg.vocab_size, (batch, 1))
        for name, (layout, make_stream) in streams.items():
            time.sleep(0.5)
            with layout():
                stream = make_stream(idx, n + 1)
                next(stream)
                t0 = clock()
                for _ in stream:
                    pass
                out[name][batch] = batch * n / (clock() - t0)
    return out


def measure_machine(cfg: GPTConfig, clock, weight_bytes) -> dict:
    """Read bandwidth, each twin's matmul peak and the bounds of batch-1 decoding per precision."""
    bandwidth = roofline.read_bandwidth(clock)
    peak = {twin: roofline.matmul_peak(twin, clock=clock) for twin in ("numpy", "torch")}
    best = max(bandwidth.values()) * 1e9
    bound = {name: best / nbytes for name, nbytes in weight_bytes.items()}
    return {"bandwidth_gb_s": bandwidth, "peak_flops": peak, "bound_tokens_per_s": bound, "best_bandwidth": best}


def bound_of(name: str, bounds: dict) -> float:
    """The batch-1 bound of a contender: its precision's (and for int8 its twin's) weight bytes."""
    return bounds[f"{name.split()[0]} int8"] if name.endswith("int8") else bounds["fp32"]


def print_machine(cfg, machine, weight_bytes, args):
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    for name, gbs in machine["bandwidth_gb_s"].items():
        print(f"  read bandwidth, {name:<22} {gbs:6.1f} GB/s")
    for twin, flops in machine["peak_flops"].items():
        print(f"  float32 matrix product peak, {twin:<6} {flops / 1e9:6.1f} GFLOP/s")
    for name, nbytes in weight_bytes.items():
        print(f"bound, {name:<10}: {machine['best_bandwidth'] / 1e9:.1f} GB/s / {nbytes / 1e6:.1f} MB of weights "
              f"per token = {machine['bound_tokens_per_s'][name]:.1f} tokens/s")
    print(f"KV cache: {kv_cache_bytes(cfg, 1)} bytes per token, {kv_cache_bytes(cfg, args.prompt + args.new) / 2**20:.1f} "
          f"MiB for this run")


def print_table(cfg, args, tok_s, best, percent, outputs, unit):
    print(f"\n{cfg.n_layer} layers, batch 1, {args.prompt}-token prompt, {args.new} new tokens, greedy; {unit}")
    print(f"{'contender':<20} {'tokens/s':>9} {'best':>7} {'% of bound':>11} {'same tokens as transformers':>28}")
    reference = outputs["transformers fp32"][:, args.prompt:]
    for name in tok_s:
        same = agreement(outputs[name][:, args.prompt:], reference)
        print(f"{name:<20} {tok_s[name]:>9.1f} {best[name]:>7.1f} {percent[name]:>10.0f}% "
              f"{f'first {same} of {args.new}':>28}")


def ratios_of(tok_s) -> dict[str, float]:
    """The TARGETS' ratios that this run measured."""
    out = {}
    for name in TARGETS:
        top, bottom = name.split(" / ")
        bottom = f"{top.split()[0]} no cache fp32" if bottom == "no cache" else bottom
        if top in tok_s and bottom in tok_s:
            out[name] = tok_s[top] / tok_s[bottom]
    return out


def print_sweep(sweep, cfg, machine, n):
    peak = max(machine["peak_flops"].values())
    bw = machine["best_bandwidth"]
    print(f"\ndecode steps at each batch (1-token prompt, {n} timed steps); tokens/s, and fp32's two bounds")
    names = list(sweep)
    print(f"{'batch':>5} " + " ".join(f"{name:>17}" for name in names) + f" {'memory bound':>13} {'compute bound':>14}")
    for batch in next(iter(sweep.values())):
        bound = roofline.decode_bound(cfg, batch, 2, peak, bw)
        print(f"{batch:>5} " + " ".join(f"{sweep[name][batch]:>17.1f}" for name in names)
              + f" {bound['memory']:>13.1f} {bound['compute']:>14.1f}")
    print(f"balance point: {peak / bw:.1f} FLOPs per byte, reached at batch {roofline.balance_batch(cfg, 2, peak, bw)}")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m lib.bench decode", description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=("small", "gpt2", "gpt2_medium"), default="gpt2")
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    p.add_argument("--new", type=int, default=200, help="new tokens per run")
    p.add_argument("--reps", type=int, default=3, help="timed runs of each cached contender and transformers")
    p.add_argument("--no-cache-reps", type=int, default=1, help="timed runs of each uncached contender (0: skip)")
    p.add_argument("--batches", default="", help="comma-separated batch sizes for the sweep, e.g. 1,2,4,8,16,32,64")
    p.add_argument("--sweep-steps", type=int, default=8, help="timed decode steps at each batch of the sweep")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu-time", action="store_true", help="time with the CPU clock, one thread (busy machines)")
    p.add_argument("--json", action="store_true", help="print the JSON line only, without the tables")
    args = p.parse_args(argv)
    cfg = GPTConfig.preset(args.preset)
    if args.cpu_time and (torch.get_num_threads() != 1 or os.environ.get("OPENBLAS_NUM_THREADS") != "1"):
        p.error("--cpu-time needs one thread per library: set OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "
                "MKL_NUM_THREADS=1 in the environment")
    if args.prompt < 1 or args.new < 1 or args.prompt + args.new > cfg.n_ctx:
        p.error(f"--prompt {args.prompt} + --new {args.new} must be >= 1 each and fit the context, "
                f"{cfg.n_ctx} ({args.preset}): transformers' GPT-2 cannot go past it")
    try:
        args.batches = [int(b) for b in args.batches.split(",")] if args.batches else []
    except ValueError:
        p.error(f"--batches must be comma-separated whole numbers, e.g. 1,2,4; got {args.batches!r}")
    if any(b < 1 for b in args.batches) or args.sweep_steps < 1:
        p.error(f"--batches must all be >= 1 and --sweep-steps >= 1; got {args.batches}, {args.sweep_steps}")
    return args, cfg


def main(argv=None):
    args, cfg = parse_args(argv)
    with contextlib.redirect_stdout(io.StringIO()) if args.json else contextlib.nullcontext():
        result = measure(args, cfg)
    print(json.dumps(result))


def measure(args, cfg) -> dict:
    """Run the benchmark, print its tables, return what the JSON line reports."""
    clock = time.process_time if args.cpu_time else time.perf_counter
    load_before = os.getloadavg()[0]
    models = Models(cfg, args.seed)
    weight_bytes = models.weight_bytes()
    machine = measure_machine(cfg, clock, weight_bytes)
    print_machine(cfg, machine, weight_bytes, args)

    runs = contenders(models, cfg, uncached=args.no_cache_reps > 0)
    idx = np.random.default_rng(args.seed).integers(0, cfg.vocab_size, (1, args.prompt))
    for run in runs.values():
        run(idx, 2)                                          # warm-up: allocation, BLAS threads
    cached = [name for name in runs if "no cache" not in name]
    times, outputs = time_runs(runs, cached, args.reps, idx, args.new, clock)
    slow = time_runs(runs, [name for name in runs if name not in cached], args.no_cache_reps, idx, args.new, clock, 0)
    times.update(slow[0]), outputs.update(slow[1])

    tok_s = {name: args.new / statistics.median(t) for name, t in times.items()}
    best = {name: args.new / min(t) for name, t in times.items()}
    percent = {name: 100 * v / bound_of(name, machine["bound_tokens_per_s"]) for name, v in tok_s.items()}
    print_table(cfg, args, tok_s, best, percent, outputs, "tokens per CPU-second, one thread" if args.cpu_time
                else "tokens per second")
    ratios = ratios_of(tok_s)
    met = {name: ratio >= TARGETS[name] for name, ratio in ratios.items()}
    met.update({f"{name} >= {BOUND_TARGET}% of bound": percent[name] >= BOUND_TARGET for name in FP32_FAST})
    for name, ratio in ratios.items():
        print(f"{name:<40} {ratio:6.2f}x  (target >= {TARGETS[name]}x: {'met' if met[name] else 'NOT met'})")
    for name in FP32_FAST:
        print(f"{name:<40} {percent[name]:5.0f}%  of the bound (target >= {BOUND_TARGET}%: "
              f"{'met' if met[f'{name} >= {BOUND_TARGET}% of bound'] else 'NOT met'})")
    sweep = batch_sweep(models, cfg, args.batches, args.sweep_steps, clock) if args.batches else {}
    if sweep:
        print_sweep(sweep, cfg, machine, args.sweep_steps)
    load_after = os.getloadavg()[0]
    if max(load_before, load_after) > 1.5 * (os.cpu_count() or 1):
        print(f"warning: the machine was busy (load average {load_before:.1f} -> {load_after:.1f}); figures are noisy")
    print("GPU figures (bf16, beside transformers): python -m lib.bench gpu")
    return {"benchmark": "decode", "clock": "cpu, one thread" if args.cpu_time else "wall",
            "preset": args.preset, "prompt_tokens": args.prompt, "new_tokens": args.new,
            "tokens_per_s": tok_s, "best_tokens_per_s": best, "percent_of_bound": percent,
            "tokens_per_s_by_batch": sweep, "weight_bytes": weight_bytes,
            "bandwidth_gb_s": machine["bandwidth_gb_s"], "peak_flops": machine["peak_flops"],
            "bound_tokens_per_s": machine["bound_tokens_per_s"], "ratios": ratios, "targets": TARGETS,
            "bound_target_percent": BOUND_TARGET, "met": met,
            "kv_cache_bytes_per_token": kv_cache_bytes(cfg, 1), "load_average": [load_before, load_after]}


if __name__ == "__main__":
    main()
