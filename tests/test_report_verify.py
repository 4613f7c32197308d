"""Files are never believed, and nothing reads PASS from nothing: a results.json whose verdicts do not follow from its
own records and tests is refused by ``report``, ``report compare``, ``report validate`` and ``--baseline`` (exit 4);
a run that judged nothing is NO VERDICT (exit 5); shards merge only as one whole run; a property-based test mutates
a valid file and never sees a traceback or an unfounded PASS."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.cli import main as cli_main
from conformance.report import baseline, compare, merge, shard, verify, xfails
from conformance.report import record as results_record
from conformance.report.collect import assign_ids
from conformance.targets import compare as holds
from tests.sample_results import SAMPLE, sample_results

F1 = "accuracy/bert-base/fp16/-/f1@0.99xfp32"
EARLIER = "the earlier report\n"


def passing_results() -> dict:
    """The sample run with its failed tests (and their records) and its regressions left out: a consistent PASS."""
    data = sample_results()
    data["tests"] = [t for t in data["tests"] if t["outcome"] not in ("failed", "error")]
    kept = {t["id"] for t in data["tests"]}
    data["records"] = [r for r in data["records"] if r["test_id"] in kept]
    data["regressions"] = []
    data["settings"]["baseline"] = None
    data["verdict"], data["exit_status"] = "PASS", 0
    return data


def find(data: dict, record_id: str) -> dict:
    return next(r for r in data["records"] if r["id"] == record_id)


def fail_test(data: dict, name: str, records_too: bool) -> None:
    """Make the test ``name`` failed (and its records' outcome too, as a run writes it, when ``records_too``)."""
    test = next(t for t in data["tests"] if t["id"].endswith(name))
    test["outcome"], test["message"] = "failed", "boom"
    if records_too:
        for r in data["records"]:
            if r["test_id"] == test["id"]:
                r["outcome"] = "failed"


def nothing_judged(data: dict) -> None:
    for test in data["tests"]:
        test.update(outcome="skipped", message="unsupported (x.txt:2): not on this hardware")
    data["records"] = []


def relative(data: dict, interval, established, floor: dict | None = None) -> None:
    """The F1 gate, a relative gate (its check names the ratio, ``f1@0.99xfp32``), with ``interval`` as its ratio's
    95% interval (and, for a label metric whose FP32 score is at or below its floor, that floor)."""
    record = find(data, F1)
    record.update(established=established)
    record["details"] = {**record["details"], "ratio_ci95": interval, "fp32_value": 1.0,
                         **({"label_floor": floor} if floor else {})}


RELATIVE_CHECK = "f1@0.99xfp32"
RELATIVE = F1


def shards_of(data: dict, count: int) -> list[dict]:
    """``data`` cut into the shards of a ``count``-way split, each with the verdict its own tests and records give."""
    owner = shard.shard_of([t["id"] for t in data["tests"]], count)
    parts = []
    for index in range(1, count + 1):
        part = copy.deepcopy(data)
        part["settings"]["shard"] = f"{index}/{count}"
        part["tests"] = [t for t in data["tests"] if owner[t["id"]] == index]
        part["records"] = [r for r in data["records"] if owner[r["test_id"]] == index]
        judgement = results_record.judgement_of(part)
        part["verdict"], part["exit_status"] = judgement.verdict, judgement.exit_status
        parts.append(part)
    return parts


def merged_passing(count: int = 2) -> dict:
    """The passing run cut into ``count`` shards and merged again (a consistent merged PASS)."""
    return merge.merge([(f"shard{i}.json", part) for i, part in enumerate(shards_of(passing_results(), count), 1)])


def as_merged(change):
    """A mutation that makes the file the merged passing run, then applies ``change`` to it."""
    def mutate(data: dict) -> None:
        data.clear()
        data.update(merged_passing())
        change(data)
    return mutate


# (id, mutation of the passing run, words the refusal must hold besides the file's name)
def _gate(data: dict, **fields) -> None:
    """The F1 gate as a run now writes it (a relative gate of the suite's tables), with ``fields`` edited."""
    relative(data, [0.995, 1.0], True)
    find(data, RELATIVE).update(fields)


TAMPERED = [
    ("target-edited", lambda d: _gate(d, target=-5.0),
     (f"record {RELATIVE} (test conformance/test_accuracy.py::test_accuracy[bert-base-fp16], check f1@0.99xfp32): "
      "target -5.0, but the tables give 0.99 (f1 >= 0.99 x f1(fp32))",)),
    ("failing-gate-made-informational", lambda d: _gate(d, value=0.5, passed=False, gating=False, established=None,
                                                        details={"fp32_value": 1.0}),
     (f"record {RELATIVE} (test conformance/test_accuracy.py::test_accuracy[bert-base-fp16], check f1@0.99xfp32): "
      "gating is false, but the tables make it a gate",)),
    ("older-table-version", lambda d: d["settings"].update(tables="0" * 64),
     ("judged with other target tables (version 000000000000, this suite's is ", "a results file of another table "
      "version")),

    ("value-below-target-marked-passed", lambda d: find(d, F1).update(value=-0.18, target=0.816),
     (F1, "test conformance/test_accuracy.py::test_accuracy[bert-base-fp16]", "check f1@0.99xfp32",
      "passed is true, but value -0.18 >= target 0.816 is false")),
    ("pass-with-exit-status-1", lambda d: d.update(exit_status=1),
     ("verdict PASS with exit status 1", "give FAIL with exit status 1")),
    ("failed-test-under-pass", lambda d: fail_test(d, "test_accuracy[bert-base-fp16]", records_too=True),
     ("verdict PASS with exit status 0", "give FAIL", "1 test(s) failed")),
    ("failed-test-whose-records-say-passed", lambda d: fail_test(d, "test_accuracy[bert-base-fp16]", records_too=False),
     (F1, "outcome 'passed', but its test's is 'failed'")),
    ("every-record-twice", lambda d: d.update(records=d["records"] + copy.deepcopy(d["records"])),
     (f"record {F1} (test", "a copy of record")),
    ("null-value-passed", lambda d: find(d, F1).update(value=None), (F1, "its value is null")),
    ("record-id-changed", lambda d: find(d, F1).update(id="accuracy/bert-base/fp16/-/other"),
     (f"its fields give it the id {F1}",)),
    ("waived-without-entry", lambda d: next(t for t in d["tests"] if t["id"].endswith("[resnet50-fp8]")).update(xfail=None),
     ("accuracy/resnet50/fp8/-/top1_agreement@0.96xfp32",
      "waived as a known failure (XFAIL), but its test has no known-failure entry")),
    ("nothing-judged-called-pass", nothing_judged, ("give NO VERDICT with exit status 5", "nothing was judged")),
    ("interrupted-with-exit-0", lambda d: d.update(interrupted=True), ("interrupted, but exit status 0",)),
    ("not-established-shown-established", lambda d: relative(d, [0.98, 1.0], True),
     (RELATIVE, "established is true, but its ratio's 95% interval [0.98, 1.0] against the ratio of check "
                f"{RELATIVE_CHECK} gives false")),
    ("established-called-not-established", lambda d: relative(d, [0.995, 1.0], False),
     (RELATIVE, "established is false, but", "gives true")),
    ("few-units-shown-established", lambda d: (relative(d, [0.995, 1.0], True),
                                               find(d, RELATIVE)["details"].update(units=8, units_to_establish=368)),
     (RELATIVE, "established is true, but")),
    ("below-the-label-floor-shown-established", lambda d: relative(d, [0.995, 1.0], True, {"fp32": 0.0, "floor": 0.05}),
     (RELATIVE, "established is true, but its FP32 score 0.0 is at or below the floor 0.05")),
    ("audit-failed-figure-passed-as-not-established", lambda d: next(
        r for r in d["records"] if r["kind"] == "audit").update(value=0.0, passed=True, established=False, details={}),
     ("audit/resnet50/fp8/Offline/TEST01", "passed is true, but value 0.0 >= target 1.0 is false")),
    ("merged-shard-dropped", as_merged(lambda d: d["merged_from"].pop()),
     ("merged from shards 1/2 of 2: 2/2 missing, but missing_shards lists none",)),
    ("merged-shard-twice", as_merged(lambda d: d["merged_from"].__setitem__(1, dict(d["merged_from"][0]))),
     ("merged_from names a shard twice",)),
    ("merged-file-called-a-shard", as_merged(lambda d: d["settings"].update(shard="1/2")),
     ("merged from 2 file(s), but settings.shard is '1/2'",)),
    ("merged-shards-of-two-splits", as_merged(lambda d: d["merged_from"][1].update(shard="2/3")),
     ("which are not parts of one split",)),
]


def write(tmp_path: Path, name: str, data: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def run(args, capsys) -> tuple[int, str]:
    code = cli_main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def test_consistent_files_are_accepted(tmp_path, capsys):
    established, floored = passing_results(), passing_results()
    relative(established, [0.995, 1.0], True)
    relative(floored, [0.995, 1.0], False, {"fp32": 0.0, "floor": 0.05})
    for data in (sample_results(), passing_results(), merged_passing(), merged_passing(3), established,
                 floored):
        assert verify.problems(data) == []
    code, text = run(["report", "validate", write(tmp_path, "pass.json", passing_results())], capsys)
    assert code == 0 and "verdict PASS, exit status 0, consistent with its records and tests" in text
    assert run(["report", write(tmp_path, "pass.json", passing_results())], capsys)[0] == 0


@pytest.mark.parametrize("mutate, says", [pytest.param(m, s, id=i) for i, m, s in TAMPERED])
def test_tampered_file_is_refused_everywhere(mutate, says, tmp_path, capsys):
    """report, report compare (either side), report validate and --baseline: exit 4 naming the file and what disagrees;
    nothing is written over an earlier output."""
    data = passing_results()
    mutate(data)
    bad = write(tmp_path, "tampered.json", data)
    good = write(tmp_path, "good.json", passing_results())
    earlier = tmp_path / "earlier.md"
    earlier.write_text(EARLIER)
    for args in (["report", bad, "--out", earlier], ["report", good, bad, "--out", earlier],
                 ["report", "compare", good, bad, "--out", earlier], ["report", "compare", bad, good],
                 ["report", "validate", bad]):
        code, text = run(args, capsys)
        assert code == 4, f"{args}: exit {code}\n{text}"
        missing = [w for w in (str(bad), "inconsistent results file", *says) if w not in text]
        assert not missing, f"{args}: the message lacks {missing}:\n{text}"
        assert "Traceback" not in text and "conformance PASS" not in text
        assert earlier.read_text() == EARLIER
    with pytest.raises(baseline.BaselineError) as info:
        baseline.load_baseline(bad, passing_results())  # compared with a run of the same settings
    assert str(info.value).startswith(f"--baseline {bad}: inconsistent results file") and says[0] in str(info.value)


def test_audit_may_fail_beyond_its_figure_and_pass_against_it_only_when_it_says_why():
    data = passing_results()
    test01 = find(data, "audit/resnet50/fp8/Offline/TEST01")
    test01.update(value=0.5, passed=True)
    del test01["details"]["official"]  # MLCommons' scripts said nothing: nothing explains the pass
    found = verify.problems(data)
    assert any("passed is true, but value 0.5 >= target 1.0 is false" in p for p in found), found
    for why in ({"details": {"official": {"verify_accuracy": "TEST PASS"}}},
                {"details": {"accuracy_fallback": {"passed": True}}}):
        explained = copy.deepcopy(data)
        next(r for r in explained["records"] if r["check"] == "TEST01").update(why)
        assert verify.problems(explained) == [], why
    for why in ({"established": False},  # a short profile's INVALID length spares only the performance half
                {"details": {"official": {"verify_accuracy": "TEST PASS", "verify_performance": "TEST FAIL"}}},
                {"details": {"accuracy_fallback": {"passed": False}}}):
        unexplained = copy.deepcopy(data)
        next(r for r in unexplained["records"] if r["check"] == "TEST01").update(why)
        assert any("passed is true, but value 0.5" in p for p in verify.problems(unexplained)), why
    failing = copy.deepcopy(data)  # a figure that holds and an audit that failed (its SUT raised): its test fails
    record = next(r for r in failing["records"] if r["check"] == "TEST01")
    record.update(value=1.0, passed=False)
    fail_test(failing, "test_audit[resnet50-fp8-Offline-TEST01]", records_too=True)
    failing["verdict"], failing["exit_status"] = "FAIL", 1
    assert verify.problems(failing) == []


def test_figure_at_its_target_within_float_rounding_may_go_either_way():
    data = passing_results()
    record = find(data, F1)
    record.update(value=record["target"] * (1 - 1e-9))  # judged in float32 as equal: passed
    assert verify.problems(data) == []


def test_nothing_judged_is_no_verdict_exit_5(tmp_path, capsys):
    data = passing_results()
    nothing_judged(data)
    data["verdict"], data["exit_status"] = "NO VERDICT", 5
    path = write(tmp_path, "nothing.json", data)
    code, text = run(["report", path], capsys)
    assert code == 5
    assert "conformance NO VERDICT" in text and "nothing was judged: no gated check was recorded" in text
    assert "(9 test(s), 9 skipped, 2 of them by known-failure entries)" in text
    assert run(["report", "validate", path], capsys)[0] == 0
    waived = passing_results()  # every gate waived by a known failure: nothing judged either
    waived["records"] = [r for r in waived["records"] if r["outcome"] == "xfailed"]
    waived["tests"] = [t for t in waived["tests"] if t["outcome"] == "xfailed"]
    judgement = results_record.judgement_of(waived)
    assert (judgement.verdict, judgement.exit_status) == ("NO VERDICT", 5)
    assert "every gated check (1) was waived" in judgement.reasons[0]


def test_run_verdict_order_in_compare():
    old, new = passing_results(), passing_results()
    new["verdict"] = "NO VERDICT"
    assert compare.worsened(old, new) and not compare.worsened(new, old)
    new["verdict"] = "FAIL"
    assert compare.worsened(old, new)


def test_compare_of_files_without_a_check_in_common_is_refused(tmp_path, capsys):
    bert, resnet = passing_results(), passing_results()
    for data, model in ((bert, "bert-base"), (resnet, "resnet50")):
        data["tests"] = [t for t in data["tests"] if f"[{model}" in t["id"]]
        data["records"] = [r for r in data["records"] if r["model"] == model]
        data["verdict"], data["exit_status"] = results_record.judgement_of(data).verdict, \
            results_record.judgement_of(data).exit_status
    old, new = write(tmp_path, "bert.json", bert), write(tmp_path, "resnet.json", resnet)
    code, text = run(["report", "compare", old, new], capsys)
    assert code == 4 and "compares nothing" in text and str(new) in text


@pytest.mark.parametrize("records", ["none", "nulls"])
def test_baseline_that_compares_nothing_is_refused(records, tmp_path):
    data = passing_results()
    if records == "none":
        data["records"], data["tests"] = [], []
    else:
        for record in data["records"]:
            record.update(value=None, passed=False)
    judgement = results_record.judgement_of(data)
    data["verdict"], data["exit_status"] = judgement.verdict, judgement.exit_status
    path = write(tmp_path, "base.json", data)
    with pytest.raises(baseline.BaselineError, match=f"--baseline {path}: compares nothing: it holds no gated check "
                                                     f"with a value"):
        baseline.load_baseline(path, passing_results())


def test_shards_merge_only_as_one_whole_run(tmp_path, capsys):
    from tests.test_report_shard_merge import split_sample

    parts = split_sample(2)
    paths = [write(tmp_path, name, data) for name, data in parts]
    merged_json = tmp_path / "all.json"
    code, text = run(["report", paths[0], "--merged-json", merged_json], capsys)
    assert code == 4 and "shard(s) 2/2 missing" in text and str(paths[0]) in text
    parts[1][1]["settings"]["precisions"] = ["fp8"]
    mixed = write(tmp_path, "mixed.json", parts[1][1])
    code, text = run(["report", paths[0], mixed, "--merged-json", merged_json], capsys)
    assert code == 4 and f"{mixed}: settings.precisions is ['fp8']" in text
    assert not merged_json.exists()
    code, _ = run(["report", *paths, "--merged-json", merged_json], capsys)
    assert code == 1 and results_record.load(merged_json)["verdict"] == "FAIL"


@pytest.mark.parametrize("test_id", ["*", "*-*", "**", "*[*]", "*::*"])
def test_known_failure_matching_any_test_is_refused_naming_its_line(test_id):
    for text in (f"[unsupported]\n{test_id}  not supported on this hardware\n",
                 f"[temporarily-failing]\n{test_id}  snr_db  everything fails\n"):
        with pytest.raises(ValueError, match=r"x\.txt:2: test id .* matches every test"):
            xfails.parse(text, "x.txt")


def test_known_failure_matching_every_collected_test_is_refused():
    entries = xfails.parse("[unsupported]\ntest_accuracy[a]  one\ntest_*[*]  all of them\n", "x.txt")
    ids = ["t.py::test_accuracy[a]", "t.py::test_performance[b]"]
    with pytest.raises(ValueError, match=r"x\.txt:3: test id 'test_\*\[\*\]' matches every one of the 2 collected"):
        xfails.blanket(entries, ids)
    xfails.blanket(entries, ids[:1])  # one test: the entry may be that test's
    xfails.blanket(entries, [*ids, "t.py::test_other"])  # a test it does not match: not every test


# ----- the property: mutate a valid file; never a traceback, never a PASS the records do not give ---------------------

def _honest_pass(data: dict) -> bool:
    """An independent reading of a file that may be shown as PASS: every test passed or was expected to fail, nothing
    regressed, every gated check's figure meets its target (or the check failed and its test is an expected failure),
    some gated check was judged, and no record is there twice (a figure within float32 rounding of its target may be
    judged either way)."""
    if data.get("verdict") != "PASS" or data.get("exit_status") != 0 or data.get("interrupted"):
        return False
    if data.get("regressions") or any(t["outcome"] in ("failed", "error") for t in data["tests"]):
        return False
    outcomes = {t["id"]: t["outcome"] for t in data["tests"]}
    judged = False
    for r in data["records"]:
        if not r.get("gating", True):
            continue
        measured = r["value"] is not None and r["target"] is not None
        met = measured and holds(r["value"], r["op"], r["target"])
        if measured and math.isclose(r["value"], r["target"], rel_tol=verify.ROUNDING):
            met = r["passed"]
        if met != r["passed"] or outcomes.get(r["test_id"]) != r["outcome"]:
            return False
        if not met and r["outcome"] != "xfailed":
            return False
        judged = judged or met
    ids = [r["id"] for r in data["records"]]
    return judged and len(ids) == len(set(ids))


MUTATIONS = st.lists(st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 50)),
    st.tuples(st.just("value"), st.integers(0, 50), st.floats(-1e6, 1e6, allow_nan=False) | st.none()),
    st.tuples(st.just("target"), st.integers(0, 50), st.floats(-1e6, 1e6, allow_nan=False)),
    st.tuples(st.just("op"), st.integers(0, 50)),
    st.tuples(st.just("duplicate"), st.integers(0, 50)),
    st.tuples(st.just("drop"), st.integers(0, 50)),
    st.tuples(st.just("outcome"), st.integers(0, 50), st.sampled_from(["passed", "failed", "error", "skipped",
                                                                      "xfailed", "xpassed"])),
    st.tuples(st.just("verdict"), st.sampled_from(["PASS", "FAIL", "NO VERDICT"])),
    st.tuples(st.just("exit_status"), st.sampled_from([0, 1, 2, 3, 4, 5])),
    st.tuples(st.just("drop_tests"), st.integers(0, 50)),
), min_size=1, max_size=4)


