"""Renders a results record (``results.json``) as the compliance table: terminal, ``compliance.md``, ``results.csv``, html.

Every function takes the results dict (and the terminal its width, the page the directory its plots are read from to be
embedded), so ``ipu-conformance report`` renders exactly what the run rendered. ``compliance.md`` and ``results.html``
are two renderings of one description of their sections (:func:`sections`).
"""

from __future__ import annotations

import base64
import csv
import html
import io
import math
import os
import shlex
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from conformance.hardware.base import DATA_TYPE_KEYS, FP32_DATA_TYPES, SCENARIOS
from conformance.report.checks import provenance, timing_model_of
from conformance.report.judged import HEADERS as JUDGED_HEADERS
from conformance.report.judged import judged_by_model, judged_rows
from conformance.targets.accuracy import TENSOR_METRICS
from conformance.targets.profiles import RELEASE_PROFILE, load_profiles, profile_role

# MLPerf's units per scenario and which record is a scenario's result
SCENARIO_UNITS = {"SingleStream": "Latency (ms)", "MultiStream": "Latency (ms)", "Offline": "Samples/s", "Server": "Queries/s"}

# the submission checker's columns that apply to a single-accelerator emulated run, in the checker's order
MLPERF_COLUMNS = ("SystemName", "Platform", "Model", "Scenario", "Result", "Accuracy", "number_of_nodes",
                  "host_processor_model_name", "host_processor_core_count", "accelerator_model_name",
                  "accelerators_per_node", "framework", "operating_system", "notes", "compliance", "errors", "version",
                  "Units", "weight_data_types")
EXTRA_COLUMNS = ("Precision", "input_data_types", "weight_transformations", "accuracy_verdict", "validity",
                 "performance_verdict", "server_target_qps", "server_max_valid_qps", "commit")
CSV_COLUMNS = MLPERF_COLUMNS + EXTRA_COLUMNS

TABLE_HEADERS = ("Model", "Precision", "Scenario", "Check", "Value", "Target", "Units", "Verdict")
# the column of the checks table that says how a figure was obtained; shown when some record says so
TIMING_HEADER = "Timing"


def fmt(value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return f"{value:.6g}"
    return str(value)


def verdict(record: dict) -> str:
    """PASS/FAIL of one check; ``PASS*`` when it passes on its point estimate but its 95% interval does not clear the
    target (not established); XFAIL when its test is a known failure; informational checks marked (info)."""
    if not record.get("gating", True):
        return "PASS (info)" if record["passed"] else "BELOW (info)"
    if record["passed"]:
        return NOT_ESTABLISHED if record.get("established") is False else "PASS"
    return "XFAIL" if record.get("outcome") == "xfailed" else "FAIL"


NOT_ESTABLISHED = "PASS*"
NOT_ESTABLISHED_NOTE = ("PASS*: passes on its point estimate, but the 95% confidence interval of the measurement "
                        "reaches below the target (PASS, not established): more samples would settle it.")
VERDICT_ORDER = ("PASS", "PASS*", "XFAIL", "FAIL")  # a cell shows the worst verdict of its checks
HOST_BOUND_NOTE = ("FAIL (host-bound): a measured figure missed its target where the device side alone met it, or the "
                   "host was oversubscribed: the host's share, not the device's; the checks say how much.")


def _establishing_command(results: dict, model: str, precision: str, samples: int) -> str:
    """The run that repeats one accuracy test on at least ``samples`` samples (the run's hardware, chip and data kept):
    the release gate's profile where it runs that many of the suite's samples, else ``--samples``."""
    settings = results.get("settings") or {}
    release = load_profiles()[RELEASE_PROFILE].samples.get(model, 0)
    if model not in (settings.get("datasets") or {}) and release >= samples:
        size = f" --profile {RELEASE_PROFILE}"
    else:
        size = f" --samples {model}={samples}"
    hardware = settings.get("hardware") or results["hardware"]["name"]
    device = f" --device {settings['device']}" if settings.get("device") else ""
    data = "".join(f" --{option} {model}={shlex.quote(str(given[model]))}"
                   for option, given in (("checkpoint", settings.get("checkpoints") or {}),
                                         ("dataset", settings.get("datasets") or {}))
                   if model in given)
    return (f"pytest conformance/test_accuracy.py --hardware {hardware}{device} --model {model} --precision "
            f"{precision}{data}{size}")


def establishing(results: dict) -> list[str]:
    """Per model and precision with gated accuracy checks passed but not established (PASS*): the units it ran, the
    units that would establish them (``details.units_needed`` at the proportions seen, else at least
    ``details.units_to_establish``) and the command that runs that many samples."""
    wanted: dict[tuple[str, str], dict] = {}
    for record in results["records"]:
        details = record.get("details") or {}
        if (record["kind"] != "accuracy" or verdict(record) != NOT_ESTABLISHED or "label_floor" in details
                or not isinstance(details.get("units"), int) or not details.get("units")):
            continue
        needed, exact = details.get("units_needed"), True
        if not isinstance(needed, int):
            needed, exact = details.get("units_to_establish"), False
        if not isinstance(needed, int):
            continue
        entry = wanted.setdefault((record["model"], record["precision"]),
                                  {"checks": [], "units": details["units"], "needed": 0, "exact": True,
                                   "samples": details.get("samples"), "never": []})
        if not exact and needed <= details["units"]:  # enough units were there: the losses seen keep it below
            entry["never"].append(record["check"])
            continue
        entry["checks"].append(record["check"])
        if needed > entry["needed"] or (needed == entry["needed"] and not exact):
            entry["needed"], entry["exact"] = needed, exact
    lines = []
    for (model, precision), entry in wanted.items():
        if entry["never"]:
            lines.append(f"{model} {precision} ({', '.join(entry['never'])}): {entry['units']} units; at the "
                         "decisions kept here no count establishes it: fewer lost decisions would, not more units")
        if not entry["checks"]:
            continue
        per_unit = entry["samples"] / entry["units"] if isinstance(entry["samples"], int) else 1
        samples = math.ceil(entry["needed"] * per_unit)
        amount = f"about {entry['needed']}" if entry["exact"] else f"at least {entry['needed']}"
        lines.append(f"{model} {precision} ({', '.join(entry['checks'])}): {entry['units']} units; establishing "
                     f"takes {amount}: {_establishing_command(results, model, precision, samples)}")
    return lines


# ----- how the figures were obtained (details "timing" and "timing_model") -----------------------------------------

def _distinct(values) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def timing_label(record: dict, results: dict) -> str:
    """The checks table's mark of a figure: ``measured`` or ``simulated``; the whole provenance (chip, calibration)
    when the run holds simulated figures of more than one timing model; empty when the record does not say."""
    text = provenance(record)
    if not text:
        return ""
    timing = text.partition(":")[0]
    if timing == "simulated" and len(_distinct(provenance(r) for r in results["records"]
                                               if provenance(r).startswith("simulated"))) > 1:
        return text
    return timing


def timing_summary(results: dict) -> str:
    """How the run's figures were obtained, for the run summary: each distinct provenance of its records (``simulated:
    C600 timing model, calibration 1a2b3c4d5e6f``, ``measured``); the hardware's ``timing`` when no record says; empty
    for older results files."""
    return "; ".join(_distinct(provenance(r) for r in results["records"])) or str(results["hardware"].get("timing") or "")


def simulated_chips(results: dict) -> list[tuple[str, str]]:
    """(chip, description) of each chip whose timing model gave simulated figures of the run."""
    chips = {}
    for record in results["records"]:
        model = timing_model_of(record) if provenance(record).startswith("simulated") else None
        if model and model.get("chip"):
            chips.setdefault(str(model["chip"]).upper(), str(model.get("chip_description") or ""))
    return list(chips.items())


def _has_timing(results: dict) -> bool:
    return any(provenance(r) for r in results["records"])


def check_headers(results: dict) -> tuple[str, ...]:
    """TABLE_HEADERS, with the Timing column before the verdict when some record says how it was obtained."""
    return (*TABLE_HEADERS[:-1], TIMING_HEADER, TABLE_HEADERS[-1]) if _has_timing(results) else TABLE_HEADERS


def check_rows(results: dict) -> list[tuple]:
    with_timing = _has_timing(results)
    rows = []
    for r in results["records"]:
        row = (r["model"], r["precision"], r.get("scenario") or "", r["check"], _value_text(r),
               f"{r['op']} {fmt(r.get('target'))}", r.get("units", ""))
        shown = check_verdict_text(r)
        rows.append((*row, timing_label(r, results), shown) if with_timing else (*row, shown))
    return rows


def check_verdict_text(record: dict) -> str:
    """:func:`verdict`, with why a failing figure of measured hardware is the host's (``details.host_bound``)."""
    shown = verdict(record)
    hosted = (record.get("details") or {}).get("host_bound")
    return f"{shown} (host-bound: {hosted})" if hosted and shown == "FAIL" else shown


def outcome_counts(results: dict) -> str:
    counts: dict[str, int] = {}
    for test in results["tests"]:
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
    order = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
    return ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k)) or "no tests"


