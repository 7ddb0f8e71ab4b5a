"""The grader (grader/): solutions score full marks, untouched exercises 0, plausible wrong
answers lose points, trivial answers and tampering score (almost) nothing, the sandbox hides
what it must (solutions, hidden tests, the grader, lib's answers, the network, the host), and
nothing a notebook or the sandbox hands back can crash, hang or fool the grader.

Needs bubblewrap (`apt-get install -y bubblewrap`); without it these tests fail and say so.
Gradings run one after another. The tampering fixtures run with a CPU cap of 3 s (`timeout=3`):
enough for every fixture that stops early, and the endless loops end there.
"""
import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import nbformat
import numpy as np
import pytest

from grader import (DEFAULT_TESTS, MAX_TEXT, Grading, gate, grade_exercise, grade_notebook, grade_submission,
                    load_hidden_tests, max_score, read_answers)
from grader import drivers, sandbox, seccomp
from grader.__main__ import main
from grader.drivers import DRIVERS
from grader.results import ExerciseResult, NotebookResult, Submission, report as text_report
from grader.runner import MAX_DICT_KEYS, MAX_LINE_BYTES, encode, make_object
from grader.sandbox import LIB_DIR, SandboxUnavailable, _blocked_source, check_bwrap, copy_lib
from grader.spec import (Config, Exercise, Model, Rng, Test, Verdict, close, equal, filtered, frequencies,
                         integer)
from lib import numpy_twin as nt

ROOT = Path(__file__).resolve().parent.parent
# Every exercise the grader knows, from its hidden tests: a new exercise is covered by every test
# below (solution, stub, wrong answers, tampering, lib's answer blocked) without being listed here.
EXERCISES = list(load_hidden_tests(DEFAULT_TESTS))
TAMPER_CPU_CAP = 3


