"""Which implementation the emulator's roundings run on: compiled numba kernels (``"numba"``, the default) or the
numpy passes (``"numpy"``, the oracle the compiled kernels are tested against bit for bit).

``CONFORMANCE_KERNELS=numpy|numba`` chooses for a process (empty counts as unset); :func:`kernel_path` switches for
the duration of a ``with`` block, process-wide (worker threads included). The numba kernels live in
:mod:`conformance.numerics._jit`, imported when the compiled path is first used, so a process on the numpy path never
pays numba's import. Where numba cannot be imported, a warning says so once and the numpy path runs (same results,
slower). Only float32 values take the compiled path; float64 inputs and stochastic rounding always run on numpy.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import warnings

import numpy as np

KERNELS_VARIABLE = "CONFORMANCE_KERNELS"
KERNEL_PATHS = ("numba", "numpy")
OPS = {"copy": 0, "add": 1, "sub": 2, "mul": 3, "div": 4, "round_add": 5}

_override: str | None = None
_lock = threading.Lock()
_loaded = None  # the _jit module once imported; False when numba cannot be imported
_compile_timer = None  # numba's timing listener of its compilations, registered when the kernels are imported


def configured_path() -> str:
    """The path ``CONFORMANCE_KERNELS`` names ("numba" when unset or empty); ValueError naming the variable and its
    value otherwise."""
    value = os.environ.get(KERNELS_VARIABLE, "")
    if value == "":
        return "numba"
    if value not in KERNEL_PATHS:
        raise ValueError(f"{KERNELS_VARIABLE} must be one of: {', '.join(KERNEL_PATHS)} (or unset); got {value!r}")
    return value


def active_path() -> str:
    """The path the emulator's roundings take now: a :func:`kernel_path` block's, else ``CONFORMANCE_KERNELS``'s."""
    return _override if _override is not None else configured_path()


@contextlib.contextmanager
def kernel_path(name: str):
    """Run every rounding of the emulator (quantize, round_inplace, matmul/conv2d with half partials, the fused ops)
    on path ``name`` ("numpy" or "numba") inside the block, in every thread; blocks nest."""
    global _override
    if name not in KERNEL_PATHS:
        raise ValueError(f"kernel path must be one of: {', '.join(KERNEL_PATHS)}; got {name!r}")
    with _lock:
        previous, _override = _override, name
    try:
        yield name
    finally:
        with _lock:
            _override = previous


