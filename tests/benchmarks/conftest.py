"""Ratio reporting for benchmarks. A benchmark sets ``benchmark.group`` and
``benchmark.extra_info["role"]`` to ``"baseline"`` or ``"subject"`` (optionally ``"target"``, the ratio the issue asks
for); at the end of the run the ratio subject/baseline of median times is printed per group. Tests never assert times.

Every benchmark is marked ``slow``: ``pytest tests/`` (CI) leaves them out, ``pytest tests/benchmarks/ -m slow`` runs
them. Their fixtures build whole models and run them before the first round (11.6 minutes of ``pytest tests/`` on
the shared 2-core host even with ``--benchmark-disable``), and a timing checks nothing a test could assert."""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.slow)


def _ratios(config):
    session = getattr(config, "_benchmarksession", None)
    if session is None:
        return []
    groups: dict[str, dict[str, list]] = {}
    for bench in session.benchmarks:
        role = bench.extra_info.get("role")
        if role and bench.stats is not None and bench.group:
            groups.setdefault(bench.group, {}).setdefault(role, []).append(bench)
    rows = []
    for group, roles in sorted(groups.items()):
        for base in roles.get("baseline", []):
            for subj in roles.get("subject", []):
                ratio = subj.stats.median / base.stats.median
                target = subj.extra_info.get("target")
                rows.append((group, subj.name, base.name, ratio, target))
    return rows


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rows = _ratios(config)
    if not rows:
        return
    terminalreporter.section("benchmark ratios (subject / baseline, median times)")
    for group, subj, base, ratio, target in rows:
        goal = f"  (target <= {target}x)" if target is not None else ""
        terminalreporter.write_line(f"{group}: {subj} / {base} = {ratio:.2f}x{goal}")
