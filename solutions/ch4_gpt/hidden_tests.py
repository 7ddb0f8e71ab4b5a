"""Hidden tests of exercise 4.4 (the whole GPT, forward and backward, from the student's pieces).

Expected values: lib's numpy twin in float64, every weight random (biases and gains away from 0
and 1), its weights in GPT-2's checkpoint layout (lib.weights.to_gpt2_layout):
CausalSelfAttention.backward for attention_backward, Block.forward and Block.backward for the
block, GPT.forward and GPT.backward for the model. Tolerances: 1e-12 + 1e-9 |expected| (float64;
the order of the sums moves the results by ~1e-15 relative).

Isolation: the student's functions get `parts` from the drivers `parts` and `parts_backward`
(grader/drivers.py): 2.1's embeddings and head, 4.1's GELU and 4.3's LayerNorm backward
computed there with lib, 3.1's attention answered from a table of the reference's values at the
inputs a right answer passes; so are the graded cells' `attention_backward` while block_backward
runs (any other call goes to the student's own), and `block_forward` and `block_backward` while
gpt_forward and gpt_backward run. The tables (drivers.answer_table) are recorded here from
the reference wiring below, whose results are checked against lib as the tests are built; they
hold no input, only its fingerprint, and each result less a random linear function of its input,
so that code reading them without computing that input gets nothing it can use. No table holds
the output of the function under test. A mistake therefore costs only the function it is in,
except that gpt_forward counts once layernorm_forward and block_forward pass, and gpt_backward
once block_backward does too (`Test.requires`: the stand-ins of the block are then the student's
own work); the backward tests run the student's own forward for the cache.
- layernorm_forward: the output and the cache (xhat, rstd), a (B, T, C) input and a 2-D one far
  from 0.
- attention_backward: dx and the four weights' gradients, 1 to 4 heads, one sequence and two,
  scores sharpened by large weights.
- block_forward, gpt_forward: the output, two layouts (2 heads 16 wide, 3 heads 24 wide), each
  block of a two-block model.
- block_backward, gpt_backward: dx (the block's) and every weight's gradient after one call, and
  after a second call without zeroing (twice one call's: = where += is needed loses that test).
Edge tests (an answer that returns zeros gets them right): a zero output gradient, and attention
over a single position (the softmax of one score has no gradient).
"""
import zlib

import numpy as np

from grader.drivers import answer_table
from grader.spec import Config, Exercise, Test, close
from lib.config import GPTConfig
from lib.numpy_twin import GPT, CausalSelfAttention
from lib.numpy_twin.model import gelu, gelu_backward
from lib.weights import to_gpt2_layout

EXERCISE = Exercise(
    notebook="ch4_gpt", title="The whole GPT, forward and backward",
    functions=("layernorm_forward", "attention_backward", "block_forward", "block_backward",
               "gpt_forward", "gpt_backward"),
    blocked=("lib.numpy_twin.model:CausalSelfAttention.forward", "lib.numpy_twin.model:CausalSelfAttention.backward",
             "lib.numpy_twin.model:MLP.forward", "lib.numpy_twin.model:MLP.backward",
             "lib.numpy_twin.model:Block.forward", "lib.numpy_twin.model:Block.backward",
             "lib.numpy_twin.model:GPT.forward_outputs", "lib.numpy_twin.model:GPT.backward",
             "lib.numpy_twin.model:LayerNorm.forward",    # layernorm_forward's own tests
             "lib.numpy_twin.flash:*"),                 # chapter 10's attention, with a backward
    taught=("lib.numpy_twin.model:LayerNorm.forward",),  # chapter 4 shows it; here it is written again
)

TOL = dict(rtol=1e-9, atol=1e-12)
ATTN = ("attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias")
LAYOUTS = {"2 heads, 16 wide": dict(vocab_size=24, n_ctx=8, n_layer=2, n_head=2, n_embd=16),
           "3 heads, 24 wide": dict(vocab_size=20, n_ctx=8, n_layer=2, n_head=3, n_embd=24)}


# ---- lib's model, in the student's layout ------------------------------------------------------
def lib_model(fields, seed):
    """A float64 GPT of lib with every weight moved randomly off GPT-2's initialisation."""
    config = GPTConfig(**fields)
    model = GPT(config, seed=seed, dtype=np.float64)
    rng = np.random.default_rng(seed)
    for _, weight in model.named_parameters():
        weight += rng.normal(0, 0.3, weight.shape)
    return config, model


