"""Exercise 5.2: a loss plotter that smooths the curve and finds its three phases, defined exactly."""
from build_notebooks import check, code, graded, md, setup, task, uses


STUB = '''
import numpy as np


def smooth(losses, window):
    """Trailing mean: s[t] = mean(losses[max(0, t - window + 1) : t + 1]). -> float64
    array, same length. window: an integer >= 1, else ValueError."""
    raise NotImplementedError("exercise 5.2: write smooth")


def drop_rate(losses, window):
    """r[t] = (s[t - window] - s[t]) / window for t >= window (s = smooth(losses,
    window)), NaN for t < window. -> float64 array, same length."""
    raise NotImplementedError("exercise 5.2: write drop_rate")


def find_phases(losses, window=50, fast=0.3, plateau=0.03):
    """(end_fast, start_plateau), as defined in the exercise; each an int, or None if
    it never happens."""
    raise NotImplementedError("exercise 5.2: write find_phases")
'''

ANSWER = '''
import numpy as np


def smooth(losses, window):
    """Trailing mean: s[t] = mean(losses[max(0, t - window + 1) : t + 1]). -> float64
    array, same length. window: an integer >= 1, else ValueError."""
    if int(window) != window or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    x = np.asarray(losses, np.float64)              # (N,)
    totals = np.concatenate([[0.0], np.cumsum(x)])  # (N + 1,): totals[i] = sum of x[:i]
    end = np.arange(1, len(x) + 1)                  # (N,): each window is x[start:end]
    start = np.maximum(0, end - window)
    return (totals[end] - totals[start]) / (end - start)


def drop_rate(losses, window):
    """r[t] = (s[t - window] - s[t]) / window for t >= window (s = smooth(losses,
    window)), NaN for t < window. -> float64 array, same length."""
    s = smooth(losses, window)
    r = np.full(len(s), np.nan)
    r[window:] = (s[:-window] - s[window:]) / window
    return r


def find_phases(losses, window=50, fast=0.3, plateau=0.03):
    """(end_fast, start_plateau), as defined in the exercise; each an int, or None if
    it never happens."""
    if not 0 < plateau < fast < 1:
        raise ValueError(f"need 0 < plateau < fast < 1, got fast={fast!r}, "
                         f"plateau={plateau!r}")
    if len(losses) <= window:
        raise ValueError(f"need more than window={window} losses, got {len(losses)}")
    r = drop_rate(losses, window)
    peak = int(np.nanargmax(r))                         # the first of the largest rates
    if not r[peak] > 0:
        raise ValueError("the smoothed loss never falls")
    after = np.flatnonzero(r[peak + 1:] < fast * r[peak])
    if len(after) == 0:
        return None, None
    end_fast = peak + 1 + int(after[0])
    flat = np.flatnonzero(r[end_fast:] < plateau * r[peak])
    return end_fast, (end_fast + int(flat[0]) if len(flat) else None)
'''

PLOT_STUB = '''
def plot_phases(losses, phases=None, window=50, log=False, ax=None):
    """Raw losses (faint), smoothed losses, and, if phases = (end_fast,
    start_plateau) is given, the three phases marked. log: a logarithmic loss axis.
    Returns the matplotlib Axes."""
    raise NotImplementedError("exercise 5.2: write plot_phases")
'''

PLOT_ANSWER = '''
import matplotlib.pyplot as plt


def plot_phases(losses, phases=None, window=50, log=False, ax=None):
    """Raw losses (faint), smoothed losses, and, if phases = (end_fast,
    start_plateau) is given, the three phases marked. log: a logarithmic loss axis.
    Returns the matplotlib Axes."""
    ax = ax or plt.gca()
    steps = np.arange(len(losses))
    ax.plot(steps, losses, color="tab:blue", alpha=0.25, lw=0.8, label="loss")
    ax.plot(steps, smooth(losses, window), color="tab:blue", lw=2,
            label=f"mean of the last {window}")
    if phases is not None:
        edges = (
            [0] + [t if t is not None else len(losses) for t in phases] + [len(losses)]
        )
        names = ("fast drop", "slower middle", "plateau")
        for (lo, hi), name, color in zip(zip(edges, edges[1:]), names,
                                         ("tab:red", "tab:orange", "tab:green")):
            if hi > lo:
                ax.axvspan(lo, hi, color=color, alpha=0.12, label=name)
        for t in phases:
            if t is not None:
                ax.axvline(t, color="black", ls="--", lw=1)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss" + (" (log scale)" if log else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax
'''

