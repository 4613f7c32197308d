"""The models' FP32 path on torch tensors: the six models at small configs give numpy's outputs within FP32
summation order, make the same decisions, and hand back torch tensors on the inputs' device; the FP32 ops that the
models do not use (those of imported graphs) agree with numpy's on torch too.

numpy is the reference and stays bit for bit what it was (the stored references and the other model tests check
that); on torch the same code runs with torch's kernels, whose sums run in another order (blocked matmuls, its own
convolution, pairwise reductions), so outputs differ from numpy's by a few float32 ulps per sum, carried through the
layers. The bound is REPRODUCTION_RTOL of conformance/test_reference.py, the difference allowed to another BLAS or
thread count: 1e-4 of the output's largest magnitude. Measured here: up to ~1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install 'ipu-conformance[torch]')")
pytest.importorskip("array_api_compat", reason="array-api-compat is not installed (the torch extra installs it)")

from models import load_model, run_batched  # noqa: E402
from models.arrays import conv2d_im2col, namespace  # noqa: E402
from models.ops import FP32  # noqa: E402

RTOL = 1e-4  # of the output's largest magnitude: FP32 sums in another order (see the module docstring)
BATCH = 4
_TEXT = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             seq_len=32, max_position_embeddings=64)
# Small configs that build in well under a second (as tests/test_release_profile.py's).
SMALL = {
    "bert-base": _TEXT,
    "albert": {**_TEXT, "embedding_size": 8},
    "roformer": {**_TEXT, "embedding_size": 16},
    "resnet50": dict(embedding_size=8, hidden_sizes=(16, 16, 16, 16), depths=(1, 1, 1, 1), image_size=32),
    # 16 buckets, not 7: with 7 the seeded fit gives first-layer weights of ~2e5 whose products cancel to logits of
    # ~1, so any other FP32 summation order (torch's, or numpy's BLAS on another thread count) moves the
    # probabilities by ~1e-4 of their scale; with 16 the weights are ~10 and the outputs agree to ~1e-7
    "widedeep": dict(hidden_sizes=(8,), bucket_sizes=(16,) * 26),
    "conformer": dict(hidden_size=16, num_attention_heads=2, intermediate_size=16, num_hidden_layers=1, frames=16,
                      feature_bins=8),
}
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                  reason="no CUDA device is available to torch"))]


def decisions(name: str, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What each model's task decides from its outputs: the top-1 class, the answer span's start and end, which row
    of each pair is the similar one, click or not; none for conformer (an encoder judged on its tensor alone)."""
    if name in ("bert-base", "albert"):
        return {key: np.argmax(outputs[key], axis=-1) for key in ("start_logits", "end_logits")}
    if name == "roformer":
        score = outputs["logits"][:, 0]
        return {"pairs": score[0::2] > score[1::2]}
    if name == "resnet50":
        return {"top1": np.argmax(outputs["logits"], axis=-1)}
    if name == "widedeep":
        return {"click": np.argmax(outputs["probabilities"], axis=-1)}
    return {}


def to_torch(inputs: dict[str, np.ndarray], device: str) -> dict:
    return {key: torch.from_numpy(value).to(device) for key, value in inputs.items()}


def relative_error(value, reference: np.ndarray) -> float:
    return float(np.max(np.abs(value - reference))) / max(float(np.max(np.abs(reference))), 1e-30)


@pytest.fixture(scope="module", params=sorted(SMALL))
def model(request):
    return load_model(request.param, seed=0, **SMALL[request.param])


