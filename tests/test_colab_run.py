"""The Colab path, run: the setup cell in an environment that holds only what Colab preinstalls,
then every cell of chapter 1, chapter 5 and one exercise's solution.

- a fresh virtual environment (no system site packages) with Colab's versions of the packages
  the course uses (COLAB_GPU_RUNTIME, tests/test_colab.py), of the packages that run Colab's
  notebook kernel (COLAB_KERNEL), and of everything these pull in (COLAB_ALSO, a constraint);
- a stand-in `google.colab` package, imported when the kernel starts, as Colab's kernel does:
  the setup cell only asks whether it is imported, and no notebook calls into it;
- the setup cell of each notebook pointed at a local clone of this repository's committed HEAD
  (the first one clones, installs the course and fetches its data; the later ones find the
  clone and install again), then every cell run by a kernel of that environment, in
  `<tmp>/content` as in Colab, with GPT2_COURSE_GPU_ON_CPU=1: Colab with a GPU, so the notebooks
  take their GPU branch (at tiny sizes on this CPU). These runs are the GPU-branch runs of these
  notebooks: tests/test_gpu_on_cpu.py leaves them out rather than execute them a second time;
- a course cache that holds only the models the install step trained (TRAINED: the small
  Shakespeare model and chapter 5's dropout runs), as a Colab runtime holds them once a first
  notebook has trained them, which a GPU does in seconds; this CPU takes minutes, and
  tools/install.sh has trained them with the same code. Everything else the setup cell fetches
  (GPT-2's vocabulary, Shakespeare's plays) it fetches into that cache itself;
- pip changed none of the versions the environment held before the setup cell.

The versions are Colab's published `pip freeze` of its GPU runtime (the file COLAB_GPU_RUNTIME
names). Where this environment differs from it: Python is this machine's (Colab's is 3.12);
torch is 2.13.0's CPU build, which lies on this machine's disk, standing in for Colab's 2.11.0
CUDA build (a download of several GB, for a GPU this machine lacks); that torch needs
setuptools>=77.0.3 where Colab has 75.2.0, so pip picks setuptools; and jedi, which IPython
needs but Colab's list does not name, is pip's choice too. The course's `dev` extra is not
installed: what the notebooks need must come from the setup cell.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from lib.assets import cache_dir
from test_colab import COLAB_GPU_RUNTIME, ROOT, canonical, setup_cell

# Colab's notebook kernel, and the front-end packages of its ipywidgets 7 (widgetsnbextension 3
# needs notebook 6), from the same pip freeze.
COLAB_KERNEL = {"ipykernel": "6.17.1", "ipython": "7.34.0", "jupyter-client": "7.4.9", "jupyter-core": "5.9.1",
                "traitlets": "5.7.1", "tornado": "6.5.1", "pyzmq": "26.2.1", "widgetsnbextension": "3.6.10",
                "jupyterlab-widgets": "3.0.16", "notebook": "6.5.7", "pip": "24.1.2"}
# Every other package that the two lists above pull in, at Colab's version (from the same file).
COLAB_ALSO = """
annotated-doc==0.0.4 anyio==4.13.0 argon2-cffi==25.1.0 argon2-cffi-bindings==25.1.0 arrow==1.4.0 attrs==26.1.0
backcall==0.2.0 beautifulsoup4==4.13.5 bleach==6.3.0 certifi==2026.5.20 cffi==2.0.0 charset-normalizer==3.4.7
click==8.4.1 contourpy==1.3.3 cycler==0.12.1 debugpy==1.8.15 decorator==4.4.2 defusedxml==0.7.1 entrypoints==0.4
fastjsonschema==2.21.2 filelock==3.29.0 fonttools==4.63.0 fqdn==1.5.1 fsspec==2025.3.0 h11==0.16.0 hf-xet==1.5.0
httpcore==1.0.9 httpx==0.28.1 idna==3.18 ipython-genutils==0.2.0 isoduration==20.11.0 Jinja2==3.1.6
jsonpointer==3.1.1 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 jupyter-events==0.12.1
jupyter_server==2.14.0 jupyter_server_terminals==0.5.4 jupyterlab_pygments==0.3.0 kiwisolver==1.5.0 lark==1.3.1
markdown-it-py==4.2.0 MarkupSafe==3.0.3 matplotlib-inline==0.2.2 mdurl==0.1.2 mistune==3.2.1 mpmath==1.3.0
nbclassic==1.3.3 nbclient==0.10.4 nbconvert==7.17.1 nbformat==5.10.4 nest-asyncio==1.6.0 networkx==3.6.1
notebook_shim==0.2.4 overrides==7.7.0 packaging==26.2 pandocfilters==1.5.1 parso==0.8.7 pexpect==4.9.0
pickleshare==0.7.5 pillow==11.3.0 platformdirs==4.10.0 prometheus_client==0.25.0 prompt_toolkit==3.0.52
psutil==5.9.5 ptyprocess==0.7.0 pycparser==3.0 Pygments==2.20.0 pyparsing==3.3.2 python-dateutil==2.9.0.post0
python-json-logger==4.1.0 PyYAML==6.0.3 referencing==0.37.0 requests==2.32.4 rfc3339-validator==0.1.4
rfc3986-validator==0.1.1 rfc3987-syntax==1.1.0 rich==13.9.4 rpds-py==2026.5.1 Send2Trash==2.1.0 shellingham==1.5.4
six==1.17.0 soupsieve==2.8.4 sympy==1.14.0 terminado==0.18.1 tinycss2==1.4.0 tokenizers==0.22.2 typer==0.25.1
typing_extensions==4.15.0 tzdata==2026.2 uri-template==1.3.0 urllib3==2.5.0 wcwidth==0.7.0 webcolors==25.10.0
webencodings==0.5.1 websocket-client==1.9.0
""".split()
COLAB_PINNED = {**COLAB_GPU_RUNTIME, **COLAB_KERNEL}
TORCH_STAND_IN = "torch==2.13.0"          # the CPU build on this machine's disk (tools/install.sh)
# The first executes the setup cell's clone, install and fetch; the exercise has a GPU branch.
NOTEBOOKS = ["chapters/01_tokenization.ipynb", "solutions/ch5_loss_plotter.ipynb", "chapters/05_training.ipynb"]
# The course cache's trained models (made by tools/install.sh) that the Colab runtime starts with.
TRAINED = ["pretrained", "overfitting"]
# The kernel's command: Colab's kernel has google.colab imported before any cell runs.
KERNEL_START = "import google.colab; from ipykernel import kernelapp; kernelapp.launch_new_instance()"


def run(*command, **options):
    done = subprocess.run(command, capture_output=True, text=True, **options)
    assert done.returncode == 0, f"{' '.join(map(str, command))}\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
    return done.stdout


def installed(python):
    """{package: version} of everything installed for `python`."""
    listed = json.loads(run(python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"))
    return {canonical(p["name"]): p["version"] for p in listed}


def clone_head(folder, branch):
    """A repository in `folder` holding this repository's committed HEAD as `branch`."""
    run("git", "init", "-q", str(folder))
    run("git", "-C", str(folder), "fetch", "-q", str(ROOT), "HEAD")
    run("git", "-C", str(folder), "checkout", "-q", "-B", branch, "FETCH_HEAD")


