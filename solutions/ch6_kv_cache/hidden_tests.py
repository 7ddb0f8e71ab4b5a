"""Hidden tests of exercise 6.1 (KV cache): the cache class, greedy generation with it, and speed.

- KVCache: driven exactly as GPT.forward drives a cache (update per layer, then length += T);
  every (k, v) it hands back must equal the concatenation of what went in, exactly (copying
  floats loses nothing), in the cache's dtype.
- generate_cached: greedy tokens must equal those of the cache-less generator (the reference
  runs the whole sequence through lib's model at every step). The models are float64 with
  seeded random weights: the cached and uncached paths round differently (~1e-16), far below
  the gaps between the top two logits, so greedy choices agree exactly.
- speed: 800 new tokens after a 16-token prompt (2 layers, width 128, context 1024, float64) within
  10 s of CPU time in the sandbox (one BLAS thread). CPU time, unlike wall time, does not grow
  when the machine is busy. Measured on a 2-core x86 CPU: 1.3 s with lib's cache (plus ~0.6 s to
  start Python, numpy and the model), 68 s without one (every step reruns the whole sequence);
  the limit sits a factor ~5 above the first and ~7 below the second.
- forward calls: greedy generation feeds the model the prompt once, then one position per new
  token, and calls it no more (one point: an extra forward pass wastes time, its tokens are right).
Edge tests, which a cache that returns what it is given or a generator that returns the prompt
gets right: the whole context in one prefill, and max_new_tokens = 0.
"""
import functools

import numpy as np

from lib.config import GPTConfig
from grader.spec import Config, Exercise, Model, Test, Verdict, equal
from lib.numpy_twin import GPT

EXERCISE = Exercise(
    notebook="ch6_kv_cache", title="KV cache",
    functions=("KVCache", "generate_cached"),
    blocked=("lib.numpy_twin.model:KVCache", "lib.numpy_twin.model:GPT.generate",
             "lib.numpy_twin.model:GPT.stream", "lib.numpy_twin.generate:*",
             "lib.torch_twin.model:KVCache", "lib.torch_twin.model:GPT.generate",
             "lib.torch_twin.model:GPT.stream", "lib.torch_twin.generate:*"),
    groups={"main": 60.0, "speed": 10.0},
)


def generate_nocache(model, idx, max_new_tokens):
    for _ in range(max_new_tokens):
        nxt = model.forward(idx)[:, -1].argmax(axis=-1)                  # (B,)
        idx = np.concatenate([idx, nxt[:, None]], axis=1)                # (B, T + 1)
    return idx


def cache_contents(chunks):
    """What update() must return, chunk after chunk, layer after layer: everything so far."""
    seen, so_far = [], None
    for k_all, v_all in chunks:                                          # (L, B, H, T, D) each
        so_far = (k_all, v_all) if so_far is None else tuple(
            np.concatenate([old, new], axis=3) for old, new in zip(so_far, (k_all, v_all)))
        for layer in range(k_all.shape[0]):
            seen += [so_far[0][layer], so_far[1][layer]]
    return seen


REFERENCE = {"generate_cached": generate_nocache}

TINY = dict(vocab_size=64, n_ctx=32, n_layer=2, n_head=2, n_embd=32)
FAST = dict(vocab_size=256, n_ctx=1024, n_layer=2, n_head=4, n_embd=128)


def arrays_equal(expected, dtype):
    def check(got):
        if not isinstance(got, list) or len(got) != len(expected):
            return False, f"expected {len(expected)} (k, v) arrays from update(), got {type(got).__name__}"
        for i, (g, e) in enumerate(zip(got, expected)):
            step, kind = divmod(i, 2)
            if not isinstance(g, np.ndarray) or g.shape != e.shape:
                return False, f"update #{step + 1} returned {'kv'[kind]} of shape {getattr(g, 'shape', None)}, expected {e.shape}"
            if g.dtype != np.dtype(dtype):
                return False, f"update #{step + 1} returned {'kv'[kind]} of dtype {g.dtype}, expected {dtype}"
            if not np.array_equal(g, e.astype(dtype)):
                return False, f"update #{step + 1} returned wrong {'kv'[kind]} values (not the concatenation so far)"
        return True, "exact"
    return check


