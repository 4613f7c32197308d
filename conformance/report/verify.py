"""A results.json is not believed, it is checked: every verdict it states must follow from its own figures.

:func:`problems` recomputes

- each record's ``passed`` from its ``value``, ``op`` and ``target`` (as ``record_check`` does: a missing value or
  target does not pass; a value within float rounding of its target may go either way). An audit (TEST01, TEST04) is
  decided by more than its figure (MLCommons' scripts, SUT errors, the MLPerf fallback for systems that are not
  deterministic): it may fail beyond its comparison, and may pass against it only where its record says why (not
  established, the scripts' TEST PASS, the fallback met);
- each record's id from its fields (:func:`conformance.report.collect.assign_ids`), so that a duplicated record, or a
  record whose id was changed, is found; each record's test and the test's outcome;
- each gate waived as a known failure (XFAIL): its test carries a known-failure entry that names the check;
- the run's verdict and exit status from its tests, records and regressions (:func:`conformance.report.record.judge`,
  the code that computed them when the run was written).

:func:`check` refuses a file with any disagreement (:class:`InconsistentResults`, naming the file, each record by id,
test and check, and what disagrees); ``ipu-conformance report`` (render, merge, ``compare``, ``validate``) and
``--baseline`` read files through :func:`load`, so an edited file is refused (exit 4), never rendered or compared as
PASS.
"""

from __future__ import annotations

import json
import math

from conformance.report import record as results_record
from conformance.report.collect import assign_ids
from conformance.report.xfails import XfailEntry
from conformance.targets import compare

SHOWN = 6  # problems named in the message; the count says how many more there are
ROUNDING = 1e-6  # relative: a figure this close to its target may have been judged in float32
TEST_PASS = "TEST PASS"  # what MLCommons' verification scripts print for a passing audit


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
    """Whether an audit record that passes against its figure says why: not established (shown PASS*), MLCommons'
    scripts all saying TEST PASS, or TEST01's MLPerf fallback met."""
    details = record.get("details") or {}
    official = details.get("official")
    fallback = details.get("accuracy_fallback")
    return (record.get("established") is False
            or (isinstance(official, dict) and bool(official)
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
        problem = record_problem(record)
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
    if results["interrupted"] and results["exit_status"] != 2:
        run.append(f"interrupted, but exit status {results['exit_status']} (an interrupted run exits 2)")
    return run + found


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
