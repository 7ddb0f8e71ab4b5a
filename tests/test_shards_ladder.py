"""lib.scaling.shards_ladder: rungs over GPT-2's vocabulary, one tiny rung trained on shards
written here, and the largest run's prediction from the others."""
import numpy as np
import pytest

from lib.scaling import ladder as ld
from lib.scaling import shards_ladder as sl
from lib.shards import load_shards, write_shards


def test_a_rung_is_the_plays_ladder_shape_over_gpt2_tokens():
    for shape in sl.GPU_SHAPES + sl.TINY_SHAPES:
        config, plays = sl.shard_config(*shape), ld.rung_config(*shape)
        assert config.vocab_size == 50257 and config.n_ctx == plays.n_ctx == ld.CONTEXT
        assert (config.n_layer, config.n_head, config.n_embd) == (plays.n_layer, plays.n_head, plays.n_embd)
        assert sl.non_embedding(config) == ld.non_embedding(plays)    # the vocabulary is left out of N
    sizes = [sl.non_embedding(sl.shard_config(*s)) for s in sl.GPU_SHAPES]
    assert sizes == sorted(sizes) and sizes[-1] == 9_864_320
    assert sizes[0] == ld.non_embedding(ld.rung_config(*ld.SHAPES[-1]))   # from the plays' largest rung up


def runs_on(law, sizes):
    return [{"params": n, "loss": float(law(n))} for n in sizes]


def test_the_prediction_holds_on_a_power_law_and_not_off_it():
    law = lambda n: 3.0 + 40.0 * n ** -0.25                            # noqa: E731
    sizes = [sl.non_embedding(sl.shard_config(*s)) for s in sl.GPU_SHAPES]
    rng = np.random.default_rng(0)
    runs = [{**r, "loss": r["loss"] + rng.normal(0, 1e-3)} for r in runs_on(law, sizes)]
    check = sl.check_prediction(runs[::-1])                                # in any order
    assert check["params"] == sizes[-1] and check["inside"]
    assert abs(check["loss"] - law(sizes[-1])) < 0.02
    runs[-1]["loss"] += 0.5                                                # the largest rung off the law
    assert not sl.check_prediction(runs)["inside"]
    with pytest.raises(ValueError, match="needs 5 or more runs"):
        sl.check_prediction(runs[:4])


@pytest.fixture
def shards(tmp_path, monkeypatch):
    """Shards of a few short texts (GPT-2's vocabulary read from the course cache), then a fresh
    course cache for the trainings."""
    texts = [f"Scene {i}. " + "To be, or not to be, that is the question. " * 40 for i in range(12)]
    write_shards(tmp_path / "shards", lambda skip: iter(texts[skip:]), {"test": 1}, shard_tokens=2_000,
                 val_tokens=1_200, progress_bar=False)
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path / "cache"))
    return load_shards(tmp_path / "shards")


def test_a_tiny_rung_trains_on_shards_once_and_learns(shards, monkeypatch):
    train, val = shards
    config = sl.shard_config(1, 8)
    run = sl.shard_run(config, sl.TINY_TOKENS, train, val, val_tokens=1_024)
    assert run == {"n_layer": 1, "n_embd": 8, "params": 888, "tokens": sl.TINY_TOKENS, "loss": run["loss"]}
    assert run["loss"] < np.log(50257)                    # below a uniform guess over GPT-2's tokens

    def no_training(*args, **kwargs):
        raise AssertionError("trained again")
    monkeypatch.setattr("lib.train.train", no_training)
    assert sl.shard_run(config, sl.TINY_TOKENS, train, val, val_tokens=1_024) == run
    with pytest.raises(ValueError, match="val must hold at least"):
        sl.shard_run(config, sl.TINY_TOKENS, train, val, val_tokens=len(val))