def mutate(data: dict, mutations) -> None:
    records, tests = data["records"], data["tests"]
    for mutation in mutations:
        kind, *args = mutation
        if kind in ("flip", "value", "target", "op", "duplicate", "drop") and not records:
            continue
        pick = records[args[0] % len(records)] if kind in ("flip", "value", "target", "op", "duplicate", "drop") else None
        if kind == "flip":
            pick["passed"] = not pick["passed"]
        elif kind in ("value", "target"):
            pick[kind] = args[1]
        elif kind == "op":
            pick["op"] = "<=" if pick["op"] == ">=" else ">="
        elif kind == "duplicate":
            records.append(copy.deepcopy(pick))
        elif kind == "drop":
            records.remove(pick)
        elif kind == "outcome" and tests:
            tests[args[0] % len(tests)]["outcome"] = args[1]
        elif kind == "drop_tests" and tests:
            tests.pop(args[0] % len(tests))
        elif kind in ("verdict", "exit_status"):
            data[kind] = args[0]


@settings(max_examples=120, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(["pass", "fail"]), mutations=MUTATIONS)
def test_mutated_file_never_tracebacks_and_never_shows_an_unfounded_pass(base, mutations):
    data = passing_results() if base == "pass" else sample_results()
    mutate(data, mutations)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "results.json"
        path.write_text(json.dumps(data))
        good = Path(directory) / "good.json"
        good.write_text(json.dumps(passing_results()))
        for args in (["report", path], ["report", "compare", good, path], ["report", "validate", path]):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli_main([str(a) for a in args])
            text = out.getvalue() + err.getvalue()
            assert "Traceback" not in text and code != 3, f"{args}: {mutations}\n{text}"
            assert code in (0, 1, 4, 5), f"{args}: exit {code}\n{text}"
            if args[1] == path and code == 0:  # rendered as PASS: the file's records give it
                assert _honest_pass(data), f"PASS shown for {mutations}:\n{text}"
            if code != 4:
                assert verify.problems(data) == [], f"{args}: exit {code} for an inconsistent file {mutations}"


