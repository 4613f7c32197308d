"""LoadGen's own logs for a run on virtual time: ``mlperf_log_summary.txt`` and ``mlperf_log_detail.txt``.

A simulated run (:mod:`conformance.perf.virtual`) never passes through ``mlperf_loadgen``, but MLPerf's tools (the
submission checker, ``log_parser.MLPerfLog``) and :func:`conformance.perf.harness.parse_result` read LoadGen's logs.
:func:`write_loadgen_logs` writes them for the simulated run: the keys, their order, units and value formats and the
summary's lines of the installed LoadGen (6.0.x, ``loadgen/results.cc``, ``test_settings_internal.cc``,
``loadgen.cc``, ``logging.cc``) for the same scenario and settings, so that a reader gets from them the run's
:class:`~conformance.perf.harness.ScenarioResult`.

What is not LoadGen's:

- The timeline is simulated, and the detail log says so (a ``generic_message`` after "Starting performance mode").
  Wall-clock fields count from a virtual start at the Unix epoch (``test_datetime``, ``power_begin``/``power_end``,
  ``time_ms``); LoadGen's build fields (``loadgen_version``'s revision, build and commit dates, git log, file hashes)
  name no build; ``pid``, ``tid`` and ``line_no`` are 0. The same run gives byte-identical logs.
- The run's figures (throughputs in samples/s, queries/s) are written exactly, where LoadGen writes 6 significant
  digits, so that the logs give back the result's value; settings are written as LoadGen writes them.
- A figure the run leaves undefined (``None`` in the result: no completed sample, or no time elapsed) is ``null``.
- Samples are loaded in order (the simulation draws from indices ``0..n-1``), so ``loaded_qsl_set`` is not LoadGen's
  shuffled set; the QSL's total count is its performance count.
- An error of the system under test that ended the run is logged as LoadGen logs its runtime errors (``error_runtime``,
  counted in ``num_errors`` and the summary), and makes the run INVALID with it as the reason.

An accuracy-mode run's logs are LoadGen's for that mode: no verdict, and a summary of the warning and error counts.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Iterable

import numpy as np

from conformance.fileio import write_text_atomic
from conformance.perf import loadgen_rules as rules
from conformance.perf.harness import ScenarioResult, ScenarioSettings
from conformance.perf.trace import SimulationTrace

DETAIL_FILE = "mlperf_log_detail.txt"
SUMMARY_FILE = "mlperf_log_summary.txt"
# The names LoadGen's Python bindings give the harness's SUT and QSL (the same names as a real run's).
SUT_NAME = "PySUT"
QSL_NAME = "PyQSL"
SIMULATED_NOTE = (
    "Simulated run: this LoadGen scenario ran as a discrete-event simulation on virtual time, not in mlperf_loadgen. "
    "Latencies and throughput are the simulation's; test_datetime, power_begin, power_end and time_ms count from a "
    "virtual start at the Unix epoch; the loadgen build fields name no build."
)
VIRTUAL_START = datetime(1970, 1, 1, tzinfo=timezone.utc)
RULER = "=" * 48
RAN_OUT_OF_QUERIES = ("Ending early: Ran out of generated queries to issue before the minimum query count and test "
                      "duration were reached. Please update the relevant expected latency or target qps in the "
                      "TestSettings so they are more accurate.")
ENDED_NATURALLY = "Ending naturally: Minimum query count and test duration met."
MIN_QUERIES_SUMMARY = (" * The test exited early, before enough queries were issued.\n"
                       "   See the detailed log for why this may have occurred.")


def _loadgen_version() -> str:
    """The installed LoadGen's version, whose log format this is."""
    try:
        return metadata.version("mlcommons-loadgen")
    except metadata.PackageNotFoundError:
        return "unknown"


# -- values as LoadGen writes them ------------------------------------------------------------------------------------

class _ExactFigure(float):
    """A figure of the run, written with every digit (LoadGen writes 6 significant digits)."""


def _double(value: float) -> str:
    """A double as C++'s ``ostream <<`` writes it (6 significant digits, ``%g``)."""
    return "%g" % value


