"""The rendered compliance table: snapshots of compliance.md and results.csv from a fixed results record, and the
``ipu-conformance report`` command that renders it again."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from conformance.cli import main as cli_main
from conformance.report import record as results_record
from conformance.report import render

SNAPSHOTS = Path(__file__).parent / "snapshots"
SAMPLE = SNAPSHOTS / "report_sample_results.json"
# UPDATE_SNAPSHOTS=1 pytest tests/test_report_render.py rewrites the expected files after an intended format change
UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"


@pytest.fixture
def sample() -> dict:
    return results_record.load(SAMPLE)


def check_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"{path} missing; create it with UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(), f"rendering differs from {path}; if intended, rerun with UPDATE_SNAPSHOTS=1 and review"


def test_compliance_md_snapshot(sample):
    check_snapshot("report_compliance.md", render.compliance_md(sample))


def test_results_csv_snapshot(sample):
    check_snapshot("report_results.csv", render.results_csv(sample))


def test_csv_has_mlperf_columns_in_checker_order(sample):
    rows = list(csv.DictReader(io.StringIO(render.results_csv(sample))))
    mlperf_order = ["SystemName", "Platform", "Model", "Scenario", "Result", "Accuracy", "number_of_nodes",
                    "host_processor_model_name", "host_processor_core_count", "accelerator_model_name",
                    "accelerators_per_node", "framework", "operating_system", "notes", "compliance", "errors",
                    "version", "Units", "weight_data_types"]
    header = list(rows[0])
    assert header[: len(mlperf_order)] == mlperf_order
    for extra in ("accuracy_verdict", "validity", "input_data_types", "weight_data_types"):
        assert extra in header
    offline = next(r for r in rows if r["Model"] == "resnet50" and r["Scenario"] == "Offline")
    assert (offline["Result"], offline["Units"], offline["validity"]) == ("5123.4", "Samples/s", "VALID")
    assert offline["accuracy_verdict"] == "XFAIL"  # the known failure of resnet50 fp8 accuracy
    assert "TEST01" in offline["compliance"] and "TEST04" in offline["compliance"]
    single = next(r for r in rows if r["Scenario"] == "SingleStream")
    assert (single["Result"], single["Units"], single["performance_verdict"]) == ("1.52", "Latency (ms)", "FAIL")


def test_every_record_is_a_row_of_the_tables(sample):
    text = render.terminal(sample)
    html = render.results_html(sample)
    for record in sample["records"]:
        assert record["check"] in text and record["check"] in html
    assert text.splitlines()[0].startswith("conformance FAIL")
    assert "REGRESSION performance/resnet50/fp8/Offline/samples_per_s" in text


def test_report_command_renders_each_format(sample, tmp_path, capsys):
    assert cli_main(["report", str(SAMPLE)]) == 1  # the sample's verdict is FAIL
    assert "conformance FAIL" in capsys.readouterr().out
    for fmt, name in (("md", "report_compliance.md"), ("csv", "report_results.csv")):
        out = tmp_path / f"table.{fmt}"
        assert cli_main(["report", str(SAMPLE), "--format", fmt, "--out", str(out)]) == 1
        assert out.read_text() == (SNAPSHOTS / name).read_text()
    out = tmp_path / "table.html"
    cli_main(["report", str(SAMPLE), "--format", "html", "--out", str(out)])
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_report_command_rejects_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert cli_main(["report", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something-else"}))
    assert cli_main(["report", str(other)]) == 2
    assert "not an ipu-conformance results file" in capsys.readouterr().err


def test_plots_skipped_is_said(sample):
    sample["plots"] = {"status": "skipped", "reason": "matplotlib is not installed", "files": {}}
    assert "Plots skipped: matplotlib is not installed." in render.compliance_md(sample)
