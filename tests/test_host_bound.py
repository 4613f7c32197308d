"""Host noise named: on measured hardware a failing figure whose device side met the target (or that ran on an
oversubscribed host) is FAIL (host-bound: ...), with the figures; a figure the device side misses too is a plain FAIL;
the simulated ipu's figures are never marked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.perf import host
from conformance.report import render

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("check, value, target, details, says", [
    ("p90_latency_ms", 480.0, 1.0, {"device_side_latency_ms": {"p90": 0.02}}, "p90 latency 480 ms, of which the "
                                                                              "device side 0.02 ms: 480 ms is the host's"),
    ("p99_latency_ms_at_target_qps", 1166.4, 60.0, {"device_side_latency_ms": {"p99": 12.0}}, "p99 latency 1166 ms"),
    ("samples_per_second", 800.0, 1000.0, {"device_side_samples_per_second": 5000.0}, "the device side 5000 samples/s"),
    ("p90_latency_ms", 9.0, 1.0, {"device_side_latency_ms": {"p90": 8.0}, "host_load_per_core": 2.5},
     "host load 2.5 per core"),
    ("p90_latency_ms", 9.0, 1.0, {"device_side_latency_ms": {"p90": 8.0}, "host_load_per_core": 0.3}, None),
    ("samples_per_second", 800.0, 1000.0, {"device_side_samples_per_second": 900.0}, None),
])
def test_host_bound_says_whose_time_it_was(check, value, target, details, says):
    found = host.host_bound(check, value, target, details)
    assert (found is None) if says is None else (says in found), found


def test_device_side_percentiles_and_rate():
    side = host.device_side([0.001] * 90 + [0.010] * 10, [0.0, 0.5])
    assert side["device_side_latency_ms"]["p50"] == pytest.approx(1.0)
    assert side["device_side_latency_ms"]["p99"] == pytest.approx(10.0)
    assert side["device_side_samples_per_second"] == pytest.approx(200.0)
    assert host.device_side([], [float("inf"), float("-inf")]) == {}


# LoadGen's issue reaching the system under test 5 ms late (a busy host): the null device's p90 misses its 1 ms target
# by the host's time alone. The host's load is fixed low, so that only the lateness can name the host.
LATE_PLUGIN = '''
import time

from conformance.perf import host
from conformance.perf.sut import BatchingSUT

_issue = BatchingSUT.issue_queries


def pytest_configure(config):
    def late(self, query_samples):
        time.sleep(0.005)
        _issue(self, query_samples)

    BatchingSUT.issue_queries = late
    host.load_per_core = lambda: 0.1
'''

# the device itself 5 ms per batch: a plain FAIL
SLOW_DEVICE_PLUGIN = '''
from conformance.hardware import null
from conformance.perf import host


def pytest_configure(config):
    def slow_init(self):
        null.ServiceTimeDevice.__init__(self, lambda units: (0.005, 0.005))

    null.NullDevice.__init__ = slow_init
    host.load_per_core = lambda: 0.1
'''


def _null_single_stream(tmp_path: Path, plugin: str) -> tuple[subprocess.CompletedProcess, dict]:
    (tmp_path / "host_plugin.py").write_text(plugin)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])}
    report = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "pytest", "conformance/test_performance.py", "--hardware", "null",
                           "--model", "widedeep", "--profile", "smoke", "-k", "SingleStream", "-p", "host_plugin",
                           "-p", "no:randomly", "-p", "no:cacheprovider", "--report-dir", str(report)],
                          cwd=REPO, capture_output=True, text=True, env=env)
    return done, json.loads((report / "results.json").read_text())


def test_a_late_host_makes_a_host_bound_failure(tmp_path):
    done, results = _null_single_stream(tmp_path, LATE_PLUGIN)
    assert done.returncode == 1, done.stdout[-3000:]
    [record] = results["records"]
    assert not record["passed"] and record["value"] >= 5.0
    assert record["details"]["device_side_latency_ms"]["p90"] < 1.0
    assert record["details"]["host_bound"].startswith("p90 latency ")
    assert "(host-bound: p90 latency " in results["tests"][0]["message"]
    assert "{" not in results["tests"][0]["message"]  # figures with their units, not a dict
    assert render.check_verdict_text(record).startswith("FAIL (host-bound: p90 latency ")
    headers, rows = render.matrix(results)
    assert rows[0][headers.index("SingleStream")].startswith("FAIL (host-bound)")
    assert "FAIL (host-bound)" in done.stdout


def test_a_slow_device_is_a_plain_failure(tmp_path):
    done, results = _null_single_stream(tmp_path, SLOW_DEVICE_PLUGIN)
    assert done.returncode == 1, done.stdout[-3000:]
    [record] = results["records"]
    assert not record["passed"] and record["details"]["device_side_latency_ms"]["p90"] >= 5.0 - 1e-6  # 5 ms, less float rounding
    assert "host_bound" not in record["details"] and "host-bound" not in results["tests"][0]["message"]


def test_the_simulated_ipu_is_never_host_bound(tmp_path):
    """The same late host under the ipu on the host's clock: its figures come from the timing model, never marked."""
    (tmp_path / "host_plugin.py").write_text(LATE_PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])}
    report = tmp_path / "report"
    subprocess.run([sys.executable, "-m", "pytest", "conformance/test_performance.py", "--hardware", "ipu", "--model",
                    "widedeep", "--precision", "fp16", "--profile", "smoke", "-k", "SingleStream", "--real-time-loadgen",
                    "-p", "host_plugin", "-p", "no:randomly", "-p", "no:cacheprovider", "--report-dir", str(report)],
                   cwd=REPO, capture_output=True, text=True, env=env)
    records = json.loads((report / "results.json").read_text())["records"]
    assert records and all(r["details"]["timing"] == "simulated" for r in records)
    assert not any(key in r["details"] for r in records
                   for key in ("host_bound", "device_side_latency_ms", "host_load_per_core"))
