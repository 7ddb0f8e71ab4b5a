"""lib.checks: each check passes on a right answer (printing `ok: <name>`) and fails with a
CheckFailed (an AssertionError) whose message names the value and the difference."""
import re

import numpy as np
import pytest

from lib.checks import (CheckFailed, expect_accumulates, expect_close, expect_equal, expect_grad, expect_raises,
                        expect_shape, watch, your_output)


def fails(message, check, *args, **kwargs):
    """Run a check that must fail, with exactly this message."""
    with pytest.raises(CheckFailed, match="^" + re.escape(message) + "$"):
        check(*args, **kwargs)


def test_a_failed_check_is_an_assertion_error():
    assert issubclass(CheckFailed, AssertionError)


def test_passing_checks_print_one_ok_line_each(capsys):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    expect_shape("x", x, (2, 3), np.float32)
    expect_shape("x any dtype", x, (2, 3))
    expect_close("y", x + 1e-7, x, rtol=1e-6, atol=1e-6)
    expect_equal("ids", [1, 2, 3], np.array([1, 2, 3]))
    expect_grad("sin", lambda v: np.sin(v).sum(), np.cos, np.linspace(-2, 2, 6).reshape(2, 3))
    assert capsys.readouterr().out.splitlines() == ["ok: x", "ok: x any dtype", "ok: y", "ok: ids", "ok: sin"]


def test_expect_shape_names_the_shape_and_dtype_it_got():
    fails("x: expected shape (2, 3) float32, got (3, 2) float64",
          expect_shape, "x", np.zeros((3, 2)), (2, 3), np.float32)
    fails("x: expected shape (2, 3) float64, got (2, 3) float32",
          expect_shape, "x", np.zeros((2, 3), np.float32), (2, 3), "float64")
    fails("x: expected shape (4,), got (2, 2) float64", expect_shape, "x", np.zeros((2, 2)), (4,))
    fails("x: expected an array of shape (2,), got list [1, 2]", expect_shape, "x", [1, 2], (2,))
    fails("x: expected an array of shape (), got NoneType None", expect_shape, "x", None, ())


def test_expect_shape_takes_torch_tensors_and_dtypes():
    torch = pytest.importorskip("torch")
    expect_shape("t", torch.zeros(2, 3), (2, 3), torch.float32)
    expect_shape("t", torch.zeros(2, 3), (2, 3), np.float32)
    fails("t: expected shape (2, 3) bfloat16, got (2, 3) float32",
          expect_shape, "t", torch.zeros(2, 3), (2, 3), torch.bfloat16)


def test_expect_close_checks_shape_and_dtype_before_values():
    want = np.zeros((2, 3))
    fails("y: expected shape (2, 3) float64, got (3, 2) float64", expect_close, "y", np.zeros((3, 2)), want)
    fails("y: expected shape (2, 3) float64, got (2, 3) float32",
          expect_close, "y", np.zeros((2, 3), np.float32), want)
    fails("y: expected an array of shape (2, 3) float64, got float 0.0", expect_close, "y", 0.0, want)


def test_expect_close_counts_the_values_that_differ_and_shows_the_first():
    want = np.arange(12.0).reshape(3, 4) / 8                      # (3, 4)
    got = want.copy()
    got[0, 2] += 1
    got[1, 1] += 1
    got[2, 3] += 1e-9                                             # within rtol=1e-6
    fails("y: 2 of 12 values differ beyond rtol=1e-06 atol=0; first at index (0, 2): got 1.25, expected 0.25",
          expect_close, "y", got, want)
    fails("y: 1 of 3 values differ beyond rtol=0.01 atol=0.1; first at index 2: got 3, expected 2",
          expect_close, "y", np.array([0.0, 1.05, 3.0]), np.array([0.0, 1.0, 2.0]), rtol=0.01, atol=0.1)


def test_expect_close_shows_digits_enough_to_tell_values_apart():
    fails("y: 1 of 1 values differ beyond rtol=1e-12 atol=0; first at index 0: "
          "got 1.0000000001, expected 1",
          expect_close, "y", np.array([1.0 + 1e-10]), np.array([1.0]), rtol=1e-12)


