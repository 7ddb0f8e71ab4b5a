"""Checks for the exercises' visible tests: each one says what is wrong, not just that something is.

- `expect_shape(name, got, shape, dtype=None)`: an array (numpy, or a torch tensor) of this shape
  (and dtype).
- `expect_close(name, got, want, rtol=1e-6, atol=0.0)`: same shape and dtype as `want` (when
  `want` is an array), no NaN or inf where `want` has none, and every value within
  `atol + rtol * |want|` of `want`.
- `expect_equal(name, got, want)`: exactly equal: a number, a string, token ids, a list, a tuple,
  an array.
- `expect_grad(name, f, grad, x, eps=1e-6, rtol=1e-5)`: `grad(x)` matches the central differences
  of the scalar function `f` at `x`, computed in float64.

A check that passes prints one line, `ok: <name>`. One that fails raises `CheckFailed` (an
AssertionError, so a notebook stops there) whose message starts with the name, says what was
expected and what came instead, and where the first difference is.
"""
from __future__ import annotations

import numpy as np

from lib.twins import to_numpy


class CheckFailed(AssertionError):
    """A visible check found a difference; the message says which and where."""


def _passed(name):
    print(f"ok: {name}")


def _is_array(x) -> bool:
    return isinstance(x, np.ndarray) or hasattr(x, "detach")          # numpy, or a torch tensor


def _dtype_name(dtype) -> str:
    text = str(dtype)
    return text.removeprefix("torch.") if text.startswith("torch.") else np.dtype(dtype).name


def _what(x) -> str:
    """How a value that is not what was expected reads in a message."""
    if _is_array(x):
        return f"{tuple(x.shape)} {_dtype_name(x.dtype)}"
    text = repr(x)
    return f"{type(x).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _plain(value):
    """A numpy scalar or array as the Python number or list it holds, for a message."""
    return value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value


def _index(flat, shape):
    """A flat position as the index a student would type: 7 in 1-D, (0, 2) otherwise."""
    where = tuple(int(i) for i in np.unravel_index(flat, shape))
    return where[0] if len(where) == 1 else where


def _numbers(got, want):
    """Two numbers with enough digits to tell them apart."""
    for digits in (7, 17):
        a, b = f"{got:.{digits}g}", f"{want:.{digits}g}"
        if a != b:
            break
    return a, b


def _check_shape(name, got, shape, dtype):
    shape = tuple(shape)
    expected = f"{shape} {_dtype_name(dtype)}" if dtype is not None else f"{shape}"
    if not _is_array(got):
        raise CheckFailed(f"{name}: expected an array of shape {expected}, got {_what(got)}")
    if tuple(got.shape) != shape or (dtype is not None and _dtype_name(got.dtype) != _dtype_name(dtype)):
        raise CheckFailed(f"{name}: expected shape {expected}, got {_what(got)}")


def expect_shape(name, got, shape, dtype=None):
    """`got` is an array of this shape (and of this dtype, if one is given)."""
    _check_shape(name, got, shape, dtype)
    _passed(name)


def expect_close(name, got, want, rtol=1e-6, atol=0.0):
    """Every value of `got` within `atol + rtol * |want|` of `want`.

    When `want` is an array, `got` must have its shape and dtype: compute `want` in the dtype you
    expect back. NaN or inf in `got` fails unless `want` has the same value at that place.
    """
    if _is_array(want):
        _check_shape(name, got, want.shape, want.dtype)
    got64 = np.asarray(to_numpy(got), dtype=np.float64)
    want64 = np.asarray(to_numpy(want), dtype=np.float64)
    if got64.shape != want64.shape:
        raise CheckFailed(f"{name}: expected shape {want64.shape}, got {_what(got)}")
    got_flat, want_flat = got64.ravel(), want64.ravel()
    broken = ~np.isfinite(got_flat) & ~np.isclose(got_flat, want_flat, equal_nan=True)
    if broken.any():
        first = np.flatnonzero(broken)[0]
        raise CheckFailed(f"{name}: {broken.sum()} of {broken.size} values are NaN or inf; first at index "
                          f"{_index(first, want64.shape)}: got {got_flat[first]}, expected {want_flat[first]:.7g}")
    far = ~np.isclose(got_flat, want_flat, rtol=rtol, atol=atol, equal_nan=True)
    if far.any():
        first = np.flatnonzero(far)[0]
        shown_got, shown_want = _numbers(got_flat[first], want_flat[first])
        raise CheckFailed(f"{name}: {far.sum()} of {far.size} values differ beyond rtol={rtol:g} atol={atol:g}; "
                          f"first at index {_index(first, want64.shape)}: got {shown_got}, expected {shown_want}")
    _passed(name)


