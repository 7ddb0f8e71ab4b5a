"""lib's structure: the twins sit on shared, framework-free modules and never import back.

The import graph is read from the source with `ast`: every `import` and `from ... import`,
at module level or inside a function, an import of `a.b.c` also running `a` and `a.b`, and a
call `twin_module(twin, name)` (lib/twins.py) counted as importing `name` of both twins.
"""
import ast
import subprocess
import sys
from pathlib import Path

LIB = Path(__file__).resolve().parent.parent / "lib"
TWINS = ("lib.numpy_twin", "lib.torch_twin")


def module_name(path):
    parts = path.relative_to(LIB.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node, module, is_package, modules):
    """The lib modules that one import statement or twin_module call in `module` loads."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = ".".join(p for p in (package if node.level else "", node.module or "") if p)
        return [base] + [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
    func = node.func
    if getattr(func, "id", getattr(func, "attr", None)) == "twin_module":
        submodule = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
        return [twin + (f".{submodule}" if submodule else "") for twin in TWINS]
    return []


def import_graph():
    """{module: set of lib modules it imports (and their parent packages)}."""
    files = {module_name(path): path for path in LIB.rglob("*.py")}
    graph = {}
    for module, path in files.items():
        parts = module.split(".")
        targets = {".".join(parts[:k]) for k in range(1, len(parts))}   # its parent packages
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.Call)):
                for name in imported(node, module, path.name == "__init__.py", files):
                    parts = name.split(".")
                    targets.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))
        graph[module] = {t for t in targets if t in files and t != module}
    return graph


def path_between(graph, start, goal):
    """A shortest import path [start, ..., goal], or None."""
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        if path[-1] == goal:
            return path
        for nxt in sorted(graph[path[-1]] - seen):
            seen.add(nxt)
            paths.append(path + [nxt])
    return None


def is_twin(module):
    return module.startswith(TWINS)


def test_the_graph_sees_imports_inside_functions_and_through_lib_twins():
    graph = import_graph()
    assert "lib.numpy_twin.generate" in graph["lib.numpy_twin.model"]      # inside GPT.generate
    assert {"lib.numpy_twin.finetune", "lib.torch_twin.finetune"} <= graph["lib.finetune"]  # twin_module
    assert "lib.config" in graph["lib.numpy_twin.train"]


def test_no_import_cycle_between_a_shared_module_and_a_twin():
    graph = import_graph()
    cycles = []
    for twin in filter(is_twin, graph):
        for shared in (m for m in graph if not is_twin(m)):
            there = path_between(graph, twin, shared)
            back = there and path_between(graph, shared, twin)
            if back:
                cycles.append(" -> ".join(there + back[1:]))
    assert not cycles, "shared modules import twins that import them back:\n" + "\n".join(cycles[:10])


def test_the_modern_pieces_build_on_the_model_never_the_reverse():
    """modern.py imports model.py and registers its layers in model.py's tables; model.py, which
    reads as GPT-2, reaches modern.py by no import chain (the twin's package, which imports both,
    left aside)."""
    graph = import_graph()
    for twin in TWINS:
        model, modern = f"{twin}.model", f"{twin}.modern"
        assert model in graph[modern]
        below = {m: deps - {"lib", twin} for m, deps in graph.items()}
        assert path_between(below, model, modern) is None, " -> ".join(path_between(below, model, modern))


def test_the_numpy_twin_imports_and_runs_without_torch():
    code = """
import sys
sys.modules["torch"] = None                      # any `import torch` now raises ImportError
try:
    import torch
except ImportError:
    pass
else:
    raise SystemExit("torch could still be imported")
import numpy as np
import lib.numpy_twin
from lib import GPTConfig
logits = lib.numpy_twin.GPT(GPTConfig.small()).forward(np.array([[1, 2, 3]]))
assert logits.shape == (1, 3, 256), logits.shape
loaded = sorted(m for m in ("lib.train", "lib.data", "lib.finetune", "lib.pretrained") if m in sys.modules)
assert not loaded, f"importing lib.numpy_twin loaded {loaded}"
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=LIB.parent)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
