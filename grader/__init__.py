"""Grade exercise notebooks against hidden tests, with the student's code in a sandbox.

    python -m grader NOTEBOOK [NOTEBOOK ...] [--assignment IDS] [--exercise ID] [--json]
                     [--instructor] [--tests DIR] [--timeout SECONDS] [--memory-mb MB]

This package is instructors' tooling: the student release (`python -m grader.release OUTDIR`,
grader/release.py) leaves it out whole, so lib holds only what students get.

One run grades one student's submission: the notebooks given.
1. Which exercise a notebook is graded on comes from the instructor's side, never from the
   notebook: the exercise whose name (its notebook's name, `Exercise.notebook` in the hidden
   tests, such as ch4_gelu) its file name contains, or `--exercise`. The assignment (`--assignment`, by
   default the exercises the files name) sets the maximum score. An exercise named by two files
   is graded for neither ("duplicated", 0); one of the assignment that no file names is
   "missing" (0); a file that names none is an error.
2. In that notebook, the code cells tagged `graded:<name>` are joined, in order; nothing else
   of the notebook runs.
3. The hidden tests for <name> (`solutions/hidden_tests/<name>.py`, see grader/spec.py) give the
   calls to make and their inputs, written into a fresh folder as JSON.
4. `grader/runner.py` runs the cells and the calls inside bubblewrap (grader/sandbox.py), as an
   unprivileged user: no network, no repository, no solutions, no hidden tests, a copy of lib
   whose answers to the exercise are stubs, one process, time, memory and disk limits. It sends
   back plain values, per test, through a pipe.
5. Here, in the grader's own process, each value is checked (by type, size and test id) and
   compared with the hidden test's expectation. So patching numpy or builtins, printing,
   exiting, reading files or calling the reference changes nothing here; a crash, a timeout or
   an exit scores the tests still unanswered 0 and grading goes on. An edge test (an error
   check, an empty input) earns its points only when the other tests of its function pass.

Output: per test PASS/FAIL with a reason, a score per exercise (named by its book number and
its name: "3.1 ch3_attention"), a total. Messages are written
for the student: they never hold an expected value (`--instructor` adds them), and what came
from the sandbox is escaped, so that it cannot forge lines. `--json` prints the same as one
JSON document. The exit status is 0 whenever grading itself worked (whatever the scores), 1 if
a notebook could not be graded (unreadable, or its name names no exercise), 2 on bad usage or
when the sandbox cannot start (then nothing is graded: a broken sandbox is not a row of zeros).
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import stat
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import sandbox
from .runner import decode, encode
from .sandbox import SandboxUnavailable
from .spec import Config, Exercise, Model, Rng, Test, Verdict

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TESTS = ROOT / "solutions" / "hidden_tests"
TAG_PREFIX = "graded:"
MAX_NOTEBOOK_BYTES = 32 << 20
MAX_TEXT = 600                   # characters kept of a message that comes from the sandbox


@dataclass
class TestResult:
    name: str
    points: int
    passed: bool
    message: str                 # for the student
    detail: str = ""             # for the instructor (expected values)


@dataclass
class ExerciseResult:
    exercise: str
    title: str
    status: str                  # graded | no-graded-cells | load-error | timeout | crashed | duplicated | missing
    message: str
    score: int = 0
    max_score: int = 0
    tests: list[TestResult] = field(default_factory=list)
    number: str = ""             # the book's number ("3.1"); empty for an exercise the book lacks


@dataclass
class NotebookResult:
    path: str
    exercise: ExerciseResult | None
    error: str | None = None     # the notebook could not be graded (then exercise may be None)


@dataclass
class Submission:
    notebooks: list[NotebookResult]
    missing: list[ExerciseResult]
    score: int
    max_score: int


class NotebookError(ValueError):
    """The notebook is not one the grader can read; the message says why."""


def printable(text: str) -> str:
    """`text` with every character that is not printable (newlines, terminal escapes, format
    characters, lone surrogates) written as its escape, so that it cannot start a line of the
    report or move the cursor."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


