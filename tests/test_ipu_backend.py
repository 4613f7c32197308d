"""The ``ipu`` backend's precision policies do what they say.

Oracles: ``conformance.numerics`` applied by hand to the same operands (the backend must call it exactly so),
numpy's float16 casts for FP16 rounding of in-range values, ml_dtypes' ``float8_e4m3fnuz`` for F143 operands that do
not overflow.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from conformance import numerics
from conformance.hardware import UnsupportedCombination, get_backend
from conformance.hardware.base import DATA_TYPE_KEYS, FP32_DATA_TYPES
from conformance.hardware.ipu import fp8_scales as calibration
from conformance.hardware.ipu.backend import IpuBackend
from conformance.hardware.ipu.ops import Fp8Plan, IpuOps
from conformance.hardware.ipu.policy import EXTRA_FP8_CASES, Fp8Settings, load_precisions
from conformance.hardware.ipu.simulated import ServiceTimes
from conformance.hardware.ipu.timing.predict import shape_only_model
from models import load_model

POLICIES, FP8_SETTINGS = load_precisions()


def _f16(x):
    """Hand rounding to FP16 with numpy's cast (RNE; the values here never overflow)."""
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def _plan(skip=(), input_scales=None, scales="amax", **kw) -> Fp8Plan:
    return Fp8Plan(Fp8Settings(model="test", scales=scales, skip=tuple(skip), **kw), input_scales or {})


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# -- policies as data ----------------------------------------------------------------------------------------------
def test_backend_offers_the_named_precisions():
    backend = get_backend("ipu")
    assert backend.precisions == ("fp16", "fp16-half-partials", "fp8", "fp8-weights")
    assert backend.policy("fp16").partials == "float"
    assert backend.policy("fp16-half-partials").partials == "half"
    assert backend.policy("fp8").fp8 == "all"
    assert backend.policy("fp8-weights").fp8 == "weights"
    with pytest.raises(ValueError, match="unknown precision 'int4'.*fp16, fp16-half-partials, fp8, fp8-weights"):
        backend.policy("int4")


def test_every_model_has_fp8_settings():
    from models import MODEL_NAMES

    assert set(FP8_SETTINGS) == set(MODEL_NAMES) | set(EXTRA_FP8_CASES)
    assert FP8_SETTINGS["resnet50"].skip == ("resnet.encoder.stages.0.layers.0.shortcut.convolution",)


def test_precisions_file_mistakes_name_the_table_and_key(tmp_path):
    bad = tmp_path / "precisions.toml"
    bad.write_text('[precisions.fp16]\nstorage = "f16"\npartials = "double"\nfp8 = "none"\n')
    with pytest.raises(ValueError, match=r"precisions.toml:3: precisions.fp16.partials = \"double\": input should be "
                       r"'float' or 'half'"):
        load_precisions(bad)
    bad.write_text('[precisions.fp8]\nstorage = "f16"\npartials = "half"\nfp8 = "all"\n'
                   '[fp8.resnet50]\nscales = "fixed"\ninput_scale = -3\n')
    with pytest.raises(ValueError, match=r"fp8.resnet50: scales = \"fixed\" needs weight_scale: an integer in \[-32, 31\]"):
        load_precisions(bad)
    bad.write_text('[precisions.fp8]\nstorage = "f16"\npartials = "half"\nfp8 = "all"\n[fp8.resnet5]\n')
    with pytest.raises(ValueError, match="fp8: unknown name 'resnet5'"):
        load_precisions(bad)


def test_model_without_fp8_settings_is_an_unsupported_combination(tmp_path):
    path = tmp_path / "precisions.toml"
    path.write_text('[precisions.fp16]\nstorage = "f16"\npartials = "float"\nfp8 = "none"\n'
                    '[precisions.fp8]\nstorage = "f16"\npartials = "half"\nfp8 = "all"\n')
    backend = IpuBackend(precisions_file=path)
    assert backend.accuracy_support("widedeep", "fp16") is None
    assert "widedeep at fp8: no FP8 settings" in backend.accuracy_support("widedeep", "fp8")
    with pytest.raises(UnsupportedCombination, match="widedeep at fp8: no FP8 settings"):
        backend.prepare(load_model("widedeep", hidden_sizes=(16,), bucket_sizes=(50,) * 26), "fp8")


def test_data_types_say_what_each_policy_holds():
    """The report's data types come from the policies: FP8 weights where the policy quantizes weights, FP8 inputs
    only where it quantizes activations too, the storage format everywhere else."""
    backend = get_backend("ipu")
    for precision in backend.precisions:
        policy = backend.policy(precision)
        types = backend.data_types(precision)
        assert tuple(types) == DATA_TYPE_KEYS
        assert types["weight_data_types"].startswith("fp8") == policy.uses_fp8, (precision, types)
        assert ("fp8" in types["input_data_types"]) == (policy.fp8 == "all"), (precision, types)
        assert types["input_data_types"].startswith("fp16") and "fp32" not in types["weight_data_types"]
    assert backend.data_types("fp32") == get_backend("cpu").data_types("fp32") == FP32_DATA_TYPES
    with pytest.raises(ValueError, match="unknown precision 'int4'"):
        backend.data_types("int4")


