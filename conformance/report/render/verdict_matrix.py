"""The verdict matrix: models x (precisions for accuracy, scenarios for performance)."""

from __future__ import annotations

from conformance.hardware.base import SCENARIOS
from conformance.report.checks import provenance
from conformance.report.render.mlperf import _result_record
from conformance.report.render.summary import check_counts
from conformance.report.render.verdicts import (
    HOST_BOUND_NOTE, NOT_ESTABLISHED, VERDICT_ORDER, not_established_note, verdict,
)
from conformance.targets.accuracy import TENSOR_METRICS


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
        parts.append(not_established_note(results))
    if any((r.get("details") or {}).get("host_bound") for r in results["records"] if verdict(r) == "FAIL"):
        parts.append(HOST_BOUND_NOTE)
    return " ".join(parts)
