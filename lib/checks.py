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
- `expect_accumulates(name, backward, grads)`: a second backward pass adds to the gradients
  instead of overwriting them (`+=`, not `=`), as gradient accumulation needs.
- `expect_raises(name, error, call, *args)`: `call(*args)` raises `error` (a ValueError, say).
- `your_output(function, returned)`: a `with` block that runs lib's code on what the student's
  `function` returned; an error raised inside lib becomes a CheckFailed naming the function and
  what it returned, instead of a traceback from deep inside lib. `watch(obj, method)` keeps what a
  method (a cache's `update`, say) returned, for such a message.

A check that passes prints one line, `ok: <name>`. One that fails raises `CheckFailed` (an
AssertionError, so a notebook stops there) whose message starts with the name, says what was
expected and what came instead, and where the first difference is. Positions are written as a
student would index the array: `(0, 2)`, or `(b, t, c) = (0, 2, 5)` when the check is told the
axes' names (`axes="btc"`); values as plain numbers.
"""
from __future__ import annotations

import contextlib
import sysconfig
import traceback
from pathlib import Path

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


def _plain(value):
    """A numpy scalar or array, or a list or tuple of them, as the plain Python values it holds."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _what(x) -> str:
    """How a value that is not what was expected reads in a message."""
    if _is_array(x):
        return f"{tuple(x.shape)} {_dtype_name(x.dtype)}"
    if isinstance(x, tuple) and x and all(_is_array(a) for a in x):
        return "a tuple of " + ", ".join(_what(a) for a in x)
    name = np.dtype(x.dtype).name if isinstance(x, np.generic) else type(x).__name__
    text = repr(_plain(x))
    return f"{name} {text if len(text) <= 60 else text[:57] + '...'}"


def _index(flat, shape, axes=None):
    """A flat position as the index a student would type: `index 7` in 1-D, `index (0, 2)`
    otherwise, or `(b, t, c) = (0, 2, 5)` when the axes have names."""
    where = tuple(int(i) for i in np.unravel_index(flat, shape))
    if axes is not None and len(axes) == len(where) and where:
        return f"({', '.join(axes)}) = {where[0] if len(where) == 1 else where}"
    return f"index {where[0] if len(where) == 1 else where}"


def _number(value) -> str:
    """A value of an array as a plain number: 0.25, -inf, nan."""
    return f"{float(value):.7g}"


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


def _why(got, want) -> str:
    """What a difference involving NaN or an infinity means, for a message ('' when neither is)."""
    if np.isnan(got):
        return " (NaN: from inf - inf, 0 / 0 or the log of a negative?)"
    if np.isinf(want):
        return f" (expected {_number(want)}: a value masked or filtered out)"
    if np.isinf(got):
        return f" ({_number(got)} where a finite value was expected: an overflow, or masked when it should stay?)"
    return ""


def expect_close(name, got, want, rtol=1e-6, atol=0.0, axes=None):
    """Every value of `got` within `atol + rtol * |want|` of `want`.

    When `want` is an array, `got` must have its shape and dtype: compute `want` in the dtype you
    expect back. NaN or inf in `got` fails unless `want` has the same value at that place, and an
    infinity in `want` (a masked value: -inf) must be matched exactly. `axes` names the axes for
    the message ("btc": a difference is reported at `(b, t, c) = (0, 2, 5)`).
    """
    if _is_array(want):
        _check_shape(name, got, want.shape, want.dtype)
    got64 = np.asarray(to_numpy(got), dtype=np.float64)
    want64 = np.asarray(to_numpy(want), dtype=np.float64)
    if got64.shape != want64.shape:
        raise CheckFailed(f"{name}: expected shape {want64.shape}, got {_what(got)}")
    got_flat, want_flat = got64.ravel(), want64.ravel()
    with np.errstate(invalid="ignore"):
        same = (got_flat == want_flat) | (np.isnan(got_flat) & np.isnan(want_flat))   # inf == inf
        finite = np.isfinite(got_flat) & np.isfinite(want_flat)
        far = ~same & ~(finite & np.isclose(got_flat, want_flat, rtol=rtol, atol=atol))
    if far.any():
        broken = far & ~finite
        first = np.flatnonzero(broken if broken.any() else far)[0]      # NaN and inf first: the likelier cause
        g, w = got_flat[first], want_flat[first]
        shown_got, shown_want = _numbers(g, w) if np.isfinite(g) and np.isfinite(w) else (_number(g), _number(w))
        if want64.ndim == 0:
            beyond = f", beyond rtol={rtol:g} atol={atol:g}" if finite.all() else ""
            raise CheckFailed(f"{name}: got {shown_got}, expected {shown_want}{beyond}{_why(g, w)}")
        count = f"{far.sum()} of {far.size} values differ"
        if (far & finite).any():
            count += f" beyond rtol={rtol:g} atol={atol:g}"
        raise CheckFailed(f"{name}: {count}; first at {_index(first, want64.shape, axes)}: "
                          f"got {shown_got}, expected {shown_want}{_why(g, w)}")
    _passed(name)


def expect_equal(name, got, want, axes=None):
    """`got` exactly equal to `want`: a number, a string, token ids, a list, a tuple, an array.
    `axes` names the axes of a 2-D or larger array for the message, as in `expect_close`."""
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
            raise CheckFailed(f"{name}: {len(differ)} of {want.size} values differ; first at "
                              f"{_index(first, want.shape, axes)}: got {_plain(got.flat[first])!r}, "
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


def expect_grad(name, f, grad, x, eps=1e-6, rtol=1e-5, axes=None):
    """`grad(x)`, an array shaped like `x`, against central differences of the scalar `f` at `x`.

    Both run on a float64 copy of `x`; each coordinate costs two calls of `f`, so keep `x` small.
    The relative error of a coordinate is |analytic - numeric| / max(|analytic|, |numeric|, floor),
    with floor = 1e-4 * max(1, |f(x)|): the differences' rounding noise (about 1e-10 * |f(x)|)
    would otherwise count as error where a derivative is near 0. `axes` names x's axes for the
    message, as in `expect_close`.
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
        raise CheckFailed(f"{name}: worst coordinate at {_index(worst, x.shape, axes)}: analytic {analytic.flat[worst]:.4g}, "
                          f"numeric {numeric.flat[worst]:.4g}, relative error {error.flat[worst]:.1e} "
                          f"(allowed {rtol:g})")
    _passed(name)


def expect_accumulates(name, backward, grads):
    """Two backward passes without zeroing in between leave twice one pass's gradients.

    `backward()` runs one backward pass (the gradients start at zero before the first);
    `grads()` returns {name: array} of the gradients it adds into. A backward that assigns its
    gradients (`=`) instead of adding them (`+=`) loses the first pass, which gradient accumulation
    over micro-batches needs.
    """
    backward()
    once = {key: np.array(to_numpy(g), dtype=np.float64) for key, g in grads().items()}
    backward()
    for key, g in grads().items():
        twice, want = np.asarray(to_numpy(g), dtype=np.float64), 2 * once[key]
        if not np.allclose(twice, want, rtol=1e-6, atol=1e-12):
            what = ("one pass's gradient: the second pass overwrote the first (= where += is needed)"
                    if np.allclose(twice, once[key], rtol=1e-6, atol=1e-12) else "not twice one pass's gradient")
            raise CheckFailed(f"{name}: after two backward passes, {key} holds {what}")
    _passed(name)


def expect_raises(name, error, call, *args, **kwargs):
    """`call(*args, **kwargs)` raises `error` (an exception class); the message is printed."""
    try:
        result = call(*args, **kwargs)
    except error as e:
        print(f"ok: {name} raises {error.__name__}: {e}")
        return
    except NotImplementedError:
        raise
    except Exception as e:                                  # noqa: BLE001 (any other error is reported)
        raise CheckFailed(f"{name}: expected {error.__name__}, got {type(e).__name__}: {e}") from None
    raise CheckFailed(f"{name}: expected {error.__name__}, but the call returned {_what(result)}")


LIB = Path(__file__).resolve().parent
PYTHON = {Path(p).resolve() for p in (sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib"))}


class watch:
    """`with watch(obj, "update") as w:` wraps the student's method `obj.update` so that what it
    returned last (`w.last`) and how often it was called (`w.calls`) can be named in a message."""

    def __init__(self, obj, method):
        self.obj, self.method, self.calls, self.last = obj, method, 0, None
        self.name = f"{type(obj).__name__}.{method}"

    def __enter__(self):
        original = getattr(self.obj, self.method)

        def recorded(*args, **kwargs):
            self.last = original(*args, **kwargs)
            self.calls += 1
            return self.last

        setattr(self.obj, self.method, recorded)             # on the instance: its class is untouched
        return self

    def __exit__(self, *exc):
        vars(self.obj).pop(self.method, None)

    def describe(self) -> str:
        return f"{self.name} returned {_what(self.last)} (call {self.calls})"


_UNSEEN = object()


@contextlib.contextmanager
def your_output(function, returned=_UNSEEN):
    """Run lib's code on what the student's `function` returned (`returned`, or a `watch`).

    An error raised inside lib (its last frame is in lib/, not in the student's code) becomes a
    CheckFailed: "<function>: lib's `<where>` raised <error>, after your <function> returned <shape
    dtype>". Errors in the student's own code, and NotImplementedError, pass unchanged.
    """
    try:
        yield
    except (CheckFailed, NotImplementedError):
        raise
    except Exception as e:                                  # noqa: BLE001 (reworded, then raised)
        ours = [(Path(f.filename).resolve(), f.name) for f in traceback.extract_tb(e.__traceback__)]
        ours = [(path, name) for path, name in ours                  # lib's frames and the student's, not numpy's
                if path != Path(__file__).resolve() and not any(path.is_relative_to(p) for p in PYTHON)]
        if not ours or not ours[-1][0].is_relative_to(LIB):
            raise
        where = ours[-1][1]
        if isinstance(returned, watch):
            after = f", after your {returned.describe()}"
        else:
            after = "" if returned is _UNSEEN else f", after your {function} returned {_what(returned)}"
        raise CheckFailed(f"{function}: lib's `{where}` raised {type(e).__name__}: {e}{after}") from None
