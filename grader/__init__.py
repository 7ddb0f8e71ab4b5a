"""Grade exercise notebooks against hidden tests, with the student's code in a sandbox.

    python -m grader exercises/01_gelu.ipynb [more.ipynb ...] [--json] [--tests DIR]
                     [--timeout SECONDS] [--memory-mb MB]

This package is instructors' tooling: the student release (`python -m grader.release OUTDIR`,
grader/release.py) leaves it out whole, so lib holds only what students get.

How a notebook is graded:
1. The code cells tagged `graded:<id>` (for example `graded:ex1`) are joined, in order; nothing
   else of the notebook runs. The notebook's metadata `grading.exercise` names its exercise, so
   a notebook whose tags were removed still gets a report (and a 0).
2. The hidden tests for <id> (`solutions/hidden_tests/*.py`, see grader/spec.py) give the
   calls to make. Their inputs go into a fresh folder as npz (arrays) and JSON (the rest).
3. `grader/runner.py` runs the cells and the calls inside bubblewrap (grader/sandbox.py):
   no network, no repository, no solutions, no hidden tests, a copy of lib whose answers to the
   exercise are stubs, time and memory limits. It writes back plain values, per test.
4. Here, in the grader's own process, each value is compared with the hidden test's expectation.
   So patching numpy or builtins, printing, exiting, reading files or calling the reference
   changes nothing here; a crash, a timeout or an exit scores the tests still unanswered 0 and
   grading goes on with the next exercise.

Output: per test PASS/FAIL with a reason, a score per exercise, a total; `--json` prints the same
as one JSON document. The exit status is 0 whenever grading itself worked (whatever the scores),
1 if a notebook could not be read, 2 on bad usage or a missing sandbox.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
import numpy as np

from . import sandbox
from .runner import decode
from .spec import Config, Exercise, Model, Rng, Test

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TESTS = ROOT / "solutions" / "hidden_tests"
TAG_PREFIX = "graded:"
MAX_ARRAY_BYTES = 512 << 20      # what the grader agrees to unpack from one answer file


@dataclass
class TestResult:
    name: str
    points: int
    passed: bool
    message: str


@dataclass
class ExerciseResult:
    exercise: str
    title: str
    status: str                  # graded | no-graded-cells | load-error | timeout | crashed | no-hidden-tests
    message: str
    score: int = 0
    max_score: int = 0
    tests: list[TestResult] = field(default_factory=list)


@dataclass
class NotebookResult:
    path: str
    exercises: list[ExerciseResult]
    error: str | None = None


# ---- notebooks ---------------------------------------------------------------------------------------
def graded_code(nb) -> dict[str, str]:
    """{exercise id: the source of its graded cells, joined in order}."""
    code: dict[str, list[str]] = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for tag in cell.metadata.get("tags", []):
            if tag.startswith(TAG_PREFIX):
                code.setdefault(tag[len(TAG_PREFIX):], []).append(f"# --- cell {i} ---\n{cell.source}\n")
    return {ex: "\n".join(parts) for ex, parts in code.items()}


def notebook_exercises(nb) -> list[str]:
    named = nb.metadata.get("grading", {}).get("exercise")
    ids = list(graded_code(nb))
    return ([named] if named and named not in ids else []) + ids


# ---- hidden tests ---------------------------------------------------------------------------------
def load_hidden_tests(tests_dir: Path) -> dict:
    """{exercise id: module} for every module in tests_dir that defines EXERCISE."""
    modules = {}
    for path in sorted(Path(tests_dir).glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"hidden_tests_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        exercise = getattr(module, "EXERCISE", None)
        if isinstance(exercise, Exercise):
            modules[exercise.id] = module
    return modules


def _encode_inputs(tests: list[Test]):
    """Tests -> (JSON-able job entries, arrays for inputs.npz)."""
    arrays = {}

    def enc(v, key):
        if isinstance(v, np.ndarray):
            arrays[key] = v
            return {"__array__": key}
        if isinstance(v, Config):
            return {"__config__": v.fields}
        if isinstance(v, Model):
            return {"__model__": {"config": v.config, "seed": v.seed, "dtype": v.dtype}}
        if isinstance(v, Rng):
            return {"__rng__": v.seed}
        if isinstance(v, (list, tuple)):
            return [enc(x, f"{key}_{i}") for i, x in enumerate(v)]
        if isinstance(v, dict):
            return {"__dict__": [[k, enc(x, f"{key}_{k}")] for k, x in v.items()]}
        if isinstance(v, float) and not np.isfinite(v):
            return {"__float__": repr(v)}
        return v
    jobs = [{"id": f"t{i:03d}", "function": t.function, "driver": t.driver,
             "args": enc(list(t.args), f"t{i:03d}a"), "kwargs": enc_kwargs(t.kwargs, enc, f"t{i:03d}k")}
            for i, t in enumerate(tests)]
    return jobs, arrays


def enc_kwargs(kwargs, enc, key):
    return {name: enc(value, f"{key}_{name}") for name, value in kwargs.items()}


def _read_answers(out: Path) -> dict:
    """{test id: record} from the sandbox's results.jsonl (last record per id wins), with
    arrays decoded from their npz files (no pickle, bounded size)."""
    records = {}
    path = out / "results.jsonl"
    if not path.exists():
        return records
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                record = json.loads(line)
                records[str(record["id"])] = record
            except (ValueError, KeyError, TypeError):
                continue                                     # a half-written or foreign line
    for test_id, record in records.items():
        if record.get("ok") and "value" in record:
            try:
                record["value"] = decode(record["value"], _load_arrays(out / f"{test_id}.npz"))
            except Exception as exc:                          # noqa: BLE001 - any bad answer file
                records[test_id] = {"ok": False, "error": {"type": "BadAnswer", "blocked": False,
                                                           "message": f"the answer could not be read: {exc}"}}
    return records


def _load_arrays(path: Path) -> dict:
    if not path.exists():
        return {}
    with zipfile.ZipFile(path) as z:
        if sum(info.file_size for info in z.infolist()) > MAX_ARRAY_BYTES:
            raise ValueError(f"arrays larger than {MAX_ARRAY_BYTES >> 20} MiB")
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def _error_text(error: dict) -> str:
    if error.get("blocked"):
        return f"called a blocked lib reference ({error.get('message', '')})"
    return f"{error.get('type', 'Error')}: {error.get('message', '')}".strip()


def _judge(test: Test, record: dict | None, missing: str) -> tuple[bool, str]:
    if record is None:
        return False, missing
    if not record.get("ok"):
        error = record.get("error") or {}
        if test.expect_error and error.get("type") == test.expect_error:
            return True, f"raised {test.expect_error} as required"
        return False, _error_text(error)
    if test.expect_error:
        return False, f"returned a value; expected it to raise {test.expect_error}"
    try:
        return test.check(record.get("value"))
    except Exception as exc:                                  # noqa: BLE001 - a hostile value
        return False, f"the answer could not be compared: {type(exc).__name__}: {exc}"


def grade_exercise(code: str, module, *, timeout: float | None, memory_mb: int, forbidden) -> ExerciseResult:
    exercise: Exercise = module.EXERCISE
    tests = module.tests()
    result = ExerciseResult(exercise.id, exercise.title, "graded", "",
                            max_score=sum(t.points for t in tests))
    if not code.strip():
        result.status, result.message = "no-graded-cells", f"no code cell is tagged {TAG_PREFIX}{exercise.id}"
        result.tests = [TestResult(t.name, t.points, False, "not graded: no graded cells") for t in tests]
        return result
    outcomes: dict[int, tuple[bool, str]] = {}
    problems = []
    for group, seconds in exercise.groups.items():
        members = [i for i, t in enumerate(tests) if t.group == group]
        if not members:
            continue
        limit = max(1, int(seconds if timeout is None else min(seconds, timeout)))
        jobs, arrays = _encode_inputs([tests[i] for i in members])
        box = sandbox.make_box(code, {"exercise": exercise.id, "tests": jobs}, arrays, exercise.blocked)
        try:
            run = sandbox.run(box, box.parent / "out", masked=exercise.masked, forbidden=forbidden,
                              cpu_seconds=limit, memory_mb=memory_mb)
            answers = _read_answers(box.parent / "out")
        finally:
            shutil.rmtree(box.parent, ignore_errors=True)
        load = answers.get("__load__")
        if run.timed_out:
            why, status = f"timed out: over the limit of {limit} s of CPU time (tests {group!r})", "timeout"
        elif load is None:
            why, status = f"the sandbox ended before the graded cells loaded (exit {run.returncode}): {run.log_tail[-300:]}", "crashed"
        elif not load.get("ok"):
            why, status = f"the graded cells failed to load: {_error_text(load.get('error') or {})}", "load-error"
        elif "__done__" not in answers:
            why, status = f"the process ended early (exit {run.returncode}, memory limit {memory_mb} MiB)", "crashed"
        else:
            why, status = "", "graded"
        if status != "graded":
            problems.append((status, why))
        loaded = load is not None and load.get("ok")
        for i, job in zip(members, jobs):
            outcomes[i] = _judge(tests[i], answers.get(job["id"]) if loaded else None, f"no answer: {why}")
    if problems:
        result.status, result.message = problems[0][0], "; ".join(why for _, why in problems)
    result.tests = [TestResult(t.name, t.points, *outcomes[i]) for i, t in enumerate(tests)]
    result.score = sum(t.points for t in result.tests if t.passed)
    return result


def grade_notebook(path, *, tests_dir=DEFAULT_TESTS, timeout=None, memory_mb=4096, hidden=None) -> NotebookResult:
    """Grade every exercise the notebook has graded cells (or metadata) for."""
    hidden = load_hidden_tests(tests_dir) if hidden is None else hidden
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as exc:                                  # noqa: BLE001 - any unreadable file
        return NotebookResult(str(path), [], f"cannot read the notebook: {exc}")
    code = graded_code(nb)
    ids = notebook_exercises(nb)
    if not ids:
        return NotebookResult(str(path), [], f"no cell is tagged {TAG_PREFIX}<exercise> and the metadata "
                                             f"names no exercise")
    forbidden = [Path(tests_dir).resolve(), (ROOT / "solutions").resolve(), sandbox.LIB_DIR,
                 Path(__file__).resolve().parent]                         # the grader itself
    results = []
    for ex in ids:
        if ex not in hidden:
            results.append(ExerciseResult(ex, "", "no-hidden-tests", f"no hidden tests for {ex!r} in {tests_dir}"))
            continue
        results.append(grade_exercise(code.get(ex, ""), hidden[ex], timeout=timeout, memory_mb=memory_mb,
                                      forbidden=forbidden))
    return NotebookResult(str(path), results)


def as_dict(result: NotebookResult) -> dict:
    return asdict(result)