def failed_tests(results: dict) -> list[dict]:
    return [t for t in results["tests"] if t["outcome"] in ("failed", "error")]


def _commit(results: dict) -> str:
    git = results["git"]
    if not git.get("commit"):
        return "unknown"
    return git["commit"][:12] + (" (uncommitted changes)" if git.get("dirty") else "")


def check_counts(results: dict) -> dict[str, int]:
    """Gated checks by verdict (``PASS``, ``PASS*``, ``FAIL``, ``XFAIL``: waived by a known failure) and ``info``."""
    counts = dict.fromkeys((*VERDICT_ORDER, "info"), 0)
    for record in results["records"]:
        v = verdict(record)
        counts["info" if "(info)" in v else v] += 1
    return counts


def _role(results: dict) -> str:
    """Whether the run was the release gate: its profile, with the profile's own sample counts."""
    settings = results["settings"]
    if settings["profile"] == RELEASE_PROFILE and settings.get("samples"):
        return "not the release gate: --samples replaced its counts"
    return profile_role(settings["profile"])


def _checks_summary(results: dict) -> str:
    c = check_counts(results)
    gated = c["PASS"] + c["PASS*"] + c["FAIL"] + c["XFAIL"]
    parts = [f"{c['PASS'] + c['PASS*']} passed ({c['PASS']} established"
             + (f", {c['PASS*']} not established)" if c["PASS*"] else ")"),
             f"{c['FAIL']} failed"]
    if c["XFAIL"]:
        parts.append(f"{c['XFAIL']} waived")
    return f"{gated} gated: {', '.join(parts)}; {c['info']} informational"


def _summary_pairs(results: dict) -> list[tuple[str, str]]:
    settings = results["settings"]
    hardware = results["hardware"]
    counts = check_counts(results)
    problems = [f"{n} {what}" for n, what in ((counts["FAIL"], "gate(s) failed"),
                                               (len(failed_tests(results)), "test(s) failed"),
                                               (len(results["regressions"]), "regression(s)")) if n]
    selection = results["settings"].get("selection") or {}
    if results.get("interrupted"):
        problems.append("interrupted" + (f": {not_run} of {selection['selected']} selected tests not run"
                                         if (not_run := tests_not_run(results)) else ""))
    pairs = [
        ("verdict", verdict_text(results) + (f" ({', '.join(problems)})" if problems else "")),
        ("hardware", f"{hardware['name']}: {hardware.get('description', '')}"),
    ]
    pairs += [("device", f"simulated {chip}" + (f": {description}" if description else ""))
              for chip, description in simulated_chips(results)]
    timing = timing_summary(results)
    if timing:
        pairs.append(("performance figures", timing))
    judged = judged_by_model(results)
    given = [m for m in settings["models"] if m not in judged and any(
        m in (settings.get(key) or {}) for key in ("checkpoints", "datasets", "calibrations"))]
    yours = [*judged, *given]  # an interrupted run may not have judged a model it was given data for
    pairs += [
        ("profile", f"{settings['profile']} ({_role(results)}), models "
                    f"{', '.join(settings['models'])}"),
        ("judged", "the suite's seeded weights and synthetic samples" if not yours else
         f"your checkpoint or data for {', '.join(yours)}" + (" (see What was judged)" if judged else "")
         + ("; the others: seeded weights" if set(settings["models"]) - set(yours) else "")),
        ("commit", _commit(results)),
        ("tests", outcome_counts(results)),
        *([("selection", selection_text(selection))] if selection_text(selection) else []),
        ("checks", _checks_summary(results)),
    ]
    if counts["XFAIL"]:
        reasons = len(known_failure_groups(results))
        pairs.append(("waived gates", f"{counts['XFAIL']} (known failures, {reasons} reason{'s' * (reasons != 1)}; "
                                      f"listed under Known failures)"))
    pairs.append(("created", f"{results['created']}, exit status {results['exit_status']}"))
    if settings.get("shard"):
        pairs.append(("shard", settings["shard"]))
    if results.get("merged_from"):
        pairs.append(("merged from", ", ".join(f"{m['path']} (shard {m.get('shard') or '-'})" for m in results["merged_from"])))
    if results.get("missing_shards"):
        pairs.append(("missing shards", ", ".join(results["missing_shards"]) + " (verdict FAIL: the run is incomplete)"))
    if settings.get("baseline"):
        pairs.append(("baseline", settings["baseline"]))
    return pairs


