"""The compiled (numba) kernels against the numpy oracle, bit for bit: every rounding of the emulator (quantize,
round_inplace, round_op, matmul/conv2d with float and half partials) on the numerics tests' hard value sets, every
FP8 scale, both overflow modes, NaN/Inf/-0; bad input; the path switches; the fallback when numba cannot be imported."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

from conformance import numerics
from conformance.numerics import compiled, formats
from tests.test_numerics_formats import ALL_F16, SCALES, hard_float32_values

FP8 = ("f143", "f152")
SAMPLED_SCALES = tuple(sorted(set(SCALES) | set(np.random.default_rng(14).integers(-32, 32, 8).tolist())))


def both(fn):
    """``fn()`` on the numpy path and on the numba path."""
    with numerics.kernel_path("numpy"):
        expected = fn()
    with numerics.kernel_path("numba"):
        actual = fn()
    return expected, actual


def assert_bits_equal(expected, actual, inputs=None):
    expected, actual = np.asarray(expected), np.asarray(actual)
    assert expected.dtype == actual.dtype and expected.shape == actual.shape
    bits = np.uint32 if expected.dtype == np.float32 else np.uint64
    bad = np.flatnonzero(expected.reshape(-1).view(bits) != actual.reshape(-1).view(bits))
    where = "" if inputs is None else f" at inputs {np.asarray(inputs).reshape(-1)[bad[:5]]}"
    assert bad.size == 0, (f"{bad.size} of {expected.size} differ{where}: numpy {expected.reshape(-1)[bad[:5]]}, "
                           f"numba {actual.reshape(-1)[bad[:5]]}")


@pytest.fixture(scope="module", params=["f16", *FP8])
def fmt(request):
    return request.param


@pytest.fixture(scope="module")
def hard(fmt):
    return hard_float32_values("f152" if fmt == "f16" else fmt)  # f152 spans f16's range


def scales_of(fmt):
    return (0,) if fmt == "f16" else SAMPLED_SCALES


@pytest.mark.parametrize("overflow", numerics.OVERFLOW_MODES)
def test_quantize_all_float16_patterns(fmt, overflow):
    for scale in scales_of(fmt):
        with np.errstate(invalid="ignore"):
            x = ALL_F16.astype(np.float32) * np.float32(2.0**scale)
        expected, actual = both(lambda: numerics.quantize(x, fmt, scale=scale, overflow=overflow))
        assert_bits_equal(expected, actual, x)


@pytest.mark.parametrize("overflow", numerics.OVERFLOW_MODES)
def test_quantize_hard_float32_values(fmt, hard, overflow):
    for scale in scales_of(fmt):
        with np.errstate(over="ignore"):
            x = hard * np.float32(2.0**scale)  # the hard cases of the scaled grid (exact but where it overflows)
        expected, actual = both(lambda: numerics.quantize(x, fmt, scale=scale, overflow=overflow))
        assert_bits_equal(expected, actual, x)
        expected, actual = both(lambda: numerics.round_inplace(x.copy(), fmt, scale=scale, overflow=overflow))
        assert_bits_equal(expected, actual, x)


def test_specials_nan_payloads_and_signed_zero(fmt):
    bits = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x7FA12345, 0x80000000,
                     0x00000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF], np.uint32)
    x = bits.view(np.float32)
    for overflow in numerics.OVERFLOW_MODES:
        with np.errstate(invalid="ignore"):
            expected, actual = both(lambda: numerics.quantize(x, fmt, overflow=overflow))
        assert_bits_equal(expected, actual, x)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_round_op_on_hard_values_with_every_broadcast(fmt, hard, op):
    rng = np.random.default_rng(3)
    n = 60 * 1024
    a = rng.choice(hard, n)
    b = rng.choice(hard, n)
    cases = [(a, b), (a.reshape(60, 1024), b[:1024]), (a.reshape(4, 15, 1024), b[:15].reshape(15, 1)),
             (a.reshape(60, 1024), b[:60].reshape(60, 1)), (a.reshape(3, 20, 32, 32), b[:20].reshape(1, 20, 1, 1)),
             (a, b[:1]), (a.reshape(60, 1024)[:, ::2], b[:512]), (a.reshape(60, 1024), b.reshape(60, 1024)[:, :1]),
             (a[:1024], b.reshape(60, 1024))]
    scale = -3 if fmt != "f16" else 0
    for x, y in cases:
        for overflow in numerics.OVERFLOW_MODES:
            with np.errstate(all="ignore"):
                expected, actual = both(lambda: numerics.round_op(op, x, y, fmt, scale=scale, overflow=overflow))
            assert_bits_equal(expected, actual)
            with np.errstate(all="ignore"):
                reference = numerics.quantize(getattr(np, {"sub": "subtract", "mul": "multiply", "div": "divide"}
                                                      .get(op, op))(x, y, dtype=np.float32), fmt, scale=scale,
                                              overflow=overflow)
            assert_bits_equal(reference, actual)


def test_round_op_rounding_a_first_on_hard_values_with_every_broadcast(fmt, hard):
    """``round_a``: quantize(quantize(a) + b) in one pass, in place or not, against the two steps written out."""
    rng = np.random.default_rng(13)
    n = 60 * 1024
    with np.errstate(over="ignore"):
        a = rng.choice(hard, n) * np.float32(1.0009765625)  # off the grid: the first rounding matters
    b = rng.choice(hard, n)
    cases = [(a, b), (a.reshape(60, 1024), b[:1024]), (a.reshape(4, 15, 1024), b[:15].reshape(15, 1)),
             (a.reshape(3, 20, 32, 32), b[:20].reshape(1, 20, 1, 1)), (a, b[:1]),
             (a.reshape(60, 1024)[:, ::2], b[:512])]
    scale = -3 if fmt != "f16" else 0
    for x, y in cases:
        for overflow in numerics.OVERFLOW_MODES:
            with np.errstate(all="ignore"):
                reference = numerics.quantize(np.add(numerics.quantize(x, fmt, scale=scale, overflow=overflow), y,
                                                     dtype=np.float32), fmt, scale=scale, overflow=overflow)
                expected, actual = both(lambda: numerics.round_op("add", x, y, fmt, scale=scale, overflow=overflow,
                                                                  round_a=True))
                assert_bits_equal(reference, expected)
                assert_bits_equal(reference, actual)
                if x.flags.c_contiguous:
                    in_place = x.copy()
                    with numerics.kernel_path("numba"):
                        numerics.round_op("add", in_place, y, fmt, scale=scale, overflow=overflow, round_a=True,
                                          out=in_place)
                    assert_bits_equal(reference, in_place)
    with pytest.raises(ValueError, match="round_a=True is for op 'add'"):
        numerics.round_op("mul", a, b, round_a=True)


def test_round_op_writes_into_out_and_keeps_threads_equal(monkeypatch):
    rng = np.random.default_rng(4)
    a = (rng.standard_normal((1200, 1024)) * 100).astype(np.float32)  # large enough to be split over threads
    b = (rng.standard_normal(1024) * 100).astype(np.float32)
    with numerics.kernel_path("numpy"):
        expected = numerics.round_op("add", a, b)
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("CONFORMANCE_THREADS", threads)
        out = a.copy()
        with numerics.kernel_path("numba"):
            assert numerics.round_op("add", out, b, out=out) is out
        assert_bits_equal(expected, out)


@pytest.mark.parametrize("operand_format", ["f16", *FP8])
@pytest.mark.parametrize("overflow", numerics.OVERFLOW_MODES)
def test_matmul_and_conv2d_half_and_float_partials(operand_format, overflow):
    rng = np.random.default_rng(5)
    scale = 0 if operand_format == "f16" else -4
    a = numerics.quantize(rng.standard_normal((3, 40, 200)) * 8, operand_format, scale=scale)
    b = numerics.quantize(rng.standard_normal((200, 70)) * 8, operand_format, scale=scale)
    a[0, 0, :3] = [np.inf, -np.inf, np.nan]
    big = numerics.quantize(np.full((8, 64), 60000.0 if operand_format != "f143" else 240.0 * 2.0**scale),
                            operand_format, scale=scale)
    for partials in numerics.PARTIALS:
        kwargs = dict(partials=partials, operand_format=operand_format, overflow=overflow)
        with np.errstate(invalid="ignore"):
            expected, actual = both(lambda: numerics.matmul(a, b, **kwargs))
        assert_bits_equal(expected, actual)
        expected, actual = both(lambda: numerics.matmul(big, big.T.copy(), **kwargs))  # saturating partials
        assert_bits_equal(expected, actual)
        x = numerics.quantize(rng.standard_normal((2, 6, 9, 9)), operand_format, scale=scale)
        w = numerics.quantize(rng.standard_normal((8, 3, 3, 3)), operand_format, scale=scale)
        expected, actual = both(lambda: numerics.conv2d(x, w, padding=1, groups=2, **kwargs))
        assert_bits_equal(expected, actual)


@pytest.mark.parametrize("operand_format", ["f16", "f143"])
def test_half_partials_shared_over_threads_equal_the_numpy_path(monkeypatch, operand_format):
    """One large tile (its K blocks shared out over the threads), a few tiles, many tiles (whole tiles shared out),
    saturating partials, NaN on overflow: the numpy path's bits with 1, 2 or 3 threads."""
    rng = np.random.default_rng(15)

    def operands(a_shape, b_shape, spread):
        return (numerics.quantize(rng.standard_normal(a_shape) * spread, operand_format),
                numerics.quantize(rng.standard_normal(b_shape) * spread, operand_format))

    cases = [operands((256, 768), (768, 768), 1.0), operands((3000, 64), (64, 128), 1.0),
             operands((4096, 96), (96, 512), 1.0), operands((12, 128, 64), (12, 64, 128), 1.0),
             operands((300, 640), (640, 200), 30.0)]  # the last saturates
    for a, b in cases:
        for overflow in numerics.OVERFLOW_MODES:
            with numerics.kernel_path("numpy"):
                expected = numerics.matmul(a, b, partials="half", operand_format=operand_format, overflow=overflow)
            for threads in ("1", "2", "3"):
                monkeypatch.setenv("CONFORMANCE_THREADS", threads)
                with numerics.kernel_path("numba"):
                    actual = numerics.matmul(a, b, partials="half", operand_format=operand_format, overflow=overflow)
                assert_bits_equal(expected, actual)


