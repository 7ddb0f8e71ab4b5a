"""A notebook's two scales, and the one switch that runs the GPU scale's code on a CPU.

A notebook chooses between its CPU scale and its GPU scale in one cell, from `gpu_scale()`: true
where torch sees a CUDA device. Setting GPT2_COURSE_GPU_ON_CPU=1 in the environment makes it true
on a CPU too, so that every GPU branch can run where there is no GPU (CI):
- the notebook takes its GPU branch with tiny sizes: `gpu_or_tiny(gpu_value, tiny_value)`;
- the torch twin's `Trainer` takes its GPU code paths on the CPU: autocast in bfloat16 (or
  float16 with a gradient scaler), the padded vocabulary, `torch.compile` when asked; AdamW's
  fused kernel and `scaled_dot_product_attention` are the same calls on both devices.
What only CUDA can run stays in three places (tests/test_gpu_on_cpu.py keeps torch.cuda out of
the rest of lib and out of the notebooks): this module (`cuda`, `where`, `synchronize`);
`lib/torch_twin/gpu.py`, the torch Trainer's device side: the lines marked "CUDA only" (the
current device, TF32, pinned-memory batches, the CUDA RNG state), the dtype chosen from the
compute capability in `precision` and NCCL in `init_distributed`; and the GPU's peak FLOP/s in `lib/bench/gpu.py`.
"""
import os

GPU_ON_CPU = "GPT2_COURSE_GPU_ON_CPU"


def gpu_on_cpu() -> bool:
    """True when the environment asks for the GPU configuration on the CPU (GPT2_COURSE_GPU_ON_CPU=1)."""
    value = os.environ.get(GPU_ON_CPU, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"{GPU_ON_CPU} must be 1 (GPU configuration on the CPU), 0 or unset; got {value!r}")
    return value == "1"


def cuda() -> bool:
    """True when torch is installed and sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def gpu_scale() -> bool:
    """Whether a notebook takes its GPU branch: on a CUDA device, or under GPT2_COURSE_GPU_ON_CPU=1."""
    return cuda() or gpu_on_cpu()


def device() -> str:
    """Where the torch twin computes: "cuda" when there is a CUDA device, else "cpu"."""
    return "cuda" if cuda() else "cpu"


def gpu_or_tiny(gpu_value, tiny_value):
    """A size of a GPU branch: gpu_value on a CUDA device, tiny_value when that branch runs on a
    CPU under GPT2_COURSE_GPU_ON_CPU=1."""
    return tiny_value if gpu_on_cpu() and not cuda() else gpu_value


def where() -> str:
    """Where a notebook runs, in words: the GPU's name, a CPU standing in for one, or a CPU."""
    if cuda():
        import torch
        return f"GPU: {torch.cuda.get_device_name()}"
    return f"CPU standing in for a GPU ({GPU_ON_CPU}=1): GPU code paths, tiny sizes" if gpu_on_cpu() else "CPU"


def synchronize():
    """Wait until the device has finished the work queued so far (CUDA only: a CPU computes
    as it is called), so that a timer stopped after it measures the work and not its queueing."""
    if cuda():
        import torch
        torch.cuda.synchronize()