# ----- the verdict matrix: models x (precisions for accuracy, scenarios for performance) ---------------------------

def _worst(verdicts) -> str:
    found = [v for v in verdicts if v in VERDICT_ORDER]
    return max(found, key=VERDICT_ORDER.index) if found else ""


def _short(value) -> str:
    """A figure in a matrix cell: 3 significant digits, thousands as k."""
    if value is None:
        return "n/a"
    if abs(value) >= 10000:
        return f"{value / 1000:.3g}k"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _key_accuracy_record(records: list[dict]) -> dict | None:
    """The figure an accuracy cell shows: a failing gate, else the task metric (or its ratio to FP32), else SNR."""
    gating = [r for r in records if r.get("gating", True)]
    failing = [r for r in gating if verdict(r) in ("FAIL", "XFAIL", NOT_ESTABLISHED)]
    if failing:
        return max(failing, key=lambda r: VERDICT_ORDER.index(verdict(r)))
    task = [r for r in gating if r["check"].split("@")[0] not in TENSOR_METRICS]
    snr = [r for r in gating if r["check"] == "snr_db"]
    return (task or snr or gating or [None])[0]


def _accuracy_cell(records: list[dict]) -> str:
    key = _key_accuracy_record(records)
    if key is None:
        return ""
    name = key["check"].split("@")[0]
    units = f" {key['units']}" if key.get("units") else ""
    return f"{_worst(verdict(r) for r in records)} {name} {_short(key.get('value'))}{units}"


def _performance_cell(records: list[dict], precisions: list[str]) -> str:
    """Worst verdict of the scenario over the precisions, then each precision's result figure."""
    by_precision = {p: [r for r in records if r["precision"] == p] for p in precisions}
    figures = []
    for precision, recs in by_precision.items():
        result = _result_record([r for r in recs if r.get("gating", True)], recs[0].get("scenario") or "") if recs else None
        if result is not None:
            figures.append(f"{precision} {_short(result.get('value'))}")
    units = _result_record([r for r in records if r.get("gating", True)], records[0].get("scenario") or "")
    unit = f" {units['units']}" if units and units.get("units") else ""
    worst = _worst(verdict(r) for r in records)
    hosted = worst == "FAIL" and any((r.get("details") or {}).get("host_bound") for r in records if verdict(r) == "FAIL")
    return f"{worst}{' (host-bound)' if hosted else ''} {', '.join(figures)}{unit}"


def matrix(results: dict) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the verdict matrix; each cell the worst verdict of its checks and the key figure."""
    records = [r for r in results["records"] if r["kind"] != "reference"]
    models = list(dict.fromkeys(r["model"] for r in records))
    accuracy_precisions = list(dict.fromkeys(r["precision"] for r in records if r["kind"] == "accuracy"))
    scenarios = [s for s in SCENARIOS if any(r.get("scenario") == s and r["kind"] == "performance" for r in records)]
    audits = any(r["kind"] == "audit" for r in records)
    headers = ["Model", *accuracy_precisions, *scenarios, *(["Audits"] if audits else [])]
    rows = []
    for model in models:
        mine = [r for r in records if r["model"] == model]
        row = [model]
        for precision in accuracy_precisions:
            row.append(_accuracy_cell([r for r in mine if r["kind"] == "accuracy" and r["precision"] == precision]) or "-")
        for scenario in scenarios:
            perf = [r for r in mine if r["kind"] == "performance" and r.get("scenario") == scenario]
            precisions = list(dict.fromkeys(r["precision"] for r in perf))
            row.append(_performance_cell(perf, precisions) if perf else "-")
        if audits:
            audit = [r for r in mine if r["kind"] == "audit"]
            row.append(f"{_worst(verdict(r) for r in audit)} {len(audit)} run{'s' * (len(audit) != 1)}" if audit else "-")
        rows.append(row)
    return headers, rows


def matrix_note(results: dict) -> str:
    parts = ["Each cell: the worst verdict of its checks and the key figure (accuracy: the failing gate, else the "
             "task metric; performance: each precision's result)."]
    if any(provenance(r).startswith("simulated") for r in results["records"]):
        parts.append("Performance figures are simulated by the timing model, not measured.")
    if check_counts(results)["PASS*"]:
        parts.append(NOT_ESTABLISHED_NOTE)
    if any((r.get("details") or {}).get("host_bound") for r in results["records"] if verdict(r) == "FAIL"):
        parts.append(HOST_BOUND_NOTE)
    return " ".join(parts)


# ----- known failures, grouped by reason ----------------------------------------------------------------------------

def known_failure_groups(results: dict) -> list[dict]:
    """Tests run under a known-failure entry, one group per reason: ``{"reason", "bucket", "sources", "tests":
    [(test id, outcome, waived checks)]}``. Whatever else an entry says (e.g. the checks it names) is kept in ``extra``."""
    groups: dict[str, dict] = {}
    waived = {}
    for record in results["records"]:
        if verdict(record) == "XFAIL":
            waived.setdefault(record["test_id"], []).append(record["check"])
    for test in results["tests"]:
        entry = test.get("xfail")
        if not entry:
            continue
        group = groups.setdefault(entry["reason"], {"reason": entry["reason"], "bucket": entry.get("bucket", ""),
                                                    "sources": [], "tests": []})
        if entry.get("source") and entry["source"] not in group["sources"]:
            group["sources"].append(entry["source"])
        named = entry.get("checks")
        checks = waived.get(test["id"]) or (list(named) if isinstance(named, list) else [])
        group["tests"].append((test["id"], test["outcome"], checks))
    return list(groups.values())


def _short_id(test_id: str) -> str:
    return test_id.split("::")[-1]


# ----- the MLPerf results table -------------------------------------------------------------------------------------

def _result_record(records: list[dict], scenario: str) -> dict | None:
    """The record that is the scenario's MLPerf result: p90/p99 latency, or throughput."""
    def is_latency(r):
        return "latency" in r["check"] or r.get("units", "").strip() in ("ms", "s", "us")

    def is_throughput(r):
        text = (r["check"] + " " + r.get("units", "")).lower()
        return "/s" in text or "per_s" in text or "qps" in text or "throughput" in text

    wanted = is_latency if SCENARIO_UNITS.get(scenario, "").startswith("Latency") else is_throughput
    return next((r for r in records if wanted(r)), records[0] if records else None)


