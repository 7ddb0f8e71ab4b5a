"""Which pages of the built book show an exercise's answer before the student tried it, and
which show lib code with a feature that a later chapter teaches.

    python tools/answer_leaks.py          # after tools/build_book.py; lists leaks, exit 1 if any

An exercise's answer, as statements (code lines without their comments, whitespace removed):
- the lines of its solution's graded cells that the student's notebook does not show (its checks
  and docstrings call the answer: `s = smooth(losses, window)` is no answer);
- the source lines of the lib names its hidden tests block while grading (`EXERCISE.blocked`),
  except for the capstone, which blocks the earlier exercises' answers (`EXERCISE.builds_on`);
less the trivial ones (imports, lines with under MIN_LENGTH characters of code outside strings)
and the lines that lib's other code also has (a chapter may show that code). A page leaks the answer
when the code it shows (every <pre> block, as text: what the reader sees of highlighted code
and of printed output) contains one of these statements, and the page comes before the
exercise in the book's reading order (_toc.yml), or is the exercise's own page and shows it open:
on its own page lib's answer may only come after the checks, collapsed (a cell tagged
`hide-input`, which the book renders inside a <details> element, closed until clicked).

A page shows a later chapter's feature when its code (open or collapsed) holds one of
EARLY_FEATURES' patterns and the page comes before the chapter that teaches it: no KV cache
before chapter 6, no dropout before chapter 5, no RoPE or grouped key/value heads before 8.
A traceback that a page prints is not code the page shows, so that check leaves it out; the
answer check reads it too (a traceback through lib shows lib's source lines). The book does not
execute the exercise pages, so their unfilled stubs print none.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import io
import re
import sys
import textwrap
import tokenize
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
MIN_LENGTH = 20        # characters of code (no spaces, no strings) in a line: shorter ones are too common
# {the page that teaches a feature: a pattern of the code that carries it}
EARLY_FEATURES = {
    "chapters/05_training": re.compile(r"\bDropout\b|\bself\.drop\b|\w*dropout\.(?:forward|backward)\b|\bdropout_rng\b"),
    "chapters/06_decoding": re.compile(r"\bkv_cache\b|\bKVCache\b"),
    "chapters/08_modern_block": re.compile(r"\bapply_rope\b|\brope_cos_sin\b|\brepeat_kv\b|\bself\.n_kv_head\b"),
}
STRING_TOKENS = {tokenize.STRING} | {getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
                                     if hasattr(tokenize, n)}


def normalise(line: str) -> str:
    return "".join(line.split())


def _code_lines(source: str) -> list[tuple[str, int]]:
    """Each line of Python source without its comment (a comment may differ where the code does
    not), with the number of its characters that are code: neither spaces nor inside a string."""
    lines = source.splitlines()
    in_strings = [0] * len(lines)
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            (first, start), (last, end) = token.start, token.end
            if token.type == tokenize.COMMENT:
                lines[first - 1] = lines[first - 1][:start]
            elif token.type in STRING_TOKENS:                     # a docstring's lines are all string
                for row in range(first, last + 1):
                    part = lines[row - 1][start if row == first else 0:end if row == last else None]
                    in_strings[row - 1] += len(normalise(part))
    except (tokenize.TokenError, IndentationError):
        pass                                                   # what does not tokenize counts as code
    return [(line, len(normalise(line)) - n) for line, n in zip(lines, in_strings)]


def statements(source: str) -> set[str]:
    """The distinctive statements of a piece of code: no imports, no line with fewer than
    MIN_LENGTH characters of code (prose in docstrings and printed strings does not count)."""
    return {normalise(line) for line, code in _code_lines(source)
            if code >= MIN_LENGTH and not line.lstrip().startswith(("import ", "from "))}


# ---- what each exercise's answer is --------------------------------------------------------------
def graded_source(notebook: Path, exercise: str) -> str:
    nb = nbformat.read(notebook, as_version=4)
    return "\n".join(c.source for c in nb.cells if f"graded:{exercise}" in c.metadata.get("tags", []))


def page_source(notebook: Path) -> str:
    """Every code cell of a notebook: what its page shows as code, less the outputs."""
    nb = nbformat.read(notebook, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


def _definitions(module) -> list[str]:
    """The names of a module's top-level functions and classes."""
    tree = ast.parse(inspect.getsource(module))
    return [node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def blocked_sources(blocked) -> list[str]:
    """The source of every blocked lib name ("module:name", "module:Class.method", "module:*")."""
    sources = []
    for entry in blocked:
        module_name, _, name = entry.partition(":")
        module = importlib.import_module(module_name)
        for qualname in _definitions(module) if name == "*" else [name]:
            obj = module
            for part in qualname.split("."):
                obj = getattr(obj, part)
            sources.append(textwrap.dedent(inspect.getsource(obj)))
    return sources


def shared_statements(sources) -> set[str]:
    """lib's lines less the blocked sources' lines, each taken out once: what is left of a
    blocked line is shared with code that a chapter may show."""
    counts = Counter()
    for path in (ROOT / "lib").rglob("*.py"):
        counts.update(normalise(line) for line, _ in _code_lines(path.read_text(encoding="utf-8")))
    for source in sources:
        counts.subtract(normalise(line) for line, _ in _code_lines(source))
    return {line for line, n in counts.items() if n > 0}


def answer_statements(exercise) -> set[str]:
    """The statements that give away `exercise` (a grader.spec.Exercise)."""
    answer = graded_source(ROOT / "solutions" / f"{exercise.notebook}.ipynb", exercise.notebook)
    page = page_source(ROOT / "exercises" / f"{exercise.notebook}.ipynb")   # its checks call the answer
    on_page = "\n".join(normalise(line) for line in page.splitlines())    # docstrings included
    # a capstone blocks lib's pieces so that it runs on the student's own: those are the earlier
    # exercises' answers, checked on their pages; the capstone's own answer is its graded cells
    # a name a chapter teaches openly (`taught`) is stubbed while grading but is no answer to find
    lib_sources = [] if exercise.builds_on else blocked_sources(
        [name for name in exercise.blocked if name not in exercise.taught])
    wanted = statements(answer).union(*map(statements, lib_sources)) - shared_statements(lib_sources)
    return {s for s in wanted if s not in on_page}


def exercises() -> list:
    """Every exercise with hidden tests whose solution notebook exists."""
    sys.path.insert(0, str(ROOT))
    from grader import DEFAULT_TESTS, load_hidden_tests
    found = [m.EXERCISE for m in load_hidden_tests(DEFAULT_TESTS).values()]
    return [e for e in found if (ROOT / "solutions" / f"{e.notebook}.ipynb").exists()]


# ---- what a page shows ---------------------------------------------------------------------------
class _PreText(HTMLParser):
    """The text inside <pre> elements, entities decoded, highlighting spans dropped; with
    `collapsed=False`, not the <pre> blocks inside a <details> element (collapsed until clicked);
    with `tracebacks=False`, not the tracebacks that cells print when they raise."""

    def __init__(self, collapsed=True, tracebacks=True):
        super().__init__(convert_charrefs=True)
        self.depth, self.details, self.collapsed, self.parts = 0, 0, collapsed, []
        self.tracebacks, self.divs, self.traceback_at = tracebacks, 0, None

    def handle_starttag(self, tag, attrs):
        if tag == "pre":
            self.depth += 1
        elif tag == "details":
            self.details += 1
        elif tag == "div":
            self.divs += 1
            classes = (dict(attrs).get("class") or "").split()
            if "traceback" in classes and self.traceback_at is None:
                self.traceback_at = self.divs

    def handle_endtag(self, tag):
        if tag == "pre" and self.depth:
            self.depth -= 1
            if self.shown():
                self.parts.append("\n")
        elif tag == "details" and self.details:
            self.details -= 1
        elif tag == "div" and self.divs:
            if self.traceback_at == self.divs:
                self.traceback_at = None
            self.divs -= 1

    def shown(self):
        return (self.collapsed or not self.details) and (self.tracebacks or self.traceback_at is None)

    def handle_data(self, data):
        if self.depth and self.shown():
            self.parts.append(data)


def code_text(html: str, collapsed: bool = True, tracebacks: bool = True) -> str:
    """What a page shows as code: the text of its <pre> blocks (without `collapsed`, only those
    shown open; without `tracebacks`, not the tracebacks of cells that raise)."""
    parser = _PreText(collapsed, tracebacks)
    parser.feed(html)
    parser.close()
    return "".join(parser.parts)


def find_leaks(pages: dict[str, str], answers: dict[str, set[str]],
               open_pages: dict[str, str] | None = None) -> list[tuple[str, str, str]]:
    """(exercise page, page, statement) for every answer statement that a page before the exercise
    shows, or that the exercise's own page shows open.

    pages: {page: its code text}, in reading order; answers: {exercise page: its statements};
    open_pages: {page: the code text it shows open} (default: all of `pages`' text is open).
    """
    order = list(pages)
    open_pages = pages if open_pages is None else open_pages

    def lines(text):
        return "\n".join(map(normalise, text.splitlines()))        # one statement per line

    shown = {page: lines(text) for page, text in pages.items()}
    leaks = []
    for exercise_page, wanted in answers.items():
        for page in order[:order.index(exercise_page)]:
            leaks += [(exercise_page, page, s) for s in sorted(wanted) if s in shown[page]]
        own = lines(open_pages.get(exercise_page, ""))
        leaks += [(exercise_page, exercise_page, s) for s in sorted(wanted) if s in own]
    return leaks


def find_early_features(pages: dict[str, str]) -> list[tuple[str, str, str]]:
    """(page, the chapter that teaches the feature, what matched) for every page before that
    chapter whose code shows the feature. pages: {page: code text}, in reading order."""
    order = list(pages)
    found = []
    for chapter, pattern in EARLY_FEATURES.items():
        for page in order[:order.index(chapter)] if chapter in order else []:
            found += [(page, chapter, m) for m in sorted(set(pattern.findall(pages[page])))]
    return found


def book_pages(html_dir: Path, collapsed: bool = True, tracebacks: bool = True) -> dict[str, str]:
    """{docname: code text} of the built book's pages, in _toc.yml's order (without `collapsed`,
    only the code shown open; without `tracebacks`, not the tracebacks of cells that raise)."""
    sys.path.insert(0, str(ROOT / "tools"))
    from book_toc import toc_docnames
    return {d: code_text((html_dir / f"{d}.html").read_text(encoding="utf-8"), collapsed, tracebacks)
            for d in toc_docnames() if (html_dir / f"{d}.html").exists()}


def book_answers(pages) -> dict[str, set[str]]:
    """{exercise page: its answer statements}, for the exercises the book holds."""
    return {f"exercises/{e.notebook}": answer_statements(e) for e in exercises()
            if f"exercises/{e.notebook}" in pages}


def main() -> int:
    pages = book_pages(ROOT / "_build" / "html")
    leaks = find_leaks(pages, book_answers(pages), book_pages(ROOT / "_build" / "html", collapsed=False))
    for exercise_page, page, statement in leaks:
        print(f"{page} shows the answer of {exercise_page}: {statement}")
    early = find_early_features(book_pages(ROOT / "_build" / "html", tracebacks=False))
    for page, chapter, match in early:
        print(f"{page} shows {match!r}, a feature {chapter} teaches")
    return 1 if leaks or early else 0


if __name__ == "__main__":
    sys.exit(main())
