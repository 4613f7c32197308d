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



def forward_on(library: str, model, inputs: dict, batch: int, ops=None) -> dict:
    """``model``'s forward over numpy ``inputs`` as a run with ``--array library`` computes it: the inputs moved to
    the library's device once, every op there (the FP32 ops too when ``ops`` is None), the outputs moved back."""
    from conformance.numerics import arrays
    from models import run_batched

    with arrays.use(library):
        active = arrays.active()
        return arrays.to_numpy(run_batched(model, arrays.to_library(inputs, active), batch, ops))
