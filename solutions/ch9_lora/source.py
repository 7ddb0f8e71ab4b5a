"""Exercise 9.1: LoRA's forward, backward and merge (numpy)."""
from build_notebooks import check, code, collapsed, graded, md, setup


STUB = '''
import numpy as np


def lora_forward(x, weight, bias, A, B, alpha):
    """y = x W^T + b + (alpha / r) x A^T B^T. x (..., in); weight (out, in); bias
    (out,) or None; A (r, in); B (out, r). Returns y (..., out) in x's dtype."""
    raise NotImplementedError("exercise 9.1: write lora_forward")


def lora_backward(dy, x, weight, A, B, alpha):
    """The gradients of a loss L with respect to x, A and B, given dy = dL/dy (...,
    out): returns (dx (..., in), dA (r, in), dB (out, r)). W and b are frozen: no
    gradient for them."""
    raise NotImplementedError("exercise 9.1: write lora_backward")


def lora_merge(weight, A, B, alpha):
    """The merged weight W + (alpha / r) B A (out, in), for inference without the
    extra product."""
    raise NotImplementedError("exercise 9.1: write lora_merge")
'''

ANSWER = '''
import numpy as np


def _check(weight, A, B):
    n_out, n_in = weight.shape
    r = A.shape[0]
    if (A.ndim != 2 or B.ndim != 2 or A.shape != (r, n_in) or B.shape != (n_out, r)
            or r < 1):
        raise ValueError(f"expected A (r, {n_in}) and B ({n_out}, r) with the same r "
                         f">= 1 for a weight {weight.shape}; got A {A.shape} and B "
                         f"{B.shape}")
    return r


def lora_forward(x, weight, bias, A, B, alpha):
    """y = x W^T + b + (alpha / r) x A^T B^T. x (..., in); weight (out, in); bias
    (out,) or None; A (r, in); B (out, r). Returns y (..., out) in x's dtype."""
    r = _check(weight, A, B)
    x2 = x.reshape(-1, x.shape[-1])                          # (N, in)
    # (N, out): x A^T is (N, r), small
    y = x2 @ weight.T + (alpha / r) * ((x2 @ A.T) @ B.T)
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], -1).astype(x.dtype)      # (..., out)


def lora_backward(dy, x, weight, A, B, alpha):
    """The gradients of a loss L with respect to x, A and B, given dy = dL/dy (...,
    out): returns (dx (..., in), dA (r, in), dB (out, r)). W and b are frozen: no
    gradient for them."""
    r = _check(weight, A, B)
    s = alpha / r
    # (N, out), (N, in)
    dy2, x2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
    u = x2 @ A.T                             # (N, r)
    du = s * (dy2 @ B)                       # (N, r)
    dB = s * (dy2.T @ u)                     # (out, r)
    dA = du.T @ x2                           # (r, in)
    dx = dy2 @ weight + du @ A               # (N, in): through W and through the update
    return dx.reshape(x.shape).astype(x.dtype), dA.astype(A.dtype), dB.astype(B.dtype)


def lora_merge(weight, A, B, alpha):
    """The merged weight W + (alpha / r) B A (out, in), for inference without the
    extra product."""
    r = _check(weight, A, B)
    return (weight + (alpha / r) * (B @ A)).astype(weight.dtype)
'''

