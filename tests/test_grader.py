"""The grader (grader/): solutions score full marks, untouched exercises 0, plausible wrong
answers lose points, tampering scores nothing for the exercise it targets, and the sandbox hides
what it must (solutions, hidden tests, the grader, lib's answers, the network).

Needs bubblewrap (`apt-get install -y bubblewrap`); without it these tests fail and say so.
Gradings are independent sandboxes, so they run two at a time. The tampering fixtures run with a
CPU cap of 3 s (`timeout=3`): enough for every fixture that stops early, and the endless loops
end there.
"""
import importlib.util
import json
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import numpy as np
import pytest

from grader import DEFAULT_TESTS, grade_notebook, load_hidden_tests
from grader.runner import DRIVERS, make_object
from grader.sandbox import LIB_DIR, _blocked_source, check_bwrap, copy_lib
from grader.spec import Config, Exercise, Model, Rng, Test

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = {"ex1": "01_gelu", "ex2": "02_deeper", "ex3": "03_kv_cache", "ex4": "04_top_k_top_p",
             "ex5": "05_loss_plotter"}
TAMPER_CPU_CAP = 3


def _load(path):
    spec = importlib.util.spec_from_file_location(path.stem + "_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


wrong = _load(ROOT / "solutions" / "fixtures" / "wrong.py")
tamper = _load(ROOT / "solutions" / "fixtures" / "tamper.py")


@pytest.fixture(scope="module", autouse=True)
def bwrap():
    check_bwrap()                                            # raises, saying what to install


@pytest.fixture(scope="module")
def hidden():
    return load_hidden_tests(DEFAULT_TESTS)


def graded_cell(path, exercise):
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if f"graded:{exercise}" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{path}: expected one graded cell"
    return cells[0].source


def notebook_with(exercise, code, path):
    """The student's notebook for `exercise` with its graded cell replaced by `code`."""
    nb = nbformat.read(ROOT / "exercises" / f"{NOTEBOOKS[exercise]}.ipynb", as_version=4)
    for cell in nb.cells:
        if f"graded:{exercise}" in cell.metadata.get("tags", []):
            cell.source = code
    nbformat.write(nb, path)
    return path


def grade_many(paths, hidden, **options):
    # One after another: on CPython 3.11.7, ast.parse/compile in two threads at once can raise
    # "SystemError: AST constructor recursion depth mismatch" (fixed in later 3.11 releases).
    return [grade_notebook(p, hidden=hidden, **options) for p in paths]


def only_exercise(result):
    assert result.error is None, result.error
    assert len(result.exercises) == 1, result
    return result.exercises[0]


def report(ex):
    return " | ".join([ex.status, ex.message] + [f"{t.name}: {t.message}" for t in ex.tests])


# ---- the two ends: solutions and untouched exercises ----------------------------------------------------
def test_every_solution_scores_full_marks(hidden):
    results = grade_many([ROOT / "solutions" / f"{n}.ipynb" for n in NOTEBOOKS.values()], hidden)
    for exercise, result in zip(NOTEBOOKS, results):
        ex = only_exercise(result)
        assert ex.exercise == exercise
        assert ex.status == "graded" and ex.score == ex.max_score > 0, report(ex)


def test_every_untouched_exercise_scores_zero(hidden):
    results = grade_many([ROOT / "exercises" / f"{n}.ipynb" for n in NOTEBOOKS.values()], hidden)
    for result in results:
        ex = only_exercise(result)
        assert ex.status == "graded" and ex.score == 0 and ex.max_score > 0, report(ex)
        assert all("NotImplementedError" in t.message for t in ex.tests), report(ex)


# ---- wrong answers ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wrong_results(hidden, tmp_path_factory):
    folder = tmp_path_factory.mktemp("wrong")
    paths = []
    for w in wrong.WRONG:
        solution = graded_cell(ROOT / "solutions" / f"{NOTEBOOKS[w.exercise]}.ipynb", w.exercise)
        paths.append(notebook_with(w.exercise, wrong.apply(solution, w), folder / f"{w.exercise}_{w.name}.ipynb"))
    return dict(zip([(w.exercise, w.name) for w in wrong.WRONG], grade_many(paths, hidden)))


def test_at_least_three_wrong_fixtures_per_exercise():
    for exercise in NOTEBOOKS:
        assert sum(w.exercise == exercise for w in wrong.WRONG) >= 3, exercise


@pytest.mark.parametrize("w", wrong.WRONG, ids=lambda w: f"{w.exercise}-{w.name}")
def test_wrong_answer_loses_points(w, wrong_results):
    ex = only_exercise(wrong_results[(w.exercise, w.name)])
    assert ex.status in ("graded", "timeout"), report(ex)    # it ran (a slow one hits the CPU limit)
    assert ex.score < ex.max_score, f"{w.name} ({w.mistake}) kept full marks: {report(ex)}"


# ---- tampering ----------------------------------------------------------------------------------------
def tamper_code(t, exercise, hidden):
    stub = graded_cell(ROOT / "exercises" / f"{NOTEBOOKS[exercise]}.ipynb", exercise)
    solution = graded_cell(ROOT / "solutions" / f"{NOTEBOOKS[exercise]}.ipynb", exercise)
    return t.template.format(stub=stub, solution=solution, repo=str(ROOT), exercise=exercise,
                             hidden=hidden[exercise].__file__,
                             notebook=str(ROOT / "solutions" / f"{NOTEBOOKS[exercise]}.ipynb"))


TAMPER_CASES = [(t, ex) for t in tamper.GENERIC for ex in NOTEBOOKS]
REFERENCE_CASES = list(tamper.IMPORT_REFERENCE)


@pytest.fixture(scope="module")
def tamper_results(hidden, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tamper")
    paths = [notebook_with(ex, tamper_code(t, ex, hidden), folder / f"{ex}_{t.name}.ipynb") for t, ex in TAMPER_CASES]
    paths += [notebook_with(ex, tamper.IMPORT_REFERENCE[ex], folder / f"{ex}_import_reference.ipynb")
              for ex in REFERENCE_CASES]
    results = grade_many(paths, hidden, timeout=TAMPER_CPU_CAP)
    keys = [(t.name, ex) for t, ex in TAMPER_CASES] + [("import_reference", ex) for ex in REFERENCE_CASES]
    return dict(zip(keys, results))


@pytest.mark.parametrize("t,exercise", TAMPER_CASES, ids=lambda v: getattr(v, "name", v))
def test_tampering_scores_nothing(t, exercise, tamper_results):
    ex = only_exercise(tamper_results[(t.name, exercise)])
    assert ex.score == 0, f"{t.what}: {report(ex)}"
    assert t.expect in report(ex), f"the report should name the cause ({t.expect}): {report(ex)}"


@pytest.mark.parametrize("exercise", REFERENCE_CASES)
def test_importing_lib_reference_scores_nothing(exercise, tamper_results):
    ex = only_exercise(tamper_results[("import_reference", exercise)])
    assert ex.score == 0, report(ex)
    assert "blocked lib reference" in report(ex), report(ex)


def score_outside_sandbox(code, module):
    """Run graded code in this process, unsandboxed, on the hidden tests (the main group):
    how many would pass. Shows that a tampering fixture is a real threat."""
    namespace = {"__name__": "__graded__"}
    exec(compile(code, "<tamper>", "exec"), namespace)
    passed = 0
    for test in module.tests():
        if test.group != "main" or test.function not in namespace:
            continue
        args = [_build(a) for a in test.args]
        try:
            value = DRIVERS[test.driver](namespace[test.function], args, {k: _build(v) for k, v in test.kwargs.items()})
        except Exception as exc:                              # noqa: BLE001
            passed += test.expect_error == type(exc).__name__
            continue
        passed += test.check is not None and test.check(value)[0]
    return passed


def _build(value):
    if isinstance(value, Config):
        return make_object("__config__", value.fields)
    if isinstance(value, Model):
        return make_object("__model__", {"config": value.config, "seed": value.seed, "dtype": value.dtype})
    if isinstance(value, Rng):
        return make_object("__rng__", value.seed)
    if isinstance(value, (list, tuple)) and not isinstance(value, np.ndarray):
        return type(value)(_build(v) for v in value)
    return value


@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # references fed bad arguments divide by 0
@pytest.mark.parametrize("name", [t.name for t in tamper.GENERIC if t.works_outside] + ["import_reference"])
def test_tampering_fixtures_would_work_without_the_sandbox(name, hidden):
    for exercise in NOTEBOOKS:
        if name == "import_reference":
            code = tamper.IMPORT_REFERENCE[exercise]
        else:
            code = tamper_code(next(t for t in tamper.GENERIC if t.name == name), exercise, hidden)
        assert score_outside_sandbox(code, hidden[exercise]) > 0, f"{name} on {exercise} is a dud outside the sandbox"


# ---- the sandbox itself ---------------------------------------------------------------------------------
PROBE = '''
import os, socket


def probe(paths):
    """What this code can reach from inside the sandbox."""
    found = {"uid": os.getuid(), "cwd": os.getcwd()}
    for path in paths:
        try:
            with open(path, "rb") as f:
                found[path] = "read %d bytes" % len(f.read(100))
        except OSError as e:
            found[path] = type(e).__name__
    import lib
    found["lib"] = lib.__file__
    try:
        from lib.numpy_twin.model import gelu
        gelu(1.0)
        found["gelu"] = "ran"
    except Exception as e:
        found["gelu"] = str(e)[:60]
    try:
        import torch
        found["torch"] = "imported"
    except ImportError as e:
        found["torch"] = "ImportError"
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2)
        found["network"] = "connected"
    except OSError as e:
        found["network"] = type(e).__name__
    return found
'''


def test_sandbox_hides_solutions_hidden_tests_and_lib(tmp_path):
    tests_dir = tmp_path / "hidden"
    tests_dir.mkdir()
    (tests_dir / "probe.py").write_text(
        "from grader.spec import Exercise, Test\n"
        "EXERCISE = Exercise(id='probe', title='probe', functions=('probe',),\n"
        "                    blocked=('lib.numpy_twin.model:gelu',))\n"
        "SEEN = []\n"
        "def tests():\n"
        "    return [Test('probe', 'probe', (PATHS,), lambda v: (SEEN.append(v) or True, ''))]\n")
    secret = [str(ROOT / "solutions" / "hidden_tests" / "ex1_gelu.py"), str(ROOT / "solutions" / "01_gelu.ipynb"),
              str(ROOT / "lib" / "numpy_twin" / "model.py"), str(ROOT / "grader" / "spec.py"),
              str(tests_dir / "probe.py"), "/root/.bashrc",
              str(Path.home() / ".cache" / "gpt2-course"), "/etc/passwd"]
    hidden = load_hidden_tests(tests_dir)
    hidden["probe"].PATHS = secret
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(PROBE)
    cell.metadata.tags = ["graded:probe"]
    nb.cells = [cell]
    nbformat.write(nb, tmp_path / "probe.ipynb")
    ex = only_exercise(grade_notebook(tmp_path / "probe.ipynb", tests_dir=tests_dir, hidden=hidden))
    assert ex.status == "graded", report(ex)
    found = hidden["probe"].SEEN[0]
    for path in secret:
        assert found[path] in ("FileNotFoundError", "PermissionError"), (path, found[path])
    assert found["uid"] == 65534 and found["lib"] == "/grade/lib/__init__.py", found
    assert "REFERENCE UNAVAILABLE" in found["gelu"], found
    assert found["torch"] == "ImportError" and found["network"] != "connected", found


def test_memory_limit_and_crash_leave_other_exercises_graded(tmp_path, hidden):
    nb = nbformat.read(ROOT / "solutions" / "02_deeper.ipynb", as_version=4)
    bomb = nbformat.v4.new_code_cell("import numpy as np\nhog = np.ones(10**9)  # 8 GB, over the 1 GB limit\n")
    bomb.metadata.tags = ["graded:ex1"]
    nb.cells.append(bomb)
    nbformat.write(nb, tmp_path / "two.ipynb")
    result = grade_notebook(tmp_path / "two.ipynb", hidden=hidden, memory_mb=1024)
    by_id = {ex.exercise: ex for ex in result.exercises}
    assert by_id["ex1"].score == 0 and by_id["ex1"].status == "load-error", report(by_id["ex1"])
    assert "MemoryError" in by_id["ex1"].message
    assert by_id["ex2"].score == by_id["ex2"].max_score, report(by_id["ex2"])


def test_notebook_without_graded_cells_scores_zero(tmp_path, hidden):
    nb = nbformat.read(ROOT / "solutions" / "01_gelu.ipynb", as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("tags", None)
    nbformat.write(nb, tmp_path / "untagged.ipynb")
    ex = only_exercise(grade_notebook(tmp_path / "untagged.ipynb", hidden=hidden))
    assert ex.status == "no-graded-cells" and ex.score == 0 and ex.max_score > 0


def test_the_sandbox_copy_is_all_of_lib(tmp_path):
    copy_lib(tmp_path, ())
    copied = sorted(p.relative_to(tmp_path / "lib") for p in (tmp_path / "lib").rglob("*") if p.is_file())
    assert copied == sorted(p.relative_to(LIB_DIR) for p in LIB_DIR.rglob("*")
                            if p.is_file() and "__pycache__" not in p.parts) and copied


def test_blocking_a_name_lib_does_not_have_is_an_error():
    with pytest.raises(ValueError, match="no_such_function"):
        _blocked_source("def gelu(x):\n    return x\n", "lib.x", ["no_such_function"])
    stubbed = _blocked_source("import math\n\ndef gelu(x):\n    return math.tanh(x)\n", "lib.x", ["gelu"])
    assert "tanh" not in stubbed and "REFERENCE UNAVAILABLE" in stubbed


def test_command_line_json_and_exit_codes(tmp_path):
    run = subprocess.run([sys.executable, "-m", "grader", "--json", "solutions/02_deeper.ipynb",
                          "exercises/02_deeper.ipynb"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    scores = [nb["exercises"][0]["score"] for nb in out["notebooks"]]
    assert scores == [out["max_score"] // 2, 0] and out["score"] == out["max_score"] // 2
    text = subprocess.run([sys.executable, "-m", "grader", "exercises/02_deeper.ipynb"], cwd=ROOT,
                          capture_output=True, text=True)
    assert text.returncode == 0 and "FAIL" in text.stdout and "total: 0/" in text.stdout
    bad = subprocess.run([sys.executable, "-m", "grader", "--tests", str(tmp_path / "none"), "x.ipynb"],
                         cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "does not exist" in bad.stderr


@pytest.fixture(params=["under /tmp", "under the home folder"])
def other_python(request, tmp_path):
    """A brand-new virtual environment in another place, seeing this one's packages through a
    .pth file (as an environment stacked on another would): the sandbox must find its interpreter
    and packages wherever they live, /tmp (which the sandbox replaces by an empty one) included."""
    parent = tmp_path if request.param == "under /tmp" else Path(tempfile.mkdtemp(dir=Path.home(), prefix=".grade-venv-"))
    venv = parent / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    packages = subprocess.run([str(venv / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
                              check=True, capture_output=True, text=True).stdout.strip()
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    Path(packages, "outer_environment.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in ours))
    yield venv / "bin" / "python"
    if parent != tmp_path:
        shutil.rmtree(parent)


def test_grading_works_wherever_python_lives(other_python):
    assert str(other_python).startswith("/tmp/") != ("/.grade-venv-" in str(other_python))
    run = subprocess.run([str(other_python), "-m", "grader", "--json", "solutions/01_gelu.ipynb"], cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["max_score"] > 0 and out["score"] == out["max_score"], json.dumps(out, indent=1)[-3000:]


# ---- the hidden tests' references agree with lib, where lib has the same thing ----------------------------
def test_references_agree_with_lib(hidden):
    from lib.config import GPTConfig, param_counts
    from lib.numpy_twin import gelu, gelu_exact
    from lib.sampling import filtered_probs

    x = np.linspace(-8, 8, 1001)
    ref = hidden["ex1"].REFERENCE
    assert np.allclose(ref["gelu_tanh"](x), gelu(x), rtol=1e-12, atol=1e-15)
    assert np.allclose(ref["gelu_exact"](x), gelu_exact(x), rtol=1e-12, atol=1e-15)
    for config in hidden["ex2"].CONFIGS.values():
        assert hidden["ex2"].count_params(config) == param_counts(config)["total"]
    assert hidden["ex2"].count_params(GPTConfig.gpt2()) == 124_439_808
    z = np.random.default_rng(0).normal(0, 2, (5, 40))
    for settings in (dict(temperature=0.7, top_k=5), dict(temperature=1.2, top_p=0.8), dict(top_k=3, top_p=0.5)):
        assert np.allclose(hidden["ex4"].probabilities(z, **settings), filtered_probs(z, **settings), atol=1e-12)
