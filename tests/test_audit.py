"""The compliance audits (conformance/perf/test01.py, test04.py) against fake devices under the real LoadGen: honest
systems pass, a system that caches results fails TEST04, one whose performance-mode answers differ from its accuracy-mode answers
fails TEST01 (unless the difference is within MLPerf's accuracy-delta rule)."""

from __future__ import annotations

import json
from pathlib import Path

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest

import models
from conformance.accuracy import metrics
from conformance.hardware.devices import Samples, ServiceTimeDevice, Workload, response_bytes
from conformance.perf import audits, test01, test04, verification
from conformance.perf.harness import ScenarioResult, ScenarioSettings, run_scenario
from conformance.targets import audit as audit_targets
from conformance.targets.performance import PerformanceTarget
from conformance.targets.profiles import load_profiles
from models import load_model
from models.ops import Ops

SAMPLES = 8  # QSL samples loaded
CLASSES = 10
PER_SAMPLE_S = 0.008  # device time per sample: long against thread wake-up jitter (~0.1-30 ms on a loaded 2-core host)
FIXED_S = 0.002  # per batch
TEST04_QUERIES = 128  # SingleStream: early stopping discards some (of 64 queries it discards none: estimate = max)


def service(units: int) -> tuple[float, float]:
    busy = FIXED_S + PER_SAMPLE_S * units
    return busy, busy


def answers(seed: int = 0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i: rng.standard_normal(CLASSES).astype(np.float32) for i in range(SAMPLES)}


class HonestDevice(ServiceTimeDevice):
    """Computes every sample it is given: time grows with the batch, whatever the samples."""

    def __init__(self, responses=None):
        super().__init__(service, responses if responses is not None else answers())


class CachingDevice(HonestDevice):
    """Remembers the answer of the last sample it computed and computes each distinct sample of a batch once: a batch
    costs only the samples that are not that one (a repeated sample comes back at once)."""

    def __init__(self):
        super().__init__()
        self.last: int | None = None

    def service_time(self, indices):
        fresh = set(indices) - {self.last}
        self.last = indices[-1]
        return service(len(fresh)) if fresh else (1e-5, 1e-5)


def settings(scenario: str, queries: int = 64) -> ScenarioSettings:
    if scenario == "SingleStream":
        return ScenarioSettings("SingleStream", min_duration_ms=150, min_query_count=queries,
                                performance_sample_count=SAMPLES,
                                expected_latency_s=FIXED_S + PER_SAMPLE_S)
    capacity = 8 / (FIXED_S + 8 * PER_SAMPLE_S)
    return ScenarioSettings("Offline", min_duration_ms=300, performance_sample_count=SAMPLES, target_qps=capacity)


RUN = {"max_batch": 8, "total_sample_count": SAMPLES}


def labels(responses: dict[int, np.ndarray]) -> dict[int, int]:
    return {i: int(np.argmax(r)) for i, r in responses.items()}


def top1(truth: dict[int, int]):
    """A task metric on raw responses: top-1 accuracy against ``truth``."""
    def score(entries):
        return {"top1": float(np.mean([np.argmax(np.frombuffer(d, np.float32)) == truth[i] for i, d in entries]))}
    return score


def run01(tmp_path, scenario, device, accuracy_device, score=None):
    config = audit_targets.load_audit_config()
    return test01.run_test01(device, settings(scenario), tmp_path, sampling_target=32, rng_seed=config.accuracy_log_rng_seed,
                            tolerance=config.accuracy_delta, score=score, accuracy_device=accuracy_device,
                            compare_performance=False, **RUN)  # the performance half: tested on set results below


# -- TEST04 -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["Offline", "SingleStream"])
def test_test04_passes_an_honest_device(tmp_path, scenario):
    result = test04.run_test04(HonestDevice(), settings(scenario, TEST04_QUERIES), tmp_path,
                              config=audit_targets.load_audit_config(), **RUN)
    assert result.passed, result.describe()
    assert 0.8 < result.ratio <= result.limit, result.describe()
    assert (tmp_path / "same_sample" / "mlperf_log_summary.txt").is_file()
    detail = (tmp_path / "same_sample" / "mlperf_log_detail.txt").read_text()
    assert '"key": "effective_performance_issue_same", "value": true' in detail


