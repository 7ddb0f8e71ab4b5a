"""Exercise 4.1: GELU, exact and tanh forms, their derivatives, and a training run with each."""
from build_notebooks import check, code, graded, md, setup, uses


STUB = '''
import math

import numpy as np


def gelu_exact(x):
    """GELU as defined, x * Phi(x). x: array of any shape, float32 or float64 -> same
    shape and dtype."""
    raise NotImplementedError("exercise 4.1: write gelu_exact")


def gelu_exact_grad(x):
    """d gelu_exact(x) / dx, elementwise; same shape and dtype as x."""
    raise NotImplementedError("exercise 4.1: write gelu_exact_grad")


def gelu_tanh(x):
    """GPT-2's tanh approximation of GELU; same shape and dtype as x."""
    raise NotImplementedError("exercise 4.1: write gelu_tanh")


def gelu_tanh_grad(x):
    """d gelu_tanh(x) / dx, elementwise; same shape and dtype as x."""
    raise NotImplementedError("exercise 4.1: write gelu_tanh_grad")
'''

ANSWER = '''
import math

import numpy as np

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
# math.erf is exact to float64 rounding
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _cdf(x64):                                       # Phi(x), float64
    return 0.5 * (1.0 + _erf(x64 / math.sqrt(2.0)))


def gelu_exact(x):
    """GELU as defined, x * Phi(x). x: array of any shape, float32 or float64 -> same
    shape and dtype."""
    x64 = np.asarray(x, np.float64)
    return (x64 * _cdf(x64)).astype(x.dtype)


def gelu_exact_grad(x):
    """d gelu_exact(x) / dx = Phi(x) + x phi(x), elementwise; same shape and dtype as
    x."""
    x64 = np.asarray(x, np.float64)
    # underflows to 0, never overflows
    pdf = np.exp(-0.5 * x64 * x64) / math.sqrt(2.0 * math.pi)
    return (_cdf(x64) + x64 * pdf).astype(x.dtype)


def _tanh_inner(x):                     # t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3)
    # x^3 may overflow to +-inf in float32; tanh(+-inf) = +-1
    with np.errstate(over="ignore"):
        return np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))


def gelu_tanh(x):
    """GPT-2's tanh approximation of GELU; same shape and dtype as x."""
    return 0.5 * x * (1.0 + _tanh_inner(x))


def gelu_tanh_grad(x):
    """d gelu_tanh(x) / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx, elementwise; same
    shape and dtype."""
    t = _tanh_inner(x)
    du_dx = SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)
    # where t^2 = 1 the product term is 0; writing
    # it that way avoids 0 * inf at huge |x|
    sech2 = 1.0 - t * t
    product = np.where(sech2 == 0, 0.0, 0.5 * x * sech2 * du_dx).astype(x.dtype)
    return 0.5 * (1.0 + t) + product
'''

