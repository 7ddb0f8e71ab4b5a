"""Keep freed memory for reuse instead of handing it back to the OS (glibc's malloc, Linux).

Every numpy expression allocates a fresh array for its result, and a training step of the
numpy twin makes hundreds of them, 0.1 to a few MB each. With glibc's defaults, arrays over
a threshold (128 KB at first, raised as big blocks are freed) come straight from the kernel
(mmap), and freed memory at the top of the heap goes back to the kernel as soon as a few MB
are free; either way the next array's pages are new to the process, and every 4 KB page
costs a page fault when first written. On a 2-core machine those page faults were about
half of a numpy training step. `keep_freed_memory()` raises both thresholds (mallopt):
arrays under 32 MiB come from the heap, and the heap keeps up to 256 MiB of free memory
for the next step.

It changes the whole process, so nothing runs it on import: the numpy twin's `Trainer` calls
it when it is created (`lib.train.train` and `python -m lib.bench train` start there). Set
GPT2_COURSE_MALLOC=default in the environment to keep glibc's defaults (to measure the
difference, or on a machine short of memory). Elsewhere (macOS, Windows, musl) it does nothing.
"""
from __future__ import annotations

import ctypes
import os
import platform

M_TRIM_THRESHOLD = -1      # free memory at the top of the heap kept before returning it
M_MMAP_THRESHOLD = -3      # requests at least this large are mapped from the kernel directly
KEEP_BYTES = 256 * 2**20
HEAP_UP_TO = 32 * 2**20    # glibc's largest mmap threshold on 64-bit machines


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds; True when it did (False: not glibc, or opted out)."""
    if os.environ.get("GPT2_COURSE_MALLOC") == "default" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)                                  # the C library this process already uses
    return bool(libc.mallopt(M_MMAP_THRESHOLD, HEAP_UP_TO)) and bool(libc.mallopt(M_TRIM_THRESHOLD, KEEP_BYTES))
