"""The book builds strictly, contains exactly the pages of _toc.yml, loads nothing from
outside, has no broken internal links, and its notebooks are committed without outputs.

The build (the `built_book` fixture in conftest.py) runs `python tools/build_book.py` once
per session: seconds for the book pages, minutes once the chapters execute.
"""
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from book_toc import source_of, toc_docnames  # noqa: E402
from strip_outputs import NOTEBOOK_DIRS, find_outputs, notebooks, strip  # noqa: E402
from translations import LANGUAGES  # noqa: E402

# Pages Sphinx writes besides the toc's: the root redirect, the index and the search page.
GENERATED_PAGES = {"index.html", "genindex.html", "search.html"}
# <link rel=...> values that only point somewhere; every other <link> is fetched by the page.
NAVIGATION_RELS = {"index", "search", "next", "prev", "canonical", "alternate", "author",
                   "license", "help", "bookmark"}
# Attributes through which a page loads something, per tag.
LOADING_ATTRS = {"script": ("src",), "img": ("src", "srcset"), "iframe": ("src",),
                 "source": ("src", "srcset"), "video": ("src", "poster"), "audio": ("src",),
                 "track": ("src",), "embed": ("src",), "object": ("data",), "input": ("src",)}
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""")
CSS_COMMENT = re.compile(r"/\*.*?\*/", re.S)


class PageParser(HTMLParser):
    """Collects what a page loads, what it links to, and the ids it defines."""

    def __init__(self):
        super().__init__()
        self.loads, self.links, self.ids, self.styles = [], [], set(), []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        for attr in LOADING_ATTRS.get(tag, ()):
            if attrs.get(attr):
                urls = attrs[attr].split(",") if attr == "srcset" else [attrs[attr]]
                self.loads += [u.split()[0] for u in urls if u.strip()]
        if tag == "link" and attrs.get("href"):
            rels = set((attrs.get("rel") or "").lower().split())
            (self.links if rels and rels <= NAVIGATION_RELS else self.loads).append(attrs["href"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag == "meta" and (attrs.get("http-equiv") or "").lower() == "refresh":
            self.links.append(attrs.get("content", "").split("url=", 1)[-1])
        if attrs.get("style"):
            self.styles.append(attrs["style"])
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)


def parse(path):
    parser = PageParser()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def is_external(url):
    parts = urlsplit(url)
    return bool(parts.scheme and parts.scheme != "data") or url.startswith("//")


def css_urls(text):
    return [a or b for a, b in CSS_URL.findall(CSS_COMMENT.sub("", text))]


def html_pages(html):
    """Built pages of the English edition, relative to html (the theme's and the sources' folders
    and the translations aside: tests/test_translations.py checks those)."""
    return sorted(p.relative_to(html).as_posix() for p in html.rglob("*.html")
                  if p.relative_to(html).parts[0] not in ("_static", "_sources", *LANGUAGES))


def resolve(page, url, html):
    """The local file url points at from page (None for an external link, a mail link or a
    data: URI, whose content is inline)."""
    if is_external(url) or urlsplit(url).scheme == "data":
        return None
    target = unquote(urlsplit(url).path)
    if not target:
        return page
    return (page.parent / target).resolve() if not target.startswith("/") else html / target[1:]


@pytest.fixture(scope="module")
def book(built_book):
    assert built_book.returncode == 0, f"the book build failed:\n{built_book.log[-8000:]}"
    return built_book


# ---------------------------------------------------------------- the build


def test_build_has_no_warnings(book):
    # -W already fails the build on a warning; this also names them. Sphinx's form is
    # "WARNING: ..." (a kernel's own log, "[IPKernelApp] WARNING | ...", is not the book's).
    flagged = [line for line in book.log.splitlines()
               if re.search(r"\b(WARNING|ERROR|CRITICAL|SEVERE):", line)]
    assert not flagged, "\n".join(flagged)


def test_built_pages_are_the_toc_pages(book):
    expected = {f"{d}.html" for d in toc_docnames()} | GENERATED_PAGES
    built = set(html_pages(book.html))
    assert not expected - built, f"toc pages not built: {sorted(expected - built)}"
    assert not built - expected, f"pages built that _toc.yml does not list: {sorted(built - expected)}"


def test_pages_load_nothing_from_outside(book):
    external = []
    for rel in html_pages(book.html):
        page = parse(book.html / rel)
        urls = page.loads + [u for style in page.styles for u in css_urls(style)]
        external += [f"{rel}: {u}" for u in urls if is_external(u)]
    for css in (book.html / "_static").rglob("*.css"):
        text = css.read_text(encoding="utf-8", errors="replace")
        external += [f"{css.relative_to(book.html)}: {u}" for u in css_urls(text) if is_external(u)]
    assert not external, "resources loaded from outside the book:\n" + "\n".join(external)


def test_local_resources_exist(book):
    missing = []
    for rel in html_pages(book.html):
        path = book.html / rel
        for url in parse(path).loads:
            target = resolve(path, url, book.html)
            if target is not None and not target.is_file():
                missing.append(f"{rel}: {url}")
    assert not missing, "missing files:\n" + "\n".join(missing)


def test_internal_links_resolve(book):
    ids, broken = {}, []
    for rel in html_pages(book.html):
        path = book.html / rel
        for url in parse(path).links:
            if urlsplit(url).scheme == "mailto":
                continue
            target = resolve(path, url, book.html)
            if target is None:
                continue
            if not target.exists():
                broken.append(f"{rel}: {url} (no such file)")
                continue
            fragment = unquote(urlsplit(url).fragment)
            if fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = parse(target).ids
                if fragment not in ids[target]:
                    broken.append(f"{rel}: {url} (no anchor #{fragment})")
    assert not broken, "broken internal links:\n" + "\n".join(broken)


# ---------------------------------------------------------------- fast checks, no build


def test_toc_and_notebooks_agree():
    docnames = toc_docnames()
    assert len(docnames) == len(set(docnames)), "a page is listed twice in _toc.yml"
    missing = [d for d in docnames if source_of(d) is None]
    assert not missing, f"_toc.yml lists pages with no .md or .ipynb file: {missing}"
    listed = set(docnames)
    unlisted = [nb.relative_to(ROOT).with_suffix("").as_posix()
                for folder in ("chapters", "exercises") for nb in notebooks([ROOT / folder])]
    unlisted = [d for d in unlisted if d not in listed]
    assert not unlisted, f"notebooks missing from _toc.yml (the book would skip them): {unlisted}"
    assert not [d for d in docnames if d.split("/")[0] in ("solutions", "tests")], \
        "_toc.yml must not list solutions or tests"


def test_committed_notebooks_have_no_outputs():
    dirty = {}
    for path in notebooks([ROOT / d for d in NOTEBOOK_DIRS]):
        problems = find_outputs(nbformat.read(path, as_version=nbformat.NO_CONVERT))
        if problems:
            dirty[path.relative_to(ROOT).as_posix()] = problems
    assert not dirty, ("notebooks with outputs (clean them with `python tools/strip_outputs.py`):\n"
                       + "\n".join(f"{p}: {'; '.join(v)}" for p, v in dirty.items()))


def test_strip_outputs_cleans_what_the_check_flags(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    code = nbformat.v4.new_code_cell("print(1)", execution_count=3,
                                     outputs=[nbformat.v4.new_output("stream", text="1\n")])
    code.metadata.update({"tags": ["raises-exception"], "execution": {"iopub.status.busy": "x"}})
    nb.cells += [nbformat.v4.new_markdown_cell("# title"), code]
    assert len(find_outputs(nb)) == 4  # widget state, output, execution count, timing metadata
    path = tmp_path / "dirty.ipynb"
    nbformat.write(nb, path)

    import strip_outputs
    assert strip_outputs.main(["--check", str(path)]) == 1
    assert strip_outputs.main([str(path)]) == 0
    cleaned = nbformat.read(path, as_version=4)
    assert find_outputs(cleaned) == []
    assert cleaned.cells[1].metadata.tags == ["raises-exception"]  # tags survive
    assert cleaned.cells[1].source == "print(1)"
    before = path.read_bytes()
    assert strip_outputs.main([str(path)]) == 0 and path.read_bytes() == before  # idempotent
    assert strip_outputs.main(["--check", str(path)]) == 0
    strip(nb)
    assert find_outputs(nb) == []


# ---------------------------------------------------------------- no answer before its exercise
# tools/answer_leaks.py: an exercise's answer (its solution's graded lines, the source of the lib
# names its hidden tests block) must not appear in the code of any page before it.


def _as_rendered(source):
    """Code as the book renders a code cell: Pygments spans and HTML escapes inside <pre>."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer
    return ('<div class="cell_input docutils container"><div class="highlight-ipython3 notranslate">'
            '<div class="highlight"><pre><span></span>' + highlight(source, PythonLexer(), HtmlFormatter(nowrap=True))
            + "</pre></div></div></div>")