@pytest.mark.parametrize("device", DEVICES)
def test_fp32_on_torch_equals_numpy_within_fp32_summation_order(model, device):
    inputs = model.sample_inputs(BATCH, seed=0)
    reference = model(inputs)
    outputs = model(to_torch(inputs, device))
    assert set(outputs) == set(reference)
    values = {}
    for key, value in outputs.items():
        assert isinstance(value, torch.Tensor), f"{model.name}: output {key!r} is a {type(value).__name__}"
        assert value.device.type == device and value.dtype == torch.float32
        values[key] = value.cpu().numpy()
        assert values[key].shape == reference[key].shape
        err = relative_error(values[key], reference[key])
        assert err <= RTOL, f"{model.name}: output {key!r} differs from numpy's by {err:.3g} of its scale"
    for key, decided in decisions(model.name, reference).items():
        np.testing.assert_array_equal(decisions(model.name, values)[key], decided, err_msg=f"{model.name}: {key}")


def test_numpy_inputs_give_numpy_outputs_and_the_numpy_parameters(model):
    inputs = model.sample_inputs(2, seed=1)
    assert all(isinstance(value, np.ndarray) for value in model(inputs).values())
    assert model.params_like(next(iter(inputs.values()))) is model.params


def test_parameters_move_once_per_device_and_again_when_replaced(model):
    x = torch.zeros(1)
    moved = model.params_like(x)
    assert model.params_like(x) is moved
    name = next(iter(model.params))
    first = moved[name]
    assert isinstance(first, torch.Tensor) and moved[name] is first
    np.testing.assert_array_equal(first.numpy(), model.params[name])
    original = model.params[name]
    try:
        model.params[name] = original + 1.0
        assert moved[name] is not first
        np.testing.assert_array_equal(moved[name].numpy(), original + 1.0)
    finally:
        model.params[name] = original


def test_run_batched_concatenates_torch_outputs():
    model = load_model("widedeep", seed=0, **SMALL["widedeep"])
    inputs = model.sample_inputs(5, seed=2)
    outputs = run_batched(model, to_torch(inputs, "cpu"), 2)
    assert isinstance(outputs["probabilities"], torch.Tensor)
    np.testing.assert_allclose(outputs["probabilities"].numpy(), model(inputs)["probabilities"], rtol=1e-6, atol=1e-7)


# -- the FP32 ops on torch --------------------------------------------------------------------------------------------
def _data(shape, seed=0, positive=False):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return np.abs(x) + np.float32(0.5) if positive else x


UNARY = ["sqrt", "relu", "sigmoid", "silu", "tanh", "abs", "neg", "sign", "ceil", "floor", "exp", "log", "reciprocal"]


@pytest.mark.parametrize("op", UNARY)
def test_unary_ops_on_torch_equal_numpy(op):
    x = _data((3, 5, 7), positive=op in ("sqrt", "log"))
    expected = getattr(FP32, op)(x, name=op)
    got = getattr(FP32, op)(torch.from_numpy(x), name=op)
    assert isinstance(got, torch.Tensor)
    np.testing.assert_allclose(got.numpy(), expected, rtol=2e-6, atol=1e-7)


def test_relu_on_torch_gives_numpys_bits():
    """NaN kept, -0.0 (many after a rounding to FP16 or FP8) and negatives to +0.0, the input left as it was."""
    x = np.array([-0.0, 0.0, -1.0, 2.0, np.nan, -np.nan, -np.inf, np.inf, -1e-45, 1e-45], np.float32)
    expected = FP32.relu(x, name="relu")
    given = torch.from_numpy(x.copy())
    got = FP32.relu(given, name="relu")
    assert np.array_equal(got.numpy().view(np.uint32), expected.view(np.uint32))
    assert np.array_equal(given.numpy().view(np.uint32), x.view(np.uint32))


