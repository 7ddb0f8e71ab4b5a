"""Exercise 2.1: the embeddings and the tied head, forward and backward (numpy)."""
from build_notebooks import check, code, graded, md, setup

STUB = '''
import numpy as np


def embed_forward(idx, wte, wpe):
    """idx (B, T) integer token ids; wte (V, C); wpe (n_ctx, C). -> x (B, T, C) in
    wte's dtype: each token's row of wte plus its position's row of wpe. An id
    outside [0, V) or T > n_ctx: ValueError."""
    raise NotImplementedError("exercise 2.1: write embed_forward")


def embed_backward(dx, idx, grads):
    """dx (B, T, C): the loss's gradient w.r.t. embed_forward's output. Adds the
    gradients of wte and wpe into grads["wte"] (V, C) and grads["wpe"] (n_ctx, C).
    Returns None."""
    raise NotImplementedError("exercise 2.1: write embed_backward")


def head_forward(hidden, wte):
    """hidden (B, T, C), wte (V, C) -> logits (B, T, V): the tied head, the score of
    token v is the dot product of the hidden vector with row v of wte."""
    raise NotImplementedError("exercise 2.1: write head_forward")


def head_backward(dlogits, hidden, wte, grads):
    """dlogits (B, T, V): the loss's gradient w.r.t. the logits. Adds the head's part
    of wte's gradient into grads["wte"] (V, C) and returns dhidden (B, T, C)."""
    raise NotImplementedError("exercise 2.1: write head_backward")
'''

ANSWER = '''
import numpy as np


def embed_forward(idx, wte, wpe):
    """idx (B, T) integer token ids; wte (V, C); wpe (n_ctx, C). -> x (B, T, C) in
    wte's dtype: each token's row of wte plus its position's row of wpe. An id
    outside [0, V) or T > n_ctx: ValueError."""
    T = idx.shape[1]
    if T > len(wpe):
        raise ValueError(f"{T} positions, but wpe has rows for n_ctx = {len(wpe)}")
    if idx.size and (idx.min() < 0 or idx.max() >= len(wte)):
        raise ValueError(f"ids must lie in [0, {len(wte)}); got {idx.min()} to "
                         f"{idx.max()}")
    return wte[idx] + wpe[:T]                          # (B, T, C) + (T, C) -> (B, T, C)


def embed_backward(dx, idx, grads):
    """dx (B, T, C): the loss's gradient w.r.t. embed_forward's output. Adds the
    gradients of wte and wpe into grads["wte"] (V, C) and grads["wpe"] (n_ctx, C).
    Returns None."""
    C = dx.shape[-1]
    # a repeated id must collect every one of its rows: np.add.at adds them all, where
    # grads["wte"][idx] += dx would keep one per id
    # (B*T,) ids, (B*T, C) rows
    np.add.at(grads["wte"], idx.reshape(-1), dx.reshape(-1, C))
    # (T, C): every sequence used these rows
    grads["wpe"][:idx.shape[1]] += dx.sum(axis=0)


def head_forward(hidden, wte):
    """hidden (B, T, C), wte (V, C) -> logits (B, T, V): the tied head, the score of
    token v is the dot product of the hidden vector with row v of wte."""
    return hidden @ wte.T                              # (B, T, C) @ (C, V) -> (B, T, V)


def head_backward(dlogits, hidden, wte, grads):
    """dlogits (B, T, V): the loss's gradient w.r.t. the logits. Adds the head's part
    of wte's gradient into grads["wte"] (V, C) and returns dhidden (B, T, C)."""
    V, C = wte.shape
    # (V, B*T) @ (B*T, C) -> (V, C)
    grads["wte"] += dlogits.reshape(-1, V).T @ hidden.reshape(-1, C)
    return dlogits @ wte                               # (B, T, V) @ (V, C) -> (B, T, C)
'''

# The formulas the answer is, as the hints write them: shown only in a hint's last stage
# (tests/test_staged_hints.py).
FINAL_FORMULAS = [
    r"G^\top H",
    r"G\,\mathrm{wte}",
    "np.add.at",
]

