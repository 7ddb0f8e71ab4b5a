"""`python -m lib.bench gpu`: the torch twin's figures on a GPU, GPT-2 Small (124M) with random
weights (speed does not depend on them).

- train: tokens/s of optimizer steps through `Trainer` (bf16 autocast from compute capability
  8.0, fused AdamW, flash attention, padded vocabulary; `--compile` adds torch.compile) at
  context 1,024, and MFU = tokens/s x (6N + 12 x n_layer x n_embd x T) / the GPU's peak dense
  bf16 FLOP/s (PEAK_BF16; MFU is left out for a GPU not listed there). Target: MFU >= 45%.
- decode: batch 1, greedy, weights in bfloat16, the KV cache: tokens/s of the torch twin's
  `generate` and of `transformers`' `generate` on the same weights, in the same run, the two
  alternating. Targets: >= 1,500 tokens/s on an H100-class GPU, >= 5x transformers.

Without CUDA nothing is measured, and the output says so. Under GPT2_COURSE_GPU_ON_CPU=1
(lib/scale.py) the same code runs on the CPU at tiny sizes, so that CI runs it; those figures
are a CPU's, are labelled so, and are never compared with the targets.
Last line: one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from .. import torch_twin as tt
from ..config import GPTConfig, TrainConfig
from ..scale import cuda, device, gpu_or_tiny, gpu_scale, synchronize, where
from .decode import agreement, hf_model
from .roofline import train_flops_per_token

# Peak dense bf16 tensor-core FLOP/s, from NVIDIA's datasheets (the sparsity figures are twice these).
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}
TARGETS = {"mfu": 0.45, "decode_tokens_per_s": 1500, "decode_vs_transformers": 5.0}
TINY = dict(n_layer=2, n_head=2, n_embd=64, n_ctx=64)   # under the switch: GPT-2's vocabulary, tiny body


def config() -> GPTConfig:
    """GPT-2 Small on a GPU; a tiny model with GPT-2's vocabulary on a CPU under the switch."""
    return gpu_or_tiny(GPTConfig.gpt2(), GPTConfig.gpt2(**TINY))


def peak_flops() -> float | None:
    """The peak dense bf16 FLOP/s of this CUDA device, or None when it is not in PEAK_BF16."""
    name = torch.cuda.get_device_name() if cuda() else ""
    return next((peak for gpu, peak in PEAK_BF16.items() if gpu in name), None)


def timed(fn):
    """(seconds fn takes, the device's queued work included; what fn returned)."""
    synchronize()
    t0 = time.perf_counter()
    out = fn()
    synchronize()
    return time.perf_counter() - t0, out


def train_speed(steps: int, batch: int, compile: bool) -> dict:
    """Tokens/s of `steps` optimizer steps of batch x n_ctx tokens, after 5 warm-up steps."""
    cfg = config()
    T = cfg.n_ctx
    model = tt.GPT(cfg)
    trainer = tt.Trainer(model, TrainConfig(lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, grad_clip=1.0,
                                            device=device(), compile=compile))
    rng = np.random.default_rng(0)
    batches = [[(rng.integers(0, cfg.vocab_size, (batch, T)),) * 2] for _ in range(steps + 5)]  # x as y: speed only
    def steps_of(some):
        for b in some:
            trainer.step(b, 6e-4)

    steps_of(batches[:5])                                    # warm-up (and compilation)
    seconds, _ = timed(lambda: steps_of(batches[5:]))        # the steps are queued: timed() waits for them
    trainer.close()
    tokens_per_s = steps * batch * T / seconds
    flops_per_token = train_flops_per_token(cfg, T)           # N: the products' weights, as chapter 10's
    peak = peak_flops()
    return {"batch": batch, "context": T, "steps": steps, "compile": compile, "tokens_per_s": tokens_per_s,
            "flops_per_token": flops_per_token, "mfu": tokens_per_s * flops_per_token / peak if peak else None}


