"""Helpers shared by the benchmark files."""

from __future__ import annotations

import os


def blas_threads() -> int:
    """Threads numpy's BLAS runs with: OPENBLAS_NUM_THREADS / OMP_NUM_THREADS, else every core this process may use.
    Torch baselines are set to the same count so that the ratio compares like with like."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

