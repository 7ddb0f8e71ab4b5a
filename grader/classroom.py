"""Grade a whole class: every notebook under a folder, one gradebook row and one feedback file per student.

    python -m grader.classroom SUBMISSIONS --csv grades.csv [--jobs N] [--assignment IDS]
                               [--feedback DIR] [--tests DIR] [--timeout SECONDS] [--memory-mb MB]

Whose a notebook is comes from where it lies:
- SUBMISSIONS/alice/...: every notebook under the folder alice, at any depth, is alice's;
- SUBMISSIONS/alice_ch4_gelu.ipynb: a notebook directly in SUBMISSIONS belongs to the name that
  comes before the exercise's notebook name in its file name (trailing _ - . and spaces dropped);
  a file that names no exercise belongs to its whole name (without .ipynb).
Only *.ipynb files count; files and folders whose name starts with a dot (Jupyter's
.ipynb_checkpoints) are skipped, and links to folders are not followed. Two sources that give one
student (alice/ and alice_ch4_gelu.ipynb, or names that differ only in case or in characters a
file name cannot hold) are both refused: each gets a row that says so, and neither is graded.

Each student is graded by a `python -m grader --json` process of its own (grader/__init__.py), so
that nothing in one submission can stop another's grading; `--jobs` of them run at a time, each
running its sandboxes one after another. A notebook that cannot be graded (not JSON, not a
notebook, no graded cell, larger than 32 MiB, a cell that hangs or exhausts memory) scores 0 for
its exercise, its row says why, and the batch goes on.

The gradebook (--csv) has one row per student: student, one score column per exercise of the
assignment (named by the exercise's name, its notebook's), total, max, error (what could not be graded and
why; empty when everything was). A text cell that a spreadsheet would take for a formula (one
starting with = + - @) starts with a quote. The feedback folder (--feedback) gets one
STUDENT.txt per student, the name made safe for a file name: the grader's report for the
student, each test's message, never an expected value. Both are written atomically (a temporary
file in the same folder, then os.replace), so a run that fails midway leaves the previous
gradebook whole.

Exit status: 0 when every student was graded without error, 1 when the gradebook was written
and some row holds an error, 2 on bad usage or when the sandbox cannot start (nothing written).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .__main__ import add_sandbox_options, check_sandbox_options
from .grading import load_hidden_tests
from .notebooks import exercise_for
from .results import Submission, max_score, printable, report, submission_from_dict
from .sandbox import SandboxUnavailable, check_bwrap

PACKAGE_PARENT = Path(__file__).resolve().parents[1]      # where `python -m grader` finds the package
FORMULA_START = ("=", "+", "-", "@")                       # a spreadsheet reads such a cell as a formula
MAX_NAME_BYTES = 200                                       # of a feedback file's name (file systems allow 255)


@dataclass
class Student:
    name: str                      # as its folder or its files' names give it
    sources: list[str]             # that folder or those files, relative to SUBMISSIONS
    folder: Path                   # its folder, or SUBMISSIONS: its reports name notebooks from there
    notebooks: list[Path] = field(default_factory=list)
    problem: str = ""              # why the student is not graded; empty when it is


@dataclass
class Row:
    student: str
    scores: dict                   # {exercise name: score}
    error: str                     # empty when everything was graded
    feedback: str = ""             # the report for the student; empty when there is none


# ---- who handed in what ------------------------------------------------------------------------------
def safe_name(name: str) -> str:
    """`name` as a file name: letters, digits, _ . and - kept, every other character (/ and \\
    included) written as _, no leading dot, at most MAX_NAME_BYTES."""
    safe = re.sub(r"[^\w.-]", "_", unicodedata.normalize("NFC", name)).lstrip(".")
    return safe.encode("utf-8")[:MAX_NAME_BYTES].decode("utf-8", "ignore") or "_"


def _visible(name: str) -> bool:
    return not name.startswith(".")


def _notebooks_under(folder: Path) -> list[Path]:
    found = []
    for here, dirs, files in os.walk(folder):                # links to folders are not followed
        dirs[:] = sorted(d for d in dirs if _visible(d))
        found += [Path(here) / f for f in sorted(files) if _visible(f) and f.endswith(".ipynb")]
    return found


def student_of_file(filename: str, hidden: dict) -> str:
    """The student a notebook lying directly in SUBMISSIONS belongs to ("" when its name starts
    with the exercise's notebook name)."""
    stem = filename.removesuffix(".ipynb")
    exercise = exercise_for(filename, hidden)
    if exercise is None:
        return stem
    return stem[:stem.index(exercise)].rstrip("_-. ")


def find_students(submissions: Path, hidden: dict) -> list[Student]:
    """Every student of the folder (see the module's docstring), sorted by name; those whose
    name is unusable or clashes with another's carry a problem."""
    students: dict[tuple[str, str], Student] = {}
    for entry in sorted(submissions.iterdir()):
        if not _visible(entry.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            students[("folder", entry.name)] = Student(entry.name, [entry.name + "/"], entry, _notebooks_under(entry))
        elif entry.name.endswith(".ipynb"):
            name = student_of_file(entry.name, hidden)
            key = ("file", name) if name else ("unnamed", entry.name)
            student = students.setdefault(key, Student(name or entry.name, [], submissions))
            student.sources.append(entry.name)
            student.notebooks.append(entry)
            if not name:
                student.problem = (f"not graded: a notebook directly in {submissions.name}/ is named "
                                   f"STUDENT_<exercise>.ipynb, or lies in a folder named after its student")
    _refuse_clashes(list(students.values()))
    return sorted(students.values(), key=lambda s: (s.name.casefold(), s.name))


def _refuse_clashes(students: list[Student]) -> None:
    by_file_name: dict[str, list[Student]] = {}
    for student in students:
        by_file_name.setdefault(safe_name(student.name).casefold(), []).append(student)
    for clash in (group for group in by_file_name.values() if len(group) > 1):
        sources = ", ".join(source for student in clash for source in student.sources)
        for student in clash:
            student.problem = student.problem or (f"not graded: {sources} give the same student name (or names "
                                                  f"that differ only in case or punctuation); rename them so "
                                                  f"that each student has one folder or one file-name prefix")


# ---- grading one student ------------------------------------------------------------------------------
def _problems(submission: Submission, assignment: list[str]) -> str:
    """What could not be graded, and why: the unreadable notebooks, then the exercises in the
    assignment's order, '; ' between them."""
    exercises = [nb.exercise for nb in submission.notebooks if nb.exercise] + submission.missing
    items = [f"{nb.path}: {nb.error}" for nb in submission.notebooks if nb.error]
    items += [f"{ex.exercise}: {ex.status}: {ex.message}"
              for ex in sorted(exercises, key=lambda ex: assignment.index(ex.exercise)) if ex.status != "graded"]
    return "; ".join(dict.fromkeys(items))                     # a duplicated exercise once


def grade_student(student: Student, assignment: list[str], options: list[str]) -> Row:
    """The student's row, from a grader process of its own. Raises SandboxUnavailable when that
    process found no working sandbox (then no student can be graded)."""
    if student.problem:
        return Row(student.name, {}, student.problem)
    if not student.notebooks:
        return Row(student.name, {}, "no notebook (*.ipynb) handed in", "no notebook (*.ipynb) handed in\n")
    command = [sys.executable, "-m", "grader", "--json", "--assignment", ",".join(assignment), *options,
               "--", *map(str, student.notebooks)]
    done = subprocess.run(command, cwd=PACKAGE_PARENT, capture_output=True, encoding="utf-8", errors="replace")
    if done.returncode == 2:
        raise SandboxUnavailable(done.stderr.strip()[-500:])
    try:
        submission = submission_from_dict(json.loads(done.stdout))
    except (ValueError, KeyError, TypeError):
        return Row(student.name, {}, printable(f"grading failed (exit {done.returncode}): {done.stderr.strip()[-300:]}"))
    for nb in submission.notebooks:                            # paths as the student knows them
        nb.path = Path(nb.path).relative_to(student.folder).as_posix()
    scores = {nb.exercise.exercise: nb.exercise.score for nb in submission.notebooks if nb.exercise}
    return Row(student.name, scores, _problems(submission, assignment), report(submission) + "\n")


def grade_class(submissions: Path, assignment: list[str], hidden: dict, *, jobs: int = 1,
                options: tuple[str, ...] = ()) -> list[Row]:
    """One row per student of `submissions`, `jobs` students graded at a time."""
    submissions = submissions.resolve()
    students = find_students(submissions, hidden)
    pool = ThreadPoolExecutor(jobs)
    try:
        return list(pool.map(lambda s: grade_student(s, assignment, list(options)), students))
    finally:
        pool.shutdown(cancel_futures=True)                     # a broken sandbox stops the batch


# ---- writing ---------------------------------------------------------------------------------------------
def write_atomically(path: Path, write) -> None:
    """Call write(file) on a temporary file in path's folder, then move it to `path`: a reader
    finds the old file or the new one, never part of one."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def cell(text: str) -> str:
    """A text cell for a spreadsheet: printable, and never read as a formula."""
    text = printable(text)
    return "'" + text if text.startswith(FORMULA_START) else text


def write_gradebook(path: Path, header: list[str], rows) -> None:
    """The CSV: the header, then each row (a list of text and numbers), written atomically."""
    def write(f):
        out = csv.writer(f)
        out.writerow(header)
        for row in rows:
            out.writerow([cell(v) if isinstance(v, str) else v for v in row])
    write_atomically(path, write)


def gradebook(rows: list[Row], assignment: list[str], hidden: dict) -> tuple[list[str], list[list]]:
    """(header, rows) of the CSV."""
    header = ["student", *assignment, "total", "max", "error"]
    top = sum(max_score(hidden[ex]) for ex in assignment)
    lines = []
    for row in rows:
        scores = [row.scores.get(ex, 0) for ex in assignment]
        lines.append([row.student, *scores, sum(scores), top, row.error])
    return header, lines


def write_feedback(folder: Path, rows: list[Row]) -> None:
    """FOLDER/STUDENT.txt per student that has a report, the name made safe (find_students refused
    the names that would share a file)."""
    folder.mkdir(parents=True, exist_ok=True)
    for row in rows:
        if row.feedback:
            text = f"Grading report for {printable(row.student)}\n\n{row.feedback}"
            write_atomically(folder / f"{safe_name(row.student)}.txt", lambda f: f.write(text))


# ---- command line --------------------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.classroom", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", type=Path, help="a folder: one subfolder or file-name prefix per student")
    parser.add_argument("--csv", type=Path, required=True, help="the gradebook to write (replaced atomically)")
    parser.add_argument("--jobs", type=int, default=1, help="students graded at a time (default 1)")
    parser.add_argument("--assignment", default=None,
                        help="the exercises, comma-separated names (ch4_gelu,...), or 'all' "
                             "(default: those the class's files name)")
    parser.add_argument("--feedback", type=Path, default=None, help="a folder for one STUDENT.txt report per student")
    add_sandbox_options(parser)
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"submissions folder {args.submissions} does not exist")
    if not args.csv.parent.is_dir():
        parser.error(f"--csv {args.csv}: folder {args.csv.parent} does not exist")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    check_sandbox_options(parser, args)
    hidden = load_hidden_tests(args.tests)
    if args.assignment == "all":
        assignment = list(hidden)
    elif args.assignment:
        assignment = args.assignment.split(",")
        if any(ex not in hidden for ex in assignment):
            parser.error(f"--assignment {args.assignment!r}: known exercises are {', '.join(hidden)}")
    else:
        named = {exercise_for(p, hidden) for s in find_students(args.submissions, hidden) for p in s.notebooks}
        assignment = [ex for ex in hidden if ex in named]
        if not assignment:
            parser.error(f"no notebook in {args.submissions} names an exercise; give --assignment")
    options = ["--tests", str(args.tests.resolve()), "--memory-mb", str(args.memory_mb)]
    options += ["--timeout", str(args.timeout)] if args.timeout is not None else []
    try:
        check_bwrap()
        rows = grade_class(args.submissions, assignment, hidden, jobs=args.jobs, options=options)
    except SandboxUnavailable as e:
        print(f"grader.classroom: nothing graded, nothing written: {e}", file=sys.stderr)
        return 2
    header, lines = gradebook(rows, assignment, hidden)
    write_gradebook(args.csv, header, lines)
    if args.feedback is not None:
        write_feedback(args.feedback, rows)
    failed = sum(bool(row.error) for row in rows)
    print(f"{len(rows)} students graded, {failed} with errors: {args.csv}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
