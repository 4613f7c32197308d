"""The ONNX interpreter: a graph run through a backend's ops.

Round trip: the exported FP32 graph of a model, run through the ipu backend's ops at each of its precisions (and the
FP32 reference ops), gives the model's own outputs bit for bit. Operators: a graph of the supported operators run
through the FP32 reference ops against onnxruntime. Refusals: each bad graph is an InterpreterError naming what is
wrong, before anything runs.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conformance.graphs import record
from conformance.graphs.case import GraphCase
from conformance.graphs.precision import record_precision
from conformance.graphs.interpreter import MIN_OPSET, SUPPORTED, Interpreter, InterpreterError
from conformance.graphs.runtime import relative_error, session
from conformance.hardware import get_backend
from models import MODEL_NAMES, load_model
from models.ops import Ops
from models.seeds import EVAL_SEED
from tests.test_graph_export import SMALL

IPU = get_backend("ipu")
PRECISIONS = ("fp32", *IPU.precisions)  # fp32: the reference ops (the cpu hardware's)


def round_trip(name: str, precision: str) -> None:
    model = load_model(name, **SMALL[name])
    interpreter = Interpreter(record(model).model.SerializeToString())
    make_ops = Ops if precision == "fp32" else IPU.prepare(model, precision).ops
    inputs = model.sample_inputs(3, seed=EVAL_SEED)
    expected = model(inputs, make_ops())
    got = interpreter.run(inputs, make_ops())
    assert set(got) == set(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=f"{name} {precision} {key}")


# widedeep sums its wide terms as a matmul by a constant vector of ones: in a graph a MatMul with a constant operand is
# a layer's weight (as PopRT takes it), so at FP8 the interpreter quantizes that vector as a weight where the model
# calibrates it as an activation (and has no input scale for it); at the other precisions the bits are the model's.
@pytest.mark.parametrize("name, precision", [(n, p) for n in MODEL_NAMES for p in PRECISIONS
                                             if not (n == "widedeep" and p == "fp8")])
def test_round_trip_gives_the_models_bits(name, precision):
    round_trip(name, precision)


def test_node_names_reach_the_ops_as_layer_names():
    model = load_model("albert", **SMALL["albert"])  # a shared layer: nodes layer, layer:1, layer:2 are one layer
    names: list[str] = []
    Interpreter(record(model).model.SerializeToString()).run(model.sample_inputs(1), Ops(recorder=lambda n, _: names.append(n)))
    expected: list[str] = []
    model(model.sample_inputs(1), Ops(recorder=lambda n, _: expected.append(n)))
    assert set(expected) <= set(names)
    assert {n.split("/")[0] for n in names} == set(expected)


# -- the operators, against onnxruntime --------------------------------------------------------------------------------
def make_model(nodes, inputs, outputs, initializers=(), opset=20, **kwargs):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9, **kwargs)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def test_operators_compute_what_onnxruntime_computes():
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    w = rng.standard_normal((6, 8)).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "c"], ["g"], name="gemm", transB=1),                 # (B, 6)
        helper.make_node("Div", ["g", "two"], ["d"], name="half"),
        helper.make_node("Gelu", ["d"], ["e"], name="act", approximate="tanh"),
        helper.make_node("Unsqueeze", ["e", "ax1"], ["u"], name="u"),                            # (B, 1, 6)
        helper.make_node("Expand", ["u", "shape3"], ["ex"], name="ex"),                          # (B, 3, 6)
        helper.make_node("Slice", ["ex", "st", "en", "axs", "stp"], ["sl"], name="sl"),          # (B, 3, 3) reversed
        helper.make_node("LayerNormalization", ["sl", "gamma"], ["ln"], name="ln", axis=-1, epsilon=1e-5),
        helper.make_node("Split", ["ln"], ["s0", "s1"], name="split", axis=1, num_outputs=2),    # (B, 2, 3), (B, 1, 3)
        helper.make_node("Sigmoid", ["s1"], ["sg"], name="sig"),
        helper.make_node("Mul", ["s0", "sg"], ["m"], name="gate"),
        helper.make_node("Softmax", ["m"], ["sm"], name="softmax", axis=-1),
        helper.make_node("ReduceMean", ["sm", "ax1"], ["rm"], name="mean", keepdims=0),          # (B, 3)
        helper.make_node("Shape", ["rm"], ["sh"], name="shape"),
        helper.make_node("Flatten", ["ex"], ["fl"], name="flat", axis=1),                         # (B, 18)
        helper.make_node("Squeeze", ["u", "ax1"], ["sq"], name="squeeze"),                       # (B, 6)
        helper.make_node("Sub", ["sq", "e"], ["zero"], name="sub"),
        helper.make_node("Tanh", ["fl"], ["th"], name="tanh"),
    ]
    inits = [const("w", w), const("c", rng.standard_normal(6).astype(np.float32)), const("two", np.float32(2)),
             const("ax1", np.int64([1])), const("shape3", np.int64([1, 3, 1])), const("st", np.int64([-1])),
             const("en", np.int64([-(2 ** 63)])), const("axs", np.int64([2])), const("stp", np.int64([-2])),
             const("gamma", rng.standard_normal(3).astype(np.float32))]
    outputs = [helper.make_tensor_value_info(n, t, shape) for n, t, shape in
               (("rm", f, ["batch", 3]), ("sh", TensorProto.INT64, [2]), ("th", f, ["batch", 18]),
                ("zero", f, ["batch", 6]))]
    model = make_model(nodes, [helper.make_tensor_value_info("x", f, ["batch", 8])], outputs, inits)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    expected = dict(zip(["rm", "sh", "th", "zero"], session(model).run(None, {"x": x})))
    got = Interpreter(model.SerializeToString()).run({"x": x}, Ops())
    np.testing.assert_array_equal(got["sh"], expected["sh"])
    for key in ("rm", "th", "zero"):
        assert got[key].shape == expected[key].shape and relative_error(got[key], expected[key]) <= 1e-6, key


def test_index_and_mask_arithmetic_runs_exactly_as_onnxruntime_runs_it():
    """Range, integer Add/Sub/Mul/Div (ONNX's division truncates towards zero), comparisons, And/Or, IsNaN and Where:
    index and mask steps, exact in numpy (none of them goes through the ops), equal to onnxruntime's."""
    i64, f = TensorProto.INT64, TensorProto.FLOAT
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "one"], ["n"], name="n", axis=0),                    # 6
        helper.make_node("Range", ["zero", "n", "one"], ["r"], name="range"),                     # 0..5
        helper.make_node("Sub", ["r", "three"], ["centred"], name="centred"),                     # -3..2
        helper.make_node("Div", ["centred", "two"], ["halved"], name="halved"),                   # truncated
        helper.make_node("Mul", ["halved", "three"], ["scaled"], name="scaled"),
        helper.make_node("Add", ["scaled", "one"], ["shifted"], name="shifted"),
        helper.make_node("GreaterOrEqual", ["shifted", "zero"], ["ge"], name="ge"),
        helper.make_node("Less", ["r", "three"], ["lt"], name="lt"),
        helper.make_node("And", ["ge", "lt"], ["both"], name="both"),
        helper.make_node("Or", ["ge", "lt"], ["either"], name="either"),
        helper.make_node("IsNaN", ["x"], ["nan"], name="nan"),
        helper.make_node("Where", ["nan", "fill", "x"], ["clean"], name="clean"),
        helper.make_node("Where", ["both", "clean", "fill"], ["masked"], name="masked"),
    ]
    inits = [const("zero", np.int64(0)), const("one", np.int64(1)), const("two", np.int64(2)),
             const("three", np.int64(3)), const("fill", np.float32(-1.0))]
    outputs = [helper.make_tensor_value_info("shifted", i64, [6]),
               helper.make_tensor_value_info("either", TensorProto.BOOL, [6]),
               helper.make_tensor_value_info("masked", f, ["batch", 6])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", f, ["batch", 6])], outputs, inits)
    x = np.random.default_rng(5).standard_normal((3, 6)).astype(np.float32)
    x[1, 2] = np.nan
    expected = dict(zip(["shifted", "either", "masked"], session(model).run(None, {"x": x})))
    got = Interpreter(model.SerializeToString()).run({"x": x}, Ops())
    for key, value in expected.items():
        assert got[key].dtype == value.dtype, key
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    np.testing.assert_array_equal(got["shifted"], [-2, -2, 1, 1, 1, 4])  # -3//2 would give -2 - 1: truncation


def decomposed_norm_graph():
    """LayerNorm as exporters below opset 17 write it, then an RMS norm: ReduceMean, Sub, Pow, Add, Sqrt and Div by a
    computed tensor."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["mu"], name="ln.mean", keepdims=1),
        helper.make_node("Sub", ["x", "mu"], ["xc"], name="ln.centre"),
        helper.make_node("Pow", ["xc", "two"], ["sq"], name="ln.square"),
        helper.make_node("ReduceMean", ["sq", "axes"], ["var"], name="ln.var", keepdims=1),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="ln.eps"),
        helper.make_node("Sqrt", ["ve"], ["sd"], name="ln.sd"),
        helper.make_node("Div", ["xc", "sd"], ["y"], name="ln.normalise"),
        helper.make_node("Div", ["y", "three"], ["y3"], name="third"),  # a constant without an exact reciprocal
    ]
    inits = [const("axes", np.int64([-1])), const("two", np.float32(2)), const("eps", np.float32(1e-5)),
             const("three", np.float32(3))]
    return make_model(nodes, [helper.make_tensor_value_info("x", f, ["batch", 16])],
                      [helper.make_tensor_value_info("y3", f, ["batch", 16])], inits)


def test_division_square_root_and_power_against_onnxruntime_and_ieee_fp16():
    model = decomposed_norm_graph()
    x = (np.random.default_rng(3).standard_normal((5, 16)) * 4 + 1).astype(np.float32)
    expected = session(model).run(None, {"x": x})[0]
    got = Interpreter(model.SerializeToString()).run({"x": x}, Ops())["y3"]
    assert relative_error(got, expected) <= 1e-6
    # at fp16 every op is IEEE FP16: the exact result of its FP16 operands (float64 holds it closely enough to round
    # it correctly) rounded to FP16 once
    half = Interpreter(model.SerializeToString()).run({"x": x}, IPU.prepare(None, "fp16").ops())["y3"]
    h = lambda v: np.asarray(v, np.float64).astype(np.float16).astype(np.float64)  # noqa: E731
    xs = h(x)
    mu = h(xs.mean(axis=-1, keepdims=True))
    xc = h(xs - mu)
    var = h(h(xc * xc).mean(axis=-1, keepdims=True))
    sd = h(np.sqrt(h(var + h(np.float32(1e-5)))))
    oracle = h(h(xc / sd) / 3.0)
    np.testing.assert_array_equal(half.astype(np.float64), oracle)


def test_division_square_root_and_power_export_as_they_run(tmp_path):
    """The decomposed norm imported, then written as the graph of the ipu's fp16 (float16 values between the ops):
    onnxruntime runs it to the emulator's bits (on these inputs the means' summation order changes no FP16 rounding)."""
    path = tmp_path / "norm.onnx"
    onnx.save(decomposed_norm_graph(), path)
    model = GraphCase("norm", path).model
    recording, _ = record_precision(model, IPU.policy("fp16"), None)
    x = (np.random.default_rng(4).standard_normal((64, 16)) * 4 + 1).astype(np.float32)
    emulated = model({"x": x}, IPU.prepare(model, "fp16").ops())["y3"]
    graph = session(recording.model).run(None, {"x": x})[0]
    assert [n.op_type for n in recording.model.graph.node if n.op_type in ("Pow", "Sqrt", "Div")] == ["Pow", "Sqrt", "Div", "Div"]
    np.testing.assert_array_equal(graph, emulated)
    assert relative_error(emulated, model({"x": x}, Ops())["y3"]) > 1e-4  # and it is FP16, not FP32


def test_resnet_graph_ops_conv_pool_batch_norm_against_onnxruntime():
    model = load_model("resnet50", **SMALL["resnet50"])
    data = record(model).model.SerializeToString()
    inputs = model.sample_inputs(2, seed=EVAL_SEED)
    got = Interpreter(data).run(inputs, Ops())
    expected = session(data).run(None, inputs)[0]
    assert relative_error(got["logits"], expected) <= 1e-5


# -- refusals ------------------------------------------------------------------------------------------------------
def tiny(op="Relu", domain="", opset=20, **kwargs):
    node = helper.make_node(op, ["x"], ["y"], name="the_node", domain=domain)
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=opsets, ir_version=9, **kwargs)


@pytest.mark.parametrize("case, says", [
    ("not-onnx", ["is not an ONNX model"]),
    ("checker", ["fails onnx.checker"]),
    ("old-opset", ["opset 13", f"opset {MIN_OPSET} or later"]),
    ("unsupported-op", ["node 'the_node' (Cos)", "operator Cos is not supported", "MatMul", "LayerNormalization"]),
    ("lone-erf", ["node 'the_node' (Erf)", "only inside the exact GELU sub-graph"]),
    ("custom-domain", ["custom domain 'com.example'"]),
    ("float16", ["FLOAT16", "FP32 graphs"]),
    ("function", ["model-local functions"]),
])
def test_bad_graphs_are_refused_with_the_reason(case, says, tmp_path):
    if case == "not-onnx":
        graph = b"\x00\x01 not a protobuf at all \xff" * 8
    elif case == "checker":
        model = tiny()
        model.graph.node[0].input[0] = "undefined"
        graph = model.SerializeToString()
    elif case == "old-opset":
        graph = tiny(opset=13).SerializeToString()
    elif case == "unsupported-op":
        graph = tiny("Cos").SerializeToString()
    elif case == "lone-erf":
        graph = tiny("Erf").SerializeToString()
    elif case == "custom-domain":
        graph = tiny("MyOp", domain="com.example").SerializeToString()
    elif case == "float16":
        node = helper.make_node("Add", ["x", "b"], ["y"], name="add")
        graph = make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])],
                           [const("b", np.float16([1, 2]))]).SerializeToString()
    else:
        function = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                                        [helper.make_opsetid("", 20)])
        model = tiny("Twice", domain="local", functions=[function])
        graph = model.SerializeToString()
    with pytest.raises(InterpreterError) as refused:
        Interpreter(graph)
    assert all(text in str(refused.value) for text in says), str(refused.value)


def test_unsupported_operator_message_lists_every_supported_operator():
    with pytest.raises(InterpreterError) as refused:
        Interpreter(tiny("Cos").SerializeToString())
    assert all(op in str(refused.value) for op in SUPPORTED)


def external_graph(tmp_path):
    big = np.arange(4096, dtype=np.float32).reshape(64, 64)
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="layer")
    model = make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [const("w", big)])
    onnx.save_model(model, tmp_path / "g.onnx", save_as_external_data=True, location="g.onnx.data",
                    size_threshold=0)
    return tmp_path / "g.onnx", big


def test_external_data_beside_the_graph_is_read(tmp_path):
    path, big = external_graph(tmp_path)
    x = np.ones((1, 64), np.float32)
    np.testing.assert_array_equal(Interpreter(path).run({"x": x}, Ops())["y"], x @ big)


def test_missing_or_escaping_external_data_is_refused(tmp_path):
    path, _ = external_graph(tmp_path)
    (tmp_path / "g.onnx.data").unlink()
    with pytest.raises(InterpreterError, match="external data file .* is missing"):
        Interpreter(path)
    model = onnx.load(str(path), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../outside.data"
    (tmp_path / "sub").mkdir()
    onnx.save_model(model, tmp_path / "sub" / "g.onnx")
    with pytest.raises(InterpreterError, match="lies outside the graph's folder"):
        Interpreter(tmp_path / "sub" / "g.onnx")


def test_inputs_that_do_not_fit_the_graph_are_named():
    model = load_model("widedeep", **SMALL["widedeep"])
    interpreter = Interpreter(record(model).model.SerializeToString())
    with pytest.raises(InterpreterError, match="numeric_features"):
        interpreter.run({}, Ops())
    inputs = model.sample_inputs(2)
    wrong = {**inputs, "numeric_features": inputs["numeric_features"][:, :-1]}
    with pytest.raises(InterpreterError, match=r"input 'numeric_features' is float32 of shape \(2, 4\); the graph "
                                               r"takes float32 of shape \(batch, 5\)"):
        interpreter.run(wrong, Ops())
    with pytest.raises(InterpreterError, match="input 'numeric_features' is float64"):
        interpreter.run({**inputs, "numeric_features": inputs["numeric_features"].astype(np.float64)}, Ops())


def test_shapes_that_do_not_fit_name_the_node():
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="the_reshape")
    model = make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [const("shape", np.int64([2, 3]))])
    # refused when the graph is read (its one-sample run, dynamic dimensions 1), and on inputs that do not fit
    with pytest.raises(InterpreterError, match=r"node 'the_reshape' \(Reshape\) on inputs of shapes \(1,\), \(2,\)"):
        Interpreter(model.SerializeToString())
    with pytest.raises(InterpreterError, match=r"node 'the_reshape' \(Reshape\) on inputs of shapes \(5,\), \(2,\)"):
        Interpreter(model.SerializeToString(), check_run=False).run({"x": np.zeros(5, np.float32)}, Ops())


# -- refused when read, never inside a test --------------------------------------------------------------------------
def _one(op, inputs, output_shape, inits=(), attrs=None, outputs=("y",), input_shapes=None, opset=20):
    node = helper.make_node(op, [name for name, _ in inputs], list(outputs), name="the_node", **(attrs or {}))
    values = [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs
              if name not in {i.name for i in inits}]
    outs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, output_shape) for name in outputs]
    return make_model([node], values, outs, inits, opset=opset)


@pytest.mark.parametrize("case, says", [
    ("conv-4d", ["node 'the_node'", "Conv of 4 spatial dimension(s)", "1-D, 2-D and 3-D Conv are supported"]),
    ("maxpool-indices", ["node 'the_node' (MaxPool)", "optional output(s) ['indices']"]),
    ("maxpool-storage-order", ["node 'the_node'", "MaxPool with storage_order=1 is not supported"]),
    ("impossible-expand", ["node name: the_node", "Expand", "Incompatible dimensions"]),
    ("huge-input", ["graph input 'x' of shape (batch, 100000, 100000)", "40000000000 bytes"]),
    ("huge-expand", ["node 'the_node' (Expand)", "bytes for one sample"]),
    ("einsum-sum", ["node 'the_node'", "Einsum 'ij->i' is not supported"]),
    ("float-mod", ["node 'the_node'", "Mod of floats needs fmod=1"]),
])
def test_what_cannot_run_is_refused_when_the_graph_is_read(case, says):
    if case == "conv-4d":
        model = _one("Conv", [("x", ["batch", 1, 4, 4, 4, 4]), ("w", None)], ["batch", 2, 3, 3, 3, 3],
                     [const("w", np.ones((2, 1, 2, 2, 2, 2), np.float32))])
    elif case == "maxpool-indices":
        model = _one("MaxPool", [("x", ["batch", 1, 4, 4])], ["batch", 1, 3, 3], attrs={"kernel_shape": [2, 2]},
                     outputs=("y", "indices"))
        model.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64
    elif case == "maxpool-storage-order":
        model = _one("MaxPool", [("x", ["batch", 1, 6, 6])], ["batch", 1, 5, 5],
                     attrs={"kernel_shape": [2, 2], "storage_order": 1})
    elif case == "impossible-expand":
        model = _one("Expand", [("x", ["batch", 3]), ("shape", None)], ["batch", 4], [const("shape", np.int64([2, 4]))])
    elif case == "huge-input":
        model = _one("Relu", [("x", ["batch", 100000, 100000])], ["batch", 100000, 100000])
    elif case == "huge-expand":
        model = _one("Expand", [("x", ["batch", 1]), ("shape", None)], ["batch", 1 << 31],
                     [const("shape", np.int64([1, 1 << 31]))])
    elif case == "einsum-sum":
        model = _one("Einsum", [("x", ["batch", 3])], ["batch"], attrs={"equation": "ij->i"})
    else:
        model = _one("Mod", [("x", ["batch", 3]), ("d", None)], ["batch", 3], [const("d", np.float32([2, 3, 4]))])
    with pytest.raises(InterpreterError) as refused:
        Interpreter(model.SerializeToString())
    assert all(text in str(refused.value) for text in says), str(refused.value)


def test_external_data_that_does_not_match_its_file_is_refused(tmp_path):
    path, _ = external_graph(tmp_path)
    model = onnx.load(str(path), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "length":
            entry.value = str(64 * 64 * 4 * 2)  # longer than the file
    onnx.save_model(model, path)
    with pytest.raises(InterpreterError, match=r"tensor 'w': external data 'g.onnx.data' does not match: offset 0 and "
                                               r"length 32768 in a file of 16384 bytes"):
        Interpreter(path)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "length":
            entry.value = "100"  # within the file, shorter than the tensor it holds
    onnx.save_model(model, path)
    with pytest.raises(InterpreterError, match="length 100 in a file of 16384 bytes, for a tensor of 16384 bytes"):
        Interpreter(path)


def test_an_unused_domain_import_is_ignored():
    """skl2onnx imports ai.onnx.ml even when no node uses it; a node of that domain other than the ONNX-ML operators
    the interpreter runs is refused."""
    model = tiny()
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    Interpreter(model.SerializeToString())
    model.graph.node[0].domain = "ai.onnx.ml"
    with pytest.raises(InterpreterError, match="node 'the_node' .* ONNX-ML operator Relu .* is not supported; of that "
                                               "domain only ArrayFeatureExtractor, LinearClassifier, LinearRegressor, "
                                               "Normalizer, Scaler run"):
        Interpreter(model.SerializeToString())


def test_a_failure_on_drawn_index_values_is_left_to_the_real_inputs():
    """A Reshape to a shape given as an integer input: the one-sample run at read time draws zeros, which cannot be a
    shape; the graph is accepted, and the real inputs decide."""
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")
    model = make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    interpreter = Interpreter(model.SerializeToString())
    y = interpreter.run({"x": np.arange(6, dtype=np.float32).reshape(2, 3), "shape": np.int64([3, 2])}, Ops())["y"]
    assert y.shape == (3, 2)


def test_large_weights_are_checked_by_their_shapes():
    """The checker sees a large weight as an input of its shape (its values are not copied into it): a weight that
    does not fit its MatMul is still refused when the graph is read, and one that fits runs."""
    big = np.ones((300, 300), np.float32)  # larger than LARGE_WEIGHT
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="layer")
    wrong = make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 300])], [const("w", big)])
    with pytest.raises(InterpreterError, match="fails onnx.checker.*layer"):
        Interpreter(wrong.SerializeToString())
    right = make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 300])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 300])], [const("w", big)])
    x = np.ones((2, 300), np.float32)
    np.testing.assert_array_equal(Interpreter(right.SerializeToString()).run({"x": x}, Ops())["y"], x @ big)


# -- memory: a graph's weights are held once ------------------------------------------------------------------------
_PEAK = """
import sys
from conformance.graphs.interpreter import Interpreter
def status(key):
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key))
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) from here on
interpreter = Interpreter(sys.argv[1])
print(status("VmHWM") - before, status("VmRSS") - before)
"""


def _weights_graph(path, *, external: bool, n: int = 2048, layers: int = 4):
    """A MatMul chain of ``layers`` (n, n) float32 weights (16 MiB each at n=2048)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((n, n), dtype=np.float32) / np.float32(n ** 0.5), f"w{i}")
             for i in range(layers)]
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i - 1}", f"w{i}"], [f"h{i}"], name=f"mm{i}")
             for i in range(layers)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", n])],
                       [helper.make_tensor_value_info(f"h{layers - 1}", TensorProto.FLOAT, ["batch", n])], inits)
    onnx.save_model(model, path, save_as_external_data=external, location="w.data")
    return model, layers * n * n * 4


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/clear_refs"), reason="Linux's /proc peak RSS")
@pytest.mark.parametrize("external", [False, True])
def test_reading_a_graph_holds_its_weights_once(tmp_path, external):
    """Peak and held resident memory of reading a 64 MiB graph, in a fresh process: the parsed file and its weights
    as arrays at the peak (the weights alone from external data), the arrays alone once read (the transposed layout
    a MatMul's linear op takes is the arrays' own, not a copy)."""
    import subprocess
    import sys
    _, weights = _weights_graph(tmp_path / "g.onnx", external=external)
    # glibc's fixed mmap threshold: a freed large block leaves the process (its default raises the threshold after
    # a free, so that the next blocks come from the heap, which keeps what is freed: RSS would not measure what is held)
    env = {**__import__("os").environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 17)}
    out = subprocess.run([sys.executable, "-c", _PEAK, str(tmp_path / "g.onnx")], capture_output=True, text=True,
                         check=True, env=env).stdout.split()
    peak, held = (int(v) / weights for v in out)
    assert held <= 1.25, (peak, held)
    assert peak <= (1.5 if external else 2.5), (peak, held)


def test_the_graph_is_written_whole_and_a_given_model_is_left_as_it_is(tmp_path):
    """Reading a file releases its weights from the parsed graph; :meth:`Interpreter.serialized` writes them back,
    and onnxruntime computes the same from it as from the file. A ModelProto given is the caller's: untouched."""
    model, _ = _weights_graph(tmp_path / "g.onnx", external=False, n=256, layers=2)
    interpreter = Interpreter(tmp_path / "g.onnx")
    assert all(not t.raw_data for t in interpreter.model.graph.initializer)
    x = {"x": np.random.default_rng(1).standard_normal((3, 256)).astype(np.float32)}
    whole = interpreter.serialized()
    assert onnx.load_from_string(whole).graph.initializer[0].raw_data == model.graph.initializer[0].raw_data
    np.testing.assert_array_equal(session(whole).run(None, x)[0], session(str(tmp_path / "g.onnx")).run(None, x)[0])
    assert relative_error(interpreter.run(x, Ops())["h1"], session(whole).run(None, x)[0]) <= 1e-6
    Interpreter(model)
    assert all(len(t.raw_data) == 256 * 256 * 4 for t in model.graph.initializer)
