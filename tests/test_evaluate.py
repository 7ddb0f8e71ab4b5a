"""Zero-shot multiple choice (lib/evaluate.py, chapter 6b): the scores are the choices'
log-likelihoods, both twins give the same ones, a batch gives what one choice at a time gives
and several questions in one pass what each gives alone, bad input is refused with a clear
error; the next-line benchmark comes from held-out plays only; HellaSwag's JSONL is read and
scored offline, from a small file written here.

Tolerance between the twins: the logits agree to 1e-4 in float32 (tests/test_model.py), so a
sum of log-probabilities over n tokens agrees to 1e-4 per token.
"""
import json
import math

import numpy as np
import pytest

from lib import evaluate as ev
from lib import numpy_twin as nt
from lib import torch_twin as tt
from lib.config import GPTConfig
from lib.data import load_corpus
from lib.numpy_twin.train import log_softmax
from lib.sample import tokenizer_for

CONFIG = GPTConfig(vocab_size=256, n_ctx=16, n_layer=2, n_head=2, n_embd=32)
CONTEXT = list(b"ROMEO:\nBut soft, what light through yonder window")   # 50 tokens: cropped to the window
CHOICES = [list(b" breaks?"), list(b"!"), list(b" is the east, an")]  # 8, 1 and 16 (= n_ctx) tokens


def by_hand(model, context, choice):
    """log p(choice | context) from one plain forward pass over the cropped sequence."""
    seq = np.array((context + choice)[-(CONFIG.n_ctx + 1):])
    logp = log_softmax(model.forward(seq[None, :-1])[0].astype(np.float64))   # (T, V)
    targets = seq[1:]
    return logp[np.arange(len(targets)), targets][-len(choice):].sum()