def lib_attention_layer(weights, n_head):
    C = weights[0].shape[0]
    layer = CausalSelfAttention(GPTConfig(vocab_size=2, n_ctx=64, n_layer=1, n_head=n_head, n_embd=C))
    layer.astype(np.float64)
    layer.c_attn.weight, layer.c_attn.bias = weights[0].T.copy(), weights[1].copy()
    layer.c_proj.weight, layer.c_proj.bias = weights[2].T.copy(), weights[3].copy()
    layer.zero_grad()
    return layer


def lib_attention_backward(dy, x, *weights_and_heads):
    """lib's gradients of the attention layer: dx, then its weights' in (in, out) layout."""
    *weights, n_head = weights_and_heads
    layer = lib_attention_layer(weights, n_head)
    dx = layer.backward(dy, layer.forward(x)[1])
    g = dict(layer.named_grads())
    return [dx, g["c_attn.weight"].T.copy(), g["c_attn.bias"], g["c_proj.weight"].T.copy(), g["c_proj.bias"]]


# ---- the earlier exercises' functions, attention's calls recorded -----------------------------------
def seed_of(label):
    """A table's seed, from the test's label: every table masks with masks of its own."""
    return zlib.crc32(label.encode())


class Recorded:
    """The reference pieces; attention's calls (the one piece the driver does not compute live)
    kept as [input, result, gradients it added]."""

    def __init__(self):
        self.calls = {}

    def keep(self, name, key, result, added=None):
        self.calls.setdefault(name, []).append([np.array(key), result, added or {}])
        return result

    def causal_self_attention(self, x, *weights_and_heads):
        *weights, n_head = weights_and_heads
        return self.keep("causal_self_attention", x, lib_attention_layer(weights, n_head).forward(x)[0])

    def gelu_tanh(self, x):
        return gelu(x)

    def gelu_tanh_grad(self, x):
        return gelu_backward(np.ones_like(x), x)

    def layernorm_backward(self, dy, cache, weight):
        xhat, rstd = cache
        g = dy * weight                                                    # (..., C)
        dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
        C = dy.shape[-1]
        return dx, (dy * xhat).reshape(-1, C).sum(0), dy.reshape(-1, C).sum(0)

    def embed_forward(self, idx, wte, wpe):
        return wte[idx] + wpe[None, :idx.shape[1]]

    def embed_backward(self, dx, idx, grads):
        dwte, dwpe = np.zeros_like(grads["wte"]), np.zeros_like(grads["wpe"])
        np.add.at(dwte, idx.ravel(), dx.reshape(len(idx.ravel()), -1))
        dwpe[:idx.shape[1]] = dx.sum(0)
        grads["wte"] += dwte
        grads["wpe"] += dwpe

    def head_forward(self, hidden, wte):
        return np.einsum("btc,vc->btv", hidden, wte)

    def head_backward(self, dlogits, hidden, wte, grads):
        grads["wte"] += np.einsum("btv,btc->vc", dlogits, hidden)
        return np.einsum("btv,vc->btc", dlogits, wte)

    def parts_tables(self, label):
        name = "causal_self_attention"
        return {name: answer_table(self.calls.get(name, []), seed_of(f"{label}: {name}"))}


# ---- the reference wiring, written apart from the solution -----------------------------------------
def _norm(x, w, b):
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    r = (var + 1e-5) ** -0.5
    return (x - mu) * r * w + b, ((x - mu) * r, r)


def _block_fwd(x, P, i, H, parts):
    w = {k.split(".", 2)[2]: v for k, v in P.items() if k.startswith(f"h.{i}.")}
    a, c1 = _norm(x, w["ln_1.weight"], w["ln_1.bias"])
    h = parts.causal_self_attention(a, *(w[n] for n in ATTN), H) + x
    m, c2 = _norm(h, w["ln_2.weight"], w["ln_2.bias"])
    f = np.einsum("btc,cf->btf", m, w["mlp.c_fc.weight"]) + w["mlp.c_fc.bias"]
    act = parts.gelu_tanh(f)
    return h + np.einsum("btf,fc->btc", act, w["mlp.c_proj.weight"]) + w["mlp.c_proj.bias"], (a, c1, m, c2, f, act)


