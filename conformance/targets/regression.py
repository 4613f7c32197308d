"""Regression tolerances as data: how far a run may fall behind its ``--baseline`` (``regression.toml``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, create_model

from conformance.hardware import hardware_names
from conformance.hardware.base import TIMINGS
from conformance.targets import DataFileError, Schema, read_toml, validate
from conformance.targets.bounds import MAX_REL_ALLOWANCE

TOLERANCES_FILE = Path(__file__).with_name("regression.toml")
# the override tables of a kind, in the order they apply (a later one wins)
OVERRIDE_GROUPS = ("checks", "hardware", "timing")
RECORD_KINDS = ("reference", "accuracy", "performance", "audit")  # the kinds of record a run writes
CLOCKS = ("virtual", "real")  # what a performance figure was timed on (a record's details["clock"])


class TolerancesError(DataFileError):
    """A mistake in regression.toml; the message names the file, line and key."""


# an allowed worsening, absolute (>= 0) or relative: a share of the baseline value below MAX_REL_ALLOWANCE (a share of
# all of it would let a throughput fall to nothing, and the check could not fail)
Allowance = Annotated[float, Field(ge=0)]
RelAllowance = Annotated[float, Field(ge=0, lt=MAX_REL_ALLOWANCE)]


class Override(Schema):
    rel: RelAllowance | None = None
    abs: Allowance | None = None


class TimingOverride(Override):
    clock: dict[Literal[CLOCKS], Override] = {}


class KindTolerances(Schema):
    rel: RelAllowance
    abs: Allowance = 0.0
    checks: dict[str, Override] = {}
    hardware: dict[str, Override] = {}
    timing: dict[Literal[TIMINGS], TimingOverride] = {}


@dataclass(frozen=True)
class Tolerance:
    rel: float
    abs: float
    source: str = ""  # the tables it was merged from, e.g. "[performance], [performance.timing.simulated]"

    def allowed(self, baseline_value: float) -> float:
        return max(self.abs, self.rel * abs(baseline_value))

    def describe(self) -> str:
        """``rel 0.05, abs 0 ([performance])``: the rule behind :meth:`allowed`, for messages."""
        rule = f"rel {self.rel:g}, abs {self.abs:g}"
        return f"{rule} ({self.source})" if self.source else rule


def load_tolerances(path=None) -> dict:
    """The tolerance table of ``path`` (default: the suite's regression.toml) as its TOML tables, validated; a
    TolerancesError naming the file, line, key and what is allowed otherwise."""
    path = Path(path) if path is not None else TOLERANCES_FILE
    try:
        data, text = read_toml(path)
        validate(data, _schema(), path, text)
    except DataFileError as exc:
        raise TolerancesError(str(exc)) from None
    return data


def _schema() -> type[Schema]:
    """One optional table per kind of record, with the hardware names of the registered backends."""
    kind = create_model("KindTolerancesOfHardware", __base__=KindTolerances,
                        hardware=(dict[Literal[hardware_names()], Override], {}))
    return create_model("RegressionFile", __base__=Schema, **{k: (kind | None, None) for k in RECORD_KINDS})


def tolerance_for(tolerances: dict, kind: str, check: str, hardware: str, timing: str | None = None,
                  clock: str | None = None) -> Tolerance | None:
    """The tolerance of one check: the kind's defaults, overridden by its check entry, the hardware's entry, then the
    entry of how the figure was obtained (``timing``: "measured" or "simulated") and within it the clock the run was
    timed on (``clock``: "virtual" or "real"). Pass None for a timing or clock not stated alike on both sides. None
    when the kind is not compared."""
    section = tolerances.get(kind)
    if section is None:
        return None
    merged = {"rel": section["rel"], "abs": section.get("abs", 0.0)}
    sources = [f"[{kind}]"]

    def apply(entry, where):
        if entry:
            merged.update({k: v for k, v in entry.items() if k in ("rel", "abs")})
            sources.append(f"[{where}]")

    for group, name in zip(OVERRIDE_GROUPS, (check, hardware, timing)):
        entry = section.get(group, {}).get(name) if name is not None else None
        apply(entry, f"{kind}.{group}.{name}")
        if group == "timing" and entry and clock is not None:
            apply(entry.get("clock", {}).get(clock), f"{kind}.timing.{name}.clock.{clock}")
    return Tolerance(float(merged["rel"]), float(merged["abs"]), ", ".join(sources))