@pytest.fixture(scope="module")
def answer_leaks():
    """tools/answer_leaks.py, which reads the solutions and hidden tests: an instructor's check,
    skipped in the student release (`python -m grader.release`), which holds neither."""
    if not (ROOT / "solutions").is_dir():
        pytest.skip("the student release has no solutions to look for")
    import answer_leaks
    return answer_leaks


def _graded(answer_leaks, exercise, folder="solutions"):
    return answer_leaks.graded_source(ROOT / folder / f"{exercise.notebook}.ipynb", exercise.notebook)


def test_leak_detector_finds_answers_only_on_earlier_pages(answer_leaks):
    import textwrap

    from lib.display import show
    from lib.numpy_twin import model

    gelu = next(e for e in answer_leaks.exercises() if e.notebook == "ch4_gelu")
    answers = {"exercises/ch4_gelu": answer_leaks.answer_statements(gelu)}
    solution = _graded(answer_leaks, gelu)
    reindented = textwrap.indent(solution.replace("\n", "  # a comment of the page's own\n"), "    ")
    pages = {"chapters/03_attention": "<h1>3.</h1>" + _as_rendered(_graded(answer_leaks, gelu, "exercises")),   # the stub
             "chapters/04_model": "<p>GELU</p>" + _as_rendered(reindented),
             "chapters/04b_more": show(model.gelu_backward).data,                              # lib's answer
             "exercises/ch4_gelu": "<details>" + _as_rendered(solution) + "</details>",   # its own, collapsed
             "chapters/05_training": _as_rendered(solution)}                                   # after: allowed
    leaks = answer_leaks.find_leaks({p: answer_leaks.code_text(h) for p, h in pages.items()}, answers,
                                    {p: answer_leaks.code_text(h, collapsed=False) for p, h in pages.items()})
    by_page = {p: {s for _, q, s in leaks if q == p} for p in pages}
    assert by_page["chapters/04_model"] == answer_leaks.statements(solution) & answers["exercises/ch4_gelu"] != set()
    assert by_page["chapters/04b_more"] and by_page["chapters/03_attention"] == set()
    assert by_page["chapters/05_training"] == by_page["exercises/ch4_gelu"] == set()
    assert answer_leaks.code_text("<pre>a &lt; b &amp;&amp; <span>c</span></pre><p>d</p>") == "a < b && c\n"


