"""One performance run of the suite: a model at a precision on a hardware in a LoadGen scenario, as the targets say.

Logs go to ``<report_dir>/loadgen/<model>-<precision>-<scenario>/`` (a temporary directory without a report directory).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from conformance.perf.harness import ScenarioResult, ScenarioSettings, run_scenario
from conformance.targets.performance import PerformanceTarget, load_performance_targets


def _device(target: PerformanceTarget, samples: int, rows: int, max_batch: int, model_store=None, backend=None):
    from conformance.hardware import get_backend
    from conformance.perf import systems
    from conformance.perf.timing import default_execution
    from conformance.reference import WEIGHT_SEED
    from models import load_model

    model = model_store.get(target.model) if model_store is not None else load_model(target.model, seed=WEIGHT_SEED)
    workload = systems.Workload(target.model, samples, rows)
    if target.hardware == "ipu":
        packed = default_execution(target.model).packed
        backend = backend if backend is not None and backend.name == "ipu" else get_backend("ipu")
        return systems.simulated_ipu(model, backend, target.precision, workload, max_batch * rows, packed)
    if target.hardware == "cpu":
        return systems.CpuExecution(model, workload)
    raise ValueError(f"no performance system for hardware {target.hardware!r}; expected ipu or cpu")


def _prior(device, samples: int, batch: int) -> tuple[float, float] | None:
    """(latency of a query of ``batch`` samples, throughput at that batch) from the timing model, for LoadGen's expected
    latency and Offline query size; None on real hardware (nothing to predict from)."""
    if not hasattr(device, "service_for"):
        return None
    occupancy, latency = device.service_for([i % samples for i in range(batch)])
    return latency, batch / occupancy


@dataclass
class TargetRun:
    """Everything a LoadGen run of a target needs: the device, the LoadGen settings, where its logs go and the SUT's
    batching (``run_scenario``'s keyword arguments). The compliance audits run the same target with changed settings."""

    target: PerformanceTarget
    device: object
    settings: ScenarioSettings
    log_dir: Path | None  # None: a new temporary directory per run
    run_options: dict

    def run(self, settings: ScenarioSettings | None = None, log_dir: Path | None = None, device=None) -> ScenarioResult:
        log_dir = log_dir if log_dir is not None else self.log_dir
        if log_dir is None:
            log_dir = Path(tempfile.mkdtemp(prefix=f"loadgen-{self.target.test_id}-"))
        return run_scenario(device if device is not None else self.device, settings or self.settings, log_dir,
                            **self.run_options)


def plan_target(target: PerformanceTarget, profile: str, report_dir: Path | None = None, model_store=None,
                backend=None) -> TargetRun:
    """The device and LoadGen settings of ``target`` in ``profile`` (nothing runs yet)."""
    data = load_performance_targets()
    if profile not in data.profiles:
        raise ValueError(f"performance.toml has no [profiles.{profile}]; expected one of: {', '.join(data.profiles)}")
    length = data.profiles[profile]
    run = data.models[target.model]
    samples = int(length.performance_samples[target.model])
    max_batch = int(run.max_batch[target.hardware])
    device = _device(target, samples, run.rows_per_sample, max_batch, model_store, backend)
    per_query = 8 if target.scenario == "MultiStream" else 1
    query_prior = _prior(device, samples, per_query)
    throughput_prior = _prior(device, samples, max_batch)
    qps = target.target
    if target.scenario == "Offline" and throughput_prior is not None:  # size the one query to last min_duration
        qps = max(qps, throughput_prior[1])
    settings = ScenarioSettings(
        scenario=target.scenario,
        min_duration_ms=length.min_duration_ms,
        min_query_count=int(length.min_query_count[target.hardware][target.scenario]),
        performance_sample_count=samples,
        expected_latency_s=query_prior[0] if query_prior else 1.0,
        target_qps=qps if target.scenario in ("Server", "Offline") else 1.0,
        server_latency_ms=run.server_latency_ms,
    )
    log_dir = Path(report_dir) / "loadgen" / target.test_id if report_dir is not None else None
    options = {"max_batch": max_batch, "batch_timeout_s": run.server_batch_timeout_ms / 1e3,
               "total_sample_count": samples, "name": target.test_id}
    return TargetRun(target, device, settings, log_dir, options)


def run_target(target: PerformanceTarget, profile: str, report_dir: Path | None = None, model_store=None,
               backend=None) -> ScenarioResult:
    return plan_target(target, profile, report_dir, model_store, backend).run()
