"""IPU matrix-unit kernels: matmul and NCHW conv2d on operands already on an FP16 or FP8 grid, with the accumulator
("partials") of the IPU's AMP unit emulated.

* Products are exact: FP16 x FP16 and FP8 x FP8 products (scaled FP8 included) fit in FP32's 24-bit significand.
* ``partials="float"``: the sum runs in FP32 (numpy's sgemm; conv2d through the FP32 models' own convolution,
  ``models.ops.conv2d_fp32``; any FP32 summation order is within the same error bound).
* ``partials="half"``: K is cut into blocks of ``block``; each block's products are summed in FP32 and added in FP32 to
  the running FP16 partial, which is rounded back to FP16 after every block (nearest or stochastic, saturating).
  The hardware's block size and order are not public; this is a model (see ``DEFAULT_BLOCK``), compare with tolerances.
* Error of half partials (tested), while nothing saturates: with nb = ceil(K / block), u16 = 2**-11, u32 = 2**-24,
  ``|half - exact| <= ((1 + u16)**nb * (1 + u32)**(nb + block - 1) - 1) * (|a| @ |b|)
  + nb * 2**-25 * ((1 + u16) * (1 + u32))**nb``; the last term covers roundings into FP16's subnormal range. Float
  partials: ``|float - exact| <= K u32 / (1 - K u32) * (|a| @ |b|)`` before the final FP16 rounding.
* FP8 operands (``operand_format="f143"``/``"f152"``) force half partials and an FP16 result whatever ``partials`` and
  ``out_format`` say, as poplibs does for quarter inputs.
* The result is rounded to FP16 (``out_format="f16"``, the IPU's output type for half/quarter inputs) with
  ``overflow="sat"`` (+-65504, the hardware default) or ``"nan"``; ``out_format=None`` returns the FP32 accumulator
  (float partials and FP16 operands only).
* The scale of FP8 operands is already in their values (d = q * 2**scale): products and sums are of the values d, i.e.
  the scales are applied before accumulation (the order inside the AMP unit is not public).
"""

from __future__ import annotations

import threading

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from conformance.numerics import arrays, compiled, namespace
from conformance.numerics.formats import (
    COMPILED_GRAIN,
    quantize,
    FORMAT_NAMES,
    OVERFLOW_MODES,
    ROUNDING_MODES,
    available_threads,
    check_choice,
    check_rng,
    format_info,
    nearest_rounding,
    other_library,
    round_inplace,
    run_split,
    worker_pool,
)
from models import blas
from models.ops import as_pair, conv2d_fp32  # the FP32 convolution: float partials' fast layout

PARTIALS = ("float", "half")
OUT_FORMATS = ("f16", None)

# K elements summed in FP32 before the running partial is rounded to FP16, per operand format (the format table's)
DEFAULT_BLOCK = {name: format_info(name).partials_block for name in FORMAT_NAMES}

# Output elements per tile of the half-partials loop: the FP32 accumulator and the block product (2 x 512 KiB) stay
# in a core's L2 cache while all K blocks are summed into them.
_TILE = 1 << 18
_F16_MAX = 65504.0


def _float_operand(v, what: str) -> np.ndarray:
    arr = np.asarray(v)
    if arr.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(
            f"{what} must be a float16, float32 or float64 array on an FP16/FP8 grid, got dtype {arr.dtype}")
    return arr.astype(np.float32, copy=False)


def _settings(partials, operand_format, block, rounding, rng, out_format, overflow):
    """Validate the kernel options; returns (partials, block, out_format) after the FP8 rule is applied."""
    check_choice("operand_format", operand_format, FORMAT_NAMES)
    check_choice("partials", partials, PARTIALS)
    check_choice("rounding", rounding, ROUNDING_MODES)
    check_choice("overflow", overflow, OVERFLOW_MODES)
    if out_format not in OUT_FORMATS:
        raise ValueError(f"out_format must be 'f16' or None (FP32 accumulator), got {out_format!r}")
    check_rng(rounding, rng)
    if block is None:
        block = DEFAULT_BLOCK[operand_format]
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive integer (K elements per FP32 block sum), got {block!r}")
    if operand_format != "f16":
        partials, out_format = "half", "f16"
    elif partials == "half" and out_format is None:
        raise ValueError("out_format=None (FP32 result) needs partials='float'; half partials are FP16 by definition")
    return partials, int(block), out_format