def _json(value) -> str:
    """A detail-log value: strings quoted, booleans ``true``/``false``, integers as they are, doubles as LoadGen writes
    them (:class:`_ExactFigure` figures with every digit), lists as LoadGen's ``[a,b]``, None and non-finite numbers
    ``null``."""
    if value is None:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            return "null"
        return repr(float(value)) if isinstance(value, _ExactFigure) else _double(float(value))
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return "[" + ",".join(str(int(v)) for v in value) + "]"


def _summary_value(value) -> str:
    """A value in the summary, as ``ostream <<`` writes it (booleans as 0/1; undefined as ``nan``)."""
    if value is None or (isinstance(value, (float, np.floating)) and not math.isfinite(value)):
        return "nan"
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return _double(float(value))


def _fixed(value) -> str:
    """LoadGen's ``DoubleToString``: fixed, 2 decimals."""
    return "nan" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _ns(seconds: float) -> int:
    return int(round(float(seconds) * 1e9))


def _time_ms(seconds: float) -> str:
    ns = max(_ns(seconds), 0)
    return f"{ns // 1_000_000}.{ns % 1_000_000:06d}"


def _power_time(seconds: float) -> str:
    """LoadGen's ``DateTimeStringForPower`` of the virtual start plus ``seconds``: ``%m-%d-%Y %H:%M:%S.mmm``, UTC."""
    ms = int(float(seconds) * 1000)
    stamp = VIRTUAL_START.timestamp() + ms // 1000
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%m-%d-%Y %H:%M:%S") + f".{ms % 1000:03d}"


class _DetailLog:
    """The ``:::MLLOG`` records, in order, each stamped with the virtual time it is logged at."""

    def __init__(self):
        self.lines: list[str] = []
        self.errors = 0
        self.now_s = 0.0

    def log(self, key: str, value, source: str, *, error: bool = False) -> None:
        self.errors += bool(error)
        self.lines.append(
            f':::MLLOG {{"key": {json.dumps(key)}, "value": {_json(value)}, "time_ms": {_time_ms(self.now_s)}, '
            f'"namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {{"is_error": '
            f'{_json(error)}, "is_warning": false, "file": "{source}", "line_no": 0, "pid": 0, "tid": 0}}}}')

    def log_all(self, records: Iterable[tuple[str, object]], source: str) -> None:
        for key, value in records:
            self.log(key, value, source)

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


# -- settings ----------------------------------------------------------------------------------------------------------

def _requested_settings(scenario: str, ls) -> list[tuple[str, object]]:
    """LoadGen's ``requested_*`` records of TestSettings ``ls`` (``LogRequestedTestSettings``)."""
    specific = {
        "SingleStream": ("single_stream_expected_latency_ns", "single_stream_target_latency_percentile"),
        "MultiStream": ("multi_stream_expected_latency_ns", "multi_stream_target_latency_percentile",
                        "multi_stream_samples_per_query"),
        "Server": ("server_target_qps", "server_target_latency_ns", "server_target_latency_percentile",
                   "server_coalesce_queries", "server_find_peak_qps_decimals_of_precision",
                   "server_find_peak_qps_boundary_step_size", "server_max_async_queries",
                   "server_num_issue_query_threads"),
        "Offline": ("offline_expected_qps",),
    }[scenario]
    common = ("min_duration_ms", "max_duration_ms", "min_query_count", "max_query_count", "qsl_rng_seed",
              "sample_index_rng_seed", "schedule_rng_seed", "accuracy_log_rng_seed", "accuracy_log_probability",
              "accuracy_log_sampling_target", "print_timestamps", "performance_issue_unique", "performance_issue_same",
              "performance_issue_same_index", "performance_sample_count_override", "accuracy_sample_count_override",
              "sample_concatenate_permutation")
    return ([("requested_scenario", scenario), ("requested_test_mode", ls.mode.name)]
            + [(f"requested_{name}", getattr(ls, name)) for name in specific + common])


