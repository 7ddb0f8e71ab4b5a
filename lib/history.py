"""The loss history of a training run (`lib.train.train` returns it and writes it as history.json).

- `new_history(tokens_per_step)`: an empty one; its keys are listed in `lib.train.train`.
- `write_history(out, history)`: history.json in the folder `out`, replaced atomically.
- `read_history(path)`: a written one back (history.json, or the folder holding it).
"""
from __future__ import annotations

import json
from pathlib import Path

from .atomic import write_atomic

HISTORY_FILE = "history.json"


def new_history(tokens_per_step):
    return {"step": [], "train_loss": [], "lr": [], "grad_norm": [], "eval_step": [], "eval_train_loss": [],
            "val_loss": [], "tokens_per_step": tokens_per_step, "train_seconds": 0.0, "seconds": 0.0}


def write_history(out, history):
    """history.json in `out`, replaced atomically (a reader never sees half a file)."""
    write_atomic(Path(out) / HISTORY_FILE, json.dumps(history))


def read_history(path):
    """A history written by `train` (history.json, or the folder holding it)."""
    path = Path(path)
    return json.loads((path / HISTORY_FILE if path.is_dir() else path).read_text())
