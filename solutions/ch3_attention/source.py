"""Exercise 3.1: causal multi-head self-attention, forward, from GPT-2's fused q/k/v weight (numpy)."""
from build_notebooks import check, code, collapsed, graded, md, setup


STUB = '''
import math

import numpy as np


def causal_self_attention(x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias,
                          n_head):
    """GPT-2's attention layer, forward. x: (B, T, C); c_attn_weight (C, 3C),
    c_attn_bias (3C,), c_proj_weight (C, C), c_proj_bias (C,), all of x's dtype;
    n_head divides C. Returns (B, T, C) in x's dtype. Bad shapes or n_head:
    ValueError."""
    raise NotImplementedError("exercise 3.1: write causal_self_attention")
'''

ANSWER = '''
import math

import numpy as np


def stable_softmax(scores):
    """Softmax over the last axis; the row maximum is subtracted first, so no
    exponent is above 0."""
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def to_heads(a, n_head):
    """(B, T, C) -> (B, H, T, D): head h takes columns h D .. (h + 1) D - 1 of every
    position."""
    B, T, C = a.shape
    # (B, T, H, D) -> (B, H, T, D)
    return a.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3)


def from_heads(y):
    """(B, H, T, D) -> (B, T, C): the heads' outputs side by side again."""
    B, H, T, D = y.shape
    return y.transpose(0, 2, 1, 3).reshape(B, T, H * D)      # (B, T, H, D) -> (B, T, C)


def check_shapes(x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias, n_head):
    if x.ndim != 3:
        raise ValueError(f"x must be (B, T, C); got shape {x.shape}")
    C = x.shape[-1]
    if not isinstance(n_head, int) or n_head < 1 or C % n_head:
        raise ValueError(f"n_head must be a positive int dividing C = {C}; got "
                         f"{n_head!r}")
    for name, a, shape in (("c_attn_weight", c_attn_weight, (C, 3 * C)),
                           ("c_attn_bias", c_attn_bias, (3 * C,)),
                           ("c_proj_weight", c_proj_weight, (C, C)),
                           ("c_proj_bias", c_proj_bias, (C,))):
        if a.shape != shape:
            raise ValueError(f"{name} must have shape {shape} for C = {C}; got "
                             f"{a.shape}")


def causal_self_attention(x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias,
                          n_head):
    """GPT-2's attention layer, forward. x: (B, T, C); c_attn_weight (C, 3C),
    c_attn_bias (3C,), c_proj_weight (C, C), c_proj_bias (C,), all of x's dtype;
    n_head divides C. Returns (B, T, C) in x's dtype. Bad shapes or n_head:
    ValueError."""
    check_shapes(x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias, n_head)
    T, C = x.shape[1:]
    qkv = x @ c_attn_weight + c_attn_bias                              # (B, T, 3C)
    # (B, H, T, D) each
    q, k, v = (to_heads(a, n_head) for a in np.split(qkv, 3, axis=-1))
    mask = np.triu(np.full((T, T), -np.inf, x.dtype), k=1)  # (T, T): -inf on the future
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(C // n_head) + mask  # (B, H, T, T)
    y = stable_softmax(scores) @ v                                     # (B, H, T, D)
    return from_heads(y) @ c_proj_weight + c_proj_bias                 # (B, T, C)
'''

