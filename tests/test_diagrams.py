"""lib.diagrams: every diagram is well-formed SVG with alt text, drawn in its chapter, and drawn
from lib's numbers: change a number in the GPT-2 preset (or in the tokenizer's example, the
training recipe, the fine-tuning task) and the diagrams that show it change with it."""
import base64
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

import lib.diagrams as diagrams
import lib.finetune as ft
import lib.train
from lib import GPTConfig, param_counts
from lib.diagrams import DIAGRAMS, draw, tokenization

ROOT = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"
MAX_WIDTH = 720     # px: the book's text column is about 690 px wide at 1280; wider would shrink the text
MIN_ALT = 150       # characters: the alt text says what the diagram shows, with its numbers

# Which fields of GPTConfig.gpt2() each diagram shows (directly or through counts and shapes).
GPT2 = dict(vocab_size=50257, n_ctx=1024, n_layer=12, n_head=12, n_embd=768)
SHOWS = {
    "bpe_merges": set(),
    "embeddings": {"vocab_size", "n_ctx", "n_embd"},
    "causal_attention": {"n_head", "n_embd"},
    "multi_head": {"n_head", "n_embd"},
    "block": {"n_layer", "n_head", "n_embd"},
    "model": {"vocab_size", "n_ctx", "n_layer", "n_embd"},
    "training_step": {"vocab_size", "n_ctx", "n_layer", "n_embd"},
    "lr_schedule": set(),
    "prefill_decode": {"n_ctx"},
    "kv_cache": {"n_ctx", "n_layer", "n_head", "n_embd"},
    "likelihood_scoring": set(),
    "gpt1_classification": set(),
    "rope": {"n_head", "n_embd"},
    "gqa": {"n_layer", "n_head", "n_embd"},
    "attention_masks": set(),
}
CHANGES = {"vocab_size": 50304, "n_ctx": 2048, "n_layer": 10, "n_head": 16, "n_embd": 960}


@pytest.fixture(scope="module")
def drawn():
    return {name: draw(name) for name in DIAGRAMS}


class ImgParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.imgs.append(dict(attrs))


def test_every_diagram_is_listed_here():
    assert set(SHOWS) == set(DIAGRAMS)


@pytest.mark.parametrize("name", DIAGRAMS)
def test_diagram_is_svg_of_a_readable_size_with_alt_text(name, drawn):
    d = drawn[name]
    root = ET.fromstring(d.svg)                                  # well-formed XML
    assert root.tag == SVG + "svg"
    assert (int(root.get("width")), int(root.get("height"))) == (d.width, d.height)
    assert [int(v) for v in root.get("viewBox").split()[2:]] == [d.width, d.height]
    assert 300 <= d.width <= MAX_WIDTH and 150 <= d.height <= 800, (d.width, d.height)
    assert root.find(SVG + "title").text == d.alt and len(d.alt) >= MIN_ALT
    sizes = [int(t.get("font-size")) for t in root.iter(SVG + "text")]
    assert sizes and min(sizes) >= 11                            # legible at 100% and in print
    assert all(t.text and t.text.strip() for t in root.iter(SVG + "text"))


@pytest.mark.parametrize("name", DIAGRAMS)
def test_html_is_an_img_with_the_svg_inline_and_alt_text(name, drawn):
    d = drawn[name]
    parser = ImgParser()
    parser.feed(d._repr_html_())
    [img] = parser.imgs
    assert img["class"] == "gpt-diagram" and img["data-diagram"] == name and img["alt"] == d.alt
    prefix = "data:image/svg+xml;base64,"
    assert img["src"].startswith(prefix)                         # nothing to fetch: works offline
    assert base64.b64decode(img["src"][len(prefix):]).decode("utf-8") == d.svg
    assert (int(img["width"]), int(img["height"])) == (d.width, d.height)


def test_unknown_name_is_refused():
    with pytest.raises(ValueError, match="unknown diagram 'nope'; expected one of"):
        draw("nope")


@pytest.mark.parametrize("field", CHANGES)
def test_changing_a_number_of_the_gpt2_preset_changes_the_diagrams_that_show_it(field, drawn, monkeypatch):
    changed = {**GPT2, field: CHANGES[field]}
    assert GPTConfig.gpt2() == GPTConfig(**GPT2)                 # SHOWS describes the preset as it is
    monkeypatch.setattr(GPTConfig, "gpt2", classmethod(lambda cls, **overrides: cls(**{**changed, **overrides})))
    after = {name: draw(name) for name in DIAGRAMS}
    showing = {name for name in DIAGRAMS if field in SHOWS[name]}
    assert {name for name in DIAGRAMS if after[name].svg != drawn[name].svg} == showing
    assert {name for name in DIAGRAMS if after[name].alt != drawn[name].alt} == showing


def test_the_model_diagram_shows_the_presets_total(monkeypatch):
    assert "124,439,808" in draw("model").svg
    monkeypatch.setattr(GPTConfig, "gpt2", GPTConfig.gpt2_medium)
    total = param_counts(GPTConfig.gpt2_medium())["total"]
    svg = draw("model").svg
    assert f"{total:,}" in svg and "124,439,808" not in svg


def test_the_bpe_diagram_draws_the_merges_lib_learns(monkeypatch):
    assert "merge 3: (256, 257) → 258" in draw("bpe_merges").svg   # the chapter's hand-checked merges
    monkeypatch.setattr(tokenization, "BPE_TEXT", "abcabcabd")
    svg = draw("bpe_merges").svg
    assert "merge 1: (97, 98) → 256" in svg and "merge 2: (99, 256) → 257" in svg and "“cab”" in svg


def test_the_schedule_diagram_follows_the_training_recipe(monkeypatch):
    before = draw("lr_schedule")
    monkeypatch.setitem(lib.train.RECIPES["gpt2"], "warmup_iters", 300)
    after = draw("lr_schedule")
    assert after.svg != before.svg and "over 300 steps" in after.svg and "over 300 steps" not in before.svg


def test_the_finetuning_diagram_follows_the_task(monkeypatch):
    assert f"T = {ft.TASK['passage_len'] + 2} token ids" in draw("gpt1_classification").svg
    monkeypatch.setitem(ft.TASK, "passage_len", 40)
    assert "T = 42 token ids" in draw("gpt1_classification").svg


def test_each_diagram_is_drawn_once_in_its_chapter():
    calls = {}
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                for name in re.findall(r"""\bdraw\(["'](\w+)["']\)""", "".join(cell["source"])):
                    calls.setdefault(name, []).append(path.relative_to(ROOT).with_suffix("").as_posix())
    assert calls == {name: [chapter] for name, (chapter, _) in DIAGRAMS.items()}


def test_the_package_docstring_names_every_diagram():
    for name in DIAGRAMS:
        assert f"`{name}`" in diagrams.__doc__
