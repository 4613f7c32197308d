"""Regression tolerances as data: how far a run may fall behind its ``--baseline`` (``regression.toml``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conformance.fileio import load_toml
from conformance.hardware.base import TIMINGS

TOLERANCES_FILE = Path(__file__).with_name("regression.toml")
# the override tables of a kind, in the order they apply (a later one wins)
OVERRIDE_GROUPS = ("checks", "hardware", "timing")


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


def load_tolerances(path=TOLERANCES_FILE) -> dict:
    """The tolerance table; a ValueError naming the file and the bad entry."""
    path = Path(path)
    data = load_toml(path)

    def check_section(section, where):
        if not isinstance(section, dict):
            raise ValueError(f"{path}: [{where}] must be a table, got {section!r}")
        for key in ("rel", "abs"):
            if key in section and (not isinstance(section[key], (int, float)) or isinstance(section[key], bool)
                                   or section[key] < 0):
                raise ValueError(f"{path}: [{where}].{key} must be a number >= 0, got {section[key]!r}")

    def check_group(entries, where):
        if not isinstance(entries, dict):
            raise ValueError(f"{path}: [{where}] must be a table of tables")

    for kind, section in data.items():
        if not isinstance(section, dict) or "rel" not in section:
            raise ValueError(f"{path}: [{kind}] needs at least 'rel'")
        check_section(section, kind)
        for group in OVERRIDE_GROUPS:
            entries = section.get(group, {})
            check_group(entries, f"{kind}.{group}")
            for name, sub in entries.items():
                if group == "timing" and name not in TIMINGS:
                    raise ValueError(f"{path}: [{kind}.timing.{name}]: unknown timing {name!r}; expected one of: "
                                     f"{', '.join(TIMINGS)}")
                check_section(sub, f"{kind}.{group}.{name}")
                if group == "timing":
                    check_group(sub.get("clock", {}), f"{kind}.timing.{name}.clock")
                    for clock, entry in sub.get("clock", {}).items():
                        check_section(entry, f"{kind}.timing.{name}.clock.{clock}")
    return data


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