def decode_speed(prompt: int, new: int, reps: int) -> dict:
    """Batch-1 greedy decoding in bfloat16: the torch twin's generate and transformers' generate
    on the same weights, alternating; median tokens/s of `reps` runs each."""
    cfg = config()
    model = tt.GPT(cfg, seed=0).eval()
    hf = hf_model(cfg, model.state_dict_numpy()).to(device(), torch.bfloat16)
    model = model.to(device(), torch.bfloat16)
    idx = torch.as_tensor(np.random.default_rng(0).integers(0, cfg.vocab_size, (1, prompt)), device=device())
    runs = {"torch twin": lambda: model.generate(idx, new, temperature=0),
            "transformers": lambda: hf.generate(idx, max_new_tokens=new, min_new_tokens=new, do_sample=False)}
    outputs, times = {}, {name: [] for name in runs}
    with torch.inference_mode():
        for run in runs.values():
            run()                                            # warm-up
        for _ in range(reps):
            for name, run in runs.items():
                seconds, outputs[name] = timed(run)
                times[name].append(seconds)
    tokens_per_s = {name: new / statistics.median(t) for name, t in times.items()}
    same = agreement(outputs["torch twin"][:, prompt:].cpu().numpy(), outputs["transformers"][:, prompt:].cpu().numpy())
    return {"prompt": prompt, "new": new, "reps": reps, "tokens_per_s": tokens_per_s,
            "vs_transformers": tokens_per_s["torch twin"] / tokens_per_s["transformers"], "same_tokens": same}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lib.bench gpu", description=__doc__.split("\n")[0])
    p.add_argument("--parts", nargs="+", choices=("train", "decode"), default=["train", "decode"])
    p.add_argument("--steps", type=int, default=gpu_or_tiny(20, 2), help="train: timed optimizer steps")
    p.add_argument("--batch", type=int, default=gpu_or_tiny(16, 2), help="train: sequences per step")
    p.add_argument("--compile", action="store_true", help="train: torch.compile the model")
    p.add_argument("--prompt", type=int, default=16, help="decode: prompt tokens")
    p.add_argument("--new", type=int, default=gpu_or_tiny(200, 8), help="decode: new tokens per run")
    p.add_argument("--reps", type=int, default=gpu_or_tiny(5, 1), help="decode: timed runs of each")
    args = p.parse_args(argv)
    if not gpu_scale():
        print("gpu: not measured: no CUDA device")
        print(json.dumps({"benchmark": "gpu", "measured": False, "note": "no CUDA device"}))
        return
    label = where() if cuda() else f"{where()}; these are a CPU's figures, not a GPU's"
    cfg = config()
    results = {"benchmark": "gpu", "measured": cuda(), "device": label, "torch": torch.__version__,
               "config": {"n_layer": cfg.n_layer, "n_embd": cfg.n_embd, "n_ctx": cfg.n_ctx}, "targets": TARGETS}
    print(f"{label}; torch {torch.__version__}; {cfg.n_layer} layers, {cfg.n_embd} wide, context {cfg.n_ctx}")
    if "train" in args.parts:
        r = results["train"] = train_speed(args.steps, args.batch, args.compile)
        mfu = "MFU not computed (peak unknown)" if r["mfu"] is None else f"MFU {100 * r['mfu']:.1f}%"
        target = f" (target >= {100 * TARGETS['mfu']:.0f}%)" if cuda() and r["mfu"] is not None else ""
        print(f"train {r['batch']} x {r['context']}, {r['steps']} steps: {r['tokens_per_s']:.0f} tokens/s, {mfu}{target}")
    if "decode" in args.parts:
        r = results["decode"] = decode_speed(args.prompt, args.new, args.reps)
        tps = r["tokens_per_s"]
        targets = (f" (targets: >= {TARGETS['decode_tokens_per_s']} tokens/s, >= {TARGETS['decode_vs_transformers']}x)"
                   if cuda() else "")
        print(f"decode bf16, batch 1, {r['prompt']} + {r['new']} tokens: torch twin {tps['torch twin']:.0f} tokens/s, "
              f"transformers {tps['transformers']:.0f} tokens/s, {r['vs_transformers']:.2f}x{targets}; "
              f"same first {r['same_tokens']} of {r['new']} tokens")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
