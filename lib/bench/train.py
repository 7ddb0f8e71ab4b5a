"""`python -m lib.bench train`: what pretraining reaches and costs, in both twins.

- quality: the small preset (4 layers, 4 heads, 128 wide, context 64, batch 12, no dropout)
  trained with `lib.pretrained.RECIPE` (2,000 steps) on the embedded Shakespeare corpus, byte
  level; validation loss at the end over `--eval-iters` batches (target <= 1.85 per twin).
- timing: training steps of that configuration (batch sampling, forward, backward, clipping,
  AdamW), the two twins alternating in blocks of 5 steps so that machine noise hits both alike;
  medians, and numpy / torch (target <= 1.5; torch target <= ~34 ms, nanoGPT's train.py on a
  2-core CPU). Also timed: the torch twin with nanoGPT's choices for that run (no biases, erf
  GELU, 65 characters), which says whether a gap to 34 ms is the model's or the machine's.
- memory: peak resident memory of one GPT-2 124M training step (batch 1 x 256, AdamW: model,
  gradients, moments and activations) above the process's memory after its imports, in a
  fresh process per twin (target <= 2.5 GiB).
(GPU figures: `python -m lib.bench gpu`.)
Last line: one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys

import numpy as np

from ..config import GPTConfig, TrainConfig
from ..pretrained import RECIPE
from ..twins import TWINS, as_model_ids, twin_module
from . import BLOCK, time_in_blocks

GIB = 2 ** 30
TARGETS = {"val_loss": 1.85, "ratio": 1.5, "torch_ms": 34.0, "memory_gib": 2.5}


# ---- quality ------------------------------------------------------------------------------------
def quality(twin, iters, eval_iters):
    from ..data import load_corpus
    from ..train import train

    train_ids, val_ids = load_corpus("shakespeare", "byte")
    model = twin_module(twin).GPT(GPTConfig.small(), seed=RECIPE["seed"])
    settings = TrainConfig.small(max_iters=iters, eval_interval=iters, eval_iters=eval_iters,
                                 device="cpu" if twin == "torch" else None)
    history = train(model, train_ids, val_ids, settings)
    return {"val_loss": history["val_loss"][-1], "train_loss": history["eval_train_loss"][-1], "iters": iters,
            "ms_per_iter": 1e3 * history["train_seconds"] / iters, "seconds": history["seconds"]}


# ---- timing -------------------------------------------------------------------------------------
def timing(reps):
    import torch

    from .. import numpy_twin, torch_twin

    cfg = GPTConfig.small()
    nano = dataclasses.replace(cfg, vocab_size=65, bias=False, activation="gelu_exact")
    settings = TrainConfig(**RECIPE)
    on_cpu = dataclasses.replace(settings, device="cpu")
    trainers = {"numpy": numpy_twin.Trainer(numpy_twin.GPT(cfg), settings),
                "torch": torch_twin.Trainer(torch_twin.GPT(cfg), on_cpu),
                # nanoGPT's choices for its CPU run (no biases, erf GELU, 65 characters): tells
                # whether a gap to its ~34 ms comes from the model or from the machine
                "torch, nanoGPT's choices": torch_twin.Trainer(torch_twin.GPT(nano), on_cpu)}
    rng = np.random.default_rng(1)

    def step(twin):                                          # a random batch, one training step
        ids = rng.integers(0, trainers[twin].model.config.vocab_size, (RECIPE["batch_size"], cfg.n_ctx + 1))
        trainers[twin].step([(ids[:, :-1], ids[:, 1:])], RECIPE["lr"])

    times = time_in_blocks({twin: lambda twin=twin: step(twin) for twin in trainers}, reps)
    n, t = statistics.median(times["numpy"]), statistics.median(times["torch"])
    return {"numpy_ms": 1e3 * n, "torch_ms": 1e3 * t, "ratio": n / t, "reps": len(times["torch"]),
            "torch_nanogpt_choices_ms": 1e3 * statistics.median(times["torch, nanoGPT's choices"]),
            "torch_threads": torch.get_num_threads()}


# ---- memory -------------------------------------------------------------------------------------
def _status(field):
    """A field of /proc/self/status in bytes (VmRSS: resident now, VmHWM: peak resident)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def memory_child(twin):
    """Run in a fresh process: one 124M training step; prints a JSON line with the peak above
    the memory after imports. The peak counter is reset after the imports (Linux clear_refs)."""
    mod = twin_module(twin)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                                         # VmHWM := VmRSS
    baseline = _status("VmRSS")
    cfg = GPTConfig.gpt2()
    model = mod.GPT(cfg, seed=0)
    optimizer = mod.AdamW(model.named_parameters(), 6e-4, (0.9, 0.95), weight_decay=0.1)
    rng = np.random.default_rng(0)
    x, y = (as_model_ids(model, rng.integers(0, cfg.vocab_size, (1, 256))) for _ in range(2))
    loss, _ = mod.train_step(model, optimizer, [(x, y)], 6e-4, 1.0)
    peak = _status("VmHWM")
    print(json.dumps({"twin": twin, "baseline_bytes": baseline, "peak_bytes": peak, "loss": loss}))


