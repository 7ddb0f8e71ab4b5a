"""The sandbox's system-call filter: a classic BPF program that bubblewrap loads (`--seccomp FD`)
just before it starts the graded code.

An allowlist: a graded cell computes with numpy in one thread, and may make only the calls in
ALLOWED, which is what the runner was measured to make (strace -f of the sandbox on every
exercise's solution and untouched notebook: the runner, Python, numpy, setpriv and bubblewrap's
process 1 after the filter is loaded), with the ordinary calls of the same kind a cell may use
(files in /tmp, clocks, sleeping, signals) and, where the two differ, aarch64's names for the
same calls. `socket` and `socketpair` are allowed for AF_UNIX only (the C library asks nscd over
one, and nothing in the sandbox listens): every other address family (AF_INET, AF_VSOCK,
AF_NETLINK, AF_PACKET...) is refused with EAFNOSUPPORT.

Every other call is refused: those in REFUSED with EPERM, the rest, unknown numbers and calls
newer than this table included, with ENOSYS, the answer of a kernel that lacks the call, so that
a C library falls back to an older call where it has one (clone3 -> clone, refused too). REFUSED
names what matters most, for the reader and the tests:
- new processes and threads (clone, fork, vfork): the sandbox is one process, so its memory
  and CPU limits (setrlimit, per process) are limits for the whole sandbox;
- memory outside the address-space limit: memfd_create and memfd_secret, SysV shared memory,
  message queues and semaphores (their pages belong to no process; POSIX shared memory lives
  in /dev/shm, which is read-only in the sandbox);
- reaching other processes (ptrace, process_vm_*, kcmp, pidfd_getfd);
- namespaces and mounts (unshare, setns, mount and the new mount API, pivot_root, chroot);
- the kernel's keyrings, BPF, perf events, userfaultfd and io_uring (frequent sources of
  kernel bugs, of no use to numpy);
- administration of the machine (reboot, modules, kexec, swap, clocks, host names, quotas,
  accounting, the kernel log, file handles, I/O ports).
Calls of an architecture other than the machine's own (x86_64 or aarch64: 32-bit or x32 calls
on x86_64, for instance) end the process; x32 numbers on x86_64 are refused with EPERM.

The numbers come from the kernel's tables (asm/unistd_64.h for x86_64, asm-generic/unistd.h
for aarch64); the tests compare them with the headers where these are installed.
"""
import errno
import platform
import struct

