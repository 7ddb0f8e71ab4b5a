"""GPT-1's four input formats (lib/gpt1_tasks.py and each twin's gpt1_formats.py): the sequences,
the tasks' labels checked against the plays, the order-free similarity score, the numpy twin's
backward against torch autograd, the generalised loop, and chapter 7's caches left as they were.

Tolerances are tests/test_finetune.py's: losses within 1e-4 in float32; gradients per tensor
||g_numpy - g_torch|| / ||g_torch|| <= 1e-8 in float64.
"""
from dataclasses import replace

import numpy as np
import pytest
import torch

import lib.finetune as ft
import lib.gpt1_tasks as g
from lib.shakespeare import shakespeare_plays
from lib import numpy_twin as nt
from lib import torch_twin as tt
from lib.config import GPTConfig
from lib.numpy_twin import finetune as nf
from lib.numpy_twin import gpt1_formats as ng
from lib.torch_twin import finetune as tf
from lib.torch_twin import gpt1_formats as tg

START, DELIM, EXTRACT = ft.special_ids()


def tiny(**kw):
    return GPTConfig(**{**dict(vocab_size=256, n_ctx=48, n_layer=2, n_head=4, n_embd=32), **kw})


def text(ids):
    return bytes(np.asarray(ids, np.uint8))


def parts(seq, extract):
    """The byte strings between a sequence's special tokens, after checking its layout."""
    seq = list(seq)
    assert seq[0] == START and seq[extract] == EXTRACT and all(t == g.PAD for t in seq[extract + 1:])
    body, out = seq[1:extract], [[]]
    for t in body:
        out.append([]) if t == DELIM else out[-1].append(t)
    return [text(p) for p in out]


# ---- the sequences --------------------------------------------------------------------------------
def test_the_four_layouts():
    a, b, c = np.array([104, 105]), np.array([33]), np.array([1, 2, 3])
    np.testing.assert_array_equal(g.classification_sequences(a)[0], [START, 104, 105, EXTRACT])
    np.testing.assert_array_equal(g.pair_sequences(a, b)[0], [START, 104, 105, DELIM, 33, EXTRACT])
    ab, ba = g.similarity_sequences(a, b)
    np.testing.assert_array_equal(ab, [START, 104, 105, DELIM, 33, EXTRACT])
    np.testing.assert_array_equal(ba, [START, 33, DELIM, 104, 105, EXTRACT])
    choices = g.choice_sequences(a, [b, c])
    assert [len(s) for s in choices] == [6, 8] and all(s[-1] == EXTRACT for s in choices)


def test_padding_puts_pad_after_each_extract():
    a, b, c = np.array([104, 105]), np.array([33]), np.array([1, 2, 3, 4])
    ex = g.pad_examples("choice", [g.choice_sequences(a, [b, c, a, b])], [1])
    assert ex.x.shape == (1, 4, 9) and ex.x.dtype == np.int64
    np.testing.assert_array_equal(ex.extract, [[5, 8, 6, 5]])
    for seq, e in zip(ex.x[0], ex.extract[0]):
        assert seq[e] == EXTRACT and (seq[e + 1:] == g.PAD).all()
    with pytest.raises(ValueError, match=r"each similarity example must be 2 sequence\(s\).*got \[1\]"):
        g.pad_examples("similarity", [g.pair_sequences(a, b)], [0])
    with pytest.raises(ValueError, match=r"format must be one of .*got 'entailment'"):
        g.pad_examples("entailment", [g.pair_sequences(a, b)], [0])


# ---- the tasks -------------------------------------------------------------------------------------
SLUGS = ft.split(0)[1][:3]
PLAYS = {p["slug"]: p["text"] for p in shakespeare_plays()}


def speech_of(slug):
    """{usable line: its speech's index} of a play."""
    return {line: k for k, lines in enumerate(g.speech_lines(slug)) for line in lines if line}


def follows(slug, a, b):
    return any(x == a and y == b for lines in g.speech_lines(slug) for x, y in zip(lines, lines[1:]))


def test_usable_lines_occur_once_and_fit():
    for slug in SLUGS:
        lines = [line for lines in g.speech_lines(slug) for line in lines if line]
        assert len(lines) == len(set(lines)) > 100
        assert all(g.LINE_BYTES[0] <= len(line) <= g.LINE_BYTES[1] for line in lines)
        assert all(line.decode() in PLAYS[slug] for line in lines[:50])


