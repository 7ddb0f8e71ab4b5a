"""The sandbox's limits beyond address space and time: its system-call allowlist (and the
address families of its sockets), memory that belongs to no process, open files, the CPU
limit's kill, and grading as an ordinary user, which is how most instructors run the grader."""
import errno
import json
import os
import re
import shutil
import site
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from grader import sandbox, seccomp
from grader.runner import decode

ROOT = Path(__file__).resolve().parents[1]
UNPRIVILEGED_UID = sandbox.SANDBOX_UID            # nobody: the user a root test suite grades as
NEWER_CALLS = {"quotactl_fd": 443, "cachestat": 451, "statmount": 457, "listmount": 458,
               "open_tree_attr": 467, "unknown": 1000}   # the same numbers on x86_64 and aarch64 (syscall_64.tbl)


@pytest.fixture(scope="module", autouse=True)
def bwrap():
    sandbox.check_bwrap()                                  # raises, saying what to install


# ---- the filter, instruction by instruction, for every architecture ------------------------------------
def run_filter(program: bytes, arch: int, nr: int, arg0: int = 0) -> int:
    """What the classic BPF program returns for one call (struct seccomp_data: nr, arch, ip, args)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    code = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == seccomp.LD_W_ABS:
            acc = struct.unpack_from("=I", data, k)[0]
        elif op == seccomp.RET_K:
            return k
        elif op == seccomp.JA:
            pc += k
        elif op in (seccomp.JEQ_K, seccomp.JGE_K):
            pc += jt if (acc == k if op == seccomp.JEQ_K else acc >= k) else jf
        else:
            raise AssertionError(f"instruction {op:#x} at {pc} is not one the filter uses")
        pc += 1


@pytest.mark.parametrize("arch", list(seccomp.ARCHES))
def test_the_filter_allows_the_list_and_refuses_everything_else(arch):
    program, audit = seccomp.program(), seccomp.ARCHES[arch]
    allowed = seccomp.allowed(arch)
    for name, nr in allowed.items():
        assert run_filter(program, audit, nr, arg0=1) == seccomp.RET_ALLOW, name      # arg0 1: AF_UNIX
    for name, (nr, err) in seccomp.numbers(arch).items():
        assert run_filter(program, audit, nr) == seccomp.RET_ERRNO | err, name
    unlisted = set(range(600)) - set(allowed.values()) - {nr for nr, _ in seccomp.numbers(arch).values()}
    for nr in sorted(unlisted | set(NEWER_CALLS.values())):
        assert run_filter(program, audit, nr) == seccomp.RET_ERRNO | errno.ENOSYS, nr
    for family in (2, 10, 16, 17, 40):                    # AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK
        for name in seccomp.FAMILY_CHECKED:
            assert run_filter(program, audit, allowed[name], family) == seccomp.RET_ERRNO | errno.EAFNOSUPPORT
    assert run_filter(program, 0x40000003, 0) == seccomp.RET_KILL_PROCESS             # i386's calls
    if arch == "x86_64":
        assert run_filter(program, audit, seccomp.X32_BIT | 0) == seccomp.RET_ERRNO | errno.EPERM


def kernel_numbers(header: Path) -> dict[str, int]:
    """__NR_name numbers of a unistd header, with asm-generic's __NR3264_ aliases (64-bit ones)."""
    text = header.read_text()
    known = {name: int(nr) for name, nr in re.findall(r"#define __NR_(\w+)\s+(\d+)\b", text)}
    both = {name: int(nr) for name, nr in re.findall(r"#define __NR3264_(\w+)\s+(\d+)\b", text)}
    for alias, name in re.findall(r"#define __NR_(\w+)\s+__NR3264_(\w+)\b", text):
        if name in both:
            known.setdefault(alias, both[name])          # the 64-bit branch comes first
    return known


def test_every_number_of_the_filter_matches_the_kernel_headers():
    headers = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
               "aarch64": Path("/usr/include/asm-generic/unistd.h")}
    checked = 0
    for arch, header in headers.items():
        if not header.exists():
            continue
        known = kernel_numbers(header)
        table = {**seccomp.allowed(arch), **{name: nr for name, (nr, _) in seccomp.numbers(arch).items()}}
        for name, nr in table.items():
            assert known.get(name) == nr, (arch, name, nr, known.get(name))
            checked += 1
        legacy = {name for name, nrs in {**seccomp.ALLOWED, **seccomp.REFUSED}.items() if nrs[1] is None}
        if arch == "aarch64":                             # the calls aarch64 lacks are absent from its table
            assert not legacy & set(known), legacy & set(known)
    if not checked:
        pytest.skip("no kernel headers installed (linux-libc-dev) to compare the filter's numbers with")


