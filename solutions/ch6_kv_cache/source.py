"""Exercise 6.1: add a KV cache to a cache-less greedy generator; same tokens, fewer computations."""
from build_notebooks import check, code, graded, md, setup, uses


STUB = '''
import numpy as np


class KVCache:
    """Keys and values of every layer, for one batch of sequences.

    KVCache(config, batch, dtype): `length` (positions stored so far) starts at 0.
    update(layer, k, v): k and v are (B, H, T, D), the new positions of one layer;
    store them after the `length` positions already there and return (keys, values)
    of that layer, each (B, H, length + T, D), in the cache's dtype. update never
    changes `length`: the model adds T to it after each forward pass."""

    def __init__(self, config, batch, dtype=np.float32):
        raise NotImplementedError("exercise 6.1: write KVCache")

    def update(self, layer, k, v):
        raise NotImplementedError("exercise 6.1: write KVCache.update")


def generate_cached(model, idx, max_new_tokens):
    """Greedy generation with a KVCache: the same tokens as generate_nocache.
    idx: (B, T) int array -> (B, T + max_new_tokens) int array."""
    raise NotImplementedError("exercise 6.1: write generate_cached")
'''

ANSWER = '''
import numpy as np


class KVCache:
    """Keys and values of every layer, for one batch of sequences.

    KVCache(config, batch, dtype): `length` (positions stored so far) starts at 0.
    update(layer, k, v): k and v are (B, H, T, D), the new positions of one layer;
    store them after the `length` positions already there and return (keys, values)
    of that layer, each (B, H, length + T, D), in the cache's dtype. update never
    changes `length`: the model adds T to it after each forward pass."""

    def __init__(self, config, batch, dtype=np.float32):
        # (B, H, n_ctx, D)
        shape = (batch, config.n_head, config.n_ctx, config.n_embd // config.n_head)
        # written once, never copied
        self.k = [np.zeros(shape, dtype) for _ in range(config.n_layer)]
        self.v = [np.zeros(shape, dtype) for _ in range(config.n_layer)]
        self.length = 0

    def update(self, layer, k, v):                         # k, v: (B, H, T, D)
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        # (B, H, end, D) each
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]


def generate_cached(model, idx, max_new_tokens):
    """Greedy generation with a KVCache: the same tokens as generate_nocache.
    idx: (B, T) int array -> (B, T + max_new_tokens) int array."""
    cache = KVCache(model.config, idx.shape[0], dtype=model.wte.weight.dtype)
    out = [idx]
    # (B, T): the prompt is the first "new" input
    new = idx
    for step in range(max_new_tokens):
        # (B, T_new, V); the cache grows by T_new
        logits = model.forward(new, kv_cache=cache)
        new = logits[:, -1].argmax(axis=-1)[:, None]       # (B, 1)
        out.append(new)
    return np.concatenate(out, axis=1)                     # (B, T + max_new_tokens)
'''

