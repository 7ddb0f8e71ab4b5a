"""Write each exercise twice from one source: the student's notebook and its solution.

    python solutions/build_notebooks.py            # writes exercises/*.ipynb and solutions/*.ipynb

The sources are solutions/chK_name/source.py (K: the chapter it follows); the folder's name is the
exercise's one name (its notebooks', its graded cells' tag, its hidden tests'). Each defines
CELLS, a list built with the helpers below:
- md(text), code(src): the same in both notebooks;
- graded(stub, answer): a cell tagged `graded:<name>`, the only code the grader runs;
- task(stub, answer): student work that is not graded (a plot, say);
- uses(src): code that calls the student's functions. In the student's notebook it is tagged
  `raises-exception`, since the stubs raise NotImplementedError there (nbval then accepts the
  error; the book does not execute the exercise pages); in the solution it must run cleanly.
- check(src): a visible check, a `uses` cell that tests one thing; tests/test_visible_checks.py
  runs the exercise's wrong answers (its fixtures.py) through them (each check must catch one of them,
  each of them must be caught);
- collapsed(src): code the book shows collapsed, closed until clicked (tagged `hide-cell`): lib's
  version of an answer, after the checks. Its last statement (the one that shows lib's code) runs
  only `if checks_passed(N)` (lib.checks), N the notebook's check cells: run top to bottom on the
  stubs, the notebook says why it waits instead of printing lib's answer;
Both notebooks are written without outputs. This file and the sources live in solutions/, which
students never receive.
"""
import importlib.util
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

sys.path.insert(0, str(ROOT / "tools"))
from setup_cell import TAGS as SETUP_TAGS, setup_source  # noqa: E402  (tools/ is a folder of scripts, not a package)

SETUP = setup_source()                 # the chapters' setup cell, from _config.yml


@dataclass
class Cell:
    kind: str            # md | code | graded | task | uses | check | collapsed
    student: str
    solution: str


def _clean(text):
    return textwrap.dedent(text).strip("\n")


def md(text):
    return Cell("md", _clean(text), _clean(text))


def code(src):
    return Cell("code", _clean(src), _clean(src))


def graded(stub, answer):
    return Cell("graded", _clean(stub), _clean(answer))


def task(stub, answer):
    return Cell("task", _clean(stub), _clean(answer))


def uses(src):
    return Cell("uses", _clean(src), _clean(src))


def check(src):
    return Cell("check", _clean(src), _clean(src))


def collapsed(src):
    return Cell("collapsed", _clean(src), _clean(src))


def after_checks(src, count):
    """A collapsed cell's source with its last statement run only once `count` check cells have
    passed (lib.checks.checks_passed), the import added at the top."""
    import ast
    lines = src.splitlines()
    last = ast.parse(src).body[-1]
    if not isinstance(last, ast.Expr):
        raise ValueError(f"a collapsed cell ends with the expression that shows lib's code: {src!r}")
    shown = "\n".join(lines[last.lineno - 1:])
    gated = [f"if checks_passed({count}):        # lib's version, once yours passes the checks above",
             textwrap.indent(f"display({shown})", "    ")]
    head = ["from IPython.display import display", "", "from lib.checks import checks_passed"]
    return "\n".join(head + lines[:last.lineno - 1] + gated)


def setup():
    return Cell("setup", SETUP, SETUP)


def notebook(cells, exercise, solution):
    nb = nbformat.v4.new_notebook()
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.language_info = {"name": "python"}
    nb.metadata.grading = {"exercise": exercise}
    count = sum(cell.kind == "check" for cell in cells)
    for cell in cells:
        text = cell.solution if solution else cell.student
        if cell.kind == "collapsed":
            text = after_checks(text, count)
        if cell.kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(text))
            continue
        new = nbformat.v4.new_code_cell(text)
        tags = []
        if cell.kind == "graded":
            tags.append(f"graded:{exercise}")
        if cell.kind in ("uses", "check") and not solution:
            tags.append("raises-exception")
        if cell.kind == "collapsed":
            tags.append("hide-cell")
        if cell.kind == "setup":
            tags += SETUP_TAGS                               # in the notebook for Colab, not in the book
        if tags:
            new.metadata.tags = tags
        nb.cells.append(new)
    nb.cells.append(nbformat.v4.new_markdown_cell(
        f"**Handing in.** Keep `{exercise}` in the file's name (`alice_{exercise}.ipynb`, say): the grader "
        "knows the exercise from the file name. It runs only the graded cells, on inputs you have not "
        "seen, and its report says which tests failed and why."))
    for i, c in enumerate(nb.cells):                         # stable ids: rebuilding changes nothing
        c.id = f"{exercise}-{i:02d}"
    return nb


def sources() -> dict:
    """{exercise name: path of its source.py}, one per exercise folder of solutions/."""
    return {path.parent.name: path for path in sorted(HERE.glob("*/source.py"))}


def load_source(path):
    spec = importlib.util.spec_from_file_location(f"exercise_source_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main():
    sys.path.insert(0, str(HERE))
    for name, path in sources().items():
        source = load_source(path)
        for folder, solution in (("exercises", False), ("solutions", True)):
            out = ROOT / folder / f"{name}.ipynb"
            nb = notebook(source.CELLS, name, solution)
            nbformat.validate(nb)
            text = nbformat.writes(nb) + "\n"
            if not out.exists() or out.read_text() != text:
                out.write_text(text)
                print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
