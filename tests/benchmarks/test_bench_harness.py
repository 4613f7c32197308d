"""Harness overhead (MLCommons' null-backend idea): LoadGen + our SUT against a device that takes no time. The achievable
queries/samples per second are printed next to the largest rate the ipu targets need; nothing is asserted about time."""

from __future__ import annotations

import pytest

from conformance.hardware.devices import ServiceTimeDevice
from conformance.perf.harness import ScenarioSettings, run_scenario
from conformance.targets.performance import load_performance_targets


def zero_time_device() -> ServiceTimeDevice:
    return ServiceTimeDevice(lambda n: (0.0, 0.0))


def needed(scenario: str) -> float:
    return max(t.target for t in load_performance_targets().targets if t.scenario == scenario and t.hardware == "ipu")


@pytest.mark.parametrize("scenario, max_batch, rate", [
    ("Offline", 32, 400_000.0),  # LoadGen sizes the one query from the expected rate: ask for far more than possible
    ("Server", 32, 40_000.0),
    ("SingleStream", 1, 0.0),
])
def test_harness_overhead(benchmark, tmp_path, scenario, max_batch, rate):
    benchmark.group = "loadgen harness overhead (zero-time device)"
    results = []

    def run():
        settings = ScenarioSettings(scenario, min_duration_ms=1000, min_query_count=64, target_qps=rate or 1.0,
                                    expected_latency_s=1e-5, server_latency_ms=15)
        results.append(run_scenario(zero_time_device(), settings, tmp_path / str(len(results)), max_batch=max_batch,
                                    batch_timeout_s=0.0005))

    benchmark.pedantic(run, rounds=1, iterations=1)
    result = results[-1]
    if scenario == "SingleStream":
        achieved = result.details["result_qps_with_loadgen_overhead"]
        need = 1e3 / min(t.target for t in load_performance_targets().targets
                         if t.scenario == "SingleStream" and t.hardware == "ipu")
        what = "queries/s (back to back; the tightest SingleStream target allows one per"
        print(f"\n{scenario}: {achieved:,.0f} {what} {1e3 / need:.2f} ms = {need:,.0f}/s), "
              f"p90 harness latency {result.value:.3f} ms")
    else:
        achieved = result.value
        need = needed(scenario)
        print(f"\n{scenario}: {achieved:,.0f} samples/s achieved at {rate:,.0f} asked (LoadGen "
              f"{'VALID' if result.valid else 'INVALID: ' + result.invalid_reason[:80]}); the largest ipu target needs "
              f"{need:,.0f}/s: {achieved / need:.1f}x headroom")
    benchmark.extra_info.update(scenario=scenario, achieved_per_s=achieved, needed_per_s=need, headroom=achieved / need)
