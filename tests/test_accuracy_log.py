"""LoadGen's accuracy-log sampling reproduced for runs on virtual time (conformance/perf/accuracy_log.py), checked
against the real LoadGen's own logs; the compliance audits on virtual time give the same records run after run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conformance.hardware.devices import ServiceTimeDevice
from conformance.perf import test01, test04
from conformance.perf.accuracy_log import sampled_sequence_ids, sampling_probability
from conformance.perf.audits import AuditSettings
from conformance.perf.harness import ScenarioSettings, run_scenario
from conformance.perf.virtual import offline_samples, simulate_scenario
from conformance.targets.audit import load_audit_config

SAMPLES = 8
SEED = 720381539243781796  # MLPerf's TEST01 audit.config seed
SCENARIOS = {
    "SingleStream": dict(min_duration_ms=300, min_query_count=200, expected_latency_s=0.0005),
    "MultiStream": dict(min_duration_ms=300, min_query_count=100, expected_latency_s=0.002),
    "Server": dict(min_duration_ms=300, min_query_count=300, target_qps=1500, server_latency_ms=50),
    "Offline": dict(min_duration_ms=200, target_qps=5000),
}


def device(shift: int = 0, per_sample_s: float = 0.0002) -> ServiceTimeDevice:
    """Answers sample i with [i + shift, ...]; a batch of n takes n x per_sample_s."""
    answers = {i: np.full(3, i + shift, np.float32) for i in range(SAMPLES)}
    return ServiceTimeDevice(lambda n: (per_sample_s * n, per_sample_s * n), answers)


def per_query(settings: ScenarioSettings) -> int:
    return {"Offline": offline_samples(settings), "MultiStream": settings.samples_per_query}.get(settings.scenario, 1)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_sampled_sequence_ids_are_the_real_loadgens(tmp_path, scenario):
    settings = ScenarioSettings(scenario, performance_sample_count=SAMPLES, **SCENARIOS[scenario])
    audit = AuditSettings.from_settings(settings, accuracy_log_sampling_target=40, accuracy_log_rng_seed=SEED)
    result = run_scenario(device(), audit, tmp_path, max_batch=8, total_sample_count=SAMPLES)
    logged = sorted(e.seq_id for e in test01.read_accuracy_log(tmp_path / "mlperf_log_accuracy.json"))
    probability = sampling_probability(40, scenario=scenario, target_qps=settings.loadgen_target_qps,
                                       min_duration_ms=settings.min_duration_ms,
                                       min_query_count=settings.min_query_count, samples_per_query=per_query(settings))
    assert logged and logged == sampled_sequence_ids(result.issued, probability, SEED).tolist()


def test_sampling_is_raised_to_the_minimum_and_never_empty():
    assert sampled_sequence_ids(100, 0.0, SEED).size == 0  # LoadGen's rule alone can log nothing
    raised = sampled_sequence_ids(100, 0.0, SEED, minimum=16)
    assert raised.size == 16 and np.all(np.diff(raised) > 0)
    assert set(sampled_sequence_ids(100, 0.2, SEED)) <= set(sampled_sequence_ids(100, 0.2, SEED, minimum=50))
    assert sampled_sequence_ids(5, 0.0, SEED, minimum=16).tolist() == [0, 1, 2, 3, 4]


def audit_settings(scenario: str) -> ScenarioSettings:
    settings = {**SCENARIOS[scenario], "expected_latency_s": 0.0002}  # the device's latency: LoadGen generates enough
    return ScenarioSettings(scenario, performance_sample_count=SAMPLES, mlperf_model="resnet50", **settings)


def run01(tmp_path, scenario, performance_device, accuracy_device, target=16):
    config = load_audit_config()
    return test01.run_test01(performance_device, audit_settings(scenario), tmp_path, sampling_target=target,
                             rng_seed=config.accuracy_log_rng_seed, tolerance=config.accuracy_delta,
                             accuracy_device=accuracy_device, config=config, runner=simulate_scenario,
                             max_batch=8, total_sample_count=SAMPLES)


@pytest.mark.parametrize("scenario", ["SingleStream", "Offline"])
def test_test01_on_virtual_time_passes_an_honest_device_the_same_way_every_run(tmp_path, scenario):
    first = run01(tmp_path / "1", scenario, device(), device())
    second = run01(tmp_path / "2", scenario, device(), device())
    assert first.passed and first.established, first.describe()
    assert first.comparison.sampled >= 16  # at least the sampling target, whatever LoadGen's probability gives
    assert first.official() == {"verify_accuracy": "TEST PASS", "verify_performance": "TEST PASS"}
    assert first.performance_ratio == 1.0  # logging costs no device time on a simulated timeline
    for name in ("performance", "accuracy", "plain"):
        logs = [json.loads((tmp_path / run / name / "mlperf_log_accuracy.json").read_text())
                if (tmp_path / run / name / "mlperf_log_accuracy.json").exists() else None for run in ("1", "2")]
        assert logs[0] == logs[1]
    assert {k: v for k, v in first.details().items() if "log_dir" not in k} == \
        {k: v for k, v in second.details().items() if "log_dir" not in k}


def test_test01_on_virtual_time_fails_answers_that_differ_from_accuracy_mode(tmp_path):
    result = run01(tmp_path, "SingleStream", device(shift=1), device())
    assert not result.passed and result.comparison.mismatched, result.describe()
    # float32 answers 1.0, 2.0, ... begin with the same (zero) byte: MLPerf's script, which compares the first byte,
    # passes them; the suite's byte check does not
    assert result.official_accuracy == "TEST PASS"


def test_test04_on_virtual_time_fails_a_caching_device(tmp_path):
    class Caching(ServiceTimeDevice):
        """Answers the sample it answered last at once."""

        last = None

        def service_time(self, indices):
            repeated, self.last = list(indices) == [self.last], indices[-1]
            return (1e-5, 1e-5) if repeated else super().service_time(indices)

    config = load_audit_config()
    honest = test04.run_test04(device(), audit_settings("SingleStream"), tmp_path / "honest", config=config,
                               runner=simulate_scenario, warmup=False, max_batch=1, total_sample_count=SAMPLES)
    assert honest.passed and honest.official == "TEST PASS" and honest.ratio == 1.0, honest.describe()
    caching = Caching(lambda n: (0.0002 * n, 0.0002 * n), {})
    cached = test04.run_test04(caching, audit_settings("SingleStream"), tmp_path / "caching", config=config,
                               runner=simulate_scenario, warmup=False, max_batch=1, total_sample_count=SAMPLES)
    assert not cached.passed and cached.official.startswith("TEST FAIL") and cached.ratio > 10, cached.describe()
