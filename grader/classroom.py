"""Grade a whole class: every notebook under a folder, one gradebook row and one feedback file per student.

    python -m grader.classroom SUBMISSIONS --csv grades.csv --assignment NAMES|@FILE|all [--jobs N]
                               [--feedback DIR] [--deadline SECONDS] [--tests DIR] [--timeout SECONDS]
                               [--memory-mb MB]

The assignment is the instructor's: `--assignment ch4_gelu,ch4_deeper`, `all`, or `@FILE`, a
file holding the names (one per line or comma-separated; # starts a comment). It is never taken
from the students' files, where one extra notebook would change every student's maximum.

Whose a notebook is comes from where it lies:
- SUBMISSIONS/alice/...: every notebook under the folder alice, at any depth, is alice's;
- SUBMISSIONS/alice_ch4_gelu.ipynb: a notebook directly in SUBMISSIONS belongs to the name that
  comes before the exercise's notebook name in its file name (trailing _ - . and spaces dropped);
  a file that names no exercise belongs to its whole name (without .ipynb).
Only *.ipynb files count; files and folders whose name starts with a dot (Jupyter's
.ipynb_checkpoints) are skipped, links to folders are not followed, and a student folder nested
deeper than MAX_DEPTH levels is that student's error row. Sources whose names may be one student's
(alice/ and alice_ch4_gelu.ipynb, or names that differ only in case, in characters a file name
cannot hold or in look-alike letters such as Cyrillic а for Latin a) are each graded on their own
and flagged in the error column, so that the instructor decides who is who; none is merged or
dropped, and each gets a feedback file of its own.

Each student is graded by a `python -m grader --json` process of its own (grader/__init__.py), so
that nothing in one submission can stop another's grading; `--jobs` of them run at a time, each
running its sandboxes one after another. Its notebooks' paths go through its standard input, not
its command line; a student with more than MAX_NOTEBOOKS notebooks is an error row. Whatever goes
wrong with a student's grader is that student's error row. A grader whose sandbox did not start
(exit 2) or did not start in time (exit 3) is run once more; when it fails again, the sandbox is
checked on its own: if none starts on this machine the run stops (exit 2, nothing written),
otherwise the student gets an error row. A notebook that cannot be graded (not JSON, not a
notebook, no graded cell, larger than 32 MiB, a cell that hangs or exhausts memory) scores 0 for
its exercise, its row says why, and the batch goes on. A student whose grading runs past the
deadline (`--deadline`; by default a minute more than the wall-clock limits of all the
assignment's sandbox runs) is stopped and gets an error row.

The gradebook (--csv) has one row per student: student, one score column per exercise of the
assignment (named by the exercise's name, its notebook's), total, max, error (what could not be graded and
why; empty when everything was). A text cell that a spreadsheet would take for a formula (one
starting with = + - @) starts with a quote. The feedback folder (--feedback) gets one
STUDENT.txt per student, the name made safe for a file name (a flagged name gets a suffix of its
own): the grader's report for the student, each test's message, never an expected value; every
name in it escaped. The folder is written aside and swapped in whole, so no file of an earlier
run is left beside this run's; a student whose file could not be written says so in the error
column. The gradebook is written atomically (lib.atomic), so a run that fails midway leaves the
previous gradebook whole.

Exit status: 0 when every student was graded without error, 1 when the gradebook was written
and some row holds an error, 2 on bad usage or when the sandbox cannot start (nothing written).
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from lib.atomic import atomic_folder, atomic_path

from . import sandbox
from .grading import Grading
from .notebooks import MAX_NOTEBOOKS, exercise_for
from .options import EXIT_NO_SANDBOX, EXIT_SANDBOX_LATE, add_grading_options, grading_arguments, grading_from
from .results import Submission, max_score, printable, report, submission_from_dict
from .sandbox import SandboxUnavailable, check_bwrap

PACKAGE_PARENT = Path(__file__).resolve().parents[1]      # where `python -m grader` finds the package
FORMULA_START = ("=", "+", "-", "@")                       # a spreadsheet reads such a cell as a formula
MAX_NAME_BYTES = 200                                       # of a feedback file's name (file systems allow 255)
MAX_DEPTH = 32                                             # folder levels searched below a student's folder
DEADLINE_SLACK = 60                                        # seconds, per student, beyond the sandboxes' limits
# Letters that look like Latin ones, by the end of their Unicode name ("CYRILLIC SMALL LETTER IE"):
# a name's skeleton writes them as the Latin letter, so that look-alike names are flagged.
LOOKALIKE = {"ALPHA": "a", "BETA": "b", "EPSILON": "e", "ETA": "h", "IOTA": "i", "KAPPA": "k", "MU": "m",
             "NU": "n", "OMICRON": "o", "RHO": "p", "TAU": "t", "UPSILON": "y", "CHI": "x", "ZETA": "z",
             "IE": "e", "ER": "p", "ES": "c", "HA": "x", "EN": "h", "EM": "m", "KA": "k", "TE": "t", "VE": "b",
             "JE": "j", "DZE": "s", "BYELORUSSIAN-UKRAINIAN I": "i", "DOTLESS I": "i", "SHORT U": "y"}


@dataclass
class Student:
    name: str                      # as its folder or its files' names give it
    sources: list[str]             # that folder or those files, relative to SUBMISSIONS
    folder: Path                   # its folder, or SUBMISSIONS: its reports name notebooks from there
    notebooks: list[Path] = field(default_factory=list)
    problem: str = ""              # why the student is not graded; empty when it is
    flag: str = ""                 # graded, but the instructor should look (a name like another's)
    feedback_name: str = ""        # its feedback file's name, without .txt


@dataclass
class Row:
    student: str
    scores: dict                   # {exercise name: score}
    error: str                     # empty when everything was graded
    feedback: str = ""             # the report for the student; empty when there is none
    feedback_name: str = ""        # its feedback file's name, without .txt (default: safe_name(student))


# ---- who handed in what ------------------------------------------------------------------------------
def safe_name(name: str) -> str:
    """`name` as a file name: letters, digits, _ . and - kept, every other character (/ and \\
    included) written as _, no leading dot, at most MAX_NAME_BYTES."""
    safe = re.sub(r"[^\w.-]", "_", unicodedata.normalize("NFC", name)).lstrip(".")
    return safe.encode("utf-8")[:MAX_NAME_BYTES].decode("utf-8", "ignore") or "_"


def _visible(name: str) -> bool:
    return not name.startswith(".")


def skeleton(name: str) -> str:
    """What a name looks like: case, accents, punctuation and look-alike letters folded, so that
    names a reader would take for one another have one skeleton."""
    out = []
    for c in unicodedata.normalize("NFKD", name.casefold()):
        if unicodedata.combining(c):
            continue
        letter = unicodedata.name(c, "").rpartition(" LETTER ")[2] if not c.isascii() else ""
        out.append(letter.lower() if len(letter) == 1 else LOOKALIKE.get(letter, c))
    return re.sub(r"[^\w]|_", "", "".join(out))


def _notebooks_under(folder: Path) -> tuple[list[Path], str]:
    """The notebooks under `folder` in os.walk's order, found without recursion (links to folders
    are not followed), and why the folder cannot be graded ("" when it can)."""
    found, stack = [], [(folder, 0)]
    while stack:
        here, depth = stack.pop()
        try:
            entries = sorted((e for e in os.scandir(here) if _visible(e.name)), key=lambda e: e.name)
        except OSError as exc:
            return [], f"not graded: a folder of it cannot be read ({exc.strerror})"
        folders = [Path(e.path) for e in entries if e.is_dir() and not e.is_symlink()]
        found += [Path(e.path) for e in entries if not e.is_dir() and e.name.endswith(".ipynb")]
        if folders and depth >= MAX_DEPTH:
            return [], f"not graded: its folders are nested more than {MAX_DEPTH} levels deep"
        stack += [(f, depth + 1) for f in reversed(folders)]
    return found, ""


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
    name is unusable or folder too deep carry a problem, those whose name may be another's a flag."""
    students: dict[tuple[str, str], Student] = {}
    for entry in sorted(submissions.iterdir()):
        if not _visible(entry.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            notebooks, problem = _notebooks_under(entry)
            students[("folder", entry.name)] = Student(entry.name, [entry.name + "/"], entry, notebooks, problem)
        elif entry.name.endswith(".ipynb"):
            name = student_of_file(entry.name, hidden)
            key = ("file", name) if name else ("unnamed", entry.name)
            student = students.setdefault(key, Student(name or entry.name, [], submissions))
            student.sources.append(entry.name)
            student.notebooks.append(entry)
            if not name:
                student.problem = (f"not graded: a notebook directly in {submissions.name}/ is named "
                                   f"STUDENT_<exercise>.ipynb, or lies in a folder named after its student")
    for student in students.values():
        if len(student.notebooks) > MAX_NOTEBOOKS and not student.problem:
            student.problem = (f"not graded: {len(student.notebooks):,} notebooks handed in, more than "
                               f"{MAX_NOTEBOOKS} (one per exercise is enough)")
    _flag_clashes(list(students.values()))
    return sorted(students.values(), key=lambda s: (s.name.casefold(), s.name))


def _flag_clashes(students: list[Student]) -> None:
    """Flag the students whose names have one skeleton (or one feedback file name), and give
    each of them a feedback file name of its own."""
    groups: dict[str, list[Student]] = {}
    for student in students:
        student.feedback_name = safe_name(student.name)
        groups.setdefault(skeleton(student.feedback_name), []).append(student)
    for clash in (group for group in groups.values() if len(group) > 1):
        sources = ", ".join(source for student in clash for source in student.sources)
        for student in clash:
            student.flag = (f"check the name: {sources} may be one student (names alike but for case, "
                            f"punctuation or look-alike letters); each is graded on its own")
            digest = hashlib.sha256(os.fsencode(student.name)).hexdigest()[:8]
            student.feedback_name = f"{student.feedback_name[:MAX_NAME_BYTES - 9]}-{digest}"


# ---- grading one student ------------------------------------------------------------------------------
def _problems(submission: Submission, assignment: list[str]) -> str:
    """What could not be graded, and why: the unreadable notebooks, then the exercises in the
    assignment's order, '; ' between them."""
    exercises = [nb.exercise for nb in submission.notebooks if nb.exercise] + submission.missing
    items = [f"{nb.path}: {nb.error}" for nb in submission.notebooks if nb.error]
    items += [f"{ex.exercise}: {ex.status}: {ex.message}"
              for ex in sorted(exercises, key=lambda ex: assignment.index(ex.exercise)) if ex.status != "graded"]
    return "; ".join(dict.fromkeys(items))                     # a duplicated exercise once


def deadline(assignment: list[str], grading: Grading) -> int:
    """Seconds one student's grading may take: the wall-clock limits of all the assignment's
    sandbox runs, one after another, and DEADLINE_SLACK more."""
    return DEADLINE_SLACK + sum(sandbox.wall_seconds(grading.cpu_limit(seconds))
                                for ex in assignment for seconds in grading.hidden[ex].EXERCISE.groups.values())


def grade_student(student: Student, assignment: list[str], options: list[str], seconds: float) -> Row:
    """The student's row, flagged if its name is, from a grader process of its own. Whatever goes
    wrong with that process is the student's error row; only a machine on which no sandbox starts
    at all raises SandboxUnavailable (then no student can be graded)."""
    try:
        row = _grade(student, assignment, options, seconds)
    except SandboxUnavailable:
        raise
    except Exception as exc:                                  # noqa: BLE001 - this student's error, not the class's
        row = Row(student.name, {}, printable(f"grading failed: {type(exc).__name__}: {exc}"[:600]))
    row.error = "; ".join(e for e in (student.flag, row.error) if e)
    row.feedback_name = student.feedback_name
    return row


def _run_grader(student: Student, assignment: list[str], options: list[str], seconds: float):
    """One `python -m grader --json` process for the student's notebooks, whose paths go through
    its standard input (NUL-separated), never its command line, which has a size limit."""
    command = [sys.executable, "-m", "grader", "--json", "--assignment", ",".join(assignment), *options,
               "--notebooks-from", "-"]
    listing = b"".join(os.fsencode(path) + b"\0" for path in student.notebooks)
    done = subprocess.run(command, cwd=PACKAGE_PARENT, input=listing, capture_output=True,   # on timeout,
                          timeout=seconds)                     # run() kills the grader; its sandbox dies with it
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


def _grade(student: Student, assignment: list[str], options: list[str], seconds: float) -> Row:
    if student.problem:
        return Row(student.name, {}, student.problem)
    if not student.notebooks:
        return Row(student.name, {}, "no notebook (*.ipynb) handed in", "no notebook (*.ipynb) handed in\n")
    try:
        returncode, stdout, stderr = _run_grader(student, assignment, options, seconds)
        if returncode in (EXIT_NO_SANDBOX, EXIT_SANDBOX_LATE):      # a slow start on a busy machine: once more
            returncode, stdout, stderr = _run_grader(student, assignment, options, seconds)
    except subprocess.TimeoutExpired:
        return Row(student.name, {}, f"grading stopped: over the deadline of {seconds:g} s for one student")
    if returncode == EXIT_NO_SANDBOX:
        check_bwrap()                                          # raises when no sandbox starts on this machine
    if returncode in (EXIT_NO_SANDBOX, EXIT_SANDBOX_LATE):
        return Row(student.name, {}, printable(f"not graded (exit {returncode}, twice): {stderr.strip()[-300:]}"))
    try:
        submission = submission_from_dict(json.loads(stdout))
    except (ValueError, KeyError, TypeError):
        return Row(student.name, {}, printable(f"grading failed (exit {returncode}): {stderr.strip()[-300:]}"))
    for nb in submission.notebooks:                            # paths as the student knows them
        nb.path = Path(nb.path).relative_to(student.folder).as_posix()
    scores = {nb.exercise.exercise: nb.exercise.score for nb in submission.notebooks if nb.exercise}
    return Row(student.name, scores, _problems(submission, assignment), report(submission) + "\n")


def grade_class(submissions: Path, assignment: list[str], hidden: dict, *, jobs: int = 1,
                options: tuple[str, ...] = (), seconds: float = 3600) -> list[Row]:
    """One row per student of `submissions`, `jobs` students graded at a time, each within `seconds`."""
    submissions = submissions.resolve()
    students = find_students(submissions, hidden)
    pool = ThreadPoolExecutor(jobs)
    try:
        return list(pool.map(lambda s: grade_student(s, assignment, list(options), seconds), students))
    finally:
        pool.shutdown(cancel_futures=True)                     # a broken sandbox stops the batch


# ---- writing ---------------------------------------------------------------------------------------------
def cell(text: str) -> str:
    """A text cell for a spreadsheet: printable, and never read as a formula."""
    text = printable(text)
    return "'" + text if text.startswith(FORMULA_START) else text


def write_gradebook(path: Path, header: list[str], rows) -> None:
    """The CSV: the header, then each row (a list of text and numbers), written atomically and
    readable by its owner alone."""
    with atomic_path(path, mode=0o600) as temp, open(temp, "w", encoding="utf-8", newline="") as f:
        out = csv.writer(f)
        out.writerow(header)
        for row in rows:
            out.writerow([cell(v) if isinstance(v, str) else v for v in row])


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
    """FOLDER/NAME.txt per student that has a report (NAME: its feedback_name, or its name made
    safe). A file that cannot be written is said so in the student's error column."""
    folder.mkdir(parents=True, exist_ok=True)
    for row in rows:
        if row.feedback:
            try:
                (folder / f"{row.feedback_name or safe_name(row.student)}.txt").write_text(
                    f"Grading report for {printable(row.student)}\n\n{row.feedback}", encoding="utf-8")
            except (OSError, ValueError) as exc:                  # UnicodeError is a ValueError
                row.error = "; ".join(e for e in (row.error, f"feedback not written: {type(exc).__name__}: {exc}") if e)


def read_assignment(value: str, hidden: dict) -> list[str]:
    """The exercises of --assignment: 'all', names separated by commas, or @FILE holding names
    (commas or lines; # starts a comment). Raises ValueError, saying why, on anything else."""
    if value == "all":
        return list(hidden)
    if value.startswith("@"):
        try:
            text = Path(value[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeError) as exc:
            raise ValueError(f"cannot read the assignment file {value[1:]}: {exc}") from None
        value = ",".join(line.partition("#")[0] for line in text.splitlines())
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names or any(name not in hidden for name in names):
        raise ValueError(f"names no exercise, or one without hidden tests (known: {', '.join(hidden)})")
    return list(dict.fromkeys(names))


# ---- command line --------------------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.classroom", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", type=Path, help="a folder: one subfolder or file-name prefix per student")
    parser.add_argument("--csv", type=Path, required=True, help="the gradebook to write (replaced atomically)")
    parser.add_argument("--jobs", type=int, default=1, help="students graded at a time (default 1)")
    parser.add_argument("--assignment", required=True,
                        help="the exercises: comma-separated names (ch4_gelu,...), 'all', or @FILE (a file of names)")
    parser.add_argument("--feedback", type=Path, default=None, help="a folder for one STUDENT.txt report per student")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds one student's grading may take (default: a minute more than the limits of "
                             "the assignment's sandbox runs)")
    add_grading_options(parser)
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"submissions folder {args.submissions} does not exist")
    if not args.csv.parent.is_dir():
        parser.error(f"--csv {args.csv}: folder {args.csv.parent} does not exist")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.deadline is not None and args.deadline <= 0:
        parser.error(f"--deadline must be > 0 seconds, got {args.deadline}")
    grading = grading_from(parser, args)
    hidden = grading.hidden
    try:
        assignment = read_assignment(args.assignment, hidden)
    except ValueError as exc:
        parser.error(f"--assignment {args.assignment!r}: {exc}")
    seconds = args.deadline or deadline(assignment, grading)
    options = grading_arguments(grading)
    try:
        check_bwrap()
        rows = grade_class(args.submissions, assignment, hidden, jobs=args.jobs, options=options, seconds=seconds)
    except SandboxUnavailable as e:
        print(f"grader.classroom: nothing graded, nothing written: {e}", file=sys.stderr)
        return 2
    with atomic_folder(args.feedback) if args.feedback is not None else nullcontext() as aside:
        if aside is not None:                                  # swapped in whole once the gradebook is written
            write_feedback(aside, rows)
        write_gradebook(args.csv, *gradebook(rows, assignment, hidden))
    failed = sum(bool(row.error) for row in rows)
    print(f"{len(rows)} students graded, {failed} with errors: {args.csv}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
