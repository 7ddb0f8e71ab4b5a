"""Hidden tests of exercise 4.3 (backward through a block): LayerNorm's gradients and the block's.

Reference: float64, LayerNorm's backward written out below from its formula, and lib's attention
and MLP backward passes (which the student calls too), on the very caches lib's forward gives.
- layernorm_backward: dx, dweight and dbias for dy and cache of several shapes, (N, C) and
  (B, T, C), including inputs far from mean 0 (x ~ 1000 + noise) and tiny variances (rstd ~ 300),
  where dropping a term of the formula shows at once. float64 within 1e-10 + 1e-8 |ref| (any
  order of the sums agrees to ~1e-14); float32 must stay float32, within 1e-4 + 1e-4 |ref|.
- block_backward: driven as GPT.backward drives Block.backward (the grader's driver runs the
  block's forward on x, then calls block_backward(dy, cache, block) after zero_grad, twice); dx and
  every parameter gradient of the block after the first call must match, within 1e-9 + 1e-7 |ref|
  (float64), and after the second call be twice that (one test: = where += is needed loses it).
  While block_backward runs, the student's `layernorm_backward` answers the two calls a right
  wiring makes with the reference's gradients (`ln_table`), so that a LayerNorm mistake costs only
  layernorm_backward's points; a call with any other dy goes to the student's own. Configs: GPT-2's
  layout at two widths, one without linear biases, one with SwiGLU, RoPE and shared key/value heads
  (the student's wiring does not depend on what the sub-layers are).
A zero dy is an edge test: everything is 0, which an answer that returns zeros gets right.
"""
import numpy as np

from grader.spec import Exercise, Model, Test, close
from lib.config import GPTConfig
from lib.numpy_twin import GPT

EXERCISE = Exercise(
    notebook="ch4_backward", title="Backward through a block",
    functions=("layernorm_backward", "block_backward"),
    blocked=("lib.numpy_twin.model:LayerNorm.backward", "lib.numpy_twin.modern:RMSNorm.backward",
             "lib.numpy_twin.model:Block.backward", "lib.numpy_twin.model:GPT.backward"),
)


def layernorm_backward(dy, cache, weight):
    xhat, rstd = (np.asarray(a, np.float64) for a in cache)
    dy = np.asarray(dy, np.float64)
    C = xhat.shape[-1]
    g = dy * weight                                                        # (..., C)
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, (dy * xhat).reshape(-1, C).sum(axis=0), dy.reshape(-1, C).sum(axis=0)


def block_backward(dy, cache, block):
    """The reference wiring, with the LayerNorms' gradients added as the student's must be."""
    ln_1_cache, attn_cache, ln_2_cache, mlp_cache = cache

    def norm_backward(norm, d, norm_cache):
        dx, dweight, dbias = layernorm_backward(d, norm_cache, norm.weight)
        norm.grads["weight"] += dweight
        norm.grads["bias"] += dbias
        return dx

    dh = dy + norm_backward(block.ln_2, block.mlp.backward(dy, mlp_cache), ln_2_cache)
    return dh + norm_backward(block.ln_1, block.attn.backward(dh, attn_cache), ln_1_cache)


REFERENCE = {"layernorm_backward": layernorm_backward, "block_backward": block_backward}

F64 = dict(rtol=1e-8, atol=1e-10)
F32 = dict(rtol=1e-4, atol=1e-4)
BLOCK = dict(rtol=1e-7, atol=1e-9)


def all_close(names, expected, **tol):
    """Check: a list or tuple of arrays (or a dict of them, for the last), each close to expected's."""
    checks = [close(e, **tol) for e in expected]

    def check(got):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return False, f"expected {len(expected)} values ({', '.join(names)}), got {type(got).__name__}"
        for name, c, g in zip(names, checks, got):
            verdict = c(g)
            if not verdict[0]:
                return False, f"{name}: {verdict[1]}"
        return True, "all close"
    return check


def grads_close(expected_dx, expected_grads, twice=False, **tol):
    """Check for the block driver's [dx, {parameter: gradient} after one call, the same after
    two]: dx and the first call's gradients, or (`twice`) the second call's, which must be twice
    the first's."""
    dx_check = close(expected_dx, dtype=np.float64, **tol)

    def check(got):
        if not isinstance(got, list) or len(got) != 3 or not all(isinstance(g, dict) for g in got[1:]):
            return False, "block_backward's result could not be read as dx"
        if not twice:
            verdict = dx_check(got[0])
            if not verdict[0]:
                return False, f"dx: {verdict[1]}"
        for name, want in expected_grads.items():
            verdict = close(2 * want if twice else want, **tol)(got[2 if twice else 1].get(name))
            if not verdict[0]:
                after = "after a second call (its gradients must add to the first's)" if twice else ""
                return False, f"the gradient of {name} {after}: {verdict[1]}".replace("  ", " ")
        return True, "every parameter gradient twice one call's" if twice else "dx and every parameter gradient close"
    return check


