"""matmul and conv2d of conformance.numerics: float partials against float64 within the FP32 accumulation bound, half
partials against an independent per-block reference (exact where the FP32 block sums are exact) and within the
documented bound, FP8 operands, saturation, reproducibility and bad input. torch (float64) is the conv oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conformance.numerics import DEFAULT_BLOCK, conv2d, matmul, quantize

# every test runs once per array library (numpy, torch on the CPU, torch on a GPU where there is one)
pytestmark = pytest.mark.usefixtures("array_library")

U32, U16 = 2.0**-24, 2.0**-11  # unit roundoff of FP32 and FP16
F16_HALF_SUBNORMAL = 2.0**-25  # largest absolute error of rounding into FP16's subnormal range


def float_partials_bound(abs_products: np.ndarray, k: int) -> np.ndarray:
    """Any FP32 summation order of k exact products: |error| <= gamma_k * sum|products| (Higham, Thm 3.1)."""
    return k * U32 / (1 - k * U32) * abs_products


def half_partials_bound(abs_products: np.ndarray, k: int, block: int) -> np.ndarray:
    """The bound documented in kernels.py: nb = ceil(k / block) steps, each an FP32 add and an FP16 rounding of the
    running partial, after FP32 block sums of `block` products."""
    nb = -(-k // block)
    growth = ((1 + U16) * (1 + U32)) ** nb
    return ((1 + U16) ** nb * (1 + U32) ** (nb + block - 1) - 1) * abs_products + nb * F16_HALF_SUBNORMAL * growth


def grid(rng, shape, fmt="f16", scale=0, spread=1.0):
    return quantize(rng.standard_normal(shape) * spread, fmt, scale=scale)


def reference_half(a: np.ndarray, b: np.ndarray, block: int) -> np.ndarray:
    """The half-partials model written plainly: float64 block sums (exact here), FP32 add, FP16 rounding."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k0 in range(0, a.shape[1], block):
        block_sum = a[:, k0:k0 + block].astype(np.float64) @ b[k0:k0 + block].astype(np.float64)
        acc = quantize((acc + block_sum.astype(np.float32)).astype(np.float32), "f16")
    return acc


# -- float partials ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("m, k, n", [(7, 5, 3), (64, 768, 96), (33, 1500, 17)])
def test_float_partials_within_fp32_accumulation_bound(m, k, n):
    rng = np.random.default_rng(0)
    a, b = grid(rng, (m, k)), grid(rng, (k, n), spread=0.05)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = float_partials_bound(np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64), k)
    y = matmul(a, b, out_format=None)
    assert y.dtype == np.float32 and y.shape == (m, n)
    assert (np.abs(y - exact) <= bound).all(), np.max(np.abs(y - exact) / bound)
    y16 = matmul(a, b)
    assert np.array_equal(y16, quantize(y, "f16"))


def test_batched_matmul_broadcasts_like_numpy():
    rng = np.random.default_rng(1)
    a, b = grid(rng, (2, 3, 16, 40)), grid(rng, (3, 40, 8))
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    for partials in ("float", "half"):
        y = matmul(a, b, partials=partials)
        assert y.shape == (2, 3, 16, 8)
        bound = half_partials_bound(np.matmul(np.abs(a), np.abs(b)).astype(np.float64), 40, 16) + np.abs(exact) * U16
        assert (np.abs(y - exact) <= bound).all()


# -- half partials -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("m, k, n, block", [(5, 64, 7, 16), (40, 300, 90, 16), (3, 50, 4, 7), (600, 96, 700, 32)])
def test_half_partials_equal_plain_model_when_block_sums_are_exact(m, k, n, block):
    """Integer operands up to 64: products and block sums are exact in FP32, partials above 2048 are not exact in
    FP16, so each block's FP16 rounding shows; the kernel must reproduce the plain model bit for bit."""
    rng = np.random.default_rng(2)
    a = rng.integers(-64, 65, (m, k)).astype(np.float32)
    b = rng.integers(-64, 65, (k, n)).astype(np.float32)
    y = matmul(a, b, partials="half", block=block)
    expected = reference_half(a, b, block)
    assert np.array_equal(y, expected), np.abs(y - expected).max()
    assert not np.array_equal(y, quantize(a.astype(np.float64) @ b.astype(np.float64), "f16"))