def test_no_page_shows_an_answer_before_its_exercise(book, answer_leaks):
    pages = answer_leaks.book_pages(book.html)
    answers = answer_leaks.book_answers(pages)
    assert answers, "the book holds no exercise"
    leaks = answer_leaks.find_leaks(pages, answers, answer_leaks.book_pages(book.html, collapsed=False))
    assert not leaks, "answers shown before their exercise, or open on its page:\n" + "\n".join(
        f"{page} shows the answer of {exercise}: {statement}" for exercise, page, statement in leaks[:40])


def test_no_page_shows_a_later_chapters_feature(book, answer_leaks):
    found = answer_leaks.find_early_features(answer_leaks.book_pages(book.html, tracebacks=False))
    assert not found, "lib code with a later chapter's feature:\n" + "\n".join(
        f"{page} shows {match!r}, which {chapter} teaches" for page, chapter, match in found)


def test_an_answer_planted_on_an_earlier_page_is_found(book, answer_leaks):
    pages = answer_leaks.book_pages(book.html)
    answers = answer_leaks.book_answers(pages)
    order = list(pages)
    before = set(answer_leaks.find_leaks(pages, answers))
    for exercise in answer_leaks.exercises():
        page = f"exercises/{exercise.notebook}"
        if page not in answers:
            continue
        earlier = [p for p in order[:order.index(page)] if p.startswith("chapters/")][-1]
        html = (book.html / f"{earlier}.html").read_text(encoding="utf-8")
        planted = html.replace("</main>", _as_rendered(_graded(answer_leaks, exercise)) + "</main>", 1)
        assert planted != html, f"{earlier}.html has no <main> to plant in"
        found = set(answer_leaks.find_leaks({**pages, earlier: answer_leaks.code_text(planted)}, answers)) - before
        expected = answer_leaks.statements(_graded(answer_leaks, exercise)) & answers[page]
        assert expected, f"{exercise.notebook}: its solution has no statement the detector can look for"
        assert {(page, earlier, s) for s in expected} <= found, f"{exercise.notebook}: planted on {earlier}, not found"
