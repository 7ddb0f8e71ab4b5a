"""Hidden tests of exercise 6.2 (top-k and top-p): the two filters and a sampler built on them.

The rules (as the exercise states them, and as lib.sampling applies them):
- top_k_filter(logits, k): per row (last axis), keep the logits >= the k-th largest (ties with
  it kept too), set the rest to -inf; k >= V keeps all; k < 1 raises ValueError.
- top_p_filter(logits, p): per row, with probabilities softmax(logits) sorted from most to least
  likely, keep the shortest prefix whose sum reaches p (and any token tied with its last), so the
  most likely token is always kept; p = 1 keeps all; p outside (0, 1] raises ValueError.
- sample(logits, rng, temperature, top_k, top_p): temperature 0 is greedy; otherwise divide by
  the temperature, then top-k, then top-p, softmax, and draw one id per row with rng.
Filters are compared exactly (they only remove entries). Test logits have no ties near a top-p
cut and no cumulative sum within 1e-3 of p, so float rounding cannot move the cut. Samplers:
20,000 draws per distribution, every token's count within 5 binomial standard deviations
(a false alarm has probability ~6e-7 per token).
Edge tests (marked edge=True: argument errors, filters that keep everything, greedy sampling)
are what a filter that does nothing, or one that always raises, gets right; they count only
once the function's other tests pass.
"""
import numpy as np

from grader.spec import Exercise, Rng, Test, equal, filtered, frequencies

EXERCISE = Exercise(
    notebook="ch6_top_k_top_p", title="Top-k and top-p",
    functions=("top_k_filter", "top_p_filter", "sample"),
    blocked=("lib.sampling:*", "lib.numpy_twin.generate:*", "lib.torch_twin.generate:*", "lib.torch_twin.sampling:*",
             "lib.numpy_twin.model:GPT.generate", "lib.numpy_twin.model:GPT.stream",
             "lib.torch_twin.model:GPT.generate", "lib.torch_twin.model:GPT.stream"),
)


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def top_k_filter(logits, k):
    logits = np.asarray(logits)
    kth = np.sort(logits, axis=-1)[..., ::-1][..., min(k, logits.shape[-1]) - 1, None]   # (..., 1)
    return np.where(logits >= kth, logits, -np.inf).astype(logits.dtype)


def top_p_filter(logits, p):
    logits = np.asarray(logits)
    probs = _softmax(logits.astype(np.float64))                             # (..., V)
    desc = np.sort(probs, axis=-1)[..., ::-1]                               # (..., V)
    mass_before = np.cumsum(desc, axis=-1) - desc                           # (..., V)
    n_keep = (mass_before < p).sum(axis=-1, keepdims=True)                  # (..., 1), >= 1
    smallest = np.take_along_axis(desc, n_keep - 1, axis=-1)                # (..., 1)
    return np.where(probs >= smallest, logits, -np.inf).astype(logits.dtype)


def probabilities(logits, temperature=1.0, top_k=None, top_p=None):
    """What sample() must draw from, per row: (B, V) float64."""
    logits = np.asarray(logits, np.float64)
    if temperature == 0:
        return np.eye(logits.shape[-1])[logits.argmax(axis=-1)]
    z = logits / temperature
    if top_k is not None:
        z = top_k_filter(z, top_k)
    if top_p is not None:
        z = top_p_filter(z, top_p)
    return _softmax(z)


REFERENCE = {"top_k_filter": top_k_filter, "top_p_filter": top_p_filter, "probabilities": probabilities}
N_DRAWS = 20_000


def _logits(seed, shape, scale=2.0):
    return np.random.default_rng(seed).normal(0, scale, shape)


def _p_between(logits, n):
    """A p strictly between the n-th and (n+1)-th cumulative sums: the top-p set has n tokens."""
    c = np.cumsum(np.sort(_softmax(logits))[::-1])
    return float((c[n - 2] + c[n - 1]) / 2) if n > 1 else float(c[0] / 2)


def k_test(name, logits, k, edge=False):
    return Test(name, "top_k_filter", (logits, k), filtered(top_k_filter(logits, k)), edge=edge)


def p_test(name, logits, p, edge=False):
    cumulative = np.cumsum(np.sort(_softmax(np.asarray(logits, np.float64)), axis=-1)[..., ::-1], axis=-1)
    assert p == 1.0 or np.abs(cumulative[..., :-1] - p).min() > 1e-3, f"{name}: p too close to a cumulative sum"
    return Test(name, "top_p_filter", (logits, p), filtered(top_p_filter(logits, p)), edge=edge)


