"""MLPerf LoadGen's rules for a performance run, as pure functions: how many queries it generates and issues, which
latency it reports at a percentile, early stopping, and when a run is VALID.

A run on virtual time (a simulated device) needs the verdicts the real LoadGen (``mlperf_loadgen``, 6.0.x) would give
for the same latencies. The rules are those of MLPerf LoadGen (mlcommons/inference, ``loadgen/``: ``early_stopping.cc``,
``results.cc``, ``loadgen.cc``, ``issue_query_controller.cc``, ``test_settings_internal.cc``), reimplemented here from
what they state; ``tests/test_loadgen_rules.py`` checks them against what the installed LoadGen logs for real runs.

Units follow LoadGen: settings in milliseconds (``min_duration_ms``), run times in seconds (``*_s``), schedules in
nanoseconds (``*_ns``). Latencies may be in any unit (LoadGen's are integer nanoseconds) as long as a target latency is
in the same one; estimates come back in that unit.

Early stopping (MLPerf inference rules, "Early stopping criterion"): with ``n`` queries of which ``t`` exceed a latency
``L``, the run shows with confidence ``c`` that the ``p``-th percentile latency is at most ``L`` when ``n >= h + t``,
``h`` being the least number of passing queries for which seeing ``t`` or fewer over-latency ones among ``h + t`` has
probability below ``1 - c`` if the true fraction over ``L`` were ``1 - p``. That probability is the binomial CDF,
``BetaRegularized[p - d, h, 1 + t]`` (``d``: a tolerance, 0 in LoadGen), evaluated here with
``scipy.special.betainc`` (LoadGen sums a series for it; the two agree to about 1e-9 relative, far inside the margin
by which the search's comparisons are decided).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.special import betainc

from conformance.hardware.base import SCENARIOS

CONFIDENCE = 0.99  # LoadGen's early-stopping confidence
TOLERANCE = 0.0  # LoadGen's early-stopping tolerance ``d``
SINGLE_STREAM_PERCENTILE = 0.90  # TestSettings defaults: the percentile each scenario's latency is judged at
MULTI_STREAM_PERCENTILE = 0.99
SERVER_PERCENTILE = 0.99
# The percentiles LoadGen logs for every run (result_50.00_percentile_latency_ns, ...).
LOGGED_PERCENTILES = (0.50, 0.90, 0.95, 0.97, 0.99, 0.999)
# Offline's one query holds 10% more samples than min duration x expected QPS, so that the run lasts the min duration.
OFFLINE_SLACK = 1.1
# Non-Server scenarios generate queries for twice the min duration, in case the system is faster than expected.
STREAM_GENERATION_FACTOR = 2

MIN_QUERIES_NOT_MET = "The test exited early, before enough queries were issued."
PERF_CONSTRAINTS_NOT_MET = "Reduce target QPS to improve latency."
MIN_DURATION_RECOMMENDATIONS = {
    "SingleStream": "Decrease the expected latency so the loadgen pre-generates more queries.",
    "MultiStream": "Decrease the expected latency so the loadgen pre-generates more queries.",
    "Server": "Increase the target QPS so the loadgen pre-generates more queries.",
    "Offline": "Increase expected QPS so the loadgen pre-generates a larger (coalesced) query.",
}


def _check_scenario(scenario: str) -> None:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; expected one of: {', '.join(SCENARIOS)}")


# -- minimum passing queries -------------------------------------------------------------------------------------------

class _PassingSearch:
    """LoadGen's search for the minimum passing queries ``h(t)`` at one (percentile, tolerance, confidence).

    LoadGen brackets each search by the answers for smaller ``t`` it already has: ``h(t)`` grows by at least
    ``(p - d) / (1 - p + d)`` per over-latency query, and by at most the previous step; within the bracket it takes the
    least ``h`` that passes by bisection (the whole bracket failing gives its upper end). Its early-stopping loops ask
    for ``t = 1, 2, 3, ...`` in order from a fresh cache, which is the order kept here: ``h(t)`` is computed after
    every smaller ``t``, so each search sees the bracket LoadGen's does. ``t = 0`` (a Server run with no over-latency
    query) is searched as LoadGen does from a fresh cache, without entering the others' brackets.
    """

    def __init__(self, percentile: float, tolerance: float, confidence: float):
        if not 0.0 < percentile - tolerance < 1.0 or not 0.0 < confidence < 1.0:
            raise ValueError(f"early stopping needs 0 < percentile - tolerance < 1 and 0 < confidence < 1, got "
                             f"percentile={percentile}, tolerance={tolerance}, confidence={confidence}")
        self.q = percentile - tolerance
        self.limit = 1 - confidence
        self.min_slope = (percentile - tolerance) / (1 - percentile + tolerance)
        # p^h < 1 - c: the answer for t = 0, the bracket's starting point
        self.h0 = math.ceil(math.log(1 - confidence) / math.log(percentile - tolerance))
        self.h = [0]  # h[t] for t >= 1, in order (index 0 unused)
        self.needed = [0]  # needed[t] = h[t] + t: the queries early stopping needs to allow t over-latency queries
        self.zero: int | None = None

    def passes(self, h: int, t: int) -> bool:
        """Whether seeing ``t`` or fewer over-latency queries among ``h + t`` is less likely than ``1 - c``."""
        return float(betainc(h, 1 + t, self.q)) < self.limit

    def _bisect(self, t: int, low: int, high: int) -> int:
        """The least ``h`` in ``[low, high)`` that passes; ``high`` when none does."""
        count = high - low
        while count > 0:
            step = count // 2
            h = low + step
            if self.passes(h, t):
                count = step
            else:
                low = h + 1
                count -= step + 1
        return low

    def _search(self, t: int, x0: int, y0: int, x1: int, y1: int) -> int:
        """Search ``h(t)`` from the answers ``y0 = h(x0)``, ``y1 = h(x1)`` for the two largest known ``x0 < x1 < t``."""
        low = int((t - x1) * self.min_slope + y1)
        high = int((t - x1) * float((y1 - y0) * (x1 - x0)) + y1 + 1)
        return self._bisect(t, low, high)

    def extend(self) -> None:
        t = len(self.h)
        x0, y0, x1, y1 = -1, 0, 0, self.h0  # LoadGen's starting points when nothing smaller is known
        if t >= 2:
            x1, y1 = t - 1, self.h[t - 1]
        if t >= 3:
            x0, y0 = t - 2, self.h[t - 2]
        h = self._search(t, x0, y0, x1, y1)
        self.h.append(h)
        self.needed.append(h + t)

    def __call__(self, t: int) -> int:
        if t == 0:
            if self.zero is None:
                self.zero = self._search(0, -1, 0, 0, self.h0)
            return self.zero
        while len(self.h) <= t:
            self.extend()
        return self.h[t]

    def overlatency_allowed(self, queries: int) -> int:
        """LoadGen's ``t`` for ``queries`` queries (at least ``h(1) + 1``): one less than the least ``i >= 2`` with
        ``queries < h(i) + i``."""
        while self.needed[-1] <= queries:
            self.extend()
        return bisect.bisect_right(self.needed, queries, lo=1) - 1


_SEARCHES: dict[tuple[float, float, float], _PassingSearch] = {}


def _search_for(percentile: float, tolerance: float, confidence: float) -> _PassingSearch:
    key = (float(percentile), float(tolerance), float(confidence))
    search = _SEARCHES.get(key)
    if search is None:
        search = _SEARCHES[key] = _PassingSearch(*key)
    return search


def min_passing_queries(t: int, percentile: float, tolerance: float = TOLERANCE, confidence: float = CONFIDENCE) -> int:
    """LoadGen's MinPassingQueriesFinder: the least ``h`` such that ``t`` or fewer over-latency queries among ``h + t``
    has probability below ``1 - confidence`` (``BetaRegularized[percentile - tolerance, h, 1 + t] < 1 - confidence``),
    found by LoadGen's bracketed search. Cached: each (percentile, tolerance, confidence) computes ``h`` for
    ``t = 1, 2, ...`` once, in order."""
    t = int(t)
    if t < 0:
        raise ValueError(f"t (over-latency queries) must be >= 0, got {t}")
    return _search_for(percentile, tolerance, confidence)(t)


def early_stopping_queries_needed(percentile: float, confidence: float = CONFIDENCE) -> int:
    """The fewest queries for which SingleStream/MultiStream early stopping can be met: ``h(1) + 1`` (64 at p90, 662 at
    p99)."""
    return min_passing_queries(1, percentile, TOLERANCE, confidence) + 1


# -- percentiles -------------------------------------------------------------------------------------------------------

def _sorted(latencies: Sequence) -> np.ndarray:
    values = np.sort(np.asarray(latencies))
    if values.ndim != 1 or values.size == 0:
        raise ValueError("latencies must be a non-empty 1-d sequence")
    return values


def percentile_value(latencies: Sequence, p: float):
    """The latency LoadGen reports at percentile ``p`` (0 <= p < 1): ``sorted(latencies)[int(n * p)]`` (no
    interpolation), in the latencies' units and type."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"percentile must be in [0, 1), got {p}")
    values = _sorted(latencies)
    return values[int(values.size * p)].item()


