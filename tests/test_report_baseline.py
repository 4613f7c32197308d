"""``--baseline``: tolerances as data, an injected regression caught, an identical run passing, unusable baselines refused."""

from __future__ import annotations

import copy
import json
import re

import pytest

from conformance.report import baseline
from conformance.report.collect import assign_ids
from conformance.targets import regression
from tests.sample_results import sample_results
from tests.test_bad_inputs import HARDWARE_CHOICES
from tests.test_report_plugin import set_values, suite  # noqa: F401  (a small suite of the plugin, its fixture)


@pytest.fixture
def sample() -> dict:
    return sample_results()


@pytest.fixture
def tolerances() -> dict:
    return regression.load_tolerances()


def find(records, record_id):
    return next(r for r in records if r["id"] == record_id)


def test_identical_run_has_no_regression(sample, tolerances):
    assert baseline.compare(sample["records"], copy.deepcopy(sample["records"]), tolerances, "ipu") == []


@pytest.mark.parametrize(
    "record_id, factor",
    [
        ("accuracy/bert-base/fp8/-/f1@0.99xfp32", 0.99),  # accuracy drop (>= check goes down)
        ("performance/resnet50/fp8/Offline/samples_per_second", 0.90),  # throughput drop
        ("performance/resnet50/fp8/Server/p99_latency_ms_at_target_qps", 1.10),  # latency rise (<= check goes up)
    ],
)
def test_injected_regression_is_listed(sample, tolerances, record_id, factor):
    current = copy.deepcopy(sample["records"])
    find(current, record_id)["value"] *= factor
    found = baseline.compare(current, sample["records"], tolerances, "ipu")
    assert [r.id for r in found] == [record_id]
    assert record_id in found[0].message and ("dropped" in found[0].message or "rose" in found[0].message)


def strip_timing(records):
    """The records as a results file written before performance records said how they were obtained."""
    for record in records:
        for key in ("timing", "timing_model", "clock"):
            record["details"].pop(key, None)
    return records


def set_timing(records, timing, clock):
    for record in records:
        if record["kind"] in ("performance", "audit"):
            record["details"].update(timing=timing, clock=clock)
    return records


def test_changes_within_tolerance_and_improvements_pass(sample, tolerances):
    strip_timing(sample["records"])
    current = copy.deepcopy(sample["records"])
    perf = tolerances["performance"]["rel"]
    find(current, "performance/resnet50/fp8/Offline/samples_per_second")["value"] *= 1 - perf / 2
    find(current, SERVER_LATENCY)["value"] *= 0.5  # faster is never a regression
    find(current, "accuracy/bert-base/fp8/-/f1@0.99xfp32")["value"] *= 1.01
    assert baseline.compare(current, sample["records"], tolerances, "ipu") == []


OFFLINE = "performance/resnet50/fp8/Offline/samples_per_second"
SERVER_LATENCY = "performance/resnet50/fp8/Server/p99_latency_ms_at_target_qps"


@pytest.mark.parametrize("record_id, factor", [(OFFLINE, 0.999), (SERVER_LATENCY, 1.001)])
def test_simulated_figure_is_exact_measured_keeps_its_tolerance(sample, tolerances, record_id, factor):
    """0.1% worse: a regression for a simulated figure on virtual time, within the tolerance of a measured one."""
    simulated = set_timing(copy.deepcopy(sample["records"]), "simulated", "virtual")
    current = copy.deepcopy(simulated)
    find(current, record_id)["value"] *= factor
    [found] = baseline.compare(current, simulated, tolerances, "ipu")
    assert found.id == record_id and "[performance.timing.simulated]" in found.message
    assert found.allowed == pytest.approx(1e-9 * abs(find(simulated, record_id)["value"]))

    for hardware in ("cpu", "null"):
        measured = set_timing(copy.deepcopy(sample["records"]), "measured", "real")
        current = copy.deepcopy(measured)
        find(current, record_id)["value"] *= factor
        assert baseline.compare(current, measured, tolerances, hardware) == []
        find(current, record_id)["value"] = find(measured, record_id)["value"] * (0.3 if factor < 1 else 3)
        assert [r.id for r in baseline.compare(current, measured, tolerances, hardware)] == [record_id]


def test_float_noise_of_a_simulated_figure_passes(sample, tolerances):
    simulated = set_timing(copy.deepcopy(sample["records"]), "simulated", "virtual")
    current = copy.deepcopy(simulated)
    find(current, OFFLINE)["value"] *= 1 - 1e-12
    assert baseline.compare(current, simulated, tolerances, "ipu") == []


