"""The FP16/FP8 formats of conformance.numerics against independent oracles: ml_dtypes (NaN-on-overflow mode, float32
input), gfloat's P3109 formats with sat=True (saturating mode), numpy float16, and the poplibs test vectors."""

from __future__ import annotations

import gfloat
import ml_dtypes
import numpy as np
import pytest
from gfloat.formats import format_info_p3109
from gfloat.types import Domain, Signedness

from conformance.numerics import decode, encode, format_info, quantize, round_inplace
from conformance.numerics.formats import round_op

# every test runs once per array library (numpy, torch on the CPU, torch on a GPU where there is one)
pytestmark = pytest.mark.usefixtures("array_library")

FP8 = {
    "f143": (ml_dtypes.float8_e4m3fnuz, format_info_p3109(8, 4, Signedness.Signed, Domain.Finite)),
    "f152": (ml_dtypes.float8_e5m2fnuz, format_info_p3109(8, 3, Signedness.Signed, Domain.Finite)),
}
SCALES = (0, -10, -13, -32, 31)  # the scales of poplibs' QuarterTypeArithmeticTests

ALL_F16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)


def same(actual: np.ndarray, expected: np.ndarray) -> bool:
    """Equal as float32 values, NaN where NaN, and the same sign of zero."""
    actual, expected = np.asarray(actual, np.float32), np.asarray(expected, np.float32)
    nan = np.isnan(expected)
    return bool(np.array_equal(np.isnan(actual), nan)
                and np.array_equal(actual[~nan].view(np.uint32), expected[~nan].view(np.uint32)))


def mismatches(actual, expected, inputs) -> str:
    actual, expected = np.asarray(actual, np.float32), np.asarray(expected, np.float32)
    bad = ~((actual.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(actual) & np.isnan(expected)))
    idx = np.flatnonzero(bad)[:5]
    inputs, actual, expected = inputs.reshape(-1), actual.reshape(-1), expected.reshape(-1)
    return f"{bad.sum()} mismatches, e.g. x={inputs[idx]} got {actual[idx]} want {expected[idx]}"


def ml_dtypes_values(y: np.ndarray, fmt: str, scale: int) -> np.ndarray:
    """The oracle: ml_dtypes' conversion of the unscaled float32 values y, times 2**scale (exact)."""
    with np.errstate(invalid="ignore"):  # ml_dtypes warns on Inf/NaN -> NaN
        return (y.astype(FP8[fmt][0]).astype(np.float64) * 2.0**scale).astype(np.float32)


def ml_dtypes_codes(y: np.ndarray, fmt: str) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return y.astype(FP8[fmt][0]).view(np.uint8)


def fp8_grid(fmt: str) -> np.ndarray:
    """All non-negative finite values of the format, ascending (from its codes 0x00..0x7F)."""
    return np.arange(128, dtype=np.uint8).view(FP8[fmt][0]).astype(np.float32)


def hard_float32_values(fmt: str, seed: int = 0) -> np.ndarray:
    """>= 1M float32 values in the format's own (unscaled) domain: every float32 binade, every tie between neighbouring
    grid values and the float32 values next to it, the subnormal range, and the overflow boundary; both signs, plus
    zeros, infinities and NaN."""
    rng = np.random.default_rng(seed)
    parts = []
    exponents = np.repeat(np.arange(0, 255, dtype=np.uint32), 3000)  # every binade, float32 subnormals included
    mantissas = rng.integers(0, 1 << 23, exponents.size, dtype=np.uint32)
    parts.append(((exponents << np.uint32(23)) | mantissas).view(np.float32))
    grid = fp8_grid(fmt).astype(np.float64)
    ties = ((grid[:-1] + grid[1:]) / 2).astype(np.float32)  # exact in float32
    parts += [ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(0))]
    info = format_info(fmt)
    parts.append(rng.uniform(0, 2 * info.min_normal, 100_000).astype(np.float32))
    top = 2.0 ** (info.emax + 1)
    parts.append(np.linspace(info.max_value * 0.9, top * 1.1, 100_000, dtype=np.float32))
    boundary = np.float32(info.max_value + (top - info.max_value) / 2)  # max + half an ulp: a tie that overflows
    parts.append(np.array([np.nextafter(boundary, np.float32(0)), boundary,
                           np.nextafter(boundary, np.float32(np.inf))]))
    parts.append(np.array([0.0, np.inf, np.nan, info.max_value, top], np.float32))
    values = np.concatenate(parts)
    return np.concatenate([values, -values])


