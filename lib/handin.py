"""The functions a student wrote in an earlier exercise, loaded from their own notebook, for an exercise that builds on them.

    parts = gather({"ch3_attention": ["causal_self_attention"], "ch4_gelu": ["gelu_tanh"]})
    parts.causal_self_attention(x, ...)            # the student's own, from exercises/ch3_attention.ipynb

An exercise's graded code is its notebook's code cells tagged `graded:<exercise>` (the cells the
grader runs). `graded_functions` finds the notebook (`exercises/<exercise>.ipynb` in the course
folder, or the path given), runs those cells in a fresh module and returns it, or only the names
asked for; `gather` does that for several exercises and puts the functions in one namespace.
Nothing is retyped: fixing 3.1's notebook fixes every exercise that loads it. Each failure is one
line naming the notebook, the tag or the function: a missing notebook, no tagged cell, a name the
cells do not define.
"""
from __future__ import annotations

import json
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class HandinError(LookupError):
    """An earlier exercise's functions could not be loaded; the message says which and why."""


def _tagged_source(path: Path, exercise: str) -> str:
    """The source of the notebook's code cells tagged graded:<exercise>, in order."""
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HandinError(f"no notebook {path} for exercise {exercise}: do that exercise first, "
                          f"or pass path= to where your copy is") from None
    except (OSError, ValueError) as exc:
        raise HandinError(f"{path} cannot be read as a notebook ({type(exc).__name__})") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    tag = f"graded:{exercise}"
    sources = [c.get("source", "") for c in cells or []
               if isinstance(c, dict) and c.get("cell_type") == "code"
               and tag in (c.get("metadata") or {}).get("tags", [])]
    if not sources:
        raise HandinError(f"{path} has no code cell tagged {tag}: keep the exercise's graded cell and its tag")
    return "\n\n".join("".join(s) if isinstance(s, list) else s for s in sources)


def graded_functions(exercise: str, names=None, path=None):
    """The graded cells of `exercise` run in a fresh module: the module, or with `names` a
    SimpleNamespace holding just those functions. path: the notebook (default
    exercises/<exercise>.ipynb in the course folder)."""
    path = Path(path) if path is not None else ROOT / "exercises" / f"{exercise}.ipynb"
    source = _tagged_source(path, exercise)
    module = types.ModuleType(f"handin_{exercise}", f"the graded cells of {path}")
    try:
        exec(compile(source, f"{path} [graded:{exercise}]", "exec"), module.__dict__)
    except Exception as exc:
        raise HandinError(f"the graded cells of {path} raised {type(exc).__name__}: {exc}") from exc
    if names is None:
        return module
    missing = [n for n in names if not callable(getattr(module, n, None))]
    if missing:
        raise HandinError(f"the graded cells of {path} define no function {', '.join(missing)}")
    return types.SimpleNamespace(**{n: getattr(module, n) for n in names})


def gather(wanted: dict, folder=None) -> types.SimpleNamespace:
    """{exercise: [function names]} -> one namespace holding every named function, each from its
    exercise's notebook in `folder` (default the course's exercises/)."""
    folder = Path(folder) if folder is not None else ROOT / "exercises"
    parts = {}
    for exercise, names in wanted.items():
        parts.update(vars(graded_functions(exercise, names, folder / f"{exercise}.ipynb")))
    return types.SimpleNamespace(**parts)
