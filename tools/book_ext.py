"""Sphinx extension of the book (loaded through `sphinx: local_extensions` in _config.yml).

1. Offline assets. At the start of every build (so a plain `jb build .` works too) it runs
   tools/fetch_assets.py, which does nothing when the files are there, and adds their folder
   to `html_static_path`. Adding it here, after Jupyter Book has written the configuration,
   keeps Jupyter Book from adding every .js file of that folder to every page.

2. The root index.html: a redirect to the first page, as sphinx-external-toc writes it,
   plus the book's icon (without one, the browser asks for /favicon.ico and logs a 404).

3. The course's style sheet, tools/book_static/course.css: room for code lines of 88
   characters on a 1280-pixel window, and a font stack that has Chinese glyphs.

4. The language switcher: with `course_editions` set (tools/translations.py sets it when
   `python tools/build_book.py --all-languages` builds the editions), each page starts with a
   link to the same page in every other edition, a plain link that works without JavaScript.
"""
import html
import posixpath
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
    lang = (app.config.language or "en").replace("_", "-")
    index.write_text(
        f'<!doctype html>\n<html lang="{lang}"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Refresh" content="0; url={target}">\n{icon_link}\n'
        f"<title>{title}</title></head>\n"
        f'<body><p><a href="{target}">{title}</a></p></body></html>\n', encoding="utf-8")


def edition_links(app, pagename, templatename, context, doctree):
    """Put the links to this page's other editions at the top of its body."""
    if "body" not in context:
        return
    up = posixpath.relpath(".", posixpath.dirname(pagename) or ".")   # to this edition's root
    links = [f'<a class="course-edition" href="{up}/{root}{pagename}.html" hreflang="{lang}" '
             f'lang="{lang}">{html.escape(label)}</a>' for lang, label, root in app.config.course_editions]
    if links:
        context["body"] = f'<p class="course-editions">{" | ".join(links)}</p>\n' + context["body"]


def setup(app):
    app.add_config_value("course_editions", [], "html")
    app.connect("html-page-context", edition_links)
    app.connect("config-inited", add_offline_assets)
    app.add_css_file("course.css")
    # Before sphinx-external-toc's handler (priority 500), which then keeps this file.
    app.connect("build-finished", write_root_redirect, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
