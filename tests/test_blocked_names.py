"""What the hidden tests block in lib: every blocked name exists, and no answer stays reachable.

The sandbox grades an exercise against a copy of lib in which the hidden tests' `blocked` names
are stubs. When lib's code moves (a function to a new module), a block list can go stale in two
ways: it names something that is gone (grading then stops, so the test below names it first), or
a module-wide block (`lib.train:*`) keeps its name while the answer now lives in a module it does
not cover. The second passes every other test, so it is checked here: each name a student must
write, wherever lib defines it, is blocked or sits in a module that cannot load in the sandbox;
and no unblocked definition is a copy of a blocked one under another name.
"""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from grader.grading import DEFAULT_TESTS, load_hidden_tests
from grader.sandbox import copy_lib, lib_module

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = {name: module.EXERCISE for name, module in load_hidden_tests(DEFAULT_TESTS).items()}


def lib_definitions():
    """[(module, qualified name, node)]: every top-level def and class of lib, and every method."""
    found = []
    for path in sorted((ROOT / "lib").rglob("*.py")):
        module = lib_module(path.relative_to(ROOT / "lib"))       # as the sandbox names it
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.append((module, node.name, node))
            if isinstance(node, ast.ClassDef):
                found += [(module, f"{node.name}.{item.name}", item) for item in node.body
                          if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return found


DEFINITIONS = lib_definitions()


def is_blocked(module, name, blocked):
    """Whether `blocked` stubs module's `name` ("f", "Class" or "Class.method")."""
    top = name.split(".")[0]
    return any(entry in blocked for entry in (f"{module}:*", f"{module}:{name}", f"{module}:{top}"))


def body_of(node) -> str:
    """The definition's code without its name and docstring: equal for a copy under another name."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    return "\n".join(ast.dump(statement) for statement in body)


def loads_in_sandbox(modules, masked) -> dict:
    """{module: whether it imports} with the masked packages unimportable, as in the sandbox."""
    script = (f"import sys\nfor name in {list(masked)!r}:\n    sys.modules[name] = None\n"
              f"import importlib\nfor module in {sorted(modules)!r}:\n"
              "    try:\n        importlib.import_module(module)\n        print(module, 1)\n"
              "    except ImportError:\n        print(module, 0)\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return {line.split()[0]: line.split()[1] == "1" for line in run.stdout.splitlines()}


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_blocked_name_exists(name, tmp_path):
    # copy_lib is what the sandbox runs: a name or module that lib lacks raises, naming it
    copy_lib(tmp_path, EXERCISES[name].blocked)
    assert (tmp_path / "lib" / "__init__.py").exists()


def reachable_answers(functions, blocked, masked) -> list[str]:
    """lib definitions a student could call instead of writing `functions`: those of the same
    name, and copies of a blocked definition under another name, that are not blocked and whose
    modules load with the masked packages gone."""
    blocked = set(blocked)
    same_name = [(module, qual) for module, qual, _ in DEFINITIONS
                 if qual in functions and not is_blocked(module, qual, blocked)]
    blocked_bodies = {body_of(node) for module, qual, node in DEFINITIONS if is_blocked(module, qual, blocked)}
    copies = [(module, qual) for module, qual, node in DEFINITIONS
              if not is_blocked(module, qual, blocked) and len(node.body) > 1 and body_of(node) in blocked_bodies]
    suspects = same_name + copies
    loads = loads_in_sandbox({module for module, _ in suspects}, masked) if suspects else {}
    return [f"{module}:{qual}" for module, qual in suspects if loads[module]]


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_no_answer_is_reachable_through_an_unblocked_name(name):
    exercise = EXERCISES[name]
    reachable = reachable_answers(exercise.functions, exercise.blocked, exercise.masked)
    assert not reachable, (f"{name}: {reachable} answer(s) the exercise but the hidden tests do not block "
                           f"them (and their modules load in the sandbox)")


def test_the_check_finds_an_answer_left_outside_the_block_list():
    # exercise 5.2 writes lr_at: with its block on lr_at dropped, lib's lr_at is reachable
    exercise = EXERCISES["ch5_optimizer"]
    homes = [f"{module}:{qual}" for module, qual, _ in DEFINITIONS if qual == "lr_at"]
    assert "lr_at" in exercise.functions and homes
    kept = [entry for entry in exercise.blocked if not entry.endswith(":lr_at")]
    assert reachable_answers(exercise.functions, kept, exercise.masked) == homes


def test_the_check_finds_a_copy_under_another_name():
    # a blocked definition's code under a new name is reachable, however the names differ
    module, qual, node = next(d for d in DEFINITIONS if d[:2] == ("lib.numpy_twin.train", "cross_entropy"))
    assert len(node.body) > 1
    copy = ast.FunctionDef(name="renamed", args=node.args, body=node.body, decorator_list=[], returns=None,
                           type_comment=None)
    assert body_of(copy) == body_of(node)
    assert body_of(copy) != body_of(next(d for d in DEFINITIONS if d[1] == "lr_at")[2])
