"""Grading one student's submission: loading the hidden tests, running each exercise's tests in the sandbox, scoring.

See the package's docstring (grader/__init__.py) for the steps and what each guards against.
This module puts them together: notebooks.py reads the notebook, sandbox.py runs the graded
cells, judging.py judges what came back, results.py holds the outcome.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from . import sandbox
from .judging import error_text, gate, judge, read_answers
from .notebooks import ROOT, TAG_PREFIX, NotebookError, book_number, exercise_for, graded_code, read_notebook
from .results import ExerciseResult, NotebookResult, Submission, TestResult, clip, max_score, printable
from .runner import encode
from .sandbox import SandboxLate, SandboxUnavailable
from .spec import Config, Exercise, Model, Rng, Test, Verdict

DEFAULT_TESTS = ROOT / "solutions"     # a folder per exercise, each holding its hidden_tests.py
MAX_PIECES_BYTES = 4 << 20      # the graded code of all a capstone's pieces together, UTF-8 (solutions: ~30 kB)


# ---- hidden tests ---------------------------------------------------------------------------------
def load_hidden_tests(tests_dir: Path) -> dict:
    """{exercise name: module} for every tests_dir/<folder>/hidden_tests.py that defines EXERCISE."""
    modules = {}
    for path in sorted(Path(tests_dir).glob("*/hidden_tests.py")):
        spec = importlib.util.spec_from_file_location(f"hidden_tests_{path.parent.name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        exercise = getattr(module, "EXERCISE", None)
        if isinstance(exercise, Exercise):
            modules[exercise.notebook] = module
    return modules


@dataclass(frozen=True)
class Grading:
    """What every grading of one run shares: where the hidden tests are, and each sandbox run's limits."""
    tests_dir: Path = DEFAULT_TESTS
    timeout: float | None = None      # a cap, in CPU seconds, on each sandbox run (None: the hidden tests' own)
    memory_mb: int = 4096             # each sandbox's address-space limit

    @cached_property
    def hidden(self) -> dict:
        """{exercise name: hidden-test module}, loaded once."""
        return load_hidden_tests(self.tests_dir)

    def cpu_limit(self, seconds: float) -> int:
        """The CPU seconds of one sandbox run: its group's limit, capped by the timeout, at least 1."""
        return max(1, int(seconds if self.timeout is None else min(seconds, self.timeout)))

    @cached_property
    def forbidden(self) -> list[Path]:
        """What the sandbox must never see, even where a Python path lies inside it."""
        return [Path(self.tests_dir).resolve(), (ROOT / "solutions").resolve(), sandbox.LIB_DIR,
                Path(__file__).resolve().parent]                        # the grader itself


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
        return "load-error", f"the graded cells failed to load: {error_text(load['error'])}"
    if "__done__" not in answers:
        return "crashed", f"the process ended early (exit {run.returncode}, memory limit {memory_mb} MiB)"
    return "graded", ""


def new_result(module, status: str, message: str = "", tests: list[Test] | None = None) -> ExerciseResult:
    """The exercise's result before any test is judged: its name, title and book number, `status`
    and `message`, score 0 of the points of `tests` (by default module.tests())."""
    ex = module.EXERCISE
    tests = module.tests() if tests is None else tests
    return ExerciseResult(ex.notebook, ex.title, status, message, max_score=sum(t.points for t in tests),
                          number=book_number(ex.notebook))


def _not_graded(module, status: str, message: str, reason: str) -> ExerciseResult:
    """The exercise's result when its tests cannot run: `status` and `message`, every test failed
    with "not graded: <reason>"."""
    tests = module.tests()
    result = new_result(module, status, message, tests)
    result.tests = [TestResult(t.name, t.points, False, f"not graded: {reason}") for t in tests]
    return result


