"""The temperature widget: the next-token distribution after a prompt and a sampled
continuation, as the reader moves the temperature, top-k and top-p controls."""
from __future__ import annotations

import html

import numpy as np

from ..sampling import filtered_probs
from ..twins import forward, to_numpy
from .live import Widget, in_kernel, live_box
from .prompt import PromptError, encode_prompt, token_label
from .sampler import generate_all
from .static import STYLE, static_widget

TEMPERATURES = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0)  # the static widget's slider
TOP_KS = (None, 40, 5)                                            # None: no top-k cut
TOP_PS = (None, 0.9, 0.5)                                         # None: no top-p cut
N_BARS = 10          # tokens drawn in the distribution chart, the most likely first


def _setting_label(value, off="off"):
    return off if value is None else f"{value:g}"


def distribution_html(tokenizer, logits, temperature, top_k=None, top_p=None):
    """The next-token distribution as a bar chart: the N_BARS most likely tokens with the
    probability sampling gives each after the top-k / top-p cut (cut tokens hatched grey at
    the probability they had before it), then the other tokens that sampling keeps, together,
    and how many more the cut removed. logits: (V,)."""
    V = logits.shape[-1]
    if temperature == 0:                                     # greedy: all mass on the argmax
        before = after = np.eye(V)[np.argmax(logits)]        # (V,)
        head = (f"temperature 0 is greedy: always the most likely token "
                f"(top-k {_setting_label(top_k)} and top-p {_setting_label(top_p)} change nothing)")
    else:
        before = filtered_probs(logits[None], temperature)[0]                 # (V,)
        after = filtered_probs(logits[None], temperature, top_k, top_p)[0]    # (V,)
        kept = after > 0
        bits = max(0.0, float(-(after[kept] * np.log2(after[kept])).sum()))   # never a "-0.00"
        head = (f"temperature {temperature:g}, top-k {_setting_label(top_k)}, top-p {_setting_label(top_p)}: "
                f"sampling from {kept.sum()} of {V} tokens (entropy {bits:.2f} bits)")
    rows = []
    order = np.argsort(-logits, kind="stable")               # (V,) most likely first
    for i in order[:N_BARS]:
        cut = after[i] == 0
        shown = before[i] if cut else after[i]
        text = "cut" if cut else f"{100 * after[i]:.1f}%"
        rows.append(f'<div class="gptw-row{" gptw-cut" if cut else ""}">'
                    f'<span class="gptw-tok">{html.escape(token_label(tokenizer, i))}</span>'
                    f'<div class="gptw-track"><div class="gptw-bar" style="width: {100 * shown:.2f}%"></div></div>'
                    f"<span>{text}</span></div>")
    rest = order[N_BARS:]
    n_cut = int((after[rest] == 0).sum())                    # the others that the cut removed
    others = f"{len(rest) - n_cut} others" + (f" ({n_cut} more cut)" if n_cut else "")
    rows.append(f'<div class="gptw-row gptw-rest"><span class="gptw-tok">{others}</span>'
                f'<div class="gptw-track"><div class="gptw-bar" style="width: {100 * after[rest].sum():.2f}%">'
                f"</div></div><span>{100 * after[rest].sum():.1f}% in all</span></div>")
    return f'<div class="gptw-head">{html.escape(head)}</div><div class="gptw-bars">{"".join(rows)}</div>'


def sample_html(tokenizer, prompt_ids, new_ids):
    """The prompt (grey) followed by the sampled continuation."""
    prompt = tokenizer.decode_bytes(list(prompt_ids))
    text = tokenizer.decode_bytes(list(prompt_ids) + list(new_ids))[len(prompt):]
    return (f'<div class="gptw-sample"><span class="gptw-prompt">'
            f'{html.escape(prompt.decode("utf-8", errors="replace"))}</span>'
            f'{html.escape(text.decode("utf-8", errors="replace"))}</div>')


