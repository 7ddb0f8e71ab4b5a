"""The README's map of lib, written from lib itself: each module's job and its public names.

Each module's docstring opens with its one job; the map is that first sentence and the module's
public definitions, so the map cannot drift from the code. `python tools/lib_map.py` prints the
table, `--write` puts it in README.md between its two markers, and `--check` (tests/test_lib_map.py)
fails when the README's copy differs, naming the command that brings it back in step.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BEGIN = "<!-- lib map: written by `python tools/lib_map.py --write` from lib's docstrings -->"
END = "<!-- end of lib map -->"


def module_name(path: Path) -> str:
    """lib/numpy_twin/model.py -> lib.numpy_twin.model; a package's __init__.py -> the package."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def first_sentence(docstring: str) -> str:
    """The docstring's first sentence, its lines joined (the one job its module does)."""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    match = re.search(r"(?<=[.!?])\s+(?=[A-Z`(])", paragraph)
    return paragraph[:match.start()] if match else paragraph


def public_names(tree: ast.Module) -> list[str]:
    """The module's top-level classes and functions whose names do not start with "_"."""
    return [node.name for node in tree.body
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and not node.name.startswith("_")]


def row(path: Path) -> str:
    """One line of the table: module, its job, its public names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstring = ast.get_docstring(tree)
    if not docstring:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        raise ValueError(f"{shown} has no docstring: its first sentence should say its one job")
    names = ", ".join(f"`{name}`" for name in public_names(tree))
    return f"| `{module_name(path)}` | {first_sentence(docstring).replace('|', '/')} | {names} |"


def table() -> str:
    """The whole map: a header, then a row per module of lib, packages before their modules."""
    paths = sorted((ROOT / "lib").rglob("*.py"), key=lambda p: module_name(p).split("."))
    lines = ["| module | its job | public names |", "| --- | --- | --- |"]
    return "\n".join(lines + [row(p) for p in paths if "__pycache__" not in p.parts])


def with_table(readme: str, text: str) -> str:
    """The README with the text between the markers replaced by `text`."""
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise ValueError(f"README.md must hold each lib-map marker once: {BEGIN!r} and {END!r}")
    head, rest = readme.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{text}\n{END}{tail}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/lib_map.py", description=__doc__.split("\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="write the map into README.md")
    action.add_argument("--check", action="store_true", help="exit 1 when README.md's map differs")
    args = parser.parse_args(argv)
    try:
        text = table()
        if not (args.write or args.check):
            print(text)
            return 0
        readme = README.read_text(encoding="utf-8")
        updated = with_table(readme, text)
    except ValueError as error:
        print(f"tools/lib_map.py: {error}", file=sys.stderr)
        return 2
    if args.write:
        README.write_text(updated, encoding="utf-8")
    elif updated != readme:
        print("README.md's map of lib differs from lib: run python tools/lib_map.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
