"""``--onnx NAME=FILE.onnx``: graphs nobody here wrote (a ViT and a DistilBERT from transformers, random weights with a
fixed seed, exported by torch inside the test) judged end to end on the ipu hardware, and every bad graph or input
file refused as a usage error before any test runs."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conformance.graphs.case import GraphCase, GraphCaseError
from conformance.graphs.interpreter import Interpreter, InterpreterError
from conformance.graphs.runtime import max_relative_error, run, session
from conformance.hardware import get_backend
from models.ops import Ops

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[1]
OPSET = 17


def _export(module, example, path: Path, input_name: str) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(module, (example,), str(path), input_names=[input_name], output_names=["logits"],
                          dynamic_axes={input_name: {0: "batch"}, "logits": {0: "batch"}}, opset_version=OPSET,
                          dynamo=False)  # the dynamo exporter needs onnxscript, which is not installed
    return path


@pytest.fixture(scope="module")
def graphs(tmp_path_factory) -> dict[str, Path]:
    """A tiny ViT and a tiny DistilBERT, seeded random weights, exported by torch.onnx (opset 17)."""
    folder = tmp_path_factory.mktemp("graphs")
    torch.manual_seed(0)
    vit = transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, num_labels=10)).eval()
    distilbert = transformers.DistilBertForSequenceClassification(transformers.DistilBertConfig(
        vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64,
        num_labels=3)).eval()
    return {"vit": _export(vit, torch.randn(1, 3, 32, 32), folder / "vit.onnx", "pixel_values"),
            "distilbert": _export(distilbert, torch.randint(0, 100, (1, 16)), folder / "distilbert.onnx", "input_ids")}


def test_torch_graphs_run_through_the_ops_as_onnxruntime_runs_them(graphs):
    for name, path in graphs.items():
        case = GraphCase(name, path)
        inputs = case.inputs(3)
        got = case.model.interpreter.run(inputs, Ops())
        expected = run(session(path), inputs)
        assert max_relative_error(got, expected) <= 1e-5, name


def test_torch_gelu_sub_graph_is_one_gelu_op(graphs):
    """Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5) is one exact GELU of the ops, once per layer."""
    interpreter = Interpreter(graphs["vit"])
    erf_nodes = [n for n in interpreter.model.graph.node if n.op_type == "Erf"]
    calls: list[str] = []

    class Counting(Ops):
        def gelu(self, x, *, approximate="none", name):
            calls.append(approximate)
            return super().gelu(x, approximate=approximate, name=name)

    interpreter.run({"pixel_values": np.zeros((1, 3, 32, 32), np.float32)}, Counting())
    assert calls == ["none"] * len(erf_nodes) and erf_nodes


def test_integer_ids_are_drawn_over_the_rows_of_their_table(graphs):
    case = GraphCase("distilbert", graphs["distilbert"])
    ids = case.inputs(64)["input_ids"]
    assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() == 99  # the 100 rows of the word embeddings
    assert "uniform integers in [0, 100)" in case.judged()["dataset"]


def test_vit_and_distilbert_judged_end_to_end_at_fp16_and_fp8(graphs, pytester, tmp_path):
    report = tmp_path / "report"
    result = pytester.runpytest_subprocess(str(REPO / "conformance"), "-q", "--hardware", "ipu", "--profile", "smoke",
                                "--precision", "fp16,fp8", "--onnx", f"vit={graphs['vit']}",
                                "--onnx", f"distilbert={graphs['distilbert']}", "--report-dir", str(report))
    assert result.ret == 0, result.stdout.str()
    results = json.loads((report / "results.json").read_text())
    tests = {r["test_id"].split("[")[1].rstrip("]") for r in results["records"] if r["kind"] == "accuracy"}
    assert tests == {"vit-fp16", "vit-fp8", "distilbert-fp16", "distilbert-fp8"}
    checks = {(r["model"], r["precision"], r["check"]): r for r in results["records"]}
    for name, path in graphs.items():
        for precision, floor in (("fp16", 30.0), ("fp8", 10.0)):
            snr = checks[(name, precision, "snr_db")]
            assert snr["passed"] and snr["target"] == floor and snr["value"] >= floor
            assert all((name, precision, c) in checks for c in ("cosine", "rounding_bias", "op_mismatches"))
        # fp8 rounds coarser than fp16: the figures are the hardware's, not a copy of the reference
        assert checks[(name, "fp8", "snr_db")]["value"] < checks[(name, "fp16", "snr_db")]["value"] < 120
        judged = checks[(name, "fp16", "snr_db")]["details"]["judged"]
        assert judged["checkpoint"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert judged["checkpoint"]["opset"] == OPSET and judged["checkpoint"]["format"] == "onnx"
        assert judged["dataset"].startswith("drawn from the graph's input signature")
        assert judged["fp32_reference"].startswith("onnxruntime")
    compliance = (report / "compliance.md").read_text()
    assert str(graphs["vit"].resolve()) in compliance


def test_cpu_fp32_ops_match_onnxruntime_on_the_graphs(graphs, pytester, tmp_path):
    """The cpu hardware's FP32 ops against onnxruntime: two engines agree to the order of FP32 sums."""
    report = tmp_path / "report"
    result = pytester.runpytest_subprocess(str(REPO / "conformance"), "-q", "--hardware", "cpu", "--profile", "smoke",
                                           "--onnx", f"vit={graphs['vit']}", "--onnx",
                                           f"distilbert={graphs['distilbert']}", "--report-dir", str(report))
    assert result.ret == 0, result.stdout.str()
    records = json.loads((report / "results.json").read_text())["records"]
    assert {(r["model"], r["precision"], r["check"]) for r in records} == {
        ("vit", "fp32", "snr_db"), ("distilbert", "fp32", "snr_db")}
    assert all(r["passed"] and r["value"] >= r["target"] == 80.0 for r in records)


