"""Hidden tests of exercise 6b.1 (scoring a choice by its log-likelihood, summed and per token).

Reference: float64, written out below one position at a time: log p(ids[t]) under row t - 1 of
the logits, through log-sum-exp after subtracting the row's largest logit (math.fsum, so the
reference itself neither overflows nor loses digits); a choice's scores from lib's numpy GPT
read on the context's last n_ctx - len(choice) tokens and the choice (the solution notebook
compares the solution with lib.evaluate.score_choices on chapter 6b's benchmark).
- continuation_logprobs: float64 whatever the logits' dtype, within 1e-9 + 1e-9 |ref| (the
  reference and a vectorised answer differ by rounding only, about 1e-15 relative). The inputs
  include rows shifted by +-1000 and logits scaled to about 1e4, where np.exp overflows (inf, or
  0 whose log is -inf), and float32 logits near 100 (float32's exp overflows above 88.7).
- score_choice: the same tolerance on both numbers for a float64 model; a float32 model within
  1e-6 + 1e-6 |ref| (the answer may crop or batch differently, which changes float32 rounding).
- pick: exact indices, on scores whose best total and best per-token choice differ.
Edge tests: bad start, bad shapes and empty inputs (ValueError), uniform logits (every
log-probability -log V, which a constant answer gets right), a single choice, a tie.
"""
import functools
import math

import numpy as np

from grader.spec import Exercise, Model, Test, Verdict, close

EXERCISE = Exercise(
    notebook="ch6b_scoring", title="Scoring a choice by its log-likelihood",
    functions=("continuation_logprobs", "score_choice", "pick"),
    blocked=("lib.evaluate:log_likelihoods", "lib.evaluate:score_choices", "lib.evaluate:score_questions",
             "lib.numpy_twin.posttrain:response_logp"),      # chapter 9's scorer of a masked response
)

F64 = dict(rtol=1e-9, atol=1e-9)
SMALL = dict(vocab_size=23, n_ctx=12, n_layer=1, n_head=2, n_embd=16)


def continuation_logprobs(logits, ids, start):
    logits = np.asarray(logits, np.float64)
    out = []
    for t in range(start, len(ids)):
        row = [float(z) for z in logits[t - 1]]
        m = max(row)
        log_norm = m + math.log(math.fsum(math.exp(z - m) for z in row))
        out.append(row[int(ids[t])] - log_norm)
    return np.array(out, np.float64)


@functools.lru_cache(maxsize=None)
def _model(config_items, seed, dtype):
    from lib.config import GPTConfig
    from lib.numpy_twin import GPT
    return GPT(GPTConfig(**dict(config_items)), seed=seed, dtype=np.dtype(dtype))


def score_choice(model, context, choice):
    keep = model.config.n_ctx - len(choice)
    ids = np.concatenate([np.asarray(context, np.int64)[-keep:], np.asarray(choice, np.int64)])
    logp = continuation_logprobs(model.forward(ids[None])[0], ids, len(ids) - len(choice))
    total = math.fsum(float(x) for x in logp)
    return total, total / len(choice)


def pick(scores):
    totals, per_token = [s[0] for s in scores], [s[1] for s in scores]
    return totals.index(max(totals)), per_token.index(max(per_token))


REFERENCE = {"continuation_logprobs": continuation_logprobs, "score_choice": score_choice, "pick": pick}


def _number(value):
    """A float from what an answer returned (a Python or numpy float, a 0-d array), or None."""
    if isinstance(value, np.ndarray) and value.shape == () and np.issubdtype(value.dtype, np.floating):
        value = value.item()
    if isinstance(value, (float, np.floating)) and not isinstance(value, bool):
        return float(value)
    return None


def scores_check(expected, k, tol):
    """Check: a pair of floats whose item k (0: total, 1: per token) is within tol of expected's."""
    what = ("the total", "per_token")[k]

    def check(got):
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return False, f"expected a pair (total, per_token), got {type(got).__name__}"
        value = _number(got[k])
        if value is None:
            return False, f"{what} should be a float, got {type(got[k]).__name__}"
        if not math.isfinite(value):
            return False, f"{what} is {value}, not a finite number"
        if abs(value - expected[k]) > tol["atol"] + tol["rtol"] * abs(expected[k]):
            return Verdict(False, f"{what} off: got {value!r}", f"expected {expected[k]!r}")
        return True, f"{what} right"
    return check


def picks_check(expected):
    """Check: a pair of ints equal to expected."""
    def check(got):
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return False, f"expected a pair of indices (by_total, by_per_token), got {type(got).__name__}"
        values = []
        for value in got:
            if isinstance(value, np.ndarray) and value.shape == () and np.issubdtype(value.dtype, np.integer):
                value = value.item()
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                return False, f"expected two ints, got {type(value).__name__}"
            values.append(int(value))
        if tuple(values) != tuple(expected):
            wrong = [name for name, a, b in zip(("by_total", "by_per_token"), values, expected) if a != b]
            return Verdict(False, f"{' and '.join(wrong)} not the likeliest choice (got {tuple(values)})",
                           f"expected {tuple(expected)}")
        return True, "exact"
    return check


