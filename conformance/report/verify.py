"""A results.json is not believed, it is checked: every verdict it states must follow from its own figures.

:func:`problems` recomputes

- each record's ``passed`` from its ``value``, ``op`` and ``target`` (as ``record_check`` does: a missing value or
  target does not pass; a value within float rounding of its target may go either way). An audit (TEST01, TEST04) is
  decided by more than its figure (MLCommons' scripts, SUT errors, the MLPerf fallback for systems that are not
  deterministic): it may fail beyond its comparison, and may pass against it only where its record says why (the
  scripts' TEST PASS, the fallback met; a short profile's "not established" only ever spares a performance half that
  its figure does not measure, so it explains no pass);
- each accuracy record's ``established`` (PASS against PASS*): False where its label metric's FP32 score was at or
  below the floor (``details.label_floor``), else, where the record holds the 95% interval of its ratio
  (``details.ratio_ci95``), whether the interval's bound clears the ratio its check names (``f1@0.99xfp32``);
- each record's id from its fields (:func:`conformance.report.collect.assign_ids`), so that a duplicated record, or a
  record whose id was changed, is found; each record's test and the test's outcome;
- each record of the suite's tests' ``target``, ``op`` and ``gating`` from the suite's target tables, by the file's
  tables version (:mod:`conformance.report.tables`): a check the tables do not have is refused, and so is a file of
  another version or of none (an older suite's), whose targets and gating cannot be checked;
- each gate waived as a known failure (XFAIL): its test carries a known-failure entry that names the check;
- the run's verdict and exit status from its tests, records and regressions (:func:`conformance.report.record.judge`,
  the code that computed them when the run was written);
- a merged file (``merged_from``): the shards it names are distinct and make a whole split, or the ones missing are
  listed in ``missing_shards``; the merged file is itself no shard.

:func:`check` refuses a file with any disagreement (:class:`InconsistentResults`, naming the file, each record by id,
test and check, and what disagrees); ``ipu-conformance report`` (render, merge, ``compare``, ``validate``) and
``--baseline`` read files through :func:`load`, so an edited file is refused (exit 4), never rendered or compared as
PASS.
"""

from __future__ import annotations

import json
import math
import re

from conformance.report import record as results_record
from conformance.report import tables
from conformance.report.collect import assign_ids
from conformance.report.shard import parse_shard
from conformance.report.xfails import XfailEntry
from conformance.targets import compare

SHOWN = 6  # problems named in the message; the count says how many more there are
ROUNDING = 1e-6  # relative: a figure this close to its target may have been judged in float32
TEST_PASS = "TEST PASS"  # what MLCommons' verification scripts print for a passing audit
RATIO_CHECK = re.compile(r"@(?P<ratio>[0-9.eE+-]+)x[^@]+$")  # a relative gate's check name: f1@0.99xfp32


class InconsistentResults(ValueError):
    """A results.json whose stated verdicts do not follow from its own records and tests: edited, or not written by
    this suite."""


def _holds(value, op: str, target) -> bool | None:
    """``value op target`` as the suite judges a figure; None for an operator it does not know."""
    if value is None or target is None:
        return False
    try:
        return compare(value, op, target)
    except ValueError:
        return None


def _borderline(value, target) -> bool:
    return (isinstance(value, (int, float)) and isinstance(target, (int, float))
            and math.isclose(value, target, rel_tol=ROUNDING))


def _audit_pass_explained(record: dict) -> bool:
    """Whether an audit record that passes against its figure says why: MLCommons' scripts all saying TEST PASS, or
    TEST01's MLPerf fallback met."""
    details = record.get("details") or {}
    official = details.get("official")
    fallback = details.get("accuracy_fallback")
    return ((isinstance(official, dict) and bool(official)
             and all(isinstance(v, str) and v.startswith(TEST_PASS) for v in official.values()))
            or (isinstance(fallback, dict) and fallback.get("passed") is True))


def _fmt(value) -> str:
    return "null" if value is None else json.dumps(value)


def _name(record: dict) -> str:
    return f"record {record.get('id')} (test {record.get('test_id')}, check {record.get('check')})"


