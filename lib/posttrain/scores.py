"""Scoring an assistant on instruction items, right or wrong per item (chapter 9's evaluation).

Chapter 6b's machinery: choice accuracy by `lib.evaluate.score_questions`, and exact match of
greedy decoding, computed in one pass (`exact_match`), per item so that `lib.evaluate.mcnemar`
can pair two models; `kl_to` measures how far a model drifted from a reference.
"""
from __future__ import annotations

import numpy as np

from ..twins import forward
from .instructions import pairs_of, rejected_choices
from .template import chat_batch, prompt_ids, response_ids


def exact_match(model, pairs, batch_size=256):
    """(N,) bool: whether greedy decoding after each prompt gives its response exactly, <|end|>
    included. Computed in one teacher-forced pass per batch: greedy decoding writes the response
    if and only if, fed the response so far, the model's highest logit is its next token at every
    step (ties aside)."""
    out = []
    for i in range(0, len(pairs), batch_size):
        x, y, mask = chat_batch(pairs[i:i + batch_size])
        best = forward(model, x).argmax(axis=-1)            # (b, T)
        out.append(((best == y) | (mask == 0)).all(axis=1))
    return np.concatenate(out)


def choice_logps(model, items, batch_size=64):
    """(N, 4) float64: log p(choice<|end|> | prompt) of each item's choices (chapter 6b's
    `score_questions`). The choice accuracy is argmax == label; the preference accuracy compares
    the right choice with the rejected one."""
    from ..evaluate import score_questions

    out = []
    for i in range(0, len(items), batch_size):
        questions = [(prompt_ids(it["instruction"], it["input"]), [response_ids(c) for c in it["choices"]])
                     for it in items[i:i + batch_size]]
        out += [s.sum for s in score_questions(model, questions)]
    return np.array(out)


def sequence_logps(model, pairs, batch_size=128):
    """(N,) float64: log p(response | prompt) of each (prompt ids, response ids) pair."""
    from ..evaluate import log_likelihoods

    return np.concatenate([log_likelihoods(model, pairs[i:i + batch_size])[0]
                           for i in range(0, len(pairs), batch_size)])


def task_scores(model, items, seed=1):
    """On the items: {"exact", "choice", "preference"}, each (N,) bool (preference: the right
    answer more likely than the wrong choice `rejected_choices(items, seed)` picks), and
    "response_loss", the mean -log p per token of the right responses (<|end|> included)."""
    logp = choice_logps(model, items)                        # (N, 4)
    rows, labels = np.arange(len(items)), np.array([it["label"] for it in items])
    tokens = sum(len(response_ids(it["output"])) for it in items)
    return {"exact": exact_match(model, pairs_of(items)), "choice": logp.argmax(axis=1) == labels,
            "preference": logp[rows, labels] > logp[rows, rejected_choices(items, seed)],
            "response_loss": float(-logp[rows, labels].sum() / tokens)}


def kl_to(model, reference, pairs, batch_size=128):
    """Mean over the responses' tokens of KL(model || reference) of the next-token distributions,
    the responses read after their prompts: how far the model has drifted from the reference."""
    from ..numpy_twin.train import log_softmax

    total, count = 0.0, 0
    for i in range(0, len(pairs), batch_size):
        x, _, mask = chat_batch(pairs[i:i + batch_size])
        rows = mask.astype(bool)
        logp = log_softmax(forward(model, x)[rows].astype(np.float64))       # (n, V)
        logq = log_softmax(forward(reference, x)[rows].astype(np.float64))   # (n, V)
        total += float((np.exp(logp) * (logp - logq)).sum())
        count += int(rows.sum())
    return total / count
