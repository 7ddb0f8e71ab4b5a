"""Chapter 11's ladder on GPT-2-token shards (`lib.shards`): larger rungs than the plays' ladder,
trained, fitted and predicted with its code, for a notebook's GPU branch.

- `shard_config(n_layer, n_embd)`: `ladder.rung_config`'s shape over GPT-2's vocabulary.
- `shard_run(config, tokens, train, val, device)`: one rung trained with `ladder.recipe(tokens)`
  on a split of shards (`lib.pretrained.trained_folder`, cached as a model folder) and measured
  on the first `val_tokens` (VAL_TOKENS) tokens of the validation split.
- `shard_ladder(shapes, ...)`: every rung, smallest first; `check_prediction(runs)` fits
  L(N) = E + A N^-alpha to all but the largest rung (`lib.scaling.fit`), predicts the largest and
  says whether its measured loss lies in the interval.

Sizes: GPU_SHAPES, from 447,552 non-embedding parameters (the plays' largest rung) to 9,864,320
(22x), on GPU_TOKENS tokens each where a GPU trains them; TINY_SHAPES on TINY_TOKENS (measured on
TINY_VAL_TOKENS) where a CPU stands in for one (GPT2_COURSE_GPU_ON_CPU=1, `lib.scale`), to run
the training's code, not to measure anything: 16 steps over GPT-2's vocabulary teach little more
than the tokens' frequencies, whose losses follow no power law in N, so the stand-in fits nothing.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..tokenizer import GPT2_EOT_ID
from .fit import fit_power_law, predict
from .ladder import BATCH, CONTEXT, non_embedding, recipe, rung_config

GPU_SHAPES = ((4, 96), (4, 128), (4, 192), (6, 256), (8, 256), (8, 320))   # (n_layer, n_embd)
GPU_TOKENS = 2 ** 23               # training tokens per rung: 8,192 steps of 16 windows of 64
TINY_SHAPES = ((1, 8), (1, 16), (2, 16))
TINY_TOKENS = 2 ** 14              # the recipe's shortest run: 16 steps
VAL_TOKENS = 2 ** 15               # validation tokens every rung is measured on
TINY_VAL_TOKENS = 2 ** 10          # 16 windows: what chapter 5's tiny shards' 2,000 hold


def shard_config(n_layer: int, n_embd: int):
    """A rung of the plays' ladder (context 64, heads 8 wide) reading GPT-2's tokens."""
    vocab_size = GPT2_EOT_ID + 1                           # <|endoftext|> is GPT-2's last id
    return dataclasses.replace(rung_config(n_layer, n_embd), vocab_size=vocab_size)


def shard_run(config, tokens: int, train, val, val_tokens=VAL_TOKENS, device="cpu",
              progress=False) -> dict:
    """{"n_layer", "n_embd", "params" (non-embedding), "tokens", "loss" (validation, nats per
    token)} of `config` trained on `tokens` tokens of the shards `train` and measured on the first
    `val_tokens` of `val` (TokenShards or arrays, as `lib.shards.load_shards` gives them)."""
    from ..pretrained import trained_folder
    from ..torch_twin import GPT
    from ..train import evaluate_loss

    if len(val) < val_tokens + 1:
        raise ValueError(f"val must hold at least val_tokens + 1 = {val_tokens + 1} tokens, got {len(val)}")
    settings = recipe(tokens)
    ids = np.asarray(train[:], dtype=np.uint16)           # (len(train),): the digest reads its bytes
    folder = trained_folder("scaling/shards", config, settings, ids, device=device, progress=progress)
    model = GPT.load(folder).to(device)
    loss = evaluate_loss(model, np.asarray(val[:val_tokens + 1], dtype=np.int64))
    n = non_embedding(config)
    d = settings["max_iters"] * BATCH * CONTEXT
    return dict(n_layer=config.n_layer, n_embd=config.n_embd, params=n, tokens=d, loss=loss)


def shard_ladder(shapes, tokens: int, train, val, val_tokens=VAL_TOKENS, device="cpu",
                 progress=False) -> list[dict]:
    """`shard_run` of each (n_layer, n_embd) in `shapes` on `tokens` tokens, smallest first."""
    return [shard_run(shard_config(*shape), tokens, train, val, val_tokens, device, progress)
            for shape in shapes]


def check_prediction(runs: list[dict], level=0.9) -> dict:
    """The largest run's loss predicted from the others' (`predict(..., new_run=True)`), beside
    its measured loss: {"fit", "params", "loss", "interval", "level", "measured", "inside"}."""
    if len(runs) < 5:
        raise ValueError(f"a prediction with an interval needs 5 or more runs (4 fitted), got {len(runs)}")
    *fitted, largest = sorted(runs, key=lambda r: r["params"])
    fit = fit_power_law([r["params"] for r in fitted], [r["loss"] for r in fitted])
    guess = predict(fit, largest["params"], level=level, new_run=True)
    low, high = guess["interval"]
    return {"fit": fit, "params": largest["params"], **guess, "measured": largest["loss"],
            "inside": bool(low <= largest["loss"] <= high)}
