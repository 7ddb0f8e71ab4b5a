"""lib/gpt1_experiment.py: the layers a run transfers, the zero-shot scoring of every format, the
formats' batch sizes."""
import numpy as np
import pytest

from lib import gpt1_experiment as e
from lib import gpt1_tasks as g
from lib.config import GPTConfig
from lib.torch_twin import GPT

CONFIG = GPTConfig(vocab_size=256, n_ctx=128, n_layer=3, n_head=2, n_embd=16)


@pytest.mark.parametrize("k", [0, 1, 3])
def test_transfer_layers_keeps_the_first_k_blocks_and_the_embeddings(k):
    pre = GPT(CONFIG, seed=1)
    model = e.transfer_layers(pre, k, seed=2)
    got, want, fresh = (m.state_dict_numpy() for m in (model, pre, GPT(CONFIG, seed=2)))
    for name in got:
        block = int(name.split(".")[1]) if name.startswith("h.") else -1
        source = fresh if block >= k else want
        assert np.array_equal(got[name], source[name]), name


def test_transfer_layers_refuses_a_bad_k():
    with pytest.raises(ValueError, match="k must be an integer from 0 to n_layer=3, got 4"):
        e.transfer_layers(GPT(CONFIG, seed=1), 4, seed=2)


def test_segments_are_the_texts_between_the_special_tokens():
    a, b = np.array([72, 105]), np.array([33, 10, 65])
    seq, = g.pad_examples("pairs", [g.pair_sequences(a, b)], [1]).x[0]
    got = e._segments(np.concatenate([seq, [g.PAD, g.PAD]]))
    assert [list(s) for s in got] == [list(a), list(b)]
    one, = g.classification_sequences(a)
    assert [list(s) for s in e._segments(one)] == [list(a)]


@pytest.mark.parametrize("fmt", g.FORMATS)
def test_zero_shot_gives_one_answer_per_draw_and_follows_the_likelihood(fmt):
    slugs = ["hamlet"]
    examples = g.task_examples(fmt, slugs, 6, seed=3)
    right = e.zero_shot_right(GPT(CONFIG, seed=1), examples)
    assert len(right) == 6 and set(right) <= {0, 1}


def test_choice_answers_do_not_depend_on_the_choices_order():
    examples = g.task_examples("choice", ["hamlet"], 8, seed=4)
    model = GPT(CONFIG, seed=1)
    right = e.zero_shot_right(model, examples)
    order = np.arange(g.N_CHOICES)[::-1]
    flipped = examples._replace(x=examples.x[:, order], extract=examples.extract[:, order],
                                labels=g.N_CHOICES - 1 - examples.labels)
    assert e.zero_shot_right(model, flipped) == right


def test_every_format_reads_the_same_number_of_sequences_a_step():
    sizes = {fmt: e.format_settings(fmt).batch_size * g.SEQUENCES[fmt] for fmt in g.FORMATS}
    assert set(sizes.values()) == {e.TOKENS_PER_STEP}