def record_problem(record: dict) -> str | None:
    """What disagrees in one record's own verdict (``passed`` against ``value op target``); None when nothing does."""
    value, op, target, passed = record.get("value"), record.get("op"), record.get("target"), record.get("passed")
    holds = _holds(value, op, target)
    if holds is None:
        return f"{_name(record)}: op {op!r} is not a comparison the suite knows"
    if passed == holds or (value is not None and target is not None and _borderline(value, target)):
        return None
    if record.get("kind") == "audit" and (not passed or _audit_pass_explained(record)):
        return None  # an audit is decided by more than its figure (module docstring)
    if value is None or target is None:
        missing = "value" if value is None else "target"
        return f"{_name(record)}: passed is {_fmt(passed)}, but its {missing} is null (not measured: not passed)"
    return (f"{_name(record)}: passed is {_fmt(passed)}, but value {_fmt(value)} {op} target {_fmt(target)} is "
            f"{_fmt(holds)}")


def _expected_established(record: dict) -> tuple[bool, bool | None]:
    """(whether the record says enough to recompute it, the ``established`` its details give)."""
    details = record.get("details") or {}
    floor = details.get("label_floor")
    if isinstance(floor, dict) and "floor" in floor:
        return True, False  # recorded only for a label gate whose FP32 score is at or below its floor
    interval = details.get("ratio_ci95")
    match = RATIO_CHECK.search(str(record.get("check", "")))
    if not (isinstance(interval, list) and len(interval) == 2 and match):
        return False, None
    low, high = interval
    bound = low if record.get("op") == ">=" else high
    if bound is None:  # an interval that could not be computed (NaN, written as null) establishes nothing
        return True, None
    try:
        ratio = float(match.group("ratio"))
    except ValueError:
        return False, None
    if not isinstance(bound, (int, float)) or isinstance(bound, bool) or _borderline(bound, ratio):
        return False, None
    units, needed = details.get("units"), details.get("units_to_establish")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (units, needed)) and units < needed:
        return True, False  # fewer units than n agreeing ones take establish no ratio, whatever the interval says
    return True, _holds(bound, record.get("op"), ratio)


def established_problem(record: dict) -> str | None:
    """What disagrees in an accuracy record's ``established`` (PASS shown for PASS*, or the reverse)."""
    if record.get("kind") != "accuracy":
        return None
    known, expected = _expected_established(record)
    found = record.get("established")
    if not known or found == expected:
        return None
    details = record.get("details") or {}
    if isinstance(details.get("label_floor"), dict):
        why = (f"its FP32 score {_fmt(details['label_floor'].get('fp32'))} is at or below the floor "
               f"{_fmt(details['label_floor'].get('floor'))} (details.label_floor): not established")
    else:
        why = (f"its ratio's 95% interval {_fmt(details.get('ratio_ci95'))} against the ratio of check "
               f"{record.get('check')} gives {_fmt(expected)}")
    return f"{_name(record)}: established is {_fmt(found)}, but {why}"


def _merge_problems(results: dict) -> list[str]:
    """A merged file's shards: distinct, one split, complete (or the missing ones listed); itself no shard."""
    sources = results.get("merged_from") or []
    if not sources:
        return []
    found = []
    if results["settings"].get("shard"):
        found.append(f"merged from {len(sources)} file(s), but settings.shard is {results['settings']['shard']!r} "
                     f"(a merged file is the whole run)")
    shards = [s.get("shard") for s in sources]
    if not any(shards):
        return found
    try:
        parsed = [parse_shard(s) for s in shards]
    except (TypeError, ValueError):
        return found + [f"merged_from names shards {shards}, which are not parts of one split"]
    counts = {p.count for p in parsed}
    indices = [p.index for p in parsed]
    if len(counts) != 1:
        return found + [f"merged_from names shards {shards}, which are not parts of one split"]
    if len(set(indices)) != len(indices):
        found.append(f"merged_from names a shard twice ({shards})")
    count = counts.pop()
    missing = [f"{i}/{count}" for i in range(1, count + 1) if i not in indices]
    listed = list(results.get("missing_shards") or [])
    if missing != listed:
        found.append(f"merged from shards {', '.join(sorted(set(shards)))} of {count}: "
                     f"{', '.join(missing) or 'none'} missing, but missing_shards lists {listed or 'none'}")
    return found


