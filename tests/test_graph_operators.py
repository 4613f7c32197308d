"""The operators exporters write, each as a one-node graph: through the FP32 reference ops as onnxruntime computes it,
and through the ipu's ops at fp16 with the IPU's numerics, checked against numpy's own float16 (round to nearest even):
an exact op (a selection or a sign change) gives the FP32 op of the FP16 operands unchanged, an arithmetic op that
result rounded once to FP16, a reduction or normalisation its FP32 statistics rounded once."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conformance.graphs.interpreter import Interpreter
from conformance.graphs.runtime import relative_error, session
from conformance.hardware import get_backend
from models.ops import Ops

IPU = get_backend("ipu")
F = TensorProto.FLOAT


def h(x):
    """numpy's float16 rounding (RNE), as float32: the oracle of an FP16 result."""
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def graph(op, x_shape, y_shape, inits=(), extra_inputs=(), **attrs):
    names = ["x", *extra_inputs]
    y_shape = [f"d{i}" for i in range(len(x_shape))] if y_shape is None else y_shape  # of the input's rank
    node = helper.make_node(op, names, ["y"], name="op", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, x_shape)],
                          [helper.make_tensor_value_info("y", F, y_shape)],
                          initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


X = np.random.default_rng(0).standard_normal((3, 4, 6)).astype(np.float32) * 3
POSITIVE = np.abs(X) + np.float32(0.1)

# (op, attributes, constant inputs, input, the FP32 op of numpy, whether its result is exact on FP16 operands)
ELEMENTWISE = [
    ("Abs", {}, (), X, np.abs, True),
    ("Neg", {}, (), X, np.negative, True),
    ("Sign", {}, (), X, np.sign, True),
    ("Ceil", {}, (), X, np.ceil, True),
    ("Floor", {}, (), X, np.floor, True),
    ("Exp", {}, (), X, np.exp, False),
    ("Log", {}, (), POSITIVE, np.log, False),
    ("Reciprocal", {}, (), POSITIVE, np.reciprocal, False),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, (), X,
     lambda v: np.clip(v * np.float32(0.3) + np.float32(0.4), 0, 1), False),
    ("HardSwish", {}, (), X, lambda v: v * np.clip(v * np.float32(1 / 6) + np.float32(0.5), 0, 1), False),
    ("Max", {}, (("b", np.float32(0.25)),), X, lambda v: np.maximum(v, np.float32(0.25)), True),
    ("Min", {}, (("b", np.float32(-0.5)),), X, lambda v: np.minimum(v, np.float32(-0.5)), True),
    ("Mod", {"fmod": 1}, (("b", np.float32(1.5)),), X, lambda v: np.fmod(v, np.float32(1.5)), False),
]


@pytest.mark.parametrize("op, attrs, inits, x, fn, exact", ELEMENTWISE, ids=[e[0] for e in ELEMENTWISE])
def test_elementwise_ops_against_onnxruntime_and_numpys_float16(op, attrs, inits, x, fn, exact):
    model = graph(op, list(x.shape), list(x.shape), inits, [k for k, _ in inits], **attrs)
    expected = session(model).run(None, {"x": x})[0]
    interpreter = Interpreter(model.SerializeToString())
    got = interpreter.run({"x": x}, Ops())["y"]
    assert got.dtype == np.float32 and relative_error(got, expected) <= 1e-6
    half = interpreter.run({"x": x}, IPU.prepare(None, "fp16").ops())["y"]
    operands = fn(h(x))  # the FP32 op of the FP16 operands (the constant operands are FP16 values here)
    np.testing.assert_array_equal(half, operands if exact else h(operands))
    assert np.array_equal(half, h(half))  # on the FP16 grid either way


