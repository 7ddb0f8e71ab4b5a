"""GPT-1 style fine-tuning (chapter 7): the word-order task's data and splits, the two twins'
new token rows, classification head and L3 = L2 + lm_weight * L1, the loop, the experiment's
cache, and the book build's check that the experiment ran before it.

Tolerances are tests/test_model.py's: losses and logits within 1e-4 in float32; gradients per
tensor ||g_numpy - g_torch|| / ||g_torch|| <= 1e-4 in float32, <= 1e-8 in float64.
"""
import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import lib.finetune as ft
from lib import numpy_twin as nt
from lib import torch_twin as tt
from lib.config import GPTConfig
from lib.numpy_twin import finetune as nf
from lib.shakespeare import shakespeare_plays
from lib.torch_twin import finetune as tf


def tiny(**kw):
    return GPTConfig(**{**dict(vocab_size=256, n_ctx=32, n_layer=2, n_head=4, n_embd=32), **kw})


# ---- the task -----------------------------------------------------------------------------------
def test_folds_partition_the_plays_and_hold_every_genre():
    plays = {p["slug"]: p["genre"] for p in shakespeare_plays()}
    for n_folds, sizes in ((2, [19, 19]), (4, [9, 9, 10, 10])):
        folds = ft.play_folds(n_folds)
        flat = [s for f in folds for s in f]
        assert sorted(flat) == sorted(plays) and len(flat) == 38 == len(set(flat))
        assert sorted(len(f) for f in folds) == sizes
        for fold in folds:
            assert {plays[s] for s in fold} == set(ft.GENRES)
        assert ft.play_folds(n_folds) == folds                # seeded
    with pytest.raises(ValueError, match="n_folds must be an integer from 2 to 4.*got 5"):
        ft.play_folds(5)
    with pytest.raises(ValueError, match=r"fold must be in \[0, 2\), got 2"):
        ft.split(2)


@pytest.mark.parametrize("fold", range(ft.N_FOLDS))
def test_test_plays_are_in_neither_the_training_set_nor_the_pretraining_text(fold):
    plays = {p["slug"]: p["text"] for p in shakespeare_plays()}
    train, test = ft.split(fold)
    assert not set(train) & set(test) and len(train) + len(test) == 38
    text = ft.pretraining_text(fold)
    assert all(plays[s] in text for s in train)
    assert not any(plays[s] in text for s in test)
    assert len(text) == sum(len(plays[s]) for s in train) + len(train) - 1


def test_encode_example_layout():
    start, delim, classify = ft.special_ids(256)
    assert (start, delim, classify) == (256, 257, 258)
    ids = ft.encode_example([np.array([104, 105]), np.array([33])])
    np.testing.assert_array_equal(ids, [256, 104, 105, 257, 33, 258])
    np.testing.assert_array_equal(ft.encode_example([np.array([104, 105])]), [256, 104, 105, 258])
    assert ids.dtype == np.int64


def test_shuffle_keeps_the_bytes_and_the_first_and_last_word():
    passage = b"To be, or not to be, that is the qu"
    rng = np.random.default_rng(0)
    shuffled = [ft.shuffle_words(passage, rng) for _ in range(20)]
    for s in shuffled:
        assert sorted(s) == sorted(passage) and len(s) == len(passage)
        assert s.split(b" ")[0] == b"To" and s.split(b" ")[-1] == b"qu"
        assert sorted(s.split(b" ")) == sorted(passage.split(b" "))
    assert len(set(shuffled)) > 10                                     # the middle words do move
    assert ft.shuffle_words(b"one two", rng) == b"one two"             # no middle word: nothing to reorder
    assert ft.shuffle_words(b"one", rng) == b"one"
    assert [ft.shuffle_words(passage, np.random.default_rng(5)) for _ in range(2)] == \
        [ft.shuffle_words(passage, np.random.default_rng(5))] * 2      # seeded