def test_expect_close_reports_nan_and_inf():
    want = np.ones((2, 2))
    got = want.copy()
    got[1, 0] = np.nan
    got[1, 1] = np.inf
    fails("y: 2 of 4 values differ; first at index (1, 0): got nan, expected 1 "
          "(NaN: from inf - inf, 0 / 0 or the log of a negative?)", expect_close, "y", got, want)
    got[1, 0] = 1.5
    fails("y: 2 of 4 values differ beyond rtol=1e-06 atol=0; first at index (1, 1): got inf, expected 1 "
          "(inf where a finite value was expected: an overflow, or masked when it should stay?)",
          expect_close, "y", got, want)
    expect_close("matching inf and NaN", np.array([np.inf, np.nan]), np.array([np.inf, np.nan]))


def test_expect_close_reports_an_expected_minus_inf_as_a_masked_value():
    want = np.array([[0.5, -np.inf], [-np.inf, 2.0]])
    expect_close("masked", want.copy(), want)
    fails("filter: 1 of 4 values differ; first at index (1, 0): got 1.25, expected -inf "
          "(expected -inf: a value masked or filtered out)",
          expect_close, "filter", np.array([[0.5, -np.inf], [1.25, 2.0]]), want)
    fails("filter: 1 of 4 values differ; first at index (0, 0): got -inf, expected 0.5 "
          "(-inf where a finite value was expected: an overflow, or masked when it should stay?)",
          expect_close, "filter", np.array([[-np.inf, -np.inf], [-np.inf, 2.0]]), want)
    fails("p: got inf, expected -inf (expected -inf: a value masked or filtered out)",
          expect_close, "p", np.inf, -np.inf)


def test_expect_close_names_the_axes_it_is_told():
    want = np.zeros((2, 3, 4))                                    # (B, T, C)
    got = want.copy()
    got[1, 2, 3] = 0.5
    fails("attention: 1 of 24 values differ beyond rtol=1e-06 atol=0; first at (b, t, c) = (1, 2, 3): "
          "got 0.5, expected 0", expect_close, "attention", got, want, axes="btc")
    fails("ids: 1 of 24 values differ; first at (b, t, c) = (1, 2, 3): got 0.5, expected 0.0",
          expect_equal, "ids", got, want, axes="btc")


def test_expect_close_on_numbers_and_lists():
    expect_close("loss", 2.5, 2.5 + 1e-9)
    fails("loss: got 2.5, expected 2.6, beyond rtol=1e-06 atol=0", expect_close, "loss", 2.5, 2.6)
    fails("loss: got 2.5, expected 2.6, beyond rtol=1e-06 atol=0", expect_close, "loss", np.float32(2.5), 2.6)


def test_values_are_written_as_plain_numbers():
    fails("x: expected an array of shape (2,), got float64 0.5", expect_shape, "x", np.float64(0.5), (2,))
    fails("pair: expected an array of shape (2,), got tuple (1.5, 2)", expect_shape, "pair",
          (np.float64(1.5), np.int64(2)), (2,))
    fails("n: got 3, expected 4", expect_equal, "n", np.int64(3), 4)
    expect_close("list", [1.0, 2.0], [1.0, 2.0])


def test_expect_equal_shows_the_first_difference():
    fails("ids: first difference at index 7: got 261, expected 259",
          expect_equal, "ids", [0, 1, 2, 3, 4, 5, 6, 261, 8], np.array([0, 1, 2, 3, 4, 5, 6, 259, 8]))
    fails("pair: first difference at index 0: got None, expected 101", expect_equal, "pair", (None, None), (101, 601))
    fails("grid: 1 of 4 values differ; first at index (1, 0): got 0, expected 1",
          expect_equal, "grid", np.eye(2, dtype=int), np.array([[1, 0], [1, 1]]))
    fails("n: got 3, expected 4", expect_equal, "n", 3, 4)
    fails("s: got 'abc', expected 'abd'", expect_equal, "s", "abc", "abd")


def test_expect_equal_reports_lengths_and_types():
    fails("ids: got 2 items, expected 3; the first 2 agree", expect_equal, "ids", np.array([1, 2]), [1, 2, 3])
    fails("ids: got 2 items, expected 3; first difference at index 1: got 5, expected 2",
          expect_equal, "ids", [1, 5], [1, 2, 3])
    fails("ids: expected a list, tuple or array of length 1, got int 3", expect_equal, "ids", 3, [4])
    fails("grid: expected shape (2, 2), got (4,)", expect_equal, "grid", np.arange(4), np.eye(2))


