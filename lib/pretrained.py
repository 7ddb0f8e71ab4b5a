"""Trained models that any chapter can ask for, made on first use and cached on disk.

- `trained_folder(name, config, recipe, train_ids, val_ids)`: the folder of a model trained
  with `recipe` (a dict of `lib.config.TrainConfig` settings) on the given token ids, trained on first use and
  cached as `$GPT2_COURSE_CACHE/<name>-<digest>` (default cache `~/.cache/gpt2-course/`).
  Chapter 7's pre-trained models (`lib.finetune.pretrained_folder`) come from it too.
- `shakespeare_small(twin)`: the small preset (4 layers, 4 heads, 128 wide, context 64, bytes)
  trained on the embedded Shakespeare corpus with `RECIPE` (fixed seed). The first call trains
  it, on the CPU with the torch twin when torch is installed (2,000 steps, about 3 minutes on 2
  cores; with the numpy twin otherwise, about 5 minutes), under `pretrained/`; later calls load
  it. Both twins read the same files, so the model trained once serves either.
- `modern_small(twin)`: chapter 8's modern block (RMSNorm, RoPE, SwiGLU, GQA, no biases) at the
  small preset's shape and parameter count, trained as chapter 8 trains it on a CPU (300 steps,
  well under a minute on 2 cores), cached the same way.
"""
from __future__ import annotations

import json
from pathlib import Path

from .assets import digest_path
from .cached import shifted
from .config import TRAIN_PRESETS, GPTConfig, TrainConfig
from .twins import default_twin, twin_module

RECIPE = TRAIN_PRESETS["small"]    # the TrainConfig settings it names: TrainConfig.small()
# Chapter 8's comparison on a CPU: SwiGLU 393 wide gives the modern block 834,176 parameters against
# the small preset's 834,304; the same steps, batches and schedule as its GPT-2 block.
MODERN_SMALL = GPTConfig.small(norm="rmsnorm", position="rope", mlp="swiglu", n_kv_head=2, bias=False,
                               mlp_hidden=393)
MODERN_RECIPE = dict(max_iters=300, batch_size=16, lr=1e-3, min_lr=1e-4, warmup_iters=30, eval_interval=60,
                     eval_iters=10, seed=1337)


def trained_folder(name, config, recipe, train_ids, val_ids=None, *, device="cpu", progress=True) -> Path:
    """The folder (config.json, model.safetensors, history.json) of a `config`-shaped model trained
    with `recipe` on train_ids (validated on val_ids, if given), trained if missing with the
    default twin (torch on `device` when installed, else numpy). Its name is `name` plus a digest
    of the recipe, the config and the token ids, so a change to any of them trains a new model
    instead of reusing a stale one. The recipe's seed is shifted by the course seed
    (`lib.cached.shifted`) before anything else, so another course seed trains a model of its own."""
    recipe = {**recipe, "seed": shifted(recipe["seed"])}
    data = [ids.tobytes() for ids in (train_ids, val_ids) if ids is not None]
    # the recipe's JSON keeps its keys in the recipe's order
    folder = digest_path(name, json.dumps([recipe, config.to_dict()]).encode(), *data)
    if not (folder / "model.safetensors").is_file():
        from .history import write_history
        from .train import train

        twin = default_twin()
        if progress:
            print(f"Training {name} once ({twin} twin, {recipe['max_iters']} steps); it will be cached in {folder}")
        model = twin_module(twin).GPT(config, seed=recipe["seed"])
        settings = TrainConfig(**recipe, device=device if twin == "torch" else None)
        history = train(model, train_ids, val_ids, settings, progress=progress)
        model.save(folder)                                   # atomic: a complete folder or none
        write_history(folder, history)
    return folder


def shakespeare_small_folder() -> Path:
    """The small Shakespeare model's folder, trained if missing (see `trained_folder`)."""
    from .data import load_corpus

    train_ids, val_ids = load_corpus("shakespeare", "byte")
    return trained_folder("pretrained/shakespeare_small", GPTConfig.small(), RECIPE, train_ids, val_ids)


def shakespeare_small(twin="numpy"):
    """The trained small Shakespeare model as a `lib.numpy_twin.GPT` or `lib.torch_twin.GPT`."""
    GPT = twin_module(twin).GPT                              # a bad twin name raises before any training
    return GPT.load(shakespeare_small_folder())


def modern_small_folder() -> Path:
    """Chapter 8's modern-block model's folder, trained if missing (see `trained_folder`)."""
    from .data import load_corpus

    train_ids, val_ids = load_corpus("shakespeare", "byte")
    return trained_folder("pretrained/modern_small", MODERN_SMALL, MODERN_RECIPE, train_ids, val_ids)


def modern_small(twin="numpy"):
    """Chapter 8's trained modern-block model as a `lib.numpy_twin.GPT` or `lib.torch_twin.GPT`."""
    GPT = twin_module(twin).GPT                              # a bad twin name raises before any training
    return GPT.load(modern_small_folder())