CELLS = [
    md(r"""
    # Exercise 9.1: LoRA's forward, backward and merge

    This exercise follows [chapter 9](../chapters/09_post_training.ipynb), which instruction-tunes
    the small model both ways: every weight, as [chapter 7](../chapters/07_finetuning.ipynb) fine-tunes,
    and through LoRA {cite}`hu2022lora`, which fine-tunes a frozen linear layer through a low-rank
    update beside it:

    $$y = x W^\top + b + \frac{\alpha}{r}\, x A^\top B^\top,$$

    with $W$ (out, in) and $b$ frozen, and only $A$ (r, in) and $B$ (out, r) trained. You write its
    forward pass, its backward pass and the merge that folds the update into $W$ for inference.

    **What is graded.** The cell tagged `graded:ch9_lora`. A grader runs that cell alone, in a
    sandbox, and calls the three functions with hidden tests; nothing else in this notebook is
    graded. The checks below it are a first test you can run yourself. Some hidden tests are *edge
    tests* (bad shapes that must raise; $B = 0$, where the layer is its base and an answer that
    ignores the update is also right): they count only once every other test of the same function
    passes.
    """),
    setup(),
    md(r"""
    ## The contract

    - `lora_forward(x, weight, bias, A, B, alpha)`: $x$ has any leading shape and a last axis of
      size in; `bias` may be `None` (a layer without one). Returns $y$ (..., out).
    - `lora_backward(dy, x, weight, A, B, alpha)`: given $\partial L / \partial y$, returns
      `(dx, dA, dB)`, shaped as `x`, `A` and `B`. The gradients of $A$ and $B$ sum over every
      leading position of $x$. No gradient for $W$ or $b$: they are frozen.
    - `lora_merge(weight, A, B, alpha)`: $W' = W + \frac{\alpha}{r} B A$, so that
      `x @ W'.T + b` equals `lora_forward`.
    - $r$ is `A.shape[0]`. Raise `ValueError` when the shapes do not fit together: $A$ must be
      $(r, \text{in})$ and $B$ $(\text{out}, r)$, with the same $r \ge 1$, for a weight (out, in).
    - Every result keeps its input's dtype (float32 in, float32 out). Grading is in float64 within
      $10^{-9}$ relative, and in float32 within $10^{-4}$.

    :::{admonition} Hint: the backward pass
    :class: dropdown
    Name the small intermediate $u = x A^\top$, shape (N, r). Then $y = \ldots + s\, u B^\top$ with
    $s = \alpha / r$: the gradient flows to $B$ through $u$, to $u$ through $B$, and from $u$ on to
    $A$ and to $x$. $x$ gets two contributions: one through $W$ and one through the update.
    :::

    Use numpy only; while grading, torch is not installed and lib's `LoRALinear` raises an error.
    The graded cell must hold everything the functions use, imports included.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    Small random inputs, rank 3: the forward pass against the formula written out, a fresh layer
    ($B = 0$) in float32, the backward pass against central differences, the merge, and bad shapes.
    """),
    code('''
    from lib.checks import (CheckFailed, expect_close, expect_grad, expect_raises,
                            expect_shape)

    rng = np.random.default_rng(9)
    n_in, n_out, r, alpha = 5, 4, 3, 6.0
    x = rng.standard_normal((2, 3, n_in))
    weight, bias = rng.standard_normal((n_out, n_in)), rng.standard_normal(n_out)
    A, B = rng.standard_normal((r, n_in)), rng.standard_normal((n_out, r))
    dy = rng.standard_normal((2, 3, n_out))
    '''),
    check('''
    y = lora_forward(x, weight, bias, A, B, alpha)
    expect_shape("y", y, (2, 3, n_out), np.float64)
    expect_close("lora_forward on a (2, 3, in) x with a bias", y,
                 x @ weight.T + bias + (alpha / r) * x @ A.T @ B.T, rtol=1e-12, axes="btc")
    '''),
    check('''
    x32, w32, b32, A32 = (a.astype(np.float32) for a in (x, weight, bias, A))
    # B = 0
    fresh = lora_forward(x32, w32, b32, A32, np.zeros((n_out, r), np.float32), alpha)
    expect_shape("y in float32", fresh, (2, 3, n_out), np.float32)
    expect_close("a fresh layer (B = 0) is its base layer", fresh, x32 @ w32.T + b32,
                 rtol=1e-5, axes="btc")
    '''),
    check('''
    dx, dA, dB = lora_backward(dy, x, weight, A, B, alpha)
    for name, got, like in (("dx", dx, x), ("dA", dA, A), ("dB", dB, B)):
        expect_shape(name, got, like.shape, np.float64)
    if not np.abs(lora_backward(dy, x, np.zeros_like(weight), A, B, alpha)[0]).any():
        raise CheckFailed("dx: with W = 0 the layer still depends on x through its update,"
                          " yet your dx is 0 there: the gradient that flows back through "
                          "the update (through B, then A) is missing from dx")
    inputs = dict(x=x, weight=weight, bias=bias, A=A, B=B, alpha=alpha)
    loss = lambda **kw: float((lora_forward(**{**inputs, **kw}) * dy).sum())
    expect_grad("dx against central differences", lambda v: loss(x=v),
                lambda v: lora_backward(dy, v, weight, A, B, alpha)[0], x)
    expect_grad("dA against central differences", lambda v: loss(A=v),
                lambda v: lora_backward(dy, x, weight, v, B, alpha)[1], A)
    expect_grad("dB against central differences", lambda v: loss(B=v),
                lambda v: lora_backward(dy, x, weight, A, v, alpha)[2], B)
    '''),
    check('''
    merged = lora_merge(weight, A, B, alpha)
    expect_shape("the merged weight", merged, (n_out, n_in), np.float64)
    expect_close("x W'^T + b against lora_forward", x @ merged.T + bias,
                 lora_forward(x, weight, bias, A, B, alpha), rtol=1e-12, axes="btc")
    '''),
    check('''
    expect_raises("A with 6 inputs for a weight with 5", ValueError, lora_forward, x,
                  weight, bias, rng.standard_normal((r, 6)), B, alpha)
    expect_raises("A of rank 3 and B of rank 2", ValueError, lora_backward, dy, x, weight,
                  A, rng.standard_normal((n_out, 2)), alpha)
    expect_raises("B with 5 outputs for a weight with 4", ValueError, lora_merge, weight, A,
                  rng.standard_normal((5, r)), alpha)
    expect_raises("rank 0 (A with no rows, B with no columns)", ValueError, lora_forward, x,
                  weight, bias, np.zeros((0, n_in)), np.zeros((n_out, 0)), alpha)
    '''),
    md("""
    ## Compare with lib

    lib's `LoRALinear` (in each twin) wraps a `Linear` with the same arithmetic and keeps `u` from
    the forward pass for the backward one. Open the cell below once your checks pass.
    """),
    collapsed('''
    from lib.display import side_by_side
    from lib.numpy_twin import posttrain as npt
    from lib.torch_twin import posttrain as tpt

    side_by_side(npt.LoRALinear, tpt.LoRALinear)
    '''),
    md("""
    ## Going further

    - Count the trainable parameters of rank-8 LoRA on GPT-2 Small's four linear layers per block,
      against its 124M. What does AdamW's state weigh in each case, in float32?
    - Why must $B$ start at zero and $A$ not? What would the gradients of $A$ and $B$ be if both
      started at zero?
    """),
]
