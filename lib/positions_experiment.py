"""Chapter 8's measurement of positions, trained once and cached: extrapolation, RoPE scaling, a window.

`experiment()` trains the small preset's shape on the plays (bytes) at context T = 64 once with
each position choice (learned, sinusoidal, RoPE, ALiBi), with the same tokens, seed and
recipe, and once with RoPE and a sliding window W = 16. It then measures, on windows of the
held-out plays:
- `curves`: each model's mean loss at every position 0 .. 4T - 1 (extrapolate=True past T); the
  learned table has no rows past T, so its curve stops there;
- `scaling`: the RoPE model run at 2T with position interpolation and with NTK-aware scaling
  (factor 2), each as trained and after a short fine-tune at 2T, beside plain RoPE at 2T;
- `window`: the sliding-window model's curve, against the full-attention RoPE model's.
Each model is cached by `lib.pretrained.trained_folder` (the fine-tunes the same way, here), and
the measurements in one JSON file named by a digest of every model's folder and the settings.
"""
from __future__ import annotations

import json

import numpy as np

from .assets import digest_path
from .atomic import write_atomic
from .cached import shifted
from .config import GPTConfig, TrainConfig
from .pretrained import trained_folder

T = 64                                         # the training context (the small preset's n_ctx)
SPAN = 4 * T                                   # evaluated positions: out to 4T
WINDOW = 16                                    # W of the sliding-window model, W < T
FACTOR = 2                                     # RoPE scaling: run at 2T
POSITIONS = ("learned", "sinusoidal", "rope", "alibi")
SCALINGS = ("interpolation", "ntk")
# the same steps, batches and schedule for every model; about 30 s each on 2 cores
RECIPE = dict(max_iters=250, batch_size=16, lr=1e-3, min_lr=1e-4, warmup_iters=25, eval_interval=125,
              eval_iters=4, seed=1337)
# the short fine-tune at 2T: 40 steps of 8 windows of 2T, a tenth of the peak rate, no warmup
FINETUNE = dict(max_iters=40, batch_size=8, lr=1e-4, min_lr=1e-4, warmup_iters=0, eval_interval=40,
                eval_iters=1, seed=7)
EVAL_WINDOWS = 64                              # windows of SPAN held-out bytes, evenly spaced


def config(position, **options) -> GPTConfig:
    """The small preset's shape with this position choice (GPTConfig.small: 4 layers, 128 wide, T = 64)."""
    return GPTConfig.small(position=position, **options)


def pretrained(position, window=None, progress=True):
    """The folder of the model trained at T with `position` (and a sliding `window`), cached."""
    from .data import load_corpus
    train_ids, val_ids = load_corpus("shakespeare", "byte")
    name = f"positions/{position}" + ("" if window is None else f"-window{window}")
    return trained_folder(name, config(position, sliding_window=window), RECIPE, train_ids, val_ids,
                          progress=progress)


def scaled(scaling) -> GPTConfig:
    """The RoPE model's config at FACTOR times its context, its tables scaled by `scaling`."""
    return config("rope", n_ctx=FACTOR * T, rope_scaling=scaling, rope_factor=float(FACTOR))


def finetuned(scaling, progress=True):
    """The folder of the RoPE model fine-tuned at 2T with `scaling` (FINETUNE's recipe), cached."""
    from .data import load_corpus
    from .history import write_history
    from .torch_twin import GPT
    from .train import train
    source = pretrained("rope", progress=progress)
    recipe = {**FINETUNE, "seed": shifted(FINETUNE["seed"])}
    train_ids, _ = load_corpus("shakespeare", "byte")
    folder = digest_path(f"positions/rope-{scaling}-finetuned", [recipe, scaled(scaling).to_dict(), source.name],
                         train_ids.tobytes())
    if not (folder / "model.safetensors").is_file():
        model = GPT(scaled(scaling), seed=recipe["seed"])
        model.load_state_dict(GPT.load(source).state_dict_numpy())   # the same weights: RoPE has none per position
        history = train(model, train_ids, None, TrainConfig(**recipe, device="cpu"), progress=progress)
        model.save(folder)                                    # atomic: a complete folder or none
        write_history(folder, history)
    return folder


def eval_windows(val_ids, span=SPAN, n=EVAL_WINDOWS) -> np.ndarray:
    """(n, span) windows of the held-out bytes, their starts evenly spaced over the text."""
    starts = np.linspace(0, len(val_ids) - span - 1, n).astype(np.int64)   # (n,)
    return np.stack([np.asarray(val_ids[s:s + span + 1], dtype=np.int64) for s in starts])  # (n, span + 1)


def loss_per_position(model, windows, span) -> list[float]:
    """The mean next-token loss at each position 0 .. span - 1 over the windows (B, >= span + 1),
    every position predicted from the positions before it in its window; past n_ctx with
    extrapolate=True."""
    import torch
    idx = torch.as_tensor(windows[:, :span])                  # (B, span)
    targets = torch.as_tensor(windows[:, 1:span + 1])          # (B, span)
    with torch.no_grad():
        logits = model.eval().forward(idx, extrapolate=span > model.config.n_ctx)  # (B, span, V)
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, span)
    return losses.mean(dim=0).tolist()                        # (span,)


def _measure(folders, windows) -> dict:
    """The curves, the scaled RoPE runs and the window's, from the models in `folders`."""
    from .torch_twin import GPT
    curves = {p: loss_per_position(GPT.load(folders[p]), windows, T if p == "learned" else SPAN)
              for p in POSITIONS}
    rope = GPT.load(folders["rope"])
    scaling = {"none": curves["rope"][:FACTOR * T]}
    for name in SCALINGS:
        stretched = GPT(scaled(name))
        stretched.load_state_dict(rope.state_dict_numpy())
        scaling[name] = loss_per_position(stretched, windows, FACTOR * T)
        scaling[f"{name}, fine-tuned"] = loss_per_position(GPT.load(folders[f"{name}, fine-tuned"]), windows,
                                                           FACTOR * T)
    window = loss_per_position(GPT.load(folders["window"]), windows, SPAN)
    return {"curves": curves, "scaling": scaling, "window": window}


def experiment(progress=False) -> dict:
    """{"settings", "curves": {position: losses per position}, "scaling": {run: losses per position
    out to 2T}, "window": losses per position}, trained and measured on first use, then read from
    the cache."""
    from .data import load_corpus
    folders = {p: pretrained(p, progress=progress) for p in POSITIONS}
    folders["window"] = pretrained("rope", WINDOW, progress=progress)
    folders.update({f"{s}, fine-tuned": finetuned(s, progress=progress) for s in SCALINGS})
    settings = dict(T=T, span=SPAN, window=WINDOW, factor=FACTOR, eval_windows=EVAL_WINDOWS,
                    models={name: folder.name for name, folder in folders.items()})
    path = digest_path("positions/experiment", settings, suffix=".json")
    if not path.is_file():
        _, val_ids = load_corpus("shakespeare", "byte")
        write_atomic(path, json.dumps({"settings": settings, **_measure(folders, eval_windows(val_ids))}))
    return json.loads(path.read_text())