def percentile_label(p: float) -> str:
    """How LoadGen names a percentile in its detail log keys: 0.9 -> ``"90.00"`` (``result_90.00_percentile_...``)."""
    return f"{p * 100:.2f}"


def percentile_latencies(latencies: Sequence) -> dict[float, object]:
    """The latencies LoadGen logs at :data:`LOGGED_PERCENTILES`, keyed by percentile."""
    values = _sorted(latencies)
    return {p: values[int(values.size * p)].item() for p in LOGGED_PERCENTILES}


# -- early stopping ----------------------------------------------------------------------------------------------------

def _number(value) -> str:
    """A latency as LoadGen prints it (``std::to_string`` of integer nanoseconds); other values briefly."""
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return f"{value:.6g}"


def _percent(p: float) -> str:
    return f"{p * 100:.1f}"  # LoadGen 6.x prints "90.0th percentile"


@dataclass(frozen=True)
class EarlyStopping:
    """SingleStream/MultiStream early stopping at one percentile: ``estimate`` (the latencies' units; None when not
    met) is the latency the run shows, with LoadGen's confidence, the percentile to be under; ``discarded`` is how many
    of the highest latencies that estimate leaves out."""

    met: bool
    estimate: object
    discarded: int
    queries: int
    queries_needed: int
    percentile: float
    message: str  # LoadGen's wording (lines starting " * ")


