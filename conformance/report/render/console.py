"""The run's report on the terminal."""

from __future__ import annotations

from conformance.report.render.verdict_matrix import matrix
from conformance.report.render.summary import (
    _short_id, _summary_pairs, check_counts, check_headers, check_rows, establishing, failed_tests, skipped_tests,
    verdict_line,
)
from conformance.report.render.verdicts import not_established_note
from conformance.report.render.width import CHECKS_DETAIL_COLUMNS, fit_table, terminal_width, wrap


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
            lines += wrap(not_established_note(results), width)
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
