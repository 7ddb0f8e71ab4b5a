"""Exercise 5.3: the training loop: random batches, a step with gradient accumulation and
clipping, evaluation, and the loop that trains the small preset."""
from build_notebooks import check, code, collapsed, graded, md, setup, uses

STUB = '''
import math

import numpy as np

from lib.numpy_twin.train import cross_entropy   # exercise 5.1's (yours works as well)
from lib.schedule import lr_at                   # exercise 5.1's (yours works as well)


def get_batch(ids, batch_size, block_size, rng):
    """ids (N,) token ids; rng a numpy Generator. -> x, y (batch_size, block_size)
    int64: windows of the ids at random starts, drawn in one call
    rng.integers(0, len(ids) - block_size, size=batch_size), and y the same windows
    shifted by one token."""
    raise NotImplementedError("exercise 5.3: write get_batch")


def train_step(model, micro_batches, optimizer, max_norm):
    """One optimizer step on the mean loss of the micro-batches [(x, y), ...], each
    (b, T), the gradients clipped to a global norm of max_norm (0: no clipping).
    -> (mean loss, global gradient norm before clipping)"""
    raise NotImplementedError("exercise 5.3: write train_step")


def estimate_loss(model, batches):
    """The mean loss over [(x, y), ...] in evaluation mode, leaving the gradients, the
    weights and the model's mode as they were. -> float"""
    raise NotImplementedError("exercise 5.3: write estimate_loss")


def train_loop(model, optimizer, train_ids, val_ids, config):
    """Train `model` as lib.train.train does with `config` (a TrainConfig). -> history,
    a dict of lists: "step", "train_loss", "lr", "grad_norm", "eval_step",
    "eval_train_loss", "val_loss"."""
    raise NotImplementedError("exercise 5.3: write train_loop")
'''

ANSWER = '''
import math

import numpy as np

from lib.numpy_twin.train import cross_entropy   # exercise 5.1's (yours works as well)
from lib.schedule import lr_at                   # exercise 5.1's (yours works as well)


def get_batch(ids, batch_size, block_size, rng):
    """ids (N,) token ids; rng a numpy Generator. -> x, y (batch_size, block_size)
    int64: windows of the ids at random starts, drawn in one call
    rng.integers(0, len(ids) - block_size, size=batch_size), and y the same windows
    shifted by one token."""
    if len(ids) <= block_size:
        raise ValueError(f"{len(ids)} ids hold no window of block_size + 1 = "
                         f"{block_size + 1} tokens")
    # (B,): the last start, N - T - 1, begins the last window
    starts = rng.integers(0, len(ids) - block_size, size=batch_size)
    positions = starts[:, None] + np.arange(block_size + 1)     # (B, T + 1)
    windows = np.asarray(ids)[positions].astype(np.int64)       # (B, T + 1) ids
    return windows[:, :-1], windows[:, 1:]                      # (B, T) each


def global_norm(grads):
    """The L2 norm of all the gradients taken together, as one long vector."""
    return math.sqrt(sum(float((g * g).sum()) for g in grads.values()))


def train_step(model, micro_batches, optimizer, max_norm):
    """One optimizer step on the mean loss of the micro-batches [(x, y), ...], each
    (b, T), the gradients clipped to a global norm of max_norm (0: no clipping).
    -> (mean loss, global gradient norm before clipping)"""
    model.zero_grad()                        # backward adds: start this step from 0
    k = len(micro_batches)
    loss = 0.0
    for x, y in micro_batches:
        micro_loss, dlogits = cross_entropy(model.forward(x), y)   # (b, T, V)
        model.backward(dlogits / k)          # each micro-batch is 1/k of the mean
        loss += micro_loss / k
    grads = model.grads                      # {name: gradient}: the model's arrays
    norm = global_norm(grads)
    if max_norm and norm > max_norm:
        for g in grads.values():
            g *= max_norm / (norm + 1e-6)    # one factor for all: the direction stays
    optimizer.step(grads)
    return loss, norm


def estimate_loss(model, batches):
    """The mean loss over [(x, y), ...] in evaluation mode, leaving the gradients, the
    weights and the model's mode as they were. -> float"""
    was_training = model.training
    model.eval()                             # no dropout: the model as it is used
    try:
        losses = [cross_entropy(model.forward(x), y)[0] for x, y in batches]
    finally:
        model.train(was_training)
    return float(np.mean(losses))


def train_loop(model, optimizer, train_ids, val_ids, config):
    """Train `model` as lib.train.train does with `config` (a TrainConfig). -> history,
    a dict of lists: "step", "train_loss", "lr", "grad_norm", "eval_step",
    "eval_train_loss", "val_loss"."""
    c = config
    B, T = c.batch_size, c.block_size or model.config.n_ctx
    rng = np.random.default_rng(c.seed)              # the training batches
    eval_rng = np.random.default_rng(c.seed + 1)     # the evaluation batches, once
    fixed = {name: [get_batch(ids, B, T, eval_rng) for _ in range(c.eval_iters)]
             for name, ids in (("train", train_ids), ("val", val_ids))}
    history = {key: [] for key in ("step", "train_loss", "lr", "grad_norm", "eval_step",
                                   "eval_train_loss", "val_loss")}
    for step in range(c.max_iters + 1):
        if step % c.eval_interval == 0 or step == c.max_iters:
            history["eval_step"].append(step)
            history["eval_train_loss"].append(estimate_loss(model, fixed["train"]))
            history["val_loss"].append(estimate_loss(model, fixed["val"]))
        if step == c.max_iters:
            break
        x, y = get_batch(train_ids, B * c.grad_accum, T, rng)     # (B k, T) each
        micro = [(x[i:i + B], y[i:i + B]) for i in range(0, len(x), B)]   # k of (B, T)
        optimizer.lr = lr_at(step, c.lr, c.min_lr, c.warmup_iters, c.max_iters)
        loss, norm = train_step(model, micro, optimizer, c.grad_clip)
        history["step"].append(step + 1)
        history["train_loss"].append(loss)
        history["lr"].append(optimizer.lr)
        history["grad_norm"].append(norm)
    return history
'''

