"""The MLPerf results table (the submission checker's columns) and ``results.csv``."""

from __future__ import annotations

import csv
import io

from conformance.hardware.base import DATA_TYPE_KEYS, FP32_DATA_TYPES
from conformance.report.checks import provenance
from conformance.report.render.summary import TIMING_HEADER, _distinct, timing_label
from conformance.report.render.verdicts import fmt, verdict


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


def results_csv(results: dict) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(mlperf_rows(results))
    return buffer.getvalue()
