"""Regression tolerances as data: how far a run may fall behind its ``--baseline`` (``regression.toml``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conformance.fileio import load_toml

TOLERANCES_FILE = Path(__file__).with_name("regression.toml")


@dataclass(frozen=True)
class Tolerance:
    rel: float
    abs: float

    def allowed(self, baseline_value: float) -> float:
        return max(self.abs, self.rel * abs(baseline_value))



def load_tolerances(path=TOLERANCES_FILE) -> dict:
    """The tolerance table; a ValueError naming the file and the bad entry."""
    path = Path(path)
    data = load_toml(path)

    def check_section(section, where):
        for key in ("rel", "abs"):
            if key in section and (not isinstance(section[key], (int, float)) or section[key] < 0):
                raise ValueError(f"{path}: [{where}].{key} must be a number >= 0, got {section[key]!r}")

    for kind, section in data.items():
        if not isinstance(section, dict) or "rel" not in section:
            raise ValueError(f"{path}: [{kind}] needs at least 'rel'")
        check_section(section, kind)
        for group in ("checks", "hardware"):
            for name, sub in section.get(group, {}).items():
                check_section(sub, f"{kind}.{group}.{name}")
    return data


def tolerance_for(tolerances: dict, kind: str, check: str, hardware: str) -> Tolerance | None:
    """The tolerance of one check: the kind's defaults, overridden by its check entry, then its hardware entry."""
    section = tolerances.get(kind)
    if section is None:
        return None
    merged = {"rel": section["rel"], "abs": section.get("abs", 0.0)}
    merged.update({k: v for k, v in section.get("checks", {}).get(check, {}).items() if k in ("rel", "abs")})
    merged.update({k: v for k, v in section.get("hardware", {}).get(hardware, {}).items() if k in ("rel", "abs")})
    return Tolerance(float(merged["rel"]), float(merged["abs"]))