def _load(path):
    spec = importlib.util.spec_from_file_location(path.stem + "_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fixtures = _load(ROOT / "solutions" / "fixtures.py")


@pytest.fixture(scope="module", autouse=True)
def bwrap():
    check_bwrap()                                            # raises, saying what to install


@pytest.fixture(scope="module")
def grading():
    return Grading()


@pytest.fixture(scope="module")
def hidden(grading):
    return grading.hidden


def graded_cell(path, exercise):
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if f"graded:{exercise}" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{path}: expected one graded cell"
    return cells[0].source


def notebook_with(exercise, code, path):
    """The student's notebook for `exercise` with its graded cell replaced by `code` (name the
    file after the exercise's notebook, since that is how the grader knows the exercise)."""
    nb = nbformat.read(ROOT / "exercises" / f"{exercise}.ipynb", as_version=4)
    for cell in nb.cells:
        if f"graded:{exercise}" in cell.metadata.get("tags", []):
            cell.source = code
    nbformat.write(nb, path)
    return path


# The notebooks handed in beside each graded one: the solved ones, where the capstone (6.3) finds
# the pieces it builds on (the tests below of its pieces hand in others).
SOLVED = {ex: ROOT / "solutions" / f"{ex}.ipynb" for ex in EXERCISES}


def grade_many(paths, grading):
    # One after another: on CPython 3.11.7, ast.parse/compile in two threads at once can raise
    # "SystemError: AST constructor recursion depth mismatch" (fixed in later 3.11 releases).
    return [grade_notebook(p, grading=grading, handed_in=SOLVED) for p in paths]


def only_exercise(result):
    assert result.error is None and result.exercise is not None, result.error
    return result.exercise


def report(ex):
    return " | ".join([ex.status, ex.message] + [f"{t.name}: {t.message}" for t in ex.tests])


# ---- the two ends: solutions and untouched exercises ----------------------------------------------------
def test_every_solution_scores_full_marks(grading):
    results = grade_many([ROOT / "solutions" / f"{n}.ipynb" for n in EXERCISES], grading)
    for exercise, result in zip(EXERCISES, results):
        ex = only_exercise(result)
        assert ex.exercise == exercise
        assert ex.status == "graded" and ex.score == ex.max_score > 0, report(ex)


def test_every_untouched_exercise_scores_zero(grading):
    results = grade_many([ROOT / "exercises" / f"{n}.ipynb" for n in EXERCISES], grading)
    for result in results:
        ex = only_exercise(result)
        assert ex.status == "graded" and ex.score == 0 and ex.max_score > 0, report(ex)
        assert all("NotImplementedError" in t.message for t in ex.tests), report(ex)


# ---- the capstone's pieces: the student's own notebooks ------------------------------------------------
CAPSTONE = next(ex for ex in EXERCISES if load_hidden_tests(DEFAULT_TESTS)[ex].EXERCISE.builds_on)


def test_the_capstone_runs_on_the_pieces_handed_in_with_it(hidden, tmp_path, grading):
    """Its pieces come from the student's notebooks of the earlier exercises, handed in with it:
    none handed in is one line and 0; a wrong piece costs the stages that use it; a piece that
    calls lib's model scores nothing where it is used; grade_submission finds them among the files."""
    builds_on = hidden[CAPSTONE].EXERCISE.builds_on
    capstone = ROOT / "solutions" / f"{CAPSTONE}.ipynb"
    alone = only_exercise(grade_notebook(capstone, grading=grading))
    assert alone.status == "missing-pieces" and alone.score == 0, report(alone)
    assert "ch4_gpt" in alone.message and "\n" not in alone.message, alone.message

    solved = {ex: SOLVED[ex] for ex in builds_on}
    w = next(w for w in fixtures.WRONG if w.exercise == "ch4_gpt" and w.name == "no_skip_path")
    bad = notebook_with("ch4_gpt", fixtures.apply(graded_cell(SOLVED["ch4_gpt"], "ch4_gpt"), w), tmp_path / "ch4_gpt.ipynb")
    lib_gpt = notebook_with("ch4_gpt", fixtures.IMPORT_REFERENCE["ch4_gpt"], tmp_path / "lib_ch4_gpt.ipynb")
    full, wrong_piece, lib_piece = (only_exercise(grade_notebook(capstone, grading=grading,
                                                                 handed_in={**solved, "ch4_gpt": p}))
                                    for p in (SOLVED["ch4_gpt"], bad, lib_gpt))
    assert full.score == full.max_score, report(full)
    training = ("loss_and_grads", "train")             # block_backward's mistake reaches these only
    assert all(t.passed != t.name.startswith(training) for t in wrong_piece.tests), report(wrong_piece)
    passed = {t.name for t in lib_piece.tests if t.passed}  # only the loader itself uses no piece
    assert passed and all(t.startswith("load_gpt2: ") for t in passed), report(lib_piece)
    assert "blocked lib reference" in report(lib_piece), report(lib_piece)

    submission = grade_submission([capstone, *solved.values()], grading=replace(grading, memory_mb=2048))
    graded = {nb.exercise.exercise: nb.exercise for nb in submission.notebooks}
    assert graded[CAPSTONE].score == graded[CAPSTONE].max_score, report(graded[CAPSTONE])
    missing_one = grade_submission([capstone, *[p for ex, p in solved.items() if ex != "ch6_kv_cache"]],
                                   grading=grading, assignment=[CAPSTONE])
    ex = next(nb.exercise for nb in missing_one.notebooks if nb.exercise and nb.exercise.exercise == CAPSTONE)
    assert ex.status == "missing-pieces" and "ch6_kv_cache" in ex.message and ex.score == 0, report(ex)


def capstone_outside_sandbox(code, hidden):
    """The capstone's graded `code` run here, with `parts` from the solved notebooks of its pieces."""
    from lib.handin import parts_from_sources
    builds_on = hidden[CAPSTONE].EXERCISE.builds_on
    sources = {ex: graded_cell(SOLVED[ex], ex) for ex in builds_on}
    namespace = {"__name__": "__graded__", "parts": parts_from_sources(sources, {k: list(v) for k, v in builds_on.items()})}
    exec(compile(code, "<capstone>", "exec"), namespace)
    return namespace


CAPSTONE_DECODERS = {
    "prompt back": "def generate(params, config, idx, max_new_tokens, rng, **options):\n    return idx\n",
    "greedy whatever the options": ("_generate = generate\n\n\n"
                                    "def generate(params, config, idx, max_new_tokens, rng, **options):\n"
                                    "    return _generate(params, config, idx, max_new_tokens, rng)\n"),
}


def test_the_capstones_decoding_tests_catch_trivial_samplers_and_positions_from_zero(hidden):
    """generate's sampling tests fail the prompt handed back and greedy decoding; its greedy
    test with the cache fails a cached decode that counts the new tokens' positions from 0."""
    solution = graded_cell(SOLVED[CAPSTONE], CAPSTONE)
    off_by_position = fixtures.apply(solution, next(w for w in fixtures.WRONG if w.name == "positions_from_zero"))
    answers = {"solution": solution, "positions from 0": off_by_position,
               **{name: solution + "\n" + code for name, code in CAPSTONE_DECODERS.items()}}
    tests = [t for t in hidden[CAPSTONE].tests() if t.function == "generate" and not t.expect_error]
    passed = {}
    for name, code in answers.items():
        generate = capstone_outside_sandbox(code, hidden)["generate"]
        passed[name] = {t.name: t.check(DRIVERS[t.driver](generate, [_build(a) for a in t.args],
                                                          {k: _build(v) for k, v in t.kwargs.items()}))[0]
                        for t in tests}
    sampling = [t.name for t in tests if "top_" in t.name]
    assert all(passed["solution"].values()) and len(sampling) == 2, passed["solution"]
    for name in CAPSTONE_DECODERS:
        assert not any(passed[name][t] for t in sampling), (name, passed[name])
    assert not passed["positions from 0"]["generate: greedy with the cache, lib's tokens"], passed["positions from 0"]


def test_an_extra_forward_pass_in_the_kv_cache_generator_costs_its_point(hidden):
    """Exercise 6.1: feeding the model the last new token too (a forward pass for nothing) keeps
    every token right and fails only the test that counts the model's calls (which then gates
    generate_cached's edge test, as any failing test of it does)."""
    module = hidden["ch6_kv_cache"]
    code = fixtures.apply(graded_cell(SOLVED["ch6_kv_cache"], "ch6_kv_cache"),
                          next(w for w in fixtures.WRONG if w.name == "feeds_the_last_token"))
    tests = module.tests()
    verdicts = verdicts_outside_sandbox(code, module)
    failed = [t.name for t, v in zip(tests, verdicts) if not v.passed and t.group == "main"]
    assert failed == ["greedy calls the model once per new token: the prompt, then one position at a time"], failed
    solved = verdicts_outside_sandbox(graded_cell(SOLVED["ch6_kv_cache"], "ch6_kv_cache"), module)
    assert all(v.passed for t, v in zip(tests, solved) if t.group == "main")


# ---- exercise 4.4's stand-ins: worth nothing read without the wiring --------------------------------------
TABLE_READER = '''
import numpy as np


def _tables(parts):
    """Every stand-in's table in reach: parts' and those the driver put among this cell's names."""
    found = {name: f.table for name, f in vars(parts).items() if hasattr(f, "table")}
    found.update({name: f.table for name, f in list(globals().items()) if hasattr(f, "table")})
    return found


def _rows(table):
    """(key, result, gradients) of each recorded call, whatever the row's form."""
    for row in table["calls"]:
        if isinstance(row, dict):
            yield row.get("fingerprint"), row["result"], row.get("gradients") or {}
        else:
            yield row[0], row[1], (row[2] if len(row) > 2 and row[2] else {})


def _result(tables, name, k=0):
    return list(_rows(tables[name]))[k][1] if name in tables and len(tables[name]["calls"]) > k else 0.0


def block_forward(x, params, layer, n_head, parts):
    """Two additions of recorded values: x + attention's output + GELU's output times c_proj."""
    t, p = _tables(parts), f"h.{layer}.mlp.c_proj."
    out = x + _result(t, "causal_self_attention") + np.asarray(_result(t, "gelu_tanh")) @ params[p + "weight"]
    return out + params[p + "bias"], None


def gpt_forward(idx, params, config, parts):
    """The head's recorded output, or the last block's recorded output through ln_f and the head."""
    t = _tables(parts)
    if "head_forward" in t:
        return _result(t, "head_forward"), idx
    last = np.asarray(_result(t, "block_forward", config.n_layer - 1)[0])
    norm = globals().get("layernorm_forward")
    hidden = norm(last, params["ln_f.weight"], params["ln_f.bias"]) if norm else (last, None)
    return parts.head_forward(hidden[0], params["wte.weight"]), (idx, hidden)


def gpt_backward(dlogits, cache, params, config, grads, parts):
    """Every recorded gradient added in; ln_f's from LayerNorm's first recorded call, or the
    ends computed around the blocks' recorded gradients and dx instead of the loop."""
    t = _tables(parts)
    for name, table in t.items():
        for _, result, gradients in _rows(table):
            for key, g in gradients.items():
                grads[{"wte": "wte.weight", "wpe": "wpe.weight"}.get(key, key)] += g
    ends = {"wte": grads["wte.weight"], "wpe": grads["wpe.weight"]}
    if "layernorm_backward" in t:
        _, dweight, dbias = _result(t, "layernorm_backward")
    else:
        idx, (hidden, ln_f_cache) = cache
        dhidden = parts.head_backward(dlogits, hidden, params["wte.weight"], ends)
        _, dweight, dbias = parts.layernorm_backward(dhidden, ln_f_cache, params["ln_f.weight"])
        parts.embed_backward(np.asarray(list(_rows(t["block_backward"]))[-1][1]), idx, ends)
    grads["ln_f.weight"] += dweight
    grads["ln_f.bias"] += dbias
'''


def _solution_without(code, names):
    """The solution's graded cell with the functions `names` cut out (each up to the next def)."""
    kept, skipping = [], False
    for line in code.splitlines(keepends=True):
        if line.startswith("def "):
            skipping = line[4:line.index("(")] in names
        kept.append("" if skipping else line)
    return "".join(kept)


def test_exercise_4_4s_tables_give_no_points_without_the_wiring(tmp_path, hidden, monkeypatch, grading):
    """Code that reads the stand-ins' tables instead of wiring (the block as two additions of
    recorded values, the head's or the last block's recorded output, every recorded gradient
    added in) scores nothing; with the block wired, reading the tables instead of looping over
    the blocks gets none of the model's points, which it would get if the tables held their
    results plainly (masks of zero, outside the sandbox)."""
    solution = graded_cell(SOLVED["ch4_gpt"], "ch4_gpt")
    readers = {"nothing implemented": TABLE_READER,
               "the block implemented": _solution_without(solution, {"gpt_forward", "gpt_backward"})
               + TABLE_READER.split("def block_forward")[0] + "def gpt_forward" + TABLE_READER.split("def gpt_forward")[1]}
    module = hidden["ch4_gpt"]
    tests, scores = module.tests(), {}

    def by_function(passed):
        return {f: sum(t.points for t, ok in zip(tests, passed) if ok and t.function == f)
                for f in ("block_forward", "gpt_forward", "gpt_backward")}

    for name, code in readers.items():
        path = notebook_with("ch4_gpt", code, tmp_path / f"ch4_gpt_{name.replace(' ', '_')}.ipynb")
        ex = only_exercise(grade_notebook(path, grading=grading))
        assert ex.status == "graded", report(ex)                                   # the cells ran
        scores[name] = {**by_function([r.passed for r in ex.tests]), "all": ex.score}
    assert scores["nothing implemented"]["all"] == 0, scores
    assert scores["the block implemented"] == {"block_forward": 4, "gpt_forward": 0, "gpt_backward": 0,
                                               "all": max_score(module) - 6}, scores
    monkeypatch.setattr(drivers, "_mask", lambda x, shape, seed: np.zeros(shape))
    plain = gate(module.tests(), verdicts_outside_sandbox(readers["the block implemented"], module))
    assert by_function([v.passed for v in plain]) == {"block_forward": 4, "gpt_forward": 2, "gpt_backward": 4}, plain


# ---- hidden references written apart from lib agree with it ----------------------------------------------
def test_the_hidden_references_of_exercises_10_1_9_1_and_9_2_agree_with_lib(hidden):
    """Here, not in tests/test_flash.py or tests/test_posttrain.py: the student release has no hidden tests."""
    from lib.numpy_twin import posttrain as npt
    from lib.numpy_twin.flash import flash_attention, online_softmax_update
    flash = hidden["ch10_flash"]
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 45, 8)) for _ in range(3))
    assert np.abs(flash.flash_attention(q, k, v) - flash_attention(q, k, v, block_size=16)).max() < 1e-12
    assert np.abs(flash.causal_attention_by_rows(q, k, v, rows=7) - flash_attention(q, k, v, block_size=16)).max() < 1e-12
    m, l, acc = np.full(45, -np.inf), np.zeros(45), np.zeros((45, 8))
    s = q[0] @ k[0].T
    for mine, theirs in zip(online_softmax_update(m, l, acc, s, v[0]), flash.online_softmax_update(m, l, acc, s, v[0])):
        assert np.abs(mine - theirs).max() < 1e-12
    ref = hidden["ch9_lora"].REFERENCE
    base = nt.Linear(12, 10).astype(np.float64)
    base.weight[...] = np.random.default_rng(0).standard_normal((10, 12))
    base.bias[...] = np.random.default_rng(1).standard_normal(10)
    layer = npt.LoRALinear(base, 3, 6.0, seed=2)
    layer.lora_B[...] = np.random.default_rng(3).standard_normal(layer.lora_B.shape)   # as after training
    x = np.random.default_rng(10).standard_normal((2, 3, 12))
    dy = np.random.default_rng(11).standard_normal((2, 3, 10))
    y, cache = layer.forward(x)
    layer.zero_grad()
    dx = layer.backward(dy, cache)
    args = (layer.weight, layer.lora_A, layer.lora_B, layer.alpha)
    np.testing.assert_allclose(ref["lora_forward"](x, layer.weight, layer.bias, *args[1:]), y, rtol=1e-12)
    for got, want in zip(ref["lora_backward"](dy, x, *args), (dx, layer.grads["lora_A"], layer.grads["lora_B"])):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(ref["lora_merge"](*args), layer.merge().weight, rtol=1e-12)
    ref = hidden["ch9_dpo"].REFERENCE
    rng = np.random.default_rng(12)
    for scale in (1.0, 3000.0):
        logps = [rng.standard_normal(7) * scale for _ in range(4)]
        loss, grads = npt.dpo_loss(*logps, 0.3)
        ref_loss, ref_grads = ref["dpo_loss"](*logps, 0.3)
        assert abs(ref_loss - loss) <= 1e-12 * abs(loss)
        for got, want in zip(ref_grads, grads):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)   # the hidden tests' floor: e^-500 or 0


