"""Confidence intervals of task metrics and the three-way verdict of a ratio gate."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from conformance.accuracy import confidence
from conformance.accuracy.evaluation import compute_metrics, evaluate
from conformance.accuracy.metrics import (TaskMetric, auc_metric, auc_placements, mean_metric, resampled_roc_auc,
                                          roc_auc)
from conformance.targets.accuracy import parse_targets


@pytest.mark.parametrize("k, n", [(0, 5), (3, 5), (5, 5), (12, 12), (31, 32), (32, 32), (250, 256)])
def test_clopper_pearson_matches_scipys_exact_binomial_interval(k, n):
    expected = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    got = confidence.clopper_pearson(k, n)
    assert got.low == pytest.approx(expected.low, abs=1e-12) and got.high == pytest.approx(expected.high, abs=1e-12)


def test_clopper_pearson_bounds_are_the_beta_quantiles_bit_for_bit():
    """The bounds are scipy.stats.beta's quantiles exactly (whole and fractional successes), so intervals recorded
    before and after reading them through scipy.special are the same numbers."""
    from scipy.stats import beta

    rng, tail = np.random.default_rng(0), (1.0 - confidence.LEVEL) / 2.0
    for _ in range(2000):
        n = int(rng.integers(1, 20000))
        k = float(rng.integers(0, n + 1)) if rng.random() < 0.5 else float(rng.uniform(0, n))
        got = confidence.clopper_pearson(k, n)
        assert got.low == (0.0 if k <= 0 else float(beta.ppf(tail, k, n - k + 1))), (k, n)
        assert got.high == (1.0 if k >= n else float(beta.ppf(1.0 - tail, k + 1, n - k))), (k, n)


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


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.25, 0.5, 1.0, -0.0, float("nan"), float("inf")]) | st.floats(-2, 2),
                          st.booleans()), min_size=1, max_size=40),
       st.integers(1, 12), st.integers(0, 2**32 - 1), st.sampled_from([1, 7, 1 << 16]))
def test_resampled_auc_is_roc_auc_of_each_resample_bit_for_bit(rows, count, seed, chunk):
    """The bootstrap's vectorised AUC (counts per group of tied scores) against the rank-sum form on each resample:
    ties, signed zeros, NaN and infinite scores, one class absent, chunks of one row or of all."""
    scores = np.array([s for s, _ in rows])
    labels = np.array([y for _, y in rows], np.int8)
    resamples = np.random.default_rng(seed).integers(0, len(rows), size=(count, len(rows)))
    expected = np.array([roc_auc(scores[idx], labels[idx]) for idx in resamples])
    got = resampled_roc_auc(scores, labels, resamples, chunk)
    assert np.array_equal(got, expected, equal_nan=True), (got, expected)


def test_the_auc_bootstrap_interval_is_the_per_resample_loops():
    rng = np.random.default_rng(3)
    labels = rng.random(600) < 0.3
    scores = np.round(labels * 0.6 + rng.random(600), 2)  # ties
    noisy = scores + np.round(rng.normal(0, 0.05, 600), 2)
    vectorised = confidence.ratio_interval(auc_metric(noisy, labels), auc_metric(scores, labels))
    looped = confidence.ratio_interval(
        TaskMetric(600, lambda idx: roc_auc(noisy[idx], labels[idx]), placements=auc_placements(noisy, labels)),
        TaskMetric(600, lambda idx: roc_auc(scores[idx], labels[idx]), placements=auc_placements(scores, labels)))
    assert vectorised == looped
    assert confidence.value_interval(auc_metric(noisy, labels)) == confidence.value_interval(
        TaskMetric(600, lambda idx: roc_auc(noisy[idx], labels[idx])))


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


# -- ratios of paired metrics: never tighter than the units allow ------------------------------------------------------

RATIOS = st.sampled_from([0.9, 0.99, 0.998, 0.999])


@st.composite
def paired_scores(draw, fractional: bool):
    """Per-unit scores of a hardware and of the base it is relative to, with few or no discordant units."""
    n = draw(st.integers(1, 4000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    base = rng.random(n) if fractional else (rng.random(n) < draw(st.floats(0.05, 1.0))).astype(np.float64)
    hw = base.copy()
    flips = draw(st.integers(0, min(n, 5)))
    idx = rng.choice(n, flips, replace=False)
    hw[idx] = rng.random(flips) if fractional else 1.0 - hw[idx]
    return hw, base


@settings(max_examples=200, deadline=None)
@given(pair=st.one_of(paired_scores(False), paired_scores(True)), ratio=RATIOS)
def test_a_ratio_is_never_established_on_fewer_units_than_it_takes(pair, ratio):
    hw, base = pair
    if base.sum() == 0:
        return
    interval = confidence.ratio_interval(mean_metric(hw), mean_metric(base))
    if len(hw) < confidence.units_to_establish(ratio):
        assert interval.low < ratio, (len(hw), interval)
    assert interval.low <= hw.sum() / base.sum() <= interval.high or np.isnan(interval.high)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 4000), seed=st.integers(0, 2**32 - 1), ratio=RATIOS)
def test_no_discordant_pair_still_leaves_an_interval(n, seed, ratio):
    """The same decisions on every unit (the hardware keeps the FP32 outputs) bound the ratio below 1: at most as
    tightly as n agreeing units, for accuracy against labels and for AUC alike."""
    rng = np.random.default_rng(seed)
    p = rng.random(n)
    labels = (rng.random(n) < p).astype(np.int8)
    pairs = [(mean_metric((p >= 0.5) == (labels != 0)),) * 2, (auc_metric(p, labels),) * 2]
    for metric, base in pairs:
        if np.isnan(metric.value) or metric.value == 0:
            continue
        interval = confidence.ratio_interval(metric, base)
        assert interval.low < 1.0
        assert interval.low <= confidence.clopper_pearson(n, n).low + 1e-12
        if n < confidence.units_to_establish(ratio):
            assert interval.low < ratio


@pytest.mark.parametrize("both, lost, gained", [(300, 0, 0), (300, 3, 0), (3000, 5, 5), (40, 1, 2), (12000, 160, 170)])
def test_discordant_pairs_bound_from_two_exact_intervals(both, lost, gained):
    """0/1 scores: the bounds come from scipy's exact intervals of the discordant share (of the units either gets
    right) and of the losses' share (of the discordant), each at 97.5%, at the corners of the ratio."""
    hw = np.array([1.0] * both + [0.0] * lost + [1.0] * gained + [0.0] * 50)
    base = np.array([1.0] * both + [1.0] * lost + [0.0] * gained + [0.0] * 50)
    interval = confidence.ratio_interval(mean_metric(hw), mean_metric(base))
    d = lost + gained
    share = binomtest(d, both + d).proportion_ci(confidence_level=0.975, method="exact").high
    t = share / (1 - share)
    pi = binomtest(lost, d).proportion_ci(confidence_level=0.975, method="exact") if d else None
    pi_high, pi_low = (pi.high, pi.low) if d else (1.0, 0.0)
    expected_low = (1 + (1 - pi_high) * t) / (1 + pi_high * t) if pi_high > 0.5 else 1.0
    expected_high = (1 + (1 - pi_low) * t) / (1 + pi_low * t) if pi_low < 0.5 else 1.0
    assert interval.method == "clopper-pearson on discordant pairs"
    assert interval.low == pytest.approx(min(expected_low, confidence.clopper_pearson(len(hw), len(hw)).low))
    assert interval.high == pytest.approx(expected_high)
    assert interval.low <= hw.sum() / base.sum() <= interval.high


