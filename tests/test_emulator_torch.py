"""The emulator's ops (IpuOps) on torch tensors: with ``--array torch:cpu`` the accuracy run moves a batch's inputs to
torch once, the model moves its parameters once (``Model.params_like``), and every op and rounding of the hardware
forward computes on torch tensors; only the outputs come back to numpy, once.

numpy stays the reference (tests/test_emulator_bitexact.py); here the same forward on torch gives numpy's outputs:
bit for bit where every op is an add, sub, mul, div, selection or half-partials matrix op (the roundings are
bit-exact on every library and the blocks hold the same products), and within FP16 roundings where torch sums in
another order (FP32 partials, reductions) or rounds otherwise (its sqrt and transcendental functions)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install 'ipu-conformance[torch]')")
pytest.importorskip("array_api_compat", reason="array-api-compat is not installed (the torch extra installs it)")

from conformance import numerics  # noqa: E402
from conformance.accuracy import evaluation  # noqa: E402
from conformance.hardware.ipu.backend import IpuBackend  # noqa: E402
from conformance.numerics import arrays  # noqa: E402
from models import load_model  # noqa: E402
from conformance.accuracy.diagnosis import OP_METHODS  # noqa: E402

SMALL = {
    "widedeep": dict(hidden_sizes=(16,), bucket_sizes=(50,) * 26),
    "resnet50": dict(embedding_size=8, hidden_sizes=(16, 16, 16, 16), depths=(1, 1, 1, 1), image_size=32),
    "bert-base": dict(vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=64, seq_len=16, max_position_embeddings=32),
}


class _Moves:
    """Counts the moves between numpy and torch that the numerics' library objects make."""

    def __init__(self, monkeypatch):
        self.to_device = self.to_host = 0
        asarray, to_numpy = arrays.ArrayLibrary.asarray, arrays.ArrayLibrary.to_numpy

        def counted_asarray(library, x):
            self.to_device += 1
            return asarray(library, x)

        def counted_to_numpy(library, y):
            self.to_host += 1
            return to_numpy(library, y)

        monkeypatch.setattr(arrays.ArrayLibrary, "asarray", counted_asarray)
        monkeypatch.setattr(arrays.ArrayLibrary, "to_numpy", counted_to_numpy)


class _Kinds:
    """Wraps an ops object: notes the kind of every array each op gets and gives back."""

    def __init__(self, ops):
        self._ops = ops
        self.kinds: set[str] = set()

    def __getattr__(self, attr):
        method = getattr(self._ops, attr)
        if attr not in OP_METHODS:
            return method

        def op(*args, **kwargs):
            y = method(*args, **kwargs)
            for v in (*args, *kwargs.values(), y):
                if isinstance(v, (np.ndarray, torch.Tensor)) and v.ndim:
                    self.kinds.add(type(v).__name__)
            return y

        return op


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_the_hardware_forward_stays_on_torch_end_to_end(name, precision, monkeypatch):
    model = load_model(name, **SMALL[name])
    inputs = model.sample_inputs(4)
    prepared = IpuBackend().prepare(model, precision)  # FP8 calibration: on numpy, before the run
    ops = prepared.ops()
    with arrays.use("torch:cpu"):
        evaluation._forward(prepared.forward, inputs, ops, False)  # parameters moved and weights quantized once
        moves = _Moves(monkeypatch)
        kinds = _Kinds(ops)
        outputs, _ = evaluation._forward(prepared.forward, inputs, kinds, False)
    assert kinds.kinds == {"Tensor"}  # every op got and gave torch tensors
    assert (moves.to_device, moves.to_host) == (len(inputs), len(outputs))  # one move each way per array
    assert all(isinstance(v, np.ndarray) for v in outputs.values())
    monkeypatch.undo()
    expected, _ = evaluation._forward(prepared.forward, inputs, prepared.ops(), False)
    for key, value in expected.items():
        scale = float(np.max(np.abs(value)))
        assert np.allclose(outputs[key], value, rtol=0, atol=2e-2 * scale), key


def test_numpy_inputs_keep_their_path_under_torch():
    """numpy in, numpy out: the numerics' public functions given numpy arrays return numpy arrays whatever the
    library, and tensors given tensors."""
    x = np.linspace(-300, 300, 257, dtype=np.float32)
    with arrays.use("torch:cpu"):
        assert isinstance(numerics.quantize(x, "f143", scale=1), np.ndarray)
        t = numerics.quantize(torch.from_numpy(x), "f143", scale=1)
    assert isinstance(t, torch.Tensor)
    assert np.array_equal(t.numpy(), numerics.quantize(x, "f143", scale=1))


def test_half_partials_forward_on_torch_is_numpys_bit_for_bit():
    """fp8 widedeep: FP8 matrix ops with half partials (the same blocks of exact products, FP16 roundings bit for
    bit) and elementwise ops: the torch forward's outputs are numpy's."""
    model = load_model("widedeep", **SMALL["widedeep"])
    inputs = model.sample_inputs(8)
    prepared = IpuBackend().prepare(model, "fp8")
    expected, _ = evaluation._forward(prepared.forward, inputs, prepared.ops(), False)
    with arrays.use("torch:cpu"):
        got, _ = evaluation._forward(prepared.forward, inputs, prepared.ops(), False)
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key])