def _effective_settings(scenario: str, ls, qsl_total: int, qsl_performance: int) -> dict:
    """The settings LoadGen runs with (``TestSettingsInternal``), keyed as its ``effective_*`` records."""
    samples_per_query, min_query_count, target_duration_ms = 1, int(ls.min_query_count), int(ls.min_duration_ms)
    target_latency_ns, max_async_queries = 0, 1
    if scenario == "SingleStream":
        target_qps, percentile = 1e9 / ls.single_stream_expected_latency_ns, ls.single_stream_target_latency_percentile
    elif scenario == "MultiStream":
        target_qps, percentile = 1e9 / ls.multi_stream_expected_latency_ns, ls.multi_stream_target_latency_percentile
        samples_per_query = int(ls.multi_stream_samples_per_query)
    elif scenario == "Server":
        target_qps, percentile = float(ls.server_target_qps), ls.server_target_latency_percentile
        target_latency_ns, max_async_queries = int(ls.server_target_latency_ns), int(ls.server_max_async_queries)
    else:  # Offline: one query sized from the expected QPS; the run's length is that query's
        target_qps, percentile = float(ls.offline_expected_qps), 0.99
        samples_per_query = rules.offline_sample_count(target_qps, ls.min_duration_ms, ls.min_query_count)
        min_query_count, target_duration_ms = 1, 0
    performance = int(ls.performance_sample_count_override) or qsl_performance
    return {
        "effective_scenario": scenario,
        "effective_test_mode": ls.mode.name,
        "effective_samples_per_query": samples_per_query,
        "effective_target_qps": float(target_qps),
        "effective_target_latency_ns": target_latency_ns,
        "effective_target_latency_percentile": float(percentile),
        "effective_max_async_queries": max_async_queries,
        "effective_target_duration_ms": target_duration_ms,
        "effective_min_duration_ms": int(ls.min_duration_ms),
        "effective_max_duration_ms": int(ls.max_duration_ms),
        "effective_min_query_count": min_query_count,
        "effective_max_query_count": int(ls.max_query_count),
        "effective_min_sample_count": min_query_count * samples_per_query,
        "effective_qsl_rng_seed": int(ls.qsl_rng_seed),
        "effective_sample_index_rng_seed": int(ls.sample_index_rng_seed),
        "effective_schedule_rng_seed": int(ls.schedule_rng_seed),
        "effective_accuracy_log_rng_seed": int(ls.accuracy_log_rng_seed),
        "effective_accuracy_log_probability": float(ls.accuracy_log_probability),
        "effective_accuracy_log_sampling_target": int(ls.accuracy_log_sampling_target),
        "effective_print_timestamps": bool(ls.print_timestamps),
        "effective_performance_issue_unique": bool(ls.performance_issue_unique),
        "effective_performance_issue_same": bool(ls.performance_issue_same),
        "effective_performance_issue_same_index": int(ls.performance_issue_same_index),
        "effective_performance_sample_count": performance,
        "effective_accuracy_sample_count": int(ls.accuracy_sample_count_override) or qsl_total,
        "effective_sample_concatenate_permutation": bool(ls.sample_concatenate_permutation),
    }


def _test_parameters(effective: dict) -> list[str]:
    """The summary's "Test Parameters Used" lines (``TestSettingsInternal::LogSummary``)."""
    e = {key[len("effective_"):]: value for key, value in effective.items()}
    labels = [("samples_per_query : ", "samples_per_query"), ("target_qps : ", "target_qps"),
              ("target_latency (ns): ", "target_latency_ns"), ("max_async_queries : ", "max_async_queries"),
              ("min_duration (ms): ", "min_duration_ms"), ("max_duration (ms): ", "max_duration_ms")]
    labels += [(f"{name} : ", name) for name in (
        "min_query_count", "max_query_count", "qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed",
        "accuracy_log_rng_seed", "accuracy_log_probability", "accuracy_log_sampling_target", "print_timestamps",
        "performance_issue_unique", "performance_issue_same", "performance_issue_same_index",
        "performance_sample_count", "accuracy_sample_count")]
    return [label + _summary_value(e[name]) for label, name in labels]


