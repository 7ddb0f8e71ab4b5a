"""Hidden tests of exercise 3.1 (causal multi-head self-attention, forward, from a fused q/k/v weight).

Reference: float64, one head and one sequence at a time with explicit column slices (no reshape),
the causal mask by a boolean triangle, and a softmax that subtracts the row maximum; float32
inputs are widened without rounding. tests/test_grader.py checks it against lib's numpy layer.
Tolerances, with the reasons:
- float64: |got - ref| <= 1e-10 + 1e-8 |ref|. Any correct formulation agrees to ~1e-13 even
  where the scores are in the thousands (their rounding, ~1e-13 absolute, moves the weights by
  as much, relatively); a wrong scale, mask or head layout moves values by ~1e-1.
- float32: the answer must be float32, within 1e-4 + 1e-4 |ref| for ordinary scores. Where the
  scores reach the hundreds, float32 rounding of a score (~3e-5 absolute) changes its weight by as
  much, relatively: within 2e-3 + 2e-3 |ref| there (measured worst ~3e-4).
Scores in the hundreds (float32) and thousands (float64) overflow exp: a softmax without the
maximum gives NaN. T = 1 is an edge test (each position then attends only to itself, which an
answer without attention also computes), and so are the errors.
"""
import numpy as np

from grader.spec import DEFAULT_MASKED, Exercise, Test, close

EXERCISE = Exercise(
    notebook="ch3_attention", title="Causal self-attention",
    functions=("causal_self_attention",),
    blocked=("lib.numpy_twin.model:softmax", "lib.numpy_twin.model:CausalSelfAttention.forward",
             "lib.numpy_twin.train:log_softmax", "lib.sampling:_softmax",
             "lib.torch_twin.model:softmax", "lib.torch_twin.model:CausalSelfAttention.forward",
             "lib.numpy_twin.flash:*"),                # chapter 10's attention, plain and tiled
    masked=DEFAULT_MASKED + ("scipy",),          # scipy.special.softmax is a stable softmax
)


def causal_self_attention(x, w_attn, b_attn, w_proj, b_proj, n_head):
    x, wa, ba, wp, bp = (np.asarray(a, np.float64) for a in (x, w_attn, b_attn, w_proj, b_proj))
    B, T, C = x.shape
    D = C // n_head
    qkv = x @ wa + ba                                        # (B, T, 3C)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    y = np.zeros((B, T, C))
    for b in range(B):
        for h in range(n_head):
            cols = slice(h * D, (h + 1) * D)
            q, k, v = qkv[b, :, cols], qkv[b, :, C:][:, cols], qkv[b, :, 2 * C:][:, cols]   # (T, D) each
            s = np.where(future, -np.inf, q @ k.T / np.sqrt(D))                            # (T, T)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            y[b, :, cols] = (p / p.sum(axis=1, keepdims=True)) @ v
    return y @ wp + bp


REFERENCE = {"causal_self_attention": causal_self_attention}


def _case(seed, B, T, C, H, dtype=np.float64, x_scale=1.0, w_scale=0.4):
    rng = np.random.default_rng(seed)
    args = (rng.normal(0, x_scale, (B, T, C)), rng.normal(0, w_scale, (C, 3 * C)), rng.normal(0, 0.2, 3 * C),
            rng.normal(0, 0.3, (C, C)), rng.normal(0, 0.2, C))
    return tuple(a.astype(dtype) for a in args) + (H,)


F64 = dict(rtol=1e-8, atol=1e-10)
F32 = dict(rtol=1e-4, atol=1e-4)
F32_LARGE = dict(rtol=2e-3, atol=2e-3)

# (label, args, tolerance, edge)
CASES = [
    ("B=2 T=7 C=24 H=4, float64", _case(70, 2, 7, 24, 4), F64, False),
    ("B=3 T=6 C=12 H=1 (one head), float64", _case(71, 3, 6, 12, 1), F64, False),
    ("B=1 T=11 C=40 H=10, float64", _case(72, 1, 11, 40, 10), F64, False),
    ("B=2 T=5 C=36 H=3, scores in the thousands, float64",
     _case(73, 2, 5, 36, 3, x_scale=6.0, w_scale=2.0), F64, False),
    ("B=1 T=9 C=20 H=2, float32", _case(74, 1, 9, 20, 2, np.float32), F32, False),
    ("B=2 T=6 C=24 H=4, scores in the hundreds, float32",
     _case(75, 2, 6, 24, 4, np.float32, x_scale=3.0, w_scale=1.2), F32_LARGE, False),
    ("B=1 T=16 C=96 H=12, float64", _case(76, 1, 16, 96, 12), F64, False),
    ("B=3 T=1 C=16 H=4 (one position), float64", _case(77, 3, 1, 16, 4), F64, True),
    ("B=1 T=1 C=8 H=1 (one position, one head), float32", _case(78, 1, 1, 8, 1, np.float32), F32, True),
]


def tests():
    out = []
    for label, args, tol, edge in CASES:
        want = causal_self_attention(*args)
        out.append(Test(label, "causal_self_attention", args, close(want, dtype=args[0].dtype, **tol),
                        points=1 if edge else 2, edge=edge))
    x, wa, ba, wp, bp, _ = _case(79, 2, 4, 18, 3)
    out.append(Test("n_head = 4 does not divide C = 18: ValueError", "causal_self_attention",
                    (x, wa, ba, wp, bp, 4), expect_error="ValueError", edge=True))
    out.append(Test("c_attn_weight of shape (3C, C): ValueError", "causal_self_attention",
                    (x, wa.T.copy(), ba, wp, bp, 3), expect_error="ValueError", edge=True))
    out.append(Test("c_proj_bias of shape (1,): ValueError", "causal_self_attention",
                    (x, wa, ba, wp, bp[:1], 3), expect_error="ValueError", edge=True))
    return out
