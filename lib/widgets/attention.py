"""The attention viewer: the attention weights of every layer and head over the tokens of a
prompt, one (T, T) matrix drawn as an image."""
from __future__ import annotations

import base64
import html
import io
import numbers

import numpy as np

from ..twins import forward_outputs
from .live import Widget, in_kernel, live_box
from .prompt import PromptError, encode_prompt, token_label
from .static import STYLE, static_widget

MASKED = (225, 225, 225, 255)  # RGBA of attention cells that the causal mask removes


def attention_png(weights):
    """(T, T) attention weights -> PNG data URI, one pixel per weight: viridis from 0 to 1,
    light grey where the causal mask removed the key (it lies in the query's future)."""
    from matplotlib import colormaps
    from matplotlib.image import imsave
    T = weights.shape[0]
    rgba = colormaps["viridis"](np.clip(weights, 0, 1), bytes=True)          # (T, T, 4) uint8
    rgba[np.triu(np.ones((T, T), dtype=bool), k=1)] = MASKED
    buf = io.BytesIO()
    imsave(buf, rgba, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _legend():
    from matplotlib import colormaps
    from matplotlib.colors import to_hex
    stops = ", ".join(to_hex(colormaps["viridis"](x)) for x in np.linspace(0, 1, 6))
    grey = "#%02x%02x%02x" % MASKED[:3]
    return (f'0 <span class="gptw-legend" style="background: linear-gradient(to right, {stops})"></span> 1'
            f' &nbsp; <span class="gptw-legend" style="width: 12px; background: {grey}"></span> masked (future)')


def attention_html(att, labels, layer, head):
    """One head's (T, T) attention (rows: queries, columns: keys) with the tokens on both axes,
    and how much weight it puts, on average, on the previous token, itself and the first token.
    att: (L, H, T, T) for the whole prompt."""
    weights = att[layer, head]                               # (T, T)
    T = weights.shape[0]
    cell = int(np.clip(640 // T, 2, 22))                     # pixels per weight
    labels = "".join(f"<span>{html.escape(t)}</span>" for t in labels)
    size = f"--cell: {cell}px; font-size: {min(cell - 1, 13) if cell >= 8 else 0}px"  # no labels below 8 px
    t = np.arange(1, T)
    stats = (f"previous token {weights[t, t - 1].mean():.2f}, itself {np.diag(weights).mean():.2f}, "
             f"first token {weights[1:, 0].mean():.2f}" if T > 1 else "a single token attends to itself")
    return (f'<div class="gptw-head">layer {layer}, head {head}: mean weight on the {stats}</div>'
            f'<div class="gptw-att" style="{size}"><div></div><div class="gptw-cols">{labels}</div>'
            f'<div class="gptw-rows">{labels}</div>'
            f'<img src="{attention_png(weights)}" width="{T * cell}" height="{T * cell}" '
            f'alt="attention weights of layer {layer}, head {head}"></div>'
            f'<div class="gptw-note">row: the query token; column: the key it reads; {_legend()}</div>')


def prompt_attention(model, tokenizer, prompt):
    """(att (L, H, T, T), token labels, note) for a prompt, cropped to the context."""
    ids, note = encode_prompt(tokenizer, prompt, model.config.n_ctx)
    atts = forward_outputs(model, ids, return_attention=True).attentions  # n_layer x (1, H, T, T)
    att = np.stack([a[0] for a in atts])                     # (L, H, T, T)
    return att, [token_label(tokenizer, i) for i in ids[0]], note


class AttentionViewer(Widget):
    """See attention_viewer. Attributes: html (the static widget), live (an ipywidgets box or
    None) and, when live, controls ({name: ipywidget}), view and message (HTML widgets)."""

    def __init__(self, model, tokenizer, prompt, layer=0, head=0, live=None):
        self.model, self.tokenizer = model, tokenizer
        L, H = model.config.n_layer, model.config.n_head
        if not all(isinstance(i, numbers.Integral) for i in (layer, head)) or not (0 <= layer < L and 0 <= head < H):
            raise ValueError(f"layer={layer!r}, head={head!r}: expected integers 0 <= layer < {L} and 0 <= head < {H}")
        layer, head = int(layer), int(head)                  # numpy integers too (np.unravel_index gives them)
        att, labels, note = prompt_attention(model, tokenizer, prompt)
        views = [(attention_html(att, labels, l, h),) for l in range(L) for h in range(H)]
        # a choice of one is no control: a model of one head per layer gets a layer selector alone
        shown = [(name, n, at) for name, n, at in (("layer", L, layer), ("head", H, head)) if n > 1]
        controls = [(name, "select", [str(i) for i in range(n)]) for name, n, _ in shown]
        self.html = static_widget(controls, views, list(range(L * H)), [at for *_, at in shown], html.escape(note))
        self._att = None
        if live if live is not None else in_kernel():
            self.live = self._live(prompt, layer, head)

    def _live(self, prompt, layer, head):
        import ipywidgets as w
        L, H = self.model.config.n_layer, self.model.config.n_head
        self.controls = {"prompt": w.Textarea(value=prompt, continuous_update=False),
                         "layer": w.Dropdown(options=range(L), value=layer, layout=w.Layout(width="70px")),
                         "head": w.Dropdown(options=range(H), value=head, layout=w.Layout(width="70px"))}
        self.message, self.view = w.HTML(), w.HTML()
        self.controls["prompt"].observe(self.refresh, names="value")
        self.controls["layer"].observe(self.redraw, names="value")
        self.controls["head"].observe(self.redraw, names="value")
        self.refresh()
        return live_box(self.controls.values(), ["prompt", "layer", "head"], [self.message, self.view],
                         vertical=False)

    def refresh(self, change=None):
        """Run the model on the live prompt; a bad prompt becomes a message."""
        try:
            self._att, self._labels, note = prompt_attention(self.model, self.tokenizer, self.controls["prompt"].value)
        except PromptError as e:
            self._att = None
            self.show_message(str(e))
        else:
            self.show_message(note)
        self.redraw()

    def redraw(self, change=None):
        """Draw the selected layer and head of the last prompt the model ran on."""
        if self._att is None:
            self.view.value = ""
            return
        self.view.value = STYLE + attention_html(self._att, self._labels, self.controls["layer"].value,
                                                 self.controls["head"].value)


def attention_viewer(model, tokenizer, prompt, **options) -> AttentionViewer:
    """The attention weights of every layer and head over the tokens of `prompt`: pick a layer
    and a head, see the (T, T) matrix. Options: layer, head (shown first), live (None: live
    controls when a kernel runs)."""
    return AttentionViewer(model, tokenizer, prompt, **options)
