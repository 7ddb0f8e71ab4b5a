"""lib.scaling.few_shot (chapter 11's few-shot prompts): the task's prompts, the next-token
log-probabilities against each prompt run alone and across twins, the scores on a model that
follows the rule and on one that cannot, and bad input."""
import numpy as np
import pytest

import lib.scaling.few_shot as fs
from lib.config import GPTConfig
from lib.numpy_twin import GPT as NumpyGPT
from lib.tokenizer import BPETokenizer

ENCODE = BPETokenizer().encode
TINY = GPTConfig(vocab_size=256, n_ctx=64, n_layer=1, n_head=2, n_embd=16)


def test_a_prompt_shows_each_example_with_its_capital_then_asks():
    assert fs.case_prompt(["c", "x"], "q") == "c=C x=X q="
    assert fs.case_prompt([], "q") == "q="


@pytest.mark.parametrize("k", [0, 1, 8, 25])
def test_items_ask_every_letter_with_k_other_letters_as_examples(k):
    items = fs.case_items(k, draws=3, seed=1)
    assert len(items) == 26 * 3
    for prompt, answer in items:
        *examples, query = prompt.split(" ")
        assert query == answer.lower() + "=" and len(examples) == k
        letters = [e[0] for e in examples]
        assert len(set(letters)) == k and answer.lower() not in letters
        assert all(e == f"{x}={x.upper()}" for e, x in zip(examples, letters))
    assert fs.case_items(k, 3, seed=1) == items                      # the seed fixes the draw


@pytest.mark.parametrize("k", [-1, 26, 2.0])
def test_k_outside_the_other_letters_is_refused(k):
    with pytest.raises(ValueError, match="k must be an integer from 0 to 25"):
        fs.case_items(k)


def test_next_token_logp_is_each_prompt_run_alone_in_either_twin():
    import torch

    from lib.torch_twin import GPT as TorchGPT

    model = NumpyGPT(TINY, seed=0)
    twin = TorchGPT(TINY)
    twin.load_state_dict({k: torch.from_numpy(v) for k, v in model.state_dict().items()})
    prompts = [np.array(ENCODE(p)) for p in ("q=", "a=A b=B q=", "x")]
    logp = fs.next_token_logp(model, prompts, max_logits=2 * 10 * 256)    # two prompts a pass
    assert logp.shape == (3, 256) and logp.dtype == np.float64
    np.testing.assert_allclose(np.exp(logp).sum(-1), 1, rtol=1e-9)
    for row, p in zip(logp, prompts):                                # padding changes nothing
        alone = model.forward(p[None])[0, -1].astype(np.float64)     # (V,)
        np.testing.assert_allclose(row, alone - np.log(np.exp(alone - alone.max()).sum()) - alone.max(),
                                   atol=1e-5)
    # float32 forwards of the same weights in two twins agree to ~1e-6; 1e-4 leaves room for other BLAS
    np.testing.assert_allclose(fs.next_token_logp(twin, prompts), logp, atol=1e-4)


def test_prompts_longer_than_the_context_or_empty_are_refused():
    model = NumpyGPT(TINY, seed=0)
    with pytest.raises(ValueError, match="1 to n_ctx=64 tokens long, got lengths"):
        fs.next_token_logp(model, [np.arange(65) % 256])
    with pytest.raises(ValueError, match="1 to n_ctx=64"):
        fs.next_token_logp(model, [np.array([], np.int64)])


def _oracle(capitalise):
    """A forward that puts all its weight on the capital of the byte two back (the query letter
    before "="), or on 'Z' everywhere."""
    def forward(model, x):
        logits = np.zeros((*x.shape, 256), np.float32)                            # (P, T, V)
        target = np.full(x.shape, ord("Z"))                                      # (P, T)
        if capitalise:
            before = x[:, :-1]                                                     # (P, T - 1)
            target[:, 1:] = np.where((before >= ord("a")) & (before <= ord("z")), before - 32, before)
        np.put_along_axis(logits, target[..., None], 20.0, axis=-1)
        return logits
    return forward


def test_a_model_that_follows_the_rule_scores_one_and_one_that_cannot_scores_chance(monkeypatch):
    model = NumpyGPT(TINY, seed=0)
    monkeypatch.setattr(fs, "forward", _oracle(True))
    right = fs.few_shot(model, ENCODE, ks=(0, 2), draws=2)
    assert all(r["accuracy"] == 1 and r["among_capitals"] == 1 and r["n"] == 52 for r in right.values())
    assert right[2]["logp"] > -1e-6 and right[2]["logp_capitals"] > -1e-6
    monkeypatch.setattr(fs, "forward", _oracle(False))
    always_z = fs.few_shot(model, ENCODE, ks=(2,), draws=2)[2]
    assert always_z["accuracy"] == always_z["among_capitals"] == 1 / 26     # right only for "z"
    assert always_z["logp"] < -15 and always_z["logp_capitals"] > -1e-6


def test_a_tokenizer_that_splits_a_capital_is_refused():
    model = NumpyGPT(TINY, seed=0)
    with pytest.raises(ValueError, match="each capital letter must be one token"):
        fs.few_shot(model, lambda text: ENCODE(text) * 2, ks=(0,))


def test_gpt2s_tokens_keep_each_capital_one_token_after_the_prompt():
    from lib.tokenizer import gpt2_tiktoken

    enc = gpt2_tiktoken()
    for prompt, answer in fs.case_items(4, draws=1):
        assert enc.encode(prompt + answer) == enc.encode(prompt) + enc.encode(answer)
        assert len(enc.encode(answer)) == 1
