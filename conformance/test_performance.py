"""Latency and throughput in MLPerf LoadGen scenarios against the targets in conformance/targets/performance.toml.

One test per target of the hardware: ``test_performance[<model>-<precision>-<scenario>]``. It fails with LoadGen's
INVALID reason or with the missed figure; a run shorter than MLPerf's 600 s that is INVALID only for its length (the
smoke and default profiles) is recorded as not of compliant length and does not fail.
"""

from __future__ import annotations

import shlex

import pytest

from conformance.perf.host import host_bound
from conformance.perf.scenario_run import plan_target
from conformance.perf.virtual import max_server_qps
from conformance.settings.session import run_settings
from conformance.targets import compare
from conformance.targets.performance import load_performance_targets


def pytest_generate_tests(metafunc):
    if "performance_target" not in metafunc.fixturenames:
        return
    settings = run_settings(metafunc.config)
    targets = load_performance_targets().for_hardware(settings.hardware, settings.precisions, settings.models)
    if not targets:  # the selection's precisions are not timed (every model's are checked complete at configure)
        timed = sorted({t.precision for t in load_performance_targets().for_hardware(settings.hardware)})
        reason = (f"hardware {settings.hardware!r} times no model at precision {', '.join(settings.precisions or ())}: "
                  f"its performance targets are at {', '.join(timed) or 'no precision'}")
        metafunc.parametrize("performance_target", [pytest.param(None, id="untimed", marks=pytest.mark.skip(reason=reason))])
        return
    chip = {p: settings.backend.chip_support(p) for p in {t.precision for t in targets}}
    metafunc.parametrize("performance_target", [
        pytest.param(t, id=t.test_id, marks=[pytest.mark.skip(reason=chip[t.precision])] if chip[t.precision] else [])
        for t in targets])


def figure(check: str, value, units: str) -> str:
    """A check's own figure as a failure prints it: ``p99_latency_ms_at_target_qps 1166.36 ms``."""
    return f"{check} {'not measured' if value is None else f'{value:.6g}'}{f' {units}' if units else ''}"


def server_rates(details: dict) -> str:
    """A Server run's rates beside its latency: the target, and what LoadGen scheduled and completed."""
    if "target_qps" not in details:
        return ""
    rates = [f"target {details['target_qps']:g} samples/s"]
    for name in ("scheduled", "completed"):
        rate = details.get(f"{name}_samples_per_second")
        if rate is not None:
            rates.append(f"{name} {rate:.6g} samples/s")
    return ", " + ", ".join(rates)


def test_performance(performance_target, settings, backend, model_store, user_cases, record_check):
    target = performance_target
    plan = plan_target(target, settings.profile, backend, model_store.get(target.model), settings.report_dir,
                       real_time=settings.real_time_loadgen)
    result = plan.run()
    check, units, op = target.check
    value, bound = result.value, target.target
    if target.scenario == "Server":  # MLPerf: VALID at the target QPS, i.e. p99 latency within the bound at that rate
        bound = load_performance_targets().models[target.model].server_latency_ms
        value = result.details.get("result_99.00_percentile_latency_ns")
        value = None if value is None else value / 1e6
    details = {
        "loadgen_valid": result.valid,
        "loadgen_invalid_reason": result.invalid_reason,
        "loadgen_checks": result.checks,
        "compliant_length": result.compliant_length,
        "log_dir": settings.published_path(result.log_dir, relative=True),
        "query_count": result.query_count,
        "sut_errors": result.sut_errors,
        "hardware": target.hardware,
        "timing": backend.timing,
        "timing_model": backend.timing_model(),
        "clock": plan.clock,
        "profile": settings.profile,
        "completion_lateness_ms": result.details.get("completion_lateness_ms"),
    }
    if target.model in user_cases and user_cases[target.model].checkpoint is not None:
        details["judged"] = {"checkpoint": user_cases[target.model].checkpoint}
    if target.scenario == "Server":
        details.update(target_qps=target.target, completed_samples_per_second=result.value,
                       scheduled_samples_per_second=result.details.get("result_scheduled_samples_per_sec"))
    if backend.timing == "measured":  # the host's share of a measured figure; a simulated one is exact
        details.update({key: result.details[key] for key in ("device_side_latency_ms", "device_side_samples_per_second",
                                                              "host_load_per_core") if key in result.details})
        if not compare(value, op, bound):
            hosted = host_bound(check, value, bound, details)
            if hosted:
                details["host_bound"] = hosted
    record = record_check(kind="performance", model=target.model, precision=target.precision, check=check,
                          value=value, target=bound, op=op, units=units, scenario=target.scenario, details=details)
    if target.scenario == "Server" and plan.clock == "virtual" and result.valid:
        highest = max_server_qps(plan.device, plan.settings, valid_at=target.target, **plan.run_options)
        record_check(kind="performance", model=target.model, precision=target.precision,
                     check="max_valid_server_qps", value=highest, target=target.target, op=">=", units="samples/s",
                     scenario=target.scenario, gating=False,
                     details={**details, "search": "bisection to 2% between the target QPS and the device's capacity"})
    checkpoint = settings.checkpoints.get(target.model)
    reproduce = (f"pytest conformance/test_performance.py --hardware {target.hardware} --model {target.model} "
                 f"--profile {settings.profile}"
                 + (f" --checkpoint {target.model}={shlex.quote(str(checkpoint))}" if checkpoint else "")
                 + f" -k '{target.test_id}'")
    if result.sut_errors:  # a check of its own, so that no known failure of the figure above can waive it
        record_check(kind="performance", model=target.model, precision=target.precision, check="sut_errors",
                     value=len(result.sut_errors), target=0, op="<=", units="errors", scenario=target.scenario,
                     details={**details, "errors": [str(e) for e in result.sut_errors[:5]]})
        pytest.fail(f"{target.test_id}: the system under test raised (every query was still completed): "
                    f"{result.sut_errors[0]}\nreproduce: {reproduce}", pytrace=False)
    if not result.valid and not (result.length_only_invalid and not result.compliant_length):
        record_check(kind="performance", model=target.model, precision=target.precision, check="loadgen_valid",
                     value=0, target=1, op=">=", units="", scenario=target.scenario,
                     details={**details, "invalid_reason": result.invalid_reason})
        pytest.fail(f"{target.test_id}: LoadGen result INVALID: {result.invalid_reason} "
                    f"({figure(check, value, units)}{server_rates(details)}"
                    + (f"; host-bound: {details['host_bound']}" if details.get("host_bound") else "")
                    + f"; logs {settings.published_path(result.log_dir)})\nreproduce: {reproduce}", pytrace=False)
    if not record.passed:
        validity = "VALID" if result.valid else "INVALID for length: " + result.invalid_reason
        late = details["completion_lateness_ms"]
        hosted = f" (host-bound: {details['host_bound']})" if details.get("host_bound") else ""
        pytest.fail(f"{target.test_id}: {figure(check, value, units)} misses the target {op} {bound:g} {units}{hosted} (LoadGen "
                    f"{validity}; logs {settings.published_path(result.log_dir)})"
                    + (f"; completions late by p90 {late['p90']:.3g} ms, max {late['max']:.3g} ms (host scheduling)"
                       if late else "")
                    + f"\nreproduce: {reproduce}", pytrace=False)
