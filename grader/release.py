"""Write the student version of the course into a folder: everything but the answers.

    python -m grader.release OUTDIR [--force]

What goes in: the files git tracks (as they are in the working tree), that is the book, the
chapters, the exercise notebooks (stubs), lib, tools and the tests. What stays out
(EXCLUDED_DIRS, EXCLUDED_FILES): `solutions/` (solved notebooks, hidden tests, grading fixtures,
the notebook sources), `grader/` (the grader and this module) and the tests that need them
(`tests/test_grader.py`, `tests/test_classroom.py`, `tests/test_release.py`,
`tests/test_sandbox_limits.py`, `tests/test_visible_checks.py`, which runs the wrong answers through
the visible checks, `tests/test_capstone_pieces.py`, `tests/test_exercise_folders.py`,
`tests/test_blocked_names.py`) and the check for answers shown before their exercise
(`tools/answer_leaks.py`, `tests/test_answer_leaks.py`): without hidden tests there is nothing for
students to grade with.

The release is the public repository's content (book/running.md, "Publishing the book"): its
`_config.yml` names the public repository (`release:` in this repository's `_config.yml`) under
`repository:`, without the `release:` block, and every notebook's setup cell clones it, so the
launch buttons, Colab and GitHub Pages never point students at the instructors' repository.

After writing, the release is checked: no path under solutions/ or grader/, and no file
containing a solution's graded code or a hidden test's source line that is specific enough to
identify it. OUTDIR must be empty or absent (--force empties it first).

    python -m grader.release --check DIR     # the same search in any folder (a built book)
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXCLUDED_DIRS = ("solutions", "grader", ".git")
EXCLUDED_FILES = ("tests/test_grader.py", "tests/test_classroom.py", "tests/test_release.py",
                  "tests/test_publish.py", "tests/test_sandbox_limits.py", "tests/test_visible_checks.py",
                  "tests/test_capstone_pieces.py", "tests/test_exercise_folders.py", "tests/test_blocked_names.py",
                  "tests/test_answer_leaks.py", "tools/answer_leaks.py")


def source_files(root: Path = ROOT) -> list[Path]:
    """The files git tracks (relative paths). Outside a git checkout: every file, minus caches."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached"],
                                cwd=root, capture_output=True, check=True).stdout.decode().split("\0")
        files = [Path(p) for p in listed if p]
    except (OSError, subprocess.CalledProcessError):
        files = [p.relative_to(root) for p in root.rglob("*") if p.is_file()
                 and not {"__pycache__", ".git", "_build"} & set(p.relative_to(root).parts)]
    return sorted({f for f in files if (root / f).is_file()})


def is_released(path: Path) -> bool:
    text = path.as_posix()
    return not (any(text == d or text.startswith(d + "/") for d in EXCLUDED_DIRS) or text in EXCLUDED_FILES)