@pytest.mark.parametrize("scenario", ["Offline", "SingleStream"])
def test_test04_fails_a_caching_device(tmp_path, scenario):
    result = test04.run_test04(CachingDevice(), settings(scenario, TEST04_QUERIES), tmp_path,
                              config=audit_targets.load_audit_config(), **RUN)
    assert not result.passed and result.ratio > result.limit, result.describe()
    assert len(result.earlier_ratios) == audit_targets.load_audit_config().remeasure  # failed every pair
    assert all(r > result.limit for r in result.earlier_ratios)
    assert "TEST04" in result.describe() and "verify_performance.py: TEST" in result.describe()


def scripted_runner(scores: dict[str, list[float]], calls: list):
    """A runner of Offline runs whose samples/s come, in turn, from ``scores["reference"]`` and
    ``scores["same_sample"]``; ``calls`` collects each run's log directory relative to the audit's."""
    def run(device, settings, log_dir, **_):
        kind = "reference" if settings.issue_same_index is None else "same_sample"
        calls.append(f"{log_dir.parent.name}/{kind}")
        score = scores[kind].pop(0)
        return ScenarioResult("Offline", True, "samples/s", score, "samples/s", {}, "", False, str(log_dir),
                              query_count=1, details={"result_samples_per_second": score})
    return run


def test_test04_judges_remeasured_pairs_on_the_fastest_run_of_each_kind(tmp_path):
    """A host that slows one reference run down makes one pair look like caching; the pairs measured again, in
    alternating order, are judged on the fastest run of each kind, which load cannot make faster."""
    calls = []
    runner = scripted_runner({"reference": [8.0, 9.5, 10.0, 10.0], "same_sample": [10.0, 10.5, 9.0, 9.0]}, calls)
    result = test04.run_test04(HonestDevice(), settings("Offline"), tmp_path, config=audit_targets.load_audit_config(),
                               runner=runner, warmup=False)
    assert result.passed and result.ratio == pytest.approx(10.5 / 10.0), result.describe()
    assert result.earlier_ratios == [pytest.approx(1.25), pytest.approx(10.5 / 9.5)] and result.runs_each == 3
    assert calls == [f"{tmp_path.name}/reference", f"{tmp_path.name}/same_sample", "remeasure-1/same_sample",
                     "remeasure-1/reference", "remeasure-2/reference", "remeasure-2/same_sample"]
    assert "the fastest of 3 runs of each kind" in result.describe()


def test_test04_a_cache_is_faster_in_every_pair(tmp_path):
    calls = []
    runner = scripted_runner({"reference": [8.0, 10.0, 9.0, 9.5], "same_sample": [12.0, 11.5, 13.0, 12.5]}, calls)
    config = audit_targets.load_audit_config()
    result = test04.run_test04(HonestDevice(), settings("Offline"), tmp_path, config=config, runner=runner,
                               warmup=False)
    assert not result.passed and result.ratio == pytest.approx(13.0 / 10.0), result.describe()
    assert result.runs_each == 1 + config.remeasure == len(calls) // 2


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(slowdowns=st.lists(st.floats(0.0, 3.0), min_size=8, max_size=8),
                  clean=st.tuples(st.integers(0, 3), st.integers(0, 3)))
