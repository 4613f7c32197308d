"""Renders a results record (``results.json``) as the compliance table: terminal, ``compliance.md``, ``results.csv``, html.

Every function takes the results dict only, so ``ipu-conformance report`` renders exactly what the run rendered.
"""

from __future__ import annotations

import csv
import html
import io

from tabulate import tabulate

from conformance.report.checks import provenance, timing_model_of
from conformance.report.judged import HEADERS as JUDGED_HEADERS
from conformance.report.judged import judged_by_model, judged_rows

# measurements.json-style data types per precision; a record's details may override any of these keys
DATA_TYPES = {
    "fp32": {"input_data_types": "fp32", "weight_data_types": "fp32", "weight_transformations": "none"},
    "fp16": {"input_data_types": "fp16", "weight_data_types": "fp16",
             "weight_transformations": "cast fp32 -> fp16, round to nearest even"},
    "fp8": {"input_data_types": "fp16 (fp8 at matmul/conv inputs)", "weight_data_types": "fp8 (matmul/conv), fp16 (other)",
            "weight_transformations": "post-training per-tensor power-of-two scaling, cast fp32 -> fp8"},
}
DATA_TYPES["fp16-half-partials"] = DATA_TYPES["fp16"]
DATA_TYPES["fp8-weights"] = {**DATA_TYPES["fp8"], "input_data_types": "fp16"}
DATA_TYPE_KEYS = ("input_data_types", "weight_data_types", "weight_transformations")

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
        rows.append((*row, timing_label(r, results), verdict(r)) if with_timing else (*row, verdict(r)))
    return rows


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


