"""The translations stay in step with the English (tools/translations.py, locale/TRANSLATING.md).

Cheap checks first: one catalogue per page of _toc.yml, every English message in its page's
catalogue (so a changed English paragraph fails here until `--update` brings it in, fuzzy),
the checks that the Chinese build runs first catch a planted untranslated, outdated or
mis-escaped entry, every page is fully translated, the Chinese sources
are the English build's executed notebooks, and the language switcher's links. Extracting the
English messages takes about 15 s (no execution).

Then the built Chinese edition (strictly, after the English build of tests/test_book.py): its
code cells and outputs are the English pages', and in Chromium at 1280 px every page loads and
works as the English one does (tests/test_browser.py's checks), its switcher leads to the
English page and back, its code fits, and no English paragraph is left (one test per page).
"""
import html
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
import yaml
from babel.messages.catalog import Catalog
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import book_ext  # noqa: E402
import translations  # noqa: E402
from book_toc import read_toc, toc_docnames  # noqa: E402

LANGUAGE = "zh_CN"
SAMPLE = "book/intro"  # the model page for translators, whose catalogue holds the book's title


@pytest.fixture(scope="module")
def english():
    """{page: template} extracted from the English sources into a temporary folder."""
    return translations.templates(translations.extract(ROOT / "_build" / "gettext-test" / "pot"))


def catalogue(page):
    return translations._read(translations.catalogue_path(LANGUAGE, page))


def template(*ids):
    t = Catalog()
    for message in ids:
        t.add(message)
    return t


# ---------------------------------------------------------------- the catalogues


