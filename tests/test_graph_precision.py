"""``ipu-conformance export --precision P``: the ipu hardware's precisions as ONNX graphs, and PopRT's settings.

The oracle for where the graph quantizes is the precision policy itself (precisions.toml: which operands of which
matrix ops are FP8, minus the skip list) and the emulator's record of the scales it used; for the scales, the
calibration (input scales) and the weights themselves (weight scales). For what the graph computes, the emulator with
FP32 partials (:class:`FloatPartialsOps`: ONNX has no accumulator type) run by the model itself, against onnxruntime
running the graph; and the emulator as the main job runs it (half partials at fp8), against which the graph must be
closer than the FP32 model is.
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from conformance.cli import main
from conformance.graphs import FloatPartialsOps, check, layer_of, record_precision
from conformance.graphs import poprt
from conformance.graphs.precision import FP8_TYPES, VERIFY_TOLERANCE
from conformance.graphs.runtime import relative_error, run, session
from conformance.hardware import get_backend
from conformance.hardware.ipu import fp8_scales
from conformance.hardware.ipu.policy import Fp8Settings
from conformance.numerics import quantize
from models import MODEL_NAMES, load_model
from models.seeds import EVAL_SEED
from tests.test_graph_export import SMALL, KindRecorder, write_bert_checkpoint

IPU = get_backend("ipu")
FP8_PRECISIONS = [p for p in IPU.precisions if IPU.policy(p).uses_fp8]
# Operands of each matrix op kind that a policy's fp8 mode puts in FP8 (the emulator's operand names).
FP8_OPERANDS = {"all": {"linear": {"input", "weight"}, "conv2d": {"input", "weight"}, "matmul": {"a", "b"}},
                "weights": {"linear": {"weight"}, "conv2d": {"weight"}, "matmul": set()}}
# Models whose ops hold no transcendental function a library may round differently (erf, exp, tanh) in the small
# configs: there onnxruntime gives the emulator's bits.
EXACT = ("resnet50", "widedeep")


@pytest.fixture(scope="module")
def built():
    """(name, precision) -> (model, prepared, recording, settings, serialised graph), each built once."""
    cache, models = {}, {}

    def get(name, precision):
        if (name, precision) not in cache:
            model = models.setdefault(name, load_model(name, **SMALL[name]))
            prepared = IPU.prepare(model, precision)
            recording, settings = record_precision(model, prepared.policy, prepared.plan)
            cache[name, precision] = (model, prepared, recording, settings, recording.model.SerializeToString())
        return cache[name, precision]
    return get


def qdq_pairs(graph: onnx.GraphProto) -> dict[tuple[str, str], dict]:
    """(layer, operand) -> the scale exponent, zero point type, saturate flag and consumers of each QDQ pair."""
    init = {t.name: t for t in graph.initializer}
    consumers = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    pairs = {}
    for node in graph.node:
        if node.op_type != "QuantizeLinear":
            continue
        layer, operand = layer_of(node.name), node.name.split("/")[1]
        scale = float(numpy_helper.to_array(init[node.input[1]]))
        exponent = int(np.log2(scale))
        (dq,) = consumers[node.output[0]]
        assert dq.op_type == "DequantizeLinear" and list(dq.input[1:]) == list(node.input[1:]), node.name
        reached, frontier = set(), [dq.output[0]]  # the ops the dequantized value feeds, through casts and transposes
        while frontier:
            for user in consumers[frontier.pop()]:
                if user.op_type in ("Cast", "Transpose"):
                    frontier.append(user.output[0])
                else:
                    reached.add(user.name)
        pairs[layer, operand] = {"exponent": exponent, "power_of_two": scale == 2.0 ** exponent,
                                 "zero_type": init[node.input[2]].data_type,
                                 "saturate": {a.name: a.i for a in node.attribute}.get("saturate"),
                                 "feeds": reached}
    return pairs


def policy_operands(model, precision) -> dict[str, set[str]]:
    """Layer -> the operands the policy puts in FP8, from the policy's data and the model's own op calls."""
    recorder = KindRecorder()
    model(model.sample_inputs(1), recorder)
    policy, settings = IPU.policy(precision), IPU.fp8_settings[model.name]
    wanted = FP8_OPERANDS[policy.fp8]
    return {layer: wanted[kind] for layer, kind in set(recorder.calls)
            if kind in wanted and wanted[kind] and layer not in settings.skip}


# -- where the graph quantizes, and with which scales -----------------------------------------------------------------
@pytest.mark.parametrize("precision", FP8_PRECISIONS)
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_qdq_pairs_sit_exactly_where_the_policy_quantizes(name, precision, built):
    model, prepared, recording, _, data = built(name, precision)
    check(data)
    pairs = qdq_pairs(recording.model.graph)
    expected = policy_operands(model, precision)
    assert expected and sorted(pairs) == sorted((layer, op) for layer, ops in expected.items() for op in ops)
    assert not {layer for layer, _ in pairs} & set(prepared.plan.settings.skip)  # the skip list holds by node name
    settings = prepared.plan.settings
    for (layer, operand), pair in pairs.items():
        assert pair["power_of_two"] and pair["saturate"] == 1, (layer, operand)
        fmt = settings.weight_format if operand == "weight" else settings.input_format
        assert pair["zero_type"] == FP8_TYPES[fmt]
        assert any(layer_of(node) == layer and "/" not in node for node in pair["feeds"]), (layer, pair["feeds"])
        if operand == "weight":  # weight scales come from the weights themselves
            assert pair["exponent"] == fp8_scales.choose_scale(model.params[f"{layer}.weight"], fmt, settings.scales)
        else:  # input scales from the calibration the accuracy test runs
            assert pair["exponent"] == prepared.plan.input_scales[layer][operand]
    emulator = prepared.ops()
    model(model.sample_inputs(1), emulator)  # and the emulator's own record of what it quantized, with which scales
    assert {(layer, op): s for layer, ops in emulator.scales_used.items() for op, s in ops.items()} == \
        {key: pair["exponent"] for key, pair in pairs.items()}


def test_a_fixed_scale_policy_writes_its_scales_and_poprt_params():
    """The seed benchmark's resnet50 setting: F143 with scales -3 for inputs and weights."""
    model = load_model("resnet50", **SMALL["resnet50"])
    skip = IPU.fp8_settings["resnet50"].skip
    settings = Fp8Settings(model="resnet50", scales="fixed", input_scale=-3, weight_scale=-3, skip=skip)
    prepared = IPU.prepare(model, "fp8")
    plan = IPU.fp8_plan(model, "fp8", settings=settings)
    recording, poprt_settings = record_precision(model, prepared.policy, plan)
    assert {pair["exponent"] for pair in qdq_pairs(recording.model.graph).values()} == {-3}
    assert poprt_settings["converter"] == {"precision": "fp8", "fp8_skip_op_names": ",".join(skip),
                                           "fp8_params": "F143,F143,-3,-3"}


