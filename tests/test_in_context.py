"""lib.scaling.induction (chapter 11's induction-head experiment) and exercise 11.2's reference.

The scores' own tests on constructed heads and losses are in tests/test_scaling.py; here: the
mix the models train on, the phase change's step, one tiny training run end to end, the settings'
bad input, and the hidden tests' loop-written reference against lib's scores.
"""
import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lib.scaling.in_context import in_context_score, prefix_matching_score
from lib.scaling.induction import (SETTINGS, InductionSettings, held_out_sets, mixed_batch, phase_change_step,
                                   repeated_tokens, train_run)

ROOT = Path(__file__).resolve().parent.parent
ALPHABET = np.arange(40, 60)


def test_repeated_tokens_repeat_with_each_rows_period():
    rows = repeated_tokens(ALPHABET, 3, 65, [8, 13, 32], np.random.default_rng(0))
    assert rows.shape == (3, 65) and rows.dtype == np.int64 and np.isin(rows, ALPHABET).all()
    for row, p in zip(rows, [8, 13, 32]):
        np.testing.assert_array_equal(row[p:], row[:-p])


def test_a_mixed_batch_holds_its_share_of_repeats_then_windows_of_the_text():
    text = np.arange(1000) % 200 + 100                      # bytes 100..299: never in ALPHABET
    settings = replace(SETTINGS, repeat_fraction=0.25)
    x, y = mixed_batch(text, ALPHABET, 8, settings, np.random.default_rng(1))
    assert x.shape == y.shape == (8, settings.n_ctx)
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])     # y is x shifted by one
    assert np.isin(x[:2], ALPHABET).all() and not np.isin(x[2:], ALPHABET).any()
    np.testing.assert_array_equal(np.diff(x[2:], axis=1) % 200, 1)   # consecutive text


def test_the_phase_change_is_the_steepest_rise_of_the_best_head():
    steps = [0, 50, 100, 150, 200]
    assert phase_change_step(steps, [0.02, 0.03, 0.05, 0.6, 0.7]) == 150
    assert phase_change_step(steps, [0.02, 0.5, 0.4, 0.45, 0.46]) == 50
    with pytest.raises(ValueError, match="at least 2 evaluations"):
        phase_change_step([0], [0.1])
    with pytest.raises(ValueError, match=r"shapes \(3,\) and \(2,\)"):
        phase_change_step([0, 1, 2], [0.1, 0.2])


@pytest.mark.parametrize("fields, message", [
    (dict(min_period=40), "min_period must be at most n_ctx / 2 = 32, got 40"),
    (dict(repeat_fraction=1.5), r"repeat_fraction must be a number in \[0, 1\], got 1.5"),
    (dict(steps=0), "steps must be an integer >= 1, got 0"),
    (dict(lr=-1.0), "lr must be a number > 0"),
])
def test_settings_refuse_bad_input(fields, message):
    with pytest.raises(ValueError, match=message):
        InductionSettings(**fields)


def test_a_tiny_run_records_every_score_at_every_evaluation_and_keeps_its_last_weights(tmp_path):
    pytest.importorskip("torch")
    from lib.scaling.induction import _scores
    from lib.torch_twin import GPT

    settings = replace(SETTINGS, n_embd=16, n_head=2, n_ctx=16, min_period=4, steps=4, eval_every=2, n_probe=3,
                       n_eval=5)
    text = np.random.default_rng(2).choice(ALPHABET, 500)
    held_out = held_out_sets(text, ALPHABET, settings)
    run = train_run(2, settings, text, ALPHABET, held_out, tmp_path / "model")
    assert run["steps"] == [0, 2, 4]
    assert np.shape(run["prefix_matching"]) == (3, 2, 2)
    assert all(0 <= score <= 1 for score in np.ravel(run["prefix_matching"]))
    assert run["best_head"] == [max(np.ravel(p)) for p in run["prefix_matching"]]
    assert run["phase_change"] in (2, 4) and len(run["in_context"]) == len(run["in_context_plays"]) == 3
    again = _scores(GPT.load(tmp_path / "model"), held_out)      # the saved model is the last one scored
    assert again["prefix_matching"] == run["prefix_matching"][-1] and again["loss"] == run["loss"][-1]


def _hidden(name):
    path = ROOT / "solutions" / name / "hidden_tests.py"
    spec = importlib.util.spec_from_file_location(f"hidden_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_exercise_11_2s_reference_is_libs():
    """The hidden tests' reference, loops over heads and queries, against lib's scores on every
    case; they agree to rounding (1e-12: means of at most a few thousand float64 numbers)."""
    hidden = _hidden("ch11_in_context")
    for attn, period in hidden._prefix_cases().values():
        np.testing.assert_allclose(hidden.prefix_matching_score(attn, period), prefix_matching_score(attn, period),
                                   rtol=1e-12, atol=1e-12)
    for loss, early, late in hidden._loss_cases().values():
        assert hidden.in_context_score(loss, early, late) == pytest.approx(in_context_score(loss, early, late),
                                                                           rel=1e-12, abs=1e-12)


def test_exercise_11_1s_reference_is_libs():
    """The hidden tests' reference fit (lstsq per alpha, Newton and bisection on the profiled
    residual) and interval (SVD of the column-scaled Jacobian in (E, A, alpha)) against lib's fit
    and predict: parameters within 1e-6 relative (E within 1e-8 of the losses' mean, where the truth
    is E = 0), the prediction within 1e-8 and the half-width within 1e-4 (both fits converge alpha
    to ~1e-9; the interval is a first-order quantity of the same fit)."""
    from lib.scaling.fit import fit_power_law, predict, t_quantile

    hidden = _hidden("ch11_scaling_fit")
    for N, L in hidden.fit_cases().values():
        fit = fit_power_law(N, L)
        E, A, alpha = hidden.fit_power_law(N, L)
        assert E == pytest.approx(fit.E, rel=1e-6, abs=1e-8 * np.mean(L))
        assert (A, alpha) == pytest.approx((fit.A, fit.alpha), rel=1e-6)
    for N, L, n_new, t in hidden.interval_cases().values():
        fit = fit_power_law(N, L)
        lib = predict(fit, n_new, level=0.9)
        lib_se = float(lib["interval"][1] - lib["loss"]) / t_quantile(0.95, fit.dof)
        loss, low, high = hidden.predict_interval(N, L, n_new, t)
        assert loss == pytest.approx(float(lib["loss"]), rel=1e-8)
        assert (high - low) / 2 == pytest.approx(t * lib_se, rel=1e-4)


def test_the_weights_go_where_final_model_reads_them_under_any_course_seed(monkeypatch, tmp_path):
    from lib import data
    from lib.scaling import induction

    monkeypatch.setenv("GPT2_COURSE_SEED", "3")
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    text = np.random.default_rng(2).choice(ALPHABET, 5000).astype(np.uint16)
    monkeypatch.setattr(data, "load_corpus", lambda *args: (text, text))
    saved = {}

    def fake_run(n_layer, settings, *args):
        saved[f"{n_layer}-layer"] = args[-2]                 # the folder it was told to save to
        args[-2].mkdir(parents=True)
        return {"n_layer": n_layer}

    monkeypatch.setattr(induction, "train_run", fake_run)
    settings = replace(SETTINGS, n_embd=16, n_head=2, n_ctx=16, min_period=4, n_probe=3, n_eval=5)
    induction.experiment(settings, progress=False)
    assert saved == {name: induction.model_folder(name, settings) for name in ("2-layer", "1-layer")}
