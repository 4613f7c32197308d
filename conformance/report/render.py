"""Renders a results record (``results.json``) as the compliance table: terminal, ``compliance.md``, ``results.csv``, html.

Every function takes the results dict only, so ``ipu-conformance report`` renders exactly what the run rendered.
"""

from __future__ import annotations

import csv
import html
import io

from tabulate import tabulate

from conformance.report.checks import provenance, timing_model_of

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
                 "performance_verdict", "commit")
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
    """PASS/FAIL of one check; XFAIL when its test is a known failure; informational checks marked (info)."""
    if not record.get("gating", True):
        return "PASS (info)" if record["passed"] else "BELOW (info)"
    if record["passed"]:
        return "PASS"
    return "XFAIL" if record.get("outcome") == "xfailed" else "FAIL"


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
        row = (r["model"], r["precision"], r.get("scenario") or "", r["check"], fmt(r.get("value")),
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


def _summary_pairs(results: dict) -> list[tuple[str, str]]:
    settings = results["settings"]
    hardware = results["hardware"]
    pairs = [
        ("verdict", results["verdict"]),
        ("hardware", f"{hardware['name']} ({hardware.get('description', '')})"),
    ]
    timing = timing_summary(results)
    if timing:
        pairs.append(("performance figures", timing))
    pairs += [(f"simulated {chip}", description) for chip, description in simulated_chips(results) if description]
    pairs += [
        ("profile", settings["profile"]),
        ("models", ", ".join(settings["models"])),
        ("tests", outcome_counts(results)),
        ("exit status", str(results["exit_status"])),
        ("commit", _commit(results)),
        ("created", results["created"]),
    ]
    if settings.get("shard"):
        pairs.append(("shard", settings["shard"]))
    if results.get("merged_from"):
        pairs.append(("merged from", ", ".join(f"{m['path']} (shard {m.get('shard') or '-'})" for m in results["merged_from"])))
    if results.get("missing_shards"):
        pairs.append(("missing shards", ", ".join(results["missing_shards"]) + " (verdict FAIL: the run is incomplete)"))
    if settings.get("baseline"):
        pairs.append(("baseline", settings["baseline"]))
    return pairs


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
            server_qps = [(r.get("details") or {}).get("target_qps") for r in perf]
            if scenario == "Server" and any(q is not None for q in server_qps):
                result_value = fmt(next(q for q in server_qps if q is not None))  # MLPerf: the QPS it is VALID at
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
                "compliance": "; ".join(f"{a['check']} {verdict(a)}" for a in audit) or "not run",
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
                "commit": results["git"].get("commit") or "",
                TIMING_HEADER: ", ".join(_distinct(timing_label(r, results) for r in perf + audit)),
            })
    return rows


# ----- formats ------------------------------------------------------------------------------------------------------

def terminal(results: dict) -> str:
    lines = [f"conformance {results['verdict']}: hardware={results['hardware']['name']}, "
             f"profile={results['settings']['profile']}, {outcome_counts(results)}"]
    timing = timing_summary(results)
    if timing:
        lines.append(f"performance figures: {timing}")
    if results["records"]:
        lines.append(tabulate(check_rows(results), headers=check_headers(results), tablefmt="simple",
                              disable_numparse=True))
    for test in failed_tests(results):
        lines.append(f"{test['outcome'].upper()} {test['id']}: {test['message']}")
    for reg in results["regressions"]:
        lines.append(f"REGRESSION {reg['message']}")
    for entry in results["stale_xfails"]:
        lines.append(f"WARNING stale xfail entry {entry['test_id']} ({entry['source']}) matches no test")
    return "\n".join(lines) + "\n"


def _md_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(headers, rows) -> str:
    rows = [[_md_cell(c) for c in row] for row in rows]
    return tabulate(rows, headers=[_md_cell(h) for h in headers], tablefmt="github", disable_numparse=True)


