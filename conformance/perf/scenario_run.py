"""One performance run of the suite: a model at a precision on a hardware in a LoadGen scenario, as the targets say.

A backend whose timing is simulated runs on virtual time (:mod:`conformance.perf.virtual`), unless the real LoadGen on
the host's clock is asked for as a cross-check; measured hardware always runs under the real LoadGen
(:mod:`conformance.perf.harness`). Every run starts from LoadGen's built-in mlperf.conf for the benchmark the model
stands for (its seeds; at a profile of MLPerf's length, its minimum query counts too); the profile overrides the run's
length and counts. Logs go to ``<report_dir>/loadgen/<model>-<precision>-<scenario>/`` (a temporary
directory without a report directory).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from conformance.hardware import Backend
from conformance.hardware.devices import Device, Workload
from conformance.perf.harness import (
    COMPLIANT_MIN_DURATION_MS,
    MULTISTREAM_SAMPLES_PER_QUERY,
    ScenarioResult,
    ScenarioSettings,
    mlperf_conf_settings,
    run_scenario,
)
from conformance.perf.virtual import simulate_scenario
from conformance.targets.performance import PerformanceTarget, load_performance_targets
from conformance.targets.profiles import load_profiles


def _prior(device: Device, samples: int, batch: int) -> tuple[float, float] | None:
    """(latency of a query of ``batch`` samples, throughput at that batch) from the device's timing model, for LoadGen's
    expected latency and Offline query size; None for a device whose time is measured (nothing to predict from)."""
    predicted = device.predicted_service([i % samples for i in range(batch)])
    if predicted is None:
        return None
    occupancy, latency = predicted
    return latency, batch / occupancy


@dataclass
class TargetRun:
    """Everything a LoadGen run of a target needs: the device, the LoadGen settings, where its logs go and the SUT's
    batching (``run_scenario``'s keyword arguments). The compliance audits run the same target with changed settings."""

    target: PerformanceTarget
    device: Device
    settings: ScenarioSettings
    log_dir: Path | None  # None: a new temporary directory per run
    run_options: dict
    clock: str  # "virtual" (simulated timing) or "real" (the real LoadGen on the host's clock)

    @property
    def runner(self):
        """The function that runs one scenario on this clock (``run_scenario``'s arguments)."""
        return simulate_scenario if self.clock == "virtual" else run_scenario

    def run(self, settings: ScenarioSettings | None = None, log_dir: Path | None = None, device=None) -> ScenarioResult:
        log_dir = log_dir if log_dir is not None else self.log_dir
        if log_dir is None:
            log_dir = Path(tempfile.mkdtemp(prefix=f"loadgen-{self.target.test_id}-"))
        return self.runner(device if device is not None else self.device, settings or self.settings, log_dir,
                           **self.run_options)


def plan_target(target: PerformanceTarget, profile: str, backend: Backend, model, report_dir: Path | None = None,
                real_time: bool = False) -> TargetRun:
    """The device and LoadGen settings of ``target`` in ``profile`` on ``backend`` (nothing runs yet); ``real_time``
    runs a simulated device under the real LoadGen too."""
    length = load_profiles()[profile].performance
    run = load_performance_targets().models[target.model]
    samples = int(length.performance_samples[target.model])
    max_batch = int(run.max_batch[target.hardware])
    device = backend.loadgen_device(model, target.precision, Workload(target.model, samples, run.rows_per_sample, max_batch))
    per_query = MULTISTREAM_SAMPLES_PER_QUERY if target.scenario == "MultiStream" else 1
    query_prior = _prior(device, samples, per_query)
    throughput_prior = _prior(device, samples, max_batch)
    qps = target.target
    if target.scenario == "Offline" and throughput_prior is not None:  # size the one query to last min_duration
        qps = max(qps, throughput_prior[1])
    min_queries = int(length.min_query_count[target.hardware][target.scenario])
    if length.min_duration_ms >= COMPLIANT_MIN_DURATION_MS:  # a run of MLPerf's length holds mlperf.conf's counts too
        min_queries = max(min_queries, int(mlperf_conf_settings(run.mlperf_model, target.scenario).min_query_count))
    settings = ScenarioSettings(
        scenario=target.scenario,
        min_duration_ms=length.min_duration_ms,
        min_query_count=min_queries,
        performance_sample_count=samples,
        expected_latency_s=query_prior[0] if query_prior else 1.0,
        target_qps=qps if target.scenario in ("Server", "Offline") else 1.0,
        server_latency_ms=run.server_latency_ms,
        mlperf_model=run.mlperf_model,
    )
    log_dir = Path(report_dir) / "loadgen" / target.test_id if report_dir is not None else None
    options = {"max_batch": max_batch, "batch_timeout_s": run.server_batch_timeout_ms / 1e3,
               "total_sample_count": samples, "name": target.test_id}
    clock = "virtual" if backend.timing == "simulated" and not real_time else "real"
    return TargetRun(target, device, settings, log_dir, options, clock)
