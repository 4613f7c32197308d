"""MLPerf's compliance audits as data: ``audit.toml`` (TEST01's seed and accuracy-delta fallback, TEST04's bounds, the
scenarios each audit runs in and the models TEST04 exempts), with its loader. How much each profile audits is the
profile's (``profiles.toml``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from conformance.fileio import load_toml
from conformance.hardware.base import SCENARIOS
from models import MODEL_NAMES

AUDIT_FILE = Path(__file__).with_name("audit.toml")


class AuditConfigError(ValueError):
    """A mistake in audit.toml; the message names the file and the key."""


# -- configuration --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditConfig:
    test01_scenarios: tuple[str, ...]
    accuracy_log_rng_seed: int
    accuracy_delta: float
    performance_delta: float  # TEST01: logged-run score within this share of the plain run's
    test04_scenarios: tuple[str, ...]
    same_index: int
    max_speedup: float
    short_latency_max_speedup: float
    short_latency_score: dict  # scenario -> score at or below which the relaxed bound applies
    remeasure: int  # times a TEST04 pair over the bound is measured again before the audit fails
    test04_exempt: dict  # model -> reason

    def scenarios(self, audit: str) -> tuple[str, ...]:
        return self.test01_scenarios if audit == "TEST01" else self.test04_scenarios

    def exempt_reason(self, audit: str, model: str) -> str | None:
        return self.test04_exempt.get(model) if audit == "TEST04" else None

    def speedup_limit(self, scenario: str, reference_score: float) -> float:
        """TEST04's bound on same-sample score / reference score (MLPerf verify_performance.py)."""
        short = self.short_latency_score.get(scenario)
        if short is not None and reference_score <= short:
            return self.short_latency_max_speedup
        return self.max_speedup


@lru_cache(maxsize=None)
def load_audit_config(path: Path = AUDIT_FILE) -> AuditConfig:
    path = Path(path)
    data = load_toml(path)

    def fail(message: str):
        raise AuditConfigError(f"{path}: {message}")

    unknown = sorted(set(data) - {"TEST01", "TEST04"})
    if unknown:
        fail(f"unknown table(s) {unknown}; expected [TEST01] and [TEST04]")

    def section(name: str, keys: Sequence[str]) -> dict:
        entry = data.get(name)
        if not isinstance(entry, dict):
            fail(f"lacks the [{name}] table")
        missing = [k for k in keys if k not in entry]
        if missing:
            fail(f"[{name}] lacks {missing}")
        for scenario in entry["scenarios"]:
            if scenario not in SCENARIOS:
                fail(f"[{name}].scenarios: unknown scenario {scenario!r}; expected some of: {', '.join(SCENARIOS)}")
        return entry

    def positive(name: str, key: str, value, above: float = 0.0) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > above:
            fail(f"[{name}].{key} = {value!r}; expected a number > {above:g}")
        return float(value)

    t1 = section("TEST01", ("scenarios", "accuracy_log_rng_seed", "accuracy_delta", "performance_delta"))
    t4 = section("TEST04", ("scenarios", "performance_issue_same_index", "max_speedup", "short_latency_max_speedup",
                            "short_latency_score", "remeasure"))
    same_index = t4["performance_issue_same_index"]
    if isinstance(same_index, bool) or not isinstance(same_index, int) or same_index < 0:
        fail(f"[TEST04].performance_issue_same_index = {same_index!r}; expected an integer >= 0")
    remeasure = t4["remeasure"]
    if isinstance(remeasure, bool) or not isinstance(remeasure, int) or not 0 <= remeasure <= 3:
        fail(f"[TEST04].remeasure = {remeasure!r}; expected an integer from 0 to 3")
    exempt = dict(t4.get("exempt", {}))
    for model, reason in exempt.items():
        if model not in MODEL_NAMES:
            fail(f"[TEST04.exempt]: unknown model {model!r}; expected some of: {', '.join(MODEL_NAMES)}")
        if not isinstance(reason, str) or not reason.strip():
            fail(f"[TEST04.exempt].{model} needs a reason")
    for scenario in t4["short_latency_score"]:
        if scenario not in SCENARIOS:
            fail(f"[TEST04].short_latency_score: unknown scenario {scenario!r}; expected some of: {', '.join(SCENARIOS)}")
    return AuditConfig(
        test01_scenarios=tuple(t1["scenarios"]),
        accuracy_log_rng_seed=int(t1["accuracy_log_rng_seed"]),
        accuracy_delta=positive("TEST01", "accuracy_delta", t1["accuracy_delta"]),
        performance_delta=positive("TEST01", "performance_delta", t1["performance_delta"]),
        test04_scenarios=tuple(t4["scenarios"]),
        same_index=same_index,
        max_speedup=positive("TEST04", "max_speedup", t4["max_speedup"], above=1.0),
        short_latency_max_speedup=positive("TEST04", "short_latency_max_speedup", t4["short_latency_max_speedup"],
                                           above=1.0),
        remeasure=remeasure,
        short_latency_score={s: positive("TEST04", f"short_latency_score.{s}", v)
                             for s, v in t4["short_latency_score"].items()},
        test04_exempt=exempt,
    )
