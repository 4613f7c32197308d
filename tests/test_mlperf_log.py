"""LoadGen's logs for runs on virtual time (:mod:`conformance.perf.mlperf_log`) against the real LoadGen's.

The same fixed-service-time device runs each case through the real LoadGen (``run_scenario``) and on virtual time
(``simulate`` + ``summarize`` + ``write_loadgen_logs``). The detail logs must have the same keys in the same order and
the same values wherever the host's clock plays no part (settings, counts, verdicts), the summaries the same lines; and
``parse_result`` must read the simulated run's result back from its logs. Service times of 5 ms keep the host's
lateness small against the margins the cases are chosen with; no wall-clock time is asserted.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from conformance.hardware.devices import ServiceTimeDevice
from conformance.perf.harness import ScenarioSettings, parse_result, run_scenario
from conformance.perf.mlperf_log import DETAIL_FILE, SIMULATED_NOTE, SUMMARY_FILE, write_loadgen_logs
from conformance.perf.virtual import SUMMARY_FILE as SIMULATION_SUMMARY
from conformance.perf.virtual import simulate, summarize

SERVICE_S = 0.005
SAMPLES = 8
RUN = {"max_batch": 8, "batch_timeout_s": 0.002}
CAPACITY_QPS = RUN["max_batch"] / SERVICE_S

CASES = {  # each verdict is the same on both clocks by a wide margin
    "SingleStream": dict(min_duration_ms=200, min_query_count=64, expected_latency_s=SERVICE_S),  # VALID
    # expected latency 10x the real one: the 9 generated queries are issued in 45 ms, before the min duration
    "SingleStream-ran-out": dict(min_duration_ms=200, min_query_count=1, expected_latency_s=10 * SERVICE_S),
    "MultiStream": dict(min_duration_ms=200, min_query_count=64, expected_latency_s=SERVICE_S),  # early stopping: 662
    "Server": dict(min_duration_ms=500, min_query_count=500, target_qps=500, server_latency_ms=50),  # VALID
    "Server-overloaded": dict(min_duration_ms=300, min_query_count=100, target_qps=1.5 * CAPACITY_QPS,
                              server_latency_ms=50),  # the queue grows ~250 ms: p99 far over 50 ms
    "Offline": dict(min_duration_ms=200, target_qps=CAPACITY_QPS),  # VALID
    "Offline-too-short": dict(min_duration_ms=200, target_qps=CAPACITY_QPS / 2),  # done in 110 ms
}
# The only records one side may have alone: warnings and errors of the host's own making in the real run. LoadGen
# compares its clock with the system clock over the run and, when they differ by 0.1% (1%), logs "PerfClock and
# system_clock differ" as a warning_generic_message (an error_runtime): for runs this short, 1 ms of rounding; on a
# loaded host it warns of other timing trouble too. Real warning and error records whose text the simulated log does
# not hold are left out before comparing.
HOST_EVENT_KEYS = ("warning_generic_message", "error_runtime")


def without_host_events(real: list[dict], simulated: list[dict]) -> list[dict]:
    expected = {(r["key"], str(r["value"])) for r in simulated}
    return [r for r in real if r["key"] not in HOST_EVENT_KEYS or (r["key"], str(r["value"])) in expected]
# Values the host decides: its clock, LoadGen's build, the logger's contention, LoadGen's shuffled sample set, and the
# measured latencies and rates (and the over-latency count and error count, checked apart).
HOST_VALUES = {
    "loadgen_version", "loadgen_build_date_local", "loadgen_build_date_utc", "loadgen_git_commit_date",
    "loadgen_git_log_message", "loadgen_git_status_message", "loadgen_file_sha1", "test_datetime",
    "get_sut_name_duration_ns", "power_begin", "power_end", "loaded_qsl_set", "generic_message",
    "logger_swap_request_slots_retry_count", "logger_swap_request_slots_retry_retry_count",
    "logger_swap_request_slots_retry_reencounter_count", "logger_start_reading_entries_retry_count",
    "logger_tls_total_log_cas_fail_count", "logger_tls_total_swap_buffers_slot_retry_count",
    "result_qps_with_loadgen_overhead", "result_qps_without_loadgen_overhead", "result_completed_samples_per_sec",
    "result_scheduled_samples_per_sec", "result_samples_per_second", "early_stopping_latency_ss",
    "early_stopping_latency_ms", "early_stopping_result", "num_errors", "result_overlatency_query_count",
}
MEASURED_SUMMARY = re.compile(r"latency \(ns\)|samples per second|Samples per second|QPS w|estimate")
COUNTS_LINE = re.compile(r"^(No|\d+) (warning|error)s? encountered", re.IGNORECASE)


def unmeasured(early_stopping_text: str) -> str:
    """Early stopping's text without what the latencies decide: its estimate, and Server's further queries needed
    (from the over-latency count)."""
    text = re.sub(r"estimate: \d+", "estimate: N", early_stopping_text)
    return re.sub(r"at least \d+ more", "at least N more", text)


def device() -> ServiceTimeDevice:
    return ServiceTimeDevice(lambda n: (SERVICE_S, SERVICE_S))


def case_settings(case: str, **changes) -> ScenarioSettings:
    return ScenarioSettings(case.split("-")[0], performance_sample_count=SAMPLES, **{**CASES[case], **changes})


def virtual_run(settings: ScenarioSettings, log_dir: Path, dev: ServiceTimeDevice | None = None):
    trace = simulate(dev or device(), settings, **RUN)
    result = summarize(trace, settings, log_dir)
    write_loadgen_logs(log_dir, settings, trace, result)
    return trace, result


def records(log_dir: Path) -> list[dict]:
    lines = (log_dir / DETAIL_FILE).read_text().splitlines()
    assert all(line.startswith(":::MLLOG ") for line in lines)
    return [json.loads(line[len(":::MLLOG"):]) for line in lines]


def by_key(entries: list[dict]) -> dict[str, list]:
    values: dict[str, list] = {}
    for entry in entries:
        values.setdefault(entry["key"], []).append(entry["value"])
    return values


def summary_lines(log_dir: Path) -> list[tuple[str, str]]:
    """(label, value) of each summary line: the text before the first ':' and after it; the warning and error counts
    as ("<warnings>", count), ("<errors>", count)."""
    out = []
    for line in unmeasured((log_dir / SUMMARY_FILE).read_text()).splitlines():
        counted = COUNTS_LINE.match(line)
        if counted:
            out.append((f"<{counted.group(2).lower()}s>", "0" if counted.group(1) == "No" else counted.group(1)))
        else:
            label, _, value = line.partition(":")
            out.append((label, value))
    return out


def assert_reads_back(result, log_dir: Path, settings: ScenarioSettings) -> None:
    parsed = parse_result(settings.scenario, log_dir, settings.min_duration_ms)
    assert (parsed.valid, parsed.value, parsed.checks) == (result.valid, result.value, result.checks)
    for key in set(parsed.details) & set(result.details) - {"early_stopping_result"}:
        no_estimate = key.startswith("early_stopping_latency") and result.details[key] is None  # LoadGen logs 0
        assert parsed.details[key] == (0 if no_estimate else result.details[key]), key
    assert " ".join(parsed.details["early_stopping_result"].split()) == result.details["early_stopping_result"]


@pytest.mark.parametrize("case", list(CASES))
def test_logs_match_the_real_loadgen(case, tmp_path):
    settings = case_settings(case)
    run_scenario(device(), settings, tmp_path / "real", total_sample_count=SAMPLES, **RUN)
    _, result = virtual_run(settings, tmp_path / "virtual")

    real_all, virtual = records(tmp_path / "real"), records(tmp_path / "virtual")
    real = without_host_events(real_all, virtual)
    host_errors = sum(r["metadata"]["is_error"] for r in real_all) - sum(r["metadata"]["is_error"] for r in real)
    # the same keys, first logged in the same order
    assert list(by_key(virtual)) == list(by_key(real))
    real_values, virtual_values = by_key(real), by_key(virtual)
    for key, values in real_values.items():
        if key not in HOST_VALUES and not re.match(r"result_.*latency_ns$", key):
            assert virtual_values[key] == values, key
    notes = virtual_values["generic_message"]
    assert notes[1] == SIMULATED_NOTE and notes[:1] + notes[2:] == real_values["generic_message"]
    assert virtual_values["num_errors"] == [real_values["num_errors"][0] - host_errors]
    assert sorted(set(virtual_values["loaded_qsl_set"][0])) == sorted(set(real_values["loaded_qsl_set"][0]))
    assert len(virtual_values["loaded_qsl_set"][0]) == len(real_values["loaded_qsl_set"][0])
    assert unmeasured(virtual_values["early_stopping_result"][0]) == unmeasured(real_values["early_stopping_result"][0])
    if "result_scheduled_samples_per_sec" in real_values:  # samples over the last scheduled time: no host clock in it
        assert virtual_values["result_scheduled_samples_per_sec"][0] == pytest.approx(
            real_values["result_scheduled_samples_per_sec"][0], rel=1e-5)

    # the same summary lines; values alike except the measured ones
    real_lines, virtual_lines = summary_lines(tmp_path / "real"), summary_lines(tmp_path / "virtual")
    assert [label for label, _ in virtual_lines] == [label for label, _ in real_lines]
    for (label, value), (_, real_value) in zip(virtual_lines, real_lines):
        if label == "<warnings>":
            assert value == "0"
        elif label == "<errors>":
            assert int(value) == int(real_value) - host_errors
        elif not MEASURED_SUMMARY.search(label):
            assert value == real_value, label

    assert_reads_back(result, tmp_path / "virtual", settings)


@pytest.mark.parametrize("scenario", ["MultiStream", "Offline"])
def test_accuracy_mode_logs_match_the_real_loadgen(scenario, tmp_path):
    settings = case_settings(scenario, mode="AccuracyOnly")
    run_scenario(device(), settings, tmp_path / "real", total_sample_count=SAMPLES, **RUN)
    virtual_run(settings, tmp_path / "virtual")
    virtual = records(tmp_path / "virtual")
    real_values, virtual_values = by_key(without_host_events(records(tmp_path / "real"), virtual)), by_key(virtual)
    assert list(virtual_values) == list(real_values)
    assert "result_validity" not in virtual_values
    for key, values in real_values.items():
        if key not in HOST_VALUES:
            assert virtual_values[key] == values, key
    assert [label for label, _ in summary_lines(tmp_path / "virtual")] == ["", "<warnings>", "", "<errors>"]


def test_a_failed_device_is_a_logged_error_and_an_invalid_run(tmp_path):
    calls = itertools.count()

    def service(n):
        if next(calls) == 10:
            raise RuntimeError("device lost")
        return SERVICE_S, SERVICE_S

    settings = case_settings("SingleStream")
    _, result = virtual_run(settings, tmp_path, ServiceTimeDevice(service))
    assert result.sut_errors and not result.valid
    errors = [r for r in records(tmp_path) if r["metadata"]["is_error"]]
    assert [r["key"] for r in errors] == ["error_runtime"] and "device lost" in errors[0]["value"]
    values = by_key(records(tmp_path))
    assert values["num_errors"] == [1] and values["result_validity"] == ["INVALID"]
    assert "device lost" in values["result_invalid_reason"][0]
    assert (tmp_path / SUMMARY_FILE).read_text().endswith("\n1 ERROR encountered. See detailed log.\n")
    assert_reads_back(result, tmp_path, settings)


def test_the_same_run_gives_the_same_logs(tmp_path):
    virtual_run(case_settings("Server"), tmp_path / "first")
    virtual_run(case_settings("Server"), tmp_path / "second")
    for name in (DETAIL_FILE, SUMMARY_FILE):
        assert (tmp_path / "first" / name).read_bytes() == (tmp_path / "second" / name).read_bytes()


def test_simulation_summary_keeps_json_booleans(tmp_path):
    """A Server run's times are numpy floats (its Poisson schedule); its checks must still be JSON booleans."""
    virtual_run(case_settings("Server"), tmp_path)
    summary = json.loads((tmp_path / SIMULATION_SUMMARY).read_text())
    assert all(type(met) is bool for met in summary["checks"].values()), summary["checks"]
    assert type(summary["valid"]) is bool