@pytest.mark.parametrize("k", [16, 768, 3000])
def test_half_partials_within_documented_bound_and_reproducible(k):
    rng = np.random.default_rng(3)
    a, b = grid(rng, (48, k)), grid(rng, (k, 64), spread=0.05)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    abs_products = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    y = matmul(a, b, partials="half")
    error = np.abs(y - exact)
    assert (error <= half_partials_bound(abs_products, k, DEFAULT_BLOCK["f16"])).all()
    assert np.array_equal(y, matmul(a, b, partials="half"))
    if k > 16:  # more FP16 roundings than float partials' single one: visibly larger errors
        assert error.mean() > np.abs(matmul(a, b) - exact).mean()


def test_half_partials_stochastic_is_reproducible_and_within_twice_the_bound():
    rng = np.random.default_rng(4)
    a, b = grid(rng, (32, 2048)), grid(rng, (2048, 32), spread=0.05)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    first = matmul(a, b, partials="half", rounding="stochastic", rng=np.random.default_rng(9))
    again = matmul(a, b, partials="half", rounding="stochastic", rng=np.random.default_rng(9))
    assert np.array_equal(first, again)
    other = matmul(a, b, partials="half", rounding="stochastic", rng=np.random.default_rng(10))
    assert not np.array_equal(first, other)
    bound = half_partials_bound(np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64), 2048, 16)
    assert (np.abs(first - exact) <= 2 * bound).all()  # a stochastic rounding errs by up to one ulp, not half


def test_half_partials_stagnate_with_nearest_and_not_with_stochastic_rounding():
    """2048 plus 1023 x 1/16: each block of 16 adds 1.0 to a partial whose FP16 ulp is 2, a tie that rounds back to
    2048 with RNE every time; stochastic rounding keeps the expected value (2048 + 1023/16)."""
    rows = 256
    a = np.full((rows, 1024), 1 / 16, np.float32)
    a[:, 0] = 2048.0
    b = np.ones((1024, 1), np.float32)
    exact = 2048 + 1023 / 16
    assert (matmul(a, b, partials="half") == 2048.0).all()
    stochastic = matmul(a, b, partials="half", rounding="stochastic", rng=np.random.default_rng(0))
    sigma_of_mean = np.sqrt(64 * 4 * 0.25 / rows)  # 64 roundings of +-1 (ulp 2, p = 1/2) per row
    assert abs(stochastic.mean() - exact) < 6 * sigma_of_mean, stochastic.mean()


def test_fp8_operands_force_half_partials_and_fp16_result():
    rng = np.random.default_rng(5)
    a, b = grid(rng, (20, 256), "f143", scale=-3), grid(rng, (256, 30), "f143", scale=-3, spread=0.1)
    forced = matmul(a, b, operand_format="f143", partials="float", out_format=None)
    assert np.array_equal(forced, matmul(a, b, operand_format="f143", partials="half", block=32))
    assert not np.array_equal(forced, matmul(a, b, operand_format="f143", partials="half", block=8))
    assert np.array_equal(forced, quantize(forced, "f16"))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert (np.abs(forced - exact) <= half_partials_bound(np.abs(a) @ np.abs(b), 256, 32)).all()


@pytest.mark.parametrize("partials", ["float", "half"])
def test_fp16_results_saturate(partials):
    a = np.full((2, 64), 200.0, np.float32)
    b = np.full((64, 3), 100.0, np.float32)
    b[:, 1] = -100.0
    b[:, 2] = 0.001
    y = matmul(a, b, partials=partials)
    assert y[:, 0].tolist() == [65504.0, 65504.0] and y[:, 1].tolist() == [-65504.0, -65504.0]
    assert np.isfinite(y).all()
    nan_mode = matmul(a, b, partials=partials, overflow="nan")
    assert np.isnan(nan_mode[:, :2]).all() and np.isfinite(nan_mode[:, 2]).all()


# -- conv2d ------------------------------------------------------------------------------------------------------------
CONV_CASES = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(1, 2), padding=(2, 0), dilation=(2, 1)),
    dict(groups=4, padding=1),
    dict(groups=16, padding=1),  # depthwise
]


def torch_conv(x, w, **kw):
    return torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)),
                                      **kw).numpy()


