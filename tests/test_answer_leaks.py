"""tools/answer_leaks.py on pages written here (tests/test_book.py runs it on the built book): an
answer is found on an earlier page, open or collapsed, and on the exercise's own page only when
shown open; lib code with a later chapter's feature is found before that chapter."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _pre(code):
    return f"<div class=\"highlight\"><pre>{code}</pre></div>"


def _collapsed(code):
    return (f'<details class="admonition hide above-input"><summary aria-label="Toggle hidden content">'
            f'<p>Show code cell content</p></summary>{_pre(code)}</details>')


ANSWER = "dx = rstd * (g - g_mean - xhat * g_along_xhat)"


def test_collapsed_code_is_kept_apart(leaks):
    html = "<p>a</p>" + _pre("x = 1") + _collapsed("y = 2")
    assert leaks.code_text(html) == "x = 1\ny = 2\n"
    assert leaks.code_text(html, collapsed=False) == "x = 1\n"


def test_an_answer_counts_on_its_own_page_only_when_open(leaks):
    answers = {"exercises/ch4_backward": {leaks.normalise(ANSWER)}}
    html = {"chapters/04_model": _collapsed(ANSWER),                         # before: collapsed or not
            "exercises/ch4_backward": "<p>Compare with lib</p>" + _collapsed(ANSWER),
            "chapters/05_training": _pre(ANSWER)}                            # after: allowed
    pages = {p: leaks.code_text(h) for p, h in html.items()}
    open_pages = {p: leaks.code_text(h, collapsed=False) for p, h in html.items()}
    found = leaks.find_leaks(pages, answers, open_pages)
    assert [(e, p) for e, p, _ in found] == [("exercises/ch4_backward", "chapters/04_model")]
    open_pages["exercises/ch4_backward"] = leaks.code_text(_pre(ANSWER))
    found = leaks.find_leaks(pages, answers, open_pages)
    assert {p for _, p, _ in found} == {"chapters/04_model", "exercises/ch4_backward"}


def test_later_features_are_found_before_their_chapter(leaks):
    pages = {"chapters/02_embeddings": "x = self.drop.forward(x)\nlogits = f(idx, kv_cache=None)\n"
                                       "out, mask = self.resid_dropout.forward(out)\n",
             "chapters/04_model": "q = apply_rope(q, cos, sin)\nk = repeat_kv(k, n)\n",
             "chapters/05_training": "x, mask = self.drop.forward(x)\n",
             "chapters/06_decoding": "cache = KVCache(config, 1)\nq = apply_rope(q, cos, sin)\n"
                                     "GPTConfig(dropout=0.0, n_kv_head=None)\n",     # a printed config
             "chapters/08_modern_block": "k = repeat_kv(k, n)\n"}
    found = leaks.find_early_features(pages)
    assert sorted(found) == sorted([
        ("chapters/02_embeddings", "chapters/05_training", "resid_dropout.forward"),
        ("chapters/02_embeddings", "chapters/05_training", "self.drop"),
        ("chapters/02_embeddings", "chapters/06_decoding", "kv_cache"),
        ("chapters/04_model", "chapters/08_modern_block", "apply_rope"),
        ("chapters/04_model", "chapters/08_modern_block", "repeat_kv"),
        ("chapters/06_decoding", "chapters/08_modern_block", "apply_rope")])


def test_a_cells_traceback_is_read_or_left_out_on_request(leaks):
    page = ('<div class="cell_input"><pre>model.forward(x)</pre></div>'
            '<div class="output traceback highlight-ipythontb"><div class="highlight">'
            '<pre>--&gt; 463 return self.forward_outputs(idx, kv_cache).logits</pre></div></div>'
            '<div class="output stream"><pre>done</pre></div>')
    assert "kv_cache" in leaks.code_text(page)
    shown = leaks.code_text(page, tracebacks=False)
    assert "kv_cache" not in shown and "model.forward(x)" in shown and "done" in shown


def test_a_taught_name_is_stubbed_but_no_answer(leaks):
    """Exercise 4.4 blocks lib's LayerNorm.forward while grading, but chapter 4 shows it on purpose
    (`taught`): its lines are not among 4.4's answers, while the other blocked names' are."""
    import dataclasses
    import importlib.util

    spec = importlib.util.spec_from_file_location("ch4_gpt_hidden", ROOT / "solutions" / "ch4_gpt" / "hidden_tests.py")
    hidden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hidden)
    exercise = hidden.EXERCISE
    assert "lib.numpy_twin.model:LayerNorm.forward" in exercise.blocked and exercise.taught
    forward = "rstd=1.0/np.sqrt((xc*xc).mean(axis=-1,keepdims=True)+self.eps)"
    assert forward not in leaks.answer_statements(exercise)
    assert forward in leaks.answer_statements(dataclasses.replace(exercise, taught=()))