def test_test04_passes_an_honest_device_with_one_undisturbed_run_of_each_kind(tmp_path_factory, slowdowns, clean):
    """Host load only slows runs down: however the pairs are disturbed, an honest device (10 samples/s whatever it
    serves) passes as long as one run of each kind among the pairs measured ran undisturbed."""
    slowdowns = list(slowdowns)
    slowdowns[2 * clean[0]] = slowdowns[2 * clean[1] + 1] = 0.0  # one reference, one same-sample run undisturbed
    scores = {"reference": [10.0 / (1 + d) for d in slowdowns[0::2]],
              "same_sample": [10.0 / (1 + d) for d in slowdowns[1::2]]}
    result = test04.run_test04(HonestDevice(), settings("Offline"), tmp_path_factory.mktemp("t04"),
                               config=audit_targets.load_audit_config(), runner=scripted_runner(scores, []),
                               warmup=False)
    assert result.passed, result.describe()


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(shares=st.lists(st.floats(0.0, 1.0), min_size=8, max_size=8), speedup=st.floats(1.25, 100.0))
def test_test04_fails_a_cache_that_load_does_not_hide(tmp_path_factory, shares, speedup):
    """A device that serves the repeated sample ``speedup`` times faster fails in every pair, however load slows its
    runs, while no slowdown of a same-sample run eats its whole lead over the bound (a run slowed that much looks
    honest: one pair within the bound passes, as in MLPerf)."""
    config = audit_targets.load_audit_config()
    most = speedup / config.max_speedup - 1  # a same-sample run slowed by more looks honest
    slowdowns = [share * most * 0.999 for share in shares]
    scores = {"reference": [10.0 / (1 + d) for d in slowdowns[0::2]],
              "same_sample": [10.0 * speedup / (1 + d) for d in slowdowns[1::2]]}
    calls = []
    result = test04.run_test04(HonestDevice(), settings("Offline"), tmp_path_factory.mktemp("t04"), config=config,
                               runner=scripted_runner(scores, calls), warmup=False)
    assert not result.passed and result.ratio >= config.max_speedup, result.describe()
    assert len(calls) == 2 * (1 + config.remeasure)


def test_test04_issues_one_loaded_sample_only(tmp_path):
    seen = []

    class Recording(HonestDevice):
        def start_batch(self, indices, formed_at):
            seen.append(list(indices))
            return super().start_batch(indices, formed_at)

    device = Recording()
    s = audits.AuditSettings.from_settings(settings("SingleStream"), issue_same_index=3)
    run_scenario(device, s, tmp_path, **RUN)
    assert len({i for batch in seen for i in batch}) == 1 and len(seen) >= 64


def test_test04_bounds_follow_mlperf_verify_performance():
    config = audit_targets.load_audit_config()
    assert config.speedup_limit("Offline", 1e6) == config.max_speedup == 1.10
    assert config.speedup_limit("SingleStream", 1e9 / 1e6) == config.short_latency_max_speedup == 1.20  # 1 ms latency
    assert config.speedup_limit("SingleStream", 1e9 / 1e3) == 1.10  # 1 us latency: the strict bound


# -- TEST01 -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["Offline", "SingleStream"])
def test_test01_passes_an_honest_device(tmp_path, scenario):
    result = run01(tmp_path, scenario, HonestDevice(), HonestDevice())
    assert result.passed and result.value == 1.0, result.describe()
    assert result.comparison.sampled > 0 and result.fallback is None
    assert result.accuracy.completed == SAMPLES  # accuracy mode answers every sample once
    logged = json.loads((tmp_path / "performance" / "mlperf_log_accuracy.json").read_text())
    assert len(logged) == result.comparison.sampled


@pytest.mark.parametrize("scenario", ["Offline", "SingleStream"])
def test_test01_fails_when_performance_mode_answers_differ(tmp_path, scenario):
    truth = answers()
    shifted = {i: truth[(i + 1) % SAMPLES] for i in truth}  # performance mode answers the neighbouring sample
    result = run01(tmp_path, scenario, HonestDevice(shifted), HonestDevice(truth), score=top1(labels(truth)))
    assert not result.passed, result.describe()
    assert result.value == 0.0 and result.comparison.mismatched
    assert result.fallback is not None and not result.fallback.passed  # and the task metric drops: no excuse
    assert "differing qsl_idx" in result.describe()


def test_test01_fallback_accepts_nondeterminism_within_the_accuracy_delta(tmp_path):
    truth = answers()
    jittered = {i: r + np.float32(1e-5) for i, r in truth.items()}  # other bytes, the same top-1 answers
    result = run01(tmp_path, "Offline", HonestDevice(jittered), HonestDevice(truth), score=top1(labels(truth)))
    assert result.value == 0.0 and result.fallback.passed and result.passed, result.describe()
    assert result.fallback.metrics["top1"]["relative_delta"] == 0.0
    assert result.units.endswith(": met")


def test_test01_without_a_task_metric_fails_on_differing_bytes(tmp_path):
    truth = answers()
    jittered = {i: r + np.float32(1e-5) for i, r in truth.items()}
    result = run01(tmp_path, "Offline", HonestDevice(jittered), HonestDevice(truth), score=None)
    assert not result.passed and "no task metric" in result.describe()


