"""The shared package of the course. See README.md ("Map of lib") for what lives where.

`import lib` is cheap: it loads the framework-free configuration only. The twins load on
first use, `lib.numpy_twin` (numpy only) and `lib.torch_twin` (torch), so a machine
without torch can still run everything numpy. It sets nothing process-wide (the numpy twin's
`Trainer` tunes the C allocator: `lib/allocator.py`).
"""
import importlib

from .config import GPTConfig, kv_cache_bytes, param_counts, param_shapes

__all__ = ["GPTConfig", "kv_cache_bytes", "param_counts", "param_shapes"]


def __getattr__(name):
    # Lazy submodules: `lib.torch_twin` imports torch only when first touched.
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"{__name__}.{name}":
            raise AttributeError(f"module 'lib' has no attribute {name!r}") from None
        raise