CELLS = [
    md(r"""
    # Exercise 6.1: A KV cache

    *This exercise follows [chapter 6, Decoding and the KV cache](../chapters/06_decoding.ipynb).*

    A generator that recomputes the whole sequence for every new token does the same work again and
    again: the keys and values of the earlier positions do not change when a token is appended
    (attention is causal). A KV cache keeps them. Each step then runs only the newest token through
    the model, and its query attends to the cached keys and values {cite}`pope2023efficiently`. In
    this exercise you write the cache and the generator that uses it, show that it produces the same
    tokens, and measure the speed-up over 200 new tokens.

    **What is graded.** The cell tagged `graded:ch6_kv_cache` (the class `KVCache` and the function
    `generate_cached`). A grader runs that cell alone, in a sandbox, with hidden tests: the cache on
    its own, the tokens against the cache-less generator's, and the time for 800 tokens. Write your
    answer in that cell and keep the cell. Edge tests (zero new tokens, which returns the prompt as
    it is, and the whole context in one prefill) count only once every other test of the same function passes, so that an answer that
    does almost nothing cannot collect points.
    """),
    setup(),
    md("""
    The next cell is the one place that chooses the exercise's sizes. The numpy twin runs on the CPU
    everywhere, so a GPU changes nothing: a model of the small preset's shape (4 layers, 128 wide)
    with a context of 256, and seeded random weights, which are all a test of equal tokens and of
    speed needs. It computes in float64, so that the two generators' tiny rounding differences
    cannot flip a greedy choice.
    """),
    code('''
    import numpy as np

    from lib.config import GPTConfig
    from lib.numpy_twin import GPT

    CONFIG = GPTConfig.small(n_ctx=256)
    NEW_TOKENS = 200
    model = GPT(CONFIG, seed=0, dtype=np.float64)
    # (1, T): bytes as ids
    prompt = np.frombuffer(b"ROMEO:\\nBut soft, what light", np.uint8).astype(np.int64)[None]
    print(f"{CONFIG.n_layer} layers, {CONFIG.n_embd} wide, context {CONFIG.n_ctx}; "
          f"prompt of {prompt.shape[1]} tokens")
    '''),
    md(r"""
    ## The generator you are given

    Greedy decoding: at each step, run the whole sequence so far, $(B, T)$, through the model, take the
    most likely next token at the last position, append it. Step $t$ processes $T_0 + t$ positions, so
    $n$ new tokens cost about $n T_0 + n^2/2$ positions in all.
    """),
    code('''
    def generate_nocache(model, idx, max_new_tokens):
        """Greedy generation, recomputing everything:
        idx (B, T) -> (B, T + max_new_tokens)."""
        for _ in range(max_new_tokens):
            # (B, T, V): every position, every step
            logits = model.forward(idx)
            nxt = logits[:, -1].argmax(axis=-1)                # (B,)
            idx = np.concatenate([idx, nxt[:, None]], axis=1)  # (B, T + 1)
        return idx
    '''),
    md(r"""
    ## What the model expects from a cache

    The twins' attention already accepts a cache: `model.forward(idx, kv_cache=cache)` treats `idx`
    as the *new* positions, placed after the `cache.length` positions already cached. These are the
    lines of the numpy twin that use it, in attention (once per layer) and in the model:

    ```python
    # CausalSelfAttention.forward: q, k, v (B, H, T, D) of the T new positions
    start = 0 if kv_cache is None else kv_cache.length   # the new positions are start .. start + T - 1
    if kv_cache is not None:
        k, v = kv_cache.update(layer, k, v)               # (B, H, start + T, D): every position so far
    scores = scores + causal_mask(T, start, dtype)         # (T, start + T): query i sees keys 0 .. start + i

    # GPT.forward, after the blocks
    if kv_cache is not None:
        kv_cache.length += T
    ```
    """),
    md(r"""
    So a cache needs two things: an attribute `length`, the number of positions stored (the model
    reads it to place the new positions, and adds $T$ to it after the forward pass), and a method
    `update(layer, k, v)` that stores the new keys and values of one layer, each $(B, H, T, D)$, and
    returns all of that layer's keys and values so far, $(B, H, \text{length} + T, D)$.

    Write `KVCache` and `generate_cached(model, idx, max_new_tokens)`:

    - `KVCache(config, batch, dtype=np.float32)`; `length` starts at 0; `update` keeps the cache's
      dtype and does not change `length`.
    - `generate_cached` makes a cache in the model's dtype (`model.wte.weight.dtype`), runs the prompt
      through once (the *prefill*), then one new token per step (the *decode* steps), and returns the
      same array as `generate_nocache`: the prompt followed by the new tokens, `(B, T + n)`. The prompt
      and the new tokens fit in the context (`T + n <= model.config.n_ctx`); note that the last new
      token needs no forward pass of its own.
    - While grading, lib's own caches and generators (`KVCache`, `GPT.generate`, `GPT.stream`) raise
      an error. The speed test generates 800 tokens with a 2-layer model under a CPU-time limit that a
      cache meets several times over and that recomputing the sequence at every step cannot meet.
    - The graded cell must hold everything it uses, imports included.
    """),
    graded(STUB, ANSWER),
    md("""
    ## Checks you can run

    One cell per property, the cache on its own first: what `update` returns, step by step, as the
    model calls it (every layer, then `length += T`); then what the generator feeds the model; then
    the tokens of both generators, compared exactly.
    """),
    code('''
    from lib.checks import (
        CheckFailed,
        expect_close,
        expect_equal,
        expect_shape,
        watch,
        your_output,
    )

    rng = np.random.default_rng(0)
    H, D = CONFIG.n_head, CONFIG.head_dim
    prompts = rng.integers(0, CONFIG.vocab_size, (3, 10))               # (3, 10)
    '''),
    check('''
    cache = KVCache(CONFIG, batch=1, dtype=np.float64)
    stored = [np.zeros((1, H, 0, D))] * CONFIG.n_layer    # what each layer holds so far
    for step, T_new in enumerate([5, 1, 1], start=1):     # a prefill of 5, two decode steps
        for layer in range(CONFIG.n_layer):
            k = rng.standard_normal((1, H, T_new, D))     # (B, H, T_new, D): new keys
            keys, values = cache.update(layer, k, 2 * k)
            stored[layer] = np.concatenate([stored[layer], k], axis=2)
            if keys.shape[2] != stored[layer].shape[2]:
                raise CheckFailed(f"update {step} of layer {layer} returned "
                                  f"{keys.shape[2]} positions; {stored[layer].shape[2]} "
                                  f"are stored by then (length {cache.length} + {T_new} "
                                  "new)")
            expect_shape(f"update {step}, layer {layer}: the keys' dtype", keys,
                         stored[layer].shape, np.float64)
            expect_close(f"update {step}, layer {layer}: the keys so far, in order", keys,
                         stored[layer])
            expect_close(f"update {step}, layer {layer}: the values so far, in order",
                         values, 2 * stored[layer])
        cache.length += T_new                         # as GPT.forward does after its blocks
        if cache.length != sum([5, 1, 1][:step]):
            raise CheckFailed(
                f"cache.length is {cache.length} after {sum([5, 1, 1][:step])} positions:"
                " update must not change it (the model adds T after its forward pass)"
            )
    print("ok: update returns every position stored so far, and leaves length alone")
    '''),
    check('''
    class Recorded:
        """The model, with the number of positions of every forward call recorded."""

        def __init__(self, model):
            self.model, self.config, self.wte = model, model.config, model.wte
            self.positions = []

        def forward(self, idx, **options):
            self.positions.append(idx.shape[1])
            return self.model.forward(idx, **options)


    recorded = Recorded(model)
    generate_cached(recorded, prompts, 6)
    expect_equal("positions fed to the model per call: the prompt once, then 1 per new "
                 "token", recorded.positions, [10, 1, 1, 1, 1, 1])
    '''),
    check('''
    cache = KVCache(CONFIG, batch=1, dtype=np.float64)
    with watch(cache, "update") as w, your_output("KVCache.update", w):
        model.forward(prompts[:1, :5], kv_cache=cache)                 # prefill 5 positions
        model.forward(prompts[:1, 5:6], kv_cache=cache)                # then one at a time
    expect_equal("generate_cached(model, prompts, 30) against generate_nocache",
                 generate_cached(model, prompts, 30), generate_nocache(model, prompts, 30))
    expect_equal("generate_cached(model, prompts, 0)", generate_cached(model, prompts, 0),
                 prompts)
    '''),
    md(r"""
    ## The speed-up over 200 new tokens

    Both generators run on the same prompt; a thin wrapper times every call of `model.forward`, so the
    plot shows the cost of each step. Without the cache a step's cost grows with the sequence; with
    it, every decode step costs about the same.
    """),
    uses('''
    import time

    import matplotlib.pyplot as plt


    class Timed:
        """The model, with the time of every forward call recorded."""

        def __init__(self, model):
            self.model, self.config, self.wte = model, model.config, model.wte
            self.seconds = []

        def forward(self, idx, **options):
            start = time.perf_counter()
            out = self.model.forward(idx, **options)
            self.seconds.append(time.perf_counter() - start)
            return out


    runs = {}
    for name, generate in (("KV cache", generate_cached), ("no cache", generate_nocache)):
        timed = Timed(model)
        tokens = generate(timed, prompt, NEW_TOKENS)
        runs[name] = (tokens, np.array(timed.seconds))
    expect_equal(f"{NEW_TOKENS} tokens with the cache against without", runs["KV cache"][0],
                 runs["no cache"][0])
    total = {name: seconds.sum() for name, (_, seconds) in runs.items()}
    print(f"{NEW_TOKENS} new tokens: {total['no cache']:.2f} s without the cache, "
          f"{total['KV cache']:.2f} s with it: "
          f"{total['no cache'] / total['KV cache']:.1f}x faster")

    plt.figure(figsize=(6, 3.5))
    for name, (_, seconds) in runs.items():
        plt.plot(1000 * seconds, label=f"{name} ({len(seconds)} forward calls)")
    plt.xlabel("forward call")
    plt.ylabel("ms")
    plt.yscale("log")
    plt.grid(alpha=0.3)
    plt.legend()
    plt.title(f"cost of each step, {NEW_TOKENS} new tokens after a "
              f"{prompt.shape[1]}-token prompt")
    plt.show()
    '''),
    md(r"""
    The first call of the cached generator is the prefill: it processes the whole prompt, like the
    first step without a cache. After it, each call processes one position instead of all of them.
    The speed-up grows with the length of the text: without a cache the total work grows with the
    square of the number of tokens, with it linearly (attention still reads every cached key, but
    the matrix products of the layers, the larger cost at this size, run on one position).

    ## Going further

    - How much memory does your cache take for this model at full context? Compare with
      `lib.config.kv_cache_bytes`.
    - What must happen when the sequence outgrows the context? (lib's generators refill the cache
      from the last half of the context: see `lib.sampling.refill_length`.)
    """),
]
