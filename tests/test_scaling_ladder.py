"""lib.scaling.ladder: the prediction reads only the smaller rungs, the isoFLOP optimum, the
exact-answer task and its scores. No training here: cached results are written by hand."""
import json

import numpy as np
import pytest
import torch

from lib import torch_twin as tt
from lib.scaling import ladder as ld


def write_ladder(losses):
    """A cached result for each rung of the ladder, with these losses (and no trained model)."""
    for shape, loss in zip(ld.SHAPES, losses):
        config = ld.rung_config(*shape)
        n = ld.non_embedding(config)
        result = dict(n_layer=shape[0], n_embd=shape[1], params=n, tokens=ld.LADDER_TOKENS,
                      flops=6.0 * n * ld.LADDER_TOKENS, loss=loss, seconds=0.0, folder="none")
        ld.run_file(config, ld.LADDER_TOKENS).write_text(json.dumps(result))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty course cache in which nothing may train."""
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    (tmp_path / "scaling").mkdir()

    def no_training(*args, **kwargs):
        raise AssertionError("the prediction trained a model")
    monkeypatch.setattr("lib.pretrained.trained_folder", no_training)
    return tmp_path


def law(n):
    return 1.9 + 6.0 * np.asarray(n, float) ** -0.3


def test_the_prediction_cannot_see_the_largest_rung(cache):
    sizes = [ld.non_embedding(ld.rung_config(*s)) for s in ld.SHAPES]
    noise = np.array([0.004, -0.003, 0.002, -0.004, 0.003, 0.0])
    losses = list(law(sizes) + noise)
    write_ladder(losses)
    first = ld.prediction()
    for largest in (0.5, 9.0):                     # any result for the largest rung: the same prediction
        write_ladder(losses[:-1] + [largest])
        again = ld.prediction()
        assert again["loss"] == first["loss"] and again["interval"] == first["interval"]
    ld.run_file(ld.rung_config(*ld.SHAPES[-1]), ld.LADDER_TOKENS).unlink()
    assert ld.prediction()["loss"] == first["loss"]                   # nor its absence
    write_ladder([losses[0] + 0.05] + losses[1:])                    # a smaller rung does move it
    assert ld.prediction()["loss"] != first["loss"]
    lo, hi = first["interval"]
    assert lo < law(sizes[-1]) < hi and first["params"] == sizes[-1]


def test_ladder_spans_thirty_fold_in_six_sizes():
    sizes = [ld.non_embedding(ld.rung_config(*s)) for s in ld.SHAPES]
    assert len(sizes) >= 6 and sizes == sorted(sizes) and sizes[-1] / sizes[0] >= 30
    # about 12 L C^2 for the blocks, plus biases and LayerNorms (13 C per layer and ln_f's 2 C)
    for (n_layer, n_embd), n in zip(ld.SHAPES, sizes):
        assert n == 12 * n_layer * n_embd ** 2 + 13 * n_layer * n_embd + 2 * n_embd


@pytest.mark.parametrize("call, message", [
    (lambda: ld.recipe(100), "at least 16 steps"),
    (lambda: ld.rung_config(2, 20), "multiple of 8"),
    (lambda: ld.rung_config(0, 16), "n_layer >= 1"),
    (lambda: ld.optimum([{"params": 1e3, "loss": 2.0, "flops": 1e9}] * 2), "3 or more runs"),
])
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_recipe_is_the_same_but_for_its_length():
    short, long = ld.recipe(64 * 1024), ld.recipe(512 * 1024)
    assert short["max_iters"] == 64 and long["max_iters"] == 512
    assert {k: v for k, v in short.items() if k not in ("max_iters", "warmup_iters", "eval_interval")} == \
           {k: v for k, v in long.items() if k not in ("max_iters", "warmup_iters", "eval_interval")}


def test_optimum_finds_the_vertex_of_a_parabola_in_log_n():
    C, n_best = 1e10, 3000.0
    runs = [{"params": n, "flops": C, "loss": 2.5 + 0.1 * np.log(n / n_best) ** 2} for n in (500, 1e3, 2e3, 8e3, 2e4)]
    best = ld.optimum(runs)
    assert best["params"] == pytest.approx(n_best, rel=1e-6) and best["loss"] == pytest.approx(2.5)
    assert best["tokens_per_param"] == pytest.approx(C / (6 * n_best ** 2), rel=1e-6)
    flat_or_down = [dict(r, loss=3.0 - 0.01 * np.log(r["params"]) ** 2) for r in runs]
    with pytest.raises(ValueError, match="do not bend upward"):
        ld.optimum(flat_or_down)


def test_task_windows_end_with_the_answer():
    words = ld.common_words()
    assert len(words) == ld.COMMON_WORDS and words[0] == "that" and all(len(w) == 4 for w in words)
    task = ld.exact_answer_task()
    x, y = task["x"], task["y"]
    assert x.shape == y.shape and x.shape[1] == ld.CONTEXT and len(x) > 1000
    assert np.array_equal(x[:, 1:], y[:, :-1])                       # y: the bytes after x's
    for word, row in zip(task["words"], y):                          # the word's last letters, a space
        assert bytes(row[-ld.ANSWER_BYTES - 1:].astype(np.uint8)).decode() == word + " "
    assert set(task["words"]) == set(words)


def test_answer_scores_against_a_plain_computation():
    task = {k: v[:20] for k, v in ld.exact_answer_task().items()}
    model = tt.GPT(ld.rung_config(1, 16), seed=0)
    scores = ld.answer_scores(model, task)
    with torch.no_grad():
        probs = torch.softmax(model(torch.from_numpy(task["x"])).double(), -1).numpy()   # (20, T, V)
    k, y = ld.ANSWER_BYTES, task["y"]
    for i in range(len(y)):
        p = [probs[i, -k + j, y[i, -k + j]] for j in range(k)]
        assert np.allclose(scores["logprob"][i], np.log(p), atol=1e-9)
        assert scores["exact"][i] == all(probs[i, -k + j].argmax() == y[i, -k + j] for j in range(k))
    # a model made to predict each answer byte is exactly right on every item
    logits = np.full(probs.shape, -1e3)
    np.put_along_axis(logits, y[..., None], 0.0, -1)
    model.forward = lambda idx: torch.from_numpy(logits)
    assert ld.answer_scores(model, task)["exact"].all()