def colab_environment(folder):
    """A virtual environment in `folder` with Colab's packages and the stand-in google.colab; its python."""
    run(sys.executable, "-m", "venv", str(folder))
    python = str(folder / "bin" / "python")
    run(python, "-m", "pip", "install", "-q", f"pip=={COLAB_KERNEL['pip']}")
    constraints = folder / "colab-constraints.txt"
    constraints.write_text("\n".join(COLAB_ALSO) + "\n")
    pins = [f"{name}=={version}" for name, version in COLAB_PINNED.items() if name != "torch"] + [TORCH_STAND_IN]
    run(python, "-m", "pip", "install", "-q", "-c", str(constraints), *pins)
    site_packages = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    stand_in = site_packages / "google" / "colab"                # `google` stays a namespace package
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text('"""Stand-in for Colab\'s google.colab: that it is imported tells '
                                          'the setup cell it runs in Colab."""\n')
    return python


def kernel_spec(folder, python):
    """A kernel spec named `colab` in `folder`, for a kernel of `python`."""
    (folder / "colab").mkdir(parents=True)
    (folder / "colab" / "kernel.json").write_text(json.dumps(
        {"argv": [python, "-c", KERNEL_START, "-f", "{connection_file}"], "display_name": "Colab stand-in",
         "language": "python"}))


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """A Colab-like runtime in a temporary folder: its python and kernel spec, the kernel's
    environment variables, the setup cell that clones a local copy of the committed HEAD, a
    course cache holding the trained models, and the packages installed before any setup cell ran."""
    tmp = tmp_path_factory.mktemp("colab")
    _, branch = setup_cell.repository()
    clone_head(tmp / "repository", branch)
    python = colab_environment(tmp / "venv")
    kernel_spec(tmp / "kernels", python)
    (tmp / "content").mkdir()
    for folder in TRAINED:
        shutil.copytree(cache_dir() / folder, tmp / "cache" / folder)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PATH=f"{tmp / 'venv' / 'bin'}{os.pathsep}{env['PATH']}", GPT2_COURSE_CACHE=str(tmp / "cache"),
               GPT2_COURSE_GPU_ON_CPU="1")
    setup = setup_cell.TEMPLATE.format(url=f"file://{tmp / 'repository'}", branch=branch,
                                       course=str(tmp / "content" / "course"))
    before = installed(python)
    differ = {name: before.get(canonical(name)) for name, version in COLAB_PINNED.items()
              if name != "torch" and before.get(canonical(name)) != version}
    assert differ == {}, f"pip did not install Colab's versions of {differ}"
    return dict(tmp=tmp, python=python, env=env, setup=setup, before=before)


