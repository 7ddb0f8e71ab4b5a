"""lib/handin.py: a student's earlier functions come from their own notebook's graded cells, and
a missing notebook, tag or function is one line naming it."""
import json

import pytest

from lib.handin import ROOT, HandinError, gather, graded_functions


def notebook(path, cells):
    """Write a notebook of code cells: [(source, tags), ...]."""
    path.write_text(json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"cell_type": "code", "metadata": {"tags": tags}, "source": source.splitlines(True),
                   "outputs": [], "execution_count": None} for source, tags in cells]}))
    return path


def test_only_the_graded_cells_run_in_a_fresh_module(tmp_path):
    path = notebook(tmp_path / "ch9_x.ipynb", [
        ("import math\n\ndef twice(x):\n    return 2 * x\n", ["graded:ch9_x"]),
        ("raise RuntimeError('not graded: never runs')\n", []),
        ("def half(x):\n    return x / 2\n", ["graded:ch9_x"]),
        ("def other(x):\n    return x\n", ["graded:ch9_y"])])
    module = graded_functions("ch9_x", path=path)
    assert module.twice(3) == 6 and module.half(3) == 1.5 and module.math.pi > 3
    assert not hasattr(module, "other")
    assert graded_functions("ch9_x", path=path).twice is not module.twice     # run afresh each time
    picked = graded_functions("ch9_x", ["half"], path=path)
    assert vars(picked) == {"half": picked.half}


def test_gather_puts_several_exercises_in_one_namespace(tmp_path):
    notebook(tmp_path / "ch9_x.ipynb", [("def f():\n    return 'x'\n", ["graded:ch9_x"])])
    notebook(tmp_path / "ch9_y.ipynb", [("def g():\n    return 'y'\n\ndef h():\n    return 'h'\n", ["graded:ch9_y"])])
    parts = gather({"ch9_x": ["f"], "ch9_y": ["g"]}, folder=tmp_path)
    assert (parts.f(), parts.g()) == ("x", "y") and not hasattr(parts, "h")


def test_the_course_exercises_folder_is_the_default():
    """The course's own exercise notebooks (in the student release too): their stubs load, and
    raise when called."""
    stubs = graded_functions("ch3_attention", ["causal_self_attention"])
    with pytest.raises(NotImplementedError, match="exercise 3.1"):
        stubs.causal_self_attention(None, None, None, None, None, 1)
    assert gather({"ch4_gelu": ["gelu_tanh"]}).gelu_tanh.__code__.co_filename == \
        f"{ROOT / 'exercises' / 'ch4_gelu.ipynb'} [graded:ch4_gelu]"


@pytest.mark.parametrize("case,message", [
    ("missing", r"no notebook .*ch9_x\.ipynb for exercise ch9_x"),
    ("not_json", r"cannot be read as a notebook \(JSONDecodeError\)"),
    ("no_tag", r"has no code cell tagged graded:ch9_x"),
    ("no_function", r"define no function missing"),
    ("raises", r"graded cells of .* raised ZeroDivisionError: division by zero"),
])
def test_each_failure_is_one_line_naming_its_cause(tmp_path, case, message):
    path = tmp_path / "ch9_x.ipynb"
    if case == "not_json":
        path.write_text("{not json")
    elif case == "no_tag":
        notebook(path, [("def f():\n    pass\n", ["graded:ch9_other"])])
    elif case == "no_function":
        notebook(path, [("def f():\n    pass\n\nmissing = 3\n", ["graded:ch9_x"])])
    elif case == "raises":
        notebook(path, [("1 / 0\n", ["graded:ch9_x"])])
    with pytest.raises(HandinError, match=message) as error:
        graded_functions("ch9_x", ["f", "missing"] if case == "no_function" else None, path=path)
    assert "\n" not in str(error.value)