def test_npz_inputs_and_calibration_are_used(graphs, tmp_path):
    ids = np.random.default_rng(3).integers(0, 100, (5, 16))
    np.savez(tmp_path / "in.npz", input_ids=ids)
    np.savez(tmp_path / "cal.npz", input_ids=ids[::-1].copy())
    case = GraphCase("distilbert", graphs["distilbert"], tmp_path / "in.npz", tmp_path / "cal.npz")
    np.testing.assert_array_equal(case.inputs(case.count())["input_ids"], ids)
    np.testing.assert_array_equal(case.calibration_inputs()["input_ids"], ids[::-1])
    assert case.judged()["dataset"]["rows"] == 5
    prepared = get_backend("ipu").prepare(case.model, "fp8", case.calibration_inputs(), batch_size=2)
    assert prepared.plan.calibration["samples"] == 5 and prepared.plan.calibration["inputs"] == "given"


# -- refusals: each a usage error (exit 4) before any test -----------------------------------------------------------
def _tiny(op="Relu", domain="", opset=OPSET, **kwargs):
    node = helper.make_node(op, ["x"], ["y"], name="the_node", domain=domain)
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])])
    return helper.make_model(graph, opset_imports=opsets, ir_version=9, **kwargs)


def _write(tmp_path: Path, case: str, graphs) -> list[str]:
    """The options of bad case ``case`` (files written under ``tmp_path``)."""
    path = tmp_path / "g.onnx"
    if case == "not-onnx":
        path.write_bytes(b"\x00\x01 not a protobuf \xff" * 8)
    elif case == "checker":
        model = _tiny()
        model.graph.node[0].input[0] = "undefined"
        path.write_bytes(model.SerializeToString())
    elif case == "old-opset":
        path.write_bytes(_tiny(opset=13).SerializeToString())
    elif case == "unsupported-op":
        path.write_bytes(_tiny("Cos").SerializeToString())
    elif case == "lone-erf":
        path.write_bytes(_tiny("Erf").SerializeToString())
    elif case == "custom-domain":
        path.write_bytes(_tiny("MyOp", domain="com.example").SerializeToString())
    elif case == "missing-external-data":
        node = helper.make_node("MatMul", ["x", "w"], ["y"], name="layer")
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
                                  [onnx.numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=9)
        onnx.save_model(model, path, save_as_external_data=True, location="g.data", size_threshold=0)
        (tmp_path / "g.data").unlink()
    elif case == "fixed-batch":
        model = _tiny()
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
        path.write_bytes(model.SerializeToString())
    elif case == "unresolved-shape":
        model = _tiny()
        model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "width"
        path.write_bytes(model.SerializeToString())
    elif case in ("npz-names", "npz-shapes", "npz-ids"):
        ids = np.random.default_rng(0).integers(0, 100, (4, 16))
        arrays = {"npz-names": {"ids": ids}, "npz-shapes": {"input_ids": ids[:, :15]},
                  "npz-ids": {"input_ids": ids + 100}}[case]
        np.savez(tmp_path / "in.npz", **arrays)
        return ["--onnx", f"db={graphs['distilbert']}", "--dataset", f"db={tmp_path / 'in.npz'}"]
    elif case == "model-name":
        return ["--onnx", f"bert-base={graphs['distilbert']}"]
    elif case == "no-gates":
        return ["--onnx", f"db={graphs['distilbert']}", "--hardware", "null"]
    return ["--onnx", f"mine={path}"]