def test_pairs_labels_are_facts_of_the_plays():
    ex = g.task_examples("pairs", SLUGS, 40, seed=2)
    assert ex.x.shape[:2] == (80, 1) and list(ex.labels) == [1, 0] * 40
    for seq, e, label in zip(ex.x[:, 0], ex.extract[:, 0], ex.labels):
        a, b = parts(seq, e)
        slug, = [s for s in SLUGS if a in speech_of(s)]
        assert b in speech_of(slug) and follows(slug, a, b) == bool(label)


def test_similarity_labels_are_facts_of_the_plays():
    ex = g.task_examples("similarity", SLUGS, 40, seed=2)
    assert ex.x.shape[:2] == (80, 2) and list(ex.labels) == [1, 0] * 40
    for seqs, es, label in zip(ex.x, ex.extract, ex.labels):
        (a, b), (b2, a2) = parts(seqs[0], es[0]), parts(seqs[1], es[1])
        assert (a, b) == (a2, b2) and a != b                      # both orders of one pair
        slug, = [s for s in SLUGS if a in speech_of(s)]
        assert (speech_of(slug)[a] == speech_of(slug).get(b)) == bool(label)


def test_choice_labels_are_facts_of_the_plays():
    ex = g.task_examples("choice", SLUGS, 200, seed=2)
    assert ex.x.shape[:2] == (200, g.N_CHOICES)
    assert np.bincount(ex.labels, minlength=4).min() > 30     # the right choice's place is spread
    assert len(set(ex.extract.ravel())) > 10                  # choices of many lengths
    for seqs, es, label in zip(ex.x, ex.extract, ex.labels):
        pairs = [parts(s, e) for s, e in zip(seqs, es)]
        a = pairs[0][0]
        assert all(p[0] == a for p in pairs) and len({p[1] for p in pairs}) == g.N_CHOICES
        slug, = [s for s in SLUGS if a in speech_of(s)]
        assert [follows(slug, a, p[1]) for p in pairs] == [k == label for k in range(g.N_CHOICES)]


@pytest.mark.parametrize("fmt", g.FORMATS)
def test_tasks_are_seeded_nested_and_balanced_at_their_chance_level(fmt):
    ex = g.task_examples(fmt, SLUGS, 60, seed=3)
    again, smaller = g.task_examples(fmt, SLUGS, 60, seed=3), g.task_examples(fmt, SLUGS, 20, seed=3)
    np.testing.assert_array_equal(ex.x, again.x)
    rows = len(smaller.labels)
    np.testing.assert_array_equal(ex.x[:rows, :, :smaller.x.shape[2]], smaller.x)   # a smaller set is a prefix
    assert not np.array_equal(ex.x, g.task_examples(fmt, SLUGS, 60, seed=4).x)
    labels = g.LABELS[fmt]
    share = np.bincount(ex.labels, minlength=len(labels)) / len(ex.labels)
    assert g.CHANCE[fmt] == 1 / len(labels) and abs(share.max() - g.CHANCE[fmt]) < 0.1


@pytest.mark.parametrize("fmt", g.FORMATS)
def test_each_split_draws_from_its_own_plays(fmt):
    plays = PLAYS
    train, test = ft.split(1)
    ex = g.task_examples(fmt, test, 30, seed=5)
    real = ex.labels == 1 if fmt == "classification" else slice(None)     # a shuffled passage is in no play
    for seq, e in zip(ex.x[real, 0], ex.extract[real, 0]):
        first = "\n" + parts(seq, e)[0].decode()                          # a line, or a passage from a line start
        assert any(first in plays[s] for s in test) and not any(first in plays[s] for s in train)


def test_every_sequence_fits_chapter_7s_pretrained_context_and_pad_is_no_byte_of_the_plays():
    assert 3 + 2 * g.LINE_BYTES[1] <= ft.PRETRAIN_CONFIG.n_ctx           # [start] A [delim] B [extract]
    assert ft.TASK["passage_len"] + 2 <= ft.PRETRAIN_CONFIG.n_ctx
    assert not any(chr(g.PAD) in text for text in PLAYS.values())


def test_classification_is_chapter_7s_task():
    ex = g.task_examples("classification", SLUGS, 8, seed=1)
    x, y = ft.word_order_examples(SLUGS, 8, seed=1)
    np.testing.assert_array_equal(ex.x[:, 0], x)
    np.testing.assert_array_equal(ex.labels, y)
    assert (ex.extract == x.shape[1] - 1).all()