def test_flash_without_tiling_fails_the_long_test_in_its_memory(tmp_path, hidden, grading):
    """Exercise 10.1's long test (random queries, a sandbox of LONG_MEMORY): the whole (T, T)
    matrix at once fails it, as does a running mean of v (right only for q = 0); a solution passes."""
    module = hidden["ch10_flash"]
    plain = ("import math\nimport numpy as np\n\n\ndef flash_attention(q, k, v, block_size=64):\n"
             "    T, D = q.shape[-2:]\n    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(D)\n"
             "    s = np.where(np.tri(T, dtype=bool), s, -np.inf)\n    p = np.exp(s - s.max(-1, keepdims=True))\n"
             "    return (p / p.sum(-1, keepdims=True)) @ v\n")
    mean = ("import numpy as np\n\n\ndef flash_attention(q, k, v, block_size=64):\n"
            "    return (np.cumsum(v, axis=-2) / np.arange(1, v.shape[-2] + 1)[:, None]).astype(v.dtype)\n")
    long = [i for i, t in enumerate(module.tests()) if t.group == "long"]
    assert len(long) == 1 and module.EXERCISE.memory["long"] * (1 << 20) < 32768 ** 2 * 4
    for name, code, passes in (("plain", plain, False), ("mean", mean, False),
                               ("solution", graded_cell(SOLVED["ch10_flash"], "ch10_flash"), True)):
        ex = only_exercise(grade_notebook(notebook_with("ch10_flash", code, tmp_path / f"ch10_flash_{name}.ipynb"),
                                          grading=grading))
        assert ex.tests[long[0]].passed == passes, (name, report(ex))
        assert ex.tests[long[0]].points == 4


def test_the_capstone_graded_alone_takes_its_pieces_as_inputs_not_errors(hidden, capsys, grading):
    """`--assignment ch6_your_gpt2` with the pieces handed in: each piece is read for the
    capstone and reported as such, none is an error (exit 0, an empty error column in a class)."""
    from grader.classroom import _problems
    pieces = [SOLVED[ex] for ex in hidden[CAPSTONE].EXERCISE.builds_on]
    stub = ROOT / "exercises" / f"{CAPSTONE}.ipynb"
    submission = grade_submission([stub, *pieces], grading=replace(grading, timeout=1), assignment=[CAPSTONE])
    assert [nb.error for nb in submission.notebooks] == [None] * (1 + len(pieces))
    assert all(nb.exercise is None and nb.note.startswith(f"a piece of {CAPSTONE}") for nb in submission.notebooks[1:])
    assert _problems(submission, [CAPSTONE]) == "" and submission.max_score == max_score(hidden[CAPSTONE])
    assert main([str(stub), *map(str, pieces), "--assignment", CAPSTONE, "--timeout", "1"]) == 0
    assert "ERROR" not in capsys.readouterr().out


# ---- wrong answers ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wrong_results(grading, tmp_path_factory):
    folder = tmp_path_factory.mktemp("wrong")
    paths = []
    for w in fixtures.WRONG:
        solution = graded_cell(ROOT / "solutions" / f"{w.exercise}.ipynb", w.exercise)
        paths.append(notebook_with(w.exercise, fixtures.apply(solution, w), folder / f"{w.exercise}_{w.name}.ipynb"))
    return dict(zip([(w.exercise, w.name) for w in fixtures.WRONG], grade_many(paths, grading)))


def test_at_least_three_wrong_fixtures_per_exercise():
    for exercise in EXERCISES:
        assert sum(w.exercise == exercise for w in fixtures.WRONG) >= 3, exercise


def test_every_exercise_blocks_lib_and_is_tried_with_lib_answer(hidden):
    """No exercise can forget to block lib's answer: each blocks at least one lib name and has a
    case that hands in lib's answer (graded below: it must score nothing in the sandbox, and points
    outside it, which shows that the blocked names are the ones that answer it)."""
    assert set(EXERCISES) == set(fixtures.IMPORT_REFERENCE) == set(fixtures.TRIVIAL), \
        (sorted(EXERCISES), sorted(fixtures.IMPORT_REFERENCE), sorted(fixtures.TRIVIAL))
    for exercise, module in hidden.items():
        assert module.EXERCISE.blocked, f"{exercise} blocks no lib name"


@pytest.mark.parametrize("w", fixtures.WRONG, ids=lambda w: f"{w.exercise}-{w.name}")
def test_wrong_answer_loses_points(w, wrong_results):
    ex = only_exercise(wrong_results[(w.exercise, w.name)])
    assert ex.status in ("graded", "timeout"), report(ex)    # it ran (a slow one hits the CPU limit)
    assert ex.score < ex.max_score, f"{w.name} ({w.mistake}) kept full marks: {report(ex)}"


# ---- tampering ----------------------------------------------------------------------------------------
def tamper_code(t, exercise, hidden):
    stub = graded_cell(ROOT / "exercises" / f"{exercise}.ipynb", exercise)
    solution = graded_cell(ROOT / "solutions" / f"{exercise}.ipynb", exercise)
    return t.template.format(stub=stub, solution=solution, repo=str(ROOT), exercise=exercise,
                             hidden=hidden[exercise].__file__,
                             notebook=str(ROOT / "solutions" / f"{exercise}.ipynb"))


TAMPER_CASES = [(t, ex) for t in fixtures.GENERIC for ex in EXERCISES]
REFERENCE_CASES = list(fixtures.IMPORT_REFERENCE)


@pytest.fixture(scope="module")
def tamper_results(hidden, tmp_path_factory, grading):
    folder = tmp_path_factory.mktemp("tamper")
    paths = [notebook_with(ex, tamper_code(t, ex, hidden), folder / f"{ex}_{t.name}.ipynb")
             for t, ex in TAMPER_CASES]
    paths += [notebook_with(ex, fixtures.IMPORT_REFERENCE[ex], folder / f"{ex}_import_reference.ipynb")
              for ex in REFERENCE_CASES]
    results = grade_many(paths, replace(grading, timeout=TAMPER_CPU_CAP))
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


def verdicts_outside_sandbox(code, module):
    """Like score_outside_sandbox, per test (those of other groups fail), before gating."""
    namespace = {"__name__": "__graded__"}
    exec(compile(code, "<trivial>", "exec"), namespace)
    verdicts = []
    for test in module.tests():
        if test.group != "main":
            verdicts.append(Verdict(False, "not run here"))
            continue
        try:
            value = DRIVERS[test.driver](namespace[test.function], [_build(a) for a in test.args],
                                        {k: _build(v) for k, v in test.kwargs.items()})
        except Exception as exc:                              # noqa: BLE001
            verdicts.append(Verdict(test.expect_error == type(exc).__name__, "raised"))
            continue
        verdicts.append(Verdict(False, "no error") if test.expect_error else Verdict(*test.check(value)))
    return verdicts


def _build(value):
    if isinstance(value, Config):
        return make_object("__config__", value.fields)
    if isinstance(value, Model):
        return make_object("__model__", {"config": value.config, "seed": value.seed, "dtype": value.dtype})
    if isinstance(value, Rng):
        return make_object("__rng__", value.seed)
    if isinstance(value, (list, tuple)) and not isinstance(value, np.ndarray):
        return type(value)(_build(v) for v in value)
    if isinstance(value, dict):                               # each test its own arrays, as each
        return {k: _build(v) for k, v in value.items()}       # decodes its own in the sandbox
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # references fed bad arguments divide by 0
@pytest.mark.parametrize("name", [t.name for t in fixtures.GENERIC if t.works_outside] + ["import_reference"])
def test_tampering_fixtures_would_work_without_the_sandbox(name, hidden):
    for exercise in EXERCISES:
        if name == "import_reference":
            code = fixtures.IMPORT_REFERENCE[exercise]
        else:
            code = tamper_code(next(t for t in fixtures.GENERIC if t.name == name), exercise, hidden)
        assert score_outside_sandbox(code, hidden[exercise]) > 0, f"{name} on {exercise} is a dud outside the sandbox"



@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("exercise", list(fixtures.LIB_ROUTES))
def test_lib_routes_beside_the_blocked_names_score_nothing(exercise, hidden, tmp_path, grading):
    """lib answers an exercise through more than the names it is known by (its layers, chapter
    10's attention): each such route scores outside the sandbox, and nothing inside it."""
    code = fixtures.LIB_ROUTES[exercise]
    assert score_outside_sandbox(code, hidden[exercise]) > 0, f"the {exercise} route is a dud outside the sandbox"
    path = notebook_with(exercise, code, tmp_path / f"{exercise}.ipynb")
    ex = only_exercise(grade_notebook(path, grading=replace(grading, timeout=TAMPER_CPU_CAP)))
    assert ex.score == 0 and "blocked lib reference" in report(ex), report(ex)


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