def test_bad_input_gives_the_same_results_or_errors():
    rng = np.random.default_rng(6)
    base = (rng.standard_normal((64, 64)) * 1000).astype(np.float32)
    readonly = base.copy()
    readonly.flags.writeable = False
    inputs = [base[:, ::3], base.T, readonly, np.empty((0, 5), np.float32), base.astype(np.float64),
              base.astype(np.float16), np.float32(3.3), base[::2]]
    for x in inputs:
        for fmt in numerics.FORMAT_NAMES:
            expected, actual = both(lambda: numerics.quantize(x, fmt))
            assert_bits_equal(expected, actual)
            expected, actual = both(lambda: numerics.round_op("mul", x, x, fmt))
            assert_bits_equal(expected, actual)
    for bad in (base[:, ::2], readonly, base.astype(np.float64)):
        for path in compiled.KERNEL_PATHS:
            with numerics.kernel_path(path), pytest.raises(TypeError, match="writeable C-contiguous float32"):
                numerics.round_inplace(bad, "f16")
    for path in compiled.KERNEL_PATHS:
        with numerics.kernel_path(path):
            with pytest.raises(TypeError, match="round_op out must be a writeable C-contiguous float32 array"):
                numerics.round_op("add", base, base, out=readonly)
            with pytest.raises(TypeError, match="round_op operand b must be a float16, float32 or float64 array"):
                numerics.round_op("add", base, base.astype(np.int32))
            with pytest.raises(ValueError, match="op must be one of: add, sub, mul, div; got 'pow'"):
                numerics.round_op("pow", base, base)