def test_bad_task_arguments():
    with pytest.raises(ValueError, match=r"n must be an integer from 1 to \d+ \(the next-line pairs these plays give\), got 0"):
        g.task_examples("pairs", SLUGS, 0)
    with pytest.raises(ValueError, match=r"slugs must name one or more plays.*got unknown plays \['no-such-play'\]"):
        g.task_examples("choice", ["no-such-play"], 1)
    with pytest.raises(ValueError, match=r"slugs must name one or more plays.*got \[\]$"):
        g.task_examples("similarity", [], 1)
    with pytest.raises(ValueError, match=r"format must be one of .*got 'qa'"):
        g.available("qa", SLUGS)


@pytest.mark.parametrize("change, message", [
    (dict(labels=np.array([0, 4, 1])), r"choice examples must be .*labels \(N,\) in \[0, 4\)"),
    (dict(extract=np.zeros((3, 2), np.int64)), r"extract \(N, 4\) in \[0, T\).*got x \(3, 4, \d+\), extract \(3, 2\)"),
    (dict(format="qa"), "format must be one of")])
def test_the_loop_refuses_bad_examples(change, message):
    model, head = g.format_model(nt.GPT(tiny()), "choice")
    with pytest.raises(ValueError, match=message):
        g.finetune_format(model, head, batch("choice")._replace(**change), progress=False)


# ---- the twins -------------------------------------------------------------------------------------
def batch(fmt, seed=0, B=3):
    """A batch of random text in the format's layout, its sequences of different lengths."""
    rng = np.random.default_rng(seed)
    line = lambda: rng.integers(1, 256, rng.integers(2, 12))  # noqa: E731
    build = {"classification": lambda: g.classification_sequences(line()),
             "pairs": lambda: g.pair_sequences(line(), line()),
             "similarity": lambda: g.similarity_sequences(line(), line()),
             "choice": lambda: g.choice_sequences(line(), [line() for _ in range(g.N_CHOICES)])}[fmt]
    labels = rng.integers(0, g.N_CHOICES if fmt == "choice" else 2, B)
    return g.pad_examples(fmt, [build() for _ in range(B)], labels)


def twins(fmt, dtype, head_scale=1.0, cfg=None):
    """The same model and head in both twins; head_scale > 1 makes the scores large."""
    cfg = cfg or tiny()
    model, head = g.format_model(nt.GPT(cfg), fmt)
    tmodel, thead = g.format_model(tt.GPT(cfg), fmt)
    head.weight *= head_scale
    with torch.no_grad():
        thead.weight *= head_scale
    model.astype(dtype), head.astype(dtype)
    tdtype = torch.float64 if dtype == np.float64 else torch.float32
    return model, head, tmodel.to(tdtype), thead.to(tdtype)


def both_losses(fmt, dtype, lm_weight, head_scale, cfg=None):
    ex = batch(fmt)
    per_choice = fmt == "choice"
    model, head, tmodel, thead = twins(fmt, dtype, head_scale, cfg)
    if head_scale > 1:                                        # large scores: the first example right, the others wrong
        scores = ng.format_scores(model, head, ex.x, ex.extract, per_choice)
        ex = ex._replace(labels=np.r_[scores[:1].argmax(-1), scores[1:].argmin(-1)])
    model.zero_grad(), head.zero_grad()
    losses = ng.format_loss(model, head, ex.x, ex.extract, ex.labels, per_choice, lm_weight)
    g_numpy = {**model.grads, **{f"head.{n}": v for n, v in head.named_grads()}}
    tlosses = tg.format_loss(tmodel, thead, *map(torch.as_tensor, ex[1:]), per_choice, lm_weight)
    tlosses[0].backward()
    g_torch = {**{n: p.grad.numpy() for n, p in tmodel.named_parameters()},
               **{f"head.{n}": p.grad.numpy() for n, p in thead.named_parameters()}}
    return losses, [t.item() for t in tlosses], g_numpy, g_torch