def test_targets_and_gating_are_the_tables_of_the_files_version():
    """A file that records this suite's tables version is checked record by record against them: a gate they have,
    as they have it, is accepted; a check they do not have for the record's model and precision is refused; the same
    file from other tables is refused as such, without guessing at its targets."""
    from conformance.report import tables
    data = passing_results()
    relative(data, [0.995, 1.0], True)
    data["records"] = [find(data, RELATIVE)]
    data["settings"]["tables"] = tables.tables_version()
    assert verify.problems(data) == []
    tier = copy.deepcopy(find(data, RELATIVE))
    tier.update(check="f1@0.999xfp32", target=0.999, gating=True, established=False)
    data["records"] = assign_ids([{k: v for k, v in r.items() if k != "id"} for r in [*data["records"], tier]])
    assert verify.problems(data) == [
        "record accuracy/bert-base/fp16/-/f1@0.999xfp32 (test conformance/test_accuracy.py::test_accuracy[bert-base-fp16],"
        " check f1@0.999xfp32): gating is true, but the tables make it reported, not gating (f1 >= 0.999 x f1(fp32) "
        "(reported, not gating))"]
    unknown = copy.deepcopy(data)
    unknown["records"][1]["check"] = "f1@0.5xfp32"
    unknown["records"] = assign_ids([{k: v for k, v in r.items() if k != "id"} for r in unknown["records"]])
    assert any("the tables have no such gate for bert-base fp16 on ipu" in p for p in verify.problems(unknown))
    data["settings"]["tables"] = "f" * 64
    assert [p for p in verify.problems(data) if "other target tables" in p]


