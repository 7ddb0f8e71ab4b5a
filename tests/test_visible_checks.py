"""Every exercise's wrong answers run through that exercise's visible checks (its notebook's
`check` cells, which a student runs): each check catches at least one wrong answer of
solutions/fixtures.py, each wrong answer is caught by some check (not only by the hidden
tests), and the solution passes every check. A wrong answer with a `names` text must meet it in
the message of the first check it fails, the one a student reads: the mistake named, not only
"N values differ".

The cells run here as the notebook runs them, in order; the graded cell is the solution's with
the fixture's edits made. The cells before it run once, and each answer starts from a copy of what
they leave; cells after the last check (comparisons with lib, timings, plots) do not run.

It also checks that every line of code an exercise page shows fits the page (LINE_LIMIT).
"""
import ast
import contextlib
import copy
import importlib.util
import io
import sys
import warnings
from pathlib import Path

import matplotlib
import nbformat
import pytest

matplotlib.use("Agg")        # the cells' plots draw nowhere, in this process only (not in the kernels
                             # of the book build or nbval, which it starts later)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "solutions"))
import build_notebooks  # noqa: E402  (solutions/ is a folder of scripts, not a package)

# Code the book shows fits a page read at 1280 px, about 88 characters a line (the developers'
# guide); a longer line makes its cell scroll sideways. Every line of a code cell that an exercise
# page shows, in the student's notebook and in the solved one, stays within it.
LINE_LIMIT = 88



def _load(path):
    spec = importlib.util.spec_from_file_location(path.stem + "_visible_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fixtures = _load(ROOT / "solutions" / "fixtures.py")

SOURCES = build_notebooks.sources()


def _first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:600]


def _run(cells, namespace, graded_code=None) -> dict[int, str | None]:
    """Run cells in order in `namespace`: {index of each check cell: None if it passed, else its
    error's first line}. The graded cell runs `graded_code`."""
    results = {}
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, cell in cells:
            if cell.kind == "md" or cell.solution == build_notebooks.SETUP:
                continue
            code = graded_code if cell.kind == "graded" else cell.solution
            try:
                exec(compile(code, f"<cell {i}>", "exec"), namespace)
            except Exception as exc:                       # noqa: BLE001 (recorded: the check failed)
                if cell.kind == "check":
                    results[i] = _first_line(exc)
                elif cell.kind == "graded":
                    raise AssertionError(f"the graded cell does not run: {_first_line(exc)}") from exc
            else:
                if cell.kind == "check":
                    results[i] = None
    import matplotlib.pyplot as plt
    plt.close("all")
    return results


def _copy(namespace):
    """The namespace with every value that can be copied deep-copied (a model, a generator), so
    that each answer starts from the same state; modules and the like are shared."""
    out = {}
    for key, value in namespace.items():
        try:
            out[key] = copy.deepcopy(value)
        except Exception:                                  # noqa: BLE001 (a module, a lock: shared)
            out[key] = value
    return out