def kv_test(name, config, batch, dtype, sizes, seed, edge=False):
    rng = np.random.default_rng(seed)
    L, H, D = config["n_layer"], config["n_head"], config["n_embd"] // config["n_head"]
    chunks = [tuple(rng.standard_normal((L, batch, H, t, D)).astype(dtype) for _ in "kv") for t in sizes]
    return Test(name, "KVCache", (Config(config), batch, dtype, chunks), arrays_equal(cache_contents(chunks), dtype),
                driver="kvcache", edge=edge)


@functools.lru_cache(maxsize=None)
def _greedy(config_items, seed, prompt_bytes, shape, n, cached):
    model = GPT(GPTConfig(**dict(config_items)), seed=seed, dtype=np.float64)
    idx = np.frombuffer(prompt_bytes, np.int64).reshape(shape)
    if cached:                                                           # lib's own cached path (fast)
        return model.generate(idx, n, temperature=0)
    return generate_nocache(model, idx, n)


def gen_test(name, config, seed, prompt, n, group="main", points=1, cached=False, edge=False):
    prompt = np.asarray(prompt, np.int64)
    expected = _greedy(tuple(config.items()), seed, prompt.tobytes(), prompt.shape, n, cached)
    return Test(name, "generate_cached", (Model(config, seed), prompt, n), equal(expected),
                group=group, points=points, edge=edge)


def fed(expected, prompt_length, n):
    """Check drive_counted's [ids, positions per forward call]: the ids, and the calls the prompt
    once then one new position at a time, n calls in all."""
    want_calls = [prompt_length] + [1] * (n - 1)

    def check(got):
        ids, calls = got
        verdict = equal(expected)(ids)
        if not verdict[0]:
            return verdict
        if calls != want_calls:
            return Verdict(False, f"model.forward was called {len(calls)} times, given {calls[:8]} positions: "
                                  f"feed the prompt once, then only each new token, and stop at the last",
                           f"expected {want_calls}")
        return Verdict(True, "the prompt once, then one position per new token")
    return check


def tests():
    prompts = np.random.default_rng(3).integers(0, 64, (3, 7))
    return [
        kv_test("KVCache: prefill 5, then 1, 1 and 3 positions (2 layers, batch 2, float64)",
                TINY, 2, "float64", (5, 1, 1, 3), 0),
        kv_test("KVCache: float32 keys stay float32", TINY, 1, "float32", (4, 1, 2), 1),
        kv_test("KVCache: one position at a time until the context (32) is full", TINY, 1, "float64",
                (1,) * 32, 2),
        kv_test("KVCache: whole context in one prefill", dict(TINY, n_layer=3), 2, "float64", (32,), 3, edge=True),
        gen_test("greedy tokens equal the cache-less generator's (one prompt of 7)", TINY, 0, prompts[:1], 20),
        gen_test("greedy, a batch of 3 prompts", TINY, 1, prompts, 12),
        gen_test("greedy, a prompt of one token", TINY, 2, prompts[:1, :1], 25),
        gen_test("greedy, prompt + new tokens fill the context exactly (7 + 25 = 32)", TINY, 3, prompts[1:2], 25),
        Test("greedy calls the model once per new token: the prompt, then one position at a time",
             "generate_cached", (Model(TINY, 5), prompts[:2], 9),
             fed(_greedy(tuple(TINY.items()), 5, prompts[:2].tobytes(), prompts[:2].shape, 9, False), 7, 9),
             driver="counted"),
        gen_test("max_new_tokens = 0 returns the prompt", TINY, 4, prompts[2:3], 0, edge=True),
        gen_test("speed: 800 tokens within 10 s of CPU time (without a cache: ~70 s)", FAST, 5,
                 np.arange(16)[None] * 7 % 256, 800, group="speed", points=3, cached=True),
    ]