# The formulas the answer is, as the hints write them: shown only in a hint's last stage
# (tests/test_staged_hints.py).
FINAL_FORMULAS = [
    "divide each micro-batch's `dlogits` by $k$",
    r"\sqrt{\sum_{\text{tensors}} \sum g^2}",
    r"\text{max\_norm} / (\lVert g \rVert + 10^{-6})",
]

CELLS = [
    md(r"""
    # Exercise 5.3: The training loop

    This exercise follows [chapter 5](../chapters/05_training.ipynb), where lib's `train` ran the
    loop for you. Here you write it: random batches cut from a token array, one optimizer step
    with gradient accumulation and clipping, an estimate of the loss that leaves the model as it
    was, and the loop around them. Your loop then trains the small preset on Shakespeare, and its
    loss curve is plotted at the end.

    **What is graded.** The cell tagged `graded:ch5_training_loop`, with `get_batch`,
    `train_step`, `estimate_loss` and `train_loop` (JupyterLab shows a cell's tags in its property
    inspector; Colab keeps them without showing them). A grader runs that cell alone, in a
    sandbox, and calls your functions on hidden inputs with a small model; nothing else in this
    notebook is graded. `train_loop` is graded apart from the other three: while it runs, the
    grader replaces your `train_step` and `estimate_loss` with stand-ins that record how your loop
    calls them (so call them by these names), and a mistake in a step costs the step's points
    only; one last test trains for real and compares the whole history with lib's `train`. The
    batches your loop draws come from your `get_batch`. Some hidden tests are *edge
    tests*: cases a function that does almost nothing also gets right (an evaluation that leaves
    the gradients alone, say). An edge test counts only once every other test of the same function
    passes, so that an empty answer cannot collect points.
    """),
    setup(),
    md(r"""
    ## What to write

    **`get_batch(ids, batch_size, block_size, rng)`.** A training example is a window of
    $T + 1$ consecutive ids: the first $T$ are the inputs `x`, the last $T$ the targets `y`.
    Draw the `batch_size` starts in one call, `rng.integers(0, len(ids) - block_size,
    size=batch_size)` (lib's draw, so that the same Generator gives the same batches as lib's
    `get_batch`), and return int64 arrays. Check that the last window of `ids` can be drawn:
    `rng.integers` never returns its upper bound.

    **`train_step(model, micro_batches, optimizer, max_norm)`** takes one optimizer step and
    returns `(loss, norm)`. `model` is a numpy-twin GPT: `model.forward(x)` gives the logits,
    `model.backward(dlogits)` *adds* the gradients into `model.grads` (a dict of arrays), and
    `model.zero_grad()` sets them to 0. `optimizer` is anything with an `lr` and a
    `step(grads)`: lib's `AdamW`, or your exercise 5.1 `adamw_step` in a small class (hint below).

    - *Gradient accumulation.* A batch too large for memory is cut into $k$ micro-batches of
      equal size, run one after the other, and their gradients are added before the single update.
      The step must equal one step on the whole batch: work out what the loss of the whole batch
      is in terms of the micro-batches' mean losses, and so what each micro-batch's backward must
      add. Return that loss.
    - *Clipping.* When the gradient's norm exceeds `max_norm`, scale it down to `max_norm`. Which
      norm? Think about what happens to the direction of the update if each tensor is shortened
      by its own factor, and what if all of them share one. Return the norm *before* clipping
      (the number you watch for spikes). `max_norm = 0` turns clipping off, as `grad_clip = 0`
      does in `TrainConfig`.

    **`estimate_loss(model, batches)`** returns the mean loss over the batches, measured on the
    model as it will be used: in evaluation mode (chapter 5's dropout off). It runs between two
    steps of training, so it must leave the gradients, the weights and the model's mode as they
    were: no backward pass, and `model.train(...)` back to the mode the model was in
    (`model.training`).

    **`train_loop(model, optimizer, train_ids, val_ids, config)`** trains as lib's
    `lib.train.train(model, train_ids, val_ids, config)` does, batch for batch, so that the two can
    be compared step by step. With `c = config` (a `lib.config.TrainConfig`) and
    `T = c.block_size or model.config.n_ctx`:

    - before training, draw the evaluation batches once, from
      `np.random.default_rng(c.seed + 1)`: `c.eval_iters` batches of `c.batch_size` windows of the
      training ids, then as many of the validation ids. Every evaluation uses these same batches;
    - evaluate (both splits, `estimate_loss`) at step 0, every `c.eval_interval` steps and after
      the last step (`c.max_iters`), recording `eval_step`, `eval_train_loss` and `val_loss`;
    - step `s` (0, 1, ..., `c.max_iters - 1`) draws one batch of `c.batch_size * c.grad_accum`
      windows from the Generator `np.random.default_rng(c.seed)` (one for the whole run), cuts it
      in order into `c.grad_accum` micro-batches, sets
      `optimizer.lr = lr_at(s, c.lr, c.min_lr, c.warmup_iters, c.max_iters)` and calls your
      `train_step` with `max_norm = c.grad_clip`; it records `step` (`s + 1`, the steps taken),
      `train_loss`, `lr` and `grad_norm`.

    `history` is a dict of those seven lists, the keys of lib's history, so that
    `lib.plotting.plot_losses(history)` draws it.

    :::{admonition} Accumulation and clipping, hint 1 of 3: the idea
    :class: dropdown
    The gradient of a sum is the sum of the gradients, and a backward pass adds into the
    gradients: so the whole batch's gradient is what the micro-batches' backward passes add up
    to, once each is weighted by its share in the whole batch's loss. For clipping, every
    tensor's gradient is one piece of one long vector, the gradient of all the weights: clip
    that vector.
    :::

    :::{admonition} Accumulation and clipping, hint 2 of 3: the intermediate step
    :class: dropdown
    With $k$ micro-batches of equal size and mean losses $L_1, \dots, L_k$, the whole batch's mean
    loss is $L = \frac{1}{k}\sum_i L_i$. The length of the long vector is the square root of the
    sum of the squares of every entry of every gradient; scaling all of its pieces by one
    factor keeps its direction.
    :::

    :::{admonition} Accumulation and clipping, hint 3 of 3: the formulas
    :class: dropdown
    $\nabla L = \sum_i \frac{1}{k}\nabla L_i$: divide each micro-batch's `dlogits` by $k$ before
    its backward, and the additions do the rest. Clipping uses the global norm
    $\lVert g \rVert = \sqrt{\sum_{\text{tensors}} \sum g^2}$ and multiplies *every* gradient by
    $\text{max\_norm} / (\lVert g \rVert + 10^{-6})$ when that factor is below 1 (torch's
    `clip_grad_norm_`): the update keeps its direction and only gets shorter.
    :::

    :::{admonition} Hint: your exercise 5.1 AdamW as an optimizer
    :class: dropdown
    ```python
    class MyAdamW:
        def __init__(self, params, lr, betas, weight_decay):
            self.params = dict(params)
            self.lr, self.betas, self.weight_decay, self.t = lr, betas, weight_decay, 0
            self.m = {n: np.zeros_like(p) for n, p in self.params.items()}
            self.v = {n: np.zeros_like(p) for n, p in self.params.items()}

        def step(self, grads):
            self.t += 1
            adamw_step(self.params, grads, self.m, self.v, self.t, self.lr, self.betas,
                       1e-8, self.weight_decay)
    ```
    :::

    **Rules.** numpy and `math`; the graded cell holds everything it uses, imports included. You
    may import exercise 5.1's pieces from lib (`cross_entropy`, `lr_at`, `AdamW`) or paste your
    own, and lib's `clip_grad_norm`, which chapter 5 shows. While grading, lib's `get_batch`,
    `BatchSampler`, `train_step`, `estimate_loss`, `train` and `evaluate_loss` raise an error.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    One property per cell. The model is a numpy-twin GPT of 1 layer, 16 wide, over bytes, in
    float64; `Recorder` is an optimizer that only keeps a copy of the gradients each `step` is
    given and leaves the weights alone, so that two calls of `train_step` can be compared.
    """),
    code('''
    import dataclasses
    import time

    import matplotlib.pyplot as plt
    import numpy as np

    from lib.checks import CheckFailed, expect_close, expect_equal, expect_shape
    from lib.config import GPTConfig, TrainConfig
    from lib.data import get_batch as lib_get_batch, load_corpus
    from lib.numpy_twin import GPT, AdamW
    from lib.numpy_twin.train import cross_entropy as lib_cross_entropy
    from lib.plotting import plot_losses
    from lib.train import train

    train_ids, val_ids = load_corpus("shakespeare", "byte")       # uint16 byte ids
    TINY = GPTConfig(vocab_size=256, n_ctx=16, n_layer=1, n_head=2, n_embd=16)
    rng = np.random.default_rng(53)


    def tiny_model(**changes):
        return GPT(dataclasses.replace(TINY, **changes), seed=0, dtype=np.float64)


    class Recorder:
        """step(grads) keeps a copy of the gradients and leaves the weights alone."""
        lr = 0.0

        def __init__(self):
            self.seen = []

        def step(self, grads):
            self.seen.append({name: g.copy() for name, g in grads.items()})


    def flat(grads):
        """All gradients as one vector (B*T*... values in the model's order)."""
        return np.concatenate([g.ravel() for g in grads.values()])


    x, y = lib_get_batch(train_ids, 4, 16, rng)                   # (4, 16) each
    '''),
    check('''
    ids = np.arange(100, dtype=np.uint16)      # id t at position t: a window is a run
    bx, by = get_batch(ids, 4, 8, np.random.default_rng(0))
    expect_shape("get_batch: x, int64", bx, (4, 8), np.int64)
    expect_shape("get_batch: y, int64", by, (4, 8), np.int64)
    expect_equal("get_batch: each window is a run of consecutive ids", bx - bx[:, :1],
                 np.tile(np.arange(8), (4, 1)), axes="bt")
    expect_equal("get_batch: y is x shifted by one token", by, bx + 1, axes="bt")
    '''),
    check('''
    bx, _ = get_batch(np.arange(10), 200, 8, np.random.default_rng(1))   # starts: 0 or 1
    if bx[:, 0].max() < 1:
        raise CheckFailed("get_batch: 10 ids and windows of 8 + 1 allow starts 0 and 1, "
                          "but 1 never came in 200 draws: rng.integers(0, high) never "
                          "returns high itself")
    for seed in range(3):
        got = get_batch(train_ids, 6, 16, np.random.default_rng(seed))
        want = lib_get_batch(train_ids, 6, 16, np.random.default_rng(seed))
        expect_equal(f"get_batch: the windows of lib's draw, seed {seed}", got[0], want[0],
                     axes="bt")
    '''),
    check('''
    model = tiny_model()
    whole, parts = Recorder(), Recorder()
    loss_whole, _ = train_step(model, [(x, y)], whole, 1e9)        # 1e9: no clipping
    ones = [(x[i:i + 1], y[i:i + 1]) for i in range(4)]             # 4 of (1, 16)
    loss_parts, _ = train_step(model, ones, parts, 1e9)
    expect_equal("train_step: optimizer.step calls per step", len(parts.seen), 1)
    ratio = np.linalg.norm(flat(parts.seen[0])) / np.linalg.norm(flat(whole.seen[0]))
    if abs(ratio - 4) < 1e-6:
        raise CheckFailed("train_step: the gradient of 4 micro-batches is 4x the full "
                          "batch's: divide each micro-batch's gradient by the number of "
                          "micro-batches")
    expect_close("train_step: the gradient of 4 micro-batches of 1 window, 1 batch of 4",
                 flat(parts.seen[0]), flat(whole.seen[0]), rtol=1e-9, atol=1e-12)
    expect_close("train_step: the loss of 4 micro-batches (their mean)", loss_parts,
                 loss_whole, rtol=1e-12)
    '''),
    check('''
    model, twice = tiny_model(), Recorder()
    train_step(model, [(x, y)], twice, 1e9)
    train_step(model, [(x, y)], twice, 1e9)    # Recorder moved no weight: the same again
    first, second = flat(twice.seen[0]), flat(twice.seen[1])
    if np.allclose(second, 2 * first):
        raise CheckFailed("train_step: the second step's gradient is twice the first's: "
                          "the first step's gradients were kept; zero them at the start "
                          "of each step")
    expect_close("train_step: a second step on the same batch gets the same gradient",
                 second, first, rtol=1e-12)
    '''),
    check('''
    free = Recorder()
    _, norm = train_step(model, [(x, y)], free, 1e9)
    expect_close("train_step: the norm is the global norm", norm,
                 np.linalg.norm(flat(free.seen[0])), rtol=1e-9)
    clipped = Recorder()
    _, norm_before = train_step(model, [(x, y)], clipped, norm / 4)
    expect_close("train_step: the norm returned is the one before clipping", norm_before,
                 norm, rtol=1e-9)
    got_norm = np.linalg.norm(flat(clipped.seen[0]))
    if got_norm > norm / 4 * (1 + 1e-5):
        raise CheckFailed(f"train_step: clipped to max_norm = {norm / 4:.4g}, the "
                          f"gradients' global norm is {got_norm:.4g}: scale all gradients "
                          f"by one factor, from their norm together")
    scaled = flat(free.seen[0]) * (norm / 4) / (norm + 1e-6)
    expect_close("train_step: clipped to norm / 4, every gradient by the same factor",
                 flat(clipped.seen[0]), scaled, rtol=1e-5)
    '''),
    check('''
    off = Recorder()
    train_step(model, [(x, y)], off, 0.0)
    expect_close("train_step: max_norm = 0 turns clipping off", flat(off.seen[0]),
                 flat(free.seen[0]), rtol=1e-12)
    '''),
    check('''
    noisy = tiny_model(dropout=0.2)
    batches = [lib_get_batch(val_ids, 2, 16, rng) for _ in range(3)]
    noisy.eval()
    quiet = np.mean([lib_cross_entropy(noisy.forward(bx), by)[0] for bx, by in batches])
    noisy.train()
    expect_close("estimate_loss: 3 batches, dropout 0.2 off (evaluation mode)",
                 estimate_loss(noisy, batches), quiet, rtol=1e-9)
    '''),
    check('''
    noisy.zero_grad()
    noisy.forward(x)
    noisy.backward(rng.standard_normal((4, 16, 256)))    # a step's gradients, not yet used
    grads_before = flat(noisy.grads)
    weights_before = flat(noisy.state_dict())
    estimate_loss(noisy, batches)
    expect_close("estimate_loss: the gradients are untouched", flat(noisy.grads),
                 grads_before, rtol=0)
    expect_close("estimate_loss: the weights are untouched", flat(noisy.state_dict()),
                 weights_before, rtol=0)
    expect_equal("estimate_loss: the model is back in training mode", noisy.training, True)
    '''),
    md(r"""
    The loop, 12 steps of 2 micro-batches of 2 windows with evaluations every 5 steps, against
    lib's `train` on the same settings from the same weights: the same batches, so the same
    history, step by step (float64: only the order of some sums differs).
    """),
    check('''
    settings = TrainConfig(max_iters=12, batch_size=2, grad_accum=2, lr=1e-2, min_lr=1e-3,
                           warmup_iters=3, grad_clip=0.5, eval_interval=5, eval_iters=2,
                           seed=5)


    def adamw(model, settings):
        """AdamW as lib's train builds it for these settings."""
        return AdamW(model.named_parameters(), settings.lr, settings.betas,
                     weight_decay=settings.weight_decay)


    model = tiny_model()
    history = train_loop(model, adamw(model, settings), train_ids, val_ids, settings)
    expect_equal("train_loop: evaluations at step 0, every 5 steps and after the last",
                 history["eval_step"], [0, 5, 10, 12])
    '''),
    check('''
    libs = train(tiny_model(), train_ids, val_ids, settings, progress=False)
    expect_equal("train_loop: history['step']", history["step"], libs["step"])
    for key in ("lr", "train_loss", "grad_norm", "eval_train_loss", "val_loss"):
        expect_close(f"train_loop: history[{key!r}] against lib's train, step by step",
                     np.array(history[key]), np.array(libs[key]), rtol=1e-9)
    '''),
    md(r"""
    ## Your loop trains the small preset

    The small preset (4 layers, 4 heads, 128 wide, context 64, bytes) on Shakespeare, with the
    preset's recipe cut to 100 steps: 8 windows per step as 2 micro-batches of 4, warmup 10 steps,
    clipping at 1.0, evaluations every 25 steps on 4 batches. From $\ln 256 = 5.55$ the validation
    loss falls below 2.75 nats per byte: the model has learnt which bytes are frequent and which
    follow which, not yet words.
    """),
    uses('''
    config = GPTConfig.small()
    settings = TrainConfig.small(max_iters=100, batch_size=4, grad_accum=2, warmup_iters=10,
                                 eval_interval=25, eval_iters=4)
    model = GPT(config, seed=1337)
    start = time.perf_counter()
    history = train_loop(model, adamw(model, settings), train_ids, val_ids, settings)
    seconds = time.perf_counter() - start
    plot_losses(history, window=10)
    plt.show()
    print(f"{settings.max_iters} steps in {seconds:.0f} s; validation loss "
          f"{history['val_loss'][0]:.2f} -> {history['val_loss'][-1]:.2f}")
    assert history["val_loss"][0] > 5.4 and history["val_loss"][-1] < 2.75
    '''),
    md("""
    ## Compare with lib

    lib's versions, now that yours work: `get_batch` from `lib.data`, and the numpy twin's
    `train_step` and `estimate_loss`, which `lib.train.train` calls through the twin's `Trainer`.
    Open the cell below once your checks pass.
    """),
    collapsed('''
    import lib.numpy_twin.train as nt_train
    from lib.display import show

    show(lib_get_batch, nt_train.train_step, nt_train.estimate_loss)
    '''),
    md("""
    ## Going further

    - Train the same 100 steps with 8 micro-batches of 1 window: how much longer does a step take,
      and why is the loss curve the same?
    - Clip each tensor to `max_norm` on its own instead of all together and train again: which
      tensors are shortened most, and how does the update's direction change?
    - Evaluate with `eval_iters = 1` and with 20: how noisy is the validation curve each time?
    """),
]
