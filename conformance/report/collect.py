"""Gathers the outcome and check records of every test from its reports (``pytest_runtest_logreport``).

Works the same in a serial run and on the pytest-xdist controller: the records travel on each report's
``user_properties`` (a list of ``(key, value)`` pairs, lists after xdist's serialisation), and every phase's report carries
the whole list recorded so far, so the last phase's list is the test's complete set.
"""

from __future__ import annotations

from conformance.report.checks import RECORD_KEY

XFAIL_KEY = "conformance_xfail"
KIND_ORDER = ("reference", "accuracy", "performance", "audit")


def _message(report) -> str:
    """One line saying why a test failed or was skipped."""
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # skip: (path, lineno, reason)
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return crash.message.splitlines()[0] if crash.message else ""
    lines = [line for line in str(longrepr).splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


class Collector:
    def __init__(self):
        self._tests: dict[str, dict] = {}

    def add(self, report) -> None:
        entry = self._tests.setdefault(
            report.nodeid, {"id": report.nodeid, "outcome": None, "duration_s": 0.0, "message": "", "xfail": None, "_props": []}
        )
        entry["duration_s"] += float(getattr(report, "duration", 0.0) or 0.0)
        entry["_props"] = [tuple(p) for p in (report.user_properties or ())]
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

    def tests(self) -> list[dict]:
        """One dict per test, sorted by node id: id, outcome, duration_s, message, xfail."""
        result = []
        for node_id in sorted(self._tests):
            entry = self._tests[node_id]
            xfail = next((dict(v) for k, v in entry["_props"] if k == XFAIL_KEY), None)
            result.append({
                "id": node_id,
                "outcome": entry["outcome"] or "passed",
                "duration_s": round(entry["duration_s"], 3),
                "message": entry["message"],
                "xfail": xfail,
            })
        return result

    def records(self) -> list[dict]:
        """Every check record with its test's outcome and a stable id, in a fixed order."""
        outcomes = {t["id"]: t["outcome"] for t in self.tests()}
        records = []
        for node_id, entry in self._tests.items():
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