# ---- notebooks ---------------------------------------------------------------------------------------
def read_notebook(path) -> dict:
    """The notebook's JSON: a regular file (not a link, a pipe or a folder), at most
    MAX_NOTEBOOK_BYTES, an nbformat 4 notebook."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise NotebookError(f"cannot open it ({exc.strerror}; a symbolic link is refused)") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise NotebookError("it is not a regular file")
        if info.st_size > MAX_NOTEBOOK_BYTES:
            raise NotebookError(f"it is larger than {MAX_NOTEBOOK_BYTES >> 20} MiB")
        data = f.read(MAX_NOTEBOOK_BYTES + 1)
    try:
        nb = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise NotebookError(f"it is not JSON ({type(exc).__name__})") from None
    if not isinstance(nb, dict) or nb.get("nbformat") != 4 or not isinstance(nb.get("cells"), list):
        raise NotebookError("it is not a Jupyter notebook of format 4 with a list of cells")
    return nb


def graded_code(nb: dict, exercise: str) -> str:
    """The source of the code cells tagged graded:<exercise>, joined in order. Cells and tags
    of another shape than Jupyter's (a tag that is a number, a cell without a type) are skipped."""
    parts = []
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        metadata = cell.get("metadata")
        tags = metadata.get("tags") if isinstance(metadata, dict) else None
        if not isinstance(tags, list) or TAG_PREFIX + exercise not in tags:
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) and all(isinstance(s, str) for s in source) else source
        if not isinstance(source, str):
            raise NotebookError(f"cell {i}'s source is not text")
        try:
            source.encode("utf-8")
        except UnicodeEncodeError:
            raise NotebookError(f"cell {i} holds characters that are not text (lone surrogates)") from None
        parts.append(f"# --- cell {i} ---\n{source}\n")
    return "\n".join(parts)


def exercise_for(path, hidden: dict) -> str | None:
    """The exercise whose name the file's name contains (None: no exercise, or several)."""
    name = Path(path).name
    found = [ex for ex in hidden if ex in name]
    return found[0] if len(found) == 1 else None


@functools.cache
def _book_numbers() -> dict:
    """{exercise: "K.n"}: the n-th exercise after chapter K in _toc.yml's reading order (its
    `- file: exercises/chK_...` lines; commented-out ones are not in the book)."""
    toc = ROOT / "_toc.yml"
    names = re.findall(r"^\s*- file: exercises/(ch([0-9]+[a-z]?)_\w+)\s*$", toc.read_text(), re.M) if toc.is_file() else []
    numbers, seen = {}, Counter()
    for name, chapter in names:
        seen[chapter] += 1
        numbers[name] = f"{chapter}.{seen[chapter]}"
    return numbers


def book_number(exercise: str) -> str:
    """The exercise's number in the book ("3.1"), from _toc.yml; "" when the book lacks it."""
    return _book_numbers().get(exercise, "")


