"""Files that a reader finds whole or not at all: written aside, flushed to disk, then renamed.

- `atomic_path(path, mode=None)`: a context manager that yields a temporary path in the same
  folder as `path`, for any writer (np.save, safetensors' save_file, open()). When the block
  ends without an error, the file is flushed to disk and renamed to `path` in one step
  (`os.replace`, atomic within a folder); after an error it is removed and `path` is untouched.
- `write_atomic(path, data, mode=None)`: the same for bytes or text (UTF-8) in hand.
- `atomic_folder(path)`: the same for a folder of files: it yields an empty temporary folder
  beside `path`, and swaps it in whole (an old folder at `path` is moved aside, then removed).
- `fsync(path)`: flush a file or a folder (a rename is durable once its folder is flushed).

mode: the new file's permission bits (e.g. 0o600 for a file only its owner may read); by
default those of any new file (0o666 less the umask). The temporary name holds the process id
and a random part, so processes writing the same file at once never share a temporary file, and
ends in the file's own suffix, which writers such as np.save would otherwise append.
"""
from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


def fsync(path) -> None:
    """Flush a file or folder to disk (where the system allows opening folders)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path, mode: int | None = None):
    """Yield a fresh temporary path beside `path`; on a clean exit, flush it and rename it to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp{path.suffix}")
    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode))
    try:
        yield temp
        if mode is not None:
            os.chmod(temp, mode)                             # a writer may have recreated the file
        fsync(temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync(path.parent)


def write_atomic(path, data: bytes | str, mode: int | None = None) -> Path:
    """Write `data` (text is written as UTF-8) to `path` atomically; returns `path`."""
    with atomic_path(path, mode) as temp:
        temp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


@contextmanager
def atomic_folder(path):
    """Yield a fresh empty folder beside `path`; on a clean exit, flush its files and move it to
    `path`, replacing any folder there (moved aside first, so `path` is never half written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield temp
        for file in temp.rglob("*"):
            fsync(file)
        fsync(temp)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old)                            # an empty folder is replaced by a rename
            os.replace(temp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(temp, path)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    fsync(path.parent)
