"""Exercise 11.2: each head's prefix-matching score and the in-context learning score."""
from build_notebooks import check, code, collapsed, graded, md, setup


STUB = '''
import numpy as np


def prefix_matching_score(attn, period):
    """Each head's mean attention from position i >= period to position
    i - period + 1, on a sequence whose tokens repeat with `period` from position 0.

    attn: attention weights (n_layer, n_head, T, T) or (B, n_layer, n_head, T, T),
    query by key. Returns (n_layer, n_head), averaged over the B sequences too."""
    raise NotImplementedError("exercise 11.2: write prefix_matching_score")


def in_context_score(per_position_loss, early, late):
    """The mean loss at the late-th token minus the mean loss at the early-th
    (both counted from 1). per_position_loss: (B, T) or (T,). Returns a float."""
    raise NotImplementedError("exercise 11.2: write in_context_score")
'''

ANSWER = '''
import numpy as np


def prefix_matching_score(attn, period):
    """Each head's mean attention from position i >= period to position
    i - period + 1, on a sequence whose tokens repeat with `period` from position 0.

    attn: attention weights (n_layer, n_head, T, T) or (B, n_layer, n_head, T, T),
    query by key. Returns (n_layer, n_head), averaged over the B sequences too."""
    attn = np.asarray(attn, dtype=float)
    if attn.ndim not in (4, 5) or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attn must be (L, H, T, T) or (B, L, H, T, T), got "
                         f"{attn.shape}")
    T = attn.shape[-1]
    if not (isinstance(period, (int, np.integer)) and 1 <= period < T):
        raise ValueError(f"period must be an integer from 1 to {T - 1}, got {period!r}")
    queries = np.arange(period, T)                     # (T - period,): the repeat
    weights = attn[..., queries, queries - period + 1]  # (..., L, H, T - period)
    per_head = weights.mean(axis=-1)                   # (..., L, H)
    return per_head.reshape(-1, *attn.shape[-4:-2]).mean(axis=0)


def in_context_score(per_position_loss, early, late):
    """The mean loss at the late-th token minus the mean loss at the early-th
    (both counted from 1). per_position_loss: (B, T) or (T,). Returns a float."""
    loss = np.asarray(per_position_loss, dtype=float)
    if loss.ndim not in (1, 2) or loss.shape[-1] == 0:
        raise ValueError(f"per_position_loss must be (B, T) or (T,), got {loss.shape}")
    T = loss.shape[-1]
    whole = all(isinstance(k, (int, np.integer)) for k in (early, late))
    if not (whole and 1 <= early < late <= T):
        raise ValueError(f"need integers 1 <= early < late <= T = {T}, "
                         f"got {early!r} and {late!r}")
    loss = loss.reshape(-1, T)                         # (B, T)
    return float(loss[:, late - 1].mean() - loss[:, early - 1].mean())
'''

