"""Two interactive views of a model for the book: the temperature widget (chapter 6) and the
attention viewer (chapter 3).

    temperature_widget(model, tokenizer, prompt)   # next-token distribution and a sample
    attention_viewer(model, tokenizer, prompt)     # attention matrix of any layer and head

`model` is either twin's GPT, `tokenizer` a lib.tokenizer.BPETokenizer (`BPETokenizer()` is the
byte tokenizer of the small Shakespeare model, `gpt2_tokenizer()` GPT-2's). Each call returns an
object that a notebook displays in two parts:

1. A static widget that works wherever HTML does (the built book, Jupyter, Colab), with no
   kernel. When the cell runs, every state the controls can select (each temperature, top-k and
   top-p setting; each layer and head) is computed and drawn as HTML by Python, and the views
   are embedded in the page as JSON; a few lines of inline JavaScript show the view the controls
   select. It loads nothing. Its markup follows the contract in tests/test_browser.py (class
   `gpt-widget`, `data-widget-control`, `data-widget-output`).
2. With a kernel, live ipywidgets controls that run the model again for any prompt and any
   setting, drawn by the same Python functions. In the built book they would be controls
   without a kernel behind them, so the widget's stylesheet hides them there (`.cell_output` is
   the output class of the book's pages only).

Bad input typed into a live widget (an empty prompt; a prompt longer than the context, which is
cropped to its last n_ctx tokens as generation does) is reported as a message in the widget.
"""
from __future__ import annotations

import base64
import html
import io
import json
import numbers
import uuid

import numpy as np

from . import sampling
from .sampling import check_sampling, filtered_probs

TEMPERATURES = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0)  # the static widget's slider
TOP_KS = (None, 40, 5)                                            # None: no top-k cut
TOP_PS = (None, 0.9, 0.5)                                         # None: no top-p cut
N_BARS = 10          # tokens drawn in the distribution chart, the most likely first
MASKED = (225, 225, 225, 255)  # RGBA of attention cells that the causal mask removes

STYLE = """<style>
.gpt-widget, .gptw-live { font-family: system-ui, sans-serif; font-size: 14px; color: #222;
  background: #fff; border: 1px solid #ccc; border-radius: 6px; padding: 10px 12px; margin: 6px 0;
  width: fit-content; max-width: 100%; box-sizing: border-box; overflow-x: auto; }
.cell_output .gptw-live { display: none; }  /* the built book: no kernel behind live controls */
.gptw-controls { display: flex; flex-wrap: wrap; gap: 6px 20px; align-items: center; margin-bottom: 8px; }
.gptw-controls label { display: inline-flex; gap: 6px; align-items: center; }
.gptw-note { color: #666; font-size: 12px; margin: 4px 0; line-height: 1.35; }
.gptw-msg { color: #a03030; font-weight: 600; margin: 4px 0; line-height: 1.35; }
.gptw-head { margin: 2px 0 6px; line-height: 1.35; }
.gptw-bars { display: grid; grid-template-columns: max-content 280px max-content; gap: 2px 8px;
  align-items: center; font-size: 13px; line-height: 1.35; }
.gptw-row { display: contents; }
.gptw-tok { font-family: monospace; white-space: pre; text-align: right; }
.gptw-track { background: #eee; height: 14px; }
.gptw-bar { height: 100%; background: #3b6ea8; }
.gptw-cut { color: #999; }
.gptw-cut .gptw-bar { background: repeating-linear-gradient(45deg, #bbb 0 3px, #e4e4e4 3px 6px); }
.gptw-rest { color: #555; }
.gptw-rest .gptw-bar { background: #9db8d9; }
.gptw-sample { font-family: monospace; white-space: pre-wrap; background: #f7f7f7; color: #111;
  border-left: 3px solid #3b6ea8; padding: 6px 8px; margin-top: 8px; line-height: 1.35; }
.gptw-prompt { color: #888; }
.gptw-att { display: grid; grid-template-columns: max-content max-content; gap: 2px; }
.gptw-cols { display: flex; align-items: flex-end; }
.gptw-cols span { writing-mode: vertical-lr; text-orientation: upright; text-align: right;
  width: var(--cell); line-height: var(--cell); max-height: 90px; }
.gptw-rows { display: flex; flex-direction: column; }
.gptw-rows span { text-align: right; padding-right: 3px; height: var(--cell); line-height: var(--cell);
  max-width: 110px; }
.gptw-cols span, .gptw-rows span { font-family: monospace; white-space: pre; overflow: hidden; color: #333; }
.gptw-att img { image-rendering: pixelated; display: block; }
.gptw-legend { display: inline-block; width: 90px; height: 10px; vertical-align: middle; }
</style>"""

