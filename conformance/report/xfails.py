"""Known failures as data: ``conformance/xfails/<hardware>.txt``.

The file holds bucket headers and one entry per line, ``<test id>  <reason>``::

    [temporarily-failing]
    test_accuracy[conformer-fp8]  SNR 2 dB short of target after the softmax change

A test id is a test's name with its parameters (``test_accuracy[bert-base-fp8]``) or a full node id
(``conformance/test_accuracy.py::test_accuracy[bert-base-fp8]``); ``*`` matches any characters, nothing else is special.
Buckets: ``temporarily-failing`` and ``permanent`` entries run as expected failures (strict in the ``full`` profile, so a
fixed failure fails the run until its entry is removed); ``unsupported`` entries are skipped with their reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

BUCKETS = ("temporarily-failing", "unsupported", "permanent")
XFAILS_DIR = Path(__file__).resolve().parent.parent / "xfails"


@dataclass(frozen=True)
class XfailEntry:
    test_id: str
    bucket: str
    reason: str
    source: str  # "file:line", for messages
    _pattern: re.Pattern = field(repr=False, compare=False, default=None)

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
        return {"test_id": self.test_id, "bucket": self.bucket, "reason": self.reason, "source": self.source}


def _compile(test_id: str) -> re.Pattern:
    return re.compile(".*".join(re.escape(part) for part in test_id.split("*")))


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
        if len(parts) < 2 or not parts[1].strip():
            raise ValueError(f"{where}: entry {parts[0]!r} has no reason; expected '<test id>  <reason>'")
        test_id, reason = parts[0], parts[1].strip()
        if test_id in seen:
            raise ValueError(f"{where}: {test_id!r} is already listed at {seen[test_id]}")
        seen[test_id] = where
        entries.append(XfailEntry(test_id, bucket, reason, where, _compile(test_id)))
    return entries


def load(path) -> list[XfailEntry]:
    """Entries of the file at ``path``; none when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return []
    return parse(path.read_text(), source=str(path))


def match(node_ids, entries: list[XfailEntry]) -> dict[str, XfailEntry]:
    """node id -> the first entry (in file order) that names it."""
    found = {}
    for node_id in node_ids:
        for entry in entries:
            if entry.matches(node_id):
                found[node_id] = entry
                break
    return found


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