CELLS = [
    md(r"""
    # Exercise 11.2: the prefix-matching score and the in-context score

    This exercise follows chapter 11, whose last experiment watches a 2-layer model form an
    *induction head* {cite}`olsson2022context`: a head that, at a token it has seen before, attends
    to the token that came right after that earlier occurrence, so that the model can copy it. In
    "A B ... A", it attends from the second A to B. Two numbers measure it, and you write both.

    **The prefix-matching score** of a head. Feed the model a sequence of random tokens followed
    by the same tokens again: positions $0, \dots, p - 1$, then positions $p, \dots, T - 1$
    repeating them, $p$ the period. At position $i \ge p$ the token is the one at $i - p$, and the
    token that followed it there is at $i - p + 1$. The score is the head's attention weight from
    query $i$ to key $i - p + 1$, averaged over the queries $i = p, \dots, T - 1$ (and over the
    sequences of a batch). A perfect induction head scores 1.

    **The in-context score**: the loss at a token late in the context minus the loss at one early
    in it, averaged over sequences. Olsson et al. took the 500th and the 50th token of 512; a
    model that uses its context predicts the later token better, so the score is negative.

    **What is graded.** The cell tagged `graded:ch11_in_context`. A grader runs that cell alone,
    in a sandbox, and calls your two functions with hidden tests; nothing else in this notebook is
    graded. The checks below it are a first test you can run yourself. Some hidden tests are
    *edge tests* (bad input that must raise): they count only once every other test passes.
    """),
    setup(),
    md(r"""
    ## The contract

    - `prefix_matching_score(attn, period)`: `attn` holds attention weights of shape
      `(n_layer, n_head, T, T)`, or `(B, n_layer, n_head, T, T)` for a batch of B sequences, query
      by key (row $i$: what query $i$ gives each key). Return an `(n_layer, n_head)` array of
      floats: each head's score, averaged over the batch when there is one.
    - `in_context_score(per_position_loss, early, late)`: `per_position_loss` is `(B, T)` or
      `(T,)`, column $k - 1$ the loss of the $k$-th token's prediction. Return a float: the mean
      over the batch of the loss at the `late`-th token, minus the same mean at the `early`-th.
      Tokens are counted from 1, as Olsson et al. count them.
    - Raise `ValueError` for attention that is not 4- or 5-dimensional or whose last two axes
      differ, a period that is not an integer from 1 to $T - 1$, losses that are not 1- or
      2-dimensional, and positions that are not integers with $1 \le$ `early` $<$ `late` $\le T$.
    - Grading is in float64 within $10^{-12}$.

    :::{admonition} Hint 1 of 2: which entries
    :class: dropdown
    For one head, the entries you average are `attn[i, i - period + 1]` for `i` from `period` to
    `T - 1`: one per row, on a diagonal below the main one. numpy picks them all at once if you
    index the last two axes with two arrays of the same length.
    :::

    :::{admonition} Hint 2 of 2: the axes
    :class: dropdown
    `attn[..., rows, cols]` with `rows = np.arange(period, T)` and `cols = rows - period + 1`
    keeps the leading axes and gives `(..., T - period)`. Average the last axis; then, for a
    batch, the first. The $k$-th token's loss is column `k - 1`.
    :::

    Use numpy only; while grading, lib's versions raise an error. The graded cell must hold
    everything the functions use, imports included.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    Heads whose score is known: an induction head, a previous-token head, a head that attends to
    the earlier copy of the same token, and a head that spreads its attention evenly over the
    past, whose score is the mean of $1 / (i + 1)$ over the repeat, about $\ln 2 / p$.
    """),
    code('''
    from lib.checks import CheckFailed, expect_close, expect_raises, expect_shape

    P, T = 8, 16                                    # 8 random tokens, then the same 8 again


    def head(target):
        """(T, T): every query i attends only to key target(i), clipped to [0, i]."""
        attn = np.zeros((T, T))
        rows = np.arange(T)
        attn[rows, np.clip(target(rows), 0, rows)] = 1.0
        return attn


    induction = head(lambda i: i - P + 1)
    previous = head(lambda i: i - 1)
    same_token = head(lambda i: i - P)
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    '''),
    check('''
    score = prefix_matching_score(np.stack([np.stack([induction, previous]),
                                            np.stack([same_token, uniform])]), P)
    expect_shape("two layers of two heads", score, (2, 2), np.float64)
    if score[1, 0] == 1.0 and score[0, 0] < 1.0:
        raise CheckFailed("the head that attends to the earlier copy of the same token "
                          "scores 1 and the induction head does not: the key is one past "
                          "the earlier copy, i - period + 1")
    every_row = np.mean([induction[i, i - P + 1] for i in range(T)])   # rows 0..T-1
    if score[0, 0] < 1.0 and abs(score[0, 0] - every_row) < 1e-12:
        raise CheckFailed(f"an induction head scores {score[0, 0]}: its weights divided "
                      "by all T queries; average over the repeat's queries only")
    expect_close("an induction head, a previous-token head, a same-token head",
                 score[[0, 0, 1], [0, 1, 0]], [1.0, 0.0, 0.0], rtol=0, atol=1e-12)
    '''),
    check('''
    score = prefix_matching_score(uniform[None, None], P)[0, 0]
    in_repeat = 1 / np.arange(P + 1, T + 1)          # query i's weights: 1 / (i + 1)
    if abs(score - in_repeat.sum() / T) < 1e-9:
        raise CheckFailed("a uniform head's score divided by all T queries: average "
                          "over the repeat's queries only, i = period, ..., T - 1")
    expect_close("a uniform head", score, in_repeat.mean(), rtol=1e-12)
    '''),
    check('''
    batch = np.stack([induction[None, None], uniform[None, None]])   # (2, 1, 1, T, T)
    expect_close("a batch of two sequences is averaged over them",
                 prefix_matching_score(batch, P),
                 (1.0 + np.mean(1 / np.arange(P + 1, T + 1))) * np.ones((1, 1)) / 2,
                 rtol=1e-12)
    '''),
    check('''
    loss = np.tile(np.arange(1, 65.0) ** 2, (3, 1))  # the k-th token's loss: k squared
    loss[1] += 5.0
    got = in_context_score(loss, 6, 62)
    if got == 6.0 ** 2 - 62.0 ** 2:
        raise CheckFailed("the score is the early loss minus the late one: it is late "
                          "minus early, negative for a model that uses its context")
    if got == 63.0 ** 2 - 7.0 ** 2:
        raise CheckFailed("the 63rd token's loss minus the 7th's: the k-th token, counted "
                          "from 1, is column k - 1")
    expect_close("the 62nd token's loss minus the 6th's", got, 62.0 ** 2 - 6.0 ** 2,
                 rtol=1e-12)
    expect_close("one sequence (T,)", in_context_score(loss[0], 1, 64), 64.0 ** 2 - 1.0,
                 rtol=1e-12)
    '''),
    check('''
    expect_raises("attention of 3 axes", ValueError, prefix_matching_score,
                  np.zeros((2, T, T)), P)
    expect_raises("period = T", ValueError, prefix_matching_score, uniform[None, None], T)
    expect_raises("period = 2.5", ValueError, prefix_matching_score, uniform[None, None],
                  2.5)
    expect_raises("early = late", ValueError, in_context_score, np.zeros(64), 10, 10)
    expect_raises("late = 65 of 64", ValueError, in_context_score, np.zeros(64), 6, 65)
    expect_raises("early = 0", ValueError, in_context_score, np.zeros(64), 0, 10)
    '''),
    md("""
    ## Compare with lib

    lib's versions, which chapter 11 uses (its `in_context_score` also chooses the two positions
    itself when you give none: Olsson et al.'s 50th and 500th of 512, scaled to the context):
    open the cell below once your checks pass.
    """),
    collapsed('''
    from lib.display import show
    from lib.scaling import in_context

    show(in_context.prefix_matching_score, in_context.in_context_score)
    '''),
    md("""
    ## Going further

    - A head that attends only to the previous token scores 0 here, yet an induction head needs
      one in the layer below it. Why? (Its key is found by what the token *before* it was.)
    - Score the heads of the course's small Shakespeare model (`lib.pretrained.shakespeare_small`,
      `forward_outputs(idx, return_attention=True)` in the torch twin) on 32 random bytes repeated
      twice. Which of its heads scores highest, and how does that compare with chapter 11's
      2-layer model?
    """),
]
