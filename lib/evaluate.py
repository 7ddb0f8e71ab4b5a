"""Zero-shot multiple choice, scored by likelihood: a task the model never trained for (chapter 6b).

An item is a context and a few candidate continuations, one of them right. The model reads each
candidate after the context; the log-probability it gives the candidate's tokens is the score,
and the candidate with the highest score is its answer. GPT-2 was judged this way, without any
fine-tuning; HellaSwag (Zellers et al., 2019) is the benchmark small GPTs are compared on today.

- `score_choices(model, context, choices, neutral=None)`: each candidate's log-likelihood, its
  sum and its mean per token (float64), and, after a neutral text too, its gain (how much the
  context raised it); all in one forward pass. The twin only runs the forward
  (`lib.twins.forward`); the log-softmax is numpy's, here, the same for both twins.
  `score_questions(model, questions, neutral=None)` scores several items in one pass.
- `evaluate(model, tokenizer, items, neutral=None)`: accuracy of the highest sum, mean and gain,
  each with a 95% Wilson interval (`wilson_interval`), many items a pass.
- `next_line_items(...)`: the offline benchmark. A line of a play that no model here trained on
  (the validation part of `lib.data.load_corpus("shakespeare")`), the line that follows it and
  three other lines of the same play, drawn with a fixed seed.
- `hellaswag_items(path)`: HellaSwag's published JSONL (`ctx`, four `endings`, `label`) as items;
  `download_hellaswag()` fetches its validation file (needs the internet, e.g. Colab).
- `python -m lib.evaluate {shakespeare,hellaswag} --model ...` prints the accuracies; `--json`
  ends with one machine-readable line.

Context window: when context and candidate do not fit in n_ctx, the context loses its first
tokens (each candidate keeps the last n_ctx + 1 - len(candidate) tokens of the context), as
generation crops a long prompt. A candidate longer than n_ctx is an error.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import urllib.request
from typing import NamedTuple

import numpy as np

from .assets import AssetError, cache_dir
from .atomic import write_atomic
from .numpy_twin.train import log_softmax
from .scale import device
from .twins import TWINS, default_twin, forward, twin_module

HELLASWAG_VAL_URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
Z_95 = 1.959964                      # the standard normal's 97.5% quantile: a two-sided 95% interval


class ChoiceScores(NamedTuple):
    sum: np.ndarray                  # (K,) log p(choice | context), float64
    mean: np.ndarray                 # (K,) the same per choice token
    n_tokens: np.ndarray             # (K,) tokens in each choice
    gain: np.ndarray | None          # (K,) sum - log p(choice | neutral text), when one is given


# ---- scoring ------------------------------------------------------------------------------------
def _check_ids(name, ids, vocab_size):
    ids = np.asarray(ids)
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(f"{name} must be a 1-D sequence of integer token ids, got shape {ids.shape} "
                         f"dtype {ids.dtype}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"{name} holds token ids from {ids.min()} to {ids.max()}; expected ids in "
                         f"[0, {vocab_size}) (the model's vocabulary)")
    return ids.astype(np.int64)


def _check_context(name, ids, vocab_size):
    ids = _check_ids(name, ids, vocab_size)
    if ids.size == 0:
        raise ValueError(f"{name} is empty: a choice's first token is predicted from the token before it, "
                         f"so it needs at least one token")
    return ids


def _check_choices(choices, vocab_size, n_ctx):
    if len(choices) == 0:
        raise ValueError("choices is empty: expected at least one candidate continuation")
    choices = [_check_ids(f"choice {k}", c, vocab_size) for k, c in enumerate(choices)]
    for k, choice in enumerate(choices):
        if not 1 <= len(choice) <= n_ctx:
            raise ValueError(f"choice {k} has {len(choice)} tokens; expected 1 to n_ctx={n_ctx} (the model "
                             f"reads at most n_ctx tokens: the last one before the choice and all but its last)")
    return choices


def log_likelihoods(model, pairs):
    """(sums (P,), n_tokens (P,)): log p(choice | context) of each (context, choice) pair of
    int64 arrays, all in one forward pass.

    Each row of the batch is context + choice without its last token, the context cropped on the
    left so that the row fits n_ctx; rows are padded on the right to the longest, which changes
    nothing before the padding (attention is causal). The mask marks the positions whose next
    token is a choice token; only those rows of logits go through the log-softmax, in float64.
    """
    n_ctx = model.config.n_ctx
    seqs = [np.concatenate([context[-(n_ctx + 1 - len(choice)):], choice]) for context, choice in pairs]
    P, T = len(seqs), max(len(seq) for seq in seqs) - 1
    x = np.zeros((P, T), np.int64)                           # (P, T) inputs, 0 as padding
    y = np.zeros((P, T), np.int64)                           # (P, T) next tokens
    mask = np.zeros((P, T), bool)                            # (P, T) True where y is a choice token
    for row, (seq, (_, choice)) in enumerate(zip(seqs, pairs)):
        n = len(seq) - 1
        x[row, :n], y[row, :n] = seq[:-1], seq[1:]
        mask[row, n - len(choice):n] = True
    logits = forward(model, x)                               # (P, T, V)
    logp = log_softmax(logits[mask].astype(np.float64))      # (N, V): the choices' positions only
    token_logp = logp[np.arange(len(logp)), y[mask]]         # (N,) log p of each choice token
    sums = np.bincount(np.nonzero(mask)[0], weights=token_logp, minlength=P)  # (P,)
    return sums, mask.sum(axis=1)


def score_choices(model, context, choices, neutral=None):
    """Each choice's log-likelihood after the context (all token ids), one forward pass.

    With `neutral` (token ids of a text that says nothing, e.g. a newline), each choice is also
    scored after it, in the same pass, and `gain` is how much the context raised its
    log-likelihood: log p(choice | context) - log p(choice | neutral), the pointwise mutual
    information. It removes what makes a choice likely anywhere (common words, a short line),
    which the sum and the mean both reward.
    """
    return score_questions(model, [(context, choices)], neutral)[0]


def score_questions(model, questions, neutral=None):
    """[ChoiceScores] of several (context, choices) questions (as `score_choices` scores one),
    all in one forward pass: a batch of many small questions keeps the twin busy."""
    config = model.config
    if neutral is not None:
        neutral = _check_context("neutral", neutral, config.vocab_size)
    pairs, sizes = [], []            # every (context, choice) row; the K of each question
    for context, choices in questions:
        context = _check_context("context", context, config.vocab_size)
        choices = _check_choices(choices, config.vocab_size, config.n_ctx)
        pairs += [(context, choice) for choice in choices]
        if neutral is not None:
            pairs += [(neutral, choice) for choice in choices]
        sizes.append(len(choices))
    sums, n_tokens = log_likelihoods(model, pairs)           # (rows,) each
    scores, start = [], 0
    for K in sizes:
        s, n = sums[start:start + K], n_tokens[start:start + K]                # (K,) after the context
        gain = None if neutral is None else s - sums[start + K:start + 2 * K]  # (K,)
        scores.append(ChoiceScores(s, s / n, n, gain))
        start += K if neutral is None else 2 * K
    return scores


# ---- accuracy -------------------------------------------------------------------------------------
def wilson_interval(correct, n, z=Z_95):
    """(low, high): Wilson's score interval for a proportion of correct answers out of n, 95% by
    default. Unlike p +- z sqrt(p (1 - p) / n) it stays inside [0, 1] and is not empty at 0 or n."""
    if n < 1 or not 0 <= correct <= n:
        raise ValueError(f"expected 0 <= correct <= n and n >= 1, got correct={correct}, n={n}")
    p = correct / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return center - half, center + half


def evaluate(model, tokenizer, items, neutral=None, progress=False, max_logits=2**24):
    """Score every item ({"context": text, "choices": [text, ...], "label": index of the right
    one}) and return {"n", "chance" (mean of 1 / number of choices), "accuracy", "interval"
    (95% Wilson) and "right" (per item, whether the pick was right: `mcnemar` compares two
    models)}, each of the last three by score: the choice with the highest "sum", the highest
    "mean" and, given a `neutral` text, the highest "gain" (see `score_choices`).

    Items go through the model several at a time (`score_questions`), as many as keep one pass's
    logits under max_logits (rows x n_ctx x vocabulary: 2**24 float32 are 64 MB); a model with
    GPT-2's vocabulary and window reads one item a pass."""
    from .progress import progress_bar

    if not items:
        raise ValueError("items is empty: expected at least one item to evaluate")
    neutral_ids = None if neutral is None else tokenizer.encode(neutral)
    keys = ("sum", "mean") if neutral is None else ("sum", "mean", "gain")
    rows = max(len(item["choices"]) for item in items) * (1 if neutral is None else 2)   # an item's rows, at most
    per_pass = max(1, max_logits // (rows * model.config.n_ctx * model.config.vocab_size))
    right = {key: [] for key in keys}                        # per item: picked the label?
    with progress_bar(len(items), "scoring", disable=not progress) as bar:
        for start in range(0, len(items), per_pass):
            batch = items[start:start + per_pass]
            questions = [(tokenizer.encode(item["context"]), [tokenizer.encode(c) for c in item["choices"]])
                         for item in batch]
            for item, scores in zip(batch, score_questions(model, questions, neutral_ids)):
                for key in keys:
                    right[key].append(bool(np.argmax(getattr(scores, key)) == item["label"]))
            bar.update(len(batch))
    n = len(items)
    correct = {key: sum(flags) for key, flags in right.items()}
    return {"n": n, "chance": float(np.mean([1 / len(item["choices"]) for item in items])),
            "accuracy": {key: c / n for key, c in correct.items()},
            "interval": {key: list(wilson_interval(c, n)) for key, c in correct.items()},
            "right": right}


def mcnemar(right_a, right_b):
    """(only_a, only_b, p): McNemar's exact test of two models scored on the same items. only_a
    counts the items that model a got right and b wrong, only_b the reverse; p is the two-sided
    probability of a split at least that uneven if either model were as likely as the other to
    be the one right (a binomial with 1/2 over only_a + only_b items)."""
    if len(right_a) != len(right_b):
        raise ValueError(f"{len(right_a)} and {len(right_b)} items: "
                         "expected the same items for both models")
    only_a = sum(bool(a) and not b for a, b in zip(right_a, right_b))
    only_b = sum(bool(b) and not a for a, b in zip(right_a, right_b))
    n = only_a + only_b
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2 ** n
    return only_a, only_b, min(1.0, 2 * tail)


# ---- the offline benchmark: the next line of a held-out play -------------------------------------
def held_out_plays():
    """The plays whose whole text lies in the validation part of `load_corpus("shakespeare")`:
    no model trained on that corpus's training part has seen a line of them."""
    from .data import load_corpus
    from .shakespeare import shakespeare_plays

    _, val_ids = load_corpus("shakespeare", "byte")
    val_text = np.asarray(val_ids, np.uint8).tobytes().decode("utf-8")   # byte ids are the text's bytes
    return [play for play in shakespeare_plays() if play["text"] in val_text]


def _spoken_lines(text):
    """(the play's lines, [(index, line)] of its spoken lines): not blank, not a speaker's
    `NAME:` (the first line, and every line after a blank one)."""
    lines = text.split("\n")
    return lines, [(i, line) for i, line in enumerate(lines) if line and i > 0 and lines[i - 1]]


NEXT_LINE_NEUTRAL = "\n"            # the neutral text for `gain`: a line starting after nothing


def next_line_items(n_items=1000, seed=0, min_chars=10, max_chars=30):
    """n_items items from the held-out plays (`held_out_plays`): the context is the line before
    a spoken line (a speaker's `NAME:` when the speech begins there), the choices that spoken
    line and three other spoken lines of the same play, each followed by its newline, in an
    order drawn with the seed. Every choice has min_chars to max_chars characters (so that a
    small model's 64-byte window holds the context too); no wrong choice ever follows the same
    context line in the play, so exactly one answer is right. The (context, line) pairs are
    drawn with the seed, without repeats."""
    rng = np.random.default_rng(seed)
    pool = []                                                # (context line, next line, the play's candidates, followers)
    for play in held_out_plays():
        lines, spoken = _spoken_lines(play["text"])
        pairs = [(lines[i - 1], line) for i, line in spoken if min_chars <= len(line) <= max_chars]
        candidates = list(dict.fromkeys(line for _, line in pairs))
        followers = {}                                       # context line -> every line that follows it
        for i, line in spoken:
            followers.setdefault(lines[i - 1], set()).add(line)
        pool += [(before, line, candidates, followers[before]) for before, line in dict.fromkeys(pairs)]
    if not 1 <= n_items <= len(pool):
        raise ValueError(f"n_items must be from 1 to {len(pool)} (the lines that qualify), got {n_items!r}")
    items = []
    for j in np.sort(rng.choice(len(pool), n_items, replace=False)):
        before, line, candidates, followers = pool[j]
        choices = [line]
        while len(choices) < 4:
            other = candidates[rng.integers(len(candidates))]
            if other not in choices and other not in followers:
                choices.append(other)
        order = rng.permutation(4)                           # place k holds choices[order[k]]
        items.append({"context": before + "\n", "choices": [choices[k] + "\n" for k in order],
                      "label": int(np.flatnonzero(order == 0)[0])})
    return items


# ---- HellaSwag ----------------------------------------------------------------------------------
def hellaswag_items(path, limit=None):
    """HellaSwag's JSONL (one object a line with "ctx", "endings" (4) and "label") as items. An
    ending is read after a space, as it continues the context's last sentence. A line that is not
    such an object, or a file without one, raises ValueError naming the file and the line."""
    items = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            items.append(_hellaswag_item(line, f"{path}, line {number}"))
            if limit is not None and len(items) == limit:
                break
    if not items:
        raise ValueError(f"{path} holds no items: expected one JSON object a line with ctx, endings, label")
    return items


def _hellaswag_item(line, where):
    """One JSONL line as an item; `where` (file and line) starts every error's message."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not JSON ({e.msg} at column {e.colno}); expected one object "
                         f"with ctx, endings, label") from None
    if not isinstance(row, dict):
        raise ValueError(f"{where}: a {type(row).__name__}, expected an object with ctx, endings, label")
    missing = [key for key in ("ctx", "endings", "label") if key not in row]
    if missing:
        raise ValueError(f"{where}: no {missing}; expected HellaSwag's keys ctx, endings, label")
    endings, label = row["endings"], row["label"]
    if not (isinstance(row["ctx"], str) and isinstance(endings, list) and len(endings) >= 2
            and all(isinstance(e, str) for e in endings)):
        raise ValueError(f"{where}: expected ctx a string and endings a list of at least 2 strings")
    if isinstance(label, str) and label.strip().isdigit():
        label = int(label)                                   # the published files write "0".."3"
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(endings):
        raise ValueError(f"{where}: label {row['label']!r} does not index its {len(endings)} endings; "
                         f"expected 0 to {len(endings) - 1}")
    return {"context": row["ctx"], "choices": [" " + e for e in endings], "label": label}


def download_hellaswag():
    """HellaSwag's validation file (10,042 items), downloaded once into the cache; needs the internet."""
    path = cache_dir() / "downloads" / "hellaswag_val.jsonl"
    if not path.is_file():
        try:
            with urllib.request.urlopen(HELLASWAG_VAL_URL, timeout=60) as response:
                data = response.read()
        except OSError as e:
            raise ConnectionError(f"downloading {HELLASWAG_VAL_URL} failed ({e}); HellaSwag needs the internet "
                                  f"(Colab), or pass a local copy with --file") from None
        write_atomic(path, data)
    return path


# ---- command line --------------------------------------------------------------------------------
MODELS = ("small", "modern", "random", "gpt2")
SCORE_NAMES = {"sum": "sum of log-probabilities", "mean": "mean per token", "gain": "gain over the neutral text"}


def load_model(name, twin):
    """small, modern (lib.pretrained's trained models), random (the small shape, untrained), gpt2
    (the published 124M weights, downloaded: needs the internet) or a model folder (lib.sample)."""
    from . import pretrained
    from .config import GPTConfig

    if name == "small":
        return pretrained.shakespeare_small(twin)
    if name == "modern":
        return pretrained.modern_small(twin)
    if name == "random":
        return twin_module(twin).GPT(GPTConfig.small(), seed=0)
    if name == "gpt2":
        from huggingface_hub import snapshot_download
        return twin_module(twin).GPT.from_pretrained(snapshot_download("gpt2", allow_patterns=["config.json",
                                                                                               "model.safetensors"]))
    from .sample import load_model as load_folder
    return load_folder(name, twin)[0]


def build_parser():
    p = argparse.ArgumentParser(prog="python -m lib.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("benchmark", choices=("shakespeare", "hellaswag"),
                   help="shakespeare: the next line of a held-out play (offline); hellaswag: its validation set")
    p.add_argument("--model", default="small", help=f"one of {', '.join(MODELS)}, or a model folder (default small)")
    p.add_argument("--items", type=int, help="score only this many items (default: shakespeare 1,000, hellaswag all)")
    p.add_argument("--file", help="hellaswag: a local JSONL file instead of the download")
    p.add_argument("--neutral", help="also pick by gain over this text (default: a newline for shakespeare, "
                                     "none for hellaswag)")
    p.add_argument("--json", action="store_true", help="end with one JSON line: n, chance, accuracy, interval, ...")
    p.add_argument("--twin", choices=TWINS, help="default: torch when installed, else numpy")
    p.add_argument("--device", help="torch twin: cpu, cuda, ... (default: cuda if available, else cpu)")
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    twin = args.twin or default_twin()
    try:
        if args.device and twin != "torch":
            raise ValueError(f"--device {args.device} applies to the torch twin only (this run uses the "
                             f"{twin} twin)")
        if args.items is not None and args.items < 1:
            raise ValueError(f"--items {args.items}: expected a positive number of items")
        neutral = args.neutral
        if args.benchmark == "shakespeare":
            items = next_line_items(1000 if args.items is None else args.items)
            neutral = NEXT_LINE_NEUTRAL if neutral is None else neutral
        else:
            items = hellaswag_items(args.file or download_hellaswag(), limit=args.items)
        model = load_model(args.model, twin)
    except (OSError, ValueError, AssetError) as e:           # a missing file, a bad line, no network
        parser.error(str(e))
    if twin == "torch":
        model.to(args.device or device())
    from .sample import tokenizer_for

    result = evaluate(model, tokenizer_for(model.config.vocab_size), items, neutral, progress=sys.stderr.isatty())
    print(f"{args.benchmark}, {result['n']} items, model {args.model} ({twin} twin); chance {result['chance']:.3f}")
    for key, low_high in result["interval"].items():
        print(f"  accuracy by {SCORE_NAMES[key]:26s} {result['accuracy'][key]:.3f}  "
              f"(95% Wilson interval {low_high[0]:.3f} to {low_high[1]:.3f})")
    if args.json:
        summary = {key: value for key, value in result.items() if key != "right"}   # not 3 x n flags
        print(json.dumps({"benchmark": args.benchmark, "model": args.model, "twin": twin, "neutral": neutral,
                          **summary}))


if __name__ == "__main__":
    main()
