"""LoadGen's scenarios on virtual time, for devices whose timing is modelled (a discrete-event simulation with SimPy).

A simulated device (:class:`~conformance.hardware.devices.ServiceTimeDevice`: the IPU's timing model, the null device)
has no reason to depend on the host's clock. Driving it from the real LoadGen's threads made every latency include the
host's thread wake-up lateness; here the same system runs on a simulated clock instead, so the same inputs give the
same numbers on any machine load:

- **LoadGen** (:class:`_LoadGen`) generates and issues queries as LoadGen does for each scenario: SingleStream (one
  sample, the next query when the previous completes), MultiStream (8 contiguous samples per query, likewise), Server
  (Poisson arrivals at the target QPS from a seeded generator), Offline (one query of every sample); samples are drawn
  from the loaded set with a seeded generator. Run length, early stopping and VALID/INVALID follow LoadGen's rules
  (:mod:`conformance.perf.loadgen_rules`).
- **The system under test** (:class:`_BatchingSUT`) is the batching policy of :class:`conformance.perf.sut.BatchingSUT`:
  a queue; when the device is free a batch of up to ``max_batch`` queued samples is formed, in the Server scenario
  after waiting up to ``batch_timeout_s`` from the oldest one for more.
- **The device** is the backend's own object: ``device.service_time(indices)`` gives a batch's (occupancy, latency)
  on its timeline; a batch starts when the device is free and completes after its latency.

Seeds are LoadGen's for the run's settings (mlperf.conf's with an ``mlperf_model``): the Server schedule is LoadGen's
own for its seed; samples are drawn from the loaded set with numpy, seeded with LoadGen's sample-index seed.

Performance runs compute no answers unless an accuracy log is due: a run with an accuracy-log sampling target (MLPerf's
TEST01) or in accuracy mode loads the device's answers for the loaded samples (the QSL load) and writes LoadGen's
``mlperf_log_accuracy.json`` with the responses LoadGen's own sampling rule picks (:mod:`conformance.perf.accuracy_log`).
A run with ``issue_same_index`` issues that one loaded sample throughout (MLPerf's TEST04).
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import simpy

from conformance.fileio import write_text_atomic
from conformance.hardware.devices import EMPTY_RESPONSE, MalformedResponses, ServiceTimeDevice, check_service
from conformance.perf import loadgen_rules as rules
from conformance.perf.accuracy_log import (
    ACCURACY_LOG_FILE,
    LoggedResponse,
    sampled_sequence_ids,
    sampling_probability,
    write_accuracy_log,
)
from conformance.perf.harness import (
    COMPLIANT_MIN_DURATION_MS,
    METRICS,
    STREAM_SCENARIOS,
    ScenarioResult,
    ScenarioSettings,
    scenario_metric,
)
from conformance.perf.mlperf_log import write_loadgen_logs
from conformance.perf.trace import SimulationTrace

SUMMARY_FILE = "simulation_summary.json"


@dataclass
class _Query:
    scheduled: float  # when LoadGen issues it (virtual seconds from the start)
    samples: list[int]
    finished: simpy.Event | None  # for the scenarios that wait for a query before issuing the next
    pending: int = 0
    done_at: float | None = None  # when its last sample completed (served)


class _BatchingSUT:
    """The batching policy in front of the device (see the module docstring). Queued samples are (query, index).

    When the device raises or returns a malformed service time, the error is recorded and the SUT has *failed*: the
    queued samples and every later one are completed at once, unserved (no latency recorded), and LoadGen stops
    issuing, so that the run ends and is failed with the error, as the real harness does."""

    def __init__(self, env: simpy.Environment, device: ServiceTimeDevice, max_batch: int, batch_timeout_s: float,
                 trace: SimulationTrace, name: str = "sut"):
        self.env = env
        self.device = device
        self.max_batch = max_batch
        self.batch_timeout_s = batch_timeout_s
        self.trace = trace
        self.name = name
        self.failed = False
        self.queue: deque[tuple[_Query, int]] = deque()
        self.free_at = 0.0
        self._arrival: simpy.Event | None = None  # set while the dispatcher waits for a sample
        env.process(self._dispatch())

    def issue(self, query: _Query) -> None:
        query.pending = len(query.samples)
        self.trace.samples_issued += len(query.samples)
        if self.failed:
            self._complete([(query, i) for i in query.samples], self.env.now, served=False)
            return
        self.queue.extend((query, i) for i in query.samples)
        if self._arrival is not None and not self._arrival.triggered:
            self._arrival.succeed()

    def _service(self, batch: list[tuple[_Query, int]]) -> tuple[float, float] | None:
        """The device's (occupancy, latency) of the batch, checked; None (and the SUT failed) on an error."""
        try:
            return check_service(self.device.service_time([index for _, index in batch]), len(batch))
        except Exception as exc:  # noqa: BLE001 - recorded; the run is failed with it
            detail = str(exc) if isinstance(exc, MalformedResponses) else f"{type(exc).__name__}: {exc}"
            self.trace.errors.append(f"{self.name}, device {type(self.device).__name__}: service_time of "
                                     f"{len(batch)} samples at virtual time {self.env.now:.9f} s: {detail}")
            self.failed = True
            self._complete(batch + list(self.queue), self.env.now, served=False)
            self.queue.clear()
            return None

    def _wait_for_arrival(self, timeout: float | None = None):
        self._arrival = self.env.event()
        if timeout is None:
            return self._arrival
        return self.env.any_of([self._arrival, self.env.timeout(timeout)])

    def _dispatch(self):
        env = self.env
        while True:
            if self.free_at > env.now:
                yield env.timeout(self.free_at - env.now)
            while not self.queue:
                yield self._wait_for_arrival()
            if self.batch_timeout_s > 0:
                deadline = self.queue[0][0].scheduled + self.batch_timeout_s
                while len(self.queue) < self.max_batch and deadline > env.now:
                    yield self._wait_for_arrival(deadline - env.now)
            batch = [self.queue.popleft() for _ in range(min(self.max_batch, len(self.queue)))]
            service = self._service(batch)
            if service is None:
                return
            occupancy, latency = service
            self.free_at = env.now + occupancy
            self.trace.batches += 1
            self.trace.batch_sizes.append(len(batch))
            done = env.now + latency
            env.timeout(latency).callbacks.append(lambda _, batch=batch, done=done: self._complete(batch, done))

    def _complete(self, batch: list[tuple[_Query, int]], done: float, served: bool = True) -> None:
        """Complete the samples at ``done``; unserved ones (a failed device) record no latency."""
        trace = self.trace
        trace.samples_completed += len(batch)
        if served:
            trace.last_completion = max(trace.last_completion, done)
        for query, _ in batch:
            if served:
                trace.sample_latencies.append(done - query.scheduled)
            query.pending -= 1
            if query.pending == 0:
                if served:
                    trace.query_latencies.append(done - query.scheduled)
                    query.done_at = done
                if query.finished is not None:
                    query.finished.succeed()


