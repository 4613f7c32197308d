"""95% confidence intervals of task metrics and of their ratios to another precision's, so that a verdict can say
whether the evaluation set was large enough to establish it.

- A metric that is the mean of per-unit scores in [0, 1] (agreement with FP32, exact match, F1, accuracy) gets the
  exact (Clopper-Pearson) binomial interval, with the sum of the scores as the count of successes (for fractional
  scores such as F1 this is conservative: a [0, 1] score varies at most as much as a 0/1 one of the same mean).
- A ratio to a precision whose metric is 1 on every unit (the FP32 predictions scored against themselves) is the
  metric itself, with the same interval.
- Any other ratio of mean metrics (accuracy against labels relative to FP32's, FP8 relative to FP16) is bounded by
  Clopper-Pearson on the discordant pairs: with ``a`` units both get right, ``b`` only the base (lost), ``c`` only
  the hardware (gained), the ratio is ``(a + c) / (a + b) = (1 + (1 - pi) t) / (1 + pi t)`` with ``t`` the discordant
  per shared unit and ``pi`` the losses' share of the discordant; each gets its exact conditional interval at half
  the error (Bonferroni), and the ratio's bounds lie at their corners (:func:`_ratio_bounds`). Losses and gains offset
  each other, as in the point estimate; with no discordant pair at all the bound is that of ``a`` agreeing units,
  never 1. Fractional scores (F1) count their lost and gained parts, ``(y - x)+`` and ``(x - y)+``.
- AUC (not a mean) gets a seeded paired percentile bootstrap over the evaluation units, widened to the same
  bound on DeLong's placement values (per positive, the fraction of negatives ranked below it; per
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
    # beta.ppf's function, imported on first use: scipy.special costs 0.35 s at import, which every start of the suite
    # would pay (collection, --help, rendering a report) and scipy.stats another 0.4 s
    from scipy.special import betaincinv

    tail = (1.0 - level) / 2.0
    low = 0.0 if successes <= 0 else float(betaincinv(successes, n - successes + 1, tail))
    high = 1.0 if successes >= n else float(betaincinv(successes + 1, n - successes, 1.0 - tail))
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
    return _percentiles(metric.statistics(_resamples(metric.units)), level, "bootstrap")


def _pair_counts(scores: np.ndarray, base_scores: np.ndarray) -> tuple[float, float, float]:
    """(shared, lost, gained): ``sum(min(x, y))``, ``sum((y - x)+)``, ``sum((x - y)+)``; 0/1 scores: the units both get
    right, those only the base gets right (discordant, lost), those only the hardware does (discordant, gained)."""
    x = np.clip(np.asarray(scores, np.float64), 0.0, None)
    y = np.clip(np.asarray(base_scores, np.float64), 0.0, None)
    if x.shape != y.shape:
        raise ValueError(f"paired scores need the same units: {x.shape} vs {y.shape}")
    return float(np.minimum(x, y).sum()), float(np.clip(y - x, 0.0, None).sum()), float(np.clip(x - y, 0.0, None).sum())


def _ratio_bounds(shared: float, lost: float, gained: float, level: float) -> tuple[float, float]:
    """(low, high) of ``(shared + gained) / (shared + lost)`` from two exact conditional binomial intervals, each at
    half the error (Bonferroni): ``d = lost + gained`` discordant of the ``shared + d`` units either gets right
    (bounds ``t``, discordant per shared), and ``lost`` of the ``d`` discordant (bounds ``pi``, the share of losses).
    The ratio is ``(1 + (1 - pi) t) / (1 + pi t)``, falling in ``pi``, and in ``t`` when ``pi > 1/2``: its bounds lie
    at the corners. With no discordant pair, ``pi`` is unknown and the low end is ``1 / (1 + t_high)``."""
    half = 1.0 - (1.0 - level) / 2.0  # each of the two intervals at half the error
    discordant = lost + gained
    if shared + discordant <= 0:
        return math.nan, math.nan
    share = clopper_pearson(discordant, shared + discordant, half).high  # of the units either gets right
    t_high = share / (1.0 - share) if share < 1.0 else math.inf
    if discordant > 0:
        loss_share = clopper_pearson(lost, discordant, half)
        pi_high, pi_low = loss_share.high, loss_share.low
    else:
        pi_high, pi_low = 1.0, 0.0

    def ratio(pi: float, t: float) -> float:
        if math.isinf(t):
            return (1.0 - pi) / pi if pi > 0 else math.inf
        return (1.0 + (1.0 - pi) * t) / (1.0 + pi * t)

    low = ratio(pi_high, t_high) if pi_high > 0.5 else 1.0
    high = ratio(pi_low, t_high) if pi_low < 0.5 else 1.0
    return low, (math.nan if math.isinf(high) else high)


def discordant_interval(scores: np.ndarray, base_scores: np.ndarray, level: float = LEVEL) -> Interval:
    """The interval of ``sum(scores) / sum(base_scores)`` (paired per-unit scores in [0, 1]) from Clopper-Pearson on
    the discordant pairs (:func:`_ratio_bounds`); NaN where neither scores anything."""
    low, high = _ratio_bounds(*_pair_counts(scores, base_scores), level)
    return Interval(low, high, "clopper-pearson on discordant pairs")


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
        return _at_most_agreeing(discordant_interval(metric.scores, base.scores, level), metric.units, level)
    resamples = _resamples(metric.units)
    denominators = base.statistics(resamples)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(denominators != 0, metric.statistics(resamples) / denominators, math.nan)
    interval = _percentiles(ratios, level, "paired bootstrap")
    if metric.placements is not None and base.placements is not None and not math.isnan(interval.low):
        bounds = [discordant_interval(own, theirs, level) for own, theirs in zip(metric.placements, base.placements)
                  if len(own) == len(theirs) and len(own)]
        lows = [b.low for b in bounds if not math.isnan(b.low)]
        highs = [b.high for b in bounds if not math.isnan(b.high)]
        interval = Interval(min([interval.low, *lows]), max([interval.high, *highs]),
                            "paired bootstrap and clopper-pearson on discordant placements")
    return _at_most_agreeing(interval, metric.units, level)


def _units_needed_for(x: np.ndarray, y: np.ndarray, units: int, ratio: float, level: float) -> int | None:
    """Units (of which ``x``, ``y`` are the scores of ``len(x)``) at which the low end of
    :func:`discordant_interval` clears ``ratio``, at the proportions seen; None when no count does (the point
    estimate is at or below ``ratio``)."""
    counts = _pair_counts(x, y)
    if units <= 0 or counts[0] + counts[1] <= 0 or (counts[0] + counts[2]) / (counts[0] + counts[1]) <= ratio:
        return None
    per_unit = [c / units for c in counts]
    against_ones = bool(np.all(np.asarray(y) == 1.0))  # agreement: the metric's own exact interval

    def clears(count: int) -> bool:
        if against_ones:
            return clopper_pearson(per_unit[0] * count, count, level).low >= ratio
        low = _ratio_bounds(*(c * count for c in per_unit), level)[0]
        return not math.isnan(low) and low >= ratio

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
    show (as :func:`ratio_interval` bounds it; for AUC on either class's placement values); None when no count would
    (the point estimate is at or below ``ratio``: fewer lost decisions are needed, not more units) or the metric has
    neither scores nor placements."""
    if metric.scores is not None and base.scores is not None:
        return _units_needed_for(np.asarray(metric.scores, np.float64), np.asarray(base.scores, np.float64),
                                  metric.units, ratio, level)
    if metric.placements is None or base.placements is None:
        return None
    needs = []
    for own, theirs in zip(metric.placements, base.placements):
        if not len(own) or len(own) != len(theirs):
            return None
        need = _units_needed_for(np.asarray(own), np.asarray(theirs), len(own), ratio, level)
        if need is None:
            return None
        needs.append(math.ceil(need * metric.units / len(own)))  # that class's share of the rows
    return max(needs)


def units_to_establish(ratio: float, level: float = LEVEL) -> int:
    """Units that must all agree for the lower bound of the interval to reach ``ratio`` (no disagreement at all)."""
    tail = (1.0 - level) / 2.0
    # all n agree: lower bound = tail ** (1 / n) >= ratio  <=>  n >= ln(tail) / ln(ratio)
    return math.ceil(math.log(tail) / math.log(ratio))
