"""The rendered compliance table: snapshots of compliance.md and results.csv from a fixed results record, and the
``ipu-conformance report`` command that renders it again."""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import re
from pathlib import Path

import pytest

from conformance.cli import main as cli_main
from conformance.report import record as results_record
from conformance.report import render
from tests.sample_results import sample_file, sample_results

SNAPSHOTS = Path(__file__).parent / "snapshots"
# UPDATE_SNAPSHOTS=1 pytest tests/test_report_render.py rewrites the expected files after an intended format change
UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"


@pytest.fixture
def sample() -> dict:
    return results_record.validate(sample_results())


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
    assert (offline["Result"], offline["Units"], offline["validity"]) == ("11234.5", "Samples/s", "VALID")
    assert offline["accuracy_verdict"] == "XFAIL"  # the known failure of resnet50 fp8 accuracy
    assert "TEST01" in offline["compliance"] and "TEST04" in offline["compliance"]
    single = next(r for r in rows if r["Scenario"] == "SingleStream")
    assert (single["Result"], single["Units"], single["performance_verdict"]) == ("1.52", "Latency (ms)", "FAIL")


def test_every_record_is_a_row_of_the_tables(sample):
    text = render.terminal(sample)
    html = render.results_html(sample)
    for record in sample["records"]:
        assert record["check"] in text and record["check"] in html
    assert text.splitlines()[-1].startswith("conformance FAIL: "), "the verdict line comes last"
    assert "REGRESSION performance/resnet50/fp8/Offline/samples_per_second" in text


def test_report_command_renders_each_format(sample, tmp_path, capsys):
    assert cli_main(["report", str(sample_file(tmp_path))]) == 1  # the sample's verdict is FAIL
    assert "conformance FAIL" in capsys.readouterr().out
    for fmt, name in (("md", "report_compliance.md"), ("csv", "report_results.csv")):
        out = tmp_path / f"table.{fmt}"
        assert cli_main(["report", str(sample_file(tmp_path)), "--format", fmt, "--out", str(out)]) == 1
        assert out.read_text() == (SNAPSHOTS / name).read_text()
    out = tmp_path / "table.html"
    cli_main(["report", str(sample_file(tmp_path)), "--format", "html", "--out", str(out)])
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_report_command_rejects_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert cli_main(["report", str(bad)]) == 4
    assert "not valid JSON" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something-else"}))
    assert cli_main(["report", str(other)]) == 4
    assert "not an ipu-conformance results file" in capsys.readouterr().err


def test_plots_skipped_is_said(sample):
    sample["plots"] = {"status": "skipped", "reason": "matplotlib is not installed", "files": {}}
    assert "Plots skipped: matplotlib is not installed." in render.compliance_md(sample)


# ----- how the figures were obtained -----------------------------------------------------------------------------------

C600 = {"chip": "c600", "chip_description": "Graphcore C600 PCIe card", "calibration": "1a2b3c4d5e6f"}
OFFLINE_ID = "performance/resnet50/fp8/Offline/samples_per_second"


def with_timing(sample: dict, timing: str | None, timing_model: dict | None = None) -> dict:
    """The sample with every performance and audit record obtained as said (None: an older file, no keys at all)."""
    results = copy.deepcopy(sample)
    results["regressions"] = []  # their messages name the tolerance tables
    results["hardware"].pop("timing", None)
    if timing is not None:
        results["hardware"]["timing"] = timing
    for record in results["records"]:
        record["details"].pop("timing", None)
        record["details"].pop("timing_model", None)
        if timing is not None and record["kind"] in ("performance", "audit"):
            record["details"].update(timing=timing, timing_model=timing_model)
    return results


def rendered(results: dict) -> dict[str, str]:
    """Every format, the terminal's wide enough for every column (a narrower one leaves Timing out first)."""
    return {fmt: render.terminal(results, width=400) if fmt == "terminal" else renderer(results)
            for fmt, renderer in render.FORMATS.items()}


def csv_row(results: dict, scenario: str) -> dict:
    return next(r for r in csv.DictReader(io.StringIO(render.results_csv(results))) if r["Scenario"] == scenario)


