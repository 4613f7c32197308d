"""Speed of the numerics emulator against the tools it replaces, timed in the same run (16M float32 values; matmul
384x768 @ 768x3072 on an FP16 grid). Targets (subject / baseline): quantize f143 at scale -3 <= 0.25x
ml_dtypes' float8_e4m3fnuz round trip; quantize f16 <= 0.5x numpy's float16 round trip; matmul with float partials
<= 1.3x numpy float32 ``@``, with half partials <= 3x. quantize against a plain copy (the limit) is printed too."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from conformance.numerics import matmul, quantize

ROUNDS = 7
SIZE = 16 * 1024 * 1024


@pytest.fixture(scope="module")
def values():
    return (np.random.default_rng(0).standard_normal(SIZE) * 4).astype(np.float32)


@pytest.fixture(scope="module")
def fp16_operands():
    rng = np.random.default_rng(1)
    return quantize(rng.standard_normal((384, 768)), "f16"), quantize(rng.standard_normal((768, 3072)) * 0.05, "f16")


def run(benchmark, group, role, fn, *args, target=None, **kwargs):
    benchmark.group = group
    benchmark.extra_info["role"] = role
    if target is not None:
        benchmark.extra_info["target"] = target
    benchmark.pedantic(fn, args=args, kwargs=kwargs, rounds=ROUNDS, warmup_rounds=1)


def ml_dtypes_round_trip(x):
    return x.astype(ml_dtypes.float8_e4m3fnuz).astype(np.float32)


def numpy_f16_round_trip(x):
    return x.astype(np.float16).astype(np.float32)


def test_quantize_f143_vs_ml_dtypes(benchmark, values):
    run(benchmark, "numerics-quantize-f143", "subject", quantize, values, "f143", scale=-3, target=0.25)


def test_ml_dtypes_f143_round_trip(benchmark, values):
    run(benchmark, "numerics-quantize-f143", "baseline", ml_dtypes_round_trip, values)


def test_quantize_f143_vs_copy(benchmark, values):
    run(benchmark, "numerics-quantize-f143-vs-copy", "subject", quantize, values, "f143", scale=-3)


def test_plain_copy(benchmark, values):
    run(benchmark, "numerics-quantize-f143-vs-copy", "baseline", np.copy, values)


def test_quantize_f16(benchmark, values):
    run(benchmark, "numerics-quantize-f16", "subject", quantize, values, "f16", target=0.5)


def test_numpy_f16_round_trip(benchmark, values):
    run(benchmark, "numerics-quantize-f16", "baseline", numpy_f16_round_trip, values)


def test_matmul_float_partials(benchmark, fp16_operands):
    run(benchmark, "numerics-matmul", "subject", matmul, *fp16_operands, partials="float", target=1.3)


def test_matmul_half_partials(benchmark, fp16_operands):
    run(benchmark, "numerics-matmul", "subject", matmul, *fp16_operands, partials="half", target=3.0)


def test_numpy_float32_matmul(benchmark, fp16_operands):
    run(benchmark, "numerics-matmul", "baseline", np.matmul, *fp16_operands)
