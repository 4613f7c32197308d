"""Speed of the emulated IPU: the forward pass at fp16 (float partials) and fp8 against the FP32 forward pass of the
same model and inputs, timed in the same run. Targets: fp16 <= 1.15x, fp8 <= 2.0x; the ratios are printed at the
end of the run. The encoders run 2 of their layers (every layer has the same shapes, so the per-layer ratio is the
model's); weights are quantized once before timing (the device holds them after compilation), FP8 scales are
calibrated once before timing. Each model runs on numpy and, where torch is installed, on torch's CPU tensors
(``--array torch:cpu``), each precision against the FP32 forward on the same library."""

from __future__ import annotations

import pytest

from conformance.hardware import get_backend
from conformance.numerics import arrays
from models import load_model, run_batched
from models.seeds import CALIBRATION_SEED, EVAL_SEED

# model -> (config overrides, samples per forward pass)
CASES = {
    "bert-base": ({"num_hidden_layers": 2}, 2),
    "albert": ({"num_hidden_layers": 2}, 2),
    "roformer": ({"num_hidden_layers": 2}, 2),
    "conformer": ({"num_hidden_layers": 2}, 2),
    "resnet50": ({}, 2),
    "widedeep": ({}, 1024),
}
TARGETS = {"fp16": 1.15, "fp8": 2.0}
LIBRARIES = ("numpy", "torch:cpu")


def _libraries() -> list[str]:
    """The libraries of :data:`LIBRARIES` this environment has (torch is an optional extra)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return ["numpy"]
    return list(LIBRARIES)


@pytest.fixture(scope="module")
def backend():
    return get_backend("ipu")


@pytest.fixture(scope="module", params=list(CASES))
def case(request, backend):
    name = request.param
    overrides, samples = CASES[name]
    model = load_model(name, **overrides)
    inputs = model.sample_inputs(samples, seed=EVAL_SEED)
    calibration = model.sample_inputs(samples, seed=CALIBRATION_SEED)
    ops = {"fp16": backend.prepare(model, "fp16").ops(),
           "fp8": backend.prepare(model, "fp8", calibration, batch_size=samples).ops()}
    for library in _libraries():  # weights quantized (and FP8 weight scales chosen) once, as at compile time
        with arrays.use(library):
            for precision_ops in ops.values():
                run_batched(model, inputs, samples, precision_ops)
    return name, model, inputs, samples, ops


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("precision", ["fp32", "fp16", "fp8"])
def test_forward(benchmark, case, precision, library):
    if library not in _libraries():
        pytest.skip(f"--array {library} needs torch (pip install -e '.[torch]')")
    name, model, inputs, samples, ops = case
    benchmark.group = f"ipu-forward-{name}" + ("" if library == "numpy" else f"-{library}")
    if precision == "fp32":
        benchmark.extra_info["role"] = "baseline"
    else:
        benchmark.extra_info["role"] = "subject"
        benchmark.extra_info["target"] = TARGETS[precision]

    def run():
        with arrays.use(library):
            if precision == "fp32":
                return run_batched(model, inputs, samples)
            return run_batched(model, inputs, samples, ops[precision])

    outputs = benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=0)
    assert set(outputs) == set(model.output_names)