def _generated_queries(scenario: str, settings: ScenarioSettings, effective: dict, loaded: int,
                       samples_per_query: int) -> tuple[int, int]:
    """(``generated_query_count``, ``generated_query_duration`` in ns): the queries LoadGen generates before the run
    and the timestamp after the last one's. In accuracy mode, a query of ``samples_per_query`` for each of the
    ``loaded`` samples (MultiStream's padded set included) once."""
    min_duration_ms, min_query_count = settings.min_duration_ms, effective["effective_min_query_count"]
    if settings.mode == "AccuracyOnly":
        min_duration_ms, min_query_count = 0, loaded // samples_per_query
    if scenario == "Server":
        schedule = rules.server_schedule(effective["effective_target_qps"], min_duration_ms, min_query_count,
                                         effective["effective_schedule_rng_seed"])
        return len(schedule), schedule.duration_ns
    if scenario == "Offline":  # one query, then the timeline's next step at the expected QPS
        return 1, int((1.0 / effective["effective_target_qps"]) * 1e9)
    count = rules.stream_generated_query_count(settings.expected_latency_ns, min_duration_ms, min_query_count)
    return count, count * rules.stream_query_period_ns(settings.expected_latency_ns)


# -- the run's figures -------------------------------------------------------------------------------------------------

def _sorted_ns(seconds: list[float]) -> list[int]:
    """Latencies in whole nanoseconds, as LoadGen records them, sorted."""
    return np.sort(np.rint(np.asarray(seconds, np.float64) * 1e9).astype(np.int64)).tolist()


