"""Known-failures files and results files with generated hostile values (Hypothesis): the suite answers each with a
usage error naming the input (exit 4) or a verdict it can stand behind, never a traceback or a hang, and a refused run
or command leaves the previous report as it was."""

from __future__ import annotations

import json
import math
import time

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conformance.cli import main as cli_main
from conformance.report import tables, verify, xfails
from tests.test_report_atomic import CONFTEST, SUITE, leftovers, snapshot
from tests.test_report_verify import RELATIVE, find, passing_results, relative

IDS = [f"conformance/test_accuracy.py::test_accuracy[{m}-{p}]" for m in ("resnet50", "bert-base", "widedeep")
       for p in ("fp16", "fp8", "fp16-half-partials")] + \
      [f"conformance/test_performance.py::test_performance[resnet50-fp8-{s}]" for s in ("Offline", "Server")]

PATTERN_CHARS = st.sampled_from("**********aQ[]-_:./\u0663\u00e9\x00 ")
PATTERN = st.one_of(st.text(PATTERN_CHARS, min_size=1, max_size=40),
                    st.integers(1, 5000).map(lambda n: "*" * n + "Q"),
                    st.sampled_from(["test_accuracy[*", "*]", "*fp8*", "test_*[*-*]", "[", "]"]))
HEADER = st.sampled_from(["[temporarily-failing]", "[permanent]", "[unsupported]", "[unknown]", "[", "[permanent"])
LINE = st.one_of(HEADER,
                 st.tuples(PATTERN, st.sampled_from(["snr_db", "top1_agreement,f1", "bad check", "", "*"]),
                           st.text(max_size=20)).map(lambda t: "  ".join(t)),
                 st.text(max_size=30))
XFAIL_TEXT = st.lists(LINE, max_size=12).map("\n".join)


@settings(max_examples=200, deadline=2000, database=None, derandomize=True)
@given(text=XFAIL_TEXT)
def test_a_known_failures_file_is_read_or_refused_naming_its_line_in_bounded_time(text):
    start = time.perf_counter()
    try:
        entries = xfails.parse(text, "hostile.txt")
    except ValueError as exc:
        assert str(exc).startswith("hostile.txt:"), exc
        return
    xfails.match(IDS, entries)
    try:
        xfails.blanket(entries, IDS)
    except ValueError as exc:
        assert str(exc).startswith("hostile.txt:"), exc
    assert time.perf_counter() - start < 1.0


@pytest.fixture
def suite(pytester, monkeypatch):
    for name in ("KILL_DURING_REPORT", "KILL_AFTER_SWAP", "WAIT_FOR_GATE", "BREAK_REPORT_DIR", "RUN_NAME", "SNR",
                 "TERM_AT"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeini("[pytest]\nfilterwarnings = ignore::pytest.PytestAssertRewriteWarning\n")
    assert pytester.runpytest("--report-dir", "out").ret == 0
    return pytester


@settings(max_examples=25, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=XFAIL_TEXT)
def test_a_run_with_a_hostile_known_failures_file(suite, text):
    """The whole run: exit 4 naming the file (the previous report untouched), or a run whose verdict follows from
    its tests; no traceback either way."""
    path = suite.path / "hostile.txt"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    before = snapshot(suite.path / "out")
    result = suite.runpytest("--report-dir", "out", "--xfail-file", str(path))
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    assert result.ret in (0, 1, 4, 5), output
    event(f"exit {int(result.ret)}")
    if result.ret == 4:
        assert "hostile.txt" in output, output
        assert snapshot(suite.path / "out") == before
    else:
        results = json.loads((suite.path / "out" / "results.json").read_text())
        assert results["exit_status"] == result.ret
    assert leftovers(suite) == []


def _versioned() -> dict:
    """A consistent results file of one gate of the suite's tables, recording their version."""
    data = passing_results()
    relative(data, [0.995, 1.0], True)
    data["records"] = [find(data, RELATIVE)]
    data["settings"]["tables"] = tables.tables_version()
    return data


HOSTILE = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-10**30, 10**30), st.booleans(),
                    st.none(), st.text(max_size=8), st.just(-5.0), st.just(0.99), st.just(0.98999999))


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["target", "gating", "op", "value", "passed"]), value=HOSTILE)
def test_a_results_file_with_a_hostile_target_or_gating(tmp_path_factory, capsys, field, value):
    """A gate's target, gating, op, value or passed replaced: ``report validate``, ``report`` and ``compare`` give exit
    4 (``validate``: 1 where the schema refuses it) naming the file (the earlier output untouched), unless the file
    still says what the tables and its figures give (a figure within float rounding of its target may pass: then its
    verdict stands); never a traceback."""
    directory = tmp_path_factory.mktemp("hostile")
    data = _versioned()
    record = find(data, RELATIVE)
    record[field] = value
    path = directory / "results.json"
    path.write_text(json.dumps(data))
    good = directory / "good.json"
    good.write_text(json.dumps(_versioned()))
    earlier = directory / "earlier.md"
    earlier.write_text("earlier\n")
    still_true = (record["target"] == 0.99 and record["gating"] is True and record["op"] == ">="
                  and isinstance(record["value"], (int, float)) and not isinstance(record["value"], bool)
                  and math.isfinite(record["value"]) and record["passed"] is True
                  and (record["value"] >= 0.99 or math.isclose(record["value"], 0.99, rel_tol=verify.ROUNDING)))
    for args in (["report", "validate", path], ["report", path, "--out", earlier], ["report", "compare", good, path]):
        code = cli_main([str(a) for a in args])
        captured = capsys.readouterr()
        text = captured.out + captured.err
        assert "Traceback" not in text
        if still_true:
            assert code == 0, text
        else:
            refused = (1, 4) if args[1] == "validate" else (4,)  # validate: 1 for a file the schema refuses
            assert code in refused, f"{args}: {field}={value!r}: exit {code}\n{text}"
            assert str(path) in text
            assert earlier.read_text() == "earlier\n"
