"""GPT-1's four input formats (its Figure 1), each on a task from the plays whose label can be checked.

- classification: `[start] passage [extract]`, chapter 7's word-order task as it is
  (`lib.finetune.word_order_examples`).
- pairs (entailment's format): `[start] A [delim] B [extract]`; does line B follow line A in A's
  speech, or is B another line of the same play?
- similarity: `[start] A [delim] B [extract]` and `[start] B [delim] A [extract]`, both through the
  model, their states at [extract] added before the head, so that the order cannot matter: are A
  and B lines of the same speech?
- choice (the story-cloze format): `[start] A [delim] choice_i [extract]` for each of four lines,
  each scored to one number by the same head, a softmax across them: which one follows A?

Every example is S sequences (1, 1, 2, 4 for the formats in that order), each padded with PAD
after its [extract] token; `Examples` holds them as x (N, S, T), the [extract] positions
(N, S) and the labels (N,). Padding sits after [extract], which causal attention never lets an
earlier position see, and the language-modelling loss leaves it out. A line is used only when
its text occurs once in its play, so that a label is a fact of the text. The plays are split as
chapter 7 splits them (`lib.finetune.split`).

`finetune_format` runs chapter 7's loop (`lib.finetune.train_loop`) for any format; the twins' pieces
are in `lib/numpy_twin/gpt1_formats.py` and `lib/torch_twin/gpt1_formats.py`.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from .finetune import FINETUNE, N_SPECIAL, TASK, encode_example, train_loop, word_order_examples
from .twins import twin_module, twin_of

FORMATS = ("classification", "pairs", "similarity", "choice")
N_CHOICES = 4
SEQUENCES = {"classification": 1, "pairs": 1, "similarity": 2, "choice": N_CHOICES}   # per example
HEAD_OUTPUTS = {"classification": 2, "pairs": 2, "similarity": 2, "choice": 1}      # scores per pooled state
CHANCE = {"classification": 0.5, "pairs": 0.5, "similarity": 0.5, "choice": 1 / N_CHOICES}  # balanced labels
LABELS = {"classification": ("shuffled", "as written"), "pairs": ("elsewhere", "follows"),
          "similarity": ("other speech", "same speech"), "choice": tuple(f"choice {i}" for i in range(N_CHOICES))}
PAD = 0                              # a byte the plays never hold; only ever after [extract]
LINE_BYTES = (10, 60)                # the lines used: two and the special tokens fit a 128-token context


class Examples(NamedTuple):
    """One format's examples: x (N, S, T) int64 token ids, extract (N, S) int64 the position of
    each sequence's [extract] token (PAD after it), labels (N,) int64 indices into LABELS[format]."""
    format: str
    x: np.ndarray
    extract: np.ndarray
    labels: np.ndarray


def check_format(fmt):
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    return fmt


def check_examples(examples):
    """`examples` as they are, or one ValueError line: x (N, S, T) with S = SEQUENCES[format],
    extract (N, S) inside T, labels (N,) below the format's number of labels, N >= 1."""
    fmt, x, extract, labels = examples
    n, s = len(labels), SEQUENCES[check_format(fmt)]
    shapes_ok = np.ndim(x) == 3 and np.shape(x)[:2] == (n, s) and np.shape(extract) == (n, s) and n >= 1
    if not shapes_ok or not (0 <= np.min(extract) and np.max(extract) < np.shape(x)[2]) \
            or not 0 <= np.min(labels) <= np.max(labels) < len(LABELS[fmt]):
        raise ValueError(f"{fmt} examples must be x (N, {s}, T), extract (N, {s}) in [0, T) and labels (N,) in "
                         f"[0, {len(LABELS[fmt])}) with N >= 1, got x {np.shape(x)}, extract {np.shape(extract)}, "
                         f"labels {np.shape(labels)}")
    return examples


# ---- the sequences ---------------------------------------------------------------------------------
def classification_sequences(text):
    """[[start] text [extract]]: one sequence (text: an array of byte ids)."""
    return [encode_example([text])]


def pair_sequences(a, b):
    """[[start] a [delim] b [extract]]: one sequence, the premise first."""
    return [encode_example([a, b])]


def similarity_sequences(a, b):
    """[[start] a [delim] b [extract], [start] b [delim] a [extract]]: both orders."""
    return [encode_example([a, b]), encode_example([b, a])]


def choice_sequences(context, choices):
    """[[start] context [delim] choice [extract] for each choice], in their order."""
    return [encode_example([context, choice]) for choice in choices]


