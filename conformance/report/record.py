"""The results record, ``results.json``: a self-describing account of one run that a later run can be compared with.

Schema (``"schema": "ipu-conformance/results/1"``; every key is always present):

- ``created`` (ISO 8601 UTC), ``verdict`` (``"PASS"``/``"FAIL"``/``"NO VERDICT"``), ``exit_status`` (pytest's exit code,
  1 as well when a baseline regression failed the run, 5 for NO VERDICT), ``interrupted`` (bool); both follow from the
  tests, records and regressions as :func:`judge` says
- ``machine``: platform, python, processor, cpu_count, hostname
- ``git``: commit (or null outside a checkout), dirty (bool or null)
- ``packages``: distribution name -> version (null when not installed)
- ``hardware``: name, description, precisions, versions, timing (``"measured"`` or ``"simulated"``: how the backend's
  latencies are obtained; absent from files written before it was recorded)
- ``settings``: hardware, profile, models, shard (``"i/n"`` or null), xfail_file, baseline (path or null); precisions,
  device, real_time_loadgen, samples, checkpoints, datasets, calibrations, tables (the target tables' SHA-256) (absent
  from files written before they were recorded)
- ``profile``: name, description, samples and batch_size per model
- ``tests``: one per test, sorted by node id: id, outcome (passed, failed, error, skipped, xfailed, xpassed), duration_s,
  message, xfail (null or {test_id, bucket, reason, source})
- ``records``: one per gated figure, in a fixed order: id (``kind/model/precision/scenario/check``, stable across runs),
  test_id, kind, model, precision, scenario, check, value, target, op, passed, units, gating, details, outcome (the test's)
- ``stale_xfails``: xfail entries that matched no test
- ``regressions``: findings against ``--baseline`` (id, check, baseline, value, allowed, message)
- ``plots``: {"status": "written"|"skipped"|"none", "reason": str, "files": {"<model>-<precision>": [relative paths]}}
- ``merged_from``: for a merged record, the files it was built from: path, shard, created, the machine it ran on
  (empty otherwise); merged
  records written before an incomplete split was refused may have ``missing_shards`` (["3/3", ...]) and verdict FAIL
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from boundedio import MIB, parse_json, read_text
from conformance.fileio import write_text_atomic
from conformance.report import tables
from conformance.report.render import verdict as check_verdict
from models.blas import host_arithmetic

SCHEMA = "ipu-conformance/results/1"
RESULTS_FILE = "results.json"
PACKAGES = ("ipu-conformance", "numpy", "scipy", "ml_dtypes", "mlcommons-loadgen", "pytest", "pytest-xdist", "tabulate",
            "matplotlib", "torch")
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
NO_VERDICT = "NO VERDICT"  # the run judged nothing: no gated check was evaluated (or every one was waived)
VERDICTS = ("PASS", "FAIL", NO_VERDICT)
EXIT_NO_VERDICT = 5  # pytest's "no tests collected": nothing was judged
RESULTS_LIMIT = 64 * MIB  # a results.json of every model, precision and scenario is a few MB

# ----- the schema: pydantic models of the file; results.schema.json is generated from them -----------------------------
# Known structures refuse keys they do not know (a typo is an error); the parts that backends and tests extend (machine,
# hardware, settings, tests, records and their details) accept more keys, each known key still checked by type.

_RELATIVE = r"^(?![/\\]|[A-Za-z]:)(?!(.*[/\\])?\.\.([/\\]|$)).+$"  # relative, no '..' segment
Outcome = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed"]
Number = Union[StrictInt, StrictFloat]
RelativePath = Annotated[str, Field(pattern=_RELATIVE, description="a path relative to the report directory")]


class _Closed(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", regex_engine="python-re")


class _Open(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", regex_engine="python-re")


class Arithmetic(_Open):
    """What decides the bits the host computes (:func:`models.blas.host_arithmetic`)."""
    blas: dict[str, list[Optional[str]]]
    numpy: str
    numpy_simd: list[str]


class Machine(_Open):
    platform: str
    python: str
    processor: str
    cpu_count: Optional[StrictInt]
    hostname: str
    arithmetic: Optional[Arithmetic] = None


class Git(_Closed):
    commit: Optional[str]
    dirty: Optional[bool]


class DataTypes(_Closed):
    """What a precision holds, in the fields of MLPerf's measurements.json (the backend's data_types)."""
    input_data_types: str
    weight_data_types: str
    weight_transformations: str


class Hardware(_Open):
    name: str
    description: str
    precisions: list[str]
    versions: dict[str, Any]
    timing: Optional[Literal["measured", "simulated"]] = Field(
        None, description="how the backend's latencies are obtained; absent from files written before it was recorded")
    data_types: Optional[dict[str, DataTypes]] = Field(
        None, description="precision -> what it holds, as the backend states it; absent from older files")


class Selection(_Closed):
    keyword: Optional[str] = Field(description="-k, null when not given")
    markers: Optional[str] = Field(description="-m, null when not given")
    selected: Optional[StrictInt] = Field(ge=0, description="the tests the run set out to run (null: not known)")
    deselected: StrictInt = Field(ge=0, description="the tests -k and -m left out")
    skipped: StrictInt = Field(ge=0, description="the tests that ran and were skipped")


@dataclass(frozen=True)
class Recorded:
    """How a key of results.json's ``settings`` is kept, stated once on its field of :class:`Settings`.

    ``shards``: ``"same"`` (the shards of one run agree on it), ``"models"`` (they name the same models: paths may
    differ between machines) or ``""`` (it may differ). ``compare``: how ``report compare`` and ``--baseline`` weigh a
    difference: ``"figures"`` (it changes the figures of the whole run), ``"model"`` (it changes a model's figures),
    ``"selection"`` (it chooses which checks run), ``""`` (not compared; the hardware is compared on its own: runs of
    different hardware are refused); ``label``: its name there. ``value``: the key's value from the run's settings
    and backend (None: :func:`build` writes it from its own arguments). The option a setting comes from names its key
    (``Option.recorded`` in :mod:`conformance.settings.options`)."""

    shards: Literal["same", "models", ""] = ""
    compare: Literal["figures", "model", "selection", ""] = ""
    label: str = ""
    value: Any = None  # (settings, backend) -> the JSON value


def _paths(key: str):
    def value(settings, backend) -> dict:
        return {model: str(path) for model, path in sorted((getattr(settings, key) or {}).items())}
    return value


class Settings(_Open):
    hardware: Annotated[str, Recorded(shards="same")]
    profile: Annotated[str, Recorded(shards="same", compare="figures", label="profile")]
    models: Annotated[list[str], Recorded(shards="same", compare="selection", label="models")]
    shard: Optional[str] = Field(pattern=r"^[0-9]+/[0-9]+$")
    xfail_file: Optional[str]
    baseline: Optional[str]
    precisions: Annotated[Optional[list[str]], Recorded(
        shards="same", compare="selection", label="precisions", value=lambda settings, backend: list(settings.precisions)),
    ] = Field(None, description="--precision (absent from older files)")
    device: Annotated[Optional[str], Recorded(
        shards="same", compare="figures", label="device", value=lambda settings, backend: settings.device or backend.chip),
    ] = Field(None, description="the simulated chip, or null for measured hardware")
    real_time_loadgen: Annotated[Optional[bool], Recorded(
        shards="same", compare="figures", label="LoadGen on real time",
        value=lambda settings, backend: bool(settings.real_time_loadgen))] = None
    samples: Annotated[Optional[dict[str, StrictInt]], Recorded(
        shards="same", compare="model", label="samples",
        value=lambda settings, backend: dict(sorted((settings.samples or {}).items()))),
    ] = Field(None, description="--samples: model (or * for all) -> N")
    checkpoints: Annotated[Optional[dict[str, str]], Recorded(
        shards="models", compare="model", label="checkpoint", value=_paths("checkpoints")),
    ] = Field(None, description="--checkpoint: model -> path")
    datasets: Annotated[Optional[dict[str, str]], Recorded(
        shards="models", compare="model", label="data set", value=_paths("datasets")),
    ] = Field(None, description="--dataset: model -> path")
    calibrations: Annotated[Optional[dict[str, str]], Recorded(
        shards="models", compare="model", label="calibration", value=_paths("calibrations")),
    ] = Field(None, description="--calibration: model -> path")
    tables: Annotated[Optional[str], Recorded(shards="same", value=lambda settings, backend: tables.tables_version())
                      ] = Field(None, pattern=r"^[0-9a-f]{64}$",
                                description="SHA-256 of the target tables the run was judged with (absent in older files)")
    selection: Optional[Selection] = Field(None, description="what the run covered: -k, -m and the tests they left out "
                                           "(absent in older files)")
    array: Annotated[Optional[str], Recorded(value=lambda settings, backend: settings.array)] = Field(
        None, description="--array: the emulator's array library (absent from older files)")


def recorded_settings() -> dict[str, Recorded]:
    """The keys of results.json's ``settings`` that say how they are kept (:class:`Recorded`), in the file's order."""
    return {key: meta for key, field in Settings.model_fields.items()
            for meta in field.metadata if isinstance(meta, Recorded)}


class Profile(_Open):
    name: str
    description: str
    samples: dict[str, StrictInt]
    batch_size: dict[str, StrictInt]


class XfailEntry(_Open):
    test_id: str
    bucket: str
    reason: str
    source: str


class Test(_Open):
    id: str
    outcome: Outcome
    duration_s: Number = Field(ge=0)
    message: str = Field(description="the whole failure or skip reason, as the terminal shows it")
    xfail: Optional[XfailEntry]


class Record(_Open):
    id: str = Field(description="kind/model/precision/scenario/check, stable across runs")
    test_id: str
    kind: Literal["reference", "accuracy", "performance", "audit"]
    model: str
    precision: str
    scenario: Optional[str] = None
    check: str
    value: Optional[Number] = Field(description="null when not measured (NaN is written as null)")
    target: Optional[Number]
    op: Literal[">=", "<="]
    passed: bool
    units: str
    gating: bool = Field(description="false: reported, not gated")
    established: Optional[bool] = Field(None, description="for a gate judged with a 95% interval: whether the interval "
                                        "clears the target (details.ci95); null or absent without an interval")
    details: dict[str, Any]
    outcome: Outcome


class Regression(_Open):
    id: str
    test_id: str
    check: str
    units: str
    op: Literal[">=", "<="]
    baseline: Optional[Number]
    value: Optional[Number]
    allowed: Optional[Number]
    message: str


class Plots(_Closed):
    status: Literal["written", "skipped", "none"]
    reason: str
    files: dict[str, list[RelativePath]]


class MergedFrom(_Open):
    path: str
    shard: Optional[str]
    created: str
    machine: Optional[Machine] = None  # where the shard ran (its arithmetic decided its records' bits)


class ResultsFile(_Closed):
    """results.json (see the module docstring)."""

    model_config = ConfigDict(title="ipu-conformance results.json")
    schema_: Literal["ipu-conformance/results/1"] = Field(alias="schema")
    created: str = Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$")
    verdict: Literal["PASS", "FAIL", "NO VERDICT"]
    exit_status: StrictInt
    interrupted: bool
    machine: Machine
    git: Git
    packages: dict[str, Optional[str]]
    hardware: Hardware
    settings: Settings
    profile: Profile
    tests: list[Test]
    records: list[Record]
    stale_xfails: list[XfailEntry]
    regressions: list[Regression]
    plots: Plots
    merged_from: list[MergedFrom]
    missing_shards: list[str] = Field(None, description="only in a merged record of an incomplete split (older files)")


class ResultsError(ValueError):
    """A results.json that cannot be used: unreadable, not JSON, or not of this schema."""


def machine_info() -> dict:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": _processor_name(),
        "cpu_count": os.cpu_count(),
        "hostname": socket.gethostname(),
        "arithmetic": host_arithmetic(),
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


@dataclass(frozen=True)
class Judgement:
    """A run's verdict and exit status as they follow from its tests, records and regressions."""

    verdict: str  # PASS, FAIL or NO VERDICT
    exit_status: int
    reasons: tuple[str, ...] = ()  # why it is not a PASS


def judge(*, exit_status: int, interrupted: bool, tests, records, regressions, missing_shards=()) -> Judgement:
    """The run's verdict and exit status: what a run writes (:func:`build`), a merge of shards computes, and a file
    is checked against (:mod:`conformance.report.verify`).

    FAIL (``exit_status`` kept when it is a failure's, else 1) when the run was interrupted, a test failed or
    errored, a gated check failed (its verdict, as the report shows it, is FAIL: not passed and not waived by a known
    failure), a figure regressed, a shard is missing, or pytest's exit status is one of a failure. Otherwise NO
    VERDICT (exit 5, pytest's "no tests collected") when nothing was judged: no gated check was recorded, or every one
    was waived by a known failure (e.g. every test skipped by the known-failures file). Otherwise PASS (exit 0)."""
    reasons = []
    if interrupted:
        reasons.append("interrupted")
    failed = [t for t in tests if t.get("outcome") in ("failed", "error")]
    if failed:
        reasons.append(f"{len(failed)} test(s) failed")
    gates = [r for r in records if r.get("gating", True)]
    failing = [r for r in gates if check_verdict(r) == "FAIL"]
    if failing:
        reasons.append(f"{len(failing)} gate(s) failed")
    if regressions:
        reasons.append(f"{len(regressions)} regression(s)")
    if missing_shards:
        reasons.append(f"shard(s) {', '.join(missing_shards)} missing")
    failure_status = exit_status not in (0, EXIT_NO_VERDICT)
    if failure_status and not reasons:
        reasons.append(f"exit status {exit_status}")
    if reasons:
        return Judgement("FAIL", int(exit_status) if failure_status else 1, tuple(reasons))
    if not any(check_verdict(r) != "XFAIL" for r in gates):
        return Judgement(NO_VERDICT, EXIT_NO_VERDICT, (nothing_judged(tests, gates),))
    return Judgement("PASS", 0)


def nothing_judged(tests, gates) -> str:
    """Why a run judged nothing, in words."""
    if gates:
        return f"nothing was judged: every gated check ({len(gates)}) was waived by a known failure"
    skipped = [t for t in tests if t.get("outcome") == "skipped"]
    known = [t for t in skipped if t.get("xfail")]
    counts = f"{len(tests)} test(s)" + (f", {len(skipped)} skipped" if skipped else "") + \
        (f", {len(known)} of them by known-failure entries" if known else "")
    return f"nothing was judged: no gated check was recorded ({counts})"


def judgement_of(results: dict) -> Judgement:
    """:func:`judge` of a results record, from what it holds (its own exit status as pytest's)."""
    return judge(exit_status=results["exit_status"], interrupted=results["interrupted"], tests=results["tests"],
                 records=results["records"], regressions=results["regressions"],
                 missing_shards=results.get("missing_shards") or ())


def build(*, settings, backend, profile, tests, records, exit_status: int, interrupted=False, shard=None,
          xfail_file=None, baseline=None, stale_xfails=(), regressions=(), plots=None, created=None,
          selection=None) -> dict:
    """The results record of a run (see the module docstring); its verdict and exit status are :func:`judge`'s of
    ``exit_status`` (pytest's), the tests, records and regressions."""
    tests, records, regressions = list(tests), list(records), list(regressions)
    judgement = judge(exit_status=int(exit_status), interrupted=bool(interrupted), tests=tests, records=records,
                      regressions=regressions)
    return {
        "schema": SCHEMA,
        "created": created or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "verdict": judgement.verdict,
        "exit_status": judgement.exit_status,
        "interrupted": bool(interrupted),
        "machine": machine_info(),
        "git": git_info(),
        "packages": package_versions(),
        "hardware": {"name": backend.name, "description": backend.description, "precisions": list(backend.precisions),
                     "versions": dict(backend.versions()), "timing": backend.timing,
                     "data_types": {p: backend.data_types(p) for p in ("fp32", *backend.precisions)}},
        "settings": {"hardware": settings.hardware, "profile": settings.profile, "models": list(settings.models),
                     "shard": str(shard) if shard else None, "xfail_file": str(xfail_file) if xfail_file else None,
                     "baseline": str(baseline) if baseline else None, **_run_settings(settings, backend),
                     "selection": {**(selection or {"keyword": None, "markers": None, "selected": None,
                                                    "deselected": 0}),
                                   "skipped": sum(t.get("outcome") == "skipped" for t in tests)}},
        "profile": {"name": profile.name, "description": profile.description,
                    "samples": {m: profile.samples[m] for m in settings.models if m in profile.samples},
                    "batch_size": {m: profile.batch_size[m] for m in settings.models if m in profile.batch_size}},
        "tests": tests,
        "records": records,
        "stale_xfails": list(stale_xfails),
        "regressions": regressions,
        "plots": plots or {"status": "none", "reason": "no accuracy artifacts", "files": {}},
        "merged_from": [],
    }


def _run_settings(settings, backend) -> dict:
    """The settings that decide what the figures mean, beside hardware, profile and models (each key's
    :attr:`Recorded.value`): shards of one run agree on them (:mod:`conformance.report.merge`)."""
    return {key: meta.value(settings, backend) for key, meta in recorded_settings().items() if meta.value is not None}


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
    """Check ``data`` against the schema (:class:`ResultsFile`); a ResultsError naming the file and the first
    offending field (``records[3].value: ...``)."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ResultsError(f"{source}: not an ipu-conformance results file (schema {found!r}, expected {SCHEMA!r})")
    try:
        ResultsFile.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        where = field_path(errors[0]["loc"])
        same = [e for e in errors if field_path(e["loc"]) == where]  # a union's members each report their error
        texts = list(dict.fromkeys(_error_text(e) for e in same))
        raise ResultsError(f"{source}: {where}: {' / '.join(texts)}{_found(same[0])}") from None
    return data


# the location parts pydantic adds for the members of a union (``value.int``), which are no keys of the file
_UNION_TAGS = {"int", "float", "str", "bool", "none", "list", "dict"}


def field_path(loc) -> str:
    """A pydantic error location as a path into the file: ``records[3].details``; ``the file`` for the top level."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in _UNION_TAGS or "[" in part:
            continue
        else:
            text += f".{part}" if text else part
    return text or "the file"


def _error_text(error: dict) -> str:
    if error["type"] == "missing":
        return "missing (every key of the schema is always present)"
    if error["type"] == "extra_forbidden":
        return "not a key of the schema"
    if error["type"] == "string_pattern_mismatch" and (error.get("ctx") or {}).get("pattern") == _RELATIVE:
        return "expected a path relative to the report directory"
    return error["msg"]


def _found(error: dict) -> str:
    if error["type"] in ("missing", "extra_forbidden"):
        return ""
    found = error.get("input")
    shown = repr(found) if isinstance(found, (str, int, float, bool, type(None))) else type(found).__name__
    return f" (found {shown[:80]})"


def schema_json() -> str:
    """The published JSON Schema of results.json (``conformance/report/results.schema.json``), generated from
    :class:`ResultsFile`."""
    schema = ResultsFile.model_json_schema(by_alias=True)
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA, **schema}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _no_constant(name: str):
    raise ValueError(name)


def read(path) -> Any:
    """The JSON document of a results.json, read bounded (a regular file of at most :data:`RESULTS_LIMIT` bytes, UTF-8)
    and parsed strictly (no NaN or Infinity, which the suite writes as null; no number of thousands of digits, no
    nesting deeper than Python can read); a ResultsError naming the file and what is wrong otherwise."""
    return parse(read_text(path, "a results.json", RESULTS_LIMIT, ResultsError), path)


def parse(text: str, path) -> Any:
    """The JSON document of a results.json's ``text``, parsed strictly as :func:`read` says."""
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except (RecursionError, ValueError):  # a number or a depth the strict reader names with its line
        parse_json(text, path, ResultsError)
        raise ResultsError(f"{path}: not valid JSON") from None


def load(path) -> dict:
    """Read (:func:`read`) and validate a results.json; a ResultsError saying what is wrong with it."""
    return validate(read(path), source=str(path))
