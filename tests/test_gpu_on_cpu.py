"""Every GPU branch, run on the CPU through the one switch, GPT2_COURSE_GPU_ON_CPU=1 (lib/scale.py).

- every chapter, and every solution notebook with a GPU branch, executes with the switch set:
  each takes its GPU branch at tiny sizes (nbval and the book build run the CPU branch); the
  three that tests/test_colab_run.py runs in its Colab environment under the switch run there;
- no notebook decides its scale or device by asking torch itself, so the switch reaches all of them;
- in lib, only lib/scale.py and the torch Trainer's device side (lib/torch_twin/gpu.py, the
  lines marked "CUDA only") and the GPU benchmark call torch.cuda: what only CUDA can run is kept in those few named places;
- `python -m lib.bench gpu` runs its training (with torch.compile) and bf16 decoding code.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from test_colab_run import NOTEBOOKS as COLAB_RUN

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
ALL_NOTEBOOKS = sorted(path for folder in ("chapters", "exercises", "solutions") for path in (ROOT / folder).glob("*.ipynb"))
ASKS_TORCH = re.compile(r"torch\.cuda\.(is_available|synchronize|get_device_name|get_device_capability)\b")
# Where lib may call torch.cuda: the switch itself, the torch Trainer's device side (its CUDA-only
# lines), the GPU benchmark.
CUDA_PLACES = {"lib/scale.py", "lib/torch_twin/gpu.py", "lib/bench/gpu.py"}


def code(path):
    return [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]


def has_gpu_branch(path):
    return any("gpu_scale(" in source for source in code(path))


# The notebooks that tests/test_colab_run.py runs (under the switch, asserting the same) are run there only.
SWITCHED = [p for p in CHAPTERS + [p for p in sorted((ROOT / "solutions").glob("*.ipynb")) if has_gpu_branch(p)]
            if str(p.relative_to(ROOT)) not in COLAB_RUN]


def test_no_notebook_asks_torch_for_the_device_itself():
    offenders = [f"{path.relative_to(ROOT)}: {match.group(0)}" for path in ALL_NOTEBOOKS
                 for source in code(path) for match in ASKS_TORCH.finditer(source)]
    assert offenders == [], "use lib.scale (gpu_scale, device, synchronize, where) so that the switch reaches it"


def test_what_only_cuda_runs_lives_in_the_named_places():
    found = {str(path.relative_to(ROOT)) for path in (ROOT / "lib").rglob("*.py") if "torch.cuda." in path.read_text()}
    assert found <= CUDA_PLACES, f"torch.cuda called outside {sorted(CUDA_PLACES)}: {sorted(found - CUDA_PLACES)}"


def test_every_notebook_with_a_gpu_scale_reads_it_from_lib_scale():
    for path in ALL_NOTEBOOKS:
        text = "\n".join(code(path))
        if re.search(r"\bGPU\s*=", text):
            assert "GPU = gpu_scale()" in text, f"{path.relative_to(ROOT)}: GPU must come from lib.scale.gpu_scale()"


@pytest.mark.slow
@pytest.mark.parametrize("path", SWITCHED, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_runs_its_gpu_branch_on_the_cpu(path, tmp_path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("GPT2_COURSE_GPU_ON_CPU", "1")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    printed = "".join(out.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []) if out.get("output_type") == "stream")
    if has_gpu_branch(path):
        assert "CPU standing in for a GPU" in printed, "the scale cell should print lib.scale.where()"


@pytest.mark.slow
def test_gpu_benchmark_runs_its_code_on_the_cpu():
    env = {**os.environ, "GPT2_COURSE_GPU_ON_CPU": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "lib.bench", "gpu", "--compile"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["measured"] is False and "not a GPU's" in result["device"]       # never a GPU figure
    assert result["train"]["compile"] and result["train"]["tokens_per_s"] > 0 and result["train"]["mfu"] is None
    decode = result["decode"]
    assert decode["same_tokens"] == decode["new"] and decode["tokens_per_s"]["torch twin"] > 0
    assert "Graph break" not in run.stderr                                    # compiled whole: no host read inside


def test_gpu_benchmark_says_not_measured_without_a_gpu():
    env = {k: v for k, v in os.environ.items() if k != "GPT2_COURSE_GPU_ON_CPU"}
    run = subprocess.run([sys.executable, "-m", "lib.bench", "gpu"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    import torch
    assert result["measured"] is torch.cuda.is_available()
    if not torch.cuda.is_available():
        assert "not measured" in run.stdout
