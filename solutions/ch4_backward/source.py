"""Exercise 4.3: backward through LayerNorm and through a pre-norm residual block."""
from build_notebooks import check, code, collapsed, graded, md, setup, uses


STUB = '''
import numpy as np


def layernorm_backward(dy, cache, weight):
    """LayerNorm's gradients. dy (..., C): the loss's gradient w.r.t. the output
    y = xhat * weight + bias; cache = (xhat (..., C), rstd (..., 1)), as
    LayerNorm.forward returns it; weight (C,). -> (dx (..., C), dweight (C,), dbias
    (C,)), in dy's dtype."""
    raise NotImplementedError("exercise 4.3: write layernorm_backward")


def block_backward(dy, cache, block):
    """Backward through a pre-norm block (x + attn(ln_1(x)), then x + mlp(ln_2(x))).
    dy (B, T, C): the loss's gradient w.r.t. the block's output; cache: what
    block.forward returned; block: the lib Block. Adds the gradients of ln_1's and
    ln_2's weight and bias into their `grads` (attn.backward and mlp.backward add
    their own) and returns dx (B, T, C)."""
    raise NotImplementedError("exercise 4.3: write block_backward")
'''

ANSWER = '''
import numpy as np


def layernorm_backward(dy, cache, weight):
    """LayerNorm's gradients. dy (..., C): the loss's gradient w.r.t. the output
    y = xhat * weight + bias; cache = (xhat (..., C), rstd (..., 1)), as
    LayerNorm.forward returns it; weight (C,). -> (dx (..., C), dweight (C,), dbias
    (C,)), in dy's dtype."""
    xhat, rstd = cache
    C = xhat.shape[-1]
    dweight = (dy * xhat).reshape(-1, C).sum(axis=0)  # (C,): summed over every position
    dbias = dy.reshape(-1, C).sum(axis=0)             # (C,)
    g = dy * weight                                   # (..., C): the gradient at xhat
    # xhat = (x - mean) * rstd, and the mean and rstd depend on every x_i: taking
    # them into account removes from g its mean and its component along xhat
    g_mean = g.mean(axis=-1, keepdims=True)                   # (..., 1)
    g_along_xhat = (g * xhat).mean(axis=-1, keepdims=True)    # (..., 1)
    dx = rstd * (g - g_mean - xhat * g_along_xhat)            # (..., C)
    return dx, dweight, dbias


def _norm_backward(norm, dy, cache):
    """A LayerNorm layer's backward: add its parameters' gradients into norm.grads,
    return dx."""
    dx, dweight, dbias = layernorm_backward(dy, cache, norm.weight)
    norm.grads["weight"] += dweight
    norm.grads["bias"] += dbias
    return dx


def block_backward(dy, cache, block):
    """Backward through a pre-norm block (x + attn(ln_1(x)), then x + mlp(ln_2(x))).
    dy (B, T, C): the loss's gradient w.r.t. the block's output; cache: what
    block.forward returned; block: the lib Block. Adds the gradients of ln_1's and
    ln_2's weight and bias into their `grads` (attn.backward and mlp.backward add
    their own) and returns dx (B, T, C)."""
    ln_1_cache, attn_cache, ln_2_cache, mlp_cache = cache
    # out = h + mlp(ln_2(h)): the gradient reaches
    # h along the skip and through the MLP branch
    dmlp_in = block.mlp.backward(dy, mlp_cache)               # (B, T, C)
    dh = dy + _norm_backward(block.ln_2, dmlp_in, ln_2_cache)
    # h = x + attn(ln_1(x)): the same again, one sub-layer earlier
    dattn_in = block.attn.backward(dh, attn_cache)            # (B, T, C)
    return dh + _norm_backward(block.ln_1, dattn_in, ln_1_cache)
'''

# The formulas the answer is, as the hints write them: shown only in a hint's last stage
# (tests/test_staged_hints.py).
FINAL_FORMULAS = [
    r"r\,(g - \overline{g} - \hat x\,\overline{g \odot \hat x})",
]

