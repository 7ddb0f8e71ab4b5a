"""DistributedDataParallel on the CPU: 2 gloo processes under torchrun against 1 process.

Both runs see the same global batch of 8 windows per step (2 processes x 4, or 1 x 8), so the
loss trajectories must agree. Tolerance 1e-5 (float32): the two runs sum the gradient over
the batch in a different order (two halves averaged by all-reduce, or all at once), a
rounding difference of ~1e-7 per step that 20 steps do not grow past 1e-6 here; a wrong shard,
a double-counted gradient or a missed all-reduce changes the losses by > 1e-3.
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--twin", "torch", "--device", "cpu", "--n-layer", "2", "--n-head", "2", "--n-embd", "32",
        "--block-size", "16", "--max-iters", "20", "--eval-interval", "10", "--eval-iters", "2",
        "--warmup-iters", "5", "--lr", "3e-3", "--sample-tokens", "0"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(command, env):
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_two_gloo_processes_match_one_process_on_the_same_global_batch(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("".join(f"{i} little pigs went to market, {i * 7 % 13} came home.\n" for i in range(400)))
    env = {**os.environ, "GPT2_COURSE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    # tokenize once here: lib.data's cache is not safe against two processes creating it at once
    run([sys.executable, "-c", f"from lib.data import load_corpus; load_corpus({str(text)!r})"], env)
    data = ["--data", str(text)]
    run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
         f"--master_port={free_port()}", "-m", "lib.train", *ARGS, *data, "--batch-size", "4",
         "--out", str(tmp_path / "ddp")], env)
    single = run([sys.executable, "-m", "lib.train", *ARGS, *data, "--batch-size", "8", "--json",
                  "--out", str(tmp_path / "single")], env)
    ddp = json.loads((tmp_path / "ddp" / "history.json").read_text())
    one = json.loads((tmp_path / "single" / "history.json").read_text())
    assert ddp["step"] == one["step"] == list(range(1, 21))
    assert ddp["tokens_per_step"] == one["tokens_per_step"] == 8 * 16
    np.testing.assert_allclose(ddp["train_loss"], one["train_loss"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(ddp["val_loss"], one["val_loss"], atol=1e-5, rtol=0)
    assert one["train_loss"][-1] < one["train_loss"][0] - 0.5         # it trained: the comparison means something
    assert json.loads(single.stdout.strip().splitlines()[-1])["steps"] == 20
    assert sorted(p.name for p in (tmp_path / "ddp").glob("step-*")) == ["step-000010", "step-000020"]