def early_stopping_estimate(latencies: Sequence, percentile: float, confidence: float = CONFIDENCE) -> EarlyStopping:
    """LoadGen's early-stopping estimate for SingleStream (``percentile`` 0.90; and 0.99, which LoadGen also logs) and
    MultiStream (0.99, over per-query latencies).

    With ``n`` queries, not met when ``n < h(1) + 1``. Otherwise ``t`` is one less than the least ``i >= 2`` with
    ``n < h(i) + i`` (the over-latency queries ``n`` queries can afford), and the estimate is ``sorted[n - t]``: the
    ``t - 1`` highest latencies are discarded.
    """
    n = len(latencies)
    search = _search_for(percentile, TOLERANCE, confidence)
    needed = search(1) + 1
    if n < needed:
        message = f" * Only processed {n} queries.\n * Need to process at least {needed} queries for early stopping."
        return EarlyStopping(False, None, 0, n, needed, percentile, message)
    t = search.overlatency_allowed(n)
    estimate = _sorted(latencies)[n - t].item()
    message = (f" * Processed at least {needed} queries ({n}).\n * Would discard {t - 1} highest latency queries.\n"
               f" * Early stopping {_percent(percentile)}th percentile estimate: {_number(estimate)}")
    return EarlyStopping(True, estimate, t - 1, n, needed, percentile, message)


