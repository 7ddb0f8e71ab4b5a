"""Exercise 8.1: RoPE's rotation and its backward pass, RMSNorm and its backward pass."""
from build_notebooks import check, code, collapsed, graded, md, setup


STUB = '''
import numpy as np


def rope_cos_sin(start, T, head_dim, base, dtype):
    """cos and sin of the angles of positions start .. start + T - 1, each (T,
    head_dim / 2), in dtype."""
    raise NotImplementedError("exercise 8.1: write rope_cos_sin")


def apply_rope(x, cos, sin):
    """Rotate the pairs (x_i, x_{i + D/2}) of x (B, heads, T, D) by the angles of
    cos, sin (T, D/2)."""
    raise NotImplementedError("exercise 8.1: write apply_rope")


def apply_rope_backward(dy, cos, sin):
    """The gradient w.r.t. apply_rope's x, given dy (B, heads, T, D), the gradient
    w.r.t. its output."""
    raise NotImplementedError("exercise 8.1: write apply_rope_backward")


def rmsnorm(x, weight, eps):
    """x (..., C) divided by its root mean square (eps inside the root), times weight
    (C,)."""
    raise NotImplementedError("exercise 8.1: write rmsnorm")


def rmsnorm_backward(dy, x, weight, eps):
    """(dx (..., C), dweight (C,)): the gradients w.r.t. rmsnorm's x and weight,
    given dy (..., C)."""
    raise NotImplementedError("exercise 8.1: write rmsnorm_backward")
'''

ANSWER = '''
import numpy as np


def rope_cos_sin(start, T, head_dim, base, dtype):
    """cos and sin of the angles of positions start .. start + T - 1, each (T,
    head_dim / 2), in dtype."""
    # (D/2,): pair i turns by theta_i per position
    theta = base ** (-np.arange(0, head_dim, 2) / head_dim)
    angles = np.arange(start, start + T)[:, None] * theta[None, :]   # (T, D/2)
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def apply_rope(x, cos, sin):
    """Rotate the pairs (x_i, x_{i + D/2}) of x (B, heads, T, D) by the angles of
    cos, sin (T, D/2)."""
    first, second = np.split(x, 2, axis=-1)                  # (B, heads, T, D/2) each
    turned = [first * cos - second * sin, first * sin + second * cos]
    return np.concatenate(turned, axis=-1)                   # (B, heads, T, D)


def apply_rope_backward(dy, cos, sin):
    """The gradient w.r.t. apply_rope's x, given dy (B, heads, T, D), the gradient
    w.r.t. its output."""
    return apply_rope(dy, cos, -sin)         # the transpose of a rotation turns it back


def rmsnorm(x, weight, eps):
    """x (..., C) divided by its root mean square (eps inside the root), times weight
    (C,)."""
    rstd = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)   # (..., 1)
    return x * rstd * weight


def rmsnorm_backward(dy, x, weight, eps):
    """(dx (..., C), dweight (C,)): the gradients w.r.t. rmsnorm's x and weight,
    given dy (..., C)."""
    rstd = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)   # (..., 1)
    xhat = x * rstd                                          # (..., C)
    dweight = (dy * xhat).reshape(-1, x.shape[-1]).sum(axis=0)          # (C,)
    dxhat = dy * weight
    # xhat's change along itself is what rstd takes back: remove that component
    dx = rstd * (dxhat - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return dx, dweight
'''

