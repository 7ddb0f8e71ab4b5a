"""Choosing, recognising and running either twin: written here once, used everywhere else.

- `default_twin()`: "torch" where torch is installed, else "numpy".
- `twin_module(twin, submodule=None)`: `lib.numpy_twin` or `lib.torch_twin` (or one of its
  modules), imported on first use, so choosing numpy never imports torch.
- `twin_of(model)`: "numpy" or "torch", from the model's class (torch is not imported to find out).
- `as_model_ids(model, ids)`: token ids (a list, a numpy array, a tensor) as the model's twin takes
  them: a numpy int64 array, or a torch int64 tensor on the model's device.
- `to_numpy(x)`: a twin's output (array, tensor, or a tuple/list of them) as numpy arrays.
- `forward(model, ids)`: `model.forward` on token ids with either twin, without gradients, the
  logits as a numpy array; `forward_outputs(model, ids, return_attention)` the same for
  `model.forward_outputs`, each of its `Outputs` as numpy arrays.
"""
from __future__ import annotations

import importlib
import importlib.util

import numpy as np

TWINS = ("numpy", "torch")


def default_twin() -> str:
    return "torch" if importlib.util.find_spec("torch") is not None else "numpy"


def check_twin(twin: str) -> str:
    if twin not in TWINS:
        raise ValueError(f"twin must be one of {TWINS}, got {twin!r}")
    return twin


def twin_module(twin: str, submodule: str | None = None):
    name = f"lib.{check_twin(twin)}_twin" + (f".{submodule}" if submodule else "")
    return importlib.import_module(name)


def twin_of(model) -> str:
    module = type(model).__module__
    for twin in TWINS:
        if module.startswith(f"lib.{twin}_twin"):
            return twin
    raise TypeError(f"model must be a lib.numpy_twin.GPT or a lib.torch_twin.GPT, got {type(model).__name__} "
                    f"from {module}")


def as_model_ids(model, ids):
    if twin_of(model) == "torch":
        import torch
        return torch.as_tensor(to_numpy(ids), dtype=torch.int64, device=model.wte.weight.device)
    return np.asarray(to_numpy(ids), dtype=np.int64)


def to_numpy(x):
    if isinstance(x, (tuple, list)) and any(hasattr(v, "detach") or isinstance(v, np.ndarray) for v in x):
        items = [None if v is None else to_numpy(v) for v in x]   # several outputs; a list of ids stays one array
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)   # a named tuple takes its fields
    if hasattr(x, "detach"):                                   # a torch tensor, on any device
        x = x.detach().cpu()
        return (x.float() if x.is_floating_point() else x).numpy()
    return np.asarray(x)


def forward(model, ids):
    return _without_grad(model.forward, as_model_ids(model, ids))


def forward_outputs(model, ids, return_attention=False):
    return _without_grad(model.forward_outputs, as_model_ids(model, ids), return_attention=return_attention)


def _without_grad(method, ids, **options):
    if twin_of(method.__self__) == "numpy":
        return method(ids, **options)
    import torch
    with torch.no_grad():
        return to_numpy(method(ids, **options))
