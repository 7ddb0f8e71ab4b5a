"""The static widget: HTML that shows precomputed views and needs no kernel.

Every state the controls can select is drawn by Python when the cell runs and embedded in the
page as JSON; the script in static.js shows the view the controls select. The widget loads
nothing, and its markup follows the contract in tests/test_browser.py (class `gpt-widget`,
`data-widget-control`, `data-widget-output`). static.css styles both the static and the live
widgets.
"""
from __future__ import annotations

import html
import json
import uuid
from importlib.resources import files

STYLE = "<style>\n" + files(__package__).joinpath("static.css").read_text(encoding="utf-8") + "</style>"

# Shows the view selected by the controls. data.views[data.index[flat]] holds one HTML string
# per [data-widget-output], where flat is the controls' positions read as one mixed-radix number.
# WIDGET_ID stands for the widget's id, which static_widget writes in.
SCRIPT = files(__package__).joinpath("static.js").read_text(encoding="utf-8").rstrip("\n")


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
            f'<script>{SCRIPT.replace("WIDGET_ID", wid)}</script></div>')