@dataclass(frozen=True)
class ServerEarlyStopping:
    """Server early stopping: met when ``queries >= queries_needed``, ``queries_needed = h(overlatency) +
    overlatency``; ``more_queries_needed`` is how many further queries, all under the latency bound, would meet it."""

    met: bool
    overlatency: int
    queries: int
    queries_needed: int
    more_queries_needed: int
    message: str  # LoadGen's wording


def server_early_stopping(latencies: Sequence, target_latency, percentile: float = SERVER_PERCENTILE,
                          confidence: float = CONFIDENCE) -> ServerEarlyStopping:
    """LoadGen's Server early stopping: ``t`` = the latencies above ``target_latency`` (LoadGen's
    ``result_overlatency_query_count``), ``h = min_passing_queries(t, percentile)``; met iff ``n >= h + t``."""
    values = np.asarray(latencies)
    n = int(values.size)
    t = int(np.count_nonzero(values > target_latency))
    needed = min_passing_queries(t, percentile, TOLERANCE, confidence) + t
    if n >= needed:
        return ServerEarlyStopping(True, t, n, needed, 0, " * Run successful.")
    message = (f" * Run unsuccessful.\n * Processed {n} queries.\n * Would need to run at least {needed - n} more "
               "queries,\n with the run being successful if every additional\n query were under latency.")
    return ServerEarlyStopping(False, t, n, needed, needed - n, message)


def early_stopping_result(scenario: str, latencies: Sequence, target_latency=None) -> tuple[bool, str]:
    """(met, text) of early stopping as LoadGen reports it for a scenario (``early_stopping_met`` and
    ``early_stopping_result``; the detail log writes the text's newlines as spaces). ``latencies``: per sample, except
    MultiStream (per query); ``target_latency``: Server's bound. SingleStream's text adds the p99 estimate LoadGen logs
    as ``early_stopping_latency_ms`` once the p90 one is met; Offline has none (met, empty)."""
    _check_scenario(scenario)
    if scenario == "Offline":
        return True, ""
    if scenario == "Server":
        if target_latency is None:
            raise ValueError("Server early stopping needs the target latency")
        result = server_early_stopping(latencies, target_latency)
        return result.met, result.message
    if scenario == "MultiStream":
        result = early_stopping_estimate(latencies, MULTI_STREAM_PERCENTILE)
        return result.met, result.message
    result = early_stopping_estimate(latencies, SINGLE_STREAM_PERCENTILE)
    if not result.met:
        return False, result.message
    p99 = early_stopping_estimate(latencies, MULTI_STREAM_PERCENTILE)
    if p99.met:
        extra = f"\n * Early stopping {_percent(p99.percentile)}th percentile estimate: {_number(p99.estimate)}"
    else:
        extra = (f"\n * Not enough queries processed for {_percent(p99.percentile)}th percentile\n early stopping "
                 f"estimate (would need to process at\n least {p99.queries_needed} total queries).")
    return True, result.message + extra


# -- validity ----------------------------------------------------------------------------------------------------------

def min_duration_met(scenario: str, min_duration_ms: float, *, final_issued_s: float | None = None,
                     final_scheduled_s: float | None = None, last_completion_s: float | None = None) -> bool:
    """LoadGen's min duration check, on the time each scenario measures from the start of issuing:

    - Offline: the last completion (LoadGen's largest sample latency; the query is scheduled at the start);
    - Server: the final query's *scheduled* time (its Poisson arrival, whenever it was actually issued);
    - SingleStream, MultiStream: the final query's issue time.
    """
    _check_scenario(scenario)
    measured = {"Offline": last_completion_s, "Server": final_scheduled_s}.get(scenario, final_issued_s)
    if measured is None:
        name = {"Offline": "last_completion_s", "Server": "final_scheduled_s"}.get(scenario, "final_issued_s")
        raise ValueError(f"{scenario}: the min duration check needs {name}")
    return measured >= min_duration_ms / 1000.0


