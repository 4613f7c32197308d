"""MLPerf's TEST01: performance-mode answers are the accuracy-mode answers (see :mod:`conformance.perf.audits`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from conformance.accuracy import metrics
from conformance.hardware.devices import Device, Samples
from conformance.perf.accuracy_log import LoggedResponse
from conformance.perf.audits import AuditSettings, fastest, host_noise
from conformance.perf.harness import ScenarioResult, ScenarioSettings, run_scenario
from conformance.perf.verification import (
    TEST_PASS,
    invalid_by_design,
    result_score,
    test01_performance,
    verify_accuracy,
)
from conformance.targets.accuracy import TASK_METRICS
from conformance.targets.audit import AuditConfig, load_audit_config
from models.ops import Ops


class AccuracyLogError(ValueError):
    """A LoadGen accuracy log that cannot be read; the message names the file and the entry."""


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


@dataclass
class Test01Result:
    comparison: ResponseComparison
    fallback: AccuracyDelta | None
    performance: ScenarioResult  # the run with accuracy logging (the script's "test" run)
    accuracy: ScenarioResult
    sampling_target: int
    plain: ScenarioResult | None = None  # the same run without accuracy logging (the script's "reference" run)
    config: AuditConfig | None = None  # TEST01's tolerances
    official_accuracy: str = ""  # verify_accuracy.py's verdict
    earlier_ratios: list = field(default_factory=list)  # ratios outside the tolerance that were measured again
    runs_each: int = 1  # runs of each kind (logged, plain) the fastest were chosen from
    logged_runs: list = field(default_factory=list)  # every run of each kind measured (on the host's clock)
    plain_runs: list = field(default_factory=list)

    @property
    def host_noise(self) -> str:
        """Why the performance half's failure is the host's noise ('' when it stands or passes; audits.host_noise)."""
        if self.plain is None or self.config is None or self.official_performance == TEST_PASS:
            return ""
        if any(not run.valid for run in self.logged_runs + self.plain_runs):
            return ""
        tolerance = self.performance_tolerance

        def holds(logged: float, plain: float) -> bool:
            share = self.config.performance_tolerance(self.plain.scenario, plain)
            return plain * (1 - share) <= logged <= plain * (1 + share)

        return host_noise(self.logged_runs, self.plain_runs, result_score, holds, tolerance or 0.0)

    @property
    def performance_ratio(self) -> float | None:
        """The logged run's result field over the plain run's (verify_performance.py's comparison); None when not
        compared or a field is missing."""
        if self.plain is None:
            return None
        logged, plain = result_score(self.performance), result_score(self.plain)
        return logged / plain if logged and plain else None

    @property
    def performance_tolerance(self) -> float | None:
        plain = result_score(self.plain) if self.plain is not None else None
        if plain is None or self.config is None:
            return None
        return self.config.performance_tolerance(self.plain.scenario, plain)

    @property
    def official_performance(self) -> str:
        """verify_performance.py's verdict on the plain run (reference) and the logged run (test); empty when there is
        no plain run."""
        if self.plain is None or self.config is None:
            return ""
        return test01_performance(self.plain, self.performance, self.config.performance_tolerance)

    @property
    def established(self) -> bool:
        """False when the performance half fails only because a short profile's runs are INVALID for their length:
        the audit is then not established (neither passed nor failed by its performance half)."""
        return not (self.official_performance.startswith("TEST FAIL")
                    and (invalid_by_design(self.plain, self.performance) or self.host_noise))

    @property
    def performance_passed(self) -> bool:
        """TEST01's second half passes, or was not run (no plain run to compare with), or is not established."""
        return self.plain is None or self.official_performance == TEST_PASS or not self.established

    @property
    def accuracy_passed(self) -> bool:
        """verify_accuracy.py passes and every sampled response equals its accuracy-mode one byte for byte, or, where
        they differ, MLPerf's task-metric delta holds (TEST01's step for systems that are not deterministic); a sample
        missing from the accuracy log fails."""
        if self.comparison.missing:
            return False
        if self.official_accuracy == TEST_PASS and self.comparison.all_match:
            return True
        return self.fallback is not None and self.fallback.passed

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
        if self.plain is not None and self.plain.sut_errors:
            return False
        return self.accuracy_passed and self.performance_passed

    @property
    def verdict_value(self) -> float:
        """The audit's gated value: 1.0 when it passes (every part TEST PASS, or its performance half not established),
        0.0 when it fails."""
        return 1.0 if self.passed else 0.0

    def official(self) -> dict:
        """What MLCommons' scripts say about these logs."""
        out = {"verify_accuracy": self.official_accuracy}
        if self.plain is not None:
            out["verify_performance"] = self.official_performance
        return out

    def describe(self) -> str:
        c = self.comparison
        text = (f"TEST01: {c.matching}/{c.sampled} sampled performance-mode responses byte-equal to accuracy mode "
                f"({c.fraction:.4g}); verify_accuracy.py: {self.official_accuracy}")
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
        if self.plain is not None:
            ratio, tolerance = self.performance_ratio, self.performance_tolerance
            text += (f"; verify_performance.py: {self.official_performance} (result with accuracy logging / without: "
                     f"{'n/a' if ratio is None else f'{ratio:.4g}'}, allowed 1 +- "
                     f"{'n/a' if tolerance is None else f'{tolerance:g}'})")
            if self.earlier_ratios:
                text += (f"; outside it, measured again: ratios {[round(r, 4) for r in self.earlier_ratios]}, then the "
                         f"fastest of {self.runs_each} runs of each kind")
            if not self.established and self.accuracy_passed:
                text += (f" - not established: {self.host_noise}" if self.host_noise else
                         " - not established: the runs are INVALID only for their length, which this profile makes "
                         "shorter than MLPerf's")
        errors = self.performance.sut_errors + self.accuracy.sut_errors + (self.plain.sut_errors if self.plain else [])
        if errors:
            text += f"; the system under test raised: {errors[0]}"
        return text

    def details(self) -> dict:
        c = self.comparison
        out = {
            "sampled_responses": c.sampled, "matching_responses": c.matching, "fraction_byte_equal": c.fraction,
            "mismatched_qsl_idx": sorted(set(c.mismatched)),
            "missing_qsl_idx": sorted(set(c.missing)), "inconsistent_accuracy_qsl_idx": c.inconsistent_accuracy,
            "sampling_target": self.sampling_target, "performance_log_dir": self.performance.log_dir,
            "accuracy_log_dir": self.accuracy.log_dir, "accuracy_mode_samples": self.accuracy.completed,
            "performance_result": {"metric": self.performance.metric, "value": self.performance.value,
                                   "units": self.performance.units, "loadgen_valid": self.performance.valid},
            "sut_errors": self.performance.sut_errors + self.accuracy.sut_errors,
            "performance_ratio": self.performance_ratio,
            "performance_tolerance": self.performance_tolerance,
            "earlier_ratios": self.earlier_ratios,
            "runs_each": self.runs_each,
            "logged_scores": [result_score(run) for run in self.logged_runs],
            "plain_scores": [result_score(run) for run in self.plain_runs],
            "host_noise": self.host_noise,
            "official": self.official(),
        }
        if self.plain is not None:
            out["plain_log_dir"] = self.plain.log_dir
            out["plain_loadgen_valid"] = self.plain.valid
        if self.fallback is not None:
            out["accuracy_fallback"] = {"tolerance": self.fallback.tolerance, "metrics": self.fallback.metrics,
                                        "passed": self.fallback.passed, "reason": self.fallback.reason}
        return out


def run_test01(device: Device, settings: ScenarioSettings, log_dir: Path, *, sampling_target: int, rng_seed: int,
               tolerance: float, score: Scorer | None = None, accuracy_device=None, compare_performance: bool = True,
               config: AuditConfig | None = None, runner=run_scenario, warmup: bool = False,
               **run_options) -> Test01Result:
    """TEST01 of ``device`` in ``settings.scenario``: logs in ``log_dir/performance`` and ``log_dir/accuracy``.
    ``accuracy_device`` (default ``device.fresh()``: it computes its answers again) serves the accuracy run; ``score`` is
    the task metric for MLPerf's fallback, used only when some response differs. ``compare_performance`` adds TEST01's
    second half (logs in ``log_dir/plain``): the run with accuracy logging performs as the same run without it, within
    ``config``'s tolerances (the suite's audit.toml by default). ``runner`` runs one scenario (the real LoadGen's
    :func:`~conformance.perf.harness.run_scenario`, or :func:`~conformance.perf.virtual.simulate_scenario` on virtual
    time for a simulated device).

    On the host's clock (``warmup``) a plain run goes first (``log_dir/warmup``): the first LoadGen run of a process
    starts its threads and caches cold, which the logged run would otherwise pay for alone. A pair (logged and plain)
    outside the tolerance is measured again up to ``config.test01_remeasure`` times (``log_dir/remeasure-<n>/``), the
    later pairs in alternating order, as for TEST04: the performance half then stands on the fastest run of each kind
    (host load only slows a run; logging that costs time slows every logged run). Every logged run's responses are
    compared with the accuracy run's; the first that differ beyond MLPerf's rule fail the audit at once."""
    log_dir = Path(log_dir)
    config = config if config is not None else load_audit_config()
    logged_settings = AuditSettings.from_settings(settings, accuracy_log_sampling_target=sampling_target,
                                                  accuracy_log_rng_seed=rng_seed)
    if warmup:
        runner(device, settings, log_dir / "warmup", **run_options)
    performance = runner(device, logged_settings, log_dir / "performance", **run_options)
    accuracy = runner(accuracy_device if accuracy_device is not None else device.fresh(),
                      AuditSettings.from_settings(settings, mode="AccuracyOnly"), log_dir / "accuracy", **run_options)
    answers = read_accuracy_log(Path(accuracy.log_dir) / "mlperf_log_accuracy.json")
    earlier, logged, plains, judged = [], [performance], [], {}

    def judge(run: ScenarioResult) -> tuple:
        """The accuracy half of a logged run: its sampled responses against the accuracy run's."""
        if run.log_dir not in judged:
            sampled = read_accuracy_log(Path(run.log_dir) / "mlperf_log_accuracy.json")
            comparison = compare_responses(sampled, answers)
            fallback = None
            if comparison.sampled and not comparison.all_match:
                fallback = accuracy_delta(score, sampled, answers, tolerance)
            judged[run.log_dir] = (comparison, fallback, verify_accuracy(sampled, answers))
        return judged[run.log_dir]

    for attempt in range(1 + config.test01_remeasure):
        where = log_dir if attempt == 0 else log_dir / f"remeasure-{attempt}"
        if attempt % 2 and compare_performance:  # alternating order: a host that speeds up favours neither kind
            plains.append(runner(device, settings, where / "plain", **run_options))
        if attempt:
            logged.append(runner(device, logged_settings, where / "performance", **run_options))
        if attempt % 2 == 0 and compare_performance:
            plains.append(runner(device, settings, where / "plain", **run_options))
        comparison, fallback, official = judge(logged[-1])
        latest = Test01Result(comparison, fallback, logged[-1], accuracy, sampling_target,
                              plains[-1] if plains else None, config, official, earlier_ratios=list(earlier))
        if not latest.accuracy_passed or latest.performance_ratio is None or _raised(latest):
            result = latest  # a wrong answer or an error is not noise: judged on this pair, at once
            break
        fastest_logged = fastest(logged)
        comparison, fallback, official = judge(fastest_logged)
        result = Test01Result(comparison, fallback, fastest_logged, accuracy, sampling_target, fastest(plains), config,
                              official, earlier_ratios=list(earlier), runs_each=len(logged), logged_runs=list(logged),
                              plain_runs=list(plains))
        if (result.performance_passed and not result.host_noise) or attempt == config.test01_remeasure:
            break  # passing on the host's noise alone, it is measured again while it may still pass outright
        earlier.append(result.performance_ratio)
    return result


def _raised(result: Test01Result) -> bool:
    return bool(result.performance.sut_errors or (result.plain is not None and result.plain.sut_errors))


# -- the suite's task metric for TEST01's fallback ------------------------------------------------------------------
def task_scorer(model, samples: Samples) -> Scorer:
    """Scores responses of ``model`` (as :class:`~conformance.hardware.devices.Samples` builds them: every output's rows of the sample,
    float32, concatenated in name order) against the FP32 outputs of the same samples with the suite's task metrics;
    for a model without one (conformer), the SNR and cosine of its primary output, which the suite gates as its task
    metrics. ``samples`` is the sample set the device serves."""
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
        if TASK_METRICS.get(model.name):
            return metrics.task_metrics(model.name, reference, hardware, inputs)
        primary = metrics.PRIMARY_OUTPUT[model.name]
        tensor = metrics.tensor_metrics(reference[primary], hardware[primary], f"{model.name} {primary}")
        return {k: tensor[k] for k in ("snr_db", "cosine")}

    return score
