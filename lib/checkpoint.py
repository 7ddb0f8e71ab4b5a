"""Training checkpoints that a crash at any moment cannot break (no framework here).

An output folder holds one folder per checkpoint and a pointer to the newest:

    out/
      step-000100/            never modified once published
        config.json           the model's config   } lib.weights' format: either twin's
        model.safetensors     the weights          } GPT.load(out/step-000100) reads them
        trainer.safetensors   AdamW's moments, RNG states
        trainer.json          step, optimizer step count, sampler position, history, settings
      latest                  one line: the name of the newest complete checkpoint folder

Saving writes everything into a hidden work folder (`out/.tmp/`), flushes it to disk, renames
it to `step-NNNNNN`, and only then replaces `latest` (`lib.atomic.write_atomic`): a reader
sees the old pointer or the new one, never half of one. A crash before that last replace
leaves `latest` naming the previous checkpoint, which nothing has touched.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from .atomic import fsync, write_atomic
from .weights import load_state, save_state

POINTER = "latest"
ARRAYS_FILE = "trainer.safetensors"
META_FILE = "trainer.json"
TMP_DIR = ".tmp"


def checkpoint_name(step: int) -> str:
    return f"step-{step:06d}"


def latest_checkpoint(out_dir) -> Path | None:
    """The folder `out_dir/latest` names, or None when no checkpoint was ever published."""
    pointer = Path(out_dir) / POINTER
    if not pointer.is_file():
        return None
    folder = Path(out_dir) / pointer.read_text().strip()
    if not (folder / META_FILE).is_file():
        raise FileNotFoundError(f"{pointer} names {folder.name!r}, which is not a complete checkpoint folder")
    return folder


def _write_folder(folder, config, model_state, arrays, meta):
    """Write a checkpoint's four files into `folder` (which does not exist yet) and flush them."""
    from safetensors.numpy import save_file

    save_state(folder, config, model_state)
    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(folder / ARRAYS_FILE))
    (folder / META_FILE).write_text(json.dumps(meta))
    for f in folder.iterdir():
        fsync(f)
    fsync(folder)


def _publish(out_dir, name):
    """Point `latest` at `name`: write a temporary pointer, then atomically replace the old one."""
    write_atomic(out_dir / POINTER, name + "\n")


def save_checkpoint(out_dir, step, config, model_state, arrays, meta, keep=2) -> Path:
    """Publish a checkpoint of `step` in `out_dir` and return its folder.

    model_state: {name: array} weights; arrays: other {name: array} (optimizer, RNG);
    meta: a JSON-able dict. Keeps the newest `keep` checkpoints and removes older ones.
    Work in progress lives in `out_dir/.tmp`, which the next save clears if a crash left
    anything there."""
    out_dir = Path(out_dir)
    name = checkpoint_name(step)
    current = latest_checkpoint(out_dir)
    if current is not None and current.name == name:
        return current                                       # this very state is already published
    work = out_dir / TMP_DIR
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    _write_folder(work / name, config, model_state, arrays, {"step": step, **meta})
    final = out_dir / name
    if final.exists():                                       # renamed, then the crash came before publishing
        shutil.rmtree(final)
    os.replace(work / name, final)
    fsync(out_dir)
    _publish(out_dir, name)
    _prune(out_dir, keep)
    return final


def clear_checkpoints(out_dir) -> None:
    """Start afresh in `out_dir`: unpublish (remove `latest`), then remove every checkpoint."""
    out_dir = Path(out_dir)
    (out_dir / POINTER).unlink(missing_ok=True)
    for folder in [*out_dir.glob("step-*"), out_dir / TMP_DIR]:
        shutil.rmtree(folder, ignore_errors=True)


def _prune(out_dir, keep):
    """Remove all but the newest `keep` checkpoints (never the published one) and the work folder."""
    published = sorted((p for p in out_dir.glob("step-*") if p.is_dir()), key=lambda p: int(p.name[5:]))
    current = latest_checkpoint(out_dir)
    for old in published[:-keep]:
        if old != current:
            shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(out_dir / TMP_DIR, ignore_errors=True)


def load_checkpoint(path):
    """(config, model_state, arrays, meta) from a checkpoint folder, or from the one an
    output folder's `latest` names."""
    from safetensors.numpy import load_file

    path = Path(path)
    if (path / POINTER).is_file():
        path = latest_checkpoint(path)
    if not (path / META_FILE).is_file():
        raise FileNotFoundError(f"no checkpoint in {path}: expected an output folder with a "
                                f"'{POINTER}' file, or a checkpoint folder holding {META_FILE}")
    config, model_state = load_state(path)
    return config, model_state, load_file(str(path / ARRAYS_FILE)), json.loads((path / META_FILE).read_text())
