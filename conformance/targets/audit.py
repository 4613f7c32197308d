"""MLPerf's compliance audits as data: ``audit.toml`` (TEST01's seed and accuracy-delta fallback, TEST04's bounds, the
scenarios each audit runs in), with its loader; a model that TEST04 exempts says so, with the reason, in its own
audit.toml (``[TEST04.exempt]``, in its spec's ``tables`` folder). How much each profile audits is the profile's
(``profiles.toml``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, PositiveFloat, StringConstraints, create_model

from conformance.hardware.base import SCENARIOS
from conformance.targets import DataFileError, Schema, fail, load_validated, model_files, read_toml, validate
from models import MODEL_NAMES

AUDIT_FILE = Path(__file__).with_name("audit.toml")


class AuditConfigError(DataFileError):
    """A mistake in audit.toml; the message names the file and the key."""


# -- configuration --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditConfig:
    test01_scenarios: tuple[str, ...]
    accuracy_log_rng_seed: int
    accuracy_delta: float
    performance_delta: float  # TEST01: logged-run score within this share of the plain run's
    short_latency_performance_delta: float  # TEST01's relaxed share for short latencies
    test01_short_latency_score: dict  # scenario -> TEST01 result field (ns) at or below which the relaxed share applies
    test01_remeasure: int  # times a TEST01 pair outside its tolerance is measured again before the audit fails
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

    def performance_tolerance(self, scenario: str, reference_score: float) -> float:
        """TEST01's tolerance on the logged run's score against the plain run's (MLPerf TEST01 verify_performance.py:
        the result field as logged, relaxed for SingleStream/MultiStream at or below the short-latency score)."""
        short = self.test01_short_latency_score.get(scenario)
        if short is not None and reference_score <= short:
            return self.short_latency_performance_delta
        return self.performance_delta

    def speedup_limit(self, scenario: str, reference_score: float) -> float:
        """TEST04's bound on same-sample score / reference score (MLPerf verify_performance.py)."""
        short = self.short_latency_score.get(scenario)
        if short is not None and reference_score <= short:
            return self.short_latency_max_speedup
        return self.max_speedup


def _distinct(value: list) -> list:
    repeated = sorted({v for v in value if value.count(v) > 1})
    if repeated:
        raise ValueError(f"names {', '.join(repeated)} more than once")
    return value


Scenarios = Annotated[list[Literal[SCENARIOS]], Field(min_length=1), AfterValidator(_distinct)]
Ratio = Annotated[float, Field(gt=0, le=1)]  # a share in (0, 1]
Speedup = Annotated[float, Field(gt=1)]  # a bound on a score ratio, above 1


class Test01Schema(Schema):
    scenarios: Scenarios
    accuracy_log_rng_seed: int = Field(ge=0, lt=2**64)  # LoadGen's uint64 seed
    accuracy_delta: Ratio
    performance_delta: Ratio
    short_latency_performance_delta: Ratio
    short_latency_score: dict[Literal[SCENARIOS], PositiveFloat]
    remeasure: int = Field(ge=0, le=3)


Reason = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class Test04Schema(Schema):
    scenarios: Scenarios
    performance_issue_same_index: int = Field(ge=0)
    max_speedup: Speedup
    short_latency_max_speedup: Speedup
    short_latency_score: dict[Literal[SCENARIOS], PositiveFloat]
    remeasure: int = Field(ge=0, le=3)
    exempt: dict[Literal[MODEL_NAMES], Reason] = {}


class AuditFile(Schema):
    TEST01: Test01Schema
    TEST04: Test04Schema


@lru_cache(maxsize=None)
def load_audit_config(path: Path | None = None) -> AuditConfig:
    """The audit settings in ``path`` (default: the suite's audit.toml) with the models' own TEST04 exemptions,
    validated; an AuditConfigError naming the file, line, key and what is allowed otherwise."""
    path = Path(path) if path is not None else AUDIT_FILE
    try:
        data = load_validated(path, AuditFile)
        exempt = dict(data.TEST04.exempt)
        exempt.update(_model_exemptions(exempt))
    except DataFileError as exc:
        raise AuditConfigError(str(exc)) from None
    t1, t4 = data.TEST01, data.TEST04
    return AuditConfig(
        test01_scenarios=tuple(t1.scenarios),
        accuracy_log_rng_seed=t1.accuracy_log_rng_seed,
        accuracy_delta=t1.accuracy_delta,
        performance_delta=t1.performance_delta,
        short_latency_performance_delta=t1.short_latency_performance_delta,
        test01_short_latency_score=dict(t1.short_latency_score),
        test01_remeasure=t1.remeasure,
        test04_scenarios=tuple(t4.scenarios),
        same_index=t4.performance_issue_same_index,
        max_speedup=t4.max_speedup,
        short_latency_max_speedup=t4.short_latency_max_speedup,
        remeasure=t4.remeasure,
        short_latency_score=dict(t4.short_latency_score),
        test04_exempt=exempt,
    )


def _model_exemptions(suite: dict) -> dict[str, str]:
    """The TEST04 exemptions the models' own audit.toml files give (``[TEST04.exempt] <model> = "reason"``, only the
    model's own name, validated on its own); one the suite's file gives too is an error naming the file."""
    found = {}
    for model, extra in model_files("audit.toml", optional=True):
        own, text = read_toml(extra)
        test04 = create_model("ModelTest04", __base__=Schema, exempt=(dict[Literal[model], Reason], ...))
        checked = validate(own, create_model("ModelAuditFile", __base__=Schema, TEST04=(test04, ...)), extra, text)
        if model in suite:
            fail(extra, ("TEST04", "exempt", model), f"the suite's {AUDIT_FILE.name} exempts model {model!r} too: a "
                 "model's exemption is in its own audit.toml only", text)
        found.update(checked.TEST04.exempt)
    return found
