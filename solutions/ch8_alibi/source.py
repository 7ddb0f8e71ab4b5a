"""Exercise 8.2: ALiBi's slopes per head and its bias on the attention scores, causal, from any start."""
from build_notebooks import check, code, collapsed, graded, md, setup


STUB = '''
import numpy as np


def alibi_slopes(n_head):
    """Each head's slope, (n_head,) float64: Press et al.'s geometric sequence,
    with their rule for head counts that are not powers of two."""
    raise NotImplementedError("exercise 8.2: write alibi_slopes")


def alibi_bias(T, start, slopes, dtype):
    """(H, T, start + T) in dtype: -slopes[h] * (i - j) for the query at position i
    = start + t and every key j <= i, -inf for the later keys."""
    raise NotImplementedError("exercise 8.2: write alibi_bias")
'''

ANSWER = '''
import numpy as np


def alibi_slopes(n_head):
    """Each head's slope, (n_head,) float64: Press et al.'s geometric sequence,
    with their rule for head counts that are not powers of two."""
    n = 2 ** int(np.floor(np.log2(n_head)))        # the largest power of two <= H
    first = 2.0 ** (-8.0 * np.arange(1, n + 1) / n)  # (n,): 2^(-8/n), ..., 2^(-8)
    # (n,): the odd-numbered slopes of 2n heads, which fall between the first ones
    between = 2.0 ** (-8.0 * np.arange(1, 2 * n + 1, 2) / (2 * n))
    return np.concatenate([first, between[:n_head - n]])     # (H,)


def alibi_bias(T, start, slopes, dtype):
    """(H, T, start + T) in dtype: -slopes[h] * (i - j) for the query at position i
    = start + t and every key j <= i, -inf for the later keys."""
    queries = np.arange(start, start + T, dtype=np.float64)  # (T,): positions i
    keys = np.arange(start + T, dtype=np.float64)            # (S,): positions j
    distance = queries[:, None] - keys[None, :]              # (T, S): i - j
    bias = -slopes[:, None, None] * distance[None]           # (H, T, S)
    bias = np.where(distance[None] < 0, -np.inf, bias)       # keys after the query
    return bias.astype(dtype)
'''

