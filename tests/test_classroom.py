"""grader/classroom.py: a class of submissions (solutions, untouched stubs, wrong answers, broken
files) graded into the expected gradebook; a broken notebook leaves every other score as it is
when graded alone; the gradebook is replaced atomically; hostile student names.

Needs bubblewrap, like tests/test_grader.py. The class is graded once, with two jobs, a CPU cap of
1 s per sandbox (the answers need far less; the hanging cell ends there) and 512 MiB of
memory (the answers fit; the memory-hungry cell ends there).
"""
import csv
import hashlib
import importlib.util
import json
import os
import subprocess
from pathlib import Path

import nbformat
import pytest

from grader import ExerciseResult, Grading, NotebookResult, Submission, as_dict, grade_submission
from grader import classroom
from grader.classroom import Row, cell, find_students, main, safe_name, write_feedback, write_gradebook
from grader.sandbox import SandboxUnavailable, check_bwrap

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ["ch4_gelu", "ch4_deeper", "ch5_loss_plotter"]
CPU_CAP, MEMORY_MB = 1, 512

spec = importlib.util.spec_from_file_location("fixtures_for_classroom", ROOT / "solutions" / "fixtures.py")
fixtures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fixtures)

HANG = "while True:\n    pass\n"
EAT_MEMORY = "import numpy as np\nblocks = []\nwhile True:\n    blocks.append(np.empty(1 << 23))\n"   # address space, little CPU


def stub(exercise):
    return nbformat.read(ROOT / "exercises" / f"{exercise}.ipynb", as_version=4)


def graded(nb, exercise):
    return next(c for c in nb.cells if f"graded:{exercise}" in c.metadata.get("tags", []))


def solution_code(exercise):
    nb = nbformat.read(ROOT / "solutions" / f"{exercise}.ipynb", as_version=4)
    return graded(nb, exercise).source


def wrong_code(exercise, name):
    return fixtures.apply(solution_code(exercise), next(w for w in fixtures.WRONG if (w.exercise, w.name) == (exercise, name)))


def handed_in(path, exercise, code=None, edit=None):
    """The exercise's notebook at `path`, its graded cell holding `code` (None: the stub), then `edit(nb)`."""
    nb = stub(exercise)
    if code is not None:
        graded(nb, exercise).source = code
    if edit is not None:
        edit(nb)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def huge_output(path, megabytes=100):
    """A notebook whose one cell printed `megabytes` MB, written in pieces."""
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", '
                '"metadata": {"tags": ["graded:ch4_gelu"]}, "source": "print(1)", "execution_count": 1, '
                '"outputs": [{"output_type": "stream", "name": "stdout", "text": "')
        for _ in range(megabytes):
            f.write("x" * 1_000_000)
        f.write('"}]}]}')


