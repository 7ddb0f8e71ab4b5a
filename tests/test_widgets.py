"""lib.widgets: the precomputed states are the model's, the static widget follows the browser
test's contract, and the live widgets turn bad prompts into messages.

Models are the small preset with random weights (seed 0): the widgets only read the model,
so any weights test them; tests/test_browser.py opens the chapters' widgets in a browser.
"""
import base64
import io
import json
import re
from dataclasses import replace

import numpy as np
import pytest
from matplotlib import colormaps
from matplotlib.image import imread

from lib import GPTConfig, numpy_twin as nt, widgets
from lib.sampling import filtered_probs
from lib.tokenizer import BPETokenizer
from lib.widgets import attention, prompt, sampler, temperature

CONFIG = GPTConfig.small()           # n_ctx 64, 4 layers of 4 heads, byte vocabulary
TOK = BPETokenizer()                 # bytes: token id = byte value
PROMPT = "ROMEO:\nBut, soft!"
# Sampling settings covering greedy, plain temperature and both cuts.
SETTINGS = [(0.0, None, None), (1.0, None, None), (0.5, None, None), (1.5, 5, None),
            (1.0, None, 0.5), (2.0, 40, 0.9)]


@pytest.fixture(scope="module")
def model():
    return nt.GPT(CONFIG, seed=0)


def widget_data(page):
    """The JSON states of the (first) static widget on a page."""
    found = re.search(r'<script type="application/json">(.*?)</script>', page, re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


def moved_positions(controls_html, labels, initial):
    """For each control, the positions after tests/test_browser.py moves it once: a slider to
    its end (its start if already there), a select to its first other option."""
    kinds = re.findall(r"<(input|select)[^>]*data-widget-control", controls_html)
    moves = []
    for j, (kind, n) in enumerate(zip(kinds, map(len, labels))):
        position = list(initial)
        position[j] = (0 if initial[j] == n - 1 else n - 1) if kind == "input" else (1 if initial[j] == 0 else 0)
        moves.append(position)
    return moves


def flat(positions, labels):
    index = 0
    for p, options in zip(positions, labels):
        index = index * len(options) + p
    return index


def check_contract(page, initial):
    """Markers of tests/test_browser.py; the initial view drawn in the page; every control,
    moved as the browser test moves it, changing what is shown; nothing loaded from outside."""
    assert page.count('class="gpt-widget"') == 1
    data = widget_data(page)
    sizes = [len(options) for options in data["labels"]]
    assert len(data["index"]) == int(np.prod(sizes))
    assert len(re.findall(r"<(?:input|select)[^>]*data-widget-control", page)) == len(sizes)
    outputs = re.findall(r"<div data-widget-output>", page)
    first = data["views"][data["index"][flat(initial, data["labels"])]]
    assert len(outputs) == len(first)
    for view in first:
        assert f"<div data-widget-output>{view}</div>" in page
    for positions in moved_positions(page, data["labels"], initial):
        assert data["views"][data["index"][flat(positions, data["labels"])]] != first, positions
    assert not re.search(r'(src|href)="(?!data:)', page), "the widget must load nothing"
    assert page.count("</script>") == 2                      # none inside the embedded JSON


# ---- sampling every setting at once ----------------------------------------------------------------
def test_each_row_samples_what_generate_samples(model):
    ids = np.array([TOK.encode(PROMPT)])                     # (1, T)
    rows = sampler.generate_all(model, ids, SETTINGS, 30, seed=3)           # (6, 30)
    for (t, k, p), row in zip(SETTINGS, rows):
        alone = model.generate(ids, 30, temperature=t, top_k=k, top_p=p, seed=3)[0, ids.shape[1]:]
        np.testing.assert_array_equal(row, alone, err_msg=f"temperature {t} top_k {k} top_p {p}")
    assert len({tuple(r) for r in rows[1:]}) == len(rows) - 1  # settings change the samples


def test_each_row_samples_what_generate_samples_in_torch():
    torch = pytest.importorskip("torch")
    from lib import torch_twin as tt
    model = tt.GPT(CONFIG, seed=0)
    ids = np.array([TOK.encode(PROMPT)])                     # (1, T)
    rows = sampler.generate_all(model, ids, SETTINGS, 10, seed=1)           # (6, 10)
    for (t, k, p), row in zip(SETTINGS, rows):
        alone = model.generate(torch.as_tensor(ids), 10, temperature=t, top_k=k, top_p=p, seed=1)
        np.testing.assert_array_equal(row, alone[0, ids.shape[1]:].numpy())


def test_both_widgets_run_the_torch_twin():
    pytest.importorskip("torch")
    from lib import torch_twin as tt
    model = tt.GPT(CONFIG, seed=0)
    viewer = widgets.attention_viewer(model, TOK, PROMPT, live=True)
    check_contract(viewer.html, initial=[0, 0])
    assert viewer.message.value == "" and "layer 0, head 0" in viewer.view.value
    sampled = widgets.temperature_widget(model, TOK, PROMPT, n_tokens=4, live=True)
    check_contract(sampled.html, initial=[temperature.TEMPERATURES.index(1.0), 0, 0])
    assert sampled.message.value == "" and PROMPT.split()[-1] in sampled.sample.value


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="top_p"):
        sampler.SettingsSampler([(1.0, None, 1.5)], seed=0)


