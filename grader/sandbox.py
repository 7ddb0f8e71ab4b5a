"""The sandbox a student's code runs in: bubblewrap, a copy of lib without the answers, limits.

What the code in it can see (all read-only but /tmp):
- the system's /usr (with /bin, /lib, /lib64 as on the host) and the dynamic linker's cache;
- the Python installation and its site-packages, minus the `masked` packages (torch and
  transformers by default: an empty folder whose __init__ raises ImportError);
- /grade: runner.py, job.json (the tests and their inputs), student.py, pieces.json (a capstone's
  pieces) and lib/, a copy of lib
  in which every `blocked` name is replaced by a stub that raises (the answer's source is not
  in the copy);
- an empty /tmp of TMP_BYTES, its own /proc (read-only) and a minimal /dev.
Nothing else: not the repository, not solutions/, not the hidden tests, not $HOME, not the
grader's environment (bubblewrap itself starts with PATH alone, its arguments come through a
file descriptor, so /proc shows neither the grader's variables nor its folders).

Who it runs as: never the host's root. A grader started as root runs bubblewrap privileged (it
mounts what the sandbox sees, reaching the Python installation wherever it lives, /root
included) and `setpriv` turns the sandbox into the host user nobody (SANDBOX_UID), with no
capabilities, before Python starts; a grader started as another user runs bubblewrap in a user
namespace of its own, as that user. Namespaces: own pids, mounts, IPC and host name, no network.

What it may do: grader/seccomp.py's filter allows the system calls the runner needs and
refuses the rest: new processes and threads, memory that no process owns (memfd, SysV shared
memory; /dev/shm is read-only), sockets other than AF_UNIX, ptrace, mounts, namespaces,
keyrings, BPF, calls newer than its table. The sandbox is therefore one process, and its limits
(setrlimit) hold for the whole sandbox: address space (`memory_mb`), CPU seconds, NOFILE_LIMIT
open files (each can hold a pipe's or a socket's buffers), and a wall clock of twice the CPU
limit plus 10 s (for code that sleeps); /tmp holds at most TMP_BYTES. CPU time, unlike wall
time, does not grow when the machine is busy, so a limit can sit close to what correct code
needs. Going over the CPU limit (SIGXCPU, or SIGKILL a second later for code that ignores it)
is reported as the limit "cpu".

What comes back: the runner's answers through a pipe (at most MAX_ANSWER_BYTES; the grader
stops the sandbox past that) and the tail of what the code printed, through another. The
grader reads no file that the sandbox could have written.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import resource
import selectors
import shutil
import signal
import site
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import seccomp
from .runner import BLOCKED_MARK

LIB_DIR = Path(__file__).resolve().parents[1] / "lib"     # the real lib/
RUNNER = "/grade/runner.py"                                 # where the sandbox finds the runner
SANDBOX_UID = 65534                                         # nobody: the host user a root grader drops to
TMP_BYTES = 64 << 20                                        # the size of the sandbox's /tmp
MAX_ANSWER_BYTES = 32 << 20                                 # what the grader reads from the answers pipe
LOG_TAIL_BYTES = 4000                                       # what it keeps of the printed output
NOFILE_LIMIT = 64                                           # open files in the sandbox
USERNS_SETTINGS = (                     # (file under /proc/sys, the value that refuses, one that allows)
    ("kernel/unprivileged_userns_clone", "0", "1"),               # Debian's older kernels
    ("kernel/apparmor_restrict_unprivileged_userns", "1", "0"),   # Ubuntu 23.10 and later
    ("user/max_user_namespaces", "0", "15000"),
)


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot start a sandbox here; the message says what to do."""


class SandboxLate(SandboxUnavailable):
    """A sandbox that did not start within its wall-clock limit: a busy machine, worth one more try."""


@dataclass
class RunResult:
    returncode: int | None        # None when killed for a limit the grader enforces (wall, output)
    limit: str | None             # the limit that ended the run: "cpu", "wall", "output" or None
    seconds: float                # wall-clock time
    answers: bytes                # what came through the answers pipe
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


def lib_module(rel: Path) -> str:
    """The module a file of lib is, from its path inside lib: numpy_twin/model.py ->
    lib.numpy_twin.model; a package's __init__.py -> the package (the names block lists use)."""
    return ".".join(("lib", *rel.with_suffix("").parts)).removesuffix(".__init__")


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
        module = lib_module(rel)
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


def _as_root() -> bool:
    return os.geteuid() == 0