def test_kernel_path_switches_every_rounding_to_the_numpy_spans(monkeypatch):
    """Under kernel_path("numpy") every rounding ends in _NearestRounding.span (patching it changes them all);
    under "numba" none does."""
    calls = []
    original = formats._NearestRounding.span

    def counting(self, xs, ys):
        calls.append(xs.size)
        original(self, xs, ys)

    monkeypatch.setattr(formats._NearestRounding, "span", counting)
    x = np.linspace(-3, 3, 4096, dtype=np.float32).reshape(64, 64)
    runs = [lambda: numerics.quantize(x, "f143", scale=-2), lambda: numerics.round_inplace(x.copy(), "f16"),
            lambda: numerics.round_op("add", x, x[0]), lambda: numerics.matmul(x, x, partials="half"),
            lambda: numerics.matmul(x, x), lambda: numerics.conv2d(x.reshape(1, 1, 64, 64), x[:3, :3].reshape(1, 1, 3, 3),
                                                                   partials="half")]
    for run in runs:
        calls.clear()
        with numerics.kernel_path("numba"):
            run()
        assert calls == []
        with numerics.kernel_path("numpy"):
            with numerics.kernel_path("numba"):  # blocks nest: the inner one ends, the outer one's path is back
                pass
            run()
        assert calls


