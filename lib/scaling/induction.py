"""Chapter 11's induction-head experiment: a 2-layer model and a 1-layer control, their in-context
score and every head's prefix-matching score over training, and the step of the phase change; cached.

Both models are the course's block (torch twin) over bytes, trained from scratch on a mix: in each
batch, a share (`repeat_fraction`) of sequences are random tokens of the plays' alphabet repeated
with a random period, and the rest windows of the plays. The repeats are what make an induction
head pay off early enough to be seen on a CPU: on the plays alone it forms too late for the
install step, which trains both models here in about 250 s of one core's CPU time. Every
`eval_every` steps each model is scored on the same held-out sequences:

- `prefix_matching`: every head's `prefix_matching_score` on `n_probe` sequences of random tokens
  of the plays' alphabet repeated twice (period n_ctx / 2), shape (evaluations, n_layer, n_head);
- `in_context`: `in_context_score` (the loss at token 62 minus the loss at token 6 of 64) on
  `n_eval` held-out sequences of the training mix (the plays' validation text for its windows);
- `in_context_plays`: the same on `n_eval` windows of the plays' validation text alone.

The phase change's step (`phase_change_step`) is where the best head's prefix-matching score
rises most between two evaluations (the later of the two).

API for the chapter: `experiment()` returns the cached result, a dict (JSON types):

- `settings`: the `InductionSettings` as a dict (the seed shifted by the course seed);
- `runs`: {"2-layer": run, "1-layer": run}, each run a dict of lists over the evaluations:
  `steps` (0, 100, ..., 4,000), `prefix_matching` (evaluations x n_layer x n_head), `best_head`
  (the highest prefix-matching score at each step), `in_context`, `in_context_plays`, `loss` (the
  mean loss on the held-out mix); and `phase_change` (the step) and `seconds` (the training's time).

`final_model("2-layer")` loads a run's model as it was at the last step (torch twin), kept beside
the result, so that its heads can be looked at.

What to plot: for each run, `best_head` and `in_context` against `steps` (two panels, or two
axes), with the 2-layer run's `phase_change` marked. What holds (measured under course seeds 0,
1 and 2: the 2-layer run's best head goes from 0.02 to 0.98, 0.94 and 0.98, its in-context score
from +0.06, +0.09 and -0.01 to -2.47, -2.38 and -2.39 nats, the phase change comes at step 2,100,
2,800 and 1,800, and `phase_change_step(steps, -in_context)`, the steepest fall of the in-context
score, at the same step in all three; the step itself moves with the seed, so assert no value of it):

- the 2-layer model forms an induction head: its last `best_head` is above 0.5, its first below 0.1;
- its in-context score falls by more than 1 nat from the first evaluation to the last, and falls
  most within one evaluation (100 steps) of `phase_change`: the two rise and fall together;
- the 1-layer control's `best_head` stays below 0.2 at every step (a 1-layer model has no
  earlier layer to tell a head where the previous token was), and its last in-context score is
  more than 1 nat above the 2-layer model's last (seeds 0 to 2: best head at most 0.06, last
  in-context score -0.26, -0.31 and -0.39);
- on the plays alone (`in_context_plays`) neither model's score moves with the phase change: it
  stays between -0.4 and +0.4 nats at every step of both (seeds 0 to 2: -0.07 to +0.28), since a
  64-byte window of the plays has little that repeats for a head to copy.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from ..assets import digest_path
from ..atomic import write_atomic
from ..cached import shifted
from ..settings import check_fields
from .in_context import in_context_score, prefix_matching_score


@dataclass(frozen=True)
class InductionSettings:
    """The models' shape (`n_layers` one model each, `n_head`, `n_embd`, context `n_ctx`), their
    training (`steps` AdamW steps of `batch_size` sequences at rate `lr`, `seed`), the mix
    (`repeat_fraction` of each batch repeated random tokens, periods `min_period` to n_ctx / 2) and
    the scoring (every `eval_every` steps, on `n_probe` repeated sequences and `n_eval` held-out ones)."""
    n_layers: tuple[int, ...] = (2, 1)
    n_head: int = 4
    n_embd: int = 64
    n_ctx: int = 64
    steps: int = 4000
    batch_size: int = 16
    lr: float = 3e-3
    repeat_fraction: float = 0.5
    min_period: int = 8
    eval_every: int = 100
    n_probe: int = 32
    n_eval: int = 256
    seed: int = 0
    eval_seed: int = 1000

    def __post_init__(self):
        check_fields(self, counts=("n_head", "n_embd", "n_ctx", "steps", "batch_size", "min_period", "eval_every",
                                   "n_probe", "n_eval"), seeds=("seed", "eval_seed"), positive=("lr",),
                     fractions=("repeat_fraction",))
        if not self.min_period <= self.n_ctx // 2:
            raise ValueError(f"min_period must be at most n_ctx / 2 = {self.n_ctx // 2}, got {self.min_period!r}")


SETTINGS = InductionSettings()


def repeated_tokens(alphabet, n, length, periods, rng) -> np.ndarray:
    """(n, length) int64: row r is random tokens of `alphabet` repeated with period periods[r]."""
    rows = [np.resize(rng.choice(alphabet, size=p), length) for p in periods]   # n x (length,)
    return np.array(rows, dtype=np.int64).reshape(n, length)                       # (n, length)


def mixed_batch(ids, alphabet, n, settings, rng):
    """(x, y), each (n, n_ctx) int64: the first round(n * repeat_fraction) rows repeated random
    tokens (periods uniform from min_period to n_ctx / 2), the rest windows of `ids`."""
    T, n_repeat = settings.n_ctx, round(n * settings.repeat_fraction)
    periods = rng.integers(settings.min_period, T // 2 + 1, size=n_repeat)         # (n_repeat,)
    starts = rng.integers(0, len(ids) - T, size=n - n_repeat)                      # (n - n_repeat,)
    windows = np.asarray(ids[starts[:, None] + np.arange(T + 1)], dtype=np.int64)  # (n - n_repeat, T + 1)
    seqs = np.concatenate([repeated_tokens(alphabet, n_repeat, T + 1, periods, rng), windows])  # (n, T + 1)
    return seqs[:, :-1], seqs[:, 1:]


def phase_change_step(steps, best_head) -> int:
    """The step at which `best_head` (a score per evaluated step) rises most since the evaluation
    before: the later step of the steepest interval."""
    steps, best_head = np.asarray(steps), np.asarray(best_head, dtype=float)
    if steps.ndim != 1 or steps.shape != best_head.shape or len(steps) < 2:
        raise ValueError(f"steps and best_head must be equal 1-D arrays of at least 2 evaluations, got shapes "
                         f"{steps.shape} and {best_head.shape}")
    return int(steps[1:][np.argmax(np.diff(best_head))])


def _losses(model, x, y):
    """Per-position losses (B, T) as numpy, and every layer's attention (B, n_layer, H, T, T)."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        out = model.forward_outputs(torch.from_numpy(x), return_attention=True)
        loss = F.cross_entropy(out.logits.transpose(1, 2), torch.from_numpy(y), reduction="none")  # (B, T)
    return loss.numpy(), torch.stack(out.attentions, dim=1).numpy()  # (B, T), (B, n_layer, H, T, T)


