"""What a notebook displays: the static widget, then, with a kernel, live ipywidgets controls
that run the model again for any prompt and setting, drawn by the same Python functions.

In the built book the live controls would have no kernel behind them, so static.css hides them
there (`.cell_output` is the output class of the book's pages only).
"""
from __future__ import annotations

import html

from .static import STYLE


class Widget:
    """The static widget (html), then (with a kernel) the live controls (live)."""
    html: str
    live = None

    def _ipython_display_(self):
        from IPython.display import HTML, display
        display(HTML(self.html))
        if self.live is not None:
            display(self.live)

    def show_message(self, text):
        self.message.value = f'<div class="gptw-msg">{html.escape(text)}</div>' if text else ""


def in_kernel():
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


def live_box(controls, labels, outputs, vertical):
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