def test_test01_fails_when_nothing_was_sampled(tmp_path):
    config = audit_targets.load_audit_config()
    result = test01.run_test01(HonestDevice(), settings("Offline"), tmp_path, sampling_target=0, rng_seed=0,
                              tolerance=config.accuracy_delta, accuracy_device=HonestDevice(), **RUN)
    assert result.comparison.sampled == 0 and not result.passed
    assert "nothing was audited" in result.describe()


class SlowRunsDevice(HonestDevice):
    """An honest device three times slower in the LoadGen runs numbered in ``slow`` (1 = its first run): a cold
    start, or logging that costs it time."""

    def __init__(self, slow):
        super().__init__()
        self.slow, self.runs = set(slow), 0

    def load(self, indices):
        self.runs += 1

    def service_time(self, indices):
        busy, latency = service(len(indices))
        return (3 * busy, 3 * latency) if self.runs in self.slow else (busy, latency)


def run01_timed(tmp_path, device, warmup=False):
    config = audit_targets.load_audit_config()
    return test01.run_test01(device, settings("Offline"), tmp_path, sampling_target=32,
                             rng_seed=config.accuracy_log_rng_seed, tolerance=config.accuracy_delta,
                             accuracy_device=HonestDevice(), warmup=warmup, **RUN)


def test_test01_measures_a_pair_outside_its_tolerance_again(tmp_path):
    result = run01_timed(tmp_path, SlowRunsDevice(slow={1}))  # the logged run of the first pair is slow
    assert result.passed and result.official_performance == verification.TEST_PASS, result.describe()
    assert len(result.earlier_ratios) == 1 and result.earlier_ratios[0] < 0.5, result.earlier_ratios
    assert "measured again" in result.describe() and result.runs_each == 2
    assert (tmp_path / "remeasure-1" / "performance" / "mlperf_log_accuracy.json").is_file()
    assert result.details()["earlier_ratios"] == result.earlier_ratios


def test_test01_on_the_hosts_clock_warms_up_before_the_logged_run(tmp_path):
    result = run01_timed(tmp_path, SlowRunsDevice(slow={1}), warmup=True)  # the warm-up run takes the cold start
    assert result.passed and result.earlier_ratios == [], result.describe()
    assert (tmp_path / "warmup" / "mlperf_log_summary.txt").is_file()
    assert not (tmp_path / "remeasure-1").exists()


def test_test01_fails_a_device_slower_in_every_logged_run(tmp_path):
    # runs: logged, plain; then plain, logged; logged, plain; plain, logged (the pairs measured again alternate)
    result = run01_timed(tmp_path, SlowRunsDevice(slow={1, 4, 5, 8}))
    assert not result.passed and result.official_performance.startswith("TEST FAIL"), result.describe()
    assert len(result.earlier_ratios) == audit_targets.load_audit_config().test01_remeasure
    assert result.performance_ratio < 0.5 and result.runs_each == 4
    assert result.comparison.all_match  # the accuracy half holds: it is the performance half that fails


class ScriptedSpeedDevice(HonestDevice):
    """An honest device whose LoadGen run number i (1 = its first) takes ``factors[i - 1]`` times its service time:
    a host whose load comes and goes."""

    def __init__(self, factors):
        super().__init__()
        self.factors, self.runs = list(factors), 0

    def load(self, indices):
        self.runs += 1

    def service_time(self, indices):
        busy, latency = service(len(indices))
        factor = self.factors[self.runs - 1]
        return factor * busy, factor * latency


def test_test01_on_a_host_whose_runs_spread_beyond_the_tolerance_is_not_established(tmp_path):
    """Every logged run slower than the fastest plain one, but the plain runs themselves spread by 25% and a logged run
    lies within the tolerance of a plain one: the host's noise, not the logging, may explain it (PASS*, saying so)."""
    # runs: logged, plain; plain, logged; logged, plain; plain, logged
    result = run01_timed(tmp_path, ScriptedSpeedDevice([1.34, 1.0, 1.0, 1.49, 1.54, 1.25, 1.0, 1.55]))
    assert result.official_performance.startswith("TEST FAIL") and result.performance_ratio < 0.9, result.describe()
    assert result.passed and not result.established and result.runs_each == 4, result.describe()
    assert "not established: host-bound: the runs of one kind spread" in result.describe()
    details = result.details()
    assert len(details["logged_scores"]) == len(details["plain_scores"]) == 4
    assert details["host_noise"].startswith("host-bound") and result.verdict_value == 1.0


