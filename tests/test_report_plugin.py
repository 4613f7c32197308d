"""The report end to end on a small fake conformance suite run with pytester: the written report, baseline failures,
bad input refused before any test runs, xfail strictness and staleness, shards, and pytest-xdist."""

from __future__ import annotations

import json
from xml.etree import ElementTree

import pytest

from conformance.cli import main as cli_main

CONFTEST = """
from conformance.conftest import record_check  # noqa: F401  (the real fixture)
"""

# Figures come from values.json so that a test can inject a regression; every test writes ran/<id> when its body runs.
SUITE = """
import json, pathlib
import pytest

VALUES = json.loads(pathlib.Path(__file__).with_name("values.json").read_text())
CASES = [("bert-base", "fp16"), ("bert-base", "fp8"), ("resnet50", "fp8")]


def mark_ran(request):
    ran = pathlib.Path(__file__).with_name("ran")
    ran.mkdir(exist_ok=True)
    (ran / request.node.name).touch()


@pytest.mark.parametrize("model, precision", CASES, ids=[f"{m}-{p}" for m, p in CASES])
def test_accuracy(model, precision, record_check, request):
    mark_ran(request)
    snr = VALUES["snr"][f"{model}-{precision}"]
    rec = record_check(kind="accuracy", model=model, precision=precision, check="snr_db", value=snr, target=20.0,
                       op=">=", units="dB")
    record_check(kind="accuracy", model=model, precision=precision, check="snr_db_info", value=snr, target=40.0,
                 op=">=", units="dB", gating=False)
    assert rec.passed, f"{model} {precision}: snr {snr} < 20"


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_performance(scenario, record_check, request):
    mark_ran(request)
    qps = VALUES["qps"][scenario]
    details = {"result_valid": True, **VALUES["details"].get(scenario, {})}
    rec = record_check(kind="performance", model="resnet50", precision="fp8", scenario=scenario, check="samples_per_s",
                       value=qps, target=100.0, op=">=", units="samples/s", details=details)
    assert rec.passed
"""

VALUES = {"snr": {"bert-base-fp16": 45.0, "bert-base-fp8": 30.0, "resnet50-fp8": 25.0},
          "qps": {"Offline": 500.0, "Server": 400.0},
          "details": {}}  # scenario -> extra details of its record
SIMULATED = {"timing": "simulated", "clock": "virtual",
             "timing_model": {"chip": "c600", "chip_description": "Graphcore C600 PCIe card", "calibration": "1a2b3c4d5e6f"}}
MEASURED = {"timing": "measured", "clock": "real", "timing_model": None}


