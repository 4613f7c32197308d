"""IPU number formats: IEEE binary16 (``"f16"``) and the two FP8 formats F143 and F152, bit-exact and vectorized.

Semantics (the IPU's, see the numerics facts in the project notes):

* ``"f16"``: IEEE binary16 with subnormals, max 65504, infinities and signed zero.
* ``"f143"``: 1 sign, 4 exponent, 3 mantissa bits, bias 8, max 240, min subnormal 2**-10.
* ``"f152"``: 1 sign, 5 exponent, 2 mantissa bits, bias 16, max 57344, min subnormal 2**-17.
  Both FP8 formats have no infinity, one NaN (code 0x80) and no negative zero (-0.0 and negative underflow give 0x00).
  They are the values of ml_dtypes ``float8_e4m3fnuz`` / ``float8_e5m2fnuz`` (P3109 binary8p4sf / binary8p3sf).
* Scaling (Poplar ``quarter`` metadata, FP8 only): a stored code ``q`` means the value ``d = q * 2**scale`` with
  ``scale`` an integer in [-32, 31]; storing ``d`` rounds ``d * 2**-scale``. Scaling is exact (exponent arithmetic).
* Rounding: ``"nearest"`` is one round-to-nearest-even of the exact input value (float64 inputs are not first rounded
  to float32). ``"stochastic"`` rounds to one of the two neighbouring grid values, up in magnitude with probability
  equal to the distance from the lower one in ulps, so ``E[quantize(x)] == x`` below the overflow threshold.
* Overflow is decided after rounding. ``overflow="sat"`` (the hardware default) turns finite results beyond the
  format's max into +-max; ``overflow="nan"`` (NaN-on-overflow: host conversion, IPU Model) turns them into NaN.
  +-Inf becomes NaN for FP8 in both modes and stays +-Inf for f16; NaN stays NaN.

Nothing here calls ml_dtypes or gfloat: those are the tests' oracles. Round-to-nearest works on the float bit pattern:
integer operations on the sign and exponent fields build, per element, a signed power of two ``C`` whose ulp is the
target grid spacing at that element's binade (clamped to the subnormal spacing below the smallest normal), and
``(x + C) - C`` is then one IEEE round-to-nearest-even onto the grid. The loop runs over cache-sized chunks with
preallocated buffers and in-place ufuncs.
"""

from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from boundedio import MAX_DIGITS, ascii_integer
from conformance.numerics import arrays, compiled, namespace
from conformance.numerics.format_table import FORMAT_NAMES, FP8_FORMATS, FormatInfo, format_info
from models import blas

OVERFLOW_MODES = ("sat", "nan")
ROUNDING_MODES = ("nearest", "stochastic")
SCALE_RANGE = (-32, 31)

# Elements per chunk of the rounding loop: 128K float32 (512 KiB) amortizes numpy's per-call overhead (about eight
# ufunc calls per chunk) while the chunk and its scratch stay in a core's L2/L3 cache.
_CHUNK = 1 << 17
# Elements per worker thread below which a compiled pass stays in one thread: the compiled loop rounds about ten times
# as fast as the numpy passes, so its parts can be that much smaller before a hand-off (some 20 us) costs more than
# the second core gives.
COMPILED_GRAIN = 1 << 17
_COMPILED_ALIGN = 1 << 10  # parts start on 4 KiB boundaries


def _check_scale(info: FormatInfo, scale) -> int:
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, np.integer)):
        raise ValueError(f"scale must be an integer in [{SCALE_RANGE[0]}, {SCALE_RANGE[1]}], got {scale!r}")
    scale = int(scale)
    if info.has_inf:
        if scale != 0:
            raise ValueError(
                f"scale applies to the FP8 formats (f143, f152) only; {info.name} needs scale=0, got {scale}")
    elif not SCALE_RANGE[0] <= scale <= SCALE_RANGE[1]:
        raise ValueError(f"scale must be an integer in [{SCALE_RANGE[0]}, {SCALE_RANGE[1]}], got {scale}")
    return scale


def check_choice(name: str, value, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of: {', '.join(allowed)}; got {value!r}")
    return value


def check_rng(rounding: str, rng):
    if rounding == "stochastic" and not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"rounding='stochastic' needs rng=a numpy Generator (np.random.default_rng(seed)), got {type(rng).__name__}"
        )
    return rng