def grade_exercise(code: str, module, grading: Grading, pieces: dict | None = None) -> ExerciseResult:
    """Run the exercise's hidden tests on `code` (its graded cells), group by group, and score
    them. pieces: for an exercise that builds on earlier ones, {exercise: graded cells' source}
    of the student's own notebooks of them (see pieces_of)."""
    exercise: Exercise = module.EXERCISE
    if not code.strip():
        return _not_graded(module, "no-graded-cells", f"no code cell is tagged {TAG_PREFIX}{exercise.notebook}",
                          "no graded cells")
    tests = module.tests()
    result = new_result(module, "graded", tests=tests)
    verdicts: dict[int, Verdict] = {}
    problems = []
    unloadable = None                                         # (CPU limit, reason) once the cells failed to load
    with tempfile.TemporaryDirectory(prefix="grade-") as root:
        shared = None                                         # the pieces, written once for every group
        if exercise.builds_on:
            shared = Path(root) / "pieces.json"
            shared.write_text(json.dumps({"sources": pieces or {}, "names": {
                ex: list(names) for ex, names in exercise.builds_on.items()}}, ensure_ascii=False,
                separators=(",", ":")), encoding="utf-8")
        for group, seconds in exercise.groups.items():
            members = [i for i, t in enumerate(tests) if t.group == group]
            limit = grading.cpu_limit(seconds)
            if not members:
                continue
            if unloadable is not None and limit <= unloadable[0]:   # the same cells would fail again
                verdicts.update((i, Verdict(False, f"not run: {unloadable[1]}")) for i in members)
                continue
            jobs = _jobs([tests[i] for i in members])
            job = {"exercise": exercise.notebook, "tests": jobs, "pieces": shared is not None}
            box = sandbox.make_box(Path(root) / group, code, job, exercise.blocked, shared=[shared] if shared else [])
            memory = min(grading.memory_mb, exercise.memory.get(group, grading.memory_mb))
            run = sandbox.run(box, masked=exercise.masked, forbidden=grading.forbidden, cpu_seconds=limit,
                              memory_mb=memory)
            shutil.rmtree(box)
            answers = read_answers(run.answers, [job["id"] for job in jobs])
            if "__start__" not in answers:
                if run.limit == "wall":
                    raise SandboxLate(f"the sandbox did not start within {sandbox.wall_seconds(limit)} s of "
                                      f"wall-clock time (a busy machine?)")
                raise SandboxUnavailable(f"the sandbox did not start (exit {run.returncode}): "
                                         f"{printable(run.log_tail[-500:])}")
            status, why = _why(run, answers, group, limit, memory)
            if status != "graded":
                problems.append((status, why))
            loaded = answers.get("__load__", {}).get("ok", False)
            if not loaded:
                unloadable = (limit, why)
            for i, job in zip(members, jobs):
                verdicts[i] = judge(tests[i], answers.get(job["id"]) if loaded else None, f"no answer: {why}")
    if problems:
        result.status, result.message = problems[0][0], clip("; ".join(why for _, why in problems))
    gated = gate(tests, [verdicts[i] for i in range(len(tests))])
    result.tests = [TestResult(t.name, t.points, v.passed, clip(v.message), clip(v.detail))
                    for t, v in zip(tests, gated)]
    result.score = sum(t.points for t in result.tests if t.passed)
    return result


def pieces_of(module, handed_in: dict) -> tuple[dict, str]:
    """The graded cells of the student's notebooks that an exercise builds on (module.EXERCISE.
    builds_on), from handed_in ({exercise: path}, the notebooks handed in with it): ({exercise:
    source}, "") or ({}, why not, in one line)."""
    sources, missing, size = {}, [], 0
    for ex in module.EXERCISE.builds_on:
        if ex not in handed_in:
            missing.append(ex)
            continue
        try:
            sources[ex] = graded_code(read_notebook(handed_in[ex]), ex)
        except NotebookError as exc:
            return {}, clip(f"its piece from exercise {ex} cannot be read ({Path(handed_in[ex]).name}: {exc})")
        if not sources[ex].strip():
            return {}, clip(f"your notebook of exercise {ex} ({Path(handed_in[ex]).name}) has no cell tagged "
                            f"{TAG_PREFIX}{ex}")
        size += len(sources[ex].encode("utf-8"))
        if size > MAX_PIECES_BYTES:
            return {}, clip(f"its pieces' graded cells hold over {MAX_PIECES_BYTES:,} bytes of code together "
                            f"(at {ex}); keep them to the code the exercises ask for")
    if missing:
        return {}, clip(f"it builds on your notebooks of {', '.join(missing)}: hand them in with it, one "
                        f"each (python -m grader exercises/*.ipynb grades them together)")
    return sources, ""


