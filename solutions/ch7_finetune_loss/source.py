"""Exercise 7.1: the fine-tuning loss L3 = L2 + lambda * L1 and its gradients."""
from build_notebooks import check, code, collapsed, graded, md, setup


STUB = '''
import numpy as np


def finetune_loss(hidden, logits, x, labels, weight, bias, lm_weight):
    """L3 = L2 + lm_weight * L1 on one batch, and its gradients.

    hidden (B, T, C) and logits (B, T, V): the model's final hidden states and
    language-model logits; x (B, T): the token ids; labels (B,): class indices in [0,
    K); weight (K, C) and bias (K,): the classification head; lm_weight >= 0. Returns
    a dict with "loss" (L3), "cls_loss" (L2), "lm_loss" (L1) as floats and the
    gradients of L3 "dhidden" (B, T, C), "dlogits" (B, T, V), "dweight" (K, C),
    "dbias" (K,)."""
    raise NotImplementedError("exercise 7.1: write finetune_loss")
'''

ANSWER = '''
import numpy as np


def mean_cross_entropy(z, targets):
    """Mean of -log softmax(z)[target] over the rows of z (N, M), targets (N,) ints;
    and its gradient w.r.t. z, (softmax - one_hot) / N."""
    # (N, M): the largest is 0, so exp cannot overflow
    shifted = z - z.max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))  # (N, M)
    rows = np.arange(len(z))                                 # (N,)
    grad = np.exp(log_p)                                     # (N, M): softmax
    grad[rows, targets] -= 1.0
    return float(-log_p[rows, targets].mean()), grad / len(z)


def finetune_loss(hidden, logits, x, labels, weight, bias, lm_weight):
    """L3 = L2 + lm_weight * L1 on one batch, and its gradients.

    hidden (B, T, C) and logits (B, T, V): the model's final hidden states and
    language-model logits; x (B, T): the token ids; labels (B,): class indices in [0,
    K); weight (K, C) and bias (K,): the classification head; lm_weight >= 0. Returns
    a dict with "loss" (L3), "cls_loss" (L2), "lm_loss" (L1) as floats and the
    gradients of L3 "dhidden" (B, T, C), "dlogits" (B, T, V), "dweight" (K, C),
    "dbias" (K,)."""
    B, T, C = hidden.shape
    V, K = logits.shape[-1], len(bias)
    labels = np.asarray(labels)
    if T < 2:
        raise ValueError(f"the language-model loss needs T >= 2 positions, got T = {T}")
    if not lm_weight >= 0:
        raise ValueError(f"lm_weight must be >= 0, got {lm_weight!r}")
    if labels.shape != (B,) or labels.min() < 0 or labels.max() >= K:
        raise ValueError(f"labels must be {B} class indices in [0, {K}), got "
                         f"{labels!r}")
    last = hidden[:, -1]                           # (B, C): the classify token's state
    scores = last @ weight.T + bias                          # (B, K)
    cls_loss, dscores = mean_cross_entropy(scores, labels)   # L2; (B, K)
    # L1: position t predicts token t + 1, so the last position predicts nothing
    lm_logits = logits[:, :-1].reshape(-1, V)                # (B (T-1), V)
    lm_loss, dlm = mean_cross_entropy(lm_logits, x[:, 1:].reshape(-1))
    dlogits = np.zeros_like(logits)                          # (B, T, V)
    dlogits[:, :-1] = lm_weight * dlm.reshape(B, T - 1, V)
    # the head read the last position only
    dhidden = np.zeros_like(hidden)                          # (B, T, C)
    dhidden[:, -1] = dscores @ weight                        # (B, C)
    return {"loss": cls_loss + lm_weight * lm_loss, "cls_loss": cls_loss,
            "lm_loss": lm_loss, "dhidden": dhidden, "dlogits": dlogits,
            "dweight": dscores.T @ last, "dbias": dscores.sum(axis=0)}   # (K, C), (K,)
'''

