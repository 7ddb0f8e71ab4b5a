"""What grading found, as data and as text: the result dataclasses, their plain-data form and back, the report.

A Submission holds one NotebookResult per notebook handed in and one ExerciseResult per
exercise of the assignment that no notebook names. `as_dict` is what `python -m grader --json`
prints; `submission_from_dict` reads it back (grader/classroom.py does). `report` is the text a
student reads. Every text in a result that came from a notebook or a sandbox went through `clip`
before it got here, and `report` escapes the file names, so that nothing a student chose can
start a line of a report or move the cursor.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

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
    exercise: str                # the exercise's name, its notebook's (ch4_gelu)
    title: str
    status: str                  # graded | no-graded-cells | missing-pieces | load-error | timeout | crashed |
                                 # duplicated | missing
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
    note: str = ""               # why it was read but not graded (a piece of a capstone graded alone)


@dataclass
class Submission:
    notebooks: list[NotebookResult]
    missing: list[ExerciseResult]
    score: int
    max_score: int


def printable(text: str) -> str:
    """`text` with every character that is not printable (newlines, terminal escapes, format
    characters, lone surrogates) written as its escape, so that it cannot start a line of the
    report or move the cursor."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def clip(text: str) -> str:
    """`text` printable (see above) and at most MAX_TEXT characters: how every message that goes
    into a result is written, so that no value, however large, can swell a report."""
    text = str(text)
    short = printable(text[:MAX_TEXT])
    return short if len(text) <= MAX_TEXT and len(short) <= MAX_TEXT else short[:MAX_TEXT - 3] + "..."


def json_structure(data: bytes) -> int:
    """The [ { and , in JSON text: an upper bound on the containers and items json.loads would
    make of it, each some 50 bytes or more however small it is written."""
    return data.count(b"[") + data.count(b"{") + data.count(b",")


def max_score(module) -> int:
    """The points of a hidden-test module's tests, all together."""
    return sum(t.points for t in module.tests())


# ---- plain data ------------------------------------------------------------------------------------
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


def _exercise(data: dict) -> ExerciseResult:
    return ExerciseResult(**{**data, "tests": [TestResult(**t) for t in data["tests"]]})


def submission_from_dict(data: dict) -> Submission:
    """The Submission that `as_dict` wrote (what `python -m grader --json` printed)."""
    notebooks = [NotebookResult(nb["path"], _exercise(nb["exercise"]) if nb["exercise"] else None, nb["error"],
                                nb.get("note", "")) for nb in data["notebooks"]]
    return Submission(notebooks, [_exercise(ex) for ex in data["missing"]], data["score"], data["max_score"])


# ---- text ------------------------------------------------------------------------------------------
def _test_line(t, instructor: bool) -> str:
    line = f"    {'PASS' if t.passed else 'FAIL'} {t.name} ({t.points} pt): {t.message}"
    return line + (f" [{t.detail}]" if instructor and t.detail else "")


def _exercise_lines(ex, instructor: bool) -> list[str]:
    head = f"  {f'{ex.number} ' if ex.number else ''}{ex.exercise} {ex.title}: {ex.score}/{ex.max_score}"
    return ([head + (f"  [{ex.status}] {ex.message}" if ex.status != "graded" else "")]
            + [_test_line(t, instructor) for t in ex.tests])


def report(submission: Submission, instructor: bool = False) -> str:
    """The submission as text: per notebook its exercise and tests, the missing exercises, the total."""
    blocks = []
    for nb in submission.notebooks:
        lines = [printable(nb.path)] + ([f"  ERROR: {nb.error}"] if nb.error else []) + \
            ([f"  {nb.note}"] if nb.note else [])
        blocks.append("\n".join(lines + (_exercise_lines(nb.exercise, instructor) if nb.exercise else [])))
    if submission.missing:
        blocks.append("\n".join(["missing"] + [line for ex in submission.missing for line in _exercise_lines(ex, instructor)]))
    return "\n\n".join(blocks) + f"\n\ntotal: {submission.score}/{submission.max_score}"