def _block_bwd(dout, cache, P, i, H, G, parts, own):
    a, c1, m, c2, f, act = cache
    n = f"h.{i}."
    G[n + "mlp.c_proj.weight"] += np.einsum("btf,btc->fc", act, dout)
    G[n + "mlp.c_proj.bias"] += dout.sum((0, 1))
    df = np.einsum("btc,fc->btf", dout, P[n + "mlp.c_proj.weight"]) * parts.gelu_tanh_grad(f)
    G[n + "mlp.c_fc.weight"] += np.einsum("btc,btf->cf", m, df)
    G[n + "mlp.c_fc.bias"] += df.sum((0, 1))
    d2, dw2, db2 = parts.layernorm_backward(np.einsum("btf,cf->btc", df, P[n + "mlp.c_fc.weight"]), c2,
                                            P[n + "ln_2.weight"])
    G[n + "ln_2.weight"] += dw2
    G[n + "ln_2.bias"] += db2
    dh = dout + d2
    da, *dw = own.attention_backward(dh, a, *(P[n + k] for k in ATTN), H)
    for k, d in zip(ATTN, dw):
        G[n + k] += d
    d1, dw1, db1 = parts.layernorm_backward(da, c1, P[n + "ln_1.weight"])
    G[n + "ln_1.weight"] += dw1
    G[n + "ln_1.bias"] += db1
    return dh + d1


def _gpt_fwd(idx, P, config, parts, own):
    x = parts.embed_forward(idx, P["wte.weight"], P["wpe.weight"])
    caches = []
    for i in range(config.n_layer):
        x, c = own.block_forward(x, P, i, config.n_head, parts)
        caches.append(c)
    hidden, cf = _norm(x, P["ln_f.weight"], P["ln_f.bias"])
    return parts.head_forward(hidden, P["wte.weight"]), (idx, caches, cf, hidden)


def _gpt_bwd(dlogits, cache, P, config, G, parts, own):
    idx, caches, cf, hidden = cache
    tables = {"wte": G["wte.weight"], "wpe": G["wpe.weight"]}
    d, dw, db = parts.layernorm_backward(parts.head_backward(dlogits, hidden, P["wte.weight"], tables), cf,
                                         P["ln_f.weight"])
    G["ln_f.weight"] += dw
    G["ln_f.bias"] += db
    for i in range(config.n_layer - 1, -1, -1):
        d = own.block_backward(d, caches[i], P, i, config.n_head, G, parts)
    parts.embed_backward(d, idx, tables)


class Own:
    """The reference's 4.4 functions that others call, each call kept as [input, result, gradients]."""

    def __init__(self):
        self.calls = {}

    def attention_backward(self, dy, *rest):
        result = lib_attention_backward(dy, *rest)
        self.calls.setdefault("attention_backward", []).append([np.array(dy), result, {}])
        return result

    def block_forward(self, x, P, i, H, parts):
        out, cache = _block_fwd(x, P, i, H, parts)
        self.calls.setdefault("block_forward", []).append([np.array(x), [out, "the grader's block cache"], {}])
        return out, cache

    def block_backward(self, dout, cache, P, i, H, G, parts):
        before = {k: np.array(v) for k, v in G.items()}
        dx = _block_bwd(dout, cache, P, i, H, G, parts, self)
        added = {k: G[k] - before[k] for k in G if k.startswith(f"h.{i}.")}
        self.calls.setdefault("block_backward", []).append([np.array(dout), dx, added])
        return dx

    def table(self, label, name, grads_at=None, fallback=False):
        return answer_table(self.calls.get(name, []), seed_of(f"{label}: {name}"), grads_at, fallback)


REFERENCE = {"attention_backward": lib_attention_backward}


# ---- checks --------------------------------------------------------------------------------------
def arrays_close(names, expected):
    """Check: a tuple of arrays (named `names`), each float64 and close to expected's."""
    def check(got):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return False, f"expected the {len(expected)} values ({', '.join(names)}), got {type(got).__name__}"
        verdicts = [(n, close(e, dtype=np.float64, **TOL)(g)) for n, e, g in zip(names, expected, got)]
        wrong = [f"{n}: {v[1]}" for n, v in verdicts if not v[0]]
        return (False, wrong[0]) if wrong else (True, "all close")
    return check


def layernorm_close(y, xhat, rstd):
    """Check for layernorm_forward's (y, (xhat, rstd)): each float64, of its shape, close."""
    arrays = arrays_close(("y", "the cache's xhat", "the cache's rstd"), (y, xhat, rstd))

    def check(got):
        if not (isinstance(got, (list, tuple)) and len(got) == 2 and isinstance(got[1], (list, tuple))):
            return False, "expected (y, (xhat, rstd)): y and the cache, a pair"
        return arrays((got[0], *got[1]))
    return check