def min_queries_met(queries_issued: int, min_query_count: int, sample_count: int | None = None,
                    min_sample_count: int | None = None) -> bool:
    """LoadGen's min queries check: ``queries_issued >= min_query_count`` and, when given, ``sample_count >=
    min_sample_count`` (LoadGen's effective counts: for Offline one query of ``offline_sample_count`` samples)."""
    if queries_issued < min_query_count:
        return False
    return sample_count is None or min_sample_count is None or sample_count >= min_sample_count


def has_perf_constraints(scenario: str) -> bool:
    """Whether LoadGen judges a latency constraint in this scenario: Server only (LoadGen 6.x has none for
    MultiStream, whose p99 is the metric)."""
    _check_scenario(scenario)
    return scenario == "Server"


def perf_constraints_met(scenario: str, latencies: Sequence, target_latency=None,
                         percentile: float = SERVER_PERCENTILE) -> bool:
    """Server: the latency at ``percentile`` (:func:`percentile_value`) is at most ``target_latency``; other scenarios
    have no constraint (True)."""
    if not has_perf_constraints(scenario):
        return True
    if target_latency is None:
        raise ValueError("Server's latency constraint needs the target latency")
    return percentile_value(latencies, percentile) <= target_latency


@dataclass(frozen=True)
class Validity:
    """LoadGen's verdict on a run and its parts (``result_validity``, ``result_*_met``, ``early_stopping_met``)."""

    valid: bool
    min_duration_met: bool
    min_queries_met: bool
    early_stopping_met: bool
    perf_constraints_met: bool | None  # None: the scenario has no latency constraint
    invalid_reason: str  # LoadGen's result_invalid_reason ("" when valid; also "" when only early stopping failed)
    early_stopping_result: str  # LoadGen's early_stopping_result, with its newlines
    min_duration_recommendation: str = ""

    @property
    def checks(self) -> dict:
        """The checks keyed as :class:`conformance.perf.harness.ScenarioResult` keys them."""
        checks = {"min_duration": self.min_duration_met, "min_queries": self.min_queries_met,
                  "early_stopping": self.early_stopping_met}
        if self.perf_constraints_met is not None:
            checks["perf_constraints"] = self.perf_constraints_met
        return checks

    @property
    def reasons(self) -> list[str]:
        """Why the run is INVALID, in LoadGen's words, one line each (empty when valid)."""
        reasons = []
        if self.perf_constraints_met is False:
            reasons.append(PERF_CONSTRAINTS_NOT_MET)
        if not self.min_duration_met:
            reasons.append(self.min_duration_recommendation)
        if not self.min_queries_met:
            reasons.append(MIN_QUERIES_NOT_MET)
        if not self.early_stopping_met:
            reasons.append(" ".join(self.early_stopping_result.split()))
        return reasons


