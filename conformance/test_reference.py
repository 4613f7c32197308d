"""The FP32 reference outputs are intact and, on a hardware that runs FP32 (the ``cpu``), reproduced by it."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.accuracy import reference
from conformance.settings.session import run_settings
from models import run_batched

# A different BLAS or thread count changes FP32 sums in the last bits; anything beyond this is a real change.
REPRODUCTION_RTOL = 1e-4


def pytest_generate_tests(metafunc):
    if "model_name" in metafunc.fixturenames:
        models = run_settings(metafunc.config).models
        assert models, "no models selected"
        metafunc.parametrize("model_name", models)


def test_reference(model_name, settings, backend, model_store, user_cases):
    if model_name in user_cases:
        pytest.skip(f"{model_name} is judged on the user's checkpoint or data: its FP32 reference is computed in the "
                    "run (and cached), not stored")
    if not reference.ships(model_name):
        pytest.skip(f"{model_name} is a model shipped on its own: its FP32 reference is computed in the run, not "
                    "stored")
    model = model_store.get(model_name)
    stored = reference.load(model_name, model=model)
    if "fp32" not in backend.precisions or backend.accuracy_support(model_name, "fp32"):
        return  # without FP32 this test checks the references' integrity only; the accuracy tests use them
    count = settings.sample_count(model_name)
    inputs = reference.evaluation_inputs(model, count)
    ops = backend.prepare(model, "fp32").ops()
    fresh = run_batched(model, inputs, settings.profile_data.batch_size[model_name], ops)
    assert set(fresh) == set(stored), f"{model_name}: outputs {sorted(fresh)} but reference has {sorted(stored)}"
    for key, ref in stored.items():
        ref = ref[:count]
        scale = max(float(np.max(np.abs(ref))), 1e-30)
        err = float(np.max(np.abs(fresh[key] - ref))) / scale
        assert err <= REPRODUCTION_RTOL, (
            f"{model_name}: output {key!r} differs from reference/{model_name}.npz by {err:.3g} of its scale "
            f"(allowed {REPRODUCTION_RTOL}); reproduce: pytest conformance/test_reference.py --hardware cpu --model {model_name}"
        )
