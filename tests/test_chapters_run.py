"""Every chapter runs from top to bottom: read from the strict book build, which executes each once.

The book build (the `built_book` fixture) executes every chapter with `allow_errors: false`, so
a cell that raises (an `assert` of a stated figure, say) fails the build. Running the chapters
through nbval as well would execute each one a second time in the same branch, so the chapters
are not in pytest's testpaths: each chapter's test here reads the notebook that the build
executed (`_build/jupyter_execute/`) and checks that every code cell ran and none raised.
`python -m pytest chapters/NN.ipynb` still runs one chapter through nbval, and
tests/test_gpu_on_cpu.py runs each chapter's GPU branch.
"""
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
ALLOWED_TO_RAISE = "raises-exception"      # the tag with which a cell may raise in the build


def executed(built_book, chapter):
    """The notebook as the book build executed it, or a failure that says where to look."""
    path = built_book.html.parent / "jupyter_execute" / "chapters" / chapter.name
    if not path.is_file():
        pytest.fail(f"the book build wrote no executed copy of {chapter.name} (exit "
                    f"{built_book.returncode}); see _build/build.log")
    return nbformat.read(path, as_version=4)


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_cell_of_the_chapter_ran_without_an_error(built_book, chapter):
    report = built_book.html / "reports" / "chapters" / f"{chapter.stem}.err.log"
    assert not report.exists(), f"{chapter.name} raised in the book build:\n{report.read_text()[-3000:]}"
    cells = [c for c in executed(built_book, chapter).cells if c.cell_type == "code" and c.source.strip()]
    assert cells, f"{chapter.name} has no code cell"
    not_run = [i for i, c in enumerate(cells) if c.get("execution_count") is None]
    assert not not_run, f"{chapter.name}: code cells {not_run} did not run in the book build"
    raised = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(cells) for o in c.get("outputs", [])
              if o.get("output_type") == "error" and ALLOWED_TO_RAISE not in c.metadata.get("tags", [])]
    assert not raised, f"{chapter.name}: cells raised in the book build: {raised}"


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_figure_the_chapter_shows_is_in_the_page(built_book, chapter):
    """A cell that calls plt.show() leaves an image in the executed notebook, which the page
    shows: a figure that draws nowhere (a kernel on a non-inline backend) fails here, not silently."""
    cells = [c for c in executed(built_book, chapter).cells if c.cell_type == "code" and "plt.show()" in c.source]
    blank = [i for i, c in enumerate(cells)
             if not any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    assert not blank, f"{chapter.name}: of its {len(cells)} cells that call plt.show(), {blank} show no image"