def other_library():
    """The array library the roundings and kernels run on (:mod:`.arrays`), or None for numpy: numpy's kernel path
    (``kernel_path("numpy")``, the oracle) runs on numpy whatever library is selected."""
    library = arrays.active()
    return None if library.is_numpy or compiled.active_path() == "numpy" else library


def _as_float_array(x, what: str = "x") -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"{what} must be a float16, float32 or float64 array, got dtype {arr.dtype}")
    return arr


def _library_float(library, x, what: str = "x"):
    """``x``, an array of ``library``, checked to be float16, float32 or float64 (TypeError otherwise)."""
    xp = library.xp
    if x.dtype not in (xp.float16, xp.float32, xp.float64):
        raise TypeError(f"{what} must be a float16, float32 or float64 array, got dtype {x.dtype}")
    return x


@dataclass(frozen=True)
class _Container:
    """A binary float type the rounding runs in: float32 (float16 inputs are widened exactly) or float64."""

    float_dtype: type
    uint_dtype: type
    mantissa_bits: int
    exponent_bits: int

    @property
    def bias(self) -> int:
        return (1 << (self.exponent_bits - 1)) - 1

    def bits(self, value: int):
        return self.uint_dtype(value)

    @property
    def sign_mask(self):
        return self.bits(1 << (self.mantissa_bits + self.exponent_bits))

    @property
    def exponent_mask(self):
        return self.bits(((1 << self.exponent_bits) - 1) << self.mantissa_bits)

    @property
    def magnitude_mask(self):
        return self.bits((1 << (self.mantissa_bits + self.exponent_bits)) - 1)


_F32 = _Container(np.float32, np.uint32, 23, 8)
_F64 = _Container(np.float64, np.uint64, 52, 11)


class _Scratch(threading.local):
    """Per-thread scratch for the rounding loop, allocated once per thread (a hot loop would otherwise spend as long
    allocating as rounding): buffers of ``_CHUNK`` elements per container, and arrays filled with a constant (numpy's
    SIMD loops for maximum/minimum take array operands; a scalar second operand runs several times slower)."""

    def buffers(self, container: _Container) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cache = self.__dict__.setdefault("buffers_cache", {})
        hit = cache.get(container.float_dtype)
        if hit is None:
            hit = cache[container.float_dtype] = (np.empty(_CHUNK, container.uint_dtype),
                                                  np.empty(_CHUNK, container.uint_dtype), np.empty(_CHUNK, bool))
        return hit

    def filled(self, value) -> np.ndarray:
        cache = self.__dict__.setdefault("filled_cache", {})
        key = (value.dtype.str, int(value))
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = np.full(_CHUNK, value)
        return hit


_SCRATCH = _Scratch()


THREADS_VARIABLE = "CONFORMANCE_THREADS"


def worker_threads() -> int:
    """Threads the emulator's elementwise passes and half-partials kernels use: the cores this process may run on,
    at most 8. ``CONFORMANCE_THREADS`` overrides it (1 turns threading off, e.g. under pytest-xdist)."""
    value = os.environ.get(THREADS_VARIABLE, "")
    if value:
        try:
            return ascii_integer(value, 1, 10 ** MAX_DIGITS)
        except ValueError as exc:
            raise ValueError(f"{THREADS_VARIABLE} must be a positive integer: {exc}") from None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(8, cores))


@functools.lru_cache(maxsize=None)
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="conformance-numerics")


def in_worker() -> bool:
    """Whether this thread is one of the emulator's workers (which run their part in one thread: no nesting)."""
    return threading.current_thread().name.startswith("conformance-numerics")


def available_threads() -> int:
    """The threads a pass started in this thread may share out its work over: :func:`worker_threads`, or 1 in a
    worker."""
    return 1 if in_worker() else worker_threads()


blas.use_threads(available_threads)  # the models' FP32 products share the emulator's thread setting


def worker_pool(threads: int) -> ThreadPoolExecutor:
    """The shared pool of ``threads`` workers (threads named "conformance-numerics-...")."""
    return _pool(threads)


