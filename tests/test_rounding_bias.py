"""The rounding-bias probe: it leaves the hardware's results untouched, stays near zero for the correct emulator and
reads clearly for a biased rounding."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.accuracy.diagnosis import LocalErrorOps, rounding_bias
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
