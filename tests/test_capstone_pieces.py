"""The capstone's checks of the student's earlier pieces name the broken piece with its
exercise ("2.1's embed_backward"), for every piece the capstone uses.

Each wrong answer (solutions/fixtures.py) of an exercise the capstone builds on is put
into `parts` in place of that exercise's solution; the capstone's cells before its graded cell
then run as the notebook runs them. The first check that fails must name an exercise's number
and one of the pieces the capstone takes from it, and that exercise must be the broken one. Every
exercise the capstone builds on must have at least one wrong answer caught that way.
"""
import contextlib
import io
import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "solutions"))
import build_notebooks  # noqa: E402

from lib.handin import parts_from_sources  # noqa: E402
from grader import DEFAULT_TESTS, load_hidden_tests  # noqa: E402
from grader.notebooks import book_number  # noqa: E402
from test_visible_checks import fixtures  # noqa: E402  (solutions/fixtures.py)

CAPSTONE = "ch6_your_gpt2"
BUILDS_ON = sorted(load_hidden_tests(DEFAULT_TESTS)[CAPSTONE].EXERCISE.builds_on)
SOURCES = build_notebooks.sources()


def _graded(name):
    cells = build_notebooks.load_source(SOURCES[name]).CELLS
    return "\n".join(c.solution for c in cells if c.kind == "graded")


@pytest.fixture(scope="module")
def capstone():
    """(the cells before the graded cell, PIECES, the solutions' graded sources)."""
    cells = build_notebooks.load_source(SOURCES[CAPSTONE]).CELLS
    before = cells[:min(i for i, c in enumerate(cells) if c.kind == "graded")]
    namespace = {"__name__": "__main__"}
    pieces_cell = next(c for c in before if "PIECES = {" in c.solution)
    exec(pieces_cell.solution, namespace)
    pieces = namespace["PIECES"]
    assert sorted(pieces) == BUILDS_ON
    return before, pieces, {name: _graded(name) for name in pieces}


def _first_failure(capstone, sources):
    """The message of the first capstone cell before the graded one that fails, or None."""
    before, pieces, _ = capstone
    namespace = {"__name__": "__main__"}
    for cell in before:
        if cell.kind in ("md", "setup"):
            continue
        if cell.kind == "task":                          # parts = gather(...)
            namespace["parts"] = parts_from_sources(sources, pieces)
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(cell.solution, namespace)
        except Exception as exc:                         # noqa: BLE001 (a check's message)
            return f"{type(exc).__name__}: {exc}"
    return None


def test_the_solutions_pieces_pass(capstone):
    assert _first_failure(capstone, capstone[2]) is None


@pytest.mark.parametrize("exercise", BUILDS_ON)
def test_a_broken_piece_is_named_with_its_exercise(capstone, exercise):
    _, pieces, solutions = capstone
    named = [f"{book_number(exercise)}'s {function}" for function in pieces[exercise]]
    caught, unnamed = [], []
    for w in (w for w in fixtures.WRONG if w.exercise == exercise):
        broken = dict(solutions, **{exercise: fixtures.apply(solutions[exercise], w)})
        message = _first_failure(capstone, broken)
        if message is None:
            continue                                     # a mistake the pieces' checks miss
        caught.append(w.name)
        if not any(name in message for name in named):
            unnamed.append(f"{w.name}: {message[:200]!r}")
    assert caught, f"no wrong answer of {exercise} fails the capstone's checks of its pieces"
    assert not unnamed, "first failures that do not name the piece: " + "; ".join(unnamed)