def grade_notebook(path, exercise=None, *, grading: Grading, handed_in=None) -> NotebookResult:
    """Grade the notebook on `exercise` (a name of the hidden tests; by default the one its file
    name names). handed_in: {exercise: path} of the notebooks handed in with it, where an
    exercise that builds on earlier ones finds them. A notebook that cannot be graded gives a
    result with an error; only a sandbox that cannot start raises (SandboxUnavailable)."""
    hidden = grading.hidden
    exercise = exercise or exercise_for(path, hidden)
    if exercise is None:
        return _names_nothing(path, hidden)
    if exercise not in hidden:
        return NotebookResult(str(path), None, printable(f"no hidden tests for exercise {exercise!r}"))
    try:
        code = graded_code(read_notebook(path), exercise)
        pieces, why = pieces_of(hidden[exercise], handed_in or {})
        if why:
            return NotebookResult(str(path), _not_graded(hidden[exercise], "missing-pieces", why,
                                                        "the pieces it builds on are missing"))
        return NotebookResult(str(path), grade_exercise(code, hidden[exercise], grading, pieces))
    except NotebookError as exc:
        return NotebookResult(str(path), None, clip(f"cannot read the notebook: {exc}"))
    except SandboxUnavailable:
        raise
    except Exception as exc:                                  # noqa: BLE001 - this notebook's error, not the batch's
        return NotebookResult(str(path), None, clip(f"grading failed: {type(exc).__name__}: {exc}"))


def _names_nothing(path, hidden) -> NotebookResult:
    names = ", ".join(hidden)
    return NotebookResult(str(path), None, printable(f"its file name names no exercise (a handed-in notebook's "
                                                     f"name contains one of: {names})"))


def grade_submission(paths, *, grading: Grading, assignment=None, exercise=None) -> Submission:
    """Grade one student's notebooks on the assignment's exercises (default: those the files
    name), each exercise at most once; see the module's docstring."""
    hidden = grading.hidden
    named = [exercise or exercise_for(p, hidden) for p in paths]
    assignment = list(dict.fromkeys(assignment or [ex for ex in named if ex is not None]))
    unknown = [ex for ex in assignment if ex not in hidden]
    if unknown:
        raise ValueError(f"the assignment names exercises without hidden tests: {unknown}")
    counts = Counter(named)
    handed_in = {ex: path for path, ex in zip(paths, named) if ex is not None and counts[ex] == 1}
    used_by = {piece: ex for ex in assignment for piece in hidden[ex].EXERCISE.builds_on}
    notebooks = []
    for path, ex in zip(paths, named):
        module = hidden.get(ex)
        if ex is None:
            notebooks.append(_names_nothing(path, hidden))
        elif ex not in assignment and ex in used_by:
            notebooks.append(NotebookResult(str(path), None, note=f"a piece of {used_by[ex]}, which builds on it "
                                                                  f"(not graded on its own in this assignment)"))
        elif ex not in assignment:
            notebooks.append(NotebookResult(str(path), None, f"exercise {ex} is not part of this assignment"))
        elif counts[ex] > 1:
            others = ", ".join(Path(p).name for p, e in zip(paths, named) if e == ex)
            notebooks.append(NotebookResult(str(path), new_result(
                module, "duplicated", clip(f"{counts[ex]} files name this exercise ({others}): none is graded"))))
        else:
            notebooks.append(grade_notebook(path, ex, grading=grading, handed_in=handed_in))
    missing = [new_result(hidden[ex], "missing", "no notebook handed in names it")
               for ex in assignment if ex not in named]
    score = sum(nb.exercise.score for nb in notebooks if nb.exercise is not None)
    return Submission(notebooks, missing, score, sum(max_score(hidden[ex]) for ex in assignment))
