"""``--baseline results.json``: compare a run with an earlier one and list every regression beyond the tolerances in
``conformance/targets/regression.toml`` (in the spirit of pytest-benchmark's ``--benchmark-compare-fail``).

:func:`compare` compares a whole run (its ``regressions`` in results.json); :func:`compare_test` compares the records of one
test as its report is made, so that the test that produced a regressed figure fails.

A baseline is read through :mod:`conformance.report.verify` (an edited or inconsistent file is refused); one of other
hardware, or recorded with another setting that changes the figures (profile, samples, checkpoint, data set,
calibration, device: :mod:`conformance.report.compare`), is refused naming each; one that can compare nothing is
refused too: a file without a gated check with a value before any test runs, and at the end of the run one that has
none of the run's gated checks (:func:`common`). A baseline that did not pass, or that chose other models or
precisions, is accepted with a warning naming it (:func:`warnings_of`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from conformance.report import compare as runs
from conformance.report import record as results_record
from conformance.report import verify
from conformance.report.checks import CLOCK_KEY, timing_of
from conformance.report.collect import assign_ids
from conformance.targets.regression import tolerance_for


class BaselineError(ValueError):
    """A baseline that cannot be compared with this run."""


@dataclass(frozen=True)
class Regression:
    id: str
    test_id: str
    check: str
    units: str
    op: str
    baseline: float | None
    value: float | None
    allowed: float
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


def load_baseline(path, run: dict) -> dict:
    """Read ``path`` and check it can be compared with ``run`` (a results record of this run's settings, as
    :func:`conformance.report.record.build` makes it before any test): the same hardware, and no setting that changes
    the figures differing (:data:`conformance.report.compare.FIGURE_SETTINGS`: profile, device, samples, checkpoints,
    data sets ...), each one named; and a baseline that compares nothing is refused too."""
    try:
        data = verify.load(path)
    except (results_record.ResultsError, verify.InconsistentResults) as exc:
        raise BaselineError(f"--baseline {exc}") from None
    found, wanted = data["settings"]["hardware"], run["settings"]["hardware"]
    if found != wanted:
        raise BaselineError(f"--baseline {path}: recorded on hardware {found!r}, this run is on {wanted!r}; "
                            f"compare runs of the same hardware")
    differ = [f"recorded with {d.setting}{f' of {d.model}' if d.model else ''} {runs.shown(d.old)!r}, this run uses "
              f"{runs.shown(d.new)!r}" for d in runs.differences(data, run) if d.changes_figures]
    if differ:
        raise BaselineError(f"--baseline {path}: {'; '.join(differ)}: settings that change the figures, so they are not "
                            f"comparable; give the results.json of a run with the same settings")
    if not comparable(data["records"]):
        raise BaselineError(f"--baseline {path}: compares nothing: it holds no gated check with a value "
                            f"({len(data['records'])} record(s)); give the results.json of a run that judged something")
    return data


def warnings_of(path, data: dict, run: dict) -> list[str]:
    """What a run compared with the baseline ``data`` should say: a baseline that did not pass (its failing figures
    are what regressions are measured from), and another choice of models or precisions."""
    found = []
    if data["verdict"] != "PASS":
        failed = sum(1 for r in data["records"] if r.get("gating", True) and not r["passed"]
                     and r.get("outcome") != "xfailed")
        tests = sum(1 for t in data["tests"] if t["outcome"] in ("failed", "error"))
        found.append(f"--baseline {path} is a run that did not pass (verdict {data['verdict']}: {failed} gate(s) "
                     f"failed, {tests} test(s) failed); regressions are measured from its figures as they are")
    selection = [d.describe() for d in runs.differences(data, run) if not d.changes_figures]
    if selection:
        found.append(f"--baseline {path} chose other checks (baseline -> this run): {'; '.join(selection)}; only the "
                     f"checks both runs hold are compared")
    return found


def comparable(baseline: list[dict]) -> set[str]:
    """The ids of the baseline's records a run can be compared with: gated checks with a value."""
    return {r["id"] for r in baseline if r.get("gating", True) and r.get("value") is not None}


def common(current: list[dict], baseline: list[dict]) -> set[str]:
    """The ids of ``current``'s gated checks that ``baseline`` holds with a value: what :func:`compare` compares."""
    return {r["id"] for r in current if r.get("gating", True)} & comparable(baseline)


def compares_nothing(current: list[dict], baseline: list[dict], baseline_path) -> str:
    """Why a run's records and a baseline have nothing in common, in words (empty when they have)."""
    if common(current, baseline):
        return ""
    gated = sum(1 for r in current if r.get("gating", True))
    return (f"--baseline {baseline_path} compares nothing: none of the run's {gated} gated check(s) is among its "
            f"{len(comparable(baseline))} gated check(s) with a value (another model or precision selection, another "
            f"shard?); nothing was compared")