def _checks_summary(results: dict) -> str:
    c = check_counts(results)
    gated = c["PASS"] + c["PASS*"] + c["FAIL"] + c["XFAIL"]
    parts = [f"{c['PASS'] + c['PASS*']} passed" + (f" ({c['PASS*']} not established)" if c["PASS*"] else ""),
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
    if results.get("interrupted"):
        problems.append("interrupted")
    pairs = [
        ("verdict", results["verdict"] + (f" ({', '.join(problems)})" if problems else "")),
        ("hardware", f"{hardware['name']}: {hardware.get('description', '')}"),
    ]
    pairs += [("device", f"simulated {chip}" + (f": {description}" if description else ""))
              for chip, description in simulated_chips(results)]
    timing = timing_summary(results)
    if timing:
        pairs.append(("performance figures", timing))
    judged = judged_by_model(results)
    pairs += [
        ("profile", f"{settings['profile']}, models {', '.join(settings['models'])}"),
        ("judged", "the suite's seeded weights and synthetic samples" if not judged else
         f"your checkpoint or data for {', '.join(judged)} (see What was judged)"
         + ("; the others: seeded weights" if set(settings["models"]) - set(judged) else "")),
        ("commit", _commit(results)),
        ("tests", outcome_counts(results)),
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

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")


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
    task = [r for r in gating if r["check"] not in ("snr_db", "cosine", "max_abs_error")]
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
    return f"{_worst(verdict(r) for r in records)} {', '.join(figures)}{unit}"


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

    wanted = is_latency if scenario in ("SingleStream", "MultiStream") else is_throughput
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
            types = dict(DATA_TYPES.get(precision, {k: precision for k in DATA_TYPE_KEYS}))
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


def verdict_line(results: dict) -> str:
    """The run's verdict in one line: what the terminal prints last."""
    return (f"conformance {results['verdict']}: hardware={results['hardware']['name']}, "
            f"profile={results['settings']['profile']}, {outcome_counts(results)}; {_checks_summary(results)}")


def terminal(results: dict, detailed: bool = True) -> str:
    """The summary, the matrix, the detailed checks (``detailed``), the failures with their whole reasons, the
    regressions; the verdict line last, where it does not scroll away."""
    lines = [f"{key}: {value}" for key, value in _summary_pairs(results)]
    headers, rows = matrix(results)
    if rows:
        lines += ["", tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)]
        if check_counts(results)["PASS*"]:
            lines.append(NOT_ESTABLISHED_NOTE)
    if detailed and results["records"]:
        lines += ["", tabulate(check_rows(results), headers=check_headers(results), tablefmt="simple",
                               disable_numparse=True)]
    for test in failed_tests(results):
        lines += ["", f"{test['outcome'].upper()} {test['id']}:", *("  " + l for l in test["message"].splitlines())]
    for reg in results["regressions"]:
        lines.append(f"REGRESSION {reg['message']}")
    for entry in results["stale_xfails"]:
        lines.append(f"WARNING stale xfail entry {entry['test_id']} ({entry['source']}) matches no test")
    lines += ["", verdict_line(results)]
    return "\n".join(lines) + "\n"


def _md_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(headers, rows) -> str:
    rows = [[_md_cell(c) for c in row] for row in rows]
    return tabulate(rows, headers=[_md_cell(h) for h in headers], tablefmt="github", disable_numparse=True)


def _fence(text: str) -> list[str]:
    fence = "~~~~" if "```" in text else "```"
    return [fence + "text", text.rstrip("\n"), fence]


# the columns of the MLPerf table people read first; results.csv and the html's "all columns" have the rest
MLPERF_SHORT = ("Model", "Precision", "Scenario", "Result", "Units", "validity", "accuracy_verdict",
                "performance_verdict", "compliance")


def _mlperf_short(results: dict) -> tuple[tuple, list[list]]:
    cols = (*MLPERF_SHORT[:5], *((TIMING_HEADER,) if _has_timing(results) else ()), *MLPERF_SHORT[5:])
    return cols, [[row[c] for c in cols] for row in mlperf_rows(results) if row["Scenario"]]


def compliance_md(results: dict) -> str:
    """Summary first (header and verdict matrix: one screen), then the failures with their whole reasons, the
    regressions, the detailed checks, the MLPerf-style table, the known failures grouped by reason, the plots."""
    hw, profile = results["hardware"]["name"], results["settings"]["profile"]
    out = [f"# Conformance of `{hw}`, profile `{profile}`: {results['verdict']}", ""]
    out += [_md_table(("", ""), _summary_pairs(results)), ""]
    headers, rows = matrix(results)
    if rows:
        out += ["## Verdicts", "", _md_table(headers, rows), "", matrix_note(results), ""]

    judged = judged_rows(results)
    if judged:
        out += ["## What was judged", "", _md_table(JUDGED_HEADERS, judged), ""]

    failed = failed_tests(results)
    if failed:
        out += ["## Failures", ""]
        for test in failed:
            out += [f"### `{_short_id(test['id'])}` ({test['outcome']})", "", *_fence(test["message"] or "(no message)"), ""]

    if results["settings"].get("baseline") or results["regressions"]:
        out += ["## Regressions against the baseline", ""]
        out += [f"- {_md_cell(r['message'])}" for r in results["regressions"]] or ["None."]
        out += [""]

    out += ["## Checks", ""]
    if results["records"]:
        out += ["One row per model, precision, scenario and check: the value (with its 95% interval where the gate "
                "uses one), the target, and the verdict (XFAIL: waived by a known failure; (info): reported, not gated)."
                + (" Timing: whether a performance or audit figure was measured on the host or simulated by the timing "
                   "model named above." if _has_timing(results) else "")
                + (" " + NOT_ESTABLISHED_NOTE if check_counts(results)["PASS*"] else ""), ""]
        out += [_md_table(check_headers(results), check_rows(results)), ""]
    else:
        out += ["No check was recorded.", ""]

    cols, mlperf = _mlperf_short(results)
    if mlperf:
        out += ["## MLPerf-style results", "", "The columns read first; `results.csv` has every column.", "",
                _md_table(cols, mlperf), ""]

    groups = known_failure_groups(results)
    if groups or results["stale_xfails"]:
        out += ["## Known failures", ""]
        for group in groups:
            out += [f"- **{_md_cell(group['reason'])}** ({group['bucket']}; {', '.join(group['sources'])})"]
            out += [f"  - `{_short_id(t)}`: {outcome}" + (f", waived: {', '.join(checks)}" if checks else "")
                    for t, outcome, checks in group["tests"]]
        out += [f"- stale entry `{e['test_id']}` ({e['source']}): matches no test" for e in results["stale_xfails"]]
        out += [""]

    plots = results["plots"]
    out += ["## Plots", ""]
    if plots["status"] == "written":
        out += [f"Notes: {plots['reason']}.", ""] if plots["reason"] else []
        for key in sorted(plots["files"]):
            out += [f"### {key}", ""] + [f"![{key} {p.rsplit('/', 1)[-1]}]({p})" for p in plots["files"][key]] + [""]
    else:
        out += [f"Plots {plots['status']}: {plots['reason']}.", ""]
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


# ----- results.html: one self-contained page (inline CSS, a few lines of script to sort tables; plots are relative links
# into plots/), the sections of compliance.md in the same order. Verdicts are coloured badges; the detailed checks
# table sorts by a click on a header and can be filtered to what did not pass; the MLPerf table shows the columns
# people read first, the others under "all columns".

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


def _table(headers, rows, *, css: str = "", table_id: str = "", numeric=(), row_attrs=None) -> str:
    attrs = (f' class="{css}"' if css else "") + (f' id="{table_id}"' if table_id else "")
    onclick = ' onclick="sortTable(this)"' if "sortable" in css else ""
    out = [f"<table{attrs}><thead><tr>" + "".join(f"<th{onclick}>{esc(h)}</th>" for h in headers) + "</tr></thead><tbody>"]
    for index, row in enumerate(rows):
        extra = row_attrs(index) if row_attrs else ""
        cells = "".join(f'<td class="num">{esc(c)}</td>' if i in numeric else f"<td>{_cell(c)}</td>"
                        for i, c in enumerate(row))
        out.append(f"<tr{extra}>{cells}</tr>")
    return "".join(out) + "</tbody></table>"


def _summary(results: dict) -> str:
    rows = []
    for key, value in _summary_pairs(results):
        if key == "verdict":
            head, _, rest = value.partition(" ")
            shown = f"{badge(head, big=True)} {esc(rest)}"
        else:
            shown = f'<span class="sim">{esc(value)}</span>' if key == "performance figures" and "simulated" in value \
                else esc(value)
        rows.append(f"<tr><th>{esc(key)}</th><td>{shown}</td></tr>")
    return '<table class="summary">' + "".join(rows) + "</table>"


def results_html(results: dict) -> str:
    title = f"Conformance of {results['hardware']['name']}, profile {results['settings']['profile']}: {results['verdict']}"
    body = [f"<h1>{esc(title)}</h1>", _summary(results)]

    headers, rows = matrix(results)
    if rows:
        body += ["<h2>Verdicts</h2>", _table(headers, rows, css="matrix"),
                 f'<p class="note">{esc(matrix_note(results))}</p>']

    judged = judged_rows(results)
    if judged:
        body += ["<h2>What was judged</h2>", _table(JUDGED_HEADERS, judged)]

    failed = failed_tests(results)
    if failed:
        body.append("<h2>Failures</h2>")
        for test in failed:
            body += [f"<h3>{badge('FAIL')} <code>{esc(_short_id(test['id']))}</code> ({esc(test['outcome'])})</h3>",
                     f"<pre>{esc(test['message'] or '(no message)')}</pre>"]

    if results["settings"].get("baseline") or results["regressions"]:
        body.append("<h2>Regressions against the baseline</h2>")
        body.append("<ul>" + "".join(f"<li>{esc(r['message'])}</li>" for r in results["regressions"]) + "</ul>"
                    if results["regressions"] else "<p>None.</p>")

    body.append("<h2>Checks</h2>")
    if results["records"]:
        verdicts = [verdict(r) for r in results["records"]]
        headers_ = check_headers(results)
        numeric = {headers_.index("Value")}
        body += ['<p class="note">Click a column to sort. XFAIL: waived by a known failure; (info): reported, not '
                 'gated.' + (f" {esc(NOT_ESTABLISHED_NOTE)}" if "PASS*" in verdicts else "") + "</p>",
                 '<label><input type="checkbox" onchange="onlyProblems(this)"> show only checks that did not pass'
                 '</label>',
                 _table(headers_, check_rows(results), css="sortable", table_id="checks", numeric=numeric,
                        row_attrs=lambda i: f' data-v="{esc(verdicts[i]).split(" ")[0]}"')]
    else:
        body.append("<p>No check was recorded.</p>")

    cols, mlperf = _mlperf_short(results)
    if mlperf:
        every = mlperf_rows(results)
        body += ["<h2>MLPerf-style results</h2>", _table(cols, mlperf, css="sortable"),
                 "<details><summary>all columns (as in results.csv)</summary>",
                 _table(CSV_COLUMNS, [[row[c] for c in CSV_COLUMNS] for row in every], css="sortable"),
                 "</details>"]

    groups = known_failure_groups(results)
    if groups or results["stale_xfails"]:
        body.append("<h2>Known failures</h2><ul>")
        for group in groups:
            tests = "".join(f"<li><code>{esc(_short_id(t))}</code>: {esc(outcome)}"
                            + (f", waived: {esc(', '.join(checks))}" if checks else "") + "</li>"
                            for t, outcome, checks in group["tests"])
            body.append(f"<li><b>{esc(group['reason'])}</b> ({esc(group['bucket'])}; {esc(', '.join(group['sources']))})"
                        f"<ul>{tests}</ul></li>")
        body += [f"<li>stale entry <code>{esc(e['test_id'])}</code> ({esc(e['source'])}): matches no test</li>"
                 for e in results["stale_xfails"]]
        body.append("</ul>")

    plots = results["plots"]
    body.append("<h2>Plots</h2>")
    if plots["status"] == "written":
        if plots["reason"]:
            body.append(f"<p>Notes: {esc(plots['reason'])}.</p>")
        for key in sorted(plots["files"]):
            images = "".join(f'<a href="{esc(p)}"><img src="{esc(p)}" alt="{esc(key)} {esc(p.rsplit("/", 1)[-1])}" '
                             f'loading="lazy"></a>' for p in plots["files"][key])
            body.append(f"<details><summary>{esc(key)}</summary><div class=\"plots\">{images}</div></details>")
    else:
        body.append(f"<p>Plots {esc(plots['status'])}: {esc(plots['reason'])}.</p>")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
            f"<style>{CSS}</style><script>{SCRIPT}</script></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


FORMATS = {"terminal": terminal, "md": compliance_md, "csv": results_csv, "html": results_html}
# the files a run writes next to results.json
REPORT_FILES = {"compliance.md": compliance_md, "results.csv": results_csv, "results.html": results_html}