def test_simulated_and_measured_figures_render_differently_in_every_format(sample):
    simulated = rendered(with_timing(sample, "simulated", C600))
    measured = rendered(with_timing(sample, "measured"))
    provenance = "simulated: C600 timing model, calibration 1a2b3c4d5e6f"
    for fmt in render.FORMATS:
        assert simulated[fmt] != measured[fmt], fmt
        assert provenance in simulated[fmt] and provenance not in measured[fmt], fmt
        assert "measured" in measured[fmt], fmt
    # the run summary says it once, with the chip's description in the documents
    assert re.search(rf"\| performance figures \| {provenance} +\|", simulated["md"])
    assert "Graphcore C600 PCIe card" in simulated["md"] and "Graphcore C600 PCIe card" in simulated["html"]
    assert f"performance figures: {provenance}" in simulated["terminal"].splitlines()
    assert "performance figures: measured" in measured["terminal"].splitlines()
    # every performance and audit row of the checks table is marked; accuracy rows are not
    def rows(text, check):  # the checks table's rows of ``check``
        return [line for line in text.splitlines() if f" {check} " in line and f" {check} PASS" not in line]

    for fmt in ("terminal", "md"):
        for check in ("samples_per_second", "p99_latency_ms_at_target_qps", "TEST01", "TEST04"):
            [sim], [meas] = rows(simulated[fmt], check), rows(measured[fmt], check)
            assert " simulated " in sim and " measured " not in sim, (fmt, sim)
            assert " measured " in meas and " simulated " not in meas, (fmt, meas)
        for line in rows(simulated[fmt], "f1@0.99xfp32") + rows(measured[fmt], "f1@0.99xfp32"):
            assert "simulated" not in line and "measured" not in line, (fmt, line)
    assert re.search(r"<th[^>]*>Timing\s*</th>", simulated["html"]) and re.search(r"<td>simulated\s*</td>", simulated["html"])
    assert re.search(r"<td>measured\s*</td>", measured["html"]) and not re.search(r"<td>simulated\s*</td>", measured["html"])
    # results.csv: MLPerf's notes column of the performance rows; accuracy-only rows have no figure to qualify
    assert csv_row(with_timing(sample, "simulated", C600), "Server")["notes"] == provenance
    assert csv_row(with_timing(sample, "measured"), "Server")["notes"] == "measured"
    assert csv_row(with_timing(sample, "simulated", C600), "")["notes"] == ""
    assert csv_row(with_timing(sample, "simulated", C600), "Offline")["notes"].startswith(provenance + "; min_duration")


def test_records_without_timing_still_render(sample):
    """Older results files and accuracy records carry no timing: no Timing column, no provenance, no error."""
    old = with_timing(sample, None)
    out = rendered(old)
    for fmt, text in out.items():
        assert "performance figures" not in text and "simulated" not in text, fmt
        for record in old["records"]:
            assert record["check"] in text or fmt == "csv"
    assert "Timing" not in out["md"] and "Timing" not in out["terminal"]
    assert list(next(csv.DictReader(io.StringIO(out["csv"])))) == list(render.CSV_COLUMNS)
    # the hardware's timing alone still says it in the summary
    old["hardware"]["timing"] = "simulated"
    assert "performance figures: simulated" in render.terminal(old)


def test_simulated_figure_without_timing_model_and_several_models(sample):
    plain = with_timing(sample, "simulated", None)
    assert "performance figures: simulated\n" in render.terminal(plain)
    # figures of two calibrations in one file (e.g. merged): each row names its own
    mixed = with_timing(sample, "simulated", C600)
    next(r for r in mixed["records"] if r["id"] == OFFLINE_ID)["details"]["timing_model"] = {**C600, "calibration": "ffffffffffff"}
    text = render.terminal(mixed, width=400)  # a terminal wide enough for every column
    assert "simulated: C600 timing model, calibration ffffffffffff; simulated: C600 timing model, calibration 1a2b3c4d5e6f" in text
    offline = next(line for line in text.splitlines() if "samples_per_second" in line)
    assert "calibration ffffffffffff" in offline


def test_an_audit_left_open_by_the_hosts_noise_says_so_after_the_matrix(sample):
    from conformance.report.render.summary import establishing

    results = copy.deepcopy(sample)
    noise = ("host-bound: the runs of one kind spread 21.4% on this host, more than the 10% the bound tells apart, "
             "and 1 of 16 pairs of runs meet it")
    results["records"].append({"kind": "audit", "model": "conformer", "precision": "fp32", "scenario": "Offline",
                               "check": "TEST01", "passed": True, "established": False, "gating": True,
                               "details": {"host_noise": noise}})
    assert f"conformer fp32 Offline TEST01: {noise}; a quieter host would settle it" in establishing(results)
    results["records"][-1]["established"] = True  # a passed audit, established: nothing to say
    assert not any("TEST01" in line for line in establishing(results))


def test_the_pass_star_legend_says_what_leaves_an_audit_open_where_one_is(sample):
    results = copy.deepcopy(sample)
    gated = next(r for r in results["records"] if r.get("gating", True) and r["kind"] != "audit")
    gated.update(passed=True, established=False)  # a PASS* that is not an audit
    assert render.not_established_note(results) == render.NOT_ESTABLISHED_NOTE
    assert "An audit's PASS*" not in render.terminal(results, width=200)
    audit = copy.deepcopy(gated)
    audit.update(kind="audit", check="TEST01", scenario="Offline", id="audit/x/fp32/Offline/TEST01")
    results["records"].append(audit)
    assert render.not_established_note(results).startswith(render.NOT_ESTABLISHED_NOTE + " An audit's PASS*")
    assert "An audit's PASS*: its timing comparison is not settled" in render.matrix_note(results)