@pytest.mark.parametrize("head_scale", [1.0, 3e3], ids=["small-scores", "large-scores"])
@pytest.mark.parametrize("lm_weight", [0.5, 0.0])
@pytest.mark.parametrize("fmt", g.FORMATS)
def test_numpy_backward_matches_torch_autograd_in_float64(fmt, lm_weight, head_scale):
    losses, tlosses, g_numpy, g_torch = both_losses(fmt, np.float64, lm_weight, head_scale)
    np.testing.assert_allclose(losses, tlosses, rtol=1e-10, atol=0)
    assert losses[0] == pytest.approx(losses[1] + lm_weight * losses[2], rel=1e-12)
    if head_scale > 1:
        assert losses[1] > 10                                  # large scores, far from their labels
    assert_same_gradients(g_numpy, g_torch)


def assert_same_gradients(g_numpy, g_torch, tol=1e-8):
    """Per tensor, ||g_numpy - g_torch|| <= tol ||g_torch||; a gradient that is 0 in exact arithmetic
    (the choice head's bias, which a softmax across choices cancels; a sum cancelled by saturated
    scores) is rounding noise, measured against 1e-4 of the largest gradient instead."""
    assert list(g_numpy) == list(g_torch)
    largest = max(np.linalg.norm(v) for v in g_torch.values())
    for name in g_torch:
        err, size = np.linalg.norm(g_numpy[name] - g_torch[name]), np.linalg.norm(g_torch[name])
        assert err <= tol * max(size, 1e-4 * largest), f"{name}: gradient error {err:.2e}, gradient {size:.2e}"


def test_numpy_backward_matches_on_the_modern_block():
    cfg = tiny(norm="rmsnorm", position="rope", mlp="swiglu", n_kv_head=2)
    _, _, g_numpy, g_torch = both_losses("choice", np.float64, 0.5, 1.0, cfg)
    assert_same_gradients(g_numpy, g_torch)


@pytest.mark.parametrize("fmt", g.FORMATS)
def test_losses_agree_in_float32(fmt):
    losses, tlosses, *_ = both_losses(fmt, np.float32, 0.5, 1.0)
    np.testing.assert_allclose(losses, tlosses, rtol=1e-4, atol=0)


@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_swapping_a_and_b_leaves_the_similarity_scores_exactly_equal(twin):
    ex = batch("similarity", seed=7, B=5)
    swapped = ex._replace(x=ex.x[:, ::-1].copy(), extract=ex.extract[:, ::-1].copy())
    GPT, twin_g = (nt.GPT, ng) if twin == "numpy" else (tt.GPT, tg)
    model, head = g.format_model(GPT(tiny()), "similarity")
    scores = [ft_scores(twin_g, model, head, e) for e in (ex, swapped)]
    assert np.array_equal(scores[0], scores[1]) and not np.array_equal(scores[0][:, 0], scores[0][:, 1])


@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_padding_changes_no_score_and_no_loss(twin):
    """More PAD after every [extract] leaves the scores and L1 as they were."""
    ex = batch("choice", seed=3)
    longer = ex._replace(x=np.concatenate([ex.x, np.full((*ex.x.shape[:2], 5), g.PAD)], axis=2))
    GPT, twin_g = (nt.GPT, ng) if twin == "numpy" else (tt.GPT, tg)
    model, head = g.format_model(GPT(tiny()), "choice")
    out = []
    for e in (ex, longer):
        out.append(np.asarray(ft_scores(twin_g, model, head, e)))
        lm_loss = twin_g.format_loss(model, head, *as_twin(twin, e), True, 1.0)[2]
        out.append(float(lm_loss.detach() if twin == "torch" else lm_loss))
    np.testing.assert_allclose(out[0], out[2], rtol=1e-5)
    assert out[1] == pytest.approx(out[3], rel=1e-5)


def ft_scores(twin_g, model, head, ex):
    scores = twin_g.format_scores(model, head, ex.x, ex.extract, ex.format == "choice")
    return scores if twin_g is ng else scores.numpy()


def as_twin(twin, ex):
    return ex[1:] if twin == "numpy" else tuple(map(torch.as_tensor, ex[1:]))