def _defines(source) -> set[str]:
    """The names a cell binds at its top level (assignments, definitions, imports)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        else:
            names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names


def _reads(source) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}


def checker(cells):
    """run(graded_code) -> the check cells' results. What comes before the graded cell (the setup)
    does not depend on the answer: it runs once, without the cells whose names nothing up to the
    last check reads (a training run for a plot after the checks), and each answer starts from a
    copy of the namespace it leaves."""
    first = min(i for i, c in enumerate(cells) if c.kind == "graded")
    last = max(i for i, c in enumerate(cells) if c.kind == "check")
    read = set().union(*(_reads(c.solution) for c in cells[first:last + 1] if c.kind not in ("md", "graded")))
    needed = [(i, c) for i, c in enumerate(cells[:first]) if c.kind != "code" or _defines(c.solution) & read]
    for i, c in reversed(needed):                          # and what those cells read in turn
        if c.kind == "code":
            read |= _reads(c.solution)
    needed = [(i, c) for i, c in enumerate(cells[:first]) if c.kind != "code" or _defines(c.solution) & read]
    before = {"__name__": "__main__"}
    _run(needed, before)
    return lambda graded_code: _run(list(enumerate(cells))[first:last + 1], _copy(before), graded_code)


def _label(cells, i) -> str:
    return f"check cell {i} ({cells[i].solution.splitlines()[0][:70]})"


@pytest.mark.parametrize("name", [n for n in SOURCES
                                  if any(c.kind == "check" for c in build_notebooks.load_source(SOURCES[n]).CELLS)])
def test_each_visible_check_catches_a_wrong_answer_and_each_wrong_answer_is_caught(name):
    cells = build_notebooks.load_source(SOURCES[name]).CELLS
    answer = "\n".join(c.solution for c in cells if c.kind == "graded")
    run_checks = checker(cells)
    solution = run_checks(answer)
    assert all(v is None for v in solution.values()), \
        "the solution fails: " + "; ".join(f"{_label(cells, i)}: {v}" for i, v in solution.items() if v)
    wrongs = [w for w in fixtures.WRONG if w.exercise == name]
    assert wrongs, f"{name} has no wrong answers"
    caught = {w.name: run_checks(fixtures.apply(answer, w)) for w in wrongs}
    for w in wrongs:
        print(f"{w.name}: " + "; ".join(f"cell {i}: {v}" for i, v in caught[w.name].items() if v))
    missed = [f"{w.name} ({w.mistake})" for w in wrongs if not any(caught[w.name].values())]
    assert not missed, "wrong answers no visible check catches: " + ", ".join(missed)
    first = {w.name: next(v for v in caught[w.name].values() if v) for w in wrongs}
    unnamed = [f"{w.name}: {first[w.name][:160]!r} does not say {w.names!r}"
               for w in wrongs if w.names and w.names not in first[w.name]]
    assert not unnamed, "wrong answers whose first failing check does not name the mistake: " + "; ".join(unnamed)
    idle = [_label(cells, i) for i in solution if not any(caught[w][i] for w in caught)]
    assert not idle, "visible checks that catch no wrong answer: " + ", ".join(idle)


def test_the_capstones_greedy_check_catches_positions_counted_from_zero():
    """Its greedy check decodes a prompt on which a cached decode that counts the new tokens'
    positions from 0 changes the tokens, so the check itself catches it (not only forward_cached's)."""
    cells = build_notebooks.load_source(SOURCES["ch6_your_gpt2"]).CELLS
    greedy = next(i for i, c in enumerate(cells) if c.kind == "check" and "greedy, with the cache" in c.solution)
    answer = "\n".join(c.solution for c in cells if c.kind == "graded")
    run_checks = checker(cells)
    assert run_checks(answer)[greedy] is None
    off = run_checks(fixtures.apply(answer, next(w for w in fixtures.WRONG if w.name == "positions_from_zero")))
    assert off[greedy] and "greedy, with the cache" in off[greedy], off


def _shown_code(path):
    """(cell index, line) of every code line the notebook's page shows (the setup cell, tagged
    remove-cell, is kept out of the book)."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "remove-cell" not in cell.metadata.get("tags", []):
            yield from ((i, line) for line in cell.source.splitlines())


@pytest.mark.parametrize("notebook", [f"{folder}/{name}.ipynb" for name in SOURCES
                                      for folder in ("exercises", "solutions")])
def test_every_code_line_an_exercise_page_shows_fits_the_page(notebook):
    long = [f"cell {i}, {len(line)} characters: {line.strip()[:60]}"
            for i, line in _shown_code(ROOT / notebook) if len(line) > LINE_LIMIT]
    assert not long, (f"{notebook}: {len(long)} code lines over {LINE_LIMIT} characters (rewrap "
                      "them in solutions/<exercise>/source.py, then run solutions/build_notebooks.py): "
                      + "; ".join(long[:5]))
