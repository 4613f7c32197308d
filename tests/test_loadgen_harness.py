"""The LoadGen harness against fake devices with a known constant service time: what the real LoadGen reports must agree
with queueing theory, an overloaded Server must be INVALID, and a raising SUT must complete every query and fail."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from conformance.hardware.devices import ExecutingDevice, ServiceTimeDevice
from conformance.perf import resident
from conformance.perf.harness import ScenarioSettings, run_scenario

SERVICE_S = 0.010  # long against thread wake-up jitter (~0.1-1 ms), short enough for quick runs


def constant(service_s: float = SERVICE_S) -> ServiceTimeDevice:
    return ServiceTimeDevice(lambda n: (service_s, service_s))


def assert_latency_is_the_service_time(result) -> None:
    """No query completes before the service time (every latency statistic at least that); the fastest query of the
    run shows what the harness adds when the host is not busy elsewhere. Its other statistics also carry the delays of
    a loaded host (issuing late, waking late, waiting for the GIL), which no bound on this clock can fix in advance."""
    ms = {key: result.details[f"result_{key}_latency_ns"] / 1e6 for key in ("min", "mean")}
    ms[result.metric] = result.value
    assert all(value >= SERVICE_S * 1e3 for value in ms.values()), ms
    assert ms["min"] <= SERVICE_S * 1e3 * 1.1 + 1.0, ms


def test_single_stream_latency_is_the_service_time(tmp_path):
    result = run_scenario(constant(), ScenarioSettings("SingleStream", min_duration_ms=300, min_query_count=64,
                                                       expected_latency_s=SERVICE_S), tmp_path)
    assert result.valid, result.invalid_reason
    # one query in flight: latency = service time plus the host's delays in issuing and completing it, never less
    assert_latency_is_the_service_time(result)
    assert result.query_count >= 64 and result.issued == result.completed
    assert (Path(tmp_path) / "mlperf_log_summary.txt").read_text().count("Result is : VALID") == 1
    assert not result.compliant_length  # 300 ms, not MLPerf's 600 s


def test_offline_throughput_is_batch_over_service_time(tmp_path):
    batch = 8
    settings = ScenarioSettings("Offline", min_duration_ms=500, target_qps=batch / SERVICE_S)
    result = run_scenario(constant(), settings, tmp_path, max_batch=batch)
    assert result.valid, result.invalid_reason
    capacity = batch / SERVICE_S
    assert 0.85 * capacity <= result.value <= 1.01 * capacity, (result.value, capacity)


def test_multistream_query_latency_is_one_batch(tmp_path):
    settings = ScenarioSettings("MultiStream", min_duration_ms=200, min_query_count=20, expected_latency_s=SERVICE_S)
    result = run_scenario(constant(), settings, tmp_path, max_batch=8)
    assert result.details["effective_samples_per_query"] == 8
    assert result.details["batches"] == result.query_count  # 8 samples per query fit one batch of 8
    assert_latency_is_the_service_time(result)
    assert result.length_only_invalid  # fewer than the 662 queries early stopping needs at p99: INVALID for length


def test_server_within_capacity_is_valid_and_beyond_capacity_invalid(tmp_path):
    """On the host's clock: the latency bound (1 s, 100 batches' service time) is far above what a loaded host adds to
    a run within capacity, and far below the backlog that three times the capacity builds in 1.5 s (over 3 s)."""
    batch = 4
    capacity = batch / SERVICE_S  # 400 samples/s
    bound_ms = 1000
    ok = run_scenario(constant(), ScenarioSettings("Server", min_duration_ms=1500, min_query_count=300,
                                                   target_qps=0.4 * capacity, server_latency_ms=bound_ms),
                      tmp_path / "ok", max_batch=batch, batch_timeout_s=0.005)
    assert ok.checks["perf_constraints"] is True, ok.invalid_reason
    assert ok.details["result_99.00_percentile_latency_ns"] / 1e6 < bound_ms
    over = run_scenario(constant(), ScenarioSettings("Server", min_duration_ms=1500, min_query_count=300,
                                                     target_qps=3.0 * capacity, server_latency_ms=bound_ms),
                        tmp_path / "over", max_batch=batch, batch_timeout_s=0.005)
    assert not over.valid
    assert over.checks["perf_constraints"] is False
    assert not over.length_only_invalid
    assert "Reduce target QPS" in over.invalid_reason
    assert over.value < 1.1 * capacity  # completed samples/s cannot exceed what the device serves


class FlakyDevice(ExecutingDevice):
    """Raises on every second batch."""

    def __init__(self):
        self.calls = 0
        super().__init__(self._execute)

    def _execute(self, indices):
        self.calls += 1
        if self.calls % 2 == 0:
            raise RuntimeError("device fault")
        return [np.zeros(4, np.uint8)] * len(indices)


@pytest.mark.parametrize("scenario", ["SingleStream", "Offline", "Server"])
def test_a_raising_sut_completes_every_query_and_fails(tmp_path, scenario):
    device = FlakyDevice()
    settings = ScenarioSettings(scenario, min_duration_ms=100, min_query_count=10, target_qps=200, expected_latency_s=1e-3,
                                server_latency_ms=50)
    finished = threading.Event()
    outcome = {}

    def run():
        outcome["result"] = run_scenario(device, settings, tmp_path, max_batch=4, batch_timeout_s=0.001)
        finished.set()

    resident.start(run, scenario)  # a thread that calls LoadGen must not exit (conformance.perf.resident)
    assert finished.wait(60), f"{scenario}: LoadGen did not return: a raising SUT left queries incomplete"
    result = outcome["result"]
    assert result.sut_errors and "device fault" in result.sut_errors[0]
    assert result.issued == result.completed > 0



def test_the_threads_that_call_loadgen_outlive_every_run(tmp_path):
    """The SUT's dispatcher and completer call LoadGen; LoadGen's per-thread logger races with its IO thread when such
    a thread exits, so they are resident threads that every run reuses: runs in sequence start no new ones, and a task
    that raises leaves its thread serving."""
    settings = ScenarioSettings("SingleStream", min_duration_ms=50, min_query_count=8, expected_latency_s=1e-3)
    answer = lambda indices: [np.zeros(4, np.uint8)] * len(indices)  # noqa: E731
    run_scenario(ExecutingDevice(answer), settings, tmp_path / "first", max_batch=1)
    before = resident.started()
    threads = set()
    for k in range(3):
        run_scenario(ExecutingDevice(answer), settings, tmp_path / str(k), max_batch=1)
        threads |= {t.ident for t in threading.enumerate() if t.name.startswith("loadgen-resident")}
    assert resident.started() == before and len(threads) == before
    failing = resident.start(lambda: 1 / 0, "raises")
    assert failing.join(10) and isinstance(failing.error, ZeroDivisionError)
    assert resident.start(lambda: None, "after").join(10) and resident.started() == before
