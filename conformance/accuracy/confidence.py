"""95% confidence intervals of task metrics and of their ratios to another precision's, so that a verdict can say
whether the evaluation set was large enough to establish it.

- A metric that is the mean of per-unit scores in [0, 1] (agreement with FP32, exact match, F1, accuracy) gets the
  exact (Clopper-Pearson) binomial interval, with the sum of the scores as the count of successes (for fractional
  scores such as F1 this is conservative: a [0, 1] score varies at most as much as a 0/1 one of the same mean).
- A ratio to a precision whose metric is 1 on every unit (the FP32 predictions scored against themselves) is the
  metric itself, with the same interval.
- Any other ratio of mean metrics (accuracy against labels relative to FP32's, FP8 relative to FP16) is bounded by
  Clopper-Pearson on the discordant pairs, conditionally: of the units the base precision scores (``y``), the
  hardware keeps ``min(x, y)``; ``sum(x) / sum(y) >= sum(min(x, y)) / sum(y)``, the kept fraction, whose exact
  interval, given the units the base scores, is the binomial one of ``sum(min(x, y))`` of ``sum(y)``. The upper end
  is the reverse: ``sum(x) / sum(y) <= sum(x) / sum(min(x, y))``. Units the hardware gains do not offset units it
  loses in the bound (they do in the point estimate), so the bound is conservative; with no discordant pair at all it
  is the bound of ``sum(y)`` agreeing units, never 1.
- AUC (not a mean) gets a seeded paired percentile bootstrap over the evaluation units, widened to the same
  conditional bound on DeLong's placement values (per positive, the fraction of negatives ranked below it; per
  negative, the fraction of positives above it; the AUC is the mean of either), whichever of the three is lowest.

No ratio interval is tighter than ``n`` agreeing units allow: its lower end is at most the exact bound of ``n`` of
``n``, so fewer units than :func:`units_to_establish` never establish a ratio, however the units agree. All 12 of 12
units agreeing bound agreement from below at 0.735 (two-sided 95%); 32 of 32 at 0.891; showing >= 0.99 with no
disagreement takes 368 units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

from conformance.accuracy.metrics import TaskMetric

LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0x43493935  # "CI95"


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    method: str  # "clopper-pearson", "clopper-pearson on discordant pairs" or "paired bootstrap ..."

    def as_list(self) -> list[float]:
        return [self.low, self.high]


def clopper_pearson(successes: float, n: int, level: float = LEVEL) -> Interval:
    """The exact two-sided binomial interval for ``successes`` of ``n`` (``successes`` may be fractional)."""
    if n <= 0:
        raise ValueError(f"an interval needs at least one unit, got n={n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n={n}], got {successes}")
    tail = (1.0 - level) / 2.0
    low = 0.0 if successes <= 0 else float(beta.ppf(tail, successes, n - successes + 1))
    high = 1.0 if successes >= n else float(beta.ppf(1.0 - tail, successes + 1, n - successes))
    return Interval(low, high, "clopper-pearson")


def _percentiles(samples: np.ndarray, level: float, what: str) -> Interval:
    samples = samples[np.isfinite(samples)]
    if samples.size == 0:
        return Interval(math.nan, math.nan, "paired bootstrap")
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(samples, [tail, 100.0 - tail])
    return Interval(float(low), float(high), what)


def _resamples(units: int) -> np.ndarray:
    rng = np.random.default_rng([BOOTSTRAP_SEED, units])
    return rng.integers(0, units, size=(BOOTSTRAP_RESAMPLES, units))


def value_interval(metric: TaskMetric, level: float = LEVEL) -> Interval:
    """The interval of the metric itself."""
    if metric.scores is not None:
        return clopper_pearson(float(metric.scores.sum()), metric.units, level)
    stats = np.array([metric.statistic(idx) for idx in _resamples(metric.units)])
    return _percentiles(stats, level, "bootstrap")


def kept_interval(scores: np.ndarray, base_scores: np.ndarray, level: float = LEVEL) -> Interval:
    """The interval of ``sum(scores) / sum(base_scores)`` from Clopper-Pearson on the discordant pairs: the kept
    fraction ``sum(min) / sum(base)`` bounds it from below, ``sum(scores) / sum(min)`` from above (NaN where a sum is
    0: nothing bounds it there)."""
    x = np.clip(np.asarray(scores, np.float64), 0.0, None)
    y = np.clip(np.asarray(base_scores, np.float64), 0.0, None)
    if x.shape != y.shape:
        raise ValueError(f"paired scores need the same units: {x.shape} vs {y.shape}")
    kept, base, own = float(np.minimum(x, y).sum()), float(y.sum()), float(x.sum())
    method = "clopper-pearson on discordant pairs"
    low = clopper_pearson(kept, base, level).low if base > 0 else math.nan
    if own <= 0:
        high = math.nan if base <= 0 else 0.0
    else:
        shared = clopper_pearson(kept, own, level).low  # the fraction of the hardware's score the base shares
        high = 1.0 / shared if shared > 0 else math.nan
    return Interval(low, high, method)


def _at_most_agreeing(interval: Interval, units: int, level: float) -> Interval:
    """``interval`` with its lower end no higher than ``units`` agreeing units bound it."""
    cap = clopper_pearson(units, units, level).low
    if math.isnan(interval.low) or interval.low <= cap:
        return interval
    return Interval(cap, interval.high, interval.method)


def ratio_interval(metric: TaskMetric, base: TaskMetric, level: float = LEVEL) -> Interval:
    """The interval of ``metric / base``, both computed on the same units (the module's docstring says which)."""
    if metric.units != base.units:
        raise ValueError(f"a paired ratio needs the same units: {metric.units} vs {base.units}")
    if base.scores is not None and metric.scores is not None:
        if np.all(base.scores == 1.0):
            return clopper_pearson(float(metric.scores.sum()), metric.units, level)
        return _at_most_agreeing(kept_interval(metric.scores, base.scores, level), metric.units, level)
    ratios = []
    for idx in _resamples(metric.units):
        denominator = base.statistic(idx)
        ratios.append(metric.statistic(idx) / denominator if denominator else math.nan)
    interval = _percentiles(np.array(ratios, np.float64), level, "paired bootstrap")
    if metric.placements is not None and base.placements is not None and not math.isnan(interval.low):
        bounds = [kept_interval(own, theirs, level) for own, theirs in zip(metric.placements, base.placements)
                  if len(own) == len(theirs) and len(own)]
        lows = [b.low for b in bounds if not math.isnan(b.low)]
        highs = [b.high for b in bounds if not math.isnan(b.high)]
        interval = Interval(min([interval.low, *lows]), max([interval.high, *highs]),
                            "paired bootstrap and clopper-pearson on discordant placements")
    return _at_most_agreeing(interval, metric.units, level)


def _kept_units_needed(x: np.ndarray, y: np.ndarray, units: int, ratio: float, level: float) -> int | None:
    """Units (of which ``x``, ``y`` are the scores of ``len(x)``) at which the kept-fraction bound of
    :func:`kept_interval` clears ``ratio``, at the proportions seen; None when no count does."""
    kept, total = float(np.minimum(x, y).sum()), float(y.sum())
    if total <= 0 or kept / total <= ratio or units <= 0:
        return None
    per_unit = (kept / units, total / units)

    def clears(count: int) -> bool:
        return clopper_pearson(per_unit[0] * count, per_unit[1] * count, level).low >= ratio

    low = units_to_establish(ratio, level) - 1  # below it nothing clears
    high = max(low + 1, units)
    while not clears(high):
        low, high = high, high * 2
        if high > 10**12:
            return None
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if clears(mid) else (mid, high)
    return high


def units_needed(metric: TaskMetric, base: TaskMetric, ratio: float, level: float = LEVEL) -> int | None:
    """The units at which the ratio's lower bound would clear ``ratio`` if more units kept the proportions these
    show (as :func:`ratio_interval` bounds it: the kept fraction of the base's scores, for AUC of either class's
    placement values); None when no count would (the kept fraction is at or below ``ratio``: fewer lost decisions
    are needed, not more units) or the metric has neither scores nor placements."""
    if metric.scores is not None and base.scores is not None:
        return _kept_units_needed(np.asarray(metric.scores, np.float64), np.asarray(base.scores, np.float64),
                                  metric.units, ratio, level)
    if metric.placements is None or base.placements is None:
        return None
    needs = []
    for own, theirs in zip(metric.placements, base.placements):
        if not len(own) or len(own) != len(theirs):
            return None
        need = _kept_units_needed(np.asarray(own), np.asarray(theirs), len(own), ratio, level)
        if need is None:
            return None
        needs.append(math.ceil(need * metric.units / len(own)))  # that class's share of the rows
    return max(needs)


def units_to_establish(ratio: float, level: float = LEVEL) -> int:
    """Units that must all agree for the lower bound of the interval to reach ``ratio`` (no disagreement at all)."""
    tail = (1.0 - level) / 2.0
    # all n agree: lower bound = tail ** (1 / n) >= ratio  <=>  n >= ln(tail) / ln(ratio)
    return math.ceil(math.log(tail) / math.log(ratio))
