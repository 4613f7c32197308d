"""``--baseline results.json``: compare a run with an earlier one and list every regression beyond the tolerances in
``conformance/targets/regression.toml`` (in the spirit of pytest-benchmark's ``--benchmark-compare-fail``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from conformance.report import record as results_record
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


def load_baseline(path, *, hardware: str, profile: str) -> dict:
    """Read ``path`` and check it can be compared with a run on ``hardware`` at ``profile``."""
    try:
        data = results_record.load(path)
    except results_record.ResultsError as exc:
        raise BaselineError(f"--baseline {exc}") from None
    found = data["settings"]
    if found["hardware"] != hardware:
        raise BaselineError(f"--baseline {path}: recorded on hardware {found['hardware']!r}, this run is on {hardware!r}; "
                            f"compare runs of the same hardware")
    if found["profile"] != profile:
        raise BaselineError(f"--baseline {path}: recorded with profile {found['profile']!r}, this run uses {profile!r}; "
                            f"sample counts differ between profiles, so the figures are not comparable")
    return data


def compare(current: list[dict], baseline: list[dict], tolerances: dict, hardware: str) -> list[Regression]:
    """Every gating record of ``current`` that is worse than the same record of ``baseline`` beyond its tolerance.

    Records missing from either side are not regressions (another shard or model selection); a record that had a value
    in the baseline and has none now is one.
    """
    before = {r["id"]: r for r in baseline}
    found = []
    for record in current:
        old = before.get(record["id"])
        if old is None or not record.get("gating", True) or old.get("value") is None:
            continue
        tolerance = tolerance_for(tolerances, record["kind"], record["check"], hardware)
        if tolerance is None:
            continue
        base, value, op = float(old["value"]), record.get("value"), record["op"]
        allowed = tolerance.allowed(base)
        units = record.get("units", "")
        if value is None:
            message = f"{record['id']}: no value this run (baseline {base:.6g} {units})"
        else:
            worse_by = (base - value) if op == ">=" else (value - base)
            if worse_by <= allowed:
                continue
            direction = "dropped" if op == ">=" else "rose"
            message = (f"{record['id']}: {direction} from {base:.6g} to {value:.6g} {units} "
                       f"({worse_by / abs(base) * 100 if base else float('inf'):.2f}% worse; allowed {allowed:.6g})").replace("  ", " ")
        found.append(Regression(record["id"], record.get("test_id", ""), record["check"], units, op, base, value, allowed,
                                message))
    return found
