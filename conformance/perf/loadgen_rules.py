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
``BetaRegularized[x, h, 1 + t]`` with ``x = p - d`` (``d``: a tolerance, 0 in LoadGen), and it is computed here as
LoadGen computes it, operation for operation: ``x^h (1 - x)^t / (h Beta[h, 1 + t])`` (from ``exp``, ``log`` and
``lgamma`` of the C library, as LoadGen calls them) times the hypergeometric series
``Hypergeometric2F1[1, -t, 1 + h, x / (x - 1)]``, summed term by term until a term is at most ``2^-33``, in double
precision and in LoadGen's order of operations; the search for ``h`` runs compiled (numba, on first use) so that runs
of a million queries stay fast. An accurate CDF (``scipy.special.betainc``) would not do: LoadGen's value is off by up
to about 1e-8 relative for ``h`` in the millions (its ``lgamma`` terms, of order ``h log h``, cancel), and that
decides some of the search's comparisons. At p99 with ``t = 8550``, ``h = 868100`` gives 0.0099999999955 in LoadGen's
arithmetic and 0.0100000000279 exactly, so LoadGen's ``h`` (868100) is one less than the exact least passing ``h``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

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

# LoadGen sums its hypergeometric series until a term is at most this (its kTolerance).
_SERIES_TOLERANCE = 2.0 ** -33


def _search_kernel(out, t_first, x0, y0, x1, y1, x, limit, min_slope):
    """LoadGen's ``MinPassingQueriesFinder`` asked for ``t = t_first, t_first + 1, ...`` in turn: ``out[k]`` is its
    answer for ``t_first + k``. Run compiled (:func:`_compiled_search`).

    ``(x0, y0)`` and ``(x1, y1)``, ``x0 < x1 < t_first``, are the two largest ``(t, h(t))`` entries of the finder's
    cache below ``t_first``, or its stand-ins where it holds fewer: ``(0, h0)`` for the larger and ``(-1, 0)`` for the
    smaller, ``h0 = ceil(log(1 - c) / log(x))``. Each answer joins the cache and brackets the next search. Cached
    entries are for ``t >= 1``, so an ``x1`` of 0 is the stand-in.

    A search takes the bracket ``[int((t - x1) m + y1), int((t - x1) (y1 - y0) (x1 - x0) + y1 + 1)]`` (``m``:
    ``min_slope``, ``(p - d) / (1 - p + d)``) and bisects it for the least ``h`` whose odds are below ``limit``
    (``1 - c``), or gives the bracket's upper end when none in it is. The odds of ``h`` are LoadGen's
    ``BetaRegularized[x, h, 1 + t]``:
    ``exp(h log(x) + t log(1 - x) - lbeta) / h`` (``lbeta = (lgamma(h) + lgamma(1 + t)) - lgamma(h + 1 + t)``) times
    ``1 + sum of terms``, ``term_0 = 1``, ``term_(i+1) = term_i ((i - t) z / (h + 1 + i))``, ``z = x / (x - 1)``, up
    to and including the first term at most 2^-33 in magnitude (or 0, at ``i = t``). ``log(x)``, ``log(1 - x)`` and
    ``z`` are the same in every evaluation, so they are computed once.
    """
    z = x / (x - 1.0)
    log_x = math.log(x)
    log_1x = math.log(1.0 - x)
    for k in range(out.size):
        t = t_first + k
        low = int((t - x1) * min_slope + y1)
        high = int((t - x1) * float((y1 - y0) * (x1 - x0)) + y1 + 1)
        count = high - low
        while count > 0:
            step = count // 2
            h = low + step
            lbeta = (math.lgamma(h) + math.lgamma(1 + t)) - math.lgamma(h + 1 + t)
            scale = math.exp(h * log_x + t * log_1x - lbeta) / h
            term = 1.0
            series = 1.0
            i = 0
            while abs(term) > _SERIES_TOLERANCE:
                term *= (i - t) * z / (h + 1 + i)
                series += term
                i += 1
            if scale * series < limit:
                count = step
            else:
                low = h + 1
                count -= step + 1
        out[k] = low
        if x1 >= 1:
            x0, y0 = x1, y1
        x1, y1 = t, low