def test_expect_grad_names_the_worst_coordinate():
    x = np.linspace(-2, 2, 6).reshape(2, 3)                       # (2, 3)
    f = lambda v: np.sin(v).sum()                                 # noqa: E731
    fails("sin: worst coordinate at index (1, 1): analytic 0.3805, numeric 0.3624, relative error 4.8e-02 (allowed 1e-05)",
          expect_grad, "sin", f, lambda v: 1.05 * np.cos(v), x)
    fails("sin: expected shape (2, 3), got (1, 3) float64", expect_grad, "sin", f, lambda v: np.cos(v)[:1], x)
    fails("sin: expected an array of shape (2, 3), got float 1.0", expect_grad, "sin", f, lambda v: 1.0, x)


def test_expect_grad_fails_on_nan_and_accepts_zero_derivatives():
    x = np.array([-1.0, 0.0, 1.0])
    fails("cube: worst coordinate at index 1: analytic nan, numeric 0, relative error inf (allowed 1e-05)",
          expect_grad, "cube", lambda v: (v ** 3).sum(), lambda v: np.where(v == 0, np.nan, 3 * v * v), x)
    expect_grad("flat", lambda v: 1e3 + (v ** 4).sum(), lambda v: 4 * v ** 3, np.array([0.0, 1e-3, 0.5]))


def test_expect_grad_evaluates_in_float64_without_touching_x():
    x = np.array([0.1, 0.2], dtype=np.float32)
    seen = []
    expect_grad("square", lambda v: seen.append(v.dtype) or (v * v).sum(), lambda v: 2 * v, x)
    assert set(seen) == {np.dtype(np.float64)}
    assert x.tolist() == [np.float32(0.1), np.float32(0.2)]


def test_expect_accumulates_catches_a_backward_that_assigns():
    grads = {"w": np.zeros(3)}
    dw = np.array([1.0, -2.0, 0.5])

    def adds():
        grads["w"] += dw

    def assigns():
        grads["w"][...] = dw

    expect_accumulates("adds", adds, lambda: grads)
    grads["w"][:] = 0
    fails("assigns: after two backward passes, w holds one pass's gradient: the second pass overwrote the "
          "first (= where += is needed)", expect_accumulates, "assigns", assigns, lambda: grads)
    grads["w"][:] = 0
    fails("thrice: after two backward passes, w holds not twice one pass's gradient",
          expect_accumulates, "thrice", lambda: grads["w"].__iadd__(dw * (1 + grads["w"].any())), lambda: grads)


def test_expect_raises_names_what_came_instead(capsys):
    def strict(x):
        if x < 0:
            raise ValueError(f"x must be >= 0; got {x}")
        return np.float64(x)

    expect_raises("x = -1", ValueError, strict, -1)
    assert capsys.readouterr().out == "ok: x = -1 raises ValueError: x must be >= 0; got -1\n"
    fails("x = 1: expected ValueError, but the call returned float64 1.0", expect_raises, "x = 1", ValueError, strict, 1)
    fails("x = 'a': expected ValueError, got TypeError: '<' not supported between instances of 'str' and 'int'",
          expect_raises, "x = 'a'", ValueError, strict, "a")
    with pytest.raises(NotImplementedError):                     # a stub stays a stub
        expect_raises("stub", ValueError, lambda: (_ for _ in ()).throw(NotImplementedError("write it")))


def test_an_error_inside_lib_names_the_students_function_and_what_it_returned():
    from lib.numpy_twin import softmax                           # lib code that fails on a bad shape
    returned = np.zeros((2, 0))
    with pytest.raises(CheckFailed, match=r"^top_k_filter: lib's `softmax` raised ValueError: .*, "
                                          r"after your top_k_filter returned \(2, 0\) float64$"):
        with your_output("top_k_filter", returned):
            softmax(returned)
    with pytest.raises(ZeroDivisionError):                        # the student's own error: unchanged
        with your_output("f", 1.0):
            1 / 0


def test_watch_names_what_a_method_returned_last():
    from lib.numpy_twin import softmax

    class Cache:
        def update(self, k):
            return k[:, :0]                                       # returns no position: the bug

    cache = Cache()
    with pytest.raises(CheckFailed, match=r"^Cache.update: lib's `softmax` raised ValueError: .*, after your "
                                          r"Cache.update returned \(1, 0\) float64 \(call 2\)$"):
        with watch(cache, "update") as w, your_output("Cache.update", w):
            cache.update(np.zeros((1, 3)))
            softmax(cache.update(np.zeros((1, 3))))
    assert "update" not in vars(cache)                            # the method is the class's again
