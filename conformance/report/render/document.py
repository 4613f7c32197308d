"""``compliance.md`` and ``results.html``: one description of their sections, rendered twice."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.report.judged import judged_rows
from conformance.report.judged import HEADERS as JUDGED_HEADERS
from conformance.report.render.verdict_matrix import matrix, matrix_note
from conformance.report.render.mlperf import CSV_COLUMNS, mlperf_rows
from conformance.report.render.summary import (
    TIMING_HEADER, _has_timing, _short_id, _summary_pairs, check_counts, check_headers, check_rows, establishing,
    failed_tests, known_failure_groups, skipped_tests, verdict_text,
)
from conformance.report.render.verdicts import not_established_note, verdict


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
            + (" " + not_established_note(results) if check_counts(results)["PASS*"] else ""))


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