def test_one_catalogue_per_page():
    folder = translations.LOCALE / LANGUAGE / "LC_MESSAGES"
    pages = sorted(p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.po"))
    assert pages == sorted(toc_docnames())


def test_every_english_message_is_in_its_catalogue(english):
    missing = [f"{page}: {m.id[:80]!r}" for page, t in english.items() for m in t
               if m.id and catalogue(page).get(m.id) is None]
    assert not missing, ("English text that no catalogue holds; run `python tools/translations.py "
                         "--update` and translate it (locale/TRANSLATING.md):\n" + "\n".join(missing))


def test_extraction_never_writes_over_the_executed_notebooks():
    """Extracting beside _build/jupyter_execute would replace the English build's executed notebooks
    with unexecuted ones (myst-nb writes what it reads into the output's sibling folder)."""
    with pytest.raises(ValueError, match="jupyter_execute"):
        translations.extract(ROOT / "_build" / "gettext")


def test_every_page_is_translated(english):
    """What the strict Chinese build checks before it builds: no message untranslated or outdated."""
    found = translations.problems(LANGUAGE, english)
    assert not found, (f"{len(found)} messages need a translation (locale/TRANSLATING.md):\n"
                       + "\n".join(f"{page}: {kind}: {message[:80]!r}" for page, kind, message in found))


def test_catalogues_keep_code_and_roles(english):
    """A translation keeps every {cite} key and {term}/{doc} target, and every `code` span, and adds
    none (natural Chinese may name a code span twice where the English names it once)."""
    markup = re.compile(r"\{(?:cite|term|doc)\}`(?:[^`<]*<)?([^`>]*)>?`|``?([^`]+)``?")
    wrong = []
    for page, t in english.items():
        for m in catalogue(page):
            if m.id and m.string and not m.fuzzy and set(markup.findall(m.id)) != set(markup.findall(m.string)):
                wrong.append(f"{page}: {m.id[:60]!r}")
    assert not wrong, "translations that change a role's target or a code span:\n" + "\n".join(wrong)


def emphasis(text):
    """How many spans of emphasis and of strong emphasis CommonMark reads in a message."""
    html = MarkdownIt("commonmark").render(re.sub(r"\$[^$]*\$", "", text))   # math is not markdown
    return html.count("<em>"), html.count("<strong>")


def test_translations_keep_the_emphasis(english):
    """A translation reads as the same number of emphasised spans as its English. CommonMark opens
    and closes a `*` or `**` by the characters beside it, and Chinese text has no spaces: a star
    between a Chinese character and punctuation (`到*{term}`) is printed as a star."""
    wrong = [f"{page}: {m.string[:60]!r} reads {emphasis(m.string)}, its English {emphasis(m.id)}"
             for page in english for m in catalogue(page)
             if m.id and m.string and not m.fuzzy and emphasis(m.id) != emphasis(m.string)]
    assert not wrong, "translations whose emphasis CommonMark reads differently (em, strong):\n" + "\n".join(wrong)


# ---------------------------------------------------------------- the checks catch what they must


@pytest.fixture
def locale(tmp_path, monkeypatch):
    monkeypatch.setattr(translations, "LOCALE", tmp_path)
    return tmp_path


def test_a_new_paragraph_is_untranslated(locale):
    pages = {"book/page": template("First paragraph.", "Second paragraph.")}
    translations.update(LANGUAGE, pages)
    assert [kind for _, kind, _ in translations.problems(LANGUAGE, pages)] == ["untranslated"] * 2
    assert translations.problems(LANGUAGE, {"book/other": template("Text.")}) == [
        ("book/other", "untranslated", "Text.")]


def test_a_changed_paragraph_turns_its_translation_outdated(locale):
    english = "The model reads integers: token ids, one per token."
    translations.update(LANGUAGE, {"book/page": template(english)})
    catalog = translations._read(translations.catalogue_path(LANGUAGE, "book/page"))
    catalog[english].string = "模型读入的是整数：token 的 id，每个 token 一个。"
    translations._write(catalog, translations.catalogue_path(LANGUAGE, "book/page"))
    assert translations.problems(LANGUAGE, {"book/page": template(english)}) == []

    changed = {"book/page": template("The model reads integers: token ids, one per byte.")}
    assert translations.update(LANGUAGE, changed) == []
    found = translations.problems(LANGUAGE, changed)
    assert [kind for _, kind, _ in found] == ["outdated"]
    kept = translations._read(translations.catalogue_path(LANGUAGE, "book/page"))
    assert kept[found[0][2]].string.startswith("模型读入")  # the old translation, kept as a hint


def test_a_translation_read_as_a_list_is_caught(locale):
    pages = {"book/page": template("2. Embeddings")}
    translations.update(LANGUAGE, pages)
    path = translations.catalogue_path(LANGUAGE, "book/page")
    for text, problem in (("2. 嵌入", True), ("2\\. 嵌入", False), ("- 嵌入", True), ("嵌入", False)):
        catalog = translations._read(path)
        catalog["2. Embeddings"].string = text
        translations._write(catalog, path)
        assert bool(translations.problems(LANGUAGE, pages)) == problem, text


def test_a_catalogue_of_no_page_is_reported(locale):
    translations.update(LANGUAGE, {"book/old": template("Gone.")})
    assert translations.update(LANGUAGE, {"book/new": template("New.")}) == [
        translations.catalogue_path(LANGUAGE, "book/old")]


def test_the_check_command_names_page_and_message(locale, monkeypatch, capsys):
    monkeypatch.setattr(translations, "extract", lambda: None)
    monkeypatch.setattr(translations, "templates", lambda _: {"book/page": template("Hello there.")})
    assert translations.main(["--check"]) == 1
    assert "book/page: untranslated: 'Hello there.'" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no page 'book/nope'"):
        translations.main(["--check", "--page", "book/nope"])


# ---------------------------------------------------------------- one source of code


def test_the_chinese_sources_are_the_english_builds_notebooks(tmp_path, monkeypatch):
    monkeypatch.setattr(translations, "BUILD", tmp_path)
    with pytest.raises(FileNotFoundError, match="jupyter_execute/chapters/01_"):
        translations.stage_sources(LANGUAGE)
    chapter = sorted((ROOT / "chapters").glob("*.ipynb"))[0]
    executed = nbformat.read(chapter, as_version=4)
    for cell in executed.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
    (tmp_path / "jupyter_execute" / "chapters").mkdir(parents=True)
    nbformat.write(executed, tmp_path / "jupyter_execute" / "chapters" / chapter.name)
    source = translations.stage_sources(LANGUAGE, require_outputs=False)
    assert nbformat.read(source / "chapters" / chapter.name, as_version=4) == executed
    other = sorted((ROOT / "chapters").glob("*.ipynb"))[1]
    assert (source / "chapters" / other.name).read_bytes() == other.read_bytes()
    assert (source / "lib").resolve() == ROOT / "lib"
    config = (source / "_config.yml").read_text(encoding="utf-8")
    assert "execute_notebooks: 'off'" in config and "language: zh_CN" in config


def test_edition_configs():
    zh = translations.edition_config(LANGUAGE, translations.LANGUAGES)["sphinx"]["config"]
    assert zh["language"] == LANGUAGE and zh["gettext_allow_fuzzy_translations"] is False
    assert zh["nb_code_prompt_show"] == "显示代码单元"
    assert zh["course_editions"] == [["en", "English", "../"]]
    assert translations.edition_config(LANGUAGE, ())["title"] == catalogue(SAMPLE).get("GPT-2 from scratch").string
    en = translations.edition_config("en", translations.LANGUAGES)["sphinx"]["config"]
    assert "language" not in en and en["course_editions"] == [["zh-CN", "中文", "zh_CN/"]]


def test_the_chinese_toc_translates_the_parts_captions(tmp_path):
    """Sphinx never translates the captions of the toctree that Jupyter Book inserts, so the edition
    has a _toc.yml of its own: the captions from the root page's catalogue, the pages unchanged."""
    english = read_toc()
    chinese = yaml.safe_load(translations.write_toc(LANGUAGE, tmp_path / "_toc.yml").read_text(encoding="utf-8"))
    assert [p["caption"] for p in chinese["parts"]] == [catalogue(english["root"]).get(p["caption"]).string
                                                         for p in english["parts"]]
    strip = lambda toc: [{k: v for k, v in p.items() if k != "caption"} for p in toc["parts"]]  # noqa: E731
    assert strip(chinese) == strip(english) and chinese["root"] == english["root"]


@pytest.mark.parametrize("editions, page, link", [
    ([["zh-CN", "中文", "zh_CN/"]], "chapters/02_embeddings", "../zh_CN/chapters/02_embeddings.html"),
    ([["en", "English", "../"]], "chapters/02_embeddings", "../../chapters/02_embeddings.html"),
    ([["zh-CN", "中文", "zh_CN/"]], "search", "./zh_CN/search.html"),
])
def test_the_switcher_links_the_same_page(editions, page, link):
    app = SimpleNamespace(config=SimpleNamespace(course_editions=editions))
    context = {"body": "<p>text</p>"}
    book_ext.edition_links(app, page, "page.html", context, None)
    assert f'href="{link}"' in context["body"] and context["body"].endswith("<p>text</p>")
    empty = {"body": "<p>text</p>"}
    book_ext.edition_links(SimpleNamespace(config=SimpleNamespace(course_editions=[])), page, "", empty, None)
    assert empty["body"] == "<p>text</p>"


# ---------------------------------------------------------------- the built Chinese edition


@pytest.fixture(scope="module")
def zh_book(built_book):
    """The Chinese edition, built strictly by conftest's built_book after the English one."""
    assert built_book.returncode == 0, f"the book build failed:\n{built_book.log[-8000:]}"
    return SimpleNamespace(english=built_book.html, html=built_book.html / LANGUAGE)


BUTTON = re.compile(r'(<p class="(?:collapsed|expanded) admonition-title">)([^<]*)(?=</p>)')
WIDGET_VIEW = re.compile(r'(<script type="application/vnd\.jupyter\.widget-view\+json">)(.*?)(</script>)', re.S)
CELL_START = re.compile(r'<div class="cell[ "]')
DIV = re.compile(r"<div[ >]|<\\?/div>")   # a widget's views, in JSON, close theirs as <\/div>


def comparable(cell):
    """A cell's HTML without its collapse button's label, its widget views' keys sorted (the English
    build writes a view as the kernel sent it, the Chinese one as the executed notebook stores it)."""
    cell = BUTTON.sub(r"\1", cell)
    return WIDGET_VIEW.sub(lambda m: m.group(1) + json.dumps(json.loads(m.group(2)), sort_keys=True) + m.group(3), cell)


def code_cells(page_html):
    """The HTML of each code cell (its source and its outputs) of a built page."""
    cells, pos = [], 0
    while (start := CELL_START.search(page_html, pos)):
        depth = 0
        for tag in DIV.finditer(page_html, start.start()):
            depth += 1 if tag.group().startswith("<div") else -1
            if depth == 0:
                cells.append(page_html[start.start():tag.end()])
                pos = tag.end()
                break
        else:
            raise AssertionError(f"the code cell at character {start.start()} never closes its <div>")
    return cells


@pytest.mark.parametrize("page", [p for p in toc_docnames() if p.startswith(("chapters/", "exercises/"))])
def test_code_cells_and_outputs_are_the_english_ones(zh_book, page):
    """Byte for byte, but for the button of a collapsed cell, which names itself in the page's
    language (translations.INTERFACE), and the order of the keys of a widget's view."""
    english = code_cells((zh_book.english / f"{page}.html").read_text(encoding="utf-8"))
    chinese = code_cells((zh_book.html / f"{page}.html").read_text(encoding="utf-8"))
    assert len(chinese) == len(english) > 0
    for i, (a, b) in enumerate(zip(english, chinese)):
        assert comparable(a) == comparable(b), f"{page}: cell {i} differs from the English page's"
    shown = {m.group(2) for m in BUTTON.finditer("".join(chinese))}
    assert shown <= set(translations.INTERFACE[LANGUAGE].values()), f"{page}: buttons {shown}"


def test_code_cells_are_found_whole():
    page = ('<p>a</p><div class="cell docutils"><div class="cell_input"><pre>x = 1</pre></div>'
            '<div class="cell_output"><div>1</div></div></div><p>b</p><div class="cell tag_x"></div>')
    assert code_cells(page) == [page[8:-38], '<div class="cell tag_x"></div>']
    widget = '<div class="cell"><script>{"views": ["<div>a<\\/div>"]}</script></div>'
    assert code_cells(widget) == [widget]
    with pytest.raises(AssertionError, match="never closes"):
        code_cells('<div class="cell"><div>')


def test_cells_compare_but_for_the_button_label_and_the_widget_keys_order():
    view = '<script type="application/vnd.jupyter.widget-view+json">{}</script>'
    cell = '<p class="collapsed admonition-title">{}</p><pre>x = {}</pre>' + view
    english = cell.format("Show code cell source", 1, '{"a": 1, "b": 2}')
    assert comparable(english) == comparable(cell.format("显示代码单元", 1, '{"b": 2, "a": 1}'))
    assert comparable(english) != comparable(cell.format("Show code cell source", 2, '{"a": 1, "b": 2}'))
    assert comparable(english) != comparable(cell.format("Show code cell source", 1, '{"a": 1, "b": 3}'))


COLAB = re.compile(r'href="(https://colab\.research\.google\.com/[^"]+)"')


SIDEBAR = re.compile(r'<nav class="[^"]*bd-docs-nav[^"]*"[\s\S]*?</nav>')
CJK = re.compile(r"[\u3400-\u9fff]")


@pytest.mark.parametrize("page", ["book/intro", "chapters/03_attention", "exercises/ch4_gelu"])
def test_the_sidebar_is_chinese(zh_book, page):
    """Every caption and page title of a Chinese page's navigation is in Chinese."""
    nav = SIDEBAR.search((zh_book.html / f"{page}.html").read_text(encoding="utf-8")).group()
    found = re.findall(r'<span class="caption-text">(.*?)</span>|<a class="reference internal"[^>]*>(.*?)</a>',
                       nav, re.S)                                         # (caption, "") or ("", title)
    texts = [html.unescape(re.sub(r"<[^>]+>", "", caption or title)).strip() for caption, title in found]
    assert len(texts) > len(toc_docnames()) // 2, f"{page}: the navigation was not found"
    assert not [t for t in texts if not CJK.search(t)], f"{page}: English left in the navigation"


def test_chinese_pages_name_their_language(zh_book):
    for page in toc_docnames():
        text = (zh_book.html / f"{page}.html").read_text(encoding="utf-8")
        assert '<html lang="zh-CN"' in text, page


def test_launch_buttons_open_the_english_notebooks(zh_book):
    for page in toc_docnames():
        english = COLAB.findall((zh_book.english / f"{page}.html").read_text(encoding="utf-8"))
        chinese = COLAB.findall((zh_book.html / f"{page}.html").read_text(encoding="utf-8"))
        assert chinese == english, page


# ---------------------------------------------------------------- in the browser


from test_browser import (LOAD_TIMEOUT_MS, MAX_OVERFLOW, READ_PAGE, SCREENSHOTS, Server, browser,  # noqa: E402,F401,I001
                          check_page, context, diagrams_on)

# Text the Chinese pages keep in English: code, outputs, math, the bibliography, the switcher.
KEPT_ENGLISH = ("pre, code, .cell_output, .output, .math, mjx-container, .citation, dl.citation, "
                ".bibtex-citation, .course-editions, .headerlink, .toctree-wrapper, .admonition-title")
ENGLISH_LEFT = """(kept) => {
  const article = document.querySelector("article") || document.body;
  const blocks = [...article.querySelectorAll("p, li, h1, h2, h3, h4, dt, dd, th, td, figcaption, caption")]
    .filter(b => !b.closest(kept) && !b.querySelector("p, li"));
  const own = b => { const c = b.cloneNode(true); c.querySelectorAll(kept).forEach(k => k.remove()); return c.innerText; };
  const cjk = /[\\u3400-\\u9fff\\uff00-\\uffef\\u3000-\\u303f]/;
  return blocks.map(own).filter(t => !cjk.test(t) && (t.match(/[A-Za-z]{2,}/g) || []).length >= 4);
}"""
ZH_PAGES = [f"{d}.html" for d in toc_docnames()]


@pytest.fixture(scope="module")
def both_editions(zh_book):
    server = Server(zh_book.english)
    yield server
    server.close()


@pytest.mark.parametrize("page", ZH_PAGES)
def test_chinese_page_works_offline(page, context, both_editions):
    shot = SCREENSHOTS / f"{LANGUAGE}__{page.replace('/', '__')[:-5]}.png"   # saved for pages with widgets
    problems, _ = check_page(context, both_editions.url + f"{LANGUAGE}/{page}", shot, diagrams_on(page))
    assert not problems, f"{LANGUAGE}/{page}:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", ZH_PAGES)
