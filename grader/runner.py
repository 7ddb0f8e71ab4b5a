"""What runs inside the sandbox: load the graded cells, call them on the test inputs, send values.

    python -s -B /grade/runner.py          (started by grader/sandbox.py, never by hand)

Reads /grade/job.json (the tests: function, driver, encoded arguments; for a capstone, also
/grade/pieces.json, the graded cells of the student's earlier exercises, which become the
namespace's `parts`) and /grade/student.py (the graded cells); how each test calls the graded definitions is
/grade/drivers.py's (grader/drivers.py, copied beside this file). Writes
one JSON line per test to the answers pipe (the file descriptor in
$GRADE_ANSWERS_FD), flushing after each, so a crash or a timeout keeps the answers given so far:
first {"id": "__start__"} (the sandbox works; from here on, what fails is the graded code's),
then "__load__" (the graded cells ran), one record per test, and "__done__". It judges nothing:
it has no expected values, and everything it writes is a value that the grader compares in its
own process. The graded code can write into the pipe too, but only values, which it could as
well have returned; the grader reads at most MAX_ANSWER_BYTES and checks every record.

The value codec (`encode`, `decode`) is shared with the grader, which imports this module.
Values are JSON, except arrays ({"__array__": [dtype, shape, base64 of the bytes]}, numbers
and booleans only, no pickle, no compression), non-finite floats ({"__float__": "nan"}), dicts
of at most MAX_DICT_KEYS string keys ({"__dict__": [[key, value], ...]}) and, for inputs only, the markers {"__config__": fields},
{"__model__": {...}} and {"__rng__": seed}. `decode` checks every part and raises ValueError
on anything else, so that a forged answer cannot make the grader allocate, recurse or crash, and
its time is linear in the value's size.
"""
import base64
import builtins
import json
import math
import os
import re

import numpy as np

MAX_ITEMS = 100_000  # values (list items, dict entries, arrays) in one encoded value
MAX_DICT_KEYS = 256  # entries of one dict; their keys are strings (Python hashes those with a secret
                     # seed, where equal hashes of numbers or tuples can be forged to make a dict quadratic)
MAX_DEPTH = 16
MAX_LINE_BYTES = 8 << 20  # of one answer record as JSON (the largest a solution sends: 0.7 MB)
MAX_STRUCTURE = 4 * MAX_ITEMS  # [ { and , in one record: what json.loads would make objects of
MAX_DIMS = 32
ARRAY_DTYPE = re.compile(r"[<>|][biufc][0-9]{1,2}")   # numpy's dtype.str of numbers and booleans
BLOCKED_MARK = "REFERENCE UNAVAILABLE"  # the stubs of blocked lib names raise with this text


# ---- codec -----------------------------------------------------------------------------------------
def encode(value, extra=None):
    """value -> JSON-able structure. `extra(v)` gives the form of other objects (the grader's
    input markers), or None if it has none."""
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
            if not ARRAY_DTYPE.fullmatch(a.dtype.str):
                raise TypeError(f"an array of dtype {a.dtype} cannot be graded; return numbers")
            return {"__array__": [a.dtype.str, list(a.shape), base64.b64encode(a.tobytes()).decode("ascii")]}
        if isinstance(v, (list, tuple)):
            return [enc(x, depth + 1) for x in v]
        if isinstance(v, dict):
            if len(v) > MAX_DICT_KEYS or not all(type(k) is str for k in v):
                raise TypeError(f"a dict can be graded when it has at most {MAX_DICT_KEYS} keys, all strings")
            return {"__dict__": [[k, enc(x, depth + 1)] for k, x in v.items()]}
        form = extra(v) if extra is not None else None
        if form is not None:
            return form
        raise TypeError(f"a value of type {type(v).__name__} cannot be graded; return numbers, "
                        f"lists, tuples, dicts, None or numpy arrays")
    return enc(value, 0)