def probe_exercise(tmp_path, code, args, timeout=None, **exercise):
    """A hidden-test folder with one exercise, 'probe', whose one test calls probe(*args) in the
    sandbox (what the probe returned lands in its module's SEEN); returns (its Grading, a notebook
    holding `code`)."""
    tests_dir = tmp_path / "hidden"
    (tests_dir / "probe").mkdir(parents=True)
    (tests_dir / "probe" / "hidden_tests.py").write_text(
        "from grader.spec import Exercise, Test\n"
        f"EXERCISE = Exercise(notebook='probe', title='probe', functions=('probe',), **{exercise!r})\n"
        "SEEN = []\n"
        "def tests():\n"
        "    return [Test('probe', 'probe', ARGS, lambda v: (SEEN.append(v) or True, ''))]\n")
    grading = Grading(tests_dir, timeout=timeout)
    grading.hidden["probe"].ARGS = args
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(code)
    cell.metadata.tags = ["graded:probe"]
    nb.cells = [cell]
    nbformat.write(nb, tmp_path / "probe.ipynb")
    return grading, tmp_path / "probe.ipynb"


def test_sandbox_hides_solutions_hidden_tests_and_lib(tmp_path):
    files = [next(DEFAULT_TESTS.glob("*/hidden_tests.py")), next(DEFAULT_TESTS.glob("*/source.py")),
             DEFAULT_TESTS / "fixtures.py", next((ROOT / "solutions").glob("*.ipynb")),
             ROOT / "lib" / "numpy_twin" / "model.py", ROOT / "grader" / "spec.py"]
    missing = [str(f) for f in files if not f.is_file()]
    assert not missing, f"the files the sandbox must not read are gone: {missing}"
    secret = [*map(str, files), str(tmp_path / "hidden" / "probe" / "hidden_tests.py"), "/root/.bashrc",
              str(Path.home() / ".cache" / "gpt2-course"), "/etc/passwd"]
    grading, notebook = probe_exercise(tmp_path, PROBE, (secret,), blocked=("lib.numpy_twin.model:gelu",))
    ex = only_exercise(grade_notebook(notebook, "probe", grading=grading))
    assert ex.status == "graded", report(ex)
    found = grading.hidden["probe"].SEEN[0]
    for path in secret:
        assert found[path] in ("FileNotFoundError", "PermissionError"), (path, found[path])
    assert found["uid"] != 0 and found["lib"] == "/grade/lib/__init__.py", found
    assert "REFERENCE UNAVAILABLE" in found["gelu"], found
    assert found["torch"] == "ImportError" and found["network"] != "connected", found


HOST_PROBE = """
import ctypes, errno, os, threading


def _errno(action):
    try:
        action()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]


def _fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def _fill_tmp():
    for i in range(4):                                       # 4 files of 50 MiB, more than /tmp may hold
        with open(f"/tmp/fill{i}", "wb") as f:
            for _ in range(50):
                f.write(b"x" * (1 << 20))
                f.flush()


def probe(syscalls, secret):
    found = {}
    inside, outside, _ = map(int, open("/proc/self/uid_map").read().split()[:3])
    found["host uid"] = outside + os.getuid() - inside
    found["capabilities"] = [line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")][0]
    for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/stat_interval"):
        found[path] = _errno(lambda: os.close(os.open(path, os.O_WRONLY)))   # opened, never written
    texts = {"environ": [], "cmdline": []}
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        for name, into in texts.items():
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    into.append(f.read().decode("utf-8", "replace"))
            except OSError:
                pass
    found["grader environment seen"] = any(secret in text for text in texts["environ"])
    found["host folders seen"] = [text for text in texts["cmdline"] if "/grade-" in text]
    libc = ctypes.CDLL(None, use_errno=True)
    calls = {"ptrace": (3, os.getpid(), 0, 0), "process_vm_readv": (os.getpid(), 0, 0, 0, 0, 0),
             "keyctl": (0, -3, 0), "bpf": (5, 0, 0), "perf_event_open": (0, 0, -1, -1, 0), "unshare": (0,),
             "setns": (-1, 0), "mount": (0, 0, 0, 0, 0), "io_uring_setup": (0, 0), "clone3": (0, 0)}
    for name, args in calls.items():
        ctypes.set_errno(0)
        done = libc.syscall(ctypes.c_long(syscalls[name]), *map(ctypes.c_long, args))
        found[name] = errno.errorcode.get(ctypes.get_errno(), "?") if done == -1 else "ok"
    found["fork"] = _errno(_fork)
    try:
        threading.Thread(target=lambda: None).start()
        found["thread"] = "started"
    except RuntimeError:
        found["thread"] = "refused"
    found["fill /tmp"] = _errno(_fill_tmp)
    found["/tmp holds"] = sum(os.path.getsize(f"/tmp/{name}") for name in os.listdir("/tmp"))
    for folder in ("/", "/dev", "/grade"):
        found["write in " + folder] = _errno(lambda: open(os.path.join(folder, "new"), "wb").close())
    return found
"""


@pytest.fixture(scope="module")
def host_probe(tmp_path_factory):
    """What a graded cell can do to the host: one sandbox, many attempts."""
    tmp_path = tmp_path_factory.mktemp("host")
    secret = "GRADER_SECRET_FOR_THE_PROBE"
    numbers = {name: nr for name, (nr, _) in seccomp.numbers(seccomp.machine()).items()}
    grading, notebook = probe_exercise(tmp_path, HOST_PROBE, (numbers, secret), timeout=20)
    os.environ[secret] = "1"
    try:
        ex = only_exercise(grade_notebook(notebook, "probe", grading=grading))
    finally:
        del os.environ[secret]
    assert ex.status == "graded", report(ex)
    return grading.hidden["probe"].SEEN[0]


def test_sandbox_is_never_host_root(host_probe):
    assert host_probe["capabilities"] == "0000000000000000", host_probe
    if os.geteuid() == 0:        # a root grader's sandbox has no user namespace: its uid is the host's
        assert host_probe["host uid"] == sandbox.SANDBOX_UID, host_probe


def test_sandbox_cannot_change_kernel_settings_or_read_the_grader(host_probe):
    for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/stat_interval"):
        assert host_probe[path] in ("EACCES", "EROFS", "EPERM"), (path, host_probe)
    assert not host_probe["grader environment seen"], host_probe
    assert not host_probe["host folders seen"], host_probe


def test_system_calls_a_graded_cell_has_no_use_for_are_refused(host_probe):
    for name in ("ptrace", "process_vm_readv", "keyctl", "bpf", "perf_event_open", "unshare", "setns", "mount",
                 "io_uring_setup", "fork"):
        assert host_probe[name] == "EPERM", (name, host_probe)
    assert host_probe["clone3"] == "ENOSYS" and host_probe["thread"] == "refused", host_probe


def test_sandbox_is_one_process_with_a_bounded_disk(host_probe):
    assert host_probe["fork"] == "EPERM" and host_probe["thread"] == "refused", host_probe
    assert host_probe["fill /tmp"] == "ENOSPC", host_probe
    assert host_probe["/tmp holds"] <= sandbox.TMP_BYTES + (1 << 20), host_probe     # 200 MiB were attempted
    for folder in ("/", "/dev", "/grade"):
        assert host_probe["write in " + folder] in ("EROFS", "EACCES"), (folder, host_probe)


def test_memory_limit_and_crash_leave_other_exercises_graded(tmp_path, grading):
    nb = nbformat.read(ROOT / "exercises" / "ch4_gelu.ipynb", as_version=4)
    bomb = nbformat.v4.new_code_cell("import numpy as np\nhog = np.ones(10**9)  # 8 GB, over the 1 GB limit\n")
    bomb.metadata.tags = ["graded:ch4_gelu"]
    nb.cells.append(bomb)
    nbformat.write(nb, tmp_path / "ch4_gelu.ipynb")
    shutil.copy(ROOT / "solutions" / "ch4_deeper.ipynb", tmp_path / "ch4_deeper.ipynb")
    result = grade_submission([tmp_path / "ch4_gelu.ipynb", tmp_path / "ch4_deeper.ipynb"],
                              grading=replace(grading, memory_mb=1024))
    gelu, deeper = (only_exercise(nb) for nb in result.notebooks)
    assert gelu.score == 0 and gelu.status == "load-error", report(gelu)
    assert "MemoryError" in gelu.message
    assert deeper.score == deeper.max_score and result.score == deeper.max_score, report(deeper)