CELLS = [
    md(r"""
    # Exercise 5.2: A loss plotter that finds the phases

    *This exercise follows [chapter 5, Training](../chapters/05_training.ipynb).*

    A training loss curve has a typical shape: a fast initial drop (the model learns the easy
    statistics, such as which bytes are common), a slower middle, and a plateau where it improves
    only a little per step. In this exercise you train a small model for 1,000 steps, plot its raw and
    smoothed loss, and write a function that finds the three phases, with the boundaries defined
    exactly below so that any two correct programs find the same steps.

    **What is graded.** The cell tagged `graded:ch5_loss_plotter` (`smooth`, `drop_rate`, `find_phases`). A grader
    runs that cell alone, in a sandbox, on hidden synthetic curves whose boundaries are known. The
    plotting function is yours to write but not graded. Keep your answers in the graded cell. Edge
    tests (bad arguments that must raise, curves where a constant answer is right) count only once
    every other test of the same function passes, so that an answer that does almost nothing cannot
    collect points.
    """),
    setup(),
    md("""
    The next cell is the one place that chooses the exercise's sizes. On a CPU: a 2-layer, 64-wide
    byte-level model (context 64), batches of 8, 1,000 steps: enough for the curve to reach its
    plateau, and about half a minute on two cores because the model is this small. With a GPU: the
    small preset (4 layers, 128 wide) with batches of 32.
    """),
    code('''
    import numpy as np
    import torch

    from lib.config import GPTConfig
    from lib.scale import device, gpu_or_tiny, gpu_scale, where

    GPU = gpu_scale()
    DEVICE = device()
    # tiny (a CPU standing in for a GPU): past the fast drop
    STEPS = gpu_or_tiny(1000, 200) if GPU else 1000
    if GPU:
        CONFIG, BATCH = gpu_or_tiny((GPTConfig.small(), 32),
                                    (GPTConfig.small(n_layer=2, n_embd=64), 8))
    else:
        CONFIG, BATCH = GPTConfig.small(n_layer=2, n_embd=64), 8
    print(f"{where()}: {CONFIG.n_layer} layers, {CONFIG.n_embd} wide, batches of {BATCH} "
          f"x {CONFIG.n_ctx}, {STEPS} steps")
    '''),
    md("""
    ## A loss curve

    The torch twin trained with `lib.train` (AdamW, 100 warmup steps, then cosine decay). The history
    holds the training loss of every step, and the validation loss every 100 steps.
    """),
    code('''
    from lib.config import TrainConfig
    from lib.data import load_corpus
    from lib.torch_twin import GPT
    from lib.train import train

    train_ids, val_ids = load_corpus("shakespeare", "byte")
    torch.manual_seed(0)
    settings = TrainConfig(max_iters=STEPS, batch_size=BATCH, lr=3e-3, min_lr=3e-4,
                           warmup_iters=100, eval_interval=100, eval_iters=10, seed=0,
                           device=DEVICE)
    history = train(GPT(CONFIG, seed=0), train_ids, val_ids, settings)
    losses = np.array(history["train_loss"])               # (STEPS,)
    if len(losses) != STEPS or losses[-100:].mean() > losses[:10].mean() - 2:
        raise RuntimeError(f"the training run should give {STEPS} losses falling by more "
                           f"than 2; got {len(losses)}, from {losses[:10].mean():.2f} to "
                           f"{losses[-100:].mean():.2f}")
    print(f"training loss: first 10 steps {losses[:10].mean():.2f}, last 100 steps "
          f"{losses[-100:].mean():.2f}")
    '''),
    md(r"""
    ## The definitions

    Let $x_0, \dots, x_{N-1}$ be the losses, one per step.

    1. **Smoothing** (`smooth(losses, window)`): the trailing mean of the last `window` losses,
       $s_t = \frac{1}{t - a_t + 1}\sum_{i=a_t}^{t} x_i$ with $a_t = \max(0,\, t - w + 1)$; the first
       $w - 1$ steps average the fewer losses there are. `window` must be an integer $\ge 1$ (else
       `ValueError`). Returns float64, length $N$.
    2. **Drop rate** (`drop_rate(losses, window)`): how much the smoothed loss fell per step over the
       last `window` steps, $r_t = (s_{t-w} - s_t)/w$ for $t \ge w$, and NaN for $t < w$. Positive
       while the loss falls. Returns float64, length $N$.
    3. **Phases** (`find_phases(losses, window=50, fast=0.3, plateau=0.03)`): let $r_{\max}$ be the
       largest drop rate and $t^*$ its step (the first one, if several tie).
       - The fast drop ends at `end_fast`, the first $t > t^*$ with $r_t < \text{fast}\cdot r_{\max}$.
       - The plateau starts at `start_plateau`, the first $t \ge$ `end_fast` with
         $r_t < \text{plateau}\cdot r_{\max}$.
       - Return the pair `(end_fast, start_plateau)` of ints; either is `None` when it never happens
         (and `start_plateau` is `None` whenever `end_fast` is).
       - Raise `ValueError` if `len(losses) <= window`, if $r_{\max} \le 0$ (the smoothed loss
         never falls), or unless $0 < \text{plateau} < \text{fast} < 1$.

    The peak, rather than the first rate, is the reference because the first rates average over a
    still-growing window, and because with a learning-rate warmup the loss falls slowly at first.

    Use numpy; the graded cell must hold everything it uses, imports included.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    A curve with known boundaries: it falls by 0.02 per step until step 100, by 0.004 until step 600,
    and by 0.0002 after. With `window=1`, $r_t = x_{t-1} - x_t$ is exactly the slope of step $t$, so
    with `fast=0.5` and `plateau=0.1` the phases change at steps 101 and 601. Then a curve that starts
    slowly, as a warmup does: the thresholds are fractions of the largest rate, not of the first.
    """),
    code('''
    from lib.checks import CheckFailed, expect_close, expect_equal, expect_raises
    '''),
    check('''
    expect_close("smooth([1, 2, 3, 4], 2)", smooth([1.0, 2.0, 3.0, 4.0], 2),
                 np.array([1.0, 1.5, 2.5, 3.5]))
    expect_close("smooth([1, 2, 3], 10)", smooth([1.0, 2.0, 3.0], 10),
                 np.array([1.0, 1.5, 2.0]))
    '''),
    check('''
    expect_close("drop_rate([4, 3, 2.5, 2, 1.9], 2)",
                 drop_rate([4.0, 3.0, 2.5, 2.0, 1.9], 2),
                 np.array([np.nan, np.nan, (4.0 - 2.75) / 2, (3.5 - 2.25) / 2,
                           (2.75 - 1.95) / 2]))
    '''),
    check('''
    slopes = np.concatenate([[0.0], np.full(100, 0.02), np.full(500, 0.004),
                             np.full(399, 0.0002)])                 # (1000,)
    kinked = 5.0 - np.cumsum(slopes)
    expect_equal("find_phases(kinked, window=1, fast=0.5, plateau=0.1)",
                 find_phases(kinked, window=1, fast=0.5, plateau=0.1), (101, 601))
    # a slow start (a warmup) before the fastest
    # drop: the thresholds follow the largest rate
    slopes = np.concatenate([[0.0], np.full(50, 0.002), np.full(100, 0.02),
                             np.full(400, 0.004), np.full(400, 0.0002)])   # (951,)
    expect_equal("find_phases(slow start, fast drop, slower, plateau; window=1)",
                 find_phases(5.0 - np.cumsum(slopes), window=1, fast=0.5, plateau=0.1),
                 (151, 551))
    expect_equal("find_phases(a straight line, window=10)",   # all fast: no end, no plateau
                 find_phases(np.linspace(5, 2, 400), window=10), (None, None))
    for bad in (dict(window=0), dict(fast=0.1, plateau=0.5)):
        expect_raises(f"find_phases(kinked, **{bad})", ValueError, find_phases, kinked,
                      **bad)
    '''),
    md("""
    ## The plot

    Write `plot_phases`: the raw losses faintly, the smoothed ones on top, the three phases shaded
    with the boundaries as vertical lines, and a logarithmic loss axis on request. It is not graded;
    the cell after it draws the curve of the model trained above, twice: linear, and log.
    """),
    task(PLOT_STUB, PLOT_ANSWER),
    uses('''
    import matplotlib.pyplot as plt

    phases = find_phases(losses)
    end_fast, start_plateau = phases
    print(f"phases (window 50, fast 0.3, plateau 0.03): fast drop until step {end_fast}, "
          f"plateau from step {start_plateau}")
    if end_fast is None or (start_plateau is not None and start_plateau <= end_fast):
        raise CheckFailed("find_phases(losses): expected the end of the fast drop, then "
                          f"a later plateau (or None), got {phases}")

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    plot_phases(losses, phases, ax=axes[0])
    plot_phases(losses, phases, log=True, ax=axes[1])
    for ax in axes:
        ax.plot(history["eval_step"], history["val_loss"], "o", ms=3, color="black",
                label="validation")
    axes[0].set_title("linear"); axes[1].set_title("log scale")
    plt.tight_layout()
    plt.show()
    '''),
    md("""
    The validation loss (the dots) follows the training loss through all three phases. A plateau is a
    slowdown of learning, not overfitting: overfitting would show as a validation loss that turns
    upward while the training loss keeps falling, which takes a much longer run on a corpus this size.

    The log scale stretches the bottom of the curve: the slower middle and the plateau, squeezed into
    a thin band on the linear plot, become readable. Note how the smoothed curve trails the raw one
    during the fast drop: a trailing mean of 50 steps describes, on average, the model of 25 steps
    earlier, so the boundaries it finds come a little after the bends a reader sees in the raw losses.

    ## Going further

    - How do the boundaries move with `window`? With the learning rate?
    - Find the phases of the validation loss instead: what must change when there is one value every
      100 steps?
    """),
]
