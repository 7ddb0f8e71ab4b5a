"""What the chapters assert from trained models holds for any retraining: the course seed that
shifts every cached training (lib.cached), the tool that retrains and re-executes under several
seeds (tools/claims.py), and its report (claims/report.json), which must be current."""
import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

import lib.cached
import lib.finetune
import lib.posttrain.experiment
import lib.pretrained

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "claims" / "report.json"
RERUN = "run `python tools/claims.py --seeds 0-4 --threads 1` again (it trains nothing it has cached)"


def load_claims_tool():
    spec = importlib.util.spec_from_file_location("claims", ROOT / "tools" / "claims.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


claims = load_claims_tool()


# ---- the course seed -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["-1", "1.5", "one", "0x2"])
def test_a_bad_course_seed_is_named_in_one_line(text, monkeypatch):
    monkeypatch.setenv("GPT2_COURSE_SEED", text)
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        lib.cached.course_seed()
    done = subprocess.run([sys.executable, "-m", "lib.cached"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "GPT2_COURSE_SEED": text})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"python -m lib.cached: GPT2_COURSE_SEED must be a whole "
                                                f"number >= 0, got {text!r}"]


def test_the_course_seed_shifts_every_cached_training_and_its_cache_key(monkeypatch, tmp_path):
    """Seed 0 is the settings as written (the caches made before the seed existed stay valid);
    another seed shifts every training seed and so names other cache entries."""
    monkeypatch.delenv("GPT2_COURSE_SEED", raising=False)
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    written = (lib.finetune.experiment_file(), lib.posttrain.experiment.experiment_file())
    settings = lib.posttrain.experiment._settings()
    assert settings["sft"] == asdict(lib.posttrain.experiment.SFT)
    assert settings["dpo"] == asdict(lib.posttrain.experiment.DPO)
    monkeypatch.setenv("GPT2_COURSE_SEED", "3")
    assert lib.cached.shifted(1337) == 1340
    shifted = (lib.finetune.experiment_file(), lib.posttrain.experiment.experiment_file())
    assert all(a != b for a, b in zip(written, shifted))
    settings = lib.posttrain.experiment._settings()
    assert settings["sft"]["seed"] == lib.posttrain.experiment.SFT.seed + 3
    assert settings["dpo"]["seed"] == lib.posttrain.experiment.DPO.seed + 3
    run = lib.finetune._settings(2, (2,), lib.finetune.PRETRAIN_CONFIG, None, None, lib.finetune.FINETUNE)
    assert run["pretrain"]["seed"] == lib.finetune.PRETRAIN["seed"] + 3
    assert run["finetune"]["seed"] == lib.finetune.FINETUNE.seed + 3


def test_trained_folder_trains_with_the_shifted_seed(monkeypatch, tmp_path):
    import numpy as np
    from lib.config import GPTConfig

    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    ids = np.arange(600, dtype=np.uint16) % 256
    recipe = dict(max_iters=2, batch_size=2, lr=1e-3, min_lr=1e-4, warmup_iters=1, eval_interval=10, eval_iters=1,
                  seed=5)
    config = GPTConfig(vocab_size=256, n_ctx=16, n_layer=1, n_head=2, n_embd=16)
    folders = {}
    for seed in ("0", "2"):
        monkeypatch.setenv("GPT2_COURSE_SEED", seed)
        folders[seed] = lib.pretrained.trained_folder("t", config, recipe, ids, progress=False)
    assert folders["0"] != folders["2"]
    from lib.numpy_twin import GPT

    # what each trained from: its initialisation is GPT(config, seed=5 + course seed)
    for seed, folder in folders.items():
        start = GPT(config, seed=5 + int(seed)).state_dict()["wpe.weight"]
        other = GPT(config, seed=5 + 2 - int(seed)).state_dict()["wpe.weight"]
        trained = GPT.load(folder).state_dict()["wpe.weight"]
        assert np.abs(trained - start).max() < np.abs(trained - other).max()


def test_the_install_step_trains_every_cached_run_through_one_list():
    install = (ROOT / "tools" / "install.sh").read_text()
    assert '"$PY" -m lib.cached' in install
    for name in ("shakespeare_small_folder", "modern_small_folder", "dropout_runs", "word_order_experiment",
                 "experiment("):
        assert name not in install, f"install.sh calls {name} itself instead of lib.cached's list"


# ---- the tool ------------------------------------------------------------------------------------------
def run_recorded(source, tmp_path):
    """Execute `source` with its asserts rewritten as the tool rewrites a cell; the recorder."""
    recorder = claims.Recorder(tmp_path / "raw.json")
    tree = claims.AssertRecorder().visit(ast.parse(claims.instrumented(0, source)))
    exec(compile(ast.fix_missing_locations(tree), "<cell>", "exec"), {"__claims__": recorder})
    return recorder


