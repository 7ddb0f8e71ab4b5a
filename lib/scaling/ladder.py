"""Chapter 11's trainings, cached: a ladder of model sizes on the plays, an isoFLOP sweep, and an
exact-answer task scored on the ladder.

- `run(config, tokens)`: one model trained on `tokens` bytes drawn from the plays' training text
  (`recipe(tokens)`: tokens / 1,024 steps of random windows, the same settings for every size)
  and measured on the first VAL_TOKENS bytes of the validation text; trained once (`lib.pretrained.trained_folder`, the torch twin on
  the CPU) and cached as JSON.
- `ladder()`: SHAPES, six sizes from 6,592 to 447,552 non-embedding parameters (68x), each trained
  on LADDER_TOKENS bytes. `prediction()` fits L(N) = E + A N^-alpha (`lib.scaling.fit`) to every
  rung but the largest, reading only their results, and predicts the largest one's loss.
- `isoflop()`: for each compute budget C of BUDGETS, five sizes trained on C / (6 N) bytes
  each; `optimum(runs)` fits a parabola in ln N through one budget's losses and returns the
  loss-minimising size, the tokens per parameter it implies and whether it lies among the sizes
  tried (outside them the vertex is an extrapolation, not a measurement).
- `exact_answer_task()` and `answer_scores(model, task)`: the rest of a common word given its first
  letter, ANSWER_BYTES bytes scored all at once (exact match, greedy) and byte by byte (mean
  log-likelihood); `emergence()` scores every rung.

N is Kaplan et al.'s non-embedding count [kaplan2020scaling] and C = 6 N D; at these widths the
attention over the context (about 12 n_layer n_ctx n_embd FLOPs per token) and the embeddings are
left out of that count, as in the papers.
"""
from __future__ import annotations

import json
import re
import time

import numpy as np

from ..assets import digest_path
from ..atomic import write_atomic
from ..cached import shifted
from ..config import GPTConfig, param_counts
from .fit import fit_power_law, predict

CONTEXT = 64                       # bytes
HEAD_WIDTH = 8                     # n_embd / n_head, the same at every size
BATCH = 16                         # windows per step: 1,024 bytes
LR = 3e-3                          # peak learning rate, cosine to a tenth after a 5% warmup
SHAPES = ((2, 16), (2, 24), (2, 32), (3, 48), (4, 64), (4, 96))   # (n_layer, n_embd)
LADDER_TOKENS = 512 * BATCH * CONTEXT                              # 512 steps: 524,288 bytes
# The isoFLOP sweep's sizes, 888 to 25,472 non-embedding parameters: at these budgets the best size
# lies below most of the ladder. FLOPs: the sizes trained at each budget.
SWEEP_SHAPES = ((1, 8), (2, 8), (1, 16), (2, 16), (2, 24), (2, 32))
BUDGETS = {3e9: SWEEP_SHAPES[:5], 1e10: SWEEP_SHAPES[:5], 3e10: SWEEP_SHAPES[1:]}
VAL_TOKENS = 2 ** 15               # validation bytes every run is measured on
MIN_STEPS = 16                     # a run shorter than this has no schedule to speak of
COMMON_WORDS = 10                  # the task's words: the ten most frequent of four letters
ANSWER_BYTES = 4                   # the task's answer: a word's last three letters and the space after it