def scaled_inputs(values: np.ndarray, scale: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) with x = y * 2**scale exactly in float32, keeping only the y for which that holds (no float32 overflow or
    loss of bits to float32 subnormals): quantize(x, scale) must then equal the oracle of y, times 2**scale."""
    with np.errstate(over="ignore", invalid="ignore"):
        x = values * np.float32(2.0**scale)
        exact = np.isnan(values) | (x.astype(np.float64) == values.astype(np.float64) * 2.0**scale)
    return x[exact], values[exact]


@pytest.fixture(scope="module", params=sorted(FP8))
def fmt(request):
    return request.param


@pytest.fixture(scope="module")
def hard_values(fmt):
    values = hard_float32_values(fmt)
    assert values.size >= 1_000_000
    return values


# -- decode ------------------------------------------------------------------------------------------------------------
def test_decode_all_fp8_codes_match_ml_dtypes(fmt):
    codes = np.arange(256, dtype=np.uint8)
    expected = codes.view(FP8[fmt][0]).astype(np.float32)
    got = decode(codes, fmt)
    assert got.dtype == np.float32
    assert same(got, expected), mismatches(got, expected, codes)
    assert np.flatnonzero(np.isnan(got)).tolist() == [0x80]


def test_decode_all_fp8_codes_match_p3109_table_and_scale(fmt):
    codes = np.arange(256, dtype=np.uint8)
    expected = gfloat.decode_ndarray(FP8[fmt][1], codes.astype(np.int64))
    for scale in SCALES:
        assert same(decode(codes, fmt, scale=scale), expected * 2.0**scale), scale


def test_decode_all_f16_codes_match_numpy():
    codes = np.arange(1 << 16, dtype=np.uint16)
    assert same(decode(codes, "f16"), codes.view(np.float16).astype(np.float32))


# -- nearest, NaN on overflow: ml_dtypes -------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", SCALES)
def test_nan_mode_on_all_float16_patterns_matches_ml_dtypes(fmt, scale):
    x, y = scaled_inputs(ALL_F16.astype(np.float32), scale)
    assert x.size == ALL_F16.size  # every float16 value times 2**scale is exact in float32
    expected_codes = ml_dtypes_codes(y, fmt)
    expected = ml_dtypes_values(y, fmt, scale)
    x16 = ALL_F16 if scale == 0 else x  # float16 input itself at scale 0
    got = quantize(x16, fmt, scale=scale, overflow="nan")
    assert same(got, expected), mismatches(got, expected, x)
    assert np.array_equal(encode(x16, fmt, scale=scale, overflow="nan"), expected_codes)


@pytest.mark.parametrize("scale", SCALES)
def test_nan_mode_on_hard_float32_values_matches_ml_dtypes(fmt, hard_values, scale):
    x, y = scaled_inputs(hard_values, scale)
    assert x.size > 0.9 * hard_values.size
    expected = ml_dtypes_values(y, fmt, scale)
    got = quantize(x, fmt, scale=scale, overflow="nan")
    assert same(got, expected), mismatches(got, expected, x)
    assert np.array_equal(encode(x, fmt, scale=scale, overflow="nan"), ml_dtypes_codes(y, fmt))


# -- nearest, saturating: gfloat P3109 sat=True, and ml_dtypes of the clipped value ------------------------------------
@pytest.mark.parametrize("scale", SCALES)
def test_sat_mode_matches_gfloat_p3109_saturating(fmt, hard_values, scale):
    fi = FP8[fmt][1]
    rng = np.random.default_rng(1)
    subset = np.concatenate([ALL_F16.astype(np.float32), rng.choice(hard_values, 100_000, replace=False)])
    x, y = scaled_inputs(subset[np.isfinite(subset)], scale)  # gfloat saturates Inf; the IPU gives NaN (tested below)
    expected_values = gfloat.round_ndarray(fi, y.astype(np.float64), sat=True)
    got = quantize(x, fmt, scale=scale, overflow="sat")
    assert same(got, expected_values * 2.0**scale), mismatches(got, expected_values * 2.0**scale, x)
    assert np.array_equal(encode(x, fmt, scale=scale), gfloat.encode_ndarray(fi, expected_values).astype(np.uint8))


@pytest.mark.parametrize("scale", SCALES)
def test_sat_mode_on_hard_float32_values_is_rounding_of_the_clipped_value(fmt, hard_values, scale):
    """Saturation = round(clip(y, -max, max)) for finite y (max is on the grid, rounding is monotone); Inf -> NaN."""
    info = format_info(fmt)
    x, y = scaled_inputs(hard_values, scale)
    clipped = np.where(np.isinf(y), np.nan, np.clip(y, -info.max_value, info.max_value)).astype(np.float32)
    expected = ml_dtypes_values(clipped, fmt, scale)
    got = quantize(x, fmt, scale=scale)
    assert same(got, expected), mismatches(got, expected, x)


def test_infinities_nan_and_negative_zero_in_fp8(fmt):
    x = np.array([np.inf, -np.inf, np.nan, -0.0, -1e-30, 0.0], np.float32)
    for overflow in ("sat", "nan"):
        got = quantize(x, fmt, overflow=overflow)
        assert np.isnan(got[:3]).all()
        assert not np.signbit(got[3:]).any() and (got[3:] == 0).all()
        assert encode(x, fmt, overflow=overflow).tolist() == [0x80, 0x80, 0x80, 0x00, 0x00, 0x00]


@pytest.mark.parametrize("overflow, big, big_code", [("nan", np.nan, 0x80), ("sat", 240.0, 0x7F)])
def test_poplibs_quarter_vectors_f143(overflow, big, big_code):
    """poplibs QuarterTypeArithmeticTests, F143: (scale, input, stored code value)."""
    cases = [
        (0, 2.0**-12, 0.0), (0, 2.0**33, big), (0, 8.0, 8.0),
        (-10, 2.0**-12, 2.0**-2), (-10, 8.0, big),
        (31, 2.0**33, 4.0), (31, 8.0, 0.0),
    ]
    for scale, x, stored in cases:
        code = encode(np.float32(x), "f143", scale=scale, overflow=overflow)
        expected_code = big_code if stored is big else int(ml_dtypes_codes(np.float32(stored), "f143"))
        assert int(code) == expected_code, (scale, x, overflow)
        assert same(quantize(np.float32(x), "f143", scale=scale, overflow=overflow), np.float32(stored * 2.0**scale))


def test_rne_before_overflow_f143():
    x = np.array([247.99, 248.0, 250.0, 239.0, 232.0, 232.01], np.float32)
    assert quantize(x, "f143", overflow="nan").tolist()[:1] == [240.0]
    assert np.isnan(quantize(x, "f143", overflow="nan")[1:3]).all()
    assert quantize(x, "f143").tolist() == [240.0, 240.0, 240.0, 240.0, 224.0, 240.0]


# -- float64 and float16 inputs ----------------------------------------------------------------------------------------
def test_float64_is_rounded_once():
    x = np.float64(1 + 1 / 16 + 2**-30)
    assert quantize(x, "f143") == np.float32(1.125)  # ml_dtypes goes through float32 and gives 1.0
    assert float(np.float32(x).astype(ml_dtypes.float8_e4m3fnuz)) == 1.0


@pytest.mark.parametrize("scale", [0, -13, 31])
def test_float64_matches_gfloat(fmt, scale):
    rng = np.random.default_rng(2)
    grid = fp8_grid(fmt).astype(np.float64)
    ties = (grid[:-1] + grid[1:]) / 2
    y = np.concatenate([ties + ties * 2.0**-40, ties - ties * 2.0**-40, ties,
                        rng.standard_normal(50_000) * 2.0 ** rng.integers(-20, 20, 50_000)])
    y = np.concatenate([y, -y])
    for overflow, sat in (("sat", True), ("nan", False)):
        expected = gfloat.round_ndarray(FP8[fmt][1], y, sat=sat) * 2.0**scale
        got = quantize(y * 2.0**scale, fmt, scale=scale, overflow=overflow)
        assert got.dtype == np.float32
        assert same(got, expected), mismatches(got, expected, y)


def test_float16_and_float32_inputs_agree(fmt):
    assert same(quantize(ALL_F16, fmt, scale=-3), quantize(ALL_F16.astype(np.float32), fmt, scale=-3))


# -- f16 ---------------------------------------------------------------------------------------------------------------
def test_f16_sat_is_numpy_cast_except_saturation():
    grid = np.unique(ALL_F16[np.isfinite(ALL_F16)].astype(np.float32))
    ties = (grid[:-1] + (grid[1:] - grid[:-1]) / 2).astype(np.float32)  # exact: 12 significant bits
    values = np.concatenate([hard_float32_values("f152", seed=3), ties, np.nextafter(ties, np.float32(np.inf)),
                             np.nextafter(ties, np.float32(-np.inf))])
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16).astype(np.float32)
    finite_overflow = np.isinf(expected) & np.isfinite(values)
    assert finite_overflow.sum() > 1000
    expected[finite_overflow] = np.copysign(np.float32(65504), values[finite_overflow])
    assert same(quantize(values, "f16"), expected), mismatches(quantize(values, "f16"), expected, values)
    expected_nan_mode = np.where(finite_overflow, np.nan, expected)
    assert same(quantize(values, "f16", overflow="nan"), expected_nan_mode)
    assert same(quantize(ALL_F16, "f16"), ALL_F16.astype(np.float32))
    assert np.array_equal(encode(ALL_F16[~np.isnan(ALL_F16)], "f16"), ALL_F16[~np.isnan(ALL_F16)].view(np.uint16))


def test_f16_float64_single_rounding_matches_numpy_direct_cast():
    rng = np.random.default_rng(4)
    x = rng.standard_normal(200_000) * 2.0 ** rng.integers(-30, 17, 200_000)
    grid = ALL_F16[np.isfinite(ALL_F16)].astype(np.float64)
    grid = np.unique(grid)
    ties = (grid[:-1] + grid[1:]) / 2
    x = np.concatenate([x, ties, ties + np.abs(ties) * 2.0**-35, ties - np.abs(ties) * 2.0**-35])
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16).astype(np.float32)  # numpy converts float64 -> float16 directly
    expected = np.where(np.isinf(expected), np.copysign(np.float32(65504), x), expected).astype(np.float32)
    assert same(quantize(x, "f16"), expected), mismatches(quantize(x, "f16"), expected, x)


def test_f16_codes_of_specials():
    x = np.array([np.inf, -np.inf, np.nan, -0.0, 65504, 1e6, -1e-10], np.float32)
    assert encode(x, "f16").tolist() == [0x7C00, 0xFC00, 0x7E00, 0x8000, 0x7BFF, 0x7BFF, 0x8000]


# -- stochastic rounding -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt_name, scale", [("f16", 0), ("f143", 0), ("f143", -5), ("f152", 7)])
def test_stochastic_rounding_is_unbiased_between_two_neighbours(fmt_name, scale):
    info = format_info(fmt_name)
    points = np.array([1.3, -2.71, 0.6 * info.min_normal, 1.05 * info.max_value / 2, -3e-3 * info.max_value])
    points = (points * 2.0**scale).astype(np.float32)
    draws = 20_000
    x = np.repeat(points, draws)
    got = quantize(x, fmt_name, scale=scale, rounding="stochastic", rng=np.random.default_rng(7)).reshape(-1, draws)
    down = quantize(points, fmt_name, scale=scale)  # RNE picks one of the two neighbours; find the other
    for i, p in enumerate(points.astype(np.float64)):
        values = np.unique(got[i])
        assert values.size == 2, (p, values)
        lo, hi = values
        assert lo < p < hi and down[i] in values
        frac = (p - lo) / (hi - lo)
        sigma = (hi - lo) * np.sqrt(frac * (1 - frac) / draws)
        assert abs(got[i].astype(np.float64).mean() - p) < 5 * sigma, (p, got[i].mean())


def test_stochastic_rounding_reproducible_and_exact_on_grid(fmt):
    x = np.random.default_rng(8).standard_normal(50_000).astype(np.float32)
    first = quantize(x, fmt, rounding="stochastic", rng=np.random.default_rng(11))
    again = quantize(x, fmt, rounding="stochastic", rng=np.random.default_rng(11))
    other = quantize(x, fmt, rounding="stochastic", rng=np.random.default_rng(12))
    assert same(first, again) and not same(first, other)
    grid = decode(np.arange(256, dtype=np.uint8), fmt)
    grid = grid[np.isfinite(grid)]
    assert same(quantize(grid, fmt, rounding="stochastic", rng=np.random.default_rng(0)), grid)
    special = np.array([1e9, -1e9, np.inf, np.nan], np.float32)
    info = format_info(fmt)
    got = quantize(special, fmt, rounding="stochastic", rng=np.random.default_rng(0))
    assert got[:2].tolist() == [info.max_value, -info.max_value] and np.isnan(got[2:]).all()


# -- bad input ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, error, words", [
    (lambda: quantize(np.ones(3, np.float32), "f8"), ValueError, ["'f8'", "f16, f143, f152"]),
    (lambda: quantize(np.ones(3, np.float32), "F143"), ValueError, ["'F143'", "f143"]),
    (lambda: quantize(np.ones(3, np.float32), "f143", scale=32), ValueError, ["32", "[-32, 31]"]),
    (lambda: quantize(np.ones(3, np.float32), "f152", scale=-33), ValueError, ["-33", "[-32, 31]"]),
    (lambda: quantize(np.ones(3, np.float32), "f143", scale=1.5), ValueError, ["1.5", "integer"]),
    (lambda: quantize(np.ones(3, np.float32), "f16", scale=2), ValueError, ["f16", "scale=0", "2"]),
    (lambda: quantize(np.arange(3), "f143"), TypeError, ["int64", "float16, float32 or float64"]),
    (lambda: quantize(np.ones(3, bool), "f16"), TypeError, ["bool", "float32"]),
    (lambda: quantize(np.ones(3, np.float32), "f143", overflow="inf"), ValueError, ["'inf'", "sat, nan"]),
    (lambda: quantize(np.ones(3, np.float32), "f143", rounding="up"), ValueError, ["'up'", "nearest, stochastic"]),
    (lambda: quantize(np.ones(3, np.float32), "f143", rounding="stochastic"), ValueError, ["rng", "Generator"]),
    (lambda: decode(np.ones(3, np.float32), "f143"), TypeError, ["float32", "uint8"]),
    (lambda: decode(np.array([0, 300]), "f143"), ValueError, ["[0, 255]", "300"]),
    (lambda: encode(np.ones(3, np.float32), "e4m3"), ValueError, ["'e4m3'", "f16, f143, f152"]),
])
def test_bad_input_is_a_clear_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_shapes_and_scalars_are_kept():
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)[:, ::2]  # non-contiguous
    assert quantize(x, "f143").shape == (2, 2, 4)
    assert encode(x, "f16").dtype == np.uint16 and encode(x, "f152").dtype == np.uint8
    assert quantize(1.0625, "f143").shape == ()
    assert same(decode(encode(x, "f152", scale=-2), "f152", scale=-2), quantize(x, "f152", scale=-2))
    for fmt_name, scale in (("f16", 0), ("f143", -3)):
        y = np.ascontiguousarray(x)
        assert round_inplace(y, fmt_name, scale=scale) is y and same(y, quantize(x, fmt_name, scale=scale))
    with pytest.raises(TypeError, match="C-contiguous float32"):
        round_inplace(x, "f16")


@pytest.mark.numpy_only  # the numpy path's worker threads
@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_threaded_rounding_equals_one_thread(monkeypatch, threads):
    """Arrays over a million elements are rounded in parts on worker threads: every part boundary, thread count and
    special value (zeros of both signs, subnormals, overflow, Inf, NaN) gives the single-thread result."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(3_000_001) * np.exp(rng.uniform(-40, 14, 3_000_001))).astype(np.float32)
    x[::1000] = -0.0
    x[1::1000] = np.inf
    x[2::1000] = np.nan
    x[3::1000] = -1e5
    monkeypatch.setenv("CONFORMANCE_THREADS", "1")
    expected = {fmt: quantize(x, fmt, scale=0 if fmt == "f16" else -3) for fmt in ("f16", "f143")}
    monkeypatch.setenv("CONFORMANCE_THREADS", threads)
    for fmt, want in expected.items():
        got = quantize(x, fmt, scale=0 if fmt == "f16" else -3)
        assert same(got, want), mismatches(got, want, x)
    y = x.copy()
    round_inplace(y, "f16")
    assert same(y, expected["f16"])


