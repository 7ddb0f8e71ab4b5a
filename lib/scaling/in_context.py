"""Two measures of in-context learning [olsson2022context]: each head's prefix-matching score, and
how much lower the loss is late in the context than early.

Prefix matching is what an induction head does: at a token it has seen before, it attends to the
token that followed the earlier occurrence (in "A B ... A" it attends from the second A to B), so
that it can copy B next. On a sequence of random tokens repeated, the earlier occurrence of the
token at position i (in the second copy) is at i - period, and the token after it at
i - period + 1. The score is a head's attention weight there, averaged over those positions: 1 for
a perfect induction head; for a head attending uniformly to the past, over two copies, the mean of
1 / (i + 1), about ln 2 / period.

The in-context score is the loss late in the context minus the loss early in it, averaged over
sequences: negative when later tokens, with more context to draw on, are predicted better.
Olsson et al. took the 500th token and the 50th of a 512-token context, the one near its end and
the other early enough to be near the start yet late enough that the text's language and kind are
established; `in_context_positions` scales the two to another context length.
"""
from __future__ import annotations

import numpy as np

OLSSON_POSITIONS = (50, 500)       # early, late: the 50th and the 500th token ...
OLSSON_CONTEXT = 512               # ... of a 512-token context


def prefix_matching_score(attn, period: int) -> np.ndarray:
    """Each head's mean attention from position i >= period to position i - period + 1, for a
    sequence whose tokens repeat with `period` (random tokens, then the same ones again, starting
    at position 0: drop a prepended start token's row and column first).

    attn: attention weights (n_layer, n_head, T, T) or (B, n_layer, n_head, T, T), query by key
    -> (n_layer, n_head)."""
    attn = np.asarray(attn, dtype=float)
    if attn.ndim not in (4, 5) or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attn must be (n_layer, n_head, T, T) or (B, n_layer, n_head, T, T), got shape {attn.shape}")
    T = attn.shape[-1]
    if not (isinstance(period, (int, np.integer)) and 1 <= period < T):
        raise ValueError(f"period must be an integer from 1 to T - 1 = {T - 1} (the length of the first copy), "
                         f"got {period!r}")
    queries = np.arange(period, T)                                   # (T - period,) positions in a repeat
    weights = attn[..., queries, queries - period + 1]              # (..., n_layer, n_head, T - period)
    return weights.mean(axis=-1).reshape(-1, *attn.shape[-4:-2]).mean(axis=0)


def in_context_positions(n_ctx: int) -> tuple[int, int]:
    """(early, late): which tokens `in_context_score` compares by default, counted from 1 (the k-th
    token's loss is column k - 1 of the per-position losses). Olsson et al.'s 50th and 500th token
    of 512, scaled by n_ctx / 512 and rounded, early at least the 1st: the same fractions of the
    context (about 10% and 98%), so GPT-2's 1,024 compares the 100th and the 1,000th, a context
    of 64 the 6th and the 62nd."""
    scale = n_ctx / OLSSON_CONTEXT
    early, late = max(1, round(OLSSON_POSITIONS[0] * scale)), round(OLSSON_POSITIONS[1] * scale)
    if not early < late <= n_ctx:
        raise ValueError(f"a context of {n_ctx!r} tokens is too short to compare an early token with a later one; "
                         f"expected at least 2")
    return early, late


def in_context_score(per_position_loss, early: int | None = None, late: int | None = None) -> float:
    """The mean loss at the `late`-th token minus the mean loss at the `early`-th (counted from 1;
    by default `in_context_positions(T)`). per_position_loss: (B, T) or (T,), the loss of each
    prediction in context order. Negative: the model predicts better with more context."""
    loss = np.asarray(per_position_loss, dtype=float)
    if loss.ndim not in (1, 2) or loss.shape[-1] == 0:
        raise ValueError(f"per_position_loss must be (B, T) or (T,), got shape {loss.shape}")
    T = loss.shape[-1]
    if early is None or late is None:
        defaults = in_context_positions(T)
        early, late = (default if given is None else given for given, default in zip((early, late), defaults))
    integers = isinstance(early, (int, np.integer)) and isinstance(late, (int, np.integer))
    if not (integers and 1 <= early < late <= T):
        raise ValueError(f"early and late must be integers with 1 <= early < late <= T = {T}, "
                         f"got {early!r} and {late!r}")
    loss = loss.reshape(-1, T)                                       # (B, T)
    return float(loss[:, late - 1].mean() - loss[:, early - 1].mean())