class TemperatureWidget(Widget):
    """See temperature_widget. Attributes: html (the static widget), live (an ipywidgets box or
    None) and, when live, controls ({name: ipywidget}), view, sample and message (HTML widgets)."""

    def __init__(self, model, tokenizer, prompt, temperatures=TEMPERATURES, top_ks=TOP_KS, top_ps=TOP_PS,
                 n_tokens=100, seed=0, temperature=1.0, live=None):
        if temperature not in temperatures:
            raise ValueError(f"temperature={temperature!r} must be one of temperatures={tuple(temperatures)}")
        self.model, self.tokenizer, self.n_tokens = model, tokenizer, n_tokens
        self.html = self._static(prompt, temperatures, top_ks, top_ps, seed, temperatures.index(temperature))
        if live if live is not None else in_kernel():
            self.live = self._live(prompt, temperature, seed)

    def _static(self, prompt, temperatures, top_ks, top_ps, seed, start):
        ids, note = encode_prompt(self.tokenizer, prompt, self.model.config.n_ctx)
        logits = forward(self.model, ids)[0, -1]                             # (V,)
        grid = [(t, k, p) for t in temperatures for k in top_ks for p in top_ps]
        settings = list(dict.fromkeys((t, k, p) if t else (0.0, None, None) for t, k, p in grid))
        new = generate_all(self.model, ids, settings, self.n_tokens, seed)   # (len(settings), n_tokens)
        samples = {s: sample_html(self.tokenizer, ids[0], row) for s, row in zip(settings, new)}
        views = [(distribution_html(self.tokenizer, logits, t, k, p), samples[(t, k, p) if t else (0.0, None, None)])
                 for t, k, p in grid]
        controls = [("temperature", "range", [f"{t:g}" for t in temperatures]),
                    ("top-k", "select", [_setting_label(k) for k in top_ks]),
                    ("top-p", "select", [_setting_label(p) for p in top_ps])]
        note = (f"{note} " if note else "") + (
            f"Precomputed for this prompt: {len(settings)} samples of {self.n_tokens} tokens, seed {seed}. "
            "Every sample uses the same random numbers, so two samples differ only because their settings do.")
        return static_widget(controls, views, list(range(len(views))), [start, 0, 0], html.escape(note))

    def _live(self, prompt, temperature, seed):
        import ipywidgets as w
        V = self.model.config.vocab_size
        self.controls = {
            "prompt": w.Textarea(value=prompt, continuous_update=False),
            "temperature": w.FloatSlider(value=temperature, min=0, max=2, step=0.05, continuous_update=False),
            "top_k": w.IntSlider(value=0, min=0, max=min(V, 100), continuous_update=False),
            "top_p": w.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, continuous_update=False),
            "seed": w.BoundedIntText(value=seed, min=0, max=2**31 - 1),
        }
        labels = ["prompt", "temperature", "top-k (0: off)", "top-p (1: off)", "seed"]
        self.message, self.view, self.sample = w.HTML(), w.HTML(), w.HTML()
        for control in self.controls.values():
            control.observe(self.refresh, names="value")
        self.refresh()
        return live_box(self.controls.values(), labels, [self.message, self.view, self.sample], vertical=True)

    def refresh(self, change=None):
        """Run the model for the live controls' values; a bad prompt becomes a message."""
        c = {name: control.value for name, control in self.controls.items()}
        top_k, top_p = c["top_k"] or None, c["top_p"] if c["top_p"] < 1 else None
        try:
            ids, note = encode_prompt(self.tokenizer, c["prompt"], self.model.config.n_ctx)
        except PromptError as e:
            self.show_message(str(e))
            self.view.value = self.sample.value = ""
            return
        self.show_message(note)
        logits = forward(self.model, ids)[0, -1]                             # (V,)
        new = to_numpy(self.model.generate(ids, self.n_tokens, temperature=c["temperature"], top_k=top_k,
                                           top_p=top_p, seed=c["seed"]))[0, ids.shape[1]:]  # (n_tokens,)
        self.view.value = STYLE + distribution_html(self.tokenizer, logits, c["temperature"], top_k, top_p)
        self.sample.value = STYLE + sample_html(self.tokenizer, ids[0], new)


def temperature_widget(model, tokenizer, prompt, **options) -> TemperatureWidget:
    """The next-token distribution after `prompt` and a sampled continuation, as the reader moves
    the temperature, top-k and top-p controls. Static: temperatures (default 0 to 2 by 0.25),
    top_ks, top_ps (None = no cut), samples of n_tokens tokens (default 100) drawn with `seed`,
    starting at `temperature` (default 1). live=None: live controls when a kernel runs."""
    return TemperatureWidget(model, tokenizer, prompt, **options)
