"""A precision the chosen chip cannot run (FP8 on gc200 and bow) is skipped with its reason in every test of it, and a
test that raises leaves a failed record, so that the verdict matrix shows the case failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.hardware.ipu.backend import IpuBackend
from conformance.hardware.ipu.timing.chips import load_devices
from conformance.report import render, verify

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("chip", ["gc200", "bow"])
def test_chips_without_fp8_refuse_fp8_and_run_the_rest(chip):
    backend = IpuBackend(chip)
    assert "fp8" not in load_devices()[chip].amp_tflops
    reason = backend.chip_support("fp8")
    assert reason and f"the {chip} chip has no fp8 matrix units" in reason and f"--device {chip}" in reason
    for support in (backend.accuracy_support("resnet50", "fp8"),
                    backend.scenario_support("resnet50", "fp8", "Offline"),
                    backend.audit_support("resnet50", "fp8", "TEST01")):
        assert support == reason
    for precision in ("fp16", "fp16-half-partials", "fp8-weights"):  # FP8 weights run on the FP16 units
        assert backend.chip_support(precision) is None
    assert IpuBackend("c600").chip_support("fp8") is None


def _suite(tmp_path: Path, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "pytest", "--hardware", "ipu", "--model", "widedeep", "--profile",
                           "smoke", "--report-dir", str(report), "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
                           *args], cwd=REPO, capture_output=True, text=True, env=env)
    return done, json.loads((report / "results.json").read_text())


def test_fp8_performance_and_audits_on_a_chip_without_fp8_are_skipped_not_crashed(tmp_path):
    done, results = _suite(tmp_path, "conformance/test_performance.py", "conformance/test_audit.py", "--device",
                           "gc200", "-k", "fp8 and not weights and not TEST04")
    text = done.stdout + done.stderr
    assert "Traceback" not in text and "ValueError" not in text, text[-3000:]
    assert done.returncode == 5, text[-3000:]  # everything selected was skipped: nothing judged
    skipped = [t for t in results["tests"] if t["outcome"] == "skipped"]
    assert len(skipped) == len(results["tests"]) == 6  # four scenarios, TEST01 of two
    assert all("the gc200 chip has no fp8 matrix units" in t["message"] for t in skipped)


CRASH_PLUGIN = '''
from conformance.hardware.ipu.backend import IpuBackend


def pytest_configure(config):
    def lost(self, model, precision, workload):
        raise RuntimeError("device lost mid-run")

    IpuBackend.loadgen_device = lost
'''


def test_a_test_that_raises_leaves_a_failed_record_the_matrix_shows(tmp_path):
    (tmp_path / "crash_plugin.py").write_text(CRASH_PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])}
    done, results = _suite(tmp_path, "conformance/test_performance.py", "-p", "crash_plugin", "-k",
                           "widedeep-fp16-Offline", env=env)
    assert done.returncode == 1, (done.stdout + done.stderr)[-3000:]
    [record] = results["records"]
    assert (record["kind"], record["precision"], record["scenario"], record["check"]) == (
        "performance", "fp16", "Offline", "error")
    assert not record["passed"] and record["outcome"] == "failed"
    assert "RuntimeError: device lost mid-run" in record["details"]["error"]
    assert verify.problems(results) == []
    headers, rows = render.matrix(results)
    assert rows[0][headers.index("Offline")].startswith("FAIL")
