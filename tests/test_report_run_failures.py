"""Failures of the run as a whole are failed test cases: a regression against ``--baseline`` that no test's own failure
names (a known failure's other figures, a test failing on another gate, a figure recorded after the test's call) and a
report that cannot be written show in pytest's summary and in ``--junitxml`` as well as in the exit status, serially and
under pytest-xdist."""

from __future__ import annotations

import json
from xml.etree import ElementTree

import pytest

CONFTEST = """
from conformance.conftest import record_check, settings  # noqa: F401  (the real fixtures)
"""

# Figures come from values.json; the accuracy tests gate snr_db and cosine, and test_latency records its figure in a
# fixture's teardown, after the test's call.
SUITE = """
import json, os, pathlib, shutil
import pytest

VALUES = json.loads(pathlib.Path(__file__).with_name("values.json").read_text())
CASES = [("bert-base", "fp16"), ("resnet50", "fp8")]


@pytest.mark.parametrize("model, precision", CASES, ids=[f"{m}-{p}" for m, p in CASES])
def test_accuracy(model, precision, record_check):
    key = f"{model}-{precision}"
    snr = record_check(kind="accuracy", model=model, precision=precision, check="snr_db", value=VALUES["snr"][key],
                       target=20.0, op=">=", units="dB")
    cosine = record_check(kind="accuracy", model=model, precision=precision, check="cosine",
                          value=VALUES["cosine"][key], target=0.9, op=">=")
    assert snr.passed and cosine.passed, f"{model} {precision}: snr {snr.value}, cosine {cosine.value}"


@pytest.fixture
def latency_after_call(record_check):
    yield
    record_check(kind="performance", model="resnet50", precision="fp8", scenario="SingleStream",
                 check="p90_latency_ms", value=VALUES["latency_ms"], target=50.0, op="<=", units="ms",
                 details={"timing": "simulated", "clock": "virtual"})


def test_latency(latency_after_call):
    pass


def test_other(settings):
    if os.environ.get("BREAK_REPORT_DIR"):  # the place the report is written becomes unusable
        staging = pathlib.Path(settings.report_dir)
        shutil.rmtree(staging)
        staging.write_text("not a directory any more")
"""