# Shows the view selected by the controls. data.views[data.index[flat]] holds one HTML string
# per [data-widget-output], where flat is the controls' positions read as one mixed-radix number.
SCRIPT = """(function () {
  var script = document.currentScript;  // null in a shadow tree: then find the widget by its id
  var root = (script && script.closest(".gpt-widget")) || document.getElementById("%s");
  var data = JSON.parse(root.querySelector("script[type='application/json']").textContent);
  var controls = root.querySelectorAll("[data-widget-control]");
  var outputs = root.querySelectorAll("[data-widget-output]");
  function draw() {
    var flat = 0;
    controls.forEach(function (control, j) {
      var position = Number(control.value);
      flat = flat * data.labels[j].length + position;
      var shown = root.querySelector("[data-widget-value='" + j + "']");
      if (shown) { shown.textContent = data.labels[j][position]; }
    });
    var view = data.views[data.index[flat]];
    outputs.forEach(function (output, k) { output.innerHTML = view[k]; });
  }
  controls.forEach(function (control) {
    control.addEventListener("input", draw);
    control.addEventListener("change", draw);
  });
})();"""


# ---- the model, either twin ----------------------------------------------------------------------
def _numpy(x):
    """A twin's output (array, tensor, or a tuple/list of them) as float numpy arrays."""
    if isinstance(x, (tuple, list)):
        return type(x)(_numpy(v) for v in x)
    return x.float().cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)


def _ids(x):
    """Token ids from either twin (array or tensor) as a numpy array."""
    return x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)


def _forward(model, ids, **options):
    """model.forward on a (1, T) prompt with either twin; outputs as numpy arrays."""
    from .train import twin_of
    if twin_of(model) == "torch":
        import torch
        with torch.no_grad():
            return _numpy(model.forward(torch.as_tensor(ids, device=model.wte.weight.device), **options))
    return model.forward(ids, **options)


class PromptError(ValueError):
    """A prompt the widgets cannot use; its message is shown in a live widget."""


def encode_prompt(tokenizer, prompt, n_ctx):
    """prompt text -> (ids (1, T) with T <= n_ctx, note). A prompt longer than the context is
    cropped to its last n_ctx tokens, as generation does; the note says so ('' otherwise)."""
    ids = tokenizer.encode(prompt, allowed_special="all")
    if not ids:
        raise PromptError("The prompt is empty: type at least one character, so the model has a token to read.")
    note = ""
    if len(ids) > n_ctx:
        note = (f"The prompt is {len(ids)} tokens, longer than the model's context of {n_ctx}: "
                f"like generation, the model sees only its last {n_ctx} tokens.")
    return np.array([ids[-n_ctx:]]), note                    # (1, T)


def token_label(tokenizer, token_id):
    """A token as readable text: spaces, newlines and tabs made visible; bytes that are not
    printable UTF-8 text on their own (control bytes, a piece of a multi-byte character)
    written as \\xNN."""
    raw = tokenizer.decode_bytes([int(token_id)])
    text = raw.decode("utf-8", errors="replace")
    text = text.replace(" ", "\u2423").replace("\n", "\u21b5").replace("\t", "\u21e5")
    if "\ufffd" in text or not text.isprintable():
        return "".join(f"\\x{b:02x}" for b in raw)
    return text


# ---- the static widget -------------------------------------------------------------------------
def static_widget(controls, views, index, initial, note=""):
    """The HTML of a widget that needs no kernel.

    controls: [(label, kind, option labels)], kind "range" (a slider) or "select".
    views: [tuple of HTML strings, one per output]; index: view number for each combination of
    control positions (flat, mixed radix, first control most significant); initial: the
    controls' starting positions. The outputs start with the initial view, drawn here, so the
    widget shows it even where scripts do not run.
    """
    wid = f"gpt-widget-{uuid.uuid4().hex[:12]}"
    parts = []
    for j, ((label, kind, labels), position) in enumerate(zip(controls, initial)):
        if kind == "range":
            control = (f'<input type="range" min="0" max="{len(labels) - 1}" step="1" value="{position}" '
                       f'data-widget-control> <span data-widget-value="{j}">{html.escape(labels[position])}</span>')
        else:
            options = "".join(f'<option value="{i}"{" selected" if i == position else ""}>{html.escape(t)}</option>'
                              for i, t in enumerate(labels))
            control = f"<select data-widget-control>{options}</select>"
        parts.append(f"<label>{html.escape(label)} {control}</label>")
    flat = 0
    for (_, _, labels), position in zip(controls, initial):
        flat = flat * len(labels) + position
    first = views[index[flat]]
    data = json.dumps({"labels": [labels for _, _, labels in controls], "index": index, "views": views})
    data = data.replace("</", "<\\/")                        # no "</script>" inside the JSON
    outputs = "".join(f"<div data-widget-output>{view}</div>" for view in first)
    note = f'<div class="gptw-note">{note}</div>' if note else ""
    return (f'{STYLE}<div class="gpt-widget" id="{wid}"><div class="gptw-controls">{"".join(parts)}</div>'
            f'{outputs}{note}<script type="application/json">{data}</script>'
            f"<script>{SCRIPT % wid}</script></div>")


