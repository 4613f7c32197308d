"""The run's allocator keeps freed memory: the emulator's large arrays come from the heap, not from fresh mappings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

def bytes_mapped_for_a_large_array() -> int:
    """The bytes glibc's malloc maps on their own (not from its heap) for a new 64 MiB array, in this process."""
    import ctypes

    import numpy as np

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                         "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    before = libc.mallinfo2().hblkhd  # bytes in blocks mapped on their own
    array = np.ones(1 << 24, np.float32)
    mapped = libc.mallinfo2().hblkhd - before
    del array
    return mapped


MAPPED = """
import sys
from conformance.numerics import heap
from tests.test_heap import bytes_mapped_for_a_large_array

kept = heap.keep_freed_memory() if sys.argv[1] == "kept" else None
print(kept, bytes_mapped_for_a_large_array())
"""


def _mapped(mode: str) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", MAPPED, mode], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    kept, mapped = done.stdout.split()
    return kept, int(mapped)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc on Linux")
def test_a_large_array_comes_from_the_heap_not_from_a_mapping_of_its_own():
    assert _mapped("kept") == ("True", 0)  # from the heap: reused after it is freed, never unmapped and zeroed again
    default, mapped = _mapped("default")
    assert mapped >= 1 << 26  # glibc's default maps a block this large on its own, and unmaps it when freed