def failing_f1_run() -> dict:
    """The passing run with its F1 gate failed (its figure below the target, its test failed): a consistent FAIL."""
    data = passing_results()
    find(data, F1).update(value=0.5, passed=False, established=False)
    find(data, F1)["details"].update(ci95=[0.4, 0.6], ratio_ci95=[0.4, 0.6])
    fail_test(data, "test_accuracy[bert-base-fp16]", records_too=True)
    data["verdict"], data["exit_status"] = "FAIL", 1
    assert verify.problems(data) == []
    return data


def disguised(data: dict, unversioned: bool) -> dict:
    """The failed F1 gate hidden: renamed to a check no table has (``f1x``), made informational, its test passed and
    the run PASS; with ``unversioned``, the file's tables version removed too (as an older suite wrote it)."""
    data = copy.deepcopy(data)
    record = find(data, F1)
    record.update(check="f1x", gating=False)
    next(t for t in data["tests"] if t["id"] == record["test_id"]).update(outcome="passed", message="")
    for other in data["records"]:
        if other["test_id"] == record["test_id"]:
            other["outcome"] = "passed"
    data["records"] = assign_ids([{k: v for k, v in r.items() if k != "id"} for r in data["records"]])
    data["verdict"], data["exit_status"] = "PASS", 0
    if unversioned:
        del data["settings"]["tables"]
    return data


