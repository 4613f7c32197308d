"""The numba kernels of the compiled path (loaded by :mod:`conformance.numerics.compiled` when first used).

One loop per call, one rounding per element, fused into the pass that computes the value: the same float32
arithmetic and bit operations as :class:`conformance.numerics.formats._NearestRounding` (the numpy oracle), applied
element by element instead of pass by pass, so the results are bit-identical (tested on the oracle's hard value sets).
Division follows IEEE (``error_model="numpy"``: x / 0 is +-Inf or NaN, as in numpy). The functions hold no GIL
(``nogil``): the callers split large arrays over their worker threads. Compiled code is cached on disk
(``cache=True``) next to this file.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

# op codes of :func:`binary_round` (ROUND_ADD: a rounded onto the grid first, then added)
COPY, ADD, SUB, MUL, DIV, ROUND_ADD = 0, 1, 2, 3, 4, 5
_EXPONENT = np.uint32(0x7F800000)
_SIGN = np.uint32(0x80000000)
_MAGNITUDE = np.uint32(0x7FFFFFFF)
_QUIET_NAN = np.uint32(0x7FC00000)  # numpy's float32(np.nan)
# Elements a stretch of the multi-pass loops covers (:func:`accumulate_f16`, ROUND_ADD): it stays in the L1 cache
# between the passes.
_STRETCH = 2048


@intrinsic
def _bits(typingctx, value):
    """The bit pattern of a float32 (a register bitcast)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.uint32))

    return types.uint32(types.float32), codegen


