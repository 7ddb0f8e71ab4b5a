"""Grade exercise notebooks against hidden tests, with the student's code in a sandbox.

    python -m grader NOTEBOOK [NOTEBOOK ...] [--notebooks-from FILE|-] [--assignment IDS] [--exercise ID]
                     [--json] [--instructor] [--tests DIR] [--timeout SECONDS] [--memory-mb MB]

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
   of the notebook runs. A capstone (exercise 6.3, `Exercise.builds_on`) also takes the graded
   cells of the student's notebooks of the exercises it builds on, from the same submission:
   they run in the sandbox too and give the capstone its `parts`; without them it is
   "missing-pieces" (0).
3. The hidden tests for <name> (`solutions/<name>/hidden_tests.py`, see grader/spec.py) give the
   calls to make and their inputs, written into a fresh folder as JSON.
4. `grader/runner.py` runs the cells and the calls inside bubblewrap (grader/sandbox.py), as an
   unprivileged user: no network, no repository, no solutions, no hidden tests, a copy of lib
   whose answers to the exercise are stubs, one process, time, memory and disk limits. It sends
   back plain values, per test, through a pipe.
5. Here, in the grader's own process, each value is checked (by type, size and test id) and
   compared with the hidden test's expectation. So patching numpy or builtins, printing,
   exiting, reading files or calling the reference changes nothing here; a crash, a timeout or
   an exit scores the tests still unanswered 0 and grading goes on. An edge test (an error
   check, an empty input) earns its points only when the other tests of its function pass, and
   a test that requires other functions (4.4's whole model) only when every test of theirs does.

Output: per test PASS/FAIL with a reason, a score per exercise (named by its book number and
its name: "3.1 ch3_attention"), a total. Messages are written
for the student: they never hold an expected value (`--instructor` adds them), and what came
from the sandbox is escaped, so that it cannot forge lines. `--json` prints the same as one
JSON document. The exit status is 0 whenever grading itself worked (whatever the scores), 1 if
a notebook could not be graded (unreadable, or its name names no exercise), 2 on bad usage or
when the sandbox cannot start (then nothing is graded: a broken sandbox is not a row of zeros),
3 when a sandbox did not start within its wall-clock limit (a busy machine: worth a second try).
One run takes at most MAX_NOTEBOOKS notebooks; `--notebooks-from` reads their paths, each ended
by a NUL byte, from a file or standard input (how grader/classroom.py passes them: a command
line has a size limit).

The package, one job per module (each imports only those listed before it):
- spec.py: the vocabulary of hidden tests (Exercise, Test, the checks);
- results.py: the result dataclasses, their plain-data form and back, the text report;
- notebooks.py: reading a notebook, its graded code, the exercise its file name names;
- runner.py and drivers.py: what runs inside the sandbox (the value codec; the drivers);
- sandbox.py, seccomp.py: the sandbox;
- judging.py: decoding the answers and judging them, in the grader's process;
- grading.py: one submission, from notebooks to results, under one Grading (the hidden tests,
  the sandbox's limits);
- options.py: the command line of __main__.py and classroom.py (a Grading's options, exit statuses);
- __main__.py (one student), classroom.py (a class), release.py (the student version).
This file only gathers their public names.
"""
from __future__ import annotations

from .grading import DEFAULT_TESTS, Grading, grade_exercise, grade_notebook, grade_submission, load_hidden_tests
from .judging import gate, judge, read_answers
from .notebooks import (MAX_NOTEBOOK_BYTES, TAG_PREFIX, NotebookError, book_number, exercise_for, graded_code,
                        read_notebook)
from .results import (MAX_TEXT, ExerciseResult, NotebookResult, Submission, TestResult, as_dict, max_score,
                      printable, report, submission_from_dict)
from .sandbox import SandboxUnavailable

__all__ = ["DEFAULT_TESTS", "MAX_NOTEBOOK_BYTES", "MAX_TEXT", "TAG_PREFIX", "ExerciseResult", "Grading",
           "NotebookError", "NotebookResult", "SandboxUnavailable", "Submission", "TestResult", "as_dict", "book_number",
           "exercise_for", "gate", "grade_exercise", "grade_notebook", "grade_submission", "graded_code",
           "judge", "load_hidden_tests", "max_score", "printable", "read_answers", "read_notebook", "report",
           "submission_from_dict"]
