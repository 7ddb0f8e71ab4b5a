"""The vocabulary of hidden tests: what an exercise is, what one test asks, and how answers are compared.

A hidden test module (`solutions/<exercise>/hidden_tests.py`, never shipped to students) defines

    EXERCISE = Exercise(notebook="ch4_gelu", title=..., functions=(...), blocked=(...))
    def tests() -> list[Test]: ...
    REFERENCE = {name: implementation}   # the grader's own answers, used by the checks

Arguments of a test cross into the sandbox as plain values: numpy arrays (npz without pickle),
JSON scalars and lists, and three markers the sandbox turns into objects there: `Config`
(a GPTConfig), `Model` (a numpy-twin GPT with seeded weights) and `Rng` (a numpy Generator).
The student's return value comes back the same way and `Test.check` judges it here, in the
grader's process, where the student's code never ran.

A check returns a `Verdict`: whether the answer passes, a message for the student and a detail
for the instructor. The message never holds an expected value or its size (a student who read
them could build a table of answers in two rounds); the detail may. The grader cuts every
message to grader.results.MAX_TEXT characters.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import numpy as np

DEFAULT_MASKED = ("torch", "transformers")  # hold reference answers (F.gelu, logits warpers, ...)


@dataclass(frozen=True)
class Config:
    """A `lib.config.GPTConfig(**fields)`, built inside the sandbox."""
    fields: dict


@dataclass(frozen=True)
class Model:
    """A `lib.numpy_twin.GPT(GPTConfig(**config), seed, dtype)`, built inside the sandbox."""
    config: dict
    seed: int = 0
    dtype: str = "float64"


@dataclass(frozen=True)
class Rng:
    """A `numpy.random.default_rng(seed)`, built inside the sandbox."""
    seed: int


@dataclass(frozen=True)
class Exercise:
    """notebook: the exercise's one name, that of the notebook it is handed in as (without
    .ipynb); its graded cells are tagged `graded:<notebook>`, its hidden tests are
    `<notebook>.py`, and a handed-in file is graded on the exercise whose name its own name
    contains. title: its name in reports. functions: the names the graded
    cells must define. blocked: lib names that answer the exercise, stubbed in the sandbox's copy
    of lib ("module:name", "module:Class.method", or "module:*" for every def and class).
    masked: installed packages hidden from the sandbox. groups: CPU seconds allowed per group of
    tests (each group runs in a sandbox of its own, loading the graded cells afresh).
    builds_on: {earlier exercise: (function names, ...)}: the pieces a capstone calls as
    `parts.name`, taken from the graded cells of the student's own notebooks of those
    exercises, handed in with it (lib.handin.parts_from_sources builds `parts` in the sandbox).
    taught: blocked names whose source a chapter shows on purpose before the exercise (the
    exercise has the student write it again): stubbed in the sandbox all the same, but not an
    answer that the book's leak check looks for (tools/answer_leaks.py)."""
    notebook: str
    title: str
    functions: tuple[str, ...]
    blocked: tuple[str, ...] = ()
    masked: tuple[str, ...] = DEFAULT_MASKED
    groups: dict = field(default_factory=lambda: {"main": 60.0})
    memory: dict = field(default_factory=dict)
    builds_on: dict = field(default_factory=dict)
    taught: tuple[str, ...] = ()


@dataclass
class Test:
    """One graded question: call `function` (a name the graded cells define) with `args`
    through `driver` (see grader/runner.py) and judge the returned value with `check`,
    which returns a Verdict (or a pair: passed, message). `expect_error` names the exception
    class the call must raise instead (then `check` is not used). An `edge` test (an error
    check, an empty input, a value that a trivial answer also gets right) earns its points only
    when every test of the same function that is not an edge test passes. `requires` names other
    functions whose every test must pass for this one to earn its points (exercise 4.4's whole
    model counts once its block and LayerNorm do, so that reading the grader's stand-ins for
    them is worth nothing on its own)."""
    __test__ = False                                 # not a pytest test class, despite its name
    name: str
    function: str
    args: tuple = ()
    check: Callable[[Any], tuple[bool, str]] | None = None
    kwargs: dict = field(default_factory=dict)
    points: int = 1
    group: str = "main"
    driver: str = "call"
    expect_error: str | None = None
    edge: bool = False
    requires: tuple[str, ...] = ()


class Verdict(NamedTuple):
    passed: bool
    message: str                   # for the student: what is wrong, never the expected value
    detail: str = ""               # for the instructor: the expected value, where it helps


# ---- checks ------------------------------------------------------------------------------------
def close(expected, rtol, atol, dtype=None, match_nan=False):
    """Check: an array of expected's shape (and of `dtype`, if given), finite where expected is,
    within |got - expected| <= atol + rtol |expected| everywhere; with `match_nan`, NaN exactly
    where expected is NaN (otherwise expected's non-finite entries are not compared)."""
    expected = np.asarray(expected)

    def check(got):
        if not isinstance(got, np.ndarray):
            return False, f"expected a numpy array, got {type(got).__name__}"
        if got.shape != expected.shape:
            return Verdict(False, f"shape {got.shape}: not the expected shape", f"expected {expected.shape}")
        if dtype is not None and got.dtype != np.dtype(dtype):
            return False, f"dtype {got.dtype}, expected {np.dtype(dtype)} (keep the input's dtype)"
        if not np.issubdtype(got.dtype, np.number):
            return False, f"dtype {got.dtype} is not numeric"
        got64, want = got.astype(np.float64), expected.astype(np.float64)
        if match_nan and (np.isnan(got64) != np.isnan(want)).any():
            i = np.flatnonzero(np.isnan(got64) != np.isnan(want))[0]
            return Verdict(False, f"NaN where a number is expected, or the reverse (first at flat index {i}: "
                                  f"got {got64.flat[i]!r})", f"expected {want.flat[i]!r}")
        bad_nan = np.isfinite(want) & ~np.isfinite(got64)
        if bad_nan.any():
            i = np.flatnonzero(bad_nan)[0]
            return False, f"{int(bad_nan.sum())} non-finite values where finite ones are expected (first at flat index {i})"
        err = np.abs(got64 - want)
        bad = ~(err <= atol + rtol * np.abs(want)) & np.isfinite(want)
        if bad.any():
            i = np.argmax(np.where(bad, err, -1))
            return Verdict(False, f"{int(bad.sum())} of {want.size} values off; worst at flat index {i}: "
                                  f"got {got64.flat[i]!r} (tolerance {atol} + {rtol}*|expected|)",
                           f"expected {want.flat[i]!r}")
        return Verdict(True, f"max abs error {np.nanmax(err) if np.isfinite(err).any() else 0:.3g}")
    return check