def test_notebook_without_graded_cells_scores_zero(tmp_path, grading):
    nb = nbformat.read(ROOT / "solutions" / "ch4_gelu.ipynb", as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("tags", None)
    nbformat.write(nb, tmp_path / "untagged.ipynb")
    ex = only_exercise(grade_notebook(tmp_path / "untagged.ipynb", "ch4_gelu", grading=grading))
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


def test_command_line_json_and_exit_codes(tmp_path, hidden):
    run = subprocess.run([sys.executable, "-m", "grader", "--json", "solutions/ch4_deeper.ipynb",
                          "exercises/ch4_gelu.ipynb"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    scores = [nb["exercise"]["score"] for nb in out["notebooks"]]
    most = max_score(hidden["ch4_deeper"])
    assert scores == [most, 0] and out["score"] == most and out["max_score"] == most + max_score(hidden["ch4_gelu"])
    text = subprocess.run([sys.executable, "-m", "grader", "exercises/ch4_deeper.ipynb"], cwd=ROOT,
                          capture_output=True, text=True)
    assert text.returncode == 0 and "FAIL" in text.stdout and "total: 0/" in text.stdout
    bad = subprocess.run([sys.executable, "-m", "grader", "--tests", str(tmp_path / "none"), "x.ipynb"],
                         cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "does not exist" in bad.stderr
    unnamed = subprocess.run([sys.executable, "-m", "grader", str(tmp_path / "homework.ipynb")],
                             cwd=ROOT, capture_output=True, text=True)
    assert unnamed.returncode == 1 and "names no exercise" in unnamed.stdout


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
    run = subprocess.run([str(other_python), "-m", "grader", "--json", "solutions/ch4_gelu.ipynb"], cwd=ROOT,
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
    ref = hidden["ch4_gelu"].REFERENCE
    assert np.allclose(ref["gelu_tanh"](x), gelu(x), rtol=1e-12, atol=1e-15)
    assert np.allclose(ref["gelu_exact"](x), gelu_exact(x), rtol=1e-12, atol=1e-15)
    for config in hidden["ch4_deeper"].CONFIGS.values():
        assert hidden["ch4_deeper"].count_params(config) == param_counts(config)["total"]
    assert hidden["ch4_deeper"].count_params(GPTConfig.gpt2()) == 124_439_808
    z = np.random.default_rng(0).normal(0, 2, (5, 40))
    for settings in (dict(temperature=0.7, top_k=5), dict(temperature=1.2, top_p=0.8), dict(top_k=3, top_p=0.5)):
        assert np.allclose(hidden["ch6_top_k_top_p"].probabilities(z, **settings), filtered_probs(z, **settings), atol=1e-12)


def test_finetune_reference_agrees_with_lib(hidden):
    from lib.config import GPTConfig
    from lib.numpy_twin import GPT
    from lib.numpy_twin.finetune import ClassifierHead, finetune_loss

    model = GPT(GPTConfig(vocab_size=20, n_ctx=8, n_layer=1, n_head=2, n_embd=8), seed=1, dtype=np.float64)
    head = ClassifierHead(8, 3, seed=1).astype(np.float64)
    x, labels = np.random.default_rng(0).integers(0, 20, (2, 8)), np.array([2, 0])
    model.zero_grad()
    head.zero_grad()
    losses = finetune_loss(model, head, x, labels, 0.5)
    logits, states, _ = model.forward_outputs(x)
    want = hidden["ch7_finetune_loss"].REFERENCE["finetune_loss"](states, logits, x, labels, head.weight, head.bias, 0.5)
    assert np.allclose([want["loss"], want["cls_loss"], want["lm_loss"]], losses, rtol=1e-12)
    assert np.allclose(want["dweight"], head.grads["weight"], rtol=1e-10, atol=1e-14)
    assert np.allclose(want["dbias"], head.grads["bias"], rtol=1e-10, atol=1e-14)
    grads = dict(model.named_grads())
    model.zero_grad()
    model.backward(want["dlogits"], dhidden=want["dhidden"])
    for name, g in model.named_grads():
        assert np.allclose(g, grads[name], rtol=1e-10, atol=1e-14), name


def test_choice_head_reference_agrees_with_lib(hidden):
    from lib import gpt1_tasks
    from lib.config import GPTConfig
    from lib.numpy_twin import GPT
    from lib.numpy_twin.finetune import ClassifierHead
    from lib.numpy_twin.gpt1_formats import format_loss

    ex = gpt1_tasks.task_examples("choice", ["hamlet"], 2, seed=0)   # x (2, 4, T)
    B, S, T = ex.x.shape
    model = GPT(GPTConfig(vocab_size=259, n_ctx=128, n_layer=1, n_head=2, n_embd=8), seed=1, dtype=np.float64)
    head = ClassifierHead(8, 1, seed=1).astype(np.float64)
    model.zero_grad()
    head.zero_grad()
    _, cls_loss, _ = format_loss(model, head, ex.x, ex.extract, ex.labels, True, 0.0)
    states = model.forward_outputs(ex.x.reshape(B * S, T)).hidden.reshape(B, S, T, -1)
    want = hidden["ch7_choice_head"].REFERENCE["choice_head"](states, ex.extract, head.weight, head.bias, ex.labels)
    assert np.isclose(want["loss"], cls_loss, rtol=1e-12)
    assert np.allclose(want["dweight"], head.grads["weight"], rtol=1e-10, atol=1e-14)
    assert np.allclose(want["dbias"], head.grads["bias"], atol=1e-14)
    grads = dict(model.named_grads())
    model.zero_grad()
    model.backward(np.zeros((B * S, T, 259)), dhidden=want["dhidden"].reshape(B * S, T, -1))
    for name, g in model.named_grads():
        assert np.allclose(g, grads[name], rtol=1e-10, atol=1e-14), name


def test_bpe_reference_agrees_with_lib(hidden):
    import regex

    from lib import tokenizer as tk

    module = hidden["ch1_bpe"]
    for _, text, n, _ in module.CASES:
        merges, ids = module.train_bpe(text, n)
        chunks = regex.findall(tk.GPT2_SPLIT_PATTERN, text)
        assert tk.train_naive(chunks, len(merges)) == tk.train_fast(chunks, len(merges)) == merges
        assert tk.BPETokenizer(merges).encode(text) == ids
        if len(merges) < n:                                  # stopped early: lib raises for one more
            with pytest.raises(ValueError, match="ran out of pairs"):
                tk.train_naive(chunks, len(merges) + 1)


def test_backward_reference_agrees_with_lib(hidden):
    from lib.config import GPTConfig
    from lib.numpy_twin import GPT, LayerNorm

    rng = np.random.default_rng(0)
    ln = LayerNorm(8).astype(np.float64)
    ln.weight[...] = rng.normal(1, 0.5, 8)
    _, cache = ln.forward(rng.normal(2, 3, (2, 5, 8)))
    dy = rng.standard_normal((2, 5, 8))
    ln.zero_grad()
    dx, dweight, dbias = hidden["ch4_backward"].layernorm_backward(dy, cache, ln.weight)
    assert np.allclose(dx, ln.backward(dy, cache), rtol=1e-12, atol=1e-14)
    assert np.allclose([dweight, dbias], [ln.grads["weight"], ln.grads["bias"]], rtol=1e-12, atol=1e-14)
    for config in hidden["ch4_backward"].CONFIGS.values():
        block = GPT(GPTConfig(**config), seed=1, dtype=np.float64).h[0]
        x = rng.standard_normal((2, 5, config["n_embd"]))
        _, cache = block.forward(x)
        block.zero_grad()
        want = block.backward(x, cache), dict(block.named_grads())
        got = hidden["ch4_backward"].expected_block(config, 1, 0, x, x)
        assert np.allclose(got[0], want[0], rtol=1e-12, atol=1e-14)
        assert all(np.allclose(got[1][n], g, rtol=1e-12, atol=1e-14) for n, g in want[1].items())


def test_embeddings_reference_agrees_with_lib(hidden):
    from lib.config import GPTConfig
    from lib.numpy_twin import GPT

    ref = hidden["ch2_embeddings"].REFERENCE
    rng = np.random.default_rng(0)
    model = GPT(GPTConfig(vocab_size=11, n_ctx=8, n_layer=1, n_head=2, n_embd=4), seed=2, dtype=np.float64)
    idx = np.array([[3, 0, 3, 3, 7], [0, 0, 1, 2, 10]])                          # (B, T): repeated ids
    dx = rng.standard_normal((2, 5, 4))
    model.zero_grad()
    model.wte.backward(dx, idx)
    model.wpe.backward(dx.sum(axis=0, keepdims=True), np.arange(5)[None])
    grads = {"wte": np.zeros((11, 4)), "wpe": np.zeros((8, 4))}
    ref["embed_backward"](dx, idx, grads)
    assert np.allclose(grads["wte"], model.wte.grads["weight"]) and np.allclose(grads["wpe"], model.wpe.grads["weight"])
    x = ref["embed_forward"](idx, model.wte.weight, model.wpe.weight)
    assert np.allclose(x, model.wte.forward(idx)[0] + model.wpe.forward(np.arange(5)[None])[0])
    hidden_states = model.forward_outputs(idx).hidden                             # (B, T, C)
    assert np.allclose(ref["head_forward"](hidden_states, model.wte.weight), model.forward(idx), rtol=1e-12)
    dlogits = rng.standard_normal((2, 5, 11))
    head = {"wte": np.zeros((11, 4))}
    dhidden = ref["head_backward"](dlogits, hidden_states, model.wte.weight, head)
    assert np.allclose(head["wte"], dlogits.reshape(-1, 11).T @ hidden_states.reshape(-1, 4))
    assert np.allclose(dhidden, dlogits @ model.wte.weight)


def test_rope_and_rmsnorm_references_agree_with_lib(hidden):
    from lib.numpy_twin.modern import RMSNorm, apply_rope, apply_rope_backward, rope_cos_sin

    ref = hidden["ch8_rope"].REFERENCE
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((2, 3, 4, 16)), rng.standard_normal((2, 3, 4, 16))
    for start in (0, 37):
        cos, sin = rope_cos_sin(start, 4, 16, 10000.0, np.float64)
        ref_cos, ref_sin = ref["rope_cos_sin"](start, 4, 16, 10000.0, np.float64)
        assert np.allclose(ref_cos, cos, rtol=0, atol=1e-13) and np.allclose(ref_sin, sin, rtol=0, atol=1e-13)
        assert np.allclose(ref["apply_rope"](x, cos, sin), apply_rope(x, cos, sin), rtol=1e-12, atol=1e-14)
        assert np.allclose(ref["apply_rope_backward"](dy, cos, sin), apply_rope_backward(dy, cos, sin), rtol=1e-12,
                           atol=1e-14)
    norm = RMSNorm(16).astype(np.float64)
    norm.weight[:] = rng.standard_normal(16)
    y, cache = norm.forward(x)
    dx = norm.backward(dy, cache)
    ref_dx, ref_dweight = ref["rmsnorm_backward"](dy, x, norm.weight, norm.eps)
    assert np.allclose(ref["rmsnorm"](x, norm.weight, norm.eps), y, rtol=1e-12, atol=1e-14)
    assert np.allclose(ref_dx, dx, rtol=1e-10, atol=1e-13)
    assert np.allclose(ref_dweight, norm.grads["weight"], rtol=1e-10, atol=1e-13)


def test_alibi_references_agree_with_lib(hidden):
    from lib.numpy_twin.model import causal_mask
    from lib.numpy_twin.modern import alibi_bias, alibi_slopes

    ref = hidden["ch8_alibi"].REFERENCE
    for heads in (1, 3, 8, 12, 20, 96):
        np.testing.assert_allclose(ref["alibi_slopes"](heads), alibi_slopes(heads), rtol=1e-13, atol=0)
    for T, start in ((6, 0), (1, 1001), (4, 37)):
        slopes = alibi_slopes(6)
        want = alibi_bias(T, start, slopes, np.float64) + causal_mask(T, start, np.float64)   # (H, T, S)
        np.testing.assert_array_equal(ref["alibi_bias"](T, start, slopes, np.float64), want)


def test_attention_reference_agrees_with_lib(hidden):
    from lib.config import GPTConfig
    from lib.numpy_twin import CausalSelfAttention

    for _, args, _, _ in hidden["ch3_attention"].CASES:
        x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias, n_head = (
            a.astype(np.float64) if isinstance(a, np.ndarray) else a for a in args)
        layer = CausalSelfAttention(GPTConfig.small(n_embd=x.shape[-1], n_head=n_head))
        layer.c_attn.weight, layer.c_attn.bias = c_attn_weight.T.copy(), c_attn_bias   # lib stores (out, in)
        layer.c_proj.weight, layer.c_proj.bias = c_proj_weight.T.copy(), c_proj_bias
        want = hidden["ch3_attention"].REFERENCE["causal_self_attention"](*args)
        np.testing.assert_allclose(want, layer.forward(x)[0], rtol=1e-10, atol=1e-10)


def test_optimizer_reference_agrees_with_lib(hidden):
    from grader.drivers import drive_adamw
    from lib.numpy_twin.train import AdamW, cross_entropy
    from lib.schedule import lr_at

    ref = hidden["ch5_optimizer"].REFERENCE
    rng = np.random.default_rng(0)
    for scale in (3.0, 1e4):
        z, y = scale * rng.standard_normal((2, 3, 7)), rng.integers(0, 7, (2, 3))
        (loss, grad), (want_loss, want_grad) = ref["cross_entropy"](z, y), cross_entropy(z, y)
        assert abs(loss - want_loss) <= 1e-12 * (1 + abs(want_loss)) and np.allclose(grad, want_grad, rtol=1e-10, atol=1e-15)
    for step in (0, 7, 9, 10, 50, 99, 100, 150):
        assert ref["lr_at"](step, 1e-3, 1e-4, 10, 100) == lr_at(step, 1e-3, 1e-4, 10, 100)

    def lib_step(params, grads, exp_avg, exp_avg_sq, step, lr, **settings):
        optimizer = AdamW(params.items(), lr, **settings)
        optimizer.exp_avg, optimizer.exp_avg_sq, optimizer.steps = exp_avg, exp_avg_sq, step - 1
        optimizer.step(grads)

    for test in hidden["ch5_optimizer"].tests():
        if test.driver == "adamw":
            params, targets, scales, lrs = test.args
            args = ({n: p.copy() for n, p in params.items()}, targets, scales, lrs)
            assert test.check(drive_adamw(lib_step, args, test.kwargs))[0], test.name


# ---- what comes back from the sandbox ---------------------------------------------------------------------
def _line(record) -> bytes:
    return json.dumps(record).encode() + b"\n"


def test_read_answers_takes_only_records_of_the_runner_shape():
    good = encode(np.arange(3.0))
    data = b"".join([
        b"[" * 100_000 + b"]" * 100_000 + b"\n",                      # nested deeper than any parser goes
        _line([1, 2]), _line({"id": {"a": 1}, "ok": True}), _line({"id": "../../../etc/passwd", "ok": True}),
        _line({"id": "t000", "ok": "yes"}), b"\xff\xfe not utf-8\n", _line({"id": "t001", "ok": False, "error": 5}),
        _line({"id": "t002", "ok": True, "value": {"__array__": ["|O", [1], ""]}}),
        _line({"id": "t003", "ok": True, "value": {"__array__": ["<f8", [10 ** 12], "AAAAAAAAAAA="]}}),
        _line({"id": "t004", "ok": True, "value": {"__dict__": "x"}}),
        _line({"id": "t005", "ok": True, "value": {"__config__": {}}}),
        _line({"id": "t006", "ok": False, "error": {"type": "X\n    PASS", "message": "\x1b[2J" + "m" * 10_000}}),
        _line({"id": "t007", "ok": True, "value": json.loads("[" * 20 + "1" + "]" * 20)}),
        _line({"id": "t008", "ok": True, "value": good}), b'{"id": "t009", "ok": true, "val',
    ])
    records = read_answers(data, [f"t{i:03d}" for i in range(10)])
    assert set(records) == {"t001", "t002", "t003", "t004", "t005", "t006", "t007", "t008"}, records
    assert records["t001"] == {"ok": False, "error": {"type": "", "message": "", "blocked": False}}
    for bad in ("t002", "t003", "t004", "t005", "t007"):
        assert records[bad]["error"]["type"] == "BadAnswer", records[bad]
    error = records["t006"]["error"]
    assert "\n" not in error["type"] and "\x1b" not in error["message"] and len(error["message"]) < 700, error
    assert np.array_equal(records["t008"]["value"], np.arange(3.0))



def test_answers_decode_in_linear_time_dicts_of_string_keys_only():
    """Ints that share one hash (multiples of the int hash's modulus) would make a dict quadratic
    to build, in the grader's process: an answer's dicts have string keys (hashed with a secret
    seed), at most MAX_DICT_KEYS of them, or the answer is refused."""
    colliding = {"__dict__": [[k * sys.hash_info.modulus, 0] for k in range(1, 51)]}
    tuples = {"__dict__": [[[k, 1], 0] for k in range(3)]}
    many = {"__dict__": [[str(k), 0] for k in range(MAX_DICT_KEYS + 1)]}
    fine = {"__dict__": [["h.0.attn.c_attn.weight", encode(np.ones(2))]]}
    data = b"".join(_line({"id": f"t00{i}", "ok": True, "value": v})
                    for i, v in enumerate([colliding, tuples, many, fine]))
    records = read_answers(data, ["t000", "t001", "t002", "t003"])
    for bad in ("t000", "t001", "t002"):
        assert records[bad]["error"]["type"] == "BadAnswer", records[bad]
    assert np.array_equal(records["t003"]["value"]["h.0.attn.c_attn.weight"], np.ones(2))
    with pytest.raises(TypeError, match="strings"):                   # the sandbox says so first
        encode({(1, 2): 0})


def test_a_huge_answer_line_is_refused_before_it_is_parsed():
    """Parsed, 4 MiB of empty lists would be some 30 times its size in Python objects; a line
    over MAX_LINE_BYTES, or with more brackets and commas than MAX_STRUCTURE, is refused unread,
    so the grader's memory stays within a small multiple of what the sandbox sent."""
    from lib.bench.roofline import peak_memory
    lists = b'{"id": "t000", "ok": true, "value": [' + b"[]," * ((4 << 20) // 3) + b'[]]}\n'
    text = b'{"id": "t001", "ok": true, "value": "' + b"A" * (MAX_LINE_BYTES + 1) + b'"}\n'
    data = lists + text
    peak = peak_memory(read_answers, data, ["t000", "t001"])     # from a reset peak, least of three runs
    records = read_answers(data, ["t000", "t001"])
    assert peak < 3 * len(data), f"{peak / 2**20:.0f} MiB for {len(data) / 2**20:.0f} MiB of answers"
    assert [records[i]["error"]["type"] for i in ("t000", "t001")] == ["AnswerTooLarge"] * 2, records


def test_every_message_is_cut_and_none_tells_an_expected_size(tmp_path, hidden):
    """A check whose message holds a huge value does not swell the report; BPE's message does not
    tell how many merges the rules give; array checks do not tell the expected shape."""
    huge = SimpleNamespace(EXERCISE=Exercise(notebook="probe", title="probe", functions=("f",)),
                           tests=lambda: [Test("huge", "f", (), lambda v: (False, "x" * 1_000_000))])
    ex = grade_exercise("def f():\n    return 1\n", huge, Grading(timeout=5, memory_mb=1024))
    assert ex.status == "graded" and len(ex.tests[0].message) <= MAX_TEXT, len(ex.tests[0].message)
    expected = [(97, 98)] * 146
    for got in ([(97, 98)] * 150, [(97, 98)] * 140):
        verdict = Verdict(*hidden["ch1_bpe"].merges_check(expected)((got, [1])))
        assert not verdict.passed and "146" not in verdict.message and "146" in verdict.detail, verdict
    for check in (close(np.zeros((7, 5)), 0, 0), equal(np.zeros((7, 5), np.int64)), filtered(np.zeros((7, 5)))):
        verdict = Verdict(*check(np.zeros((5, 7))))
        assert not verdict.passed and "(7, 5)" not in verdict.message and "(7, 5)" in verdict.detail, verdict


def test_file_names_cannot_forge_report_lines():
    """A notebook's file name goes into the report escaped, as sandbox text does: a newline in it
    cannot start a score line, a terminal escape cannot hide the real result."""
    forged = "x\n  4.1 ch4_gelu GELU: 24/24\n    PASS all (24 pt): right\n\x1b[1A\x1b[2Kch4_gelu.ipynb"
    result = ExerciseResult("ch4_gelu", "GELU", "graded", "", 0, 24, number="4.1")
    text = text_report(Submission([NotebookResult(forged, result)], [], 0, 24))
    forged_lines = [line for line in text.splitlines() if line.lstrip().startswith(("4.1 ch4_gelu GELU: 24", "PASS"))]
    assert not forged_lines, text
    assert len(text.splitlines()) == 4 and "\x1b" not in text, text

FORGERY = r'''
import json, os

_out = int(os.environ.get("GRADE_ANSWERS_FD", "-1"))
_junk = [b"[" * 100000 + b"]" * 100000, b'[1, 2]', b'{"id": {"a": 1}, "ok": true}', b'{"id": "t000", "ok": "yes"}',
         b'{"id": "t001", "ok": true, "value": {"__array__": ["<f8", [1000000000000], "AAAA"]}}',
         b'{"id": "t002", "ok": false, "error": 5}', b'{"id": "../../etc/passwd", "ok": true, "value": 1}']
try:
    os.write(_out, b"\n".join(_junk) + b"\n")
except OSError:
    pass
try:                                     # where answers used to be written, a folder and junk
    os.makedirs("/out/t000.npz", exist_ok=True)
    with open("/out/results.jsonl", "ab") as f:
        f.write(b"\n".join(_junk) + b"\n")
except OSError:
    pass
'''


def test_forged_answers_in_the_sandbox_neither_crash_nor_score(tmp_path, grading):
    solution = graded_cell(ROOT / "solutions" / "ch4_deeper.ipynb", "ch4_deeper")
    path = notebook_with("ch4_deeper", FORGERY + solution, tmp_path / "ch4_deeper.ipynb")
    ex = only_exercise(grade_notebook(path, grading=grading))
    assert ex.status == "graded" and ex.score == ex.max_score, report(ex)


def test_answers_beyond_the_limit_stop_the_sandbox(tmp_path, grading, monkeypatch):
    monkeypatch.setattr(sandbox, "MAX_ANSWER_BYTES", 1 << 20)
    flood = "import os\nos.write(int(os.environ['GRADE_ANSWERS_FD']), b'x' * (4 << 20))\n"
    path = notebook_with("ch4_deeper", flood + graded_cell(ROOT / "solutions" / "ch4_deeper.ipynb", "ch4_deeper"),
                         tmp_path / "ch4_deeper.ipynb")
    ex = only_exercise(grade_notebook(path, grading=grading))
    assert ex.score == 0 and ex.status == "crashed" and "exceeded 1 MiB" in ex.message, report(ex)


# ---- notebooks of every shape ------------------------------------------------------------------------------
def _malformed(folder: Path) -> dict:
    """{name: path} of notebooks no student should hand in, each named for ch4_gelu."""
    solution = json.loads((ROOT / "solutions" / "ch4_gelu.ipynb").read_text())
    graded = next(i for i, c in enumerate(solution["cells"]) if "graded:ch4_gelu" in c["metadata"].get("tags", []))

    def variant(name, change):
        nb = json.loads(json.dumps(solution))
        change(nb, nb["cells"][graded])
        path = folder / f"ch4_gelu_{name}.ipynb"
        path.write_text(json.dumps(nb))
        return path
    paths = {
        "number_tag": variant("number_tag", lambda nb, c: c["metadata"].update(tags=[5, None, {"a": 1}])),
        "tags_text": variant("tags_text", lambda nb, c: c["metadata"].update(tags="graded:ch4_gelu")),
        "exercise_list": variant("exercise_list", lambda nb, c: nb["metadata"].update(grading={"exercise": ["ch4_gelu"]})),
        "no_cell_type": variant("no_cell_type", lambda nb, c: c.pop("cell_type")),
        "cell_not_dict": variant("cell_not_dict", lambda nb, c: nb["cells"].insert(0, 7)),
        "source_number": variant("source_number", lambda nb, c: c.update(source=12)),
        "surrogate_code": variant("surrogate_code", lambda nb, c: c.update(source="x = '\ud800'\n")),
        "surrogate_tag": variant("surrogate_tag", lambda nb, c: c["metadata"].update(tags=["graded:ch4_gelu\ud800"])),
    }
    (folder / "ch4_gelu_not_json.ipynb").write_text("[" * 100_000)
    (folder / "ch4_gelu_folder.ipynb").mkdir()
    os.mkfifo(folder / "ch4_gelu_fifo.ipynb")
    (folder / "ch4_gelu_link.ipynb").symlink_to("/etc/passwd")
    for name in ("not_json", "folder", "fifo", "link"):
        paths[name] = folder / f"ch4_gelu_{name}.ipynb"
    return paths


def test_malformed_notebooks_are_their_own_errors(tmp_path, grading, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))        # where the grader's folders would stay
    paths = _malformed(tmp_path)
    results = {name: grade_notebook(path, "ch4_gelu", grading=grading) for name, path in paths.items()}
    for name in ("surrogate_code", "source_number", "not_json", "folder", "fifo", "link"):
        assert results[name].error and results[name].exercise is None, (name, results[name])
    assert "root:" not in results["link"].error                 # nothing of the linked file shows
    for name in ("number_tag", "tags_text", "no_cell_type", "surrogate_tag"):
        ex = only_exercise(results[name])
        assert ex.status == "no-graded-cells" and ex.score == 0, (name, report(ex))
    for name in ("exercise_list", "cell_not_dict"):
        ex = only_exercise(results[name])
        assert ex.score == ex.max_score, (name, report(ex))
    assert list(scratch.iterdir()) == []


def test_a_notebook_of_millions_of_empty_lists_is_refused_before_it_is_parsed(tmp_path):
    """32 MiB of [] (11 million lists, some 900 MB parsed) is one line of error, and reading it
    costs the grader little more than its size: its peak memory grows by under 80 MB (the 32 MiB
    read, and room for the allocator) over what the process held before."""
    path = tmp_path / "ch4_gelu.ipynb"
    lists = ((32 << 20) - 200) // 3
    path.write_text('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [], "x": [' + "[]," * lists + "[]]}")
    probe = ("import resource, sys\nfrom grader.notebooks import NotebookError, read_notebook\n"
             "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
             "try:\n    read_notebook(sys.argv[1])\nexcept NotebookError as e:\n    print(e)\n"
             "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n")
    out = subprocess.run([sys.executable, "-c", probe, str(path)], cwd=ROOT, capture_output=True, text=True, check=True)
    message, growth_kb = out.stdout.splitlines()
    assert message.startswith("it holds over 400,000 brackets and commas") and int(growth_kb) < 80_000, out.stdout


def _padded_notebook(exercise, folder, padding):
    """The solved notebook of `exercise` with `padding` characters of emoji in a comment of its graded cell."""
    nb = nbformat.read(SOLVED[exercise], as_version=4)
    for cell in nb.cells:
        if f"graded:{exercise}" in cell.metadata.get("tags", []):
            cell.source += "\n# " + "\U0001F600" * padding + "\n"
    nbformat.write(nb, folder / f"{exercise}.ipynb")
    return folder / f"{exercise}.ipynb"


def test_a_submissions_graded_code_has_a_budget(tmp_path, hidden, grading):
    """Graded cells of more than 1 MiB in one notebook, or pieces of more than 4 MiB together,
    are one line each, before any sandbox runs (ten 32 MiB pieces of emoji once cost 2.2 GB)."""
    from grader.grading import MAX_PIECES_BYTES
    from grader.notebooks import MAX_CODE_BYTES
    big = _padded_notebook("ch4_gelu", tmp_path, MAX_CODE_BYTES // 4)
    result = grade_notebook(big, grading=grading)
    assert result.exercise is None and result.error.startswith("cannot read the notebook: its graded cells hold "), result
    pieces = {ex: _padded_notebook(ex, tmp_path, MAX_CODE_BYTES // 4 - 4096) for ex in hidden[CAPSTONE].EXERCISE.builds_on}
    capstone = only_exercise(grade_notebook(SOLVED[CAPSTONE], grading=grading, handed_in=pieces))
    assert capstone.status == "missing-pieces" and capstone.score == 0, report(capstone)
    assert capstone.message.startswith(f"its pieces' graded cells hold over {MAX_PIECES_BYTES:,} bytes"), capstone.message


def test_a_capstones_pieces_are_written_once_and_compactly(hidden, monkeypatch):
    """One pieces.json for all the capstone's sandbox runs (hard-linked into each), UTF-8 as it is
    (an emoji is 4 bytes, not the 12 of ensure_ascii's escapes), no indentation."""
    seen = []

    def run(box, **kw):
        pieces = box / "pieces.json"
        seen.append((pieces.stat().st_ino, pieces.stat().st_nlink, pieces.read_bytes(), (box / "job.json").read_bytes()))
        return sandbox.RunResult(0, None, 0.0, b'{"id": "__start__", "ok": true}\n{"id": "__load__", "ok": true}\n', "")
    monkeypatch.setattr(sandbox, "run", run)
    sources = {ex: f"# \U0001F600 {ex}\n" for ex in hidden[CAPSTONE].EXERCISE.builds_on}
    grade_exercise("pass\n", hidden[CAPSTONE], Grading(timeout=1, memory_mb=512), sources)
    assert len(seen) == len(hidden[CAPSTONE].EXERCISE.groups) and len({ino for ino, *_ in seen}) == 1
    assert all(links == 2 for _, links, *_ in seen)             # the one file and this box's link
    written = seen[0][2]
    assert json.loads(written)["sources"] == sources and "\U0001F600".encode() in written and b"\\ud83d" not in written
    assert b", " not in seen[0][3] and b'"pieces":true' in seen[0][3]


def test_the_assignment_decides_the_exercise_and_the_maximum(tmp_path, hidden, grading):
    nb = nbformat.read(ROOT / "solutions" / "ch4_gelu.ipynb", as_version=4)
    nb.metadata.pop("grading", None)
    for cell in nb.cells:
        if "graded:ch4_gelu" in cell.metadata.get("tags", []):
            cell.metadata.tags = ["graded:ch4_gelu\u200b"]              # an invisible character
    nbformat.write(nb, tmp_path / "ch4_gelu.ipynb")
    retagged = grade_submission([tmp_path / "ch4_gelu.ipynb"], grading=grading)
    assert retagged.score == 0 and retagged.max_score == max_score(hidden["ch4_gelu"]), retagged
    copies = []
    for name in "abcde":
        copies.append(tmp_path / f"ch4_gelu_{name}.ipynb")
        shutil.copy(ROOT / "solutions" / "ch4_gelu.ipynb", copies[-1])
    five = grade_submission(copies, grading=grading)
    assert five.score == 0 and five.max_score == max_score(hidden["ch4_gelu"]), five
    assert all(nb.exercise.status == "duplicated" for nb in five.notebooks), five
    missing = grade_submission([tmp_path / "ch4_gelu.ipynb"], grading=grading, assignment=["ch4_gelu", "ch4_deeper"])
    assert [ex.exercise for ex in missing.missing] == ["ch4_deeper"] and missing.missing[0].status == "missing"
    assert missing.max_score == max_score(hidden["ch4_gelu"]) + max_score(hidden["ch4_deeper"]), missing
    shutil.copy(ROOT / "solutions" / "ch4_gelu.ipynb", tmp_path / "homework.ipynb")
    unnamed = grade_submission([tmp_path / "homework.ipynb"], grading=grading)
    assert unnamed.notebooks[0].error and unnamed.score == unnamed.max_score == 0, unnamed


# ---- what students are told ----------------------------------------------------------------------------------
def test_student_messages_hold_no_expected_values(hidden):
    cases = [(integer(354_823_168), 1_000, ["354,823,168", "354823168"]),
             (close(np.array([0.25, 0.5]), 1e-9, 1e-9), np.array([0.25, 0.75]), ["0.5"]),
             (equal(np.array([3, 17])), np.array([3, 4]), ["17"]),
             (equal(None), 5, ["None"]),
             (filtered(np.array([1.0, -np.inf, -np.inf, -np.inf])), np.array([1.0, 2.0, 3.0, -np.inf]), ["expected 1"]),
             (frequencies(np.array([[0.25, 0.75]] * 400)), np.zeros(400, np.int64), ["100.0"]),
             (hidden["ch5_loss_plotter"].as_phases((101, 601)), (5, 7), ["101", "601"])]
    for check, got, secrets in cases:
        verdict = Verdict(*check(got))
        assert not verdict.passed, verdict
        assert secrets[0] in verdict.detail, (secrets, verdict)   # the instructor's report has it
        assert not any(secret in verdict.message for secret in secrets), (secrets, verdict)
    counts = [hidden["ch4_deeper"].count_params(config) for config in hidden["ch4_deeper"].CONFIGS.values()]
    for t in hidden["ch4_deeper"].tests():                            # test names describe inputs, not answers
        assert not any(str(n) in t.name.replace(",", "") for n in counts if n >= 10_000), t.name
    for t in hidden["ch5_loss_plotter"].tests():
        assert "->" not in t.name, t.name


def test_trivial_answers_score_at_most_a_tenth(hidden):
    for exercise, answers in fixtures.TRIVIAL.items():
        module = hidden[exercise]
        tests = module.tests()
        for name, code in answers.items():
            verdicts = gate(tests, verdicts_outside_sandbox(code, module))
            score = sum(t.points for t, v in zip(tests, verdicts) if v.passed)
            assert score <= fixtures.MAX_SHARE * max_score(module), (exercise, name, score)


def test_trivial_answer_and_forged_report_lines_in_the_sandbox(tmp_path, grading):
    nasty = ("\ndef gelu_exact(x):\n    raise ValueError('no\\n    PASS forged (99 pt): ok\\x1b[2J\\u202e')\n")
    path = notebook_with("ch4_gelu", fixtures.TRIVIAL["ch4_gelu"]["relu"] + nasty, tmp_path / "ch4_gelu.ipynb")
    submission = grade_submission([path], grading=grading)
    ex = only_exercise(submission.notebooks[0])
    assert ex.status == "graded" and ex.score == 0, report(ex)
    text = text_report(submission)
    assert "\x1b" not in text and "\u202e" not in text and "\n    PASS forged" not in text, text
    assert "an edge case counts only once" in text, text


# ---- time limits and a broken sandbox ------------------------------------------------------------------------
def test_sleeping_cells_start_one_sandbox_and_say_wall_clock(tmp_path, grading, monkeypatch):
    runs = []
    real_run = sandbox.run
    monkeypatch.setattr(sandbox, "run", lambda *a, **k: runs.append(k) or real_run(*a, **k))
    nb = nbformat.read(ROOT / "exercises" / "ch6_kv_cache.ipynb", as_version=4)
    for cell in nb.cells:
        if "graded:ch6_kv_cache" in cell.metadata.get("tags", []):
            cell.source = "import time\ntime.sleep(1000)\n" + cell.source
            nb.cells.insert(nb.cells.index(cell), nbformat.v4.new_code_cell("import time\ntime.sleep(1000)\n",
                                                                            metadata={"tags": ["graded:ch6_kv_cache"]}))
            break
    nbformat.write(nb, tmp_path / "ch6_kv_cache.ipynb")
    ex = only_exercise(grade_notebook(tmp_path / "ch6_kv_cache.ipynb", grading=replace(grading, timeout=1)))
    assert len(runs) == 1, runs                                  # the speed group would sleep the same
    assert ex.status == "timeout" and "wall-clock" in ex.message and "CPU time (" not in ex.message, report(ex)


def test_a_sandbox_that_cannot_start_stops_the_run(tmp_path, monkeypatch, capsys, grading):
    monkeypatch.setattr(sandbox, "RUNNER", "/grade/no_such_runner.py")
    with pytest.raises(SandboxUnavailable, match="did not start"):
        grade_submission([ROOT / "solutions" / "ch4_deeper.ipynb"], grading=grading)
    assert main([str(ROOT / "solutions" / "ch4_deeper.ipynb")]) == 2
    assert "nothing graded" in capsys.readouterr().err
