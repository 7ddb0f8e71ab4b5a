"""Show lib's own source and long values in a notebook, at the width of the book's page.

`show(obj)` renders one function or class, so the book never carries a second copy of the code;
`side_by_side(numpy_obj, torch_obj)` renders the two twins of a component in two columns, stacked
where two lines of 88 characters do not fit side by side. Both highlight with Pygments into plain
HTML, which works live in Jupyter and Colab and in the static book. `wrapped(value)` breaks a long
printed value (a configuration, a dict of settings) into lines of 88 characters.
"""
from __future__ import annotations

import html
import inspect
import textwrap


def source(obj) -> str:
    """The source text of a function, class or method, dedented."""
    return textwrap.dedent(inspect.getsource(obj)).rstrip()


def wrapped(value, width=88) -> str:
    """str(value) broken at spaces into lines of at most `width` characters (a word longer than
    that stays whole), the lines after the first indented by four spaces."""
    return textwrap.fill(str(value), width, subsequent_indent="    ", break_long_words=False,
                         break_on_hyphens=False)


def _highlighted(obj) -> str:
    """The source as highlighted HTML at the page's code size. lib is written in lines of up to
    120 characters, so a line too long for the column wraps instead of scrolling sideways."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    where = f"{inspect.getmodule(obj).__name__}.{obj.__qualname__}"
    body = highlight(source(obj), PythonLexer(), HtmlFormatter(nowrap=True))
    return (f'<div class="lib-source"><div class="lib-source-name"><code>{html.escape(where)}</code></div>'
            f'<pre style="line-height: 1.35; white-space: pre-wrap; margin: 0">{body}</pre></div>')


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
    """Display a numpy twin and its torch twin in two columns where two lines of 88 characters
    fit side by side, one above the other where they do not (the book's course.css styles
    .lib-twins the same way; the inline style serves Jupyter and Colab)."""
    from IPython.display import HTML
    cell = '<div style="flex: 1 1 44em; min-width: 0">{}</div>'
    return HTML(_style() + '<div class="lib-twins" style="display: flex; flex-wrap: wrap; gap: 1em">'
                + cell.format(_highlighted(numpy_obj)) + cell.format(_highlighted(torch_obj)) + "</div>")