def _logit_cases(rng):
    """{label: (logits, ids, start)}: the main cases of continuation_logprobs."""
    V = 13
    base = rng.standard_normal((7, V))
    ids = rng.integers(0, V, 7)
    shift = np.array([1000.0, -1000.0, 0.0, 1000.0, -1000.0, 1000.0, 0.0])[:, None]
    wide = rng.integers(0, 50, 9)
    return {
        "T 7 V 13, start 3": (base, ids, 3),
        "start 1: every token after the first": (base, ids, 1),
        "start T - 1: the last token alone": (base, ids, 6),
        "rows shifted by +-1000": (base + shift, ids, 2),
        "logits about 1e4 (sharp distributions)": (base * 1e4, ids, 1),
        "float32 logits about 100": ((base * 100).astype(np.float32), ids, 2),
        "V 50, T 9, start 4": (rng.standard_normal((9, 50)) * 3, wide, 4),
    }


def _choice_cases(rng):
    """{label: (Model, context, choice, tolerance)} of score_choice."""
    V = SMALL["vocab_size"]
    ids = lambda n: rng.integers(0, V, n)                    # noqa: E731
    f64 = lambda seed: Model(SMALL, seed=seed, dtype="float64")   # noqa: E731
    return {
        "a context of 5, a choice of 3": (f64(1), ids(5), ids(3), F64),
        "a context of 1, a choice of 1": (f64(2), ids(1), ids(1), F64),
        "a context of 2, a choice of 7": (f64(3), ids(2), ids(7), F64),
        "context + choice fill the window exactly (8 + 4 = 12)": (f64(4), ids(8), ids(4), F64),
        "a context of 20 and a choice of 4, window 12": (f64(5), ids(20), ids(4), F64),
        "a context of 30 and a choice of 11, window 12": (f64(6), ids(30), ids(11), F64),
        "a float32 model, a context of 6, a choice of 5": (Model(SMALL, seed=7, dtype="float32"), ids(6), ids(5),
                                                           dict(rtol=1e-6, atol=1e-6)),
    }


def _reference_scores(model, context, choice):
    return score_choice(_model(tuple(model.config.items()), model.seed, model.dtype), context, choice)


def tests():
    rng = np.random.default_rng(6161)
    out = []
    for label, (logits, ids, start) in _logit_cases(rng).items():
        out.append(Test(f"continuation_logprobs: {label}", "continuation_logprobs", (logits, ids, start),
                        close(continuation_logprobs(logits, ids, start), dtype=np.float64, **F64), points=2))
    uniform, ids = np.zeros((5, 8)), rng.integers(0, 8, 5)
    out.append(Test("continuation_logprobs: uniform logits", "continuation_logprobs", (uniform, ids, 2),
                    close(continuation_logprobs(uniform, ids, 2), dtype=np.float64, **F64), edge=True))
    logits = rng.standard_normal((5, 8))
    for label, args in {"start = 0": (logits, ids, 0), "start = T": (logits, ids, 5),
                        "4 rows of logits for 5 ids": (logits[:4], ids, 1)}.items():
        out.append(Test(f"continuation_logprobs: {label} raises ValueError", "continuation_logprobs", args,
                        expect_error="ValueError", edge=True))

    for label, (model, context, choice, tol) in _choice_cases(rng).items():
        expected = _reference_scores(model, context, choice)
        for k, what in enumerate(("the total", "per token")):
            out.append(Test(f"score_choice, {what}: {label}", "score_choice", (model, context, choice),
                            scores_check(expected, k, tol), points=2))
    model, V = Model(SMALL, seed=8, dtype="float64"), SMALL["vocab_size"]
    for label, (context, choice) in {"an empty choice": (rng.integers(0, V, 4), np.zeros(0, np.int64)),
                                     "an empty context": (np.zeros(0, np.int64), rng.integers(0, V, 3)),
                                     "a choice as long as the window (12)": (rng.integers(0, V, 3),
                                                                             rng.integers(0, V, 12))}.items():
        out.append(Test(f"score_choice: {label} raises ValueError", "score_choice", (model, context, choice),
                        expect_error="ValueError", edge=True))

    pick_cases = {
        "3 choices": [(-9.5, -3.2), (-4.1, -4.1), (-8.0, -2.0)],
        "4 choices, the shortest likeliest in total": [(-12.0, -1.5), (-30.0, -1.2), (-3.0, -3.0), (-20.0, -2.5)],
        "5 choices, scores near 0": [(-0.5, -0.25), (-0.03, -0.03), (-0.2, -0.01), (-0.3, -0.1), (-0.04, -0.02)],
        "3 choices, large scores": [(-3000.0, -50.0), (-2500.0, -25.0), (-2800.0, -20.0)],
    }
    for label, scores in pick_cases.items():
        expected = pick(scores)
        assert 0 not in expected and expected[0] != expected[1], label   # a constant answer gets none
        out.append(Test(f"pick: {label}", "pick", (scores,), picks_check(expected), points=2))
    out.append(Test("pick: one choice", "pick", ([(-2.0, -1.0)],), picks_check((0, 0)), edge=True))
    out.append(Test("pick: a tie picks the first", "pick", ([(-5.0, -2.5), (-1.0, -1.0), (-1.0, -1.0)],),
                    picks_check((1, 1)), edge=True))
    out.append(Test("pick: no choices raises ValueError", "pick", ([],), expect_error="ValueError", edge=True))
    return out