def _validity(records: list[dict]) -> str:
    for r in records:
        details = r.get("details") or {}
        if isinstance(details.get("validity"), str):
            return details["validity"]
        for key in ("loadgen_valid", "result_valid", "valid"):
            if isinstance(details.get(key), bool):
                return "VALID" if details[key] else "INVALID"
    return ""


def _all_pass(records: list[dict]) -> str:
    gating = [r for r in records if r.get("gating", True)]
    if not gating:
        return ""
    if all(r["passed"] for r in gating):
        return "PASS"
    return "XFAIL" if all(r["passed"] or r.get("outcome") == "xfailed" for r in gating) else "FAIL"


def _server_figures(records: list[dict]) -> dict:
    """A Server row's figures: completed samples/s (LoadGen's result), the target QPS it ran at, the highest VALID QPS
    found; empty when the records do not say."""
    out = {}
    for r in records:
        details = r.get("details") or {}
        if r["check"] == "max_valid_server_qps":
            out["max_valid"] = r.get("value")
        elif details.get("target_qps") is not None:
            out.setdefault("target", details.get("target_qps"))
            out.setdefault("completed", details.get("completed_samples_per_second"))
    return out


OFFICIAL_SCRIPTS = {"verify_accuracy": "verify_accuracy.py", "verify_performance": "verify_performance.py"}


def compliance_text(record: dict) -> str:
    """An audit's entry in the compliance column: ``TEST01 PASS`` when MLCommons' verification scripts say TEST PASS
    for its logs and the suite's own stricter checks pass; otherwise what each script says, and ``not established``
    when its runs are INVALID only because the profile makes them shorter than MLPerf's."""
    official = (record.get("details") or {}).get("official")
    if not isinstance(official, dict) or not official:
        return f"{record['check']} {verdict(record)}"
    said = "; ".join(f"{OFFICIAL_SCRIPTS.get(k, k)}: {v}" for k, v in official.items())
    if record.get("passed") and record.get("established") is False:
        return f"{record['check']} not established ({said}; runs shorter than MLPerf's)"
    if all(v == "TEST PASS" for v in official.values()):
        if record.get("passed"):
            return f"{record['check']} PASS"
        return f"{record['check']} {verdict(record)} (the scripts: TEST PASS; the suite's byte check: FAIL)"
    return f"{record['check']} {verdict(record)} ({said})"


def _data_types(hardware: dict, precision: str) -> dict[str, str]:
    """MLPerf's data types of ``precision`` as the results file's hardware header states them (its backend's
    ``data_types``); for a file that does not state them, the precision's name in each field (FP32: the reference's).
    A record's details may override any field."""
    stated = (hardware.get("data_types") or {}).get(precision)
    if stated is None:
        stated = FP32_DATA_TYPES if precision == "fp32" else {key: precision for key in DATA_TYPE_KEYS}
    return {key: str(stated.get(key, precision)) for key in DATA_TYPE_KEYS}


def mlperf_rows(results: dict) -> list[dict]:
    """One row per model x precision x scenario (scenario empty for accuracy-only pairs), keyed by CSV_COLUMNS and
    ``Timing`` (the checks table's mark of the row's performance and audit figures, for the Markdown table).

    ``notes`` starts with how the row's performance and audit figures were obtained (``measured``, or ``simulated:
    C600 timing model, calibration ...``): MLPerf's free-text column for what qualifies a system's results."""
    accuracy: dict[tuple, list] = {}
    performance: dict[tuple, list] = {}
    audits: dict[tuple, list] = {}
    for r in results["records"]:
        pair = (r["model"], r["precision"])
        if r["kind"] == "performance":
            performance.setdefault(pair, {}).setdefault(r.get("scenario") or "", []).append(r)
        elif r["kind"] == "audit":
            audits.setdefault(pair, []).append(r)
        else:
            accuracy.setdefault(pair, []).append(r)
    machine, hardware, packages = results["machine"], results["hardware"], results["packages"]
    rows = []
    for pair in sorted(set(accuracy) | set(performance) | set(audits)):
        model, precision = pair
        acc = accuracy.get(pair, [])
        by_scenario = performance.get(pair) or {"": []}
        for scenario in sorted(by_scenario):
            perf = by_scenario[scenario]
            audit = [a for a in audits.get(pair, []) if (a.get("scenario") or "") in ("", scenario)]
            result = _result_record(perf, scenario) if perf else None
            types = _data_types(hardware, precision)
            for r in acc + perf:
                types.update({k: str(v) for k, v in (r.get("details") or {}).items() if k in DATA_TYPE_KEYS})
            notes = _distinct(provenance(r) for r in perf + audit)
            notes += sorted({str((r.get("details") or {}).get("notes")) for r in perf if (r.get("details") or {}).get("notes")})
            if any((r.get("details") or {}).get("compliant_length") is False for r in perf):
                notes.append("not of compliant length (MLPerf requires 600 s)")
            result_value = fmt(result["value"]) if result else ""
            server = _server_figures(perf) if scenario == "Server" else {}
            if server:
                result_value = fmt(server.get("completed"))  # MLPerf's result: completed samples/s, as LoadGen logs it
            rows.append({
                "SystemName": f"{hardware['name']}: {hardware.get('description', '')}",
                "Platform": hardware["name"],
                "Model": model,
                "Scenario": scenario,
                "Result": result_value,
                "Accuracy": "; ".join(f"{r['check']}: {fmt(r.get('value'))}" for r in acc if r.get("gating", True)),
                "number_of_nodes": 1,
                "host_processor_model_name": machine.get("processor", ""),
                "host_processor_core_count": machine.get("cpu_count", ""),
                "accelerator_model_name": hardware.get("description", ""),
                "accelerators_per_node": 1,
                "framework": f"ipu-conformance {packages.get('ipu-conformance') or ''} (numpy {packages.get('numpy') or ''})",
                "operating_system": machine.get("platform", ""),
                "notes": "; ".join(notes),
                "compliance": "; ".join(compliance_text(a) for a in audit) or "not run",
                "errors": sum(1 for r in acc + perf + audit if verdict(r) == "FAIL"),
                "version": packages.get("ipu-conformance") or "",
                "Units": SCENARIO_UNITS.get(scenario, result.get("units", "") if result else ""),
                "weight_data_types": types["weight_data_types"],
                "Precision": precision,
                "input_data_types": types["input_data_types"],
                "weight_transformations": types["weight_transformations"],
                "accuracy_verdict": _all_pass(acc),
                "validity": _validity(perf),
                "performance_verdict": _all_pass(perf),
                "server_target_qps": fmt(server["target"]) if server.get("target") is not None else "",
                "server_max_valid_qps": fmt(server["max_valid"]) if server.get("max_valid") is not None else "",
                "commit": results["git"].get("commit") or "",
                TIMING_HEADER: ", ".join(_distinct(timing_label(r, results) for r in perf + audit)),
            })
    return rows