def test_predicted_throughput_is_the_simulated_device_s_timing():
    """The throughput the report draws per device batch is the one the simulated device is timed with: a batch of b
    samples takes the ServiceTimes occupancy of b units (one row a sample for resnet50)."""
    backend = get_backend("ipu")
    batches = [1, 2, 4, 8]
    curve = backend.predicted_throughput("resnet50", "fp8", batches, 1)
    times = ServiceTimes(shape_only_model("resnet50"), "fp8", max(batches), backend.chip)
    assert curve["samples_per_s"] == [b / times(b)[0] for b in batches]
    assert len(curve["fits"]) == len(batches) and curve["packed"] is False
    fitting = curve["fits"]
    assert fitting == sorted(fitting, reverse=True), "a batch that does not fit is followed by none that does"
    assert get_backend("cpu").predicted_throughput("resnet50", "fp32", batches, 1) is None


# -- FP16 ----------------------------------------------------------------------------------------------------------
def test_fp16_layer_equals_hand_rounding(rng):
    """linear -> gelu -> layer_norm -> softmax at fp16, against numpy float16 casts. Inputs on a coarse dyadic grid
    keep every matmul sum exact in FP32, so the only roundings are the ones the policy prescribes."""
    x = rng.integers(-8, 9, (5, 16)).astype(np.float32) / 8
    w = rng.integers(-8, 9, (12, 16)).astype(np.float32) / 16
    b = rng.standard_normal(12).astype(np.float32)
    gamma, beta = rng.standard_normal(12).astype(np.float32), rng.standard_normal(12).astype(np.float32)
    ops = IpuOps(POLICIES["fp16"])
    y = ops.linear(x, w, b, name="dense")
    h = ops.gelu(y, name="act")
    n = ops.layer_norm(h, gamma, beta, eps=1e-5, name="norm")
    p = ops.softmax(n, name="probs")

    y_hand = _f16(_f16(x) @ _f16(w).T + _f16(b))
    np.testing.assert_array_equal(y, y_hand)
    from scipy import special

    h_hand = _f16(0.5 * y_hand * (1 + special.erf(y_hand / np.float32(np.sqrt(2)))))
    np.testing.assert_array_equal(h, h_hand)
    mean = h_hand.mean(-1, keepdims=True)
    var = ((h_hand - mean) ** 2).mean(-1, keepdims=True)
    n_hand = _f16((h_hand - mean) / np.sqrt(var + np.float32(1e-5)) * _f16(gamma) + _f16(beta))
    np.testing.assert_allclose(n, n_hand, rtol=2**-10)  # FP32 statistics: at most one FP16 ulp apart
    e = np.exp(n - n.max(-1, keepdims=True))
    np.testing.assert_allclose(p, _f16(e / e.sum(-1, keepdims=True)), rtol=2**-10)
    for out in (y, h, n, p):
        assert np.array_equal(out, _f16(out)), "every op output is on the FP16 grid"


def test_fp16_model_layer_reproduces_hand_rounding(rng):
    """On a (small) bert at fp16, the recorded output of the first query projection equals the hand-rounded FP16
    computation of that layer from the recorded input (the embeddings' LayerNorm)."""
    model = load_model("bert-base", num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                       vocab_size=200, seq_len=16)
    recorded = {}
    ops = get_backend("ipu").prepare(model, "fp16").ops(recorder=lambda name, y: recorded.setdefault(name, y.copy()))
    model(model.sample_inputs(2, seed=0), ops)
    x = recorded["bert.embeddings.LayerNorm"]
    w, b = model.params["bert.encoder.layer.0.attention.self.query.weight"], model.params["bert.encoder.layer.0.attention.self.query.bias"]
    exact = x.astype(np.float64) @ _f16(w).T.astype(np.float64)  # products exact; FP32 sums within a few ulps
    hand = _f16(_f16(exact.astype(np.float32)) + _f16(b))
    got = recorded["bert.encoder.layer.0.attention.self.query"]
    ulp = np.spacing(np.abs(hand).astype(np.float16)).astype(np.float32)
    assert np.all(np.abs(got - hand) <= ulp), "at most one FP16 ulp from the hand-rounded layer (FP32 summation order)"
    assert np.mean(got == hand) > 0.99