# ---- drawing ---------------------------------------------------------------------------------------
def test_token_labels_show_whitespace_and_partial_characters():
    assert [prompt.token_label(TOK, i) for i in b"a \n\t"] == ["a", "\u2423", "\u21b5", "\u21e5"]
    assert prompt.token_label(TOK, 0xE2) == "\\xe2"          # first byte of a 3-byte character
    assert prompt.token_label(TOK, 0x07) == "\\x07"          # a control byte


def test_distribution_chart_counts_the_kept_tokens():
    logits = np.linspace(3, -3, 256).astype(np.float32)      # (V,) distinct, token 0 most likely
    greedy = temperature.distribution_html(TOK, logits, 0.0, top_k=5)
    assert "greedy" in greedy and greedy.count("width: 100.00%") == 1 and "top-k 5" in greedy
    top5 = temperature.distribution_html(TOK, logits, 1.0, top_k=5)
    assert "sampling from 5 of 256 tokens" in top5 and top5.count(">cut<") == 5   # bars 6 to 10
    probs = filtered_probs(logits[None], 1.0, 5)[0]
    assert f"{100 * probs[0]:.1f}%" in top5
    everything = temperature.distribution_html(TOK, logits, 2.0)
    assert "sampling from 256 of 256 tokens" in everything and ">cut<" not in everything


def test_attention_image_has_one_pixel_per_weight():
    rng = np.random.default_rng(0)
    T = 7
    weights = np.tril(rng.random((T, T)))                    # (T, T), causal
    weights /= weights.sum(-1, keepdims=True)
    png = base64.b64decode(attention.attention_png(weights).split(",", 1)[1])
    pixels = np.round(imread(io.BytesIO(png)) * 255).astype(int)            # (T, T, 4)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    assert pixels.shape == (T, T, 4)
    assert (pixels[future] == attention.MASKED).all()
    np.testing.assert_array_equal(pixels[~future], colormaps["viridis"](weights[~future], bytes=True))


# ---- the static widgets ------------------------------------------------------------------------------
def test_static_temperature_widget(model):
    w = widgets.temperature_widget(model, TOK, PROMPT, n_tokens=12, live=False)
    assert w.live is None
    check_contract(w.html, initial=[temperature.TEMPERATURES.index(1.0), 0, 0])
    data = widget_data(w.html)
    assert data["labels"] == [["0", "0.25", "0.5", "0.75", "1", "1.25", "1.5", "1.75", "2"],
                              ["off", "40", "5"], ["off", "0.9", "0.5"]]
    ids = np.array([TOK.encode(PROMPT)])
    for t, k, p in [(0.5, None, None), (2.0, 5, 0.9)]:       # a view shows its setting's sample
        view = data["views"][data["index"][flat([data["labels"][0].index(f"{t:g}"),
                                                 [None, 40, 5].index(k), [None, 0.9, 0.5].index(p)],
                                                data["labels"])]]
        new = model.generate(ids, 12, temperature=t, top_k=k, top_p=p, seed=0)[0, ids.shape[1]:]
        assert view[1] == temperature.sample_html(TOK, ids[0], new)
        assert view[0] == temperature.distribution_html(TOK, model.forward(ids)[0, -1], t, k, p)