def test_test01_on_a_host_that_measures_consistently_a_slower_logged_run_fails(tmp_path):
    """The same gap with each kind's runs within the tolerance of each other: the logging costs the time."""
    result = run01_timed(tmp_path, ScriptedSpeedDevice([1.4, 1.0, 1.02, 1.42, 1.4, 1.01, 1.0, 1.41]))
    assert not result.passed and result.established and result.host_noise == "", result.describe()


def test_host_noise_names_a_spread_only_where_a_pair_of_runs_meets_the_bound():
    def runs(*scores):
        return [ScenarioResult("Offline", True, "samples/s", v, "samples/s", {}, "", False, "", query_count=1,
                               details={"result_samples_per_second": v}) for v in scores]

    def score(run):
        return run.value

    def within(a, b):
        return 0.9 * b <= a <= 1.1 * b

    assert audits.host_noise(runs(1.81, 1.63, 1.57, 1.57), runs(2.42, 2.43, 2.01, 2.44), score, within, 0.1).startswith(
        "host-bound: the runs of one kind spread 21.4% on this host, more than the 10% the bound tells apart, and 1 "
        "of 16 pairs of runs meet it")
    assert audits.host_noise(runs(1.5, 1.55), runs(2.4, 2.0), score, within, 0.1) == ""  # no pair meets the bound
    assert audits.host_noise(runs(1.5, 1.55), runs(1.72, 1.8), score, within, 0.1) == ""  # each kind consistent
    assert audits.host_noise(runs(1.5), runs(1.8), score, within, 0.1) == ""  # one pair: nothing to tell noise by


def test_test04_on_a_host_whose_runs_spread_beyond_the_bound_is_not_established(tmp_path):
    calls = []
    runner = scripted_runner({"reference": [10.0, 7.0, 10.0, 8.0], "same_sample": [12.0, 9.0, 12.0, 12.0]}, calls)
    result = test04.run_test04(HonestDevice(), settings("Offline"), tmp_path, config=audit_targets.load_audit_config(),
                               runner=runner, warmup=False)
    assert result.official.startswith("TEST FAIL") and result.ratio == pytest.approx(1.2), result.describe()
    assert result.passed and not result.established and result.runs_each == 4, result.describe()
    assert result.gated_ratio == pytest.approx(0.9)  # the pair nearest the bound: 9 against 10
    assert "not established: host-bound" in result.describe()
    assert result.details()["reference_scores"] == [10.0, 7.0, 10.0, 8.0]


def test_test01_a_wrong_answer_in_a_logged_run_measured_again_fails_at_once(tmp_path):
    """The first pair is outside the tolerance (its logged run slow), and the logged run measured again answers
    the neighbouring sample: the audit fails on that run's answers, and measures nothing more."""
    truth = answers()

    class WrongLater(SlowRunsDevice):
        def load(self, indices):
            super().load(indices)
            if self.runs > 2:
                self.responses = {i: truth[(i + 1) % SAMPLES] for i in truth}

    result = run01_timed(tmp_path, WrongLater(slow={1}))
    assert not result.passed and not result.accuracy_passed and result.comparison.mismatched, result.describe()
    assert Path(result.performance.log_dir).parent.name == "remeasure-1"
    assert not (tmp_path / "remeasure-2").exists()


def test_fresh_device_recomputes():
    device = HonestDevice()
    twin = device.fresh()
    assert twin is not device and twin.responses == {} and len(device.responses) == SAMPLES


# -- pieces -------------------------------------------------------------------------------------------------------------
def entry(qsl_idx, data: bytes, seq=0):
    return test01.LoggedResponse(seq, qsl_idx, data)


