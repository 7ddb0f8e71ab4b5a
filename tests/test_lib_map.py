"""The README's map of lib is the one tools/lib_map.py writes from lib's docstrings."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("lib_map", Path(__file__).resolve().parent.parent / "tools" / "lib_map.py")
lib_map = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lib_map)


def test_the_readme_map_is_lib_as_it_is():
    run = subprocess.run([sys.executable, "tools/lib_map.py", "--check"], cwd=lib_map.ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_every_module_of_lib_has_a_row():
    rows = lib_map.table().splitlines()[2:]
    modules = {lib_map.module_name(p) for p in (lib_map.ROOT / "lib").rglob("*.py") if "__pycache__" not in p.parts}
    assert {row.split("`")[1] for row in rows} == modules


@pytest.mark.parametrize("docstring, sentence", [
    ("One job.\n\nMore.", "One job."),
    ("A job that runs over\ntwo lines. Then another sentence.", "A job that runs over two lines."),
    ("Chapter 7's diagram: GPT-1's input format.", "Chapter 7's diagram: GPT-1's input format."),
    ("`python -m lib.x`: a command (see __main__.py).", "`python -m lib.x`: a command (see __main__.py)."),
])
def test_first_sentence(docstring, sentence):
    assert lib_map.first_sentence(docstring) == sentence


def test_a_module_without_a_docstring_is_named(tmp_path):
    (tmp_path / "x.py").write_text("def f(): pass\n")
    with pytest.raises(ValueError, match="x.py has no docstring"):
        lib_map.row(tmp_path / "x.py")


def test_a_readme_without_the_markers_is_refused():
    with pytest.raises(ValueError, match="must hold each lib-map marker once"):
        lib_map.with_table("# README\n", "| table |")