def test_static_attention_viewer(model):
    w = widgets.attention_viewer(model, TOK, PROMPT, layer=1, head=2, live=False)
    check_contract(w.html, initial=[1, 2])
    data = widget_data(w.html)
    ids = np.array([TOK.encode(PROMPT)])
    atts = model.forward_outputs(ids, return_attention=True).attentions  # n_layer x (1, H, T, T)
    att = np.stack([a[0] for a in atts])                     # (L, H, T, T)
    for layer, head in [(0, 0), (3, 1)]:
        view = data["views"][data["index"][flat([layer, head], data["labels"])]][0]
        assert attention.attention_png(att[layer, head]) in view and f"layer {layer}, head {head}" in view


def test_a_viewer_of_one_head_per_layer_selects_the_layer_alone():
    one_head = nt.GPT(replace(CONFIG, n_head=1), seed=0)
    w = widgets.attention_viewer(one_head, TOK, PROMPT, layer=1, live=False)
    check_contract(w.html, initial=[1])
    data = widget_data(w.html)
    assert data["labels"] == [[str(l) for l in range(CONFIG.n_layer)]]
    assert "layer 1, head 0" in data["views"][data["index"][1]][0]


def test_static_widgets_refuse_an_empty_prompt(model):
    with pytest.raises(ValueError, match="empty"):
        widgets.attention_viewer(model, TOK, "", live=False)
    with pytest.raises(ValueError, match="layer=4"):
        widgets.attention_viewer(model, TOK, PROMPT, layer=4, live=False)
    with pytest.raises(ValueError, match="head=1.5"):
        widgets.attention_viewer(model, TOK, PROMPT, head=1.5, live=False)
    with pytest.raises(ValueError, match="temperature=0.3"):
        widgets.temperature_widget(model, TOK, PROMPT, temperature=0.3, live=False)


def test_long_prompts_are_cropped_as_generation_crops_them(model):
    text = "x" * 50 + "y" * 30                                # 80 bytes, n_ctx 64
    ids, note = prompt.encode_prompt(TOK, text, CONFIG.n_ctx)
    np.testing.assert_array_equal(ids[0], TOK.encode(text)[-64:])
    assert "80 tokens" in note and "last 64" in note
    w = widgets.attention_viewer(model, TOK, text, live=False)
    assert "last 64 tokens" in w.html and f'width="{64 * 10}"' in w.html  # 64 x 64 weights, 10 px each


# ---- the live widgets: bad input is a message, never a traceback ----------------------------------
def test_live_temperature_widget(model):
    w = widgets.temperature_widget(model, TOK, PROMPT, n_tokens=8, live=True)
    c = w.controls
    assert w.message.value == "" and "sampling from 256 of 256" in w.view.value
    first = w.sample.value
    c["seed"].value = 1
    assert w.sample.value != first
    c["temperature"].value = 0.0
    assert "greedy" in w.view.value
    c["temperature"].value, c["top_k"].value = 1.0, 3
    assert "sampling from 3 of 256" in w.view.value
    c["prompt"].value = ""
    assert "empty" in w.message.value and w.view.value == w.sample.value == ""
    c["top_p"].value = 0.5                                    # other controls with no prompt: still a message
    assert "empty" in w.message.value
    c["prompt"].value = "a" * 100
    assert "100 tokens" in w.message.value and "last 64" in w.message.value
    assert f'<span class="gptw-prompt">{"a" * 64}</span>' in w.sample.value   # the window the model saw
    c["prompt"].value = PROMPT
    assert w.message.value == "" and w.sample.value