BAD = {
    "not-onnx": ["g.onnx", "is not an ONNX model"],
    "checker": ["g.onnx", "fails onnx.checker"],
    "old-opset": ["opset 13", f"opset {OPSET} or later"],
    "unsupported-op": ["node 'the_node' (Cos)", "operator Cos is not supported", "LayerNormalization"],
    "lone-erf": ["node 'the_node' (Erf)", "only inside the exact GELU"],
    "custom-domain": ["custom domain 'com.example'"],
    "missing-external-data": ["g.data", "is missing"],
    "fixed-batch": ["input 'x'", "dynamic batch axis"],
    "unresolved-shape": ["input 'x'", "'width'", "cannot be resolved"],
    "npz-names": ["--dataset db=", "in.npz", "['ids']", "['input_ids']"],
    "npz-shapes": ["--dataset db=", "'input_ids'", "(4, 15)", "(batch, 16)"],
    "npz-ids": ["--dataset db=", "outside [0, 100)"],
    "model-name": ["'bert-base' names a model of the suite"],
    "no-gates": ["hardware 'null' has no [null.onnx.<precision>] gates"],
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_graph_or_inputs_is_a_usage_error_before_any_test(case, graphs, tmp_path, pytester):
    args = _write(tmp_path, case, graphs)
    hardware = [] if "--hardware" in args else ["--hardware", "ipu"]
    result = pytester.runpytest(str(REPO / "conformance"), "-q", "--profile", "smoke", *hardware, *args,
                                "--report-dir", str(tmp_path / "report"))
    message = result.stderr.str() + result.stdout.str()
    assert result.ret == 4, message
    missing = [text for text in BAD[case] if text not in message]
    assert not missing, f"{case}: the message lacks {missing}:\n{message}"
    assert "Traceback" not in message and not (tmp_path / "report").exists()


def test_graph_case_names_are_checked(graphs):
    with pytest.raises(GraphCaseError, match="not a case name"):
        GraphCase("Bad Name", graphs["vit"])


def test_a_lone_erf_is_refused_when_the_graph_is_read():
    with pytest.raises(InterpreterError, match="only inside the exact GELU"):
        Interpreter(_tiny("Erf").SerializeToString())


@pytest.mark.parametrize("fault, precision", [("f16-truncation", "fp16"), ("fp8-values-6pct-high", "fp8"),
                                              ("fp8-scale-off-by-one", "fp8")])
def test_the_graph_gates_catch_a_fault_of_the_emulator(graphs, fault, precision):
    """The imported graph's gates are not a formality: a truncating FP16 rounding, FP8 values 6% high or FP8 scales
    one binade off, injected into the emulator, fail them, where the correct emulator passes."""
    from conformance.accuracy.diagnosis import local_errors
    from conformance.accuracy.evaluation import compute_metrics, evaluate, measure_probes
    from conformance.hardware.ipu.faults import FAULTS
    from conformance.targets.accuracy import GRAPH_CASE, gates_for
    from models import run_batched

    case = GraphCase("vit", graphs["vit"])
    inputs = case.inputs(4)
    ref, _ = case.reference(inputs, 4)
    gates = gates_for("ipu", GRAPH_CASE, precision)
    ipu = get_backend("ipu")

    def failed_gates() -> list[str]:
        prepared = ipu.prepare(case.model, precision, batch_size=4)
        ops = prepared.ops()
        current = compute_metrics(GRAPH_CASE, ref, run_batched(case.model, inputs, 4, ops), inputs)
        measure_probes(gates, current, local_errors(case.model, inputs, prepared.ops(), Ops(), [0, 1]), 2,
                       lambda: ipu.op_checks(GRAPH_CASE, precision, prepared.details(ops)))
        fp32 = {"fp32": compute_metrics(GRAPH_CASE, ref, ref, inputs)}
        return [e.gate.metric for e in evaluate(gates, current, fp32) if e.gate.gating and not e.passed]

    assert failed_gates() == []
    with FAULTS[fault].inject() as injection:
        failed = failed_gates()
    assert injection.changed and failed, f"{fault}: no gate failed"
