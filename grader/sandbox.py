"""The sandbox a student's code runs in: bubblewrap, a copy of lib without the answers, limits.

What the student's code can see (all read-only except /out and /tmp):
- the system's /usr (with /bin, /lib, /lib64 as on the host) and the dynamic linker's cache;
- the Python installation and its site-packages, minus the `masked` packages (torch and
  transformers by default: an empty folder whose __init__ raises ImportError);
- /grade: runner.py, job.json, inputs.npz, student.py and lib/, a copy of lib in which every
  `blocked` name is replaced by a stub that raises (the answer's source is not in the copy);
- /out (the answers, written by runner.py), an empty /tmp, /proc and a minimal /dev.
Nothing else: not the repository, not solutions/, not the hidden tests, not $HOME. Namespaces:
all unshared (no network, own pids), so killing bwrap on a timeout ends every process inside.
Limits (setrlimit, inherited): address space, CPU seconds, file size; plus a wall-clock timeout
(for code that sleeps) of twice the CPU limit plus 10 s. CPU time, unlike wall time, does not
grow when the machine is busy, so a limit can sit close to what correct code needs.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import resource
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .runner import BLOCKED_MARK

LIB_DIR = Path(__file__).resolve().parents[1] / "lib"     # the real lib/
SANDBOX_UID = 65534                                         # nobody, inside the user namespace
MAX_OUTPUT_BYTES = 64 << 20                                 # RLIMIT_FSIZE: any one file written


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here; the message says what to do."""


@dataclass
class RunResult:
    returncode: int | None        # None when killed for the wall-clock limit
    timed_out: bool               # wall-clock limit or CPU limit reached
    seconds: float
    log_tail: str                 # the last lines of what the code printed


# ---- a copy of lib without the answers ---------------------------------------------------------
def _stub_function(name: str, where: str) -> ast.FunctionDef:
    message = f"{BLOCKED_MARK}: {where} answers this exercise, so it is unavailable while grading"
    return ast.parse(f"def {name}(*args, **kwargs):\n    raise RuntimeError({message!r})\n").body[0]


def _stub_class(name: str, where: str) -> ast.ClassDef:
    message = f"{BLOCKED_MARK}: {where} answers this exercise, so it is unavailable while grading"
    return ast.parse(f"class {name}:\n    def __init__(self, *args, **kwargs):\n"
                     f"        raise RuntimeError({message!r})\n").body[0]


def _blocked_source(source: str, module: str, names: list[str]) -> str:
    """The module's source with each named def/class (or Class.method; '*' = every top-level
    def and class) replaced by a stub that raises. Unknown names raise: the hidden tests must
    not believe something is blocked that no longer exists under that name."""
    tree = ast.parse(source)
    wanted = set(names)
    found = set()
    for i, node in enumerate(tree.body):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        where = f"{module}.{node.name}"
        if "*" in wanted or node.name in wanted:
            found.add(node.name)
            tree.body[i] = (_stub_class if isinstance(node, ast.ClassDef) else _stub_function)(node.name, where)
            continue
        if isinstance(node, ast.ClassDef):
            for j, item in enumerate(node.body):
                qual = f"{node.name}.{getattr(item, 'name', '')}"
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and qual in wanted:
                    found.add(qual)
                    node.body[j] = _stub_function(item.name, f"{module}.{qual}")
    missing = wanted - found - {"*"}
    if missing:
        raise ValueError(f"hidden tests block {sorted(missing)} in {module}, which defines no such names")
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def copy_lib(dest: Path, blocked: tuple[str, ...]) -> None:
    """Copy lib (all of it but __pycache__) to dest/lib, with the `blocked` names ("module:name")
    stubbed in the copies of their modules."""
    by_module: dict[str, list[str]] = {}
    for entry in blocked:
        module, _, name = entry.partition(":")
        by_module.setdefault(module, []).append(name)
    for src in sorted(LIB_DIR.rglob("*")):
        rel = src.relative_to(LIB_DIR)
        if src.is_dir() or "__pycache__" in rel.parts:
            continue
        module = ".".join(("lib", *rel.with_suffix("").parts)).removesuffix(".__init__")
        target = dest / "lib" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix == ".py" and module in by_module:
            source = _blocked_source(src.read_text(encoding="utf-8"), module, by_module.pop(module))
            target.write_text(source, encoding="utf-8")
        else:
            shutil.copyfile(src, target)
    if by_module:
        raise ValueError(f"hidden tests block names in modules lib does not have: {sorted(by_module)}")