# ---- inside a sandbox ------------------------------------------------------------------------------------
def run_probe(tmp_path, code, *, cpu_seconds=10, memory_mb=512):
    """Run `code`'s probe() in the sandbox; (the RunResult, the value probe returned or None)."""
    job = {"exercise": "probe", "tests": [{"id": "t000", "function": "probe", "driver": "call", "args": [],
                                           "kwargs": {}}]}
    box = sandbox.make_box(tmp_path, code, job, ())
    run = sandbox.run(box, masked=(), forbidden=[ROOT], cpu_seconds=cpu_seconds, memory_mb=memory_mb)
    records = [json.loads(line) for line in run.answers.splitlines()]
    answer = [r for r in records if r["id"] == "t000"]
    return run, decode(answer[0]["value"]) if answer and answer[0]["ok"] else None


LIMITS_PROBE = '''
import ctypes, errno, os, socket


def _errno(action):
    try:
        action()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def _syscall(nr):
    libc = ctypes.CDLL(None, use_errno=True)
    ctypes.set_errno(0)
    done = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(-1)] * 5)
    return errno.errorcode.get(ctypes.get_errno(), "?") if done == -1 else "ok"


def _open_files():
    fds = []
    try:
        while len(fds) < 4000:
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass
    for fd in fds:
        os.close(fd)
    return len(fds)


def probe():
    found = {"open files": _open_files()}
    kinds = {"AF_UNIX": (1, 1), "AF_INET": (2, 1), "AF_INET6": (10, 1), "AF_NETLINK": (16, 3),
             "AF_PACKET": (17, 3), "AF_VSOCK": (40, 1)}          # (family, SOCK_STREAM or SOCK_RAW)
    for name, (family, kind) in kinds.items():
        found["socket " + name] = _errno(lambda: socket.socket(family, kind).close())
    found["socketpair AF_UNIX"] = _errno(lambda: [s.close() for s in socket.socketpair()])
    for name, nr in NUMBERS.items():
        found[name] = _syscall(nr)
    found["memfd_create"] = _errno(lambda: os.close(os.memfd_create("x")))
    found["/dev/shm"] = _errno(lambda: os.close(os.open("/dev/shm/x", os.O_CREAT | os.O_RDWR, 0o600)))
    return found
'''


@pytest.fixture(scope="module")
def limits_probe(tmp_path_factory):
    numbers = {**NEWER_CALLS, **{name: nr for name, (nr, _) in seccomp.numbers(seccomp.machine()).items()
                                 if name in ("shmget", "msgget", "semget", "memfd_secret")}}
    run, found = run_probe(tmp_path_factory.mktemp("limits"), f"NUMBERS = {numbers!r}\n" + LIMITS_PROBE)
    assert found is not None, run
    return found


def test_sockets_are_af_unix_only(limits_probe):
    assert limits_probe["socket AF_UNIX"] == "ok" and limits_probe["socketpair AF_UNIX"] == "ok", limits_probe
    for family in ("AF_INET", "AF_INET6", "AF_NETLINK", "AF_PACKET", "AF_VSOCK"):
        assert limits_probe["socket " + family] == "EAFNOSUPPORT", (family, limits_probe)


def test_calls_outside_the_list_are_refused(limits_probe):
    for name in NEWER_CALLS:                 # the kernel itself answers EBADF or EFAULT to these arguments
        assert limits_probe[name] == "ENOSYS", (name, limits_probe)


def test_memory_that_no_process_owns_is_refused(limits_probe):
    for name in ("memfd_create", "memfd_secret", "shmget", "msgget", "semget"):
        assert limits_probe[name] == "EPERM", (name, limits_probe)
    assert limits_probe["/dev/shm"] in ("EROFS", "EACCES"), limits_probe


def test_open_files_are_limited(limits_probe):
    assert 0 < limits_probe["open files"] <= sandbox.NOFILE_LIMIT, limits_probe