class _LoadGen:
    """Generates and issues the queries of one scenario, as LoadGen does."""

    def __init__(self, env: simpy.Environment, sut: _BatchingSUT, settings: ScenarioSettings, loaded: int,
                 trace: SimulationTrace):
        self.env = env
        self.sut = sut
        self.settings = settings
        self.loaded = loaded
        self.trace = trace
        self.seeds = settings.seeds()
        self.samples_rng = np.random.default_rng(self.seeds.sample_index)
        self._drawn: list[int] = []
        self._next = 0
        self.last_query: _Query | None = None

    def _draw(self) -> int:
        """The next uniformly drawn index into the loaded set (drawn in blocks: one numpy call per 4096); the one index
        of a run that issues the same sample throughout."""
        if self.settings.issue_same_index is not None:
            return int(self.settings.issue_same_index)
        if self._next == len(self._drawn):
            self._drawn = self.samples_rng.integers(0, self.loaded, size=4096).tolist()
            self._next = 0
        self._next += 1
        return self._drawn[self._next - 1]

    def _samples(self, count: int) -> list[int]:
        if self.settings.scenario == "MultiStream":  # contiguous samples from a random start, as LoadGen pads the set
            start = self._draw()
            return [(start + k) % self.loaded for k in range(count)]
        return [self._draw() for _ in range(count)]

    def run(self):
        scenario = self.settings.scenario
        if self.settings.mode == "AccuracyOnly":
            yield from self._every_sample_once()
        elif scenario in STREAM_SCENARIOS:
            yield from self._one_at_a_time()
        elif scenario == "Server":
            yield from self._poisson()
        else:
            yield from self._offline()

    def _issue(self, samples: list[int], wait: bool = True) -> _Query:
        query = _Query(self.env.now, samples, self.env.event() if wait else None)
        self.last_query = query
        self.trace.queries_issued += 1
        self.trace.final_scheduled = self.trace.final_issued = self.env.now
        if self.trace.issued_indices is not None:
            self.trace.issued_indices.extend(samples)
        self.sut.issue(query)
        return query

    def _one_at_a_time(self):
        """SingleStream/MultiStream: a query, and the next one when it completes, until LoadGen would stop."""
        s = self.settings
        per_query = s.samples_per_query if s.scenario == "MultiStream" else 1
        generated = rules.generated_query_count(s.scenario, s.min_duration_ms, s.min_query_count,
                                                expected_latency_ns=s.expected_latency_ns)
        for _ in range(generated):
            if self.sut.failed:
                return
            query = self._issue(self._samples(per_query))
            if rules.stream_issue_done(self.trace.queries_issued, self.env.now, s.min_duration_ms, s.min_query_count,
                                       s.max_duration_ms):
                break
            yield query.finished

    def _poisson(self):
        """Server: every generated query at its scheduled time (LoadGen's Poisson schedule from its seed)."""
        s = self.settings
        for at in rules.server_schedule(s.target_qps, s.min_duration_ms, s.min_query_count, self.seeds.schedule).scheduled_s:
            if at > self.env.now:
                yield self.env.timeout(at - self.env.now)
            if self.sut.failed:
                return
            self._issue(self._samples(1), wait=False)

    def _offline(self):
        s = self.settings
        count = offline_samples(s)
        if s.issue_same_index is not None:
            samples = [int(s.issue_same_index)] * count
        else:
            loaded = list(range(self.loaded))
            samples = (loaded * (count // self.loaded + 1))[:count]  # the loaded set repeated, as LoadGen does
        query = self._issue(samples)
        yield query.finished

    def _every_sample_once(self):
        """Accuracy mode: every loaded sample once, in queries of the scenario's size (Offline: one query)."""
        s = self.settings
        loaded = list(range(self.loaded))
        size = {"Offline": max(1, self.loaded), "MultiStream": s.samples_per_query}.get(s.scenario, 1)
        for start in range(0, self.loaded, size):
            if self.sut.failed:
                return
            yield self._issue(loaded[start:start + size]).finished


def accuracy_log_due(settings: ScenarioSettings) -> bool:
    return settings.mode == "AccuracyOnly" or settings.accuracy_log_sampling_target > 0


def simulate(device: ServiceTimeDevice, settings: ScenarioSettings, *, max_batch: int = 1,
             batch_timeout_s: float = 0.0, name: str = "sut") -> SimulationTrace:
    """Run one scenario on virtual time and return what it measured (a device error ends it early: ``errors``)."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if settings.scenario == "SingleStream":
        max_batch = 1
    env = simpy.Environment()
    trace = SimulationTrace(issued_indices=[] if accuracy_log_due(settings) else None)
    sut = _BatchingSUT(env, device, max_batch, batch_timeout_s if settings.scenario == "Server" else 0.0, trace,
                       name=name if settings.scenario in name else f"{name} ({settings.scenario})")
    loadgen = _LoadGen(env, sut, settings, int(settings.performance_sample_count), trace)
    env.run(env.process(loadgen.run()))
    env.run()  # the queries still in flight
    if loadgen.last_query is not None and loadgen.last_query.done_at is not None:
        trace.final_query_done = loadgen.last_query.done_at
    return trace


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def _sorted_ns(seconds: list[float]) -> list[int]:
    """Latencies in whole nanoseconds (as LoadGen records them), sorted."""
    return np.sort(np.rint(np.asarray(seconds, np.float64) * 1e9).astype(np.int64)).tolist()


def offline_samples(settings: ScenarioSettings) -> int:
    """The samples of Offline's one query, as LoadGen sizes it from the expected QPS and the min duration."""
    return rules.offline_sample_count(settings.target_qps, settings.min_duration_ms, settings.min_query_count)


def summarize(trace: SimulationTrace, settings: ScenarioSettings, log_dir: Path | None) -> ScenarioResult:
    """The run's result with LoadGen's metric, checks and validity, and its summary written to ``log_dir``."""
    scenario = settings.scenario
    sample_ns = _sorted_ns(trace.sample_latencies)
    query_ns = _sorted_ns(trace.query_latencies)
    details: dict = {f"result_{rules.percentile_label(p)}_percentile_latency_ns": rules.percentile_value(sample_ns, p)
                     for p in rules.LOGGED_PERCENTILES} if sample_ns else {}
    details.update(result_query_count=trace.queries_issued, result_min_latency_ns=sample_ns[0] if sample_ns else None,
                   result_max_latency_ns=sample_ns[-1] if sample_ns else None,
                   result_mean_latency_ns=int(np.mean(sample_ns)) if sample_ns else None, batches=trace.batches,
                   mean_batch_size=float(np.mean(trace.batch_sizes)) if trace.batch_sizes else None)
    target_ns = _ns(settings.server_latency_ms / 1e3)
    if scenario == "SingleStream":
        details["early_stopping_latency_ss"] = rules.early_stopping_estimate(sample_ns, rules.SINGLE_STREAM_PERCENTILE).estimate
    elif scenario == "MultiStream":
        details["early_stopping_latency_ms"] = rules.early_stopping_estimate(query_ns, rules.MULTI_STREAM_PERCENTILE).estimate
        for p in rules.LOGGED_PERCENTILES:
            details[f"result_{rules.percentile_label(p)}_percentile_per_query_latency_ns"] = (
                rules.percentile_value(query_ns, p) if query_ns else None)
    elif scenario == "Server":
        details["result_scheduled_samples_per_sec"] = (
            (len(sample_ns) - 1) / trace.final_scheduled if trace.final_scheduled > 0 else None)
        details["result_completed_samples_per_sec"] = (  # LoadGen: (samples - 1) / when the final query was done
            (len(sample_ns) - 1) / trace.final_query_done if trace.final_query_done > 0 else None)
        details["result_overlatency_query_count"] = sum(1 for x in sample_ns if x > target_ns)
    else:
        details["result_samples_per_second"] = len(sample_ns) / trace.last_completion if trace.last_completion else None
    verdict = rules.validity(scenario, min_duration_ms=settings.min_duration_ms, min_query_count=settings.min_query_count,
                             queries_issued=trace.queries_issued, sample_latencies=sample_ns, query_latencies=query_ns,
                             target_latency=target_ns, final_issued_s=trace.final_issued,
                             final_scheduled_s=trace.final_scheduled, last_completion_s=trace.last_completion,
                             samples_per_query=(offline_samples(settings) if scenario == "Offline"
                                                else settings.samples_per_query if scenario == "MultiStream" else 1))
    valid, reasons = verdict.valid, list(verdict.reasons)
    if trace.errors:  # the device failed: the run ended early and its figures mean nothing
        valid, reasons = False, [f"the system under test failed: {trace.errors[0]}"] + reasons
    details["early_stopping_met"] = verdict.early_stopping_met
    details["early_stopping_result"] = " ".join(verdict.early_stopping_result.split())
    metric, units, _ = METRICS[scenario]
    value, details["metric_basis"] = scenario_metric(scenario, details)
    result = ScenarioResult(
        scenario=scenario, valid=valid, metric=metric, value=value, units=units, checks=verdict.checks,
        invalid_reason="; ".join(reasons), compliant_length=settings.min_duration_ms >= COMPLIANT_MIN_DURATION_MS,
        log_dir=str(log_dir) if log_dir is not None else "", query_count=trace.queries_issued, details=details,
        issued=trace.samples_issued, completed=trace.samples_completed, sut_errors=list(trace.errors),
    )
    if log_dir is not None:
        summary = {"scenario": scenario, "clock": "virtual", "settings": {k: getattr(settings, k) for k in (
            "min_duration_ms", "min_query_count", "max_duration_ms", "performance_sample_count", "expected_latency_s",
            "target_qps", "server_latency_ms", "samples_per_query", "mlperf_model", "mode", "accuracy_log_sampling_target", "accuracy_log_rng_seed",
            "issue_same_index")}, "seeds": dataclasses.asdict(settings.seeds()), "valid": result.valid, "checks": result.checks,
            "invalid_reason": result.invalid_reason, "metric": metric, "value": value, "units": units, "details": details,
            "sut_errors": result.sut_errors}
        write_text_atomic(Path(log_dir) / SUMMARY_FILE, json.dumps(summary, indent=2, sort_keys=True, default=_json_value) + "\n")
        write_loadgen_logs(Path(log_dir), settings, trace, result)
    return result


def _json_value(value):
    """numpy scalars as the Python numbers and booleans they hold; anything else is a programming error, never text."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def simulate_scenario(device: ServiceTimeDevice, settings: ScenarioSettings, log_dir: Path | None = None, *,
                      max_batch: int = 1, batch_timeout_s: float = 0.0, total_sample_count: int | None = None,
                      name: str = "sut") -> ScenarioResult:
    """One scenario of ``device`` on virtual time: :func:`~conformance.perf.harness.run_scenario`'s counterpart with the
    same arguments (``total_sample_count`` only matters to the real LoadGen's QSL; ``name`` names the run in errors).
    A device error ends the run early and is returned in ``sut_errors`` (the run is then INVALID); an interrupt raises
    ``KeyboardInterrupt`` out of the simulation (it holds no threads and nothing outside the process)."""
    trace = simulate(device, settings, max_batch=max_batch, batch_timeout_s=batch_timeout_s, name=name)
    result = summarize(trace, settings, log_dir)
    if accuracy_log_due(settings) and log_dir is not None:
        entries = logged_responses(device, settings, trace)
        write_accuracy_log(Path(log_dir) / ACCURACY_LOG_FILE, entries)
        result.details["accuracy_log_responses"] = len(entries)
    return result


def logged_responses(device: ServiceTimeDevice, settings: ScenarioSettings, trace: SimulationTrace) -> list[LoggedResponse]:
    """The responses of the run's accuracy log: every sample in accuracy mode; in performance mode the ones LoadGen's
    sampling rule picks, at least ``accuracy_log_sampling_target`` of them (fewer only when fewer were issued). The
    device answers for the loaded samples first, as at LoadGen's QSL load."""
    issued = trace.issued_indices or []
    device.load(list(range(int(settings.performance_sample_count))))
    if settings.mode == "AccuracyOnly":
        chosen = range(len(issued))
    else:
        per_query = offline_samples(settings) if settings.scenario == "Offline" else (
            settings.samples_per_query if settings.scenario == "MultiStream" else 1)
        probability = sampling_probability(
            settings.accuracy_log_sampling_target, scenario=settings.scenario, target_qps=settings.loadgen_target_qps,
            min_duration_ms=settings.min_duration_ms, min_query_count=settings.min_query_count,
            samples_per_query=per_query)
        chosen = sampled_sequence_ids(len(issued), probability, settings.accuracy_log_rng_seed,
                                      minimum=settings.accuracy_log_sampling_target).tolist()
    responses = getattr(device, "responses", {})
    return [LoggedResponse(seq, issued[seq], np.asarray(responses.get(issued[seq], EMPTY_RESPONSE)).tobytes())
            for seq in chosen]


@dataclass
class ClosedLoopResult:
    """The seed benchmark's closed loop: ``clients`` clients each sending a batch and waiting for it, on one device."""

    clients: int
    batch_size: int
    batches: int
    qps: float  # samples per second
    avg_latency_ms: float
    p99_latency_ms: float


def simulate_closed_loop(device: ServiceTimeDevice, clients: int, batch_size: int, duration_s: float = 1.0,
                         warmup_s: float = 0.1) -> ClosedLoopResult:
    """The closed loop on virtual time for ``duration_s`` after ``warmup_s``; batches sent after the warm-up count."""
    if clients < 1 or batch_size < 1:
        raise ValueError(f"closed loop: clients and batch_size must be >= 1, got {clients} and {batch_size}")
    env = simpy.Environment()
    latencies: list[float] = []
    free_at = [0.0]
    batch = list(range(batch_size))
    stop_at = warmup_s + duration_s

    def client():
        while env.now < stop_at:
            sent = env.now
            occupancy, latency = device.service_time(batch)
            start = max(sent, free_at[0])
            free_at[0] = start + occupancy
            yield env.timeout(start + latency - sent)
            if sent >= warmup_s:
                latencies.append(env.now - sent)

    for _ in range(clients):
        env.process(client())
    env.run()
    lat = np.sort(np.asarray(latencies)) if latencies else np.array([np.nan])
    return ClosedLoopResult(clients, batch_size, len(latencies), len(latencies) * batch_size / duration_s,
                            float(np.mean(lat) * 1e3), float(rules.percentile_value(list(lat), 0.99) * 1e3))


def max_server_qps(device: ServiceTimeDevice, settings: ScenarioSettings, *, valid_at: float, rel_tol: float = 0.02,
                   max_batch: int = 1, batch_timeout_s: float = 0.0, total_sample_count: int | None = None,
                   name: str = "sut") -> float:
    """The highest Server target QPS at which the run is still VALID (latency bound and early stopping met), as a
    submitter tunes ``server_target_qps``: bisection to ``rel_tol`` between ``valid_at`` (a QPS known VALID) and the
    device's capacity (full batches back to back), with the run settings of ``settings``."""
    occupancy, _ = device.service_time([i % settings.performance_sample_count for i in range(max_batch)])
    low, high = valid_at, max(valid_at, max_batch / occupancy)
    while high - low > rel_tol * low:
        middle = (low + high) / 2
        probe = dataclasses.replace(settings, target_qps=middle)
        result = simulate_scenario(device, probe, None, max_batch=max_batch, batch_timeout_s=batch_timeout_s)
        low, high = (middle, high) if result.valid else (low, middle)
    return low
