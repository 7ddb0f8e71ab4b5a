"""Exercise 6b.1: scoring a choice by its log-likelihood, summed and per token (numpy)."""
from build_notebooks import check, code, collapsed, graded, md, setup, uses

STUB = '''
import numpy as np


def continuation_logprobs(logits, ids, start):
    """logits (T, V): the model's output after reading the token ids `ids` (T,).
    -> (T - start,) float64: log p(ids[t] | ids[:t]) for t = start, ..., T - 1.
    ValueError unless 1 <= start < T and logits has one row per id."""
    raise NotImplementedError("exercise 6b.1: write continuation_logprobs")


def score_choice(model, context, choice):
    """model: a GPT (model.forward(idx (1, T)) -> logits (1, T, V)); context, choice:
    1-D token ids. -> (total, per_token), two floats: log p(choice | context) summed
    over the choice's tokens, and that sum divided by their number. A context too long
    for the model's window (model.config.n_ctx) loses its first tokens. ValueError for
    an empty context or choice, or a choice that leaves no room for a context token."""
    raise NotImplementedError("exercise 6b.1: write score_choice")


def pick(scores):
    """scores: one (total, per_token) pair per choice, as score_choice returns them.
    -> (by_total, by_per_token), two ints: the index of the likeliest choice by each
    score (the first on a tie). ValueError for no choices."""
    raise NotImplementedError("exercise 6b.1: write pick")
'''

ANSWER = '''
import numpy as np


def continuation_logprobs(logits, ids, start):
    """logits (T, V): the model's output after reading the token ids `ids` (T,).
    -> (T - start,) float64: log p(ids[t] | ids[:t]) for t = start, ..., T - 1.
    ValueError unless 1 <= start < T and logits has one row per id."""
    ids = np.asarray(ids)
    T = len(ids)
    if np.ndim(logits) != 2 or len(logits) != T:
        raise ValueError(f"logits of shape {np.shape(logits)}: expected (T, V), "
                         f"one row per id (T = {T})")
    if not 1 <= start < T:
        raise ValueError(f"start = {start}: expected 1 <= start < T = {T} "
                         f"(token 0 has nothing before it)")
    rows = logits[start - 1:T - 1].astype(np.float64)  # (n, V): row t - 1 scores t
    rows = rows - rows.max(axis=-1, keepdims=True)     # (n, V), each max 0: no overflow
    log_norm = np.log(np.exp(rows).sum(axis=-1))       # (n,) log softmax's denominator
    return rows[np.arange(T - start), ids[start:]] - log_norm   # (n,)


def score_choice(model, context, choice):
    """model: a GPT (model.forward(idx (1, T)) -> logits (1, T, V)); context, choice:
    1-D token ids. -> (total, per_token), two floats: log p(choice | context) summed
    over the choice's tokens, and that sum divided by their number. A context too long
    for the model's window (model.config.n_ctx) loses its first tokens. ValueError for
    an empty context or choice, or a choice that leaves no room for a context token."""
    context, choice = np.asarray(context, np.int64), np.asarray(choice, np.int64)
    n_ctx = model.config.n_ctx
    if len(context) == 0 or not 1 <= len(choice) < n_ctx:
        raise ValueError(f"a context of {len(context)} and a choice of {len(choice)} "
                         f"tokens: expected at least 1 of context and 1 to {n_ctx - 1} "
                         f"of choice (window n_ctx = {n_ctx})")
    context = context[-(n_ctx - len(choice)):]    # the last tokens that fit
    ids = np.concatenate([context, choice])       # (T,), T <= n_ctx
    logits = model.forward(ids[None])[0]          # (1, T) -> (T, V)
    logp = continuation_logprobs(logits, ids, len(context))   # (len(choice),)
    total = float(logp.sum())
    return total, total / len(choice)


def pick(scores):
    """scores: one (total, per_token) pair per choice, as score_choice returns them.
    -> (by_total, by_per_token), two ints: the index of the likeliest choice by each
    score (the first on a tie). ValueError for no choices."""
    scores = np.asarray(scores, np.float64).reshape(-1, 2)    # (K, 2)
    if len(scores) == 0:
        raise ValueError("no scores: expected one (total, per_token) pair per choice")
    return int(np.argmax(scores[:, 0])), int(np.argmax(scores[:, 1]))
'''

