"""MLPerf LoadGen runs: settings per scenario, the run itself, and its result read back from LoadGen's own logs.

:func:`run_scenario` runs one scenario of LoadGen (``mlperf_loadgen``) against a :class:`~conformance.hardware.devices.Device`
behind a :class:`~conformance.perf.sut.BatchingSUT` and keeps LoadGen's ``mlperf_log_summary.txt`` and
``mlperf_log_detail.txt`` in ``log_dir``. The result (:class:`ScenarioResult`) is parsed from the detail log's
``:::MLLOG`` records: validity, each of LoadGen's checks, the scenario's metric, and why a run is INVALID.
Runs shorter than MLPerf's 600 s are marked as not of compliant length.
"""

from __future__ import annotations

import json
import re
import signal
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import mlperf_loadgen as lg
import numpy as np

from conformance.hardware.base import MLPERF_BENCHMARKS, SCENARIOS
from conformance.hardware.devices import Device
from conformance.perf import host
from conformance.perf.interrupts import deferred_interrupts
from conformance.perf.sut import BatchingSUT

# The scenarios LoadGen drives one query at a time: their result is a latency (Server's and Offline's a throughput).
STREAM_SCENARIOS = ("SingleStream", "MultiStream")

COMPLIANT_MIN_DURATION_MS = 600_000  # MLPerf inference rules: every performance run lasts at least 600 s
MULTISTREAM_SAMPLES_PER_QUERY = 8
# The metric each scenario reports (MLPerf): its name, units and the direction of "better".
METRICS = {
    "SingleStream": ("p90_latency_ms", "ms", "<="),
    "MultiStream": ("p99_latency_ms", "ms", "<="),
    "Server": ("completed_samples_per_second", "samples/s", ">="),
    "Offline": ("samples_per_second", "samples/s", ">="),
}
# LoadGen's detail-log keys of a latency scenario: its early-stopping estimate, and the plain percentile (ns).
LATENCY_KEYS = {
    "SingleStream": ("early_stopping_latency_ss", "result_90.00_percentile_latency_ns"),
    "MultiStream": ("early_stopping_latency_ms", "result_99.00_percentile_per_query_latency_ns"),
}
THROUGHPUT_KEYS = {"Server": "result_completed_samples_per_sec", "Offline": "result_samples_per_second"}


def scenario_metric(scenario: str, details: dict, early_stopping: bool = True) -> tuple[float | None, str]:
    """The scenario's figure from LoadGen's detail-log values, and what it is: the early-stopping estimate of the
    latency percentile (MLPerf's SingleStream and MultiStream result), or, for a run of too few queries for one (64 at
    p90, 662 at p99), the plain percentile; samples/s for Server and Offline."""
    if scenario in THROUGHPUT_KEYS:
        raw = details.get(THROUGHPUT_KEYS[scenario])
        return (None if raw is None else float(raw)), "samples/s"
    early, plain = LATENCY_KEYS[scenario]
    tail = "p90" if scenario == "SingleStream" else "p99"
    if early_stopping and details.get(early):
        return float(details[early]) / 1e6, f"early-stopping {tail} latency estimate"
    raw = details.get(plain)
    return (None if raw is None else float(raw) / 1e6), f"{tail} latency (too few queries for an early-stopping estimate)"


TEST_MODES = ("PerformanceOnly", "AccuracyOnly")


def mlperf_conf_settings(benchmark: str, scenario: str):
    """LoadGen's ``TestSettings`` as its built-in mlperf.conf sets them for ``benchmark`` in ``scenario``
    (``TestSettings.FromConfig`` with ``conf_type`` 0: the embedded file alone): seeds, per-model minimums, the Server
    latency bound."""
    if benchmark not in MLPERF_BENCHMARKS:
        raise ValueError(f"unknown mlperf.conf benchmark {benchmark!r}; expected one of: {', '.join(MLPERF_BENCHMARKS)}")
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; expected one of: {', '.join(SCENARIOS)}")
    s = lg.TestSettings()
    s.scenario = getattr(lg.TestScenario, scenario)
    status = s.FromConfig("", benchmark, scenario, 0)
    if status != 0:
        raise RuntimeError(f"LoadGen could not read its built-in mlperf.conf for {benchmark} {scenario} (status {status})")
    return s