VALUES = {"snr": {"bert-base-fp16": 45.0, "resnet50-fp8": 30.0},
          "cosine": {"bert-base-fp16": 0.999, "resnet50-fp8": 0.99},
          "latency_ms": 10.0}


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.delenv("BREAK_REPORT_DIR", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeini("[pytest]\nfilterwarnings = ignore::pytest.PytestAssertRewriteWarning\n")
    set_values(pytester)
    return pytester


def set_values(pytester, **changes):
    values = json.loads(json.dumps(VALUES))
    for group, entries in changes.items():
        if isinstance(entries, dict):
            values[group].update(entries)
        else:
            values[group] = entries
    pytester.path.joinpath("values.json").write_text(json.dumps(values))


def junit_cases(path) -> dict[str, ElementTree.Element]:
    return {f"{case.get('classname')}::{case.get('name')}": case for case in ElementTree.parse(path).iter("testcase")}


def summary_lines(result) -> list[str]:
    """The FAILED lines of pytest's short test summary."""
    text = result.stdout.str()
    assert "short test summary info" in text, text
    return [line for line in text.split("short test summary info")[-1].splitlines() if line.startswith("FAILED ")]


def xdist_args(workers):
    if workers is None:
        return ["-p", "no:randomly"]
    pytest.importorskip("xdist")
    return ["-p", "xdist", "-p", "no:randomly", "-n", workers]


@pytest.mark.parametrize("workers", [None, "2"], ids=["serial", "xdist"])
def test_regressions_no_test_names_are_failed_cases(suite, workers):
    """A known failure whose other figure regressed (XFAIL), a test failing on its snr_db gate whose cosine regressed,
    and a figure recorded in a fixture's teardown that regressed: each is a failed case ``regression of <test>`` naming
    the regressed record, in the summary and in JUnit XML; the tests themselves keep their own outcomes."""
    args = xdist_args(workers)
    suite.path.joinpath("xfails.txt").write_text("[temporarily-failing]\n"
                                                 "test_accuracy[resnet50-fp8]  snr_db  SNR short after the change\n")
    first = suite.runpytest_subprocess(*args, "--report-dir", "first")
    assert first.ret == 0, first.stdout.str()
    baseline = json.loads((suite.path / "first" / "results.json").read_text())
    assert baseline["verdict"] == "PASS" and baseline["regressions"] == []

    # resnet50: snr_db below its gate (waived: XFAIL) and cosine lower, still above its gate: a regression of an
    # expected failure. bert-base: snr_db below its gate (FAIL on the gate) and cosine lower. The teardown latency rose.
    set_values(suite, snr={"resnet50-fp8": 10.0, "bert-base-fp16": 15.0},
               cosine={"resnet50-fp8": 0.95, "bert-base-fp16": 0.95}, latency_ms=20.0)
    junit = suite.path / "junit.xml"
    worse = suite.runpytest_subprocess(*args, "--report-dir", "worse", "--xfail-file", "xfails.txt",
                                       "--baseline", "first/results.json", "--junitxml", str(junit))
    assert worse.ret == 1
    worse.assert_outcomes(passed=2, failed=4, xfailed=1)  # test_latency and test_other pass; 1 gate failure + 3 cases

    failed = sorted(line.split(" - ")[0] for line in summary_lines(worse))
    assert failed == ["FAILED test_suite.py::regression of test_accuracy[bert-base-fp16]",
                      "FAILED test_suite.py::regression of test_accuracy[resnet50-fp8]",
                      "FAILED test_suite.py::regression of test_latency",
                      "FAILED test_suite.py::test_accuracy[bert-base-fp16]"]
    assert all(" - regr" in line for line in summary_lines(worse) if "regression of" in line)  # trimmed to the width
    worse.stdout.fnmatch_lines(["*_ regression of test_accuracy[[]resnet50-fp8[]] _*",  # the failures section, whole
                                "regression against the baseline first/results.json: *resnet50/fp8/-/cosine*"])

    cases = junit_cases(junit)
    root = ElementTree.parse(junit).getroot()
    suite_element = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite_element.get("failures") == "4" and suite_element.get("tests") == "7"  # 4 tests + 3 cases
    regression_cases = {name: case for name, case in cases.items() if "regression of" in name}
    assert sorted(regression_cases) == ["test_suite::regression of test_accuracy[bert-base-fp16]",
                                        "test_suite::regression of test_accuracy[resnet50-fp8]",
                                        "test_suite::regression of test_latency"]
    messages = {name: case.find("failure").get("message") for name, case in regression_cases.items()}
    resnet = messages["test_suite::regression of test_accuracy[resnet50-fp8]"]
    assert resnet.startswith("regression against the baseline first/results.json: ")
    assert "accuracy/resnet50/fp8/-/cosine: dropped from 0.99 to 0.95" in resnet
    assert "snr_db" in resnet, "the waived snr_db fell from 30 to 10 dB: a regression too"
    assert resnet.endswith("(the test itself: xfailed)")
    bert = messages["test_suite::regression of test_accuracy[bert-base-fp16]"]
    assert "accuracy/bert-base/fp16/-/cosine: dropped from 0.999 to 0.95" in bert
    assert bert.endswith("(the test itself: failed)")
    latency = messages["test_suite::regression of test_latency"]
    assert "performance/resnet50/fp8/SingleStream/p90_latency_ms: rose from 10 to 20 ms" in latency
    assert latency.endswith("(the test itself: passed)")
    # the tests keep their own verdicts: the known failure is skipped (xfail), the gate failure names its gate
    assert cases["test_suite::test_accuracy[resnet50-fp8]"].find("skipped") is not None
    assert cases["test_suite::test_latency"].find("failure") is None
    gate = cases["test_suite::test_accuracy[bert-base-fp16]"].find("failure").get("message")
    assert "snr 15.0" in gate and "regression" not in gate

    report = json.loads((suite.path / "worse" / "results.json").read_text())
    assert report["verdict"] == "FAIL" and report["exit_status"] == 1
    assert sorted(t["id"].split("::")[-1] for t in report["tests"]) == [
        "test_accuracy[bert-base-fp16]", "test_accuracy[resnet50-fp8]", "test_latency", "test_other"]
    assert sorted(r["id"] for r in report["regressions"]) == [
        "accuracy/bert-base/fp16/-/cosine", "accuracy/bert-base/fp16/-/snr_db", "accuracy/resnet50/fp8/-/cosine",
        "accuracy/resnet50/fp8/-/snr_db", "performance/resnet50/fp8/SingleStream/p90_latency_ms"]


def test_regression_a_test_names_is_not_repeated(suite):
    """A passed test whose figure regressed fails itself, naming the regression: no second case stands for it."""
    assert suite.runpytest("--report-dir", "first").ret == 0
    set_values(suite, cosine={"resnet50-fp8": 0.95})
    junit = suite.path / "junit.xml"
    worse = suite.runpytest("--baseline", "first/results.json", "--junitxml", str(junit))
    assert worse.ret == 1
    worse.assert_outcomes(passed=3, failed=1)
    assert [line.split(" - ")[0] for line in summary_lines(worse)] == ["FAILED test_suite.py::test_accuracy[resnet50-fp8]"]
    failures = {name: case.find("failure").get("message") for name, case in junit_cases(junit).items()
                if case.find("failure") is not None}
    assert list(failures) == ["test_suite::test_accuracy[resnet50-fp8]"]
    assert "accuracy/resnet50/fp8/-/cosine: dropped from 0.99 to 0.95" in failures["test_suite::test_accuracy[resnet50-fp8]"]


def test_unchanged_run_has_no_extra_case(suite):
    assert suite.runpytest("--report-dir", "first").ret == 0
    junit = suite.path / "junit.xml"
    same = suite.runpytest("--baseline", "first/results.json", "--junitxml", str(junit))
    assert same.ret == 0
    same.assert_outcomes(passed=4)
    assert sorted(junit_cases(junit)) == ["test_suite::test_accuracy[bert-base-fp16]",
                                          "test_suite::test_accuracy[resnet50-fp8]", "test_suite::test_latency",
                                          "test_suite::test_other"]


def test_report_that_cannot_be_written_is_a_failed_case(suite, monkeypatch):
    """Exit 3, and a failed case ``conformance report`` naming the path and the error in the summary and JUnit XML."""
    monkeypatch.setenv("BREAK_REPORT_DIR", "1")
    junit = suite.path / "junit.xml"
    result = suite.runpytest("--report-dir", "out", "--junitxml", str(junit))
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.assert_outcomes(passed=4, failed=1)
    [line] = summary_lines(result)
    assert line.startswith("FAILED conformance report - the report could not be written to out/: ")
    [case] = [case for name, case in junit_cases(junit).items() if case.find("failure") is not None]
    assert case.get("name") == "conformance report"
    message = case.find("failure").get("message")
    assert message.startswith("the report could not be written to out/: ") and "File exists (errno 17)" in message