@pytest.mark.parametrize("old_timing, old_clock", [(None, None), ("simulated", "real"), ("measured", "real")])
def test_exact_rule_needs_simulated_virtual_figures_on_both_sides(sample, tolerances, old_timing, old_clock):
    """A baseline written before records said how they were obtained, or obtained another way (a real-clock
    cross-check), is compared with the tolerance of the kind and hardware (5% for ipu performance)."""
    old = copy.deepcopy(sample["records"])
    if old_timing is None:
        strip_timing(old)
    else:
        set_timing(old, old_timing, old_clock)
    current = set_timing(copy.deepcopy(sample["records"]), "simulated", "virtual")
    find(current, OFFLINE)["value"] *= 0.99
    assert baseline.compare(current, old, tolerances, "ipu") == []
    both_real = set_timing(copy.deepcopy(sample["records"]), "simulated", "real")
    current = copy.deepcopy(both_real)
    find(current, OFFLINE)["value"] *= 0.99
    assert baseline.compare(current, both_real, tolerances, "ipu") == []


def test_per_test_comparison_matches_the_runs_ids(sample, tolerances):
    """compare_test gets one test's records without ids, as record_check made them; repeated ids line up by test."""
    records = [{k: v for k, v in r.items() if k not in ("id", "outcome")} for r in sample["records"]
               if r["test_id"].endswith("test_performance[resnet50-fp8-Server]")]
    assert len(records) == 2
    assert baseline.compare_test(records, sample["records"], tolerances, "ipu") == []
    worse = copy.deepcopy(records)
    next(r for r in worse if r["check"] == "p99_latency_ms_at_target_qps")["value"] *= 1.001
    [found] = baseline.compare_test(worse, sample["records"], tolerances, "ipu")
    assert found.id == SERVER_LATENCY and found.test_id == records[0]["test_id"]

    # the same check recorded by two tests: each is matched with its own test's baseline record
    twice = copy.deepcopy(sample["records"])
    other = {**copy.deepcopy(find(twice, SERVER_LATENCY)), "test_id": "a/test_first.py::test_other", "value": 1.0}
    twice = assign_ids([{k: v for k, v in r.items() if k != "id"} for r in twice + [other]])
    assert {r["id"] for r in twice} >= {SERVER_LATENCY, SERVER_LATENCY + "#2"}
    assert baseline.compare_test(records, twice, tolerances, "ipu") == []
    [found] = baseline.compare_test(worse, twice, tolerances, "ipu")
    assert found.id == SERVER_LATENCY + "#2"  # the other test sorts first and holds the plain id
    assert found.baseline == find(sample["records"], SERVER_LATENCY)["value"]


def test_informational_and_missing_records_are_not_compared(sample, tolerances):
    current = copy.deepcopy(sample["records"])
    find(current, "accuracy/bert-base/fp8/-/f1@0.999xfp32")["value"] *= 0.5  # gating False
    current = [r for r in current if r["id"] != "accuracy/bert-base/fp16/-/f1@0.99xfp32"]  # e.g. another shard
    assert baseline.compare(current, sample["records"], tolerances, "ipu") == []


def test_lost_measurement_is_a_regression(sample, tolerances):
    current = copy.deepcopy(sample["records"])
    find(current, "performance/resnet50/fp8/Offline/samples_per_second")["value"] = None
    [found] = baseline.compare(current, sample["records"], tolerances, "ipu")
    assert "no value this run" in found.message


def test_tolerance_overrides(tolerances):
    snr = regression.tolerance_for(tolerances, "accuracy", "snr_db", "ipu")
    assert snr.allowed(30.0) == tolerances["accuracy"]["checks"]["snr_db"]["abs"]
    cpu = regression.tolerance_for(tolerances, "performance", "samples_per_second", "cpu")
    assert cpu.rel == tolerances["performance"]["hardware"]["cpu"]["rel"]
    assert regression.tolerance_for(tolerances, "reference", "max_rel_error", "cpu") is None
    performance = tolerances["performance"]
    simulated = regression.tolerance_for(tolerances, "performance", "samples_per_second", "ipu", "simulated", "virtual")
    assert (simulated.rel, simulated.abs) == (performance["timing"]["simulated"]["rel"], 0.0) and simulated.rel <= 1e-9
    assert simulated.source == "[performance], [performance.timing.simulated]"
    measured = regression.tolerance_for(tolerances, "performance", "samples_per_second", "cpu", "measured", "real")
    assert measured.rel == performance["hardware"]["cpu"]["rel"]  # measured figures keep their tolerance
    cross_check = regression.tolerance_for(tolerances, "performance", "samples_per_second", "ipu", "simulated", "real")
    assert cross_check.rel == performance["timing"]["simulated"]["clock"]["real"]["rel"] == performance["rel"]
    assert cross_check.source.endswith("[performance.timing.simulated.clock.real]")