def test_scores_are_the_choices_log_likelihoods():
    model = nt.GPT(CONFIG, seed=1)
    scores = ev.score_choices(model, CONTEXT, CHOICES)
    expected = [by_hand(model, CONTEXT, choice) for choice in CHOICES]
    np.testing.assert_allclose(scores.sum, expected, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(scores.n_tokens, [8, 1, 16])
    np.testing.assert_allclose(scores.mean, scores.sum / scores.n_tokens)
    assert scores.sum.dtype == np.float64 and scores.gain is None


@pytest.mark.parametrize("twin", [nt, tt])
def test_a_batch_gives_the_scores_of_one_choice_at_a_time(twin):
    model = twin.GPT(CONFIG, seed=1)
    neutral = list(b"\n")
    batched = ev.score_choices(model, CONTEXT, CHOICES, neutral)
    for k, choice in enumerate(CHOICES):
        alone = ev.score_choices(model, CONTEXT, [choice], neutral)
        for key in ("sum", "mean", "gain"):
            np.testing.assert_allclose(getattr(alone, key)[0], getattr(batched, key)[k], rtol=0, atol=1e-5)
    after_neutral = [by_hand(nt.GPT(CONFIG, seed=1), neutral, choice) for choice in CHOICES]
    np.testing.assert_allclose(batched.gain, batched.sum - after_neutral, rtol=0, atol=1e-4)


@pytest.mark.parametrize("twin", [nt, tt])
def test_several_questions_in_one_pass_score_as_one_at_a_time(twin):
    model = twin.GPT(CONFIG, seed=1)
    questions = [(CONTEXT, CHOICES), (list(b"JULIET:\n"), [list(b"O"), list(b"Romeo, Romeo")]), (list(b"a"), [[98]])]
    for neutral in (None, list(b"\n")):
        together = ev.score_questions(model, questions, neutral)
        assert len(together) == len(questions)
        for (context, choices), scores in zip(questions, together):
            alone = ev.score_choices(model, context, choices, neutral)
            for key in ("sum", "mean", "n_tokens") + (() if neutral is None else ("gain",)):
                np.testing.assert_allclose(getattr(scores, key), getattr(alone, key), rtol=0, atol=1e-5)
    items = [{"context": "JULIET:\n", "choices": ["O Romeo", "Ay me", "Good night"], "label": k} for k in range(3)]
    one_per_pass = ev.evaluate(model, tokenizer_for(256), items, "\n", max_logits=1)
    assert one_per_pass == ev.evaluate(model, tokenizer_for(256), items, "\n")


def test_the_twins_agree_on_every_score():
    numpy_scores = ev.score_choices(nt.GPT(CONFIG, seed=2), CONTEXT, CHOICES, list(b"\n"))
    torch_scores = ev.score_choices(tt.GPT(CONFIG, seed=2), CONTEXT, CHOICES, list(b"\n"))
    tolerance = 1e-4 * numpy_scores.n_tokens                  # 1e-4 per token
    for key in ("sum", "gain"):
        assert np.all(np.abs(getattr(numpy_scores, key) - getattr(torch_scores, key)) <= 2 * tolerance), key
    assert np.all(np.abs(numpy_scores.mean - torch_scores.mean) <= 1e-4)


def test_a_long_context_loses_its_first_tokens():
    model = nt.GPT(CONFIG, seed=1)
    choice = CHOICES[0]
    kept = CONTEXT[-(CONFIG.n_ctx + 1 - len(choice)):]      # what fits beside the choice
    np.testing.assert_allclose(ev.score_choices(model, CONTEXT, [choice]).sum,
                               ev.score_choices(model, kept, [choice]).sum, rtol=0, atol=1e-6)


@pytest.mark.parametrize("context, choices, neutral, message", [
    ([1, 2], [], None, "choices is empty"),
    ([], [[1]], None, "context is empty"),
    ([1, 2], [[1], []], None, "choice 1 has 0 tokens; expected 1 to n_ctx=16"),
    ([1, 2], [[1] * 17], None, "choice 0 has 17 tokens; expected 1 to n_ctx=16"),
    ([1, 256], [[1]], None, r"context holds token ids from 1 to 256; expected ids in \[0, 256\)"),
    ([1, 2], [[3], [-1, 4]], None, r"choice 1 holds token ids from -1 to 4; expected ids in \[0, 256\)"),
    ([1.5, 2], [[1]], None, "context must be a 1-D sequence of integer token ids"),
    ([1, 2], [[1]], [], "neutral is empty"),
])
def test_bad_input_is_refused_with_a_clear_error(context, choices, neutral, message):
    with pytest.raises(ValueError, match=message):
        ev.score_choices(nt.GPT(CONFIG), context, choices, neutral)


def test_wilson_interval():
    low, high = ev.wilson_interval(50, 100)
    assert low == pytest.approx(0.4038, abs=1e-4) and high == pytest.approx(0.5962, abs=1e-4)
    low, high = ev.wilson_interval(0, 10)
    assert low == pytest.approx(0, abs=1e-12) and high == pytest.approx(0.2775, abs=1e-4)  # not empty at 0
    with pytest.raises(ValueError, match="expected 0 <= correct <= n and n >= 1, got correct=11, n=10"):
        ev.wilson_interval(11, 10)


# ---- the next-line benchmark -----------------------------------------------------------------------
def test_the_benchmark_comes_from_plays_no_model_trained_on():
    train_ids, _ = load_corpus("shakespeare", "byte")
    train_text = np.asarray(train_ids, np.uint8).tobytes().decode("utf-8")
    plays = ev.held_out_plays()
    assert plays and not any(play["text"][:2000] in train_text for play in plays)
    texts = ["\n" + play["text"] for play in plays]             # every line after a newline
    items = ev.next_line_items()
    assert len(items) == 1000 == len({(item["context"], item["choices"][item["label"]]) for item in items})
    for item in items:
        right = item["choices"][item["label"]]
        play = next(text for text in texts if "\n" + item["context"] + right in text)  # the line after the context
        assert len(item["choices"]) == len(set(item["choices"])) == 4
        assert all(c.endswith("\n") and 10 <= len(c) - 1 <= 30 and "\n" + c in play for c in item["choices"])
        wrong = [c for k, c in enumerate(item["choices"]) if k != item["label"]]
        assert not any("\n" + item["context"] + c in play for c in wrong)   # no wrong choice follows the context
    assert min(np.bincount([item["label"] for item in items], minlength=4)) > 200   # the answer's place varies
    assert ev.next_line_items(5) == ev.next_line_items(5) != ev.next_line_items(5, seed=1)
    with pytest.raises(ValueError, match="n_items must be from 1 to"):
        ev.next_line_items(0)


# ---- HellaSwag's format, offline ------------------------------------------------------------------
ROWS = [  # HellaSwag's published keys; short endings, so that a 16-byte window holds them
    {"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he",
     "ctx": "A man is sitting on a roof. he", "split": "val", "split_type": "indomain", "label": 3,
     "endings": ["is using wrap.", "is ripping.", "is holding.", "starts pulling."], "source_id": "x"},
    {"ind": 92, "activity_label": "Clean and jerk", "ctx_a": "A lady walks to a barbell.", "ctx_b": "she",
     "ctx": "A lady walks to a barbell. she", "split": "val", "split_type": "zeroshot", "label": 0,
     "endings": ["lifts it.", "sings.", "swims away.", "is a cat."], "source_id": "y"},
]


@pytest.fixture
def hellaswag_file(tmp_path):
    path = tmp_path / "hellaswag_val.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return path


def test_hellaswag_items(hellaswag_file, tmp_path):
    items = ev.hellaswag_items(hellaswag_file)
    assert items[0] == {"context": ROWS[0]["ctx"], "choices": [" " + e for e in ROWS[0]["endings"]], "label": 3}
    assert len(items) == 2 and len(ev.hellaswag_items(hellaswag_file, limit=1)) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"ctx": "a", "label": 0}) + "\n")
    with pytest.raises(ValueError, match=r"line 1: no \['endings'\]"):
        ev.hellaswag_items(bad)
    bad.write_text(json.dumps({**ROWS[0], "label": 4}) + "\n")
    with pytest.raises(ValueError, match="line 1: label 4 does not index its 4 endings"):
        ev.hellaswag_items(bad)


