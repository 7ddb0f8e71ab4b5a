"""Exercise 4.4: the block and the whole GPT, forward and backward, from the student's own pieces."""
from build_notebooks import check, code, graded, md, setup, task, uses


STUB = '''
import math

import numpy as np


def layernorm_forward(x, weight, bias, eps=1e-5):
    """x (..., C), weight and bias (C,) -> (y (..., C), cache), with
    cache = (xhat (..., C), rstd (..., 1)): what 4.3's layernorm_backward reads."""
    raise NotImplementedError("exercise 4.4: write layernorm_forward")


def attention_backward(dy, x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias,
                       n_head):
    """The backward pass of 3.1's causal_self_attention, same weights and n_head.
    dy (B, T, C): the loss's gradient w.r.t. its output. -> (dx, dc_attn_weight,
    dc_attn_bias, dc_proj_weight, dc_proj_bias), each shaped like its input."""
    raise NotImplementedError("exercise 4.4: write attention_backward")


def block_forward(x, params, layer, n_head, parts):
    """Block `layer` (weights params["h.{layer}. ..."]) on x (B, T, C), with parts'
    causal_self_attention and gelu_tanh. -> (out (B, T, C), cache)."""
    raise NotImplementedError("exercise 4.4: write block_forward")


def block_backward(dout, cache, params, layer, n_head, grads, parts):
    """dout (B, T, C): the loss's gradient w.r.t. block_forward's output; cache: what it
    returned. Adds the gradient of every weight of the block into
    grads["h.{layer}. ..."] and returns dx (B, T, C)."""
    raise NotImplementedError("exercise 4.4: write block_backward")


def gpt_forward(idx, params, config, parts):
    """idx (B, T) token ids -> (logits (B, T, V), cache for gpt_backward): the
    embeddings, config.n_layer blocks, ln_f and the tied head."""
    raise NotImplementedError("exercise 4.4: write gpt_forward")


def gpt_backward(dlogits, cache, params, config, grads, parts):
    """dlogits (B, T, V): the loss's gradient w.r.t. the logits; cache: what gpt_forward
    returned. Adds the gradient of every weight into grads (same names as params);
    returns None."""
    raise NotImplementedError("exercise 4.4: write gpt_backward")
'''