def equal(expected):
    """Check: exactly equal (ints, lists, None, or integer arrays compared element by element)."""
    def check(got):
        if isinstance(expected, np.ndarray):
            if not isinstance(got, np.ndarray) or got.shape != expected.shape:
                return Verdict(False, f"got {_describe(got)}: not an array of the expected shape",
                               f"expected shape {expected.shape}")
            if not np.issubdtype(got.dtype, np.integer):
                return False, f"expected integers, got dtype {got.dtype}"
            diff = np.argwhere(got != expected)
            if len(diff):
                at = tuple(int(i) for i in diff[0])
                return Verdict(False, f"{len(diff)} entries differ; first at {at}: got {got[at]}",
                               f"expected {expected[at]}")
            return Verdict(True, "exact")
        if type(got) is not type(expected) or got != expected:
            return Verdict(False, f"got {_describe(got)}: not the expected value", f"expected {expected!r}")
        return Verdict(True, "exact")
    return check


def filtered(expected):
    """Check for logit filters: the same shape and dtype as `expected`, -inf exactly where it
    is -inf, and elsewhere exactly its values (a filter removes entries, it does not change them)."""
    expected = np.asarray(expected)

    def check(got):
        if not isinstance(got, np.ndarray) or got.shape != expected.shape:
            return Verdict(False, f"got {_describe(got)}: not an array of the expected shape",
                           f"expected shape {expected.shape}")
        if got.dtype != expected.dtype:
            return False, f"dtype {got.dtype}, expected {expected.dtype} (keep the logits' dtype)"
        removed, want_removed = np.isneginf(got), np.isneginf(expected)
        if (removed != want_removed).any():
            rows = np.argwhere((removed != want_removed).reshape(-1, expected.shape[-1]).any(axis=-1)).ravel()
            kept, want = (~removed).reshape(-1, expected.shape[-1]), (~want_removed).reshape(-1, expected.shape[-1])
            r = rows[0]
            return Verdict(False, f"{len(rows)} row(s) keep the wrong tokens; row {r} keeps {int(kept[r].sum())} "
                                  f"token(s)", f"expected {int(want[r].sum())} in row {r}")
        if not np.array_equal(got[~want_removed], expected[~want_removed]):
            return False, "kept logits were changed; a filter must return them as they were"
        return True, f"keeps {int((~want_removed).sum())} of {expected.size}"
    return check


def frequencies(probs, sigmas=5.0):
    """Check for samplers: (N,) integer ids drawn from the rows of `probs` (N, V); for every row
    pattern (identical rows are pooled) and token, the count is within `sigmas` binomial standard
    deviations of N p, and tokens of probability 0 never appear."""
    probs = np.asarray(probs, np.float64)

    def check(got):
        if not isinstance(got, np.ndarray) or got.shape != probs.shape[:1]:
            return False, f"expected {probs.shape[0]} ids of shape ({probs.shape[0]},), got {_describe(got)}"
        if not np.issubdtype(got.dtype, np.integer):
            return False, f"expected integer ids, got dtype {got.dtype}"
        if got.min(initial=0) < 0 or got.max(initial=0) >= probs.shape[1]:
            return False, f"ids outside [0, {probs.shape[1]})"
        patterns, which = np.unique(probs, axis=0, return_inverse=True)
        for k, p in enumerate(patterns):
            ids = got[which.ravel() == k]
            n = len(ids)
            counts = np.bincount(ids, minlength=len(p))
            if (counts[p == 0] > 0).any():
                j = int(np.flatnonzero((p == 0) & (counts > 0))[0])
                return False, f"token {j} has probability 0 but was drawn {counts[j]} times"
            sd = np.sqrt(n * p * (1 - p))
            z = np.where(sd > 0, np.abs(counts - n * p) / np.where(sd > 0, sd, 1), 0)
            if (z > sigmas).any():
                j = int(np.argmax(z))
                return Verdict(False, f"token {j} drawn {counts[j]} times in {n}: {z[j]:.1f} standard deviations "
                                      f"from what its probability gives", f"expected {n * p[j]:.1f} +- {sd[j]:.1f}")
        return True, "frequencies within 5 sigma"
    return check


def integer(expected: int):
    """Check: an integer (a Python int or a 0-d integer array) equal to `expected`."""
    def check(got):
        if isinstance(got, np.ndarray) and got.ndim == 0 and np.issubdtype(got.dtype, np.integer):
            got = int(got)
        if not isinstance(got, int) or isinstance(got, bool):
            return False, f"expected an int, got {_describe(got)}"
        if got != expected:
            return Verdict(False, f"got {got:,}: not the right count", f"expected {expected:,} (off by {got - expected:+,})")
        return Verdict(True, "exact")
    return check


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array shape {value.shape} dtype {value.dtype}"
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."
