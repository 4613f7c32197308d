"""The run's memory allocator told to keep the memory the emulator frees, for the next array of the same size.

The emulator makes and drops arrays of tens of megabytes at every op (a roformer layer's attention scores are 48 MB).
glibc's malloc serves those from fresh ``mmap`` pages and unmaps them when they are freed, so the kernel zeroes
every page again at its first touch: about a fifth of a transformer run's CPU time went to the kernel. Serving them
from the heap (no ``mmap``) and trimming it only past 1 GiB of free top memory keeps the pages: a roformer fp16
accuracy test took 25.5 s (6.0 s of it in the kernel) before and 20.9 s (2.0 s) after. The price is memory held
longer (the smoke job's peak resident memory went from 3.0 to 4.1 GB; 3.0 GB again once timing traces stopped
holding activations). Other allocators, and platforms without
glibc, are left as they are. The figures computed do not depend on it.
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Apply the settings above to this process's glibc malloc; False where there is none (nothing changed)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc's own symbol: another libc's mallopt takes other parameters
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
