"""MLPerf compliance audits over the LoadGen harness: TEST01 (performance-mode answers are the accuracy-mode answers) and
TEST04 (a repeated sample is not served faster: no caching of results). Plain functions, testable without pytest.

TEST01 (:func:`~conformance.perf.test01.run_test01`): a performance run with LoadGen's accuracy-log sampling writes a random subset of the
responses to ``mlperf_log_accuracy.json``; an accuracy run (``TestMode.AccuracyOnly``, every QSL sample once) on a device
that computes its answers afresh writes all of them; :func:`~conformance.perf.test01.compare_responses` checks each sampled response against the
accuracy-mode response of the same ``qsl_idx``, byte for byte. When some differ, MLPerf's rule for non-deterministic
systems decides (:func:`~conformance.perf.test01.accuracy_delta`): the task metric of the sampled responses and of the accuracy-mode responses of
the same samples (MLPerf's ``create_accuracy_baseline.py``) may differ by at most 1% (-99) or 0.1% (-99.9).

TEST04 (:func:`~conformance.perf.test04.run_test04`): a performance run over the performance sample set, then one where LoadGen issues a single
loaded sample over and over (``performance_issue_same``); the second must not score more than 10% better (20% for
SingleStream/MultiStream latencies of microseconds and more), as MLPerf's ``verify_performance.py`` decides, whose score
is samples/s, or 1e9 / the early-stopping latency estimate in ns. A pair over the bound is measured again before the
audit fails, and judged on the fastest run of each kind (host load only slows a run; a caching system is faster in
every same-sample run).

On the host's clock a failed comparison may be the host's (:func:`host_noise`): when the runs of one kind spread by
more than the bound resolves and some pair of runs, one of each kind, meets the bound, the audit is not established
(PASS*, saying so) rather than failed. A system whose logging costs time, or that caches, fails every pair; on virtual
time the runs of one kind are the same, so a simulated device's audits stay exact.

The audits themselves are :mod:`conformance.perf.test01` and :mod:`conformance.perf.test04`; their configuration
(scenarios, seeds, bounds, exempt models) is data: ``conformance/targets/audit.toml``.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.hardware.base import AUDITS
from conformance.perf.harness import ScenarioResult, ScenarioSettings, scenario_metric
from conformance.targets.audit import AuditConfig
from conformance.targets.performance import PerformanceTarget


@dataclass(frozen=True)
class AuditCase:
    """One audit of one performance target: ``<model>-<precision>-<scenario>-<audit>``."""

    target: PerformanceTarget
    audit: str

    @property
    def test_id(self) -> str:
        return f"{self.target.test_id}-{self.audit}"


def audit_matrix(targets, config: AuditConfig) -> tuple[list[AuditCase], dict[str, str]]:
    """The audits of these performance targets: each target in a scenario an audit applies to, unless its model is
    exempt. Returns the cases and, for the record, the exempt ones (test id -> reason)."""
    cases, exempt = [], {}
    for target in targets:
        for audit in AUDITS:
            if target.scenario not in config.scenarios(audit):
                continue
            case = AuditCase(target, audit)
            reason = config.exempt_reason(audit, target.model)
            if reason:
                exempt[case.test_id] = reason
            else:
                cases.append(case)
    return cases, exempt


# -- LoadGen settings of the audit runs -----------------------------------------------------------------------------
class AuditSettings(ScenarioSettings):
    """A scenario's settings with the audit's LoadGen fields set (what MLPerf's audit.config files set)."""

    @classmethod
    def from_settings(cls, settings: ScenarioSettings, **changes) -> "AuditSettings":
        """``settings`` with the audit's fields (and any scenario field) changed."""
        base = {k: getattr(settings, k) for k in ScenarioSettings.__dataclass_fields__}
        return cls(**{**base, **changes})


def fastest(runs: list[ScenarioResult]) -> ScenarioResult:
    """The run of the highest score (samples/s, or 1e9 / the plain latency percentile in ns: a short run has no
    early-stopping estimate); the first of equals. An audit measured again stands on the fastest run of each kind:
    load on the host only ever slows a run down."""
    return max(runs, key=lambda run: performance_score(run, early_stopping=False)[0] or 0.0)


def host_noise(first: list[ScenarioResult], second: list[ScenarioResult], score, holds, resolution: float) -> str:
    """Why a comparison of two kinds of runs that failed on their fastest runs may be the host's noise ('' when the
    failure stands). ``score(run)``: a run's figure (positive); ``holds(a, b)``: whether the scores of a run of the
    first kind and of the second meet the bound; ``resolution``: the share of a score the bound tells apart (its
    tolerance).

    The failure stands when no pair of runs meets the bound (every run of one kind is beyond the bound from every run
    of the other, which load on the host cannot do to one kind alone) or when the runs of each kind agree within
    ``resolution`` (the host measured consistently). Otherwise the host's run-to-run spread is as large as what the
    bound has to resolve, and the comparison establishes nothing."""
    scores = [[score(run) for run in runs] for runs in (first, second)]
    if max(len(first), len(second)) < 2 or any(not s or s <= 0 for kind in scores for s in kind):
        return ""
    pairs = [(a, b) for a in scores[0] for b in scores[1]]
    met = sum(1 for a, b in pairs if holds(a, b))
    spread = max(max(kind) / min(kind) - 1.0 for kind in scores)
    if not met or spread <= resolution:
        return ""
    return (f"host-bound: the runs of one kind spread {spread:.1%} on this host, more than the {resolution:.0%} the "
            f"bound tells apart, and {met} of {len(pairs)} pairs of runs meet it")


def performance_score(result: ScenarioResult, early_stopping: bool = True) -> tuple[float | None, str]:
    """MLPerf verify_performance.py's score of a run (higher is faster) and what it is: samples/s in Offline and
    Server; 1e9 / the latency in ns in SingleStream and MultiStream (the early-stopping estimate, or the plain
    percentile for a run of too few queries for one)."""
    value, basis = scenario_metric(result.scenario, result.details, early_stopping)
    if result.scenario in ("Offline", "Server"):
        return value, basis
    return (1e3 / value if value else None), f"1e9 / {basis} (ns)"