def decode(data, make_object=None):
    """Inverse of `encode`. `make_object(kind, payload)` builds the input markers (only the
    sandbox passes it; the grader refuses markers in answers). Raises ValueError on anything
    `encode` would not have written."""
    count = [0]

    def dec(v, depth):
        count[0] += 1
        if count[0] > MAX_ITEMS or depth > MAX_DEPTH:
            raise ValueError(f"more than {MAX_ITEMS} values or {MAX_DEPTH} levels")
        if isinstance(v, list):
            return [dec(x, depth + 1) for x in v]
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if not isinstance(v, dict) or len(v) != 1:
            raise ValueError(f"unexpected value {str(v)[:80]}")
        (kind, payload), = v.items()
        if kind == "__array__":
            return _array(payload)
        if kind == "__float__" and payload in ("nan", "inf", "-inf"):
            return float(payload)
        if kind == "__dict__" and isinstance(payload, list):
            if len(payload) > MAX_DICT_KEYS or not all(isinstance(p, list) and len(p) == 2 and type(p[0]) is str
                                                       for p in payload):
                raise ValueError(f"a dict must have at most {MAX_DICT_KEYS} keys, all strings")
            return {k: dec(x, depth + 1) for k, x in payload}
        if make_object is not None:
            return make_object(kind, payload)
        raise ValueError(f"unexpected value {str(v)[:80]}")
    return dec(data, 0)


def _array(payload):
    """[dtype, shape, base64] -> an array (of its own, writable), after checking that the three agree."""
    if not (isinstance(payload, list) and len(payload) == 3):
        raise ValueError("an array must be [dtype, shape, data]")
    dtype, shape, data = payload
    if not (isinstance(dtype, str) and ARRAY_DTYPE.fullmatch(dtype)):
        raise ValueError(f"arrays hold numbers or booleans, not dtype {str(dtype)[:20]!r}")
    if not (isinstance(shape, list) and len(shape) <= MAX_DIMS
            and all(type(n) is int and n >= 0 for n in shape)):
        raise ValueError(f"an array's shape is at most {MAX_DIMS} sizes >= 0")
    if not isinstance(data, str):
        raise ValueError("an array's data must be base64 text")
    try:
        dtype = np.dtype(dtype)
        raw = base64.b64decode(data, validate=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"unreadable array: {exc}") from None
    if math.prod(shape) * dtype.itemsize != len(raw):
        raise ValueError(f"array data of {len(raw)} bytes does not match shape {tuple(shape)} of {dtype}")
    return np.frombuffer(bytearray(raw), dtype).reshape(shape)


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


# ---- the run ---------------------------------------------------------------------------------------------
def error_record(exc):
    message = str(exc)
    return {"type": type(exc).__name__, "message": message[:600], "blocked": BLOCKED_MARK in message}


def main():
    from drivers import DRIVERS                         # beside this file in /grade
    answers = open(int(os.environ["GRADE_ANSWERS_FD"]), "w", encoding="utf-8")

    def write(record):
        line = json.dumps(record)
        if len(line) > MAX_LINE_BYTES:
            line = json.dumps({"id": record["id"], "ok": False, "error": {
                "type": "AnswerTooLarge", "blocked": False,
                "message": f"the answer is larger than {MAX_LINE_BYTES >> 20} MiB as JSON"}})
        answers.write(line + "\n")
        answers.flush()

    write({"id": "__start__", "ok": True})
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "job.json"), encoding="utf-8") as f:
        job = json.load(f)
    import lib
    lib_dir = os.path.dirname(os.path.abspath(lib.__file__))
    if lib_dir != os.path.join(here, "lib"):                # the sandbox's copy, never the real one
        write({"id": "__load__", "ok": False, "error": {"type": "SandboxError", "blocked": False,
                                                        "message": f"lib resolved to {lib_dir}"}})
        return
    with open(os.path.join(here, "student.py"), encoding="utf-8") as f:
        source = f.read()
    namespace = {"__name__": "__graded__", "__builtins__": builtins}
    try:
        if job.get("pieces"):                               # a capstone: the student's earlier cells
            from lib.handin import parts_from_sources
            with open(os.path.join(here, "pieces.json"), encoding="utf-8") as f:
                pieces = json.load(f)
            namespace["parts"] = parts_from_sources(pieces["sources"], pieces["names"])
        exec(compile(source, "<graded cells>", "exec"), namespace)
    except BaseException as exc:                             # SystemExit, KeyboardInterrupt included
        write({"id": "__load__", "ok": False, "error": error_record(exc)})
        return
    write({"id": "__load__", "ok": True})
    for test in job["tests"]:
        try:
            args = decode(test["args"], make_object)
            kwargs = {k: decode(v, make_object) for k, v in test["kwargs"].items()}
            if test["function"] not in namespace:
                raise NameError(f"the graded cells define no {test['function']!r}")
            value = DRIVERS[test["driver"]](namespace[test["function"]], args, kwargs)
            record = {"id": test["id"], "ok": True, "value": encode(value)}
        except BaseException as exc:
            record = {"id": test["id"], "ok": False, "error": error_record(exc)}
        write(record)
    write({"id": "__done__", "ok": True})


if __name__ == "__main__":
    main()