@pytest.mark.numpy_only  # the numpy path's worker threads
def test_bad_thread_count_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CONFORMANCE_THREADS", "two")
    with pytest.raises(ValueError, match="CONFORMANCE_THREADS must be a positive integer: .*got 'two'"):
        quantize(np.zeros(3_000_000, np.float32), "f16")


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_round_op_of_a_transposed_view_and_a_broadcast_operand_is_the_rounded_op(op):
    """A non-contiguous ``a`` (a transposed view, as attention heads are) with a broadcast ``b``: numpy hands back its
    result in ``a``'s layout; the rounding must still land on every element."""
    rng = np.random.default_rng(7)
    t = quantize(rng.standard_normal((2, 40, 32)).astype(np.float32), "f16").reshape(2, 40, 4, 8).transpose(0, 2, 1, 3)
    b = rng.standard_normal((40, 8)).astype(np.float32)
    expected = quantize({"add": np.add, "sub": np.subtract, "mul": np.multiply}[op](t, b, dtype=np.float32), "f16")
    got = round_op(op, t, b)
    assert got.flags.c_contiguous and np.array_equal(got.view(np.uint32), expected.view(np.uint32))


@pytest.mark.numpy_only  # compares torch:cpu's tensors with numpy's arrays
@pytest.mark.parametrize("fmt", ["f16", "f143"])
def test_round_op_of_host_tensors_is_numpys_bits(fmt):
    """On the host, with the compiled kernels, ``round_op`` of torch tensors is the numpy path's pass over their
    memory: numpy's bits on hard values (NaN, +-Inf, ties, overflow) for a same-shaped, a broadcast and a Python float
    operand, a transposed view, ``round_a`` and a float16 operand; the result is a tensor."""
    torch = pytest.importorskip("torch")
    from conformance.numerics import arrays

    library = arrays.load("torch:cpu")
    scale = -3 if fmt == "f143" else 0
    x = hard_float32_values("f143")[:600_000].reshape(1000, 600) * np.float32(2.0**scale)
    row = x[7].copy()
    with np.errstate(over="ignore"):
        half = x.astype(np.float16)
    cases = [("add", x, x[::-1].copy(), {}), ("mul", x, row, {}), ("sub", x, 0.1, {}), ("div", x.T, x[:, 7].copy(), {}),
             ("add", x, row, {"round_a": True}), ("mul", half, row, {})]
    for op, a, b, options in cases:
        with np.errstate(all="ignore"):
            expected = round_op(op, a, b, fmt, scale=scale, **options)
        ta = torch.from_numpy(np.ascontiguousarray(a.T)).T if a.ndim == 2 and not a.flags.c_contiguous else (
            torch.from_numpy(a))
        tb = b if isinstance(b, float) else torch.from_numpy(b)
        got = round_op(op, ta, tb, fmt, scale=scale, **options)
        assert isinstance(got, torch.Tensor) and library.on_host
        assert np.array_equal(got.numpy().view(np.uint32), expected.view(np.uint32)), (op, options)