def test_clip_bounds_are_fp16_values():
    model = graph("Clip", [3, 4, 6], [3, 4, 6], (("lo", np.float32(-0.3)), ("hi", np.float32(0.7))), ["lo", "hi"])
    expected = session(model).run(None, {"x": X})[0]
    interpreter = Interpreter(model.SerializeToString())
    np.testing.assert_array_equal(interpreter.run({"x": X}, Ops())["y"], expected)
    half = interpreter.run({"x": X}, IPU.prepare(None, "fp16").ops())["y"]
    np.testing.assert_array_equal(half, np.clip(h(X), h(np.float32(-0.3)), h(np.float32(0.7))))


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_accumulates_in_fp32_and_rounds_once(exclusive, reverse):
    model = graph("CumSum", [3, 4, 6], [3, 4, 6], (("axis", np.int64(2)),), ["axis"], exclusive=exclusive,
                  reverse=reverse)
    expected = session(model).run(None, {"x": X})[0]
    interpreter = Interpreter(model.SerializeToString())
    assert relative_error(interpreter.run({"x": X}, Ops())["y"], expected) <= 1e-6
    half = interpreter.run({"x": X}, IPU.prepare(None, "fp16").ops())["y"]
    v = h(X)[..., ::-1] if reverse else h(X)
    sums = np.cumsum(v, axis=2, dtype=np.float32)
    if exclusive:
        sums = np.concatenate([np.zeros_like(sums[..., :1]), sums[..., :-1]], axis=2)
    np.testing.assert_array_equal(half, h(sums[..., ::-1] if reverse else sums))


def test_reduce_sum_and_instance_norm_against_onnxruntime():
    model = graph("ReduceSum", [3, 4, 6], [3, 1, 6], (("axes", np.int64([1])),), ["axes"])
    expected = session(model).run(None, {"x": X})[0]
    interpreter = Interpreter(model.SerializeToString())
    assert relative_error(interpreter.run({"x": X}, Ops())["y"], expected) <= 1e-6
    half = interpreter.run({"x": X}, IPU.prepare(None, "fp16").ops())["y"]
    np.testing.assert_array_equal(half, h(h(X).sum(axis=1, keepdims=True, dtype=np.float32)))
    rng = np.random.default_rng(1)
    scale, bias = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    model = graph("InstanceNormalization", [3, 4, 6], [3, 4, 6], (("s", scale), ("b", bias)), ["s", "b"],
                  epsilon=1e-3)
    expected = session(model).run(None, {"x": X})[0]
    interpreter = Interpreter(model.SerializeToString())
    assert relative_error(interpreter.run({"x": X}, Ops())["y"], expected) <= 1e-6
    half = interpreter.run({"x": X}, IPU.prepare(None, "fp16").ops())["y"]
    assert np.array_equal(half, h(half)) and 1e-5 < relative_error(half, expected) <= 2e-3


