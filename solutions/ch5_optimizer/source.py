"""Exercise 5.1: cross-entropy from logits, the warmup-cosine schedule and an AdamW step."""
from build_notebooks import check, code, collapsed, graded, md, setup, uses


STUB = '''
import math

import numpy as np


def cross_entropy(logits, targets):
    """Mean of -log softmax(logits)[target] over all B*T positions, and its gradient
    w.r.t. the logits. logits (B, T, V), float32 or float64; targets (B, T) ints in
    [0, V), else ValueError. -> (loss: float, dlogits (B, T, V) in the logits' dtype)"""
    raise NotImplementedError("exercise 5.1: write cross_entropy")


def lr_at(step, lr, min_lr, warmup_iters, max_iters):
    """The learning rate of step `step` (0-based): linear warmup, then cosine decay
    to min_lr. -> float"""
    raise NotImplementedError("exercise 5.1: write lr_at")


def adamw_step(params, grads, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.95),
               eps=1e-8, weight_decay=0.1):
    """One AdamW update of every parameter, in place. params, grads, exp_avg (m),
    exp_avg_sq (v): {name: array}; step: this update's number, 1 for the first."""
    raise NotImplementedError("exercise 5.1: write adamw_step")
'''

ANSWER = '''
import math

import numpy as np


def cross_entropy(logits, targets):
    """Mean of -log softmax(logits)[target] over all B*T positions, and its gradient
    w.r.t. the logits. logits (B, T, V), float32 or float64; targets (B, T) ints in
    [0, V), else ValueError. -> (loss: float, dlogits (B, T, V) in the logits' dtype)"""
    B, T, V = logits.shape
    targets = np.asarray(targets)
    if targets.shape != (B, T):
        raise ValueError(f"targets must have shape {(B, T)} to match logits "
                         f"{logits.shape}, got {targets.shape}")
    if targets.size and (targets.min() < 0 or targets.max() >= V):
        raise ValueError(f"targets must lie in [0, {V}), got min {targets.min()} max "
                         f"{targets.max()}")
    z = logits.reshape(B * T, V)                              # (N, V), N = B * T
    # (N, V): every exponent <= 0, none overflows
    shifted = z - z.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))   # (N, V)
    rows, cols = np.arange(B * T), targets.reshape(-1)        # (N,), (N,)
    loss = -log_probs[rows, cols].mean()
    dlogits = np.exp(log_probs)                               # (N, V): softmax
    dlogits[rows, cols] -= 1.0                                # softmax - one_hot
    dlogits /= B * T                                          # the mean's 1 / N
    return float(loss), dlogits.reshape(B, T, V).astype(logits.dtype)


def lr_at(step, lr, min_lr, warmup_iters, max_iters):
    """The learning rate of step `step` (0-based): linear warmup, then cosine decay
    to min_lr. -> float"""
    if step < warmup_iters:
        return lr * (step + 1) / warmup_iters
    if step >= max_iters:
        return min_lr
    progress = (step - warmup_iters) / max(1, max_iters - warmup_iters)   # 0 -> 1
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def decays(name, p):
    """Weight decay for the 2-D weight matrices and embeddings only."""
    return p.ndim == 2 and name.endswith(".weight")


def adamw_step(params, grads, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.95),
               eps=1e-8, weight_decay=0.1):
    """One AdamW update of every parameter, in place. params, grads, exp_avg (m),
    exp_avg_sq (v): {name: array}; step: this update's number, 1 for the first."""
    b1, b2 = betas
    for name, p in params.items():
        g, m, v = grads[name], exp_avg[name], exp_avg_sq[name]
        if decays(name, p):
            p *= 1 - lr * weight_decay           # decoupled: the gradient never sees it
        m *= b1
        m += (1 - b1) * g                        # running mean of the gradient
        v *= b2
        v += (1 - b2) * g * g                    # running mean of its square
        m_hat = m / (1 - b1 ** step)             # both start at 0: undo that bias
        v_hat = v / (1 - b2 ** step)
        p -= lr * m_hat / (np.sqrt(v_hat) + eps)
'''