@dataclass(frozen=True)
class RngSeeds:
    """LoadGen's seeds of a run (``TestSettings``): the QSL's sample set, the sample indices, the Server schedule."""

    qsl: int
    sample_index: int
    schedule: int


@dataclass
class ScenarioSettings:
    """What one LoadGen run is asked to do. Times in seconds unless the name says otherwise.

    With ``mlperf_model`` (a benchmark of LoadGen's built-in mlperf.conf), the run starts from mlperf.conf's settings
    for it, seeds included, as ``TestSettings.FromConfig`` applies them; the fields here then override the run's length
    and counts (a profile shorter than MLPerf's 600 s says so), the expected latency or QPS and the Server bound.
    Without it, LoadGen's defaults (seeds 0). ``mode``, the accuracy-log fields and ``issue_same_index`` are what the
    compliance audits' ``audit.config`` files set."""

    scenario: str
    min_duration_ms: int = 10_000
    min_query_count: int = 1
    max_duration_ms: int = 0  # 0: no cap
    performance_sample_count: int = 8
    expected_latency_s: float = 1e-3  # SingleStream/MultiStream: LoadGen's estimate before the run
    target_qps: float = 100.0  # Server: Poisson arrival rate; Offline: expected throughput (sizes the one query)
    server_latency_ms: float = 10.0  # Server: the p99 latency bound
    samples_per_query: int = MULTISTREAM_SAMPLES_PER_QUERY
    mlperf_model: str | None = None
    mode: str = "PerformanceOnly"  # or "AccuracyOnly"
    accuracy_log_sampling_target: int = 0
    accuracy_log_rng_seed: int = 0
    issue_same_index: int | None = None  # performance_issue_same with this index into the loaded sample set

    def __post_init__(self):
        if self.scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {self.scenario!r}; expected one of: {', '.join(SCENARIOS)}")
        if self.mode not in TEST_MODES:
            raise ValueError(f"LoadGen test mode {self.mode!r}; expected one of: {', '.join(TEST_MODES)}")
        if self.mlperf_model is not None and self.mlperf_model not in MLPERF_BENCHMARKS:
            raise ValueError(f"unknown mlperf.conf benchmark {self.mlperf_model!r}; expected one of: "
                             f"{', '.join(MLPERF_BENCHMARKS)}")

    @property
    def expected_latency_ns(self) -> int:
        """SingleStream/MultiStream: the expected latency as LoadGen is given it (at least 1 us)."""
        return max(int(self.expected_latency_s * 1e9), 1000)

    @property
    def loadgen_target_qps(self) -> float:
        """LoadGen's internal target QPS: 1e9 / expected latency (ns) in SingleStream and MultiStream, the target or
        expected QPS in Server and Offline."""
        if self.scenario in STREAM_SCENARIOS:
            return 1e9 / self.expected_latency_ns
        return float(self.target_qps)

    def seeds(self) -> RngSeeds:
        """The seeds LoadGen runs with under these settings (mlperf.conf's with ``mlperf_model``, else 0)."""
        s = self.loadgen_settings()
        return RngSeeds(int(s.qsl_rng_seed), int(s.sample_index_rng_seed), int(s.schedule_rng_seed))

    def loadgen_settings(self):
        if self.mlperf_model is not None:
            s = mlperf_conf_settings(self.mlperf_model, self.scenario)
        else:
            s = lg.TestSettings()
            s.scenario = getattr(lg.TestScenario, self.scenario)
        s.mode = getattr(lg.TestMode, self.mode)
        s.min_duration_ms = int(self.min_duration_ms)
        s.max_duration_ms = int(self.max_duration_ms)
        s.min_query_count = int(self.min_query_count)
        s.performance_sample_count_override = int(self.performance_sample_count)
        s.single_stream_expected_latency_ns = self.expected_latency_ns
        s.multi_stream_expected_latency_ns = self.expected_latency_ns
        s.multi_stream_samples_per_query = int(self.samples_per_query)
        s.server_target_qps = float(self.target_qps)
        s.server_target_latency_ns = int(self.server_latency_ms * 1e6)
        s.server_coalesce_queries = True  # one issue call for queries that are due together: less Python per query
        s.offline_expected_qps = float(self.target_qps)
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


