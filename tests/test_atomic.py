"""lib.atomic: a file is replaced whole or not at all, with the permission bits asked for."""
import os
import stat

import numpy as np
import pytest

from lib.atomic import atomic_folder, atomic_path, write_atomic


class Crash(BaseException):
    """Like a KeyboardInterrupt: the helper must clean up after it too."""


def test_write_replaces_the_file_and_leaves_nothing_else(tmp_path):
    path = tmp_path / "sub" / "a.json"
    write_atomic(path, b"old")
    assert write_atomic(path, "new \u00e9") == path
    assert path.read_bytes() == "new \u00e9".encode("utf-8")
    assert os.listdir(path.parent) == ["a.json"]


def test_a_writer_that_needs_a_path(tmp_path):
    path = tmp_path / "tokens.npy"
    with atomic_path(path) as temp:
        np.save(temp, np.arange(5, dtype=np.uint16))         # the temporary name ends in .npy, so np.save keeps it
        assert not path.exists()                             # nothing published before the block ends
    np.testing.assert_array_equal(np.load(path), np.arange(5))


def test_a_crash_keeps_the_old_file_and_removes_the_temporary_one(tmp_path):
    path = tmp_path / "a.txt"
    write_atomic(path, "old")
    with pytest.raises(Crash):
        with atomic_path(path) as temp:
            temp.write_text("half")
            raise Crash
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["a.txt"]


def test_mode_sets_the_permission_bits(tmp_path):
    write_atomic(tmp_path / "private", "x", mode=0o600)
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o600
    umask = os.umask(0o022)
    os.umask(umask)
    write_atomic(tmp_path / "plain", "x")
    assert stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o666 & ~umask


def test_a_folder_is_swapped_in_whole_and_a_crash_keeps_the_old_one(tmp_path):
    path = tmp_path / "model"
    for text in ("old", "new"):
        with atomic_folder(path) as temp:
            (temp / "a.txt").write_text(text)
            (temp / "sub").mkdir()
            (temp / "sub" / "b.txt").write_text(text)
    assert (path / "a.txt").read_text() == (path / "sub" / "b.txt").read_text() == "new"
    with pytest.raises(Crash):
        with atomic_folder(path) as temp:
            (temp / "a.txt").write_text("half")
            raise Crash
    assert (path / "a.txt").read_text() == "new" and os.listdir(tmp_path) == ["model"]
