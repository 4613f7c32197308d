"""Confidence intervals of task metrics and the three-way verdict of a ratio gate."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from conformance.accuracy import confidence
from conformance.accuracy.evaluation import compute_metrics, evaluate
from conformance.accuracy.metrics import TaskMetric, roc_auc
from conformance.targets.accuracy import parse_targets


@pytest.mark.parametrize("k, n", [(0, 5), (3, 5), (5, 5), (12, 12), (31, 32), (32, 32), (250, 256)])
def test_clopper_pearson_matches_scipys_exact_binomial_interval(k, n):
    expected = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    got = confidence.clopper_pearson(k, n)
    assert got.low == pytest.approx(expected.low, abs=1e-12) and got.high == pytest.approx(expected.high, abs=1e-12)


def test_all_agreeing_bounds_and_units_needed():
    assert confidence.clopper_pearson(12, 12).low == pytest.approx(0.7354, abs=1e-4)
    assert confidence.clopper_pearson(32, 32).low == pytest.approx(0.8911, abs=1e-4)
    n = confidence.units_to_establish(0.99)
    assert confidence.clopper_pearson(n, n).low >= 0.99 > confidence.clopper_pearson(n - 1, n - 1).low


def test_fractional_scores_lie_between_their_integer_neighbours():
    mid = confidence.clopper_pearson(10.5, 12)
    assert confidence.clopper_pearson(10, 12).low < mid.low < confidence.clopper_pearson(11, 12).low


def test_ratio_to_an_all_agreeing_base_is_the_metrics_own_interval():
    hits = np.array([1.0] * 30 + [0.0] * 2)
    metric = TaskMetric(32, lambda idx: float(hits[idx].mean()), hits)
    base = TaskMetric(32, lambda idx: 1.0, np.ones(32))
    assert confidence.ratio_interval(metric, base) == confidence.clopper_pearson(30, 32)


def test_paired_bootstrap_is_seeded_and_covers_the_estimate():
    rng = np.random.default_rng(1)
    labels = rng.random(2000) < 0.3
    scores = labels * 0.6 + rng.random(2000)
    noisy = scores + rng.normal(0, 0.05, 2000)
    metric = TaskMetric(2000, lambda idx: roc_auc(noisy[idx], labels[idx]))
    base = TaskMetric(2000, lambda idx: roc_auc(scores[idx], labels[idx]))
    first, second = confidence.ratio_interval(metric, base), confidence.ratio_interval(metric, base)
    assert first == second and first.method == "paired bootstrap"
    assert first.low < metric.value / base.value < first.high
    assert first.high - first.low < 0.05  # paired: the shared variation of the two AUCs cancels


def _gates(spec: str):
    return parse_targets(f"[ipu.resnet50.fp16]\ntop1_agreement = {spec}\n", "t.toml")


def _logits(n: int, flips: int):
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(n, 10)).astype(np.float32)
    ref[np.arange(n), 0] += 10.0  # class 0 wins clearly
    hw = ref.copy()
    hw[:flips, 1] += 20.0  # the first ``flips`` samples change their top-1
    return {"logits": ref}, {"logits": hw}


@pytest.mark.parametrize("n, flips, verdict", [(32, 0, "PASS, not established"), (400, 0, "PASS"),
                                               (400, 3, "PASS, not established"), (32, 1, "FAIL")])
def test_three_way_verdict_of_a_ratio_gate(n, flips, verdict):
    ref, hw = _logits(n, flips)
    fp32 = compute_metrics("resnet50", ref, ref, {})
    [evaluation] = [e for e in evaluate(_gates('{ of = "fp32", ratio = 0.99 }'), compute_metrics("resnet50", ref, hw, {}),
                                        {"fp32": fp32})]
    assert evaluation.verdict == verdict
    low, high = evaluation.details["ci95"]
    assert low <= evaluation.value <= high
    assert evaluation.details["units_to_establish"] == confidence.units_to_establish(0.99)
    if verdict != "FAIL":
        assert "not established" in evaluation.describe() or verdict == "PASS"
