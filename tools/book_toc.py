"""The pages of the book as _toc.yml lists them (used by the book tests and the translations)."""
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TOC = ROOT / "_toc.yml"
SOURCE_SUFFIXES = (".md", ".ipynb")


def _files(node):
    if isinstance(node, dict):
        if "file" in node:
            yield node["file"]
        for value in node.values():
            yield from _files(value)
    elif isinstance(node, list):
        for item in node:
            yield from _files(item)


def read_toc():
    """_toc.yml, as its data."""
    return yaml.safe_load(TOC.read_text(encoding="utf-8"))


def toc_docnames():
    """Every page of the book in reading order, root first, without suffix: 'book/intro'."""
    toc = read_toc()
    return [toc["root"], *_files(toc.get("parts", toc.get("chapters", [])))]


def source_of(docname):
    """The source file of a page, or None when there is none."""
    for suffix in SOURCE_SUFFIXES:
        path = ROOT / (docname + suffix)
        if path.exists():
            return path
    return None