def _max_magnitude(x: np.ndarray, fused) -> float:
    """max|x| (NaN when x holds one, 0 when empty): one compiled pass for contiguous float32 arrays on the compiled
    path, numpy's abs and max otherwise; for a convolution's :class:`_Columns` a bound on it, its input's."""
    if isinstance(x, _Columns):
        return x.max_magnitude(fused)
    if fused is not None and x.dtype == np.float32 and x.flags.c_contiguous:
        return compiled.max_magnitude(fused, x)
    with np.errstate(invalid="ignore"):
        return float(np.max(np.abs(x), initial=0.0))


def _saturation_possible(a: np.ndarray, b: np.ndarray, fused=None) -> bool:
    """Whether a partial sum can exceed the FP16 max: |sum| <= K * max|a| * max|b| bounds every partial."""
    bound = _max_magnitude(a, fused) * _max_magnitude(b, fused) * a.shape[-1]  # Python floats: Inf, never a warning
    return not bound < _F16_MAX


# BLAS limited to one thread while any thread is inside (the half-partials blocks are one single-threaded call each,
# their threads are the emulator's): one process-wide setting, kept by the models' products (models.blas)
single_threaded_blas = blas.single_threaded


# Block products a compiled accumulation pass takes at once (it reads and writes the accumulator once for all of them)
# and the float32 elements their buffer may hold per thread (4 MiB).
_BLOCKS_PER_PASS = 8
_PRODUCT_ELEMENTS = 1 << 20
# Multiply-adds of BLAS work below which a tile's blocks are not shared out over the worker threads (a hand-off
# between threads costs about as much as 2**19 multiply-adds on one core).
_PARALLEL_WORK = 1 << 19


class _ThreadBuffer(threading.local):
    """A float32 buffer of each thread, kept between calls (grown when a larger one is needed)."""

    def get(self, size: int) -> np.ndarray:
        buffer = self.__dict__.get("buffer")
        if buffer is None or buffer.size < size:
            buffer = self.buffer = np.empty(size, np.float32)
        return buffer


_PRODUCTS = _ThreadBuffer()  # each thread's block products


def _block_products(acc: np.ndarray, a_tile: np.ndarray, b_tile: np.ndarray, starts, block: int) -> np.ndarray:
    """The FP32 block sums ``a_tile[..., k0:k0 + block] @ b_tile[..., k0:k0 + block, :]`` for each ``k0`` in ``starts``
    as rows of this thread's product buffer, one BLAS call each (the same calls, and so the same bits, whatever the
    grouping): a (len(starts), acc.size) array."""
    products = _PRODUCTS.get(len(starts) * acc.size)[: len(starts) * acc.size].reshape(len(starts), acc.size)
    for row, k0 in zip(products, starts):
        np.matmul(a_tile[..., k0:k0 + block], b_tile[..., k0:k0 + block, :], out=row.reshape(acc.shape))
    return products


def _sum_blocks_shared(acc_flat: np.ndarray, groups: list, products_of, accumulate, threads: int) -> None:
    """The K block groups of one tile over ``threads`` threads: group i's products are computed by thread
    i % threads, in parallel, and added into the accumulator in group order (the rounding chain is sequential): a
    thread waits for its turn only to accumulate. This thread takes part as thread 0."""
    turn = {"next": 0, "failed": False}
    ready = threading.Condition()

    def work(thread: int) -> None:
        try:
            with np.errstate(over="ignore", invalid="ignore"):  # Inf/NaN operands propagate (errstate is per thread)
                for i in range(thread, len(groups), threads):
                    products = products_of(groups[i])
                    with ready:
                        while turn["next"] != i and not turn["failed"]:
                            ready.wait()
                        if turn["failed"]:
                            return
                    accumulate(acc_flat, products)  # only the holder of turn i writes the accumulator
                    with ready:
                        turn["next"] = i + 1
                        ready.notify_all()
        except BaseException:
            with ready:
                turn["failed"] = True
                ready.notify_all()
            raise

    futures = [worker_pool(threads).submit(work, thread) for thread in range(1, threads)]
    try:
        work(0)
    finally:
        for future in futures:
            future.result()