def secrets(root: Path = ROOT) -> list[tuple[str, str]]:
    """(where, text) pairs that must not appear in a release: each solution's graded cells, and
    the distinctive lines of every hidden test (long enough not to occur by chance)."""
    import nbformat

    found = []
    for nb_path in sorted((root / "solutions").glob("*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        for cell in nb.cells:
            if any(t.startswith("graded:") for t in cell.metadata.get("tags", [])):
                found.append((str(nb_path.relative_to(root)), cell.source.strip()))
    for py in sorted((root / "solutions").glob("*/hidden_tests.py")):
        for line in py.read_text().splitlines():
            line = line.strip()
            if len(line) >= 60 and not line.startswith(("#", "from ", "import ")):
                found.append((str(py.relative_to(root)), line))
    return found


def _cell_sources(text: str) -> list[str]:
    """A notebook's cell sources from its JSON text (none if it is not a notebook)."""
    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError):
        return []
    return ["".join(c["source"]) if isinstance(c.get("source"), list) else str(c.get("source", ""))
            for c in cells if isinstance(c, dict)]


def check_release(out: Path, root: Path = ROOT) -> list[str]:
    """Problems found in a written release (empty when it is clean)."""
    problems = []
    files = [p for p in out.rglob("*") if p.is_file()]
    for p in files:
        rel = p.relative_to(out)
        if not is_released(rel):
            problems.append(f"{rel} should not be released")
    hidden = secrets(root)
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if p.suffix == ".ipynb":                             # its cells as written, not as JSON strings
            text += "\n".join(_cell_sources(text))
        for where, secret in hidden:
            if secret and secret in text:
                problems.append(f"{p.relative_to(out)} contains text of {where}")
                break
    return problems


def release(out, force: bool = False, root: Path = ROOT) -> list[Path]:
    """Copy the student version into `out`; returns the relative paths written."""
    out = Path(out).resolve()
    if out == root or out in root.parents:
        raise ValueError(f"OUTDIR {out} would contain the repository itself; choose another folder")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise FileExistsError(f"OUTDIR {out} is not empty; pass --force to replace its contents")
        shutil.rmtree(out)
    written = []
    for rel in source_files(root):
        inside_out = (root / rel).resolve()
        if out in inside_out.parents or not is_released(rel):
            continue
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
        written.append(rel)
    point_at_public_repository(out, root)
    problems = check_release(out, root)
    if problems:
        raise RuntimeError("the release leaks answers:\n" + "\n".join(problems))
    return written


def public_config(text: str, url: str, branch: str) -> str:
    """_config.yml's text with `repository:` naming url and branch and without the `release:` block
    (a line edit, so every comment stays)."""
    lines, block, kept = text.splitlines(keepends=True), None, []
    for line in lines:
        if line[:1] not in (" ", "\n", ""):
            block = None if line.startswith("#") else line.split(":")[0]   # a top-level line ends a block
        if block == "release":
            continue
        if block == "repository" and line.startswith("  url:"):
            line = f'  url: "{url}"\n'
        elif block == "repository" and line.startswith("  branch:"):
            line = f"  branch: {branch}\n"
        kept.append(line)
    return "".join(kept)


def point_at_public_repository(out: Path, root: Path = ROOT) -> tuple[str, str]:
    """Make the release name the public repository: its _config.yml, then every notebook's setup
    cell, written from that config as tools/setup_cell.py writes them. Returns (url, branch)."""
    import nbformat

    if str(root / "tools") not in sys.path:
        sys.path.insert(0, str(root / "tools"))
    from setup_cell import MARKER, repository, setup_source  # noqa: E402  (tools/ is a folder of scripts)

    private_url, _ = repository(root / "_config.yml")
    url, branch = repository(root / "_config.yml", "release")
    config = out / "_config.yml"
    config.write_text(public_config(config.read_text(), url, branch))
    source = setup_source(config)
    for path in sorted(out.glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        first = next((cell for cell in nb.cells if cell.cell_type == "code"), None)
        if first is not None and MARKER in first.source and first.source != source:
            first.source = source
            nbformat.write(nb, path, version=4)
    for path in out.rglob("*"):                              # the rest: `git clone` lines in the docs
        if path.suffix in (".md", ".py", ".ipynb", ".yml", ".txt", ".toml") and path.is_file():
            text = path.read_text(encoding="utf-8")
            if private_url in text:
                path.write_text(text.replace(private_url, url), encoding="utf-8")
    return url, branch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.release", description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, help="folder to write the student version into")
    parser.add_argument("--force", action="store_true", help="empty OUTDIR first if it has files")
    parser.add_argument("--check", action="store_true", help="write nothing: search OUTDIR (a release, a built "
                                                             "book) for answers")
    args = parser.parse_args(argv)
    if args.check:
        problems = check_release(args.outdir) if args.outdir.is_dir() else [f"{args.outdir} is not a folder"]
        for problem in problems:
            print(f"grader.release: {problem}", file=sys.stderr)
        if not problems:
            print(f"{args.outdir}: no solution, hidden test or grader")
        return 1 if problems else 0
    try:
        written = release(args.outdir, force=args.force)
    except (ValueError, FileExistsError, RuntimeError) as e:
        print(f"grader.release: {e}", file=sys.stderr)
        return 1
    exercises = sum(p.parts[0] == "exercises" for p in written)
    print(f"wrote {len(written)} files ({exercises} exercise notebooks) to {args.outdir}; "
          f"no solutions, hidden tests or grader")
    return 0


if __name__ == "__main__":
    sys.exit(main())