def test_classification_format_is_chapter_7s_loss():
    """One sequence read at its last position: format_loss equals finetune_loss, in both twins."""
    ex = batch("classification")
    x = ft.word_order_examples(SLUGS, 2, passage_len=20, seed=0)[0][:, None]
    ex = ex._replace(x=x, extract=np.full((4, 1), x.shape[2] - 1), labels=np.array([1, 0, 1, 0]))
    model, head = g.format_model(nt.GPT(tiny()), "classification")
    tmodel, thead = g.format_model(tt.GPT(tiny()), "classification")
    a = ng.format_loss(model, head, ex.x, ex.extract, ex.labels, False, 0.5)
    b = nf.finetune_loss(model, head, ex.x[:, 0], ex.labels, 0.5)
    np.testing.assert_allclose(a, b, rtol=1e-6)
    ta = tg.format_loss(tmodel, thead, *map(torch.as_tensor, ex[1:]), False, 0.5)
    tb = tf.finetune_loss(tmodel, thead, torch.as_tensor(ex.x[:, 0]), torch.as_tensor(ex.labels), 0.5)
    np.testing.assert_allclose([t.item() for t in ta], [t.item() for t in tb], rtol=1e-6)


def test_one_step_same_in_both_twins():
    ex = batch("choice", seed=5, B=4)
    model, head, tmodel, thead = twins("choice", np.float32)
    la = ng.format_step(model, head, nf.make_optimizer(model, head, 1e-3, 0.01), *ex[1:], True, 0.5, 1e-3, 1.0)
    lb = tg.format_step(tmodel, thead, tf.make_optimizer(tmodel, thead, 1e-3, 0.01), *ex[1:], True, 0.5, 1e-3, 1.0)
    np.testing.assert_allclose(la, [t.item() for t in lb], rtol=1e-5)
    for (n, p), (_, q) in zip(model.named_parameters(), tmodel.named_parameters()):
        assert np.abs(p - q.detach().numpy()).max() <= 1e-5, n
    assert np.abs(head.weight - thead.weight.detach().numpy()).max() <= 1e-5


def marked(fmt, n, seed):
    """A task a tiny model can learn in a few steps: the label is marked by the last byte of the
    second line (pairs, similarity) or of the right choice, next to [extract]; the rest is random."""
    rng = np.random.default_rng(seed)
    line = lambda last: np.concatenate([rng.integers(32, 256, rng.integers(2, 8)), [last]])  # noqa: E731
    labels = rng.integers(0, g.N_CHOICES if fmt == "choice" else 2, n)
    mark = lambda yes: 10 if yes else 20  # noqa: E731
    build = {"classification": lambda y: g.classification_sequences(line(mark(y))),
             "pairs": lambda y: g.pair_sequences(line(30), line(mark(y))),
             "similarity": lambda y: g.similarity_sequences(line(30), line(mark(y))),
             "choice": lambda y: g.choice_sequences(line(30), [line(mark(k == y)) for k in range(g.N_CHOICES)])}[fmt]
    return g.pad_examples(fmt, [build(y) for y in labels], labels)


@pytest.mark.parametrize("fmt", g.FORMATS)
@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_the_loop_learns_every_format(twin, fmt):
    GPT = nt.GPT if twin == "numpy" else tt.GPT
    model, head = g.format_model(GPT(tiny(n_layer=1)), fmt)
    history = g.finetune_format(model, head, marked(fmt, 128, 0),
                                replace(ft.FINETUNE, steps=60, batch_size=16, lr=3e-3), progress=False)
    assert len(history["loss"]) == 60 and history["step"][-1] == 60
    assert all(isinstance(v, float) for v in history["cls_loss"])
    assert np.mean(history["cls_loss"][-4:]) < 0.5 * np.mean(history["cls_loss"][:4])
    assert g.format_accuracy(model, head, marked(fmt, 64, 1)) >= 0.9


# ---- chapter 7's caches ------------------------------------------------------------------------------
PINNED = {"experiment": "word_order_experiment-7ed8fead08ce.json",
          0: "pretrained-0of2-8d89d30d4ce9", 1: "pretrained-1of2-e8316a188988"}


def test_chapter_7s_cache_names_are_as_they_were(tmp_path, monkeypatch):
    """The formats' code changes neither the experiment's file nor either split's pre-trained
    model's folder: with the folders there, pretrained_folder names them and trains nothing."""
    import lib.train
    monkeypatch.delenv("GPT2_COURSE_SEED", raising=False)
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    assert ft.experiment_file().name == PINNED["experiment"]
    monkeypatch.setattr(lib.train, "train", lambda *a, **k: pytest.fail("a pre-trained folder's name changed"))
    for fold in range(ft.N_FOLDS):
        folder = tmp_path / "finetune" / PINNED[fold]
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"")
        assert ft.pretrained_folder(fold, progress=False) == folder
