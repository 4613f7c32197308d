"""Renders a results record (``results.json``) as the compliance table: terminal, ``compliance.md``, ``results.csv``, html.

Every function takes the results dict (and the terminal its width, the page the directory its plots are read from to be
embedded), so ``ipu-conformance report`` renders exactly what the run rendered. ``compliance.md`` and ``results.html``
are two renderings of one description of their sections (:func:`sections`).

One module per thing rendered: ``verdicts`` (a check's verdict, a figure), ``width`` (text that fits a width),
``summary`` (what every rendering says of a run), ``verdict_matrix``, ``mlperf`` (the MLPerf table, ``results.csv``),
``console`` (the terminal), ``document`` (the sections of ``compliance.md`` and ``results.html``), ``markdown``,
``html_page``. This package names what the rest of the suite uses.
"""

from __future__ import annotations

from conformance.report.render.console import terminal
from conformance.report.render.document import MD_CELL, MD_WIDTH, Section, sections, title
from conformance.report.render.html_page import results_html
from conformance.report.render.markdown import compliance_md, summary_lines
from conformance.report.render.mlperf import (
    CSV_COLUMNS, MLPERF_COLUMNS, SCENARIO_UNITS, _server_figures, compliance_text, mlperf_rows, results_csv,
)
from conformance.report.render.summary import (
    TABLE_HEADERS, TIMING_HEADER, _summary_pairs, check_counts, check_headers, check_rows, check_verdict_text,
    establishing, failed_tests, known_failure_groups, outcome_counts, selection_text, skipped_tests, timing_label,
    timing_summary, verdict_line, verdict_text,
)
from conformance.report.render.verdict_matrix import matrix, matrix_note
from conformance.report.render.verdicts import (
    HOST_BOUND_NOTE, NOT_ESTABLISHED, NOT_ESTABLISHED_NOTE, VERDICT_ORDER, fmt, not_established_note, verdict,
)
from conformance.report.render.width import (
    CHECKS_DETAIL_COLUMNS, TERMINAL_FALLBACK, fit_table, simple_table, terminal_width, wrap,
)

FORMATS = {"terminal": terminal, "md": compliance_md, "csv": results_csv, "html": results_html}
# the files a run writes next to results.json
HTML_FILE = "results.html"
REPORT_FILES = {"compliance.md": compliance_md, "results.csv": results_csv, HTML_FILE: results_html}