def class_folder(root):
    """Thirteen students, one or more notebooks each, and one notebook that names no student."""
    sub = root / "submissions"
    for ex in EXERCISES:                                               # alice: every solution
        handed_in(sub / "alice" / f"{ex}.ipynb", ex, solution_code(ex))
    handed_in(sub / "alice" / ".ipynb_checkpoints" / "ch4_gelu-checkpoint.ipynb", "ch4_gelu")   # skipped
    handed_in(sub / "bob_ch4_gelu.ipynb", "ch4_gelu")                        # bob: files in the folder, a stub
    handed_in(sub / "bob_ch4_deeper.ipynb", "ch4_deeper", solution_code("ch4_deeper"))
    handed_in(sub / "carol" / "ch4_gelu.ipynb", "ch4_gelu", wrong_code("ch4_gelu", "wrong_constant"))
    handed_in(sub / "carol" / "ch4_deeper.ipynb", "ch4_deeper", wrong_code("ch4_deeper", "no_qkv_biases"))
    handed_in(sub / "dave" / "week5" / "ch5_loss_plotter.ipynb", "ch5_loss_plotter", wrong_code("ch5_loss_plotter", "window_plus_one"))
    (sub / "erin").mkdir()
    (sub / "erin" / "ch4_gelu.ipynb").write_text('{"cells": [', encoding="utf-8")            # not JSON
    handed_in(sub / "erin" / "ch4_deeper.ipynb", "ch4_deeper", solution_code("ch4_deeper"))
    (sub / "frank").mkdir()
    (sub / "frank" / "ch4_gelu.ipynb").write_text(json.dumps({"cells": "none"}), encoding="utf-8")   # not a notebook
    handed_in(sub / "grace" / "ch4_gelu.ipynb", "ch4_gelu",                 # the graded cell deleted
              edit=lambda nb: nb.cells.remove(graded(nb, "ch4_gelu")))
    handed_in(sub / "heidi" / "ch4_gelu.ipynb", "ch4_gelu", solution_code("ch4_gelu"),   # its tag renamed
              edit=lambda nb: graded(nb, "ch4_gelu").metadata.update(tags=["graded:ch4_gelu-mine"]))
    handed_in(sub / "heidi" / "ch4_deeper.ipynb", "ch4_deeper", solution_code("ch4_deeper"))  # two notebooks of one exercise
    handed_in(sub / "heidi" / "ch4_deeper_copy.ipynb", "ch4_deeper", solution_code("ch4_deeper"))
    handed_in(sub / "ivan" / "ch4_gelu.ipynb", "ch4_gelu", solution_code("ch4_gelu"),    # the graded cell twice
              edit=lambda nb: nb.cells.insert(nb.cells.index(graded(nb, "ch4_gelu")),
                                              nbformat.from_dict({**graded(nb, "ch4_gelu"), "id": "ch4_gelu-again"})))
    (sub / "judy").mkdir()
    huge_output(sub / "judy" / "ch4_gelu.ipynb")                        # 100 MB of output
    handed_in(sub / "mallory" / "ch4_gelu.ipynb", "ch4_gelu", solution_code("ch4_gelu"))
    handed_in(sub / "mallory" / "ch4_deeper.ipynb", "ch4_deeper", HANG + solution_code("ch4_deeper"))
    handed_in(sub / "oscar" / "ch4_deeper.ipynb", "ch4_deeper", EAT_MEMORY + solution_code("ch4_deeper"))
    handed_in(sub / "=1+1" / "ch4_deeper.ipynb", "ch4_deeper", solution_code("ch4_deeper"))   # a formula for a name
    handed_in(sub / "peggy" / "ch4_deeper.ipynb", "ch4_deeper", solution_code("ch4_deeper"))  # one student, two sources
    handed_in(sub / "Peggy_ch4_gelu.ipynb", "ch4_gelu", solution_code("ch4_gelu"))
    handed_in(sub / "ch4_deeper.ipynb", "ch4_deeper", solution_code("ch4_deeper"))           # whose?
    return sub


MISSING = "no notebook handed in names it"
CLASH = ("check the name: Peggy_ch4_gelu.ipynb, peggy/ may be one student (names alike but for case, punctuation "
         "or look-alike letters); each is graded on its own")