CPU_HOG = '''
import signal
if IGNORE:
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)


def probe():
    while True:
        pass
'''


@pytest.mark.parametrize("ignore", [False, True], ids=["SIGXCPU", "SIGXCPU ignored, then SIGKILL"])
def test_a_cpu_limit_kill_is_the_cpu_limit(tmp_path, ignore):
    run, _ = run_probe(tmp_path, f"IGNORE = {ignore}\n" + CPU_HOG, cpu_seconds=1)
    assert run.limit == "cpu", run


# ---- the grader's command line, as the grader's user and as an ordinary one -------------------------------
def graded_source(notebook: Path) -> tuple[dict, int]:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    index = next(i for i, cell in enumerate(nb["cells"])
                 if any(str(tag).startswith("graded:") for tag in cell.get("metadata", {}).get("tags", [])))
    return nb, index


def attacked(folder: Path, name: str, attack: str) -> Path:
    """The solution notebook `name` with `attack` run before its graded cell's code."""
    nb, index = graded_source(ROOT / "solutions" / f"{name}.ipynb")
    cell = nb["cells"][index]
    cell["source"] = attack + "\n" + "".join(cell["source"])
    path = folder / f"{name}.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


GIB = 1 << 30
ATTACKS = {   # exercise: (what the attack tries, the error the sandbox answers with)
    "ch4_deeper": ("import os, time\nfd = os.memfd_create('hog')\nos.posix_fallocate(fd, 0, %d)\ntime.sleep(0.5)\n"
                   % GIB, "PermissionError"),
    "ch6_kv_cache": ("import ctypes, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                     "libc.shmat.restype = ctypes.c_void_p\n"
                     "for _ in range(8):                               # 8 x 128 MiB, touched, detached\n"
                     "    shm = libc.shmget(0, 128 << 20, 0o1600)\n"
                     "    if shm < 0:\n"
                     "        raise OSError(ctypes.get_errno(), 'shmget refused')\n"
                     "    at = libc.shmat(shm, None, 0)\n"
                     "    ctypes.memset(at, 1, 128 << 20)\n"
                     "    libc.shmdt(ctypes.c_void_p(at))\n"
                     "time.sleep(0.5)\n", "PermissionError"),
    "ch8_rope": ("import socket\nvsock = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)\n", "OSError"),
    "ch6_top_k_top_p": ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                        "if libc.syscall(467, -1, None, 0, None, 0) == -1 and ctypes.get_errno() == 38:\n"
                        "    raise OSError(38, 'open_tree_attr refused')\n", "OSError"),
    "ch4_backward": ("import os\nfiles = [os.open('/dev/null', os.O_RDONLY) for _ in range(1000)]\n", "OSError"),
}


AS_USER = ["setpriv", f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}", "--clear-groups", "--"]


