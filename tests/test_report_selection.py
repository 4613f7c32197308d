"""A verdict says what it covered: ``-k`` and ``-m`` and the tests they left out are in ``settings.selection``, the
summary and every rendering; a PASS of a narrowed run reads ``PASS (partial: N tests deselected)``; an interrupted
run's report counts the tests it did not run and names what it judged as a finished one does."""

from __future__ import annotations

import copy
import json

import pytest

from conformance.report import render, verify
from tests.sample_results import sample_results
from tests.test_report_atomic import CONFTEST, SUITE


@pytest.fixture
def suite(pytester, monkeypatch):
    for name in ("KILL_DURING_REPORT", "KILL_AFTER_SWAP", "WAIT_FOR_GATE", "BREAK_REPORT_DIR", "RUN_NAME", "SNR",
                 "TERM_AT"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeini("[pytest]\nfilterwarnings = ignore::pytest.PytestAssertRewriteWarning\n")
    return pytester


def test_a_narrowed_run_records_its_selection_and_reads_partial(suite):
    result = suite.runpytest("--report-dir", "out", "-k", "accuracy")
    assert result.ret == 0
    results = json.loads((suite.path / "out" / "results.json").read_text())
    assert results["settings"]["selection"] == {"keyword": "accuracy", "markers": None, "selected": 1,
                                                "deselected": 1, "skipped": 0}
    assert results["verdict"] == "PASS" and verify.problems(results) == []
    result.stdout.fnmatch_lines(["verdict: PASS (partial: 1 test deselected)", "selection: -k 'accuracy', 1 of 2 "
                                 "tests deselected", "conformance PASS (partial: 1 test deselected): *"])
    compliance = (suite.path / "out" / "compliance.md").read_text()
    assert "PASS (partial: 1 test deselected)" in compliance and "-k 'accuracy'" in compliance
    assert "PASS (partial: 1 test deselected)" in (suite.path / "out" / "results.html").read_text()

    whole = suite.runpytest("--report-dir", "all")
    assert whole.ret == 0
    results = json.loads((suite.path / "all" / "results.json").read_text())
    assert results["settings"]["selection"] == {"keyword": None, "markers": None, "selected": 2, "deselected": 0,
                                                "skipped": 0}
    whole.stdout.fnmatch_lines(["verdict: PASS", "conformance PASS: *"])
    assert "(partial" not in whole.stdout.str() and "selection:" not in whole.stdout.str()


def test_an_interrupted_report_counts_the_tests_not_run(suite, monkeypatch):
    monkeypatch.setenv("TERM_AT", "other")
    result = suite.runpytest_subprocess("--report-dir", "out", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    results = json.loads((suite.path / "out" / "results.json").read_text())
    assert results["settings"]["selection"]["selected"] == 2 and len(results["tests"]) == 1
    result.stdout.fnmatch_lines(["verdict: FAIL (interrupted: 1 of 2 selected tests not run)"])
    assert "interrupted: 1 of 2 selected tests not run" in (suite.path / "out" / "compliance.md").read_text()


def test_an_interrupted_run_given_data_names_it_as_judged():
    """With --dataset or --checkpoint, a run interrupted before it judged the model still says whose model and data
    it was judging, never the suite's seeded weights and synthetic samples."""
    results = sample_results()
    results.update(interrupted=True, records=[], tests=[])
    results["settings"] = {**results["settings"], "datasets": {"resnet50": "/data/imagenet"}, "checkpoints": {}}
    judged = dict(render._summary_pairs(results))["judged"]
    assert judged == "your checkpoint or data for resnet50; the others: seeded weights"
    plain = copy.deepcopy(results)
    plain["settings"]["datasets"] = {}
    assert dict(render._summary_pairs(plain))["judged"] == "the suite's seeded weights and synthetic samples"


def test_a_selection_that_does_not_match_the_tests_is_refused():
    results = sample_results()
    results["settings"]["selection"] = {"keyword": None, "markers": None, "selected": None, "deselected": 0,
                                        "skipped": 99}
    assert any("settings.selection.skipped is 99" in p for p in verify.problems(results))
