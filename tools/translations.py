"""Keep the book's translations in step with the English: the gettext catalogues of each page.

    python tools/translations.py --update              # English text -> locale/zh_CN/.../*.po
    python tools/translations.py --check               # fails on untranslated or outdated text
    python tools/translations.py --check --page book/intro

The English edition is the source. Sphinx's gettext builder extracts every translatable
message of every page of _toc.yml (paragraphs, headings, list items, table cells,
admonitions, figure captions, glossary terms and definitions; never code cells, their outputs
or literal blocks) into one template per page, _build/gettext/pot/<page>.pot, with execution off
(seconds, no kernel). `--update` merges the templates into the catalogues
locale/<language>/LC_MESSAGES/<page>.po with Babel, as msgmerge does: a new paragraph comes
in untranslated, a changed one keeps its old translation marked fuzzy (outdated), a removed
one is kept as obsolete (`#~`) until a translator deletes it. `--check` extracts again and
names, page by page, each English message that has no translation or only a fuzzy one; the
Chinese build (`python tools/build_book.py --language zh_CN`) runs it first and stops when it
finds any. See locale/TRANSLATING.md.
"""
import argparse
import re
import shutil
import sys
from pathlib import Path

import yaml
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

from book_toc import read_toc  # a sibling module

ROOT = Path(__file__).resolve().parent.parent
LOCALE = ROOT / "locale"
BUILD = ROOT / "_build"
TEMPLATES = BUILD / "gettext" / "pot"
LANGUAGES = ("zh_CN",)
# The link to each edition: (language, its lang attribute, the switcher's label).
EDITIONS = {"en": ("en", "English"), "zh_CN": ("zh-CN", "中文")}
NOTEBOOK_DIRS = ("chapters", "exercises")
# Words of the page that no catalogue holds: myst-nb's buttons on collapsed code cells ({type} is
# "source", "outputs" or "content", which would stay English, so the Chinese omits it).
INTERFACE = {"zh_CN": {"nb_code_prompt_show": "显示代码单元", "nb_code_prompt_hide": "隐藏代码单元"}}
# Sphinx parses each translation as Markdown and silently keeps the English when the result is
# not the same kind of node: a translation that starts like a list, a quote or a heading
# ("2. 嵌入" is a list item) must escape its first character ("2\\. 嵌入").
BLOCK_START = re.compile(r"(\d+[.)]|[-+*>]|#+)(\s|$)")
# Sphinx settings of every translated build and of the extraction: one catalogue per page
# (not one per folder), and a fuzzy (outdated) translation is never shown.
GETTEXT_CONFIG = {"gettext_compact": False, "locale_dirs": ["locale"],
                  "gettext_allow_fuzzy_translations": False}


def extract(out=TEMPLATES):
    """Write one .pot template per page of the book into out, from the English sources, without
    executing anything. Returns out. myst-nb writes the notebooks it reads into the folder beside
    out (`jupyter_execute`), so out must not sit in _build itself, where those notebooks would
    replace the English build's executed ones that the Chinese build and the tests read."""
    if Path(out).resolve().parent == BUILD.resolve():
        raise ValueError(f"translations: {out} would overwrite _build/jupyter_execute; extract into a subfolder")
    from jupyter_book.sphinx import build_sphinx

    config = {**GETTEXT_CONFIG, "nb_execution_mode": "off", "latex_individualpages": False}
    code = build_sphinx(ROOT, out, noconfig=True, path_config=str(ROOT / "_config.yml"),
                        confoverrides=config, builder="gettext", freshenv=True,
                        doctreedir=Path(out).parent / ".doctrees-gettext", really_quiet=True)
    if code:
        raise SystemExit(f"translations: extracting the English messages failed (exit {code})")
    return Path(out)


def edition_config(language, languages):
    """_config.yml for the edition in language whose pages link to the editions in languages:
    the English configuration, plus, for a translation, the catalogues and no execution."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    sphinx = config["sphinx"]
    sphinx["local_extensions"] = {name: str(ROOT / path) for name, path in sphinx["local_extensions"].items()}
    root = "" if language == "en" else "../"           # from this edition's root to the English root
    sphinx["config"]["course_editions"] = [
        [*EDITIONS[other], root + ("" if other == "en" else f"{other}/")]
        for other in ("en", *languages) if other != language]
    if language != "en":
        sphinx["config"].update(GETTEXT_CONFIG, **INTERFACE.get(language, {}), language=language)
        config["title"] = translated(language, read_toc()["root"], config["title"])
        config["execute"]["execute_notebooks"] = "off"   # the English build's outputs, staged
    return config


def translated(language, page, text):
    """text as page's catalogue translates it; text itself where it has no current translation."""
    path = catalogue_path(language, page)
    message = _read(path).get(text) if path.exists() else None
    return message.string if message and message.string and not message.fuzzy else text


