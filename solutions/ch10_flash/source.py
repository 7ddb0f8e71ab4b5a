"""Exercise 10.1: the online softmax and the tiled forward pass of causal attention."""
from build_notebooks import check, code, collapsed, graded, md, setup


STUB = '''
import math

import numpy as np


def online_softmax_update(m, l, acc, s, v_tile):
    """Fold one tile of scores s (..., n, b) and values v_tile (..., b, D) into the
    running max m (..., n), running sum l (..., n) and running weighted sum acc (...,
    n, D); return the new (m, l, acc)."""
    raise NotImplementedError("exercise 10.1: write online_softmax_update")


def flash_attention(q, k, v, block_size=64):
    """Causal attention of q, k, v (..., T, D) -> (..., T, D), the keys and values
    taken in tiles of block_size, never the whole (T, T) matrix."""
    raise NotImplementedError("exercise 10.1: write flash_attention")
'''

ANSWER = '''
import math

import numpy as np


def online_softmax_update(m, l, acc, s, v_tile):
    """Fold one tile of scores s (..., n, b) and values v_tile (..., b, D) into the
    running max m (..., n), running sum l (..., n) and running weighted sum acc (...,
    n, D); return the new (m, l, acc)."""
    m_new = np.maximum(m, s.max(axis=-1))                    # (..., n)
    # (..., n): the old sums were relative to m
    rescale = np.exp(m - m_new)
    p = np.exp(s - m_new[..., None])                         # (..., n, b)
    l_new = rescale * l + p.sum(axis=-1)                     # (..., n)
    acc_new = rescale[..., None] * acc + p @ v_tile          # (..., n, D)
    return m_new, l_new, acc_new


def flash_attention(q, k, v, block_size=64):
    """Causal attention of q, k, v (..., T, D) -> (..., T, D), the keys and values
    taken in tiles of block_size, never the whole (T, T) matrix."""
    T, D = q.shape[-2:]
    m = np.full(q.shape[:-1], -np.inf, q.dtype)              # (..., T)
    l = np.zeros(q.shape[:-1], q.dtype)                      # (..., T)
    acc = np.zeros_like(q)                                   # (..., T, D)
    for start in range(0, T, block_size):
        stop = min(start + block_size, T)
        b = stop - start
        # keys start..stop are seen by queries start.. only
        kt = np.swapaxes(k[..., start:stop, :], -1, -2)      # (..., D, b)
        s = q[..., start:, :] @ kt / math.sqrt(D)            # (..., T - start, b)
        # in the diagonal block, key j > query i
        future = np.triu(np.ones((b, b), bool), k=1)
        s[..., :b, :] = np.where(future, -np.inf, s[..., :b, :])
        state = online_softmax_update(m[..., start:], l[..., start:],
                                      acc[..., start:, :], s, v[..., start:stop, :])
        m[..., start:], l[..., start:], acc[..., start:, :] = state
    return acc / l[..., None]
'''