@pytest.mark.parametrize("kw", CONV_CASES, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()) or "plain")
def test_conv2d_matches_torch_float64_within_bounds(kw):
    rng = np.random.default_rng(6)
    groups = kw.get("groups", 1)
    x = grid(rng, (2, 16, 11, 13))
    w = grid(rng, (32 if groups < 16 else 16, 16 // groups, 3, 3), spread=0.2)
    exact = torch_conv(x, w, **kw)
    abs_products = torch_conv(np.abs(x), np.abs(w), **kw)
    k = w.shape[1] * 9
    y = conv2d(x, w, out_format=None, **kw)
    assert y.shape == exact.shape and y.dtype == np.float32
    assert (np.abs(y - exact) <= float_partials_bound(abs_products, k)).all()
    half = conv2d(x, w, partials="half", **kw)
    assert (np.abs(half - exact) <= half_partials_bound(abs_products, k, 16)).all()
    assert np.array_equal(half, conv2d(x, w, partials="half", **kw))


def test_conv2d_half_partials_block_order_is_taps_then_channels():
    """With 16 input channels and block 16, each block is one kernel tap: the result equals summing per tap."""
    rng = np.random.default_rng(7)
    x = rng.integers(-40, 41, (1, 16, 6, 6)).astype(np.float32)
    w = rng.integers(-40, 41, (8, 16, 3, 3)).astype(np.float32)
    y = conv2d(x, w, partials="half")
    acc = np.zeros((1, 8, 4, 4), np.float32)
    for i in range(3):
        for j in range(3):
            tap = np.einsum("nchw,oc->nohw", x[:, :, i:i + 4, j:j + 4].astype(np.float64), w[:, :, i, j])
            acc = quantize((acc + tap.astype(np.float32)).astype(np.float32), "f16")
    assert np.array_equal(y, acc)


def test_conv2d_fp8_and_1x1():
    rng = np.random.default_rng(8)
    x = grid(rng, (1, 64, 5, 5), "f152", scale=-2)
    w = grid(rng, (16, 64, 1, 1), "f152", scale=-4)
    y = conv2d(x, w, operand_format="f152", stride=2)
    exact = torch_conv(x, w, stride=2)
    assert np.array_equal(y, quantize(y, "f16"))
    assert (np.abs(y - exact) <= half_partials_bound(torch_conv(np.abs(x), np.abs(w), stride=2), 64, 32)).all()


# -- bad input ---------------------------------------------------------------------------------------------------------
ONES = np.ones((4, 5), np.float32)


@pytest.mark.parametrize("call, error, words", [
    (lambda: matmul(ONES, np.ones((4, 3), np.float32)), ValueError, ["(4, 5)", "(4, 3)", "5 vs 4", "(..., M, K)"]),
    (lambda: matmul(ONES, np.ones(5, np.float32)), ValueError, ["(5,)", "at least 2 axes"]),
    (lambda: matmul(np.ones((2, 4, 5), np.float32), np.ones((3, 5, 2), np.float32)), ValueError, ["broadcast"]),
    (lambda: matmul(np.ones((4, 5), int), ONES.T), TypeError, ["int64", "float32"]),
    (lambda: matmul(ONES, ONES.T, partials="double"), ValueError, ["'double'", "float, half"]),
    (lambda: matmul(ONES, ONES.T, operand_format="fp8"), ValueError, ["'fp8'", "f16, f143, f152"]),
    (lambda: matmul(ONES, ONES.T, block=0), ValueError, ["0", "positive integer"]),
    (lambda: matmul(ONES, ONES.T, partials="half", out_format=None), ValueError, ["out_format=None", "float"]),
    (lambda: matmul(ONES, ONES.T, out_format="f143"), ValueError, ["'f143'", "'f16' or None"]),
    (lambda: matmul(ONES, ONES.T, rounding="stochastic"), ValueError, ["rng", "Generator"]),
    (lambda: conv2d(np.ones((1, 6, 5, 5), np.float32), np.ones((4, 4, 3, 3), np.float32)), ValueError,
     ["6 channels", "(4, 4, 3, 3)", "groups=1"]),
    (lambda: conv2d(np.ones((1, 4, 5, 5), np.float32), np.ones((4, 4, 3), np.float32)), ValueError, ["(N, C, H, W)"]),
    (lambda: conv2d(np.ones((1, 4, 2, 2), np.float32), np.ones((4, 4, 3, 3), np.float32)), ValueError, ["larger"]),
    (lambda: conv2d(np.ones((1, 4, 5, 5), np.float32), np.ones((4, 4, 3, 3), np.float32), stride=0), ValueError,
     ["stride", "0", ">= 1"]),
])
def test_bad_input_is_a_clear_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.numpy_only  # the numpy path's worker threads
def test_half_partials_on_worker_threads_equal_one_thread(monkeypatch):
    """Output tiles are summed on worker threads; the result is the single-thread one, bit for bit."""
    rng = np.random.default_rng(11)
    a, b = grid(rng, (700, 200)), grid(rng, (200, 900), spread=0.05)
    monkeypatch.setenv("CONFORMANCE_THREADS", "1")
    expected = matmul(a, b, partials="half"), matmul(a, b, operand_format="f143")
    monkeypatch.setenv("CONFORMANCE_THREADS", "2")
    got = matmul(a, b, partials="half"), matmul(a, b, operand_format="f143")
    assert all(np.array_equal(g, e) for g, e in zip(got, expected))


@pytest.mark.numpy_only  # the numpy path's own tiling of the columns
@pytest.mark.parametrize("tiles", ["many", "one"])  # one: on two threads its blocks are shared out
@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("shape", [
    # (N, C, H, W, O, kernel, stride, padding, dilation, groups)
    (2, 8, 9, 11, 16, 3, 1, 1, 1, 1),   # tiles start inside an output line and cross into the next sample
    (3, 6, 12, 7, 8, 3, 2, 1, 1, 2),    # strided, grouped
    (1, 4, 10, 10, 24, 5, 1, 4, 2, 1),  # dilated, padded beyond the kernel's reach
    (2, 16, 6, 5, 4, 1, 1, 0, 1, 1),    # 1x1
    (1, 3, 31, 29, 8, 7, 2, 3, 1, 1),   # a 7x7 stem
])
def test_conv2d_tiles_gathered_as_computed_give_the_bits_of_whole_columns(monkeypatch, shape, threads, tiles):
    """The half-partials conv2d gathers each output tile's im2col rows when the tile is computed; the result is
    that of the matmul over the whole columns, bit for bit, and the saturation bound taken from the input holds (a
    value driving partials past the FP16 max gives the same saturated result)."""
    from conformance.numerics import kernels

    n, c, h, w, o, k, stride, padding, dilation, groups = shape
    rng = np.random.default_rng(sum(shape))
    x = grid(rng, (n, c, h, w))
    weight = grid(rng, (o, c // groups, k, k), spread=0.3)
    if tiles == "many":
        monkeypatch.setattr(kernels, "_TILE", 96)  # tiles of a few rows: most start inside a line
    else:  # the whole output one tile, its blocks shared out over the threads however small
        monkeypatch.setattr(kernels, "_TILE", 2 * n * h * w * o)
        monkeypatch.setattr(kernels, "_PARALLEL_WORK", 1)
    monkeypatch.setenv("CONFORMANCE_THREADS", threads)
    options = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    for big in (None, 60000.0):
        if big is not None:
            x.reshape(-1)[rng.integers(x.size)] = big
        for fmt in ("f16", "f143"):
            got = conv2d(x, weight, partials="half", operand_format=fmt, **options)
            cols, ho, wo = kernels._im2col(x, k, k, (stride, stride), (padding, padding), (dilation, dilation), groups)
            og = o // groups
            wmat = weight.reshape(groups, og, c // groups, k, k).transpose(0, 3, 4, 2, 1).reshape(groups, -1, og)
            whole = matmul(cols.materialize(), wmat, partials="half", operand_format=fmt)
            expected = whole.reshape(groups, n, ho, wo, og).transpose(1, 0, 4, 2, 3).reshape(n, o, ho, wo)
            assert got.shape == expected.shape and np.array_equal(got, expected, equal_nan=True), (fmt, big)


@pytest.mark.numpy_only  # calls the other library's kernels directly
@pytest.mark.parametrize("spec", ["torch:cpu", "torch:cuda"])
@pytest.mark.parametrize("overflow", ["sat", "nan"])
@pytest.mark.parametrize("special", [None, float("inf"), float("nan")])
def test_half_partials_in_array_passes_per_block_equal_numpy(spec, overflow, special):
    """The other library's own half partials (a GPU's; the host's without the compiled kernels) round the running sum
    in array passes per block (the cast alone where every sum is finite, the whole rule set where an operand holds
    Inf or NaN): the same bits as numpy's compiled accumulator."""
    from conformance.numerics import arrays, compiled, namespace
    from conformance.numerics.formats import nearest_rounding

    try:
        library = arrays.load(spec)
    except arrays.ArrayLibraryError as exc:
        pytest.skip(str(exc))
    rng = np.random.default_rng(5)
    a, b = grid(rng, (3, 40, 300), "f143", spread=40.0), grid(rng, (3, 300, 50), "f143", spread=40.0)
    if special is not None:
        a[1, 7, 100] = special  # row 7 of batch 1 meets it from its seventh block on
    partials = nearest_rounding("f16", 0, overflow, signed_zero=False)
    with compiled.kernel_path("numpy"):
        per_block = library.to_numpy(namespace.matmul_half(library, library.asarray(a), library.asarray(b), 32,
                                                           partials))
    expected = matmul(a, b, operand_format="f143", overflow=overflow)  # numpy: saturates or overflows the same
    assert np.array_equal(per_block, expected, equal_nan=True)
    assert np.isfinite(per_block[1, 7]).all() == (special is None)  # the special value reached the sums


@pytest.mark.numpy_only  # compares torch:cpu's tensors with numpy's arrays
def test_half_partials_of_host_tensors_are_numpys_bits():
    """On the host, with the compiled kernels, half partials of torch tensors run the numpy path's kernel over the
    tensors' memory: numpy's bits also where the FP32 block sums are inexact (operands of many magnitudes), for
    views (a transposed operand, a conv weight in the matmul's layout) and for conv2d's strides and groups; the
    results are tensors."""
    from conformance.numerics import arrays, conv_weight_matrix

    try:
        library = arrays.load("torch:cpu")
    except arrays.ArrayLibraryError as exc:
        pytest.skip(str(exc))
    rng = np.random.default_rng(11)
    a = grid(rng, (2, 70, 700), "f16") * np.exp2(rng.integers(-12, 12, (2, 70, 700))).astype(np.float32)
    b = grid(rng, (2, 90, 700), "f16")
    expected = matmul(a, np.swapaxes(b, 1, 2), partials="half")
    assert not np.array_equal(expected[0], reference_half(a[0], b[0].T, DEFAULT_BLOCK["f16"]))  # inexact block sums
    got = matmul(library.asarray(a), torch.transpose(library.asarray(b), 1, 2), partials="half")
    assert isinstance(got, torch.Tensor) and np.array_equal(got.numpy(), expected)
    a8, b8 = grid(rng, (64, 512), "f143", spread=30.0), grid(rng, (512, 48), "f143", spread=30.0)
    expected = matmul(a8, b8, operand_format="f143")
    got = matmul(library.asarray(a8), library.asarray(b8), operand_format="f143")
    assert isinstance(got, torch.Tensor) and np.array_equal(got.numpy(), expected)
    x = grid(rng, (2, 32, 15, 15), "f16", spread=8.0)
    w = grid(rng, (24, 32, 3, 3), "f16", spread=8.0)
    for options in ({"stride": 2, "padding": 1, "groups": 2}, {"padding": 1}):
        groups = options.get("groups", 1)
        expected = conv2d(x, w[:, :32 // groups], partials="half", **options)
        weight = conv_weight_matrix(library.asarray(np.ascontiguousarray(w[:, :32 // groups])), groups)
        got = conv2d(library.asarray(x), weight, partials="half", **options)
        assert isinstance(got, torch.Tensor) and np.array_equal(got.numpy(), expected), options


@pytest.mark.numpy_only  # calls the other library's kernels directly
@pytest.mark.parametrize("budget", [1 << 24, 20000, 5000, 700])  # whole; groups of 3 blocks; batch tiles; rows
@pytest.mark.parametrize("overflow", ["sat", "nan"])
def test_half_partials_as_a_gpu_tiles_them_give_the_same_bits(monkeypatch, budget, overflow):
    """Off the host, each block's pass runs over as much of the output as the budget holds, blocks grouped within it:
    the same running sums as numpy's, whatever the tiles (torch:cpu computing as a GPU does)."""
    from conformance.numerics import arrays, compiled, namespace
    from conformance.numerics.formats import nearest_rounding

    try:
        library = arrays.load("torch:cpu")
    except arrays.ArrayLibraryError as exc:
        pytest.skip(str(exc))
    monkeypatch.setattr(arrays.ArrayLibrary, "on_host", property(lambda self: self.device is None))
    monkeypatch.setattr(namespace, "_DEVICE_PRODUCTS", budget)
    rng = np.random.default_rng(7)
    a, b = grid(rng, (3, 40, 300), "f143", spread=40.0), grid(rng, (3, 300, 50), "f143", spread=40.0)
    partials = nearest_rounding("f16", 0, overflow, signed_zero=False)
    got = library.to_numpy(namespace.matmul_half(library, library.asarray(a), library.asarray(b), 32, partials))
    assert np.array_equal(got, matmul(a, b, operand_format="f143", overflow=overflow), equal_nan=True)
    x = grid(rng, (2, 24, 9, 9), "f16", spread=4.0)
    w = grid(rng, (16, 24, 3, 3), "f16", spread=4.0)
    with compiled.kernel_path("numpy"):
        expected = conv2d(x, w, padding=1, partials="half", overflow=overflow)
    got = library.to_numpy(namespace.conv2d_half(library, library.asarray(x), library.asarray(w), (1, 1), (1, 1),
                                                 (1, 1), 1, 16, partials))
    assert np.array_equal(got, expected, equal_nan=True)