def memory(twin):
    proc = subprocess.run([sys.executable, "-c", f"from lib.bench.train import memory_child; memory_child({twin!r})"],
                          capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"memory measurement of the {twin} twin failed:\n{proc.stderr[-2000:]}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"above_imports_gib": (r["peak_bytes"] - r["baseline_bytes"]) / GIB, "after_imports_gib": r["baseline_bytes"] / GIB,
            "loss": r["loss"]}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lib.bench train", description=__doc__.split("\n")[0])
    p.add_argument("--parts", nargs="+", choices=("quality", "timing", "memory"),
                   default=["quality", "timing", "memory"])
    p.add_argument("--twins", nargs="+", choices=TWINS, default=list(TWINS))
    p.add_argument("--iters", type=int, default=RECIPE["max_iters"], help="quality: training steps")
    p.add_argument("--eval-iters", type=int, default=200, help="quality: batches of 12 x 64 for the final losses")
    p.add_argument("--reps", type=int, default=30, help="timing: timed steps per twin (median reported)")
    args = p.parse_args(argv)
    results = {}
    if "quality" in args.parts:
        results["quality"] = {}
        for twin in args.twins:
            r = results["quality"][twin] = quality(twin, args.iters, args.eval_iters)
            print(f"quality {twin:<6} {r['iters']} steps: val loss {r['val_loss']:.4f} (target <= "
                  f"{TARGETS['val_loss']}), train loss {r['train_loss']:.4f}, {r['ms_per_iter']:.1f} ms/step, "
                  f"{r['seconds']:.0f} s in all")
    if "timing" in args.parts:
        r = results["timing"] = timing(args.reps)
        print(f"timing small 12 x 64 ({r['reps']} steps each, in alternating blocks of {BLOCK}, torch {r['torch_threads']} threads): "
              f"numpy {r['numpy_ms']:.1f} ms, torch {r['torch_ms']:.1f} ms (target <= {TARGETS['torch_ms']}), "
              f"numpy/torch {r['ratio']:.2f} (target <= {TARGETS['ratio']}); torch with nanoGPT's choices "
              f"(no biases, erf GELU, 65 symbols) {r['torch_nanogpt_choices_ms']:.1f} ms")
    if "memory" in args.parts:
        results["memory"] = {}
        for twin in args.twins:
            r = results["memory"][twin] = memory(twin)
            print(f"memory {twin:<6} one 124M step, batch 1 x 256: {r['above_imports_gib']:.2f} GiB above the "
                  f"{r['after_imports_gib']:.2f} GiB after imports (target <= {TARGETS['memory_gib']})")
    print(json.dumps({"benchmark": "train", "targets": TARGETS, **results}))


if __name__ == "__main__":
    main()