# ----- formats ------------------------------------------------------------------------------------------------------

def _value_text(record: dict) -> str:
    """The value, with its 95% interval when the record has one."""
    ci = (record.get("details") or {}).get("ci95")
    text = fmt(record.get("value"))
    if isinstance(ci, list) and len(ci) == 2 and all(isinstance(v, (int, float)) for v in ci):
        text += f" [{fmt(ci[0])}, {fmt(ci[1])}]"
    return text


def verdict_text(results: dict) -> str:
    """The run's verdict as every report shows it: a PASS of a run that ``-k`` or ``-m`` narrowed is partial, naming
    how many tests it left out (``settings.selection``)."""
    deselected = (results["settings"].get("selection") or {}).get("deselected")
    if results["verdict"] == "PASS" and deselected:
        return f"PASS (partial: {deselected} test{'s' * (deselected != 1)} deselected)"
    return results["verdict"]


def selection_text(selection: dict) -> str:
    """``-k``, ``-m`` and what they left out, in words; empty for a run they left nothing out of (a ``-m 'not slow'``
    of the configuration that deselects nothing is not worth a line)."""
    if not selection.get("deselected"):
        return ""
    parts = [f"-{flag} {selection[key]!r}" for flag, key in (("k", "keyword"), ("m", "markers")) if selection.get(key)]
    of = f" of {selection['selected'] + selection['deselected']}" if selection.get("selected") is not None else ""
    return ", ".join([*parts, f"{selection['deselected']}{of} tests deselected"])


def tests_not_run(results: dict) -> int:
    """How many of the tests the run set out to run have no result (an interrupted run's)."""
    selected = (results["settings"].get("selection") or {}).get("selected")
    return max(selected - len(results["tests"]), 0) if isinstance(selected, int) else 0


def verdict_line(results: dict) -> str:
    """The run's verdict in one line: what the terminal prints last (one line, whatever the width, for a CI log's
    search)."""
    return (f"conformance {verdict_text(results)}: hardware={results['hardware']['name']}, "
            f"profile={results['settings']['profile']} ({_role(results)}), "
            f"{outcome_counts(results)}; {_checks_summary(results)}")


def skipped_tests(results: dict) -> list[tuple[str, list[str]]]:
    """The skipped tests grouped by their reason: (reason, [test ids]), in the run's order."""
    groups: dict[str, list[str]] = {}
    for test in results["tests"]:
        if test["outcome"] == "skipped":
            groups.setdefault(test["message"] or "(no reason given)", []).append(test["id"])
    return list(groups.items())


# ----- text that fits a width (the terminal's COLUMNS) -----------------------------------------------------------------

TERMINAL_FALLBACK = 120  # columns when neither COLUMNS nor a terminal says (a CI log, a pipe)
NARROWEST = 40  # a width below this is taken as this
CHECKS_DETAIL_COLUMNS = ("Timing", "Units")  # left out of the checks table, in this order, when it does not fit
COLUMN_GAP = 2  # tabulate's "simple" format: two spaces between columns


def terminal_width(stream=None) -> int:
    """``COLUMNS`` when set, else the width of the terminal ``stream`` (standard output) writes to, else
    :data:`TERMINAL_FALLBACK` (output that goes to a file or a pipe)."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return max(int(columns), NARROWEST)
    stream = sys.stdout if stream is None else stream
    try:
        if stream.isatty():
            return max(os.get_terminal_size(stream.fileno()).columns, NARROWEST)
    except (AttributeError, OSError, ValueError):  # no descriptor (captured), or not a terminal after all
        pass
    return TERMINAL_FALLBACK


def wrap(text: str, width: int | None, indent: str = "", first: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken only between words (a word longer than the width
    stands alone on its line, whole): ``first`` before the first line, ``indent`` before the others."""
    if width is None:
        return [first + text]
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [first.rstrip()]


def _longest_word(text: str) -> int:
    return max((len(word) for word in str(text).split()), default=0)


def _cell_width(text: str) -> int:
    return max((len(line) for line in str(text).splitlines()), default=0)


def fit_table(headers, rows, width: int | None, droppable=()) -> str:
    """A "simple" table that fits ``width``: cells wrapped between words, the widest column first; where even that is
    too wide, the ``droppable`` columns left out in their order (named in a last line). A table whose words alone do
    not fit is printed as narrow as its words allow."""
    headers, rows = [str(h) for h in headers], [[str(c) for c in row] for row in rows]
    dropped = []
    for name in droppable:  # detail columns go before any cell is wrapped
        if width is None or _natural_width(headers, rows) <= width or name not in headers:
            continue
        index = headers.index(name)
        dropped.append(headers.pop(index))
        rows = [row[:index] + row[index + 1:] for row in rows]
    text = _wrapped_table(headers, rows, width)
    if dropped:
        text += f"\n(left out to fit {width} columns: {', '.join(dropped)}; a wider COLUMNS shows them)"
    return text


def _natural_width(headers: list[str], rows: list[list[str]]) -> int:
    return sum(max(_cell_width(c) for c in column) for column in zip(headers, *rows)) + COLUMN_GAP * (len(headers) - 1)


def simple_table(headers, rows) -> str:
    """tabulate's "simple" format (left-aligned, two spaces between columns, dashes under the headers), without its
    padding of the headers, so that a column is as narrow as its longest word; cells may hold several lines."""
    headers, rows = [str(h) for h in headers], [[str(c) for c in row] for row in rows]
    sizes = [max(_cell_width(c) for c in column) for column in zip(headers, *rows)]
    gap = " " * COLUMN_GAP

    def lines(cells) -> list[str]:
        split = [c.splitlines() or [""] for c in cells]
        return [gap.join(part[i].ljust(size) if i < len(part) else " " * size for part, size in zip(split, sizes))
                .rstrip() for i in range(max(len(part) for part in split))]

    out = lines(headers) + [gap.join("-" * size for size in sizes)]
    for row in rows:
        out += lines(row)
    return "\n".join(out)


