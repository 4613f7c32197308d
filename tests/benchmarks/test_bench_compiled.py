"""Speed of the compiled (numba) kernels against the numpy oracle path, timed in the same run: the FP16 rounding
fused into an add against the add followed by the numpy rounding passes (4M float32; a plain add is the floor), and
matmul with half partials (FP16 and F143 operands, 384x768 @ 768x3072) against numpy's float32 matmul. Targets
(subject / baseline): half partials <= 3.0x sgemm for FP16 operands, <= 2.5x for F143. The per-model forward ratios are
``test_bench_ipu.py`` (on the default, compiled path)."""

from __future__ import annotations

import numpy as np
import pytest

from conformance import numerics

ROUNDS = 5
SIZE = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def values():
    rng = np.random.default_rng(0)
    return (rng.standard_normal(SIZE) * 4).astype(np.float32), (rng.standard_normal(SIZE) * 4).astype(np.float32)


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((384, 768)), rng.standard_normal((768, 3072)) * 0.05
    return {fmt: (numerics.quantize(a, fmt), numerics.quantize(b, fmt)) for fmt in ("f16", "f143")}


def run(benchmark, group, role, path, fn, *args, target=None, **kwargs):
    benchmark.group = group
    benchmark.extra_info["role"] = role
    if target is not None:
        benchmark.extra_info["target"] = target

    def timed():
        with numerics.kernel_path(path):
            return fn(*args, **kwargs)

    benchmark.pedantic(timed, rounds=ROUNDS, warmup_rounds=1)


def add_then_round(a, b, out):
    np.add(a, b, out=out)
    return numerics.round_inplace(out, "f16")


@pytest.mark.parametrize("path", numerics.KERNEL_PATHS)
def test_add_rounded_to_f16(benchmark, values, path):
    out = np.empty_like(values[0])
    if path == "numba":
        run(benchmark, "compiled-add-round-f16", "subject", path, numerics.round_op, "add", *values, out=out)
    else:
        run(benchmark, "compiled-add-round-f16", "baseline", path, add_then_round, *values, out)


def test_plain_add(benchmark, values):
    out = np.empty_like(values[0])
    run(benchmark, "compiled-add-round-f16-vs-add", "baseline", "numpy", np.add, *values, out=out)


def test_add_rounded_fused_vs_plain_add(benchmark, values):
    out = np.empty_like(values[0])
    run(benchmark, "compiled-add-round-f16-vs-add", "subject", "numba", numerics.round_op, "add", *values, out=out)


@pytest.mark.parametrize("fmt", ["f16", "f143"])
@pytest.mark.parametrize("path", numerics.KERNEL_PATHS)
def test_half_partials_matmul(benchmark, operands, fmt, path):
    target = (3.0 if fmt == "f16" else 2.5) if path == "numba" else None
    run(benchmark, f"compiled-half-partials-{fmt}", "subject", path, numerics.matmul, *operands[fmt],
        partials="half", operand_format=fmt, target=target)


@pytest.mark.parametrize("fmt", ["f16", "f143"])
def test_sgemm(benchmark, operands, fmt):
    run(benchmark, f"compiled-half-partials-{fmt}", "baseline", "numpy", np.matmul, *operands[fmt])
