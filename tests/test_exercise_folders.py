"""Each exercise lives in one folder, solutions/<name>/, holding the files that the checklist of
solutions/README.md ("Adding or changing an exercise") names; the folders, the exercises of
_toc.yml, the hidden tests' names and the built notebooks name the same exercises."""
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"

sys.path.insert(0, str(ROOT / "tools"))
from book_toc import toc_docnames  # noqa: E402

from grader import DEFAULT_TESTS, load_hidden_tests  # noqa: E402

FOLDERS = sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and p.name != "__pycache__")


def checklist_files() -> list[str]:
    """The files the README's checklist names in an exercise's folder (`solutions/chK_name/X`)."""
    text = (SOLUTIONS / "README.md").read_text()
    checklist = text[text.index("## Adding or changing an exercise"):]
    return sorted(set(re.findall(r"^\d+\. `solutions/chK_name/([\w.]+)`", checklist, re.M)))


def test_the_checklist_names_the_folders_files():
    assert checklist_files() == ["fixtures.py", "hidden_tests.py", "source.py"]


@pytest.mark.parametrize("name", FOLDERS)
def test_every_exercise_folder_holds_the_checklists_files(name):
    missing = [f for f in checklist_files() if not (SOLUTIONS / name / f).is_file()]
    assert not missing, f"solutions/{name}/ lacks {missing} (solutions/README.md's checklist)"


def test_folders_toc_hidden_tests_and_notebooks_name_the_same_exercises():
    toc = [d.removeprefix("exercises/") for d in toc_docnames() if d.startswith("exercises/")]
    assert sorted(toc) == FOLDERS, "_toc.yml's exercises and the folders of solutions/ differ"
    assert sorted(load_hidden_tests(DEFAULT_TESTS)) == FOLDERS, "a hidden test's EXERCISE is not its folder's name"
    for built in ("exercises", "solutions"):
        assert sorted(p.stem for p in (ROOT / built).glob("*.ipynb")) == FOLDERS, \
            f"{built}/*.ipynb and the folders of solutions/ differ (run python solutions/build_notebooks.py)"
