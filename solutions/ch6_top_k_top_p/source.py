"""Exercise 6.2: top-k and top-p filters, a sampler built on them, and samples from a trained model."""
from build_notebooks import check, code, graded, md, setup, uses


STUB = '''
import numpy as np


def top_k_filter(logits, k):
    """logits (..., V) -> same shape and dtype: per row, the logits >= the k-th
    largest (ties with it included) unchanged, the rest -inf. k >= V keeps all;
    k < 1: ValueError."""
    raise NotImplementedError("exercise 6.2: write top_k_filter")


def top_p_filter(logits, p):
    """logits (..., V) -> same shape and dtype: per row, the smallest set of most
    likely tokens whose probability reaches p (ties with its last token included)
    unchanged, the rest -inf. p = 1 keeps all; p outside (0, 1]: ValueError."""
    raise NotImplementedError("exercise 6.2: write top_p_filter")


def sample(logits, rng, temperature=1.0, top_k=None, top_p=None):
    """logits (B, V) -> (B,) int token ids, one per row, drawn with rng (a numpy
    Generator). temperature 0: the argmax. Otherwise: divide by the temperature, then
    top-k, then top-p."""
    raise NotImplementedError("exercise 6.2: write sample")
'''

ANSWER = '''
import numpy as np


def _softmax(z):                                          # (..., V) -> (..., V)
    e = np.exp(z - z.max(axis=-1, keepdims=True))         # -inf -> 0; the max is finite
    return e / e.sum(axis=-1, keepdims=True)


def top_k_filter(logits, k):
    """logits (..., V) -> same shape and dtype: per row, the logits >= the k-th
    largest (ties with it included) unchanged, the rest -inf. k >= V keeps all;
    k < 1: ValueError."""
    if int(k) != k or k < 1:
        raise ValueError(f"top-k needs an integer k >= 1, got {k!r}")
    logits = np.asarray(logits)
    k = min(int(k), logits.shape[-1])
    kth = np.sort(logits, axis=-1)[..., -k, None]          # (..., 1): the k-th largest
    return np.where(logits >= kth, logits, -np.inf).astype(logits.dtype)


def top_p_filter(logits, p):
    """logits (..., V) -> same shape and dtype: per row, the smallest set of most
    likely tokens whose probability reaches p (ties with its last token included)
    unchanged, the rest -inf. p = 1 keeps all; p outside (0, 1]: ValueError."""
    if not 0 < p <= 1:
        raise ValueError(f"top-p needs 0 < p <= 1, got {p!r}")
    logits = np.asarray(logits)
    probs = _softmax(logits.astype(np.float64))            # (..., V)
    desc = -np.sort(-probs, axis=-1)                       # (..., V), most likely first
    # (..., V): probability of all tokens ahead
    before = np.cumsum(desc, axis=-1) - desc
    # (..., 1); >= 1, since before[0] = 0
    n_keep = (before < p).sum(axis=-1, keepdims=True)
    # (..., 1): the least likely token kept
    last = np.take_along_axis(desc, n_keep - 1, axis=-1)
    return np.where(probs >= last, logits, -np.inf).astype(logits.dtype)


def sample(logits, rng, temperature=1.0, top_k=None, top_p=None):
    """logits (B, V) -> (B,) int token ids, one per row, drawn with rng (a numpy
    Generator). temperature 0: the argmax. Otherwise: divide by the temperature, then
    top-k, then top-p."""
    logits = np.asarray(logits, np.float64)
    if temperature == 0:
        return logits.argmax(axis=-1)
    z = logits / temperature                               # (B, V)
    if top_k is not None:
        z = top_k_filter(z, top_k)
    if top_p is not None:
        z = top_p_filter(z, top_p)
    cdf = np.cumsum(_softmax(z), axis=-1)             # (B, V)
    u = rng.random((z.shape[0], 1)) * cdf[:, -1:]     # (B, 1): one uniform draw per row
    # (B,): the first token whose cdf exceeds u
    ids = (cdf <= u).sum(axis=-1)
    return np.minimum(ids, z.shape[-1] - 1)
'''