def _waiver_problem(record: dict, test: dict) -> str | None:
    """A gate shown XFAIL (failed, its test an expected failure) must be one its test's known-failure entry names."""
    if not record.get("gating", True) or record.get("passed") or record.get("outcome") != "xfailed":
        return None
    entry = test.get("xfail")
    if not entry:
        return f"{_name(record)}: waived as a known failure (XFAIL), but its test has no known-failure entry"
    if entry.get("bucket") == "unsupported":
        return f"{_name(record)}: waived as a known failure (XFAIL) by an [unsupported] entry, which waives no gate"
    if "checks" in entry:  # files written before entries named their checks cannot say
        known = XfailEntry(entry.get("test_id", ""), entry.get("bucket", ""), entry.get("reason", ""),
                           entry.get("source", ""), checks=tuple(entry.get("checks") or ()))
        if not known.names_check(str(record.get("check"))):
            return (f"{_name(record)}: waived as a known failure (XFAIL), but the entry {known.test_id} "
                    f"({known.source}) names {', '.join(known.checks) or 'no check'}")
    return None


def _record_ids(records: list[dict]) -> list[str]:
    """The id each record's fields give it (in the file's order), as the run gives them."""
    copies = [{**{k: v for k, v in r.items() if k != "id"}, "_index": i} for i, r in enumerate(records)]
    expected = [""] * len(records)
    for copy in assign_ids(copies):
        expected[copy["_index"]] = copy["id"]
    return expected


def problems(results: dict) -> list[str]:
    """Every disagreement between what ``results`` (a results record valid against the schema) states and what
    follows from its own tests, records and regressions; empty for a consistent record."""
    found: list[str] = []
    tests = results["tests"]
    by_test: dict[str, dict] = {}
    for test in tests:
        if test["id"] in by_test:
            found.append(f"test {test['id']} is listed twice")
        by_test[test["id"]] = test

    records = results["records"]
    first_of: dict[str, dict] = {}
    seen: dict[str, dict] = {}
    for record, expected_id in zip(records, _record_ids(records)):
        rid = record.get("id")
        content = json.dumps({k: v for k, v in record.items() if k != "id"}, sort_keys=True)
        if content in seen:
            found.append(f"{_name(record)}: a copy of record {seen[content].get('id')} (the same test, check and "
                         f"figures twice)")
        elif rid in first_of:
            found.append(f"{_name(record)}: the id of another record too")
        elif rid != expected_id:
            found.append(f"{_name(record)}: its fields give it the id {expected_id}")
        seen.setdefault(content, record)
        first_of.setdefault(rid, record)
        for problem in (record_problem(record), established_problem(record)):
            if problem:
                found.append(problem)
        test = by_test.get(record.get("test_id"))
        if test is None:
            found.append(f"{_name(record)}: its test is not among the file's tests")
            continue
        if record.get("outcome") != test["outcome"]:
            found.append(f"{_name(record)}: outcome {record.get('outcome')!r}, but its test's is {test['outcome']!r}")
        problem = _waiver_problem(record, test)
        if problem:
            found.append(problem)

    run: list[str] = []  # the run's own verdict first: what a reader of the file sees first
    judgement = results_record.judgement_of(results)
    if (results["verdict"], results["exit_status"]) != (judgement.verdict, judgement.exit_status):
        why = f" ({'; '.join(judgement.reasons)})" if judgement.reasons else ""
        run.append(f"verdict {results['verdict']} with exit status {results['exit_status']}, but its tests, "
                   f"records and regressions give {judgement.verdict} with exit status {judgement.exit_status}{why}")
    selection = results["settings"].get("selection")
    skipped = sum(t["outcome"] == "skipped" for t in tests)
    if selection and selection.get("skipped") != skipped:
        run.append(f"settings.selection.skipped is {selection.get('skipped')}, but {skipped} of its tests were skipped")
    if results["interrupted"] and results["exit_status"] != 2:
        run.append(f"interrupted, but exit status {results['exit_status']} (an interrupted run exits 2)")
    return run + _merge_problems(results) + tables.problems(results) + found


def describe(source: str, found: list[str]) -> str:
    more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return (f"{source}: inconsistent results file (edited, or not written by this suite): {len(found)} problem(s): "
            + "; ".join(found[:SHOWN]) + more)


def check(results: dict, source: str = "results.json") -> dict:
    """``results`` when what it states follows from itself; an :class:`InconsistentResults` naming ``source`` and
    each disagreement otherwise."""
    found = problems(results)
    if found:
        raise InconsistentResults(describe(source, found))
    return results


def load(path) -> dict:
    """Read, validate against the schema (:func:`conformance.report.record.load`: a ResultsError) and check a
    results.json (an :class:`InconsistentResults`)."""
    return check(results_record.load(path), str(path))
