"""The real suite under pytest-xdist: the accuracy and performance tests of two models on the ipu at the smoke profile,
run serially and with ``-n 2``, record the same figures (accuracy records identical; performance records identical
too, since the simulated device runs on virtual time), and the parallel run's report is written by the controller."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# conformer's fp8 accuracy test (13 s) is left out to keep the two runs within about a minute on two cores
SELECTION = ["conformance/", "--hardware", "ipu", "--profile", "smoke", "--model", "widedeep,conformer",
             "-k", "(test_accuracy or test_performance) and not conformer-fp8]", "-p", "no:randomly",
             "-p", "no:cacheprovider", "-q"]
# accuracy details that time the host, not the figures (the engine's: how the batches ran, their compute and wall time)
WALL_CLOCK = ("run_s", "calibration_s", "op_checks_s", "engine")
PATHS = ("log_dir",)  # performance details that name the run's own report directory


def without(record: dict, keys) -> dict:
    return {**record, "details": {k: v for k, v in record["details"].items() if k not in keys}}


def run_suite(report_dir: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *SELECTION, "--report-dir", str(report_dir), *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


@pytest.mark.slow  # a minute on the 2-core CI host; tests/test_report_plugin.py's xdist cases run in CI
def test_parallel_run_of_the_real_suite_records_what_a_serial_run_does(tmp_path):
    pytest.importorskip("xdist")
    serial = run_suite(tmp_path / "serial")
    assert serial.returncode == 0, serial.stdout[-3000:] + serial.stderr[-3000:]
    # one emulator thread per worker, as docs/reports.md advises under -n
    parallel = run_suite(tmp_path / "parallel", "-p", "xdist", "-n", "2", env={"CONFORMANCE_THREADS": "1"})
    assert parallel.returncode == 0, parallel.stdout[-3000:] + parallel.stderr[-3000:]
    assert "INTERNALERROR" not in parallel.stdout + parallel.stderr

    one = json.loads((tmp_path / "serial" / "results.json").read_text())
    two = json.loads((tmp_path / "parallel" / "results.json").read_text())
    assert [(t["id"], t["outcome"]) for t in one["tests"]] == [(t["id"], t["outcome"]) for t in two["tests"]]
    models = {r["model"] for r in one["records"]}
    kinds = {r["kind"] for r in one["records"]}
    assert models == {"widedeep", "conformer"} and kinds == {"accuracy", "performance"}

    accuracy = [[without(r, WALL_CLOCK) for r in results["records"] if r["kind"] == "accuracy"] for results in (one, two)]
    assert accuracy[0] and accuracy[0] == accuracy[1], "accuracy records are identical (but for the host's timings)"

    performance = [[without(r, PATHS) for r in results["records"] if r["kind"] == "performance"] for results in (one, two)]
    assert performance[0] and performance[0] == performance[1], "performance records are identical (virtual time)"
    for record in (r for r in two["records"] if r["kind"] == "performance"):
        assert record["details"]["clock"] == "virtual"
        log_dir = Path(record["details"]["log_dir"])  # relative to the report, not to the staging directory
        assert log_dir.parent == Path("loadgen") and (tmp_path / "parallel" / log_dir).is_dir()

    for results in (one, two):  # every value the tests recorded is plain JSON (numbers are numbers, NaN is null)
        for record in results["records"]:
            assert record["value"] is None or type(record["value"]) in (int, float)