CELLS = [
    md(r"""
    # Exercise 8.2: ALiBi's bias

    This exercise follows [chapter 8](../chapters/08_modern_block.ipynb)'s section on positions.
    ALiBi {cite}`press2022train` gives a model no position vectors at all: each head subtracts from
    every attention score a penalty proportional to the distance between the query and the key, with
    a slope of its own. Nothing in it depends on a position table, so the same bias exists at any
    length; the chapter measured what that does past the training length. Here you write the slopes
    and the bias, and put yours into a numpy-twin model.

    **What is graded.** The cell tagged `graded:ch8_alibi`. A grader runs that cell alone, in a
    sandbox, and calls your two functions with hidden tests; nothing else in this notebook is graded.
    The checks below it are a first test you can run yourself.
    One hidden test is an *edge test* (a single query at position 0, whose bias is 0): it counts
    only once every other test of the same function passes.
    """),
    setup(),
    md(r"""
    ## The contract

    **The slopes.** For $H$ heads, a power of two, head $h = 1 \dots H$ gets $m_h = 2^{-8h/H}$: a
    geometric sequence that starts at $2^{-8/H}$ and ends at $2^{-8}$ (8 heads: $\frac12, \frac14,
    \dots, \frac1{256}$). For other head counts the paper takes the $n$ slopes of the largest power
    of two $n < H$, then fills the remaining $H - n$ heads with slopes that fall between them: the
    1st, 3rd, 5th, ... slopes of the sequence for $2n$ heads, $2^{-8 \cdot 1/2n}, 2^{-8 \cdot 3/2n},
    \dots$, as many as needed.

    - `alibi_slopes(n_head)`: the $H$ slopes in that order, a float64 array $(H,)$.

    **The bias.** A query at position $i$ and a key at position $j \le i$ get $-m_h (i - j)$ added to
    head $h$'s score: 0 for the query's own key, more negative the further back the key. Keys after
    the query ($j > i$) get $-\infty$, the causal mask, so the softmax gives them weight 0.
    During generation with a KV cache, the T new queries sit at positions `start` to
    `start + T - 1` and see the `start` cached keys too.

    - `alibi_bias(T, start, slopes, dtype)`: slopes $(H,)$; returns $(H, T, \text{start} + T)$ in
      `dtype`, row $t$ for the query at position $i = \text{start} + t$, column $j$ for the key at
      position $j$. Compute in float64, then cast.

    Float64 answers are compared within $10^{-13}$ relative; float32 answers must be float32, within
    $10^{-6}$ relative (a distance of thousands, times a slope, is still exact to float32's 7 digits
    when computed in float64 first). The $-\infty$ entries must be exactly where the later keys are.
    Use numpy only: while grading, torch is not installed and lib's versions raise an error. The
    graded cell must hold everything the functions use, imports included.
    """),
    graded(STUB, ANSWER),
    md("""
    ## Checks you can run

    One property per cell: the slopes of 8 heads, then of 12 (not a power of two); the bias's
    values on a small case; the rows of a decoding step against the same rows of the whole bias;
    float32; then yours inside a model.
    """),
    code('''
    from lib.checks import expect_close, expect_shape
    '''),
    check('''
    expect_close("alibi_slopes(8): 1/2, 1/4, ..., 1/256", alibi_slopes(8),
                 0.5 ** np.arange(1, 9), rtol=1e-14)
    expect_close("alibi_slopes(1): the sequence of one head, 2^(-8)", alibi_slopes(1),
                 np.array([2.0 ** -8]), rtol=1e-14)
    '''),
    check('''
    between = 2.0 ** -(np.arange(1, 8, 2) / 2)     # 2^(-1/2), 2^(-3/2), ..., 2^(-7/2)
    expect_close("alibi_slopes(12): the 8 heads' slopes, then 4 that fall between them",
                 alibi_slopes(12), np.concatenate([0.5 ** np.arange(1, 9), between]),
                 rtol=1e-14)
    '''),
    check('''
    bias = alibi_bias(3, 0, np.array([0.5, 0.25]), np.float64)
    expect_shape("alibi_bias(3, 0, two slopes)", bias, (2, 3, 3), np.float64)
    inf = np.inf
    want = -np.array([[[0, inf, inf], [0.5, 0, inf], [1.0, 0.5, 0]],
                      [[0, inf, inf], [0.25, 0, inf], [0.5, 0.25, 0]]])
    future = np.isinf(want)
    expect_close("the values below the diagonal: -slope * (i - j)",
                 np.where(future, 0, bias), np.where(future, 0, want), rtol=1e-14)
    assert (bias[future] == -np.inf).all(), "keys after the query must get -inf"
    assert np.isfinite(bias[~future]).all(), "keys up to the query must get finite values"
    '''),
    check('''
    slopes = alibi_slopes(6)
    whole = alibi_bias(9, 0, slopes, np.float64)                 # (6, 9, 9)
    step = alibi_bias(2, 7, slopes, np.float64)    # queries at 7 and 8, 9 keys
    expect_shape("alibi_bias(2, 7, ...): 2 new queries after 7 cached keys", step,
                 (6, 2, 9), np.float64)
    last = whole[:, 7:]                            # (6, 2, 9): the whole bias's last rows
    expect_close("a decoding step's rows are the whole bias's last rows",
                 np.where(np.isinf(step), 0, step), np.where(np.isinf(last), 0, last),
                 rtol=1e-14)
    '''),
    check('''
    far = alibi_bias(2, 3000, alibi_slopes(4), np.float32)
    expect_shape("alibi_bias in float32, 3,000 positions in", far, (4, 2, 3002), np.float32)
    expect_close("the furthest key's bias: -slope * 3000 for the first query", far[:, 0, 0],
                 (-3000 * alibi_slopes(4)).astype(np.float32), rtol=1e-6)
    '''),
    md("""
    ## Yours inside a model

    The numpy twin's ALiBi attention calls `alibi_slopes` when it is built and `alibi_bias` at every
    forward pass, by name from `lib.numpy_twin.modern`, and adds the causal mask to the bias (on
    your $-\\infty$ entries it adds another $-\\infty$, which changes nothing). The next cell puts your
    functions in their place in a small float64 model with ALiBi and 6 heads, and checks its logits,
    over 20 positions and through a KV cache, against the same model running lib's versions.
    """),
    check('''
    from lib.config import GPTConfig
    from lib.numpy_twin import GPT, KVCache
    from lib.numpy_twin import modern as nm

    rng = np.random.default_rng(8)
    config = GPTConfig(vocab_size=50, n_ctx=24, n_layer=2, n_head=6, n_embd=24,
                       position="alibi")
    idx = rng.integers(0, 50, (2, 20))                         # (B, T)
    want = GPT(config, seed=2, dtype=np.float64).forward(idx)   # (B, T, V)
    saved = nm.alibi_slopes, nm.alibi_bias
    nm.alibi_slopes, nm.alibi_bias = alibi_slopes, alibi_bias
    try:
        model = GPT(config, seed=2, dtype=np.float64)
        got = model.forward(idx)
        cache = KVCache(config, 2, np.float64)
        steps = [model.forward(idx[:, :12], cache)] + [model.forward(idx[:, t:t + 1], cache)
                                                     for t in range(12, 20)]
    finally:
        nm.alibi_slopes, nm.alibi_bias = saved
    expect_close("logits with your slopes and bias", got, want, rtol=1e-10, atol=1e-12)
    expect_close("logits through a KV cache (start > 0)", np.concatenate(steps, axis=1),
                 want, rtol=1e-10, atol=1e-12)
    '''),
    md("""
    ## Compare with lib

    lib's versions: open the cell below once your checks pass. lib's `alibi_bias` leaves out the
    causal mask, which its attention adds for every kind of position.
    """),
    collapsed('''
    from lib.display import show
    from lib.numpy_twin import modern as nm

    show(nm.alibi_slopes, nm.alibi_bias)
    '''),
    md("""
    ## Going further

    - Why do the slopes stop at $2^{-8}$? At 1,024 positions back, what does the flattest head's bias
      do to a key's weight, against the steepest head's?
    - The paper's bias is added to the scores after the $1/\\sqrt{D}$ scaling. Where does the course's
      attention add it? Would adding it before the scaling change what the model can learn?
    """),
]