def test_compare_responses_counts_matches_mismatches_and_missing():
    accuracy = [entry(0, b"\x01"), entry(1, b"\x02"), entry(2, b"\x03"), entry(2, b"\x04")]
    performance = [entry(0, b"\x01"), entry(0, b"\x01"), entry(1, b"\x09"), entry(5, b"\x01")]
    c = test01.compare_responses(performance, accuracy)
    assert (c.sampled, c.matching, c.mismatched, c.missing) == (4, 2, [1], [5])
    assert c.inconsistent_accuracy == [2] and c.fraction == 0.5 and not c.all_match
    assert test01.compare_responses([], accuracy).fraction == 0.0


def test_read_accuracy_log_decodes_loadgen_hex_and_rejects_bad_files(tmp_path):
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text('[\n{"seq_id" : 3, "qsl_idx" : 1, "data" : "0000803F"}\n]\n')
    assert test01.read_accuracy_log(log) == [entry(1, np.float32(1.0).tobytes(), seq=3)]
    with pytest.raises(test01.AccuracyLogError, match="no LoadGen accuracy log"):
        test01.read_accuracy_log(tmp_path / "absent.json")
    log.write_text('[{"seq_id": 0, "qsl_idx": 0, "data": "zz"}]')
    with pytest.raises(test01.AccuracyLogError, match="entry 0"):
        test01.read_accuracy_log(log)
    log.write_text('{"seq_id": 0}')
    with pytest.raises(test01.AccuracyLogError, match="expected a JSON list"):
        test01.read_accuracy_log(log)


def test_audit_settings_reach_loadgen():
    import mlperf_loadgen as lg

    base = settings("Offline")
    s = audits.AuditSettings.from_settings(base, mode="AccuracyOnly").loadgen_settings()
    assert s.mode == lg.TestMode.AccuracyOnly and s.offline_expected_qps == pytest.approx(base.target_qps)
    s = audits.AuditSettings.from_settings(base, accuracy_log_sampling_target=7, accuracy_log_rng_seed=5).loadgen_settings()
    assert (s.accuracy_log_sampling_target, s.accuracy_log_rng_seed, s.mode) == (7, 5, lg.TestMode.PerformanceOnly)
    with pytest.raises(ValueError, match="outside the 8 loaded samples"):
        audits.AuditSettings.from_settings(base, issue_same_index=SAMPLES).loadgen_settings()


def test_matrix_applies_scenarios_and_exemptions():
    config = audit_targets.load_audit_config()
    targets = [PerformanceTarget(m, "ipu", "fp16", s, 1.0) for m in ("resnet50", "bert-base")
               for s in ("SingleStream", "MultiStream", "Server", "Offline")]
    cases, exempt = audits.audit_matrix(targets, config)
    ids = {c.test_id for c in cases}
    assert "resnet50-fp16-Offline-TEST01" in ids and "resnet50-fp16-SingleStream-TEST04" in ids
    assert "bert-base-fp16-Offline-TEST01" in ids and "bert-base-fp16-Offline-TEST04" in exempt
    assert not any("Server" in i or "MultiStream" in i for i in ids | set(exempt))
    profiles = load_profiles()
    assert profiles["smoke"].audit.models_for(("resnet50", "bert-base")) == ("resnet50",)
    assert profiles["full"].audit.models_for(("resnet50", "bert-base")) == ("resnet50", "bert-base")


def test_audit_config_errors_name_the_file_and_key(tmp_path, edited_model_table):
    good = audit_targets.AUDIT_FILE.read_text()
    bad = tmp_path / "audit.toml"
    bad.write_text(good.replace('max_speedup = 1.10', 'max_speedup = 0.9'))
    with pytest.raises(audit_targets.AuditConfigError,
                       match=r"audit.toml:\d+: TEST04.max_speedup = 0.9: input should be greater than 1"):
        audit_targets.load_audit_config(bad)
    bad.write_text(good.replace('scenarios = ["Offline", "SingleStream"]', 'scenarios = ["Offline", "Streaming"]', 1))
    with pytest.raises(audit_targets.AuditConfigError, match=r"TEST01.scenarios\[1\] = \"Streaming\": input should be "
                       r"'SingleStream', 'MultiStream', 'Server' or 'Offline'"):
        audit_targets.load_audit_config(bad)
    # a model's exemption is in its own audit.toml, of its own name only, and only there
    bad.write_text(good + '\n[TEST04.exempt]\ntransformer = "variable lengths"\n')
    with pytest.raises(audit_targets.AuditConfigError, match="TEST04.exempt: unknown name 'transformer'"):
        audit_targets.load_audit_config(bad)
    bad.write_text(good + '\n[TEST04.exempt]\nconformer = "variable lengths"\n')
    own = models.model_spec("conformer").table("audit")
    with pytest.raises(audit_targets.AuditConfigError, match=rf"{own}:\d+: TEST04.exempt.conformer: the suite's "
                       r"audit.toml exempts model 'conformer' too"):
        audit_targets.load_audit_config(bad)
    copy = edited_model_table("conformer", "audit", "conformer = ", "widedeep = ")
    with pytest.raises(audit_targets.AuditConfigError, match=rf"{copy}:\d+: TEST04.exempt: unknown name 'widedeep'"):
        audit_targets.load_audit_config()


