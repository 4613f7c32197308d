"""A mutated verdict never reads PASS. A run that failed (two tests failed on their figures, a known failure waived
one gate) is written as a results.json, whole or as the shards of a split, and its verdict-carrying fields are edited
the way someone hiding the failure would edit them: the run's verdict, exit status and interruption, a record's
``passed``, ``outcome`` and ``established``, a test's outcome and known-failure entry. Each edit leaves the figures that
gave the failure in the file, so none may turn it into a PASS: ``ipu-conformance report`` (one file, or the shards
merged), ``report compare`` and ``report validate`` refuse the file (exit 4) or keep its failure (exit 1), and never
show a traceback.

Hypothesis runs derandomized (the same examples on every machine) with a modest number of examples."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conformance.cli import main as cli_main
from conformance.report import record as results_record
from conformance.targets import compare
from tests.sample_results import sample_results
from tests.test_report_verify import passing_results, shards_of

PROPERTY = settings(max_examples=60, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def failing_run() -> dict:
    """The sample run without its regressions (what an edit could remove without a trace): it fails on its figures
    alone (a conformer SNR and a SingleStream latency), with one gate waived by a known failure."""
    data = sample_results()
    data["regressions"], data["settings"]["baseline"] = [], None
    judgement = results_record.judgement_of(data)
    data["verdict"], data["exit_status"] = judgement.verdict, judgement.exit_status
    assert data["verdict"] == "FAIL"
    return data


def _fails_on_its_figure(record: dict) -> bool:
    return (record.get("gating", True) and record["value"] is not None and record["target"] is not None
            and not compare(record["value"], record["op"], record["target"]))


EDITS = st.lists(st.one_of(
    st.tuples(st.just("verdict"), st.sampled_from(["PASS", "NO VERDICT"])),
    st.tuples(st.just("exit_status"), st.sampled_from([0, 5])),
    st.tuples(st.just("interrupted"), st.booleans()),
    st.tuples(st.just("passed"), st.integers(0, 50)),
    st.tuples(st.just("record_outcome"), st.integers(0, 50), st.sampled_from(["passed", "xfailed", "skipped"])),
    st.tuples(st.just("established"), st.integers(0, 50), st.sampled_from([True, False, None])),
    st.tuples(st.just("test_outcome"), st.integers(0, 50), st.sampled_from(["passed", "xfailed", "skipped",
                                                                           "xpassed"])),
    st.tuples(st.just("hide_failure"), st.integers(0, 50)),
    st.tuples(st.just("xfail_entry"), st.integers(0, 50), st.sampled_from(["drop", "unsupported", "other-check"])),
), min_size=1, max_size=6)


def edit(data: dict, edits) -> None:
    """Apply ``edits`` to ``data`` (a results record); records and tests are picked by index modulo their count."""
    records, tests = data["records"], data["tests"]
    failing = [r for r in records if _fails_on_its_figure(r)]
    for kind, *args in edits:
        if kind in ("verdict", "exit_status", "interrupted"):
            data[kind] = args[0]
        elif kind == "passed" and failing:
            failing[args[0] % len(failing)]["passed"] = True
        elif kind == "record_outcome" and records:
            records[args[0] % len(records)]["outcome"] = args[1]
        elif kind == "established" and records:
            records[args[0] % len(records)]["established"] = args[1]
        elif kind == "test_outcome" and tests:
            tests[args[0] % len(tests)]["outcome"] = args[1]
        elif kind == "hide_failure" and failing:  # the whole story rewritten around one failing figure
            record = failing[args[0] % len(failing)]
            record.update(passed=True, outcome="passed")
            test = next(t for t in tests if t["id"] == record["test_id"])
            test.update(outcome="passed", message="")
            for other in records:
                if other["test_id"] == test["id"]:
                    other["outcome"] = "passed"
            data["verdict"], data["exit_status"] = "PASS", 0
        elif kind == "xfail_entry":
            known = [t for t in tests if t.get("xfail")]
            if not known:
                continue
            test = known[args[0] % len(known)]
            if args[1] == "drop":
                test["xfail"] = None
            elif args[1] == "unsupported":
                test["xfail"] = {**test["xfail"], "bucket": "unsupported"}
            else:
                test["xfail"] = {**test["xfail"], "checks": ["another_check"]}


def _run(args) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main([str(a) for a in args])
    return code, out.getvalue() + err.getvalue()


def _assert_never_pass(paths: list[Path], edits, good: Path) -> None:
    """``report`` of the files (merged when there are several); of a single file also ``report compare`` and
    ``report validate`` (which exits 0 for a consistent file, whatever its verdict)."""
    calls = [["report", *paths]]
    if len(paths) == 1:
        calls += [["report", "compare", good, paths[0]], ["report", "validate", paths[0]]]
    for args in calls:
        code, text = _run(args)
        allowed = (0, 4) if args[1] == "validate" else (1, 4)
        assert "Traceback" not in text and code in allowed, f"{args[:2]}: exit {code} after {edits}:\n{text[-3000:]}"
        assert "conformance PASS" not in text and "(verdict PASS" not in text, \
            f"{args[:2]}: PASS after {edits}:\n{text[-3000:]}"
        event(f"{args[1] if args[1] in ('validate', 'compare') else 'report'}: exit {code}")


def test_the_unedited_failing_run_reads_fail():
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "results.json"
        path.write_text(json.dumps(failing_run()))
        assert _run(["report", "validate", path])[0] == 0
        code, text = _run(["report", path])
        assert code == 1 and "conformance FAIL" in text


@PROPERTY
@given(edits=EDITS)
def test_an_edited_failing_run_never_reads_pass(edits):
    data = failing_run()
    edit(data, edits)
    with tempfile.TemporaryDirectory() as directory:
        path, good = Path(directory) / "results.json", Path(directory) / "good.json"
        path.write_text(json.dumps(data))
        good.write_text(json.dumps(passing_results()))
        _assert_never_pass([path], edits, good)


@PROPERTY
@given(count=st.sampled_from([2, 3]), which=st.integers(0, 2), edits=EDITS)
def test_an_edited_shard_of_a_failing_run_never_merges_into_a_pass(count, which, edits):
    parts = shards_of(failing_run(), count)
    for part in parts:  # the shards that hold the failures: edited until they hide them
        if any(_fails_on_its_figure(r) for r in part["records"]):
            edit(part, edits)
    edit(parts[which % count], edits)
    with tempfile.TemporaryDirectory() as directory:
        paths = []
        for index, part in enumerate(parts, start=1):
            paths.append(Path(directory) / f"shard{index}.json")
            paths[-1].write_text(json.dumps(part))
        _assert_never_pass(paths, edits, Path(directory) / "unused.json")