class _Widget:
    """What a notebook displays: the static widget, then (with a kernel) the live controls."""
    html: str
    live = None

    def _ipython_display_(self):
        from IPython.display import HTML, display
        display(HTML(self.html))
        if self.live is not None:
            display(self.live)

    def show_message(self, text):
        self.message.value = f'<div class="gptw-msg">{html.escape(text)}</div>' if text else ""


def _in_kernel():
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


def _live_box(controls, labels, outputs, vertical):
    """The live widget: a note, the controls (each after its label, in a column or a row), the
    outputs. The labels are HTML widgets, not ipywidgets `description`s: ipywidgets typesets a
    description with MathJax 2's API, which raises on a book page that loads MathJax 3."""
    import ipywidgets as w
    width = "7em" if vertical else "0"                       # labels aligned in a column
    rows = [w.HBox([w.HTML(f'<span style="display: inline-block; min-width: {width}; margin: 0 6px 0 12px">'
                           f"{html.escape(label)}</span>"), control]) for label, control in zip(labels, controls)]
    box = w.VBox([w.HTML(STYLE + '<div class="gptw-note">Live: runs the model for any prompt '
                         "and setting (needs a running kernel).</div>"),
                  w.VBox(rows) if vertical else w.HBox(rows), *outputs])
    box.add_class("gptw-live")
    return box


# ---- temperature, top-k, top-p -----------------------------------------------------------------
def _setting_label(value, off="off"):
    return off if value is None else f"{value:g}"