ANSWER = '''
import math

import numpy as np


def layernorm_forward(x, weight, bias, eps=1e-5):
    """x (..., C), weight and bias (C,) -> (y (..., C), cache), with
    cache = (xhat (..., C), rstd (..., 1)): what 4.3's layernorm_backward reads."""
    centred = x - x.mean(axis=-1, keepdims=True)                        # (..., C)
    variance = (centred * centred).mean(axis=-1, keepdims=True)         # (..., 1)
    rstd = 1.0 / np.sqrt(variance + eps)                                # (..., 1)
    xhat = centred * rstd                                               # (..., C)
    return weight * xhat + bias, (xhat, rstd)


def rows(a):
    """(B, T, n) -> (B*T, n): every position a row, for the weights' gradients."""
    return a.reshape(-1, a.shape[-1])


def split_heads(a, n_head):
    """(B, T, C) -> (B, H, T, D)."""
    B, T, C = a.shape
    return a.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3)


def merge_heads(a):
    """(B, H, T, D) -> (B, T, C)."""
    B, H, T, D = a.shape
    return a.transpose(0, 2, 1, 3).reshape(B, T, H * D)


def attention_backward(dy, x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias,
                       n_head):
    """The backward pass of 3.1's causal_self_attention, same weights and n_head.
    dy (B, T, C): the loss's gradient w.r.t. its output. -> (dx, dc_attn_weight,
    dc_attn_bias, dc_proj_weight, dc_proj_bias), each shaped like its input."""
    T, C = x.shape[1:]
    scale = 1.0 / math.sqrt(C // n_head)
    # the forward again, keeping what the gradients need (the weights p, q, k, v, y)
    qkv = x @ c_attn_weight + c_attn_bias                               # (B, T, 3C)
    q, k, v = (split_heads(a, n_head) for a in np.split(qkv, 3, axis=-1))
    future = np.triu(np.ones((T, T), bool), k=1)                        # (T, T)
    scores = scale * (q @ k.swapaxes(-1, -2))                           # (B, H, T, T)
    scores[..., future] = -np.inf                                       # weight 0
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)                                  # (B, H, T, T)
    y = merge_heads(p @ v)                                              # (B, T, C)
    # out = y @ c_proj_weight + c_proj_bias
    dc_proj_weight = rows(y).T @ rows(dy)                               # (C, C)
    dc_proj_bias = rows(dy).sum(axis=0)                                 # (C,)
    dyh = split_heads(dy @ c_proj_weight.T, n_head)                     # (B, H, T, D)
    # y = p @ v, then the softmax: its gradient is p * (dp - sum over keys of dp * p)
    dv = p.swapaxes(-1, -2) @ dyh                                       # (B, H, T, D)
    dp = dyh @ v.swapaxes(-1, -2)                                       # (B, H, T, T)
    dscores = p * (dp - (dp * p).sum(axis=-1, keepdims=True))           # (B, H, T, T)
    dq = scale * (dscores @ k)                                          # (B, H, T, D)
    dk = scale * (dscores.swapaxes(-1, -2) @ q)                         # (B, H, T, D)
    dqkv = np.concatenate([merge_heads(d) for d in (dq, dk, dv)], -1)   # (B, T, 3C)
    dc_attn_weight = rows(x).T @ rows(dqkv)                             # (C, 3C)
    dc_attn_bias = rows(dqkv).sum(axis=0)                               # (3C,)
    dx = dqkv @ c_attn_weight.T                                         # (B, T, C)
    return dx, dc_attn_weight, dc_attn_bias, dc_proj_weight, dc_proj_bias


def layer_params(tensors, layer):
    """The block's entries of params (or grads) under short names: the same arrays."""
    prefix = f"h.{layer}."
    return {name.removeprefix(prefix): a for name, a in tensors.items()
            if name.startswith(prefix)}


ATTENTION = ["attn.c_attn.weight", "attn.c_attn.bias",
             "attn.c_proj.weight", "attn.c_proj.bias"]


def block_forward(x, params, layer, n_head, parts):
    """Block `layer` (weights params["h.{layer}. ..."]) on x (B, T, C), with parts'
    causal_self_attention and gelu_tanh. -> (out (B, T, C), cache)."""
    p = layer_params(params, layer)
    a, ln_1_cache = layernorm_forward(x, p["ln_1.weight"], p["ln_1.bias"])
    h = x + parts.causal_self_attention(a, *(p[n] for n in ATTENTION), n_head)
    m, ln_2_cache = layernorm_forward(h, p["ln_2.weight"], p["ln_2.bias"])
    f = m @ p["mlp.c_fc.weight"] + p["mlp.c_fc.bias"]                   # (B, T, 4C)
    g = parts.gelu_tanh(f)                                              # (B, T, 4C)
    out = h + g @ p["mlp.c_proj.weight"] + p["mlp.c_proj.bias"]         # (B, T, C)
    return out, (a, ln_1_cache, m, ln_2_cache, f, g)


def norm_backward(d, cache, norm, p, grads, parts):
    """LayerNorm `norm` ("ln_1", ...) of a block, backward: adds its weight's and bias's
    gradients, returns dx."""
    dx, dweight, dbias = parts.layernorm_backward(d, cache, p[f"{norm}.weight"])
    grads[f"{norm}.weight"] += dweight
    grads[f"{norm}.bias"] += dbias
    return dx


def block_backward(dout, cache, params, layer, n_head, grads, parts):
    """dout (B, T, C): the loss's gradient w.r.t. block_forward's output; cache: what it
    returned. Adds the gradient of every weight of the block into
    grads["h.{layer}. ..."] and returns dx (B, T, C)."""
    a, ln_1_cache, m, ln_2_cache, f, g = cache
    p, grad = layer_params(params, layer), layer_params(grads, layer)
    # out = h + mlp(ln_2(h)): the skip path and the branch both reach h
    grad["mlp.c_proj.weight"] += rows(g).T @ rows(dout)                # (4C, C)
    grad["mlp.c_proj.bias"] += rows(dout).sum(axis=0)                   # (C,)
    df = (dout @ p["mlp.c_proj.weight"].T) * parts.gelu_tanh_grad(f)    # (B, T, 4C)
    grad["mlp.c_fc.weight"] += rows(m).T @ rows(df)                     # (C, 4C)
    grad["mlp.c_fc.bias"] += rows(df).sum(axis=0)                       # (4C,)
    dm = df @ p["mlp.c_fc.weight"].T                                    # (B, T, C)
    dh = dout + norm_backward(dm, ln_2_cache, "ln_2", p, grad, parts)
    # h = x + attn(ln_1(x)): the same one sub-layer earlier
    da, *dweights = attention_backward(dh, a, *(p[n] for n in ATTENTION), n_head)
    for name, dweight in zip(ATTENTION, dweights):
        grad[name] += dweight
    return dh + norm_backward(da, ln_1_cache, "ln_1", p, grad, parts)


def gpt_forward(idx, params, config, parts):
    """idx (B, T) token ids -> (logits (B, T, V), cache for gpt_backward): the
    embeddings, config.n_layer blocks, ln_f and the tied head."""
    wte, wpe = params["wte.weight"], params["wpe.weight"]
    x = parts.embed_forward(idx, wte, wpe)                              # (B, T, C)
    blocks = []
    for layer in range(config.n_layer):
        x, cache = block_forward(x, params, layer, config.n_head, parts)
        blocks.append(cache)
    hidden, ln_f_cache = layernorm_forward(x, params["ln_f.weight"],
                                           params["ln_f.bias"])
    logits = parts.head_forward(hidden, wte)                            # (B, T, V)
    return logits, (idx, blocks, ln_f_cache, hidden)


def gpt_backward(dlogits, cache, params, config, grads, parts):
    """dlogits (B, T, V): the loss's gradient w.r.t. the logits; cache: what gpt_forward
    returned. Adds the gradient of every weight into grads (same names as params);
    returns None."""
    idx, blocks, ln_f_cache, hidden = cache
    # 2.1's functions add into a dict with keys "wte" and "wpe": give them grads' arrays
    tables = {"wte": grads["wte.weight"], "wpe": grads["wpe.weight"]}
    dhidden = parts.head_backward(dlogits, hidden, params["wte.weight"], tables)
    dx, dweight, dbias = parts.layernorm_backward(dhidden, ln_f_cache,
                                                  params["ln_f.weight"])
    grads["ln_f.weight"] += dweight
    grads["ln_f.bias"] += dbias
    for layer in reversed(range(config.n_layer)):
        dx = block_backward(dx, blocks[layer], params, layer, config.n_head, grads,
                            parts)
    parts.embed_backward(dx, idx, tables)
'''