def _tile_balance(tiles: list, threads: int) -> float:
    """The share of the threads' time spent working when :func:`run_split` hands each thread a contiguous run of
    tiles (1.0: equal work; a single tile on two threads: 0.5)."""
    sizes = [tile[0].size for tile in tiles]
    step = -(-len(sizes) // threads)
    busiest = max(sum(sizes[i:i + step]) for i in range(0, len(sizes), step))
    return sum(sizes) / (threads * busiest)


class _Columns:
    """The im2col columns (G, N*Ho*Wo, kh*kw*Cg) of a convolution as :func:`_im2col` lays them out, gathered a tile of
    rows at a time from the zero-padded channels-last input when a tile's block products are computed, so that the
    columns of a tile are still in cache when its BLAS calls read them (the whole columns are kh*kw times the input).
    A tile's rows land in a buffer of this thread with the row stride K of the whole columns: the same BLAS calls on
    the same values, and so the same bits. ``view`` is the (G, N, Ho, Wo, kh, kw, Cg) view of ``padded``."""

    def __init__(self, padded: np.ndarray, view: np.ndarray):
        self.padded, self.view = padded, view
        groups, n, self.ho, self.wo = view.shape[:4]
        self.k = int(np.prod(view.shape[4:]))
        self.shape = (groups, n * self.ho * self.wo, self.k)

    def max_magnitude(self, fused) -> float:
        """max|x| over the padded input: at least max|columns| (every column value is one of its values), so a bound
        from it holds for the columns."""
        return _max_magnitude(self.padded, fused)

    def materialize(self) -> np.ndarray:
        """The whole columns, as :func:`_im2col` returns them."""
        return self.view.reshape(self.shape)

    def rows(self, group: int, r0: int, r1: int) -> np.ndarray:
        """Rows ``r0:r1`` of group ``group``'s columns, a (r1 - r0, K) array in this thread's buffer (valid until
        this thread's next call)."""
        out = _COLUMNS.get((r1 - r0) * self.k)[: (r1 - r0) * self.k].reshape(r1 - r0, self.k)
        view, ho, wo, taps = self.view[group], self.ho, self.wo, self.view.shape[4:]
        r = r0
        while r < r1:  # a partial line, whole lines of one sample, a partial line
            sample, pixel = divmod(r, ho * wo)
            h, w = divmod(pixel, wo)
            if w or r1 - r < wo:
                stop = min(r1, r - w + wo)
                out[r - r0:stop - r0].reshape(stop - r, *taps)[...] = view[sample, h, w:w + stop - r]
            else:
                lines = min((r1 - r) // wo, ho - h)
                stop = r + lines * wo
                out[r - r0:stop - r0].reshape(lines, wo, *taps)[...] = view[sample, h:h + lines]
            r = stop
        return out


_COLUMNS = _ThreadBuffer()  # each thread's gathered rows of a tile (:class:`_Columns`)


def _tile_operand(a_tile):
    """A tile's left operand: its rows, gathered now where the tile names rows of :class:`_Columns`."""
    if isinstance(a_tile, tuple):
        columns, group, r0, r1 = a_tile
        return columns.rows(group, r0, r1)
    return a_tile


def _matmul_half_compiled(tiles: list, k: int, block: int, fused, nearest) -> None:
    """The nearest-rounding tiles of :func:`_matmul_half` on the compiled path: each tile's block products come from
    the same BLAS calls as on the numpy path, and the FP16 partial is rounded after every block in compiled passes that
    take up to ``_BLOCKS_PER_PASS`` products each. With many tiles the tiles are shared out over the worker threads;
    with few, the block products of each tile are (:func:`_sum_blocks_shared`)."""
    if nearest.overflow == "nan":  # the general kernel, one block at a time
        def accumulate(acc_flat, products):
            for row in products:
                compiled.binary_round_span(fused, "add", acc_flat, row, acc_flat, 1, 1, acc_flat.size, True, nearest)
    else:
        accumulate = compiled.accumulator(fused, nearest)
    starts = list(range(0, k, block))
    threads = available_threads()

    def groups_of(size: int, parts: int) -> list:
        per_pass = max(1, min(_BLOCKS_PER_PASS, _PRODUCT_ELEMENTS // size, -(-len(starts) // parts)))
        return [starts[i:i + per_pass] for i in range(0, len(starts), per_pass)]

    def run_tiles(first: int, stop: int) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # Inf/NaN operands propagate (errstate is per thread)
            for acc, a_tile, b_tile in tiles[first:stop]:
                acc_flat = acc.reshape(-1)
                a_tile = _tile_operand(a_tile)
                for group in groups_of(acc.size, 1):
                    accumulate(acc_flat, _block_products(acc, a_tile, b_tile, group, block))

    if threads == 1 or _tile_balance(tiles, threads) >= 0.85:  # whole tiles keep the threads busy alike
        run_split(len(tiles), run_tiles, grain=1, align=1)
        return
    for index, (acc, a_tile, b_tile) in enumerate(tiles):
        groups = groups_of(acc.size, threads)
        if len(groups) < 2 or acc.size * block * len(groups[0]) < _PARALLEL_WORK:
            run_tiles(index, index + 1)
            continue
        a_tile = _tile_operand(a_tile)  # in this thread's buffer, which every thread reads until the tile is summed
        _sum_blocks_shared(acc.reshape(-1), groups,
                           lambda group, acc=acc, a_tile=a_tile, b_tile=b_tile: _block_products(
                               acc, a_tile, b_tile, group, block), accumulate, threads)


def _matmul_half(a: np.ndarray, b: np.ndarray, block: int, rounding: str, rng, overflow: str) -> np.ndarray:
    """(B, M, K) @ (B, K, N) with FP16 partials: for every block of K, acc = round_f16(acc + FP32 block sum).

    The output is cut into tiles of about ``_TILE`` elements (row tiles of one batch element for large products,
    stacks of batch elements for small ones) whose accumulator and block product stay in cache while all K blocks are
    summed into them. Each block sum is one single-threaded BLAS call whose shape is fixed by the tile (BLAS's
    summation order, and so the bits, depend on the shape of the call); the calls run on the worker threads (nearest
    rounding; the stochastic kind draws its random numbers in one fixed order, in one thread): whole tiles, or the
    blocks of one tile (:func:`_matmul_half_compiled`). The sign of a zero partial is not tracked (it only decides the
    sign of an all-zero result), and saturation is skipped when no partial can reach the FP16 max.

    ``a`` may be a convolution's :class:`_Columns`: on the compiled path with row tiles, each tile's rows are gathered
    when it is computed (the same calls, the same bits); otherwise the columns are laid out whole first."""
    nbatch, m, k = a.shape
    n = b.shape[2]
    out = np.zeros((nbatch, m, n), np.float32)
    if out.size == 0 or k == 0:
        return out
    fused = compiled.jit() if rounding == "nearest" else None
    tiled = m * n >= _TILE // 2
    if isinstance(a, _Columns) and (fused is None or not tiled):
        a = a.materialize()
    mode = overflow if (overflow == "nan" or _saturation_possible(a, b, fused)) else "unbounded"
    nearest = nearest_rounding("f16", 0, mode, signed_zero=False)

    if tiled:
        rows = max(1, _TILE // n)
        tiles = [(out[bi, r0:r0 + rows], (a, bi, r0, min(m, r0 + rows)) if isinstance(a, _Columns)
                  else a[bi, r0:r0 + rows], b[bi]) for bi in range(nbatch) for r0 in range(0, m, rows)]
    else:
        batches = max(1, _TILE // (m * n))
        tiles = [(out[b0:b0 + batches], a[b0:b0 + batches], b[b0:b0 + batches]) for b0 in range(0, nbatch, batches)]
    if fused is not None:
        with single_threaded_blas():
            _matmul_half_compiled(tiles, k, block, fused, nearest)
        return out
    largest = max(tile[0].size for tile in tiles)

    def round_partials(acc: np.ndarray) -> None:
        if rounding == "stochastic":
            round_inplace(acc, "f16", overflow=overflow, rounding=rounding, rng=rng)
        else:
            flat = acc.reshape(-1)  # acc is a C-contiguous tile of the output
            nearest.span(flat, flat)

    def run_tiles(first: int, stop: int) -> None:
        product = np.empty(largest, np.float32)
        with np.errstate(over="ignore", invalid="ignore"):  # Inf/NaN operands propagate (errstate is per thread)
            sum_tiles(first, stop, product)

    def sum_tiles(first: int, stop: int, product: np.ndarray) -> None:
        for acc, a_tile, b_tile in tiles[first:stop]:
            block_sum = product[: acc.size].reshape(acc.shape)
            for k0 in range(0, k, block):
                np.matmul(a_tile[..., k0:k0 + block], b_tile[..., k0:k0 + block, :], out=block_sum)
                np.add(acc, block_sum, out=acc)
                round_partials(acc)

    with single_threaded_blas():
        if rounding == "stochastic":
            run_tiles(0, len(tiles))
        else:
            run_split(len(tiles), run_tiles, grain=1, align=1)
    return out


def matmul(a, b, *, partials: str = "float", operand_format: str = "f16", block: int | None = None,
           rounding: str = "nearest", rng=None, out_format: str | None = "f16", overflow: str = "sat") -> np.ndarray:
    """``a @ b`` as the IPU computes it, float32 result. ``a`` (..., M, K), ``b`` (..., K, N), batch axes broadcast.

    ``operand_format``: the grid the operands are on (``"f16"``, ``"f143"``, ``"f152"``; FP8 forces half partials and
    an FP16 result). ``partials``: ``"float"`` or ``"half"``. ``block``: K elements per FP32 block sum for half partials
    (default ``DEFAULT_BLOCK[operand_format]``). ``rounding``: ``"nearest"`` or ``"stochastic"`` (with ``rng``, a numpy
    Generator) for every rounding to FP16. ``out_format``: ``"f16"`` or None (FP32 accumulator, float partials only).
    ``overflow``: ``"sat"`` or ``"nan"`` for FP16 roundings.
    """
    partials, block, out_format = _settings(partials, operand_format, block, rounding, rng, out_format, overflow)
    given, a, b = _operands(a, b, "matmul operand a", "matmul operand b")
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(
            f"matmul needs a (..., M, K) and b (..., K, N) with at least 2 axes each, got a {a.shape}, b {b.shape}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(
            f"matmul: a {a.shape} and b {b.shape} have different inner dimensions ({a.shape[-1]} vs {b.shape[-2]});"
            " expected a (..., M, K) and b (..., K, N)"
        )
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: batch axes of a {a.shape} and b {b.shape} do not broadcast") from None
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if given is not None:
        if rounding == "stochastic":  # the random draws in numpy's order
            return given.asarray(matmul(given.to_numpy(a), given.to_numpy(b), partials=partials,
                                        operand_format=operand_format, block=block, rounding=rounding, rng=rng,
                                        out_format=out_format, overflow=overflow))
        return _matmul_on(given, a, b, batch, m, k, n, partials, block, out_format, overflow)
    library = other_library() if rounding == "nearest" else None
    if library is not None and partials == "float":
        y = library.to_numpy(library.xp.matmul(library.asarray(a), library.asarray(b)))
        if out_format == "f16":
            round_inplace(y, "f16", overflow=overflow)
        return y
    if partials == "float":
        y = blas.matmul(a, b)
        if out_format == "f16":
            round_inplace(y, "f16", overflow=overflow, rounding=rounding, rng=rng)
        return y
    nbatch = int(np.prod(batch, dtype=np.int64))
    a3 = np.broadcast_to(a, batch + (m, k)).reshape(nbatch, m, k)
    b3 = np.broadcast_to(b, batch + (k, n)).reshape(nbatch, k, n)
    if library is not None and not compiled.over_host_memory(library):
        y = namespace.matmul_half(library, library.asarray(a3), library.asarray(b3), block,
                                  nearest_rounding("f16", 0, overflow, signed_zero=False))
        return library.to_numpy(y).reshape(batch + (m, n))
    return _matmul_half(a3, b3, block, rounding, rng, overflow).reshape(batch + (m, n))


def _operands(first, second, first_name: str, second_name: str):
    """(library, first, second): the operands checked, on another library's device when either is its array (computed
    there, the result returned there; library None for numpy)."""
    given = arrays.library_of(first) or arrays.library_of(second)
    if given is not None:
        return given, _library_operand(given, first, first_name), _library_operand(given, second, second_name)
    return None, _float_operand(first, first_name), _float_operand(second, second_name)


def _library_operand(library, v, what: str):
    """A kernel operand with the other one an array of ``library``: as a float32 array of ``library`` (a numpy
    operand moved to its device); TypeError for other dtypes."""
    if arrays.library_of(v) is None:
        return library.asarray(_float_operand(v, what))
    xp = library.xp
    if v.dtype not in (xp.float16, xp.float32, xp.float64):
        raise TypeError(f"{what} must be a float16, float32 or float64 array on an FP16/FP8 grid, got dtype {v.dtype}")
    return xp.astype(v, xp.float32, copy=False)


def _matmul_on(library, a, b, batch, m: int, k: int, n: int, partials: str, block: int, out_format, overflow: str):
    """:func:`matmul` (nearest rounding) of arrays of ``library``, on their device: FP32 partials are the library's
    matmul, half partials :func:`namespace.matmul_half`."""
    xp = library.xp
    if partials == "float":
        y = xp.matmul(a, b)
        return quantize(y, "f16", overflow=overflow) if out_format == "f16" else y
    nbatch = int(np.prod(batch, dtype=np.int64))
    a3 = xp.reshape(xp.broadcast_to(a, tuple(batch) + (m, k)), (nbatch, m, k))
    b3 = xp.reshape(xp.broadcast_to(b, tuple(batch) + (k, n)), (nbatch, k, n))
    # On the host the numpy path's kernel: torch's CPU products of one block (M x 32 @ 32 x N) are slower than
    # OpenBLAS's (bert-base's (768, 768) @ (768, 3072) with FP8 operands took 2.2-4.4x numpy's time as batched calls)
    if compiled.over_host_memory(library):
        y = library.wrap_host(_matmul_half(library.host_strided_view(a3), library.host_strided_view(b3), block,
                                           "nearest", None, overflow))
    else:
        y = namespace.matmul_half(library, a3, b3, block, nearest_rounding("f16", 0, overflow, signed_zero=False))
    return xp.reshape(y, tuple(batch) + (m, n))


def _checked_pair(v, what: str, minimum: int) -> tuple[int, int]:
    pair = (v, v) if np.isscalar(v) else tuple(v)
    if len(pair) != 2 or not all(isinstance(p, (int, np.integer)) and not isinstance(p, bool) and p >= minimum
                                 for p in pair):
        raise ValueError(f"conv2d: {what} must be an integer >= {minimum} or a pair of them, got {v!r}")
    return int(pair[0]), int(pair[1])


def _im2col(x: np.ndarray, kh: int, kw: int, stride, padding, dilation, groups: int):
    """Columns (G, N*Ho*Wo, kh*kw*Cg), as :class:`_Columns` (gathered when they are read): the K axis runs over
    kernel taps, input channels fastest, as the AMP unit consumes a tap's channel group per pass. Gathered from a
    channels-last copy of the (zero-padded) input, so that every tap copies runs of Cg contiguous values."""
    n, c, h, wd = x.shape
    cg = c // groups
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    padded = np.zeros((n, h + 2 * ph, wd + 2 * pw, c), np.float32) if ph or pw else np.empty((n, h, wd, c), np.float32)
    padded[:, ph:ph + h, pw:pw + wd] = x.transpose(0, 2, 3, 1)
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    ho = (padded.shape[1] - eh) // sh + 1
    wo = (padded.shape[2] - ew) // sw + 1
    win = sliding_window_view(padded, (eh, ew), axis=(1, 2))[:, ::sh, ::sw, :, ::dh, ::dw][:, :ho, :wo]
    # (N, Ho, Wo, C, kh, kw) -> (G, N, Ho, Wo, kh, kw, Cg)
    return _Columns(padded, win.reshape(n, ho, wo, groups, cg, kh, kw).transpose(3, 0, 1, 2, 5, 6, 4)), ho, wo


def conv_weight_matrix(w: np.ndarray, groups: int = 1) -> np.ndarray:
    """A conv weight (O, C/groups, kh, kw) as the half-partials conv2d reads it: the same values, held in memory as
    the (G, kh*kw*Cg, O/G) matrix of the im2col matmul, so that :func:`conv2d` takes it without a copy (a weight
    used for many calls is laid out once)."""
    given = arrays.library_of(w)
    if given is not None:  # an array of another library: laid out on its device
        w = _library_operand(given, w, "conv2d weight w")
        if groups != 1:
            return given.contiguous(w)
        return given.xp.permute_dims(given.contiguous(given.xp.permute_dims(w, (2, 3, 1, 0))), (3, 2, 0, 1))
    w = _float_operand(w, "conv2d weight w")
    o, cg, kh, kw = w.shape
    if groups != 1:  # (G, O/G) would not merge back into O without a copy
        return np.ascontiguousarray(w)
    matrix = np.ascontiguousarray(w.transpose(2, 3, 1, 0))  # (kh, kw, Cg, O)
    return matrix.transpose(3, 2, 0, 1)


def conv2d(x, w, *, stride=1, padding=0, dilation=1, groups: int = 1, partials: str = "float",
           operand_format: str = "f16", block: int | None = None, rounding: str = "nearest", rng=None,
           out_format: str | None = "f16", overflow: str = "sat") -> np.ndarray:
    """NCHW convolution as the IPU computes it (no bias), float32 result (N, O, Ho, Wo). ``x`` (N, C, H, W), ``w``
    (O, C / groups, kh, kw); ``stride``, ``padding`` (zeros, both sides), ``dilation``: an int or a pair.
    The reduction over (kh, kw, C / groups) is an im2col matmul; the other options are those of :func:`matmul`."""
    partials, block, out_format = _settings(partials, operand_format, block, rounding, rng, out_format, overflow)
    given, x, w = _operands(x, w, "conv2d input x", "conv2d weight w")
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"conv2d needs x (N, C, H, W) and w (O, C/groups, kh, kw), got x {x.shape}, w {w.shape}")
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"conv2d: groups must be a positive integer, got {groups!r}")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c != cg * groups or o % groups:
        raise ValueError(
            f"conv2d: x has {c} channels and w {w.shape} with groups={groups}; expected C == w.shape[1] * groups"
            f" (= {cg * groups}) and O (= {o}) divisible by groups"
        )
    stride = _checked_pair(stride, "stride", 1)
    padding, dilation = _checked_pair(padding, "padding", 0), _checked_pair(dilation, "dilation", 1)
    for axis, size, k in ((0, h, kh), (1, wd, kw)):
        if size + 2 * padding[axis] < dilation[axis] * (k - 1) + 1:
            raise ValueError(f"conv2d: kernel {kh}x{kw} (dilation {dilation}) is larger than the padded input {h}x{wd}")
    if given is not None and rounding == "stochastic":  # the random draws in numpy's order
        return given.asarray(conv2d(given.to_numpy(x), given.to_numpy(w), stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, partials=partials, operand_format=operand_format,
                                    block=block, rounding=rounding, rng=rng, out_format=out_format, overflow=overflow))
    if given is not None and partials == "half" and compiled.over_host_memory(given):  # numpy's, over their memory
        return given.wrap_host(_conv2d_numpy(given.host_strided_view(x), given.host_strided_view(w), stride,
                                             padding, dilation, groups, partials, operand_format, block, rounding,
                                             rng, out_format, overflow))
    if given is not None:
        if partials == "float":  # the library's FP32 convolution: within the same bound
            y = given.conv2d_fp32(x, w, stride, padding, dilation, groups)
            return quantize(y, "f16", overflow=overflow) if out_format == "f16" else y
        return namespace.conv2d_half(given, x, w, stride, padding, dilation, groups, block,
                                     nearest_rounding("f16", 0, overflow, signed_zero=False))
    library = other_library() if rounding == "nearest" else None
    if library is not None and (partials == "float" or not compiled.over_host_memory(library)):
        xl, wl = library.asarray(x), library.asarray(w)
        if partials == "float":  # the library's FP32 convolution: within the same bound
            y = library.to_numpy(library.conv2d_fp32(xl, wl, stride, padding, dilation, groups))
            if out_format == "f16":
                round_inplace(y, "f16", overflow=overflow)
            return y
        return library.to_numpy(namespace.conv2d_half(library, xl, wl, stride, padding, dilation, groups, block,
                                                      nearest_rounding("f16", 0, overflow, signed_zero=False)))
    return _conv2d_numpy(x, w, stride, padding, dilation, groups, partials, operand_format, block, rounding, rng,
                         out_format, overflow)


def _conv2d_numpy(x: np.ndarray, w: np.ndarray, stride, padding, dilation, groups: int, partials: str,
                  operand_format: str, block: int, rounding: str, rng, out_format, overflow: str) -> np.ndarray:
    """:func:`conv2d` of checked float32 numpy operands on the numpy path: float partials through the FP32 models'
    convolution, half partials as the im2col matmul."""
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    if partials == "float":  # any FP32 summation order is within the same error bound: the fast FP32 layout
        y = conv2d_fp32(x, w, stride, padding, dilation, groups)
        if out_format == "f16":
            round_inplace(y, "f16", overflow=overflow, rounding=rounding, rng=rng)
        return y
    cols, ho, wo = _im2col(x, kh, kw, stride, padding, dilation, groups)
    og = o // groups
    wmat = w.reshape(groups, og, cg, kh, kw).transpose(0, 3, 4, 2, 1).reshape(groups, kh * kw * cg, og)
    library = other_library() if rounding == "nearest" else None
    if library is None or compiled.over_host_memory(library):  # matmul's own half-partials kernel, tile by tile
        y = _matmul_half(cols, wmat, block, rounding, rng, overflow)  # (G, N*Ho*Wo, O/G), C-contiguous
    else:
        y = matmul(cols.materialize(), wmat, partials=partials, operand_format=operand_format, block=block,
                   rounding=rounding, rng=rng, out_format=out_format, overflow=overflow)
    fused = compiled.jit()
    if fused is None:
        y = y.reshape(groups, n, ho, wo, og).transpose(1, 0, 4, 2, 3).reshape(n, o, ho, wo)
        return np.ascontiguousarray(y)
    out = np.empty((n, o, ho, wo), np.float32)
    src, dst = y.reshape(groups, n, ho * wo, og), out.reshape(n, groups, og, ho * wo)
    run_split(n, lambda first, stop: fused.channels_first(src, dst, first, stop),
              grain=max(1, COMPILED_GRAIN // (o * ho * wo)), align=1)
    return out