def _wrapped_table(headers: list[str], rows: list[list[str]], width: int | None) -> str:
    """The table with its widest columns' cells wrapped between words until it fits ``width`` (or its words do)."""
    columns = list(zip(headers, *rows))
    natural = [max(_cell_width(c) for c in column) for column in columns]
    budget = None if width is None else width - COLUMN_GAP * (len(headers) - 1)
    if budget is None or sum(natural) <= budget:
        return simple_table(headers, rows)
    least = [max(_longest_word(c) for c in column) for column in columns]
    sizes = list(natural)
    while sum(sizes) > budget:
        slack = [size - low for size, low in zip(sizes, least)]
        widest = max(range(len(sizes)), key=lambda i: (sizes[i] if slack[i] > 0 else -1, -i))
        if slack[widest] <= 0:
            break  # every column is down to its longest word
        sizes[widest] -= 1

    def cell(text: str, size: int) -> str:
        return "\n".join(line for part in text.splitlines() or [""] for line in wrap(part, size))

    return simple_table([cell(h, sizes[i]) for i, h in enumerate(headers)],
                        [[cell(c, sizes[i]) for i, c in enumerate(row)] for row in rows])


def terminal(results: dict, detailed: bool = True, width: int | None = None) -> str:
    """The summary, the matrix, the detailed checks (``detailed``), the failures with their whole reasons, the skipped
    tests with theirs, the regressions; the verdict line last, where it does not scroll away. The summary, tables and
    lists fit ``width`` columns (default: :func:`terminal_width`), broken only between words; a failure's message and
    the verdict line stay as written (one line each to search or copy)."""
    width = terminal_width() if width is None else width
    lines = []
    for key, value in _summary_pairs(results):
        lines += wrap(value, width, indent=" " * (len(key) + 2), first=f"{key}: ")
    headers, rows = matrix(results)
    if rows:
        lines += ["", fit_table(headers, rows, width)]
        if check_counts(results)["PASS*"]:
            lines += wrap(NOT_ESTABLISHED_NOTE, width)
            for line in establishing(results):  # as written: a command stays one line to copy
                lines.append(f"  {line}")
    if detailed and results["records"]:
        lines += ["", fit_table(check_headers(results), check_rows(results), width, CHECKS_DETAIL_COLUMNS)]
    for test in failed_tests(results):  # as written: a reproduce command stays one line to copy
        lines += ["", f"{test['outcome'].upper()} {test['id']}:", *("  " + line for line in test["message"].splitlines())]
    skipped = skipped_tests(results)
    if skipped:
        lines += ["", f"SKIPPED {sum(len(ids) for _, ids in skipped)} test(s):"]
        for reason, ids in skipped:
            lines += wrap(f"{reason}: {', '.join(_short_id(i) for i in ids)}", width, indent="    ", first="  ")
    for reg in results["regressions"]:
        lines += wrap(f"REGRESSION {reg['message']}", width, indent="  ")
    for entry in results["stale_xfails"]:
        lines += wrap(f"WARNING stale xfail entry {entry['test_id']} ({entry['source']}) matches no test", width,
                      indent="  ")
    lines += ["", verdict_line(results)]
    return "\n".join(lines) + "\n"


# ----- compliance.md and results.html: one description of their sections, rendered twice ----------------------------

MD_WIDTH = 100  # the widest prose line of compliance.md
MD_CELL = 40  # a Markdown table cell longer than this moves below its table, as a numbered note


@dataclass(frozen=True)
class Span:
    """Inline text: ``style`` "" (plain), "code", "bold", or "badge" (a verdict badge; HTML only)."""

    text: str
    style: str = ""


@dataclass
class Paragraph:
    text: str


@dataclass
class Table:
    headers: tuple
    rows: list
    css: str = ""  # html class: summary, matrix, sortable
    table_id: str = ""
    numeric: tuple = ()  # html: right-aligned column indexes
    verdicts: list | None = None  # html: each row's verdict, for the "only checks that did not pass" filter
    more: "Table | None" = None  # html: every column, behind "all columns" (compliance.md points to results.csv)


@dataclass
class Items:
    items: list  # [(spans, [sub-item spans, ...]), ...]


@dataclass
class Subheading:
    spans: tuple


@dataclass
class Preformatted:
    text: str


@dataclass
class Figures:
    key: str
    paths: list


@dataclass
class Section:
    title: str
    blocks: list


def title(results: dict) -> str:
    return f"Conformance of {results['hardware']['name']}, profile {results['settings']['profile']}: {verdict_text(results)}"


def _checks_note(results: dict) -> str:
    return ("One row per model, precision, scenario and check: the value (with its 95% interval where the gate uses "
            "one), the target, and the verdict (XFAIL: waived by a known failure; (info): reported, not gated)."
            + (" Timing: whether a performance or audit figure was measured on the host or simulated by the timing "
               "model named above." if _has_timing(results) else "")
            + (" " + NOT_ESTABLISHED_NOTE if check_counts(results)["PASS*"] else ""))


def sections(results: dict) -> list[Section]:
    """The report after its title, in order: summary, verdict matrix, what was judged, failures, skipped tests,
    regressions, checks, the MLPerf-style table, known failures, plots. compliance.md and results.html render these."""
    out = [Section("", [Table(("", ""), _summary_pairs(results), css="summary")])]
    headers, rows = matrix(results)
    if rows:
        settle = establishing(results)
        out.append(Section("Verdicts", [Table(headers, rows, css="matrix"), Paragraph(matrix_note(results))]
                           + ([Items([((Span(line),), []) for line in settle])] if settle else [])))
    judged = judged_rows(results)
    if judged:
        out.append(Section("What was judged", [Table(JUDGED_HEADERS, judged)]))
    failed = failed_tests(results)
    if failed:
        blocks = []
        for test in failed:
            blocks += [Subheading((Span("FAIL", "badge"), Span(_short_id(test["id"]), "code"),
                                   Span(f" ({test['outcome']})"))),
                       Preformatted(test["message"] or "(no message)")]
        out.append(Section("Failures", blocks))
    skipped = skipped_tests(results)
    if skipped:
        out.append(Section("Skipped tests", [Items([((Span(reason),), [(Span(_short_id(i), "code"),) for i in ids])
                                                    for reason, ids in skipped])]))
    if results["settings"].get("baseline") or results["regressions"]:
        out.append(Section("Regressions against the baseline",
                           [Items([((Span(r["message"]),), []) for r in results["regressions"]])]
                           if results["regressions"] else [Paragraph("None.")]))
    if results["records"]:
        verdicts = [verdict(r) for r in results["records"]]
        headers_ = check_headers(results)
        out.append(Section("Checks", [Paragraph(_checks_note(results)),
                                      Table(headers_, check_rows(results), css="sortable", table_id="checks",
                                            numeric=(headers_.index("Value"),), verdicts=verdicts)]))
    else:
        out.append(Section("Checks", [Paragraph("No check was recorded.")]))
    cols, mlperf = _mlperf_short(results)
    if mlperf:
        every = Table(CSV_COLUMNS, [[row[c] for c in CSV_COLUMNS] for row in mlperf_rows(results)], css="sortable")
        out.append(Section("MLPerf-style results", [Paragraph("The columns read first; results.csv has every column."),
                                                    Table(cols, mlperf, css="sortable", more=every)]))
    groups = known_failure_groups(results)
    if groups or results["stale_xfails"]:
        items = [((Span(g["reason"], "bold"), Span(f" ({g['bucket']}; {', '.join(g['sources'])})")),
                  [(Span(_short_id(t), "code"), Span(f": {outcome}" + (f", waived: {', '.join(checks)}" if checks else "")))
                   for t, outcome, checks in g["tests"]]) for g in groups]
        items += [((Span("stale entry "), Span(e["test_id"], "code"), Span(f" ({e['source']}): matches no test")), [])
                  for e in results["stale_xfails"]]
        out.append(Section("Known failures", [Items(items)]))
    plots = results["plots"]
    if plots["status"] == "written":
        blocks = [Paragraph(f"Notes: {plots['reason']}.")] if plots["reason"] else []
        blocks += [Figures(key, plots["files"][key]) for key in sorted(plots["files"])]
    else:
        blocks = [Paragraph(f"Plots {plots['status']}: {plots['reason']}.")]
    out.append(Section("Plots", blocks))
    return out


