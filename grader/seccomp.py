"""The sandbox's system-call filter: a classic BPF program that bubblewrap loads (`--seccomp FD`)
just before it starts the graded code.

A graded cell computes with numpy in one thread. It has no use for the calls below, which are
refused with EPERM (clone3 with ENOSYS, so that a C library falls back to clone, refused too):
- new processes and threads (clone, fork, vfork): the sandbox is one process, so its memory
  and CPU limits (setrlimit, per process) are limits for the whole sandbox;
- reaching other processes (ptrace, process_vm_*, kcmp, pidfd_getfd);
- namespaces and mounts (unshare, setns, mount and the new mount API, pivot_root, chroot);
- the kernel's keyrings, BPF, perf events, userfaultfd and io_uring (frequent sources of
  kernel bugs, of no use to numpy);
- administration of the machine (reboot, modules, kexec, swap, clocks, host names, quotas,
  accounting, the kernel log, file handles, I/O ports).
Every other call is allowed. Calls of an architecture other than the machine's own
(x86_64 or aarch64: 32-bit or x32 calls on x86_64, for instance) end the process.

The numbers come from the kernel's tables (asm/unistd_64.h for x86_64, asm-generic/unistd.h
for aarch64); tests/test_grader.py compares them with the headers where these are installed.
"""
import errno
import platform
import struct

# name: (x86_64 number, aarch64 number); None where the architecture has no such call
REFUSED = {
    "clone": (56, 220), "fork": (57, None), "vfork": (58, None),
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
NOT_IMPLEMENTED = {"clone3": (435, 435)}          # ENOSYS: the C library then tries clone

ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}    # AUDIT_ARCH_* of linux/audit.h
X32_BIT = 0x40000000                                     # x32 calls on x86_64 carry this bit

# classic BPF (linux/filter.h, linux/seccomp.h)
LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
OFFSET_NR, OFFSET_ARCH = 0, 4                            # in struct seccomp_data


def machine() -> str:
    """The architecture name the filter is built for, as ARCHES spells it."""
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)


def numbers(arch: str) -> dict[str, tuple[int, int]]:
    """{system call name: (its number on `arch`, the errno it is refused with)}."""
    column = list(ARCHES).index(arch)
    table = {name: (nrs[column], errno.EPERM) for name, nrs in REFUSED.items()}
    table.update({name: (nrs[column], errno.ENOSYS) for name, nrs in NOT_IMPLEMENTED.items()})
    return {name: value for name, value in table.items() if value[0] is not None}


def _arch_block(arch: str) -> list[tuple[int, int, int, int]]:
    """Instructions for one architecture: load the number, jump to a refusal on a match,
    else allow. Ends with its three returns: allow, EPERM, ENOSYS."""
    refused = sorted(numbers(arch).values())
    block = [(LD_W_ABS, 0, 0, OFFSET_NR)]
    checks = ([(JGE_K, X32_BIT, errno.EPERM)] if arch == "x86_64" else []) + \
             [(JEQ_K, nr, err) for nr, err in refused]
    end = len(block) + len(checks)                           # index of "allow"
    targets = {errno.EPERM: end + 1, errno.ENOSYS: end + 2}
    for code, k, err in checks:
        block.append((code, targets[err] - len(block) - 1, 0, k))
    return block + [(RET_K, 0, 0, RET_ALLOW), (RET_K, 0, 0, RET_ERRNO | errno.EPERM),
                    (RET_K, 0, 0, RET_ERRNO | errno.ENOSYS)]


def program() -> bytes:
    """The filter as bwrap reads it: struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}[].
    It loads the architecture, jumps to that architecture's block, or kills the process."""
    blocks = [_arch_block(arch) for arch in ARCHES]
    head = [(LD_W_ABS, 0, 0, OFFSET_ARCH)]
    start = 1 + len(ARCHES) + 1                               # the first block's index
    for arch, block in zip(ARCHES, blocks):
        head.append((JEQ_K, start - len(head) - 1, 0, ARCHES[arch]))
        start += len(block)
    head.append((RET_K, 0, 0, RET_KILL_PROCESS))
    instructions = head + [ins for block in blocks for ins in block]
    assert all(jt < 256 for _, jt, _, _ in instructions), "a jump too long for classic BPF"
    return b"".join(struct.pack("=HBBI", code, jt, jf, k) for code, jt, jf, k in instructions)