def _latency_stats(latencies_ns: list[int], prefix: str, infix: str) -> dict:
    """LoadGen's min, max, mean (integer division) and percentiles of sorted latencies, keyed as its records
    (``result_min{prefix}latency_ns``, ``result_50.00_percentile{infix}latency_ns``, ...); None when there are none."""
    n = len(latencies_ns)
    stats = {f"result_min{prefix}latency_ns": latencies_ns[0] if n else None,
             f"result_max{prefix}latency_ns": latencies_ns[-1] if n else None,
             f"result_mean{prefix}latency_ns": sum(latencies_ns) // n if n else None}
    for p in rules.LOGGED_PERCENTILES:
        stats[f"result_{rules.percentile_label(p)}_percentile{infix}latency_ns"] = (
            latencies_ns[int(n * p)] if n else None)
    return stats


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def _figures(scenario: str, trace: SimulationTrace, result: ScenarioResult, target_latency_ns: int,
             sample_ns: list[int], query_ns: list[int]) -> dict:
    """The run's result records after the checks, in LoadGen's order: computed from the trace as LoadGen computes
    them, except where the result has the figure: then the result's, so that the logs give the result back."""
    n = len(sample_ns)
    figures: dict = {"result_query_count": trace.queries_issued}
    if scenario == "Server":
        figures["result_overlatency_query_count"] = sum(1 for x in sample_ns if x > target_latency_ns)
    if scenario == "SingleStream":
        mean_ns = sum(sample_ns) // n if n else 0
        figures["result_qps_with_loadgen_overhead"] = _ratio(n - 1, float(trace.final_issued)) if n else None
        figures["result_qps_without_loadgen_overhead"] = _ratio(1.0, mean_ns / 1e9)
        figures["early_stopping_latency_ss"] = rules.early_stopping_estimate(
            sample_ns, rules.SINGLE_STREAM_PERCENTILE).estimate
        figures["early_stopping_latency_ms"] = rules.early_stopping_estimate(
            sample_ns, rules.MULTI_STREAM_PERCENTILE).estimate
    elif scenario == "MultiStream":
        figures.update(_latency_stats(query_ns, "_query_", "_per_query_"))
        figures["early_stopping_latency_ms"] = rules.early_stopping_estimate(
            query_ns, rules.MULTI_STREAM_PERCENTILE).estimate
    elif scenario == "Server":
        figures["result_scheduled_samples_per_sec"] = _ratio(n - 1, float(trace.final_scheduled)) if n else None
        figures["result_completed_samples_per_sec"] = _ratio(n - 1, float(trace.final_query_done)) if n else None
    else:
        figures["result_samples_per_second"] = _ratio(n, float(trace.last_completion))
    figures.update(_latency_stats(sample_ns, "_", "_"))
    for key in figures:
        if key in result.details:
            figures[key] = result.details[key]
    for key in ("early_stopping_latency_ss", "early_stopping_latency_ms"):
        if key in figures and figures[key] is None:
            figures[key] = 0  # LoadGen's value when early stopping gives no estimate
    return {key: _ExactFigure(value) if isinstance(value, (float, np.floating)) else value
            for key, value in figures.items()}


def _invalid_reason(checks: dict, scenario: str, sut_errors: list) -> str:
    """LoadGen's ``result_invalid_reason`` from the checks (and the system under test's error, which LoadGen never
    sees)."""
    reason = f"The system under test failed: {sut_errors[0]} " if sut_errors else ""
    if checks.get("perf_constraints") is False:
        reason += rules.PERF_CONSTRAINTS_NOT_MET + " "
    if not checks.get("min_duration", True):
        reason += rules.MIN_DURATION_RECOMMENDATIONS[scenario] + " "
    if not checks.get("min_queries", True):
        reason += rules.MIN_QUERIES_NOT_MET
    return reason.replace("\n", " ")


def _issue_end(scenario: str, settings: ScenarioSettings, trace: SimulationTrace,
               generated: int) -> tuple[str, str, bool] | None:
    """How LoadGen's issuing ended, as it logs it: (key, message, is error), or None when it logs nothing (Server,
    which issues its whole schedule, and a run that a failed system under test cut short)."""
    if scenario == "Server":
        return None
    issued, last_issue_s = trace.queries_issued, float(trace.final_issued)
    min_duration_ms = 0 if scenario == "Offline" else settings.min_duration_ms
    min_query_count = 1 if scenario == "Offline" else settings.min_query_count
    if issued >= min_query_count and last_issue_s >= min_duration_ms / 1000.0:
        return "generic_message", ENDED_NATURALLY, False
    if settings.max_duration_ms and last_issue_s > settings.max_duration_ms / 1000.0:
        return ("error_runtime", f"IssueQueryThread 0 Ending early: Max test duration reached. duration_ns "
                                 f"{_ns(last_issue_s)}", True)
    if issued >= generated:
        return "error_runtime", RAN_OUT_OF_QUERIES, True
    return None


# -- the logs ----------------------------------------------------------------------------------------------------------

def write_loadgen_logs(log_dir: Path, settings: ScenarioSettings, trace: SimulationTrace,
                       result: ScenarioResult) -> None:
    """Write LoadGen's ``mlperf_log_summary.txt`` and ``mlperf_log_detail.txt`` for a run on virtual time (``trace``,
    summarized as ``result``) in ``log_dir``, each atomically. See the module docstring for what is simulated. In
    accuracy mode LoadGen judges nothing: the detail log ends with the run's issue, the summary holds only the counts
    of warnings and errors."""
    log_dir = Path(log_dir)
    scenario = settings.scenario
    accuracy = settings.mode == "AccuracyOnly"
    ls = settings.loadgen_settings()
    qsl_count = int(settings.performance_sample_count)
    effective = _effective_settings(scenario, ls, qsl_count, qsl_count)
    loaded = list(range(int(effective["effective_performance_sample_count"])))
    if scenario == "MultiStream" and loaded:  # LoadGen pads the set so that a query's samples can be contiguous
        loaded += [loaded[i % len(loaded)] for i in range(effective["effective_samples_per_query"] - 1)]
    samples_per_query = effective["effective_samples_per_query"]
    if accuracy and scenario == "Offline":  # one query of the whole loaded set
        samples_per_query = int(effective["effective_performance_sample_count"])
    generated, generated_duration_ns = _generated_queries(scenario, settings, effective, len(loaded),
                                                          samples_per_query)
    end = None if accuracy else _issue_end(scenario, settings, trace, generated)

    detail = _DetailLog()
    detail.log_all([("loadgen_version", f"{_loadgen_version()} @ simulated"),
                    ("loadgen_build_date_local", VIRTUAL_START.strftime("%Y-%m-%dT%H:%M:%S.%f")),
                    ("loadgen_build_date_utc", VIRTUAL_START.strftime("%Y-%m-%dT%H:%M:%S.%f")),
                    ("loadgen_git_commit_date", VIRTUAL_START.strftime("%Y-%m-%dT%H:%M:%SZ")),
                    ("loadgen_git_log_message", ""), ("loadgen_git_status_message", ""),
                    ("loadgen_file_sha1", {})], "version.cc")
    detail.log_all([("test_datetime", VIRTUAL_START.strftime("%Y-%m-%dT%H:%M:%SZ")), ("sut_name", SUT_NAME),
                    ("get_sut_name_duration_ns", 0), ("qsl_name", QSL_NAME), ("qsl_reported_total_count", qsl_count),
                    ("qsl_reported_performance_count", qsl_count)], "loadgen.cc")
    detail.log_all(_requested_settings(scenario, ls), "test_settings_internal.cc")
    detail.log_all(effective.items(), "test_settings_internal.cc")
    detail.log_all([("generic_message", f"Starting {'accuracy' if accuracy else 'performance'} mode"),
                    ("generic_message", SIMULATED_NOTE), ("loaded_qsl_set", loaded),
                    ("generated_query_count", generated),
                    ("generated_samples_per_query", samples_per_query),
                    ("generated_query_duration", generated_duration_ns)], "loadgen.cc")
    detail.now_s = float(trace.final_issued)
    if end is not None:
        key, message, error = end
        detail.log(key, message, "issue_query_controller.cc", error=error)
    detail.now_s = float(trace.last_completion)
    for error in result.sut_errors:
        detail.log("error_runtime", f"The system under test failed: {error}", "virtual.py", error=True)
    detail.log_all([(f"logger_{name}", 0) for name in (
        "swap_request_slots_retry_count", "swap_request_slots_retry_retry_count",
        "swap_request_slots_retry_reencounter_count", "start_reading_entries_retry_count",
        "tls_total_log_cas_fail_count", "tls_total_swap_buffers_slot_retry_count")], "logging.cc")
    detail.log_all([("power_begin", _power_time(0.0)), ("power_end", _power_time(detail.now_s))], "loadgen.cc")
    summary = []
    if not accuracy:
        summary = _performance_summary(detail, scenario, trace, result, effective)
    summary += ["", "No warnings encountered during test.", "", _error_count(detail.errors)]
    write_text_atomic(log_dir / DETAIL_FILE, detail.text())
    write_text_atomic(log_dir / SUMMARY_FILE, "\n".join(summary) + "\n")


def _error_count(errors: int) -> str:
    if errors == 0:
        return "No errors encountered during test."
    if errors == 1:
        return "1 ERROR encountered. See detailed log."
    return f"{errors} ERRORS encountered. See detailed log."


def _performance_summary(detail: _DetailLog, scenario: str, trace: SimulationTrace, result: ScenarioResult,
                         effective: dict) -> list[str]:
    """Log the performance run's verdict and figures (``PerformanceSummary::LogDetail``) and return the summary's
    lines (``PerformanceSummary::LogSummary``)."""
    target_latency_ns = effective["effective_target_latency_ns"]
    sample_ns, query_ns = _sorted_ns(trace.sample_latencies), _sorted_ns(trace.query_latencies)
    checks = {name: bool(met) for name, met in result.checks.items()}
    valid = bool(result.valid)
    _, early_text = rules.early_stopping_result(
        scenario, query_ns if scenario == "MultiStream" else sample_ns, target_latency_ns)
    figures = _figures(scenario, trace, result, target_latency_ns, sample_ns, query_ns)
    outcome = [("result_validity", "VALID" if valid else "INVALID")]
    if "perf_constraints" in checks:
        outcome.append(("result_perf_constraints_met", checks["perf_constraints"]))
    outcome += [("result_min_duration_met", checks["min_duration"]), ("result_min_queries_met", checks["min_queries"]),
                ("early_stopping_met", checks["early_stopping"])]
    if not valid:
        outcome.append(("result_invalid_reason", _invalid_reason(checks, scenario, result.sut_errors)))
    outcome.append(("early_stopping_result", early_text.replace("\n", " ")))
    detail.log_all(outcome + list(figures.items()), "results.cc")
    detail.log("num_errors", detail.errors, "results.cc")
    return _summary(scenario, checks, valid, early_text, figures, effective)


def _summary(scenario: str, checks: dict, valid: bool, early_text: str, figures: dict, effective: dict) -> list[str]:
    """The performance run's lines of ``mlperf_log_summary.txt`` (``PerformanceSummary::LogSummary``), up to the
    counts of warnings and errors."""
    lines = [RULER, "MLPerf Results Summary", RULER, f"SUT name : {SUT_NAME}", f"Scenario : {scenario}",
             "Mode     : PerformanceOnly"]
    percentile = effective["effective_target_latency_percentile"]
    if scenario == "SingleStream":
        key = f"result_{rules.percentile_label(percentile)}_percentile_latency_ns"
        lines.append(f"{percentile * 100:.1f}th percentile latency (ns) : {_summary_value(figures.get(key))}")
    elif scenario == "MultiStream":
        key = f"result_{rules.percentile_label(percentile)}_percentile_per_query_latency_ns"
        lines.append(f"{percentile * 100:.1f}th percentile latency (ns) : {_summary_value(figures.get(key))}")
    elif scenario == "Server":
        lines.append(f"Completed samples per second    : {_fixed(figures['result_completed_samples_per_sec'])}")
    else:
        lines.append(f"Samples per second: {_summary_value(figures['result_samples_per_second'])}")
    yes = {True: "Yes", False: "NO"}
    lines.append(f"Result is : {'VALID' if valid else 'INVALID'}")
    if "perf_constraints" in checks:
        lines.append(f"  Performance constraints satisfied : {yes[checks['perf_constraints']]}")
    lines += [f"  Min duration satisfied : {yes[checks['min_duration']]}",
              f"  Min queries satisfied : {yes[checks['min_queries']]}",
              f"  Early stopping satisfied: {yes[checks['early_stopping']]}"]
    if not valid:
        lines.append("Recommendations:")
        if checks.get("perf_constraints") is False:
            lines.append(" * " + rules.PERF_CONSTRAINTS_NOT_MET)
        if not checks["min_duration"]:
            lines.append(" * " + rules.MIN_DURATION_RECOMMENDATIONS[scenario])
        if not checks["min_queries"]:
            lines += MIN_QUERIES_SUMMARY.split("\n")
    if scenario != "Offline":
        lines += ["Early Stopping Result:"] + early_text.split("\n")
    lines += ["", RULER, "Additional Stats", RULER]
    if scenario == "SingleStream":
        lines += [f"QPS w/ loadgen overhead         : {_fixed(figures['result_qps_with_loadgen_overhead'])}",
                  f"QPS w/o loadgen overhead        : {_fixed(figures['result_qps_without_loadgen_overhead'])}", ""]
    elif scenario == "Server":
        lines.append(f"Scheduled samples per second : {_fixed(figures['result_scheduled_samples_per_sec'])}")
    infix = "_per_query_" if scenario == "MultiStream" else "_"
    prefix = "_query_" if scenario == "MultiStream" else "_"
    if scenario == "MultiStream":
        lines.append("Per-query latency:  ")
    lines += [f"Min latency (ns)                : {_summary_value(figures[f'result_min{prefix}latency_ns'])}",
              f"Max latency (ns)                : {_summary_value(figures[f'result_max{prefix}latency_ns'])}",
              f"Mean latency (ns)               : {_summary_value(figures[f'result_mean{prefix}latency_ns'])}"]
    for p in rules.LOGGED_PERCENTILES:
        value = figures[f"result_{rules.percentile_label(p)}_percentile{infix}latency_ns"]
        lines.append(f"{rules.percentile_label(p)} percentile latency (ns)   : {_summary_value(value)}")
    return lines + ["", RULER, "Test Parameters Used", RULER] + _test_parameters(effective)
