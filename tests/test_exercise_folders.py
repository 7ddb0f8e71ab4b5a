"""Each exercise lives in one folder, solutions/<name>/, holding the files that the checklist of
solutions/README.md ("Adding or changing an exercise") names; the folders, the exercises of
_toc.yml, the hidden tests' names and the built notebooks name the same exercises; an exercise's
number, wherever its files or the READMEs write it, is the one _toc.yml gives it."""
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"

sys.path.insert(0, str(ROOT / "tools"))
from book_toc import toc_docnames  # noqa: E402

from grader import DEFAULT_TESTS, book_number, load_hidden_tests  # noqa: E402

FOLDERS = sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and not p.name.startswith((".", "__")))


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


# An exercise's own number where its files give it: their first line, its notebook's title, its stubs.
OWN_NUMBER = re.compile(r'(?:^"""(?:Hidden tests of e|E)xercise |NotImplementedError\("exercise |^\s*# Exercise )'
                        r"(\d+b?\.\d+)", re.M)
# A number beside an exercise's name in the READMEs: "4.1 GELU (`ch4_gelu`)", "exercise 6.3 (`ch6_your_gpt2`)".
NAMED_NUMBER = re.compile(r"\b(\d+b?\.\d+) [^`]{0,80}?\(`(ch\w+)`\)")


@pytest.mark.parametrize("name", FOLDERS)
def test_the_numbers_an_exercise_gives_itself_are_the_books(name):
    found = [(f, n) for f in ("source.py", "hidden_tests.py")
             for n in OWN_NUMBER.findall((SOLUTIONS / name / f).read_text())]
    assert {f for f, _ in found} == {"source.py", "hidden_tests.py"}, f"solutions/{name}/ names no number of its own"
    wrong = [(f, n) for f, n in found if n != book_number(name)]
    assert not wrong, f"{name} is exercise {book_number(name)} in _toc.yml, its files say {wrong}"


def test_the_readmes_number_each_exercise_as_the_book_does():
    text = " ".join((ROOT / f).read_text() for f in ("README.md", "solutions/README.md")).replace("\n", " ")
    found = NAMED_NUMBER.findall(text)
    assert len(found) >= 5, found
    wrong = [(n, name) for n, name in found if n != book_number(name)]
    assert not wrong, f"numbers that are not _toc.yml's: {wrong}"