def backward_close(expected_dx, expected_grads, twice=False):
    """Check for parts_backward's [dx, grads after one call, after two]: dx (unless None is
    expected) and one call's gradients, or (`twice`) two calls' gradients, twice one call's."""
    def check(got):
        if not isinstance(got, list) or len(got) != 3 or not all(isinstance(g, dict) for g in got[1:]):
            return False, "the result could not be read as dx and the gradients"
        if expected_dx is not None and not twice:
            verdict = close(expected_dx, dtype=np.float64, **TOL)(got[0])
            if not verdict[0]:
                return False, f"dx: {verdict[1]}"
        grads = got[2 if twice else 1]
        for name, want in expected_grads.items():
            verdict = close(2 * want if twice else want, **TOL)(grads.get(name))
            if not verdict[0]:
                when = " after a second call (it must add to the first's)" if twice else ""
                return False, f"the gradient of {name}{when}: {verdict[1]}"
        if twice:
            return True, "twice one call's gradients"
        return True, "every gradient close" + ("" if expected_dx is None else ", and dx")
    return check


# ---- the tests -----------------------------------------------------------------------------------
FORWARD = ("layernorm_forward", "block_forward")          # what gpt_forward's points wait for
BACKWARD = FORWARD + ("block_backward",)                   # and gpt_backward's


def _layernorm_tests():
    rng = np.random.default_rng(44)
    out = []
    for label, shape, centre in (("(B, T, C) = (2, 5, 16)", (2, 5, 16), 0.0), ("2-D, values far from 0", (3, 24), 50.0)):
        C = shape[-1]
        x, weight, bias = rng.normal(centre, 3, shape), rng.normal(1, 0.3, C), rng.normal(0, 0.3, C)
        y, (xhat, rstd) = _norm(x, weight, bias)
        out.append(Test(f"layernorm_forward: {label}", "layernorm_forward", (x, weight, bias),
                        layernorm_close(y, xhat, rstd)))
    return out


def _attention_tests():
    rng = np.random.default_rng(45)
    cases = {"2 heads, 16 wide": (2, 6, 16, 2, 0.4), "4 heads, 16 wide, one sequence": (1, 7, 16, 4, 0.4),
             "1 head, 8 wide": (2, 5, 8, 1, 0.4), "3 heads, 24 wide, sharp attention (large weights)": (2, 6, 24, 3, 1.5),
             "a single position": (2, 1, 16, 2, 0.4)}
    out = []
    for label, (B, T, C, H, scale) in cases.items():
        x = rng.normal(0, 1, (B, T, C))
        weights = [rng.normal(0, scale, (C, 3 * C)), rng.normal(0, 0.2, 3 * C),
                   rng.normal(0, 0.3, (C, C)), rng.normal(0, 0.2, C)]
        dy = rng.normal(0, 1, x.shape)
        args = (dy, x, *weights, H)
        out.append(Test(f"attention_backward: {label}", "attention_backward", args,
                        arrays_close(("dx", "dc_attn_weight", "dc_attn_bias", "dc_proj_weight", "dc_proj_bias"),
                                     lib_attention_backward(*args)), edge=T == 1))
    x = rng.normal(0, 1, (1, 4, 8))
    weights = [rng.normal(0, 0.4, (8, 24)), rng.normal(0, 0.2, 24), rng.normal(0, 0.3, (8, 8)), rng.normal(0, 0.2, 8)]
    args = (np.zeros_like(x), x, *weights, 2)
    out.append(Test("attention_backward: dy = 0", "attention_backward", args,
                    arrays_close(("dx", "dc_attn_weight", "dc_attn_bias", "dc_proj_weight", "dc_proj_bias"),
                                 lib_attention_backward(*args)), edge=True))
    return out


def _check_against_lib(name, got, want):
    """The reference wiring must give lib's numbers: the tables are only as good as it is."""
    assert np.allclose(got, want, rtol=1e-10, atol=1e-12), f"the reference {name} disagrees with lib"


def _block_case(config, model, P, layer, x, dout, label):
    """lib's output, dx and gradients for block `layer`, and the tables of the reference's calls."""
    block = model.h[layer]
    want, block_cache = block.forward(x)
    model.zero_grad()
    want_dx = block.backward(dout, block_cache)
    want_grads = to_gpt2_layout(config, model.named_grads())
    parts, own = Recorded(), Own()
    got, cache = _block_fwd(x, P, layer, config.n_head, parts)
    _check_against_lib("block forward", got, want)
    G = {n: np.zeros_like(v) for n, v in P.items()}
    _check_against_lib("block backward", _block_bwd(dout, cache, P, layer, config.n_head, G, parts, own), want_dx)
    tables = {"parts": parts.parts_tables(label),
              "graded": {"attention_backward": own.table(label, "attention_backward", fallback=True)}}
    return want, want_dx, want_grads, tables


