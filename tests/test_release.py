"""The student release (grader/release.py): the course without solutions, hidden tests or grader."""
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.release import check_release, release, secrets

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    out = tmp_path_factory.mktemp("release")
    return out, release(out)


def test_release_has_the_course_and_no_answers(released):
    out, written = released
    assert (out / "_toc.yml").is_file() and (out / "book" / "intro.md").is_file()
    assert (out / "lib" / "numpy_twin" / "model.py").is_file()
    assert not (out / "solutions").exists() and not (out / "grader").exists()
    assert not (out / "tests" / "test_grader.py").exists() and not (out / "tests" / "test_release.py").exists()
    code = [p for p in written if p.suffix in (".py", ".ipynb")]
    assert not [p for p in code if re.search(r"\b(from|import) grader\b", (out / p).read_text())]
    assert not [p for p in written if p.name in ("hidden_tests.py", "fixtures.py", "source.py")]
    exercises = sorted(p.name for p in (out / "exercises").glob("*.ipynb"))
    n_hidden = len(list((ROOT / "solutions").glob("*/hidden_tests.py")))        # one notebook per exercise
    assert exercises == sorted(p.name for p in (ROOT / "exercises").glob("*.ipynb")) and len(exercises) == n_hidden
    for name in exercises:
        nb = nbformat.read(out / "exercises" / name, as_version=4)
        graded = [c.source for c in nb.cells if any(t.startswith("graded:") for t in c.metadata.get("tags", []))]
        assert graded and all("NotImplementedError" in src for src in graded), name
    assert check_release(out) == []


def test_the_check_finds_a_leaked_solution_or_hidden_test(released, tmp_path):
    out, _ = released
    leak = tmp_path / "leak"
    leak.mkdir()
    (leak / "exercises").mkdir()
    nb = nbformat.read(ROOT / "solutions" / "ch6_top_k_top_p.ipynb", as_version=4)
    nbformat.write(nb, leak / "exercises" / "copied.ipynb")          # a solution under another name
    where, line = next(s for s in secrets() if s[0].endswith("/hidden_tests.py"))
    (leak / "notes.py").write_text(f"# pasted\n{line}\n")
    problems = check_release(leak)
    assert any("copied.ipynb" in p for p in problems) and any("notes.py" in p for p in problems), problems


def test_released_lib_imports_without_the_grader(released):
    out, _ = released
    run = subprocess.run([sys.executable, "-c", "import lib, lib.numpy_twin, lib.sampling; print(lib.__file__)"],
                         cwd=out, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout.strip()).resolve() == (out / "lib" / "__init__.py").resolve()


def test_release_refuses_a_folder_with_files_and_the_repository(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="--force"):
        release(tmp_path)
    with pytest.raises(ValueError, match="repository"):
        release(ROOT)
    run = subprocess.run([sys.executable, "-m", "grader.release", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 1 and "not empty" in run.stderr
