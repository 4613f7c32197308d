"""The emulator's roundings and matrix kernels on an array library other than numpy (:mod:`.arrays`), as batched
array API operations; the numpy functions of :mod:`.formats` and :mod:`.kernels` call these when such a library is
selected, with the same validated arguments, and they give the same bits.

* Rounding to nearest even: one cast to the library's narrow dtype of the format and back (its cast is RNE; FP8
  overflow and Inf give NaN, FP16 overflow Inf), around which the IPU's rules are applied: FP8 values are scaled by
  2**-scale first and 2**scale after (exact), ``"sat"`` clips the (scaled) value to +-max before the cast (every
  finite value beyond the max rounds to it, since RNE acts before the overflow test: the same result), FP8 Inf gives
  NaN, FP16 keeps +-Inf and its finite overflow gives +-65504 or NaN, and NaN inputs keep their payload.
* Half partials: the products of every block of K are one batched matmul, ``(blocks, batch, M, block) @ (blocks,
  batch, block, N)``, and the FP16 running sum over the blocks is a chain of array operations per block. The FP32 sum
  inside a block is the library's: its order may differ from numpy's BLAS, so results agree bit for bit where block
  sums are exact and otherwise within the FP32 accumulation bound of a block. (On the host, with the compiled
  kernels, :mod:`.kernels` runs the numpy path's kernel over the arrays' memory instead: numpy's bits.)
* conv2d: im2col in the same K order as the numpy path (kernel taps, input channels fastest), so the blocks hold the
  same products.
"""

from __future__ import annotations

from conformance.numerics import compiled

# Elements of block products one batched matmul writes: 1 MiB of float32 on the host (they stay in a core's cache
# until accumulated; a tile of 64 rows of a resnet50 conv measured 2.4x faster than all rows at once), 64 MiB on a GPU.
_HOST_PRODUCTS = 1 << 18
_DEVICE_PRODUCTS = 1 << 24


def quantize(library, x, info, scale: int, overflow: str, no_inf: bool = False, host_rounding=None):
    """RNE of float32 array ``x`` (of ``library``) onto the grid of format ``info`` (a ``formats.FormatInfo``) at
    ``scale``, float32 result. ``no_inf``: the caller knows ``x`` holds no +-Inf, so neither the check of its range
    nor the selections that keep infinite inputs run (a NaN in ``x`` then comes out as the quiet NaN, its payload not
    kept).

    ``host_rounding``: the numpy path's rounding (``formats.round_nearest_into``). On the host, with the compiled
    kernels, it rounds over the array's own memory (one pass, numpy's bits, NaN payloads included): torch's casts to
    its float8 dtypes on the CPU, and the checks around them, took about four times as long (resnet50's fp8 forward at
    batch 16: 1.1 s of its 6.1 s on torch:cpu)."""
    if host_rounding is not None and compiled.over_host_memory(library):
        x = library.contiguous(x)
        out = library.xp.empty_like(x)
        host_rounding(library.host_view(x), library.host_view(out), info, scale, overflow)
        return out
    xp = library.xp
    narrow = library.narrow_dtype(info.name)
    limit = float(info.max_value)
    # On the host, where no NaN, Inf or value beyond the max is present the cast alone does (one min-max pass first);
    # on a GPU that check would wait for the device on every call, so the whole rule set runs (the same bits)
    if library.on_host and not no_inf and _within(library, x, limit * 2.0 ** scale):
        if not scale:
            return xp.astype(xp.astype(x, narrow), xp.float32)
        return xp.astype(xp.astype(x * (2.0 ** -scale), narrow), xp.float32) * (2.0 ** scale)
    nan = xp.asarray(float("nan"), dtype=xp.float32)
    if info.has_inf:
        if overflow == "sat":  # every finite value beyond the max rounds to it
            y = xp.astype(xp.astype(xp.clip(x, -limit, limit), narrow), xp.float32)
        else:
            y = xp.astype(xp.astype(x, narrow), xp.float32)
            y = xp.where(xp.isinf(y), nan, y)  # finite overflow: Inf inputs are kept below
        if no_inf:
            return y
        return xp.where(xp.isfinite(x), y, x + 0.0)  # +-Inf stays, NaN keeps its payload (quieted, as on numpy)
    s = x * (2.0 ** -scale) if scale else x
    if overflow == "sat":
        s = xp.clip(s, -limit, limit)  # finite values beyond the max round to it; NaN stays NaN
    y = xp.astype(xp.astype(s, narrow), xp.float32)
    if scale:
        y = y * (2.0 ** scale)
    if overflow == "sat" and not no_inf:
        y = xp.where(xp.isinf(x), nan, y)  # clip made +-Inf +-max
    # the library's FP8 NaN widens to a signalling NaN: NaN inputs keep theirs (quieted), overflow gives a quiet NaN
    return xp.where(xp.isnan(y), xp.where(xp.isnan(x), x + 0.0, nan), y)