CELLS = [
    md(r"""
    # Exercise 8.1: RoPE and RMSNorm, forward and backward

    This exercise follows [chapter 8](../chapters/08_modern_block.ipynb), which explains two of the
    modern block's parts: rotary position embeddings (RoPE) {cite}`su2024roformer`, which turn every
    query and key by an angle proportional to its position, and RMSNorm {cite}`zhang2019root`,
    LayerNorm without the mean and the bias. Here you write both, with their backward passes, and
    put yours into a numpy-twin model.

    **What is graded.** The cell tagged `graded:ch8_rope`. A grader runs that cell alone, in a sandbox,
    and calls your five functions with hidden tests; nothing else in this notebook is graded. The
    checks below it are a first test you can run yourself.
    Some hidden tests are *edge tests* (position 0, which is not rotated, and a zero gradient,
    which a function that returns zeros gets right): they count only once every other test of the
    same function passes, so that an answer that does almost nothing cannot collect points.
    """),
    setup(),
    md(r"""
    ## The contract

    **RoPE.** A head's D dimensions form D/2 pairs $(x_i, x_{i + D/2})$: the first half of the vector
    with the second half, as GPT-NeoX and transformers' LLaMA pair them. At position $m$, pair $i$
    turns by the angle $m\,\theta_i$ with $\theta_i = b^{-2i/D}$, $i = 0 \dots D/2 - 1$ ($b$, the
    base, is 10,000 in LLaMA):

    $$\begin{pmatrix} y_i \\ y_{i+D/2} \end{pmatrix} =
      \begin{pmatrix} \cos m\theta_i & -\sin m\theta_i \\ \sin m\theta_i & \cos m\theta_i \end{pmatrix}
      \begin{pmatrix} x_i \\ x_{i+D/2} \end{pmatrix}.$$

    - `rope_cos_sin(start, T, head_dim, base, dtype)`: the cos and the sin of the angles for positions
      `start` to `start + T - 1` (during generation with a KV cache, new tokens start at the cache's
      length, not at 0), each $(T, D/2)$, in `dtype`. Compute the angles in float64, then cast.
    - `apply_rope(x, cos, sin)`: x $(B, \text{heads}, T, D)$, cos and sin $(T, D/2)$; returns the
      rotated x, same shape and dtype.
    - `apply_rope_backward(dy, cos, sin)`: given $\partial L / \partial y$ (the shape of x), returns
      $\partial L / \partial x$. The rotation is linear: $y = R x$, so $\partial L/\partial x =
      R^\top \partial L/\partial y$. What is the transpose of a rotation?

    **RMSNorm.** For a vector $x$ of $C$ numbers, $\mathrm{rstd} = 1/\sqrt{\frac1C \sum_j x_j^2 +
    \epsilon}$, $\hat{x} = x \cdot \mathrm{rstd}$, $y = \hat{x} \odot g$ (g: `weight`, $(C,)$).

    - `rmsnorm(x, weight, eps)`: x of any shape $(\dots, C)$, normalised along its last axis.
    - `rmsnorm_backward(dy, x, weight, eps)`: returns `(dx, dweight)`, `dx` shaped like x and
      `dweight` $(C,)$ summed over every vector. Work it out: $\mathrm{rstd}$ depends on every $x_j$, so
      $\partial \hat{x}_i / \partial x_j$ has two terms.

    Float64 answers are compared with exact values within about $10^{-12}$ relative (an angle of a
    thousand radians loses a little more, and is allowed it); float32 inputs must give float32
    answers. Use numpy only: while grading, torch is not installed and lib's versions raise an error.
    The graded cell must hold everything the functions use, imports included.
    """),
    graded(STUB, ANSWER),
    md("""
    ## Checks you can run

    One property per cell, the targeted ones first: the angles, which dimensions RoPE pairs,
    rotations that keep lengths and make scores depend on the offset only, positions fed in pieces
    (`start` > 0), the backward pass against central differences, float32; then RMSNorm against its
    definition and its backward pass against central differences.
    """),
    code('''
    from lib.checks import expect_close, expect_grad, expect_shape

    rng = np.random.default_rng(3)
    B, H, T, D = 2, 3, 6, 10
    q, k = rng.standard_normal((B, H, T, D)), rng.standard_normal((B, H, T, D))
    x = rng.standard_normal((2, 4, 8))                           # RMSNorm's input (B, T, C)
    '''),
    check('''
    cos, sin = rope_cos_sin(0, T, D, 10000.0, np.float64)
    expect_shape("rope_cos_sin", cos, (T, D // 2), np.float64)
    expect_close("cos^2 + sin^2", cos ** 2 + sin ** 2, np.ones((T, D // 2)), rtol=1e-14)
    # position 1, D = 4: angles theta_0, theta_1
    c, s = rope_cos_sin(1, 1, 4, 100.0, np.float64)
    expect_close("angles at position 1 with D = 4, base 100: theta_i = 100^(-2i/4) = 1, "
                 "0.1", np.arctan2(s, c), np.array([[1.0, 0.1]]), rtol=1e-12)
    '''),
    check('''
    e0 = np.zeros((1, 1, 1, D))
    e0[..., 0] = 1.0                                       # only dimension 0 set
    c, s = rope_cos_sin(1, 1, D, 10000.0, np.float64)
    turned = np.zeros(D)
    turned[0], turned[D // 2] = c[0, 0], s[0, 0]           # pair (0, D/2) turned by theta_0
    expect_close("apply_rope turns dimension 0 with dimension D/2 (the halves' pairs)",
                 apply_rope(e0, c, s)[0, 0, 0], turned, atol=1e-15)
    cos, sin = rope_cos_sin(0, T, D, 10000.0, np.float64)
    rq, rk = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    expect_close("rotations keep lengths", np.linalg.norm(rq, axis=-1),
                 np.linalg.norm(q, axis=-1), rtol=1e-13)
    later = rope_cos_sin(7, T, D, 10000.0, np.float64)         # the same positions, 7 later
    expect_close("scores depend on the offset only",
                 apply_rope(q, *later) @ np.swapaxes(apply_rope(k, *later), -1, -2),
                 rq @ np.swapaxes(rk, -1, -2), rtol=1e-12, atol=1e-12)
    '''),
    check('''
    spans = [(0, 4), (4, 5), (5, 6)]
    pieces = [
        apply_rope(q[:, :, a:b], *rope_cos_sin(a, b - a, D, 10000.0, np.float64))
        for a, b in spans
    ]
    whole = apply_rope(q, *rope_cos_sin(0, T, D, 10000.0, np.float64))
    expect_close("positions in pieces (start > 0)", np.concatenate(pieces, axis=2), whole,
                 rtol=1e-14)
    '''),
    check('''
    dy = rng.standard_normal((B, H, T, D))
    cos, sin = rope_cos_sin(0, T, D, 10000.0, np.float64)
    expect_grad("apply_rope_backward", lambda x: (apply_rope(x, cos, sin) * dy).sum(),
                lambda x: apply_rope_backward(dy, cos, sin), q)
    '''),
    check('''
    cos32, sin32 = rope_cos_sin(3, T, D, 500.0, np.float32)
    expect_shape("rope_cos_sin in float32", cos32, (T, D // 2), np.float32)
    expect_shape("apply_rope keeps float32", apply_rope(q.astype(np.float32), cos32, sin32),
                 (B, H, T, D), np.float32)
    '''),
    check('''
    x4 = np.array([[1.0, 2.0, 3.0, 4.0]])                        # mean 2.5, mean square 7.5
    expect_close("rmsnorm([1, 2, 3, 4]) = x / sqrt(7.5): no mean is subtracted",
                 rmsnorm(x4, np.ones(4), 0.0), x4 / np.sqrt(7.5), rtol=1e-12)
    y = rmsnorm(x, np.full(8, 1.5), 1e-5)
    expect_close("rms of the output with weight 1.5", np.sqrt((y * y).mean(axis=-1)),
                 np.full((2, 4), 1.5), rtol=1e-4)
    '''),
    check('''
    g, dy = rng.standard_normal(8), rng.standard_normal(x.shape)
    expect_grad("rmsnorm_backward: dx", lambda v: (rmsnorm(v, g, 1e-5) * dy).sum(),
                lambda v: rmsnorm_backward(dy, v, g, 1e-5)[0], x, axes="btc")
    expect_grad("rmsnorm_backward: dweight", lambda w: (rmsnorm(x, w, 1e-5) * dy).sum(),
                lambda w: rmsnorm_backward(dy, x, w, 1e-5)[1], g)
    small = 1e-3 * x                                            # eps is not negligible here
    expect_grad("rmsnorm_backward on small vectors",
                lambda v: (rmsnorm(v, g, 1e-5) * dy).sum(),
                lambda v: rmsnorm_backward(dy, v, g, 1e-5)[0], small, axes="btc")
    '''),
    md("""
    ## Yours inside a model

    The numpy twin's attention calls `rope_cos_sin`, `apply_rope` and `apply_rope_backward` by name
    from `lib.numpy_twin.modern`, and its norms are `RMSNorm` layers with `forward` and `backward`
    methods. The next cell puts your functions in their place, for the length of a `with` block, in
    a small float64 model with RoPE and RMSNorm, and checks its logits and every gradient against
    the same model running lib's versions.
    """),
    check('''
    from contextlib import contextmanager

    from lib.config import GPTConfig
    from lib.numpy_twin import GPT
    from lib.numpy_twin import modern as nm


    def yours_forward(norm, x):
        return rmsnorm(x, norm.weight, norm.eps), x


    def yours_backward(norm, dy, x):
        dx, dweight = rmsnorm_backward(dy, x, norm.weight, norm.eps)
        norm.grads["weight"] += dweight
        return dx


    def your_rope_cos_sin(start, T, head_dim, base, dtype, scaling=None, factor=1.0):
        # lib's signature also takes chapter 8's RoPE scaling; the models here do not scale
        if scaling is not None:
            raise ValueError(f"the models here do not scale RoPE, got {scaling!r}")
        return rope_cos_sin(start, T, head_dim, base, dtype)


    @contextmanager
    def your_functions():
        saved = (nm.rope_cos_sin, nm.apply_rope, nm.apply_rope_backward,
                 nm.RMSNorm.forward, nm.RMSNorm.backward)
        nm.rope_cos_sin, nm.apply_rope = your_rope_cos_sin, apply_rope
        nm.apply_rope_backward = apply_rope_backward
        nm.RMSNorm.forward, nm.RMSNorm.backward = yours_forward, yours_backward
        try:
            yield
        finally:
            (nm.rope_cos_sin, nm.apply_rope, nm.apply_rope_backward,
             nm.RMSNorm.forward, nm.RMSNorm.backward) = saved


    def logits_and_grads(model, idx, dlogits):
        model.zero_grad()
        logits = model.forward(idx)                              # (B, T, V)
        model.backward(dlogits)
        return logits, {name: g.copy() for name, g in model.named_grads()}


    config = GPTConfig(vocab_size=50, n_ctx=16, n_layer=2, n_head=2, n_embd=16,
                       norm="rmsnorm", position="rope")
    model = GPT(config, seed=5, dtype=np.float64)
    idx = rng.integers(0, 50, (2, 12))                # (B, T)
    dlogits = rng.standard_normal((2, 12, 50))        # a random loss: sum(logits * dlogits)
    want_logits, want = logits_and_grads(model, idx, dlogits)
    with your_functions():
        got_logits, got = logits_and_grads(model, idx, dlogits)
    expect_close("logits", got_logits, want_logits, rtol=1e-10, atol=1e-12)
    for name in want:
        expect_close(name, got[name], want[name], rtol=1e-9, atol=1e-12)
    '''),
    md("""
    ## Compare with lib

    lib's versions, which the chapter used without showing them: open the cell below once your
    checks pass.
    """),
    collapsed('''
    from lib.display import show
    from lib.numpy_twin import modern as nm

    show(nm.rope_cos_sin, nm.apply_rope, nm.apply_rope_backward, nm.RMSNorm)
    '''),
    md("""
    ## Going further

    - The RoPE paper pairs neighbours, $(x_{2i}, x_{2i+1})$. Write that version and show that it
      gives the same scores as ours after a fixed permutation of the dimensions of q and k.
    - In float32, how far from exact is the rotation at position 100,000? Compare the angles computed
      in float32 with those in float64, and the rotated vectors with each other.
    """),
]