# the columns of the MLPerf table people read first; results.csv and the html's "all columns" have the rest
MLPERF_SHORT = ("Model", "Precision", "Scenario", "Result", "Units", "validity", "accuracy_verdict",
                "performance_verdict", "compliance")


def _mlperf_short(results: dict) -> tuple[tuple, list[list]]:
    cols = (*MLPERF_SHORT[:5], *((TIMING_HEADER,) if _has_timing(results) else ()), *MLPERF_SHORT[5:])
    return cols, [[row[c] for c in cols] for row in mlperf_rows(results) if row["Scenario"]]


# ----- Markdown -------------------------------------------------------------------------------------------------------

def _md_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_inline(spans) -> str:
    marks = {"code": "`", "bold": "**"}
    return "".join(f"{marks.get(s.style, '')}{s.text}{marks.get(s.style, '')}" for s in spans if s.style != "badge")


def _md_table(table: Table) -> list[str]:
    """The table, each cell longer than :data:`MD_CELL` (:data:`MD_WIDTH` in the summary's column of values)
    replaced by a numbered note listed below it: a Markdown row cannot wrap."""
    longest = MD_WIDTH if table.css == "summary" else MD_CELL
    notes: list[str] = []

    def cell(text) -> str:
        text = _md_cell(text)
        if len(text) <= longest:
            return text
        notes.append(text)
        return f"[{len(notes)}]"

    rows = [[cell(c) for c in row] for row in table.rows]
    out = [tabulate(rows, headers=[_md_cell(h) for h in table.headers], tablefmt="github", disable_numparse=True)]
    if notes:
        out.append("")
        out += [line for n, text in enumerate(notes, 1) for line in wrap(text, MD_WIDTH, "    ", f"[{n}]: ")]
    return out


def _fence(text: str) -> list[str]:
    fence = "~~~~" if "```" in text else "```"
    return [fence + "text", text.rstrip("\n"), fence]


def _md_block(block) -> list[str]:
    if isinstance(block, Paragraph):
        return wrap(block.text, MD_WIDTH)
    if isinstance(block, Table):
        return _md_table(block)
    if isinstance(block, Items):
        return [line for spans, subs in block.items
                for line in [*wrap(_md_inline(spans), MD_WIDTH, "  ", "- "),
                             *(x for sub in subs for x in wrap(_md_inline(sub), MD_WIDTH, "    ", "  - "))]]
    if isinstance(block, Subheading):
        return ["### " + _md_inline(block.spans)]
    if isinstance(block, Preformatted):
        return _fence(block.text)
    if isinstance(block, Figures):
        return [f"### {block.key}", ""] + [f"![{block.key} {p.rsplit('/', 1)[-1]}]({p})" for p in block.paths]
    raise TypeError(f"no Markdown for {type(block).__name__}")


def compliance_md(results: dict) -> str:
    """:func:`sections` as Markdown: the summary first (one screen with the verdict matrix), prose wrapped at
    :data:`MD_WIDTH` columns, long table cells as notes below their tables, plots as relative image links."""
    hw, profile = results["hardware"]["name"], results["settings"]["profile"]
    out = [f"# Conformance of `{hw}`, profile `{profile}`: {verdict_text(results)}", ""]
    for section in sections(results):
        if section.title:
            out += [f"## {section.title}", ""]
        for block in section.blocks:
            out += [*_md_block(block), ""]
    return "\n".join(out).rstrip() + "\n"


def summary_lines(markdown: str) -> int:
    """How many lines of ``compliance.md`` come before the first section after the matrix (the summary part)."""
    lines = markdown.splitlines()
    seen_matrix = False
    for index, line in enumerate(lines):
        if line.startswith("## "):
            if seen_matrix:
                return index
            seen_matrix = line == "## Verdicts"
    return len(lines)


def results_csv(results: dict) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(mlperf_rows(results))
    return buffer.getvalue()


# ----- results.html: one self-contained page (inline CSS, a few lines of script to sort tables, the plots embedded as
# data: URIs), the sections of compliance.md in the same order. Verdicts are coloured badges; the detailed checks table
# sorts by a click on a header and can be filtered to what did not pass; the MLPerf table shows the columns people
# read first, the others under "all columns".

