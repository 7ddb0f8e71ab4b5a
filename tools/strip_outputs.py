"""Remove outputs from notebooks, so that they are committed clean.

    python tools/strip_outputs.py                # clean chapters/, exercises/, solutions/
    python tools/strip_outputs.py a.ipynb dir/   # clean these notebooks / folders
    python tools/strip_outputs.py --check        # list dirty notebooks, exit 1 if any

Cleaning a code cell empties its outputs and its execution count and drops the timing
metadata Jupyter adds; the notebook loses any saved widget state. Tags and everything else
stay. A notebook that is already clean is not rewritten. tests/test_book.py runs the check.
"""
import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIRS = ("chapters", "exercises", "solutions")
CELL_METADATA_OUTPUTS = ("execution", "collapsed", "scrolled")  # set by running or viewing


def notebooks(paths):
    """The .ipynb files under paths (files or folders), sorted, without checkpoints."""
    found = set()
    for path in map(Path, paths):
        candidates = [path] if path.is_file() else path.rglob("*.ipynb")
        found.update(p for p in candidates if ".ipynb_checkpoints" not in p.parts)
    return sorted(found)


def find_outputs(nb):
    """What makes nb dirty, one line each; empty when the notebook is clean."""
    problems = []
    if "widgets" in nb.metadata:
        problems.append("notebook metadata holds widget state")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.get("outputs"):
            problems.append(f"cell {i}: {len(cell.outputs)} output(s)")
        if cell.get("execution_count") is not None:
            problems.append(f"cell {i}: execution count {cell.execution_count}")
        problems.extend(f"cell {i}: metadata {key!r}" for key in CELL_METADATA_OUTPUTS
                        if key in cell.metadata)
    return problems


def strip(nb):
    """Clean nb in place."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            for key in CELL_METADATA_OUTPUTS:
                cell.metadata.pop(key, None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="notebooks or folders "
                        f"(default: {', '.join(NOTEBOOK_DIRS)} where they exist)")
    parser.add_argument("--check", action="store_true", help="report only, exit 1 if dirty")
    args = parser.parse_args(argv)
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        parser.error(f"no such notebook or folder: {', '.join(missing)}")
    paths = args.paths or [ROOT / d for d in NOTEBOOK_DIRS if (ROOT / d).is_dir()]
    dirty = 0
    for path in notebooks(paths):
        nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
        problems = find_outputs(nb)
        if not problems:
            continue
        dirty += 1
        if args.check:
            print(f"{path}: " + "; ".join(problems))
        else:
            strip(nb)
            nbformat.write(nb, path)
            print(f"stripped {path}")
    return 1 if args.check and dirty else 0


if __name__ == "__main__":
    sys.exit(main())