def test_losses_and_gains_offset_each_other():
    """Flips in both directions cancel in the bound as in the point estimate: 160 lost and 170 gained of 12,000
    establish 99%, where a bound on the kept fraction alone (11,840 of 12,000 < 0.99) never would."""
    hw = np.array([1.0] * 11840 + [0.0] * 160 + [1.0] * 170 + [0.0] * 4000)
    base = np.array([1.0] * 11840 + [1.0] * 160 + [0.0] * 170 + [0.0] * 4000)
    assert confidence.ratio_interval(mean_metric(hw), mean_metric(base)).low >= 0.99


@pytest.mark.parametrize("p_both, p_lost, p_gained, n", [(0.7, 0.02, 0.02, 500), (0.8, 0.01, 0.0, 300),
                                                          (0.5, 0.05, 0.01, 200)])
def test_the_discordant_pairs_interval_covers_the_true_ratio(p_both, p_lost, p_gained, n):
    """Seeded draws of paired 0/1 outcomes: the 95% interval holds the population ratio at least 95% of the time."""
    truth = (p_both + p_gained) / (p_both + p_lost)
    rng = np.random.default_rng(7)
    covered = 0
    draws = 400
    for _ in range(draws):
        kind = rng.choice(4, size=n, p=[p_both, p_lost, p_gained, 1 - p_both - p_lost - p_gained])
        hw = np.isin(kind, (0, 2)).astype(np.float64)
        base = np.isin(kind, (0, 1)).astype(np.float64)
        interval = confidence.discordant_interval(hw, base)
        covered += interval.low <= truth <= (interval.high if not np.isnan(interval.high) else np.inf)
    assert covered / draws >= 0.95


def test_placements_average_to_the_auc():
    rng = np.random.default_rng(3)
    scores = np.round(rng.random(500), 2)  # ties count one half
    labels = rng.random(500) < 0.3
    positives, negatives = auc_placements(scores, labels)
    assert positives.mean() == pytest.approx(roc_auc(scores, labels)) == pytest.approx(negatives.mean())


def _widedeep(rows: int):
    p = np.random.default_rng(rows).random(rows).astype(np.float32)
    ref = {"probabilities": np.stack([1 - p, p], axis=1)}
    return compute_metrics("widedeep", ref, ref, {})


@pytest.mark.parametrize("rows, tier", [(8, 0.99), (1024, 0.999), (3687, 0.999)])
def test_widedeep_label_ratios_below_the_units_they_take_are_not_established(rows, tier):
    """The hardware's outputs are FP32's, so no decision flips: the label ratios pass and, on fewer rows than
    ``units_to_establish``, are not established."""
    gates = parse_targets(f'[ipu.widedeep.fp16]\naccuracy = {{ of = "fp32", ratio = {tier} }}\n'
                          f'auc = {{ of = "fp32", ratio = {tier} }}\n', "t.toml")
    fp32 = _widedeep(rows)
    evaluations = evaluate(gates, fp32, {"fp32": fp32})
    assert rows < confidence.units_to_establish(tier)
    assert [(e.gate.metric, e.verdict) for e in evaluations] == [("accuracy", "PASS, not established"),
                                                                 ("auc", "PASS, not established")]
    for e in evaluations:
        assert e.details["ratio_ci95"][0] < tier and e.details["units"] == rows


def test_widedeep_label_ratios_establish_the_99_percent_tier_on_the_default_rows():
    gates = parse_targets('[ipu.widedeep.fp16]\naccuracy = { of = "fp32", ratio = 0.99 }\n'
                          'auc = { of = "fp32", ratio = 0.99 }\n', "t.toml")
    fp32 = _widedeep(4096)
    assert [e.verdict for e in evaluate(gates, fp32, {"fp32": fp32})] == ["PASS", "PASS"]