def _layernorm_case(x, weight, dy, eps=1e-5):
    """(dy, cache, weight) as LayerNorm.forward gives the cache, in x's dtype."""
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)
    return dy, (xc * rstd, rstd), weight


def _layernorm_tests():
    rng = np.random.default_rng(43)
    cases = {
        "(2, 3, 8) from N(1, 2^2)": (1 + 2 * rng.standard_normal((2, 3, 8)), 8),
        "(5, 16), a 2-D input": (rng.standard_normal((5, 16)), 16),
        "(1, 7, 3), three features": (rng.standard_normal((1, 7, 3)), 3),
        "(2, 4, 12) around 1000": (1000 + rng.standard_normal((2, 4, 12)), 12),
        "(3, 2, 10) of tiny variance (std 0.003)": (0.5 + 0.003 * rng.standard_normal((3, 2, 10)), 10),
    }
    out = []
    for label, (x, C) in cases.items():
        weight = rng.normal(1, 0.5, C)                                    # (C,)
        dy = rng.standard_normal(x.shape)
        args = _layernorm_case(x, weight, dy)
        out.append(Test(f"layernorm_backward: {label}", "layernorm_backward", args,
                        all_close(("dx", "dweight", "dbias"), layernorm_backward(*args), dtype=np.float64, **F64)))
    x32 = rng.standard_normal((2, 5, 16)).astype(np.float32)
    w32, dy32 = rng.normal(1, 0.5, 16).astype(np.float32), rng.standard_normal(x32.shape).astype(np.float32)
    args32 = _layernorm_case(x32, w32, dy32)
    out.append(Test("layernorm_backward: float32 (answers in float32)", "layernorm_backward", args32,
                    all_close(("dx", "dweight", "dbias"), layernorm_backward(*args32), dtype=np.float32, **F32)))
    zero = _layernorm_case(rng.standard_normal((2, 3, 8)), rng.standard_normal(8), np.zeros((2, 3, 8)))
    out.append(Test("layernorm_backward: dy = 0", "layernorm_backward", zero,
                    all_close(("dx", "dweight", "dbias"), layernorm_backward(*zero), dtype=np.float64, **F64),
                    edge=True))
    return out


CONFIGS = {
    "GPT-2's layout, 2 heads, 16 wide": dict(vocab_size=32, n_ctx=16, n_layer=2, n_head=2, n_embd=16),
    "GPT-2's layout, 3 heads, 24 wide, ReLU": dict(vocab_size=32, n_ctx=16, n_layer=1, n_head=3, n_embd=24,
                                                   activation="relu"),
    "no linear biases": dict(vocab_size=32, n_ctx=16, n_layer=1, n_head=2, n_embd=16, bias=False),
    "SwiGLU, RoPE, 4 query heads sharing 2 key/value heads": dict(vocab_size=32, n_ctx=16, n_layer=1, n_head=4,
                                                                  n_embd=16, mlp="swiglu", position="rope",
                                                                  n_kv_head=2),
}


def expected_block(config, seed, layer, x, dy):
    """What the driver must return after one call, computed here with the reference wiring, and
    the table of the two LayerNorm calls it makes: [[dy, dx, dweight, dbias], ...]."""
    global layernorm_backward
    block = GPT(GPTConfig(**config), seed=seed, dtype=np.float64).h[layer]
    block.zero_grad()
    _, cache = block.forward(x)
    reference, table = layernorm_backward, []

    def recorded(d, norm_cache, weight):
        out = reference(d, norm_cache, weight)
        table.append([np.array(d), *out])
        return out

    layernorm_backward = recorded
    try:
        dx = block_backward(dy, cache, block)
    finally:
        layernorm_backward = reference
    return dx, dict(block.named_grads()), table


def _block_tests():
    rng = np.random.default_rng(44)
    out = []
    for i, (label, config) in enumerate(CONFIGS.items()):
        layer = config["n_layer"] - 1
        x = rng.normal(0, 1.5, (2, 6, config["n_embd"]))                  # (B, T, C)
        dy = rng.standard_normal(x.shape)
        dx, grads, table = expected_block(config, 10 + i, layer, x, dy)
        args = (Model(config, seed=10 + i, dtype="float64"), layer, x, dy, table)
        out.append(Test(f"block_backward: {label}", "block_backward", args,
                        grads_close(dx, grads, **BLOCK), driver="block_backward"))
        if i == 0:
            out.append(Test(f"block_backward called twice: {label}, the gradients add up", "block_backward", args,
                            grads_close(dx, grads, twice=True, **BLOCK), driver="block_backward"))
    config = CONFIGS["GPT-2's layout, 2 heads, 16 wide"]
    x, dy = rng.standard_normal((1, 4, 16)), np.zeros((1, 4, 16))
    dx, grads, table = expected_block(config, 5, 0, x, dy)
    out.append(Test("block_backward: dy = 0", "block_backward", (Model(config, seed=5, dtype="float64"), 0, x, dy, table),
                    grads_close(dx, grads, **BLOCK), driver="block_backward", edge=True))
    return out


def tests():
    return _layernorm_tests() + _block_tests()