EXPECTED = [
    ["student", "ch4_gelu", "ch4_deeper", "ch5_loss_plotter", "total", "max", "error"],
    ["'=1+1", "0", "12", "0", "12", "53", f"ch4_gelu: missing: {MISSING}; ch5_loss_plotter: missing: {MISSING}"],
    ["alice", "24", "12", "17", "53", "53", ""],
    ["bob", "0", "12", "0", "12", "53", f"ch5_loss_plotter: missing: {MISSING}"],
    ["carol", "14", "0", "0", "14", "53", f"ch5_loss_plotter: missing: {MISSING}"],
    ["ch4_deeper.ipynb", "0", "0", "0", "0", "53",
     "not graded: a notebook directly in submissions/ is named STUDENT_<exercise>.ipynb, or lies in a folder "
     "named after its student"],
    ["dave", "0", "0", "2", "2", "53",
     f"ch4_gelu: missing: {MISSING}; ch4_deeper: missing: {MISSING}"],
    ["erin", "0", "12", "0", "12", "53",
     f"ch4_gelu.ipynb: cannot read the notebook: it is not JSON (JSONDecodeError); ch5_loss_plotter: missing: {MISSING}"],
    ["frank", "0", "0", "0", "0", "53",
     "ch4_gelu.ipynb: cannot read the notebook: it is not a Jupyter notebook of format 4 with a list of cells; "
     f"ch4_deeper: missing: {MISSING}; ch5_loss_plotter: missing: {MISSING}"],
    ["grace", "0", "0", "0", "0", "53",
     f"ch4_gelu: no-graded-cells: no code cell is tagged graded:ch4_gelu; ch4_deeper: missing: {MISSING}; "
     f"ch5_loss_plotter: missing: {MISSING}"],
    ["heidi", "0", "0", "0", "0", "53",
     "ch4_gelu: no-graded-cells: no code cell is tagged graded:ch4_gelu; ch4_deeper: duplicated: 2 files name this "
     f"exercise (ch4_deeper.ipynb, ch4_deeper_copy.ipynb): none is graded; ch5_loss_plotter: missing: {MISSING}"],
    ["ivan", "24", "0", "0", "24", "53", f"ch4_deeper: missing: {MISSING}; ch5_loss_plotter: missing: {MISSING}"],
    ["judy", "0", "0", "0", "0", "53",
     f"ch4_gelu.ipynb: cannot read the notebook: it is larger than 32 MiB; ch4_deeper: missing: {MISSING}; "
     f"ch5_loss_plotter: missing: {MISSING}"],
    ["mallory", "24", "0", "0", "24", "53",
     f"ch4_deeper: timeout: timed out: over the limit of {CPU_CAP} s of CPU time (tests 'main'); "
     f"ch5_loss_plotter: missing: {MISSING}"],
    ["oscar", "0", "0", "0", "0", "53",
     "ch4_gelu: missing: no notebook handed in names it; ch4_deeper: load-error: the graded cells failed to load: "
     "MemoryError: Unable to allocate 64.0 MiB for an array with shape (8388608,) and data type float64; "
     f"ch5_loss_plotter: missing: {MISSING}"],
    ["Peggy", "24", "0", "0", "24", "53", f"{CLASH}; ch4_deeper: missing: {MISSING}; ch5_loss_plotter: missing: {MISSING}"],
    ["peggy", "0", "12", "0", "12", "53", f"{CLASH}; ch4_gelu: missing: {MISSING}; ch5_loss_plotter: missing: {MISSING}"],
]


@pytest.fixture(scope="module")
def grading():
    """Each student's grading as the class runs below grade it."""
    check_bwrap()                                                       # raises, saying what to install
    return Grading(timeout=CPU_CAP, memory_mb=MEMORY_MB)


