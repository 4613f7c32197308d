"""The ``onnxruntime`` hardware: onnxruntime's CPU provider running the suite's graph of each precision.

The oracle for what the precision graphs compute is the ipu emulator with FP32 partials (what a graph says: ONNX has
no accumulator type), on the small configs where onnxruntime gives its bits; for fp32, the numpy FP32 model. The main
job runs end to end on the backend, and a graph with wrong FP8 scales fails a gate.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from conformance.accuracy.evaluation import compute_metrics, evaluate
from conformance.distributed import fingerprint
from conformance.graphs import FloatPartialsOps, record, save
from conformance.graphs.runtime import relative_error
from conformance.hardware import backend_class, get_backend, hardware_names
from conformance.engines.onnxruntime.backend import OnnxruntimeBackend, OrtPrepared
from conformance.targets.accuracy import applicable, gates_for
from models import load_model
from models.seeds import EVAL_SEED
from tests.test_graph_export import SMALL

REPO = Path(__file__).resolve().parents[1]
NAME = "onnxruntime"
# Models whose small configs hold no transcendental function a library may round differently: there onnxruntime gives
# the emulator's bits at every precision (conformance/graphs/precision.py).
EXACT = ("resnet50", "widedeep")
# How far onnxruntime's FP32 outputs may be from the numpy model's (relative L2): what the fp32 tables' 100 dB SNR
# floor allows.
FP32_RELATIVE = 1e-5


@pytest.fixture(scope="module")
def backend() -> OnnxruntimeBackend:
    return get_backend(NAME)


@pytest.fixture(scope="module")
def small():
    """The small config of a model, built once per module."""
    models = {}

    def get(name):
        if name not in models:
            models[name] = load_model(name, **SMALL[name])
        return models[name]
    return get


def test_the_backend_is_a_hardware_choice_that_runs_whole_graphs(backend):
    assert NAME in hardware_names() and backend_class(NAME) is OnnxruntimeBackend
    assert backend.precisions == ("fp32", "fp16", "fp8") and backend.timing == "measured"
    assert OrtPrepared.per_op is False and backend.op_checks("widedeep", "fp8", {}) is None
    assert backend.data_types("fp8") == get_backend("ipu").data_types("fp8")
    assert (backend.targets_dir / "accuracy.toml").is_file() and (backend.targets_dir / "performance.toml").is_file()
    # no probe gates: the engine's ops cannot be probed one by one
    gates = [g for p in backend.precisions for g in gates_for(NAME, "widedeep", p)]
    assert gates and not {"rounding_bias", "op_mismatches"} & {g.metric for g in gates}


@pytest.mark.parametrize("name", EXACT)
def test_fp32_graph_reproduces_the_numpy_model(name, backend, small):
    model = small(name)
    prepared = backend.prepare(model, "fp32")
    inputs = model.sample_inputs(3, seed=EVAL_SEED)
    outputs, expected = prepared.forward(inputs, prepared.ops()), model(inputs)
    assert set(outputs) == set(model.output_names)
    for key, value in expected.items():
        assert outputs[key].dtype == np.float32
        assert relative_error(outputs[key], value) <= FP32_RELATIVE, key
    assert backend.prepare(model, "fp32") is prepared  # exported once per model and precision


@pytest.mark.parametrize("precision", ["fp16", "fp8"])
@pytest.mark.parametrize("name", EXACT)
def test_precision_graphs_give_the_emulators_bits(name, precision, backend, small):
    model = small(name)
    prepared = backend.prepare(model, precision)
    ipu = backend.ipu().prepare(model, precision)  # the plan the graph was written with (cached: the same scales)
    inputs = model.sample_inputs(3, seed=EVAL_SEED)
    outputs = prepared.forward(inputs, prepared.ops())
    twin = model(inputs, FloatPartialsOps(ipu.policy, fp8_plan=ipu.plan))
    emulated, fp32 = model(inputs, ipu.ops()), model(inputs)
    for key, expected in twin.items():
        np.testing.assert_array_equal(outputs[key], expected, err_msg=f"{name} {precision} {key}")
        # the emulator as the main job runs it (half partials at fp8): the graph is closer to it than FP32 is
        assert relative_error(outputs[key], emulated[key]) < relative_error(fp32[key], emulated[key])
    details = prepared.details(prepared.ops())
    assert details["graph"]["opset"] >= 19 and len(details["graph"]["sha256"]) == 64
    if precision == "fp8":
        assert details["fp8_scales"] and details["graph"]["quantize_linear"] == sum(map(len, details["fp8_scales"].values()))
        assert details["fp8_calibration"]["skip"] == list(ipu.plan.settings.skip)
    else:
        assert "fp8_scales" not in details and details["graph"]["quantize_linear"] == 0


def test_a_pickled_prepared_gives_the_same_outputs_and_fingerprint(small):
    model = small("widedeep")
    prepared = get_backend(NAME).prepare(model, "fp8")
    inputs = model.sample_inputs(64, seed=EVAL_SEED)
    before = prepared.forward(inputs, prepared.ops())
    data = pickle.dumps((model, prepared))  # as the engine sends a job's state to a worker
    assert len(data) < prepared.graph.nbytes + 200_000  # the graph and the model's weights, no session
    model_copy, copy = pickle.loads(data)
    after = copy.forward(inputs, copy.ops())
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert fingerprint((model_copy, copy)) == fingerprint((model, prepared))
    # stable: a backend that prepares the same model again writes the same graph
    again = get_backend(NAME).prepare(model, "fp8")
    assert again is not prepared and fingerprint((model, again)) == fingerprint((model, prepared))
    assert fingerprint(get_backend(NAME).prepare(model, "fp16")) != fingerprint(prepared)


def _with_scales(data: bytes, factor: float) -> bytes:
    """The graph with every FP8 scale multiplied by ``factor``."""
    proto = onnx.load_from_string(data)
    scales = {n.input[1] for n in proto.graph.node if n.op_type == "QuantizeLinear"}
    for tensor in proto.graph.initializer:
        if tensor.name in scales:
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) * np.float32(factor), tensor.name))
    return proto.SerializeToString()


def test_a_graph_with_wrong_fp8_scales_fails_a_gate(backend, small):
    """FP8 scales six binades too small (operands saturate at the format's largest value) fail the SNR floor; the
    correct graph passes every gate on the same samples."""
    model = small("widedeep")
    prepared = backend.prepare(model, "fp8")
    inputs = model.sample_inputs(1024, seed=EVAL_SEED)
    reference = model(inputs)
    gates = applicable(gates_for(NAME, "widedeep", "fp8"), labelled=False)
    fp32 = compute_metrics("widedeep", reference, reference, inputs)

    def verdicts(graph: OrtPrepared):
        outputs = graph.forward(inputs, graph.ops())
        return {e.gate.check: e.passed for e in evaluate(gates, compute_metrics("widedeep", reference, outputs, inputs),
                                                          {"fp32": fp32, "fp16": fp32}) if e.gate.gating}

    assert all(verdicts(prepared).values())
    faulty = OrtPrepared(model, "fp8", _with_scales(prepared.graph.tobytes(), 2.0 ** -6), prepared.facts)
    assert not verdicts(faulty)["snr_db"]


def _pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:randomly"], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def _main_job(tmp_path, models: list[str], precisions: list[str], *extra: str) -> dict:
    """A smoke main job on the backend for ``models`` at ``precisions``, with an exported graph judged with --onnx
    too: its results.json, after asserting that the job passed and that each test of the matrix ran and passed."""
    graph = tmp_path / "small-resnet.onnx"
    save(record(load_model("resnet50", **SMALL["resnet50"])), graph)
    report = tmp_path / "report"
    result = _pytest("conformance/", "--hardware", NAME, *(a for m in models for a in ("--model", m)), "--onnx",
                     f"net={graph}", "--precision", ",".join(precisions), "--profile", "smoke", "--report-dir",
                     str(report), *extra)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    results = json.loads((report / "results.json").read_text())
    assert results["hardware"]["name"] == NAME and results["verdict"] == "PASS"
    outcomes = {t["id"].split("::")[-1]: t["outcome"] for t in results["tests"]}
    for precision in precisions:
        expected = [f"test_accuracy[net-{precision}]"]
        for model in models:
            expected += [f"test_accuracy[{model}-{precision}]", f"test_performance[{model}-{precision}-Offline]",
                         f"test_performance[{model}-{precision}-SingleStream]"]
            expected += [] if extra else [f"test_audit[{model}-{precision}-Offline-TEST01]"]
        for test in expected:
            assert outcomes[test] == "passed", (test, outcomes)
    accuracy = [r for r in results["records"] if r["kind"] == "accuracy"]
    assert {(r["model"], r["precision"]) for r in accuracy} == {(m, p) for m in (*models, "net") for p in precisions}
    for r in accuracy:
        ran = r["details"]["graph"]
        assert len(ran["sha256"]) == 64 and ran["provider"] == "CPUExecutionProvider", r
        assert ("fp8_scales" in r["details"]) == (r["precision"] == "fp8"), r
        assert "rounding_bias" not in r["check"] and "op_mismatches" not in r["check"]
    if "fp32" in precisions:
        assert {r["details"]["graph"]["source"] for r in accuracy if r["model"] == "net" and r["precision"] == "fp32"} \
            == {"the imported graph as given"}
    return results


def test_the_main_job_passes_on_onnxruntime_with_an_imported_graph(tmp_path):
    """widedeep at fp32 and fp8 (whose reported gates run fp16 too), and an exported graph: PASS verdicts, records that
    say which graph ran. The audits compare two measured runs' speed on the host's clock: they run in the slow test."""
    _main_job(tmp_path, ["widedeep"], ["fp32", "fp8"], "-k", "not test_audit")


@pytest.mark.slow
def test_the_main_job_passes_at_every_precision(tmp_path):
    results = _main_job(tmp_path, ["widedeep", "resnet50"], ["fp32", "fp16", "fp8"])
    outcomes = {t["id"].split("::")[-1]: t["outcome"] for t in results["tests"]}
    assert all(outcomes[f"test_audit[resnet50-{p}-{s}-TEST04]"] == "passed" for p in ("fp32", "fp16", "fp8")
               for s in ("Offline", "SingleStream"))