def validity(scenario: str, *, min_duration_ms: float, min_query_count: int, queries_issued: int,
             sample_latencies: Sequence, query_latencies: Sequence | None = None, target_latency=None,
             final_issued_s: float | None = None, final_scheduled_s: float | None = None,
             last_completion_s: float | None = None, samples_per_query: int = 1) -> Validity:
    """LoadGen's verdict: VALID iff min duration, min queries, early stopping (SingleStream, MultiStream, Server) and
    the latency constraint (Server) are all met, with ``result_invalid_reason`` worded as LoadGen words it.

    ``sample_latencies``: every sample's latency (from its query's scheduled time to its completion);
    ``query_latencies``: MultiStream's per-query latencies (scheduled to the last sample's completion), which its early
    stopping judges; ``target_latency``: Server's bound, in the latencies' units. ``min_query_count`` is the requested
    count and ``samples_per_query`` 1, MultiStream's samples per query, or for Offline the samples of its one query
    (:func:`offline_sample_count`, which LoadGen's effective counts become: min queries 1, min samples that count).
    The run times are those :func:`min_duration_met` reads.
    """
    _check_scenario(scenario)
    sample_count = len(sample_latencies)
    if scenario == "Offline":
        min_queries, min_samples = 1, int(samples_per_query)
    else:
        min_queries, min_samples = int(min_query_count), int(min_query_count) * int(samples_per_query)
    duration_ok = min_duration_met(scenario, min_duration_ms, final_issued_s=final_issued_s,
                                   final_scheduled_s=final_scheduled_s, last_completion_s=last_completion_s)
    queries_ok = min_queries_met(queries_issued, min_queries, sample_count, min_samples)
    if scenario == "MultiStream":
        if query_latencies is None:
            raise ValueError("MultiStream's early stopping needs the per-query latencies")
        early_ok, early_text = early_stopping_result(scenario, query_latencies)
    else:
        early_ok, early_text = early_stopping_result(scenario, sample_latencies, target_latency)
    perf_ok = perf_constraints_met(scenario, sample_latencies, target_latency) if has_perf_constraints(scenario) else None
    valid = duration_ok and queries_ok and early_ok and perf_ok is not False
    reason = ""
    if not valid:
        if perf_ok is False:
            reason += PERF_CONSTRAINTS_NOT_MET + " "
        if not duration_ok:
            reason += MIN_DURATION_RECOMMENDATIONS[scenario] + " "
        if not queries_ok:
            reason += MIN_QUERIES_NOT_MET
    return Validity(valid, duration_ok, queries_ok, early_ok, perf_ok, reason, early_text,
                    MIN_DURATION_RECOMMENDATIONS[scenario])


# -- the queries LoadGen generates and issues --------------------------------------------------------------------------

def stream_query_period_ns(expected_latency_ns: int) -> int:
    """SingleStream/MultiStream: the spacing of the generated query timeline, from the expected latency (LoadGen's
    target QPS ``1e9 / expected_latency_ns``, back to whole nanoseconds)."""
    if expected_latency_ns <= 0:
        raise ValueError(f"expected latency must be > 0 ns, got {expected_latency_ns}")
    target_qps = 1e9 / float(expected_latency_ns)
    return int((1.0 / target_qps) * 1e9)


def _generated(timeline_end: int, min_query_count: int, first_at_or_after: int) -> int:
    """Queries generated while the previous one's timestamp is before ``timeline_end`` or fewer than
    ``min_query_count`` exist; ``first_at_or_after``: index of the first timestamp at or after ``timeline_end``."""
    by_time = first_at_or_after + 1 if timeline_end > 0 else 0
    return max(int(min_query_count), by_time)


