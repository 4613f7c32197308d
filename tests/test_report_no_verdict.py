"""Nothing reads PASS from nothing, end to end: a run whose tests were all skipped by known failures is NO VERDICT
(exit 5); a known-failure entry that matches every collected test, and a ``--baseline`` that compares nothing, are
refused (exit 4) and leave the earlier report as it was (serially and under pytest-xdist)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conformance.cli import main as cli_main
from tests.test_report_plugin import load, suite  # noqa: F401  (the fake suite fixture)

REPO = Path(__file__).resolve().parents[1]
EVERY_TEST = ("test_accuracy[bert-base-fp16]", "test_accuracy[bert-base-fp8]", "test_accuracy[resnet50-fp8]",
              "test_performance[Offline]", "test_performance[Server]")


def contents(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def earlier_report(pytester) -> dict:
    """A report of a whole run in ``out/``; the tests' marks of having run are cleared. Returns its contents."""
    assert pytester.runpytest("--report-dir", "out").ret == 0
    shutil.rmtree(pytester.path / "ran")
    return contents(pytester.path / "out")


def test_every_test_skipped_by_known_failures_is_no_verdict(suite, capsys):  # noqa: F811
    suite.path.joinpath("xfails.txt").write_text("[unsupported]\n" + "".join(f"{t}  not on this hardware\n"
                                                                            for t in EVERY_TEST))
    result = suite.runpytest("--xfail-file", "xfails.txt", "--report-dir", "out")
    result.assert_outcomes(skipped=5)
    assert result.ret == 5
    result.stdout.fnmatch_lines(["nothing was judged: no gated check was recorded (5 test(s), 5 skipped, 5 of them by "
                                 "known-failure entries): no verdict (exit status 5)",
                                 "conformance NO VERDICT: hardware=cpu*"])
    results = load(suite.path / "out" / "results.json")
    assert (results["verdict"], results["exit_status"]) == ("NO VERDICT", 5)
    assert cli_main(["report", "validate", str(suite.path / "out" / "results.json")]) == 0
    assert cli_main(["report", str(suite.path / "out" / "results.json")]) == 5
    assert "NO VERDICT" in capsys.readouterr().out
    # without a report directory the verdict line is shown all the same
    bare = suite.runpytest("--xfail-file", "xfails.txt")
    assert bare.ret == 5 and "conformance NO VERDICT" in bare.stdout.str()


@pytest.mark.parametrize("workers", [None, "2"], ids=["serial", "xdist"])
def test_known_failure_matching_every_collected_test_is_refused(suite, workers):  # noqa: F811
    before = earlier_report(suite)
    suite.path.joinpath("xfails.txt").write_text("[temporarily-failing]\ntest_*  snr_db,samples_per_s  all short\n")
    args = ["--xfail-file", "xfails.txt", "--report-dir", "out"]
    if workers:
        pytest.importorskip("xdist")
        result = suite.runpytest_subprocess("-p", "xdist", "-n", workers, *args)
    else:
        result = suite.runpytest(*args)
    assert result.ret == 4
    text = result.stdout.str() + result.stderr.str()
    assert "xfails.txt:2: test id 'test_*' matches every one of the 5 collected tests" in text
    assert "INTERNALERROR" not in text and "Traceback" not in text
    assert not (suite.path / "ran").exists(), "no test ran"
    assert contents(suite.path / "out") == before


def test_baseline_that_compares_nothing_refuses_the_run(suite):  # noqa: F811
    before = earlier_report(suite)
    assert suite.runpytest("--report-dir", "base", "-k", "accuracy").ret == 0
    result = suite.runpytest("--report-dir", "out", "--baseline", "base/results.json", "-k", "performance")
    assert result.ret == 4
    text = result.stdout.str() + result.stderr.str()
    assert ("--baseline base/results.json compares nothing: none of the run's 2 gated check(s) is among its 3 gated "
            "check(s) with a value") in text
    assert "conformance REFUSED" in text and "the previous report there is unchanged" in text
    assert contents(suite.path / "out") == before
    same = suite.runpytest("--report-dir", "again", "--baseline", "base/results.json")  # shares the accuracy checks
    assert same.ret == 0


def test_the_suite_with_every_test_skipped_by_known_failures_is_no_verdict(pytester, tmp_path):
    """The real suite (widedeep on the ipu, 21 tests), every test skipped by one of four entries: no PASS."""
    xfail = tmp_path / "x.txt"
    xfail.write_text("[unsupported]\n" + "".join(f"{f}[widedeep*]  not supported on this hardware\n" for f in
                                                 ("test_accuracy", "test_performance", "test_audit", "test_reference")))
    result = pytester.runpytest(str(REPO / "conformance"), "--hardware", "ipu", "--profile", "smoke", "--model",
                                "widedeep", "--xfail-file", str(xfail), "-p", "no:randomly")
    result.assert_outcomes(skipped=21)
    assert result.ret == 5
    result.stdout.fnmatch_lines(["*21 skipped, 21 of them by known-failure entries*", "conformance NO VERDICT*"])