def _clock_of(record: dict) -> str | None:
    clock = (record.get("details") or {}).get(CLOCK_KEY)
    return clock if isinstance(clock, str) and clock else None


def _clock(record: dict, old: dict) -> str | None:
    """The clock both figures ran on ("virtual"/"real", ``details["clock"]``), when both records say so alike."""
    clock = _clock_of(record)
    return clock if clock is not None and clock == _clock_of(old) else None


def _timing(record: dict, old: dict) -> str | None:
    """How both figures were obtained ("measured"/"simulated"), when both records say so alike and do not differ in
    their clock (a simulation on virtual time is not compared exactly with a real-clock run of it); None otherwise."""
    timing = timing_of(record)
    if timing is None or timing != timing_of(old) or _clock_of(record) != _clock_of(old):
        return None
    return timing


def compare(current: list[dict], baseline: list[dict], tolerances: dict, hardware: str) -> list[Regression]:
    """Every gating record of ``current`` that is worse than the same record of ``baseline`` beyond its tolerance.

    Records missing from either side are not regressions (another shard or model selection); a record that had a value
    in the baseline and has none now is one. The tolerance depends on the kind, check and hardware, and on the
    records' ``details["timing"]`` and ``details["clock"]`` when both records state the same (simulated figures on
    virtual time are compared exactly).
    """
    before = {r["id"]: r for r in baseline}
    found = []
    for record in current:
        old = before.get(record["id"])
        if old is None or not record.get("gating", True) or old.get("value") is None:
            continue
        tolerance = tolerance_for(tolerances, record["kind"], record["check"], hardware, _timing(record, old),
                                  _clock(record, old))
        if tolerance is None:
            continue
        base, value, op = float(old["value"]), record.get("value"), record["op"]
        allowed = tolerance.allowed(base)
        units = record.get("units", "")
        unit = f" {units}" if units else ""
        if value is None:
            message = f"{record['id']}: no value this run (baseline {base:.6g}{unit})"
        else:
            worse_by = (base - value) if op == ">=" else (value - base)
            if worse_by <= allowed:
                continue
            direction = "dropped" if op == ">=" else "rose"
            share = f"{worse_by / abs(base) * 100:.3g}%" if base else "inf%"
            message = (f"{record['id']}: {direction} from {base:.6g} to {value:.6g}{unit} "
                       f"({share} worse; allowed {allowed:.6g}{unit}: {tolerance.describe()})")
        found.append(Regression(record["id"], record.get("test_id", ""), record["check"], units, op, base, value, allowed,
                                message))
    return found


def run_ids(records: list[dict], baseline: list[dict]) -> list[dict]:
    """One test's records with the ids the whole run gives them (``kind/model/precision/scenario/check``, ``#2`` ...
    for repeats), as far as the baseline shows them: a repeated id is matched with the baseline's records of the same
    id and the same test, in order; otherwise the id the test's own records give."""
    own = assign_ids([dict(r) for r in records])
    same_test: dict[tuple[str, str], list[str]] = {}
    for old in baseline:
        same_test.setdefault((old["id"].partition("#")[0], old.get("test_id", "")), []).append(old["id"])
    for record in own:
        base, _, repeat = record["id"].partition("#")
        ids = same_test.get((base, record.get("test_id", "")), [])
        index = int(repeat or 1) - 1
        if index < len(ids):
            record["id"] = ids[index]
    return own


def compare_test(records: list[dict], baseline: list[dict], tolerances: dict, hardware: str) -> list[Regression]:
    """The regressions among the records of one test (record dicts as ``record_check`` made them, without ids)."""
    return compare(run_ids(records, baseline), baseline, tolerances, hardware)


def failure_message(regressions: list[Regression], baseline_path) -> str:
    """What a test that regressed fails with: one line naming each regressed record, its baseline value, its value now
    and the allowed change."""
    return (f"regression against the baseline {baseline_path}: "
            + "; ".join(r.message for r in regressions))


def case_id(test_id: str, record_id: str = "") -> str:
    """The node id of the failed case that stands for the regressions of ``test_id``: ``<module>::regression of
    <test>`` (next to the test in pytest's summary and in the same JUnit class), or ``regression of <record id>`` for a
    record that names no test."""
    if not test_id:
        return f"regression of {record_id}"
    module, sep, name = test_id.rpartition("::")
    return f"{module}{sep}regression of {name}"


def unnamed(regressions: list[dict], named: set[str]) -> dict[str, list[Regression]]:
    """The run's regressions (results.json's dicts) that no failed test named (``named``: the record ids the tests'
    own failures name), per test id in the run's order: those of expected failures, of tests that failed for another
    reason, and of records the test's own comparison could not see."""
    found: dict[str, list[Regression]] = {}
    for r in regressions:
        if r["id"] not in named:
            found.setdefault(r.get("test_id", ""), []).append(Regression(**r))
    return found