def test_live_attention_viewer(model):
    w = widgets.attention_viewer(model, TOK, PROMPT, layer=np.int64(0), live=True)   # as np.unravel_index gives
    c = w.controls
    assert w.message.value == "" and "layer 0, head 0" in w.view.value
    c["head"].value = 3
    assert "layer 0, head 3" in w.view.value
    c["prompt"].value = ""
    assert "empty" in w.message.value and w.view.value == ""
    c["layer"].value = 2                                      # moving a selector with no prompt
    assert "empty" in w.message.value and w.view.value == ""
    c["prompt"].value = "b" * 70
    assert "70 tokens" in w.message.value and "layer 2, head 3" in w.view.value
    assert f'width="{64 * 10}"' in w.view.value
    assert "gptw-live" in w.live._dom_classes


def test_live_widgets_never_ask_mathjax_to_typeset(model):
    """ipywidgets typesets descriptions, Labels and HTMLMath with MathJax 2's API
    (MathJax.Hub.Queue), an uncaught exception on a book page that loads MathJax 3."""
    import ipywidgets

    def tree(widget):
        yield widget
        for child in getattr(widget, "children", ()):
            yield from tree(child)

    for w in (widgets.attention_viewer(model, TOK, PROMPT, live=True),
              widgets.temperature_widget(model, TOK, PROMPT, n_tokens=4, live=True)):
        for part in tree(w.live):
            assert not getattr(part, "description", ""), part
            assert not isinstance(part, (ipywidgets.Label, ipywidgets.HTMLMath)), part


# ---- the static widget's script, in a real browser -------------------------------------------------
from test_browser import ICON, Server, browser, context  # noqa: E402,F401  (the browser test's Chromium)

SHOW_POSITIONS = """([positions, expected]) => {
  const root = document.querySelector(".gpt-widget");
  const controls = root.querySelectorAll("[data-widget-control]");
  const normal = html => { const d = document.createElement("div"); d.innerHTML = html; return d.innerHTML; };
  return positions.map((position, n) => {
    controls.forEach((control, j) => {
      control.value = String(position[j]);
      control.dispatchEvent(new Event(control.tagName === "SELECT" ? "change" : "input"));
    });
    const shown = Array.from(root.querySelectorAll("[data-widget-output]")).map(o => o.innerHTML);
    return JSON.stringify(shown) === JSON.stringify(expected[n].map(normal));
  });
}"""


def test_the_script_shows_the_view_of_every_control_position(model, context, tmp_path):
    import itertools
    pages = {"attention": widgets.attention_viewer(model, TOK, PROMPT, live=False).html,
             "temperature": widgets.temperature_widget(model, TOK, PROMPT, n_tokens=6, live=False).html}
    for name, body in pages.items():
        (tmp_path / f"{name}.html").write_text(f"<!doctype html><html><head><meta charset='utf-8'>{ICON}</head>"
                                                f"<body>{body}</body></html>")
    server = Server(tmp_path)
    try:
        for name, body in pages.items():
            data = widget_data(body)
            positions = list(itertools.product(*(range(len(options)) for options in data["labels"])))
            expected = [data["views"][data["index"][flat(p, data["labels"])]] for p in positions]
            page = context.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server.url + f"{name}.html")
            shown = page.evaluate(SHOW_POSITIONS, [positions, expected])
            page.close()
            assert errors == [] and len(shown) == len(positions)
            assert all(shown), [p for p, ok in zip(positions, shown) if not ok][:5]
    finally:
        server.close()


def test_the_distribution_never_shows_a_negative_zero_and_counts_the_cut_others_apart():
    from lib.tokenizer import BPETokenizer
    from lib.widgets.temperature import N_BARS, distribution_html

    logits = np.zeros(256)
    logits[65] = 40.0                                        # one token holds (almost) all the mass
    page = distribution_html(BPETokenizer(), logits, 0.25)
    assert "entropy 0.00 bits" in page and "-0.00" not in page
    page = distribution_html(BPETokenizer(), np.linspace(0, 1, 256), 1.0, top_k=40)
    assert f"{40 - N_BARS} others ({256 - 40} more cut)" in page
