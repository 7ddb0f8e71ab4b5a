"""Build the book, strictly: the single command instructors and the tests use.

    python tools/build_book.py

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
"""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

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


def main():
    missing = missing_results()
    for what, command in missing:
        print(f"build_book: {what} is not in the cache; run `{command}` (or `bash tools/install.sh`, "
              f"which runs it) before building the book", flush=True)
    if missing:
        return 2
    for name in PREVIOUS:
        shutil.rmtree(BUILD / name, ignore_errors=True)
    cmd = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", *JB_ARGS]
    print("build_book:", " ".join(["jb", *JB_ARGS]), flush=True)
    start = time.perf_counter()
    # The kernels draw figures with Jupyter's inline backend; an MPLBACKEND in the environment
    # (Agg, as headless scripts set it) would make every plt.show() draw nothing into the pages.
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)
    lines = []
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
    code = proc.wait()
    LOG.parent.mkdir(exist_ok=True)
    LOG.write_text("".join(lines))
    print(f"build_book: {'ok' if code == 0 else f'FAILED (exit {code})'} in "
          f"{time.perf_counter() - start:.0f} s; log in {LOG.relative_to(ROOT)}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