# The formulas the answer is, as the hints write them: shown only in a hint's last stage
# (tests/test_staged_hints.py).
FINAL_FORMULAS = [
    r"(z_v - m) - \log \sum_u e^{z_u - m}",
    "rows `start - 1` to `T - 2`",
]

CELLS = [
    md(r"""
    # Exercise 6b.1: Scoring a choice by its log-likelihood

    This exercise follows [chapter 6b](../chapters/06b_evaluation.ipynb). A multiple-choice item is
    a context and a few candidate continuations; the model's answer is the candidate it finds
    likeliest after the context. You write the scorer: the log-probability of a continuation's
    tokens, from one forward pass, summed and per token, and the pick by each. Tables of
    HellaSwag results usually quote both accuracies: the sum's, and a length-normalised one,
    of which the mean per token is one form.

    **What is graded.** The cell tagged `graded:ch6b_scoring` (JupyterLab shows a cell's tags in
    its property inspector; Colab keeps them without showing them). A grader runs that cell alone,
    in a sandbox, and calls your functions on hidden inputs, with small random models; nothing
    else in this notebook is graded. Some hidden tests are *edge tests*: bad input that must
    raise, or cases a function that does almost nothing also gets right (uniform logits, say). An
    edge test counts only once every other test of the same function passes, so that an empty
    answer cannot collect points.
    """),
    setup(),
    md(r"""
    ## What to write

    - `continuation_logprobs(logits, ids, start)`: `logits (T, V)` is what the model returned
      after reading `ids (T,)`. Return, in float64, the log-probability the model gave each token
      from position `start` on, given all the tokens before it: `(T - start,)` numbers, each
      $\le 0$. Token 0 has nothing before it, so `start` must be at least 1.
    - `score_choice(model, context, choice)`: one forward pass over the context followed by the
      choice, and the two scores of the choice: the sum of its tokens' log-probabilities,
      $\log p(\text{choice} \mid \text{context})$, and that sum per choice token. Only the choice's
      tokens count. When context and choice do not fit in the model's window of
      `model.config.n_ctx` tokens, keep the end of the context, as a long prompt is cropped.
    - `pick(scores)`: given each choice's pair from `score_choice`, the index of the choice each
      score prefers.

    The results to reach: adding the same number to every logit of a row changes no
    probability, so your log-probabilities must not change either, even when that number is
    1,000 (`np.exp(1000.0)` is `inf`); and a choice's sum must equal what you get by asking the
    model for one token at a time, each after everything before it. Two questions to settle
    before you write code: which row of `logits` holds the prediction of token `t`, and why the
    scores are computed in float64 although the model runs in float32.

    :::{admonition} A log-softmax that cannot overflow, hint 1 of 2: the idea
    :class: dropdown
    Take the logarithm of the softmax before computing anything: it is a difference of a logit
    and the logarithm of a sum of exponentials. Then use the fact above (the same number added
    to every logit of a row changes nothing) and choose the number so that no exponent is
    positive and at least one is 0.
    :::

    :::{admonition} A log-softmax that cannot overflow, hint 2 of 2: the formula
    :class: dropdown
    For a row $z$ of logits with largest value $m$,
    $\log \mathrm{softmax}(z)_v = (z_v - m) - \log \sum_u e^{z_u - m}$. Every exponent is at most
    0, so none overflows, and the largest term of the sum is 1, so the logarithm never sees 0.
    :::

    :::{admonition} Which logits score which token, hint 1 of 2: the idea
    :class: dropdown
    The model at position $t$ has read tokens $0 \dots t$. Which token does that row predict, and
    so which row predicts token $t$? Then ask which rows the tokens from `start` on need, and
    which row none of them needs.
    :::

    :::{admonition} Which logits score which token, hint 2 of 2: the rows
    :class: dropdown
    The model at position $t$ predicts token $t + 1$. Token $t$ is therefore scored by row
    $t - 1$: rows `start - 1` to `T - 2` score tokens `start` to `T - 1`, and the last row (the
    prediction after the whole text) is not used.
    :::

    **Rules.** numpy only. The model is lib's numpy GPT (`model.forward(idx)` with `idx (1, T)`
    integer ids returns logits `(1, T, V)`); raising `ValueError` for bad input is part of the
    answer. While grading, lib's `log_likelihoods`, `score_choices` and `score_questions` raise
    an error. The graded cell must hold everything it uses, imports included.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    Each cell checks one thing and says what it found. The model here is a tiny random GPT (11
    tokens, a window of 8), in float64, so that sums can be compared to many digits.
    """),
    code('''
    import numpy as np

    from lib.checks import (CheckFailed, expect_close, expect_equal, expect_raises,
                            expect_shape)
    from lib.config import GPTConfig
    from lib.numpy_twin import GPT

    rng = np.random.default_rng(61)
    V, T = 11, 6
    ids = rng.integers(0, V, T)                               # (T,)
    logits = rng.standard_normal((T, V))                      # (T, V)
    tiny = GPT(GPTConfig(vocab_size=V, n_ctx=8, n_layer=1, n_head=2, n_embd=8), seed=3,
               dtype=np.float64)


    def by_definition(logits, ids, start):
        """log p(ids[t]) under the softmax of row t - 1, one token at a time, as written."""
        out = []
        for t in range(start, len(ids)):
            p = np.exp(logits[t - 1]) / np.exp(logits[t - 1]).sum()    # (V,)
            out.append(np.log(p[ids[t]]))
        return np.array(out)


    def one_token_at_a_time(model, context, choice):
        """log p(choice | context): the model reads each prefix, scores the next token."""
        total, seen = 0.0, list(context)
        for token in choice:
            last = model.forward(np.array(seen)[None])[0, -1]                # (V,)
            total += np.log(np.exp(last)[token] / np.exp(last).sum())
            seen.append(token)
        return total
    '''),
    check('''
    got = continuation_logprobs(logits.astype(np.float32), ids, 2)
    expect_shape("continuation_logprobs: T - start values, float64 from float32 logits",
                 got, (T - 2,), np.float64)
    '''),
    check('''
    got = continuation_logprobs(logits, ids, 2)
    want = by_definition(logits, ids, 2)
    if np.shape(got) == want.shape and np.allclose(got, by_definition(logits[1:], ids, 2)):
        raise CheckFailed("continuation_logprobs: token t was scored by row t of the "
                          "logits; the logits at position t predict token t + 1, so "
                          "token t is row t - 1's")
    expect_close("continuation_logprobs: row t - 1 scores token t", got, want, rtol=1e-9)
    '''),
    check('''
    shift = np.array([1000.0, -1000.0, 1000.0, -1000.0, 1000.0, 0.0])[:, None]  # (T, 1)
    expect_close("continuation_logprobs: 1000 added to or taken from every logit of a row "
                 "(a softmax through np.exp overflows)",
                 continuation_logprobs(logits + shift, ids, 1),
                 by_definition(logits, ids, 1), rtol=1e-9)
    '''),
    check('''
    expect_raises("continuation_logprobs: start = 0 (token 0 has nothing before it)",
                  ValueError, continuation_logprobs, logits, ids, 0)
    expect_raises("continuation_logprobs: start = T (nothing left to score)", ValueError,
                  continuation_logprobs, logits, ids, T)
    '''),
    check('''
    context, choice = [3, 1, 4], [1, 5, 9]
    total, per_token = score_choice(tiny, context, choice)
    whole = one_token_at_a_time(tiny, context[:1], context[1:] + choice)
    if np.isclose(total, whole, rtol=1e-9):
        raise CheckFailed("score_choice: the total holds the context's tokens too; only "
                          "the choice's tokens are scored, each after the context")
    expect_close("score_choice: the total, against one token at a time", total,
                 one_token_at_a_time(tiny, context, choice), rtol=1e-9)
    '''),
    check('''
    context, choice = [2, 7, 1, 8, 2], [8, 1]
    total, per_token = score_choice(tiny, context, choice)
    if np.isclose(per_token, total / (len(context) + len(choice)), rtol=1e-9):
        raise CheckFailed("score_choice: per_token divides by every token the model read; "
                          "it is the choice's average, over the choice's tokens")
    expect_close("score_choice: per_token, the total over the choice's 2 tokens", per_token,
                 one_token_at_a_time(tiny, context, choice) / 2, rtol=1e-9)
    '''),
    check('''
    context, choice = list(range(10)), [4, 4, 2]      # 10 + 3 tokens, a window of 8
    try:
        total, _ = score_choice(tiny, context, choice)
    except ValueError as e:
        raise CheckFailed(f"score_choice: a context of 10 tokens and a choice of 3 "
                          f"raised ValueError ({e}); the context must lose its first "
                          f"tokens until the two fit the window of 8") from None
    expect_close("score_choice: a context longer than the window keeps its last 5 tokens",
                 total, one_token_at_a_time(tiny, context[-5:], choice), rtol=1e-9)
    '''),
    check('''
    scores = [(-9.0, -3.0), (-4.0, -4.0), (-8.0, -2.0)]   # (total, per_token) of 3 choices
    if tuple(pick(scores)) == (0, 1):
        raise CheckFailed("pick: it took the lowest scores; a log-probability closer to 0 "
                          "is the likelier choice (a loss is its negative)")
    expect_equal("pick: the highest total is choice 1, the highest per token choice 2",
                 tuple(pick(scores)), (1, 2))
    '''),
    md(r"""
    ## Your scorer on Shakespeare

    Chapter 5's small model read Shakespeare byte by byte. After "through yonder" it should find
    ` window` far likelier than a misspelling of it, by both scores. A short, common word is
    another matter: ` wall` beats Romeo's ` window` by the total, which pays for every byte a
    longer word has.
    """),
    uses('''
    from lib.pretrained import shakespeare_small
    from lib.tokenizer import BPETokenizer

    tok = BPETokenizer()                          # bytes: the small model's tokens
    model = shakespeare_small("numpy")
    context = tok.encode("ROMEO:\\nBut, soft! what light through yonder")
    texts = [" window", " wimdow", " wndiow", " wall"]
    scores = [score_choice(model, context, tok.encode(t)) for t in texts]
    for text, (total, per_token) in zip(texts, scores):
        print(f"{text!r:10} total {total:7.2f}   per token {per_token:6.2f}")
    assert pick(scores[:3]) == (0, 0) and pick(scores)[0] == 3
    '''),
    md(r"""
    Now chapter 6b's benchmark: a line of a play that no model here trained on, and four lines
    that may follow it, one of them the real one. 100 items, both picks, and your scores against
    lib's `score_choices`, which reads all of an item's choices in one batched pass (the two agree
    to float32's rounding, about 1e-4 per token, where context and choice fit the window):
    """),
    uses('''
    from lib.evaluate import next_line_items, score_choices

    items = next_line_items(100)
    right = np.zeros(2)                           # items right by total, per token
    largest_gap = 0.0
    for item in items:
        context = tok.encode(item["context"])
        choices = [tok.encode(c) for c in item["choices"]]
        scores = [score_choice(model, context, c) for c in choices]
        right += np.array(pick(scores)) == item["label"]
        if all(len(context) + len(c) <= model.config.n_ctx for c in choices):
            libs = score_choices(model, context, choices)
            gap = np.abs(np.array(scores)[:, 0] - libs.sum) / libs.n_tokens
            largest_gap = max(largest_gap, gap.max())
    print(f"accuracy by total {right[0] / 100:.2f}, per token {right[1] / 100:.2f} "
          f"(chance 0.25); largest difference from lib, per token: {largest_gap:.1e}")
    assert largest_gap < 1e-4 and all(abs(r / 100 - 0.25) < 0.1 for r in right)
    '''),
    md(r"""
    Both picks sit near chance here, as chapter 6b found with lib's scorer: the sum and the mean
    reward lines that are likely anywhere. The chapter's cure, the gain over a neutral text, is one
    more call of your `score_choice` per choice.

    ## Compare with lib

    lib's version, now that yours works: all the choices of many items go through the model in one
    batch, padded on the right and masked, and only the choices' rows of logits reach the
    log-softmax. Open the cell below once your checks pass.
    """),
    collapsed('''
    from lib.display import show
    from lib.evaluate import log_likelihoods, score_questions

    show(log_likelihoods, score_questions)
    '''),
    md("""
    ## Going further

    - Score all of an item's choices in one forward pass, as lib does: which positions must the
      mask keep, and why does padding on the right change nothing before it?
    - Add the gain over a neutral text (`"\\n"`) to the loop above. How far above chance does it
      take the small model on these 100 items?
    """),
]