# ---- hidden tests ---------------------------------------------------------------------------------
def load_hidden_tests(tests_dir: Path) -> dict:
    """{exercise name: module} for every module in tests_dir that defines EXERCISE."""
    modules = {}
    for path in sorted(Path(tests_dir).glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"hidden_tests_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        exercise = getattr(module, "EXERCISE", None)
        if isinstance(exercise, Exercise):
            modules[exercise.notebook] = module
    return modules


def max_score(module) -> int:
    return sum(t.points for t in module.tests())


def _input_marker(value):
    """The form of the grader's input objects, which the sandbox turns into the real ones."""
    if isinstance(value, Config):
        return {"__config__": value.fields}
    if isinstance(value, Model):
        return {"__model__": {"config": value.config, "seed": value.seed, "dtype": value.dtype}}
    if isinstance(value, Rng):
        return {"__rng__": value.seed}
    return None


def _jobs(tests: list[Test]) -> list[dict]:
    return [{"id": f"t{i:03d}", "function": t.function, "driver": t.driver,
             "args": encode(list(t.args), _input_marker),
             "kwargs": {name: encode(value, _input_marker) for name, value in t.kwargs.items()}}
            for i, t in enumerate(tests)]


# ---- answers ---------------------------------------------------------------------------------------
def read_answers(data: bytes, ids) -> dict:
    """{id: record} from what came through the answers pipe: JSON lines whose id is one of
    `ids` (or __start__, __load__, __done__), of the runner's shape; values decoded and checked
    (runner.decode). Anything else is skipped; the last record of an id wins."""
    wanted = {"__start__", "__load__", "__done__", *ids}
    records = {}
    for line in data.split(b"\n"):
        try:
            raw = json.loads(line)
        except (ValueError, RecursionError):
            continue                                          # a half-written or foreign line
        if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"] in wanted \
                and isinstance(raw.get("ok"), bool):
            records[raw["id"]] = _record(raw)
    return records


def _record(raw: dict) -> dict:
    if raw["ok"]:
        if "value" not in raw:
            return {"ok": True}
        try:
            return {"ok": True, "value": decode(raw["value"])}
        except (ValueError, TypeError, RecursionError) as exc:
            return {"ok": False, "error": {"type": "BadAnswer", "blocked": False,
                                           "message": f"the answer could not be read: {exc}"}}
    error = raw.get("error") if isinstance(raw.get("error"), dict) else {}

    def text(key):
        value = error.get(key)
        return printable(value[:MAX_TEXT]) if isinstance(value, str) else ""
    return {"ok": False, "error": {"type": text("type"), "message": text("message"), "blocked": error.get("blocked") is True}}


def _error_text(error: dict) -> str:
    if error.get("blocked"):
        return f"called a blocked lib reference ({error.get('message', '')})"
    return f"{error.get('type') or 'Error'}: {error.get('message', '')}".strip()


def _judge(test: Test, record: dict | None, missing: str) -> Verdict:
    if record is None:
        return Verdict(False, missing)
    if not record["ok"]:
        if test.expect_error and record["error"]["type"] == test.expect_error:
            return Verdict(True, f"raised {test.expect_error} as required")
        return Verdict(False, _error_text(record["error"]))
    if test.expect_error:
        return Verdict(False, f"returned a value; expected it to raise {test.expect_error}")
    try:
        return Verdict(*test.check(record.get("value")))
    except Exception as exc:                                  # noqa: BLE001 - a hostile value
        return Verdict(False, f"the answer could not be compared: {type(exc).__name__}: {exc}")


def _gate(tests: list[Test], verdicts: list[Verdict]) -> list[Verdict]:
    """Edge tests earn nothing while another test of their function fails: a trivial answer
    (a constant, a function that always raises) gets edge cases right by accident."""
    failing = {t.function for t, v in zip(tests, verdicts) if not t.edge and not v.passed}
    return [Verdict(False, f"{v.message}, but an edge case counts only once the other tests of "
                           f"{t.function} pass", v.detail)
            if t.edge and v.passed and t.function in failing else v for t, v in zip(tests, verdicts)]


# ---- grading ---------------------------------------------------------------------------------------
def _why(run, answers: dict, group: str, limit: int, memory_mb: int) -> tuple[str, str]:
    """(status, reason) of one sandbox run; status "graded" when nothing went wrong."""
    load = answers.get("__load__")
    if run.limit == "cpu":
        return "timeout", f"timed out: over the limit of {limit} s of CPU time (tests {group!r})"
    if run.limit == "wall":
        return "timeout", (f"timed out: over {sandbox.wall_seconds(limit)} s of wall-clock time with "
                           f"{limit} s of CPU time allowed (tests {group!r}): the code waited (sleep, "
                           f"input, a lock) rather than computed")
    if run.limit == "output":
        return "crashed", f"stopped: the answers exceeded {sandbox.MAX_ANSWER_BYTES >> 20} MiB"
    if load is None:
        return "crashed", f"the sandbox ended before the graded cells loaded (exit {run.returncode}): {run.log_tail[-300:]}"
    if not load["ok"]:
        return "load-error", f"the graded cells failed to load: {_error_text(load['error'])}"
    if "__done__" not in answers:
        return "crashed", f"the process ended early (exit {run.returncode}, memory limit {memory_mb} MiB)"
    return "graded", ""


def grade_exercise(code: str, module, *, timeout: float | None, memory_mb: int, forbidden) -> ExerciseResult:
    exercise: Exercise = module.EXERCISE
    tests = module.tests()
    result = ExerciseResult(exercise.notebook, exercise.title, "graded", "", max_score=sum(t.points for t in tests),
                            number=book_number(exercise.notebook))
    if not code.strip():
        result.status, result.message = "no-graded-cells", f"no code cell is tagged {TAG_PREFIX}{exercise.notebook}"
        result.tests = [TestResult(t.name, t.points, False, "not graded: no graded cells") for t in tests]
        return result
    verdicts: dict[int, Verdict] = {}
    problems = []
    unloadable = None                                         # (CPU limit, reason) once the cells failed to load
    for group, seconds in exercise.groups.items():
        members = [i for i, t in enumerate(tests) if t.group == group]
        limit = max(1, int(seconds if timeout is None else min(seconds, timeout)))
        if not members:
            continue
        if unloadable is not None and limit <= unloadable[0]:   # the same cells would fail again
            verdicts.update((i, Verdict(False, f"not run: {unloadable[1]}")) for i in members)
            continue
        jobs = _jobs([tests[i] for i in members])
        with tempfile.TemporaryDirectory(prefix="grade-") as root:
            box = sandbox.make_box(Path(root), code, {"exercise": exercise.notebook, "tests": jobs}, exercise.blocked)
            run = sandbox.run(box, masked=exercise.masked, forbidden=forbidden, cpu_seconds=limit,
                              memory_mb=memory_mb)
        answers = read_answers(run.answers, [job["id"] for job in jobs])
        if "__start__" not in answers:
            raise SandboxUnavailable(f"the sandbox did not start (exit {run.returncode}): {printable(run.log_tail[-500:])}")
        status, why = _why(run, answers, group, limit, memory_mb)
        if status != "graded":
            problems.append((status, why))
        loaded = answers.get("__load__", {}).get("ok", False)
        if not loaded:
            unloadable = (limit, why)
        for i, job in zip(members, jobs):
            verdicts[i] = _judge(tests[i], answers.get(job["id"]) if loaded else None, f"no answer: {why}")
    if problems:
        result.status, result.message = problems[0][0], printable("; ".join(why for _, why in problems))
    gated = _gate(tests, [verdicts[i] for i in range(len(tests))])
    result.tests = [TestResult(t.name, t.points, v.passed, printable(v.message), printable(v.detail))
                    for t, v in zip(tests, gated)]
    result.score = sum(t.points for t in result.tests if t.passed)
    return result


def _forbidden(tests_dir) -> list[Path]:
    """What the sandbox must never see, even where a Python path lies inside it."""
    return [Path(tests_dir).resolve(), (ROOT / "solutions").resolve(), sandbox.LIB_DIR,
            Path(__file__).resolve().parent]                            # the grader itself


def grade_notebook(path, exercise=None, *, tests_dir=DEFAULT_TESTS, timeout=None, memory_mb=4096,
                   hidden=None) -> NotebookResult:
    """Grade the notebook on `exercise` (a name of the hidden tests; by default the one its file
    name names). A notebook that cannot be graded gives a result with an error; only a sandbox
    that cannot start raises (SandboxUnavailable)."""
    hidden = load_hidden_tests(tests_dir) if hidden is None else hidden
    exercise = exercise or exercise_for(path, hidden)
    if exercise is None:
        return _names_nothing(path, hidden)
    if exercise not in hidden:
        return NotebookResult(str(path), None, printable(f"no hidden tests for exercise {exercise!r}"))
    try:
        code = graded_code(read_notebook(path), exercise)
        return NotebookResult(str(path), grade_exercise(code, hidden[exercise], timeout=timeout,
                                                        memory_mb=memory_mb, forbidden=_forbidden(tests_dir)))
    except NotebookError as exc:
        return NotebookResult(str(path), None, printable(f"cannot read the notebook: {exc}"))
    except SandboxUnavailable:
        raise
    except Exception as exc:                                  # noqa: BLE001 - this notebook's error, not the batch's
        return NotebookResult(str(path), None, printable(f"grading failed: {type(exc).__name__}: {exc}"))


def _names_nothing(path, hidden) -> NotebookResult:
    names = ", ".join(hidden)
    return NotebookResult(str(path), None, printable(f"its file name names no exercise (a handed-in notebook's "
                                                     f"name contains one of: {names})"))


def grade_submission(paths, *, assignment=None, exercise=None, tests_dir=DEFAULT_TESTS, timeout=None,
                     memory_mb=4096, hidden=None) -> Submission:
    """Grade one student's notebooks on the assignment's exercises (default: those the files
    name), each exercise at most once; see the module's docstring."""
    hidden = load_hidden_tests(tests_dir) if hidden is None else hidden
    named = [exercise or exercise_for(p, hidden) for p in paths]
    assignment = list(dict.fromkeys(assignment or [ex for ex in named if ex is not None]))
    unknown = [ex for ex in assignment if ex not in hidden]
    if unknown:
        raise ValueError(f"the assignment names exercises without hidden tests: {unknown}")
    counts = Counter(named)
    notebooks = []
    for path, ex in zip(paths, named):
        module = hidden.get(ex)
        if ex is None:
            notebooks.append(_names_nothing(path, hidden))
        elif ex not in assignment:
            notebooks.append(NotebookResult(str(path), None, f"exercise {ex} is not part of this assignment"))
        elif counts[ex] > 1:
            others = ", ".join(Path(p).name for p, e in zip(paths, named) if e == ex)
            notebooks.append(NotebookResult(str(path), ExerciseResult(
                ex, module.EXERCISE.title, "duplicated", printable(f"{counts[ex]} files name this exercise "
                                                                   f"({others}): none is graded"),
                max_score=max_score(module), number=book_number(ex))))
        else:
            notebooks.append(grade_notebook(path, ex, tests_dir=tests_dir, timeout=timeout,
                                            memory_mb=memory_mb, hidden=hidden))
    missing = [ExerciseResult(ex, hidden[ex].EXERCISE.title, "missing", "no notebook handed in names it",
                              max_score=max_score(hidden[ex]), number=book_number(ex))
               for ex in assignment if ex not in named]
    score = sum(nb.exercise.score for nb in notebooks if nb.exercise is not None)
    return Submission(notebooks, missing, score, sum(max_score(hidden[ex]) for ex in assignment))


def as_dict(result, instructor: bool = False) -> dict:
    """A result (Submission, NotebookResult, ...) as plain data; without the instructors'
    details (expected values) unless `instructor`."""
    data = asdict(result)

    def strip(node):
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if instructor or k != "detail"}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node
    return strip(data)