@pytest.fixture
def suite(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    # in-process runs find the plugin's packages imported already (pytest marks an entry-point plugin's for rewriting)
    pytester.makeini("[pytest]\nfilterwarnings = ignore::pytest.PytestAssertRewriteWarning\n")
    pytester.path.joinpath("values.json").write_text(json.dumps(VALUES))
    return pytester


def set_values(pytester, **changes):
    values = json.loads(json.dumps(VALUES))
    for group, entries in changes.items():
        values[group].update(entries)
    pytester.path.joinpath("values.json").write_text(json.dumps(values))


def load(path):
    return json.loads(path.read_text())


def comparable(results):
    """What must agree between equivalent runs: tests without their durations, and the records."""
    return ([{k: v for k, v in t.items() if k != "duration_s"} for t in results["tests"]], results["records"])


def test_report_written_and_regression_fails_the_run(suite):
    first = suite.path / "first"
    result = suite.runpytest("--report-dir", str(first))
    result.assert_outcomes(passed=5)
    assert result.ret == 0
    # a progress line per test, then the summary and the matrix, the verdict line last of the section
    result.stdout.fnmatch_lines(["[[]conformance[]] resnet50 fp8 Offline: * s, PASS", "*= conformance =*",
                                 "resnet50 *PASS fp8 400 samples/s*PASS fp8 500 samples/s",
                                 "report: *", "conformance PASS: hardware=cpu*", "*= 5 passed in *"])
    assert "samples_per_s" not in result.stdout.str(), "the detailed checks table needs -v"
    verbose = suite.runpytest("-v")
    verbose.stdout.fnmatch_lines(["*resnet50*fp8*Offline*samples_per_s*500*PASS*", "conformance PASS*"])
    quiet = suite.runpytest("-q")
    assert "[conformance]" not in quiet.stdout.str()
    for name in ("results.json", "compliance.md", "results.csv", "results.html"):
        assert (first / name).is_file(), name
    results = load(first / "results.json")
    assert results["verdict"] == "PASS" and len(results["records"]) == 8 and len(results["tests"]) == 5

    same = suite.runpytest("--report-dir", str(suite.path / "same"), "--baseline", str(first / "results.json"))
    assert same.ret == 0
    assert load(suite.path / "same" / "results.json")["regressions"] == []

    # still above the targets, so only the baseline can fail the run; the drop exceeds even cpu's loose timing tolerance
    set_values(suite, qps={"Offline": 200.0}, snr={"bert-base-fp8": 25.0})
    worse = suite.runpytest("--report-dir", str(suite.path / "worse"), "--baseline", str(first / "results.json"))
    worse.assert_outcomes(passed=3, failed=2)  # the two tests whose figures regressed
    assert worse.ret == 1, "a regression against the baseline fails the run"
    worse.stdout.fnmatch_lines([
        "REGRESSION accuracy/bert-base/fp8/-/snr_db: dropped from 30 to 25 dB*",
        "REGRESSION performance/resnet50/fp8/Offline/samples_per_s: dropped from 500 to 200*",
    ])
    report = load(suite.path / "worse" / "results.json")
    assert report["verdict"] == "FAIL" and report["exit_status"] == 1 and len(report["regressions"]) == 2
    assert "Regressions against the baseline" in (suite.path / "worse" / "compliance.md").read_text()
    failed = {t["id"].split("::")[-1]: t["message"] for t in report["tests"] if t["outcome"] == "failed"}
    assert set(failed) == {"test_accuracy[bert-base-fp8]", "test_performance[Offline]"}
    assert failed["test_accuracy[bert-base-fp8]"].startswith("regression against the baseline ")
    assert "accuracy/bert-base/fp8/-/snr_db: dropped from 30 to 25 dB" in failed["test_accuracy[bert-base-fp8]"]


@pytest.mark.parametrize("workers", [None, "2"], ids=["serial", "xdist"])
def test_regressed_test_fails_in_summary_and_junit_xml(suite, workers):
    """A simulated figure 0.1% worse fails its test; a measured one 0.1% worse and an unchanged one pass. The failure
    is the test's own: in pytest's summary, in JUnit XML and in results.json, serially and under pytest-xdist."""
    pytest.importorskip("xdist")
    args = ["-p", "xdist", "-p", "no:randomly"] + (["-n", workers] if workers else [])
    set_values(suite, details={"Server": SIMULATED, "Offline": MEASURED})
    assert suite.runpytest_subprocess(*args, "--report-dir", "first").ret == 0

    set_values(suite, details={"Server": SIMULATED, "Offline": MEASURED},
               qps={"Server": 399.6, "Offline": 499.5}, snr={"resnet50-fp8": 24.0})
    junit = suite.path / "junit.xml"
    worse = suite.runpytest_subprocess(*args, "--report-dir", "worse", "--baseline", "first/results.json",
                                       "--junitxml", str(junit))
    assert worse.ret == 1
    worse.assert_outcomes(passed=3, failed=2)
    summary = worse.stdout.str().split("short test summary info")[-1].splitlines()
    failed = sorted(line.split(" - ")[0] for line in summary if line.startswith("FAILED "))
    assert failed == ["FAILED test_suite.py::test_accuracy[resnet50-fp8]", "FAILED test_suite.py::test_performance[Server]"]
    assert all(" - regression" in line for line in summary if line.startswith("FAILED "))  # trimmed to the width
    if workers:
        worse.stdout.fnmatch_lines(["*2 workers*"])

    cases = {case.get("name"): case for case in ElementTree.parse(junit).iter("testcase")}
    assert len(cases) == 5
    failures = {name: case.find("failure") for name, case in cases.items() if case.find("failure") is not None}
    assert set(failures) == {"test_performance[Server]", "test_accuracy[resnet50-fp8]"}
    message = failures["test_performance[Server]"].get("message")
    assert message.startswith("regression against the baseline first/results.json: ")
    assert ("performance/resnet50/fp8/Server/samples_per_s: dropped from 400 to 399.6 samples/s (0.1% worse; "
            "allowed 4e-07 samples/s: rel 1e-09, abs 0 ([performance], [performance.hardware.cpu], "
            "[performance.timing.simulated])") in message  # the fake suite runs on cpu: the timing entry wins
    assert "accuracy/resnet50/fp8/-/snr_db: dropped from 25 to 24 dB" in failures["test_accuracy[resnet50-fp8]"].get("message")

    report = load(suite.path / "worse" / "results.json")
    outcomes = {t["id"].split("::")[-1]: t["outcome"] for t in report["tests"]}
    assert outcomes == {"test_accuracy[bert-base-fp16]": "passed", "test_accuracy[bert-base-fp8]": "passed",
                        "test_accuracy[resnet50-fp8]": "failed", "test_performance[Offline]": "passed",
                        "test_performance[Server]": "failed"}
    assert sorted(r["id"] for r in report["regressions"]) == ["accuracy/resnet50/fp8/-/snr_db",
                                                               "performance/resnet50/fp8/Server/samples_per_s"]
    compliance = (suite.path / "worse" / "compliance.md").read_text()
    assert "| performance figures | measured; simulated: C600 timing model, calibration 1a2b3c4d5e6f |" in \
        " ".join(compliance.split())


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda p: ["--baseline", str(p / "missing.json")], "--baseline *missing.json: no such file*"),
        (lambda p: ["--baseline", str(p / "values.json")], "--baseline *values.json: not an ipu-conformance results file*"),
        (lambda p: ["--report-dir", str(p / "values.json" / "out")], "--report-dir *values.json/out: cannot write there*"),
        (lambda p: ["--shard", "3/2"], "*--shard '3/2': expected 1 <= I <= N*"),
    ],
)
def test_bad_input_is_refused_before_any_test_runs(suite, make_args, message):
    result = suite.runpytest(*make_args(suite.path))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}"])
    assert not (suite.path / "ran").exists()