def _load():
    """The _jit module, or None (warned once) when numba cannot be imported."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                try:
                    import conformance.numerics._jit as _jit  # deferred: numba is imported on first use only
                    from numba.core import event

                    global _compile_timer
                    _compile_timer = event.TimingListener()
                    event.register("numba:compile", _compile_timer)
                    _loaded = _jit
                except ImportError as exc:
                    warnings.warn(f"numba cannot be imported ({exc}); the IPU emulator runs its numpy kernels "
                                  f"(the same results, slower)", RuntimeWarning, stacklevel=3)
                    _loaded = False
    return _loaded or None


def compile_seconds() -> float:
    """Seconds numba has spent compiling in this process: the kernels compile on their first use in a fresh clone
    (then numba's on-disk cache keeps them, and loading them is not compiling); 0 before the compiled path is used."""
    timer = _compile_timer
    return timer.duration if timer is not None and timer.done else 0.0


def uncached_kernels() -> list[str]:
    """The compiled kernels numba's on-disk cache holds nothing for yet (they compile on first use: a fresh clone's
    first run), by name; [] on the numpy path or without numba."""
    kernels = jit()
    if kernels is None:
        return []
    from numba.core.registry import CPUDispatcher

    def cached(dispatcher) -> bool:
        try:
            return os.path.exists(dispatcher._cache._cache_file._index_path)
        except AttributeError:  # another numba's layout: assume it compiles
            return False
    return sorted(name for name, value in vars(kernels).items()
                  if isinstance(value, CPUDispatcher) and not cached(value)
                  and value.targetoptions.get("inline") != "always")  # compiled into its callers, never cached alone


def jit():
    """The compiled kernels when the active path is "numba" and numba imports; None for the numpy path."""
    if active_path() != "numba":
        return None
    return _load()


def over_host_memory(library) -> bool:
    """Whether the numpy path's kernels compute on arrays of array library ``library`` (a ``numerics.arrays``
    library) over the arrays' own memory: they are in host memory and the compiled kernels are active. On the CPU
    that is faster than the library's own roundings and small-K products, and gives numpy's bits."""
    return library.on_host and jit() is not None


_SIGN, _INF_BITS, _QUIET_NAN = 0x80000000, 0x7F800000, 0x7FC00000


@functools.lru_cache(maxsize=None)
def _params(rounding) -> tuple:
    """The compiled kernels' arguments for a float32 ``formats._NearestRounding``: its constants, and its overflow
    handling as bit masks (see ``_jit._round``)."""
    low, high, offset, _zero_bits, _limit, limit_bits = rounding.constants
    mode, has_inf = rounding.overflow, rounding.info.has_inf
    if mode == "unbounded":  # no clamp of the exponent from above, nothing replaced
        high, limit_bits = 0xFFFFFFFF, _INF_BITS
    over_sign, over_base = (_SIGN, int(limit_bits)) if mode == "sat" else (0, _QUIET_NAN)
    u32 = np.uint32
    return (u32(low), u32(high), u32(offset), u32(_SIGN if has_inf and rounding.signed_zero else 0), u32(limit_bits),
            u32(over_sign), u32(over_base), bool(not has_inf and mode != "unbounded"), bool(mode == "nan"))


def binary_round_span(kernels, op: str, a: np.ndarray, b: np.ndarray, out: np.ndarray, outer: int, mid: int,
                      inner: int, b_full: bool, rounding) -> None:
    """``out = round(a op b)`` on flat C-contiguous float32 arrays, in this thread (see ``_jit.binary_round``).
    ``out`` is ``a`` itself or memory of neither operand (callers see to it)."""
    inplace = out.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    kernels.binary_round(a, b, out, np.int64(OPS[op]), np.int64(outer), np.int64(mid), np.int64(inner), bool(b_full),
                         inplace, *_params(rounding))


def accumulator(kernels, rounding):
    """``fn(acc, products)``: ``acc = round(acc + products[j])`` for each row j in order, in place, on a flat float32
    accumulator and a C-contiguous (blocks, acc.size) float32 array: the FP16 partials of a half-partials matmul
    (``rounding``: f16, no zero sign kept, overflow "sat" or "unbounded"), in this thread."""
    if rounding.info.name != "f16" or rounding.signed_zero or rounding.overflow not in ("sat", "unbounded"):
        raise ValueError(f"the partials accumulator takes f16 roundings without signed zero that saturate or are "
                         f"unbounded, got {rounding}")
    low, high, offset, _sign_keep, limit_bits = _params(rounding)[:5]
    args = (low, high, offset, limit_bits, rounding.overflow == "sat")
    accumulate = kernels.accumulate_f16
    return lambda acc, products: accumulate(acc, products, *args)


def max_magnitude(kernels, x: np.ndarray) -> float:
    """``max(|x|)`` of a C-contiguous float32 array in one compiled pass (NaN when x holds a NaN, 0 when empty)."""
    return float(kernels.max_magnitude(x.reshape(-1)))


def signed_error_sums(y: np.ndarray, exact: np.ndarray, low: float, high: float) -> tuple[float, float, int]:
    """With e = y - exact (float64) over the elements where ``y`` is finite and ``low <= |exact| <= high``: (sum of
    e * sign(exact), sum of e^2, count). One compiled pass for float32 arrays of one shape on the compiled path
    (float64 sums in 16 lanes, a function of the arrays alone); numpy otherwise (pairwise sums: the same up to the
    last bits)."""
    kernels = jit()
    if kernels is not None and y.dtype == np.float32 and exact.dtype == np.float32 and y.shape == exact.shape:
        signed, squares, count = kernels.signed_error_sums(np.ravel(y), np.ravel(exact), float(low), float(high))
        return float(signed), float(squares), int(count)
    y64, exact64 = np.asarray(y, np.float64), np.asarray(exact, np.float64)
    with np.errstate(invalid="ignore"):
        magnitude = np.abs(exact64)
        kept = np.isfinite(y64) & (magnitude >= low) & (magnitude <= high)
    e = (y64 - exact64)[kept]
    return float(np.sum(e * np.sign(exact64[kept]))), float(np.sum(e * e)), int(e.size)
