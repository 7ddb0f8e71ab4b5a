"""GPT-1 style fine-tuning (chapter 7): the genre task's data and splits, the two twins' new
token rows, classification head and L3 = L2 + lm_weight * L1, and the loop.

Tolerances are tests/test_model.py's: losses and logits within 1e-4 in float32; gradients per
tensor ||g_numpy - g_torch|| / ||g_torch|| <= 1e-4 in float32, <= 1e-8 in float64.
"""
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
    folds = ft.play_folds(4)
    flat = [s for f in folds for s in f]
    assert sorted(flat) == sorted(plays) and len(flat) == 38 == len(set(flat))
    assert sorted(len(f) for f in folds) == [9, 9, 10, 10]
    for fold in folds:
        assert {plays[s] for s in fold} == set(ft.GENRES)
    assert ft.play_folds(4) == folds                          # seeded
    with pytest.raises(ValueError, match="n_folds must be an integer from 2 to 4.*got 5"):
        ft.play_folds(5)
    with pytest.raises(ValueError, match=r"fold must be in \[0, 4\), got 4"):
        ft.split(4)


@pytest.mark.parametrize("fold", range(4))
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
    assert ids.dtype == np.int64


def test_genre_examples():
    plays = {p["slug"]: p for p in shakespeare_plays()}
    slugs = ["hamlet", "the-tempest"] if "hamlet" in plays else sorted(plays)[:2]
    x, y = ft.genre_examples(slugs, 5, segment_len=20, seed=3)
    assert x.shape == (10, 43) and y.shape == (10,)
    assert list(y) == [ft.GENRES.index(plays[s]["genre"]) for s in slugs for _ in range(5)]
    np.testing.assert_array_equal(x, ft.genre_examples(slugs, 5, segment_len=20, seed=3)[0])
    for row, slug in zip(x, [s for s in slugs for _ in range(5)]):
        assert (row[0], row[21], row[42]) == ft.special_ids()
        text = plays[slug]["text"].encode()
        for segment in (row[1:21], row[22:42]):
            piece = bytes(segment.astype(np.uint8))
            assert b"\n" + piece in text                        # an excerpt of its play, from a line start
    with pytest.raises(ValueError, match=r"unknown plays \['no-such-play'\]"):
        ft.genre_examples(["no-such-play"], 1)


def test_majority_baseline():
    assert ft.majority_baseline([0, 1, 1, 2], [1, 1, 0, 2, 2]) == 0.4


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
    history = ft.finetune(model, head, x, y, epochs=10, batch_size=32, lr=3e-3, progress=False)
    assert len(history["loss"]) == 80 and history["step"][-1] == 80
    assert np.mean(history["cls_loss"][-4:]) < 0.5 * np.mean(history["cls_loss"][:4])
    x_new, y_new = examples(64)
    assert ft.accuracy(model, head, x_new, y_new) == 1.0


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
    with pytest.raises(ValueError, match=r"labels \(N,\), got \(4, 6\) and \(3,\)"):
        ft.finetune(model, head, x, np.zeros(3, np.int64), progress=False)
    with pytest.raises(ValueError, match="lm_weight must be >= 0, got -1"):
        ft.finetune(model, head, x, np.zeros(4, np.int64), lm_weight=-1, progress=False)


def test_pretrained_is_trained_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    options = dict(config=tiny(n_ctx=16), recipe=dict(max_iters=3, batch_size=2, warmup_iters=1), progress=False)
    folder = ft.pretrained_folder(1, **options)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert ft.pretrained_folder(1, **options) == folder and (folder / "model.safetensors").stat().st_mtime_ns == stamp
    assert ft.pretrained_folder(2, **options) != folder                  # another split, another model
    model = ft.pretrained(1, twin="numpy", **options)
    assert model.config == tiny(n_ctx=16)


def test_accuracy_table_and_its_text():
    rows = [{"split": k, "majority": 0.3, "scratch": 0.30 + 0.01 * k, "scratch+L1": 0.31, "pretrained": 0.4,
             "pretrained+L1": 0.5} for k in range(4)]
    table = ft.accuracy_table({"rows": rows})
    assert table.shape == (4, 5) and np.allclose(table[:, 1], [0.30, 0.31, 0.32, 0.33])
    lines = ft.format_table({"rows": rows}).splitlines()
    assert lines[0].split() == ["split", *ft.COLUMNS] and len(lines) == 1 + 4 + 2
    assert lines[-2].split() == ["mean", "0.300", "0.315", "0.310", "0.400", "0.500"]
    assert lines[-1].split()[:3] == ["std", "0.000", "0.013"]        # sample standard deviation (ddof=1)