def stream_generated_query_count(expected_latency_ns: int, min_duration_ms: int, min_query_count: int) -> int:
    """SingleStream/MultiStream: the queries LoadGen generates before the run (``generated_query_count``): one every
    :func:`stream_query_period_ns` while the previous one's timestamp is before twice the min duration, and at least
    ``min_query_count``. A run that issues them all before meeting both minimums ends early ("Ran out of generated
    queries"), and fails the min duration."""
    period = stream_query_period_ns(expected_latency_ns)
    end = STREAM_GENERATION_FACTOR * int(min_duration_ms) * 1_000_000
    return _generated(end, min_query_count, -(-end // period))


def stream_issue_done(queries_issued: int, elapsed_s: float, min_duration_ms: float, min_query_count: int,
                      max_duration_ms: float = 0, max_query_count: int = 0) -> bool:
    """SingleStream/MultiStream: whether LoadGen stops after issuing a query (the ``queries_issued``-th) at
    ``elapsed_s`` from the start: both minimums met (this query's issue time at or after the min duration, so the final
    query is the first issued at or after it), or ``max_query_count`` reached, or ``max_duration_ms`` passed (0: none).
    Otherwise it waits for the query to complete and issues the next, if it generated one."""
    if queries_issued >= min_query_count and elapsed_s >= min_duration_ms / 1000.0:
        return True
    if max_query_count and queries_issued >= max_query_count:
        return True
    return bool(max_duration_ms) and elapsed_s > max_duration_ms / 1000.0


@dataclass(frozen=True)
class ServerSchedule:
    """Server's generated queries: each one's scheduled time from the start (ns), and the timeline's end (LoadGen's
    ``generated_query_duration``: the timestamp after the last query's)."""

    scheduled_ns: np.ndarray
    duration_ns: int

    def __len__(self) -> int:
        return int(self.scheduled_ns.size)

    @property
    def scheduled_s(self) -> np.ndarray:
        return self.scheduled_ns / 1e9


def _exponential_ns(state: np.random.RandomState, count: int, qps: float) -> np.ndarray:
    """``count`` inter-arrival gaps (whole ns) as LoadGen draws them: ``std::exponential_distribution(qps)`` over
    ``std::mt19937`` (libstdc++: ``-log(1 - u) / qps`` with ``u`` from two 32-bit draws), truncated to nanoseconds."""
    words = state.randint(0, 2 ** 32, size=2 * count, dtype=np.uint32).astype(np.float64)
    u = (words[0::2] + words[1::2] * 4294967296.0) / 18446744073709551616.0
    u[u >= 1.0] = np.nextafter(1.0, 0.0)
    logs = np.fromiter(map(math.log, (1.0 - u).tolist()), dtype=np.float64, count=count)  # the C library's log
    return ((-logs / qps) * 1e9).astype(np.int64)


def server_schedule(target_qps: float, min_duration_ms: int, min_query_count: int, seed: int = 0) -> ServerSchedule:
    """Server: the Poisson arrivals LoadGen generates, exactly: exponential gaps at ``target_qps`` from a Mersenne
    Twister seeded with ``seed`` (TestSettings' ``schedule_rng_seed``; 0 unless set, as the suite leaves it), the first
    query at 0, generated while the previous query's timestamp is before the min duration or fewer than
    ``min_query_count`` exist. LoadGen issues them all (unless a max duration or query count stops it early)."""
    if not target_qps > 0:
        raise ValueError(f"target QPS must be > 0, got {target_qps}")
    state = np.random.RandomState(int(seed) & 0xFFFFFFFF)  # std::mt19937 takes the seed's low 32 bits
    end = int(min_duration_ms) * 1_000_000
    chunk = int(end / 1e9 * target_qps * 1.1) + int(min_query_count) + 64
    timestamps = np.zeros(1, dtype=np.int64)
    while True:
        gaps = _exponential_ns(state, chunk, float(target_qps))
        timestamps = np.concatenate([timestamps, timestamps[-1] + np.cumsum(gaps)])
        first = int(np.searchsorted(timestamps, end, side="left"))
        if first < timestamps.size:
            count = _generated(end, min_query_count, first)
            if count < timestamps.size:
                return ServerSchedule(timestamps[:count].copy(), int(timestamps[count]))


def offline_sample_count(expected_qps: float, min_duration_ms: int, min_query_count: int) -> int:
    """Offline: the samples of LoadGen's one query: ``max(min_query_count, int(1.1 * min_duration_s * expected_qps))``,
    evaluated in that order in floating point (e.g. 1150 ms at 200 QPS gives 252, not 253)."""
    target = int(OFFLINE_SLACK * (int(min_duration_ms) / 1000.0) * float(expected_qps))
    return max(int(min_query_count), target)


def generated_query_count(scenario: str, min_duration_ms: int, min_query_count: int, *,
                          expected_latency_ns: int | None = None, target_qps: float | None = None,
                          seed: int = 0) -> int:
    """LoadGen's ``generated_query_count`` for a scenario: SingleStream/MultiStream from the expected latency
    (:func:`stream_generated_query_count`), Server from the target QPS and schedule seed (:func:`server_schedule`),
    Offline one query."""
    _check_scenario(scenario)
    if scenario == "Offline":
        return 1
    if scenario == "Server":
        if target_qps is None:
            raise ValueError("Server's generated queries need the target QPS")
        return len(server_schedule(target_qps, min_duration_ms, min_query_count, seed))
    if expected_latency_ns is None:
        raise ValueError(f"{scenario}'s generated queries need the expected latency")
    return stream_generated_query_count(expected_latency_ns, min_duration_ms, min_query_count)