@pytest.fixture(scope="module")
def hidden(grading):
    return grading.hidden


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory, hidden):
    root = tmp_path_factory.mktemp("class")
    sub = class_folder(root)
    status = main([str(sub), "--csv", str(root / "grades.csv"), "--feedback", str(root / "feedback"),
                   "--jobs", "2", "--assignment", "ch4_gelu,ch4_deeper,ch5_loss_plotter", "--timeout", str(CPU_CAP),
                   "--memory-mb", str(MEMORY_MB)])
    (sub / "judy" / "ch4_gelu.ipynb").unlink()                          # 100 MB that pytest would keep
    with open(root / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return sub, status, rows, root / "feedback"


def alone(paths, grading):
    """Grade one student's notebooks by themselves, as `python -m grader` would."""
    return grade_submission(paths, grading=grading, assignment=list(EXERCISES))


@pytest.fixture(scope="module")
def carol(graded_class, grading):
    """Carol's wrong answers graded alone."""
    sub = graded_class[0]
    return alone([sub / "carol" / "ch4_gelu.ipynb", sub / "carol" / "ch4_deeper.ipynb"], grading)


def test_the_class_gets_the_expected_gradebook(graded_class):
    _, status, rows, _ = graded_class
    assert rows == EXPECTED
    assert status == 1                                                   # written, with errors in some rows


def test_a_broken_notebook_leaves_the_other_scores_as_when_graded_alone(graded_class, grading):
    sub, _, rows, _ = graded_class
    by_student = {row[0]: row for row in rows[1:]}
    for student, paths in [("alice", sorted((sub / "alice").glob("*.ipynb"))),
                           ("mallory", [sub / "mallory" / "ch4_gelu.ipynb"])]:    # her other notebook hangs
        scores = {nb.exercise.exercise: nb.exercise.score for nb in alone(paths, grading).notebooks}
        assert [str(scores.get(ex, 0)) for ex in EXERCISES] == by_student[student][1:4], student


def test_a_hanging_cell_is_stopped_by_its_time_limit(graded_class):
    _, _, rows, feedback = graded_class
    mallory = next(row for row in rows if row[0] == "mallory")
    assert f"timed out: over the limit of {CPU_CAP} s of CPU time" in mallory[-1]
    assert "ch4_deeper.ipynb\n  4.2 ch4_deeper Deeper: 0/12  [timeout]" in (feedback / "mallory.txt").read_text()


def test_feedback_files_hold_each_test_message_and_no_expected_value(graded_class, carol):
    sub, _, _, feedback = graded_class
    assert sorted(p.name for p in feedback.iterdir()) == sorted(
        ["_1_1.txt", "alice.txt", "bob.txt", "carol.txt", "dave.txt", "erin.txt", "frank.txt", "grace.txt",
         "heidi.txt", "ivan.txt", "judy.txt", "mallory.txt", "oscar.txt",
         *(f"{name}-{hashlib.sha256(name.encode()).hexdigest()[:8]}.txt" for name in ("Peggy", "peggy"))])
    text = (feedback / "carol.txt").read_text()
    tests = [t for nb in carol.notebooks for t in nb.exercise.tests]
    for t in tests:
        assert f"{'PASS' if t.passed else 'FAIL'} {t.name} ({t.points} pt): {t.message}" in text
    assert any(t.detail for t in tests) and not any(t.detail in text for t in tests if t.detail)
    assert str(sub) not in text and "carol/ch4_gelu.ipynb" not in text and "total: " in text


def test_the_gradebook_is_replaced_atomically(tmp_path):
    path = tmp_path / "grades.csv"
    write_gradebook(path, ["student", "total"], [["alice", 3]])
    before = path.read_bytes()

    def rows():
        yield ["bob", 1]
        raise RuntimeError("the grader died midway")
    with pytest.raises(RuntimeError, match="midway"):
        write_gradebook(path, ["student", "total"], rows())
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["grades.csv"]


def test_hostile_names_are_escaped_sanitised_and_clashes_flagged(tmp_path, hidden):
    assert [cell(v) for v in ("=cmd|'/C calc'!A0", "+1", "-1", "@SUM(A1)", "ann")] == \
        ["'=cmd|'/C calc'!A0", "'+1", "'-1", "'@SUM(A1)", "ann"]
    assert cell("a\nb\x1b[2J") == "a\\nb\\x1b[2J"
    for name in ("..", "../../etc/passwd", "..\\..\\x", "a/b", ".hidden", "", "x" * 300, "é" * 300):
        safe = safe_name(name)
        assert safe and "/" not in safe and "\\" not in safe and not safe.startswith("."), name
        assert len(safe.encode()) <= 200, name
    sub = tmp_path / "submissions"
    for name in ("ann b", "ann_b", "x\ny", "x\\..\\up", ".hidden"):
        handed_in(sub / name / "ch4_gelu.ipynb", "ch4_gelu")
    students = {s.name: s for s in find_students(sub, hidden)}
    assert students["ann b"].flag and students["ann_b"].flag and "ann b/, ann_b/" in students["ann b"].flag
    assert not students["ann b"].problem and students["ann b"].feedback_name != students["ann_b"].feedback_name
    assert not students["x\ny"].problem and not students["x\\..\\up"].problem and ".hidden" not in students
    feedback = tmp_path / "feedback"
    write_feedback(feedback, [Row(name, {}, "", "report\n") for name in ("x\ny", "..\\up", "../../escape")])
    assert sorted(p.name for p in feedback.iterdir()) == ["_.._escape.txt", "_up.txt", "x_y.txt"]
    assert all(p.parent == feedback for p in feedback.rglob("*")) and not (tmp_path / "escape.txt").exists()


def test_a_crashed_grader_is_its_students_row_and_a_broken_sandbox_writes_nothing(tmp_path, monkeypatch, capsys):
    sub = tmp_path / "submissions"
    for student in ("ann", "bo"):
        handed_in(sub / student / "ch4_gelu.ipynb", "ch4_gelu")
    grades = tmp_path / "grades.csv"
    grades.write_text("the last complete gradebook\n")
    monkeypatch.setattr(classroom, "check_bwrap", lambda: None)
    runs = {"ann": (-9, b"", b"Killed"), "bo": (2, b"", b"grader: nothing graded: the sandbox did not start")}
    monkeypatch.setattr(classroom.subprocess, "run", lambda command, **kw: subprocess.CompletedProcess(
        command, *runs[listed(kw)[0].parent.name]))

    def no_sandbox():
        raise SandboxUnavailable("no sandbox starts here")
    monkeypatch.setattr(classroom, "check_bwrap", no_sandbox)
    assert main([str(sub), "--csv", str(grades), "--assignment", "ch4_gelu"]) == 2
    assert grades.read_text() == "the last complete gradebook\n" and "no sandbox" in capsys.readouterr().err
    monkeypatch.setattr(classroom, "check_bwrap", lambda: None)
    runs["bo"] = runs["ann"]
    assert main([str(sub), "--csv", str(grades), "--assignment", "ch4_gelu", "--jobs", "2"]) == 1
    assert grades.read_text().splitlines()[1:] == ["ann,0,0,24,grading failed (exit -9): Killed",
                                                    "bo,0,0,24,grading failed (exit -9): Killed"]


def listed(kwargs) -> list[Path]:
    """The notebooks a grader process was given: NUL-ended paths on its standard input."""
    return [Path(os.fsdecode(p)) for p in kwargs["input"].split(b"\0") if p]


def test_a_sandbox_that_starts_late_is_retried_and_one_that_fails_is_its_students_row(tmp_path, monkeypatch):
    """A grader whose sandbox did not start in time (exit 3) runs once more; one whose sandbox
    did not start twice (exit 2) on a machine where a sandbox does start is that student's row,
    not the end of the class run; an exception while grading one student is that student's row."""
    sub, grades = tmp_path / "submissions", tmp_path / "grades.csv"
    for student in ("ann", "bo", "cy"):
        handed_in(sub / student / "ch4_gelu.ipynb", "ch4_gelu")
    fake_grader(monkeypatch)
    real_run, calls = classroom.subprocess.run, []

    def run(command, **kw):
        student = listed(kw)[0].parent.name
        calls.append(student)
        if student == "ann" and calls.count("ann") == 1:
            return subprocess.CompletedProcess(command, 3, b"", b"the sandbox did not start within 12 s")
        if student == "bo":
            return subprocess.CompletedProcess(command, 2, b"", b"grader: nothing graded: the sandbox did not start")
        if student == "cy":
            raise OSError(7, "Argument list too long")
        return real_run(command, **kw)
    monkeypatch.setattr(classroom.subprocess, "run", run)
    assert main([str(sub), "--csv", str(grades), "--assignment", "ch4_gelu"]) == 1
    rows = list(csv.reader(grades.open()))[1:]
    assert rows[0] == ["ann", "24", "24", "24", ""] and calls.count("ann") == 2 and calls.count("bo") == 2
    assert rows[1][-1].startswith("not graded (exit 2, twice): grader: nothing graded")
    assert rows[2][-1] == "grading failed: OSError: [Errno 7] Argument list too long"


def test_thousands_of_notebooks_from_one_student_are_that_students_row(tmp_path, hidden):
    """9,000 empty notebooks with long names in one student's folder: that student is an error
    row, the others are graded (the real grader, its paths through standard input)."""
    sub, grades = tmp_path / "submissions", tmp_path / "grades.csv"
    handed_in(sub / "ann" / "ch4_gelu.ipynb", "ch4_gelu", solution_code("ch4_gelu"))
    flood = sub / "mallory"
    flood.mkdir()
    for i in range(9_000):
        (flood / f"{i:05d}_{'x' * 200}_ch4_gelu.ipynb").touch()
    handed_in(sub / "zed" / f"{'z' * 200}_ch4_gelu.ipynb", "ch4_gelu", solution_code("ch4_gelu"))
    assert main([str(sub), "--csv", str(grades), "--assignment", "ch4_gelu", "--timeout", str(CPU_CAP)]) == 1
    rows = list(csv.reader(grades.open()))[1:]
    assert rows == [["ann", "24", "24", "24", ""],
                    ["mallory", "0", "0", "24", f"not graded: 9,000 notebooks handed in, more than "
                                                f"{classroom.MAX_NOTEBOOKS} (one per exercise is enough)"],
                    ["zed", "24", "24", "24", ""]]


def test_the_grader_reads_a_list_of_notebooks_and_refuses_too_many(tmp_path, monkeypatch, capsys):
    """`python -m grader --notebooks-from`: NUL-ended paths (a newline in a name is kept); more
    than MAX_NOTEBOOKS is one line of usage error, exit 2."""
    from grader import __main__ as cli
    listing = tmp_path / "list"
    names = [tmp_path / f"a\nb{i}_ch4_gelu.ipynb" for i in range(cli.MAX_NOTEBOOKS + 1)]
    listing.write_bytes(b"".join(os.fsencode(p) + b"\0" for p in names))
    with pytest.raises(SystemExit) as stop:
        cli.main(["--notebooks-from", str(listing)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and err.endswith(f"65 notebooks given: one student hands in at most 64")
    seen = {}
    monkeypatch.setattr(cli, "check_bwrap", lambda: None)
    monkeypatch.setattr(cli, "grade_submission", lambda paths, **kw: seen.setdefault("paths", paths) and
                        Submission([], [], 0, 0))
    listing.write_bytes(b"".join(os.fsencode(p) + b"\0" for p in names[:2]))
    cli.main(["--notebooks-from", str(listing)])
    assert seen["paths"] == names[:2]


def test_help_says_how_students_are_named(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "SUBMISSIONS/alice/" in out and "alice_ch4_gelu.ipynb" in out and "--jobs" in out


# ---- the class run against hostile folders and names ----------------------------------------------------
def fake_grader(monkeypatch, score=24):
    """Stand in for `python -m grader --json`: every notebook scores `score` on ch4_gelu."""
    monkeypatch.setattr(classroom, "check_bwrap", lambda: None)

    def run(command, **kw):
        notebooks = [NotebookResult(str(path), ExerciseResult("ch4_gelu", "GELU", "graded", "", score, 24,
                                                              number="4.1"))
                     for path in listed(kw)]
        out = json.dumps(as_dict(Submission(notebooks, [], score * len(notebooks), 24)))
        return subprocess.CompletedProcess(command, 0, out.encode(), b"")
    monkeypatch.setattr(classroom.subprocess, "run", run)


def test_a_class_run_needs_the_instructors_assignment(tmp_path, monkeypatch):
    """Without --assignment the run refuses; with @FILE it reads the instructor's file; one
    student handing in an extra exercise changes nobody's maximum."""
    sub, grades = tmp_path / "submissions", tmp_path / "grades.csv"
    handed_in(sub / "ann" / "ch4_gelu.ipynb", "ch4_gelu")
    handed_in(sub / "bo" / "ch4_gelu.ipynb", "ch4_gelu")
    handed_in(sub / "bo" / "ch5_loss_plotter.ipynb", "ch5_loss_plotter")
    fake_grader(monkeypatch)
    with pytest.raises(SystemExit):
        main([str(sub), "--csv", str(grades)])
    assert not grades.exists()
    (tmp_path / "week4.txt").write_text("# week 4\nch4_gelu  # GELU\n")
    main([str(sub), "--csv", str(grades), "--assignment", f"@{tmp_path / 'week4.txt'}"])
    rows = list(csv.reader(grades.open()))
    assert rows[0] == ["student", "ch4_gelu", "total", "max", "error"] and [r[3] for r in rows[1:]] == ["24", "24"]
    with pytest.raises(SystemExit):
        main([str(sub), "--csv", str(grades), "--assignment", "ch4_gelu,ex9"])


def test_clashing_names_are_all_graded_and_flagged(tmp_path, monkeypatch):
    """Folders that differ in case or in a look-alike letter (Cyrillic о) are each graded, each
    flagged, each with a feedback file of its own: none merged, none dropped."""
    sub, grades, feedback = tmp_path / "submissions", tmp_path / "grades.csv", tmp_path / "feedback"
    names = ["bob", "Bob", "b\u043eb", "carol"]
    for name in names:
        handed_in(sub / name / "ch4_gelu.ipynb", "ch4_gelu")
    fake_grader(monkeypatch)
    assert main([str(sub), "--csv", str(grades), "--assignment", "ch4_gelu", "--feedback", str(feedback)]) == 1
    rows = {row[0]: row for row in list(csv.reader(grades.open(encoding="utf-8")))[1:]}
    assert sorted(rows) == sorted(names) and all(rows[name][1] == "24" for name in names), rows
    assert all(rows[name][-1].startswith("check the name: ") for name in names[:3]) and rows["carol"][-1] == ""
    assert len(list(feedback.iterdir())) == 4


def test_a_folder_nested_too_deep_is_its_students_row(tmp_path, hidden):
    sub = tmp_path / "submissions"
    handed_in(sub / "ann" / "ch4_gelu.ipynb", "ch4_gelu")
    deep = sub / "deep"
    deep.mkdir()
    for _ in range(1_100):                                              # deeper than Python's recursion limit
        deep = deep / "d"
        deep.mkdir()
    handed_in(deep / "ch4_gelu.ipynb", "ch4_gelu")
    try:
        students = {s.name: s for s in find_students(sub, hidden)}
    finally:                                                            # pytest's own clean-up recurses
        (deep / "ch4_gelu.ipynb").unlink()
        while deep != sub / "deep":
            deep.rmdir()
            deep = deep.parent
    assert "nested more than" in students["deep"].problem and not students["deep"].notebooks
    assert not students["ann"].problem and [p.name for p in students["ann"].notebooks] == ["ch4_gelu.ipynb"]


def test_names_that_are_not_utf8_are_escaped_and_no_stale_feedback_is_left(tmp_path, monkeypatch):
    """x\\xff_ch4_gelu.ipynb (not UTF-8) is graded and named escaped; every student's feedback is
    this run's: the folder is written aside and swapped in, so last week's files are gone."""
    sub, grades, feedback = tmp_path / "submissions", tmp_path / "grades.csv", tmp_path / "feedback"
    handed_in(Path(os.fsdecode(bytes(sub / "x") + b"\xff_ch4_gelu.ipynb")), "ch4_gelu")
    handed_in(sub / "zed" / "ch4_gelu.ipynb", "ch4_gelu")
    feedback.mkdir()
    (feedback / "zed.txt").write_text("last week\n")
    (feedback / "gone.txt").write_text("last week\n")
    fake_grader(monkeypatch)
    assert main([str(sub), "--csv", str(grades), "--assignment", "ch4_gelu", "--feedback", str(feedback)]) == 0
    assert sorted(p.name for p in feedback.iterdir()) == ["x_.txt", "zed.txt"]
    assert "x\\udcff_ch4_gelu.ipynb" in (feedback / "x_.txt").read_text() and "4.1 ch4_gelu" in (feedback / "zed.txt").read_text()
    assert grades.read_text(encoding="utf-8").splitlines()[1] == "x\\udcff,24,24,24,"


def test_a_student_past_the_deadline_gets_an_error_row(tmp_path, hidden):
    sub, grades = tmp_path / "submissions", tmp_path / "grades.csv"
    handed_in(sub / "ann" / "ch4_gelu.ipynb", "ch4_gelu", HANG)
    assert main([str(sub), "--csv", str(grades), "--assignment", "ch4_gelu", "--timeout", "30",
                 "--deadline", "2"]) == 1
    assert grades.read_text().splitlines()[1] == "ann,0,0,24,grading stopped: over the deadline of 2 s for one student"