SMALL = {"resnet50": {"image_size": 32, "embedding_size": 8, "hidden_sizes": (16, 32), "depths": (1, 1), "num_labels": 10},
         "widedeep": {"hidden_sizes": (16,), "bucket_sizes": (50,) * 26}}


@pytest.mark.parametrize("name, rows", [("resnet50", 1), ("widedeep", 4)])
def test_task_scorer_decodes_the_responses_loadgen_receives(name, rows):
    model = load_model(name, seed=0, **SMALL[name])
    samples = Samples(model, Workload(name, 4, rows))
    inputs = samples.batch_inputs(range(4))
    outputs = model(inputs, Ops())
    responses = {i: response_bytes(outputs, i * rows, (i + 1) * rows).tobytes() for i in range(4)}
    score = test01.task_scorer(model, samples)
    exact = metrics.task_metrics(name, outputs, outputs, inputs)
    assert score([(i, responses[i]) for i in range(4)]) == exact and exact
    assert score([(i, responses[(i + 1) % 4]) for i in range(4)]) != exact
    with pytest.raises(ValueError, match="float32 values"):
        score([(0, responses[0][:-4])])


def test_test04_score_without_an_early_stopping_estimate_is_the_percentile(tmp_path):
    few = ScenarioSettings("SingleStream", min_duration_ms=0, min_query_count=8, performance_sample_count=SAMPLES,
                           expected_latency_s=1.0)  # 8 queries: too few for LoadGen's early stopping
    result = test04.run_test04(HonestDevice(), few, tmp_path, config=audit_targets.load_audit_config(), warmup=False, **RUN)
    assert "too few queries" in result.basis and result.ratio is not None, result.describe()
    p90_ns = result.reference.details["result_90.00_percentile_latency_ns"]
    assert result.reference_score == pytest.approx(1e9 / p90_ns)


def _run(scenario: str, value: float, valid: bool = True, length_only: bool = True) -> ScenarioResult:
    key = {"Offline": "result_samples_per_second", "SingleStream": "early_stopping_latency_ss",
           "MultiStream": "early_stopping_latency_ms", "Server": "result_completed_samples_per_sec"}[scenario]
    checks = {} if length_only else {"perf_constraints": False}
    return ScenarioResult(scenario, valid, "m", value, "u", checks, "", False, "/tmp/x", details={key: value})


@pytest.mark.parametrize("scenario, logged, plain, valid, passed, established", [
    ("Offline", 100.0, 100.0, True, True, True),
    ("Offline", 91.0, 100.0, True, True, True),
    ("Offline", 80.0, 100.0, True, False, True),  # logging costs 20% of the throughput
    ("SingleStream", 1.3e6, 1.0e6, True, False, True),  # 30% more latency with logging (1 ms: the 10% rule)
    ("SingleStream", 1.15e5, 1.0e5, True, True, True),  # 15% at 100 us: within the relaxed 20%
    ("SingleStream", 1.25e5, 1.0e5, True, False, True),
    ("MultiStream", 1.9e6, 1.6e6, True, True, True),  # 1.6 ms and below: 20%
    ("MultiStream", 1.9e6, 1.7e6, True, False, True),
    ("Offline", 80.0, 100.0, False, True, False),  # INVALID only for a short profile's length: not established
])
def test_test01_performance_half_follows_verify_performance(scenario, logged, plain, valid, passed, established):
    comparison = test01.compare_responses([test01.LoggedResponse(0, 1, b"x")], [test01.LoggedResponse(0, 1, b"x")])
    config = audit_targets.load_audit_config()
    result = test01.Test01Result(comparison, None, _run(scenario, logged, valid), _run(scenario, 1.0), 16,
                                 _run(scenario, plain, valid), config, verification.TEST_PASS)
    assert result.passed == passed and result.established == established, result.describe()
    assert result.verdict_value == (1.0 if passed else 0.0)
    assert "verify_performance.py: " in result.describe()
    expected = verification.TEST_PASS if valid and passed else "TEST FAIL"
    assert result.official()["verify_performance"].startswith(expected)


