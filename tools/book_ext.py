"""Sphinx extension of the book (loaded through `sphinx: local_extensions` in _config.yml).

1. Offline assets. At the start of every build (so a plain `jb build .` works too) it runs
   tools/fetch_assets.py, which does nothing when the files are there, and adds their folder
   to `html_static_path`. Adding it here, after Jupyter Book has written the configuration,
   keeps Jupyter Book from adding every .js file of that folder to every page.

2. The root index.html: a redirect to the first page, as sphinx-external-toc writes it,
   plus the book's icon (without one, the browser asks for /favicon.ico and logs a 404).

3. The course's style sheet, tools/book_static/course.css: room for code lines of 88
   characters on a 1280-pixel window.
"""
import html
from pathlib import Path

import fetch_assets  # a sibling module: local_extensions puts tools/ on sys.path


COURSE_STATIC = Path(__file__).resolve().parent / "book_static"


def add_offline_assets(app, config):
    fetch_assets.fetch()
    config.html_static_path.append(str(fetch_assets.STATIC))
    config.html_static_path.append(str(COURSE_STATIC))


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
    app.connect("config-inited", add_offline_assets)
    app.add_css_file("course.css")
    # Before sphinx-external-toc's handler (priority 500), which then keeps this file.
    app.connect("build-finished", write_root_redirect, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