CELLS = [
    md(r"""
    # Exercise 7.1: the fine-tuning loss

    This exercise follows [chapter 7](../chapters/07_finetuning.ipynb). There a pre-trained model
    gets a classification head, GPT-1's task head, and is fine-tuned on the loss
    {cite}`radford2018improving`

    $$L_3 = L_2 + \lambda L_1,$$

    $L_2$ the cross-entropy of the head's class scores, $L_1$ the language-modelling loss on the same
    sequences. Here you write that loss and its gradients: everything the model's backward pass
    needs to fine-tune it.

    **What is graded.** The cell tagged `graded:ch7_finetune_loss`. A grader runs that cell alone, in a sandbox,
    and calls `finetune_loss` with hidden tests; nothing else in this notebook is graded. The checks
    below it are a first test you can run yourself. Some hidden tests are *edge tests* (bad input
    that must raise, `lm_weight = 0`, where a gradient of zeros is right): they count only once
    every other test of the same output passes, so that an answer that does almost nothing cannot
    collect points.
    """),
    setup(),
    md(r"""
    ## The contract

    The model's forward pass gives, for a batch of token ids `x` $(B, T)$, the final hidden states
    `hidden` $(B, T, C)$ (after the last LayerNorm) and the language-model logits `logits`
    $(B, T, V)$. The head reads the hidden state at the **last** position, where the classify token
    sits: with `weight` $(K, C)$ and `bias` $(K,)$ the $K$ class scores are
    $s = h_{T-1} W^\top + b$, shape $(B, K)$.

    - $L_2$: the mean over the batch of $-\log \mathrm{softmax}(s)[\text{label}]$.
    - $L_1$: the mean over the $B(T-1)$ positions $t < T-1$ of
      $-\log \mathrm{softmax}(\text{logits}_t)[x_{t+1}]$: each position predicts the next token; the
      last position predicts nothing.
    - `finetune_loss(hidden, logits, x, labels, weight, bias, lm_weight)` returns a dict:
      `"loss"` ($L_3$), `"cls_loss"` ($L_2$), `"lm_loss"` ($L_1$), as floats, and the gradients of
      $L_3$: `"dhidden"` $(B, T, C)$, `"dlogits"` $(B, T, V)$, `"dweight"` $(K, C)$, `"dbias"` $(K,)$.
    - `"dhidden"` holds only what flows back through the head: the logits were computed from the
      hidden states too (the tied output head), but that part reaches them through the model's own
      backward pass, which receives `"dlogits"`. So `"dhidden"` is zero except at the last position.
    - Raise `ValueError` for labels outside $[0, K)$ (or not $B$ of them), for `lm_weight` $< 0$ and
      for $T < 2$ (no next token to predict).

    **Rules.** Logits can be large (the hidden tests go to $10^4$): compute $\log\mathrm{softmax}$
    so that nothing overflows. Grading is in float64, within $10^{-9}$ relative. The checks below
    compare every gradient with central differences of your loss, so you know when yours are right.

    :::{admonition} Hint: the gradients
    :class: dropdown
    The gradient of a mean cross-entropy over N rows with respect to its logits is
    $(\mathrm{softmax} - \mathrm{onehot})/N$; then the chain rule through $s = h W^\top + b$.
    Subtract each row's maximum before the exponential: the softmax does not change.
    :::

    Use numpy only; while grading,
    torch is not installed and lib's fine-tuning loss and head raise an error. The graded cell must
    hold everything the function uses, imports included.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    On small random inputs, one property per cell: where the head reads, which token each position
    predicts, the gradients against central differences of the loss (each input moved alone, the
    others fixed), $\lambda = 0$, logits too large for a naive softmax, and bad input.
    """),
    code('''
    from lib.checks import expect_close, expect_grad, expect_raises, expect_shape
    # chapter 5's, one (B, T, V) batch at a time
    from lib.numpy_twin.train import cross_entropy

    rng = np.random.default_rng(1)
    B, T, C, V, K = 2, 4, 6, 9, 3
    inputs = dict(hidden=rng.standard_normal((B, T, C)),
                  logits=rng.standard_normal((B, T, V)), x=rng.integers(0, V, (B, T)),
                  labels=np.array([2, 0]), weight=rng.standard_normal((K, C)),
                  bias=rng.standard_normal(K), lm_weight=0.7)
    '''),
    check('''
    out = finetune_loss(**inputs)
    expect_shape("dhidden", out["dhidden"], (B, T, C), np.float64)
    expect_close("dhidden before the last position (the head reads only the last one)",
                 out["dhidden"][:, :-1], np.zeros((B, T - 1, C)), axes="btc")
    '''),
    check('''
    # position t predicts x[t + 1]
    lm_loss, _ = cross_entropy(inputs["logits"][:, :-1], inputs["x"][:, 1:])
    expect_close("lm_loss: each position predicts the next token", out["lm_loss"], lm_loss,
                 rtol=1e-12)
    expect_close("loss = cls_loss + lm_weight * lm_loss", out["loss"],
                 out["cls_loss"] + 0.7 * out["lm_loss"], rtol=1e-12)
    '''),
    check('''
    for key, shape in (("dlogits", (B, T, V)), ("dweight", (K, C)), ("dbias", (K,))):
        expect_shape(key, out[key], shape, np.float64)
    for key in ("hidden", "logits", "weight", "bias"):
        def loss_of(value, key=key):
            return finetune_loss(**{**inputs, key: value})["loss"]

        def grad_of(value, key=key):
            return finetune_loss(**{**inputs, key: value})[f"d{key}"]

        expect_grad(f"d{key} against central differences", loss_of, grad_of, inputs[key])
    '''),
    check('''
    no_lm = finetune_loss(**{**inputs, "lm_weight": 0.0})
    expect_close("dlogits with lm_weight = 0", no_lm["dlogits"], np.zeros((B, T, V)))
    expect_close("loss with lm_weight = 0", no_lm["loss"], out["cls_loss"], rtol=1e-12)
    '''),
    check('''
    big = {**inputs, "logits": 3000.0 * inputs["logits"],         # thousands
           "weight": 800.0 * inputs["weight"]}
    huge = finetune_loss(**big)
    lm_loss, dlm = cross_entropy(big["logits"][:, :-1], big["x"][:, 1:])
    expect_close("lm_loss with large logits", huge["lm_loss"], lm_loss, rtol=1e-12)
    expect_close("dlogits with large logits", huge["dlogits"][:, :-1], 0.7 * dlm, rtol=1e-9,
                 atol=1e-15)
    expect_shape("dhidden with large logits (finite)",
                 huge["dhidden"][np.isfinite(huge["dhidden"])], (B * T * C,))
    '''),
    check('''
    expect_raises("a label of -1", ValueError, finetune_loss,
                  **{**inputs, "labels": np.array([-1, 0])})
    expect_raises("a label equal to K = 3", ValueError, finetune_loss,
                  **{**inputs, "labels": np.array([3, 0])})
    expect_raises("three labels for B = 2", ValueError, finetune_loss,
                  **{**inputs, "labels": np.array([0, 1, 2])})
    expect_raises("lm_weight = -0.5", ValueError, finetune_loss,
                  **{**inputs, "lm_weight": -0.5})
    short = {key: inputs[key][:, :1] for key in ("hidden", "logits", "x")}   # T = 1
    expect_raises("T = 1", ValueError, finetune_loss, **{**inputs, **short})
    '''),
    md("""
    ## Inside the model

    Now the real thing: a small float64 model and lib's `ClassifierHead` give the hidden states and
    the logits; your `dlogits` and `dhidden` go into the model's backward pass, and every gradient of
    the model and of the head must equal what lib's own fine-tuning step computes (lib's gradients
    are copied before the model's are zeroed for yours).
    """),
    check('''
    from lib.config import GPTConfig
    from lib.numpy_twin import GPT
    from lib.numpy_twin.finetune import ClassifierHead
    from lib.numpy_twin.finetune import finetune_loss as lib_finetune_loss

    config = GPTConfig(vocab_size=40, n_ctx=16, n_layer=1, n_head=2, n_embd=16)
    model = GPT(config, seed=2, dtype=np.float64)
    head = ClassifierHead(16, 3, seed=2).astype(np.float64)
    x = rng.integers(0, 40, (3, 12))                             # (B, T) = (3, 12)
    labels = np.array([0, 2, 1])

    model.zero_grad()
    head.zero_grad()
    lib_losses = lib_finetune_loss(model, head, x, labels, 0.5)
    # copies: zero_grad() clears the arrays
    want = {name: g.copy() for name, g in model.named_grads()}
    want.update({"head.weight": head.grads["weight"].copy(),
                 "head.bias": head.grads["bias"].copy()})

    model.zero_grad()
    outputs = model.forward_outputs(x)
    logits, hidden = outputs.logits, outputs.hidden              # (B, T, V), (B, T, C)
    out = finetune_loss(hidden, logits, x, labels, head.weight, head.bias, 0.5)
    model.backward(out["dlogits"], dhidden=out["dhidden"])
    got = {**dict(model.named_grads()), "head.weight": out["dweight"],
           "head.bias": out["dbias"]}
    expect_close("L3, L2, L1", np.array([out["loss"], out["cls_loss"], out["lm_loss"]]),
                 np.array(lib_losses), rtol=1e-12)
    for name in want:
        expect_close(name, got[name], want[name], rtol=1e-9, atol=1e-13)
    '''),
    md("""
    ## Compare with lib

    lib splits the same computation in two: the head (a `Linear` that reads the last position) with
    its backward, and the step that adds the two losses and sends both gradients into the model.
    Open the cell below once your checks pass.
    """),
    collapsed('''
    from lib.display import show
    from lib.numpy_twin import finetune as nf

    show(nf.ClassifierHead, nf.finetune_loss)
    '''),
    md("""
    ## Going further

    - With $\\lambda = 0.5$, which of $L_1$ and $L_2$ is larger at the start of fine-tuning a
      pre-trained model, and at the start of training one from scratch? Why? Check it on chapter 7's
      task.
    - Why does the head read the last position and not, say, the mean over positions? Think of what
      the causal mask lets each position see.
    """),
]
