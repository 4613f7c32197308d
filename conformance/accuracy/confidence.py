"""95% confidence intervals of task metrics and of their ratios to another precision's, so that a verdict can say
whether the evaluation set was large enough to establish it.

- A metric that is the mean of per-unit scores in [0, 1] (agreement with FP32, exact match, F1, accuracy) gets the
  exact (Clopper-Pearson) binomial interval, with the sum of the scores as the count of successes (for fractional
  scores such as F1 this is conservative: a [0, 1] score varies at most as much as a 0/1 one of the same mean).
- A ratio to a precision whose metric is 1 on every unit (the FP32 predictions scored against themselves) is the
  metric itself, with the same interval.
- Any other ratio (wide&deep's accuracy and AUC against labels, FP8 relative to FP16) gets a paired percentile
  bootstrap over the evaluation units: the same resampled units for both precisions, seeded, so every run of the same
  outputs gives the same interval.

All 12 of 12 units agreeing bound agreement from below at 0.735 (two-sided 95%); 32 of 32 at 0.891; showing >= 0.99
with no disagreement takes 367 units.
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
    method: str  # "clopper-pearson" or "paired bootstrap"

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


def ratio_interval(metric: TaskMetric, base: TaskMetric, level: float = LEVEL) -> Interval:
    """The interval of ``metric / base``, both computed on the same units."""
    if metric.units != base.units:
        raise ValueError(f"a paired ratio needs the same units: {metric.units} vs {base.units}")
    if base.scores is not None and metric.scores is not None and np.all(base.scores == 1.0):
        return clopper_pearson(float(metric.scores.sum()), metric.units, level)
    ratios = []
    for idx in _resamples(metric.units):
        denominator = base.statistic(idx)
        ratios.append(metric.statistic(idx) / denominator if denominator else math.nan)
    return _percentiles(np.array(ratios, np.float64), level, "paired bootstrap")


def units_to_establish(ratio: float, level: float = LEVEL) -> int:
    """Units that must all agree for the lower bound of the interval to reach ``ratio`` (no disagreement at all)."""
    tail = (1.0 - level) / 2.0
    # all n agree: lower bound = tail ** (1 / n) >= ratio  <=>  n >= ln(tail) / ln(ratio)
    return math.ceil(math.log(tail) / math.log(ratio))