def test_an_assert_is_recorded_with_its_operands_and_never_raises(tmp_path):
    source = ("calls = []\n"
              "def f(x):\n"
              "    calls.append(x)\n"
              "    return x\n"
              "assert f(1.5) < f(2) <= 3\n"
              "assert f(0.25) > 0.5, 'too small'\n"
              "assert 1 / 0 > 1\n"
              "for k in range(3):\n"
              "    assert k < 2\n"
              "assert len(calls) == 3 and all(c > 0 for c in calls)\n"
              "xs = [5, 6, 7]\n"
              "assert xs[[x > 5 for x in xs].index(True)] == 6 and not xs[0] > 5\n")
    recorded = {c["line"]: c for c in run_recorded(source, tmp_path).claims.values()}
    assert recorded[5]["passed"] and recorded[5]["values"] == [1.5, 2, 3]
    assert not recorded[6]["passed"] and recorded[6]["values"] == [0.25, 0.5] and recorded[6]["error"] == "too small"
    assert not recorded[7]["passed"] and recorded[7]["error"].startswith("ZeroDivisionError")
    assert recorded[9]["runs"] == 3 and not recorded[9]["passed"] and recorded[9]["values"] == [2, 2]
    # each operand evaluated once: f ran three times in all (1.5, 2, 0.25)
    assert recorded[10]["passed"] and recorded[10]["values"] == [3, 3]
    assert recorded[5]["digest"] == claims.cell_digest(source)
    # a comparison inside an operand is computation, not the claim: only the outer ones are recorded
    assert recorded[12]["passed"] and recorded[12]["values"] == [6, 6, 5, 5]


@pytest.mark.parametrize("text", ["", "4-", "a", "-1", "3-1x"])
def test_bad_seed_ranges_are_named(text):
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        claims.parse_seeds(text)
    assert claims.parse_seeds("0-2,5") == [0, 1, 2, 5]


def test_every_notebook_that_reads_a_cached_run_is_checked():
    reads = re.compile(r"shakespeare_small|modern_small|dropout_runs|word_order_experiment|lib\.posttrain|"
                       r"lib\.finetune|lib\.overfitting|lib\.pretrained|lib\.cached")
    for path in sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("solutions/*.ipynb")]):
        code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        if reads.search(code):
            assert str(path.relative_to(ROOT)) in claims.NOTEBOOKS, f"{path.name} reads a cached run"


# ---- the report ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def report():
    assert REPORT.is_file(), f"no claims report: {RERUN}"
    return json.loads(REPORT.read_text())


def asserting_cells(notebook):
    cells = json.loads((ROOT / notebook).read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return {claims.cell_digest(s) for s in sources if re.search(r"^\s*assert\b", s, re.M)}


def test_the_claims_report_is_current(report):
    """The experiment code and every asserting cell are as they were when the report was made."""
    assert report["code_digest"] == lib.cached.code_digest(), (
        f"the code of the cached trainings (lib.cached.CODE) changed since the claims report was made: {RERUN}")
    assert sorted(report["notebooks"]) == sorted(claims.NOTEBOOKS), f"the tool's notebooks changed: {RERUN}"
    for notebook, entry in report["notebooks"].items():
        now, then = asserting_cells(notebook), set(entry["cells"])
        changed = now - then
        assert not changed, f"{notebook}: {len(changed)} asserting cells changed or added since the report: {RERUN}"
        gone = {c["digest"] for c in entry["claims"]} - now
        assert not gone, f"{notebook}: cells the report checked are gone or changed: {RERUN}"


def test_every_claim_held_on_at_least_five_seeds(report):
    assert len(report["seeds"]) >= 5
    failed = [(nb, c["text"], c["held_on"]) for nb, e in report["notebooks"].items() for c in e["claims"]
              if c["held_on"] < len(report["seeds"])]
    assert not failed, f"claims that did not hold on every seed: {failed}"
    for notebook, entry in report["notebooks"].items():
        assert not entry["errors"], f"{notebook} raised under some seed: {entry['errors']}"


def test_the_report_shows_claims_that_depend_on_training(report):
    """The report is about something: chapters 7 and 9 assert figures of their experiments, and
    those figures vary between seeds."""
    for notebook in ("chapters/07_finetuning.ipynb", "chapters/09_post_training.ipynb"):
        assert any(c["varies"] for c in report["notebooks"][notebook]["claims"])


def test_a_record_of_other_experiment_code_is_executed_again(monkeypatch):
    # a record is reused only for the same code cells and the same code behind the cached runs
    notebook = claims.NOTEBOOKS[0]
    before = claims.notebook_digest(notebook)
    monkeypatch.setattr(lib.cached, "code_digest", lambda: "another")
    assert claims.notebook_digest(notebook) != before