def compliance_md(results: dict) -> str:
    hw, profile = results["hardware"]["name"], results["settings"]["profile"]
    out = [f"# Conformance of `{hw}`, profile `{profile}`: {results['verdict']}", ""]
    out += [_md_table(("", ""), _summary_pairs(results)), ""]

    out += ["## Checks", ""]
    if results["records"]:
        out += ["One row per model, precision, scenario and check: the value, the target it is compared with, "
                "and the verdict (XFAIL: a known failure listed in the xfail file; (info): reported, not gated)."
                + (" Timing: whether a performance or audit figure was measured on the host or simulated by the timing "
                   "model named under \"performance figures\" above." if _has_timing(results) else ""), ""]
        out += [_md_table(check_headers(results), check_rows(results)), ""]
    else:
        out += ["No check was recorded.", ""]

    rows = mlperf_rows(results)
    if rows:
        cols = ("Model", "Precision", "Scenario", "Result", "Units", *((TIMING_HEADER,) if _has_timing(results) else ()),
                "validity", "Accuracy", "accuracy_verdict", "performance_verdict", "compliance", "weight_data_types")
        out += ["## MLPerf-style results", "", _md_table(cols, [[row[c] for c in cols] for row in rows]), ""]

    failed = failed_tests(results)
    if failed:
        out += ["## Failed tests", ""]
        out += [f"- `{t['id']}` ({t['outcome']}): {_md_cell(t['message'])}" for t in failed] + [""]

    known = [t for t in results["tests"] if t.get("xfail")]
    if known or results["stale_xfails"]:
        out += ["## Known failures", ""]
        out += [f"- `{t['id']}`: {t['xfail']['bucket']}, {_md_cell(t['xfail']['reason'])} -> {t['outcome']}" for t in known]
        out += [f"- stale entry `{e['test_id']}` ({e['source']}): matches no test" for e in results["stale_xfails"]]
        out += [""]

    if results["settings"].get("baseline") or results["regressions"]:
        out += ["## Regressions against the baseline", ""]
        out += [f"- {_md_cell(r['message'])}" for r in results["regressions"]] or ["None."]
        out += [""]

    plots = results["plots"]
    out += ["## Plots", ""]
    if plots["status"] == "written":
        for key in sorted(plots["files"]):
            out += [f"### {key}", ""] + [f"![{key} {p.rsplit('/', 1)[-1]}]({p})" for p in plots["files"][key]] + [""]
    else:
        out += [f"Plots {plots['status']}: {plots['reason']}.", ""]
    return "\n".join(out).rstrip() + "\n"


def results_csv(results: dict) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(mlperf_rows(results))
    return buffer.getvalue()


def results_html(results: dict) -> str:
    esc = html.escape
    title = f"Conformance of {results['hardware']['name']}, profile {results['settings']['profile']}: {results['verdict']}"
    body = [f"<h1>{esc(title)}</h1>",
            tabulate(_summary_pairs(results), tablefmt="html", disable_numparse=True),
            "<h2>Checks</h2>",
            tabulate(check_rows(results), headers=check_headers(results), tablefmt="html", disable_numparse=True)]
    rows = mlperf_rows(results)
    if rows:
        body += ["<h2>MLPerf-style results</h2>",
                 tabulate([[row[c] for c in CSV_COLUMNS] for row in rows], headers=CSV_COLUMNS, tablefmt="html",
                          disable_numparse=True)]
    failed = failed_tests(results)
    if failed:
        body += ["<h2>Failed tests</h2>", "<ul>"] + [
            f"<li><code>{esc(t['id'])}</code> ({esc(t['outcome'])}): {esc(t['message'])}</li>" for t in failed] + ["</ul>"]
    if results["regressions"]:
        body += ["<h2>Regressions against the baseline</h2>", "<ul>"] + [
            f"<li>{esc(r['message'])}</li>" for r in results["regressions"]] + ["</ul>"]
    plots = results["plots"]
    body.append("<h2>Plots</h2>")
    if plots["status"] == "written":
        for key in sorted(plots["files"]):
            body += [f"<h3>{esc(key)}</h3>"] + [f'<img src="{esc(p)}" alt="{esc(key)}">' for p in plots["files"][key]]
    else:
        body.append(f"<p>Plots {esc(plots['status'])}: {esc(plots['reason'])}.</p>")
    style = "table{border-collapse:collapse}td,th{border:1px solid #999;padding:2px 6px}img{max-width:100%}"
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{esc(title)}</title><style>{style}</style>"
            f"</head><body>\n" + "\n".join(body) + "\n</body></html>\n")


FORMATS = {"terminal": terminal, "md": compliance_md, "csv": results_csv, "html": results_html}
# the files a run writes next to results.json
REPORT_FILES = {"compliance.md": compliance_md, "results.csv": results_csv, "results.html": results_html}