CELLS = [
    md(r"""
    # Exercise 4.1: GELU and its derivative

    *This exercise follows [chapter 4, The full model](../chapters/04_model.ipynb).*

    Between its two linear layers, GPT-2's MLP applies GELU to every one of the $4C$ numbers of
    each position ({cite}`hendrycks2016gaussian`, {cite}`radford2019language`). In this exercise you
    write GELU twice, as defined and in the tanh form GPT-2 uses, together with the derivative of
    each. Then you put your GELU into the numpy twin's MLP, where your derivative drives the
    backward pass, and train the same small model once with ReLU and once with your GELU.

    **What is graded.** The cell tagged `graded:ch4_gelu`, the one with the four functions (JupyterLab
    shows a cell's tags in its property inspector; Colab keeps them without showing them). A grader
    runs that cell alone, in a sandbox, and calls your functions with hidden tests; nothing else in
    this notebook is graded. Write your answer in that cell and keep the cell. The checks below it
    are a first test you can run yourself. Edge tests (large |x| and the empty array, where a ReLU
    is right too) count only once every other test of the same function passes, so that an answer
    that does almost nothing cannot collect points.
    """),
    setup(),
    md("""
    The next cell is the one place that chooses the exercise's sizes. The numpy twin runs on the CPU
    on every machine, so a GPU changes nothing here: a 2-layer, 64-wide model over bytes, trained for
    500 steps per run, takes well under a minute per run on two cores.
    """),
    code('''
    from lib.config import GPTConfig

    CONFIG = GPTConfig.small(n_layer=2, n_head=4, n_embd=64, n_ctx=32, activation="relu")
    STEPS, BATCH = 500, 8           # the same with or without a GPU: numpy never uses it
    print(f"model {CONFIG.n_layer} layers x {CONFIG.n_embd} wide, {STEPS} steps of "
          f"{BATCH} x {CONFIG.n_ctx} tokens")
    '''),
    md(r"""
    ## The two forms

    GELU weighs its input by the probability that a standard normal variable falls below it:

    $$\mathrm{GELU}(x) = x\,\Phi(x), \qquad \Phi(x) = \tfrac12\left(1 + \operatorname{erf}\!\left(x/\sqrt2\right)\right).$$

    Large positive inputs pass almost unchanged, large negative ones become almost 0, and around 0
    the curve bends smoothly, dipping slightly below zero for negative $x$ (ReLU has a corner there).
    GPT-2 was trained with an approximation built from $\tanh$:

    $$\mathrm{GELU}_{\tanh}(x) = \tfrac12\,x\left(1 + \tanh u\right), \qquad u = \sqrt{2/\pi}\,\left(x + 0.044715\,x^3\right).$$

    Its weights were fitted with that form, so it is the one a model loading GPT-2's weights must use.

    **The derivatives** are yours to work out. Two facts help: $\Phi'(x) = \varphi(x) =
    e^{-x^2/2}/\sqrt{2\pi}$, the normal density, and $\frac{d}{du}\tanh u = 1 - \tanh^2 u$. Then it
    is the product rule (and, for the tanh form, the chain rule through $u$).

    **Rules for the graded functions.**
    - `x` is a numpy array of any shape (possibly empty), float32 or float64; return an array of
      the same shape and dtype (the model runs in float32, and a float64 answer would silently
      widen everything after it).
    - Use numpy and `math` (or `scipy.special.erf`): `math.erf` handles one number, and
      `np.vectorize(math.erf, otypes=[np.float64])` applies it to an array. While grading, torch is
      not installed and lib's own GELU functions raise an error.
    - Large inputs must not produce NaN: the hidden tests go up to $|x| = 10^6$ in float64 and
      $10^4$ in float32. Watch for $0 \cdot \infty$ and for `exp` of a large number.
    - Float64 answers are compared with the exact values within $10^{-10} + 10^{-7}|y|$.
    - The graded cell must hold everything the functions use, imports included.
    """),
    graded(STUB, ANSWER),
    md("""
    ## Checks you can run

    The values at a few points come from the definitions with Python's `math` module, one number at
    a time. The derivatives are compared with central differences, $(f(x+h) - f(x-h))/2h$ with
    $h = 10^{-6}$, of the sum of the function's values (`expect_grad`). Each check prints `ok` or
    stops with what differs, and where.
    """),
    code('''
    from lib.checks import CheckFailed, expect_close, expect_grad, expect_shape
    '''),
    check('''
    points = np.array([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0])     # (7,)
    exact = np.array([p * 0.5 * (1 + math.erf(p / math.sqrt(2))) for p in points])
    tanh_form = np.array([0.5 * p * (1 + math.tanh(math.sqrt(2 / math.pi)
                                                   * (p + 0.044715 * p ** 3)))
                          for p in points])
    expect_close("gelu_exact at 7 points", gelu_exact(points), exact, rtol=1e-12,
                 atol=1e-15)
    expect_close("gelu_tanh at 7 points", gelu_tanh(points), tanh_form, rtol=1e-12,
                 atol=1e-15)
    '''),
    check('''
    xs = np.linspace(-6, 6, 241)                                 # (241,)
    for f, df in ((gelu_exact, gelu_exact_grad), (gelu_tanh, gelu_tanh_grad)):
        slope = df(xs)
        if slope.min() >= 0 and slope.max() <= 1:    # GELU dips below 0, then rises past x
            raise CheckFailed(
                f"{df.__name__} stays within [0, 1] on [-6, 6], as the second factor alone "
                "does; GELU's slope is below 0 left of its dip and above 1 near x = 1.5: "
                "the product rule's second term, x times the derivative of the second "
                "factor, is missing")
        expect_grad(f"{df.__name__} on [-6, 6]", lambda x: f(x).sum(), df, xs)
    '''),
    check('''
    x32 = np.linspace(-4, 4, 9, dtype=np.float32).reshape(3, 3)  # (3, 3)
    for f in (gelu_exact, gelu_exact_grad, gelu_tanh, gelu_tanh_grad):
        expect_shape(f"{f.__name__} of a float32 (3, 3) array", f(x32), (3, 3), np.float32)
    '''),
    check('''
    big = np.array([-1e6, -50.0, 50.0, 1e6])  # (4,): GELU is 0 or x there, its slope 0 or 1
    for f, at_big in ((gelu_exact, big.clip(0)), (gelu_exact_grad, big > 0),
                      (gelu_tanh, big.clip(0)), (gelu_tanh_grad, big > 0)):
        expect_close(f"{f.__name__} at x = -1e6, -50, 50, 1e6", f(big),
                     at_big.astype(np.float64), atol=1e-12)
    '''),
    md("""
    ## How far apart are the two forms?

    The plot shows both curves (with ReLU for comparison), the difference between the forms, and
    both derivatives. The largest gap between the forms is printed: it is small, but not zero, which
    is why a model must use the form it was trained with.
    """),
    uses('''
    import matplotlib.pyplot as plt

    from lib.checks import CheckFailed

    xs = np.linspace(-5, 5, 1001)                                # (1001,)
    gap = gelu_tanh(xs) - gelu_exact(xs)
    worst = np.argmax(np.abs(gap))
    print(f"largest |tanh form - exact| on [-5, 5]: {abs(gap[worst]):.2e} at x = "
          f"{xs[worst]:.2f}")
    if abs(gap[worst]) >= 1e-3:                           # an approximation, and a good one
        raise CheckFailed(
            f"gelu_tanh - gelu_exact is {gap[worst]:.2e} at x = {xs[worst]:.2f}; "
            "the two forms agree within 1e-3"
        )

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    axes[0].plot(xs, np.maximum(xs, 0), ":", color="grey", label="ReLU")
    axes[0].plot(xs, gelu_exact(xs), label="GELU (erf)")
    axes[0].plot(xs, gelu_tanh(xs), "--", label="GELU (tanh)")
    axes[0].set_title("activations"); axes[0].legend()
    axes[1].plot(xs, gap); axes[1].set_title("tanh form minus exact")
    axes[2].plot(xs, gelu_exact_grad(xs), label="exact")
    axes[2].plot(xs, gelu_tanh_grad(xs), "--", label="tanh form")
    axes[2].set_title("derivatives"); axes[2].legend()
    for ax in axes:
        ax.set_xlabel("x"); ax.grid(alpha=0.3)
    plt.tight_layout()
    plt.show()
    '''),
    md("""
    ## Your GELU inside the model

    The numpy twin's MLP keeps its activation and the activation's derivative as two attributes,
    `act` and `act_backward`, chosen from the config. Its forward pass applies `self.act` to the
    output of the first linear layer, `h` $(B, T, 4C)$, and passes the result to the second;
    its backward pass, between the two layers' backward passes, calls `self.act_backward(da, h)`
    with `da`, the gradient that the second layer's backward returns. (Exercise 4.4 has you write
    the MLP's whole forward and backward yourself.)
    """),
    md(r"""
    `act_backward(dy, h)` receives the gradient of the loss with respect to the activation's output,
    `dy`, and the activation's input, `h` (both $(B, T, 4C)$), and returns the gradient with respect
    to `h`: `dy` times the derivative at `h`. So putting your functions in means setting these two
    attributes in every block. Before training on it, a gradient check: on a float64 copy of the
    model, the gradient that backward computes (through your derivative) must match the change of
    the loss when one weight of the first MLP layer moves by $\pm\epsilon$.
    """),
    uses('''
    from lib.numpy_twin import GPT
    from lib.numpy_twin.train import cross_entropy


    def use_activation(model, act, act_grad):
        """Put act (and its derivative) into every MLP of a numpy-twin model."""
        for block in model.h:
            block.mlp.act = act
            block.mlp.act_backward = lambda dy, h: dy * act_grad(h)
        return model


    check_model = use_activation(GPT(CONFIG, seed=1, dtype=np.float64), gelu_tanh,
                                 gelu_tanh_grad)
    rng = np.random.default_rng(0)
    x = rng.integers(0, CONFIG.vocab_size, (2, 8))               # (B, T) = (2, 8)
    y = rng.integers(0, CONFIG.vocab_size, (2, 8))
    check_model.zero_grad()
    loss, dlogits = cross_entropy(check_model.forward(x), y)
    check_model.backward(dlogits)
    w = check_model.h[0].mlp.c_fc.weight                   # (4C, C), changed in place below
    analytic = check_model.h[0].mlp.c_fc.grads["weight"]
    rows, cols = np.array([0, 5, 100, 200]), np.array([0, 3, 17, 63])   # four entries of w


    def loss_at(values):
        """The loss with those four entries of w set to `values` (then restored)."""
        saved = w[rows, cols].copy()
        w[rows, cols] = values
        loss = cross_entropy(check_model.forward(x), y)[0]
        w[rows, cols] = saved
        return loss


    expect_grad("the gradient of c_fc.weight through your derivative, at 4 entries",
                loss_at, lambda values: analytic[rows, cols], w[rows, cols], rtol=1e-4)
    '''),
    md(r"""
    ## ReLU against your GELU

    Two runs on the Shakespeare corpus (bytes, so the loss starts near $\ln 256 \approx 5.55$), with
    the same initial weights and the same batches: one with ReLU, one with your tanh-form GELU
    (running in float32, as in training). Expect the curves to be close: on a model this small and a
    run this short the choice of activation matters little, and which one ends lower can change
    with the seed. The check only asks that both learn.
    """),
    code('''
    from lib.config import TrainConfig
    from lib.data import load_corpus
    from lib.numpy_twin import GPT
    from lib.train import train

    train_ids, val_ids = load_corpus("shakespeare", "byte")
    settings = TrainConfig(max_iters=STEPS, batch_size=BATCH, lr=3e-3, min_lr=3e-4,
                           warmup_iters=50, eval_interval=100, eval_iters=20, seed=0)
    relu_history = train(GPT(CONFIG, seed=0), train_ids, val_ids, settings)
    '''),
    uses('''
    gelu_model = use_activation(GPT(CONFIG, seed=0), gelu_tanh, gelu_tanh_grad)
    gelu_history = train(gelu_model, train_ids, val_ids, settings)

    for name, h in (("ReLU", relu_history), ("GELU (yours)", gelu_history)):
        print(f"{name:13s} validation loss {h['val_loss'][0]:.3f} -> "
              f"{h['val_loss'][-1]:.3f}")
        if h["val_loss"][-1] >= 2.8:
            raise CheckFailed(f"{name}: the model should learn, to a validation loss "
                              f"under 2.8; it ends at {h['val_loss'][-1]:.3f}")

    from lib.plotting import plot_losses

    ax = plot_losses(relu_history, label="ReLU", window=25)
    plot_losses(gelu_history, ax=ax, label="GELU (yours)", window=25)
    ax.set_title("same model, same batches, two activations")
    plt.show()
    '''),
    md("""
    ## Going further

    - Train with `gelu_exact` instead: how much slower is each step, and why? (Look at how
      `math.erf` is applied.)
    - In float32, where does the tanh form's derivative lose precision, and by how much? Compare it
      with a float64 evaluation over $[-8, 8]$.
    """),
]