def write_toc(language, path):
    """_toc.yml for the edition in language, its parts' captions translated by the root page's
    catalogue. Sphinx translates a page before Jupyter Book inserts its toctree (sphinx-external-toc's
    transform runs after Sphinx's Locale transform), so it extracts the captions but never
    translates them."""
    contents = read_toc()
    for part in contents.get("parts", []):
        part["caption"] = translated(language, contents["root"], part["caption"])
    path.write_text(yaml.safe_dump(contents, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def write_config(language, languages, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(edition_config(language, languages), allow_unicode=True, sort_keys=False),
                    encoding="utf-8")
    return path


def stage_sources(language, require_outputs=True):
    """A source folder for the edition in language: links to the English sources, with each
    notebook replaced by the one the English build executed (_build/jupyter_execute), so that
    its code cells and outputs are the English build's, and its own _config.yml and _toc.yml.
    Raises FileNotFoundError naming the first notebook the English build has not executed,
    unless not require_outputs (then the unexecuted notebook is staged)."""
    executed = BUILD / "jupyter_execute"
    source = BUILD / "translations" / language / "source"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in (*NOTEBOOK_DIRS, "_build", "_config.yml", "_toc.yml", ".git"):
            (source / entry.name).symlink_to(entry)
    for folder in NOTEBOOK_DIRS:
        (source / folder).mkdir()
        for entry in sorted((ROOT / folder).iterdir()):
            done = executed / folder / entry.name
            if entry.suffix != ".ipynb":
                (source / folder / entry.name).symlink_to(entry)
            elif done.exists():
                shutil.copyfile(done, source / folder / entry.name)
            elif require_outputs and folder == "chapters":     # the exercise pages are never executed
                raise FileNotFoundError(f"no executed notebook {done.relative_to(BUILD.parent)}")
            else:
                shutil.copyfile(entry, source / folder / entry.name)
    write_config(language, LANGUAGES, source / "_config.yml")
    write_toc(language, source / "_toc.yml")
    return source


def templates(out=TEMPLATES):
    """{page: template catalogue}, page as in _toc.yml ('book/intro')."""
    return {p.relative_to(out).with_suffix("").as_posix(): _read(p) for p in sorted(out.rglob("*.pot"))}


def catalogue_path(language, page):
    return LOCALE / language / "LC_MESSAGES" / f"{page}.po"


def _read(path):
    with open(path, "rb") as f:
        return read_po(f)


def _write(catalog, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        # no source locations: the notebooks' line numbers are per cell and change with every edit
        write_po(f, catalog, width=0, no_location=True, include_previous=True)


def update(language, pages):
    """Merge each page's template into its catalogue (creating it untranslated); returns the
    catalogues that no page has any more."""
    for page, template in pages.items():
        path = catalogue_path(language, page)
        if path.exists():
            catalog = _read(path)
            catalog.update(template, update_creation_date=False)  # no churn in untouched files
        else:
            catalog = Catalog(locale=language, project=template.project, fuzzy=False)
            catalog.update(template)
        _write(catalog, path)
    known = {catalogue_path(language, page) for page in pages}
    return sorted(p for p in (LOCALE / language).rglob("*.po") if p not in known)


def problems(language, pages):
    """[(page, 'untranslated' | 'outdated' | 'starts like a list, quote or heading', English
    message)] for each message of the English that the catalogues do not translate, translate
    only fuzzily (the English changed), or translate with text Sphinx would reject."""
    found = []
    for page, template in pages.items():
        path = catalogue_path(language, page)
        catalog = _read(path) if path.exists() else Catalog(locale=language)
        for message in template:
            if not message.id:
                continue                                     # the header
            entry = catalog.get(message.id, message.context)
            if entry is None or not entry.string:
                found.append((page, "untranslated", message.id))
            elif entry.fuzzy:
                found.append((page, "outdated", message.id))
            elif BLOCK_START.match(entry.string):
                found.append((page, "starts like a list, quote or heading (escape it: 2\\.)", message.id))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--language", default=LANGUAGES[0], choices=LANGUAGES)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--update", action="store_true", help="merge the English into the catalogues")
    action.add_argument("--check", action="store_true", help="fail on untranslated or outdated text")
    parser.add_argument("--page", action="append", help="only this page ('book/intro'); repeatable")
    args = parser.parse_args(argv)
    pages = templates(extract())
    unknown = sorted(set(args.page or ()) - set(pages))
    if unknown:
        raise SystemExit(f"translations: no page {unknown[0]!r}; expected one of _toc.yml's pages, "
                         f"such as 'book/intro'")
    if args.page:
        pages = {page: pages[page] for page in args.page}
    if args.update:
        for stale in update(args.language, pages):
            print(f"translations: {stale.relative_to(ROOT)} belongs to no page; delete it")
        print(f"translations: updated {len(pages)} catalogues in locale/{args.language}")
        return 0
    found = problems(args.language, pages)
    for page, kind, message in found:
        print(f"{page}: {kind}: {message[:100]!r}")
    total = sum(len([m for m in t if m.id]) for t in pages.values())
    print(f"translations: {len(found)} of {total} messages of {len(pages)} pages need a translation "
          f"into {args.language}" if found else
          f"translations: all {total} messages of {len(pages)} pages are translated into {args.language}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
