"""Each exercise's "Compare with lib" cell shows lib's version only once the student's answer passes
the notebook's checks (lib.checks.checks_passed): a student who runs every cell of an unfilled
notebook sees why it waits, never lib's answer.

The student's notebooks (`exercises/*.ipynb`, the stubs) run here top to bottom, each in a fresh
in-process IPython shell as a Jupyter kernel runs them (cell ids, tracebacks, rich displays), and
no output of any cell (printed text, tracebacks, the HTML that lib.display renders) may hold a
statement of the exercise's answer: its solution's graded lines and the lib code its hidden tests
block (tools/answer_leaks.py's `answer_statements`). The solved notebook of two cheap exercises
runs the same way and must show lib's answer, so the search can find it.

Cost, measured for all 21 tests in one process: 151 s of CPU (6.4 min of wall clock on two
cores busy with another job), mostly the imports of torch and transformers, the models that
exercise 4.2's checks and the capstone's build, and IPython's formatting of some 120 tracebacks;
exercise 4.2's notebook is the longest, 55 s of wall clock there. Two cells are left out, the training runs of
exercises 4.1 and 5.2 (`train(...)` on lib's own model, minutes each), which call none of the
student's functions and show nothing but losses; nbval runs them in the solved notebooks.
"""
import os
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NAMES = sorted(p.stem for p in (ROOT / "exercises").glob("ch*.ipynb"))
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TRAINING = re.compile(r"^\w+ = train\(", re.M)    # lib's training loop on lib's model: minutes


def _skipped(cell, graded_names) -> bool:
    """A training run of lib's model that reads nothing the student wrote."""
    return (TRAINING.search(cell.source) is not None and "graded" not in str(cell.metadata.get("tags"))
            and not graded_names & set(re.findall(r"\w+", cell.source)))


def run_notebook(path, leaks):
    """[(cell index, everything the cell put out as text)] of the notebook run top to bottom."""
    import tracemalloc

    import matplotlib
    matplotlib.use("Agg")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    import lib.checks

    nb = nbformat.read(path, as_version=4)
    graded = "\n".join(c.source for c in nb.cells if any(t.startswith("graded:") for t in c.metadata.get("tags", [])))
    graded_names = set(re.findall(r"^(?:def|class) (\w+)", graded, re.M))
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance(colors="nocolor")
    lib.checks._record()                     # a fresh kernel's `import lib.checks` registers it so
    outputs, here = [], os.getcwd()
    try:
        os.chdir(ROOT / "exercises")
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or "remove-cell" in cell.metadata.get("tags", []):
                continue                     # the setup cell (Colab's) and the Colab-only cells
            if _skipped(cell, graded_names):
                continue
            with capture_output() as captured:
                result = shell.run_cell(cell.source, store_history=True, cell_id=cell.id)
            texts = [captured.stdout, captured.stderr]
            shown = [o.data for o in captured.outputs]
            if result.result is not None:
                shown.append(shell.display_formatter.format(result.result)[0])
            for data in shown:
                texts += [leaks.code_text(v) if kind == "text/html" else str(v) for kind, v in data.items()]
            outputs.append((i, ANSI.sub("", "\n".join(texts))))
    finally:
        os.chdir(here)
        InteractiveShell.clear_instance()
        tracemalloc.stop()                   # a kernel's trace ends with it; this process goes on
        import matplotlib.pyplot as plt
        plt.close("all")
    return outputs


def shown_answers(name, folder, leaks):
    exercise = next(e for e in leaks.exercises() if e.notebook == name)
    wanted = leaks.answer_statements(exercise)
    found = []
    for i, text in run_notebook(ROOT / folder / f"{name}.ipynb", leaks):
        lines = "\n".join(map(leaks.normalise, text.splitlines()))   # as tools/answer_leaks.py reads a page
        found += [(i, s) for s in sorted(wanted) if s in lines]
    return found, wanted


@pytest.mark.parametrize("name", NAMES)
def test_a_stub_notebook_run_top_to_bottom_prints_no_lib_answer(name, leaks):
    found, wanted = shown_answers(name, "exercises", leaks)
    assert wanted, f"{name}: no answer statement to look for"
    assert not found, f"exercises/{name}.ipynb, run on the stubs, prints its answer: " + "; ".join(
        f"cell {i}: {s[:80]}" for i, s in found[:5])


@pytest.mark.parametrize("name", ["ch3_attention", "ch9_dpo"])
def test_a_solved_notebook_shows_lib_answer_after_its_checks(name, leaks):
    found, _ = shown_answers(name, "solutions", leaks)
    nb = nbformat.read(ROOT / "solutions" / f"{name}.ipynb", as_version=4)
    compare = [i for i, c in enumerate(nb.cells) if "hide-cell" in c.metadata.get("tags", [])]
    assert compare and {i for i, _ in found} == set(compare), \
        f"{name}: lib's answer should show in its compare cell {compare}, found in {sorted({i for i, _ in found})}"