def _identity() -> tuple[list[str], list[str]]:
    """(bwrap options, command prefix) that make the sandbox an unprivileged user: as root,
    capabilities to change user, used by setpriv to become nobody and drop everything;
    otherwise a user namespace, in which the sandbox stays the user the grader runs as."""
    if _as_root():
        return (["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"],
                ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"])
    return ["--unshare-user", "--disable-userns"], []


def _ro_bind(path: Path, bound: list[Path]) -> list[str]:
    """Bind `path` read-only at the same place, after making those of its parents that no
    earlier bind provides (as 0755: bubblewrap would make them private to root, and nobody
    could not pass through)."""
    options = []
    for parent in reversed(path.parents[:-1]):
        if not any(b == parent or b in parent.parents for b in bound):
            options += ["--perms", "0755", "--dir", str(parent)]
    bound.append(path)
    return options + ["--ro-bind", str(path), str(path)]


def _system_options(forbidden: list[Path]) -> list[str]:
    """Namespaces, the system and the Python installation (read-only), an empty /tmp."""
    options = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
               "--die-with-parent", "--new-session", "--clearenv", *_identity()[0]]
    # /tmp first: a later mount hides what lies below it, and the Python installation may live
    # under /tmp (a virtual environment on a CI runner), so it is bound on top of the empty /tmp.
    options += ["--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev",
                "--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            options += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            options += ["--ro-bind", top, top]
    if os.path.exists("/etc/ld.so.cache"):
        options += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    bound = [Path("/usr")]
    for path in _python_paths(forbidden):
        options += _ro_bind(path, bound)
    return options


def bwrap_options(box: Path, masked: tuple[str, ...], forbidden: list[Path], answers_fd: int) -> list[str]:
    """What the sandbox sees (see the module's docstring), read-only but /tmp, and its environment."""
    options = _system_options(forbidden)
    for path in _masked_dirs(masked):
        options += ["--tmpfs", str(path), "--ro-bind", str(box / "masked_init.py"), str(path / "__init__.py"),
                    "--remount-ro", str(path)]
    options += ["--ro-bind", str(box), "/grade", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp"]
    env = {"HOME": "/tmp", "PATH": "/usr/bin:/bin", "GRADE_ANSWERS_FD": str(answers_fd), "MPLBACKEND": "Agg",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LANG": "C.UTF-8"}
    for key, value in env.items():
        options += ["--setenv", key, value]
    return options


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _popen(options: list[str], command: list[str], pass_fds=(), **kwargs) -> subprocess.Popen:
    """bwrap with `options` read from a file descriptor and the seccomp filter, running
    `command` as the unprivileged user; a bare environment for bwrap itself."""
    args = _memfd("bwrap-args", b"".join(o.encode() + b"\0" for o in options))
    rules = _memfd("bwrap-seccomp", seccomp.program())
    try:
        return subprocess.Popen(["bwrap", "--args", str(args), "--seccomp", str(rules), "--", *_identity()[1],
                                 *command], pass_fds=(args, rules, *pass_fds), env={"PATH": "/usr/bin:/bin"},
                                stdin=subprocess.DEVNULL, start_new_session=True, **kwargs)
    finally:
        os.close(args)
        os.close(rules)


def check_bwrap() -> None:
    """Raise SandboxUnavailable, saying how to fix it, unless a sandbox starts here, runs
    Python as a user other than root, and refuses a system call of the filter."""
    if seccomp.machine() not in seccomp.ARCHES:
        raise SandboxUnavailable(f"the sandbox's system-call filter knows {', '.join(seccomp.ARCHES)}, "
                                 f"not {seccomp.machine()}")
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable("grading needs bubblewrap: `apt-get install -y bubblewrap` (Debian/Ubuntu)")
    if _as_root() and shutil.which("setpriv") is None:
        raise SandboxUnavailable("grading as root needs setpriv to leave root: `apt-get install -y util-linux`")
    probe = ("import os, sys\n"
             "try:\n    pid = os.fork()\nexcept OSError:\n    sys.exit(3 if os.getuid() == 0 else 0)\n"
             "if pid == 0:\n    os._exit(0)\nsys.exit(4)\n")
    proc = _popen(_system_options([]), [sys.executable, "-s", "-c", probe],
                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.communicate()[0].decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        refusal = None if _as_root() else userns_refusal()
        if refusal:
            raise SandboxUnavailable(refusal)
        why = {3: "Python ran as root", 4: "the system-call filter did not hold"}.get(proc.returncode, out[-500:])
        raise SandboxUnavailable(
            f"bubblewrap cannot start the sandbox here ({' '.join(why.split())}). Bubblewrap must be able "
            f"to create its namespaces: as root, with the capabilities a container may withhold "
            f"(CAP_SYS_ADMIN); as another user, unprivileged user namespaces must be allowed")


def userns_refusal(proc_sys: Path = Path("/proc/sys")) -> str | None:
    """One line naming the kernel setting that refuses unprivileged user namespaces (which a
    grader that is not root needs), or None if none of USERNS_SETTINGS does."""
    for name, refusing, allowing in USERNS_SETTINGS:
        try:
            value = (proc_sys / name).read_text().strip()
        except OSError:
            continue                                          # this kernel has no such setting
        if value == refusing:
            setting = name.replace("/", ".")
            return (f"this machine refuses unprivileged user namespaces ({setting} = {value}), which the "
                    f"sandbox needs when the grader is not root: `sysctl -w {setting}={allowing}` as root, "
                    f"or grade as root")
    return None


def _limits(memory_bytes: int, cpu_seconds: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))  # SIGXCPU, then SIGKILL
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE_LIMIT, NOFILE_LIMIT))
    return apply


def _cpu_killed(returncode: int, seconds: float, cpu_seconds: int) -> bool:
    """Whether the sandbox ended by its CPU limit: SIGXCPU at the limit, or SIGKILL a CPU second
    later (code that ignores SIGXCPU), which cannot come before as many seconds of wall-clock
    time, the sandbox being one thread. bwrap reports a signalled child as 128 + the signal."""
    signalled = returncode - 128 if returncode > 128 else -returncode
    return signalled == signal.SIGXCPU or (signalled == signal.SIGKILL and seconds >= cpu_seconds + 1)


def wall_seconds(cpu_seconds: int) -> int:
    """The wall-clock limit that goes with a CPU limit: room for a busy machine, not for sleep."""
    return 2 * cpu_seconds + 10


def run(box: Path, *, masked, forbidden, cpu_seconds: int, memory_mb: int) -> RunResult:
    """Run the runner in the sandbox, limited to `cpu_seconds` of CPU time and wall_seconds()
    of wall-clock time, after which everything in it is killed; read its two pipes."""
    answers_r, answers_w = os.pipe()
    log_r, log_w = os.pipe()
    start = time.monotonic()
    deadline = start + wall_seconds(cpu_seconds)
    try:
        proc = _popen(bwrap_options(box, tuple(masked), forbidden, answers_w),
                      [sys.executable, "-s", "-B", RUNNER], pass_fds=(answers_w,), stdout=log_w,
                      stderr=log_w, preexec_fn=_limits(memory_mb << 20, cpu_seconds))
    finally:
        os.close(answers_w)
        os.close(log_w)
    try:
        answers, log, limit = _read_pipes(answers_r, log_r, deadline)
    finally:
        os.close(answers_r)
        os.close(log_r)
    if limit is None:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            limit = "wall"
    if limit is not None:
        os.killpg(proc.pid, signal.SIGKILL)                  # bwrap and, with it, its pid namespace
        proc.wait()
    elif _cpu_killed(proc.returncode, time.monotonic() - start, cpu_seconds):
        limit = "cpu"
    code = None if limit in ("wall", "output") else proc.returncode
    return RunResult(code, limit, time.monotonic() - start, bytes(answers),
                     log.decode("utf-8", "replace"))


def _read_pipes(answers_r: int, log_r: int, deadline: float) -> tuple[bytearray, bytearray, str | None]:
    """Read both pipes until they close: all of the answers (up to MAX_ANSWER_BYTES), the last
    LOG_TAIL_BYTES of the log. Returns them and "wall" or "output" if a limit stopped the reading."""
    answers, log = bytearray(), bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(answers_r, selectors.EVENT_READ)
        selector.register(log_r, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return answers, log, "wall"
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fd)
                elif key.fd == answers_r:
                    answers += chunk
                    if len(answers) > MAX_ANSWER_BYTES:
                        return answers[:MAX_ANSWER_BYTES], log, "output"
                else:
                    log = (log + chunk)[-LOG_TAIL_BYTES:]
    return answers, log, None


def make_box(root: Path, code: str, job: dict, blocked, shared=()) -> Path:
    """root/box, holding what /grade will show: runner and drivers, job, code, lib, and a hard
    link to each file of `shared` (written once for several boxes, beside `root`). Readable by
    everyone (the sandbox's user is not the grader's), inside `root`'s parent, which stays the
    grader's alone."""
    box = root / "box"
    box.mkdir(parents=True)
    for name in ("runner.py", "drivers.py"):
        shutil.copy(Path(__file__).with_name(name), box / name)
    (box / "job.json").write_text(json.dumps(job, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    for path in shared:
        os.link(path, box / path.name)
    (box / "student.py").write_text(code, encoding="utf-8")
    (box / "masked_init.py").write_text(
        "raise ImportError('this package is unavailable while grading: graded cells use numpy, math and lib')\n")
    copy_lib(box, tuple(blocked))
    for folder, dirs, files in os.walk(box):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    return box