CELLS = [
    md(r"""
    # Exercise 2.1: The embeddings and the tied head

    This exercise follows [chapter 2](../chapters/02_embeddings.ipynb). The model's first layer and
    its last share one table: `wte` turns token ids into vectors, and, transposed, turns the final
    hidden vectors into one score per token. You write both ends, forward and backward, as four
    small numpy functions; chapter 4's exercise 4.4 puts them around the blocks.

    **What is graded.** The cell tagged `graded:ch2_embeddings` (JupyterLab shows a cell's tags in
    its property inspector; Colab keeps them without showing them). A grader runs that cell alone,
    in a sandbox, and calls your functions on hidden inputs; nothing else in this notebook is
    graded. Some hidden tests are *edge tests*: bad input that must raise, or cases a function
    that does almost nothing also gets right (a zero gradient, say). An edge test counts only once
    every other test of the same function passes, so that an empty answer cannot collect points.
    """),
    setup(),
    md(r"""
    ## What to write

    Shapes: `idx (B, T)` ids, `wte (V, C)`, `wpe (n_ctx, C)`, hidden vectors and gradients
    `(B, T, C)`, logits `(B, T, V)`.

    - `embed_forward(idx, wte, wpe)`: token $t$ of sequence $b$ enters the model as
      $x_{b,t} = \mathrm{wte}[\mathrm{idx}_{b,t}] + \mathrm{wpe}[t]$. Raise `ValueError` for an id
      outside `[0, V)` and for more positions than `wpe` has rows.
    - `head_forward(hidden, wte)`: the logits, $\mathrm{logit}_{b,t,v} = h_{b,t} \cdot \mathrm{wte}[v]$.
    - `embed_backward(dx, idx, grads)` and `head_backward(dlogits, hidden, wte, grads)`: given the
      loss's gradient with respect to a function's output, add the gradient with respect to each
      table into `grads` (a dict of arrays shaped like the tables, as the model's `grads` are), and
      for the head return the gradient with respect to `hidden`.

    The result to reach: every row of `grads["wte"]` and `grads["wpe"]` equals the derivative of
    the loss with respect to that row, which the checks measure by central differences. Work out
    which rows each output depends on before you write code. Two things to get right:

    - **Repeated ids.** "banana" uses row `a` three times: that row's gradient is the sum of the
      three. Chapter 2 shows which numpy idiom adds repeats and which silently keeps one.
    - **Add, never assign.** `wte` is used twice (lookup and head), so both backward functions add
      into `grads["wte"]`; a training step that accumulates gradients over several micro-batches
      calls the backward functions several times before the update. Every backward adds.

    :::{admonition} The gradients, hint 1 of 3: the idea
    :class: dropdown
    Take one output number and ask which table entries it depends on: a logit
    $\mathrm{logit}_{b,t,v}$ depends on $h_{b,t}$ and on row $v$ of wte only, and $x_{b,t}$ on row
    $\mathrm{idx}_{b,t}$ of wte and row $t$ of wpe only. Differentiate that one number with
    respect to one entry of a row, then apply the chain rule over every output that uses the
    row: its gradient is the sum, over those outputs, of each output's gradient times that
    derivative.
    :::

    :::{admonition} The gradients, hint 2 of 3: entry by entry
    :class: dropdown
    $\partial\,\mathrm{logit}_{b,t,v} / \partial\,\mathrm{wte}[v] = h_{b,t}$ and
    $\partial\,\mathrm{logit}_{b,t,v} / \partial h_{b,t} = \mathrm{wte}[v]$, so row $v$'s gradient
    is a sum over every $(b, t)$, and $h_{b,t}$'s a sum over every $v$. The lookup copies a row:
    the derivative is 1, so row $r$ of wte collects `dx[b, t]` from every position where
    $\mathrm{idx}_{b,t} = r$, and row $t$ of wpe from position $t$ of every sequence. Now write
    these sums without Python loops.
    :::

    :::{admonition} The gradients, hint 3 of 3: the formulas
    :class: dropdown
    With $G$ the logits' gradient flattened to `(B*T, V)` and $H$ the hidden vectors to
    `(B*T, C)`: the head adds $G^\top H$ `(V, C)` to wte's gradient and returns $G\,\mathrm{wte}$.
    The lookup adds row $(b, t)$ of `dx` to row $\mathrm{idx}_{b,t}$ of wte's gradient (`np.add.at`),
    and the sum over the batch of `dx[:, t]` to row $t$ of wpe's.
    :::

    **Rules.** numpy only; keep the tables' dtype. While grading, lib's `Embedding` and `GPT`
    forward and backward raise an error. The graded cell must hold everything it uses, imports
    included.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    Each cell checks one thing and says what it found. The loss is $\sum R \odot \text{output}$
    with $R$ a fixed random array, so the output's gradient is $R$; the tables' gradients are
    compared with central differences of that loss.
    """),
    code('''
    import numpy as np

    from lib.checks import (
        expect_accumulates,
        expect_close,
        expect_grad,
        expect_raises,
        expect_shape,
    )

    rng = np.random.default_rng(21)
    V, n_ctx, C = 11, 8, 4
    wte = rng.standard_normal((V, C))                 # (V, C)
    wpe = rng.standard_normal((n_ctx, C))             # (n_ctx, C)
    # (B, T) = (2, 5): ids 0 and 1 repeat
    idx = np.array([[1, 0, 5, 0, 7], [0, 10, 1, 1, 3]])
    R = rng.standard_normal((2, 5, C))                # (B, T, C): dx of the loss sum(R * x)


    def zero_grads():
        return {"wte": np.zeros((V, C)), "wpe": np.zeros((n_ctx, C))}
    '''),
    check('''
    x = embed_forward(idx, wte, wpe)
    expect_shape("embed_forward: shape and dtype", x, (2, 5, C), np.float64)
    expect_close("embed_forward: x[b, t] = wte[idx[b, t]] + wpe[t]", x,
                 wte[idx] + wpe[np.arange(5)], axes="btc")
    '''),
    check('''
    expect_raises("embed_forward: id V = 11 is outside the table", ValueError,
                  embed_forward, np.array([[1, 11]]), wte, wpe)
    expect_raises("embed_forward: 9 positions, n_ctx = 8", ValueError,
                  embed_forward, np.zeros((1, 9), int), wte, wpe)
    '''),
    check('''
    def embed_grads(dx):
        grads = zero_grads()
        embed_backward(dx, idx, grads)
        return grads


    expect_grad("embed_backward: wte's gradient, ids 0 and 1 repeated",
                lambda w: (R * embed_forward(idx, w, wpe)).sum(),
                lambda w: embed_grads(R)["wte"], wte)
    expect_grad("embed_backward: wpe's gradient, summed over the batch",
                lambda p: (R * embed_forward(idx, wte, p)).sum(),
                lambda p: embed_grads(R)["wpe"], wpe)
    '''),
    check('''
    hidden = rng.standard_normal((2, 5, C))          # (B, T, C)
    S = rng.standard_normal((2, 5, V))               # (B, T, V): dlogits of sum(S * logits)
    expect_close("head_forward: logits = hidden . wte[v]", head_forward(hidden, wte),
                 np.einsum("btc,vc->btv", hidden, wte), axes="btv")


    def head_grads(w):
        grads = zero_grads()
        return grads, head_backward(S, hidden, w, grads)


    expect_grad("head_backward: dhidden", lambda h: (S * head_forward(h, wte)).sum(),
                lambda h: head_backward(S, h, wte, zero_grads()), hidden)
    expect_grad("head_backward: the head's part of wte's gradient reaches every row",
                lambda w: (S * head_forward(hidden, w)).sum(),
                lambda w: head_grads(w)[0]["wte"], wte)
    '''),
    check('''
    grads = zero_grads()
    expect_accumulates("embed_backward twice: the gradients add up",
                       lambda: embed_backward(R, idx, grads), lambda: grads)
    grads = zero_grads()
    expect_accumulates("head_backward twice: the gradients add up",
                       lambda: head_backward(S, hidden, wte, grads), lambda: grads)
    '''),
    md(r"""
    ## Both ends, tied

    The table is used at both ends, so its gradient is the sum of the two parts: here the
    embeddings feed the head directly (no blocks in between), and `wte`'s total gradient is
    checked against central differences of the whole thing.
    """),
    check('''
    def tied_loss(w):
        return (S * head_forward(embed_forward(idx, w, wpe), w)).sum()


    def tied_grad(w):
        grads = zero_grads()
        dx = head_backward(S, embed_forward(idx, w, wpe), w, grads)   # (B, T, C)
        embed_backward(dx, idx, grads)
        return grads["wte"]


    expect_grad("wte's gradient through the lookup and the head together", tied_loss,
                tied_grad, wte)
    '''),
    md("""
    ## Going further

    - Which rows of `grads["wte"]` does the lookup leave at zero for a batch of English text,
      and which does the head? Why does tying matter most for rare tokens?
    - Time `np.add.at` against `np.bincount`-style accumulation (`np.zeros((V, C))` plus
      a one-hot matrix product) for GPT-2's V = 50,257. Which is faster, and why?
    """),
]