def test_word_order_examples():
    plays = {p["slug"]: p["text"].encode() for p in shakespeare_plays()}
    slugs = ["hamlet", "the-tempest"] if "hamlet" in plays else sorted(plays)[:2]
    x, y = ft.word_order_examples(slugs, 5, passage_len=24, seed=3)
    assert x.shape == (10, 26) and x.dtype == np.int64 and y.shape == (10,)
    assert list(y) == [1, 0] * 5 and ft.LABELS[1] == "as written"   # balanced: each passage and its shuffle
    assert (x[:, 0] == 256).all() and (x[:, -1] == 258).all()
    for written, shuffled in zip(x[0::2, 1:-1], x[1::2, 1:-1]):
        a, b = bytes(written.astype(np.uint8)), bytes(shuffled.astype(np.uint8))
        assert any(b"\n" + a in plays[s] for s in slugs)                # a passage of one of the plays, from a line start
        assert a != b and sorted(a) == sorted(b)
    np.testing.assert_array_equal(x, ft.word_order_examples(slugs, 5, passage_len=24, seed=3)[0])   # seeded
    np.testing.assert_array_equal(ft.word_order_examples(slugs, 3, passage_len=24, seed=3)[0], x[:6])  # nested sizes
    with pytest.raises(ValueError, match=r"unknown plays \['no-such-play'\]"):
        ft.word_order_examples(["no-such-play"], 1)


def test_training_and_test_passages_come_from_their_own_plays():
    """The experiment's examples for a split: training passages from its training plays only, test
    passages from its test plays only."""
    plays = {p["slug"]: p["text"].encode() for p in shakespeare_plays()}
    train, test = ft.split(0)
    for slugs, other in ((train, test), (test, train)):
        x, _ = ft.word_order_examples(slugs, 20, seed=1)
        for row in x[0::2, 1:-1]:
            passage = b"\n" + bytes(row.astype(np.uint8))
            assert any(passage in plays[s] for s in slugs) and not any(passage in plays[s] for s in other)


# ---- the twins agree ------------------------------------------------------------------------------
def test_add_tokens_and_head_same_weights_in_both_twins():
    cfg = tiny()
    a, b = nf.add_tokens(nt.GPT(cfg, seed=1), 3, seed=2), tf.add_tokens(tt.GPT(cfg, seed=1), 3, seed=2)
    assert a.config.vocab_size == b.config.vocab_size == 259
    np.testing.assert_array_equal(a.wte.weight, b.wte.weight.detach().numpy())
    np.testing.assert_array_equal(a.wte.weight[:256], nt.GPT(cfg, seed=1).wte.weight)   # old rows kept
    assert abs(a.wte.weight[256:].std() - 0.02) < 0.01
    np.testing.assert_array_equal(a.h[1].mlp.c_fc.weight, nt.GPT(cfg, seed=1).h[1].mlp.c_fc.weight)
    ha, hb = nf.ClassifierHead(32, 6, seed=4), tf.ClassifierHead(32, 6, seed=4)
    np.testing.assert_array_equal(ha.weight, hb.weight.detach().numpy())
    assert not ha.bias.any() and not hb.bias.detach().any()


def both(cfg, dtype, lm_weight):
    """Both twins' L3, L2, L1 and gradients (model and head) on one batch of the genre layout."""
    rng = np.random.default_rng(0)
    x = np.concatenate([np.full((4, 1), 256), rng.integers(0, 256, (4, 10)), np.full((4, 1), 258)], axis=1)
    labels = rng.integers(0, 6, 4)
    model, head = nf.add_tokens(nt.GPT(cfg), 3), nf.ClassifierHead(cfg.n_embd, 6)
    model.astype(dtype), head.astype(dtype)
    model.zero_grad(), head.zero_grad()
    losses = nf.finetune_loss(model, head, x, labels, lm_weight)
    g_numpy = {**model.grads, **{f"head.{n}": g for n, g in head.named_grads()}}
    tdtype = torch.float64 if dtype == np.float64 else torch.float32
    tmodel, thead = tf.add_tokens(tt.GPT(cfg), 3).to(tdtype), tf.ClassifierHead(cfg.n_embd, 6).to(tdtype)
    tlosses = tf.finetune_loss(tmodel, thead, torch.as_tensor(x), torch.as_tensor(labels), lm_weight)
    tlosses[0].backward()
    g_torch = {**{n: p.grad.numpy() for n, p in tmodel.named_parameters()},
               **{f"head.{n}": p.grad.numpy() for n, p in thead.named_parameters()}}
    return losses, [t.item() for t in tlosses], g_numpy, g_torch


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-8)])
@pytest.mark.parametrize("lm_weight", [0.5, 0.0])
@pytest.mark.parametrize("cfg", [tiny(), tiny(norm="rmsnorm", position="rope", mlp="swiglu", n_kv_head=2)],
                         ids=["gpt2", "modern"])
def test_loss_and_gradients_match_between_twins(cfg, lm_weight, dtype, tol):
    losses, tlosses, g_numpy, g_torch = both(cfg, dtype, lm_weight)
    np.testing.assert_allclose(losses, tlosses, rtol=tol, atol=0)
    assert losses[0] == pytest.approx(losses[1] + lm_weight * losses[2], rel=1e-12)
    assert list(g_numpy) == list(g_torch)
    for name in g_torch:
        rel = np.linalg.norm(g_numpy[name] - g_torch[name]) / np.linalg.norm(g_torch[name])
        assert rel <= tol, f"{name}: relative gradient error {rel:.2e} > {tol}"


