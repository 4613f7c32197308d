"""LoadGen's rules (:mod:`conformance.perf.loadgen_rules`) against the real LoadGen.

The oracle is ``mlperf_loadgen`` itself: short real runs against fake devices on a timeline, with LoadGen's trace on.
The trace holds every sample's latency exactly as LoadGen recorded it (``complete_ns``: from its query's scheduled time
to its completion); the rules recompute from those latencies what LoadGen logged in ``mlperf_log_detail.txt`` (the
percentiles, early stopping and its estimates, the checks and the verdict) and must agree exactly. Server early
stopping is also checked against what LoadGen logged for every count of over-latency queries up to 10,000 at p99
(every 10th at p90), recorded once by real LoadGen runs into ``tests/data/loadgen_server_early_stopping.json`` (see
:func:`record_server_early_stopping`), and by live runs at a spread of them. Pure unit tests pin the search for the
minimum passing queries, the counts LoadGen generates and the validity rules.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import mlperf_loadgen as lg
import numpy as np
import pytest
from scipy.special import betainc

from conformance.hardware.devices import ServiceTimeDevice
from conformance.perf import loadgen_rules as rules
from conformance.perf.harness import ScenarioSettings, loadgen_log_settings, read_detail_log
from conformance.perf.sut import BatchingSUT

SERVICE_S = 2e-4
# Service time multipliers of successive batches: latencies spread over 0.2-1 ms, so that ranks matter.
PATTERN = (1.0, 1.5, 1.2, 3.0, 1.1, 2.0, 1.0, 5.0, 1.3, 1.05, 2.5)


def spread_device() -> ServiceTimeDevice:
    calls = itertools.count()

    def service(n):
        s = SERVICE_S * PATTERN[next(calls) % len(PATTERN)]
        return s, s

    return ServiceTimeDevice(service)


def constant_device(service_s: float = 3e-4) -> ServiceTimeDevice:
    return ServiceTimeDevice(lambda n: (service_s, service_s))


class Run:
    """A real LoadGen run with its trace: the detail log's records and every sample's trace record."""

    def __init__(self, settings: ScenarioSettings, log_dir: Path, device: ServiceTimeDevice, max_batch: int = 1):
        log_dir.mkdir(parents=True, exist_ok=True)
        qsl = lg.ConstructQSL(8, 8, lambda indices: None, lambda indices: None)
        sut = BatchingSUT(device, max_batch=max_batch)
        log_settings = loadgen_log_settings(log_dir, trace=True)
        try:
            lg.StartTestWithLogSettings(sut.sut, qsl, settings.loadgen_settings(), log_settings)
        finally:
            sut.close()
            lg.DestroyQSL(qsl)
        self.settings = settings
        self.records = read_detail_log(log_dir / "mlperf_log_detail.txt")
        # The trace is one JSON event per line (the file as a whole is not strict JSON): a sample's begin event holds
        # its query, its scheduled time (ts, us) and its recorded latency (complete_ns).
        self.samples = sorted((json.loads(line.rstrip().rstrip(","))
                               for line in (log_dir / "mlperf_log_trace.json").read_text().splitlines()
                               if line.startswith('{"name":"Sample"') and '"ph":"b"' in line),
                              key=lambda e: e["args"]["sample_seq"])
        self.sample_latencies = [e["args"]["complete_ns"] for e in self.samples]
        queries: dict[int, list] = {}
        for e in self.samples:
            queries.setdefault(e["args"]["query_seq"], []).append(e)
        self.queries = [queries[q] for q in sorted(queries)]
        self.query_latencies = [max(e["args"]["complete_ns"] for e in q) for q in self.queries]
        # each query's scheduled time, from the first one's (trace microseconds); SingleStream/MultiStream issue at it
        first = self.queries[0][0]["ts"] if self.queries else 0.0
        self.scheduled_s = [(q[0]["ts"] - first) / 1e6 for q in self.queries]

    def early_stopping_text(self, text: str) -> str:
        return text.replace("\n", " ")  # the detail log writes LoadGen's newlines as spaces

    @property
    def expected_latency_ns(self) -> int:
        key = "single_stream" if self.settings.scenario == "SingleStream" else "multi_stream"
        return self.records[f"requested_{key}_expected_latency_ns"]


def stream_settings(scenario: str, **overrides) -> ScenarioSettings:
    values = dict(min_duration_ms=1, expected_latency_s=3e-4)
    values.update(overrides)
    return ScenarioSettings(scenario, **values)


def check_percentiles(run: Run) -> None:
    r = run.records
    for p in rules.LOGGED_PERCENTILES:
        label = rules.percentile_label(p)
        assert r[f"result_{label}_percentile_latency_ns"] == rules.percentile_value(run.sample_latencies, p), p
        if run.settings.scenario == "MultiStream":
            assert r[f"result_{label}_percentile_per_query_latency_ns"] == rules.percentile_value(run.query_latencies, p)
    assert rules.percentile_latencies(run.sample_latencies) == {
        p: r[f"result_{rules.percentile_label(p)}_percentile_latency_ns"] for p in rules.LOGGED_PERCENTILES}


def check_stream_validity(run: Run) -> rules.Validity:
    s, r = run.settings, run.records
    verdict = rules.validity(s.scenario, min_duration_ms=s.min_duration_ms, min_query_count=s.min_query_count,
                             queries_issued=r["result_query_count"], sample_latencies=run.sample_latencies,
                             query_latencies=run.query_latencies, final_issued_s=run.scheduled_s[-1],
                             samples_per_query=r["effective_samples_per_query"])
    assert ("VALID" if verdict.valid else "INVALID") == r["result_validity"]
    assert verdict.min_duration_met == r["result_min_duration_met"]
    assert verdict.min_queries_met == r["result_min_queries_met"]
    assert verdict.early_stopping_met == r["early_stopping_met"]
    assert verdict.perf_constraints_met is None and "result_perf_constraints_met" not in r  # no constraint in 6.x
    assert verdict.invalid_reason == r.get("result_invalid_reason", "")
    assert run.early_stopping_text(verdict.early_stopping_result) == r["early_stopping_result"]
    return verdict


@pytest.mark.parametrize("count", [40, 63, 64, 100, 300, 700])
def test_single_stream_matches_loadgen(tmp_path, count):
    run = Run(stream_settings("SingleStream", min_query_count=count), tmp_path, spread_device())
    r = run.records
    assert r["result_query_count"] == len(run.sample_latencies) == count  # 1 ms min duration: the count decides
    assert r["generated_query_count"] == rules.generated_query_count(
        "SingleStream", 1, count, expected_latency_ns=run.expected_latency_ns)
    check_percentiles(run)
    p90 = rules.early_stopping_estimate(run.sample_latencies, rules.SINGLE_STREAM_PERCENTILE)
    p99 = rules.early_stopping_estimate(run.sample_latencies, rules.MULTI_STREAM_PERCENTILE)
    assert p90.met == r["early_stopping_met"] == (count >= 64)
    assert r["early_stopping_latency_ss"] == (p90.estimate if p90.met else 0)
    assert r["early_stopping_latency_ms"] == (p99.estimate if p90.met and p99.met else 0)
    if p90.met:
        assert f"Would discard {p90.discarded} highest latency queries." in r["early_stopping_result"]
        assert p90.estimate == sorted(run.sample_latencies)[count - 1 - p90.discarded]
    met, text = rules.early_stopping_result("SingleStream", run.sample_latencies)
    assert (met, run.early_stopping_text(text)) == (r["early_stopping_met"], r["early_stopping_result"])
    assert check_stream_validity(run).valid == (count >= 64)
    assert all(not rules.stream_issue_done(k + 1, t, 1, count) for k, t in enumerate(run.scheduled_s[:-1]))
    assert rules.stream_issue_done(count, run.scheduled_s[-1], 1, count)


@pytest.mark.parametrize("count", [40, 100, 661, 662, 700])
def test_multi_stream_matches_loadgen(tmp_path, count):
    run = Run(stream_settings("MultiStream", min_query_count=count), tmp_path, spread_device(), max_batch=8)
    r = run.records
    assert r["result_query_count"] == len(run.query_latencies) == count
    assert len(run.sample_latencies) == 8 * count
    check_percentiles(run)
    early = rules.early_stopping_estimate(run.query_latencies, rules.MULTI_STREAM_PERCENTILE)
    assert early.met == r["early_stopping_met"] == (count >= 662)
    assert r["early_stopping_latency_ms"] == (early.estimate if early.met else 0)
    assert run.early_stopping_text(early.message) == r["early_stopping_result"]
    assert check_stream_validity(run).valid == early.met


def test_stream_runs_that_miss_min_duration_or_min_queries(tmp_path):
    # 10 ms expected, 0.3 ms real: LoadGen generates 40 queries (min duration 2 x 50 ms / 10 ms + 1 < 40), issues
    # them in ~15 ms and runs out before the min duration
    for scenario, max_batch in (("SingleStream", 1), ("MultiStream", 8)):
        run = Run(stream_settings(scenario, min_duration_ms=50, min_query_count=40, expected_latency_s=0.01),
                  tmp_path / scenario, constant_device(), max_batch=max_batch)
        assert run.expected_latency_ns == 10_000_000
        assert run.records["generated_query_count"] == rules.generated_query_count(
            scenario, 50, 40, expected_latency_ns=run.expected_latency_ns) == 40
        verdict = check_stream_validity(run)
        assert not verdict.min_duration_met and verdict.min_queries_met
        assert verdict.invalid_reason == rules.MIN_DURATION_RECOMMENDATIONS[scenario] + " "
    # a max duration of 10 ms stops issuing long before the 1000 queries asked for
    run = Run(stream_settings("SingleStream", min_duration_ms=50, min_query_count=1000, max_duration_ms=10),
              tmp_path / "max", constant_device())
    verdict = check_stream_validity(run)
    assert not verdict.min_queries_met and not verdict.min_duration_met
    assert verdict.invalid_reason == rules.MIN_DURATION_RECOMMENDATIONS["SingleStream"] + " " + rules.MIN_QUERIES_NOT_MET
    assert rules.stream_issue_done(len(run.queries) - 1, run.scheduled_s[-2], 50, 1000, max_duration_ms=10) is False


@pytest.mark.parametrize("case", ["misses", "meets"])
def test_server_matches_loadgen(tmp_path, case):
    if case == "misses":  # the 0.3 ms service alone is close to the 0.35 ms bound: most queries are over it
        settings = ScenarioSettings("Server", min_duration_ms=50, min_query_count=100, target_qps=2000,
                                    server_latency_ms=0.35)
    else:  # a bound no query comes near, and enough queries for early stopping with none over it
        settings = ScenarioSettings("Server", min_duration_ms=200, min_query_count=700, target_qps=3000,
                                    server_latency_ms=1000)
    run = Run(settings, tmp_path, constant_device(), max_batch=4)
    r = run.records
    schedule = rules.server_schedule(settings.target_qps, settings.min_duration_ms, settings.min_query_count,
                                     seed=r["effective_schedule_rng_seed"])
    assert (len(schedule), schedule.duration_ns) == (r["generated_query_count"], r["generated_query_duration"])
    assert r["result_query_count"] == len(run.sample_latencies) == len(schedule)
    final_scheduled_s = schedule.scheduled_ns[-1] / 1e9
    assert r["result_scheduled_samples_per_sec"] == pytest.approx((len(schedule) - 1) / final_scheduled_s, rel=1e-5)
    check_percentiles(run)
    target_ns = r["effective_target_latency_ns"]
    early = rules.server_early_stopping(run.sample_latencies, target_ns)
    assert early.overlatency == r["result_overlatency_query_count"]
    assert early.met == r["early_stopping_met"] == (case == "meets")
    assert run.early_stopping_text(early.message) == r["early_stopping_result"]
    verdict = rules.validity("Server", min_duration_ms=settings.min_duration_ms,
                             min_query_count=settings.min_query_count, queries_issued=r["result_query_count"],
                             sample_latencies=run.sample_latencies, target_latency=target_ns,
                             final_scheduled_s=final_scheduled_s)
    assert verdict.perf_constraints_met == r["result_perf_constraints_met"] == (case == "meets")
    assert verdict.min_duration_met == r["result_min_duration_met"] is True
    assert verdict.min_queries_met == r["result_min_queries_met"]
    assert ("VALID" if verdict.valid else "INVALID") == r["result_validity"]
    assert verdict.invalid_reason == r.get("result_invalid_reason", "")
    if case == "misses":
        assert verdict.invalid_reason == rules.PERF_CONSTRAINTS_NOT_MET + " "
        assert early.more_queries_needed == early.queries_needed - early.queries > 0


def test_offline_matches_loadgen(tmp_path):
    # 1.1 x 1.15 s x 200 QPS is 253 in exact arithmetic; LoadGen's floating point gives 252
    settings = ScenarioSettings("Offline", min_duration_ms=1150, target_qps=200)
    run = Run(settings, tmp_path, constant_device(), max_batch=8)
    r = run.records
    count = rules.offline_sample_count(200, 1150, settings.min_query_count)
    assert count == r["effective_samples_per_query"] == r["generated_samples_per_query"] == 252
    assert r["generated_query_count"] == rules.generated_query_count("Offline", 1150, 1) == 1
    assert len(run.sample_latencies) == count
    check_percentiles(run)
    last_completion_s = max(run.sample_latencies) / 1e9
    assert r["result_samples_per_second"] == pytest.approx(count / last_completion_s, rel=1e-5)
    verdict = rules.validity("Offline", min_duration_ms=1150, min_query_count=settings.min_query_count,
                             queries_issued=r["result_query_count"], sample_latencies=run.sample_latencies,
                             last_completion_s=last_completion_s, samples_per_query=count)
    assert (verdict.valid, verdict.min_duration_met, verdict.min_queries_met, verdict.early_stopping_met) == (
        r["result_validity"] == "VALID", r["result_min_duration_met"], r["result_min_queries_met"],
        r["early_stopping_met"])
    assert verdict.invalid_reason == r["result_invalid_reason"] == rules.MIN_DURATION_RECOMMENDATIONS["Offline"] + " "
    assert verdict.early_stopping_result == r["early_stopping_result"] == ""


# -- Server early stopping at many over-latency counts ----------------------------------------------------------------

SERVER_DATA = Path(__file__).parent / "data" / "loadgen_server_early_stopping.json"
# What the recorded data covers: (percentile, first t, last t, stride).
SERVER_RECORDED = ((0.99, 0, 10_000, 1), (0.90, 0, 10_000, 10))


def loadgen_server_run(log_dir: Path, overlatency: int, queries: int, percentile: float = 0.99) -> dict:
    """The detail log of a real LoadGen Server run of ``queries`` queries, every one over the latency bound
    (``overlatency == queries``) or every one under it (``overlatency == 0``).

    A SUT that completes each query as it is issued (a few microseconds), a bound of 1 ns (all over) or 1000 s (all
    under), 1M QPS, min duration 0 and min query count ``queries``, so that LoadGen issues exactly ``queries``. Fast:
    10,000 queries take about 0.05 s."""
    assert overlatency in (0, queries)
    log_dir.mkdir(parents=True, exist_ok=True)

    def issue(samples):
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])

    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(8, 8, lambda indices: None, lambda indices: None)
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_duration_ms = 0
    settings.min_query_count = queries
    settings.server_target_qps = 1e6
    settings.server_target_latency_ns = 1 if overlatency else 10**12
    settings.server_target_latency_percentile = percentile
    settings.server_coalesce_queries = True
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, loadgen_log_settings(log_dir))
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    records = read_detail_log(log_dir / "mlperf_log_detail.txt")
    assert (records["result_query_count"], records["result_overlatency_query_count"]) == (queries, overlatency)
    return records


def loadgen_min_passing_queries(log_dir: Path, t: int, percentile: float) -> int:
    """LoadGen's ``h`` for ``t`` over-latency queries in a Server run, read off an unsuccessful run: ``t`` queries all
    over the bound (10 all under it for ``t = 0``, fewer than LoadGen's ``h(0)`` at p90 and p99), after which LoadGen
    "would need to run at least ``h + t - n`` more queries"."""
    queries = t if t else 10
    records = loadgen_server_run(log_dir, t, queries, percentile)
    assert not records["early_stopping_met"]
    more = re.search(r"Would need to run at least (\d+) more queries", records["early_stopping_result"])
    return int(more.group(1)) + queries - t


def record_server_early_stopping(path: Path = SERVER_DATA) -> None:
    """Record the real LoadGen's Server ``h(t)`` over :data:`SERVER_RECORDED` into ``path`` (about 15 minutes; run
    ``python -m tests.test_loadgen_rules``). Each ``h`` is one LoadGen run (:func:`loadgen_min_passing_queries`)."""
    entries = []
    with tempfile.TemporaryDirectory() as log_dir:
        for percentile, first, last, stride in SERVER_RECORDED:
            h = [loadgen_min_passing_queries(Path(log_dir), t, percentile) for t in range(first, last + 1, stride)]
            entries.append((percentile, first, last, stride, h))
    lines = ["{", f'  "loadgen": "mlcommons-loadgen {importlib.metadata.version("mlcommons-loadgen")}",',
             '  "what": "h(t): LoadGen\'s minimum passing queries for t over-latency queries in a Server run '
             '(confidence 0.99, tolerance 0), read off its early_stopping_result (tests/test_loadgen_rules.py, '
             'record_server_early_stopping)",', '  "runs": [']
    for k, (percentile, first, last, stride, h) in enumerate(entries):
        rows = ",\n      ".join(", ".join(map(str, h[i:i + 20])) for i in range(0, len(h), 20))
        head = f'    {{"percentile": {percentile}, "t": [{first}, {last}, {stride}], "h": ['
        lines.append(f"{head}\n      {rows}\n    ]}}" + ("," if k < len(entries) - 1 else ""))
    lines += ["  ]", "}"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("percentile, overlatency, queries", [
    (0.99, 0, 458), (0.99, 0, 459), (0.99, 1, 1), (0.99, 2, 2), (0.99, 100, 100),
    *((0.99, t, t) for t in range(1000, 10_001, 1000)),
    (0.99, 8549, 8549), (0.99, 8550, 8550), (0.99, 8551, 8551),
    (0.90, 0, 43), (0.90, 0, 44), (0.90, 1, 1), (0.90, 5000, 5000),
])
def test_server_early_stopping_matches_loadgen_live(tmp_path, percentile, overlatency, queries):
    records = loadgen_server_run(tmp_path, overlatency, queries, percentile)
    latencies = np.full(queries, 2 if overlatency else 0)  # over / under a bound of 1
    result = rules.server_early_stopping(latencies, 1, percentile=percentile)
    assert result.overlatency == records["result_overlatency_query_count"]
    assert result.met == records["early_stopping_met"]
    assert result.message.replace("\n", " ") == records["early_stopping_result"]


def test_server_early_stopping_matches_recorded_loadgen():
    data = json.loads(SERVER_DATA.read_text())
    assert [(e["percentile"], *e["t"]) for e in data["runs"]] == list(SERVER_RECORDED)
    over = np.full(10_001, 2)
    for entry in data["runs"]:
        percentile, (first, last, stride) = entry["percentile"], entry["t"]
        ts = range(first, last + 1, stride)
        assert len(entry["h"]) == len(ts)
        server = [rules.server_early_stopping(over[:t], 1, percentile=percentile).queries_needed - t for t in ts]
        assert [(t, h) for t, h, expected in zip(ts, server, entry["h"]) if h != expected] == []
        # LoadGen's SingleStream/MultiStream search (t = 1, 2, ... in turn) gives the same h over this range
        assert [rules.min_passing_queries(t, percentile) for t in ts] == entry["h"]


def test_server_early_stopping_at_p99_and_8550_over_latency_is_loadgens():
    # The exact binomial CDF has h = 868100 fail (odds 0.0100000000279 >= 0.01), so the exact least passing h is
    # 868101; LoadGen's arithmetic has it pass (0.0099999999955), and LoadGen needs 868100 + 8550 queries.
    assert betainc(868100, 8551, 0.99) > 0.01 > betainc(868101, 8551, 0.99)
    result = rules.server_early_stopping(np.r_[np.full(868_099, 0), np.full(8550, 2)], 1)
    assert (result.overlatency, result.queries_needed, result.more_queries_needed) == (8550, 876_650, 1)
    assert rules.server_early_stopping(np.r_[np.full(868_100, 0), np.full(8550, 2)], 1).met
    assert rules.min_passing_queries(8550, 0.99) == 868_100
    # SingleStream/MultiStream at p99: 876,650 queries afford 8550 over-latency queries (discarding 8549)
    assert rules.early_stopping_estimate(np.arange(876_650), 0.99).discarded == 8549
    assert rules.early_stopping_estimate(np.arange(876_649), 0.99).discarded == 8548


# -- pure rules --------------------------------------------------------------------------------------------------------

def test_min_passing_queries_known_values():
    assert rules.min_passing_queries(1, 0.90) == 63 and rules.early_stopping_queries_needed(0.90) == 64
    assert rules.min_passing_queries(1, 0.99) == 661 and rules.early_stopping_queries_needed(0.99) == 662
    assert rules.min_passing_queries(0, 0.99) == 459  # 0.99^459 < 0.01 <= 0.99^458
    assert rules.min_passing_queries(0, 0.90) == 44
    assert [rules.min_passing_queries(t, 0.90) for t in range(1, 5)] == [63, 79, 94, 109]
    with pytest.raises(ValueError):
        rules.min_passing_queries(-1, 0.9)


@pytest.mark.parametrize("p, top", [(0.90, 3000), (0.99, 700)])
def test_min_passing_queries_is_the_least_passing_and_increasing(p, top):
    h = [rules.min_passing_queries(t, p) for t in range(top)]
    limit = 1 - rules.CONFIDENCE
    for t in range(top):
        assert betainc(h[t], 1 + t, p) < limit <= betainc(h[t] - 1, 1 + t, p), t
    steps = np.diff(h)
    assert (steps >= int(p / (1 - p))).all()  # each allowed over-latency query costs at least p / (1 - p) passing ones
    # LoadGen searches a single t (Server) from a fresh cache in [t p/(1-p) + h(0), (t + 1) h(0) + 1]: the least
    # passing h lies inside, so the cached search agrees with it
    h0 = h[0]
    for t in range(top):
        assert int(t * (p / (1 - p)) + h0) <= h[t] <= int(t * float(h0) + h0 + 1), t


def test_early_stopping_search_is_loadgens_loop():
    def loadgen_loop(n, p):  # LoadGen's loop as written: the first i >= 2 with n < h(i) + i
        for i in range(2, n + 1):
            if n < rules.min_passing_queries(i, p) + i:
                return i - 1
        raise AssertionError("unreachable")

    latencies = np.random.default_rng(0).integers(1, 10**6, size=5000)
    for p in (0.90, 0.99):
        for n in [rules.early_stopping_queries_needed(p), 700, 1000, 1733, 2500, 4999, 5000]:
            if n < rules.early_stopping_queries_needed(p):
                continue
            result = rules.early_stopping_estimate(latencies[:n], p)
            t = loadgen_loop(n, p)
            assert result.discarded == t - 1
            assert result.estimate == np.sort(latencies[:n])[n - t]


def test_early_stopping_estimate_boundaries_and_wording():
    latencies = list(range(100, 163))  # 63 queries: one short of p90 early stopping
    result = rules.early_stopping_estimate(latencies, 0.90)
    assert (result.met, result.estimate, result.queries_needed) == (False, None, 64)
    assert result.message == " * Only processed 63 queries.\n * Need to process at least 64 queries for early stopping."
    result = rules.early_stopping_estimate(latencies + [5], 0.90)  # unsorted input
    assert (result.met, result.discarded, result.estimate) == (True, 0, 162)  # t = 1: the highest latency
    assert result.message == (" * Processed at least 64 queries (64).\n * Would discard 0 highest latency queries.\n"
                              " * Early stopping 90.0th percentile estimate: 162")
    met, text = rules.early_stopping_result("SingleStream", latencies + [5])
    assert met and text.endswith("\n * Not enough queries processed for 99.0th percentile\n early stopping estimate "
                                 "(would need to process at\n least 662 total queries).")
    assert rules.early_stopping_estimate([x / 1e3 for x in range(700)], 0.99).estimate == 0.699  # any units
    assert rules.early_stopping_result("Offline", [1, 2]) == (True, "")


def test_early_stopping_over_many_queries_is_fast():
    latencies = np.random.default_rng(1).integers(1, 10**7, size=300_000)
    start = time.perf_counter()
    first = rules.early_stopping_estimate(latencies, 0.90)
    again = rules.early_stopping_estimate(latencies, 0.90)
    assert first == again and first.met and first.discarded > 20_000
    assert time.perf_counter() - start < 10.0


def test_server_early_stopping():
    under = [1] * 458
    assert not rules.server_early_stopping(under, 1).met  # at the bound is not over it; 459 needed with none over
    assert rules.server_early_stopping(under, 1).more_queries_needed == 1
    result = rules.server_early_stopping(under + [1], 1)
    assert (result.met, result.overlatency, result.queries_needed, result.message) == (True, 0, 459, " * Run successful.")
    one_over = [1] * 661 + [2]
    result = rules.server_early_stopping(one_over, 1)
    assert (result.met, result.overlatency, result.queries_needed) == (True, 1, 662)
    result = rules.server_early_stopping(one_over[1:], 1)
    assert not result.met and result.more_queries_needed == 1
    assert result.message == (" * Run unsuccessful.\n * Processed 661 queries.\n * Would need to run at least 1 more "
                              "queries,\n with the run being successful if every additional\n query were under latency.")


def test_percentiles_index_like_loadgen():
    values = list(range(100, 0, -1))  # unsorted
    assert rules.percentile_value(values, 0.90) == 91  # sorted[int(100 * 0.9)] = sorted[90]
    assert rules.percentile_value(values, 0.50) == 51
    assert rules.percentile_value(values, 0.999) == 100
    assert rules.percentile_value([3, 1, 2], 0.0) == 1
    assert rules.percentile_latencies(list(range(10))) == {0.5: 5, 0.9: 9, 0.95: 9, 0.97: 9, 0.99: 9, 0.999: 9}
    assert [rules.percentile_label(p) for p in rules.LOGGED_PERCENTILES] == [
        "50.00", "90.00", "95.00", "97.00", "99.00", "99.90"]
    for bad in ([], [[1, 2]]):
        with pytest.raises(ValueError):
            rules.percentile_value(bad, 0.5)
    with pytest.raises(ValueError):
        rules.percentile_value([1], 1.0)


def test_generated_and_issued_query_counts():
    assert rules.stream_query_period_ns(300_000) == 300_000
    assert rules.stream_generated_query_count(300_000, 50, 64) == 335  # timestamps up to 100.2 ms: 334 steps + 1
    assert rules.stream_generated_query_count(1_000_000, 50, 1) == 101  # the 100 ms timestamp is the last
    assert rules.stream_generated_query_count(300_000, 50, 1000) == 1000
    assert rules.generated_query_count("Offline", 50, 1) == 1
    with pytest.raises(ValueError):
        rules.generated_query_count("SingleStream", 50, 1)
    # a SingleStream query ends the run once both minimums hold at its issue time, or a maximum is reached
    assert not rules.stream_issue_done(63, 1.0, 500, 64)
    assert not rules.stream_issue_done(64, 0.4999, 500, 64)
    assert rules.stream_issue_done(64, 0.5, 500, 64)
    assert rules.stream_issue_done(10, 0.0101, 500, 64, max_duration_ms=10)
    assert not rules.stream_issue_done(10, 0.0100, 500, 64, max_duration_ms=10)
    assert rules.stream_issue_done(10, 0.001, 500, 64, max_query_count=10)
    # Server: LoadGen's Poisson schedule (mt19937 seeded 0), as a real run logged it
    schedule = rules.server_schedule(2000, 50, 100)
    assert (len(schedule), schedule.duration_ns, int(schedule.scheduled_ns[-1])) == (100, 53_553_676, 53_474_506)
    assert schedule.scheduled_ns[0] == 0 and (np.diff(schedule.scheduled_ns) >= 0).all()
    longer = rules.server_schedule(2000, 200, 1)
    assert longer.scheduled_ns[-2] < 200_000_000 <= longer.scheduled_ns[-1]  # generated until past the min duration
    assert (longer.scheduled_ns[:100] == schedule.scheduled_ns).all()  # the same draws
    assert not np.array_equal(rules.server_schedule(2000, 50, 100, seed=1).scheduled_ns, schedule.scheduled_ns)
    assert rules.generated_query_count("Server", 50, 100, target_qps=2000) == 100
    # Offline: 10% over min duration x expected QPS, in LoadGen's floating point; min_query_count as a floor
    assert rules.offline_sample_count(200, 1150, 1) == 252
    assert rules.offline_sample_count(200, 50, 1) == 11
    assert rules.offline_sample_count(100, 1000, 500) == 500
    assert rules.offline_sample_count(1000, 600_000, 1) == 660_000


def test_validity_rules():
    assert rules.min_duration_met("Offline", 1000, last_completion_s=1.0)
    assert not rules.min_duration_met("Offline", 1000, last_completion_s=0.999)
    assert rules.min_duration_met("Server", 1000, final_scheduled_s=1.0, final_issued_s=0.5)
    assert not rules.min_duration_met("SingleStream", 1000, final_issued_s=0.9, final_scheduled_s=2.0)
    with pytest.raises(ValueError):
        rules.min_duration_met("MultiStream", 1000, last_completion_s=2.0)
    assert rules.min_queries_met(100, 100) and not rules.min_queries_met(99, 100)
    assert not rules.min_queries_met(1, 1, sample_count=10, min_sample_count=11)
    assert [rules.has_perf_constraints(s) for s in ("SingleStream", "MultiStream", "Server", "Offline")] == [
        False, False, True, False]
    assert rules.perf_constraints_met("Server", list(range(100)), 99)  # p99 = sorted[99]
    assert not rules.perf_constraints_met("Server", list(range(100)), 98)
    assert rules.perf_constraints_met("MultiStream", [10**9], 1)

    fast = [1] * 700
    ok = rules.validity("SingleStream", min_duration_ms=100, min_query_count=700, queries_issued=700,
                        sample_latencies=fast, final_issued_s=0.1)
    assert ok.valid and ok.invalid_reason == "" and ok.reasons == []
    assert ok.checks == {"min_duration": True, "min_queries": True, "early_stopping": True}
    short = rules.validity("SingleStream", min_duration_ms=100, min_query_count=700, queries_issued=50,
                           sample_latencies=fast[:50], final_issued_s=0.05)
    assert not short.valid and not short.early_stopping_met
    assert short.invalid_reason == ("Decrease the expected latency so the loadgen pre-generates more queries. "
                                    "The test exited early, before enough queries were issued.")
    assert short.reasons[-1] == "* Only processed 50 queries. * Need to process at least 64 queries for early stopping."
    # early stopping alone: INVALID with an empty invalid reason, as LoadGen logs it
    ms = rules.validity("MultiStream", min_duration_ms=100, min_query_count=100, queries_issued=100,
                        sample_latencies=[1] * 800, query_latencies=[1] * 100, final_issued_s=0.2, samples_per_query=8)
    assert not ms.valid and ms.invalid_reason == "" and ms.checks["early_stopping"] is False
    assert not rules.validity("MultiStream", min_duration_ms=100, min_query_count=100, queries_issued=100,
                              sample_latencies=[1] * 799, query_latencies=[1] * 100, final_issued_s=0.2,
                              samples_per_query=8).min_queries_met
    slow = [1] * 600 + [5] * 10
    server = rules.validity("Server", min_duration_ms=100, min_query_count=100, queries_issued=610,
                            sample_latencies=slow, target_latency=2, final_scheduled_s=0.1)
    assert server.checks == {"min_duration": True, "min_queries": True, "early_stopping": False,
                             "perf_constraints": False}
    assert server.invalid_reason == "Reduce target QPS to improve latency. "
    offline = rules.validity("Offline", min_duration_ms=100, min_query_count=1, queries_issued=1,
                             sample_latencies=[1] * 11, last_completion_s=0.1, samples_per_query=11)
    assert offline.valid and offline.perf_constraints_met is None and offline.early_stopping_result == ""
    assert not rules.validity("Offline", min_duration_ms=100, min_query_count=1, queries_issued=1,
                              sample_latencies=[1] * 10, last_completion_s=0.1, samples_per_query=11).valid
    with pytest.raises(ValueError):
        rules.validity("Batch", min_duration_ms=1, min_query_count=1, queries_issued=1, sample_latencies=[1])



def test_validity_checks_are_plain_bools():
    # numpy times, counts, latencies and bounds (as a virtual-time run has them) give plain bools: JSON writes them
    latencies = np.full(700, 3, dtype=np.int64)
    verdicts = [
        rules.validity("Server", min_duration_ms=100, min_query_count=100, queries_issued=np.int64(700),
                       sample_latencies=latencies, target_latency=np.int64(5), final_scheduled_s=np.float64(0.2)),
        rules.validity("SingleStream", min_duration_ms=100, min_query_count=700, queries_issued=np.int64(700),
                       sample_latencies=latencies, final_issued_s=np.float64(0.05)),
        rules.validity("MultiStream", min_duration_ms=100, min_query_count=100, queries_issued=np.int64(100),
                       sample_latencies=np.tile(latencies, 8)[:800], query_latencies=latencies[:100],
                       final_issued_s=np.float64(0.2), samples_per_query=8),
        rules.validity("Offline", min_duration_ms=100, min_query_count=1, queries_issued=np.int64(1),
                       sample_latencies=latencies[:11], last_completion_s=np.float64(0.1), samples_per_query=11),
    ]
    for verdict in verdicts:
        assert all(type(value) is bool for value in verdict.checks.values()), verdict.checks
        assert type(verdict.valid) is bool
        json.dumps(verdict.checks)
    assert [v.valid for v in verdicts] == [True, False, False, True]

if __name__ == "__main__":
    record_server_early_stopping(Path(sys.argv[1]) if len(sys.argv) > 1 else SERVER_DATA)
