"""The rounding-bias probe: it leaves the hardware's results untouched, stays near zero for the correct emulator and
reads clearly for a biased rounding."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.accuracy.diagnosis import LocalErrorOps, local_errors, rounding_bias, summarise_bias
from conformance.accuracy.evaluation import probe_samples, run_hardware
from conformance.hardware import get_backend
from conformance.hardware.ipu.faults import get_fault
from models import load_model, run_batched
from models.ops import Ops

ROWS = 64


@pytest.fixture(scope="module")
def widedeep():
    model = load_model("widedeep")
    return model, model.sample_inputs(ROWS, seed=0)


def test_the_probe_passes_the_hardware_results_through(widedeep):
    model, inputs = widedeep
    backend = get_backend("ipu")
    plain = run_batched(model, inputs, ROWS, backend.prepare(model, "fp8", batch_size=ROWS).ops())
    probe = LocalErrorOps(backend.prepare(model, "fp8", batch_size=ROWS).ops(), Ops())
    probed = model(inputs, probe)
    assert all(np.array_equal(plain[k], probed[k]) for k in plain)
    assert probe.bias and all(-1.0 <= b <= 1.0 for _, _, b, _ in probe.bias)


def test_the_probe_rides_on_the_run_without_changing_it(widedeep):
    """run_hardware with the probe: the same outputs as without it (the same batches), and the same local errors as
    a probe run of the probe samples on their own."""
    model, inputs = widedeep
    backend = get_backend("ipu")
    batch = 48  # the probe samples (a hundred-odd rows at most) then batches of 48: three batches in all
    plain, none = run_hardware(model, inputs, batch, backend.prepare(model, "fp8", batch_size=ROWS).ops(), probe=False)
    probed, local = run_hardware(model, inputs, batch, backend.prepare(model, "fp8", batch_size=ROWS).ops(), probe=True)
    assert none is None and all(np.array_equal(plain[k], probed[k]) for k in plain)
    head = probe_samples(inputs, batch)
    assert 2 <= len(head) < ROWS
    alone = local_errors(model, inputs, backend.prepare(model, "fp8", batch_size=ROWS).ops(), Ops(), head)
    assert local == alone and summarise_bias(local) == summarise_bias(alone)


@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_correct_rounding_is_unbiased_and_truncation_is_not(widedeep, precision):
    model, inputs = widedeep
    backend = get_backend("ipu")
    samples = list(range(ROWS))
    correct, kinds, _ = rounding_bias(model, inputs, backend.prepare(model, precision, batch_size=ROWS).ops(), Ops(),
                                      samples)
    assert kinds and abs(correct) < 0.1, kinds
    fault = get_fault("f16-truncation" if precision == "fp16" else "fp8-truncation")
    with fault.inject():
        truncated, kinds, _ = rounding_bias(model, inputs, backend.prepare(model, precision, batch_size=ROWS).ops(), Ops(),
                                            samples)
    assert truncated < -0.5, kinds  # toward zero: the errors shrink magnitudes


def test_six_percent_high_fp8_values_read_as_growth(widedeep):
    model, inputs = widedeep
    backend = get_backend("ipu")
    with get_fault("fp8-values-6pct-high").inject():
        bias, kinds, _ = rounding_bias(model, inputs, backend.prepare(model, "fp8", batch_size=ROWS).ops(), Ops(),
                                       list(range(ROWS)))
    assert bias > 0.5, kinds


def test_error_sums_are_the_same_on_both_kernel_paths():
    """The probe's one-pass sums (compiled) against numpy's, on values with NaN, Inf, zeros, subnormals and values
    beyond FP16's range in both arrays."""
    from conformance import numerics
    from conformance.accuracy.diagnosis import FP16_MAX, FP16_SMALLEST_NORMAL
    from conformance.numerics.compiled import signed_error_sums

    rng = np.random.default_rng(3)
    exact = (rng.standard_normal(100_002) * 10.0 ** rng.integers(-7, 6, 100_002)).astype(np.float32)
    y = (exact * (1 + rng.standard_normal(exact.size).astype(np.float32) * 1e-3)).astype(np.float32)
    for arr, at in ((exact, [0, 5, 9]), (y, [7, 11, 13])):
        arr[at] = [np.nan, np.inf, -np.inf]
    exact[20:30] = 0.0
    exact = exact.reshape(7, -1)[:, ::2]  # strided views go through ravel
    y = y.reshape(7, -1)[:, ::2]
    with numerics.kernel_path("numba"):
        compiled = signed_error_sums(y, exact, FP16_SMALLEST_NORMAL, FP16_MAX)
    with numerics.kernel_path("numpy"):
        reference = signed_error_sums(y, exact, FP16_SMALLEST_NORMAL, FP16_MAX)
    assert compiled[2] == reference[2] > 0
    magnitude = np.abs(exact.astype(np.float64))
    assert reference[2] == np.count_nonzero(np.isfinite(y) & (magnitude >= FP16_SMALLEST_NORMAL) & (magnitude <= FP16_MAX))
    np.testing.assert_allclose(compiled[:2], reference[:2], rtol=1e-9)


@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 47])
def test_error_sums_of_a_few_elements_are_numpys(size):
    """The compiled sums run in lanes of 16 elements: arrays shorter than a lane, a whole lane, and a tail after
    whole lanes give numpy's count, and its sums to the last bits."""
    from conformance import numerics
    from conformance.accuracy.diagnosis import FP16_MAX, FP16_SMALLEST_NORMAL
    from conformance.numerics.compiled import signed_error_sums

    exact = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    y = exact.astype(np.float16).astype(np.float32)
    with numerics.kernel_path("numba"):
        compiled = signed_error_sums(y, exact, FP16_SMALLEST_NORMAL, FP16_MAX)
    with numerics.kernel_path("numpy"):
        reference = signed_error_sums(y, exact, FP16_SMALLEST_NORMAL, FP16_MAX)
    assert compiled[2] == reference[2] == size
    np.testing.assert_allclose(compiled[:2], reference[:2], rtol=1e-12, atol=0)