def test_chinese_page_is_translated(page, context, both_editions):
    tab = context.new_page()
    try:
        tab.goto(both_editions.url + f"{LANGUAGE}/{page}", wait_until="load", timeout=LOAD_TIMEOUT_MS)
        left = tab.evaluate(ENGLISH_LEFT, KEPT_ENGLISH)
    finally:
        tab.close()
    assert not left, (f"{page}: {len(left)} English paragraphs left; translate "
                      f"locale/{LANGUAGE}/LC_MESSAGES/{page[:-5]}.po:\n" + "\n".join(t[:100] for t in left[:10]))


@pytest.mark.parametrize("page", ZH_PAGES)
def test_the_switcher_goes_both_ways(page, context, both_editions):
    tab = context.new_page()
    try:
        tab.goto(both_editions.url + page, wait_until="load", timeout=LOAD_TIMEOUT_MS)
        tab.click("a.course-edition[hreflang=zh-CN]")
        tab.wait_for_url(both_editions.url + f"{LANGUAGE}/{page}", timeout=LOAD_TIMEOUT_MS)
        assert tab.evaluate("document.documentElement.lang") == "zh-CN"
        tab.click("a.course-edition[hreflang=en]")
        tab.wait_for_url(both_editions.url + page, timeout=LOAD_TIMEOUT_MS)
        assert tab.evaluate("document.documentElement.lang") == "en"
    finally:
        tab.close()


def test_chinese_code_fits_the_page(context, both_editions):
    blocks, over = 0, []
    for page in ZH_PAGES:
        if page.startswith(("chapters/", "exercises/")):
            tab = context.new_page()
            try:
                tab.goto(both_editions.url + f"{LANGUAGE}/{page}", wait_until="load", timeout=LOAD_TIMEOUT_MS)
                found = tab.evaluate(READ_PAGE)
            finally:
                tab.close()
            blocks += found["blocks"]
            over += [f"{page}: {html.escape(line)}" for line in found["overflowing"]]
    assert blocks >= 200 and len(over) <= MAX_OVERFLOW * blocks, "\n".join(over)
