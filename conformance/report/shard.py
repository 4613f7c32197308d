"""Deterministic ``--shard i/n`` selection, so that n CI machines each run a share of one suite.

The collected node ids are sorted and dealt round-robin: test k (0-based, in sorted order) goes to shard ``k % n + 1``.
Every machine collects the same ids for the same settings, so the shards are disjoint, cover every test exactly once, and
do not depend on collection order, the machine, or the Python hash seed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SHARD_RE = re.compile(r"^\s*([0-9]+)\s*/\s*([0-9]+)\s*$")  # ASCII digits: int() reads other scripts' too


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"2/3"`` -> Shard(2, 3); a ValueError naming the value and the expected form otherwise."""
    match = _SHARD_RE.match(text or "")
    if not match:
        raise ValueError(f"--shard {text!r}: expected I/N with integers, e.g. 1/4")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"--shard {text!r}: expected 1 <= I <= N and N >= 1")
    return Shard(index, count)


def shard_of(node_ids, count: int) -> dict[str, int]:
    """Map every node id to its shard number (1..count)."""
    ordered = sorted(set(node_ids))
    return {node_id: k % count + 1 for k, node_id in enumerate(ordered)}


def split(items, shard: Shard, key=lambda item: item.nodeid):
    """``(selected, deselected)`` items for ``shard``, each list in the input order."""
    assignment = shard_of((key(item) for item in items), shard.count)
    selected, deselected = [], []
    for item in items:
        (selected if assignment[key(item)] == shard.index else deselected).append(item)
    return selected, deselected
