"""MLPerf compliance audits over the LoadGen harness: TEST01 (performance-mode answers are the accuracy-mode answers) and
TEST04 (a repeated sample is not served faster: no caching of results). Plain functions, testable without pytest.

TEST01 (:func:`run_test01`): a performance run with LoadGen's accuracy-log sampling writes a random subset of the
responses to ``mlperf_log_accuracy.json``; an accuracy run (``TestMode.AccuracyOnly``, every QSL sample once) on a device
that computes its answers afresh writes all of them; :func:`compare_responses` checks each sampled response against the
accuracy-mode response of the same ``qsl_idx``, byte for byte. When some differ, MLPerf's rule for non-deterministic
systems decides (:func:`accuracy_delta`): the task metric of the sampled responses and of the accuracy-mode responses of
the same samples (MLPerf's ``create_accuracy_baseline.py``) may differ by at most 1% (-99) or 0.1% (-99.9).

TEST04 (:func:`run_test04`): a performance run over the performance sample set, then one where LoadGen issues a single
loaded sample over and over (``performance_issue_same``); the second must not score more than 10% better (20% for
SingleStream/MultiStream latencies of microseconds and more), as MLPerf's ``verify_performance.py`` decides, whose score
is samples/s, or 1e9 / the early-stopping latency estimate in ns. A pair over the bound is measured again before the
audit fails (host noise; a caching system fails every pair).

The configuration (scenarios, seeds, bounds, exempt models) is data: ``conformance/targets/audit.toml``.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from conformance.perf.harness import SCENARIOS, ScenarioResult, ScenarioSettings, run_scenario

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

AUDIT_FILE = Path(__file__).resolve().parent.parent / "targets" / "audit.toml"
AUDITS = ("TEST01", "TEST04")


class AuditConfigError(ValueError):
    """A mistake in audit.toml; the message names the file and the key."""


class AccuracyLogError(ValueError):
    """A LoadGen accuracy log that cannot be read; the message names the file and the entry."""


# -- configuration --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditConfig:
    test01_scenarios: tuple[str, ...]
    accuracy_log_rng_seed: int
    accuracy_delta: float
    sampling_target: dict  # profile -> responses sampled into the accuracy log per performance run
    test04_scenarios: tuple[str, ...]
    same_index: int
    max_speedup: float
    short_latency_max_speedup: float
    short_latency_score: dict  # scenario -> score at or below which the relaxed bound applies
    remeasure: int  # times a TEST04 pair over the bound is measured again before the audit fails
    test04_exempt: dict  # model -> reason
    profile_models: dict  # profile -> models audited (profiles absent: every model)

    def models_for(self, profile: str, selected: Sequence[str]) -> tuple[str, ...]:
        """The selected models (``--model``) that the profile audits."""
        allowed = self.profile_models.get(profile)
        return tuple(m for m in selected if allowed is None or m in allowed)

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
    from conformance.settings import PROFILE_NAMES
    from models import MODEL_NAMES

    path = Path(path)
    data = tomllib.loads(path.read_text())

    def fail(message: str):
        raise AuditConfigError(f"{path}: {message}")

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

    t1 = section("TEST01", ("scenarios", "accuracy_log_rng_seed", "accuracy_delta", "sampling_target"))
    t4 = section("TEST04", ("scenarios", "performance_issue_same_index", "max_speedup", "short_latency_max_speedup",
                            "short_latency_score", "remeasure"))
    if not isinstance(t1["sampling_target"], dict) or not t1["sampling_target"]:
        fail("[TEST01].sampling_target must map profile names to response counts")
    sampling = {p: int(positive("TEST01", f"sampling_target.{p}", n)) for p, n in t1["sampling_target"].items()}
    missing = [p for p in PROFILE_NAMES if p not in sampling]
    if missing:
        fail(f"[TEST01].sampling_target lacks profile(s) {missing}")
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
    profile_models = {}
    for profile, entry in data.get("profiles", {}).items():
        if profile not in PROFILE_NAMES:
            fail(f"[profiles.{profile}]: unknown profile; expected one of: {', '.join(PROFILE_NAMES)}")
        chosen = entry.get("models") if isinstance(entry, dict) else None
        if not isinstance(chosen, list) or not chosen:
            fail(f"[profiles.{profile}] needs models = [a non-empty list of model names]")
        unknown = [m for m in chosen if m not in MODEL_NAMES]
        if unknown:
            fail(f"[profiles.{profile}].models: unknown model(s) {unknown}; expected some of: {', '.join(MODEL_NAMES)}")
        profile_models[profile] = tuple(chosen)
    for scenario in t4["short_latency_score"]:
        if scenario not in SCENARIOS:
            fail(f"[TEST04].short_latency_score: unknown scenario {scenario!r}; expected some of: {', '.join(SCENARIOS)}")
    return AuditConfig(
        test01_scenarios=tuple(t1["scenarios"]),
        accuracy_log_rng_seed=int(t1["accuracy_log_rng_seed"]),
        accuracy_delta=positive("TEST01", "accuracy_delta", t1["accuracy_delta"]),
        sampling_target=sampling,
        test04_scenarios=tuple(t4["scenarios"]),
        same_index=same_index,
        max_speedup=positive("TEST04", "max_speedup", t4["max_speedup"], above=1.0),
        short_latency_max_speedup=positive("TEST04", "short_latency_max_speedup", t4["short_latency_max_speedup"],
                                           above=1.0),
        remeasure=remeasure,
        short_latency_score={s: positive("TEST04", f"short_latency_score.{s}", v)
                             for s, v in t4["short_latency_score"].items()},
        test04_exempt=exempt,
        profile_models=profile_models,
    )


@dataclass(frozen=True)
class AuditCase:
    """One audit of one performance target: ``<model>-<precision>-<scenario>-<audit>``."""

    target: object  # conformance.targets.performance.PerformanceTarget
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
@dataclass
class AuditSettings(ScenarioSettings):
    """A scenario's settings plus the audit's LoadGen fields (what MLPerf's audit.config files set)."""

    mode: str = "PerformanceOnly"  # or "AccuracyOnly"
    accuracy_log_sampling_target: int = 0
    accuracy_log_rng_seed: int = 0
    issue_same_index: int | None = None  # performance_issue_same with this index into the loaded sample set

    @classmethod
    def from_settings(cls, settings: ScenarioSettings, **changes) -> "AuditSettings":
        """``settings`` with the audit's fields (and any scenario field) changed."""
        base = {k: getattr(settings, k) for k in ScenarioSettings.__dataclass_fields__}
        return cls(**{**base, **changes})

    def loadgen_settings(self):
        import mlperf_loadgen as lg

        s = super().loadgen_settings()
        if self.mode not in ("PerformanceOnly", "AccuracyOnly"):
            raise ValueError(f"audit run mode {self.mode!r}; expected PerformanceOnly or AccuracyOnly")
        s.mode = getattr(lg.TestMode, self.mode)
        s.accuracy_log_sampling_target = int(self.accuracy_log_sampling_target)
        s.accuracy_log_rng_seed = int(self.accuracy_log_rng_seed)
        if self.issue_same_index is not None:
            if not 0 <= self.issue_same_index < self.performance_sample_count:
                raise ValueError(f"performance_issue_same_index {self.issue_same_index} is outside the "
                                 f"{self.performance_sample_count} loaded samples")
            s.performance_issue_unique = False
            s.performance_issue_same = True
            s.performance_issue_same_index = int(self.issue_same_index)
        return s


# -- TEST01 ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoggedResponse:
    seq_id: int
    qsl_idx: int
    data: bytes


def read_accuracy_log(path: Path) -> list[LoggedResponse]:
    """The entries of a LoadGen ``mlperf_log_accuracy.json`` (a list of {seq_id, qsl_idx, data: hex})."""
    path = Path(path)
    if not path.is_file():
        raise AccuracyLogError(f"{path}: no LoadGen accuracy log (expected mlperf_log_accuracy.json from the run)")
    try:
        entries = json.loads(path.read_text() or "[]")
    except json.JSONDecodeError as exc:
        raise AccuracyLogError(f"{path}: not JSON ({exc})") from None
    if not isinstance(entries, list):
        raise AccuracyLogError(f"{path}: expected a JSON list of responses, got {type(entries).__name__}")
    out = []
    for i, entry in enumerate(entries):
        try:
            out.append(LoggedResponse(int(entry["seq_id"]), int(entry["qsl_idx"]), bytes.fromhex(entry["data"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise AccuracyLogError(f"{path}: entry {i} is not {{seq_id, qsl_idx, data: hex}} ({exc!r}): "
                                   f"{entry!r:.200}") from None
    return out


@dataclass
class ResponseComparison:
    """Sampled performance-mode responses against the accuracy-mode responses of the same samples."""

    sampled: int  # responses LoadGen logged in performance mode
    matching: int  # byte-equal to the accuracy-mode response of the same qsl_idx
    mismatched: list[int]  # qsl_idx of the responses that differ (one per logged response)
    missing: list[int]  # qsl_idx logged in performance mode but absent from the accuracy log
    inconsistent_accuracy: list[int]  # qsl_idx logged twice in accuracy mode with different data

    @property
    def fraction(self) -> float:
        """Fraction of the sampled responses that match; 0 when nothing was sampled (the audit saw nothing)."""
        return self.matching / self.sampled if self.sampled else 0.0

    @property
    def all_match(self) -> bool:
        return self.sampled > 0 and self.matching == self.sampled


def compare_responses(performance: Sequence[LoggedResponse], accuracy: Sequence[LoggedResponse]) -> ResponseComparison:
    baseline: dict[int, bytes] = {}
    inconsistent = set()
    for entry in accuracy:
        if entry.qsl_idx in baseline and baseline[entry.qsl_idx] != entry.data:
            inconsistent.add(entry.qsl_idx)
        baseline.setdefault(entry.qsl_idx, entry.data)
    matching, mismatched, missing = 0, [], []
    for entry in performance:
        expected = baseline.get(entry.qsl_idx)
        if expected is None:
            missing.append(entry.qsl_idx)
        elif expected == entry.data:
            matching += 1
        else:
            mismatched.append(entry.qsl_idx)
    return ResponseComparison(len(performance), matching, mismatched, missing, sorted(inconsistent))


Scorer = Callable[[Sequence[tuple[int, bytes]]], dict]  # [(qsl_idx, response bytes)] -> {metric: value}


@dataclass
class AccuracyDelta:
    """MLPerf's TEST01 fallback: the task metrics of the sampled responses and of their accuracy-mode baseline."""

    tolerance: float
    metrics: dict  # metric -> {"performance": x, "accuracy": y, "relative_delta": d}
    passed: bool
    reason: str = ""


def accuracy_delta(score: Scorer | None, performance: Sequence[LoggedResponse], accuracy: Sequence[LoggedResponse],
                   tolerance: float) -> AccuracyDelta:
    """Score the sampled responses and the accuracy-mode responses of the same samples (one baseline entry per sampled
    response, as MLPerf's create_accuracy_baseline.py builds it); each metric may differ by at most ``tolerance``
    relative to the accuracy-mode value."""
    if score is None:
        return AccuracyDelta(tolerance, {}, False, "no task metric to fall back to for this model")
    baseline = {}
    for entry in accuracy:
        baseline.setdefault(entry.qsl_idx, entry.data)
    sampled = [(e.qsl_idx, e.data) for e in performance if e.qsl_idx in baseline]
    if not sampled:
        return AccuracyDelta(tolerance, {}, False, "no sampled response has an accuracy-mode counterpart")
    try:
        perf_metrics = score(sampled)
        acc_metrics = score([(i, baseline[i]) for i, _ in sampled])
    except Exception as exc:  # a response that cannot be decoded is not an answer of the model
        return AccuracyDelta(tolerance, {}, False, f"the responses cannot be scored: {type(exc).__name__}: {exc}")
    if not acc_metrics:
        return AccuracyDelta(tolerance, {}, False, "the task has no metric to fall back to")
    table, passed = {}, True
    for name, reference in acc_metrics.items():
        value = perf_metrics.get(name)
        if value is None or not math.isfinite(value):
            delta = math.inf
        else:
            delta = abs(value - reference) / max(abs(reference), 1e-12)
        table[name] = {"performance": value, "accuracy": reference, "relative_delta": delta}
        passed = passed and delta <= tolerance
    reason = "" if passed else "task metric differs by more than {:.3g}%".format(tolerance * 100)
    return AccuracyDelta(tolerance, table, passed, reason)


def fresh_answers(device):
    """A copy of ``device`` that computes its answers again (the simulated IPU keeps the answers it computed when the
    QSL loaded; the copy starts without them, with new ops), so accuracy mode does not read performance mode's memory."""
    clone = copy.copy(device)
    if isinstance(getattr(device, "responses", None), dict):
        clone.responses = {}
    if hasattr(device, "_free_at"):
        clone._free_at = 0.0
    return clone


@dataclass
class Test01Result:
    comparison: ResponseComparison
    fallback: AccuracyDelta | None
    performance: ScenarioResult
    accuracy: ScenarioResult
    sampling_target: int

    @property
    def value(self) -> float:
        return self.comparison.fraction

    @property
    def units(self) -> str:
        """The value's meaning; says when MLPerf's accuracy-delta rule decided the verdict."""
        if self.fallback is None:
            return "fraction byte-equal"
        met = "met" if self.fallback.passed else "not met"
        return f"fraction byte-equal; task metric within {self.fallback.tolerance:.3g} (rel.): {met}"

    @property
    def passed(self) -> bool:
        if self.performance.sut_errors or self.accuracy.sut_errors or self.comparison.sampled == 0:
            return False
        if self.comparison.all_match:
            return True
        return self.fallback is not None and self.fallback.passed and not self.comparison.missing

    def describe(self) -> str:
        c = self.comparison
        text = (f"TEST01: {c.matching}/{c.sampled} sampled performance-mode responses byte-equal to accuracy mode "
                f"({c.fraction:.4g})")
        if c.sampled == 0:
            text += f"; LoadGen logged no response (sampling target {self.sampling_target}): nothing was audited"
        if c.mismatched:
            text += f"; differing qsl_idx {sorted(set(c.mismatched))[:10]}"
        if c.missing:
            text += f"; qsl_idx absent from the accuracy log {sorted(set(c.missing))[:10]}"
        if self.fallback is not None and not c.all_match and c.sampled:
            f = self.fallback
            text += (f"; MLPerf fallback (task metric within {f.tolerance:.3g} relative): "
                     f"{'met' if f.passed else 'NOT met'}" + (f" ({f.reason})" if f.reason else "")
                     + "".join(f", {k} {v['performance']} vs {v['accuracy']}" for k, v in f.metrics.items()))
        errors = self.performance.sut_errors + self.accuracy.sut_errors
        if errors:
            text += f"; the system under test raised: {errors[0]}"
        return text + f"; logs {Path(self.performance.log_dir).parent}"

    def details(self) -> dict:
        c = self.comparison
        out = {
            "sampled_responses": c.sampled, "matching_responses": c.matching,
            "mismatched_qsl_idx": sorted(set(c.mismatched)),
            "missing_qsl_idx": sorted(set(c.missing)), "inconsistent_accuracy_qsl_idx": c.inconsistent_accuracy,
            "sampling_target": self.sampling_target, "performance_log_dir": self.performance.log_dir,
            "accuracy_log_dir": self.accuracy.log_dir, "accuracy_mode_samples": self.accuracy.completed,
            "performance_result": {"metric": self.performance.metric, "value": self.performance.value,
                                   "units": self.performance.units, "loadgen_valid": self.performance.valid},
            "sut_errors": self.performance.sut_errors + self.accuracy.sut_errors,
        }
        if self.fallback is not None:
            out["accuracy_fallback"] = {"tolerance": self.fallback.tolerance, "metrics": self.fallback.metrics,
                                        "passed": self.fallback.passed, "reason": self.fallback.reason}
        return out


def run_test01(device, settings: ScenarioSettings, log_dir: Path, *, sampling_target: int, rng_seed: int,
               tolerance: float, score: Scorer | None = None, accuracy_device=None, **run_options) -> Test01Result:
    """TEST01 of ``device`` in ``settings.scenario``: logs in ``log_dir/performance`` and ``log_dir/accuracy``.
    ``accuracy_device`` (default :func:`fresh_answers` of ``device``) serves the accuracy run; ``score`` is the
    task metric for MLPerf's fallback, used only when some response differs."""
    log_dir = Path(log_dir)
    performance = run_scenario(device, AuditSettings.from_settings(
        settings, accuracy_log_sampling_target=sampling_target, accuracy_log_rng_seed=rng_seed),
        log_dir / "performance", **run_options)
    accuracy = run_scenario(accuracy_device if accuracy_device is not None else fresh_answers(device),
                            AuditSettings.from_settings(settings, mode="AccuracyOnly"), log_dir / "accuracy", **run_options)
    sampled = read_accuracy_log(Path(performance.log_dir) / "mlperf_log_accuracy.json")
    answers = read_accuracy_log(Path(accuracy.log_dir) / "mlperf_log_accuracy.json")
    comparison = compare_responses(sampled, answers)
    fallback = None
    if comparison.sampled and not comparison.all_match:
        fallback = accuracy_delta(score, sampled, answers, tolerance)
    return Test01Result(comparison, fallback, performance, accuracy, sampling_target)


# -- TEST04 ---------------------------------------------------------------------------------------------------------
def performance_score(result: ScenarioResult, early_stopping: bool = True) -> tuple[float | None, str]:
    """MLPerf verify_performance.py's score of a run (higher is faster) and what it is: samples/s in Offline and
    Server; 1e9 / the early-stopping latency estimate in ns in SingleStream (p90) and MultiStream (p99). A run of too
    few queries for early stopping (64 at p90, 662 at p99) has no estimate; its plain percentile stands in (and
    everywhere with ``early_stopping=False``)."""
    details = result.details
    if result.scenario == "Offline":
        return _float(details.get("result_samples_per_second")), "samples/s"
    if result.scenario == "Server":
        return _float(details.get("result_completed_samples_per_sec")), "samples/s"
    tail = "90.00" if result.scenario == "SingleStream" else "99.00"
    estimate = details.get("early_stopping_latency_ss" if result.scenario == "SingleStream" else "early_stopping_latency_ms")
    if estimate and early_stopping:
        return 1e9 / float(estimate), f"1e9 / early-stopping p{tail[:2]} latency estimate (ns)"
    latency = details.get(f"result_{tail}_percentile_latency_ns")
    basis = f"1e9 / p{tail[:2]} latency (ns; too few queries for an early-stopping estimate)"
    return (1e9 / float(latency) if latency else None), basis


def _float(value) -> float | None:
    return None if value is None else float(value)


@dataclass
class Test04Result:
    reference: ScenarioResult
    same_sample: ScenarioResult
    reference_score: float | None
    same_sample_score: float | None
    limit: float
    same_index: int
    basis: str = ""  # what the scores are (performance_score)
    notes: list = field(default_factory=list)
    earlier_ratios: list = field(default_factory=list)  # pairs over the bound that were measured again

    @property
    def ratio(self) -> float | None:
        """Same-sample score / reference score: above 1, the repeated sample is served faster."""
        if not self.reference_score or self.same_sample_score is None:
            return None
        return self.same_sample_score / self.reference_score

    @property
    def passed(self) -> bool:
        if self.reference.sut_errors or self.same_sample.sut_errors or self.ratio is None:
            return False
        return self.ratio <= self.limit

    def describe(self) -> str:
        ratio = "n/a" if self.ratio is None else f"{self.ratio:.4g}"
        text = (f"TEST04: same-sample score / reference score = {ratio} (limit <= {self.limit:g}); scores "
                f"[{self.basis}]: reference {self.reference_score}, one sample (loaded-set index {self.same_index}) "
                f"repeated {self.same_sample_score}")
        errors = self.reference.sut_errors + self.same_sample.sut_errors
        if errors:
            text += f"; the system under test raised: {errors[0]}"
        return text + f"; logs {Path(self.reference.log_dir).parent}"

    def details(self) -> dict:
        return {
            "reference_score": self.reference_score, "same_sample_score": self.same_sample_score, "limit": self.limit,
            "performance_issue_same_index": self.same_index, "score": self.basis,
            "reference_log_dir": self.reference.log_dir, "same_sample_log_dir": self.same_sample.log_dir,
            "reference_loadgen_valid": self.reference.valid, "same_sample_loadgen_valid": self.same_sample.valid,
            "reference_query_count": self.reference.query_count, "same_sample_query_count": self.same_sample.query_count,
            "sut_errors": self.reference.sut_errors + self.same_sample.sut_errors, "notes": self.notes,
            "earlier_ratios": self.earlier_ratios,
        }


def run_test04(device, settings: ScenarioSettings, log_dir: Path, *, config: AuditConfig, warmup: bool = True,
               **run_options) -> Test04Result:
    """TEST04 of ``device`` in ``settings.scenario``: logs in ``log_dir/reference`` and ``log_dir/same_sample``.
    ``warmup`` runs the reference once before it is measured (logs in ``log_dir/warmup``): the first LoadGen run of a
    process is some 10% slower (threads and caches start cold), which would make the repeated sample look faster.
    A pair of runs over the bound is measured again up to ``config.remeasure`` times (``log_dir/remeasure-<n>/``), as
    an MLPerf submitter reruns a compliance test: the audit fails only when every pair does. A system that caches fails
    every pair; host noise (a few ms of thread wake-up delay against sub-ms latencies) rarely fails twice."""
    log_dir = Path(log_dir)
    count = int(settings.performance_sample_count)
    same_index = config.same_index % count
    notes = []
    if same_index != config.same_index:
        notes.append(f"performance_issue_same_index {config.same_index} taken modulo the {count} loaded samples")
    if warmup:
        run_scenario(device, AuditSettings.from_settings(settings), log_dir / "warmup", **run_options)
    earlier = []
    for attempt in range(1 + config.remeasure):
        where = log_dir if attempt == 0 else log_dir / f"remeasure-{attempt}"
        reference = run_scenario(device, AuditSettings.from_settings(settings), where / "reference", **run_options)
        # As many queries as the reference: LoadGen sizes a run from the expected latency, so a system that answers
        # the repeated sample at once would finish after a few queries, and the early-stopping estimate of a few
        # queries is their slowest one (the first, uncached), not their p90.
        queries = settings.min_query_count
        if settings.scenario != "Offline":
            queries = max(queries, reference.query_count)
        same = run_scenario(device, AuditSettings.from_settings(settings, issue_same_index=same_index,
                                                                min_query_count=queries),
                            where / "same_sample", **run_options)
        (reference_score, basis), (same_score, same_basis) = performance_score(reference), performance_score(same)
        if same_basis != basis:  # one run had an early-stopping estimate, the other not: compare like with like
            (reference_score, basis), (same_score, _) = (performance_score(reference, early_stopping=False),
                                                         performance_score(same, early_stopping=False))
        limit = config.speedup_limit(settings.scenario, reference_score) if reference_score else config.max_speedup
        result = Test04Result(reference, same, reference_score, same_score, limit, same_index, basis, list(notes))
        if result.passed or result.ratio is None or attempt == config.remeasure:
            break
        earlier.append(result.ratio)
    if limit != config.max_speedup:
        result.notes.append(f"MLPerf's relaxed bound for short {settings.scenario} latencies (score <= "
                            f"{config.short_latency_score[settings.scenario]:g}): {limit:g}")
    if earlier:
        result.notes.append(f"earlier pair(s) over the bound, measured again: ratios {[round(r, 4) for r in earlier]}")
    result.earlier_ratios = earlier
    return result


# -- the suite's task metric for TEST01's fallback ------------------------------------------------------------------
def task_scorer(model, samples) -> Scorer:
    """Scores responses of ``model`` (as :mod:`conformance.perf.systems` builds them: every output's rows of the sample,
    float32, concatenated in name order) against the FP32 outputs of the same samples with the suite's task metrics;
    for a model without one (conformer), the SNR and cosine of its primary output, which the suite gates as its task
    metrics. ``samples`` is the :class:`~conformance.perf.systems.Samples` the device serves."""
    from conformance import metrics
    from conformance.hardware.ops import Ops

    def score(entries):
        indices = [i for i, _ in entries]
        inputs = samples.batch_inputs(indices)
        reference = model(inputs, Ops())
        rows = samples.workload.rows_per_sample
        names = sorted(reference)
        widths = [int(np.prod(reference[k].shape[1:], dtype=np.int64)) * rows for k in names]
        decoded = {k: [] for k in names}
        for _, data in entries:
            flat = np.frombuffer(data, np.float32)
            if flat.size != sum(widths):
                raise ValueError(f"a response of {flat.size} float32 values; {model.name} answers {sum(widths)}")
            for k, part in zip(names, np.split(flat, np.cumsum(widths)[:-1])):
                decoded[k].append(part.reshape((rows,) + reference[k].shape[1:]))
        hardware = {k: np.concatenate(v) for k, v in decoded.items()}
        if metrics.TASK_METRICS.get(model.name):
            return metrics.task_metrics(model.name, reference, hardware, inputs)
        primary = metrics.PRIMARY_OUTPUT[model.name]
        tensor = metrics.tensor_metrics(reference[primary], hardware[primary], f"{model.name} {primary}")
        return {k: tensor[k] for k in ("snr_db", "cosine")}

    return score
