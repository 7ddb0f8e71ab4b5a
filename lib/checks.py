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
- `checks_passed(count)`: in Jupyter or Colab, True once `count` cells of checks have run and
  passed on the notebook's functions as they are now, and none of those failed; otherwise it
  prints what it waits for and returns False. Each exercise's "Compare with lib" cell shows lib's
  version only then, after the student's own.
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

import ast
import contextlib
import sys
import sysconfig
import traceback
from pathlib import Path

import numpy as np

from lib.twins import to_numpy


class CheckFailed(AssertionError):
    """A visible check found a difference; the message says which and where."""

    def __init__(self, *args):
        _note()
        super().__init__(*args)


def _passed(name):
    _note()
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
        _note()
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


# ---- the record of the checks run in a notebook, for lib's version after them --------------------

_checked = 0                  # checks that ended so far in this process, passed or failed


def _note():
    _record()                 # registered before the count moves, so this cell counts
    global _checked
    _checked += 1


class _Record:
    """The cells of one IPython shell that ran checks: by cell (its id, or its text where the
    front end gives none), whether its last run passed and the notebook's own functions and
    classes it read, as they were then (a later run of the graded cell makes them stale)."""

    def __init__(self, shell):
        self.shell, self.cells, self.start = shell, {}, _checked
        shell.events.register("pre_run_cell", self.pre)
        shell.events.register("post_run_cell", self.post)

    def pre(self, info):
        self.start = _checked

    def post(self, result):
        info = result.info
        read = self._read(info.raw_cell)
        if _checked == self.start and not any(getattr(v, "__module__", None) == __name__ for v in read.values()):
            return                       # no check ended in this cell, and it names none (expect_..., CheckFailed)
        key = getattr(info, "cell_id", None) or info.raw_cell
        self.cells[key] = (result.success, {n: v for n, v in read.items() if v.__module__ == "__main__"})

    def _read(self, source):
        """{name: value} of the functions and classes, the notebook's own and lib.checks', that
        the cell reads but does not assign."""
        try:
            tree = ast.parse(source)
        except SyntaxError:                                 # IPython's magics
            return {}
        nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]
        stored = {n.id for n in nodes if not isinstance(n.ctx, ast.Load)}     # the cell's own loop names
        space = self.shell.user_ns
        return {n: space[n] for n in {n.id for n in nodes} - stored
                if n in space and callable(space[n])
                and getattr(space[n], "__module__", None) in ("__main__", __name__)}

    def fresh(self):
        """The results of the cells whose functions are still the notebook's."""
        space = self.shell.user_ns
        return [ok for ok, read in self.cells.values()
                if all(space.get(n) is obj for n, obj in read.items())]


_RECORD = None


def _record():
    """The record of the running IPython shell (None outside IPython)."""
    global _RECORD
    ipython = sys.modules.get("IPython")            # never imported here: the grader has none
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "events"):
        return None
    if _RECORD is None or _RECORD.shell is not shell:
        _RECORD = _Record(shell)
    return _RECORD


def checks_passed(count) -> bool:
    """True once `count` cells of checks have run and passed on the notebook's functions as they
    are now, and none of those that ran on them failed; otherwise prints what it waits for and
    returns False. Only IPython (Jupyter, Colab) says which cell ran what: elsewhere, False."""
    record = _record()
    if record is None:
        print("Waiting: only Jupyter or Colab records which checks passed; lib's version is "
              "shown there, once your answer passes the checks above.")
        return False
    results = record.fresh()
    failed, passed = results.count(False), results.count(True)
    if failed:
        print(f"Waiting: {failed} cell{'s' if failed > 1 else ''} of checks failed on your "
              "functions as they are now. lib's version is shown once your answer passes "
              "the checks above.")
    elif passed < count:
        print(f"Waiting: lib's version is shown once your answer passes the checks above; "
              f"{passed} of their {count} cells ran and passed on your functions as they are now.")
    return not failed and passed >= count


_record()                     # in a notebook: register now, so the next cells are recorded
