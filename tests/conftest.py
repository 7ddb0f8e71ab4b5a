"""Shared fixtures. `built_book`: the book, built once per test session for
tests/test_book.py and tests/test_browser.py."""
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def corpus_read_before_tests_move_the_cache():
    """Many tests point GPT2_COURSE_CACHE at an empty folder; the plays (fetched into the real
    cache by `python -m lib.assets fetch`) are read once before, as lib.shakespeare keeps them."""
    from lib.shakespeare import shakespeare_plays
    shakespeare_plays()


@pytest.fixture(scope="session")
def built_book():
    """Run `python tools/build_book.py --all-languages` once: the English edition (strict: -W -n,
    executes every notebook), then each translation from its executed notebooks (strict too: it
    stops on any untranslated or outdated message, naming it), linked both ways.

    Returns returncode, log (stdout and stderr together) and html (the output folder).
    It takes seconds for the book pages alone and minutes once the chapters execute.
    """
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "build_book.py"), "--all-languages"],
                          cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return SimpleNamespace(returncode=proc.returncode, log=proc.stdout,
                           html=ROOT / "_build" / "html")


@pytest.fixture(scope="session")
def leaks():
    """tools/answer_leaks.py, which reads the solutions and hidden tests: skipped in the student
    release (`python -m grader.release`), which holds neither."""
    if not (ROOT / "solutions").is_dir():
        pytest.skip("the student release has no solutions to look for")
    sys.path.insert(0, str(ROOT / "tools"))
    import answer_leaks
    return answer_leaks