CELLS = [
    md(r"""
    # Exercise 6.2: Top-k and top-p

    *This exercise follows [chapter 6, Decoding and the KV cache](../chapters/06_decoding.ipynb).*

    A language model gives a probability to every token of its vocabulary, and most of those
    probabilities are tiny. Sampling from the whole distribution picks one of the many unlikely
    tokens surprisingly often, and one bad token can derail the rest of a text. Two filters cut the
    tail before sampling: **top-k** keeps the $k$ most likely tokens {cite}`fan2018hierarchical`,
    **top-p** (nucleus sampling) keeps the smallest set of most likely tokens whose probability
    reaches $p$ {cite}`holtzman2020curious`, so that it keeps few tokens where the model is sure and
    many where it is not. You write both, a sampler that uses them, and compare samples of a trained
    model at temperature 0.8 with top-k 50 and with top-p 0.95.

    **What is graded.** The cell tagged `graded:ch6_top_k_top_p` (`top_k_filter`, `top_p_filter`, `sample`). A
    grader runs that cell alone, in a sandbox, with hidden tests: exact filter results, edge cases,
    and the frequencies of many samples. Write your answer in that cell and keep the cell. Edge
    tests (bad arguments that must raise, k >= V or p = 1, which keep everything, as a filter that
    does nothing does) count only once every other test of the same function passes, so that an
    answer that does almost nothing cannot collect points.
    """),
    setup(),
    md("""
    The next cell is the one place that chooses where the model runs: on the GPU if there is one,
    else on the CPU. The model is small either way (sampling 300 bytes three times takes seconds).
    """),
    code('''
    import numpy as np
    import torch

    from lib.scale import device

    DEVICE = device()
    print(f"sampling on {DEVICE}")
    '''),
    md(r"""
    ## The rules

    Both filters work on each row of logits (the last axis, of size $V$) and return an array of the
    same shape and dtype, with the logits they keep unchanged and the others set to $-\infty$ (so that
    a softmax gives them probability 0).

    - `top_k_filter(logits, k)` keeps every logit that is at least the $k$-th largest of its row. If
      several logits tie with the $k$-th largest, all of them stay. $k \ge V$ keeps everything; $k < 1$
      raises `ValueError`.
    - `top_p_filter(logits, p)` turns the row into probabilities (softmax), sorts them from most to
      least likely, and keeps the shortest prefix whose sum reaches $p$: the token that crosses $p$ is
      kept. Tokens tied with the last kept one stay too; the most likely token always stays.
      $p = 1$ keeps everything; $p \le 0$ or $p > 1$ raises `ValueError`. Logits that are already
      $-\infty$ (after top-k, say) have probability 0.
    - `sample(logits, rng, temperature=1.0, top_k=None, top_p=None)`: logits $(B, V)$ give $(B,)$ token
      ids. Temperature 0 means greedy (the argmax of each row). Otherwise divide the logits by the
      temperature, then apply top-k (if given), then top-p (if given), then draw one token per row
      from the softmax of what is left, using `rng` (a `numpy.random.Generator`).

    While grading, torch is not installed and lib's samplers (`lib.sampling`, the twins' generators)
    raise an error; use numpy. The graded cell must hold everything it uses, imports included.
    """),
    graded(STUB, ANSWER),
    md("""
    ## Checks you can run

    One cell per function: small cases of the filters worked out by hand (ties included), bad
    arguments, then the frequencies of 20,000 samples against the probabilities they should follow
    (each count within 5 standard deviations of the binomial distribution), with the probabilities
    from the course's own sampler in `lib.sampling`, which follows the same rules.
    """),
    code('''
    from lib.checks import CheckFailed, expect_close, expect_equal, expect_raises
    from lib.sampling import filtered_probs

    ninf = -np.inf
    probs = np.array([0.05, 0.5, 0.15, 0.3])                # sorted: 0.5, 0.3, 0.15, 0.05
    logits = np.log(probs)
    '''),
    check('''
    expect_close("top_k_filter([1, 3, 2, 5], 2)",
                 top_k_filter(np.array([1.0, 3.0, 2.0, 5.0]), 2),
                 np.array([ninf, 3.0, ninf, 5.0]))
    expect_close("top_k_filter([1, 3, 2, 2], 2): both 2s tie with the 2nd largest, both "
                 "stay", top_k_filter(np.array([1.0, 3.0, 2.0, 2.0]), 2),
                 np.array([ninf, 3.0, 2.0, 2.0]))
    expect_close("top_k_filter([[1, 2], [4, 3]], 5)",
                 top_k_filter(np.array([[1.0, 2.0], [4.0, 3.0]]), 5),
                 np.array([[1.0, 2.0], [4.0, 3.0]]))
    '''),
    check('''
    for p, kept in ((0.79, [1, 3]),                     # 0.5 + 0.3 reaches 0.79
                    (0.81, [1, 2, 3]),                  # the token crossing 0.81 stays
                    (1e-9, [1])):                       # the most likely token always stays
        want = np.full(4, ninf)
        want[kept] = logits[kept]
        expect_close(f"top_p_filter(log([0.05, 0.5, 0.15, 0.3]), {p})",
                     top_p_filter(logits, p), want)
    '''),
    check('''
    expect_raises("top_k_filter(logits, 0)", ValueError, top_k_filter, logits, 0)
    expect_raises("top_p_filter(logits, 0.0)", ValueError, top_p_filter, logits, 0.0)
    expect_raises("top_p_filter(logits, 1.5)", ValueError, top_p_filter, logits, 1.5)
    '''),
    check('''
    rng = np.random.default_rng(0)
    z = rng.normal(0, 2, 12)                                # (V,) = (12,)
    n = 20_000
    for settings in (dict(temperature=0.8, top_k=5), dict(temperature=0.8, top_p=0.9),
                     dict(temperature=1.3)):
        expected = filtered_probs(z[None], **settings)[0]    # (V,): lib's probabilities
        draws = sample(np.tile(z, (n, 1)), rng, **settings)  # (n,)
        counts = np.bincount(draws, minlength=12)            # (V,)
        # 0 where a token is filtered out: its count must be 0
        sd = np.sqrt(n * expected * (1 - expected))
        off = np.flatnonzero(np.abs(counts - n * expected) > 5 * sd)
        if len(off):
            i = off[0]
            raise CheckFailed(f"sample(..., {settings}): token {i} drawn {counts[i]} "
                              f"times in {n:,}, expected {n * expected[i]:.0f} +- "
                              f"{5 * sd[i]:.0f}")
        print(f"ok: frequencies of {n:,} samples, {settings}")
    expect_equal("sample(3 equal rows, temperature=0)",
                 sample(np.tile(z, (3, 1)), rng, temperature=0), [z.argmax()] * 3)
    '''),
    md("""
    ## A model to sample from

    The course's small byte-level model trained on Shakespeare (`lib.pretrained`: the small preset,
    4 layers and 128 wide, trained once with a fixed recipe, in about three minutes on two cores, and
    cached on disk; the install step, `tools/install.sh`, trains it, and where it has not run, the
    first call does).
    """),
    code('''
    from lib.pretrained import shakespeare_small

    model = shakespeare_small("torch").to(DEVICE).eval()
    CONFIG = model.config
    print(f"{CONFIG.n_layer} layers, {CONFIG.n_embd} wide, context {CONFIG.n_ctx}, "
          f"vocabulary {CONFIG.vocab_size} bytes")
    '''),
    md(r"""
    ## Samples at temperature 0.8: no filter, top-k 50, top-p 0.95

    The generator below feeds the model's last-position logits to your `sample` (one token at a
    time, no cache: the context is short). For each step it also records how many tokens the filter
    leaves. With top-k 50 that is always 50 (barring ties); with top-p 0.95 it follows the model's
    confidence: one or two tokens inside a word, many after a space or a newline.
    """),
    uses('''
    import matplotlib.pyplot as plt

    from lib.checks import CheckFailed

    PROMPT = b"ROMEO:\\n"
    NEW = 300


    @torch.no_grad()
    def generate_with(settings, seed):
        """Sample NEW bytes after PROMPT with `sample`; -> (text, tokens kept per step,
        probability removed by the filter per step)."""
        rng = np.random.default_rng(seed)
        idx = torch.tensor(list(PROMPT), device=DEVICE)[None]                  # (1, T)
        kept, removed = [], []
        for _ in range(NEW):
            logits = model(idx[:, -CONFIG.n_ctx:])[:, -1].double().cpu().numpy()   # (1, V)
            z = logits / settings["temperature"]
            # (1, V) before filtering
            probs = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
            if "top_k" in settings:
                z = top_k_filter(z, settings["top_k"])
            if "top_p" in settings:
                z = top_p_filter(z, settings["top_p"])
            kept.append(int(np.isfinite(z).sum()))
            removed.append(float(probs[~np.isfinite(z)].sum()))
            nxt = sample(logits, rng, **settings)                               # (1,)
            idx = torch.cat([idx, torch.as_tensor(nxt, device=DEVICE)[:, None]], dim=1)
        return (
            bytes(idx[0].tolist()).decode("utf-8", errors="replace"),
            np.array(kept),
            np.array(removed),
        )


    results = {}
    for name, settings in (("temperature 0.8", dict(temperature=0.8)),
                           ("top-k 50", dict(temperature=0.8, top_k=50)),
                           ("top-p 0.95", dict(temperature=0.8, top_p=0.95))):
        results[name] = generate_with(settings, seed=1)
        print(f"--- {name} " + "-" * 40 + "\\n" + results[name][0] + "\\n")

    (_, kept_k, cut_k), (_, kept_p, cut_p) = results["top-k 50"], results["top-p 0.95"]
    if kept_k.min() < 50 or np.median(kept_k) != 50:
        raise CheckFailed(
            f"top-k 50 kept {kept_k.min()} to {kept_k.max()} tokens (median"
            f" {np.median(kept_k)}); expected 50, or more where logits tie"
        )
    if kept_p.min() < 1 or kept_p.max() > CONFIG.vocab_size or len(set(kept_p)) == 1:
        raise CheckFailed(f"top-p 0.95 kept {kept_p.min()} to {kept_p.max()} tokens; "
                          f"expected between 1 and {CONFIG.vocab_size}, varying with the "
                          "model's confidence")
    if cut_p.max() >= 0.05 + 1e-9:                     # top-p never removes more than 1 - p
        raise CheckFailed(
            f"top-p 0.95 removed {cut_p.max():.4f} of the probability at step"
            f" {cut_p.argmax()}; it never removes more than 0.05"
        )
    print(f"top-p 0.95 kept {kept_p.min()} to {kept_p.max()} tokens (median "
          f"{np.median(kept_p):.0f}) of {CONFIG.vocab_size}")
    print(f"probability removed per step, mean: top-k 50 {cut_k.mean():.4f}, top-p 0.95 "
          f"{cut_p.mean():.4f}")

    plt.figure(figsize=(7, 3))
    plt.plot(kept_k, label="top-k 50")
    plt.plot(kept_p, label="top-p 0.95", alpha=0.8)
    plt.yscale("log")
    plt.xlabel("step")
    plt.ylabel("tokens kept")
    plt.legend()
    plt.grid(alpha=0.3)
    plt.show()
    '''),
    md("""
    Read the three samples side by side, with the probability each filter removed per step (printed
    above). With a vocabulary of only 256 bytes, 50 tokens are a fifth of all there are, so top-k 50
    removes only the far tail. With the same seed, its sample can differ from the unfiltered one only
    where a uniform draw falls within that sliver of probability, so the two may match letter for
    letter. Top-p 0.95 removes
    at most 5% at each step, and where the model is confident (inside a word) it keeps only one or
    two bytes, which is exactly where a stray byte would make a misspelling. With GPT-2's 50,257 tokens the two filters differ more: a
    fixed 50 can be far too many choices after a phrase with one obvious continuation and far too few
    at the start of a sentence, while top-p adapts to both.

    ## Going further

    - Sample with top-p 0.5 and with temperature 1.5 (no filter): what goes wrong in each?
    - Repeat the comparison with the GPT-2 tokenizer's vocabulary (chapter 6 loads GPT-2's weights).
    """),
]