UNVERSIONED = ("records no target tables version (settings.tables): a results file written by an older suite",
               "whose targets and gating cannot be checked against this suite's tables", "re-run it with this suite")


@pytest.mark.parametrize("unversioned", [True, False], ids=["unversioned", "versioned"])
def test_a_failed_gate_renamed_and_made_informational_is_refused(unversioned, tmp_path, capsys):
    """A failing run edited to show PASS: its failed gate renamed to a check the tables do not know and made
    informational. Without a tables version the file is refused as one whose targets and gating cannot be checked;
    with this suite's version, the renamed check is refused as a gate the tables do not have. By ``report``, ``report
    compare`` (as the later run, which would otherwise be shown not worse), ``report validate`` and ``--baseline``."""
    attack = disguised(failing_f1_run(), unversioned)
    says = UNVERSIONED if unversioned else (
        "record accuracy/bert-base/fp16/-/f1x (test conformance/test_accuracy.py::test_accuracy[bert-base-fp16], check "
        "f1x): the tables have no such gate for bert-base fp16 on ipu",)
    found = verify.problems(attack)
    assert len(found) == 1 and all(w in found[0] for w in says), found  # nothing else gives the edit away
    bad = write(tmp_path, "attack.json", attack)
    failing = write(tmp_path, "failing.json", failing_f1_run())
    for args in (["report", bad], ["report", "compare", failing, bad], ["report", "validate", bad]):
        code, text = run(args, capsys)
        assert code == 4, f"{args}: exit {code}\n{text}"
        missing = [w for w in (str(bad), "inconsistent results file", *says) if w not in text]
        assert not missing, f"{args}: the message lacks {missing}:\n{text}"
        assert "conformance PASS" not in text and "not worse" not in text
    with pytest.raises(baseline.BaselineError, match="inconsistent results file"):
        baseline.load_baseline(bad, passing_results())