PLOT_TYPES = {".png": "image/png", ".svg": "image/svg+xml"}
MAX_EMBEDDED_PLOT = 16 * 1024 * 1024  # bytes: a larger plot file stays a link beside the page


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1280px;padding:0 16px;
color:#1d2125}
h1{font-size:22px;margin:0 0 12px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dde3;padding-bottom:4px}
h3{font-size:14px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0 10px}th,td{border:1px solid #d8dde3;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f3f5f7;font-weight:600}
table.sortable th{cursor:pointer;user-select:none}table.sortable th:after{content:" \\2195";color:#99a}
table.summary th{background:none;font-weight:600;white-space:nowrap}table.summary td,table.summary th{border:none;
padding:1px 14px 1px 0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
table.matrix{font-size:12px}table.matrix td,table.matrix th{padding:2px 5px}
.v{display:inline-block;min-width:44px;padding:0 6px;border-radius:3px;font-weight:600;font-size:12px;text-align:center}
.PASS{background:#d9f2df;color:#14532d}.PASSx{background:#fdf3c8;color:#6b4e00}.FAIL{background:#fbd5d5;color:#8b1a1a}
.XFAIL{background:#e4e7ec;color:#3b4250}.INFO{background:#eef2f7;color:#5a6472}
.verdict{font-size:18px;padding:2px 10px}
pre{background:#f7f7f9;border:1px solid #e2e4e8;padding:8px 10px;white-space:pre-wrap;font-size:12.5px}
details>summary{cursor:pointer;margin:6px 0}.note{color:#4f5761;font-size:13px}
.sim{color:#6b4e00;font-style:italic}img{max-width:100%;border:1px solid #e2e4e8;margin:4px 0}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:10px}
"""

SCRIPT = """
function sortTable(th){const table=th.closest('table'),body=table.tBodies[0],i=[...th.parentNode.children].indexOf(th);
const asc=th.dataset.dir!=='asc';th.dataset.dir=asc?'asc':'desc';
const key=r=>{const t=r.children[i].innerText.trim(),n=parseFloat(t);return isNaN(n)?t.toLowerCase():n;};
[...body.rows].sort((a,b)=>{const x=key(a),y=key(b);return (x>y?1:x<y?-1:0)*(asc?1:-1);}).forEach(r=>body.appendChild(r));}
function onlyProblems(box){document.querySelectorAll('#checks tbody tr').forEach(r=>{
r.style.display=box.checked&&r.dataset.v==='PASS'?'none':'';});}
"""


def esc(text) -> str:
    return html.escape(str(text))


def badge(verdict: str, big: bool = False) -> str:
    if not verdict:
        return ""
    css = {"PASS*": "PASSx"}.get(verdict, verdict if verdict in ("PASS", "FAIL", "XFAIL") else "INFO")
    return f'<span class="v {css}{" verdict" if big else ""}">{esc(verdict)}</span>'


def _cell(text: str) -> str:
    """A matrix or table cell whose first word is a verdict: that word as a badge."""
    head, _, rest = str(text).partition(" ")
    if head in VERDICT_ORDER:
        return f"{badge(head)} {esc(rest)}"
    if text in ("PASS (info)", "BELOW (info)"):
        return badge(text)
    return esc(text)


def _html_inline(spans) -> str:
    tags = {"code": "code", "bold": "b"}
    return "".join(badge(s.text) + " " if s.style == "badge" else
                   f"<{tags[s.style]}>{esc(s.text)}</{tags[s.style]}>" if s.style in tags else esc(s.text) for s in spans)


def _summary_html(table: Table) -> str:
    rows = []
    for key, value in table.rows:
        if key == "verdict":
            head, _, rest = value.partition(" ")
            shown = f"{badge(head, big=True)} {esc(rest)}"
        else:
            shown = f'<span class="sim">{esc(value)}</span>' if key == "performance figures" and "simulated" in value \
                else esc(value)
        rows.append(f"<tr><th>{esc(key)}</th><td>{shown}</td></tr>")
    return '<table class="summary">' + "".join(rows) + "</table>"


def _html_table(table: Table) -> str:
    if table.css == "summary":
        return _summary_html(table)
    attrs = (f' class="{table.css}"' if table.css else "") + (f' id="{table.table_id}"' if table.table_id else "")
    onclick = ' onclick="sortTable(this)"' if table.css == "sortable" else ""
    out = []
    if table.verdicts is not None:
        out.append('<p class="note">Click a column to sort.</p><label><input type="checkbox" '
                   'onchange="onlyProblems(this)"> show only checks that did not pass</label>')
    out.append(f"<table{attrs}><thead><tr>" + "".join(f"<th{onclick}>{esc(h)}</th>" for h in table.headers)
               + "</tr></thead><tbody>")
    for index, row in enumerate(table.rows):
        extra = f' data-v="{esc(table.verdicts[index].split(" ")[0])}"' if table.verdicts is not None else ""
        cells = "".join(f'<td class="num">{esc(c)}</td>' if i in table.numeric else f"<td>{_cell(c)}</td>"
                        for i, c in enumerate(row))
        out.append(f"<tr{extra}>{cells}</tr>")
    out.append("</tbody></table>")
    if table.more is not None:
        out += ["<details><summary>all columns (as in results.csv)</summary>", _html_table(table.more), "</details>"]
    return "".join(out)


def _plot_source(path: str, plots_dir) -> str:
    """The image's ``src``: the file's bytes as a data: URI (the page needs nothing beside it), or the relative path
    where the file is not there to read, too large, or of a type not embedded."""
    kind = PLOT_TYPES.get(Path(path).suffix.lower())
    if plots_dir is None or kind is None:
        return path
    try:
        with open(Path(plots_dir) / path, "rb") as handle:
            data = handle.read(MAX_EMBEDDED_PLOT + 1)
    except OSError:
        return path
    if len(data) > MAX_EMBEDDED_PLOT:
        return path
    return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"


def _html_block(block, plots_dir) -> str:
    if isinstance(block, Paragraph):
        return f'<p class="note">{esc(block.text)}</p>'
    if isinstance(block, Table):
        return _html_table(block)
    if isinstance(block, Items):
        items = "".join(f"<li>{_html_inline(spans)}"
                        + (f"<ul>{''.join(f'<li>{_html_inline(sub)}</li>' for sub in subs)}</ul>" if subs else "")
                        + "</li>" for spans, subs in block.items)
        return f"<ul>{items}</ul>"
    if isinstance(block, Subheading):
        return f"<h3>{_html_inline(block.spans)}</h3>"
    if isinstance(block, Preformatted):
        return f"<pre>{esc(block.text)}</pre>"
    if isinstance(block, Figures):
        images = "".join(f'<img src="{esc(_plot_source(p, plots_dir))}" alt="{esc(block.key)} '
                         f'{esc(p.rsplit("/", 1)[-1])}" loading="lazy">' for p in block.paths)
        return f'<details><summary>{esc(block.key)}</summary><div class="plots">{images}</div></details>'
    raise TypeError(f"no HTML for {type(block).__name__}")


def results_html(results: dict, plots_dir=None) -> str:
    """:func:`sections` as one HTML page; the plots are read from ``plots_dir`` (the report directory) and embedded,
    so the page alone shows them (without it, or for a file that is not there, the page links them)."""
    page_title = title(results)
    body = [f"<h1>{esc(page_title)}</h1>"]
    for section in sections(results):
        if section.title:
            body.append(f"<h2>{esc(section.title)}</h2>")
        body += [_html_block(block, plots_dir) for block in section.blocks]
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(page_title)}</title>"
            f"<style>{CSS}</style><script>{SCRIPT}</script></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


FORMATS = {"terminal": terminal, "md": compliance_md, "csv": results_csv, "html": results_html}
# the files a run writes next to results.json
HTML_FILE = "results.html"
REPORT_FILES = {"compliance.md": compliance_md, "results.csv": results_csv, HTML_FILE: results_html}
