"""``--baseline``: tolerances as data, an injected regression caught, an identical run passing, unusable baselines refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from conformance.report import baseline
from conformance.targets import regression

SAMPLE = Path(__file__).parent / "snapshots" / "report_sample_results.json"


@pytest.fixture
def sample() -> dict:
    return json.loads(SAMPLE.read_text())


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
        ("accuracy/bert-base/fp8/-/f1_ratio", 0.99),  # accuracy drop (>= check goes down)
        ("performance/resnet50/fp8/Offline/samples_per_s", 0.90),  # throughput drop
        ("performance/resnet50/fp8/Server/p99_latency_ms", 1.10),  # latency rise (<= check goes up)
    ],
)
def test_injected_regression_is_listed(sample, tolerances, record_id, factor):
    current = copy.deepcopy(sample["records"])
    find(current, record_id)["value"] *= factor
    found = baseline.compare(current, sample["records"], tolerances, "ipu")
    assert [r.id for r in found] == [record_id]
    assert record_id in found[0].message and ("dropped" in found[0].message or "rose" in found[0].message)


def test_changes_within_tolerance_and_improvements_pass(sample, tolerances):
    current = copy.deepcopy(sample["records"])
    perf = tolerances["performance"]["rel"]
    find(current, "performance/resnet50/fp8/Offline/samples_per_s")["value"] *= 1 - perf / 2
    find(current, "performance/resnet50/fp8/Server/p99_latency_ms")["value"] *= 0.5  # faster is never a regression
    find(current, "accuracy/bert-base/fp8/-/f1_ratio")["value"] *= 1.01
    assert baseline.compare(current, sample["records"], tolerances, "ipu") == []


def test_informational_and_missing_records_are_not_compared(sample, tolerances):
    current = copy.deepcopy(sample["records"])
    find(current, "accuracy/bert-base/fp8/-/f1_ratio_99.9")["value"] *= 0.5  # gating False
    current = [r for r in current if r["id"] != "accuracy/bert-base/fp16/-/f1_ratio"]  # e.g. another shard
    assert baseline.compare(current, sample["records"], tolerances, "ipu") == []


def test_lost_measurement_is_a_regression(sample, tolerances):
    current = copy.deepcopy(sample["records"])
    find(current, "performance/resnet50/fp8/Offline/samples_per_s")["value"] = None
    [found] = baseline.compare(current, sample["records"], tolerances, "ipu")
    assert "no value this run" in found.message


def test_tolerance_overrides(tolerances):
    snr = regression.tolerance_for(tolerances, "accuracy", "snr_db", "ipu")
    assert snr.allowed(30.0) == tolerances["accuracy"]["checks"]["snr_db"]["abs"]
    cpu = regression.tolerance_for(tolerances, "performance", "samples_per_s", "cpu")
    assert cpu.rel == tolerances["performance"]["hardware"]["cpu"]["rel"]
    assert regression.tolerance_for(tolerances, "reference", "max_rel_error", "cpu") is None


def test_bad_tolerance_file_is_named(tmp_path):
    path = tmp_path / "regression.toml"
    path.write_text("[accuracy]\nrel = -1\n")
    with pytest.raises(ValueError, match=r"regression.toml: \[accuracy\].rel must be a number >= 0"):
        regression.load_tolerances(path)


def test_baseline_from_other_hardware_or_profile_is_refused(sample, tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(sample))
    assert baseline.load_baseline(path, hardware="ipu", profile="smoke")["settings"]["hardware"] == "ipu"
    with pytest.raises(baseline.BaselineError, match="recorded on hardware 'ipu', this run is on 'cpu'"):
        baseline.load_baseline(path, hardware="cpu", profile="smoke")
    with pytest.raises(baseline.BaselineError, match="recorded with profile 'smoke', this run uses 'full'"):
        baseline.load_baseline(path, hardware="ipu", profile="full")
    with pytest.raises(baseline.BaselineError, match="no such file"):
        baseline.load_baseline(tmp_path / "nope.json", hardware="ipu", profile="smoke")
