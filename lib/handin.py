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


def run_cells(source: str, exercise: str, origin: str, names=None):
    """Graded cells' `source` run in a fresh module: the module, or with `names` a
    SimpleNamespace holding just those functions. origin: where the cells come from, for the
    messages (a notebook's path)."""
    module = types.ModuleType(f"handin_{exercise}", f"the graded cells of {origin}")
    try:
        exec(compile(source, f"{origin} [graded:{exercise}]", "exec"), module.__dict__)
    except Exception as exc:
        raise HandinError(f"the graded cells of {origin} raised {type(exc).__name__}: {exc}") from exc
    if names is None:
        return module
    missing = [n for n in names if not callable(getattr(module, n, None))]
    if missing:
        raise HandinError(f"the graded cells of {origin} define no function {', '.join(missing)}")
    return types.SimpleNamespace(**{n: getattr(module, n) for n in names})


def graded_functions(exercise: str, names=None, path=None):
    """The graded cells of `exercise` run in a fresh module: the module, or with `names` a
    SimpleNamespace holding just those functions. path: the notebook (default
    exercises/<exercise>.ipynb in the course folder)."""
    path = Path(path) if path is not None else ROOT / "exercises" / f"{exercise}.ipynb"
    return run_cells(_tagged_source(path, exercise), exercise, str(path), names)


def parts_from_sources(sources: dict, wanted: dict, origins=None) -> types.SimpleNamespace:
    """{exercise: graded cells' source}, {exercise: [function names]} -> one namespace holding
    every named function, each exercise's cells run in a module of their own (so that two
    exercises' helpers of the same name never meet). The grader builds a capstone's `parts`
    with it inside the sandbox. origins: {exercise: where its cells come from}, for messages."""
    parts = {}
    for exercise, names in wanted.items():
        if exercise not in sources:
            raise HandinError(f"no graded cells of exercise {exercise}: hand in its notebook too")
        origin = (origins or {}).get(exercise, f"exercise {exercise}")
        parts.update(vars(run_cells(sources[exercise], exercise, origin, names)))
    return types.SimpleNamespace(**parts)


def gather(wanted: dict, folder=None) -> types.SimpleNamespace:
    """{exercise: [function names]} -> one namespace holding every named function, each from its
    exercise's notebook in `folder` (default the course's exercises/)."""
    folder = Path(folder) if folder is not None else ROOT / "exercises"
    paths = {exercise: folder / f"{exercise}.ipynb" for exercise in wanted}
    sources = {exercise: _tagged_source(path, exercise) for exercise, path in paths.items()}
    return parts_from_sources(sources, wanted, {e: str(p) for e, p in paths.items()})