@pytest.mark.parametrize(
    "text, message",
    [
        ("[accuracy]\nrel = -1\n", r"2: accuracy.rel = -1: input should be greater than or equal to 0"),
        ("[performance]\nrel = 0.05\n[performance.timing.simulted]\nrel = 0.0\n",
         r"3: performance.timing: unknown name 'simulted': input should be 'measured' or 'simulated'"),
        ("[performance]\nrel = 0.05\n[performance.timing]\nsimulated = 1\n",
         r"4: performance.timing.simulated = 1: expected a table"),
        ("[performance]\nrel = 0.05\n[performance.timing.simulated.clock.real]\nrel = true\n",
         r"4: performance.timing.simulated.clock.real.rel = true: input should be a valid number"),
        ("[performance]\nrel = 0.05\n[performance.hardware.tpu]\nrel = 0.1\n",
         r"3: performance.hardware: unknown name 'tpu': input should be " + re.escape(HARDWARE_CHOICES)),
        ("[performance]\nrel = 0.05\nabsolute = 0.1\n",
         r"3: performance: unknown key 'absolute'; allowed keys: rel, abs, checks, hardware, timing"),
        ("[perf]\nrel = 0.05\n", r"1: unknown key 'perf'; allowed keys: reference, accuracy, performance, audit"),
    ],
)
def test_bad_tolerance_entries_are_named(tmp_path, text, message):
    path = tmp_path / "regression.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"regression.toml:" + message):
        regression.load_tolerances(path)


def test_bad_tolerance_file_is_named(tmp_path):
    path = tmp_path / "regression.toml"
    path.write_text("[accuracy]\nrel = -1\n")
    with pytest.raises(ValueError, match=r"regression.toml:2: accuracy.rel = -1: input should be greater than or equal"):
        regression.load_tolerances(path)


def run_like(sample: dict, **settings) -> dict:
    """A run's results record before any test (what the session compares the baseline with): the sample's settings,
    with ``settings`` changed."""
    run = copy.deepcopy(sample)
    run.update(tests=[], records=[], regressions=[], verdict="PASS", exit_status=0)
    run["settings"].update(settings)
    return run


def test_baseline_from_other_hardware_or_profile_is_refused(sample, tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(sample))
    assert baseline.load_baseline(path, run_like(sample))["settings"]["hardware"] == "ipu"
    with pytest.raises(baseline.BaselineError, match="recorded on hardware 'ipu', this run is on 'cpu'"):
        baseline.load_baseline(path, run_like(sample, hardware="cpu"))
    with pytest.raises(baseline.BaselineError,
                       match="recorded with profile 'smoke', this run uses 'full': settings that change the figures"):
        baseline.load_baseline(path, run_like(sample, profile="full"))
    with pytest.raises(baseline.BaselineError, match="no such file"):
        baseline.load_baseline(tmp_path / "nope.json", run_like(sample))


@pytest.mark.parametrize("setting, value, named", [
    ("samples", {"resnet50": 256}, "recorded with samples of resnet50 '4', this run uses '256'"),
    ("checkpoints", {"bert-base": "ckpt/bert"}, "recorded with checkpoint of bert-base 'default', this run uses 'ckpt/bert'"),
    ("datasets", {"conformer": "data/x"}, "recorded with data set of conformer 'default', this run uses 'data/x'"),
    ("device", "m2000", "recorded with device 'c600', this run uses 'm2000'"),
])
def test_baseline_with_other_settings_that_change_the_figures_is_refused_naming_them(sample, tmp_path, setting, value,
                                                                                     named):
    base = copy.deepcopy(sample)
    base["settings"].update(samples={}, checkpoints={}, datasets={}, calibrations={}, device="c600")
    path = tmp_path / "results.json"
    path.write_text(json.dumps(base))
    same = run_like(base)
    assert baseline.load_baseline(path, same) == base
    with pytest.raises(baseline.BaselineError, match=re.escape(named)):
        baseline.load_baseline(path, run_like(base, **{setting: value}))


def test_a_failed_baseline_or_another_selection_is_named_in_a_warning(sample, tmp_path):
    path = tmp_path / "results.json"
    assert sample["verdict"] == "FAIL"
    [failed] = baseline.warnings_of(path, sample, run_like(sample))
    assert failed == (f"--baseline {path} is a run that did not pass (verdict FAIL: 2 gate(s) failed, 2 test(s) "
                      f"failed); regressions are measured from its figures as they are")
    passing = copy.deepcopy(sample)
    passing["verdict"] = "PASS"
    assert baseline.warnings_of(path, passing, run_like(sample)) == []
    [other] = baseline.warnings_of(path, passing, run_like(sample, models=["resnet50"]))
    assert "chose other checks (baseline -> this run): models bert-base,conformer,resnet50 -> resnet50" in other


def test_a_run_against_a_failed_baseline_says_so_beside_its_verdict(suite):
    set_values(suite, snr={"resnet50-fp8": 10.0})  # below its gate: the baseline run fails
    assert suite.runpytest("--report-dir", "first").ret == 1
    set_values(suite)
    again = suite.runpytest("--baseline", "first/results.json")
    assert again.ret == 0  # better than its baseline: no regression
    again.stdout.fnmatch_lines(["*= conformance =*", "WARNING: --baseline first/results.json is a run that did not pass "
                                "(verdict FAIL: 1 gate(s) failed, 1 test(s) failed)*", "conformance PASS: *"])
