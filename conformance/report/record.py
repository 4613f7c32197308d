"""The results record, ``results.json``: a self-describing account of one run that a later run can be compared with.

Schema (``"schema": "ipu-conformance/results/1"``; every key is always present):

- ``created`` (ISO 8601 UTC), ``verdict`` (``"PASS"``/``"FAIL"``), ``exit_status`` (pytest's exit code, 1 as well when a
  baseline regression failed the run), ``interrupted`` (bool)
- ``machine``: platform, python, processor, cpu_count, hostname
- ``git``: commit (or null outside a checkout), dirty (bool or null)
- ``packages``: distribution name -> version (null when not installed)
- ``hardware``: name, description, precisions, versions, timing (``"measured"`` or ``"simulated"``: how the backend's
  latencies are obtained; absent from files written before it was recorded)
- ``settings``: hardware, profile, models, shard (``"i/n"`` or null), xfail_file, baseline (path or null)
- ``profile``: name, description, samples and batch_size per model
- ``tests``: one per test, sorted by node id: id, outcome (passed, failed, error, skipped, xfailed, xpassed), duration_s,
  message, xfail (null or {test_id, bucket, reason, source})
- ``records``: one per gated figure, in a fixed order: id (``kind/model/precision/scenario/check``, stable across runs),
  test_id, kind, model, precision, scenario, check, value, target, op, passed, units, gating, details, outcome (the test's)
- ``stale_xfails``: xfail entries that matched no test
- ``regressions``: findings against ``--baseline`` (id, check, baseline, value, allowed, message)
- ``plots``: {"status": "written"|"skipped"|"none", "reason": str, "files": {"<model>-<precision>": [relative paths]}}
- ``merged_from``: for a merged record, the files it was built from: path, shard, created (empty otherwise); a merged
  record of an incomplete split also has ``missing_shards`` (["3/3", ...]) and verdict FAIL
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from conformance.fileio import write_text_atomic

SCHEMA = "ipu-conformance/results/1"
RESULTS_FILE = "results.json"
PACKAGES = ("ipu-conformance", "numpy", "scipy", "ml_dtypes", "mlcommons-loadgen", "pytest", "pytest-xdist", "tabulate",
            "matplotlib", "torch")
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")

# key -> type(s) of the top-level fields and of each test and record
_TOP = {"schema": str, "created": str, "verdict": str, "exit_status": int, "interrupted": bool, "machine": dict,
        "git": dict, "packages": dict, "hardware": dict, "settings": dict, "profile": dict, "tests": list,
        "records": list, "stale_xfails": list, "regressions": list, "plots": dict, "merged_from": list}
_SETTINGS = {"hardware": str, "profile": str, "models": list}
_TEST = {"id": str, "outcome": str, "duration_s": (int, float), "message": str}
_RECORD = {"id": str, "test_id": str, "kind": str, "model": str, "precision": str, "check": str,
           "value": (int, float, type(None)), "target": (int, float, type(None)), "op": str, "passed": bool,
           "gating": bool, "units": str, "details": dict, "outcome": str}


class ResultsError(ValueError):
    """A results.json that cannot be used: unreadable, not JSON, or not of this schema."""


def machine_info() -> dict:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": _processor_name(),
        "cpu_count": os.cpu_count(),
        "hostname": socket.gethostname(),
    }


def _processor_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_info(cwd=None) -> dict:
    """Commit and dirty flag of the checkout holding the suite; nulls outside a git checkout."""
    cwd = cwd or Path(__file__).resolve().parents[2]

    def git(*args):
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").strip())
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def package_versions(names=PACKAGES) -> dict:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def build(*, settings, backend, profile, tests, records, exit_status: int, interrupted=False, shard=None,
          xfail_file=None, baseline=None, stale_xfails=(), regressions=(), plots=None, created=None) -> dict:
    """The results record of a run (see the module docstring)."""
    verdict = "PASS" if exit_status == 0 and not regressions and not interrupted else "FAIL"
    return {
        "schema": SCHEMA,
        "created": created or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "verdict": verdict,
        "exit_status": int(exit_status),
        "interrupted": bool(interrupted),
        "machine": machine_info(),
        "git": git_info(),
        "packages": package_versions(),
        "hardware": {"name": backend.name, "description": backend.description, "precisions": list(backend.precisions),
                     "versions": dict(backend.versions()), "timing": backend.timing},
        "settings": {"hardware": settings.hardware, "profile": settings.profile, "models": list(settings.models),
                     "shard": str(shard) if shard else None, "xfail_file": str(xfail_file) if xfail_file else None,
                     "baseline": str(baseline) if baseline else None},
        "profile": {"name": profile.name, "description": profile.description,
                    "samples": {m: profile.samples[m] for m in settings.models if m in profile.samples},
                    "batch_size": {m: profile.batch_size[m] for m in settings.models if m in profile.batch_size}},
        "tests": list(tests),
        "records": list(records),
        "stale_xfails": list(stale_xfails),
        "regressions": list(regressions),
        "plots": plots or {"status": "none", "reason": "no accuracy artifacts", "files": {}},
        "merged_from": [],
    }


def _json_default(value):
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _finite(value):
    """JSON has no NaN/Infinity: they are written as null (and a NaN measurement is a failed one anyway)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(results: dict) -> str:
    normal = json.loads(json.dumps(results, default=_json_default))  # numpy -> plain, before the NaN pass
    return json.dumps(_finite(normal), indent=2, sort_keys=False, allow_nan=False) + "\n"


def write(path, results: dict) -> None:
    """Validate and write atomically: a crash mid-write leaves the previous file."""
    text = dumps(results)
    validate(json.loads(text), source=str(path))
    write_text_atomic(path, text)


def validate(data, source: str = "results.json") -> dict:
    """Check the schema; a ResultsError naming the file and the first problem."""
    def need(obj, spec, where):
        if not isinstance(obj, dict):
            raise ResultsError(f"{source}: {where} is {type(obj).__name__}, expected an object")
        for key, kind in spec.items():
            if key not in obj:
                raise ResultsError(f"{source}: {where} lacks key {key!r}")
            if not isinstance(obj[key], kind) or (kind in (int, (int, float)) and isinstance(obj[key], bool)):
                names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
                raise ResultsError(f"{source}: {where}.{key} is {type(obj[key]).__name__}, expected {names}")

    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ResultsError(f"{source}: not an ipu-conformance results file (schema {found!r}, expected {SCHEMA!r})")
    need(data, _TOP, "the file")
    need(data["settings"], _SETTINGS, "settings")
    for i, test in enumerate(data["tests"]):
        need(test, _TEST, f"tests[{i}]")
        if test["outcome"] not in OUTCOMES:
            raise ResultsError(f"{source}: tests[{i}].outcome {test['outcome']!r} is not one of {OUTCOMES}")
    for i, record in enumerate(data["records"]):
        need(record, _RECORD, f"records[{i}]")
        if record["op"] not in (">=", "<="):
            raise ResultsError(f"{source}: records[{i}].op {record['op']!r}, expected '>=' or '<='")
    return data


def load(path) -> dict:
    """Read and validate a results.json; a ResultsError saying what is wrong with it."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    return validate(data, source=str(path))