def test_head_reads_only_the_last_position():
    """The head reads the classify token's position only, so the gradient it sends back into
    the hidden states is zero at every other position."""
    head = nf.ClassifierHead(8, 3)
    hidden = np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)
    scores, cache = head.forward(hidden)
    assert scores.shape == (2, 3)
    head.zero_grad()
    dhidden = head.backward(np.ones((2, 3), np.float32), cache)
    assert dhidden.shape == (2, 5, 8) and not dhidden[:, :-1].any() and dhidden[:, -1].any()


@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_finetuning_learns_a_separable_task(twin):
    """Label = which of three bytes follows the start token: a fresh tiny model must learn it
    (accuracy 1 on new examples) and the loss must fall."""
    rng = np.random.default_rng(2)

    def examples(n):
        labels = rng.integers(0, 3, n)
        body = rng.integers(0, 256, (n, 8))
        body[:, 0] = np.array([10, 20, 30])[labels]
        return np.concatenate([np.full((n, 1), 256), body, np.full((n, 1), 258)], axis=1), labels
    GPT = nt.GPT if twin == "numpy" else tt.GPT
    twin_ft = nf if twin == "numpy" else tf
    model, head = twin_ft.add_tokens(GPT(tiny()), 3), twin_ft.ClassifierHead(32, 3)
    x, y = examples(256)
    history = ft.finetune(model, head, x, y, replace(ft.FINETUNE, steps=80, batch_size=32, lr=3e-3), progress=False)
    assert len(history["loss"]) == 80 and history["step"][-1] == 80
    assert np.mean(history["cls_loss"][-4:]) < 0.5 * np.mean(history["cls_loss"][:4])
    x_new, y_new = examples(64)
    assert ft.accuracy(model, head, x_new, y_new) == 1.0


def test_torch_finetuning_reads_the_device_after_its_steps_only(monkeypatch):
    """No host read between fine-tuning steps (each would make a GPU wait): the reads counted
    before each step stay the same from the first step to the last."""
    from test_train import count_host_reads
    rng = np.random.default_rng(4)
    x = np.concatenate([np.full((16, 1), 256), rng.integers(0, 256, (16, 6)), np.full((16, 1), 258)], axis=1)
    model, head = tf.add_tokens(tt.GPT(tiny()), 3), tf.ClassifierHead(32, 3)
    model._check_idx = lambda *args: None              # reads min and max of the ids, on the CPU only
    reads, before_each_step = count_host_reads(monkeypatch), []
    step = tf.finetune_step
    monkeypatch.setattr(tf, "finetune_step", lambda *a: (before_each_step.append(len(reads)), step(*a))[1])
    history = ft.finetune(model, head, x, rng.integers(0, 3, 16), replace(ft.FINETUNE, steps=6, batch_size=4),
                          progress=False)
    assert len(before_each_step) == 6 and len(set(before_each_step)) == 1, before_each_step
    assert all(isinstance(v, float) and np.isfinite(v) for v in history["loss"])


def test_one_step_same_in_both_twins():
    """One fine-tuning step (AdamW, clipping) moves both twins' weights the same way."""
    cfg = tiny()
    rng = np.random.default_rng(3)
    x = np.concatenate([np.full((8, 1), 256), rng.integers(0, 256, (8, 12)), np.full((8, 1), 258)], axis=1)
    y = rng.integers(0, 6, 8)
    a, ha = nf.add_tokens(nt.GPT(cfg), 3), nf.ClassifierHead(32, 6)
    b, hb = tf.add_tokens(tt.GPT(cfg), 3), tf.ClassifierHead(32, 6)
    la = nf.finetune_step(a, ha, nf.make_optimizer(a, ha, 1e-3, 0.01), x, y, 0.5, 1e-3, 1.0)
    lb = tf.finetune_step(b, hb, tf.make_optimizer(b, hb, 1e-3, 0.01), x, y, 0.5, 1e-3, 1.0)
    np.testing.assert_allclose(la, lb, rtol=1e-5)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert np.abs(p - q.detach().numpy()).max() <= 1e-5, n            # a step moves weights by ~1e-3
    assert np.abs(ha.weight - hb.weight.detach().numpy()).max() <= 1e-5


