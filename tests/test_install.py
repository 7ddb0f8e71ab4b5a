"""What a fresh install leaves behind: Python's codec registry as Python made it, and the
commands that run the notebooks locally (`jupyter lab`, `jupyter nbconvert`).

A dependency once installed a .pth file that registered, at every interpreter start, a codec
search function answering every codec name, so later lookups (the bibliography's LaTeX codec in
the book build) got the wrong codec. These checks run in fresh interpreters of this environment,
so any .pth file of any installed package takes part.
"""
import codecs
import subprocess
import sys
from pathlib import Path

import pytest

import lib  # noqa: F401  (the package under test: importing it must change nothing here)

NO_SUCH_CODEC = "no-such-codec-gpt2-course"


def fresh(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_an_unknown_codec_is_unknown_in_this_process():
    with pytest.raises(LookupError, match=NO_SUCH_CODEC):
        codecs.lookup(NO_SUCH_CODEC)


@pytest.mark.parametrize("imports", ["", "import lib, lib.data, lib.numpy_twin, lib.torch_twin"])
def test_an_unknown_codec_is_unknown_in_a_fresh_interpreter(imports):
    run = fresh(f"{imports}\nimport codecs\ntry:\n    codecs.lookup({NO_SUCH_CODEC!r})\n"
                f"except LookupError:\n    print('LookupError')\n")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "LookupError", f"a codec search function answers unknown names: {run.stdout!r}"


def test_the_bibliography_codec_decodes_text():
    # pybtex (sphinxcontrib-bibtex) decodes str with latexcodec's "ulatex" codec
    run = fresh("import codecs, latexcodec\nprint(codecs.decode('caf\\\\\\'e', 'ulatex'))")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "café"


@pytest.mark.parametrize("command", ["lab", "nbconvert"])
def test_the_notebook_commands_are_installed(command):
    # book/running.md: `jupyter lab` opens the chapters, `jupyter nbconvert --execute` runs one
    jupyter = Path(sys.executable).parent / "jupyter"
    assert jupyter.is_file(), f"no {jupyter}: the install step installs jupyterlab and nbconvert"
    run = subprocess.run([str(jupyter), command, "--version"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip()[:1].isdigit(), run.stdout + run.stderr