def test_the_tables_version_covers_the_tables_a_model_or_a_backend_ships(tmp_path, monkeypatch):
    """A plugin model's (or backend's) own gates are part of the version a results file records: editing them is
    another version."""
    from conformance.report import tables

    own = tmp_path / "accuracy.toml"
    own.write_text("[ipu.tinymlp.fp16]\nsnr_db = \">= 30\"\n")
    before = tables.tables_version()
    for seam in ("model_files", "backend_files"):
        with monkeypatch.context() as patch:
            patch.setattr(tables, seam, lambda name: [("tinymlp", own)] if name == "accuracy.toml" else [])
            first = tables.tables_version()
            own.write_text("[ipu.tinymlp.fp16]\nsnr_db = \">= 20\"\n")
            second = tables.tables_version()
            own.write_text("[ipu.tinymlp.fp16]\nsnr_db = \">= 30\"\n")
        assert len({before, first, second}) == 3, seam


def test_a_file_of_the_suites_tests_without_a_tables_version_is_refused(tmp_path, capsys):
    """The sample as an older suite wrote it, with no tables version: refused, however consistent its records are; a
    file of no suite test (a plugin's own) has no tables to be checked against and is not."""
    code, text = run(["report", "validate", SAMPLE], capsys)
    assert code == 4 and all(w in text for w in (str(SAMPLE), *UNVERSIONED)), text
    data = passing_results()
    del data["settings"]["tables"]
    assert [p for p in verify.problems(data) if UNVERSIONED[0] in p]
    for item in data["tests"]:
        item["id"] = item["id"].replace("conformance/", "plugin/")
    for item in data["records"]:
        item["test_id"] = item["test_id"].replace("conformance/", "plugin/")
    assert verify.problems(data) == []