# -- what the graph computes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", IPU.precisions)
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_onnxruntime_computes_what_the_emulator_computes(name, precision, built):
    model, prepared, recording, _, data = built(name, precision)
    twin = FloatPartialsOps(prepared.policy, fp8_plan=prepared.plan)
    # the recording is the model on the emulator (FP32 partials), bit for bit
    assert all(np.array_equal(value, model(recording.inputs, twin)[key]) for key, value in recording.outputs.items())
    inputs = model.sample_inputs(3, seed=EVAL_SEED)
    graph_outputs = run(session(data), inputs, batch_size=3)
    twin_outputs = model(inputs, twin)
    fp32 = model(inputs)
    for key, expected in twin_outputs.items():
        off = relative_error(graph_outputs[key], expected)
        if name in EXACT:
            np.testing.assert_array_equal(graph_outputs[key], expected, err_msg=f"{name} {precision} {key}")
        # closer to the emulator than the FP32 model is (measured on these configs: 0 to 0.44 of that distance)
        assert off < relative_error(expected, fp32[key]), (name, precision, key, off)
        # and its error from FP32 is the emulator's, as export checks it
        ratio = relative_error(graph_outputs[key], fp32[key]) / relative_error(expected, fp32[key])
        assert abs(np.log2(ratio)) <= VERIFY_TOLERANCE, (name, precision, key, ratio)
    if prepared.policy.uses_fp8:  # and closer to the emulator as the main job runs it (half partials) than FP32 is
        emulated = model(inputs, prepared.ops())
        for key, expected in emulated.items():
            assert relative_error(graph_outputs[key], expected) < relative_error(fp32[key], expected), (name, key)


