"""Known failures as data: ``conformance/xfails/<hardware>.txt``.

The file holds bucket headers and one entry per line::

    [temporarily-failing]
    test_accuracy[conformer-fp8]  snr_db  SNR 2 dB short of target after the softmax change
    [unsupported]
    test_performance[conformer-fp8-Server]  the streaming encoder has no server deployment

A test id is a test's name with its parameters (``test_accuracy[bert-base-fp8]``) or a full node id
(``conformance/test_accuracy.py::test_accuracy[bert-base-fp8]``); ``*`` matches any characters, nothing else is special.
Buckets: ``temporarily-failing`` and ``permanent`` entries name the checks whose failure is known (a comma list of
check names as the report shows them, ``top1_agreement@0.99xfp32``, or the metric alone, ``top1_agreement``, for
every gate on it), then the reason. Such a test is an expected failure only when the gates that fail are among the
named ones; an exception, a non-finite output, or any other gate failing is a failure. One that passes fails the run
in the profiles with ``strict_xfails`` (the release profiles), so a fixed failure's entry cannot go stale.
``unsupported`` entries are skipped with their reason (no checks).

A known failure names the tests it is known for: a test id that matches any test (``*``, ``*-*``: only wildcards and
punctuation) is refused when the file is read, and one with a wildcard that matches every collected test of a run
(of two or more) is refused then (:func:`blanket`); each names the file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from boundedio import MIB, read_text

XFAIL_LIMIT = 4 * MIB  # a hardware's known failures are a few KB

BUCKETS = ("temporarily-failing", "unsupported", "permanent")
XFAILS_DIR = Path(__file__).resolve().parent.parent / "xfails"


_CHECK = re.compile(r"[A-Za-z0-9_.@-]+")
_NAME = re.compile(r"[A-Za-z0-9]")  # a test id that names something has a letter or digit besides its wildcards


@dataclass(frozen=True)
class XfailEntry:
    test_id: str
    bucket: str
    reason: str
    source: str  # "file:line", for messages
    _pattern: Wildcard = field(repr=False, compare=False, default=None)
    checks: tuple[str, ...] = ()  # the checks whose failure is known (empty for unsupported entries)

    def names_check(self, check: str) -> bool:
        """Whether ``check`` (a record's check name, ``f1@0.99xfp32``) is one this entry names."""
        return any(check == c or check.split("@")[0] == c for c in self.checks)

    def unexplained(self, records: list[dict]) -> list[str]:
        """Why the failure that ``records`` (the test's check records) show is not this known failure: the failing
        gated checks it does not name, non-finite outputs, or no failing gate at all. Empty when it is."""
        failing = [r for r in records if r.get("gating", True) and not r.get("passed")]
        if not failing:
            return ["no gated check failed (the test failed in another way)"]
        problems = []
        for r in failing:
            reason = (r.get("details") or {}).get("reason")
            if not self.names_check(r["check"]):
                problems.append(f"{r['check']} failed, which the entry does not name")
            elif reason:
                problems.append(f"{r['check']}: {reason}")
        return problems

    @property
    def function(self) -> str:
        """The test function the entry names (``test_accuracy``), without module path or parameters."""
        return self.test_id.split("::")[-1].split("[")[0]

    @property
    def params(self) -> str:
        name = self.test_id.split("::")[-1]
        return name[name.index("[") + 1 : name.rindex("]")] if "[" in name and name.endswith("]") else ""

    def matches(self, node_id: str) -> bool:
        target = node_id if "::" in self.test_id else node_id.split("::")[-1]
        return bool(self._pattern.fullmatch(target))

    def to_dict(self) -> dict:
        return {"test_id": self.test_id, "bucket": self.bucket, "reason": self.reason, "source": self.source,
                "checks": list(self.checks)}


class Wildcard:
    """A test-id pattern where ``*`` matches any characters and nothing else is special, matched without
    backtracking: the literal parts between the stars must appear in order, the first at the start and the last at
    the end, and the leftmost place of each part is always a right one. A run of stars is one star; the time is linear
    in the lengths of the pattern and the name (one substring search per literal part), whatever the pattern."""

    __slots__ = ("parts", "starred")

    def __init__(self, pattern: str):
        self.parts = pattern.split("*")
        self.starred = len(self.parts) > 1
        if self.starred:  # empty middle parts are runs of stars: collapsed
            self.parts = [self.parts[0], *(p for p in self.parts[1:-1] if p), self.parts[-1]]

    def fullmatch(self, name: str) -> bool:
        parts = self.parts
        if not self.starred:
            return name == parts[0]
        head, tail = parts[0], parts[-1]
        if len(head) + len(tail) > len(name) or not name.startswith(head) or not name.endswith(tail):
            return False
        at, end = len(head), len(name) - len(tail)
        for part in parts[1:-1]:
            found = name.find(part, at, end)
            if found < 0:
                return False
            at = found + len(part)
        return True


def _compile(test_id: str) -> Wildcard:
    return Wildcard(test_id)


def xfail_file(hardware: str) -> Path:
    return XFAILS_DIR / f"{hardware}.txt"


def parse(text: str, source: str = "<xfails>") -> list[XfailEntry]:
    """Entries of an xfail file; a ValueError naming ``source:line`` for a malformed line."""
    entries: list[XfailEntry] = []
    seen: dict[str, str] = {}
    bucket = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"{source}:{lineno}"
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            name = line.strip("[]").strip()
            if not line.endswith("]") or name not in BUCKETS:
                raise ValueError(f"{where}: unknown bucket {line!r}; expected one of: {', '.join(f'[{b}]' for b in BUCKETS)}")
            bucket = name
            continue
        parts = line.split(None, 1)
        if bucket is None:
            raise ValueError(f"{where}: entry {parts[0]!r} before any bucket header; start with e.g. [temporarily-failing]")
        checks: tuple[str, ...] = ()
        if bucket != "unsupported":
            parts = line.split(None, 2)
            if len(parts) < 3 or not parts[2].strip():
                raise ValueError(f"{where}: entry {parts[0]!r} needs the checks expected to fail and a reason; expected "
                                 "'<test id>  <check>[,<check>...]  <reason>', e.g. "
                                 "'test_accuracy[resnet50-fp8]  top1_agreement  <why>'")
            checks = tuple(parts[1].split(","))
            bad = [c for c in checks if not _CHECK.fullmatch(c)]
            if bad:
                raise ValueError(f"{where}: entry {parts[0]!r}: {bad[0]!r} is not a check name (letters, digits, _ . @ -;"
                                 " comma-separated, no spaces), e.g. top1_agreement or f1@0.99xfp32")
            parts = [parts[0], parts[2]]
        elif len(parts) < 2 or not parts[1].strip():
            raise ValueError(f"{where}: entry {parts[0]!r} has no reason; expected '<test id>  <reason>'")
        test_id, reason = parts[0], parts[1].strip()
        if not _NAME.search(test_id.replace("*", "")):
            raise ValueError(f"{where}: test id {test_id!r} matches every test (nothing but wildcards and "
                             "punctuation); a known failure names the tests it is known for, e.g. test_accuracy[resnet50-fp8] or "
                             "test_performance[resnet50-fp8-*]")
        if test_id in seen:
            raise ValueError(f"{where}: {test_id!r} is already listed at {seen[test_id]}")
        seen[test_id] = where
        entries.append(XfailEntry(test_id, bucket, reason, where, _compile(test_id), checks))
    return entries


def load(path) -> list[XfailEntry]:
    """Entries of the file at ``path``; none when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return []
    return parse(read_text(path, "a known-failures file", XFAIL_LIMIT), source=str(path))


def match(node_ids, entries: list[XfailEntry]) -> dict[str, XfailEntry]:
    """node id -> the first entry (in file order) that names it."""
    found = {}
    for node_id in node_ids:
        for entry in entries:
            if entry.matches(node_id):
                found[node_id] = entry
                break
    return found


def blanket(entries: list[XfailEntry], node_ids) -> None:
    """A ValueError naming the file and line of the first entry with a wildcard that matches every one of
    ``node_ids`` (two or more: the whole collection of a run), which would waive or skip the whole run."""
    node_ids = list(node_ids)
    if len(node_ids) < 2:
        return
    for entry in entries:
        if "*" in entry.test_id and all(entry.matches(node_id) for node_id in node_ids):
            raise ValueError(f"{entry.source}: test id {entry.test_id!r} matches every one of the {len(node_ids)} "
                             f"collected tests, so the run would judge nothing; a known failure names the tests it is "
                             f"known for")


def stale(entries: list[XfailEntry], items, matched: dict[str, XfailEntry], models, all_models,
          whole_suite: bool = False, precisions=(), all_precisions=()) -> list[XfailEntry]:
    """Entries that match no collected test although the run covers them.

    ``items`` are (node id, function name) pairs of the whole collection. An entry is out of this run's scope (and so not
    stale) when its parameters name a model the run did not select, or a precision (of ``all_precisions``, the
    hardware's) that the run did not select (``precisions``), or when no collected test has its function name and the
    run did not collect the whole suite (``whole_suite``: then a missing function means a renamed or removed test).
    """
    used = {id(entry) for entry in matched.values()}
    functions = {function for _, function in items}
    result = []
    for entry in entries:
        if id(entry) in used:
            continue
        if not whole_suite and not any(_compile(entry.function).fullmatch(function) for function in functions):
            continue
        named = [m for m in all_models if entry.params == m or entry.params.startswith(m + "-")]
        if named and not any(m in models for m in named):
            continue
        if named and _names_unselected_precision(entry.params[len(max(named, key=len)) + 1:], precisions,
                                                 all_precisions):
            continue
        result.append(entry)
    return result


def _names_unselected_precision(rest: str, precisions, all_precisions) -> bool:
    """Whether parameters ``rest`` (after the model) start with a precision of the hardware that the run deselected;
    the longest name wins (``fp16-half-partials`` over ``fp16``)."""
    named = [p for p in all_precisions if rest == p or rest.startswith(p + "-")]
    return bool(named) and max(named, key=len) not in precisions