CELLS = [
    md(r"""
    # Exercise 3.1: causal multi-head self-attention

    This exercise follows [chapter 3](../chapters/03_attention.ipynb), which built one attention
    head step by step: scores $QK^\top/\sqrt{d_k}$, the causal mask, a softmax that subtracts the
    maximum, the weighted sum of values. Here you write the whole layer as GPT-2 has it: one fused
    projection makes q, k and v for all heads, the heads attend separately, their outputs are put
    side by side again and projected once more.

    **What is graded.** The cell tagged `graded:ch3_attention` (JupyterLab shows a cell's tags in its property
    inspector; Colab keeps them without showing them). A grader runs that cell alone, in a sandbox,
    and calls your function with hidden inputs; nothing else in this notebook is graded. Write your
    answer in that cell and keep the cell. The checks below it are a first test you can run yourself.
    Some hidden tests are *edge tests* (bad arguments that must raise, a single position, which an
    answer without attention also gets right): they count only once every other test passes, so
    that an answer that does almost nothing cannot collect points.
    """),
    setup(),
    md(r"""
    ## The layer

    `causal_self_attention(x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias, n_head)`, with
    B sequences of T positions of width C, H = `n_head` heads of width D = C / H:

    1. **Fused projection.** `x @ c_attn_weight + c_attn_bias`: `(B, T, C) -> (B, T, 3C)`. The
       weight is stored as in GPT-2's checkpoint, `(C, 3C)` (input first; lib's `Linear` stores the
       transpose, `(3C, C)`). Of the 3C outputs, the first C are the queries, the next C the keys,
       the last C the values.
    2. **Heads.** Head h uses columns `h*D` to `(h+1)*D - 1` of each of q, k and v. Bring q, k
       and v to `(B, H, T, D)`, so that every (sequence, head) pair is a separate attention
       problem. A bare `reshape(B, H, T, D)` gives the right shape and the wrong numbers (chapter 3
       shows why).
    3. **Attention per head.** Scores $q k^\top / \sqrt{D}$ (note: $D$, the head's width, not C),
       $-\infty$ above the diagonal (position t sees positions 0 to t), softmax over the keys,
       weighted sum of the values: `(B, H, T, D)`.
    4. **Merge and project.** Put the heads side by side again, `(B, T, C)` with head h in columns
       `h*D` to `(h+1)*D - 1`, then `@ c_proj_weight + c_proj_bias`.

    **Rules.**
    - `x` and the weights are float32 or float64 (all the same dtype); return `(B, T, C)` in that
      dtype. T may be 1 and H may be 1.
    - The scores can be large: the hidden tests include inputs whose scores are in the thousands,
      where $e^{z}$ overflows (above about 709 in float64, 88 in float32). A softmax computed as
      written then returns NaN; yours must not.
    - Raise `ValueError` when `n_head` does not divide C (or is not a positive int), or when a
      weight or bias does not have the shape above.
    - Use numpy. While grading, torch is not installed and lib's attention and softmax functions
      raise an error. The graded cell must hold everything it uses, imports included.
    - Float64 answers are compared with a float64 reference within $10^{-10} + 10^{-8}|y|$.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    One cell per property, the targeted ones first: the mask, the scale, then the layer against lib's
    `CausalSelfAttention` (numpy twin) with one head and with several, scores large enough to
    overflow a naive softmax, the dtype, and bad arguments. lib's `Linear` layers store
    `(out, in)`, so lib's layer gets the transposes of the weights.
    """),
    code('''
    import numpy as np

    from lib.checks import CheckFailed, expect_close, expect_raises, expect_shape
    from lib.config import GPTConfig
    from lib.numpy_twin import CausalSelfAttention


    def random_weights(C, scale, dtype, rng):
        """c_attn_weight (C, 3C), c_attn_bias (3C,), c_proj_weight (C, C), c_proj_bias
        (C,)."""
        return (rng.normal(0, scale, (C, 3 * C)).astype(dtype),
                rng.normal(0, 0.1, 3 * C).astype(dtype),
                rng.normal(0, 0.2, (C, C)).astype(dtype),
                rng.normal(0, 0.1, C).astype(dtype))


    def lib_attention(x, weights, n_head):
        """lib's layer with these weights: (B, T, C) -> (B, T, C)."""
        c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias = weights
        layer = CausalSelfAttention(GPTConfig.small(n_embd=x.shape[-1], n_head=n_head))
        layer.c_attn.weight, layer.c_attn.bias = c_attn_weight.T.copy(), c_attn_bias.copy()
        layer.c_proj.weight, layer.c_proj.bias = c_proj_weight.T.copy(), c_proj_bias.copy()
        return layer.forward(x)[0]


    rng = np.random.default_rng(31)
    '''),
    check('''
    # the softmax: each query's weights sum to 1, so with every value vector the same,
    # every position's output is the same too
    x = rng.normal(0, 1, (1, 6, 16))                                 # (B, T, C)
    weights = random_weights(16, 0.5, np.float64, rng)
    w, b = weights[0].copy(), weights[1].copy()
    w[:, 32:], b[32:] = 0.0, 1.0                            # every value vector (1, ..., 1)
    same = causal_self_attention(x, w, b, *weights[2:], 2)          # (B, T, C)
    if np.abs(same - same[:, :1]).max() > 1e-9:
        raise CheckFailed(
            "with every value vector the same, the positions' outputs differ, so a query's"
            " weights do not sum to 1: the softmax normalises over the wrong axis (it must"
            " run over the keys, the last axis of the (T, T) scores)"
        )
    # the mask: changing position j must change nothing at positions before j
    y = causal_self_attention(x, *weights, 2)
    for j in range(1, 6):
        later = x.copy()
        later[:, j] += 1.0
        change = np.abs(causal_self_attention(later, *weights, 2) - y)   # (B, T, C)
        moved = change[0, :j].max(axis=-1)                               # (j,)
        if (moved > 1e-12).any():
            raise CheckFailed(
                f"position {int(np.argmax(moved > 1e-12))} changes when position {j} does:"
                " the causal mask is missing or misplaced, or a reshape mixes positions"
            )
    print("ok: no position sees a later one")
    '''),
    check('''
    # the scale: scores divided by sqrt(D), the head's width, before the softmax
    x = rng.normal(0, 1, (1, 5, 16))                                 # (B, T, C)
    weights = random_weights(16, 0.5, np.float64, rng)
    got = causal_self_attention(x, *weights, 4)                      # D = 16 / 4 = 4


    def lib_with_scores_times(factor):
        """lib's layer with every score multiplied by `factor` (q's columns scaled)."""
        w, b = weights[0].copy(), weights[1].copy()
        w[:, :16], b[:16] = factor * w[:, :16], factor * b[:16]     # the queries
        return lib_attention(x, (w, b, *weights[2:]), 4)


    for factor, mistake in ((2.0, "no 1/sqrt(d) scale: the scores are q k^T, not q k^T / "
                                  "sqrt(D) with D = C / n_head, the head's width"),
                            (0.5, "the scores are divided by sqrt(C), the layer's width: "
                                  "the scale is 1/sqrt(D) with D = C / n_head")):
        if np.allclose(got, lib_with_scores_times(factor), rtol=1e-10, atol=1e-12):
            raise CheckFailed(mistake)
    expect_close("the scale, 4 heads, against lib", got, lib_attention(x, weights, 4),
                 rtol=1e-10, atol=1e-12, axes="btc")
    '''),
    check('''
    for (B, T, C) in [(2, 6, 8), (1, 1, 16)]:
        x = rng.normal(0, 1, (B, T, C))                              # (B, T, C) float64
        weights = random_weights(C, 0.5, np.float64, rng)
        expect_close(f"one head, B={B} T={T} C={C}, against lib",
                     causal_self_attention(x, *weights, 1), lib_attention(x, weights, 1),
                     rtol=1e-10, atol=1e-12, axes="btc")
    '''),
    check('''
    for (B, T, C, H) in [(2, 6, 32, 4), (1, 9, 48, 12)]:
        x = rng.normal(0, 1, (B, T, C))                              # (B, T, C) float64
        weights = random_weights(C, 0.5, np.float64, rng)
        expect_close(f"{H} heads, B={B} T={T} C={C}, against lib",
                     causal_self_attention(x, *weights, H), lib_attention(x, weights, H),
                     rtol=1e-10, atol=1e-12, axes="btc")
    '''),
    check('''
    # scores in the hundreds (float32) and thousands
    # (float64): exp overflows, a stable softmax does not
    for dtype, scale in ((np.float32, 8.0), (np.float64, 30.0)):
        x = rng.normal(0, 1, (2, 5, 16)).astype(dtype)               # (B, T, C)
        weights = random_weights(16, scale, dtype, rng)
        want = lib_attention(x.astype(np.float64), [w.astype(np.float64) for w in weights],
                             2).astype(dtype)
        tol = (dict(rtol=1e-3, atol=1e-3) if dtype == np.float32
               else dict(rtol=1e-8, atol=1e-10))
        expect_close(f"large scores, {np.dtype(dtype).name}",
                     causal_self_attention(x, *weights, 2), want, axes="btc", **tol)
    '''),
    check('''
    x = rng.normal(0, 1, (2, 7, 24)).astype(np.float32)             # (B, T, C) float32
    weights = random_weights(24, 0.5, np.float32, rng)
    got = causal_self_attention(x, *weights, 3)
    expect_shape("float32 in, float32 out", got, (2, 7, 24), np.float32)
    expect_close("float32, against lib", got, lib_attention(x, weights, 3), rtol=1e-4,
                 atol=1e-5, axes="btc")
    '''),
    check('''
    expect_raises("n_head = 5 does not divide C = 24", ValueError, causal_self_attention, x,
                  *weights, 5)
    expect_raises("c_proj_bias of shape (1,)", ValueError, causal_self_attention, x,
                  *weights[:3], weights[3][:1], 3)
    '''),
    md("""
    ## Compare with lib

    lib's numpy layer does the same in one reshape and one transpose for q, k and v together,
    `(B, T, 3C) -> (B, T, 3H, D) -> (B, 3H, T, D)`; the torch twin calls
    `F.scaled_dot_product_attention`, which computes the same without storing the `(T, T)` weights.
    Open the cell below once your checks pass: it shows lib's stable softmax (the full layer also
    serves the KV cache of chapter 6 and the modern block of chapter 8, which come later).
    """),
    collapsed('''
    import lib.numpy_twin as nt
    from lib.display import show

    show(nt.softmax)
    '''),
    md("""
    ## Going further

    - Time your layer at GPT-2 Small's sizes (C = 768, H = 12) for T = 64, 256 and 1024. Which step
      grows fastest with T, and why?
    - Write the backward pass of the softmax, `ds = p * (dp - (dp * p).sum(-1, keepdims=True))`,
      and check it against central differences with `lib.checks.expect_grad`.
    """),
]