def expect_equal(name, got, want):
    """`got` exactly equal to `want`: a number, a string, token ids, a list, a tuple, an array."""
    got, want = (to_numpy(v) if hasattr(v, "detach") else v for v in (got, want))    # tensors as arrays
    if isinstance(want, np.ndarray) and want.ndim > 1:
        if not _is_array(got) and not isinstance(got, (list, tuple)):
            raise CheckFailed(f"{name}: expected an array of shape {want.shape}, got {_what(got)}")
        got = np.asarray(got)
        if got.shape != want.shape:
            raise CheckFailed(f"{name}: expected shape {want.shape}, got {got.shape}")
        differ = np.flatnonzero(got.ravel() != want.ravel())
        if len(differ):
            first = differ[0]
            raise CheckFailed(f"{name}: {len(differ)} of {want.size} values differ; first at index "
                              f"{_index(first, want.shape)}: got {_plain(got.flat[first])!r}, "
                              f"expected {_plain(want.flat[first])!r}")
    elif isinstance(want, (list, tuple, np.ndarray)):
        if not isinstance(got, (list, tuple, np.ndarray)) or np.ndim(got) == 0:
            raise CheckFailed(f"{name}: expected a list, tuple or array of length {len(want)}, got {_what(got)}")
        problems = []
        if len(got) != len(want):
            problems.append(f"got {len(got)} items, expected {len(want)}")
        for i, (a, b) in enumerate(zip(got, want)):
            if not np.array_equal(a, b):
                problems.append(f"first difference at index {i}: got {_plain(a)!r}, expected {_plain(b)!r}")
                break
        else:
            if problems:
                problems.append(f"the first {min(len(got), len(want))} agree")
        if problems:
            raise CheckFailed(f"{name}: " + "; ".join(problems))
    elif not np.array_equal(got, want):
        raise CheckFailed(f"{name}: got {_plain(got)!r}, expected {_plain(want)!r}")
    _passed(name)


def expect_grad(name, f, grad, x, eps=1e-6, rtol=1e-5):
    """`grad(x)`, an array shaped like `x`, against central differences of the scalar `f` at `x`.

    Both run on a float64 copy of `x`; each coordinate costs two calls of `f`, so keep `x` small.
    The relative error of a coordinate is |analytic - numeric| / max(|analytic|, |numeric|, floor),
    with floor = 1e-4 * max(1, |f(x)|): the differences' rounding noise (about 1e-10 * |f(x)|)
    would otherwise count as error where a derivative is near 0.
    """
    x = np.array(to_numpy(x), dtype=np.float64)
    analytic = grad(x.copy())
    _check_shape(name, analytic, x.shape, None)
    analytic = np.asarray(to_numpy(analytic), dtype=np.float64)
    numeric = np.empty_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        numeric[i] = (float(f(up)) - float(f(down))) / (2 * eps)
    floor = 1e-4 * max(1.0, abs(float(f(x.copy()))))
    with np.errstate(invalid="ignore"):                    # inf - inf: a NaN, then counted as inf below
        error = np.abs(analytic - numeric) / np.maximum(np.maximum(np.abs(analytic), np.abs(numeric)), floor)
    error[~np.isfinite(error)] = np.inf
    worst = np.argmax(error.ravel()) if x.size else None
    if worst is not None and not error.flat[worst] <= rtol:
        raise CheckFailed(f"{name}: worst coordinate {_index(worst, x.shape)}: analytic {analytic.flat[worst]:.4g}, "
                          f"numeric {numeric.flat[worst]:.4g}, relative error {error.flat[worst]:.1e} "
                          f"(allowed {rtol:g})")
    _passed(name)
