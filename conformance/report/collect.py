"""Gathers the outcome and check records of every test from its reports (``pytest_runtest_logreport``).

Works the same in a serial run and on the pytest-xdist controller: the records travel on each report's
``user_properties`` (a list of ``(key, value)`` pairs, lists after xdist's serialisation), and every phase's report carries
the whole list recorded so far, so the last phase's list is the test's complete set. The suite's own entries (check
records, known-failure entries) are JSON text there (see :func:`properties`), so that ``--junitxml`` shows them as
JSON rather than Python reprs.
"""

from __future__ import annotations

import json

from conformance.report.checks import RECORD_KEY
from conformance.report.render import NOT_ESTABLISHED
from conformance.report.render import verdict as check_verdict

XFAIL_KEY = "conformance_xfail"
SHARED_DETAILS_KEY = "conformance_shared_details"  # the details every record of a test holds, written once
KIND_ORDER = ("reference", "accuracy", "performance", "audit")
_PROGRESS_VERDICT = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "skipped", "xfailed": "XFAIL",
                     "xpassed": "XPASS"}


def _message(report) -> str:
    """Why a test failed or was skipped, whole, as the terminal shows it: the failing gate, value and target, the
    diagnosis and the reproduce command of a conformance failure (``Failed: `` dropped); an unexpected exception's
    type and message."""
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # skip: (path, lineno, reason)
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return crash.message.removeprefix("Failed: ").rstrip()
    text = str(longrepr).strip("\n")
    return text.removeprefix("Failed: ")


def encode_properties(user_properties) -> list[tuple]:
    """A test's user properties as its reports carry them: the suite's records and known-failure entries as JSON text,
    and the details its records share (a test's checks usually describe one run) written once, under
    ``SHARED_DETAILS_KEY`` before the records, instead of in every record. :func:`properties` puts them back."""
    items = list(user_properties or ())
    records = [value for key, value in items if key == RECORD_KEY and isinstance(value, dict)]
    shared = {}
    if records:
        first = records[0].get("details") or {}
        shared = {k: v for k, v in first.items()
                  if all(k in (r.get("details") or {}) and r["details"][k] == v for r in records[1:])}
    out = [(SHARED_DETAILS_KEY, json.dumps(shared, sort_keys=True))] if shared else []
    for key, value in items:
        if key == RECORD_KEY and isinstance(value, dict) and shared:
            value = {**value, "details": {k: v for k, v in (value.get("details") or {}).items() if k not in shared}}
        if key in (RECORD_KEY, XFAIL_KEY) and not isinstance(value, str):
            value = json.dumps(value, sort_keys=True)
        out.append((key, value))
    return out


def junit_properties(user_properties) -> list[tuple]:
    """What ``--junitxml`` shows of a finished test: each record as one line (its figure, bound and verdict), the
    scalar details its records share once, and its known-failure entry; everything else is in results.json."""
    out = []
    for key, value in user_properties or ():
        if key == RECORD_KEY:
            value = record_line(json.loads(value) if isinstance(value, str) else value)
        elif key == SHARED_DETAILS_KEY:
            shared = json.loads(value) if isinstance(value, str) else value
            value = json.dumps({k: v for k, v in shared.items() if v is None or isinstance(v, (bool, int, float, str))},
                               sort_keys=True)
        out.append((key, value))
    return out


def record_line(record: dict) -> str:
    """``<model> <precision> [<scenario>] <check>: <value> <op> <target> <units>, <verdict>`` of a record."""
    where = " ".join(str(record.get(k)) for k in ("model", "precision", "scenario") if record.get(k))
    units = f" {record['units']}" if record.get("units") else ""
    return (f"{where} {record.get('check')}: {record.get('value')} {record.get('op')} {record.get('target')}{units}, "
            f"{check_verdict(record)}")


def properties(report) -> list[tuple]:
    """The report's user properties, the suite's records (with the details their test's records share) and
    known-failure entries decoded from JSON."""
    result, shared = [], {}
    for key, value in report.user_properties or ():
        if key == SHARED_DETAILS_KEY:
            shared = json.loads(value) if isinstance(value, str) else dict(value)
            continue
        if key in (RECORD_KEY, XFAIL_KEY) and isinstance(value, str):
            value = json.loads(value)
        if key == RECORD_KEY and shared:
            value = {**value, "details": {**shared, **(value.get("details") or {})}}
        result.append((key, value))
    return result