# The formulas the answer is, as the hints write them: shown only in a hint's last stage
# (tests/test_staged_hints.py).
FINAL_FORMULAS = [
    "lr * (step + 1) / warmup_iters",
    r"\tfrac12(1 + \cos \pi\,\text{progress})",
    r"z_i - m - \log\sum_j e^{z_j - m}",
    r"(p - \text{one-hot}(\text{target}))/N",
    r"p - \text{lr}\cdot\text{wd}\cdot p",
    r"\beta_1 m + (1 - \beta_1)\,g",
    r"\beta_2 v + (1 - \beta_2)\,g^2",
    r"\frac{\hat m}{\sqrt{\hat v} + \epsilon}",
    r"\frac{m}{1 - \beta_1^t}",
]

CELLS = [
    md(r"""
    # Exercise 5.1: The loss and the optimizer

    This exercise follows [chapter 5](../chapters/05_training.ipynb), which trains the model with
    lib's loss, schedule and optimizer. Here you write those three pieces yourself: the
    cross-entropy loss with its gradient, the learning-rate schedule (linear warmup, then cosine
    decay), and one step of AdamW. Then your pieces train a small model, step for step like lib's.

    **What is graded.** The cell tagged `graded:ch5_optimizer`, with `cross_entropy`, `lr_at` and `adamw_step`
    (JupyterLab shows a cell's tags in its property inspector; Colab keeps them without showing
    them). A grader runs that cell alone, in a sandbox, and calls your functions on hidden inputs:
    logits up to $10^4$, schedules of many shapes, and AdamW runs of 100 steps compared with a
    reference trajectory. Nothing else in this notebook is graded. Edge tests (bad targets that
    must raise, steps past the end of the schedule, where a constant is right) count only once
    every other test of the same function passes, so that an answer that does almost nothing
    cannot collect points.
    """),
    setup(),
    code('''
    import math

    import matplotlib.pyplot as plt
    import numpy as np
    import torch

    from lib.checks import CheckFailed, expect_close, expect_grad, expect_shape

    rng = np.random.default_rng(0)
    '''),
    md(r"""
    ## What to write

    **`cross_entropy(logits, targets) -> (loss, dlogits)`.** `logits` is `(B, T, V)`, `targets`
    `(B, T)` integer ids. With $p = \mathrm{softmax}(z)$ at each of the $N = BT$ positions, the loss
    is the mean of $-\log p_{\text{target}}$; `dlogits` is its gradient with respect to the logits
    (derive it: the checks compare it with central differences).
    - Nothing may overflow: the hidden tests use logits up to $10^4$ (and $e^{710}$ is already
      infinite in float64). Compute $\log p$ so that no exponent is positive.
    - Return the loss as a Python float, and `dlogits` in the logits' dtype (float32 stays float32).
    - Targets of the wrong shape, or outside $[0, V)$, raise `ValueError` with a message naming what
      you got.

    **`lr_at(step, lr, min_lr, warmup_iters, max_iters) -> float`**, `step` counted from 0:
    - while `step < warmup_iters`: a straight line up to `lr`, reached at step `warmup_iters - 1`
      (the first step is `lr / warmup_iters`, not 0);
    - from there to `max_iters`: half a cosine from `lr` down to `min_lr`;
    - from `max_iters` on: `min_lr`.

    **`adamw_step(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay)`** updates
    every parameter in place, as `torch.optim.AdamW` does. The four dictionaries share their
    names; `exp_avg` ($m$) and `exp_avg_sq` ($v$) start at zeros and are yours to update; `step` is
    $t$, 1 for the first update. Read the update from the paper (Loshchilov and Hutter's
    Algorithm 2 {cite}`loshchilov2019decoupled`, or the `torch.optim.AdamW` documentation) before
    opening the hint; the checks compare your steps with torch's.

    :::{admonition} The formulas, hint 1 of 3: the ideas
    :class: dropdown
    *Cross-entropy.* Write one position's loss with the logits alone,
    $-\log p_y = -z_y + \log\sum_j e^{z_j}$, and differentiate it with respect to one logit $z_i$;
    the mean over the $N$ positions divides each position's gradient by $N$. Subtracting the
    same number from every logit of a row changes no $p$: choose the number so that no exponent
    is positive.

    *Schedule.* Measure how far the cosine part has gone as a fraction from 0 to 1;
    $\cos \pi\,\text{progress}$ goes from 1 to -1 over it: shift and scale it to go from `lr` to
    `min_lr`.

    *AdamW.* Two running averages, of $g$ and of $g^2$, both started at 0 (so too small at first:
    divide by what they would be if every $g$ were 1); the step is the first over the square
    root of the second; the decay shrinks the weight itself, apart from the gradient.
    :::

    :::{admonition} The formulas, hint 2 of 3: the intermediate steps
    :class: dropdown
    *Cross-entropy.* $\partial(-\log p_y)/\partial z_i = p_i - [i = y]$, with $m$ the row's
    largest logit the one to subtract.

    *Schedule.* Warmup reaches `lr` at step `warmup_iters - 1`, so step `step` is the
    `step + 1`-th of `warmup_iters` equal rises; the cosine's progress is
    $(\text{step} - \mathrm{warmup\_iters}) / \max(1, \mathrm{max\_iters} - \mathrm{warmup\_iters})$.

    *AdamW.* Each running average is $\beta$ times the old value plus $1 - \beta$ times the new
    one; after $t$ updates of a constant 1 it holds $1 - \beta^t$. The order: decay, the two
    averages, their corrections, the step.
    :::

    :::{admonition} The formulas, hint 3 of 3: the formulas
    :class: dropdown
    Warmup: `lr * (step + 1) / warmup_iters`. Cosine: $\mathrm{min\_lr} + (\text{lr} -
    \mathrm{min\_lr})\,\tfrac12(1 + \cos \pi\,\text{progress})$.
    Cross-entropy: $\log p_i = z_i - m - \log\sum_j e^{z_j - m}$ with $m$ the row's maximum, and
    `dlogits` $= (p - \text{one-hot}(\text{target}))/N$. AdamW, for each parameter $p$ with
    gradient $g$:

    $$p \leftarrow p - \text{lr}\cdot\text{wd}\cdot p \quad\text{(decoupled weight decay, 2-D weights only)},$$
    $$m \leftarrow \beta_1 m + (1 - \beta_1)\,g, \qquad v \leftarrow \beta_2 v + (1 - \beta_2)\,g^2,$$
    $$p \leftarrow p - \text{lr}\,\frac{\hat m}{\sqrt{\hat v} + \epsilon}, \qquad \hat m = \frac{m}{1 - \beta_1^t},\ \hat v = \frac{v}{1 - \beta_2^t}.$$
    :::

    Weight decay pulls the weight matrices and embeddings toward 0; biases and LayerNorm gains
    (1-D, even LayerNorm's `ln_1.weight`) are left alone. "Decoupled" means the decay is not added
    to the gradient, where Adam's division by $\sqrt{\hat v}$ would rescale it.

    **Rules.** numpy and `math`; the graded cell holds everything the functions use, imports
    included. While grading, torch is not installed, and lib's cross-entropy, log-softmax,
    schedule and AdamW raise an error.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    One property per cell. The loss against a plain formula on small logits, its gradient against
    central differences, and the loss of huge logits, which a softmax computed naively turns into
    `nan`:
    """),
    check('''
    logits = rng.normal(0, 2, (2, 3, 5))                       # (B, T, V) = (2, 3, 5)
    targets = rng.integers(0, 5, (2, 3))                       # (B, T)
    loss, dlogits = cross_entropy(logits, targets)
    p = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)  # fine for small logits
    plain = -np.mean(np.log(np.take_along_axis(p, targets[..., None], axis=-1)))
    expect_close("loss", loss, plain, rtol=1e-12)
    expect_shape("dlogits", dlogits, logits.shape, np.float64)
    expect_grad("dlogits", lambda z: cross_entropy(z, targets)[0],
                lambda z: cross_entropy(z, targets)[1], logits, axes="btv")
    '''),
    check('''
    huge = np.array([[[3e3, 0.0, -3e3], [1e4, 1e4 - 2.0, 0.0]]], np.float32)   # (1, 2, 3)
    loss, dlogits = cross_entropy(huge, np.array([[1, 1]]))
    expect_close("loss of huge logits", loss, (3e3 + 2.0 + math.log1p(math.exp(-2.0))) / 2,
                 rtol=1e-6)
    expect_shape("dlogits of float32 logits", dlogits, huge.shape, np.float32)
    '''),
    md("""
    The schedule of a short run (warmup 20 steps to 1e-2, cosine to 1e-3 at step 200):
    """),
    check('''
    steps = np.arange(240)
    lrs = np.array([lr_at(s, 1e-2, 1e-3, 20, 200) for s in steps])
    expect_close("warmup: steps 0, 9, 19", lrs[[0, 9, 19]], np.array([5e-4, 5e-3, 1e-2]),
                 rtol=1e-12)
    '''),
    check('''
    expect_close("cosine: steps 20, 110, 200, 239", lrs[[20, 110, 200, 239]],
                 np.array([1e-2, 5.5e-3, 1e-3, 1e-3]), rtol=1e-12)
    plt.figure(figsize=(5, 2.5))
    plt.plot(steps, lrs)
    plt.xlabel("step"); plt.ylabel("learning rate")
    plt.show()
    '''),
    md("""
    Your AdamW against torch's, 50 steps on a small problem with the parameter names of a GPT: the
    weight matrices decay, the bias and the LayerNorm gain do not. torch gets the same two groups
    (decay and no decay) and the same learning rate at every step.
    """),
    check('''
    shapes = {"h.0.mlp.c_fc.weight": (6, 4), "h.0.mlp.c_fc.bias": (6,),
              "h.0.ln_2.weight": (4,), "wte.weight": (7, 4)}
    start = {name: rng.standard_normal(shape) for name, shape in shapes.items()}
    target = {name: rng.standard_normal(shape) for name, shape in shapes.items()}
    settings = dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)

    # one step with a zero gradient: only the decay moves the weight matrices
    params = {name: p.copy() for name, p in start.items()}
    zeros = {name: np.zeros_like(p) for name, p in params.items()}
    m, v = ({n: z.copy() for n, z in zeros.items()} for _ in range(2))
    adamw_step(params, zeros, m, v, 1, 1e-2, **settings)
    moved = np.abs(params["wte.weight"] - start["wte.weight"])     # (7, 4)
    if np.allclose(moved, 1e-2, rtol=1e-3):
        raise CheckFailed("adamw_step: with a zero gradient one step moves every decayed "
                          "weight by lr, whatever its size: the decay went into the "
                          "gradient (Adam with L2), and Adam's normalised step hid its "
                          "size; AdamW decouples it, shrinking the weight itself, apart "
                          "from the gradient")

    params = {name: p.copy() for name, p in start.items()}
    exp_avg = {name: np.zeros_like(p) for name, p in params.items()}
    exp_avg_sq = {name: np.zeros_like(p) for name, p in params.items()}
    tensors = {name: torch.tensor(p, requires_grad=True) for name, p in start.items()}
    groups = [
        {"params": [t for n, t in tensors.items() if t.ndim == 2], "weight_decay": 0.1},
        {"params": [t for n, t in tensors.items() if t.ndim != 2], "weight_decay": 0.0},
    ]
    reference = torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    for step in range(1, 51):
        lr = lr_at(step - 1, 1e-2, 1e-3, 10, 50)
        # the loss sum((p - target)^2) / 2
        grads = {name: p - target[name] for name, p in params.items()}
        adamw_step(params, grads, exp_avg, exp_avg_sq, step, lr, **settings)
        for group in reference.param_groups:
            group["lr"] = lr
        for name, t in tensors.items():
            t.grad = t.detach() - torch.tensor(target[name])
        reference.step()
    for name, t in tensors.items():
        expect_close(f"{name} after 50 steps", params[name], t.detach().numpy(), rtol=1e-9,
                     atol=1e-12)
    '''),
    md(r"""
    ## Your pieces train a model

    A tiny numpy-twin model (2 layers, 32 wide, bytes) trained for 60 steps on Shakespeare twice,
    from the same weights on the same batches: once with your loss, schedule and AdamW, once with
    lib's `train_step`. The losses must agree step for step (float64, so only rounding differs).
    """),
    uses('''
    from lib.config import GPTConfig
    from lib.data import get_batch, load_corpus
    from lib.numpy_twin import GPT, AdamW, train_step
    from lib.schedule import lr_at as lib_lr_at

    config = GPTConfig(vocab_size=256, n_ctx=16, n_layer=2, n_head=2, n_embd=32)
    train_ids, _ = load_corpus("shakespeare", "byte")
    batches = [get_batch(train_ids, 4, 16, np.random.default_rng(s)) for s in range(60)]
    schedule = dict(lr=3e-3, min_lr=3e-4, warmup_iters=10, max_iters=60)

    yours = GPT(config, seed=0, dtype=np.float64)
    params = dict(yours.named_parameters())
    exp_avg = {name: np.zeros_like(p) for name, p in params.items()}
    exp_avg_sq = {name: np.zeros_like(p) for name, p in params.items()}
    your_losses = []
    for step, (x, y) in enumerate(batches):
        yours.zero_grad()
        loss, dlogits = cross_entropy(yours.forward(x), y)
        yours.backward(dlogits)
        adamw_step(params, yours.grads, exp_avg, exp_avg_sq, step + 1,
                   lr_at(step, **schedule), betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
        your_losses.append(loss)

    libs = GPT(config, seed=0, dtype=np.float64)
    optimizer = AdamW(libs.named_parameters(), betas=(0.9, 0.99), eps=1e-8,
                      weight_decay=0.1)
    lib_losses = [
        train_step(libs, optimizer, [(x, y)], lib_lr_at(step, **schedule), grad_clip=0)[0]
        for step, (x, y) in enumerate(batches)
    ]
    expect_close("losses, yours against lib's", np.array(your_losses), np.array(lib_losses),
                 rtol=1e-9)
    print(f"loss {your_losses[0]:.3f} -> {your_losses[-1]:.3f} in {len(batches)} steps")
    plt.figure(figsize=(5, 2.5))
    plt.plot(your_losses, label="yours"); plt.plot(lib_losses, "--", label="lib")
    plt.xlabel("step"); plt.ylabel("training loss"); plt.legend()
    plt.show()
    '''),
    md("""
    ## Compare with lib

    lib's versions, now that yours work: the numpy twin's loss (through its log-softmax) and AdamW,
    which updates the arrays with one scratch array at a time, and the schedule from `lib.train`.
    Open the cell below once your checks pass.
    """),
    collapsed('''
    import lib.numpy_twin.train as nt_train
    from lib.display import show
    from lib.schedule import lr_at as lib_lr_at

    show(nt_train.log_softmax, nt_train.cross_entropy, lib_lr_at,
         nt_train.AdamW)
    '''),
    md("""
    ## Going further

    - Put `eps` inside the square root, $\\sqrt{\\hat v + \\epsilon}$: for which gradients does the
      step change, and by how much?
    - Drop the bias correction: how large are the first steps compared with AdamW's, with
      $\\beta_2 = 0.999$?
    """),
]