def test_baseline_of_other_hardware_or_profile_is_refused(suite):
    assert suite.runpytest("--report-dir", "base", "-k", "Offline").ret == 0
    baseline = load(suite.path / "base" / "results.json")
    baseline["settings"]["hardware"] = "ipu"
    suite.path.joinpath("ipu.json").write_text(json.dumps(baseline))
    result = suite.runpytest("--baseline", "ipu.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*recorded on hardware 'ipu', this run is on 'cpu'*"])
    result = suite.runpytest("--baseline", "base/results.json", "--profile", "smoke")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*recorded with profile 'default', this run uses 'smoke'*"])


XFAILS = """
[temporarily-failing]
test_accuracy[resnet50-fp8]  snr_db  fixed since, entry not yet removed
test_accuracy[bert-base-fp32]  snr_db  no such precision any more
[unsupported]
test_performance[Server]  no batching policy yet
"""


def test_known_failure_waives_only_the_checks_it_names(suite):
    """An entry naming snr_db waives a failing snr_db gate; the same test failing for another reason is a failure."""
    suite.path.joinpath("xfails.txt").write_text("[temporarily-failing]\n"
                                                 "test_accuracy[resnet50-fp8]  snr_db  SNR short after the change\n")
    set_values(suite, snr={"resnet50-fp8": 10.0})
    known = suite.runpytest("--xfail-file", "xfails.txt", "-k", "accuracy")
    known.assert_outcomes(passed=2, xfailed=1)
    assert known.ret == 0

    suite.path.joinpath("xfails.txt").write_text("[temporarily-failing]\n"
                                                 "test_accuracy[resnet50-fp8]  cosine  the cosine is low\n")
    other = suite.runpytest("--xfail-file", "xfails.txt", "-k", "accuracy")
    other.assert_outcomes(passed=2, failed=1)
    assert other.ret == 1
    assert "snr_db failed, which the entry does not name" in other.stdout.str()

    set_values(suite, snr={"resnet50-fp8": "not a number"})  # the test raises before any gate is judged
    suite.path.joinpath("xfails.txt").write_text("[temporarily-failing]\n"
                                                 "test_accuracy[resnet50-fp8]  snr_db  SNR short after the change\n")
    raised = suite.runpytest("--xfail-file", "xfails.txt", "-k", "accuracy")
    raised.assert_outcomes(passed=2, failed=1)
    assert "not a failed gate" in raised.stdout.str()