def _scores(model, held_out):
    """The scores of one evaluation on the held-out sequences (see the module docstring)."""
    (mix_x, mix_y), (plays_x, plays_y), probe = held_out
    model.eval()
    mix_loss, _ = _losses(model, mix_x, mix_y)
    plays_loss, _ = _losses(model, plays_x, plays_y)
    _, attention = _losses(model, probe[:, :-1], probe[:, 1:])
    model.train()
    return dict(prefix_matching=prefix_matching_score(attention, probe.shape[1] // 2).tolist(),
                in_context=in_context_score(mix_loss), in_context_plays=in_context_score(plays_loss),
                loss=float(mix_loss.mean()))


def held_out_sets(val_ids, alphabet, settings):
    """The sequences every evaluation scores: (mix x, y), (plays x, y) and the probe, random
    tokens of `alphabet` repeated twice, (n_probe, n_ctx + 1) so that its inputs are n_ctx long."""
    rng = np.random.default_rng(settings.eval_seed)
    mix = mixed_batch(val_ids, alphabet, settings.n_eval, settings, rng)
    plays = mixed_batch(val_ids, alphabet, settings.n_eval, replace(settings, repeat_fraction=0.0), rng)
    T = settings.n_ctx
    probe = repeated_tokens(alphabet, settings.n_probe, T + 1, [T // 2] * settings.n_probe, rng)  # (n_probe, T + 1)
    return mix, plays, probe


def train_run(n_layer, settings, train_ids, alphabet, held_out, folder, progress=False):
    """Train one model of `n_layer` layers as `settings` says, scoring it every eval_every steps;
    its final weights go to `folder`."""
    import torch
    import torch.nn.functional as F

    from ..config import GPTConfig
    from ..torch_twin import GPT

    config = GPTConfig(vocab_size=256, n_ctx=settings.n_ctx, n_layer=n_layer, n_head=settings.n_head,
                       n_embd=settings.n_embd)
    model = GPT(config, seed=settings.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
    rng = np.random.default_rng(settings.seed)
    start, rows = time.perf_counter(), []
    for step in range(settings.steps + 1):
        if step % settings.eval_every == 0 or step == settings.steps:
            rows.append(dict(step=step, **_scores(model, held_out)))
            if progress:
                print(f"{n_layer}-layer step {step}: {rows[-1]['loss']:.3f} nats, in-context "
                      f"{rows[-1]['in_context']:+.3f}, best head {np.max(rows[-1]['prefix_matching']):.3f}")
        if step == settings.steps:
            break
        x, y = (torch.from_numpy(a) for a in mixed_batch(train_ids, alphabet, settings.batch_size, settings, rng))
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())                # (B T, V) against (B T,)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    run = {key: [row[key] for row in rows] for key in rows[0]}
    run["steps"] = run.pop("step")
    run["best_head"] = [float(np.max(p)) for p in run["prefix_matching"]]
    run["phase_change"] = phase_change_step(run["steps"], run["best_head"])
    run["seconds"] = time.perf_counter() - start
    model.save(folder)
    return run


def experiment_file(settings=SETTINGS):
    """The cache path of the experiment under `settings` (their seed shifted by the course seed)."""
    from ..data import load_corpus

    train_ids, val_ids = load_corpus("shakespeare", "byte")
    settings = replace(settings, seed=shifted(settings.seed))
    return digest_path("experiments/induction", asdict(settings), train_ids.tobytes(), val_ids.tobytes(),
                       suffix=".json")


def model_folder(run, settings=SETTINGS):
    """Where the experiment keeps the final weights of `run` ("2-layer" or "1-layer")."""
    path = experiment_file(settings)
    return path.with_name(f"{path.stem}-{run}")


def experiment(settings=SETTINGS, progress=True):
    """The cached result (see the module docstring), trained once if it or a run's weights are missing."""
    from ..data import load_corpus

    path = experiment_file(settings)
    folders = {f"{n}-layer": model_folder(f"{n}-layer", settings) for n in settings.n_layers}  # before the shift
    if path.is_file() and all(folder.is_dir() for folder in folders.values()):
        return json.loads(path.read_text())
    import torch

    settings = replace(settings, seed=shifted(settings.seed))
    train_ids, val_ids = load_corpus("shakespeare", "byte")
    alphabet = np.unique(np.asarray(train_ids)).astype(np.int64)                   # the plays' bytes
    held_out = held_out_sets(val_ids, alphabet, settings)
    with torch.random.fork_rng():
        runs = {name: train_run(n, settings, train_ids, alphabet, held_out, folder, progress)
                for n, (name, folder) in zip(settings.n_layers, folders.items())}
    write_atomic(path, json.dumps({"settings": asdict(settings), "runs": runs}))
    return json.loads(path.read_text())                      # as a later call reads it


def final_model(run, settings=SETTINGS):
    """The torch twin's model of `run` ("2-layer" or "1-layer") at its last step, trained if missing."""
    from ..torch_twin import GPT

    experiment(settings, progress=False)
    return GPT.load(model_folder(run, settings))