def s_test(name, logits, seed, edge=False, **settings):
    if settings.get("top_p") is not None and settings["top_p"] > 1e-6:     # the cut must be clear of rounding
        z = np.atleast_2d(logits) / settings.get("temperature", 1.0)
        z = z if settings.get("top_k") is None else top_k_filter(z, settings["top_k"])
        cumulative = np.cumsum(np.sort(_softmax(z), axis=-1)[..., ::-1], axis=-1)[..., :-1]
        assert np.abs(cumulative - settings.get("top_p", 1.0)).min() > 1e-3, f"{name}: p too close to a sum"
    rows = np.repeat(np.atleast_2d(logits), N_DRAWS // np.atleast_2d(logits).shape[0], axis=0)   # (N, V)
    return Test(name, "sample", (rows, Rng(seed)), frequencies(probabilities(rows, **settings)), kwargs=settings,
                edge=edge)


def tests():
    v10, v50 = _logits(0, 10), _logits(1, (4, 50))
    edge = np.log(np.array([0.5, 0.3, 0.15, 0.05]))                         # cumulative 0.5, 0.8, 0.95, 1
    probe = _logits(2, 8, 1.5)
    return [
        k_test("top-k: k = 3 of 10", v10, 3),
        k_test("top-k: rows of a (4, 50) batch, k = 5", v50, 5),
        k_test("top-k: k = 1 keeps only the argmax", v10, 1),
        k_test("top-k: k = vocabulary size keeps everything", v50, 50, edge=True),
        k_test("top-k: k larger than the vocabulary keeps everything", v10, 25, edge=True),
        k_test("top-k: ties with the k-th largest are kept", np.array([1.0, 3.0, 3.0, 2.0, 3.0, 0.0]), 2),
        k_test("top-k: float32 logits stay float32", v50.astype(np.float32), 7),
        Test("top-k: k = 0 raises ValueError", "top_k_filter", (v10, 0), expect_error="ValueError", edge=True),
        p_test("top-p: p = 0.9 on 10 logits", v10, 0.9),
        p_test("top-p: rows of a (4, 50) batch, p = 0.5", v50, 0.5),
        p_test("top-p: p so small that only the most likely token is left (greedy)", v50, 1e-9),
        p_test("top-p: p = 1 keeps everything", v10, 1.0, edge=True),
        p_test("top-p: p = 0.79 on probabilities 0.5, 0.3, 0.15, 0.05", edge, 0.79),
        p_test("top-p: p = 0.81 on probabilities 0.5, 0.3, 0.15, 0.05", edge, 0.81),
        p_test("top-p: cut between the 4th and 5th token", v10, _p_between(v10, 4)),
        p_test("top-p: logits already holding -inf (after top-k)", top_k_filter(v10, 6), 0.95),
        p_test("top-p: float32 logits stay float32", v50.astype(np.float32), 0.7),
        Test("top-p: p = 0 raises ValueError", "top_p_filter", (v10, 0.0), expect_error="ValueError", edge=True),
        Test("top-p: p = 1.5 raises ValueError", "top_p_filter", (v10, 1.5), expect_error="ValueError", edge=True),
        Test("sample: temperature 0 is greedy", "sample", (v50, Rng(0)), equal(v50.argmax(axis=-1)),
             kwargs=dict(temperature=0.0), edge=True),
        s_test("sample: temperature 1, no filter, frequencies", probe, 1),
        s_test("sample: temperature 1.5 flattens, frequencies", probe, 2, temperature=1.5),
        s_test("sample: temperature 0.8 with top-k 5, frequencies", probe, 3, temperature=0.8, top_k=5),
        s_test("sample: temperature 0.8 with top-p 0.95, frequencies", probe, 4, temperature=0.8, top_p=0.95),
        s_test("sample: top-k 4 then top-p 0.97 at temperature 0.7 (the order matters)", probe, 5,
               temperature=0.7, top_k=4, top_p=0.97),
        s_test("sample: top-p 1e-9 is greedy at temperature 1", probe, 6, edge=True, top_p=1e-9),
        s_test("sample: two different rows in one batch, each its own distribution", _logits(7, (2, 8), 1.5), 7,
               temperature=0.9, top_p=0.9),
    ]