def failed_cell(nb):
    """The failing cell's place, first lines and traceback, for the test's message."""
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                head = "\n".join(cell.source.splitlines()[:6])
                traceback = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out.traceback))   # without terminal colours
                return f"cell {index + 1} of {len(nb.cells)}:\n{head}\n...\n{traceback[-3000:]}"
    return "no cell shows an error"


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_notebook_runs_in_colab_after_its_setup_cell(colab, notebook):
    from jupyter_client import AsyncKernelManager
    from jupyter_core.utils import run_sync
    from jupyter_client.kernelspec import KernelSpecManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    path = colab["tmp"] / "repository" / notebook
    nb = nbformat.read(path, as_version=4)
    setup_cell.setup_cell(nb, path).source = colab["setup"]
    specs = KernelSpecManager(kernel_dirs=[str(colab["tmp"] / "kernels")])
    km = AsyncKernelManager(kernel_name="colab", kernel_spec_manager=specs)
    client = NotebookClient(nb, timeout=600, km=km, resources={"metadata": {"path": str(colab["tmp"] / "content")}})
    try:
        client.execute(env=colab["env"])
    except CellExecutionError:
        pytest.fail(f"{notebook}, {failed_cell(nb)}", pytrace=False)
    finally:
        # nbclient leaves a kernel manager it was given running: stop the kernel here, so that a
        # kernel still computing (a cell past its timeout) cannot slow every test after this one.
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)
    printed = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []) if out.get("output_type") == "stream")
    assert "course ready in" in printed, "the setup cell did not run its Colab branch"
    if any("gpu_scale(" in cell.source for cell in nb.cells if cell.cell_type == "code"):
        assert "CPU standing in for a GPU" in printed, "the notebook should take its GPU branch"

    after = installed(colab["python"])
    changed = {name: (version, after.get(name)) for name, version in colab["before"].items()
               if after.get(name) != version}
    assert changed == {}, f"the setup cell changed Colab's packages (before, after): {changed}"
