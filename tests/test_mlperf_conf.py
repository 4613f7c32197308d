"""LoadGen's built-in mlperf.conf is where the runs' seeds and per-benchmark settings come from (TestSettings.FromConfig),
on the real LoadGen and on virtual time alike; profiles override only the run's length and counts."""

from __future__ import annotations

import pytest

from conformance.hardware import get_backend
from conformance.perf.harness import ScenarioSettings, mlperf_conf_settings
from conformance.perf.scenario_run import plan_target
from conformance.targets.performance import PerformanceTarget, load_performance_targets
from conformance.targets.profiles import load_profiles
from models import load_model

MLPERF_SEEDS = {"qsl": 2085463073848966840, "sample_index": 2747215439041700203, "schedule": 16159082839903944936}


def test_seeds_are_mlperf_confs_with_a_benchmark_and_loadgens_defaults_without():
    with_conf = ScenarioSettings("Server", mlperf_model="bert").seeds()
    assert (with_conf.qsl, with_conf.sample_index, with_conf.schedule) == tuple(MLPERF_SEEDS.values())
    plain = ScenarioSettings("Server").seeds()
    assert (plain.qsl, plain.sample_index, plain.schedule) == (0, 0, 0)


@pytest.mark.parametrize("model", sorted(load_performance_targets().models))
def test_the_server_bound_of_each_model_is_mlperf_confs(model):
    run = load_performance_targets().models[model]
    conf = mlperf_conf_settings(run.mlperf_model, "Server")
    assert run.server_latency_ms * 1e6 == conf.server_target_latency_ns


def test_profile_values_override_mlperf_conf_in_what_loadgen_is_given():
    s = ScenarioSettings("Offline", min_duration_ms=300, min_query_count=1, mlperf_model="resnet50").loadgen_settings()
    assert (s.min_duration_ms, s.min_query_count, s.schedule_rng_seed) == (300, 1, MLPERF_SEEDS["schedule"])


def test_unknown_benchmark_or_mode_is_refused():
    with pytest.raises(ValueError, match="unknown mlperf.conf benchmark 'gpt9'.*resnet50, bert, dlrm-v2, rnnt"):
        ScenarioSettings("Offline", mlperf_model="gpt9")
    with pytest.raises(ValueError, match="test mode 'Fast'"):
        ScenarioSettings("Offline", mode="Fast")


@pytest.mark.parametrize("profile, expected", [("smoke", 1), ("full", 24576)])
def test_offline_holds_mlperf_confs_minimum_sample_count_at_mlperfs_length(profile, expected):
    target = PerformanceTarget("resnet50", "null", "fp32", "Offline", 1.0)
    plan = plan_target(target, profile, get_backend("null"), load_model("resnet50"))
    assert plan.settings.min_query_count == expected
    assert plan.settings.mlperf_model == "resnet50"
    length = load_profiles()[profile].performance
    assert plan.settings.min_duration_ms == length.min_duration_ms