def test_kernel_path_and_variable_reject_unknown_names(monkeypatch):
    with pytest.raises(ValueError, match="kernel path must be one of: numba, numpy; got 'cuda'"):
        with numerics.kernel_path("cuda"):
            pass
    monkeypatch.setenv("CONFORMANCE_KERNELS", "Numba")
    with pytest.raises(ValueError, match="CONFORMANCE_KERNELS must be one of: numba, numpy .or unset.; got 'Numba'"):
        compiled.configured_path()
    monkeypatch.setenv("CONFORMANCE_KERNELS", "numpy")
    assert numerics.active_path() == "numpy" and compiled.jit() is None
    with numerics.kernel_path("numba"):
        assert numerics.active_path() == "numba"
    monkeypatch.setenv("CONFORMANCE_KERNELS", "")
    assert numerics.active_path() == "numba"


def test_without_numba_a_warning_once_and_the_numpy_results(monkeypatch):
    monkeypatch.setattr(compiled, "_loaded", None)
    monkeypatch.setitem(sys.modules, "numba", None)
    monkeypatch.setitem(sys.modules, "conformance.numerics._jit", None)
    monkeypatch.delattr(numerics, "_jit", raising=False)
    x = np.linspace(-70000, 70000, 10001, dtype=np.float32)
    with numerics.kernel_path("numpy"):
        expected = numerics.quantize(x, "f16")
    with numerics.kernel_path("numba"):
        with pytest.warns(RuntimeWarning, match="numba cannot be imported .*runs its numpy kernels"):
            actual = numerics.quantize(x, "f16")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once: a second warning would raise here
            again = numerics.quantize(x, "f16")
            assert compiled.jit() is None
    assert_bits_equal(expected, actual)
    assert_bits_equal(expected, again)


def test_unknown_kernels_variable_is_a_usage_error(pytester, monkeypatch):
    pytester.makepyfile(test_suite="def test_ran():\n    raise AssertionError('ran')\n")
    monkeypatch.setenv("CONFORMANCE_KERNELS", "fast")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*environment variable CONFORMANCE_KERNELS='fast' is not a kernel path; set it to "
                                 "one of: numba, numpy*"])


def test_numba_compile_time_is_measured_for_the_start_up_announcement():
    """What numba spends compiling is counted (the report's progress line says it with the test that paid for it);
    a function compiled here for the first time adds to it."""
    import numba

    from conformance.numerics import compiled

    if compiled.jit() is None:
        pytest.skip("the compiled path is not active")
    before = compiled.compile_seconds()

    @numba.njit
    def fresh(x):  # a new function: compiled now, never cached
        return x * 2.0 + 1.0

    assert fresh(1.5) == 4.0
    assert compiled.compile_seconds() > before


def test_kernels_not_yet_in_numbas_cache_are_announced_before_the_tests(tmp_path):
    """A fresh numba cache: the ipu backend says, before any test, that its kernels will compile; once they are
    compiled and cached, it says nothing. The numpy path compiles nothing."""
    import subprocess
    import textwrap

    script = textwrap.dedent("""
        import numpy as np
        from conformance.hardware import get_backend
        from conformance.numerics import compiled, formats
        backend = get_backend("ipu")
        print(repr(backend.start_up()))
        before = len(compiled.uncached_kernels())
        formats.quantize(np.linspace(-3, 3, 64, dtype=np.float32), "f16")
        print(0 < len(compiled.uncached_kernels()) < before)
        inlined = [n for n, k in vars(compiled.jit()).items() if getattr(k, "targetoptions", {}).get("inline") == "always"]
        print(bool(inlined) and not set(inlined) & set(compiled.uncached_kernels()))  # never cached on their own
        with compiled.kernel_path("numpy"):
            print(repr(backend.start_up()))
    """)
    env = {**__import__("os").environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    first, fewer, inlined_left_out, numpy_path = done.stdout.splitlines()[-4:]
    assert "compiling the emulator's kernels as they are first used" in first and "once per machine" in first
    assert fewer == inlined_left_out == "True" and numpy_path == "None"
