"""Reading handed-in notebooks: the JSON, the graded code in it, the exercise its file name names, the book's number.

A notebook is hostile input: `read_notebook` opens a regular file only (no link, pipe or
folder), at most MAX_NOTEBOOK_BYTES and MAX_NOTEBOOK_STRUCTURE brackets and commas (counted
before it is parsed: 32 MiB of empty lists would cost some 900 MB parsed), and refuses what is
not an nbformat 4 notebook with one clear NotebookError; `graded_code` refuses graded cells of
more than MAX_CODE_BYTES. Which exercise a file is graded on comes from its name, never from its
content (`exercise_for`).
"""
from __future__ import annotations

import functools
import json
import os
import re
import stat
from collections import Counter
from pathlib import Path

from .results import json_structure

ROOT = Path(__file__).resolve().parents[1]
TAG_PREFIX = "graded:"
MAX_NOTEBOOK_BYTES = 32 << 20
MAX_NOTEBOOKS = 64                  # one student's, in one run: the course has 19 exercises
MAX_NOTEBOOK_STRUCTURE = 400_000    # [ { and , in one notebook (a solved one has under 2,000): ~25 MB parsed
MAX_CODE_BYTES = 1 << 20            # of one notebook's graded cells, UTF-8 (a solution's: under 10 kB)


class NotebookError(ValueError):
    """The notebook is not one the grader can read; the message says why."""


def read_notebook(path) -> dict:
    """The notebook's JSON: a regular file (not a link, a pipe or a folder), at most
    MAX_NOTEBOOK_BYTES, an nbformat 4 notebook."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise NotebookError(f"cannot open it ({exc.strerror}; a symbolic link is refused)") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise NotebookError("it is not a regular file")
        if info.st_size > MAX_NOTEBOOK_BYTES:
            raise NotebookError(f"it is larger than {MAX_NOTEBOOK_BYTES >> 20} MiB")
        data = f.read(MAX_NOTEBOOK_BYTES + 1)
    if json_structure(data) > MAX_NOTEBOOK_STRUCTURE:
        raise NotebookError(f"it holds over {MAX_NOTEBOOK_STRUCTURE:,} brackets and commas (a notebook's outputs "
                            f"can be cleared: Edit > Clear Outputs of All Cells)")
    try:
        nb = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise NotebookError(f"it is not JSON ({type(exc).__name__})") from None
    if not isinstance(nb, dict) or nb.get("nbformat") != 4 or not isinstance(nb.get("cells"), list):
        raise NotebookError("it is not a Jupyter notebook of format 4 with a list of cells")
    return nb


def graded_code(nb: dict, exercise: str) -> str:
    """The source of the code cells tagged graded:<exercise>, joined in order. Cells and tags
    of another shape than Jupyter's (a tag that is a number, a cell without a type) are skipped."""
    parts = []
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        metadata = cell.get("metadata")
        tags = metadata.get("tags") if isinstance(metadata, dict) else None
        if not isinstance(tags, list) or TAG_PREFIX + exercise not in tags:
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) and all(isinstance(s, str) for s in source) else source
        if not isinstance(source, str):
            raise NotebookError(f"cell {i}'s source is not text")
        try:
            source.encode("utf-8")
        except UnicodeEncodeError:
            raise NotebookError(f"cell {i} holds characters that are not text (lone surrogates)") from None
        parts.append(f"# --- cell {i} ---\n{source}\n")
    code = "\n".join(parts)
    size = len(code.encode("utf-8"))
    if size > MAX_CODE_BYTES:
        raise NotebookError(f"its graded cells hold {size:,} bytes of code, over the {MAX_CODE_BYTES:,} graded")
    return code


def exercise_for(path, hidden: dict) -> str | None:
    """The exercise whose name the file's name contains (None: no exercise, or several)."""
    name = Path(path).name
    found = [ex for ex in hidden if ex in name]
    return found[0] if len(found) == 1 else None


@functools.cache
def _book_numbers() -> dict:
    """{exercise: "K.n"}: the n-th exercise after chapter K in _toc.yml's reading order (its
    `- file: exercises/chK_...` lines; commented-out ones are not in the book)."""
    toc = ROOT / "_toc.yml"
    names = re.findall(r"^\s*- file: exercises/(ch([0-9]+[a-z]?)_\w+)\s*$", toc.read_text(), re.M) if toc.is_file() else []
    numbers, seen = {}, Counter()
    for name, chapter in names:
        seen[chapter] += 1
        numbers[name] = f"{chapter}.{seen[chapter]}"
    return numbers


def book_number(exercise: str) -> str:
    """The exercise's number in the book ("3.1"), from _toc.yml; "" when the book lacks it."""
    return _book_numbers().get(exercise, "")