def pad_examples(fmt, examples, labels):
    """`Examples` from a list of examples, each a list of SEQUENCES[fmt] int arrays, padded with
    PAD to the longest sequence."""
    check_format(fmt)
    s = SEQUENCES[fmt]
    if not examples or any(len(seqs) != s for seqs in examples):
        raise ValueError(f"each {fmt} example must be {s} sequence(s), and there must be at least one; "
                         f"got {sorted({len(seqs) for seqs in examples})} sequences per example")
    lengths = np.array([[len(q) for q in seqs] for seqs in examples])   # (N, S)
    x = np.full((len(examples), s, lengths.max()), PAD, np.int64)         # (N, S, T)
    for i, seqs in enumerate(examples):
        for j, q in enumerate(seqs):
            x[i, j, :len(q)] = q
    return Examples(fmt, x, lengths - 1, np.asarray(labels, np.int64))


# ---- the plays' lines --------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _texts():
    from .shakespeare import shakespeare_plays
    return {p["slug"]: p["text"] for p in shakespeare_plays()}


@functools.lru_cache(maxsize=None)
def speech_lines(slug):
    """The play's speeches, each a tuple of its lines as byte strings, with None in place of every
    line that is not usable: the usable lines are LINE_BYTES long and occur once in the play. The
    Nones keep each line's neighbours, so two usable lines side by side do follow each other."""
    from .posttrain.instructions import speeches

    talk = [[line.encode("utf-8") for line in lines] for _, lines in speeches(_texts()[slug])]
    counts = {}
    for lines in talk:
        for line in lines:
            counts[line] = counts.get(line, 0) + 1
    lo, hi = LINE_BYTES
    return tuple(tuple(line if counts[line] == 1 and lo <= len(line) <= hi else None for line in lines)
                 for lines in talk)


def _check_slugs(slugs):
    unknown = sorted(set(slugs) - set(_texts()))
    if unknown or not slugs:
        raise ValueError(f"slugs must name one or more plays of lib.shakespeare.shakespeare_plays(), got "
                         + (f"unknown plays {unknown}" if unknown else f"{list(slugs)}"))


def next_line_anchors(slugs):
    """[(slug, A, B)]: every two usable lines of one speech, B right after A."""
    _check_slugs(slugs)
    return [(slug, a, b) for slug in slugs for lines in speech_lines(slug)
            for a, b in zip(lines, lines[1:]) if a and b]


def same_speech_anchors(slugs):
    """[(slug, speech index, A)]: every usable line of a speech with another usable line."""
    _check_slugs(slugs)
    return [(slug, k, a) for slug in slugs for k, lines in enumerate(speech_lines(slug))
            if sum(map(bool, lines)) >= 2 for a in lines if a]


@functools.lru_cache(maxsize=None)
def _usable(slug):
    return tuple(line for lines in speech_lines(slug) for line in lines if line)


def _others(rng, lines, exclude, k):
    """k distinct lines drawn from `lines`, none in `exclude`."""
    picked = []
    for i in rng.permutation(len(lines)):
        if lines[i] not in exclude:
            picked.append(lines[i])
            if len(picked) == k:
                return picked
    raise ValueError(f"a play has fewer than {k} lines besides {len(exclude)} excluded ones")


def _drawn(anchors, n, seed, what):
    if not isinstance(n, (int, np.integer)) or not 1 <= n <= len(anchors):
        raise ValueError(f"n must be an integer from 1 to {len(anchors)} (the {what} these plays give), got {n!r}")
    rng = np.random.default_rng(seed)
    return [anchors[i] for i in rng.permutation(len(anchors))[:n]], rng


def _ids(line):
    return np.frombuffer(line, np.uint8)


# ---- the tasks ---------------------------------------------------------------------------------------
def word_order_task(slugs, n, seed=0):
    """Chapter 7's task as `Examples`: 2 n rows, each passage as written (1) and shuffled (0)."""
    x, labels = word_order_examples(slugs, n, seed=seed)    # (2 n, T), (2 n,)
    return Examples("classification", x[:, None], np.full((len(x), 1), x.shape[1] - 1), labels)  # (2 n, 1, T)


