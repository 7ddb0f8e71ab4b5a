"""The device side of the torch twin's training: GPU precision, the process group and DDP, for its `Trainer`.

`lib/torch_twin/train.py` keeps the twin's arithmetic, mirroring `lib/numpy_twin/train.py`; what
its `Trainer` does about the device is here, and the numpy twin, one process on the CPU, has none:

- `pad_vocab`: the tied head padded to a multiple of 64 rows while training on a GPU;
- `precision`: autocast's dtype and a GradScaler, from the compute capability;
- `init_distributed`: the process group torchrun describes;
- `DeviceSide`: one trainer's device, precision, process group, padded head, torch.compile and
  DistributedDataParallel, its batches' copies to the device, and the CUDA RNG state.
Under GPT2_COURSE_GPU_ON_CPU=1 a CPU takes the GPU paths that a CPU can run (lib/scale.py); the
lines marked "CUDA only" are the rest.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ..scale import gpu_on_cpu
from .model import replace_head


def pad_vocab(model, multiple=64):
    """GPU compute path only, as a context: within it the tied head multiplies by wte padded with
    zero rows to a multiple of `multiple` (50,257 -> 50,304: shapes the tensor cores like), then
    drops the padded logits (model.py's `replace_head`). The stored weights, checkpoints and
    sampled ids keep vocab_size rows."""
    V = model.config.vocab_size
    pad = -V % multiple

    def lm_head(hidden):                                     # (B, T, C)
        w = F.pad(model.wte.weight, (0, 0, 0, pad))          # (V + pad, C)
        return (hidden @ w.T)[..., :V]                       # (B, T, V)
    return replace_head(model, lm_head) if pad else contextlib.nullcontext()


def precision(device, dtype):
    """(autocast dtype or None, use a GradScaler) for `dtype` in None (auto), 'float32',
    'bfloat16', 'float16'. Auto: bf16 on compute capability >= 8.0; fp16 with a scaler below
    (a T4 emulates bf16, and is_bf16_supported() says yes there); float32 on the CPU, or bf16
    there under GPT2_COURSE_GPU_ON_CPU=1 (lib/scale.py), which allows fp16 on the CPU too."""
    if dtype not in (None, "float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be 'float32', 'bfloat16' or 'float16' (or None: automatic); got {dtype!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(device)!r} but this torch sees no CUDA device; use device='cpu'")
    if device.type != "cuda" and not gpu_on_cpu():
        if dtype not in (None, "float32"):
            raise ValueError(f"dtype={dtype!r} needs a CUDA device; on {device} training runs in float32")
        return None, False
    if dtype is None:
        dtype = "bfloat16" if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] >= 8 else "float16"
    return (None if dtype == "float32" else getattr(torch, dtype)), dtype == "float16"


def init_distributed(device):
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK in the
    environment): NCCL on CUDA, gloo on the CPU. Returns (rank, world_size, local_rank, joined)."""
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if world_size == 1:
        return 0, 1, 0, False
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    joined = not dist.is_initialized()
    if joined:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), world_size, local_rank, joined


class DeviceSide:
    """Where and how one torch Trainer computes. device: None (CUDA when torch sees it, else the
    CPU), or a name; under torchrun each process takes the GPU of its LOCAL_RANK and joins the
    process group. dtype: `precision`'s (checked before anything else). Sets `device`, `rank`,
    `world_size`, `autocast` (a context factory) and `scaler` (a GradScaler, or None)."""

    def __init__(self, device=None, dtype=None):
        cuda = torch.cuda.is_available() if device is None else str(device).startswith("cuda")
        world_size = int(os.environ.get("WORLD_SIZE", 1))
        device = torch.device("cuda" if cuda else "cpu") if device is None else torch.device(device)
        if cuda and world_size > 1:
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        amp_dtype, use_scaler = precision(device, dtype)     # checks dtype before anything else
        if device.type == "cuda":                            # CUDA only
            torch.cuda.set_device(device)                    # NCCL and autocast use the current device
        self.rank, self.world_size, self.local_rank, self._joined = init_distributed(device)
        self.device, self.cuda = device, cuda
        self.padded_head = contextlib.ExitStack()            # pad_vocab's context, left by close()
        self.autocast = contextlib.nullcontext
        if amp_dtype is not None:
            self.autocast = lambda: torch.autocast(device.type, dtype=amp_dtype)
        self.scaler = torch.amp.GradScaler(device.type) if use_scaler else None
        if device.type == "cuda":                            # CUDA only
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True

    def pad_head(self, model):
        """The padded vocabulary (`pad_vocab`) on a GPU, until `close()`."""
        if self.device.type == "cuda" or gpu_on_cpu():
            self.padded_head.enter_context(pad_vocab(model))

    def wrap(self, model, compile=False):
        """What computes the steps: `model`, compiled if asked, in DistributedDataParallel under torchrun."""
        compute = torch.compile(model) if compile else model
        if self.world_size > 1:
            compute = DistributedDataParallel(compute, device_ids=[self.local_rank] if self.cuda else None)
        return compute

    def to_device(self, batches):
        """Host batches [(x, y), ...] on the device; to CUDA from pinned memory (CUDA only), so the
        copy runs beside the computation instead of holding up the host."""
        pinned = self.device.type == "cuda"
        return [tuple((t.pin_memory() if pinned else t).to(self.device, non_blocking=True)
                      for t in (torch.from_numpy(x), torch.from_numpy(y))) for x, y in batches]

    def mean_over_processes(self, value):
        """The mean of a float over all processes (itself in one process)."""
        if self.world_size > 1:
            total = torch.tensor(value, dtype=torch.float64, device=self.device)
            dist.all_reduce(total)
            value = total.item() / self.world_size
        return value

    def rng_arrays(self):
        """{"rng.torch_cuda": the CUDA generator's state} on CUDA, else {}."""
        if self.device.type == "cuda":                       # CUDA only
            return {"rng.torch_cuda": torch.cuda.get_rng_state(self.device).numpy()}
        return {}

    def load_rng_arrays(self, arrays):
        if self.device.type == "cuda" and "rng.torch_cuda" in arrays:   # CUDA only
            torch.cuda.set_rng_state(torch.from_numpy(np.array(arrays["rng.torch_cuda"])), self.device)

    def close(self):
        """Leave the process group if this trainer joined it; restore the unpadded head."""
        self.padded_head.close()
        if self._joined:
            dist.destroy_process_group()