def test_fp16_saturates_instead_of_overflowing():
    ops = IpuOps(POLICIES["fp16"])
    y = ops.add(np.array([60000.0, -60000.0], np.float32), np.array([60000.0, -60000.0], np.float32), name="sum")
    assert y.tolist() == [65504.0, -65504.0]


def test_half_partials_policy_uses_half_partials(rng):
    a = _f16(rng.standard_normal((8, 256)))
    w = _f16(rng.standard_normal((4, 256)))
    got = IpuOps(POLICIES["fp16-half-partials"]).linear(a, w, name="dense")
    np.testing.assert_array_equal(got, numerics.matmul(a, np.ascontiguousarray(w.T), partials="half"))
    assert not np.array_equal(got, IpuOps(POLICIES["fp16"]).linear(a, w, name="dense"))


# -- FP8 -----------------------------------------------------------------------------------------------------------
def test_fp8_linear_equals_numerics_applied_by_hand(rng):
    x = rng.standard_normal((6, 64)).astype(np.float32) * 3
    w = rng.standard_normal((10, 64)).astype(np.float32) * 0.05
    b = rng.standard_normal(10).astype(np.float32)
    ops = IpuOps(POLICIES["fp8"], fp8_plan=_plan(input_scales={"dense": {"input": -4}}, scales="amax"))
    got = ops.linear(x, w, b, name="dense")

    w_scale = calibration.amax_scale(np.abs(w).max(), "f143")
    xq = numerics.quantize(numerics.quantize(x, "f16"), "f143", scale=-4)
    wq = numerics.quantize(w, "f143", scale=w_scale)
    hand = numerics.matmul(xq, np.ascontiguousarray(wq.T), operand_format="f143")
    hand = numerics.quantize(hand + numerics.quantize(b, "f16"), "f16")
    np.testing.assert_array_equal(got, hand)
    assert ops.scales_used == {"dense": {"input": -4, "weight": w_scale}}

    # the operands against an independent oracle: ml_dtypes F143 of the scaled values (nothing overflows here)
    oracle_w = (w * np.float32(2.0 ** -w_scale)).astype(ml_dtypes.float8_e4m3fnuz).astype(np.float32) * np.float32(2.0 ** w_scale)
    np.testing.assert_array_equal(wq, oracle_w)
    exact = xq.astype(np.float64) @ oracle_w.T.astype(np.float64) + _f16(b)
    np.testing.assert_allclose(got, exact, rtol=2e-2, atol=2e-2 * np.abs(exact).max())


def test_fp8_matmul_quantizes_both_activations(rng):
    a = _f16(rng.standard_normal((2, 4, 8, 32)))
    b = _f16(rng.standard_normal((2, 4, 32, 8)))
    ops = IpuOps(POLICIES["fp8"], fp8_plan=_plan(input_scales={"scores": {"a": -5, "b": -6}}))
    got = ops.matmul(a, b, name="scores")
    hand = numerics.matmul(numerics.quantize(a, "f143", scale=-5), numerics.quantize(b, "f143", scale=-6), operand_format="f143")
    np.testing.assert_array_equal(got, hand)
    assert ops.scales_used == {"scores": {"a": -5, "b": -6}}


def test_skip_listed_op_stays_fp16(rng):
    x = _f16(rng.standard_normal((6, 64)))
    w = rng.standard_normal((10, 64)).astype(np.float32) * 0.05
    ops = IpuOps(POLICIES["fp8"], fp8_plan=_plan(skip=("stem",), input_scales={}))
    got = ops.linear(x, w, name="stem")
    fp16_half = IpuOps(POLICIES["fp16-half-partials"]).linear(x, w, name="stem")
    np.testing.assert_array_equal(got, fp16_half)
    assert ops.scales_used == {}


def test_fp8_weights_policy_keeps_activations_fp16(rng):
    x = _f16(rng.standard_normal((6, 64)))
    w = rng.standard_normal((10, 64)).astype(np.float32) * 0.05
    ops = IpuOps(POLICIES["fp8-weights"], fp8_plan=_plan(scales="mse"))
    got = ops.linear(x, w, name="dense")
    scale = ops.scales_used["dense"]["weight"]
    assert set(ops.scales_used["dense"]) == {"weight"}
    wq = numerics.quantize(w, "f143", scale=scale)
    np.testing.assert_array_equal(got, numerics.matmul(x, np.ascontiguousarray(_f16(wq).T), partials="half"))
    assert ops.matmul(x, x.T, name="gram").tolist() == IpuOps(POLICIES["fp16-half-partials"]).matmul(x, x.T, name="gram").tolist()


def test_fixed_scales_from_data(rng):
    x = _f16(rng.standard_normal((3, 32)))
    w = rng.standard_normal((4, 32)).astype(np.float32) * 0.1
    ops = IpuOps(POLICIES["fp8"], fp8_plan=_plan(scales="fixed", input_scale=-3, weight_scale=-3))
    ops.linear(x, w, name="dense")
    assert ops.scales_used == {"dense": {"input": -3, "weight": -3}}