def run_split(n: int, piece, *, grain: int = 4 * _CHUNK, align: int = _CHUNK) -> None:
    """Run ``piece(start, stop)`` over ``range(n)`` cut into one contiguous part per worker thread, parts starting at
    multiples of ``align`` (in this thread
    when ``n`` is below two ``grain``s, threading is off, or the caller is a worker). numpy's loops release the GIL,
    so the parts run on the cores in parallel; ``piece`` must only write its own part. Small arrays stay in one
    thread: below about 1M elements the hand-off costs more than the second core gives."""
    threads = min(worker_threads(), n // grain)
    if threads <= 1 or in_worker():
        piece(0, n)
        return
    step = -(-n // threads)
    step = -(-step // align) * align  # parts on chunk boundaries
    if step >= n:
        piece(0, n)
        return
    futures = [_pool(threads).submit(piece, lo, min(n, lo + step)) for lo in range(0, n, step)]
    for future in futures:
        future.result()


@dataclass(frozen=True)
class _NearestRounding:
    """Round to nearest even onto the scaled grid of one format, on float32 or float64 values.

    Per element, C = 1.5 * 2**(E + p - m), where E is x's exponent clamped below to emin + scale (the subnormal grid),
    p the container's and m the format's mantissa bits: ulp(C) is the grid spacing at x and |x| < C / 2**(p - m - 1)
    keeps x + C in C's binade, so ``(x + C) - C`` is one IEEE round-to-nearest-even of x onto the grid (C's last
    significand bit is 0, so ties go to even). A chunk whose largest magnitude lies below the format's top binade (no
    result can overflow, no Inf or NaN) takes only these passes; other chunks also clamp E above and apply
    ``overflow``: "sat", "nan", or "unbounded" (the caller knows no value exceeds the max). Zero results get x's sign
    for f16 unless ``signed_zero=False`` (then +0, for the kernels' partials); FP8 has no -0. Two more passes keep the
    sign, only in chunks holding values below the smallest grid step (the only ones that can round to zero)."""

    info: FormatInfo
    scale: int
    overflow: str
    signed_zero: bool
    container: _Container

    @functools.cached_property
    def constants(self):
        c, info, scale = self.container, self.info, self.scale
        p, m = c.mantissa_bits, info.mantissa_bits
        limit = c.float_dtype(info.max_value * 2.0**scale)
        return (c.bits((info.emin + scale + c.bias) << p), c.bits((info.emax + scale + c.bias) << p),
                c.bits(((p - m) << p) | (1 << (p - 1))), c.bits((info.emin + scale - m + c.bias) << p), limit,
                limit.view(c.uint_dtype))

    def span(self, xs: np.ndarray, ys: np.ndarray) -> None:
        """Round flat ``xs`` into flat ``ys`` (same size; may be the same array), chunk by chunk, in this thread."""
        c, info, overflow = self.container, self.info, self.overflow
        low, high, offset, zero_bits, limit, limit_bits = self.constants
        sign_mask, magnitude_mask, inf_bits = c.sign_mask, c.magnitude_mask, c.exponent_mask
        keep_sign = info.has_inf and self.signed_zero
        unbounded = overflow == "unbounded"  # |x| <= max: E never exceeds emax, nothing to saturate
        const_buf, sign_buf, mask_buf = _SCRATCH.buffers(c)
        low_buf = _SCRATCH.filled(low)
        x_bits, y_bits = xs.view(c.uint_dtype), ys.view(c.uint_dtype)
        for start in range(0, xs.size, _CHUNK):
            stop = min(xs.size, start + _CHUNK)
            k = stop - start
            xb, xc, yc, yb = x_bits[start:stop], xs[start:stop], ys[start:stop], y_bits[start:stop]
            const, sign, mask = const_buf[:k], sign_buf[:k], mask_buf[:k]
            np.bitwise_and(xb, inf_bits, out=const)  # the exponent field
            in_range = unbounded or const.max(initial=0) < high
            zeros_possible = keep_sign and const.min(initial=0) < zero_bits
            if not in_range:
                np.minimum(const, high, out=const)
            np.maximum(const, low_buf[:k], out=const)
            np.add(const, offset, out=const)
            if zeros_possible:
                np.bitwise_and(xb, sign_mask, out=sign)
            cf = const.view(c.float_dtype)
            np.add(xc, cf, out=yc)  # +-Inf and NaN stay as they are (C is finite)
            np.subtract(yc, cf, out=yc)
            if zeros_possible:
                np.bitwise_or(yb, sign, out=yb)  # IEEE zero results keep x's sign; (x + C) - C gives +0
            if in_range:
                continue
            if overflow == "nan":
                np.bitwise_and(yb, magnitude_mask, out=const)
                np.greater(const, limit_bits, out=mask)  # finite overflow, +-Inf and NaN
                if info.has_inf:
                    mask &= const != inf_bits  # f16 keeps +-Inf
                if mask.any():
                    np.copyto(yc, np.nan, where=mask)
            elif overflow == "sat":
                np.isinf(yc, out=mask)
                infinite = mask.any()
                np.clip(yc, -limit, limit, out=yc)
                if infinite:  # f16 keeps +-Inf; FP8 has none: NaN
                    yc[mask] = np.copysign(np.inf, yc[mask]) if info.has_inf else np.nan


@functools.lru_cache(maxsize=None)
def nearest_rounding(fmt: str, scale: int, overflow: str, signed_zero: bool = True,
                     float_dtype: type = np.float32) -> _NearestRounding:
    """The (cached) rounding of ``fmt`` at ``scale`` for float32 or float64 values: see :class:`_NearestRounding`.
    ``overflow`` may also be "unbounded" (no value exceeds the max)."""
    return _NearestRounding(format_info(fmt), scale, overflow, signed_zero, _F64 if float_dtype == np.float64 else _F32)


def round_nearest_into(x: np.ndarray, out: np.ndarray, info: FormatInfo, scale: int, overflow: str,
                       signed_zero: bool = True) -> None:
    """RNE of contiguous float32/float64 ``x`` onto the scaled grid of ``info``, into ``out`` (may be ``x`` itself);
    see :class:`_NearestRounding`. Large arrays are split over the worker threads (:func:`run_split`)."""
    rounding = nearest_rounding(info.name, scale, overflow, signed_zero, x.dtype.type)
    xs, ys = x.reshape(-1), out.reshape(-1)
    kernels = compiled.jit() if x.dtype == np.float32 else None
    if kernels is not None:
        run_split(xs.size, lambda lo, hi: compiled.binary_round_span(
            kernels, "copy", xs[lo:hi], xs[lo:hi], ys[lo:hi], 1, 1, hi - lo, False, rounding),
            grain=COMPILED_GRAIN, align=_COMPILED_ALIGN)
        return

    def piece(lo: int, hi: int) -> None:
        with np.errstate(invalid="ignore"):  # signalling NaNs in x (errstate is per thread)
            rounding.span(xs[lo:hi], ys[lo:hi])

    run_split(xs.size, piece)


def _on_library_quantize(library, x, info: FormatInfo, scale: int, overflow: str):
    """:func:`namespace.quantize` on another array library, with this module's rounding for arrays in host memory."""
    return namespace.quantize(library, x, info, scale, overflow, host_rounding=round_nearest_into)


def _on_library_round_op(library, op: str, a, b, info: FormatInfo, scale: int, overflow: str, round_a: bool):
    """:func:`namespace.round_op` on another array library, with this module's rounding for arrays in host memory."""
    return namespace.round_op(library, op, a, b, info, scale, overflow, round_a, host_rounding=round_nearest_into)


def _round_stochastic(x: np.ndarray, info: FormatInfo, scale: int, overflow: str,
                      rng: np.random.Generator) -> np.ndarray:
    """Stochastic rounding of ``x`` (any float dtype) in float64: the value on the grid of each element's binade is
    ``floor(|x| / ulp) * ulp`` or one ulp more, the latter with probability ``frac(|x| / ulp)`` (one uniform draw per
    element, in C order, so a fixed Generator state reproduces the result)."""
    flat = x.reshape(-1)
    n = flat.size
    out = np.empty(n, np.float32)
    m = info.mantissa_bits
    emin, emax = info.emin + scale, info.emax + scale
    limit = info.max_value * 2.0**scale
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        xd = flat[start:stop].astype(np.float64)
        a = np.abs(xd)
        exponent = (a.view(np.uint64) >> np.uint64(52)).astype(np.int64) - 1023
        ulp_exp = np.clip(exponent, emin, emax + 1) - m
        t = np.ldexp(a, -ulp_exp)
        lower = np.floor(t)
        with np.errstate(invalid="ignore"):
            frac = t - lower  # NaN for +-Inf: never rounds up, stays Inf
        lower += rng.random(stop - start) < frac
        y = np.ldexp(lower, ulp_exp)
        over = (y > limit) & np.isfinite(a)
        y[over] = limit if overflow == "sat" else np.nan
        if not info.has_inf:
            y[np.isinf(a)] = np.nan
        np.copysign(y, xd, out=y)
        if not info.has_inf:
            y += 0.0  # no negative zero in FP8: -0.0 + 0.0 == +0.0
        out[start:stop] = y
    return out.reshape(x.shape)


def quantize(x, fmt: str, *, scale: int = 0, overflow: str = "sat", rounding: str = "nearest", rng=None) -> np.ndarray:
    """The float32 values the IPU holds after storing ``x`` in ``fmt``: ``decode(encode(x, ...), fmt, scale=scale)``.

    ``x``: float16, float32 or float64 array (or scalar); other dtypes raise TypeError. float64 is rounded once,
    directly. ``scale``: FP8 only, d = q * 2**scale. ``overflow``: ``"sat"`` (+-max) or ``"nan"``. ``rounding``:
    ``"nearest"`` (ties to even) or ``"stochastic"`` with ``rng`` a numpy Generator. See the module docstring for
    infinities, NaN and signed zero.
    """
    info = format_info(fmt)
    scale = _check_scale(info, scale)
    check_choice("overflow", overflow, OVERFLOW_MODES)
    check_choice("rounding", rounding, ROUNDING_MODES)
    check_rng(rounding, rng)
    given = arrays.library_of(x)
    if given is not None:  # an array of another library: computed on its device, returned there
        x = _library_float(given, x)
        if rounding == "stochastic" or x.dtype == given.xp.float64:  # drawn / rounded once on numpy
            return given.asarray(quantize(given.to_numpy(x), fmt, scale=scale, overflow=overflow, rounding=rounding,
                                          rng=rng))
        return _on_library_quantize(given, given.xp.astype(x, given.xp.float32, copy=False), info, scale, overflow)
    arr = _as_float_array(x)
    if rounding == "stochastic":
        return _round_stochastic(arr, info, scale, overflow, rng)
    library = other_library()
    if library is not None and arr.dtype != np.float64:  # float64 is rounded once, on numpy
        return library.to_numpy(_on_library_quantize(library, library.asarray(np.asarray(arr, np.float32)), info,
                                                     scale, overflow))
    if arr.dtype == np.float64:
        work = np.asarray(arr, order="C")
        rounded = np.empty_like(work)
        round_nearest_into(work, rounded, info, scale, overflow)
        return rounded.astype(np.float32)
    work = np.asarray(arr, dtype=np.float32, order="C")
    out = np.empty(work.shape, np.float32)
    round_nearest_into(work, out, info, scale, overflow)
    return out


def round_inplace(y: np.ndarray, fmt: str, *, scale: int = 0, overflow: str = "sat", rounding: str = "nearest",
                  rng=None) -> np.ndarray:
    """:func:`quantize` of a C-contiguous float32 array written over it (no output allocation); returns ``y``."""
    info = format_info(fmt)
    scale = _check_scale(info, scale)
    check_choice("overflow", overflow, OVERFLOW_MODES)
    check_choice("rounding", rounding, ROUNDING_MODES)
    check_rng(rounding, rng)
    given = arrays.library_of(y)
    if given is not None:  # an array of another library: rounded on its device
        if y.dtype != given.xp.float32:
            raise TypeError(f"round_inplace needs a float32 array, got {y.dtype}")
        y[...] = quantize(y, fmt, scale=scale, overflow=overflow, rounding=rounding, rng=rng)
        return y
    if not isinstance(y, np.ndarray) or y.dtype != np.float32 or not y.flags.c_contiguous or not y.flags.writeable:
        raise TypeError(f"round_inplace needs a writeable C-contiguous float32 numpy array, got {type(y).__name__}"
                        f" {getattr(y, 'dtype', '')}")
    library = other_library()
    if rounding == "stochastic":
        y[...] = _round_stochastic(y, info, scale, overflow, rng)
    elif library is not None:
        y[...] = library.to_numpy(_on_library_quantize(library, library.asarray(y), info, scale, overflow))
    else:
        round_nearest_into(y, y, info, scale, overflow)
    return y


_NUMPY_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


def _single_axis_broadcast(shape: tuple, b_shape: tuple) -> tuple[int, int, int] | None:
    """(outer, mid, inner) when ``b_shape`` broadcasts to ``shape`` along every axis but at most one, on which it has
    ``shape``'s size (a bias per row, per channel, or one value per softmax row); None otherwise."""
    if len(b_shape) > len(shape):
        return None
    padded = (1,) * (len(shape) - len(b_shape)) + tuple(b_shape)
    kept = [axis for axis, (size, b_size) in enumerate(zip(shape, padded)) if b_size != 1]
    if any(padded[axis] != shape[axis] for axis in kept) or len(kept) > 1:
        return None
    if not kept:
        return 1, 1, int(np.prod(shape, dtype=np.int64))
    axis = kept[0]
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(shape[axis]),
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


def round_op(op: str, a, b, fmt: str = "f16", *, scale: int = 0, overflow: str = "sat", out=None,
             round_a: bool = False) -> np.ndarray:
    """``quantize(a op b)`` with ``op`` computed in float32 (``np.add(a, b, dtype=np.float32)`` etc.) and rounded to
    nearest even onto ``fmt``'s grid in the same pass on the compiled path. ``op``: "add", "sub", "mul" or "div";
    numpy broadcasting. ``out``: a writeable C-contiguous float32 array of the result's shape to write into (may be
    ``a``); a new array otherwise. ``round_a`` (with "add"): ``a`` is first put on the same grid, ``quantize(quantize(a)
    + b)`` (a matmul's FP32 result rounded to FP16, then its bias added), in the same pass. The numpy path (and any
    operands the compiled loop does not take: other dtypes, non-contiguous, broadcasting along more than one axis of
    ``b`` or any of ``a``) computes the op with numpy and rounds it in place: the same bits."""
    info = format_info(fmt)
    scale = _check_scale(info, scale)
    check_choice("overflow", overflow, OVERFLOW_MODES)
    check_choice("op", op, tuple(_NUMPY_OPS))
    if round_a and op != "add":
        raise ValueError(f"round_op: round_a=True is for op 'add' (a matmul's result plus its bias), got op {op!r}")
    given = arrays.library_of(a) or arrays.library_of(b)
    if given is not None:
        return _round_op_on(given, op, a, b, fmt, info, scale, overflow, out, round_a)
    a, b = np.asarray(a), np.asarray(b)
    for what, arr in (("a", a), ("b", b)):
        if arr.dtype not in (np.float16, np.float32, np.float64):
            raise TypeError(f"round_op operand {what} must be a float16, float32 or float64 array, got dtype {arr.dtype}")
    shape = np.broadcast_shapes(a.shape, b.shape)
    if out is not None and (not isinstance(out, np.ndarray) or out.dtype != np.float32 or not out.flags.c_contiguous
                            or not out.flags.writeable or out.shape != shape):
        raise TypeError(f"round_op out must be a writeable C-contiguous float32 array of shape {shape}, got "
                        f"{type(out).__name__} {getattr(out, 'dtype', '')} {getattr(out, 'shape', '')}")
    library = other_library()
    if library is not None and a.dtype != np.float64 and b.dtype != np.float64:
        y = library.to_numpy(_on_library_round_op(library, op, library.asarray(a.astype(np.float32, copy=False)),
                                                  library.asarray(b.astype(np.float32, copy=False)), info, scale,
                                                  overflow, round_a))
        if out is None:
            return y
        out[...] = y
        return out
    return _round_op_numpy(op, a, b, info, scale, overflow, out, round_a)


def _round_op_numpy(op: str, a: np.ndarray, b: np.ndarray, info: FormatInfo, scale: int, overflow: str, out,
                    round_a: bool) -> np.ndarray:
    """:func:`round_op` of checked numpy operands on the numpy path: one compiled pass where the compiled loop takes
    the operands, otherwise the op with numpy and the rounding in place."""
    fmt = info.name
    shape = np.broadcast_shapes(a.shape, b.shape)
    kernels = compiled.jit()
    split = None
    overlap = out is not None and ((out is not a and np.shares_memory(out, a)) or np.shares_memory(out, b))
    if (kernels is not None and a.dtype == np.float32 and b.dtype == np.float32 and a.shape == shape
            and a.flags.c_contiguous and b.flags.c_contiguous and not overlap):
        split = (0, 0, 0) if b.shape == shape else _single_axis_broadcast(shape, b.shape)
    if split is None:
        if round_a:
            a = quantize(a, fmt, scale=scale, overflow=overflow)
        if out is None:  # C order, whatever the operands' layouts: the rounding pass below works on it in place
            out = np.empty(shape, np.float32)
        y = np.asarray(_NUMPY_OPS[op](a, b, dtype=np.float32, out=out))
        if y.size:
            round_nearest_into(y, y, info, scale, overflow)
        return y
    y = np.empty(shape, np.float32) if out is None else out
    if y.size == 0:
        return y
    rounding = nearest_rounding(info.name, scale, overflow)
    af, bf, yf = a.reshape(-1), b.reshape(-1), y.reshape(-1)
    if round_a:
        op = "round_add"
    if split == (0, 0, 0):
        run_split(yf.size, lambda lo, hi: compiled.binary_round_span(
            kernels, op, af[lo:hi], bf[lo:hi], yf[lo:hi], 1, 1, hi - lo, True, rounding),
            grain=COMPILED_GRAIN, align=_COMPILED_ALIGN)
        return y
    outer, mid, inner = split
    if outer > 1:  # parts of whole outer rows
        row = mid * inner
        run_split(outer, lambda lo, hi: compiled.binary_round_span(
            kernels, op, af[lo * row:hi * row], bf, yf[lo * row:hi * row], hi - lo, mid, inner, False, rounding),
            grain=max(1, COMPILED_GRAIN // row), align=1)
    else:  # parts of the broadcast axis, with their part of b
        run_split(mid, lambda lo, hi: compiled.binary_round_span(
            kernels, op, af[lo * inner:hi * inner], bf[lo:hi], yf[lo * inner:hi * inner], 1, hi - lo, inner, False,
            rounding), grain=max(1, COMPILED_GRAIN // max(1, inner)), align=1)
    return y


def _round_op_on(library, op: str, a, b, fmt: str, info: FormatInfo, scale: int, overflow: str, out, round_a: bool):
    """:func:`round_op` of operands one of which (at least) is an array of ``library``: computed on its device (a numpy
    operand, such as a scalar, moved there), the result an array of ``library``."""
    xp = library.xp
    if round_a and isinstance(a, float):
        raise TypeError("round_op: round_a=True needs an array a")
    if compiled.over_host_memory(library):  # the numpy path's single pass over the arrays' memory
        a, b = (np.float32(v) if isinstance(v, float) else library.host_strided_view(_library_float(
            library, v if arrays.library_of(v) is not None else library.asarray(np.asarray(v)),
            f"round_op operand {what}")) for what, v in (("a", a), ("b", b)))
        y = library.wrap_host(_round_op_numpy(op, a, b, info, scale, overflow, None, round_a))
        return y if out is None else _write(out, y, xp)
    if isinstance(a, float) or isinstance(b, float):  # a Python float beside the array: a float32 operand, not moved
        a, b = (v if isinstance(v, float) else xp.astype(_library_float(library, v, f"round_op operand {what}"),
                                                         xp.float32, copy=False) for what, v in (("a", a), ("b", b)))
        y = _on_library_round_op(library, op, a, b, info, scale, overflow, round_a)
        return y if out is None else _write(out, y, xp)
    a, b = (_library_float(library, v if arrays.library_of(v) is not None else library.asarray(np.asarray(v)),
                           f"round_op operand {what}") for what, v in (("a", a), ("b", b)))
    if a.dtype == xp.float64 or b.dtype == xp.float64:  # rounded once, on numpy
        y = library.asarray(round_op(op, library.to_numpy(a), library.to_numpy(b), fmt, scale=scale,
                                     overflow=overflow, round_a=round_a))
    else:
        y = _on_library_round_op(library, op, xp.astype(a, xp.float32, copy=False),
                                 xp.astype(b, xp.float32, copy=False), info, scale, overflow, round_a)
    return y if out is None else _write(out, y, xp)


def _write(out, y, xp):
    """``y`` written into ``out`` (an array of its library, float32, of its shape)."""
    if tuple(out.shape) != tuple(y.shape) or out.dtype != xp.float32:
        raise TypeError(f"round_op out must be a float32 array of shape {tuple(y.shape)}, got {out.dtype} "
                        f"{tuple(out.shape)}")
    out[...] = y
    return out


def _codes_from_values(y: np.ndarray, info: FormatInfo, scale: int) -> np.ndarray:
    """Codes of float32 values already on the (scaled) grid, from their bit patterns: multiplying by
    2**(bias - 127) lines the float32 exponent field up with the format's (its subnormals become float32 subnormals,
    exactly), so the code's magnitude is the float32 pattern shifted right by 23 - mantissa bits."""
    shape, y = y.shape, y.reshape(-1)
    m = info.mantissa_bits
    magnitude = np.abs(y) * np.float32(2.0**-scale)
    magnitude *= np.float32(2.0 ** (info.bias - 127))
    codes = (magnitude.view(np.uint32) >> np.uint32(23 - m)).astype(info.code_dtype)
    sign_bit = info.code_bits - 1
    negative = np.signbit(y)
    nan = np.isnan(y)
    if info.has_inf:
        codes[np.isinf(y)] = (1 << sign_bit) - (1 << m)  # exponent all ones, mantissa 0
        codes[nan] = (1 << sign_bit) - (1 << (m - 1))  # quiet NaN
        codes |= (negative.astype(info.code_dtype) << sign_bit).astype(info.code_dtype)
    else:
        codes |= ((negative & (codes != 0)).astype(info.code_dtype) << sign_bit).astype(info.code_dtype)
        codes[nan] = 1 << sign_bit
    return codes.reshape(shape)


def encode(x, fmt: str, *, scale: int = 0, overflow: str = "sat", rounding: str = "nearest", rng=None) -> np.ndarray:
    """Codes of ``x`` stored in ``fmt``: uint8 for FP8 (NaN is 0x80), uint16 for f16 (NaN is 0x7E00 with x's sign).
    Arguments as :func:`quantize`."""
    info = format_info(fmt)
    y = quantize(x, fmt, scale=scale, overflow=overflow, rounding=rounding, rng=rng)
    return _codes_from_values(y, info, int(scale))


@functools.lru_cache(maxsize=None)
def _decode_table(fmt: str, scale: int) -> np.ndarray:
    """float32 value of every code, from the bit fields: subnormal ``f * 2**(emin - m)``, normal
    ``(1 + f / 2**m) * 2**(e - bias)``, times ``2**scale``."""
    info = format_info(fmt)
    m, sign_bit = info.mantissa_bits, info.code_bits - 1
    codes = np.arange(1 << info.code_bits, dtype=np.int64)
    exponent_field = (codes >> m) & ((1 << info.exponent_bits) - 1)
    fraction = (codes & ((1 << m) - 1)).astype(np.float64)
    magnitude = np.where(
        exponent_field == 0,
        np.ldexp(fraction, info.emin - m),
        np.ldexp(1.0 + fraction / (1 << m), exponent_field - info.bias),
    )
    if info.has_inf:
        top = exponent_field == (1 << info.exponent_bits) - 1
        magnitude[top] = np.where(fraction[top] == 0, np.inf, np.nan)
    values = np.where((codes >> sign_bit) & 1, -magnitude, magnitude) * 2.0**scale
    if not info.has_inf:
        values[1 << sign_bit] = np.nan
    table = values.astype(np.float32)
    table.flags.writeable = False
    return table


def decode(codes, fmt: str, *, scale: int = 0) -> np.ndarray:
    """float32 values of ``codes`` (integer array; uint8 for FP8, uint16 for f16) in ``fmt``: d = q * 2**scale."""
    info = format_info(fmt)
    scale = _check_scale(info, scale)
    arr = np.asarray(codes)
    if arr.dtype.kind not in "ui":
        expected = np.dtype(info.code_dtype).name
        raise TypeError(f"codes must be an integer array ({expected} for {fmt}), got dtype {arr.dtype}")
    if arr.dtype.itemsize * 8 > info.code_bits and arr.size:
        low, high = int(arr.min()), int(arr.max())
        if low < 0 or high >= 1 << info.code_bits:
            raise ValueError(f"{fmt} codes must lie in [0, {(1 << info.code_bits) - 1}], got values in [{low}, {high}]")
    return np.take(_decode_table(info.name, scale), arr.astype(np.intp, copy=False))