@pytest.mark.parametrize("call", [
    lambda ops, x, y: ops.add(x, y, name="t"),
    lambda ops, x, y: ops.sub(np.float32(1), x, name="t"),
    lambda ops, x, y: ops.mul(x, np.float32(0.125), name="t"),
    lambda ops, x, y: ops.div(x, y, name="t"),
    lambda ops, x, y: ops.maximum(x, y, name="t"),
    lambda ops, x, y: ops.minimum(x, 0.25, name="t"),
    lambda ops, x, y: ops.mod(x, y, name="t"),
    lambda ops, x, y: ops.pow(y, 2.0, name="t"),
    lambda ops, x, y: ops.clip(x, -0.5, 0.5, name="t"),
    lambda ops, x, y: ops.hard_sigmoid(x, alpha=0.2, beta=0.5, name="t"),
    lambda ops, x, y: ops.hard_swish(x, name="t"),
    lambda ops, x, y: ops.gelu(x, name="t"),
    lambda ops, x, y: ops.gelu(x, approximate="tanh", name="t"),
    lambda ops, x, y: ops.glu(x, axis=-1, name="t"),
    lambda ops, x, y: ops.softmax(x, axis=-1, name="t"),
    lambda ops, x, y: ops.layer_norm(x, y[0, 0], y[1, 1], eps=1e-5, name="t"),
    lambda ops, x, y: ops.mean(x, axis=(1, 2), name="t"),
    lambda ops, x, y: ops.sum(x, axis=1, keepdims=True, name="t"),
    lambda ops, x, y: ops.cumsum(x, axis=1, name="t"),
    lambda ops, x, y: ops.cumsum(x, axis=2, exclusive=True, reverse=True, name="t"),
    lambda ops, x, y: ops.matmul(x, np.swapaxes(y, 1, 2).copy() if isinstance(y, np.ndarray) else y.transpose(1, 2),
                                 name="t"),
    lambda ops, x, y: ops.linear(x, y[0, :4], y[1, 0, :4], name="t"),
    lambda ops, x, y: ops.embedding(y[0], np.array([[0, 3], [2, 2]]), name="t"),
], ids=lambda f: "")
def test_ops_on_torch_equal_numpy(call):
    x, y = _data((4, 6, 8)), _data((4, 6, 8), seed=1, positive=True)
    expected = call(FP32, x, y)
    got = call(FP32, torch.from_numpy(x), torch.from_numpy(y))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)


NCHW = [  # (x shape, w shape, stride, padding, dilation, groups)
    ((2, 3, 9, 11), (4, 3, 3, 3), 1, 1, 1, 1),
    ((2, 4, 10, 10), (6, 2, 3, 2), (2, 1), (1, 0), 1, 2),
    ((1, 5, 12, 9), (5, 1, 3, 3), 2, 2, 2, 5),
    ((3, 8, 7, 7), (16, 8, 1, 1), 1, 0, 1, 1),
]


@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups", NCHW)
def test_conv2d_and_pooling_on_torch_equal_numpy(xs, ws, stride, padding, dilation, groups):
    x, w, b = _data(xs), _data(ws, seed=1), _data((ws[0],), seed=2)
    kwargs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, name="conv")
    expected = FP32.conv2d(x, w, b, **kwargs)
    got = FP32.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), **kwargs)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)
    pool = dict(kernel=3, stride=2, padding=1, name="pool")
    np.testing.assert_array_equal(FP32.max_pool2d(torch.from_numpy(x), **pool).numpy(), FP32.max_pool2d(x, **pool))
    divisor = np.full(((xs[2] - 2) // 2 + 1, (xs[3] - 2) // 2 + 1), 4.0, np.float32)
    np.testing.assert_allclose(FP32.avg_pool2d(torch.from_numpy(x), divisor, kernel=2, stride=2, name="avg").numpy(),
                               FP32.avg_pool2d(x, divisor, kernel=2, stride=2, name="avg"), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups", NCHW)
def test_the_standard_convolution_equals_torch_own(xs, ws, stride, padding, dilation, groups):
    """The im2col convolution that libraries other than torch and numpy run, checked on torch tensors."""
    x, w = torch.from_numpy(_data(xs)), torch.from_numpy(_data(ws, seed=1))
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    got = conv2d_im2col(x, w, pair(stride), pair(padding), pair(dilation), groups)
    expected = torch.nn.functional.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_numpy_arrays_stay_on_the_numpy_module():
    assert namespace(np.zeros(2), np.float32(1), 2.0, None) is np
    assert namespace(torch.zeros(2), np.zeros(2)) is not np