def _within(library, x, bound: float) -> bool:
    """Whether every element of ``x`` lies in [-bound, bound] (False when one is NaN): one pass of the library's
    min-max reduction (an empty array: True)."""
    low, high = library.extrema(x)
    return -bound <= low and high <= bound


_OPS = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide"}


def round_op(library, op: str, a, b, info, scale: int, overflow: str, round_a: bool, host_rounding=None):
    """``quantize(a op b)`` in float32 (``a`` first rounded when ``round_a``)."""
    xp = library.xp
    if round_a:
        a = quantize(library, a, info, scale, overflow, host_rounding=host_rounding)
    return quantize(library, getattr(xp, _OPS[op])(a, b), info, scale, overflow, host_rounding=host_rounding)


# |products| at most this keep every FP32 sum acc + product finite while |acc| is at most the FP16 max
_FINITE_PRODUCTS = 2.0 ** 127


def _accumulate(library, acc, products, partials) -> None:
    """``acc = round_f16(acc + products[j])`` for every j in order, in place: ``acc`` (size,) and ``products``
    (blocks, size), both contiguous float32 of ``library``; ``partials``: the numpy path's FP16 rounding of the
    partials (``formats.nearest_rounding("f16", 0, overflow, signed_zero=False)``).

    One chain of array operations per block. Where no product is beyond 2**127 and the accumulator holds no NaN, Inf
    or value beyond the FP16 max (checked once per call, two reductions), no sum is infinite, so each block's rounding
    skips the range check and the selections that keep infinite inputs (``quantize(..., no_inf=True)``); a NaN from
    an overflow then stays the quiet NaN."""
    info = partials.info
    no_inf = _within(library, products, _FINITE_PRODUCTS) and _within(library, acc, float(info.max_value))
    for j in range(products.shape[0]):
        acc[...] = quantize(library, acc + products[j, ...], info, 0, partials.overflow, no_inf=no_inf)