CELLS = [
    md(r"""
    # Exercise 4.3: Backward through a block

    This exercise follows [chapter 4](../chapters/04_model.ipynb), which builds the model and lists
    which layers have a hand-written backward pass. Two of them are yours to write: LayerNorm's,
    and the residual block's, which wires LayerNorm, attention and the MLP together. Attention's and
    the MLP's backward passes are lib's, and you call them.

    **What is graded.** The cell tagged `graded:ch4_backward`, with `layernorm_backward` and
    `block_backward` (JupyterLab shows a cell's tags in its property inspector; Colab keeps them
    without showing them). A grader runs that cell alone, in a sandbox, and calls your functions on
    hidden shapes and values in float64, comparing with its own gradients; nothing else in this
    notebook is graded. The checks below it are a first test you can run yourself.

    The two functions are graded apart: `block_backward` is tested with the grader's own LayerNorm
    backward in place of yours, so a mistake in `layernorm_backward` costs only its own points. It
    is also called twice without zeroing the gradients, as gradient accumulation calls it: the
    second call must add to the first. A zero `dy` is an *edge test* (an answer that returns
    zeros gets it right): it counts only once every other test of the same function passes.
    """),
    setup(),
    code('''
    import numpy as np

    import lib.numpy_twin as nt
    from lib.checks import (CheckFailed, expect_accumulates, expect_close, expect_grad,
                            expect_shape)
    from lib.config import GPTConfig

    rng = np.random.default_rng(0)
    '''),
    md(r"""
    ## What a layer's backward does

    Every layer of the numpy twin has `forward(x) -> (y, cache)` and `backward(dy, cache) -> dx`:
    `dy` is the gradient of the loss with respect to the layer's output, `cache` what the forward
    pass kept, and the result the gradient with respect to the input. Along the way, backward adds
    the gradients of the layer's parameters into the dictionary `layer.grads` (same names as the
    parameters; `zero_grad()` sets them to 0, as in torch).

    **LayerNorm** normalises each position's vector of $C$ numbers and rescales it:

    $$\hat x = (x - \mu)\,r, \quad r = \frac{1}{\sqrt{\sigma^2 + \epsilon}}, \quad y = \gamma \odot \hat x + \beta,$$

    with $\mu$ and $\sigma^2$ the mean and variance over the $C$ entries. Its forward keeps
    `(xhat, rstd)`: $\hat x$ `(..., C)` and $r$ `(..., 1)`. Write
    `layernorm_backward(dy, cache, weight) -> (dx, dweight, dbias)`:

    - `dweight` and `dbias` ($\partial\mathcal L/\partial\gamma$, $\partial\mathcal L/\partial\beta$,
      each `(C,)`) sum over every position, since $\gamma$ and $\beta$ are shared by all of them.
    - `dx`, the gradient with respect to the input, for inputs of any leading shape `(..., C)`.
      Every $x_i$ moves $\mu$ and $r$, and through them every $\hat x_j$: derive it with the
      chain rule through $\mu$ and through $r$. The result can be written with $g = \gamma \odot
      dy$ (the gradient reaching $\hat x$), $r$, $\hat x$ and two means over the $C$ entries. The
      checks below compare your `dx` with central differences of the loss, so you know when it
      is right.

    :::{admonition} LayerNorm's dx, hint 1 of 3: the idea
    :class: dropdown
    Write $\hat x_j = (x_j - \mu)\,r$ and differentiate one $\hat x_j$ with respect to one $x_i$:
    the product rule gives a term through $x_j - \mu$ (from $x_j$ itself and from $\mu$) and one
    through $r$. You need $\partial\mu/\partial x_i = 1/C$, and $\partial r/\partial x_i$ from the
    chain rule through $\sigma^2$. Then $\partial\mathcal L/\partial x_i = \sum_j g_j\,
    \partial\hat x_j/\partial x_i$.
    :::

    :::{admonition} LayerNorm's dx, hint 2 of 3: one entry's derivative
    :class: dropdown
    $\partial r/\partial x_i = -\tfrac12 r^3\,\partial\sigma^2/\partial x_i = -r^3 (x_i - \mu)/C$
    (the part through $\mu$ of the variance's derivative sums to 0), so
    $\partial\hat x_j/\partial x_i = r\,(\delta_{ij} - 1/C - \hat x_i \hat x_j / C)$. Multiply
    by $g_j$, sum over $j$, and write each sum over $j$ as $C$ times a mean.
    :::

    :::{admonition} LayerNorm's dx, hint 3 of 3: the result
    :class: dropdown
    $\partial\mathcal L/\partial x = r\,(g - \overline{g} - \hat x\,\overline{g \odot \hat x})$,
    a bar being the mean over the $C$ entries: $\mu$'s dependence removes $g$'s mean, $r$'s
    removes $g$'s component along $\hat x$.
    :::

    **The block** of GPT-2 is pre-norm: $h = x + \mathrm{attn}(\mathrm{ln_1}(x))$, then
    $\text{out} = h + \mathrm{mlp}(\mathrm{ln_2}(h))$. Its forward returns the cache
    `(ln_1_cache, attn_cache, ln_2_cache, mlp_cache)`. Write `block_backward(dy, cache, block)`:

    - Go backwards: the second half first. Where a value is used twice (the skip path and the
      branch), its gradient is the sum of the two paths' gradients.
    - Call `block.attn.backward(d, attn_cache)` and `block.mlp.backward(d, mlp_cache)` (lib's) for
      the sub-layers; they add their own parameters' gradients.
    - Use your `layernorm_backward` for `block.ln_1` and `block.ln_2`, and add its `dweight` and
      `dbias` into `block.ln_1.grads["weight"]`, `block.ln_1.grads["bias"]` (and ln_2's): add, do
      not assign, as every backward in lib does.
    - Return dx `(B, T, C)`.

    **Rules.** numpy only; keep dy's dtype. While grading, lib's `LayerNorm.backward`,
    `RMSNorm.backward`, `Block.backward` and `GPT.backward` raise an error; attention's and the
    MLP's work. The graded cell must hold everything the functions use, imports included.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    One cell per property, LayerNorm first. Each gradient is compared with central differences
    $(f(x + h) - f(x - h)) / 2h$ of a scalar loss, $f = \sum R \odot y$ with $R$ a fixed random
    array (so that $dy = R$), in float64.
    """),
    code('''
    C = 6
    # (3, 4, C): far from mean 0 and variance 1
    x = 2.0 + 3.0 * rng.standard_normal((3, 4, C))
    ln = nt.LayerNorm(C).astype(np.float64)
    ln.weight[:] = rng.standard_normal(C)             # (C,)
    ln.bias[:] = rng.standard_normal(C)
    R = rng.standard_normal(x.shape)                  # (3, 4, C): dy of the loss sum(R * y)


    def ln_loss(x, weight=ln.weight, bias=ln.bias):
        xhat = ln.forward(x)[1][0]                            # (3, 4, C)
        return float((R * (xhat * weight + bias)).sum())
    '''),
    check('''
    dx, dweight, dbias = layernorm_backward(R, ln.forward(x)[1], ln.weight)
    expect_shape("layernorm dx", dx, x.shape, np.float64)
    expect_grad("layernorm dx", ln_loss,
                lambda x: layernorm_backward(R, ln.forward(x)[1], ln.weight)[0], x,
                axes="btc")
    '''),
    check('''
    expect_shape("dweight", dweight, (C,), np.float64)
    expect_shape("dbias", dbias, (C,), np.float64)
    expect_grad("layernorm dweight", lambda w: ln_loss(x, weight=w), lambda w: dweight,
                ln.weight.copy())
    expect_grad("layernorm dbias", lambda b: ln_loss(x, bias=b), lambda b: dbias,
                ln.bias.copy())
    '''),
    md(r"""
    The same through a whole block of a small float64 model (2 heads, 8 wide): the gradient with
    respect to the block's input, and with respect to the gains and biases of its two LayerNorms,
    which your function adds into `grads`.
    """),
    code('''
    config = GPTConfig(vocab_size=16, n_ctx=8, n_layer=1, n_head=2, n_embd=8)
    block = nt.GPT(config, seed=3, dtype=np.float64).h[0]
    x = rng.standard_normal((2, 5, 8))                        # (B, T, C)
    R = rng.standard_normal(x.shape)                          # (B, T, C)
    LN_GRADS = [(ln, p) for ln in ("ln_1", "ln_2") for p in ("weight", "bias")]


    def block_grads(x):
        """Your dx, and the LayerNorms' gradients, for the loss sum(R * block(x))."""
        block.zero_grad()
        out, cache = block.forward(x)
        dx = block_backward(R, cache, block)
        return dx, {f"{ln}.{p}": getattr(block, ln).grads[p].copy() for ln, p in LN_GRADS}


    def block_loss(x):
        return float((R * block.forward(x)[0]).sum())


    def loss_with(p, value):
        """The block's loss with the parameter array p set to value (restored after)."""
        saved = p.copy()
        p[...] = value
        loss = block_loss(x)
        p[...] = saved
        return loss
    '''),
    check('''
    dx, ln_grads = block_grads(x)
    expect_shape("block dx", dx, x.shape, np.float64)
    # both branches' output weights at 0: the block is x plus a constant, so dx is dy itself
    outputs = (block.attn.c_proj.weight, block.mlp.c_proj.weight)
    saved = [w.copy() for w in outputs]
    for w in outputs:
        w[...] = 0.0
    through_skips = block_grads(x)[0]
    for w, value in zip(outputs, saved):
        w[...] = value
    if not np.allclose(through_skips, R, rtol=1e-12, atol=1e-12):
        raise CheckFailed("block dx: with both branches' output weights at 0 the block is "
                          "x plus a constant, so dx must be dy, and yours is not: a skip "
                          "path is missing (a residual adds dy to what its branch sends "
                          "back)")
    expect_grad("block dx", block_loss, lambda x: block_grads(x)[0], x, axes="btc")
    '''),
    check('''
    for name, grad in ln_grads.items():
        layer, param = name.split(".")
        p = getattr(getattr(block, layer), param)           # (C,): the array the block uses
        expect_grad(f"block {name}", lambda v: loss_with(p, v), lambda v: grad, p.copy())
    '''),
    md(r"""
    Gradient accumulation (chapter 5) runs several backward passes before one update, and every
    backward adds into `grads`: called twice without `zero_grad()`, your function must leave twice
    one call's gradients.
    """),
    check('''
    block.zero_grad()
    _, cache = block.forward(x)
    norm_grads = lambda: {f"{ln}.{p}": getattr(block, ln).grads[p] for ln, p in LN_GRADS}
    expect_accumulates("block_backward called twice",
                       lambda: block_backward(R, cache, block), norm_grads)
    '''),
    md("""
    ## Compare with lib

    On a float32 model of the small preset, yours and lib's agree to float32 rounding. lib's own
    LayerNorm backward is in the collapsed cell after it: open it once your checks pass. (Its
    block backward is the reference of exercise 4.4, where you build the block again from your
    own pieces.)
    """),
    uses('''
    small = nt.GPT(GPTConfig.small(), seed=0)                 # float32, 4 blocks, 128 wide
    block = small.h[1]
    x = rng.standard_normal((2, 16, 128)).astype(np.float32)  # (B, T, C)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    _, cache = block.forward(x)
    block.zero_grad()
    yours = block_backward(dy, cache, block)
    your_grads = {name: g.copy() for name, g in block.named_grads()}
    block.zero_grad()
    libs = block.backward(dy, cache)
    expect_close("dx against lib", yours, libs, rtol=1e-4, atol=1e-5, axes="btc")
    for name, g in block.named_grads():
        expect_close(f"{name} against lib", your_grads[name], g, rtol=1e-4, atol=1e-5)
    '''),
    collapsed('''
    from lib.display import show

    show(nt.LayerNorm.backward)
    '''),
    md("""
    ## Going further

    - RMSNorm (chapter 8) drops the mean: $\\hat x = x\\,r$ with $r = 1/\\sqrt{\\overline{x^2} + \\epsilon}$.
      Which term of LayerNorm's backward disappears? Write it and check it against
      `nt.RMSNorm.backward`.
    - GPT-1's blocks were post-norm, $\\mathrm{LN}(x + f(x))$. Write that block's backward: where
      does the skip path's gradient go now?
    """),
]
