"""The setup cell, the first code cell of every notebook, written from `_config.yml`.

    python tools/setup_cell.py            # write it into the chapters, then rebuild the exercises
    python tools/setup_cell.py --check    # list the notebooks whose setup cell is not current, exit 1
    python tools/setup_cell.py --github-output   # url=, branch= (and release_url=, release_branch=)

The repository's address and branch are written once, under `repository:` in `_config.yml`.
The book's launch buttons read them there (Jupyter Book), and so does this tool. In the
instructors' repository `release:` names the public one: `python -m grader.release` writes it
into the student version's `_config.yml` and rewrites the setup cells there with
`setup_source` (book/running.md, "Publishing the book"). The exercise
and solution notebooks get the same cell through solutions/build_notebooks.py, which imports
`setup_source` from here. tests/test_colab.py runs the check.

In Colab the cell clones the repository (once), installs the course with its `course` extra,
and fetches GPT-2's vocabulary and Shakespeare's plays, so no later cell is the first to need
the network; any step that fails stops the cell with that step's own error output. Elsewhere
it does nothing. The cell is tagged `remove-cell`: the notebook keeps it (Colab needs it), the
book's HTML leaves it out.
"""
import argparse
import subprocess
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "_config.yml"
CHAPTERS = ROOT / "chapters"
FOLDERS = ("chapters", "exercises", "solutions")
MARKER = 'if "google.colab" in sys.modules:'     # a setup cell's second line
TAGS = ["remove-cell"]                           # kept out of the book's HTML: plumbing, not the chapter
COURSE = "/content/course"                       # where Colab keeps the clone

TEMPLATE = '''import sys
if "google.colab" in sys.modules:  # in Colab: fetch and install the course and its data (elsewhere: nothing to do)
    import os, subprocess
    REPOSITORY, BRANCH, COURSE = "{url}", "{branch}", "{course}"

    def setup_step(*command, cwd=None):  # a failing step stops the cell and shows its own error
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"setup failed: {{' '.join(command)}}\\n{{done.stdout[-2000:]}}{{done.stderr[-4000:]}}")

    if not os.path.isdir(f"{{COURSE}}/.git"):
        setup_step("git", "clone", "--depth", "1", "--branch", BRANCH, REPOSITORY, COURSE)
    setup_step(sys.executable, "-m", "pip", "install", "-q", "-e", f"{{COURSE}}[course]")
    setup_step(sys.executable, "-m", "lib.assets", "fetch", cwd=COURSE)  # GPT-2's vocabulary, the plays
    sys.path.insert(0, COURSE)
    print(f"course ready in {{COURSE}}")'''


def repository(config_path=CONFIG, key="repository"):
    """(url, branch) from `repository:` in _config.yml (`release:`: the public repository)."""
    repo = yaml.safe_load(Path(config_path).read_text()).get(key) or {}
    url, branch = repo.get("url"), repo.get("branch")
    if not (isinstance(url, str) and url.startswith(("https://", "file://", "/")) and isinstance(branch, str) and branch):
        raise ValueError(f"{config_path}: `{key}:` needs `url` (https://...) and `branch`; got url={url!r}, "
                         f"branch={branch!r}")
    return url, branch


def github_output(config_path=CONFIG):
    """The lines the publishing workflow reads (key=value): this repository's URL and branch and,
    in the instructors' repository, the public one's (`release:`)."""
    url, branch = repository(config_path)
    lines = [f"url={url}", f"branch={branch}"]
    if "release" in (yaml.safe_load(Path(config_path).read_text()) or {}):
        public_url, public_branch = repository(config_path, "release")
        lines += [f"release_url={public_url}", f"release_branch={public_branch}"]
    return "\n".join(lines)


def setup_source(config_path=CONFIG):
    """The setup cell's source for the repository that _config.yml names."""
    url, branch = repository(config_path)
    return TEMPLATE.format(url=url, branch=branch, course=COURSE)


def setup_cell(nb, path):
    """The notebook's first code cell, which must be a setup cell."""
    first = next((cell for cell in nb.cells if cell.cell_type == "code"), None)
    if first is None or MARKER not in first.source:
        raise ValueError(f"{path}: the first code cell is not a setup cell (it has no line `{MARKER}`)")
    return first


def stale_notebooks(config_path=CONFIG):
    """The notebooks (chapters, exercises, solutions) whose setup cell differs from setup_source()."""
    wanted = setup_source(config_path)
    return [path for folder in FOLDERS for path in sorted((ROOT / folder).glob("*.ipynb"))
            if not is_current(setup_cell(nbformat.read(path, as_version=4), path), wanted)]


def is_current(cell, wanted):
    """Whether a setup cell holds `wanted` and carries TAGS."""
    return cell.source == wanted and set(TAGS) <= set(cell.metadata.get("tags", []))


def write_chapters(config_path=CONFIG):
    """Rewrite each chapter's setup cell where it differs; the chapters rewritten."""
    wanted, written = setup_source(config_path), []
    for path in sorted(CHAPTERS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cell = setup_cell(nb, path)
        if not is_current(cell, wanted):
            cell.source = wanted
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), *TAGS]
            nbformat.write(nb, path, version=4)
            written.append(path)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only list the notebooks that are not current")
    parser.add_argument("--github-output", action="store_true", help="print the repositories' URLs and branches "
                                                                     "as key=value lines, for $GITHUB_OUTPUT")
    args = parser.parse_args(argv)
    if args.github_output:
        print(github_output())
        return
    if args.check:
        stale = stale_notebooks()
        for path in stale:
            print(f"setup cell not current: {path.relative_to(ROOT)}")
        if stale:
            sys.exit("run `python tools/setup_cell.py` to write them from _config.yml")
        print("every notebook's setup cell is current")
        return
    for path in write_chapters():
        print(f"wrote {path.relative_to(ROOT)}")
    subprocess.run([sys.executable, str(ROOT / "solutions" / "build_notebooks.py")], check=True)


if __name__ == "__main__":
    main()