class Collector:
    def __init__(self):
        self._tests: dict[str, dict] = {}

    def add(self, report) -> None:
        entry = self._tests.setdefault(
            report.nodeid, {"id": report.nodeid, "outcome": None, "duration_s": 0.0, "message": "", "xfail": None, "_props": []}
        )
        entry["duration_s"] += float(getattr(report, "duration", 0.0) or 0.0)
        entry["_props"] = properties(report)
        outcome = _phase_outcome(report)
        if outcome is None:
            return
        if report.when == "teardown" and entry["outcome"] not in (None, "passed"):
            return  # an error in teardown after a failure: the failure is the story
        entry["outcome"] = outcome
        if outcome in ("failed", "error", "skipped"):
            entry["message"] = _message(report)
        elif outcome in ("xfailed", "xpassed"):
            entry["message"] = str(getattr(report, "wasxfail", "") or "")

    def started(self) -> bool:
        """Whether any test began (reported a phase), finished or not."""
        return bool(self._tests)

    def tests(self) -> list[dict]:
        """One dict per test, sorted by node id: id, outcome, duration_s, message, xfail."""
        result = []
        for node_id in sorted(self._tests):
            entry = self._tests[node_id]
            if entry["outcome"] is None:  # set up but never finished: the test the run was interrupted in
                continue
            xfail = next((dict(v) for k, v in entry["_props"] if k == XFAIL_KEY), None)
            result.append({
                "id": node_id,
                "outcome": entry["outcome"],
                "duration_s": round(entry["duration_s"], 3),
                "message": entry["message"],
                "xfail": xfail,
            })
        return result

    def progress(self, node_id: str) -> str:
        """A finished test in one line: model, precision, scenario or kind, samples, elapsed time, the verdict as the
        report gives it, and for a failure or skip its whole reason (its further lines indented below)."""
        entry = self._tests.get(node_id)
        if entry is None or entry["outcome"] is None:
            return ""
        records = [dict(v) for k, v in entry["_props"] if k == RECORD_KEY]
        verdict = _PROGRESS_VERDICT.get(entry["outcome"], entry["outcome"].upper())
        if verdict == "PASS" and any(check_verdict(r) == NOT_ESTABLISHED for r in records):
            verdict = NOT_ESTABLISHED  # as the report shows its gates: an informational check never makes it PASS*
        name = node_id.split("::")[-1]
        parts = []
        if records:
            first = records[0]
            name = f"{first.get('model')} {first.get('precision')} {first.get('scenario') or first.get('kind')}"
            if first.get("kind") == "audit":
                name += f" {first.get('check')}"
            details = first.get("details") or {}
            samples = details.get("samples", details.get("query_count"))
            if isinstance(samples, int):
                parts.append(f"{samples} {'samples' if 'samples' in details else 'queries'}")
        parts.append(f"{entry['duration_s']:.1f} s")
        line = f"{name}: {', '.join(parts)}, {verdict}"
        if entry["outcome"] not in ("skipped", "failed", "error") or not entry["message"].strip():
            return line
        first, *rest = entry["message"].strip("\n").splitlines()  # the whole reason: its first line, then the others
        return "\n".join([f"{line}: {first}", *(f"    {text}" for text in rest)])

    def records(self) -> list[dict]:
        """Every check record with its test's outcome and a stable id, in a fixed order."""
        outcomes = {t["id"]: t["outcome"] for t in self.tests()}
        records = []
        for node_id, entry in self._tests.items():
            if node_id not in outcomes:
                continue
            for key, value in entry["_props"]:
                if key == RECORD_KEY:
                    records.append({**dict(value), "outcome": outcomes[node_id]})
        return assign_ids(records)


def _phase_outcome(report) -> str | None:
    wasxfail = hasattr(report, "wasxfail")
    if report.when == "setup":
        if report.failed:
            return "error"
        if report.skipped:
            return "xfailed" if wasxfail else "skipped"
        return None
    if report.when == "call":
        if report.failed:
            return "failed"
        if report.skipped:
            return "xfailed" if wasxfail else "skipped"
        return "xpassed" if wasxfail else "passed"
    return "error" if report.failed else None


def record_key(record: dict) -> tuple:
    kind = record.get("kind", "")
    rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
    return (record.get("model", ""), record.get("precision", ""), rank, kind, record.get("scenario") or "",
            record.get("check", ""), record.get("test_id", ""))


def assign_ids(records: list[dict]) -> list[dict]:
    """Sort records and give each a stable id ``kind/model/precision/scenario/check`` (``#2`` ... for repeats).

    The id leaves out file paths and test names, so a baseline from an earlier version of the suite still lines up.
    """
    records = sorted(records, key=record_key)
    counts: dict[str, int] = {}
    for record in records:
        base = "/".join([record.get("kind", ""), record.get("model", ""), record.get("precision", ""),
                         record.get("scenario") or "-", record.get("check", "")])
        counts[base] = counts.get(base, 0) + 1
        record["id"] = base if counts[base] == 1 else f"{base}#{counts[base]}"
    return records