@pytest.mark.parametrize("op, attrs, shape", [
    ("MaxPool", {"kernel_shape": [3], "strides": [2], "ceil_mode": 1}, [2, 3, 10]),
    ("MaxPool", {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, [2, 3, 7, 6]),
    ("MaxPool", {"kernel_shape": [3, 3], "pads": [0, 1, 2, 1]}, [2, 3, 7, 6]),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1]}, [2, 3, 7, 6]),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1],
                     "count_include_pad": 1}, [2, 3, 7, 6]),
    ("AveragePool", {"kernel_shape": [4], "auto_pad": "SAME_LOWER"}, [2, 3, 9]),
    ("Conv", {"auto_pad": "SAME_UPPER", "strides": [2], "group": 3}, [2, 3, 11]),
    ("Conv", {"pads": [2, 0], "dilations": [2]}, [2, 3, 11]),
    ("Conv", {"pads": [1, 0, 0, 2], "strides": [1, 2]}, [2, 3, 7, 6]),
    # 3-D (NCDHW): one 2-D op per output depth plane
    ("MaxPool", {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [0, 1, 0, 1, 1, 1], "ceil_mode": 1},
     [2, 3, 5, 7, 6]),
    ("AveragePool", {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1], "ceil_mode": 1},
     [2, 3, 6, 7, 5]),
    ("AveragePool", {"kernel_shape": [3, 2, 2], "auto_pad": "SAME_UPPER", "count_include_pad": 1}, [2, 3, 4, 5, 5]),
    ("Conv", {"pads": [1, 1, 0, 1, 1, 2], "strides": [2, 1, 2], "dilations": [2, 1, 1]}, [2, 3, 7, 6, 8]),
    ("Conv", {"auto_pad": "SAME_LOWER", "group": 3, "strides": [1, 2, 1]}, [2, 3, 4, 6, 5]),
    # dilated pooling: each window's taps side by side, one 2-D op
    ("MaxPool", {"kernel_shape": [3, 2], "strides": [2, 1], "dilations": [2, 3], "ceil_mode": 1, "pads": [1, 0, 1, 1]},
     [2, 3, 9, 8]),
    ("AveragePool", {"kernel_shape": [3], "strides": [2], "dilations": [2], "pads": [2, 1], "count_include_pad": 1},
     [2, 3, 11]),
    ("AveragePool", {"kernel_shape": [2, 2, 2], "dilations": [2, 1, 2], "ceil_mode": 1, "strides": [2, 2, 2]},
     [2, 3, 6, 5, 7]),
])
def test_convolution_and_pooling_geometry_against_onnxruntime(op, attrs, shape):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    inits, extra = (), []
    if op == "Conv":
        groups = attrs.get("group", 1)
        w = rng.standard_normal((6, 3 // groups, *[3] * (len(shape) - 2))).astype(np.float32)
        inits, extra = (("w", w), ("b", rng.standard_normal(6).astype(np.float32))), ["w", "b"]
    model = graph(op, shape, None, inits, extra, **attrs)
    expected = session(model).run(None, {"x": x})[0]
    interpreter = Interpreter(model.SerializeToString())
    got = interpreter.run({"x": x}, Ops())["y"]
    assert got.shape == expected.shape and relative_error(got, expected) <= 1e-6
    half = interpreter.run({"x": x}, IPU.prepare(None, "fp16").ops())["y"]
    assert half.shape == expected.shape and relative_error(half, expected) <= 2e-3
    if op == "MaxPool":
        assert np.array_equal(half, interpreter.run({"x": h(x)}, Ops())["y"])  # a selection of FP16 values


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_tile_and_gathers_are_exact(mode):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    pads = np.int64([0, 1, 2, 0, 2, -1]) if mode == "constant" else np.int64([0, 1, 2, 0, 2, 1])
    inits = [("pads", pads)] + ([("value", np.float32(0.5))] if mode == "constant" else [])
    model = graph("Pad", [2, 3, 5], None, inits, [k for k, _ in inits], mode=mode)
    expected = session(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(Interpreter(model.SerializeToString()).run({"x": x}, Ops())["y"], expected)
    for op, inits, attrs in [("Tile", [("r", np.int64([2, 1, 3]))], {}),
                             ("GatherElements", [("i", np.int64(rng.integers(-5, 5, (2, 3, 4))))], {"axis": 2}),
                             ("GatherND", [("i", np.int64([[[1], [0]], [[2], [2]]]))], {"batch_dims": 1})]:
        model = graph(op, [2, 3, 5], None, inits, [k for k, _ in inits], **attrs)
        expected = session(model).run(None, {"x": x})[0]
        np.testing.assert_array_equal(Interpreter(model.SerializeToString()).run({"x": x}, Ops())["y"], expected)


@pytest.mark.parametrize("equation, b_shape, constant", [
    ("bhid,bhjd->bhij", [2, 2, 5, 4], False),  # attention scores as einsum writes them
    ("bhij,bhjd->bhid", [2, 2, 4, 3], False),
    ("bid,de->bie", [4, 7], True),  # a projection by a weight
    ("bij,bkj->bki", [2, 6, 5], False),
])
def test_einsum_as_a_matrix_product(equation, b_shape, constant):
    rng = np.random.default_rng(4)
    a_shape = {"bhid": [2, 2, 3, 4], "bhij": [2, 2, 3, 4], "bid": [2, 3, 4], "bij": [2, 3, 5]}[equation.split(",")[0]]
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    node = helper.make_node("Einsum", ["x", "b"], ["y"], name="einsum", equation=equation)
    inputs = [helper.make_tensor_value_info("x", F, a_shape)] + (
        [] if constant else [helper.make_tensor_value_info("b", F, b_shape)])
    rank = len(equation.split("->")[1])
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", F, [f"d{i}" for i in range(rank)])],
                          initializer=[numpy_helper.from_array(b, "b")] if constant else [])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    feeds = {"x": a} if constant else {"x": a, "b": b}
    expected = session(model).run(None, feeds)[0]
    calls = []

    class Recording(Ops):
        def linear(self, x, weight, bias=None, *, name):
            calls.append("linear")
            return super().linear(x, weight, bias, name=name)

        def matmul(self, x, y, *, name):
            calls.append("matmul")
            return super().matmul(x, y, name=name)

    got = Interpreter(model.SerializeToString()).run(feeds, Recording())["y"]
    assert got.shape == expected.shape and relative_error(got, expected) <= 1e-6
    assert calls[-1] == ("linear" if constant else "matmul")


CUBIC_A = {"cubic_coeff_a": -0.5}
EXCLUDE = {"cubic_coeff_a": -0.5, "exclude_outside": 1}


@pytest.mark.parametrize("mode, transform, extra, out", [
    ("linear", "half_pixel", {}, (9, 7)), ("linear", "align_corners", {}, (9, 7)),
    ("linear", "pytorch_half_pixel", {}, (9, 7)), ("nearest", "asymmetric", {}, (9, 7)),
    # cubic: Keys' kernel over four neighbours per axis, up and down, its coefficient and exclude_outside
    ("cubic", "half_pixel", {}, (9, 7)), ("cubic", "half_pixel", {}, (3, 2)), ("cubic", "align_corners", {}, (9, 3)),
    ("cubic", "asymmetric", CUBIC_A, (11, 8)), ("cubic", "pytorch_half_pixel", {}, (9, 1)),
    ("cubic", "half_pixel", EXCLUDE, (9, 7)), ("cubic", "half_pixel", EXCLUDE, (3, 3)),
])
def test_resize_against_onnxruntime_and_one_fp16_rounding(mode, transform, extra, out):
    x = np.random.default_rng(5).standard_normal((2, 3, 5, 4)).astype(np.float32)
    sizes = np.int64([2, 3, *out])
    model = graph("Resize", [2, 3, 5, 4], [2, 3, *out], (("sizes", sizes),), ["", "", "sizes"], mode=mode,
                  coordinate_transformation_mode=transform, nearest_mode="floor", **extra)
    expected = session(model).run(None, {"x": x})[0]
    interpreter = Interpreter(model.SerializeToString())
    got = interpreter.run({"x": x}, Ops())["y"]
    assert got.shape == expected.shape and relative_error(got, expected) <= 1e-6
    half = interpreter.run({"x": x}, IPU.prepare(None, "fp16").ops())["y"]
    if mode == "nearest":  # a selection of input elements: exact, as every step that only moves values
        np.testing.assert_array_equal(half, got)
    else:
        np.testing.assert_array_equal(half, h(interpreter.run({"x": h(x)}, Ops())["y"]))


def _ml_graph(op, x_shape, outputs, **attrs):
    node = helper.make_node(op, ["x"], [name for name, _, _ in outputs], name="op", domain="ai.onnx.ml", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, x_shape)],
                          [helper.make_tensor_value_info(name, kind, shape) for name, kind, shape in outputs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 3)],
                             ir_version=9)


