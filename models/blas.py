"""FP32 matrix products over the host's cores whose bits do not depend on how many cores there are.

BLAS's own threads spin while they wait for the next call: on the emulator's many mid-sized products a second BLAS
thread costs about 40% more CPU time for no gain in wall time on two cores, and none at all on a shared machine (a
bert-base accuracy run: 104 CPU-s single-threaded, 148 CPU-s with two BLAS threads, the same wall time beside another
job). And how BLAS sums depends on the call: its thread count, and the shape of the call (a small product takes
another kernel). So every large product here is cut by its shape alone into blocks of :data:`BLOCK` rows (or, for a
wide right operand, columns), each one single-threaded BLAS call, and the blocks are shared out over
:func:`use_threads` threads: the bits are the same on one core or on eight (tests/test_blas.py). A stack of matrices
is one call per matrix, as numpy makes them, the matrices shared out.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import threadpoolctl

# Rows (or columns) per block: large enough that a block runs BLAS at its full single-thread speed (measured: 256
# rows of a 768 x 3072 product within 3% of the whole product's speed), small enough to share out a batch of rows.
BLOCK = 256
# Below this many multiply-adds a product is one call in the calling thread: the hand-off costs more than it saves.
_PARALLEL_WORK = 1 << 22

_threads: Callable[[], int] = lambda: 1  # noqa: E731


def use_threads(threads: int | Callable[[], int]) -> None:
    """Share products out over ``threads`` threads from now on (1: every product in the calling thread), or over as
    many as ``threads()`` says at each product (the suite's thread setting, read when it is used)."""
    global _threads
    if callable(threads):
        _threads = threads
        return
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    _threads = lambda: threads  # noqa: E731


@functools.lru_cache(maxsize=None)
def _pool(count: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=count, thread_name_prefix="models-blas")


def blas_signature() -> dict[str, list]:
    """The BLAS libraries loaded in this process, by library name: API, version and CPU kernels (the bits of the FP32
    ops depend on them). Not the thread count: a product's threads share out its rows and columns, never the sum
    over one element's terms, so the bits are the same on any count (measured on the six models at every
    precision, one thread against two), and each worker may use its share of the cores."""
    return {os.path.basename(str(info.get("filepath"))): [info.get("internal_api"), info.get("version"),
                                                          info.get("architecture")]
            for info in threadpoolctl.threadpool_info() if info.get("user_api") == "blas"}


def host_arithmetic() -> dict:
    """What, beside the suite's sources and a batch's inputs, decides the bits this host computes: the BLAS libraries
    and their CPU kernels (one OpenBLAS build sums a product in another order on another CPU: its Haswell and
    Sandybridge kernels give other FP32, FP16 and FP8 outputs of the same model on the same machine), numpy's
    version and the SIMD targets its loops dispatch to on this CPU (its float32 transcendental functions). Fixed for
    the process's life (the BLAS kernel is chosen as numpy loads it): each call returns its own copy."""
    return copy.deepcopy(_host_arithmetic())


@functools.lru_cache(maxsize=1)
def _host_arithmetic() -> dict:
    umath = np._core._multiarray_umath
    features = getattr(umath, "__cpu_features__", {})
    simd = sorted(set(getattr(umath, "__cpu_baseline__", ())) |
                  {target for target in getattr(umath, "__cpu_dispatch__", ()) if features.get(target)})
    return {"blas": _numpys_blas(blas_signature()), "numpy": np.__version__, "numpy_simd": simd}


def _numpys_blas(signature: dict[str, list]) -> dict[str, list]:
    """The entries of ``signature`` that numpy's own products call (the BLAS its wheel ships, next to it), so that
    another package's BLAS loaded later (scipy's) does not change the host's arithmetic; all of them when none is
    numpy's own (a numpy linked to the system's BLAS)."""
    here = Path(np.__file__).resolve().parent
    own = {str(here), str(here.with_name(here.name + ".libs"))}
    paths = {os.path.basename(str(info.get("filepath"))): str(Path(str(info.get("filepath"))).resolve().parent)
             for info in threadpoolctl.threadpool_info() if info.get("user_api") == "blas"}
    mine = {name: value for name, value in signature.items() if paths.get(name) in own}
    return mine or signature


@functools.lru_cache(maxsize=1)
def _controller() -> threadpoolctl.ThreadpoolController:
    return threadpoolctl.ThreadpoolController()


_limit_lock = threading.Lock()
_limit_users = 0
_limiter = None


@contextlib.contextmanager
def single_threaded():
    """BLAS limited to one thread while any thread is inside. BLAS's thread count is process-wide: the first thread
    in sets it to one, the last one out restores it, whatever the order threads enter and leave in."""
    global _limit_users, _limiter
    with _limit_lock:
        if _limit_users == 0:
            _limiter = _controller().limit(limits=1, user_api="blas")
        _limit_users += 1
    try:
        yield
    finally:
        with _limit_lock:
            _limit_users -= 1
            if _limit_users == 0:
                _limiter.restore_original_limits()
                _limiter = None


def _blocks(size: int) -> list[tuple[int, int]]:
    """Blocks of ``BLOCK`` rows, the last one never of a single row (numpy computes a one-row product as a vector
    product, another BLAS routine with other bits): it joins the block before it."""
    starts = list(range(0, size, BLOCK))
    if len(starts) > 1 and size - starts[-1] == 1:
        starts.pop()
    return [(start, stop) for start, stop in zip(starts, starts[1:] + [size])]


def _share(pieces: list, run) -> None:
    """``run(piece)`` for every piece, over the threads (in this thread when one is enough or this is one of them; a
    caller's own worker threads say 1 through :func:`use_threads`)."""
    count = min(_threads(), len(pieces))
    if count <= 1 or threading.current_thread().name.startswith("models-blas"):
        for piece in pieces:
            run(piece)
        return

    def part(first: int) -> None:
        for piece in pieces[first::count]:
            run(piece)

    futures = [_pool(count).submit(part, i) for i in range(1, count)]
    try:
        part(0)
    finally:
        for future in futures:
            future.result()


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(a, b)`` of float32 arrays (``a`` (..., M, K), ``b`` (..., K, N), batch axes broadcast), as blocks
    of single-threaded BLAS calls shared out over the threads (the module's docstring)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim < 2 or b.ndim < 2 or a.dtype != np.float32 or b.dtype != np.float32:
        return np.matmul(a, b, out=out)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if out is None:
        out = np.empty(batch + (m, n), np.float32)
    work = int(np.prod(batch, dtype=np.int64)) * m * k * n
    with single_threaded():
        if work < _PARALLEL_WORK or m == 1 or n == 1:  # by shape alone: small and vector products stay whole
            return np.matmul(a, b, out=out)
        if batch:  # one BLAS call per matrix of the batch, as np.matmul makes them: whole matrices shared out
            lead = int(np.prod(batch, dtype=np.int64))
            if any(x.ndim > 2 and x.shape[:-2] != batch for x in (a, b)):  # broadcast within the batch axes
                return np.matmul(a, b, out=out)
            # an operand without batch axes is broadcast by np.matmul, never copied per matrix
            a3 = a.reshape(lead, m, k) if a.ndim > 2 else a
            b3 = b.reshape(lead, k, n) if b.ndim > 2 else b
            o3 = out.reshape(lead, m, n)
            step = max(1, -(-lead // (4 * _threads())))

            def stack(part):
                first, stop = part
                np.matmul(a3[first:stop] if a.ndim > 2 else a3, b3[first:stop] if b.ndim > 2 else b3,
                          out=o3[first:stop])

            _share([(s, min(lead, s + step)) for s in range(0, lead, step)], stack)
            return out
        if m >= n or m >= BLOCK:
            _share(_blocks(m), lambda rows: np.matmul(a[rows[0]:rows[1]], b, out=out[rows[0]:rows[1]]))
        else:
            _share(_blocks(n), lambda cols: np.matmul(a, b[:, cols[0]:cols[1]], out=out[:, cols[0]:cols[1]]))
    return out
