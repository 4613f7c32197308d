"""Failure and PASS* text says the check's own figure: a Server run INVALID at its target QPS prints its p99 latency
(as LoadGen's log gives it), in ms; a gate that passes but is not established prints the units that would establish
it and the command that runs them, which does."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

from conformance.accuracy.evaluation import compute_metrics, evaluate
from conformance.targets.accuracy import parse_targets

REPO = Path(__file__).resolve().parents[1]

SLOW_PLUGIN = '''
from conformance.hardware.ipu.simulated import SimulatedIpu

_service_time = SimulatedIpu.service_time


def pytest_configure(config):
    def slow(self, indices):  # the device 40 times slower than its model: the target QPS overloads it
        occupancy, latency = _service_time(self, indices)
        return occupancy * 40, latency * 40

    SimulatedIpu.service_time = slow
'''


def _pytest(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", *args],
                          cwd=REPO, capture_output=True, text=True, env=env)


def test_a_server_run_invalid_at_its_target_prints_its_p99_latency(tmp_path):
    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])}
    report = tmp_path / "report"
    done = _pytest("conformance/test_performance.py", "--hardware", "ipu", "--model", "widedeep", "--profile", "smoke",
                   "--precision", "fp16", "-k", "Server", "-p", "slow_plugin", "--report-dir", str(report), env=env)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    results = json.loads((report / "results.json").read_text())
    [record] = [r for r in results["records"] if r["check"] == "p99_latency_ms_at_target_qps"]
    summary = (report / record["details"]["log_dir"] / "mlperf_log_summary.txt").read_text()
    assert "Result is : INVALID" in summary
    p99_ms = int(re.search(r"^99\.00 percentile latency \(ns\)\s*:\s*(\d+)", summary, re.M).group(1)) / 1e6
    assert record["value"] == p99_ms
    [test] = results["tests"]
    assert "LoadGen result INVALID" in test["message"]
    assert f"p99_latency_ms_at_target_qps {p99_ms:.6g} ms" in test["message"], test["message"]
    completed = record["details"]["completed_samples_per_second"]
    assert f"completed {completed:.6g} samples/s" in test["message"]
    assert f"{completed:.6g} ms" not in test["message"] and f"{completed} ms" not in test["message"]


def test_a_tensor_floor_failure_prints_its_unit():
    ref = {"logits": np.random.default_rng(0).normal(size=(8, 10)).astype(np.float32)}
    hw = {"logits": ref["logits"] + np.random.default_rng(1).normal(0, 0.3, size=(8, 10)).astype(np.float32)}
    [e] = evaluate(parse_targets("[ipu.resnet50.fp16]\nsnr_db = { min = 30.0 }\n", "t.toml"),
                   compute_metrics("resnet50", ref, hw, {}), {})
    assert e.verdict == "FAIL" and re.search(r"snr_db: [0-9.]+ dB >= 30 dB -> FAILED", e.describe()), e.describe()


def test_pass_star_prints_the_units_and_a_command_that_establishes_it(tmp_path):
    done = _pytest("conformance/test_accuracy.py", "--hardware", "ipu", "--model", "widedeep", "--precision", "fp16",
                   "--profile", "smoke", "--report-dir", str(tmp_path / "first"))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "(not established: 1024 units, about " in done.stdout
    [line] = [x for x in done.stdout.splitlines() if "establishing takes about" in x]
    assert line.strip().startswith("widedeep fp16 (auc@0.99xfp32): 1024 units;")
    command = shlex.split(line.split(": ", 2)[2])
    assert command[:2] == ["pytest", "conformance/test_accuracy.py"] and command[-2:] == ["--profile", "release"]
    compliance = (tmp_path / "first" / "compliance.md").read_text()
    assert line.strip().split(": pytest")[0] in compliance
    again = _pytest(*command[1:], "--report-dir", str(tmp_path / "again"))
    assert again.returncode == 0, again.stdout[-3000:]
    results = json.loads((tmp_path / "again" / "results.json").read_text())
    assert [r["established"] for r in results["records"] if r["check"] == "auc@0.99xfp32"] == [True]