def test_bad_finetune_arguments():
    model, head = ft.classifier(nt.GPT(tiny()))
    x = np.zeros((4, 6), np.int64)
    with pytest.raises(ValueError, match=r"labels \(N,\) with N >= 1, got \(4, 6\) and \(3,\)"):
        ft.finetune(model, head, x, np.zeros(3, np.int64), progress=False)


@pytest.mark.parametrize("field, value, message", [
    ("lm_weight", -1, "lm_weight must be a number >= 0, got -1"),
    ("steps", 0, "steps must be an integer >= 1, got 0"),
    ("batch_size", 2.0, "batch_size must be an integer >= 1, got 2.0"),
    ("lr", 0.0, r"lr must be a number > 0, got 0.0"),
    ("warmup_frac", 1.5, r"warmup_frac must be a number in \[0, 1\], got 1.5"),
    ("seed", -1, "seed must be an integer >= 0, got -1")])
def test_bad_finetune_settings_fail_where_they_are_built(field, value, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        replace(ft.FINETUNE, **{field: value})


def test_pretrained_is_trained_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    options = dict(config=tiny(n_ctx=16), recipe=dict(max_iters=3, batch_size=2, warmup_iters=1), progress=False)
    folder = ft.pretrained_folder(1, **options)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert ft.pretrained_folder(1, **options) == folder and (folder / "model.safetensors").stat().st_mtime_ns == stamp
    assert ft.pretrained_folder(0, **options) != folder                  # another split, another model
    model = ft.pretrained(1, twin="numpy", **options)
    assert model.config == tiny(n_ctx=16)


def test_accuracy_table_and_its_text():
    rows = [{"split": k, "pretrained": [0.6, 0.7 + 0.1 * k], "scratch": [0.5, 0.55]} for k in range(2)]
    result = {"settings": {"sizes": [32, 256]}, "rows": rows}
    table = ft.accuracy_table(result)
    assert table.shape == (2, 2, 2) and np.allclose(table[0, :, 1], [0.7, 0.8])   # (inits, splits, sizes)
    lines = ft.format_table(result).splitlines()
    assert len(lines) == 1 + 2 and "pretrained" in lines[0] and "scratch" in lines[0]
    assert lines[2].split() == ["256", "0.700", "0.800", "0.750", "0.550", "0.550", "0.550"]


def test_experiment_runs_once_and_is_cached(tmp_path, monkeypatch):
    """A tiny run of the whole experiment: one accuracy per split, start and size; the second call
    reads the file that the first wrote; other settings, another file."""
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    options = dict(sizes=(2, 4), config=tiny(n_ctx=16, n_layer=1), pretrain=dict(max_iters=2, batch_size=2),
                   task=dict(passage_len=12, test_passages=4), finetuning=replace(ft.FINETUNE, steps=2, batch_size=2))
    assert not ft.experiment_file(**options).exists()
    result = ft.word_order_experiment(progress=False, **options)
    assert ft.experiment_file(**options).is_file()
    assert [row["split"] for row in result["rows"]] == list(range(ft.N_FOLDS))
    assert all(row["n_test"] == 8 and len(row["pretrained"]) == len(row["scratch"]) == 2 for row in result["rows"])
    assert ft.accuracy_table(result).shape == (2, ft.N_FOLDS, 2)
    assert ft.word_order_experiment(progress=False, **options) == result
    assert ft.experiment_file(**{**options, "sizes": (2,)}) != ft.experiment_file(**options)
    with pytest.raises(ValueError, match=r"sizes must be even numbers of examples >= 2.*got \(3,\)"):
        ft.word_order_experiment(sizes=(3,))


def load_build_book():
    spec = importlib.util.spec_from_file_location("build_book", Path(__file__).parent.parent / "tools" / "build_book.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_book_build_stops_first_when_the_experiment_is_not_cached(tmp_path, monkeypatch, capsys):
    """A cold cache: the build says what to run and exits non-zero before building anything;
    with the experiment's file there, the check passes."""
    build_book = load_build_book()
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    monkeypatch.setattr(build_book.subprocess, "Popen", lambda *a, **k: pytest.fail("the build started"))
    assert build_book.main([]) != 0
    out = capsys.readouterr().out
    assert "python -m lib.finetune" in out and "tools/install.sh" in out
    assert "from lib.posttrain.experiment import experiment; experiment()" in out
    import lib.posttrain.experiment
    for path in (ft.experiment_file(), lib.posttrain.experiment.experiment_file()):
        assert build_book.missing_results() != []
        path.parent.mkdir(parents=True)
        path.write_text("{}")
    assert build_book.missing_results() == []