def test_xfail_file_strict_in_release_profiles_and_stale_warning(suite):
    suite.path.joinpath("xfails.txt").write_text(XFAILS)
    lenient = suite.runpytest("--xfail-file", "xfails.txt", "--report-dir", "lenient", "--profile", "smoke")
    lenient.assert_outcomes(passed=3, xpassed=1, skipped=1, warnings=1)
    assert lenient.ret == 0
    assert ("StaleXfailWarning: xfail entry 'test_accuracy[bert-base-fp32]' (xfails.txt:4) matches no test"
            in lenient.stdout.str())
    results = load(suite.path / "lenient" / "results.json")
    assert [e["test_id"] for e in results["stale_xfails"]] == ["test_accuracy[bert-base-fp32]"]
    by_id = {t["id"].split("::")[-1]: t for t in results["tests"]}
    assert by_id["test_performance[Server]"]["outcome"] == "skipped"
    assert by_id["test_performance[Server]"]["xfail"]["bucket"] == "unsupported"

    strict = suite.runpytest("--xfail-file", "xfails.txt", "--profile", "full")
    assert strict.ret == 1, "in the full profile a fixed known failure fails the run"
    assert "test_accuracy[resnet50-fp8]" in strict.stdout.str() and "XPASS(strict)" in strict.stdout.str()
    strict = suite.runpytest("--xfail-file", "xfails.txt", "--profile", "default")
    assert strict.ret == 1, "so it does in the default profile, the release gate"
    assert "test_accuracy[resnet50-fp8]" in strict.stdout.str() and "XPASS(strict)" in strict.stdout.str()


def test_shards_together_equal_the_whole_run(suite, capsys):
    assert suite.runpytest("--report-dir", "whole").ret == 0
    for index in (1, 2):
        result = suite.runpytest("--report-dir", f"shard{index}", "--shard", f"{index}/2")
        assert result.ret == 0
        result.stdout.fnmatch_lines(["*deselected*"])
    shares = [{t["id"] for t in load(suite.path / f"shard{i}" / "results.json")["tests"]} for i in (1, 2)]
    assert not shares[0] & shares[1]
    merged_path = suite.path / "merged.json"
    status = cli_main(["report", str(suite.path / "shard1" / "results.json"), str(suite.path / "shard2" / "results.json"),
                       "--merged-json", str(merged_path)])
    assert status == 0
    assert "conformance PASS" in capsys.readouterr().out
    assert comparable(load(merged_path)) == comparable(load(suite.path / "whole" / "results.json"))


def test_xdist_gives_the_same_records_and_one_report(suite):
    pytest.importorskip("xdist")
    suite.path.joinpath("xfails.txt").write_text(XFAILS)
    args = ["-p", "xdist", "--xfail-file", "xfails.txt", "--profile", "smoke"]
    serial = suite.runpytest_subprocess(*args, "-p", "no:randomly", "--report-dir", "serial")
    parallel = suite.runpytest_subprocess(*args, "-n", "2", "--report-dir", "parallel")
    assert serial.ret == parallel.ret == 0
    parallel.stdout.fnmatch_lines(["*2 workers*"])
    assert parallel.stdout.str().count("= conformance =") == 1
    one, two = load(suite.path / "serial" / "results.json"), load(suite.path / "parallel" / "results.json")
    assert comparable(one) == comparable(two)
    assert one["stale_xfails"] == two["stale_xfails"] != []
    assert (suite.path / "serial" / "compliance.md").read_text().split("## Checks")[1] == \
        (suite.path / "parallel" / "compliance.md").read_text().split("## Checks")[1]
