"""Show lib's own source in a notebook, so the book never carries a second copy of the code.

`show(obj)` renders one function or class; `side_by_side(numpy_obj, torch_obj)` renders the two
twins of a component in two columns. Both highlight with Pygments into plain HTML, which works
live in Jupyter and Colab and in the static book.
"""
from __future__ import annotations

import html
import inspect
import textwrap


def source(obj) -> str:
    """The source text of a function, class or method, dedented."""
    return textwrap.dedent(inspect.getsource(obj)).rstrip()


def _highlighted(obj) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    where = f"{inspect.getmodule(obj).__name__}.{obj.__qualname__}"
    body = highlight(source(obj), PythonLexer(), HtmlFormatter(nowrap=True))
    return (f'<div class="lib-source"><div class="lib-source-name"><code>{html.escape(where)}</code></div>'
            f'<pre style="font-size: 0.85em; line-height: 1.35; overflow-x: auto; margin: 0">{body}</pre></div>')


_STYLE = None


def _style() -> str:
    global _STYLE
    if _STYLE is None:
        from pygments.formatters import HtmlFormatter
        _STYLE = "<style>" + HtmlFormatter().get_style_defs(".lib-source pre") + "</style>"
    return _STYLE


def show(*objs):
    """Display the source of each object, one after another."""
    from IPython.display import HTML
    return HTML(_style() + "".join(_highlighted(o) for o in objs))


def side_by_side(numpy_obj, torch_obj):
    """Display a numpy twin and its torch twin in two columns."""
    from IPython.display import HTML
    cell = '<div style="flex: 1 1 0; min-width: 0">{}</div>'
    return HTML(_style() + '<div style="display: flex; gap: 1em">'
                + cell.format(_highlighted(numpy_obj)) + cell.format(_highlighted(torch_obj)) + "</div>")