def distribution_html(tokenizer, logits, temperature, top_k=None, top_p=None):
    """The next-token distribution as a bar chart: the N_BARS most likely tokens with the
    probability sampling gives each after the top-k / top-p cut (cut tokens hatched grey at
    the probability they had before it), then all other tokens together. logits: (V,)."""
    V = logits.shape[-1]
    if temperature == 0:                                     # greedy: all mass on the argmax
        before = after = np.eye(V)[np.argmax(logits)]        # (V,)
        head = (f"temperature 0 is greedy: always the most likely token "
                f"(top-k {_setting_label(top_k)} and top-p {_setting_label(top_p)} change nothing)")
    else:
        before = filtered_probs(logits[None], temperature)[0]                 # (V,)
        after = filtered_probs(logits[None], temperature, top_k, top_p)[0]    # (V,)
        kept = after > 0
        bits = -(after[kept] * np.log2(after[kept])).sum()
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
    rows.append(f'<div class="gptw-row gptw-rest"><span class="gptw-tok">{len(rest)} others</span>'
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


class SettingsSampler:
    """Samples row i of a batch with its own settings[i] = (temperature, top_k, top_p), through
    the sampling steps of the logits' twin (lib.sampling's for numpy arrays, the torch twin's
    on-device versions for tensors). Every row uses the same uniform number at each step, from
    one Generator seeded as lib.sampling.Sampler's: row i picks exactly the tokens that
    `model.generate(prompt, n, temperature=..., top_k=..., top_p=..., seed=seed)` picks, and two
    rows differ only because their settings do."""

    def __init__(self, settings, seed):
        for t, k, p in settings:
            check_sampling(t, k, p)
        self.rng = np.random.default_rng(seed)
        temperature = np.array([t if t else 1.0 for t, _, _ in settings])     # (B,), 1 for greedy rows
        self.groups = []                                     # rows sharing a cut: (k, p, rows, their T)
        for k, p in dict.fromkeys((k, p) for t, k, p in settings if t):
            rows = np.array([i for i, (t, k2, p2) in enumerate(settings) if t and (k2, p2) == (k, p)])
            self.groups.append((k, p, rows, temperature[rows, None]))

    def __call__(self, logits):                              # (B, V) -> (B,) ids, same twin
        if hasattr(logits, "cpu"):                           # torch: its steps, on the logits' device
            import torch
            from .torch_twin import generate as steps
            z64, like = logits.double(), (lambda a: torch.as_tensor(a, device=logits.device))
        else:
            steps = sampling
            z64, like = np.asarray(logits, np.float64), np.asarray
        ids = logits.argmax(-1)                              # (B,): greedy rows keep these
        u = self.rng.random(1)                               # (1,), as a one-row sampler draws it
        for k, p, rows, temperature in self.groups:
            z = z64[like(rows)] / like(temperature)          # (b, V): as the samplers divide
            ids[like(rows)] = steps.draw(steps.filtered_probs(z, 1.0, k, p), like(np.repeat(u, len(rows))))
        return ids


def _generate_all(model, ids, settings, n_tokens, seed):
    """ids (1, T) -> (len(settings), n_tokens) new ids, row i sampled with settings[i]; one
    batched generation, so that precomputing every setting costs about as much as one."""
    stream = model.stream(np.repeat(ids, len(settings), axis=0), n_tokens, seed=seed)
    stream.sampler = SettingsSampler(settings, seed)         # the stream calls it once per step
    return np.stack([_ids(step) for step in stream], axis=1)               # (B, n_tokens)


class TemperatureWidget(_Widget):
    """See temperature_widget. Attributes: html (the static widget), live (an ipywidgets box or
    None) and, when live, controls ({name: ipywidget}), view, sample and message (HTML widgets)."""

    def __init__(self, model, tokenizer, prompt, temperatures=TEMPERATURES, top_ks=TOP_KS, top_ps=TOP_PS,
                 n_tokens=100, seed=0, temperature=1.0, live=None):
        if temperature not in temperatures:
            raise ValueError(f"temperature={temperature!r} must be one of temperatures={tuple(temperatures)}")
        self.model, self.tokenizer, self.n_tokens = model, tokenizer, n_tokens
        self.html = self._static(prompt, temperatures, top_ks, top_ps, seed, temperatures.index(temperature))
        if live if live is not None else _in_kernel():
            self.live = self._live(prompt, temperature, seed)

    def _static(self, prompt, temperatures, top_ks, top_ps, seed, start):
        ids, note = encode_prompt(self.tokenizer, prompt, self.model.config.n_ctx)
        logits = _forward(self.model, ids)[0, -1]                            # (V,)
        grid = [(t, k, p) for t in temperatures for k in top_ks for p in top_ps]
        settings = list(dict.fromkeys((t, k, p) if t else (0.0, None, None) for t, k, p in grid))
        new = _generate_all(self.model, ids, settings, self.n_tokens, seed)  # (len(settings), n_tokens)
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
        return _live_box(self.controls.values(), labels, [self.message, self.view, self.sample], vertical=True)

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
        logits = _forward(self.model, ids)[0, -1]                            # (V,)
        new = _ids(self.model.generate(ids, self.n_tokens, temperature=c["temperature"], top_k=top_k,
                                         top_p=top_p, seed=c["seed"]))[0, ids.shape[1]:]  # (n_tokens,)
        self.view.value = STYLE + distribution_html(self.tokenizer, logits, c["temperature"], top_k, top_p)
        self.sample.value = STYLE + sample_html(self.tokenizer, ids[0], new)


def temperature_widget(model, tokenizer, prompt, **options) -> TemperatureWidget:
    """The next-token distribution after `prompt` and a sampled continuation, as the reader moves
    the temperature, top-k and top-p controls. Static: temperatures (default 0 to 2 by 0.25),
    top_ks, top_ps (None = no cut), samples of n_tokens tokens (default 100) drawn with `seed`,
    starting at `temperature` (default 1). live=None: live controls when a kernel runs."""
    return TemperatureWidget(model, tokenizer, prompt, **options)


# ---- attention ---------------------------------------------------------------------------------
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
    _, atts = _forward(model, ids, return_attention=True)    # n_layer x (1, H, T, T)
    att = np.stack([a[0] for a in atts])                     # (L, H, T, T)
    return att, [token_label(tokenizer, i) for i in ids[0]], note


class AttentionViewer(_Widget):
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
        controls = [("layer", "select", [str(l) for l in range(L)]), ("head", "select", [str(h) for h in range(H)])]
        self.html = static_widget(controls, views, list(range(L * H)), [layer, head], html.escape(note))
        self._att = None
        if live if live is not None else _in_kernel():
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
        return _live_box(self.controls.values(), ["prompt", "layer", "head"], [self.message, self.view],
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
