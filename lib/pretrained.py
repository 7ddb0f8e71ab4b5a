"""Trained models that any chapter can ask for, made on first use and cached on disk.

`shakespeare_small(twin)`: the small preset (4 layers, 4 heads, 128 wide, context 64, bytes)
trained on the embedded Shakespeare corpus with `RECIPE` (fixed seed). The first call trains
it, on the CPU with the torch twin when torch is installed (2,000 steps, about 3 minutes on 2 cores;
with the numpy twin otherwise, about 5 minutes), and saves it in the cache
(`$GPT2_COURSE_CACHE`, default `~/.cache/gpt2-course/`, under `pretrained/`); later calls load
it. Both twins read the same files, so the model trained once serves either.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
from pathlib import Path

from .assets import cache_dir
from .config import GPTConfig

# nanoGPT's Shakespeare-on-a-CPU settings (its README) at byte level, with the peak learning rate
# doubled: on this corpus 1e-3 ends at validation loss 1.866, 2e-3 at 1.781 (torch twin; lib.bench train)
RECIPE = dict(max_iters=2000, batch_size=12, lr=2e-3, min_lr=1e-4, warmup_iters=100, weight_decay=0.1,
              betas=(0.9, 0.99), grad_clip=1.0, eval_interval=250, eval_iters=20, seed=1337)
TWINS = ("numpy", "torch")


def shakespeare_small_folder() -> Path:
    """The cached model's folder (config.json, model.safetensors, history.json), trained if
    missing. Its name carries a digest of the recipe and the corpus, so a change to either
    trains a new model instead of reusing a stale one."""
    from .data import load_corpus

    train_ids, val_ids = load_corpus("shakespeare", "byte")
    digest = hashlib.sha256(json.dumps([RECIPE, GPTConfig.small().to_dict()]).encode())
    digest.update(train_ids.tobytes())
    digest.update(val_ids.tobytes())
    folder = cache_dir() / "pretrained" / f"shakespeare_small-{digest.hexdigest()[:12]}"
    if not (folder / "model.safetensors").is_file():
        _train(folder, train_ids, val_ids)
    return folder


def _train(folder, train_ids, val_ids):
    from .train import train, write_history

    twin = "torch" if importlib.util.find_spec("torch") else "numpy"
    print(f"Training the small Shakespeare model once ({twin} twin, {RECIPE['max_iters']} steps); "
          f"it will be cached in {folder}")
    model = importlib.import_module(f"lib.{twin}_twin").GPT(GPTConfig.small(), seed=RECIPE["seed"])
    history = train(model, train_ids, val_ids, device="cpu" if twin == "torch" else None, **RECIPE)
    model.save(folder)                                       # atomic: a complete folder or none
    write_history(folder, history)


def shakespeare_small(twin="numpy"):
    """The trained small Shakespeare model as a `lib.numpy_twin.GPT` or `lib.torch_twin.GPT`."""
    if twin not in TWINS:
        raise ValueError(f"twin must be one of {TWINS}, got {twin!r}")
    return importlib.import_module(f"lib.{twin}_twin").GPT.load(shakespeare_small_folder())