@dataclass
class ScenarioResult:
    scenario: str
    valid: bool  # LoadGen's verdict ("Result is : VALID")
    metric: str
    value: float | None
    units: str
    checks: dict  # LoadGen's individual checks: min_duration, min_queries, early_stopping, perf_constraints
    invalid_reason: str  # why LoadGen says INVALID (empty when VALID)
    compliant_length: bool  # min duration at least MLPerf's 600 s
    log_dir: str
    query_count: int = 0
    sut_errors: list = field(default_factory=list)
    issued: int = 0
    completed: int = 0
    wall_s: float = 0.0
    details: dict = field(default_factory=dict)

    @property
    def length_only_invalid(self) -> bool:
        """INVALID only because the run was too short (duration, query count, or too few queries for early
        stopping), not because a latency or throughput constraint was missed."""
        if self.valid:
            return False
        return self.checks.get("perf_constraints", True) is not False and self.value is not None

    def describe(self) -> str:
        value = "n/a" if self.value is None else f"{self.value:.6g} {self.units}"
        verdict = "VALID" if self.valid else f"INVALID ({self.invalid_reason})"
        length = "" if self.compliant_length else ", not of compliant length (MLPerf requires 600 s)"
        return f"{self.scenario}: {self.metric} {value}; LoadGen {verdict}{length}; logs in {self.log_dir}"

    def to_dict(self) -> dict:
        return asdict(self)


def read_detail_log(path: Path) -> dict:
    """The ``:::MLLOG`` records of a LoadGen detail log as key -> value (the last value of a repeated key)."""
    records = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        if line.startswith(":::MLLOG"):
            try:
                entry = json.loads(line[len(":::MLLOG"):])
            except json.JSONDecodeError:
                continue
            records[entry.get("key")] = entry.get("value")
    return records


def _recommendations(summary: str) -> list[str]:
    """The lines LoadGen prints under "Recommendations:" in the summary."""
    lines = summary.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.strip() == "Recommendations:":
            for follow in lines[i + 1:]:
                if not follow.strip().startswith("*"):
                    break
                out.append(follow.strip().lstrip("* ").strip())
    return out


def parse_result(scenario: str, log_dir: Path, min_duration_ms: int) -> ScenarioResult:
    log_dir = Path(log_dir)
    detail_path = log_dir / "mlperf_log_detail.txt"
    summary_path = log_dir / "mlperf_log_summary.txt"
    if not detail_path.is_file() or not summary_path.is_file():
        raise RuntimeError(f"LoadGen wrote no logs in {log_dir} (expected mlperf_log_summary.txt and mlperf_log_detail.txt)")
    records = read_detail_log(detail_path)
    summary = summary_path.read_text(errors="replace")
    metric, units, _ = METRICS[scenario]
    checks = {
        "min_duration": records.get("result_min_duration_met"),
        "min_queries": records.get("result_min_queries_met"),
        "early_stopping": records.get("early_stopping_met"),
    }
    if "result_perf_constraints_met" in records:
        checks["perf_constraints"] = records["result_perf_constraints_met"]
    valid = records.get("result_validity") == "VALID"
    reasons = []
    if not valid:
        names = {"min_duration": "min duration not met", "min_queries": "min queries not met",
                 "early_stopping": "early stopping not met", "perf_constraints": "latency constraint not met"}
        reasons = [names[k] for k, ok in checks.items() if ok is False]
        if records.get("result_invalid_reason"):
            reasons.append(str(records["result_invalid_reason"]))
        reasons += _recommendations(summary)
        if checks.get("early_stopping") is False and records.get("early_stopping_result"):
            reasons.append(re.sub(r"\s+", " ", str(records["early_stopping_result"])).strip())
    details = {k: records[k] for k in records if k.startswith(("result_", "early_stopping", "effective_target", "effective_min",
                                                                 "effective_samples_per_query", "generated_"))}
    value, details["metric_basis"] = scenario_metric(scenario, details)
    return ScenarioResult(
        scenario=scenario, valid=valid, metric=metric, value=value, units=units, checks=checks,
        invalid_reason="; ".join(dict.fromkeys(reasons)) or ("" if valid else "INVALID (no reason logged)"),
        compliant_length=min_duration_ms >= COMPLIANT_MIN_DURATION_MS, log_dir=str(log_dir),
        query_count=int(records.get("result_query_count") or 0), details=details,
    )


