"""lib.scaling: the GPT family's figures, training compute, the power-law fit and its command line,
and the two in-context-learning measures."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lib.config import GPTConfig, param_counts
from lib.scaling import (FAMILY, GPT1, GPT2, GPT3, GPT3_TABLE_D1_PARAMS, GPT3_TRAIN_PF_DAYS, count_check, fit_power_law,
                         in_context_positions, in_context_score, member, non_embedding_params, param_count, pf_days,
                         predict, prefix_matching_score, standard_errors, t_quantile, train_compute, train_flops)


# ---- the family -------------------------------------------------------------------------

def test_the_family_is_thirteen_models_in_order_of_publication():
    assert [m.name for m in FAMILY][:5] == ["GPT-1", "GPT-2 Small", "GPT-2 Medium", "GPT-2 Large", "GPT-2 XL"]
    assert len(GPT2) == 4 and len(GPT3) == 8 and len(FAMILY) == 13


def test_gpt2_sizes_are_the_released_models():
    """GPT-2 Small and Medium are lib's own presets; the four released models count 124M, 355M, 774M
    and 1,558M parameters (the sizes of Hugging Face's gpt2 ... gpt2-xl)."""
    assert GPT2[0].config == GPTConfig.gpt2() and GPT2[1].config == GPTConfig.gpt2_medium()
    assert [param_count(m) for m in GPT2] == [124_439_808, 354_823_168, 774_030_080, 1_557_611_200]


def test_gpt2s_published_counts_are_lib_counts_with_gpt1s_vocabulary():
    """The explanation COUNT_DIFFERENCES gives, checked: swap 50,257 embedding rows for 40,478 and
    every count rounds to the paper's millions."""
    for model in GPT2:
        gpt1_vocab = GPTConfig(**{**model.config.to_dict(), "vocab_size": 40478})
        with_gpt1_vocab = param_counts(gpt1_vocab)["total"]
        assert round(with_gpt1_vocab / 1e6) * 1e6 == model.params, model.name
        assert count_check(model)["ratio"] > 1                # and the paper's figure is below the true count


def test_gpt1_differs_from_gpt2_small_as_its_paper_says():
    """Post-LN, no final LayerNorm, 512 positions, 40,478 tokens; 116.5M parameters, which GPT-2's
    paper rounds to 117M."""
    assert (GPT1.norm_placement, GPT1.final_norm) == ("post", False)
    assert (GPT1.config.n_ctx, GPT1.config.vocab_size) == (512, 40478)
    assert param_count(GPT1) == 40478 * 768 + 512 * 768 + 12 * param_counts(GPT1.config)["per_block"]
    assert round(param_count(GPT1) / 1e6) == 117
    assert count_check(GPT1)["published"] is None and count_check(GPT1)["ratio"] is None


def test_gpt3_shapes_follow_table_2_1():
    """Context 2,048 and 300B tokens for all; d_head = d_model / n_heads but for XL (see its note)."""
    assert all(m.config.n_ctx == 2048 and m.tokens == 300e9 for m in GPT3)
    assert [m.config.n_layer for m in GPT3] == [12, 24, 24, 24, 32, 32, 40, 96]
    assert [m.config.n_embd for m in GPT3] == [768, 1024, 1536, 2048, 2560, 4096, 5120, 12288]
    assert [m.config.head_dim for m in GPT3] == [64, 64, 96, 128, 80, 128, 128, 128]
    assert [m.batch_tokens for m in GPT3] == [0.5e6, 0.5e6, 0.5e6, 1e6, 1e6, 2e6, 2e6, 3.2e6]
    assert any("5,140" in note for note in member("GPT-3 13B").notes)


def test_gpt3_counts_match_table_2_1_within_its_rounding():
    """Table 2.1 gives two significant figures at most (1.3B, 6.7B): 2% covers its rounding; embeddings
    included (without them GPT-3 Small would be 85M, 32% short)."""
    for model in GPT3:
        assert count_check(model)["ratio"] == pytest.approx(1, rel=0.02), model.name
    assert non_embedding_params(member("GPT-3 Small")) / 125e6 < 0.7


def test_non_embedding_params_is_about_12_layers_width_squared():
    """Kaplan et al.'s approximation drops biases, norms and the MLP's bias terms: within 1%."""
    for model in GPT3:
        c = model.config
        assert non_embedding_params(model) == pytest.approx(12 * c.n_layer * c.n_embd ** 2, rel=0.01)


def test_an_unknown_member_is_named():
    with pytest.raises(ValueError, match="no model named 'GPT-5'"):
        member("GPT-5")


# ---- training compute -------------------------------------------------------------------

def test_table_d1s_parameter_counts_are_lib_counts_with_embeddings():
    """Table D.1 gives N to three or four figures: lib's total count is within 0.4% of each (XL's
    1,320M against 1,316M counted is the farthest)."""
    for model in GPT3:
        assert param_count(model) == pytest.approx(GPT3_TABLE_D1_PARAMS[model.name], rel=0.004), model.name


def test_gpt3_compute_matches_table_d1():
    """6 N D with N = lib's count (embeddings included, as Table D.1's) and D = 300B against Table
    D.1's PF-days: within 1% for every size, as the table prints three figures (2.60 for
    Small's 2.609 rounds by 0.4%) and its N is within 0.4% of lib's."""
    for model in GPT3:
        assert train_compute(model)["pf_days"] == pytest.approx(GPT3_TRAIN_PF_DAYS[model.name], rel=0.01)


def test_table_d1_counts_embeddings():
    """With the non-embedding N instead, the small models miss Table D.1 by far more than 5%: the
    table's N is the total."""
    small = member("GPT-3 Small")
    assert pf_days(train_flops(non_embedding_params(small), 300e9)) < 0.7 * GPT3_TRAIN_PF_DAYS["GPT-3 Small"]


def test_pf_day_arithmetic():
    assert pf_days(8.64e19) == pytest.approx(1.0, rel=1e-12)
    assert train_flops(175e9, 300e9) == pytest.approx(3.15e23, rel=1e-12)


@pytest.mark.parametrize("n, d", [(0, 1e9), (1e6, -1), (float("nan"), 1e9)])
def test_train_flops_refuses_nonpositive_sizes(n, d):
    with pytest.raises(ValueError, match="positive n_params and tokens"):
        train_flops(n, d)


def test_compute_without_published_tokens_is_refused():
    with pytest.raises(ValueError, match="GPT-2 XL: its paper states no training token count"):
        train_compute(member("GPT-2 XL"))


# ---- the power-law fit ------------------------------------------------------------------

TRUTH = dict(E=1.69, A=406.4, alpha=0.34)      # Hoffmann et al.'s N-term: losses 5.3 at 1e6, 2.0 at 1e9
LADDER = np.geomspace(1e6, 1e9, 6)             # six sizes over three decades
NEXT = 1e10                                    # the run to predict: ten times the largest


def law(N, E=TRUTH["E"], A=TRUTH["A"], alpha=TRUTH["alpha"]):
    return E + A * np.asarray(N, dtype=float) ** -alpha


@pytest.mark.parametrize("E", [1.69, 0.0])
def test_an_exact_ladder_gives_back_its_law(E):
    """Noise-free losses: E, A and alpha come back to 1e-6 (the golden section stops at ~1e-11 of
    alpha; the rest is rounding). E = 0 (Kaplan's form) is found too, not clipped or refused."""
    fit = fit_power_law(LADDER, law(LADDER, E=E))
    assert fit.E == pytest.approx(E, abs=1e-6)
    assert (fit.A, fit.alpha) == (pytest.approx(TRUTH["A"], rel=1e-6), pytest.approx(TRUTH["alpha"], rel=1e-6))
    assert predict(fit, NEXT)["loss"] == pytest.approx(law(NEXT, E=E), rel=1e-9)


def test_three_runs_fit_exactly_and_give_no_interval():
    """Three points, three parameters: no degree of freedom is left to measure the noise."""
    fit = fit_power_law(LADDER[::2], law(LADDER[::2]))
    assert fit.dof == 0 and fit.covariance is None and np.isnan(fit.s)
    assert fit.alpha == pytest.approx(TRUTH["alpha"], rel=1e-6)
    assert predict(fit, NEXT)["interval"] is None
    assert standard_errors(fit) == {"E": None, "A": None, "alpha": None}


def _noisy_ladders(seeds=300, sigma=0.02, E=TRUTH["E"]):
    """Fit `seeds` ladders with Gaussian noise of sd `sigma` on each loss; for each: the 90% interval
    of the curve at NEXT, the 90% interval for a new run there, that run's loss, alpha and its error."""
    rows = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        fit = fit_power_law(LADDER, law(LADDER, E=E) + sigma * rng.normal(size=LADDER.shape))
        rows.append((predict(fit, NEXT)["interval"], predict(fit, NEXT, new_run=True)["interval"],
                     law(NEXT, E=E) + sigma * rng.normal(), fit.alpha, standard_errors(fit)["alpha"]))
    return rows


@pytest.fixture(scope="module")
def ladders():
    return _noisy_ladders()


def _coverage(intervals, values):
    return np.mean([low <= value <= high for (low, high), value in zip(intervals, values)])


# 300 independent ladders: a true 90% interval covers 0.90 +- 0.017 (binomial sd), so 0.85 to 0.95 is
# +-2.9 sd, room for the delta method's linearization too; a normal quantile in place of t (3 degrees
# of freedom: 1.64 against 2.35) covers 0.82 here and fails.
def test_the_curve_interval_covers_the_truth_about_90_percent_of_the_time(ladders):
    assert 0.85 <= _coverage([row[0] for row in ladders], [law(NEXT)] * len(ladders)) <= 0.95


def test_the_new_run_interval_covers_the_next_runs_loss_about_90_percent_of_the_time(ladders):
    assert 0.85 <= _coverage([row[1] for row in ladders], [row[2] for row in ladders]) <= 0.95


def test_alphas_standard_error_matches_its_spread_over_ladders(ladders):
    """The delta method's sd of alpha against the sd of the 300 fitted alphas: within 25% (the sample
    sd of 300 draws is itself uncertain by 4%, the per-ladder estimate of s by far more)."""
    alphas, errors = np.array([row[3] for row in ladders]), np.array([row[4] for row in ladders])
    assert np.median(errors) == pytest.approx(alphas.std(), rel=0.25)
    assert abs(np.mean(alphas) - TRUTH["alpha"]) < 3 * alphas.std() / np.sqrt(len(alphas))


def test_an_e_zero_truth_fits_and_covers_too():
    """Kaplan's pure power law under noise: E lands on either side of 0 and the fit still covers
    (100 ladders: 0.90 +- 0.03, so 0.80 to 0.98 is about 3 sd)."""
    rows = _noisy_ladders(seeds=100, sigma=0.01, E=0.0)
    assert 0.80 <= _coverage([row[0] for row in rows], [law(NEXT, E=0.0)] * len(rows)) <= 0.98


def test_the_interval_widens_away_from_the_ladder():
    fit = fit_power_law(LADDER, law(LADDER) + 0.02 * np.random.default_rng(0).normal(size=LADDER.shape))
    prediction = predict(fit, [3e7, 1e10, 1e12])
    low, high = prediction["interval"]
    assert prediction["loss"].shape == (3,) and np.all(np.diff(high - low) > 0)


def test_t_quantiles_match_the_tables():
    """Printed tables give four decimals: 6.3138 (q 0.95, 1 dof), 2.9200 (0.95, 2), 2.2281 (0.975, 10);
    1.6449 is the normal's 0.95 quantile, which t approaches (10,000 dof: 1.6450)."""
    assert t_quantile(0.95, 1) == pytest.approx(6.3138, abs=1e-4)
    assert t_quantile(0.95, 2) == pytest.approx(2.9200, abs=1e-4)
    assert t_quantile(0.975, 10) == pytest.approx(2.2281, abs=1e-4)
    assert t_quantile(0.95, 10_000) == pytest.approx(1.6449, abs=2e-4)
    assert t_quantile(0.05, 3) == pytest.approx(-t_quantile(0.95, 3), abs=1e-9)


@pytest.mark.parametrize("params, losses, message", [
    ([1e6, 1e7], [3.0, 2.5], "needs runs at 3 or more distinct sizes, got 2"),
    ([1e6, 1e7, 1e7, 1e6], [3.0, 2.5, 2.6, 3.1], "needs runs at 3 or more distinct sizes, got 2"),
    ([1e6, -1e7, 1e8], [3.0, 2.5, 2.2], "params must be positive numbers, got -10000000.0"),
    ([1e6, 1e7, 1e8], [3.0, float("nan"), 2.2], "losses must be positive numbers, got nan"),
    ([1e6, 1e7, 1e8], [3.0, 2.5], "equal length"),
    ([1e6, 1e7, 1e8, 1e9], [4.0, 3.0, 2.0, 1.0], "did not converge.*alpha -> 0"),
    ([1e6, 1e7, 1e8, 1e9], [1.0, 2.0, 3.0, 4.5], "did not converge: the losses do not fall as N grows"),
    ([1e6, 1e7, 1e8, 1e9], [4.0, 3.0, 3.0, 3.0], "did not converge.*alpha -> infinity"),
])
def test_a_ladder_that_cannot_be_fitted_is_named(params, losses, message):
    with pytest.raises(ValueError, match=message):
        fit_power_law(params, losses)


def test_sizes_too_close_together_are_refused():
    """Five sizes within 0.04% of each other: with noise the grid finds a minimum, but A and alpha
    trade off almost exactly (condition number above 1e7 for every seed tried)."""
    close = np.geomspace(1e8, 1.0004e8, 5)
    with pytest.raises(ValueError, match="lie too close together to tell A from alpha"):
        fit_power_law(close, law(close) + 1e-6 * np.random.default_rng(1).normal(size=5))


def test_a_narrow_ladder_fits_but_a_one_percent_ladder_does_not():
    """Exact losses: sizes spanning 1.5x still give back alpha; sizes spanning 1% are refused, though
    the profile finds the true alpha there too (the limit sits between their conditions, fit.py)."""
    narrow = np.geomspace(1e8 / 1.22, 1e8 * 1.22, 6)
    assert fit_power_law(narrow, law(narrow)).alpha == pytest.approx(TRUTH["alpha"], rel=1e-6)
    one_percent = np.geomspace(1e8 / 1.005, 1e8 * 1.005, 6)
    with pytest.raises(ValueError, match="too close together"):
        fit_power_law(one_percent, law(one_percent))


@pytest.mark.parametrize("kwargs, message", [(dict(level=1.0), "level must be between 0 and 1"),
                                             (dict(n_params=0), "n_params must be positive")])
def test_predict_refuses_bad_arguments(kwargs, message):
    fit = fit_power_law(LADDER, law(LADDER) + 0.01 * np.random.default_rng(0).normal(size=LADDER.shape))
    with pytest.raises(ValueError, match=message):
        predict(fit, **{"n_params": NEXT, **kwargs})


# ---- the command line -------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args, cwd=ROOT):
    """`python -m lib.scaling ARGS` run from `cwd`, lib importable from anywhere."""
    return subprocess.run([sys.executable, "-m", "lib.scaling", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _write_runs(path, header="params,loss,tokens", rows=None):
    rows = rows if rows is not None else [f"{n:.6g},{loss:.6f},{20 * n:.6g}" for n, loss in zip(LADDER, law(LADDER))]
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_the_command_line_fits_and_predicts_in_json(tmp_path):
    run = _cli("fit", _write_runs(tmp_path / "runs.csv"), "--predict", NEXT, "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert set(result) == {"E", "A", "alpha", "prediction", "interval"}
    assert result["alpha"] == pytest.approx(TRUTH["alpha"], rel=1e-4)          # six-figure CSV cells
    assert result["prediction"] == pytest.approx(law(NEXT), rel=1e-4)
    assert result["interval"][0] < result["prediction"] < result["interval"][1]


def test_the_command_line_prints_the_fit_in_words(tmp_path):
    run = _cli("fit", _write_runs(tmp_path / "runs.csv"), "--predict", NEXT)
    assert run.returncode == 0, run.stderr
    assert "alpha = 0.34" in run.stdout and "predicted loss at N = 1e+10: 1.85" in run.stdout
    assert "90% interval" in run.stdout


def test_without_predict_the_json_has_no_prediction(tmp_path):
    result = json.loads(_cli("fit", _write_runs(tmp_path / "runs.csv"), "--json").stdout)
    assert result["prediction"] is None and result["interval"] is None


@pytest.mark.parametrize("header, rows, message", [
    (None, None, "cannot read .*missing.csv: No such file or directory"),
    ("params,tokens", ["1e6,1e9", "1e7,1e9", "1e8,1e9"], "no column 'loss' in its header"),
    ("size,loss", ["1e6,3", "1e7,2.5", "1e8,2.2"], "no column 'params' in its header"),
    ("params,loss", ["1e6,3", "1e7,two", "1e8,2.2"], r"line 3: loss 'two' is not a number"),
    ("params,loss", ["1e6,3", "-1e7,2.5", "1e8,2.2"], "params must be positive numbers, got -10000000.0"),
    ("params,loss", ["1e6,3", "1e7,0", "1e8,2.2"], "losses must be positive numbers, got 0.0"),
    ("params,loss", ["1e6,3", "1e7,2.5"], "needs runs at 3 or more distinct sizes, got 2"),
    ("params,loss", ["1e6,4", "1e7,3", "1e8,2", "1e9,1"], "did not converge"),
])
def test_bad_input_is_one_line_and_exit_status_2(tmp_path, header, rows, message):
    path = tmp_path / "missing.csv" if header is None else _write_runs(tmp_path / "runs.csv", header, rows)
    run = _cli("fit", path)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert re.search(message, run.stderr), run.stderr


@pytest.mark.parametrize("args, message", [(["fit"], "required: RUNS.csv"),
                                           (["fit", "runs.csv", "--predict", "many"], "invalid float value: 'many'"),
                                           (["fit", "runs.csv", "--predict", "0"], "--predict 0: expected a positive")])
def test_bad_options_are_one_line_and_exit_status_2(tmp_path, args, message):
    _write_runs(tmp_path / "runs.csv")
    run = _cli(*args, cwd=tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and message in run.stderr, run.stderr


# ---- in-context learning ----------------------------------------------------------------

PERIOD, T = 10, 20                             # ten random tokens, then the same ten again


def _head(target):
    """A (T, T) attention pattern: each query i puts all its weight on key target(i) (clipped to [0, i])."""
    attn = np.zeros((T, T))
    rows = np.arange(T)
    attn[rows, np.clip(target(rows), 0, rows)] = 1.0
    return attn


def _uniform_head():
    return np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]


def test_an_induction_head_scores_1_and_others_0():
    """Layer 0: induction, previous-token, duplicate-token (to i - period) heads; layer 1: uniform."""
    heads = [_head(lambda i: i - PERIOD + 1), _head(lambda i: i - 1), _head(lambda i: i - PERIOD)]
    attn = np.stack([np.stack(heads), np.stack([_uniform_head()] * 3)])        # (2, 3, T, T)
    score = prefix_matching_score(attn, PERIOD)
    assert score.shape == (2, 3)
    np.testing.assert_allclose(score[0], [1.0, 0.0, 0.0], atol=1e-12)
    uniform = np.mean(1 / np.arange(PERIOD + 1, T + 1))                       # 1 / (i + 1) for i in the repeat
    np.testing.assert_allclose(score[1], uniform, rtol=1e-12)
    assert uniform == pytest.approx(np.log(2) / PERIOD, rel=0.1)              # ln 2 / period, the docstring's


def test_a_batch_of_attention_is_averaged_over_its_sequences():
    induction, uniform = _head(lambda i: i - PERIOD + 1)[None, None], _uniform_head()[None, None]
    attn = np.stack([induction, uniform])                                      # (2, 1, 1, T, T)
    expected = (prefix_matching_score(induction, PERIOD) + prefix_matching_score(uniform, PERIOD)) / 2
    np.testing.assert_allclose(prefix_matching_score(attn, PERIOD), expected, rtol=1e-12)


@pytest.mark.parametrize("attn, period, message", [
    (np.zeros((3, T, T)), PERIOD, r"attn must be .* got shape \(3, 20, 20\)"),
    (np.zeros((1, 1, T, T - 1)), PERIOD, "attn must be"),
    (np.zeros((1, 1, T, T)), T, "period must be an integer from 1 to T - 1 = 19"),
    (np.zeros((1, 1, T, T)), 2.5, "period must be an integer"),
])
def test_prefix_matching_refuses_bad_input(attn, period, message):
    with pytest.raises(ValueError, match=message):
        prefix_matching_score(attn, period)


def test_in_context_positions_are_olssons_scaled_to_the_context():
    assert in_context_positions(512) == (50, 500)                   # Olsson et al.'s own context
    assert in_context_positions(1024) == (100, 1000)
    assert in_context_positions(64) == (6, 62)                      # 50 and 500 times 64 / 512, rounded
    assert in_context_positions(2) == (1, 2)
    with pytest.raises(ValueError, match="a context of 1 tokens is too short"):
        in_context_positions(1)


def test_in_context_score_is_late_minus_early():
    """Loss = its column index: the 500th token (column 499) minus the 50th (column 49) is 450."""
    assert in_context_score(np.arange(512.0)) == pytest.approx(450.0)
    assert in_context_score(np.arange(64.0)) == pytest.approx(62 - 6)
    assert in_context_score(np.arange(64.0), early=1, late=64) == pytest.approx(63.0)


def test_a_model_that_learns_in_context_scores_below_zero():
    """Loss 2 + 3 / k at the k-th token over a batch with noise: the mean over 512 sequences gives
    3/500 - 3/50 = -0.054 within 0.02 (the difference of two means of 512 draws of sd 0.1 has sd
    0.006: 0.02 is over 3 sd)."""
    k = np.arange(1, 513)
    loss = 2 + 3 / k + 0.1 * np.random.default_rng(0).normal(size=(512, 512))
    assert in_context_score(loss) == pytest.approx(3 / 500 - 3 / 50, abs=0.02)
    assert in_context_score(np.full((4, 512), 2.0)) == 0.0


@pytest.mark.parametrize("loss, kwargs, message", [
    (np.zeros((2, 3, 4)), {}, r"per_position_loss must be \(B, T\) or \(T,\), got shape \(2, 3, 4\)"),
    (np.zeros(64), dict(early=10, late=10), "1 <= early < late <= T = 64, got 10 and 10"),
    (np.zeros(64), dict(early=0, late=10), "got 0 and 10"),
    (np.zeros(64), dict(early=0), "got 0 and 62"),
    (np.zeros(64), dict(early=3, late=65), "got 3 and 65"),
])
def test_in_context_score_refuses_bad_input(loss, kwargs, message):
    with pytest.raises(ValueError, match=message):
        in_context_score(loss, **kwargs)
