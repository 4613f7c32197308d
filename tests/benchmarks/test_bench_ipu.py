"""Speed of the emulated IPU: the forward pass at fp16 (float partials) and fp8 against the FP32 forward pass of the
same model and inputs, timed in the same run. Targets: fp16 <= 1.15x, fp8 <= 2.0x; the ratios are printed at the
end of the run. The encoders run 2 of their layers (every layer has the same shapes, so the per-layer ratio is the
model's); weights are quantized once before timing (the device holds them after compilation), FP8 scales are
calibrated once before timing. Each model runs on numpy and, where torch is installed, on torch's CPU tensors
(``--array torch:cpu``: the inputs moved to its tensors once, every op on them), each precision against the FP32
forward on the same library."""

from __future__ import annotations

import pytest

from conformance.hardware import get_backend
from models import load_model
from models.seeds import CALIBRATION_SEED, EVAL_SEED
from tests.benchmarks.bench_utils import forward_on

# model -> (config overrides, samples per forward pass, timed rounds: more where a forward takes tens of ms)
CASES = {
    "bert-base": ({"num_hidden_layers": 2}, 2, 3),
    "albert": ({"num_hidden_layers": 2}, 2, 3),
    "roformer": ({"num_hidden_layers": 2}, 2, 3),
    "conformer": ({"num_hidden_layers": 2}, 2, 5),
    "resnet50": ({}, 2, 3),
    "widedeep": ({}, 1024, 15),
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
    overrides, samples, rounds = CASES[name]
    model = load_model(name, **overrides)
    inputs = model.sample_inputs(samples, seed=EVAL_SEED)
    calibration = model.sample_inputs(samples, seed=CALIBRATION_SEED)
    ops = {"fp16": backend.prepare(model, "fp16").ops(),
           "fp8": backend.prepare(model, "fp8", calibration, batch_size=samples).ops()}
    # weights quantized (and FP8 weight scales chosen) once, as at compile time, and moved to each library's device
    for library in _libraries():
        for precision_ops in (None, *ops.values()):
            forward_on(library, model, inputs, samples, precision_ops)
    return name, model, inputs, samples, ops, rounds


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("precision", ["fp32", "fp16", "fp8"])
def test_forward(benchmark, case, precision, library):
    if library not in _libraries():
        pytest.skip(f"--array {library} needs torch (pip install -e '.[torch]')")
    name, model, inputs, samples, ops, rounds = case
    benchmark.group = f"ipu-forward-{name}" + ("" if library == "numpy" else f"-{library}")
    if precision == "fp32":
        benchmark.extra_info["role"] = "baseline"
    else:
        benchmark.extra_info["role"] = "subject"
        benchmark.extra_info["target"] = TARGETS[precision]

    def run():
        return forward_on(library, model, inputs, samples, None if precision == "fp32" else ops[precision])

    outputs = benchmark.pedantic(run, rounds=rounds, iterations=1, warmup_rounds=0)
    assert set(outputs) == set(model.output_names)
