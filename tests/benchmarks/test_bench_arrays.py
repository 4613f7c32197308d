"""Speed of the emulator on each array library: resnet50's forward at batch 16 in FP32 (the models' numpy ops) and
emulated at fp16 and fp8 on numpy and on torch (CPU), against onnxruntime's FP32 run of the suite's own graph of the
model, timed in the same run, one thread each (BLAS, torch, onnxruntime and the emulator's threads), so that the
ratios hold on a shared host. The target for the FP32 forward: at most 1.3x onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from conformance.hardware import get_backend
from conformance.numerics import arrays
from models import load_model, run_batched
from models.seeds import CALIBRATION_SEED, EVAL_SEED

BATCH = 16
LIBRARIES = ("numpy", "torch:cpu")


@pytest.fixture(scope="module")
def one_thread(request):
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    mp = pytest.MonkeyPatch()
    mp.setenv("CONFORMANCE_THREADS", "1")
    with threadpool_limits(1):
        yield
    mp.undo()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def resnet50(one_thread):
    from conformance.graphs.export import record
    from conformance.graphs.runtime import session

    model = load_model("resnet50")
    inputs = model.sample_inputs(BATCH, seed=EVAL_SEED)
    backend = get_backend("ipu")
    ops = {"fp16": backend.prepare(model, "fp16").ops(),
           "fp8": backend.prepare(model, "fp8", model.sample_inputs(BATCH, seed=CALIBRATION_SEED),
                                  batch_size=BATCH).ops()}
    sess = session(record(model, batch_size=2).model.SerializeToString(), threads=1)
    feed = {name: np.ascontiguousarray(value) for name, value in inputs.items()}
    for library in LIBRARIES:  # weights quantized once (as at compile time), kernels loaded
        with arrays.use(library):
            for precision_ops in ops.values():
                run_batched(model, inputs, BATCH, precision_ops)
    return model, inputs, ops, sess, feed


def test_onnxruntime_fp32(benchmark, resnet50):
    _, _, _, sess, feed = resnet50
    benchmark.group = "resnet50-b16-vs-onnxruntime"
    benchmark.extra_info["role"] = "baseline"
    names = [output.name for output in sess.get_outputs()]
    benchmark.pedantic(lambda: sess.run(names, feed), rounds=3, iterations=1, warmup_rounds=1)


def test_fp32_forward(benchmark, resnet50):
    model, inputs, _, _, _ = resnet50
    benchmark.group = "resnet50-b16-vs-onnxruntime"
    benchmark.extra_info.update(role="subject", target=1.3)
    benchmark.pedantic(lambda: run_batched(model, inputs, BATCH), rounds=3, iterations=1)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_emulated_forward(benchmark, resnet50, precision, library):
    model, inputs, ops, _, _ = resnet50
    benchmark.group = "resnet50-b16-vs-onnxruntime"
    benchmark.extra_info["role"] = "subject"

    def run():
        with arrays.use(library):
            return run_batched(model, inputs, BATCH, ops[precision])

    outputs = benchmark.pedantic(run, rounds=3, iterations=1)
    assert set(outputs) == set(model.output_names)