# name: (x86_64 number, aarch64 number); None where the architecture has no such call
ALLOWED = {
    # files and folders: the runner reads lib and job.json, a cell may use its /tmp
    "read": (0, 63), "write": (1, 64), "readv": (19, 65), "writev": (20, 66), "pread64": (17, 67),
    "pwrite64": (18, 68), "preadv": (295, 69), "pwritev": (296, 70), "preadv2": (327, 286),
    "pwritev2": (328, 287), "lseek": (8, 62), "open": (2, None), "openat": (257, 56),
    "openat2": (437, 437), "creat": (85, None), "close": (3, 57), "close_range": (436, 436),
    "dup": (32, 23), "dup2": (33, None), "dup3": (292, 24), "fcntl": (72, 25), "ioctl": (16, 29),
    "flock": (73, 32), "fsync": (74, 82), "fdatasync": (75, 83), "truncate": (76, 45),
    "ftruncate": (77, 46), "fallocate": (285, 47), "fadvise64": (221, 223), "stat": (4, None),
    "fstat": (5, 80), "lstat": (6, None), "newfstatat": (262, 79), "statx": (332, 291),
    "statfs": (137, 43), "fstatfs": (138, 44), "access": (21, None), "faccessat": (269, 48),
    "faccessat2": (439, 439), "readlink": (89, None), "readlinkat": (267, 78), "getdents64": (217, 61),
    "getcwd": (79, 17), "chdir": (80, 49), "fchdir": (81, 50), "mkdir": (83, None),
    "mkdirat": (258, 34), "rmdir": (84, None), "unlink": (87, None), "unlinkat": (263, 35),
    "rename": (82, None), "renameat": (264, 38), "renameat2": (316, 276), "link": (86, None),
    "linkat": (265, 37), "symlink": (88, None), "symlinkat": (266, 36), "chmod": (90, None),
    "fchmod": (91, 52), "fchmodat": (268, 53), "umask": (95, 166), "utimensat": (280, 88),
    "getxattr": (191, 8), "lgetxattr": (192, 9), "fgetxattr": (193, 10), "listxattr": (194, 11),
    "llistxattr": (195, 12), "flistxattr": (196, 13), "pipe": (22, None), "pipe2": (293, 59),
    "copy_file_range": (326, 285), "sendfile": (40, 71),
    # memory: within the address-space limit
    "brk": (12, 214), "mmap": (9, 222), "munmap": (11, 215), "mprotect": (10, 226),
    "mremap": (25, 216), "madvise": (28, 233), "mbind": (237, 235), "msync": (26, 227),
    # waiting, clocks, sleep
    "futex": (202, 98), "poll": (7, None), "ppoll": (271, 73), "select": (23, None),
    "pselect6": (270, 72), "epoll_create": (213, None), "epoll_create1": (291, 20),
    "epoll_ctl": (233, 21), "epoll_wait": (232, None), "epoll_pwait": (281, 22),
    "epoll_pwait2": (441, 441), "eventfd": (284, None), "eventfd2": (290, 19), "nanosleep": (35, 101),
    "clock_nanosleep": (230, 115), "clock_gettime": (228, 113), "clock_getres": (229, 114),
    "gettimeofday": (96, 169), "time": (201, None), "sched_yield": (24, 124),
    # signals (within the sandbox's own pid namespace)
    "rt_sigaction": (13, 134), "rt_sigprocmask": (14, 135), "rt_sigreturn": (15, 139),
    "rt_sigpending": (127, 136), "rt_sigtimedwait": (128, 137), "rt_sigsuspend": (130, 133),
    "sigaltstack": (131, 132), "kill": (62, 129), "tgkill": (234, 131), "tkill": (200, 130),
    "pause": (34, None), "alarm": (37, None), "getitimer": (36, 102), "setitimer": (38, 103),
    "restart_syscall": (219, 128),
    # the process's own state
    "getpid": (39, 172), "getppid": (110, 173), "gettid": (186, 178), "getuid": (102, 174),
    "geteuid": (107, 175), "getgid": (104, 176), "getegid": (108, 177), "getresuid": (118, 148),
    "getresgid": (120, 150), "getgroups": (115, 158), "getpgrp": (111, None), "getpgid": (121, 155),
    "getsid": (124, 156), "getrlimit": (97, 163), "setrlimit": (160, 164), "prlimit64": (302, 261),
    "getrusage": (98, 165), "times": (100, 153), "sysinfo": (99, 179), "uname": (63, 160),
    "sched_getaffinity": (204, 123), "getcpu": (309, 168), "getpriority": (140, 141),
    "capget": (125, 90), "arch_prctl": (158, None), "set_tid_address": (218, 96),
    "set_robust_list": (273, 99), "rseq": (334, 293), "prctl": (157, 167), "getrandom": (318, 278),
    # sockets: only ones of an allowed family can be had (FAMILY_CHECKED)
    "connect": (42, 203), "sendto": (44, 206), "recvfrom": (45, 207), "sendmsg": (46, 211),
    "recvmsg": (47, 212), "shutdown": (48, 210), "getsockopt": (55, 209), "setsockopt": (54, 208),
    "getsockname": (51, 204), "getpeername": (52, 205),
    # starting and ending: setpriv becomes nobody and starts Python; bubblewrap's process 1 waits
    "execve": (59, 221), "exit": (60, 93), "exit_group": (231, 94), "wait4": (61, 260),
    "setresuid": (117, 147), "setresgid": (119, 149), "setgroups": (116, 159), "capset": (126, 91),
}
FAMILY_CHECKED = {"socket": (41, 198), "socketpair": (53, 199)}     # allowed for ALLOWED_FAMILY only
ALLOWED_FAMILY = 1                                                  # AF_UNIX

REFUSED = {
    "clone": (56, 220), "fork": (57, None), "vfork": (58, None),
    "memfd_create": (319, 279), "memfd_secret": (447, 447),
    "shmget": (29, 194), "shmat": (30, 196), "shmctl": (31, 195), "shmdt": (67, 197),
    "msgget": (68, 186), "msgsnd": (69, 189), "msgrcv": (70, 188), "msgctl": (71, 187),
    "semget": (64, 190), "semop": (65, 193), "semctl": (66, 191), "semtimedop": (220, 192),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kcmp": (312, 272), "pidfd_getfd": (438, 438),
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "chroot": (161, 51), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "reboot": (169, 142), "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "swapon": (167, 224), "swapoff": (168, 225), "acct": (163, 89), "quotactl": (179, 60),
    "syslog": (103, 116), "sethostname": (170, 161), "setdomainname": (171, 162),
    "settimeofday": (164, 170), "clock_settime": (227, 112), "clock_adjtime": (305, 266),
    "adjtimex": (159, 171), "vhangup": (153, 58), "iopl": (172, None), "ioperm": (173, None),
    "name_to_handle_at": (303, 264), "open_by_handle_at": (304, 265), "lookup_dcookie": (212, 18),
    "fanotify_init": (300, 262),
}
NOT_IMPLEMENTED = {"clone3": (435, 435)}          # refused with ENOSYS like every unlisted call; named for the tests

ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}    # AUDIT_ARCH_* of linux/audit.h
X32_BIT = 0x40000000                                     # x32 calls on x86_64 carry this bit

