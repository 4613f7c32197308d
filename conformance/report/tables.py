"""A record's target and gating are the suite's, not the file's: recomputed from the target tables.

A results file records the version of the tables its run was judged with (``settings.tables``: the SHA-256 of the
accuracy and performance target files, the backends' and models' own included; :func:`tables_version`). Each record
of one of the suite's tests (a test id under ``conformance/test_``) has its gate looked up by the file's hardware and
the record's model, precision, scenario and check (a model the tables do not name is an imported graph, judged by the
graphs' gates), and its ``gating``, ``op`` and ``target`` must be the tables': an accuracy ratio gate's target is its ratio times the figure it is relative to (``details.<of>_value``), a performance record's
the scenario's target (the Server latency bound for the Server's p99), an audit's its fixed comparison (TEST04's bound
follows from a measured score, so only its ``op`` and ``gating`` are checked).

A record whose gate these tables do not have is refused (a check renamed to one no table knows would otherwise escape
every comparison). A file of another tables version is not checked against these tables, it is refused as such (its
gates may have moved since); so is a file that records no version (written by an older suite, or with the version
removed): neither its targets nor its gating can be checked, and nothing read from the file stands in for them. Such
a file is re-run with this suite, or read with the suite of its commit.
"""

from __future__ import annotations

import hashlib
import math
from functools import lru_cache
from pathlib import Path

from conformance.targets import backend_files, model_files
from conformance.targets.accuracy import ACCURACY_FILE, GRAPH_CASE, load_targets
from conformance.targets.performance import PERFORMANCE_FILE, SCENARIO_CHECKS, load_performance_targets

SUITE_TESTS = "conformance/test_"  # node ids of the suite's own tests
TOLERANCE = 1e-9  # relative: a target recomputed from the same tables in float64


def _table_files() -> list[Path]:
    files = [ACCURACY_FILE, PERFORMANCE_FILE]
    for name in (ACCURACY_FILE.name, PERFORMANCE_FILE.name):
        files += [path for _, path in backend_files(name)] + [path for _, path in model_files(name)]
    return files


def tables_version() -> str:
    """SHA-256 over the target tables (names and bytes, in order): what ``settings.tables`` records."""
    h = hashlib.sha256()
    for path in _table_files():
        h.update(f"{path.name}|{path.stat().st_size}|".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@lru_cache(maxsize=4)
def _accuracy_gates(version: str) -> dict:
    return {(g.hardware, g.model, g.precision, g.check): g for g in load_targets()}


@lru_cache(maxsize=4)
def _performance(version: str):
    targets = load_performance_targets()
    return {(t.hardware, t.model, t.precision, t.scenario): t for t in targets.targets}, targets.models


def _name(record: dict) -> str:
    return f"record {record.get('id')} (test {record.get('test_id')}, check {record.get('check')})"


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _expected(record: dict, hardware: str, version: str) -> tuple[str, str, bool, float | None, bool] | None:
    """(what the tables call it, op, gating, target, whether the target is known) of the record's gate; None when the
    tables have no such gate."""
    kind, model, precision, check = record.get("kind"), record.get("model"), record.get("precision"), record.get("check")
    scenario = record.get("scenario")
    if check == "error" or (kind == "audit" and str(check).endswith("_error")):  # a test that raised: no table's gate
        return "errors <= 0 (a test that raised)", "<=", True, 0.0, True
    if kind == "accuracy":
        gates = _accuracy_gates(version)
        gate = gates.get((hardware, model, precision, check))
        if gate is None and not any(key[1] == model for key in gates):  # an imported graph: the graphs' gates
            gate = gates.get((hardware, GRAPH_CASE, precision, check))
        if gate is None:
            return None
        if gate.of is None:
            return gate.describe(), gate.op, gate.gating, gate.target(), True
        base = (record.get("details") or {}).get(f"{gate.of}_value")
        return gate.describe(), gate.op, gate.gating, gate.target(base) if _number(base) else None, True
    if kind in ("performance", "audit"):
        targets, models = _performance(version)
        found = targets.get((hardware, model, precision, scenario))
        if found is None:
            return None
        what = f"{model} {precision} {scenario} on {hardware}"
        main, _, main_op = SCENARIO_CHECKS[scenario]
        if kind == "audit":
            if check == "TEST01":
                return f"TEST01 of {what}", ">=", True, 1.0, True
            if check == "TEST04":
                return f"TEST04 of {what}", "<=", True, None, False
            return None
        if check == main:
            bound = models[model].server_latency_ms if scenario == "Server" else found.target
            return f"{main} {main_op} {bound:g} ({what})", main_op, True, float(bound), True
        if check == "max_valid_server_qps" and scenario == "Server":
            return f"max_valid_server_qps >= {found.target:g} (reported)", ">=", False, float(found.target), True
        if check == "sut_errors":
            return "sut_errors <= 0", "<=", True, 0.0, True
        if check == "loadgen_valid":
            return "loadgen_valid >= 1", ">=", True, 1.0, True
    return None


def problems(results: dict) -> list[str]:
    """Every record of the suite's tests whose target or gating is not the tables' (see the module docstring)."""
    suite = [r for r in results["records"] if str(r.get("test_id", "")).startswith(SUITE_TESTS)]
    if not suite:
        return []
    settings = results["settings"]
    recorded = settings.get("tables")
    current = tables_version()
    if recorded is None:
        return [f"records no target tables version (settings.tables): a results file written by an older suite (or "
                f"with its version removed), whose targets and gating cannot be checked against this suite's tables "
                f"(version {current[:12]}); re-run it with this suite"]
    if recorded != current:
        return [f"judged with other target tables (version {str(recorded)[:12]}, this suite's is {current[:12]}): "
                f"a results file of another table version, whose targets and gating cannot be checked against these "
                f"tables; re-run it with this suite (or use the suite of its commit)"]
    hardware = settings.get("hardware")
    found = []
    for record in suite:
        expected = _expected(record, hardware, current)
        if expected is None:
            found.append(f"{_name(record)}: the tables have no such gate for {record.get('model')} "
                         f"{record.get('precision')}{' ' + record['scenario'] if record.get('scenario') else ''} "
                         f"on {hardware}")
            continue
        what, op, gating, target, known = expected
        if record.get("gating") is not gating:
            found.append(f"{_name(record)}: gating is {str(record.get('gating')).lower()}, but the tables make it "
                         f"{'a gate' if gating else 'reported, not gating'} ({what})")
        if record.get("op") != op:
            found.append(f"{_name(record)}: op {record.get('op')!r}, but the tables' is {op!r} ({what})")
        value = record.get("target")
        if known and not (value is None and target is None) and not (
                _number(value) and target is not None and math.isclose(value, target, rel_tol=TOLERANCE)):
            shown = "null" if target is None else f"{target:g}"
            found.append(f"{_name(record)}: target {value}, but the tables give {shown} ({what})")
    return found