def python_for_user(folder: Path) -> str | None:
    """A Python that user nobody can run, with this one's packages: this one, if its files are
    readable by others; otherwise a virtual environment in `folder` of the system's Python of the
    same version, seeing this one's site-packages through a .pth file (where those are readable)."""
    check = "import sys, grader, nbformat, numpy; print(sys.version_info[:2] == %r)" % (tuple(sys.version_info[:2]),)

    def works(python):
        run = subprocess.run([*AS_USER, python, "-c", check], cwd=folder, capture_output=True, text=True)
        return run.returncode == 0 and run.stdout.strip() == "True"
    interpreter = os.path.realpath(sys.executable)          # unreadable, the system's Python would stand in
    if works(sys.executable) and subprocess.run([*AS_USER, "test", "-r", interpreter]).returncode == 0:
        return sys.executable
    system = shutil.which("python%d.%d" % sys.version_info[:2], path="/usr/bin:/usr/local/bin")
    if system is None:
        return None
    venv = folder / "venv"
    subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True)
    packages = subprocess.run([str(venv / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
                              check=True, capture_output=True, text=True).stdout.strip()
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    Path(packages, "outer_environment.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in ours))
    for path in [venv, *venv.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o555 if path.is_dir() else path.stat().st_mode | 0o444)
    return str(venv / "bin" / "python") if works(str(venv / "bin" / "python")) else None


@pytest.fixture(params=["the grader's user", "an ordinary user"])
def grader_as(request, tmp_path):
    """How to run `python -m grader`: as the test suite's user, in the repository, or as an
    ordinary user (nobody, from a root test suite: through bubblewrap's user namespace, the path
    of an instructor's laptop), in a copy of what the grader needs that this user can read.
    Yields (command prefix, folder to run in, folder for the notebooks)."""
    if request.param == "the grader's user":
        yield [sys.executable], ROOT, tmp_path
        return
    if os.geteuid() != 0:
        pytest.skip("the test suite runs as an ordinary user: the grader's user is one")
    folder = Path(tempfile.mkdtemp(prefix="grade-as-user-"))
    try:
        for part in ("grader", "lib"):
            shutil.copytree(ROOT / part, folder / part, ignore=shutil.ignore_patterns("__pycache__"))
        for hidden in (ROOT / "solutions").glob("*/hidden_tests.py"):
            (folder / hidden.parent.relative_to(ROOT)).mkdir(parents=True)
            shutil.copy(hidden, folder / hidden.relative_to(ROOT))
        (folder / "notebooks").mkdir()
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        python = python_for_user(folder)
        if python is None:
            pytest.skip(f"user {UNPRIVILEGED_UID} can run neither {sys.executable} nor a system Python of the same "
                        f"version with its packages (make the Python environment readable by others)")
        yield [*AS_USER, python], folder, folder / "notebooks"
    finally:
        shutil.rmtree(folder)


def grade(command, folder, notebooks, *options) -> dict:
    run = subprocess.run([*command, "-m", "grader", "--json", *options, *map(str, notebooks)], cwd=folder,
                         capture_output=True, text=True)
    if run.returncode == 2 and "refuses unprivileged user namespaces" in run.stderr:
        pytest.skip(run.stderr.strip().splitlines()[-1])
    assert run.returncode == 0, run.stderr[-3000:]
    return {Path(nb["path"]).stem: nb["exercise"] for nb in json.loads(run.stdout)["notebooks"]}


def shared_memory() -> int:
    """The host's shared memory (memfd, SysV and tmpfs pages), bytes."""
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("Shmem:"))


def test_a_solution_scores_and_every_attack_is_refused(grader_as):
    command, folder, notebooks = grader_as
    paths = [attacked(notebooks, name, attack) for name, (attack, _) in ATTACKS.items()]
    paths.append(attacked(notebooks, "ch4_gelu", ""))
    for path in paths:
        path.chmod(0o644)
    before, peak, done = shared_memory(), [0], threading.Event()

    def watch():
        while not done.wait(0.02):
            peak[0] = max(peak[0], shared_memory() - before)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        results = grade(command, folder, paths, "--memory-mb", "256")
    finally:
        done.set()
        watcher.join()
    solution = results["ch4_gelu"]
    assert solution["status"] == "graded" and solution["score"] == solution["max_score"] > 0, solution
    for name, (_, error) in ATTACKS.items():
        ex = results[name]
        assert ex["status"] == "load-error" and ex["score"] == 0 and error in ex["message"], (name, ex)
    # 2 GiB were asked for outside the 256 MiB limit; what other processes on the machine add
    # to the shared memory meanwhile stays well below 256 MiB
    assert peak[0] < 256 << 20, f"the host's shared memory grew by {peak[0] >> 20} MiB"

    hog = attacked(notebooks, "ch4_gelu", "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
                                          "while True:\n    pass\n")
    hog.chmod(0o644)
    ex = grade(command, folder, [hog], "--timeout", "1")["ch4_gelu"]
    assert ex["status"] == "timeout" and ex["score"] == 0, ex    # not "crashed": the SIGKILL after an ignored SIGXCPU


# ---- a machine that refuses unprivileged user namespaces ---------------------------------------------------
@pytest.mark.parametrize("setting, value", [("kernel/unprivileged_userns_clone", "0"),
                                            ("kernel/apparmor_restrict_unprivileged_userns", "1"),
                                            ("user/max_user_namespaces", "0")])
def test_a_refused_user_namespace_is_named_in_one_line(tmp_path, setting, value):
    for name, _, allowing in sandbox.USERNS_SETTINGS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((value if name == setting else allowing) + "\n")
    line = sandbox.userns_refusal(tmp_path)
    assert line is not None and "\n" not in line and setting.replace("/", ".") in line, line
    (tmp_path / setting).unlink()                             # a kernel without that setting
    assert sandbox.userns_refusal(tmp_path) is None
