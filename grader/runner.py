"""What runs inside the sandbox: load the graded cells, call them on the test inputs, write values.

    python -s -B /grade/runner.py          (started by grader/sandbox.py, never by hand)

Reads /grade/job.json (the tests: function, driver, encoded arguments), /grade/inputs.npz (their
arrays) and /grade/student.py (the graded cells). Writes one JSON line per test to
/out/results.jsonl, arrays into /out/<test id>.npz, flushing after each, so a crash or a timeout
keeps the answers given so far. It judges nothing: it has no expected values, and everything
it writes is a value that the grader compares in its own process. A student's code can write
into /out too, but only values, which it could as well have returned.

The value codec (`encode`, `decode`) is shared with the grader, which imports this module.
Values are JSON, except arrays (npz, loaded with allow_pickle=False), non-finite floats
({"__float__": "nan"}), dicts ({"__dict__": [[key, value], ...]}) and, for inputs only, the
markers {"__config__": fields}, {"__model__": {...}} and {"__rng__": seed}.
"""
import builtins
import json
import math
import os
import sys

import numpy as np

MAX_ITEMS = 100_000  # values (list items, dict entries, arrays) in one encoded answer
MAX_DEPTH = 16
BLOCKED_MARK = "REFERENCE UNAVAILABLE"  # the stubs of blocked lib names raise with this text


# ---- codec -----------------------------------------------------------------------------------------
def encode(value, arrays, prefix):
    """value -> JSON-able structure; arrays found are added to `arrays` under new keys."""
    count = [0]

    def enc(v, depth):
        count[0] += 1
        if count[0] > MAX_ITEMS or depth > MAX_DEPTH:
            raise ValueError(f"the answer is too large or too deeply nested to grade "
                             f"(at most {MAX_ITEMS} values, {MAX_DEPTH} levels)")
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return int(v)
        if isinstance(v, float):
            return v if math.isfinite(v) else {"__float__": repr(v)}
        if isinstance(v, (np.ndarray, np.generic)):
            a = np.asarray(v)
            if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
                raise TypeError(f"an array of dtype {a.dtype} cannot be graded; return numbers")
            key = f"{prefix}{len(arrays)}"
            arrays[key] = a
            return {"__array__": key}
        if isinstance(v, (list, tuple)):
            return [enc(x, depth + 1) for x in v]
        if isinstance(v, dict):
            return {"__dict__": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
        raise TypeError(f"a value of type {type(v).__name__} cannot be graded; return numbers, "
                        f"lists, tuples, dicts, None or numpy arrays")
    return enc(value, 0)


def decode(data, arrays, make_object=None):
    """Inverse of `encode`. `arrays` maps keys to arrays; `make_object(kind, payload)` builds
    the input markers (only the sandbox passes it; the grader refuses markers in answers)."""
    def dec(v):
        if isinstance(v, list):
            return [dec(x) for x in v]
        if not isinstance(v, dict):
            return v
        if set(v) == {"__array__"}:
            return arrays[v["__array__"]]
        if set(v) == {"__float__"}:
            return float(v["__float__"])
        if set(v) == {"__dict__"}:
            return {_hashable(dec(k)): dec(x) for k, x in v["__dict__"]}
        if len(v) == 1 and make_object is not None:
            (kind, payload), = v.items()
            return make_object(kind, payload)
        raise ValueError(f"unexpected value {str(v)[:80]}")
    return dec(data)


def _hashable(key):
    return tuple(key) if isinstance(key, list) else key


# ---- inputs that are objects ------------------------------------------------------------------------
def make_object(kind, payload):
    if kind == "__config__":
        from lib.config import GPTConfig
        return GPTConfig(**payload)
    if kind == "__model__":
        from lib.config import GPTConfig
        from lib.numpy_twin import GPT
        return GPT(GPTConfig(**payload["config"]), seed=payload["seed"], dtype=np.dtype(payload["dtype"]))
    if kind == "__rng__":
        return np.random.default_rng(payload)
    raise ValueError(f"unknown input marker {kind}")


# ---- drivers: how a test uses the student's definitions --------------------------------------------
def drive_call(fn, args, kwargs):
    """Call the function and return what it returns."""
    return fn(*args, **kwargs)


def drive_kvcache(cls, args, kwargs):
    """Exercise 3's cache class, used the way the model uses it: `cls(config, batch, dtype=...)`,
    then per chunk of new positions `update(layer, k, v)` for every layer, then `length += T`
    (GPT.forward advances the length). Returns every (k, v) that update gave back, copied."""
    config, batch, dtype, chunks = args
    cache = cls(config, batch, dtype=np.dtype(dtype))
    seen = []
    for k_all, v_all in chunks:                              # each (L, B, H, T, D)
        for layer in range(k_all.shape[0]):
            k, v = cache.update(layer, k_all[layer], v_all[layer])
            seen += [np.array(k, copy=True), np.array(v, copy=True)]
        cache.length += k_all.shape[3]
    return seen


DRIVERS = {"call": drive_call, "kvcache": drive_kvcache}


# ---- the run ---------------------------------------------------------------------------------------------
def error_record(exc):
    message = str(exc)
    return {"type": type(exc).__name__, "message": message[:600], "blocked": BLOCKED_MARK in message}


def main():
    out = os.environ.get("GRADE_OUT", "/out")
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "job.json")) as f:
        job = json.load(f)
    with np.load(os.path.join(here, "inputs.npz"), allow_pickle=False) as npz:
        inputs = {k: npz[k] for k in npz.files}
    results = open(os.path.join(out, "results.jsonl"), "a")

    def write(record):
        results.write(json.dumps(record) + "\n")
        results.flush()
        os.fsync(results.fileno())

    import lib
    lib_dir = os.path.dirname(os.path.abspath(lib.__file__))
    if lib_dir != os.path.join(here, "lib"):                # the sandbox's copy, never the real one
        write({"id": "__load__", "ok": False, "error": {"type": "SandboxError", "blocked": False,
                                                        "message": f"lib resolved to {lib_dir}"}})
        return
    with open(os.path.join(here, "student.py")) as f:
        source = f.read()
    namespace = {"__name__": "__graded__", "__builtins__": builtins}
    try:
        exec(compile(source, "<graded cells>", "exec"), namespace)
    except BaseException as exc:                             # SystemExit, KeyboardInterrupt included
        write({"id": "__load__", "ok": False, "error": error_record(exc)})
        return
    write({"id": "__load__", "ok": True})
    for test in job["tests"]:
        try:
            args = decode(test["args"], inputs, make_object)
            kwargs = {k: decode(v, inputs, make_object) for k, v in test["kwargs"].items()}
            if test["function"] not in namespace:
                raise NameError(f"the graded cells define no {test['function']!r}")
            value = DRIVERS[test["driver"]](namespace[test["function"]], args, kwargs)
            arrays = {}
            record = {"id": test["id"], "ok": True, "value": encode(value, arrays, "v")}
            if arrays:
                np.savez(os.path.join(out, test["id"] + ".npz"), **arrays)
        except BaseException as exc:
            record = {"id": test["id"], "ok": False, "error": error_record(exc)}
        write(record)
    write({"id": "__done__", "ok": True})


if __name__ == "__main__":
    main()
