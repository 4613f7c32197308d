"""Every model's emulated outputs are the same bits on the compiled (numba) and numpy kernel paths, at every
precision of the ipu backend, computed in the same test at small sizes (the two paths, not stored outputs)."""

from __future__ import annotations

import numpy as np
import pytest

from conformance import numerics
from conformance.hardware import get_backend
from models import MODEL_NAMES, load_model, run_batched
from models.seeds import CALIBRATION_SEED, EVAL_SEED

PRECISIONS = ("fp16", "fp16-half-partials", "fp8", "fp8-weights")
# model -> (config overrides that keep it small, samples)
SMALL = {
    "bert-base": ({"num_hidden_layers": 1, "seq_len": 64}, 2),
    "albert": ({"num_hidden_layers": 1, "seq_len": 64}, 2),
    "roformer": ({"num_hidden_layers": 1, "seq_len": 64}, 2),
    "conformer": ({"num_hidden_layers": 1, "frames": 128}, 2),
    "resnet50": ({"image_size": 32, "hidden_sizes": (32, 64, 64, 64), "depths": (1, 1, 1, 1), "embedding_size": 16,
                  "num_labels": 10}, 2),
    "widedeep": ({}, 64),
}


def test_every_model_is_covered():
    assert set(SMALL) == set(MODEL_NAMES)


@pytest.fixture(scope="module")
def backend():
    return get_backend("ipu")


@pytest.mark.parametrize("name", list(SMALL))
def test_outputs_equal_on_both_kernel_paths(backend, name):
    overrides, samples = SMALL[name]
    model = load_model(name, **overrides)
    inputs = model.sample_inputs(samples, seed=EVAL_SEED)
    calibration = model.sample_inputs(samples, seed=CALIBRATION_SEED)
    assert set(PRECISIONS) <= set(backend.precisions)
    for precision in PRECISIONS:
        outputs = {}
        for path in numerics.KERNEL_PATHS:
            with numerics.kernel_path(path):  # FP8 calibration and weights quantized on the path too
                prepared = backend.prepare(model, precision, calibration, batch_size=samples)
                outputs[path] = run_batched(model, inputs, samples, prepared.ops())
        assert set(outputs["numpy"]) == set(outputs["numba"]) == set(model.output_names)
        for output in model.output_names:
            expected, actual = (np.ascontiguousarray(outputs[p][output], np.float32) for p in ("numpy", "numba"))
            assert expected.shape == actual.shape
            differ = np.count_nonzero(expected.view(np.uint32) != actual.view(np.uint32))
            assert differ == 0, f"{name} {precision} {output}: {differ} of {expected.size} values differ between paths"
