"""Speed of the emulator on each array library: resnet50's forward at batch 16 in FP32 (the models' ops) and emulated
at fp16 and fp8, on numpy and on torch (CPU; as ``--array torch:cpu`` runs it: the inputs moved to torch tensors once,
every op on them), against onnxruntime's FP32 run of the suite's own graph of the model, timed in the same run, one
thread each (BLAS, torch, onnxruntime and the emulator's threads), so that the ratios hold on a shared host. The
target for the FP32 forward: at most 1.3x onnxruntime. Beside it, the FP32 convolutions that dominate that forward,
one of each kind, against torch's."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from conformance.hardware import get_backend
from models import load_model
from models.seeds import CALIBRATION_SEED, EVAL_SEED
from tests.benchmarks.bench_utils import forward_on

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
        for precision_ops in (None, *ops.values()):
            forward_on(library, model, inputs, BATCH, precision_ops)
    return model, inputs, ops, sess, feed


def test_onnxruntime_fp32(benchmark, resnet50):
    _, _, _, sess, feed = resnet50
    benchmark.group = "resnet50-b16-vs-onnxruntime"
    benchmark.extra_info["role"] = "baseline"
    names = [output.name for output in sess.get_outputs()]
    benchmark.pedantic(lambda: sess.run(names, feed), rounds=3, iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("library", LIBRARIES)
def test_fp32_forward(benchmark, resnet50, library):
    model, inputs, _, _, _ = resnet50
    benchmark.group = "resnet50-b16-vs-onnxruntime"
    benchmark.extra_info.update(role="subject", target=1.3)
    benchmark.pedantic(lambda: forward_on(library, model, inputs, BATCH), rounds=3, iterations=1)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_emulated_forward(benchmark, resnet50, precision, library):
    model, inputs, ops, _, _ = resnet50
    benchmark.group = "resnet50-b16-vs-onnxruntime"
    benchmark.extra_info["role"] = "subject"

    outputs = benchmark.pedantic(lambda: forward_on(library, model, inputs, BATCH, ops[precision]), rounds=3,
                                 iterations=1)
    assert set(outputs) == set(model.output_names)


# resnet50's convolutions at batch 16 that take most of its FP32 forward, one of each kind: (C, H, O, kernel, stride)
CONV_LAYERS = {"3x3-56": (64, 56, 64, 3, 1), "1x1-56": (256, 56, 64, 1, 1), "3x3-14": (256, 14, 256, 3, 1),
               "1x1-7": (2048, 7, 512, 1, 1), "stem": (3, 224, 64, 7, 2)}


@pytest.fixture(scope="module", params=list(CONV_LAYERS))
def conv_layer(request, one_thread):
    import torch

    c, h, o, k, stride = CONV_LAYERS[request.param]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, c, h, h), dtype=np.float32)
    w = rng.standard_normal((o, c, k, k), dtype=np.float32) * np.float32((2 / (c * k * k)) ** 0.5)
    return request.param, x, w, stride, k // 2, torch


@pytest.mark.parametrize("engine", ["torch", "numpy"])
def test_fp32_conv_layer(benchmark, conv_layer, engine):
    """One FP32 convolution of the models' numpy ops (``models.ops.conv2d_fp32``) against torch's (oneDNN), one
    thread each."""
    from models.ops import conv2d_fp32

    name, x, w, stride, padding, torch = conv_layer
    benchmark.group = f"resnet50-b16-conv-{name}"
    benchmark.extra_info["role"] = "baseline" if engine == "torch" else "subject"
    if engine == "torch":
        xt, wt = torch.from_numpy(x), torch.from_numpy(w)
        benchmark.pedantic(lambda: torch.nn.functional.conv2d(xt, wt, stride=stride, padding=padding), rounds=3,
                           iterations=1, warmup_rounds=1)
    else:
        benchmark.pedantic(lambda: conv2d_fp32(x, w, stride, padding), rounds=3, iterations=1, warmup_rounds=1)