CELLS = [
    md(r"""
    # Exercise 10.1: the online softmax and the tiled forward pass of attention

    This exercise follows [chapter 10](../chapters/10_speed.ipynb), whose FlashAttention section
    explains the idea: attention computed tile by tile over the keys, with a running maximum and
    running sums per query, so that the (T, T) matrix of scores never exists
    {cite}`dao2022flashattention`. Here you write the two pieces of its forward pass.

    **What is graded.** The cell tagged `graded:ch10_flash`. A grader runs that cell alone, in a
    sandbox, and calls your two functions with hidden tests; nothing else in this notebook is graded.
    The checks below it are a first test you can run yourself. One hidden test, worth 4 of the 17
    points, runs a sequence of 32,768 positions in a sandbox of 1 GiB: the (T, T) matrix alone would
    need 4 GiB in float32. An answer that builds it fails that test.
    Edge tests (T = 1, where the answer is v itself) count only once every other test of the same
    function passes.
    """),
    setup(),
    md(r"""
    ## The contract

    **The online softmax.** For each query, keep three running quantities over the keys seen so far:
    the largest score $m$, the sum $\ell = \sum_j e^{s_j - m}$ and the weighted sum
    $a = \sum_j e^{s_j - m}\, v_j$ (a vector of D numbers). A new tile brings scores $s'$ (one per
    key of the tile) and the tile's values $v'$. With $m' = \max(m, \max_j s'_j)$:

    $$\ell' = e^{m - m'}\,\ell + \sum_j e^{s'_j - m'}, \qquad a' = e^{m - m'}\,a + \sum_j e^{s'_j - m'}\,v'_j .$$

    - `online_softmax_update(m, l, acc, s, v_tile)`: m and l $(\dots, n)$, acc $(\dots, n, D)$, s
      $(\dots, n, b)$ (n queries, b keys in the tile), v_tile $(\dots, b, D)$; returns the new
      `(m, l, acc)`, same shapes. Before the first tile m is $-\infty$, l and acc are 0: your update
      must handle that (what is $e^{-\infty}$?). A score of $-\infty$ (a masked key) must weigh 0.
      Scores can be in the thousands: never exponentiate a score without subtracting the maximum.

    **The tiled forward pass.** `flash_attention(q, k, v, block_size=64)`: q, k, v $(\dots, T, D)$
    with any leading axes; query $i$ sees keys $0 \dots i$; scores are $q k^\top / \sqrt{D}$. Take
    the keys and values in tiles of `block_size` (the last one may be shorter), fold each tile into
    the running state with your update, and return $a / \ell$. Two things make it cheap:
    - a tile of keys starting at position `start` is seen only by the queries from `start` on, so
      compute its scores for those queries only;
    - only the tile's diagonal block (the first `b` of those queries) has keys in its future.
    Never build a (T, T) array. The answer keeps the input's dtype: float64 answers are compared
    with the plain attention within 1e-10, float32 ones within 1e-5 of the values' size, and within
    5e-4 with scores in the thousands: float32 stores a score to about 6e-8 of its size, so a score
    near 5,000 is off by about 3e-4, and that absolute error in the exponent becomes the same
    relative error in its weight. Use numpy only: while grading, torch is not installed and lib's
    `flash_attention` raises an error. The graded cell must hold everything the functions use,
    imports included.
    """),
    graded(STUB, ANSWER),
    md("""
    ## Checks you can run

    One property per cell: the update against a softmax computed at once, then with a rising
    maximum and masked keys, then the whole attention against the plain one, the causal mask at
    the tiles' edges, float32 with scores in the thousands, and last the memory.
    """),
    code('''
    from lib.checks import expect_close, expect_shape

    rng = np.random.default_rng(10)


    def plain_attention(q, k, v):
        """The whole (T, T) matrix at once (chapter 3), to compare with."""
        T, D = q.shape[-2:]
        s = q @ np.swapaxes(k, -1, -2) / math.sqrt(D) + np.triu(np.full((T, T), -np.inf),
                                                                k=1)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return (p / p.sum(axis=-1, keepdims=True)) @ v


    def start_state(n, D):
        return np.full(n, -np.inf), np.zeros(n), np.zeros((n, D))
    '''),
    check('''
    s, v_tile = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    m, l, acc = online_softmax_update(*start_state(5, 3), s, v_tile)
    expect_shape("the running max", m, (5,), np.float64)
    expect_close("one tile: the running max is the row max", m, s.max(axis=-1), rtol=0)
    expect_close("one tile: l is the sum of exp(s - max)", l,
                 np.exp(s - s.max(-1, keepdims=True)).sum(-1), rtol=1e-12)
    weights = np.exp(s - s.max(-1, keepdims=True))                  # softmax's numerators
    expect_close("one tile: acc / l is the softmax-weighted sum", acc / l[:, None],
                 weights / weights.sum(-1, keepdims=True) @ v_tile, rtol=1e-12)
    '''),
    check('''
    s = rng.standard_normal((4, 10))
    s[:, 6:] += 5.0                                    # the second tile's scores are larger
    s[0, 2] = -np.inf                                  # a masked key weighs 0
    v_all = rng.standard_normal((10, 2))
    state = start_state(4, 2)
    for a, b in ((0, 3), (3, 6), (6, 10)):
        state = online_softmax_update(*state, s[:, a:b], v_all[a:b])
    m, l, acc = state
    p = np.exp(s - s.max(-1, keepdims=True))
    expect_close("three tiles, the max rising in the last: the same as one softmax",
                 acc / l[:, None], (p / p.sum(-1, keepdims=True)) @ v_all, rtol=1e-12)
    expect_close("l relative to the final max", l, p.sum(-1), rtol=1e-12)
    '''),
    check('''
    q, k, v = (rng.standard_normal((2, 3, 70, 8)) for _ in range(3))
    y = flash_attention(q, k, v, block_size=16)
    expect_shape("flash_attention", y, (2, 3, 70, 8), np.float64)
    expect_close("against the plain attention, 70 positions in tiles of 16", y,
                 plain_attention(q, k, v), rtol=1e-10, atol=1e-12)
    '''),
    check('''
    q, k, v = (rng.standard_normal((9, 4)) for _ in range(3))
    for block in (1, 2, 4, 9, 64):
        expect_close(f"9 positions in tiles of {block}: the mask at every tile's edge",
                     flash_attention(q, k, v, block_size=block), plain_attention(q, k, v),
                     rtol=1e-10, atol=1e-12)
    '''),
    check('''
    q, k, v = (30 * rng.standard_normal((2, 200, 64)).astype(np.float32) for _ in range(3))
    y = flash_attention(q, k, v)
    expect_shape("float32 stays float32", y, (2, 200, 64), np.float32)
    expect_close("float32, scores in the thousands", y,
                 plain_attention(q.astype(np.float64), k, v).astype(np.float32),
                 rtol=0, atol=5e-4 * np.abs(v).max())
    '''),
    check('''
    import tracemalloc

    q, k, v = (rng.standard_normal((1, 4096, 8)).astype(np.float32) for _ in range(3))
    tracemalloc.start()
    try:
        flash_attention(q, k, v)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()                         # also when flash_attention raises
    print(f"peak memory at T = 4096: {peak / 2**20:.1f} MiB (the (T, T) matrix alone: 64 "
          "MiB)")
    if peak > 16 * 2**20:
        raise AssertionError(f"flash_attention held {peak / 2**20:.0f} MiB at T = 4096: "
                             "it builds a (T, T) array")
    '''),
    md("""
    ## Compare with lib

    lib's version, which the chapter used without showing it (it also has the backward pass, which
    recomputes each tile's weights from the log-sum-exp $m + \\log \\ell$): open the cell below once
    your checks pass.
    """),
    collapsed('''
    from lib.display import show
    from lib.numpy_twin import flash

    show(flash.tile_scores, flash.online_softmax_update, flash.flash_forward)
    '''),
    md("""
    ## Going further

    - Write the backward pass: keep only $m + \\log \\ell$ per query from the forward pass, and
      recompute each tile's weights $p = e^{s - (m + \\log \\ell)}$ from it. The softmax's backward
      needs $\\sum_j p_j\\, \\partial L/\\partial p_j$ per query, which equals
      $\\sum_d y_d\\, \\partial L/\\partial y_d$: why? (lib's `flash_backward` is one answer.)
    - Time yours against the plain attention at T = 512 and T = 4,096. Where is the tiled one
      slower in numpy, and why would a GPU kernel of the same idea be faster?
    """),
]