def test_test01_fails_when_a_run_is_invalid_for_a_missed_constraint():
    comparison = test01.compare_responses([test01.LoggedResponse(0, 1, b"x")], [test01.LoggedResponse(0, 1, b"x")])
    invalid = _run("Offline", 100.0, valid=False, length_only=False)
    result = test01.Test01Result(comparison, None, invalid, _run("Offline", 1.0), 16, _run("Offline", 100.0),
                                 audit_targets.load_audit_config(), verification.TEST_PASS)
    assert not result.passed and result.established
    assert result.official()["verify_performance"] == "TEST FAIL: Invalid results"


@pytest.mark.parametrize("reference_valid, test_valid, ratio, official, passed", [
    (True, True, 1.0, "TEST PASS", True),
    (True, True, 1.2, "TEST FAIL", False),
    (False, True, 1.0, "TEST FAIL: Reference results are invalid", True),  # short profile: not established
    (True, False, 1.0, "TEST FAIL: Test results are invalid", True),
])
def test_test04_verdict_follows_verify_performance(reference_valid, test_valid, ratio, official, passed):
    reference, same = _run("Offline", 100.0, reference_valid), _run("Offline", 100.0 * ratio, test_valid)
    config = audit_targets.load_audit_config()
    result = test04.Test04Result(reference, same, 100.0, 100.0 * ratio, 1.1, 0, "samples/s", config=config)
    assert result.official == official and result.passed == passed
    assert result.established == (reference_valid and test_valid or ratio > 1.1)


def test_test04_invalid_reference_for_a_missed_constraint_fails():
    reference = _run("Offline", 100.0, valid=False, length_only=False)
    result = test04.Test04Result(reference, _run("Offline", 100.0), 100.0, 100.0, 1.1, 0, "samples/s",
                                 config=audit_targets.load_audit_config())
    assert result.official == "TEST FAIL: Reference results are invalid"
    assert not result.passed and result.gated_ratio is None


def _entries(pairs):
    return [test01.LoggedResponse(i, idx, data) for i, (idx, data) in enumerate(pairs)]


@pytest.mark.parametrize("performance, accuracy, verdict", [
    ([(1, b"\x01\x02")], [(1, b"\x01\x02")], "TEST PASS"),
    ([(1, b"\x01\x09")], [(1, b"\x01\x02")], "TEST PASS"),  # the script compares the first byte only
    ([(1, b"\x07\x02")], [(1, b"\x01\x02")], "TEST FAIL"),
    ([(5, b"\x01")], [(1, b"\x01")], "TEST FAIL"),  # no sampled response has a counterpart
    ([(1, b"")], [(1, b"\x01")], "TEST FAIL"),  # an empty response against a non-empty one
    ([(1, b"")], [(1, b"")], "TEST PASS"),
    ([(1, b"\x01"), (5, b"\x02")], [(1, b"\x01")], "TEST PASS"),  # a missing sample does not fail the script
])
def test_verify_accuracy_is_the_scripts_rule(performance, accuracy, verdict):
    assert verification.verify_accuracy(_entries(performance), _entries(accuracy)) == verdict


def test_test01_byte_check_is_stricter_than_the_script(tmp_path):
    truth = answers()
    tail = {i: np.concatenate([r[:1], r[1:] + np.float32(1.0)]) for i, r in truth.items()}  # same first element
    result = run01(tmp_path, "Offline", HonestDevice(tail), HonestDevice(truth), score=None)
    assert result.official_accuracy == "TEST PASS" and not result.passed, result.describe()