@functools.cache
def _compiled_search():
    """:func:`_search_kernel` compiled (numba: the C library's ``lgamma``, ``log``, ``exp``, IEEE double arithmetic
    without reassociation or fused multiply-adds, as LoadGen's C++ is built). The compiled code is cached on disk next
    to this file."""
    import numba  # deferred: a process pays numba's import and the compilation when early stopping is first computed

    return numba.njit(cache=True, nogil=True, error_model="numpy")(_search_kernel)


class _PassingSearch:
    """LoadGen's search for the minimum passing queries ``h(t)`` at one (percentile, tolerance, confidence).

    LoadGen brackets each search by the answers for smaller ``t`` it already has: ``h(t)`` grows by at least
    ``(p - d) / (1 - p + d)`` per over-latency query, and by at most the previous step; within the bracket it takes the
    least ``h`` that passes by bisection (the whole bracket failing gives its upper end). Its SingleStream/MultiStream
    early-stopping loops ask for ``t = 1, 2, 3, ...`` in order from a fresh cache, which is the order kept here
    (:meth:`__call__`): ``h(t)`` is computed after every smaller ``t``, so each search sees the bracket LoadGen's does.
    Server early stopping asks once, for its ``t``, from a fresh cache (:meth:`alone`); so is ``t = 0`` searched.
    """

    def __init__(self, percentile: float, tolerance: float, confidence: float):
        if not 0.0 < percentile - tolerance < 1.0 or not 0.0 < confidence < 1.0:
            raise ValueError(f"early stopping needs 0 < percentile - tolerance < 1 and 0 < confidence < 1, got "
                             f"percentile={percentile}, tolerance={tolerance}, confidence={confidence}")
        self.x = percentile - tolerance
        self.limit = 1 - confidence
        self.min_slope = (percentile - tolerance) / (1 - percentile + tolerance)
        # p^h < 1 - c: the answer for t = 0, the bracket's starting point
        self.h0 = math.ceil(math.log(1 - confidence) / math.log(percentile - tolerance))
        self.known = 1  # h(t) is known for 1 <= t < known
        self.h = np.zeros(1024, dtype=np.int64)  # h[t] (h[0] unused)
        # needed[t] = h[t] + t: the queries early stopping needs to allow t over-latency queries (needed[0] = 0)
        self.needed = np.zeros(1024, dtype=np.int64)
        self.single: dict[int, int] = {}

    def _run(self, out: np.ndarray, t_first: int, x0: int, y0: int, x1: int, y1: int) -> None:
        _compiled_search()(out, t_first, x0, y0, x1, y1, self.x, self.limit, self.min_slope)

    def extend(self, t: int) -> None:
        """Make ``h(1), ..., h(t)`` known, asking for them in order after those already known."""
        start = self.known
        if t < start:
            return
        if t >= self.h.size:
            size = max(t + 1, 2 * self.h.size)
            self.h = np.concatenate([self.h, np.zeros(size - self.h.size, dtype=np.int64)])
            self.needed = np.concatenate([self.needed, np.zeros(size - self.needed.size, dtype=np.int64)])
        x1, y1 = (start - 1, int(self.h[start - 1])) if start >= 2 else (0, self.h0)  # LoadGen's stand-ins when
        x0, y0 = (start - 2, int(self.h[start - 2])) if start >= 3 else (-1, 0)  # its cache holds fewer entries
        self._run(self.h[start:t + 1], start, x0, y0, x1, y1)
        self.needed[start:t + 1] = self.h[start:t + 1] + np.arange(start, t + 1)
        self.known = t + 1

    def alone(self, t: int) -> int:
        """``h(t)`` searched from a fresh cache, as LoadGen's Server early stopping (and ``t = 0``) asks for it."""
        h = self.single.get(t)
        if h is None:
            out = np.zeros(1, dtype=np.int64)
            self._run(out, t, -1, 0, 0, self.h0)
            h = self.single[t] = int(out[0])
        return h

    def __call__(self, t: int) -> int:
        if t == 0:
            return self.alone(0)
        self.extend(t)
        return int(self.h[t])

    def overlatency_allowed(self, queries: int) -> int:
        """LoadGen's ``t`` for ``queries`` queries (at least ``h(1) + 1``): one less than the least ``i >= 2`` with
        ``queries < h(i) + i``."""
        # h(t) + t grows by about 1 / (1 - x) per t: it passes ``queries`` before t = queries (1 - x) + 2
        self.extend(max(2, int((queries + 1) * (1 - self.x)) + 2))
        while self.needed[self.known - 1] <= queries:
            self.extend(self.known + max(64, self.known // 4))
        return int(np.searchsorted(self.needed[:self.known], queries, side="right")) - 1


_SEARCHES: dict[tuple[float, float, float], _PassingSearch] = {}


def _search_for(percentile: float, tolerance: float, confidence: float) -> _PassingSearch:
    key = (float(percentile), float(tolerance), float(confidence))
    search = _SEARCHES.get(key)
    if search is None:
        search = _SEARCHES[key] = _PassingSearch(*key)
    return search


def min_passing_queries(t: int, percentile: float, tolerance: float = TOLERANCE, confidence: float = CONFIDENCE) -> int:
    """LoadGen's MinPassingQueriesFinder: the least ``h`` such that ``t`` or fewer over-latency queries among ``h + t``
    has probability below ``1 - confidence`` (``BetaRegularized[percentile - tolerance, h, 1 + t] < 1 - confidence``,
    in LoadGen's arithmetic), found by LoadGen's bracketed search with ``t = 1, 2, ...`` asked in order (its
    SingleStream/MultiStream loops; ``t = 0`` from a fresh cache). Cached: each (percentile, tolerance, confidence)
    computes ``h`` for ``t = 1, 2, ...`` once, in order."""
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
    ``result_overlatency_query_count``), ``h`` the minimum passing queries for ``t`` (:func:`min_passing_queries`,
    searched as LoadGen's Server searches it: for this ``t`` alone, from a fresh cache); met iff ``n >= h + t``."""
    values = np.asarray(latencies)
    n = int(values.size)
    t = int(np.count_nonzero(values > target_latency))
    needed = _search_for(percentile, TOLERANCE, confidence).alone(t) + t
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
    return Validity(bool(valid), bool(duration_ok), bool(queries_ok), bool(early_ok),
                    None if perf_ok is None else bool(perf_ok), reason, early_text,
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


def mt19937(seed: int) -> np.random.RandomState:
    """``std::mt19937(seed)``: it takes the seed's low 32 bits, as numpy's legacy ``RandomState`` seeds the same
    generator."""
    return np.random.RandomState(int(seed) & 0xFFFFFFFF)


def uniform_doubles(state: np.random.RandomState, count: int) -> np.ndarray:
    """``count`` draws of ``std::uniform_real_distribution<double>(0, 1)`` over ``std::mt19937`` as libstdc++ computes
    them: two 32-bit words ``a, b`` make ``(a + b * 2**32) / 2**64``, kept below 1."""
    words = state.randint(0, 2 ** 32, size=2 * int(count), dtype=np.uint32).astype(np.float64)
    u = (words[0::2] + words[1::2] * 4294967296.0) / 18446744073709551616.0
    u[u >= 1.0] = np.nextafter(1.0, 0.0)
    return u


def _exponential_ns(state: np.random.RandomState, count: int, qps: float) -> np.ndarray:
    """``count`` inter-arrival gaps (whole ns) as LoadGen draws them: ``std::exponential_distribution(qps)`` over
    ``std::mt19937`` (libstdc++: ``-log(1 - u) / qps`` with ``u`` from :func:`uniform_doubles`), truncated to
    nanoseconds."""
    u = uniform_doubles(state, count)
    logs = np.fromiter(map(math.log, (1.0 - u).tolist()), dtype=np.float64, count=count)  # the C library's log
    return ((-logs / qps) * 1e9).astype(np.int64)


def server_schedule(target_qps: float, min_duration_ms: int, min_query_count: int, seed: int = 0) -> ServerSchedule:
    """Server: the Poisson arrivals LoadGen generates, exactly: exponential gaps at ``target_qps`` from a Mersenne
    Twister seeded with ``seed`` (TestSettings' ``schedule_rng_seed``; 0 unless set, as the suite leaves it), the first
    query at 0, generated while the previous query's timestamp is before the min duration or fewer than
    ``min_query_count`` exist. LoadGen issues them all (unless a max duration or query count stops it early)."""
    if not target_qps > 0:
        raise ValueError(f"target QPS must be > 0, got {target_qps}")
    state = mt19937(seed)
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