def rung_config(n_layer: int, n_embd: int) -> GPTConfig:
    """A byte-level model of the ladder: context CONTEXT, heads HEAD_WIDTH wide."""
    if n_embd % HEAD_WIDTH or n_layer < 1:
        raise ValueError(f"a rung needs n_layer >= 1 and n_embd a multiple of {HEAD_WIDTH}, got {n_layer}, {n_embd}")
    return GPTConfig(vocab_size=256, n_ctx=CONTEXT, n_layer=n_layer, n_head=n_embd // HEAD_WIDTH, n_embd=n_embd)


def non_embedding(config: GPTConfig) -> int:
    """The parameters outside the token and position embeddings (Kaplan et al.'s N)."""
    counts = param_counts(config)
    return counts["total"] - counts["wte"] - counts["wpe"]


def recipe(tokens: int) -> dict:
    """The TrainConfig settings of a run over `tokens` training bytes: tokens / 1,024 steps."""
    steps = tokens // (BATCH * CONTEXT)
    if steps < MIN_STEPS:
        raise ValueError(f"tokens must give at least {MIN_STEPS} steps of {BATCH * CONTEXT} bytes, got {tokens!r}")
    return dict(max_iters=steps, batch_size=BATCH, lr=LR, min_lr=LR / 10, warmup_iters=max(1, steps // 20),
                weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0, eval_interval=steps, eval_iters=1, seed=1337)


def run_file(config: GPTConfig, tokens: int):
    """Where `run` caches its result for `config` and `tokens` (the file exists once it has run):
    named by the recipe with its shifted seed, the config, VAL_TOKENS and the training text."""
    from ..data import load_corpus

    settings = recipe(tokens)
    return digest_path("scaling/run", {**settings, "seed": shifted(settings["seed"])}, config.to_dict(), VAL_TOKENS,
                       load_corpus("shakespeare", "byte")[0].tobytes(), suffix=".json")


def run(config: GPTConfig, tokens: int, progress=False) -> dict:
    """{"n_layer", "n_embd", "params" (non-embedding), "tokens", "flops" (6 N D), "loss" (validation,
    nats per byte), "seconds" (training and measuring), "folder" (the trained model)} of `config`
    trained on `tokens` bytes; trained on first use, then read from the cache."""
    path = run_file(config, tokens)
    if path.is_file():
        return json.loads(path.read_text())
    from ..data import load_corpus
    from ..pretrained import trained_folder
    from ..torch_twin import GPT
    from ..train import evaluate_loss

    train_ids, val_ids = load_corpus("shakespeare", "byte")
    settings = recipe(tokens)
    start = time.perf_counter()
    folder = trained_folder("scaling/model", config, settings, train_ids, progress=progress)
    loss = evaluate_loss(GPT.load(folder), val_ids[:VAL_TOKENS + 1])
    n = non_embedding(config)
    d = settings["max_iters"] * BATCH * CONTEXT
    result = dict(n_layer=config.n_layer, n_embd=config.n_embd, params=n, tokens=d, flops=6.0 * n * d, loss=loss,
                  seconds=time.perf_counter() - start, folder=folder.name)
    write_atomic(path, json.dumps(result).encode())
    return result


def ladder(shapes=SHAPES, progress=False) -> list[dict]:
    """`run` of each shape on LADDER_TOKENS bytes, smallest first."""
    return [run(rung_config(*shape), LADDER_TOKENS, progress) for shape in shapes]


def prediction(level=0.9) -> dict:
    """The largest rung's loss predicted from the others: {"fit" (a PowerLawFit), "params",
    "loss", "interval", "level"}. Only the smaller rungs' cached results are read; the interval is
    for the loss one more run measures (`predict(..., new_run=True)`)."""
    fitted = ladder(SHAPES[:-1])
    fit = fit_power_law([r["params"] for r in fitted], [r["loss"] for r in fitted])
    n = non_embedding(rung_config(*SHAPES[-1]))
    return {"fit": fit, "params": n, **predict(fit, n, level=level, new_run=True)}


def isoflop(budgets=BUDGETS, progress=False) -> dict[float, list[dict]]:
    """{C: [`run` of each of its shapes on C / (6 N) bytes, rounded down to whole steps]}."""
    return {C: [run(rung_config(*s), int(C / (6 * non_embedding(rung_config(*s)))), progress) for s in shapes]
            for C, shapes in budgets.items()}


def optimum(runs: list[dict]) -> dict:
    """The loss-minimising size of one budget's runs: a parabola in ln N through their losses, its
    vertex N_opt; {"params", "loss", "tokens", "tokens_per_param", "inside" (N_opt between the smallest
    and the largest size tried), "curve" (a, b, c of a u^2 + b u + c, u = ln N)}, tokens = C / (6 N_opt).
    A parabola that does not open upward raises ValueError."""
    if len(runs) < 3:
        raise ValueError(f"a parabola needs 3 or more runs, got {len(runs)}")
    u = np.log([r["params"] for r in runs])
    a, b, c = np.polyfit(u, [r["loss"] for r in runs], 2)
    if not a > 0:
        raise ValueError(f"the losses do not bend upward in ln N (a = {a:.3g}): no minimum among these sizes")
    u_opt = -b / (2 * a)
    C = float(np.mean([r["flops"] for r in runs]))
    n_opt = float(np.exp(u_opt))
    tokens = C / (6 * n_opt)
    return {"params": n_opt, "loss": float(c - b * b / (4 * a)), "tokens": tokens, "tokens_per_param": tokens / n_opt,
            "inside": bool(u.min() < u_opt < u.max()), "curve": (float(a), float(b), float(c))}


def common_words(n=COMMON_WORDS) -> list[str]:
    """The `n` most frequent four-letter lowercase words of the training text, between spaces or
    a line start and a space, most frequent first."""
    from collections import Counter

    from ..data import load_corpus

    text = load_corpus("shakespeare", "byte")[0].astype(np.uint8).tobytes()
    counts = Counter(re.findall(rb"(?<=[ \n])[a-z]{4}(?= )", text))
    return [word.decode() for word, _ in counts.most_common(n)]


def exact_answer_task() -> dict:
    """{"x" (items, CONTEXT) int64, "y" (items, CONTEXT) int64, "words"}: a window of the validation
    text for every occurrence of one of `common_words()` (at least CONTEXT bytes in), ending with
    the answer, the ANSWER_BYTES bytes after the word's first letter (its other three letters and
    the space after it); y holds the bytes that follow x's, so the answer is y's last ANSWER_BYTES."""
    from ..data import load_corpus

    text = load_corpus("shakespeare", "byte")[1].astype(np.uint8).tobytes()
    pattern = rb"(?<=[ \n])(?:" + b"|".join(w.encode() for w in common_words()) + rb")(?= )"
    starts = np.array([m.start() for m in re.finditer(pattern, text) if m.start() >= CONTEXT], dtype=np.int64)
    ends = starts + 1 + ANSWER_BYTES                                  # one past the answer's last byte
    ids = np.frombuffer(text, np.uint8).astype(np.int64)
    windows = np.stack([ids[e - CONTEXT - 1:e] for e in ends])       # (items, CONTEXT + 1)
    return {"x": windows[:, :-1], "y": windows[:, 1:], "words": [text[s:s + 4].decode() for s in starts]}


def answer_scores(model, task: dict) -> dict:
    """{"exact" (items,) bool: every answer byte is the model's most likely next byte, so greedy
    decoding writes the answer; "logprob" (items, ANSWER_BYTES): ln p of each answer byte} for a
    torch twin `model`."""
    import torch

    with torch.no_grad():
        logits = model(torch.from_numpy(task["x"]))[:, -ANSWER_BYTES:]           # (items, k, V)
    logp = torch.log_softmax(logits.double(), dim=-1).numpy()
    y = task["y"][:, -ANSWER_BYTES:]                                           # (items, k)
    exact = (logp.argmax(-1) == y).all(axis=1)
    return {"exact": exact, "logprob": np.take_along_axis(logp, y[..., None], -1)[..., 0]}


def emergence() -> list[dict]:
    """For each rung of `ladder()`: {"params", "accuracy" (exact-match fraction), "logprob" (mean ln p
    per answer byte), "p_k" (the mean over items of the product of the answer's byte
    probabilities: the chance that sampling writes the whole answer)}; computed once and cached as
    JSON, named by the rungs' models and the task's settings."""
    from ..assets import cache_dir
    from ..torch_twin import GPT

    rungs = ladder()
    path = digest_path("scaling/emergence", [r["folder"] for r in rungs], COMMON_WORDS, ANSWER_BYTES, CONTEXT,
                       suffix=".json")
    if path.is_file():
        return json.loads(path.read_text())
    task = exact_answer_task()
    rows = []
    for rung in rungs:
        model = GPT.load(cache_dir() / "scaling" / rung["folder"])
        model.eval()
        scores = answer_scores(model, task)
        rows.append({"params": rung["params"], "accuracy": float(scores["exact"].mean()),
                     "logprob": float(scores["logprob"].mean()),
                     "p_k": float(np.exp(scores["logprob"].sum(axis=1)).mean())})
    write_atomic(path, json.dumps(rows).encode())
    return rows