def _block_tests():
    rng = np.random.default_rng(46)
    out = []
    for k, (label, fields) in enumerate(LAYOUTS.items()):
        config, model = lib_model(fields, seed=60 + k)
        P = to_gpt2_layout(config, model.named_parameters())
        zeros = {n: np.zeros_like(v) for n, v in P.items()}
        for layer in range(config.n_layer):
            x = rng.normal(0, 1, (2, 5, config.n_embd))                   # (B, T, C)
            dout = rng.normal(0, 1, x.shape)
            want, want_dx, want_grads, tables = _block_case(config, model, P, layer, x, dout, f"{label}, {layer}")
            out.append(Test(f"block_forward: {label}, block {layer}", "block_forward",
                            (x, P, layer, config.n_head, tables), close(want, dtype=np.float64, **TOL),
                            driver="parts"))
            args = ("block_forward", x, [P, layer, config.n_head], dout, zeros, tables)
            out.append(Test(f"block_backward: {label}, block {layer}", "block_backward", args,
                            backward_close(want_dx, want_grads), driver="parts_backward"))
            if k == 0 and layer == 1:
                out.append(Test(f"block_backward called twice: {label}, block {layer}, the gradients add up",
                                "block_backward", args, backward_close(want_dx, want_grads, twice=True),
                                driver="parts_backward"))
        x = rng.normal(0, 1, (1, 4, config.n_embd))
        if k == 0:
            _, want_dx, want_grads, tables = _block_case(config, model, P, 0, x, np.zeros_like(x), f"{label}, 0, dout 0")
            out.append(Test(f"block_backward: {label}, dout = 0", "block_backward",
                            ("block_forward", x, [P, 0, config.n_head], np.zeros_like(x), zeros, tables),
                            backward_close(want_dx, want_grads), driver="parts_backward", edge=True))
    return out


def _gpt_tests():
    rng = np.random.default_rng(47)
    out = []
    for k, (label, fields) in enumerate(LAYOUTS.items()):
        config, model = lib_model(fields, seed=70 + k)
        P = to_gpt2_layout(config, model.named_parameters())
        idx = rng.integers(0, config.vocab_size, (2, 6))
        idx[1, 3] = idx[0, 1] = idx[1, 0]                                  # repeated ids
        want = model.forward(idx)
        for zero in (False, True) if k == 0 else (False,):
            dlogits = np.zeros_like(want) if zero else rng.normal(0, 1, want.shape)
            model.zero_grad()
            model.forward(idx)
            model.backward(dlogits)
            want_grads = to_gpt2_layout(config, model.named_grads())
            parts, own = Recorded(), Own()
            logits, cache = _gpt_fwd(idx, P, config, parts, own)
            _check_against_lib("GPT forward", logits, want)
            G = {n: np.zeros_like(v) for n, v in P.items()}
            _gpt_bwd(dlogits, cache, P, config, G, parts, own)
            for n, g in want_grads.items():
                _check_against_lib(f"GPT backward ({n})", G[n], g)
            case = f"{label}, gpt" + (", dlogits 0" if zero else "")
            tables = {"parts": parts.parts_tables(case),
                      "graded": {"block_forward": own.table(case, "block_forward"),
                                 "block_backward": own.table(case, "block_backward", grads_at=5)}}
            cfg = Config(fields)
            if not zero:
                out.append(Test(f"gpt_forward: {label}", "gpt_forward", (idx, P, cfg, tables),
                                close(want, dtype=np.float64, **TOL), driver="parts", requires=FORWARD))
            args = ("gpt_forward", idx, [P, cfg], dlogits, {n: np.zeros_like(v) for n, v in P.items()}, tables)
            name = f"gpt_backward: {label}" + (", dlogits = 0" if zero else "")
            out.append(Test(name, "gpt_backward", args, backward_close(None, want_grads), driver="parts_backward",
                            edge=zero, requires=BACKWARD))
            if k == 1:
                out.append(Test(f"gpt_backward called twice: {label}, the gradients add up", "gpt_backward", args,
                                backward_close(None, want_grads, twice=True), driver="parts_backward",
                                requires=BACKWARD))
    return out


def tests():
    return _layernorm_tests() + _attention_tests() + _block_tests() + _gpt_tests()