# ---- bubblewrap -------------------------------------------------------------------------------------
def _python_paths(forbidden: list[Path]) -> list[Path]:
    """Folders the interpreter needs: its prefixes and its site-packages, those that .pth files
    put on sys.path included (never any other sys.path entry: the current folder is one), and
    never one that is or contains a forbidden folder (such as the repository)."""
    site_dirs = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    candidates = [sys.base_prefix, sys.prefix, *site.getsitepackages(), *site_dirs]
    if site.ENABLE_USER_SITE and site.getusersitepackages():
        candidates.append(site.getusersitepackages())
    paths = []
    for c in map(lambda p: Path(p).resolve(), candidates):
        if c.is_dir() and c not in paths and not any(f == c or c in f.parents for f in forbidden):
            paths.append(c)
    return paths


def _masked_dirs(packages) -> list[Path]:
    dirs = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(Path(p).resolve() for p in spec.submodule_search_locations)
    return dirs


def bwrap_command(box: Path, out: Path, masked: tuple[str, ...], forbidden: list[Path]) -> list[str]:
    cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
           "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    # /tmp first: a later mount hides what lies below it, and the Python installation may live
    # under /tmp (a virtual environment on a CI runner), so it is bound on top of the empty /tmp.
    cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    cmd += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            cmd += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            cmd += ["--ro-bind", top, top]
    if os.path.exists("/etc/ld.so.cache"):
        cmd += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for path in _python_paths(forbidden):
        cmd += ["--ro-bind", str(path), str(path)]
    blocker = box / "masked_init.py"
    for path in _masked_dirs(masked):
        cmd += ["--tmpfs", str(path), "--ro-bind", str(blocker), str(path / "__init__.py"),
                "--remount-ro", str(path)]
    cmd += ["--ro-bind", str(box), "/grade", "--bind", str(out), "/out", "--chdir", "/tmp"]
    env = {"HOME": "/tmp", "PATH": "/usr/bin:/bin", "GRADE_OUT": "/out", "MPLBACKEND": "Agg",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LANG": "C.UTF-8"}
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return cmd + ["--", sys.executable, "-s", "-B", "/grade/runner.py"]


def check_bwrap() -> None:
    """Raise SandboxUnavailable, saying how to fix it, unless bubblewrap works here."""
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable("grading needs bubblewrap: `apt-get install -y bubblewrap` (Debian/Ubuntu)")
    probe = subprocess.run(["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                            "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise SandboxUnavailable(
            f"bubblewrap cannot create its namespaces here ({probe.stderr.strip()}). Unprivileged user "
            f"namespaces must be allowed; on Ubuntu 24.04: `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`")


def _limits(memory_bytes: int, cpu_seconds: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))  # SIGXCPU, then SIGKILL
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_OUTPUT_BYTES, MAX_OUTPUT_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


CPU_KILLED = (128 + signal.SIGXCPU, -signal.SIGXCPU)     # bwrap reports a signalled child as 128 + sig


def run(box: Path, out: Path, *, masked, forbidden, cpu_seconds: int, memory_mb: int) -> RunResult:
    """Run /grade/runner.py in the sandbox, limited to `cpu_seconds` of CPU time (and twice
    that plus 10 s of wall-clock time, after which everything in it is killed)."""
    log_path = box.parent / "log.txt"
    cmd = bwrap_command(box, out, tuple(masked), forbidden)
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_limits(memory_mb << 20, cpu_seconds))
        try:
            code = proc.wait(timeout=2 * cpu_seconds + 10)
            timed_out = code in CPU_KILLED
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)              # bwrap and, with it, its pid namespace
            proc.wait()
            code, timed_out = None, True
    seconds = time.perf_counter() - start
    with open(log_path, "rb") as log:
        log.seek(max(0, log_path.stat().st_size - 2000))
        tail = log.read().decode("utf-8", "replace")
    return RunResult(code, timed_out, seconds, tail)


def make_box(code: str, job: dict, arrays: dict, blocked) -> Path:
    """A fresh temporary folder holding what /grade will show: runner, job, inputs, code, lib."""
    import json

    import numpy as np

    root = Path(tempfile.mkdtemp(prefix="grade-"))
    box = root / "box"
    (root / "out").mkdir()
    box.mkdir()
    shutil.copy(Path(__file__).with_name("runner.py"), box / "runner.py")
    (box / "job.json").write_text(json.dumps(job))
    np.savez(box / "inputs.npz", **arrays)
    (box / "student.py").write_text(code, encoding="utf-8")
    (box / "masked_init.py").write_text(
        "raise ImportError('this package is unavailable while grading: graded cells use numpy, math and lib')\n")
    copy_lib(box, tuple(blocked))
    return box
