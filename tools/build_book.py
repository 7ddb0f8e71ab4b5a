"""Build the book, strictly: the single command instructors and the tests use.

    python tools/build_book.py                       # the English edition, into _build/html
    python tools/build_book.py --all-languages       # English, then every translation
    python tools/build_book.py --language zh_CN      # the Chinese edition, into _build/html/zh_CN

Removes the previous build (so no page of an older toc lingers, and no warning is hidden
by Sphinx's incremental build: every page is read and every chapter executed again), then
runs `jb build` nitpicky (`-n`: every broken reference warns) and failing on any warning
(`-W`, with `--keep-going` to report them all). The first step of the build
(tools/book_ext.py) fetches the offline assets when they are missing
(tools/fetch_assets.py). The HTML lands in _build/html. Exits non-zero on failure; the
log is also written to _build/build.log.

Before anything else it checks that the results the install step computes ahead of time
(`missing_results`) are in the cache: chapters 7's and 9's experiments take minutes, longer than
the build gives one cell, so a cold cache stops the build at once with the command to run first.

A translation (`--language zh_CN`) executes nothing: it is built from the English build's
executed notebooks (_build/jupyter_execute), so its code cells and outputs are the English
ones, and costs about as much as a build of the book's text. It first checks the catalogues
(tools/translations.py --check) and stops on any untranslated or outdated message; `--draft`
builds anyway, showing the English for those (a translator's preview, never published).
With `--all-languages` every page of each edition links to the same page of the others.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import translations  # noqa: E402  (a sibling module)

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
LOG = BUILD / "build.log"
JB_ARGS = ["build", ".", "--all", "-W", "-n", "--keep-going"]
PREVIOUS = ("html", ".doctrees", "jupyter_execute")  # what jb build writes under _build


def missing_results():
    """[(what, command that computes it)] for each result that a chapter reads from the cache and
    that is not there."""
    if str(ROOT) not in sys.path:                            # run as a script, tools/ is on the path instead
        sys.path.insert(0, str(ROOT))
    import lib.finetune
    import lib.posttrain.experiment
    from lib.assets import AssetError

    results = [("chapter 7's fine-tuning experiment", lib.finetune.experiment_file, "python -m lib.finetune"),
               ("chapter 9's post-training experiment", lib.posttrain.experiment.experiment_file,
                'python -c "from lib.posttrain.experiment import experiment; experiment()"')]
    missing = []
    for what, where, command in results:
        try:
            if where().is_file():
                continue
        except AssetError:                                   # not even the plays are fetched yet
            pass
        missing.append((what, command))
    return missing


def run_logged(cmd, log, env=None):
    """Run cmd in the repository, echoing and logging its output; returns its exit code."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)
    lines = []
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
    code = proc.wait()
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(lines))
    return code


def build_english(languages):
    """The English edition, executing every chapter; its pages link to the editions in languages."""
    missing = missing_results()
    for what, command in missing:
        print(f"build_book: {what} is not in the cache; run `{command}` (or `bash tools/install.sh`, "
              f"which runs it) before building the book", flush=True)
    if missing:
        return 2
    for name in PREVIOUS:
        shutil.rmtree(BUILD / name, ignore_errors=True)
    shutil.rmtree(BUILD / "translations", ignore_errors=True)
    config = translations.write_config("en", languages, BUILD / "config-en.yml") if languages else None
    args = [*JB_ARGS, *(["--config", str(config)] if config else [])]
    cmd = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", *args]
    print("build_book:", " ".join(["jb", *args]), flush=True)
    start = time.perf_counter()
    # The kernels draw figures with Jupyter's inline backend; an MPLBACKEND in the environment
    # (Agg, as headless scripts set it) would make every plt.show() draw nothing into the pages.
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    code = run_logged(cmd, LOG, env)
    print(f"build_book: {'ok' if code == 0 else f'FAILED (exit {code})'} in "
          f"{time.perf_counter() - start:.0f} s; log in {LOG.relative_to(ROOT)}", flush=True)
    return code


def build_translation(language, draft=False):
    """The edition in language, from the English build's executed notebooks, into _build/html/<language>."""
    start = time.perf_counter()
    try:
        source = translations.stage_sources(language, require_outputs=not draft)
    except FileNotFoundError as error:
        print(f"build_book: {error}; build the English edition first (`python tools/build_book.py`)",
              flush=True)
        return 2
    found = translations.problems(language, translations.templates(translations.extract()))
    for page, kind, message in found:
        print(f"build_book: {language}: {page}: {kind}: {message[:100]!r}", flush=True)
    if found and not draft:
        print(f"build_book: {len(found)} messages need a translation into {language} "
              f"(locale/TRANSLATING.md); nothing built", flush=True)
        return 1
    work = BUILD / "translations" / language
    shutil.rmtree(work / "_build", ignore_errors=True)
    args = ["build", str(source), "--all", "-n", "--keep-going", "--path-output", str(work),
            *([] if draft else ["-W"])]
    cmd = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", *args]
    print("build_book:", " ".join(["jb", *args]), flush=True)
    code = run_logged(cmd, BUILD / f"build-{language}.log")
    if code == 0:
        shutil.rmtree(BUILD / "html" / language, ignore_errors=True)
        shutil.copytree(work / "_build" / "html", BUILD / "html" / language)
    print(f"build_book: {language} {'ok' if code == 0 else f'FAILED (exit {code})'} in "
          f"{time.perf_counter() - start:.0f} s; log in _build/build-{language}.log", flush=True)
    return code


def main(argv=None):
    parser = argparse.ArgumentParser(description="Build the book strictly.")
    parser.add_argument("--language", choices=translations.LANGUAGES,
                        help="build only this translation, from the English build's executed notebooks")
    parser.add_argument("--all-languages", action="store_true",
                        help="build the English edition, then every translation, linked both ways")
    parser.add_argument("--draft", action="store_true",
                        help="translations build even with untranslated text (shown in English)")
    args = parser.parse_args(argv)
    if args.language:
        return build_translation(args.language, args.draft)
    languages = translations.LANGUAGES if args.all_languages else ()
    code = build_english(languages)
    for language in languages:
        code = code or build_translation(language, args.draft)
    return code


if __name__ == "__main__":
    sys.exit(main())