def loadgen_log_settings(log_dir: Path, trace: bool = False):
    """LoadGen's log settings: its logs in ``log_dir``, the summary not echoed, the per-sample trace when asked for."""
    output = lg.LogOutputSettings()
    output.outdir = str(log_dir)
    output.copy_summary_to_stdout = False
    settings = lg.LogSettings()
    settings.log_output = output
    settings.enable_trace = trace
    return settings


def run_scenario(device: Device, settings: ScenarioSettings, log_dir: Path | None = None, *, max_batch: int = 1,
                 batch_timeout_s: float = 0.0, total_sample_count: int | None = None, name: str = "sut",
                 trace: bool = False) -> ScenarioResult:
    """One LoadGen run of ``settings.scenario`` against ``device``; LoadGen's logs go to ``log_dir`` (a new temporary
    directory when None), with its per-sample trace (``mlperf_log_trace.json``) when ``trace``. The SUT's errors are returned in ``sut_errors``; every issued query is completed. An
    interrupt (SIGINT, SIGTERM) during the run lets LoadGen finish (:mod:`conformance.perf.interrupts`) and is raised
    again when it has returned."""
    if log_dir is None:
        log_dir = Path(tempfile.mkdtemp(prefix=f"loadgen-{settings.scenario}-"))
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    if settings.scenario in ("SingleStream",):
        max_batch = 1
    total = int(total_sample_count or settings.performance_sample_count)
    loadgen_settings, log_settings = settings.loadgen_settings(), loadgen_log_settings(log_dir, trace)
    sut = BatchingSUT(device, max_batch=max_batch, batch_timeout_s=batch_timeout_s if settings.scenario == "Server" else 0.0,
                      name=name if settings.scenario in name else f"{name} ({settings.scenario})")

    def guarded(method):  # an exception must not cross into LoadGen's C++ frames: it fails the run instead
        def call(indices):
            try:
                method(list(indices))
            except BaseException as exc:  # noqa: BLE001
                sut.fail(f"QSL {method.__name__} of {len(indices)} samples", exc)
        return call

    start = time.perf_counter()
    with deferred_interrupts(lambda signum: sut.finish(f"{signal.Signals(signum).name} received")):
        try:
            qsl = lg.ConstructQSL(total, int(settings.performance_sample_count), guarded(device.load),
                                  guarded(device.unload))
            try:
                lg.StartTestWithLogSettings(sut.sut, qsl, loadgen_settings, log_settings)
            finally:
                lg.DestroyQSL(qsl)
        finally:
            wall = time.perf_counter() - start
            sut.close()
    if sut.interrupted:
        raise KeyboardInterrupt(f"{sut.name}: interrupted in a LoadGen callback")
    result = parse_result(settings.scenario, log_dir, settings.min_duration_ms)
    result.sut_errors = list(sut.errors)
    result.issued, result.completed, result.wall_s = sut.issued, sut.completed, wall
    result.details["batches"] = sut.batches
    if sut.lateness:  # completions later than the simulated device's due time: the host's scheduling, not the device
        late = np.sort(np.asarray(sut.lateness)) * 1e3
        result.details["completion_lateness_ms"] = {"mean": float(late.mean()), "median": float(late[len(late) // 2]),
                                                    "p90": float(late[int(len(late) * 0.9)]), "max": float(late[-1])}
    result.details.update(host.device_side(sut.device_side, sut.device_span))
    result.details["host_load_per_core"] = host.load_per_core()
    return result