@pytest.mark.parametrize("name", ["bert-base", "conformer"])
def test_fp16_weights_and_values_between_ops_are_float16(name, built):
    model, _, recording, _, data = built(name, "fp16")
    graph = recording.model.graph
    stored = {t.name: t.data_type for t in graph.initializer}
    params = [p for p in model.params if p in stored]
    assert params and all(stored[p] == onnx.TensorProto.FLOAT16 for p in params)
    assert not [n for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    # every op's result is cast to float16: float32 lives only inside an op, between the casts of its operands
    inferred = onnx.shape_inference.infer_shapes(onnx.load_from_string(data), strict_mode=True)
    kinds = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    results = [n.output[0] for n in graph.node if n.op_type == "Cast" and n.name.endswith("/Cast")
               and n.attribute[0].i == onnx.TensorProto.FLOAT16]
    layers = {n.name for n in graph.node if "/" not in n.name and n.op_type not in ("Cast", "Identity", "Gather")}
    assert len(results) >= len({layer_of(n) for n in layers}) and all(kinds[v] == onnx.TensorProto.FLOAT16
                                                                       for v in results)


def test_quantize_dequantize_is_the_emulators_quantization_bit_for_bit():
    """A QuantizeLinear/DequantizeLinear pair on onnxruntime against ``conformance.numerics.quantize`` on every FP8
    code's neighbourhood: ties, subnormals, saturation, at the scales the calibration picks from."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(20000) * 2.0 ** rng.integers(-20, 20, 20000),
                        [0.0, -0.0, 1.0, 248.0, 240.0, -250.0, 1e30, -1e30, 2.0 ** -12, 1.0625]]).astype(np.float32)
    for fmt, fp8_type in FP8_TYPES.items():
        for scale in (-10, -3, 0, 4):
            s = helper.make_tensor("s", onnx.TensorProto.FLOAT, [], [2.0 ** scale])
            z = helper.make_tensor("z", fp8_type, [], [0])
            nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], saturate=1),
                     helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
            graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", 1, [None])],
                                      [helper.make_tensor_value_info("y", 1, [None])], initializer=[s, z])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
            got = session(model).run(None, {"x": x})[0]
            np.testing.assert_array_equal(got, quantize(x, fmt, scale=scale), err_msg=f"{fmt} scale {scale}")


# -- PopRT's settings ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", IPU.precisions)
@pytest.mark.parametrize("name", ["bert-base", "resnet50"])
def test_poprt_settings_hold_the_policy(name, precision, built):
    _, prepared, recording, settings, _ = built(name, precision)
    policy = prepared.policy
    assert settings["precision"] == precision and settings["compiler"] == {"partials_type": policy.partials}
    assert settings["converter"]["precision"] == {"none": "fp16", "weights": "fp8_weight", "all": "fp8"}[policy.fp8]
    if not policy.uses_fp8:
        assert set(settings["converter"]) == {"precision"} and "fp8" not in settings
        return
    skip = IPU.fp8_settings[name].skip
    assert skip and settings["converter"]["fp8_skip_op_names"].split(",") == list(skip) == settings["fp8"]["skip"]
    assert "fp8_params" not in settings["converter"]  # per-tensor (amax) scales: listed, not one global pair
    listed = {(layer, op): s for layer, ops in settings["fp8"]["scales"].items() for op, s in ops.items()}
    assert listed == {key: pair["exponent"] for key, pair in qdq_pairs(recording.model.graph).items()}
    assert json.loads(poprt.dumps(settings)) == settings


def test_export_command_writes_the_graph_and_poprt_settings(tmp_path, capsys):
    model = load_model("bert-base", **{**SMALL["bert-base"], "seq_len": 64})
    write_bert_checkpoint(tmp_path / "ck", model)
    out = tmp_path / "bert.onnx"
    assert main(["export", "bert", "--checkpoint", str(tmp_path / "ck"), "--precision", "fp8", "--out", str(out)]) == 0
    sidecar = tmp_path / "bert.poprt.json"
    assert f"wrote {out}, {sidecar}: bert-base fp8" in capsys.readouterr().out
    check(out)
    stored = onnx.load(str(out))
    assert {p.key: p.value for p in stored.metadata_props}["precision"] == "fp8"
    settings = json.loads(sidecar.read_text())
    assert settings["converter"]["precision"] == "fp8"
    assert settings["converter"]["fp8_skip_op_names"] == "bert.embeddings.word_embeddings"
    listed = {(layer, op) for layer, ops in settings["fp8"]["scales"].items() for op in ops}
    assert listed and listed == set(qdq_pairs(stored.graph))
