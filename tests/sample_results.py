"""The fixed sample run of the report tests (``snapshots/report_sample_results.json``), as a run of this suite.

The file records no target tables version (``settings.tables``): an edit of a target table would otherwise need the
tables' new hash copied into it. It is stamped with this suite's version where it is read, so that its records'
targets, ops and gating are still checked against the tables (a record that drifts from them is refused), while a
file that records no version is refused as one an older suite wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

from conformance.report.tables import tables_version

SAMPLE = Path(__file__).parent / "snapshots" / "report_sample_results.json"


def sample_results() -> dict:
    """The sample run, stamped with this suite's tables version."""
    data = json.loads(SAMPLE.read_text())
    data["settings"]["tables"] = tables_version()
    return data


def sample_file(directory: Path) -> Path:
    """The stamped sample run written to ``directory/results.json``, for the commands that read a file."""
    path = Path(directory) / "results.json"
    path.write_text(json.dumps(sample_results(), indent=2) + "\n")
    return path