def test_the_command_line_scores_a_hellaswag_file(hellaswag_file, tmp_path, capsys):
    model = nt.GPT(CONFIG, seed=3)
    model.save(tmp_path / "model")
    ev.main(["hellaswag", "--file", str(hellaswag_file), "--model", str(tmp_path / "model"), "--twin", "numpy",
             "--neutral", "\n", "--json"])
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["n"] == 2 and result["chance"] == 0.25 and result["neutral"] == "\n"
    assert set(result["accuracy"]) == set(result["interval"]) == {"sum", "mean", "gain"}
    items = ev.hellaswag_items(hellaswag_file)
    full = ev.evaluate(model, tokenizer_for(256), items, neutral="\n")
    assert [len(flags) for flags in full.pop("right").values()] == [2, 2, 2]
    assert result == {**full, "benchmark": "hellaswag", "model": str(tmp_path / "model"), "twin": "numpy",
                      "neutral": "\n"}                         # the JSON line leaves the per-item flags out
    picks = [ev.score_choices(model, list(item["context"].encode()), [list(c.encode()) for c in item["choices"]],
                              list(b"\n")) for item in items]
    for key in ("sum", "mean", "gain"):                            # the answer is the highest score's choice
        assert result["accuracy"][key] == np.mean([np.argmax(getattr(p, key)) == item["label"]
                                                    for p, item in zip(picks, items)])


def test_the_command_line_scores_the_next_line_benchmark(capsys):
    ev.main(["shakespeare", "--model", "random", "--items", "20", "--twin", "numpy", "--json"])
    out = capsys.readouterr().out
    result = json.loads(out.splitlines()[-1])
    assert result["n"] == 20 and result["neutral"] == "\n" and set(result["accuracy"]) == {"sum", "mean", "gain"}
    assert "accuracy by gain over the neutral text" in out


def test_mcnemar_counts_the_disagreements_and_gives_the_exact_two_sided_p():
    a = [True] * 10 + [False] * 2 + [True] * 5
    b = [False] * 10 + [True] * 2 + [True] * 5                # agreements (the last 5) do not count
    only_a, only_b, p = ev.mcnemar(a, b)
    assert (only_a, only_b) == (10, 2)
    assert abs(p - 2 * sum(math.comb(12, k) for k in range(3)) / 2 ** 12) < 1e-15   # 0.0386
    assert ev.mcnemar(a, a) == (0, 0, 1.0) and ev.mcnemar(b, a)[2] == p
    with pytest.raises(ValueError, match="expected the same items"):
        ev.mcnemar(a, b[:-1])