RNG = np.random.default_rng(7)
COEF3, COEF1 = RNG.standard_normal(15).round(2).tolist(), RNG.standard_normal(5).round(2).tolist()
LABEL_OUTPUTS = [("label", TensorProto.INT64, ["N"]), ("scores", F, ["N", "K"])]


@pytest.mark.parametrize("op, attrs, outputs", [
    ("LinearClassifier", {"coefficients": COEF3, "intercepts": [0.1, -0.2, 0.3], "classlabels_ints": [4, 7, 9],
                          "post_transform": "SOFTMAX", "multi_class": 1}, LABEL_OUTPUTS),
    ("LinearClassifier", {"coefficients": COEF1, "intercepts": [0.2], "classlabels_ints": [0, 1],
                          "post_transform": "LOGISTIC"}, LABEL_OUTPUTS),
    ("LinearClassifier", {"coefficients": COEF3, "intercepts": [0.0, 0.0, 0.0], "classlabels_ints": [0, 1, 2]},
     LABEL_OUTPUTS),
    ("LinearClassifier", {"coefficients": COEF1, "intercepts": [-0.3], "classlabels_ints": [3, 5]}, LABEL_OUTPUTS),
    ("LinearRegressor", {"coefficients": COEF3[:10], "intercepts": [1.0, -1.0], "targets": 2}, [("y", F, ["N", 2])]),
    ("Normalizer", {"norm": "L1"}, [("y", F, ["N", 5])]),
    ("Normalizer", {"norm": "L2"}, [("y", F, ["N", 5])]),
    ("Normalizer", {"norm": "MAX"}, [("y", F, ["N", 5])]),  # the largest value, not magnitude
    ("Scaler", {"offset": [0.5, -1, 0, 2, 1], "scale": [2, 0.5, 1, 3, 0.25]}, [("y", F, ["N", 5])]),
])
def test_onnx_ml_operators_against_onnxruntime(op, attrs, outputs):
    """The ONNX-ML operators skl2onnx writes for scikit-learn's scalers and linear models, as onnxruntime computes
    them (a binary classifier's one score as the pair (-score, score), its label from the larger), and through the
    ipu's ops at fp16 (labels the FP32 ones here: no score lies near a tie)."""
    x = np.random.default_rng(3).standard_normal((6, 5)).astype(np.float32) * 2
    x[1] = 0.0  # a row of norm 0, left as it is; a score of 0 (the first class)
    x[2, :] = -np.abs(x[2])  # a row of negative values (a negative MAX)
    model = _ml_graph(op, ["N", 5], outputs, **attrs)
    expected = dict(zip([name for name, _, _ in outputs], session(model).run(None, {"x": x})))
    interpreter = Interpreter(model.SerializeToString())
    got = interpreter.run({"x": x}, Ops())
    half = interpreter.run({"x": x}, IPU.prepare(None, "fp16").ops())
    for name, value in expected.items():
        assert got[name].shape == value.shape and got[name].dtype == value.dtype, name
        if value.dtype.kind == "f":
            assert relative_error(got[name], value) <= 1e-6, name
            assert np.array_equal(half[name], h(half[name])) and relative_error(half[name], value) <= 2e-3, name
        else:
            assert np.array_equal(got[name], value) and np.array_equal(half[name], value), name