def test_weights_are_quantized_once(rng, monkeypatch):
    w = rng.standard_normal((10, 64)).astype(np.float32)
    ops = IpuOps(POLICIES["fp8-weights"], fp8_plan=_plan())
    calls = []
    real = calibration.choose_scale
    monkeypatch.setattr(calibration, "choose_scale", lambda *a, **k: calls.append(1) or real(*a, **k))
    for _ in range(3):
        ops.linear(_f16(rng.standard_normal((2, 64))), w, name="dense")
        ops.conv2d(_f16(rng.standard_normal((1, 64, 3, 3))), w.reshape(10, 64, 1, 1), name="conv")
    assert len(calls) == 2, "one scale computation per weight, not per call (fresh views of one array included)"


# -- calibration -----------------------------------------------------------------------------------------------------
def test_amax_scale_is_the_smallest_that_holds_the_maximum():
    assert calibration.amax_scale(240.0, "f143") == 0
    assert calibration.amax_scale(240.01, "f143") == 1
    assert calibration.amax_scale(0.1, "f143") == -11  # 240 * 2^-12 = 0.0586 < 0.1 <= 240 * 2^-11 = 0.117
    assert calibration.amax_scale(57344.0, "f152") == 0
    assert calibration.amax_scale(1e30, "f143") == 31
    assert calibration.amax_scale(1e-30, "f143") == -32
    assert calibration.amax_scale(0.0, "f143") == 0


def test_mse_scale_is_no_worse_than_amax(rng):
    values = rng.standard_t(3, 50_000).astype(np.float32)  # heavy tails: clipping a few pays off
    top = calibration.amax_scale(np.abs(values).max(), "f143")
    best = calibration.mse_scale(values, "f143")
    assert top - calibration.MSE_WINDOW <= best <= top
    mse = lambda s: np.mean((numerics.quantize(values, "f143", scale=s) - values) ** 2)  # noqa: E731
    assert mse(best) <= mse(top)
    assert all(mse(best) <= mse(s) for s in range(top - calibration.MSE_WINDOW, top + 1))


def test_calibrated_model_scales_are_in_range_recorded_and_skip_the_first_shortcut():
    model = load_model("resnet50", image_size=32, hidden_sizes=(32, 64, 64, 64), depths=(1, 1, 1, 1), embedding_size=16,
                       num_labels=10)
    backend = get_backend("ipu")
    plan = backend.fp8_plan(model, "fp8", batch_size=2, calibration_samples=2)
    assert plan.calibration["seed"] != 0 and plan.calibration["samples"] == 2  # the calibration set, not evaluation
    skipped = "resnet.encoder.stages.0.layers.0.shortcut.convolution"  # the seed benchmark's skip
    assert skipped not in plan.input_scales
    ops = IpuOps(backend.policy("fp8"), fp8_plan=plan)
    model(model.sample_inputs(2, seed=0), ops)
    assert skipped in ops.ops_seen and skipped not in ops.scales_used
    convs = {n for n in ops.ops_seen if n.endswith("convolution")} | {"classifier.1"}
    assert set(ops.scales_used) == convs - {skipped}
    for name, scales in ops.scales_used.items():
        assert set(scales) == {"input", "weight"}
        assert all(-32 <= s <= 31 for s in scales.values()), (name, scales)


def test_skip_name_the_model_never_calls_is_an_error():
    model = load_model("resnet50", image_size=32, hidden_sizes=(32, 64, 64, 64), depths=(1, 1, 1, 1), embedding_size=16,
                       num_labels=10)
    settings = Fp8Settings(model="resnet50", skip=("resnet.embedder.convolution",), calibration_samples=1)
    with pytest.raises(ValueError, match=r"skip names op\(s\) \['resnet.embedder.convolution'\] that resnet50 never calls"):
        calibration.calibrate_inputs(model, settings, batch_size=1)


@pytest.mark.parametrize("shape", [(1, 1), (63, 5), (64, 7), (65, 3), (300, 129)])
def test_a_weight_transposed_for_the_kernels_is_its_transpose(shape):
    """Weights are transposed 64 rows at a time for speed: the same values as numpy's transpose, C-ordered, for
    row counts around that block and for a weight that is itself a strided view."""
    from conformance.hardware.ipu.ops import _transposed

    w = np.random.default_rng(0).standard_normal((shape[0], 2 * shape[1])).astype(np.float32)[:, ::2]
    t = _transposed(w)
    assert t.flags.c_contiguous and t.dtype == w.dtype
    np.testing.assert_array_equal(t, w.T)