# classic BPF (linux/filter.h, linux/seccomp.h)
LD_W_ABS, JA, JEQ_K, JGE_K, RET_K = 0x20, 0x05, 0x15, 0x35, 0x06
RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0 = 0, 4, 16           # in struct seccomp_data (arg 0's low half: little-endian)
CHECKS_PER_RETURN = 100                                  # see _checks


def machine() -> str:
    """The architecture name the filter is built for, as ARCHES spells it."""
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)


def _column(table: dict, arch: str) -> dict[str, int]:
    column = list(ARCHES).index(arch)
    return {name: nrs[column] for name, nrs in table.items() if nrs[column] is not None}


def numbers(arch: str) -> dict[str, tuple[int, int]]:
    """{name of a refused system call: (its number on `arch`, the errno it is refused with)}."""
    table = {name: (nr, errno.EPERM) for name, nr in _column(REFUSED, arch).items()}
    table.update({name: (nr, errno.ENOSYS) for name, nr in _column(NOT_IMPLEMENTED, arch).items()})
    return table


def allowed(arch: str) -> dict[str, int]:
    """{name of an allowed system call: its number on `arch`}, socket and socketpair included."""
    return {**_column(ALLOWED, arch), **_column(FAMILY_CHECKED, arch)}


class _Assembler:
    """Classic BPF with named jump targets, resolved into relative offsets at the end."""

    def __init__(self):
        self.code, self.labels = [], {}

    def label(self, name):
        self.labels[name] = len(self.code)

    def emit(self, code, k=0, jt=None, jf=None):
        self.code.append((code, jt, jf, k))

    def returns(self, label, value):
        self.label(label)
        self.emit(RET_K, value)

    def bytes(self) -> bytes:
        out = []
        for i, (code, jt, jf, k) in enumerate(self.code):
            jt, jf = (0 if t is None else self.labels[t] - i - 1 for t in (jt, jf))
            if code == JA:
                k, jt = jt, 0                                # an unconditional jump's offset is k
            assert 0 <= jt < 256 and 0 <= jf < 256, "a jump too long for classic BPF"
            out.append(struct.pack("=HBBI", code, jt, jf, k))
        return b"".join(out)


def _checks(asm: _Assembler, numbers: list[int], label: str, value: int) -> None:
    """Jump to a return of `value` on any of `numbers`: one return after every
    CHECKS_PER_RETURN checks (a jump reaches at most 255 instructions ahead), jumped over by
    the calls that match none."""
    for start in range(0, len(numbers), CHECKS_PER_RETURN):
        here = f"{label} {start}"
        for nr in numbers[start:start + CHECKS_PER_RETURN]:
            asm.emit(JEQ_K, nr, jt=here)
        asm.emit(JA, jt=f"{here} end")
        asm.returns(here, value)
        asm.label(f"{here} end")


def _arch_block(asm: _Assembler, arch: str) -> None:
    """One architecture: load the number; refused calls return EPERM, allowed ones ALLOW,
    socket and socketpair go to the family check, anything else returns ENOSYS."""
    asm.label(arch)
    asm.emit(LD_W_ABS, OFFSET_NR)
    if arch == "x86_64":
        asm.emit(JGE_K, X32_BIT, jt=f"{arch} eperm 0")
    _checks(asm, sorted(_column(REFUSED, arch).values()), f"{arch} eperm", RET_ERRNO | errno.EPERM)
    _checks(asm, sorted(_column(ALLOWED, arch).values()), f"{arch} allow", RET_ALLOW)
    for nr in sorted(_column(FAMILY_CHECKED, arch).values()):
        asm.emit(JEQ_K, nr, jt=f"{arch} family")
    asm.emit(RET_K, RET_ERRNO | errno.ENOSYS)
    asm.label(f"{arch} family")
    asm.emit(LD_W_ABS, OFFSET_ARG0)
    asm.emit(JEQ_K, ALLOWED_FAMILY, jt=f"{arch} family allowed")
    asm.emit(RET_K, RET_ERRNO | errno.EAFNOSUPPORT)
    asm.returns(f"{arch} family allowed", RET_ALLOW)


def program() -> bytes:
    """The filter as bwrap reads it: struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}[].
    It loads the architecture, jumps to that architecture's block, or kills the process."""
    for arch in ARCHES:
        clash = set(allowed(arch)) & set(numbers(arch))
        assert not clash, f"{sorted(clash)} both allowed and refused"
    asm = _Assembler()
    asm.emit(LD_W_ABS, OFFSET_ARCH)
    for arch, audit in ARCHES.items():
        asm.emit(JEQ_K, audit, jt=f"{arch} start")
    asm.emit(RET_K, RET_KILL_PROCESS)
    for arch in ARCHES:                                  # an unconditional jump reaches any block
        asm.label(f"{arch} start")
        asm.emit(JA, jt=arch)
    for arch in ARCHES:
        _arch_block(asm, arch)
    return asm.bytes()
