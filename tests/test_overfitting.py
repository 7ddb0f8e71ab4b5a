"""Chapter 5's dropout runs: both trained on first use, then read from the cache (a 3-step recipe
on random bytes in place of the corpus, a few seconds)."""
import numpy as np
import pytest

import lib.data
import lib.overfitting as overfitting


@pytest.fixture
def three_steps(tmp_path, monkeypatch):
    ids = np.random.default_rng(0).integers(0, 256, 6000).astype(np.uint16)
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    monkeypatch.setattr(lib.data, "load_corpus", lambda name, tokenizer: (ids[:5000], ids[5000:]))
    monkeypatch.setattr(overfitting, "RECIPE", {**overfitting.RECIPE, "max_iters": 3, "warmup_iters": 1, "batch_size": 2,
                                                "eval_interval": 3, "eval_iters": 1})
    return tmp_path


def test_dropout_runs_train_once_then_read_the_cache(three_steps, monkeypatch):
    import lib.train

    runs = overfitting.dropout_runs(progress=False)
    assert list(runs) == list(overfitting.DROPOUTS) == [0.0, 0.1]
    for history in runs.values():
        assert history["step"] == [1, 2, 3] and history["eval_step"] == [0, 3] and len(history["val_loss"]) == 2
    assert runs[0.0]["val_loss"][0] == runs[0.1]["val_loss"][0]         # same seed, same weights at step 0
    assert runs[0.0]["train_loss"] != runs[0.1]["train_loss"]           # dropout changes the training steps
    folders = sorted(p.name.rsplit("-", 1)[0] for p in (three_steps / "overfitting").iterdir())
    assert folders == ["dropout-0.0", "dropout-0.1"]

    def no_training(*args, **kwargs):
        raise AssertionError("trained again instead of reading the cache")

    monkeypatch.setattr(lib.train, "train", no_training)
    assert overfitting.dropout_runs(progress=False) == runs