@pytest.mark.parametrize("op, attrs, says", [
    ("LinearClassifier", {"coefficients": COEF3, "intercepts": [0.0, 0.0, 0.0], "classlabels_ints": [0, 1, 2],
                          "post_transform": "PROBIT"},
     "post_transform 'PROBIT' is not supported"),
    ("LinearClassifier", {"coefficients": COEF3, "intercepts": [0.0, 0.0, 0.0], "classlabels_strings": ["a", "b", "c"]},
     "graph input/output 'label' is STRING"),
    ("LinearRegressor", {"coefficients": COEF1, "post_transform": "SOFTMAX"}, "post_transform NONE is supported"),
    ("Normalizer", {"norm": "L3"}, "norm 'L3' is not one of MAX, L1, L2"),
])
def test_onnx_ml_forms_not_run_are_refused_when_read(op, attrs, says):
    from conformance.graphs.interpreter import InterpreterError
    kind = TensorProto.STRING if "classlabels_strings" in attrs else TensorProto.INT64
    outputs = ([("label", kind, ["N"]), ("scores", F, ["N", "K"])] if op == "LinearClassifier"
               else [("y", F, ["N", "K"])])
    with pytest.raises(InterpreterError, match=says):
        Interpreter(_ml_graph(op, ["N", 5], outputs, **attrs).SerializeToString())
