"""Scenarios of simulated devices on virtual time: the same inputs give the same numbers, queueing theory holds, the
real LoadGen on the host's clock agrees where host lateness is small, and LoadGen's rules decide validity."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.hardware.devices import ServiceTimeDevice
from conformance.perf.harness import ScenarioSettings, run_scenario
from conformance.perf.virtual import simulate_closed_loop, simulate_scenario

REPO = Path(__file__).resolve().parents[1]
SAMPLES = 8


def affine(fixed_s: float, per_sample_s: float) -> ServiceTimeDevice:
    """A device whose batch of n samples occupies it for fixed + n x per-sample and completes after the same."""
    return ServiceTimeDevice(lambda n: (fixed_s + per_sample_s * n, fixed_s + per_sample_s * n))


SETTINGS = {
    "SingleStream": dict(min_duration_ms=500, min_query_count=256, expected_latency_s=0.0005),
    "MultiStream": dict(min_duration_ms=500, min_query_count=662, expected_latency_s=0.001),
    "Server": dict(min_duration_ms=1000, min_query_count=1024, target_qps=2000, server_latency_ms=10),
    "Offline": dict(min_duration_ms=500, target_qps=8000),
}
RUN = {"max_batch": 8, "batch_timeout_s": 0.002, "total_sample_count": SAMPLES}


def settings(scenario: str, **changes) -> ScenarioSettings:
    return ScenarioSettings(scenario, performance_sample_count=SAMPLES, **{**SETTINGS[scenario], **changes})


@pytest.mark.parametrize("scenario", list(SETTINGS))
def test_two_runs_give_identical_results(scenario):
    device = affine(0.0003, 0.0001)
    first = simulate_scenario(device, settings(scenario), None, **RUN)
    device.reset()
    second = simulate_scenario(device, settings(scenario), None, **RUN)
    assert first.valid and first.value is not None, first.invalid_reason
    assert first.to_dict() == second.to_dict()


def test_single_stream_latency_is_the_service_time():
    result = simulate_scenario(affine(0.0003, 0.0001), settings("SingleStream"), None, **RUN)
    # one query in flight: every latency is the service time of one sample, exactly
    assert result.value == pytest.approx(0.4) and result.details["result_max_latency_ns"] == 400_000
    assert result.details["metric_basis"] == "early-stopping p90 latency estimate"


def test_multistream_query_is_one_batch_of_eight():
    result = simulate_scenario(affine(0.0003, 0.0001), settings("MultiStream"), None, **RUN)
    assert result.value == pytest.approx(0.3 + 0.8) and result.details["mean_batch_size"] == 8


def test_offline_throughput_is_the_device_capacity():
    result = simulate_scenario(affine(0.0003, 0.0001), settings("Offline"), None, **RUN)
    # back-to-back batches of 8: 8 samples per 1.1 ms
    assert result.value == pytest.approx(8 / 0.0011, rel=0.01)


def test_server_over_capacity_is_invalid_with_loadgen_reasons():
    capacity = 8 / 0.0011
    over = simulate_scenario(affine(0.0003, 0.0001), settings("Server", target_qps=1.5 * capacity), None, **RUN)
    assert not over.valid and over.checks["perf_constraints"] is False
    assert "Reduce target QPS" in over.invalid_reason
    under = simulate_scenario(affine(0.0003, 0.0001), settings("Server", target_qps=0.5 * capacity), None, **RUN)
    assert under.valid and under.details["result_99.00_percentile_latency_ns"] < 10e6


def test_too_short_run_is_invalid_for_its_length():
    result = simulate_scenario(affine(0.0003, 0.0001), settings("SingleStream", min_query_count=32, min_duration_ms=10), None, **RUN)
    assert not result.valid and result.checks["early_stopping"] is False
    assert result.details["metric_basis"].startswith("p90 latency (too few queries")


def test_closed_loop_follows_littles_law():
    result = simulate_closed_loop(affine(0.004, 0.001), clients=4, batch_size=2, duration_s=0.6, warmup_s=0.1)
    # the device serialises the calls: QPS = batch / service time, mean latency = clients x service time
    assert result.qps == pytest.approx(2 / 0.006, rel=0.02)
    assert result.avg_latency_ms == pytest.approx(4 * 6.0, rel=0.02)


def issue_delays_ms(log_dir: Path) -> list[float]:
    """How late LoadGen issued each sample after its scheduled time, as LoadGen's own trace records it. The trace is
    read event by event (one per line): LoadGen writes some of its other events with unescaped quotes."""
    delays = []
    for line in (log_dir / "mlperf_log_trace.json").read_text().splitlines():
        if line.startswith('{"name":"Sample"') and '"ph":"b"' in line:
            delays.append(json.loads(line.rstrip(","))["args"]["issue_start_ns"] / 1e6)
    return delays


@pytest.mark.parametrize("scenario", ["SingleStream", "Server", "Offline"])
def test_real_loadgen_agrees_where_host_lateness_is_small(scenario, tmp_path):
    """Device times of several milliseconds: the real LoadGen on the host's clock and the simulation agree on
    throughput within 2% and on latency percentiles within the host's lateness in that run: LoadGen issuing a query
    after its scheduled time (its trace's issue delay) plus the SUT completing a batch after its due time. Either
    delays everything queued behind it by as much, never more, so the sum of the largest of each bounds the gap."""
    device = affine(0.004, 0.001)
    quick = {"SingleStream": dict(min_duration_ms=400, min_query_count=64, expected_latency_s=0.005),
             "Offline": dict(min_duration_ms=400, target_qps=8 / 0.012),
             "Server": dict(min_duration_ms=1000, min_query_count=100, target_qps=150, server_latency_ms=100)}[scenario]
    run = {"max_batch": 8, "batch_timeout_s": 0.002, "total_sample_count": SAMPLES}
    real = run_scenario(device, settings(scenario, **quick), tmp_path / "real", trace=True, **run)
    device.reset()
    virtual = simulate_scenario(device, settings(scenario, **quick), tmp_path / "virtual", **run)
    late_ms = (real.details.get("completion_lateness_ms") or {}).get("max", 0.0)
    delays = issue_delays_ms(tmp_path / "real")
    assert len(delays) >= real.query_count > 0  # every sample of every query (the trace read whole)
    issue_ms = max(delays)
    print(f"{scenario}: real {real.value:.4g} vs virtual {virtual.value:.4g} {virtual.units}; host lateness max "
          f"{late_ms:.3f} ms completing, {issue_ms:.3f} ms issuing")
    if scenario == "Offline":
        assert virtual.value == pytest.approx(real.value, rel=0.02)
    else:
        for p in ("50.00", "90.00"):
            key = f"result_{p}_percentile_latency_ns"
            gap_ms = abs(real.details[key] - virtual.details[key]) / 1e6
            assert gap_ms <= late_ms + issue_ms + 0.2, (p, real.details[key], virtual.details[key], late_ms, issue_ms)


def test_server_of_100k_queries_is_simulated():
    """Not a wall-clock assertion: the simulated run's size is checked, its time printed for the record."""
    device = affine(0.0002, 0.00005)
    big = settings("Server", min_duration_ms=10000, min_query_count=100_000, target_qps=10_000)
    start = time.perf_counter()
    result = simulate_scenario(device, big, None, **RUN)
    print(f"Server, {result.query_count} queries simulated in {time.perf_counter() - start:.2f} s")
    assert result.query_count >= 100_000 and result.valid


def _suite(tmp_path, name: str, *options: str) -> dict:
    """The performance tests of the ipu's widedeep at smoke, run as a user runs them; their results.json."""
    report = tmp_path / name
    done = subprocess.run([sys.executable, "-m", "pytest", "conformance/test_performance.py", "--hardware", "ipu",
                           "--model", "widedeep", "--profile", "smoke", "--report-dir", str(report), "-p",
                           "no:randomly", "-q", *options], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return json.loads((report / "results.json").read_text())


def test_the_suite_gives_identical_performance_records_run_after_run(tmp_path):
    first, second = _suite(tmp_path, "first"), _suite(tmp_path, "second")
    values = [{r["id"]: (r["value"], r["target"], r["passed"]) for r in run["records"]} for run in (first, second)]
    assert values[0] == values[1] and len(values[0]) >= 8
    assert all(r["details"]["clock"] == "virtual" and r["details"]["timing"] == "simulated" for r in first["records"])


def test_real_time_loadgen_is_a_cross_check_option(tmp_path):
    results = _suite(tmp_path, "real", "--real-time-loadgen", "-k", "Offline or SingleStream")
    records = [r for r in results["records"] if r["check"] != "max_valid_server_qps"]
    assert records and all(r["details"]["clock"] == "real" for r in records)
    # log directories are relative to the report
    assert all((tmp_path / "real" / r["details"]["log_dir"] / "mlperf_log_detail.txt").is_file() for r in records)


def test_unknown_device_is_a_usage_error_listing_the_chips():
    done = subprocess.run([sys.executable, "-m", "pytest", "conformance/", "--hardware", "ipu", "--device", "tpu9",
                           "--collect-only", "-q"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 4 and "tpu9" in done.stderr and "c600, gc200, bow" in done.stderr, done.stderr


def test_baseline_of_the_same_commit_passes_and_an_injected_slowdown_fails_in_junit(tmp_path):
    first = _suite(tmp_path, "first", "-k", "Offline")
    same = _suite(tmp_path, "same", "-k", "Offline", "--baseline", str(tmp_path / "first" / "results.json"))
    assert not same["regressions"]
    faster = json.loads((tmp_path / "first" / "results.json").read_text())  # as if the previous commit were 0.5% faster
    for record in faster["records"]:
        if record["check"] == "samples_per_second":
            record["value"] *= 1.005
    (tmp_path / "faster.json").write_text(json.dumps(faster))
    done = subprocess.run([sys.executable, "-m", "pytest", "conformance/test_performance.py", "--hardware", "ipu",
                           "--model", "widedeep", "--profile", "smoke", "-k", "Offline", "-p", "no:randomly", "-q",
                           "--baseline", str(tmp_path / "faster.json"), "--junitxml", str(tmp_path / "junit.xml")],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout[-2000:]
    junit = (tmp_path / "junit.xml").read_text()
    assert 'failures="2"' in junit and "regression against the baseline" in junit
    assert len(first["records"]) == 2
