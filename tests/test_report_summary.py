"""What people paste and trust: a failure's whole reason in every report format, JSON records in JUnit XML, and a
summary that fits one screen for a default-profile-sized run."""

from __future__ import annotations

import copy
import json
from xml.etree import ElementTree

from conformance.report import record as results_record
from conformance.report import render
from tests.sample_results import sample_results


CONFTEST = """
from conformance.conftest import record_check  # noqa: F401  (the real fixture)
"""

FAILING = '''
import pytest

def test_accuracy(record_check):
    rec = record_check(kind="accuracy", model="resnet50", precision="fp8", check="top1_agreement", value=0.25,
                       target=0.99, op=">=", details={"first_jump": "resnet.encoder.stages.0.layers.0"})
    lines = ["resnet50 at fp8 on ipu (4 samples, profile smoke) vs FP32:",
             "  top1_agreement 0.25 < 0.99 (gate [ipu.resnet50.fp8] top1_agreement min)",
             "  first jump: resnet.encoder.stages.0.layers.0 <conv>, SNR 40.1 -> 12.3 dB",
             "  reproduce: pytest conformance/test_accuracy.py --hardware ipu --model resnet50 --precision fp8"]
    pytest.fail("\\n".join(lines), pytrace=False)
'''
LINES = ["resnet50 at fp8 on ipu (4 samples, profile smoke) vs FP32:",
         "  top1_agreement 0.25 < 0.99 (gate [ipu.resnet50.fp8] top1_agreement min)",
         "  first jump: resnet.encoder.stages.0.layers.0 <conv>, SNR 40.1 -> 12.3 dB",
         "  reproduce: pytest conformance/test_accuracy.py --hardware ipu --model resnet50 --precision fp8"]


def test_whole_failure_message_reaches_every_format_and_junit_has_the_record(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=FAILING)
    pytester.makeini("[pytest]\nfilterwarnings = ignore::pytest.PytestAssertRewriteWarning\n")
    out = pytester.path / "out"
    result = pytester.runpytest("--report-dir", str(out), "--junitxml", str(pytester.path / "junit.xml"))
    assert result.ret == 1
    results = results_record.load(out / "results.json")
    [test] = results["tests"]
    assert test["message"] == "\n".join(LINES)
    md = (out / "compliance.md").read_text()
    assert "\n".join(LINES) in md  # in a fenced block, line for line
    page = (out / "results.html").read_text()
    assert "\n".join(line.replace("<", "&lt;").replace(">", "&gt;") for line in LINES) in page
    terminal = result.stdout.str()
    assert all(line in terminal for line in LINES)
    assert terminal.rstrip().splitlines()[-1].startswith("=") and "conformance FAIL" in terminal
    # JUnit: the record as one line, its test's scalar details once as JSON (results.json has the rest)
    junit = ElementTree.parse(pytester.path / "junit.xml")
    [prop] = [p for p in junit.iter("property") if p.get("name") == "conformance_check"]
    assert "top1_agreement" in prop.get("value") and prop.get("value").endswith(", FAIL")
    [shared] = [p for p in junit.iter("property") if p.get("name") == "conformance_shared_details"]
    assert json.loads(shared.get("value"))["first_jump"] == "resnet.encoder.stages.0.layers.0"


def default_sized(sample: dict) -> dict:
    """The sample grown to a default-profile run: six models and MiniLM, four precisions, four scenarios, audits."""
    results = copy.deepcopy(sample)
    template = {"test_id": "t", "kind": "accuracy", "scenario": None, "check": "snr_db", "value": 30.0, "target": 20.0,
                "op": ">=", "passed": True, "units": "dB", "gating": True, "details": {}, "outcome": "passed"}
    records = []
    for model in ("albert", "bert-base", "conformer", "resnet50", "roformer", "widedeep", "minilm"):
        for precision in ("fp16", "fp16-half-partials", "fp8", "fp8-weights"):
            for check in ("snr_db", "cosine", "f1@0.99xfp32", "f1@0.999xfp32"):
                records.append({**template, "model": model, "precision": precision, "check": check,
                                "gating": "0.999" not in check})
            if model == "minilm" or precision not in ("fp16", "fp8"):
                continue
            for scenario in ("SingleStream", "MultiStream", "Server", "Offline"):
                records.append({**template, "kind": "performance", "model": model, "precision": precision,
                                "scenario": scenario, "check": "p90_latency_ms", "op": "<=", "value": 1.0,
                                "target": 2.0, "units": "ms"})
            records.append({**template, "kind": "audit", "model": model, "precision": precision,
                            "scenario": "Offline", "check": "TEST01", "value": 1.0, "target": 1.0, "units": ""})
    results["records"] = [{**r, "id": f"{r['kind']}/{r['model']}/{r['precision']}/{r['scenario'] or '-'}/{r['check']}/{i}"}
                          for i, r in enumerate(records)]
    return results


def test_summary_of_a_default_sized_report_fits_one_screen():
    results = default_sized(results_record.validate(sample_results()))
    assert len(results["records"]) > 150
    md = render.compliance_md(results)
    assert render.summary_lines(md) <= 40, "\n".join(md.splitlines()[:render.summary_lines(md)])
    summary = "\n".join(md.splitlines()[:render.summary_lines(md)])
    assert "## Verdicts" in summary and "| roformer" in summary and "| minilm" in summary
    # nothing in the product cites internal notes
    for text in (md, render.results_html(results), render.terminal(results)):
        assert "issue" not in text.lower() and "note)" not in text
