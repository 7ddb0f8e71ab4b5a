"""Checkpoints: round trip, pruning, and crashes at every stage of a save.

The promise under test: whatever moment a save dies at, `latest` names a checkpoint that
loads whole and holds exactly what was saved. Equality is exact (the files store the bytes).
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import lib.checkpoint as ckpt
from lib import numpy_twin as nt
from lib.config import GPTConfig

CONFIG = GPTConfig(vocab_size=64, n_ctx=16, n_layer=1, n_head=2, n_embd=32)


def state_of(step):
    """A checkpoint whose every number says which step wrote it."""
    model = {n: np.full(p.shape, step, np.float32) for n, p in nt.GPT(CONFIG).named_parameters()}
    arrays = {"exp_avg.wte.weight": np.full((64, 32), step, np.float32), "rng.torch_cpu": np.arange(8, dtype=np.uint8)}
    return model, arrays, {"optimizer_steps": step, "sampler": {"step": step}}


def save(out, step, **kw):
    return ckpt.save_checkpoint(out, step, CONFIG, *state_of(step), **kw)


def assert_whole(out, step):
    config, model, arrays, meta = ckpt.load_checkpoint(out)
    expected_model, expected_arrays, expected_meta = state_of(step)
    assert config == CONFIG and meta == {"step": step, **expected_meta}
    for name, value in {**expected_model, **expected_arrays}.items():
        np.testing.assert_array_equal((model | arrays)[name], value)


def test_round_trip_and_the_folder_is_a_model_folder(tmp_path):
    folder = save(tmp_path, 5)
    assert folder.name == "step-000005" and ckpt.latest_checkpoint(tmp_path) == folder
    assert_whole(tmp_path, 5)
    assert_whole(folder, 5)                                  # a checkpoint folder loads directly too
    assert np.all(nt.GPT.load(folder).wte.weight == 5)       # and is what GPT.load reads


def test_keeps_the_newest_two_and_clear_removes_all(tmp_path):
    for step in (1, 2, 3, 10):
        save(tmp_path, step)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-000003", "step-000010"]
    assert_whole(tmp_path, 10)
    ckpt.clear_checkpoints(tmp_path)
    assert ckpt.latest_checkpoint(tmp_path) is None and not list(tmp_path.glob("step-*"))


def test_no_checkpoint_is_a_clear_error(tmp_path):
    assert ckpt.latest_checkpoint(tmp_path) is None
    with pytest.raises(FileNotFoundError, match="no checkpoint in .*: expected an output folder with a 'latest' file"):
        ckpt.load_checkpoint(tmp_path)


class Crash(BaseException):
    """Like a KeyboardInterrupt: nothing in the save path may swallow it."""


def test_a_crash_while_writing_files_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    save(tmp_path, 1)
    real_fsync = ckpt.fsync

    def die_after_some_files(path):                      # files are written; die while flushing them
        if str(path).endswith(ckpt.ARRAYS_FILE):
            raise Crash
        real_fsync(path)

    monkeypatch.setattr(ckpt, "fsync", die_after_some_files)
    with pytest.raises(Crash):
        save(tmp_path, 2)
    assert (tmp_path / ckpt.TMP_DIR / "step-000002" / ckpt.META_FILE).exists()  # half a save lies around
    assert_whole(tmp_path, 1)
    monkeypatch.setattr(ckpt, "fsync", real_fsync)
    save(tmp_path, 2)                                        # the next save clears the debris
    assert_whole(tmp_path, 2)
    assert not (tmp_path / ckpt.TMP_DIR).exists()


def test_a_crash_in_the_middle_of_the_weights_file(tmp_path, monkeypatch):
    save(tmp_path, 1)
    import safetensors.numpy

    def half_written(tensors, filename, *args, **kw):
        with open(filename, "wb") as f:
            f.write(b"\x00" * 100)                           # a truncated file, then the crash
        raise Crash

    monkeypatch.setattr(safetensors.numpy, "save_file", half_written)
    with pytest.raises(Crash):
        save(tmp_path, 2)
    assert_whole(tmp_path, 1)


def test_a_crash_between_rename_and_publish(tmp_path, monkeypatch):
    save(tmp_path, 1)
    real_replace = os.replace

    def die_on_pointer(src, dst):
        if str(dst).endswith(ckpt.POINTER):
            raise Crash
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", die_on_pointer)
    with pytest.raises(Crash):
        save(tmp_path, 2)
    assert (tmp_path / "step-000002").is_dir()              # complete, but never published
    assert_whole(tmp_path, 1)
    monkeypatch.setattr(ckpt.os, "replace", real_replace)
    save(tmp_path, 2)                                        # a rerun of step 2 replaces it cleanly
    assert_whole(tmp_path, 2)


KILLED_SAVER = textwrap.dedent("""
    import sys
    import tests.test_checkpoint as t
    step = 1
    while True:
        t.save(sys.argv[1], step)
        print(step, flush=True)
        step += 1
""")


def test_a_process_killed_at_random_moments_always_leaves_a_whole_checkpoint(tmp_path):
    """SIGKILL (no cleanup of any kind) while a process saves checkpoints back to back."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for delay in (0.7, 1.1, 1.6):
        out = tmp_path / f"run{delay}"
        proc = subprocess.Popen([sys.executable, "-c", KILLED_SAVER, str(out)], cwd=root, stdout=subprocess.PIPE,
                                text=True)
        first = proc.stdout.readline()                      # wait for one published checkpoint
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert first.strip() == "1"
        step = int(ckpt.latest_checkpoint(out).name[5:])
        assert_whole(out, step)