def matmul_half(library, a, b, block: int, partials):
    """(B, M, K) @ (B, K, N) float32 arrays of ``library`` with FP16 partials: for every block of K,
    acc = round_f16(acc + FP32 block sum), ``partials`` the rounding (see :func:`_accumulate`).

    The output is cut into tiles (stacks of batch elements, or rows of one). On the host a tile's block products, all
    blocks at once or a group of them, fill about ``_HOST_PRODUCTS`` elements (they stay in cache until accumulated;
    a loop over tiles, each one batched call per group of blocks). On a GPU the tile is as much of the output as
    ``_DEVICE_PRODUCTS`` elements hold (usually all of it) and its blocks are grouped to fill that budget: the
    accumulation's passes per block then run over the whole output, not once per tile of rows (which multiplied the
    passes by the number of tiles, itself growing with the blocks)."""
    xp = library.xp
    nbatch, m, k = a.shape
    n = b.shape[2]
    acc = xp.zeros((nbatch, m, n), dtype=xp.float32, device=_device(library, a))
    if nbatch * m * n == 0 or k == 0:
        return acc
    blocks = -(-k // block)
    if blocks * block != k:  # zero products added to a block sum leave it as it is
        pad = blocks * block - k
        a = xp.concat([a, xp.zeros((nbatch, m, pad), dtype=xp.float32, device=_device(library, a))], axis=2)
        b = xp.concat([b, xp.zeros((nbatch, pad, n), dtype=xp.float32, device=_device(library, b))], axis=1)
    if library.on_host:
        budget = _HOST_PRODUCTS
        per_row = blocks * n  # product elements of one output row, all blocks
    else:  # each block's pass over as much of the output as the budget holds, the blocks grouped within it
        budget = _DEVICE_PRODUCTS
        per_row = n
    if m * per_row <= budget:  # stacks of whole batch elements
        step = max(1, budget // (m * per_row))
        tiles = [(slice(b0, b0 + step), slice(0, m)) for b0 in range(0, nbatch, step)]
    else:  # rows of one batch element
        rows = max(1, budget // per_row)
        tiles = [(slice(bi, bi + 1), slice(r0, r0 + rows)) for bi in range(nbatch) for r0 in range(0, m, rows)]
    group = max(1, min(blocks, budget // max(1, _rows(tiles[0], m) * n)))  # blocks per batched call
    for batch_part, row_part in tiles:
        a_tile, b_tile, acc_tile = a[batch_part, row_part, :], b[batch_part, :, :], acc[batch_part, row_part, :]
        bt, mt = acc_tile.shape[0], acc_tile.shape[1]
        acc_flat = xp.reshape(acc_tile, (bt * mt * n,))  # a view: tiles are contiguous parts of acc
        for j0 in range(0, blocks, group):
            g = min(group, blocks - j0)
            a_blocks = xp.permute_dims(xp.reshape(a_tile[:, :, j0 * block:(j0 + g) * block], (bt, mt, g, block)),
                                       (2, 0, 1, 3))
            b_blocks = xp.permute_dims(xp.reshape(b_tile[:, j0 * block:(j0 + g) * block, :], (bt, g, block, n)),
                                       (1, 0, 2, 3))
            products = xp.reshape(xp.matmul(a_blocks, b_blocks), (g, bt * mt * n))
            _accumulate(library, acc_flat, products, partials)
    return acc


def _rows(tile, m: int) -> int:
    batch_part, row_part = tile
    return (batch_part.stop - batch_part.start) * (min(m, row_part.stop) - row_part.start)


def _device(library, x):
    from array_api_compat import device

    return device(x)


def im2col(library, x, kh: int, kw: int, stride, padding, dilation, groups: int):
    """Columns (G, N*Ho*Wo, kh*kw*Cg) of NCHW ``x``, K over kernel taps with input channels fastest (the numpy path's
    order), from a channels-last zero-padded copy; one stack of the taps' strided slices."""
    xp = library.xp
    n, c, h, wd = x.shape
    cg = c // groups
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    last = xp.permute_dims(x, (0, 2, 3, 1))
    if ph or pw:
        padded = xp.zeros((n, h + 2 * ph, wd + 2 * pw, c), dtype=xp.float32, device=_device(library, x))
        padded[:, ph:ph + h, pw:pw + wd, :] = last
    else:
        padded = last
    ho = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    wo = (wd + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    taps = [padded[:, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw, :]
            for i in range(kh) for j in range(kw)]
    cols = xp.stack(taps, axis=3)  # (N, Ho, Wo, kh*kw, C)
    cols = xp.permute_dims(xp.reshape(cols, (n, ho, wo, kh * kw, groups, cg)), (4, 0, 1, 2, 3, 5))
    return xp.reshape(cols, (groups, n * ho * wo, kh * kw * cg)), ho, wo


def conv2d_half(library, x, w, stride, padding, dilation, groups: int, block: int, partials):
    """NCHW conv2d with FP16 partials (the im2col matmul of :func:`matmul_half`), result rounded to FP16."""
    xp = library.xp
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    og = o // groups
    cols, ho, wo = im2col(library, x, kh, kw, stride, padding, dilation, groups)
    wmat = xp.reshape(xp.permute_dims(xp.reshape(w, (groups, og, cg, kh, kw)), (0, 3, 4, 2, 1)),
                      (groups, kh * kw * cg, og))
    y = matmul_half(library, cols, wmat, block, partials)  # (G, N*Ho*Wo, O/G)
    y = xp.permute_dims(xp.reshape(y, (groups, n, ho, wo, og)), (1, 0, 4, 2, 3))
    return xp.reshape(y, (n, o, ho, wo))