def next_line_task(slugs, n, seed=0):
    """Pairs: n anchors (A, B) drawn without replacement (seeded), each giving (A, B) labelled 1
    and (A, C) labelled 0, C another usable line of the play; 2 n rows, the first 2 k those of a
    smaller n = k."""
    anchors, rng = _drawn(next_line_anchors(slugs), n, seed, "next-line pairs")
    examples = []
    for slug, a, b in anchors:
        c, = _others(rng, _usable(slug), {a, b}, 1)
        examples += [pair_sequences(_ids(a), _ids(b)), pair_sequences(_ids(a), _ids(c))]
    return pad_examples("pairs", examples, np.tile([1, 0], n))


def same_speech_task(slugs, n, seed=0):
    """Similarity: n anchor lines A drawn without replacement (seeded), each giving (A, B)
    labelled 1, B another usable line of A's speech, and (A, C) labelled 0, C a usable line of
    another speech of the play; 2 n rows."""
    anchors, rng = _drawn(same_speech_anchors(slugs), n, seed, "lines in speeches of two or more")
    examples = []
    for slug, k, a in anchors:
        speech = [line for line in speech_lines(slug)[k] if line]
        b, = _others(rng, speech, {a}, 1)
        c, = _others(rng, _usable(slug), set(speech), 1)
        examples += [similarity_sequences(_ids(a), _ids(b)), similarity_sequences(_ids(a), _ids(c))]
    return pad_examples("similarity", examples, np.tile([1, 0], n))


def next_line_choice_task(slugs, n, seed=0):
    """Choice: n anchors (A, B) drawn without replacement (seeded); the choices are B and
    N_CHOICES - 1 other usable lines of the play, in a seeded order; the label is B's place."""
    anchors, rng = _drawn(next_line_anchors(slugs), n, seed, "next-line pairs")
    examples, labels = [], []
    for slug, a, b in anchors:
        choices = [b, *_others(rng, _usable(slug), {a, b}, N_CHOICES - 1)]
        order = rng.permutation(N_CHOICES)
        examples.append(choice_sequences(_ids(a), [_ids(choices[i]) for i in order]))
        labels.append(int(np.flatnonzero(order == 0)[0]))
    return pad_examples("choice", examples, labels)


TASKS = {"classification": word_order_task, "pairs": next_line_task, "similarity": same_speech_task,
         "choice": next_line_choice_task}


def task_examples(fmt, slugs, n, seed=0):
    """The `Examples` of format `fmt`'s task on the plays `slugs`: n draws (2 n rows for the
    balanced two-way formats, n for choice)."""
    return TASKS[check_format(fmt)](slugs, n, seed)


def available(fmt, slugs):
    """How many draws format `fmt`'s task can make without replacement on the plays `slugs`
    (classification's passages are drawn with replacement: the line starts with a passage after them)."""
    check_format(fmt)
    if fmt == "classification":
        _check_slugs(slugs)
        return sum(_texts()[s].encode("utf-8")[:-TASK["passage_len"]].count(b"\n") for s in slugs)
    return len(same_speech_anchors(slugs) if fmt == "similarity" else next_line_anchors(slugs))


# ---- fine-tuning ---------------------------------------------------------------------------------
def format_model(model, fmt, seed=0):
    """(model with the three special tokens added, a fresh head of HEAD_OUTPUTS[fmt] scores)."""
    twin = twin_module(twin_of(model), "finetune")
    return (twin.add_tokens(model, N_SPECIAL, seed),
            twin.ClassifierHead(model.config.n_embd, HEAD_OUTPUTS[check_format(fmt)], seed))


def finetune_format(model, head, examples, settings=FINETUNE, *, progress=True):
    """`lib.finetune.finetune` for any format: its loop (`lib.finetune.train_loop`) over
    `examples` (an `Examples`) with the twin's `format_step`. Returns the history: per step
    "loss" (L3), "cls_loss" (L2), "lm_loss" (L1), "lr"."""
    fmt, x, extract, labels = check_examples(examples)
    format_step = twin_module(twin_of(model), "gpt1_formats").format_step
    per_choice = fmt == "choice"

    def step(model, head, optimizer, x, extract, labels, *rest):    # rest: lm_weight, lr, grad_clip
        return format_step(model, head, optimizer, x, extract, labels, per_choice, *rest)

    return train_loop(model, head, (x, extract, labels), step, settings, f"fine-tuning ({fmt})", progress=progress)


def format_accuracy(model, head, examples):
    """The fraction of `examples` whose highest score is their label."""
    twin = twin_module(twin_of(model), "gpt1_formats")
    predicted = twin.predict_format(model, head, examples.x, examples.extract, examples.format == "choice")
    return float(np.mean(predicted == examples.labels))