# The formulas the answer is, as the hints write them: shown only in a hint's last stage
# (tests/test_staged_hints.py).
FINAL_FORMULAS = [
    r"ds = p \odot (dp - \sum_j dp_j\,p_j)",
    r"dq = ds\,k / \sqrt{D}",
    r"dk = ds^\top q / \sqrt{D}",
    r"dv = p^\top dy",
    r"dp = dy\,v^\top",
    r"dW = x^\top dy",
    r"dx = dy\,W^\top",
]

CELLS = [
    md(r"""
    # Exercise 4.4: The whole GPT, forward and backward

    This exercise follows [chapter 4](../chapters/04_model.ipynb) and exercise 4.3. You have
    written GPT-2's pieces one at a time: the embeddings and the tied head (2.1), attention
    (3.1), GELU (4.1), LayerNorm's backward (4.3). Here you assemble them into the block and
    the whole model, forward and backward, and write the one gradient no exercise has asked
    for yet: attention's. After this exercise every number the model computes, and every
    gradient, comes from your code; lib's GPT is only the reference you compare with.

    **What is graded.** The cell tagged `graded:ch4_gpt` (JupyterLab shows a cell's tags in its
    property inspector; Colab keeps them without showing them). A grader runs that cell alone,
    in a sandbox, and calls your functions on hidden float64 models; nothing else in this
    notebook is graded, and your earlier notebooks are not read there. Your functions receive
    the earlier pieces as the argument `parts`; the grader passes its own, right ones, so a
    mistake in 3.1's attention costs 3.1's points, not these. In the same way `block_backward`
    is graded with the grader's `attention_backward`, and `gpt_forward` and `gpt_backward`
    with its `block_forward` and `block_backward`: each function costs its own points, except
    that `gpt_forward`'s count once every test of `layernorm_forward` and `block_forward`
    passes, and `gpt_backward`'s once `block_backward`'s do too. `layernorm_forward` has tests
    of its own, and the backward tests run your own forward to get the cache, so fix the
    forward first. Every backward is
    called twice without zeroing the gradients, as gradient accumulation calls it: the second
    call must add to the first. A zero gradient is an *edge test* (an answer that returns
    zeros gets it right): it counts only once every other test of the same function passes.
    """),
    setup(),
    md(r"""
    ## Your pieces

    `lib.handin.gather` reads your notebooks of the earlier exercises, runs their graded cells
    and hands you the functions: nothing is retyped, and a fix there is a fix here. It looks in
    the course's `exercises/` folder. In Colab your notebooks live in your Drive, not in the
    course's folder: download them (File, Download .ipynb), upload them into the session's
    files, and give the folder they are in, `gather(PIECES, folder="/content")`. A missing
    notebook, a missing tag or a missing function is named in one line.
    """),
    code('''
    import numpy as np

    import lib.numpy_twin as nt
    from lib.config import GPTConfig
    from lib.handin import ROOT, gather
    from lib.weights import to_gpt2_layout

    PIECES = {"ch2_embeddings": ["embed_forward", "embed_backward",
                                 "head_forward", "head_backward"],
              "ch3_attention": ["causal_self_attention"],
              "ch4_gelu": ["gelu_tanh", "gelu_tanh_grad"],
              "ch4_backward": ["layernorm_backward"]}
    '''),
    task('''
    parts = gather(PIECES)            # your functions, from your notebooks in exercises/
    ''', '''
    parts = gather(PIECES, folder=ROOT / "solutions")   # the solved notebooks
    '''),
    md(r"""
    The model you build holds its weights in a dictionary `params` with GPT-2's checkpoint
    names and shapes (what `transformers` saves, without the `transformer.` prefix):
    `"wte.weight"` `(V, C)`, `"wpe.weight"` `(n_ctx, C)`, then for each block `i`
    `"h.{i}.ln_1.weight"`, `"h.{i}.attn.c_attn.weight"` `(C, 3C)`, `"h.{i}.mlp.c_fc.weight"`
    `(C, 4C)`, ... (a matrix is stored `(in, out)`, as 3.1's `c_attn_weight`), and
    `"ln_f.weight"`, `"ln_f.bias"`. The gradients `grads` have the same names and shapes.
    Below, a small float64 model of lib (2 blocks, 2 heads, 8 wide) with random weights, its
    `params`, and your pieces checked against lib's, so that you know they are sound before
    you build on them.
    """),
    code('''
    config = GPTConfig(vocab_size=16, n_ctx=8, n_layer=2, n_head=2, n_embd=8)
    model = nt.GPT(config, seed=4, dtype=np.float64)
    rng = np.random.default_rng(44)
    for _, weight in model.named_parameters():
        weight += rng.normal(0, 0.3, weight.shape)            # biases, gains off 0 and 1


    params = to_gpt2_layout(config, model.named_parameters())
    idx = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])       # (B, T) = (2, 5), ids repeat
    '''),
    uses('''
    from lib.checks import expect_close
    from lib.numpy_twin.model import gelu, gelu_backward

    x = rng.normal(0, 1, (2, 5, 8))                           # (B, T, C)
    block = model.h[0]
    attn = [params[f"h.0.attn.{n}"]
            for n in ("c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias")]
    expect_close("3.1's causal_self_attention against lib",
                 parts.causal_self_attention(x, *attn, 2), block.attn.forward(x)[0],
                 rtol=1e-10, atol=1e-12, axes="btc")
    expect_close("4.1's gelu_tanh against lib", parts.gelu_tanh(x), gelu(x), rtol=1e-12)
    expect_close("4.1's gelu_tanh_grad against lib", parts.gelu_tanh_grad(x),
                 gelu_backward(np.ones_like(x), x), rtol=1e-10, atol=1e-12)
    _, cache = block.ln_1.forward(x)
    expect_close("4.3's layernorm_backward against lib",
                 parts.layernorm_backward(x, cache, block.ln_1.weight)[0],
                 block.ln_1.backward(x, cache), rtol=1e-10, atol=1e-12, axes="btc")
    wte, wpe = params["wte.weight"], params["wpe.weight"]
    expect_close("2.1's embed_forward against lib", parts.embed_forward(idx, wte, wpe),
                 wte[idx] + wpe[:5], rtol=1e-12)
    expect_close("2.1's head_forward against lib", parts.head_forward(x, wte),
                 model.lm_head(x), rtol=1e-10, atol=1e-12)
    '''),
    md(r"""
    ## What to write

    In the graded cell, six functions. The argument `parts` holds your earlier functions:
    call them as `parts.causal_self_attention(...)`, `parts.gelu_tanh(...)`, and so on, never
    by their bare names (the graded cell must hold everything else it uses, imports included).

    - `layernorm_forward(x, weight, bias, eps=1e-5)` returns `(y, (xhat, rstd))`: the cache that
      your `layernorm_backward` of 4.3 reads (chapter 4 shows the layer).
    - `attention_backward(dy, x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias,
      n_head)`: the gradients of 3.1's layer with respect to its input and its four weights.
      It gets `x`, not a cache: compute the forward's intermediate values again inside it
      (the queries, keys, values and the attention weights). Work backwards through the
      projection, the weighted sum of the values, the softmax, the scores and the fused
      projection. The two steps new to you are the softmax's gradient (each row of weights
      sums to 1, so a weight's gradient depends on the whole row) and the masked entries
      (their weight is 0: what gradient reaches them?).
    - `block_forward(x, params, layer, n_head, parts)` and `block_backward(dout, cache, params,
      layer, n_head, grads, parts)`: GPT-2's pre-norm block, $h = x + \mathrm{attn}(\mathrm{ln_1}(x))$,
      $\text{out} = h + \mathrm{mlp}(\mathrm{ln_2}(h))$ with $\mathrm{mlp}(m) = \mathrm{gelu}(m W_{fc} +
      b_{fc}) W_{proj} + b_{proj}$. The forward keeps in its cache what the backward needs; the
      backward adds every weight's gradient into `grads` (with `+=`: a second call must add
      to the first) and uses your `attention_backward`, `parts.gelu_tanh_grad` and
      `parts.layernorm_backward`.
    - `gpt_forward(idx, params, config, parts)` and `gpt_backward(dlogits, cache, params,
      config, grads, parts)`: `parts.embed_forward`, `config.n_layer` blocks, `ln_f`, the tied
      head `parts.head_forward`; and backwards through the same. 2.1's `embed_backward` and
      `head_backward` add into a dict with keys `"wte"` and `"wpe"`: give them one whose values
      are the arrays `grads["wte.weight"]` and `grads["wpe.weight"]` themselves, so that what
      they add lands in `grads`.

    The result to reach: the logits of lib's GPT, and for every weight the derivative of the
    loss, which the checks below measure by central differences and compare with lib's.

    :::{admonition} Hint: a dict of a block's weights
    :class: dropdown
    `{name[len(prefix):]: a for name, a in params.items() if name.startswith(prefix)}` with
    `prefix = f"h.{layer}."` holds the same arrays under short names (`"ln_1.weight"`). Built
    from `grads`, `g["ln_1.weight"] += d` adds into `grads["h.0.ln_1.weight"]`, while
    `g["ln_1.weight"] = d` only rebinds the short dict's entry and the gradient is lost.
    :::

    :::{admonition} The products' gradients, hint 1 of 3: the idea
    :class: dropdown
    Every step but the softmax is a product of matrices, $Y = X W$ (a linear layer, $s = q
    k^\top / \sqrt{D}$, $y = p v$). Write one entry, $Y_{ij} = \sum_k X_{ik} W_{kj}$,
    differentiate it with respect to one entry of $X$ and one of $W$, and sum over every entry
    of $Y$ that uses it. The shapes then tell you which factor is transposed.
    :::

    :::{admonition} The products' gradients, hint 2 of 3: entry by entry
    :class: dropdown
    $\partial\mathcal L/\partial W_{kj} = \sum_i X_{ik}\,dY_{ij}$ and
    $\partial\mathcal L/\partial X_{ik} = \sum_j dY_{ij}\,W_{kj}$: each a product of two
    matrices, one of them transposed. A bias is added to every row, so its gradient sums over
    the rows; the scale $1/\sqrt{D}$ multiplies every gradient through the scores.
    :::

    :::{admonition} The products' gradients, hint 3 of 3: the formulas
    :class: dropdown
    For $y = x W + b$ with $x$ flattened to rows `(B*T, in)`: $dW = x^\top dy$ `(in, out)`,
    $db$ the sum of $dy$'s rows, $dx = dy\,W^\top$. Per head, for $y = p v$: $dv = p^\top dy$
    and $dp = dy\,v^\top$; for $s = q k^\top / \sqrt{D}$: $dq = ds\,k / \sqrt{D}$ and
    $dk = ds^\top q / \sqrt{D}$.
    :::

    :::{admonition} The softmax's gradient, hint 1 of 3: the idea
    :class: dropdown
    Differentiate one weight $p_j = e^{s_j} / \sum_k e^{s_k}$ with respect to one score $s_i$ of
    the same row (the quotient rule): $i = j$ and $i \ne j$ both give a term, since every score
    is in the denominator. Then $ds_i = \sum_j dp_j\,\partial p_j/\partial s_i$.
    :::

    :::{admonition} The softmax's gradient, hint 2 of 3: one entry's derivative
    :class: dropdown
    $\partial p_j/\partial s_i = p_j\,(\delta_{ij} - p_i)$. Put it in the sum over $j$: one term
    is $dp_i$ times something, the other the same number for the whole row.
    :::

    :::{admonition} The softmax's gradient, hint 3 of 3: the formula
    :class: dropdown
    With $p = \mathrm{softmax}(s)$ over a row and $dp$ the gradient reaching $p$,
    $ds = p \odot (dp - \sum_j dp_j\,p_j)$. A masked entry has $p = 0$, so its $ds$ is 0 by
    itself.
    :::

    **Rules.** numpy only; float64 in the hidden tests. While grading, lib's attention's,
    block's, MLP's and GPT's forward and backward raise an error, and so do its LayerNorm's
    forward and chapter 10's attention.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    One cell per property, the function's own first. Gradients are compared with central
    differences of a scalar loss $\sum R \odot \text{output}$ ($R$ fixed and random, so the
    output's gradient is $R$) and with lib's backward passes. A check that fails names the
    function to look at.
    """),
    code('''
    from lib.checks import CheckFailed, expect_accumulates, expect_grad, expect_shape

    block = model.h[0]                                        # the model's first block
    R = rng.normal(0, 1, x.shape)             # (B, T, C): dy of the loss sum(R * y)
    S = rng.normal(0, 1, (2, 5, 16))          # (B, T, V): dlogits of sum(S * logits)


    def zero_grads():
        return {name: np.zeros_like(a) for name, a in params.items()}


    def lib_grads(backward):
        """lib's gradients after `backward()`, in params' layout."""
        model.zero_grad()
        backward()
        return to_gpt2_layout(config, model.named_grads())


    def your_grads():
        """Your gradients of sum(S * logits)."""
        grads = zero_grads()
        logits, cache = gpt_forward(idx, params, config, parts)
        gpt_backward(S, cache, params, config, grads, parts)
        return grads


    def lib_loss_with(weight, value):
        """sum(S * logits) of lib's GPT with its array `weight` set to value, then back."""
        saved = weight.copy()
        weight[...] = value
        loss = float((S * model.forward(idx)).sum())
        weight[...] = saved
        return loss
    '''),
    check('''
    y, (xhat, rstd) = layernorm_forward(x, block.ln_1.weight, block.ln_1.bias)
    want, (want_xhat, want_rstd) = block.ln_1.forward(x)
    expect_close("layernorm_forward: y", y, want, rtol=1e-10, atol=1e-12, axes="btc")
    expect_close("layernorm_forward: the cache's xhat", xhat, want_xhat, rtol=1e-10,
                 atol=1e-12, axes="btc")
    expect_close("layernorm_forward: the cache's rstd, (B, T, 1)", rstd, want_rstd,
                 rtol=1e-10)
    '''),
    check('''
    first = np.zeros_like(R)
    first[:, 0] = R[:, 0]                     # dy at the first position only
    if np.abs(attention_backward(first, x, *attn, 2)[0][:, 1:]).max() > 1e-12:
        raise CheckFailed("attention_backward: with dy at the first position only, "
                          "gradient reaches later positions, which the first never sees: "
                          "the causal mask is missing from the forward that your backward "
                          "recomputes")
    w, b = attn[0].copy(), attn[1].copy()
    w[:, 16:], b[16:] = 0.0, 1.0              # every value vector the same: the output does
    same = attention_backward(R, x, w, b, *attn[2:], 2)    # not depend on the scores
    if np.abs(same[0]).max() > 1e-12:
        raise CheckFailed("attention_backward: with every value vector the same the output"
                          " does not depend on the scores, yet gradient reaches q and k: "
                          "the softmax's backward takes each weight alone (ds = p * dp), "
                          "forgetting that a row's weights sum to 1")
    expect_grad("attention_backward: dx", lambda x: (R * block.attn.forward(x)[0]).sum(),
                lambda x: attention_backward(R, x, *attn, 2)[0], x, axes="btc")
    '''),
    check('''
    want = lib_grads(lambda: block.attn.backward(R, block.attn.forward(x)[1]))
    for name, got in zip(("c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias"),
                         attention_backward(R, x, *attn, 2)[1:]):
        expect_close(f"attention_backward: d{name} against lib", got,
                     want[f"h.0.attn.{name}"], rtol=1e-9, atol=1e-12)
    '''),
    check('''
    out, _ = block_forward(x, params, 0, 2, parts)
    expect_close("block_forward against lib's Block", out, block.forward(x)[0],
                 rtol=1e-10, atol=1e-12, axes="btc")
    '''),
    check('''
    def block_dx(x):
        _, cache = block_forward(x, params, 0, 2, parts)
        return block_backward(R, cache, params, 0, 2, zero_grads(), parts)


    zeroed = dict(params)                     # both branches' output weights at 0: the
    for name in ("h.0.attn.c_proj.weight", "h.0.mlp.c_proj.weight"):   # block is x + a
        zeroed[name] = np.zeros_like(params[name])                      # constant
    _, cache = block_forward(x, zeroed, 0, 2, parts)
    if not np.allclose(block_backward(R, cache, zeroed, 0, 2, zero_grads(), parts), R,
                       rtol=1e-12, atol=1e-12):
        raise CheckFailed("block_backward: with both branches' output weights at 0 the "
                          "block is x plus a constant, so dx must be dy, and yours is not: "
                          "a skip path is missing (a residual adds dy to what its branch "
                          "sends back)")
    expect_grad("block_backward: dx", lambda x: (R * block.forward(x)[0]).sum(), block_dx,
                x, axes="btc")
    '''),
    check('''
    grads = zero_grads()
    block_backward(R, block_forward(x, params, 0, 2, parts)[1], params, 0, 2, grads, parts)
    want = lib_grads(lambda: block.backward(R, block.forward(x)[1]))
    for name in (n for n in params if n.startswith("h.0.")):
        expect_close(f"block_backward: {name} against lib", grads[name], want[name],
                     rtol=1e-9, atol=1e-12)
    '''),
    check('''
    grads = zero_grads()
    _, cache = block_forward(x, params, 0, 2, parts)
    expect_accumulates("block_backward called twice",
                       lambda: block_backward(R, cache, params, 0, 2, grads, parts),
                       lambda: {n: g for n, g in grads.items() if n.startswith("h.0.")})
    '''),
    check('''
    logits, _ = gpt_forward(idx, params, config, parts)
    expect_shape("gpt_forward: logits", logits, (2, 5, 16), np.float64)
    expect_close("gpt_forward: logits against lib's GPT", logits, model.forward(idx),
                 rtol=1e-10, atol=1e-12, axes="btv")
    '''),
    check('''
    yours, want = your_grads(), lib_grads(lambda: (model.forward(idx), model.backward(S)))
    for name in params:
        expect_close(f"gpt_backward: {name} against lib", yours[name], want[name],
                     rtol=1e-9, atol=1e-12)
    '''),
    check('''
    # wte is used twice (the lookup and the head): its gradient is the sum of both parts
    for name, weight in (("wte.weight", model.wte.weight), ("wpe.weight", model.wpe.weight),
                         ("ln_f.weight", model.ln_f.weight)):
        expect_grad(f"gpt_backward: {name}, central differences",
                    lambda v: lib_loss_with(weight, v), lambda v: yours[name],
                    weight.copy())
    '''),
    check('''
    grads = zero_grads()
    _, cache = gpt_forward(idx, params, config, parts)
    expect_accumulates("gpt_backward called twice",
                       lambda: gpt_backward(S, cache, params, config, grads, parts),
                       lambda: grads)
    '''),
    md("""
    ## Going further

    - Time your `gpt_forward` and `gpt_backward` against lib's on the small preset
      (`GPTConfig.small()`). Where does each spend its time?
    - `attention_backward` computes the attention weights again. What would it cost in memory
      to keep them in the cache instead, for GPT-2 Small's 12 layers, 12 heads and 1,024
      positions? Chapter 10's flash attention recomputes them on purpose.
    """),
]