@intrinsic
def _float(typingctx, bits):
    """The float32 with bit pattern ``bits``."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))

    return types.float32(types.uint32), codegen


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _round(v, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan, nan_canonical):
    """RNE of float32 ``v`` onto the grid, without branches: C = clamp(exponent field, low, high) + offset as a
    float, (v + C) - C; zero results keep v's sign where ``sign_keep`` is the sign mask; then overflow as the numpy
    oracle applies it: a finite |y| beyond ``limit_bits`` becomes ``(sign & over_sign) | over_base`` (+-max, or NaN),
    +-Inf NaN where ``inf_nan``, NaN the quiet NaN where ``nan_canonical``."""
    b = _bits(v)
    e = max(min(b & _EXPONENT, high), low)
    c = _float(e + offset)
    yb = _bits((v + c) - c) | (b & sign_keep)
    magnitude = yb & _MAGNITUDE
    over = (magnitude > limit_bits) & (magnitude < _EXPONENT)
    yb = ((yb & over_sign) | over_base) if over else yb
    yb = _QUIET_NAN if ((magnitude == _EXPONENT) & inf_nan) | ((magnitude > _EXPONENT) & nan_canonical) else yb
    return _float(yb)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _vector(op, a, b, out, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan, nan_canonical):
    """out[i] = round(a[i] op b[i]); one loop per op, so that each is straight-line code the compiler vectorizes."""
    n = out.size
    if op == ADD:
        for i in range(n):
            out[i] = _round(a[i] + b[i], low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    elif op == SUB:
        for i in range(n):
            out[i] = _round(a[i] - b[i], low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    elif op == MUL:
        for i in range(n):
            out[i] = _round(a[i] * b[i], low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    elif op == DIV:
        for i in range(n):
            out[i] = _round(a[i] / b[i], low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    else:
        for i in range(n):
            out[i] = _round(a[i], low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _scalar(op, a, s, out, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan, nan_canonical):
    """out[i] = round(a[i] op s) for one float32 ``s``."""
    n = out.size
    if op == ADD:
        for i in range(n):
            out[i] = _round(a[i] + s, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    elif op == SUB:
        for i in range(n):
            out[i] = _round(a[i] - s, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    elif op == MUL:
        for i in range(n):
            out[i] = _round(a[i] * s, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    else:
        for i in range(n):
            out[i] = _round(a[i] / s, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _vector_inplace(op, out, b, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                    nan_canonical):
    """out[i] = round(out[i] op b[i]): two arrays, so that the compiler's overlap check lets it vectorize."""
    n = out.size
    if op == ADD:
        for i in range(n):
            out[i] = _round(out[i] + b[i], low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    elif op == SUB:
        for i in range(n):
            out[i] = _round(out[i] - b[i], low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    elif op == MUL:
        for i in range(n):
            out[i] = _round(out[i] * b[i], low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    elif op == DIV:
        for i in range(n):
            out[i] = _round(out[i] / b[i], low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    else:
        for i in range(n):
            out[i] = _round(out[i], low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _scalar_inplace(op, out, s, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                    nan_canonical):
    """out[i] = round(out[i] op s) for one float32 ``s``."""
    n = out.size
    if op == ADD:
        for i in range(n):
            out[i] = _round(out[i] + s, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    elif op == SUB:
        for i in range(n):
            out[i] = _round(out[i] - s, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    elif op == MUL:
        for i in range(n):
            out[i] = _round(out[i] * s, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
    else:
        for i in range(n):
            out[i] = _round(out[i] / s, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _round_then_add(a, b, out, outer, mid, inner, b_full, inplace, low, high, offset, sign_keep, limit_bits,
                    over_sign, over_base, inf_nan, nan_canonical):
    """``out = round(round(a) + b)``, stretch by stretch: each stretch of ``out`` is rounded from ``a`` and then has
    b added and rounded while it is in the L1 cache (two simple loops vectorize; one loop of both roundings does
    not)."""
    row = mid * inner
    for o in range(outer):
        for start in range(0, row, _STRETCH):
            stop = min(row, start + _STRETCH)
            lo, hi = o * row + start, o * row + stop
            part = out[lo:hi]
            if inplace:
                _vector_inplace(COPY, part, part, low, high, offset, sign_keep, limit_bits, over_sign, over_base,
                                inf_nan, nan_canonical)
            else:
                _vector(COPY, a[lo:hi], a[lo:hi], part, low, high, offset, sign_keep, limit_bits, over_sign,
                        over_base, inf_nan, nan_canonical)
            if b_full:
                _vector_inplace(ADD, part, b[lo:hi], low, high, offset, sign_keep, limit_bits, over_sign, over_base,
                                inf_nan, nan_canonical)
            elif inner == 1:  # b along the row
                _vector_inplace(ADD, part, b[start:stop], low, high, offset, sign_keep, limit_bits, over_sign,
                                over_base, inf_nan, nan_canonical)
            else:  # one b value per run of ``inner``
                for k in range(start // inner, (stop - 1) // inner + 1):
                    first, last = max(start, k * inner), min(stop, (k + 1) * inner)
                    _scalar_inplace(ADD, out[o * row + first:o * row + last], b[k], low, high, offset, sign_keep,
                                    limit_bits, over_sign, over_base, inf_nan, nan_canonical)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def binary_round(a, b, out, op, outer, mid, inner, b_full, inplace, low, high, offset, sign_keep, limit_bits,
                 over_sign, over_base, inf_nan, nan_canonical):
    """``out = round(a op b)`` over flat float32 arrays of ``outer * mid * inner`` elements. ``b_full``: b has a's
    size; else b has ``mid`` elements, broadcast along the outer and inner axes (a bias per row or per channel).
    ``op`` COPY ignores b (a plain rounding); ROUND_ADD rounds a first. ``inplace``: ``out`` is ``a`` (a loop over a
    distinct ``a`` and ``out`` that are the same memory would not be vectorized)."""
    if op == ROUND_ADD:
        _round_then_add(a, b, out, outer, mid, inner, b_full, inplace, low, high, offset, sign_keep, limit_bits,
                        over_sign, over_base, inf_nan, nan_canonical)
        return
    if inplace:
        if b_full or op == COPY:
            _vector_inplace(op, out, b, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                            nan_canonical)
        elif inner == 1:
            for o in range(outer):
                _vector_inplace(op, out[o * mid:(o + 1) * mid], b, low, high, offset, sign_keep, limit_bits,
                                over_sign, over_base, inf_nan, nan_canonical)
        else:
            for o in range(outer):
                for k in range(mid):
                    base = (o * mid + k) * inner
                    _scalar_inplace(op, out[base:base + inner], b[k], low, high, offset, sign_keep, limit_bits,
                                    over_sign, over_base, inf_nan, nan_canonical)
        return
    if b_full or op == COPY:
        _vector(op, a, b, out, low, high, offset, sign_keep, limit_bits, over_sign, over_base, inf_nan,
                nan_canonical)
        return
    if inner == 1:  # b along the rows' contiguous axis
        for o in range(outer):
            base = o * mid
            _vector(op, a[base:base + mid], b, out[base:base + mid], low, high, offset, sign_keep, limit_bits,
                    over_sign, over_base, inf_nan, nan_canonical)
        return
    for o in range(outer):
        for k in range(mid):
            base = (o * mid + k) * inner
            _scalar(op, a[base:base + inner], b[k], out[base:base + inner], low, high, offset, sign_keep, limit_bits,
                    over_sign, over_base, inf_nan, nan_canonical)




@numba.njit(cache=True, nogil=True, error_model="numpy")
def _accumulate_saturating(acc, row, low, high, offset, limit_bits):
    for i in range(acc.size):
        v = acc[i] + row[i]
        c = _float(min(max(_bits(v) & _EXPONENT, low), high) + offset)
        y = (v + c) - c
        yb = _bits(y)
        magnitude = np.int32(yb & _MAGNITUDE)  # below 2**31: a signed compare, which vectorizes better
        over = (magnitude > np.int32(limit_bits)) & (magnitude < np.int32(_EXPONENT))
        acc[i] = _float((yb & _SIGN) | limit_bits) if over else y


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _accumulate_unbounded(acc, row, low, offset):
    for i in range(acc.size):
        v = acc[i] + row[i]
        c = _float(max(_bits(v) & _EXPONENT, low) + offset)
        acc[i] = (v + c) - c


@numba.njit(cache=True, nogil=True, error_model="numpy")
def accumulate_f16(acc, products, low, high, offset, limit_bits, saturate):
    """``acc = round_f16(acc + products[j])`` for j = 0, 1, ... in order (the FP16 partials of a half-partials matmul,
    ``products`` (blocks, acc.size)): :func:`_round` with no zero sign kept, Inf and NaN as they come; the exponent
    clamped to [low, high], then, when ``saturate``, finite magnitudes beyond ``limit_bits`` become +-max. Without
    ``saturate`` (no partial can reach the max) the loop is the three float operations alone. The accumulator is
    taken in stretches that stay in cache while all rows are added."""
    n = acc.size
    for start in range(0, n, _STRETCH):
        stop = min(n, start + _STRETCH)
        part = acc[start:stop]
        for j in range(products.shape[0]):
            if saturate:
                _accumulate_saturating(part, products[j, start:stop], low, high, offset, limit_bits)
            else:
                _accumulate_unbounded(part, products[j, start:stop], low, offset)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def max_magnitude(x):
    """The largest |x[i]| of a flat float32 array as a float32 (NaN when x holds a NaN; 0 for an empty array): an
    integer maximum over the magnitude bits, one pass, no temporary."""
    top = np.uint32(0)
    for i in range(x.size):
        top = max(top, _bits(x[i]) & _MAGNITUDE)
    return _float(top)


_TRANSPOSE_TILE = 16


@numba.njit(cache=True, nogil=True)
def channels_first(src, dst, first, stop):
    """``dst[b, g, c, r] = src[g, b, r, c]`` for the samples b in [first, stop): a grouped conv's im2col matmul
    result (G, N, Ho*Wo, O/G) as NCHW (N, G, O/G, Ho*Wo), in square tiles that stay in cache."""
    groups, _, rows, cols = src.shape
    tile = _TRANSPOSE_TILE
    for b in range(first, stop):
        for g in range(groups):
            for r0 in range(0, rows, tile):
                r1 = min(rows, r0 + tile)
                for c0 in range(0, cols, tile):
                    c1 = min(cols, c0 + tile)
                    for c in range(c0, c1):
                        for r in range(r0, r1):
                            dst[b, g, c, r] = src[g, b, r, c]


# Lanes of signed_error_sums: element i is summed into lane i % _ERROR_LANES. One float64 chain per sum waited on
# the add before it (latency bound, 3-4 ns an element, up to 3x more where the kept elements branch unpredictably);
# 16 independent chains run at the speed of reading the arrays.
_ERROR_LANES = 16


@numba.njit(inline="always")
def _error_term(v, x, low, high):
    """signed_error_sums's terms of one element: (e * sign(x), e^2, 1) where it is kept, else zeros."""
    m = abs(x)
    keep = (m >= low) & (m <= high) & (abs(v) < np.inf)
    e = (v - x) if keep else 0.0
    return e * np.copysign(1.0, x), e * e, np.int64(keep)


@numba.njit(cache=True, nogil=True)
def signed_error_sums(y, exact, low, high):
    """Over the elements of flat float32 arrays where ``y`` is finite and ``low <= |exact| <= high`` (so finite and
    non-zero), with e = y - exact in float64: (sum of e * sign(exact), sum of e^2, their count). One pass, no
    temporaries, no branch on the data: each sum runs in :data:`_ERROR_LANES` float64 lanes added up in lane order
    at the end, so the result is a function of the arrays alone."""
    lanes = _ERROR_LANES
    signed = np.zeros(lanes)
    squares = np.zeros(lanes)
    counts = np.zeros(lanes, np.int64)
    n = y.size
    full = n - n % lanes
    for start in range(0, full, lanes):
        for j in range(lanes):  # a fixed count: the compiler keeps the lanes in vector registers
            s, q, c = _error_term(np.float64(y[start + j]), np.float64(exact[start + j]), low, high)
            signed[j] += s
            squares[j] += q
            counts[j] += c
    for j in range(n - full):
        s, q, c = _error_term(np.float64(y[full + j]), np.float64(exact[full + j]), low, high)
        signed[j] += s
        squares[j] += q
        counts[j] += c
    total_signed = 0.0
    total_squares = 0.0
    count = 0
    for j in range(lanes):
        total_signed += signed[j]
        total_squares += squares[j]
        count += counts[j]
    return total_signed, total_squares, count
