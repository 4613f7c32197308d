"""The system under test never hangs: a device that raises, or answers with malformed responses or service times, in any
thread of the SUT (the LoadGen issue thread, the dispatcher, the completer, the QSL's load and unload) gets every issued
query completed, the error recorded with the run's name and the device, and the run failed, in every scenario, under
the real LoadGen and on virtual time. Each run has a time limit (a thread joined with a timeout): a hang fails."""

from __future__ import annotations


import mlperf_loadgen as lg
import numpy as np
import pytest

from conformance.hardware.devices import ExecutingDevice, ServiceTimeDevice, check_responses, check_service
from conformance.perf import resident
from conformance.perf import sut as sut_module
from conformance.perf.harness import ScenarioSettings, run_scenario
from conformance.perf.virtual import simulate_scenario

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
LIMIT_S = 60  # a run that has not returned by then hangs
GOOD_BATCHES = 3  # the fault comes after a few good batches, with queries in flight
ANSWER = np.arange(4, dtype=np.float32)

# fault -> (what the device returns for a batch of n instead of n answers, words the error must contain)
MALFORMED = {
    "none": (lambda n: None, "responses are NoneType"),
    "too_few": (lambda n: [ANSWER] * (n - 1), "responses for a batch of"),
    "too_many": (lambda n: [ANSWER] * (n + 1), "responses for a batch of"),
    "unequal_lengths": (lambda n: [ANSWER] * (n - 1) + [ANSWER[:3]], "differ"),  # alone: unlike the earlier ones
    "wrong_dtype": (lambda n: [np.array(["x"] * 4, dtype=object)] * n, "has dtype object"),
    "not_arrays": (lambda n: [[0.0] * 4] * n, "is list; expected a numpy array"),
}
FAULTS = ["raises", *MALFORMED]


def settings(scenario: str) -> ScenarioSettings:
    return ScenarioSettings(scenario, min_duration_ms=300, min_query_count=16, performance_sample_count=8,
                            expected_latency_s=0.002, target_qps=1000 if scenario == "Server" else 2000,
                            server_latency_ms=100)


def answers(fault: str, n: int) -> list:
    if fault == "raises":
        raise RuntimeError("device fault injected")
    return MALFORMED[fault][0](n)


def expected_words(fault: str) -> str:
    return "RuntimeError: device fault injected" if fault == "raises" else MALFORMED[fault][1]


class FaultyTimeline(ServiceTimeDevice):
    """A simulated device (2 ms per batch) whose batches after the first few are answered with ``fault``."""

    def __init__(self, fault: str):
        super().__init__(lambda n: (0.002, 0.002))
        self.fault = fault
        self.batches = 0

    def start_batch(self, indices, formed_at):
        self.batches += 1
        due, responses = super().start_batch(indices, formed_at)
        if self.batches <= GOOD_BATCHES:
            return due, [ANSWER] * len(indices)
        return due, answers(self.fault, len(indices))


class FaultyExecution(ExecutingDevice):
    """A really executing device (in the dispatcher thread) whose batches after the first few fail with ``fault``."""

    def __init__(self, fault: str):
        self.fault = fault
        self.batches = 0
        super().__init__(self._execute)

    def _execute(self, indices):
        self.batches += 1
        if self.batches <= GOOD_BATCHES:
            return [ANSWER] * len(indices)
        return answers(self.fault, len(indices))


def run_limited(function, *args, **kwargs):
    """``function(*args, **kwargs)`` on a resident thread (one that calls LoadGen must not exit: see
    conformance.perf.resident); a failure if it has not returned within LIMIT_S (a hang)."""
    outcome: dict = {}

    def target():
        try:
            outcome["result"] = function(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    task = resident.start(target, function.__name__)
    task.join(LIMIT_S)
    assert not task.is_alive(), f"{function.__name__} did not return within {LIMIT_S} s: the run hangs"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def assert_failed_cleanly(result, scenario: str, device: str, words: str) -> None:
    assert result.issued == result.completed > 0, (result.issued, result.completed)
    assert len(result.sut_errors) >= 1, "the fault was not recorded"
    message = result.sut_errors[0]
    name = f"widedeep-fp16-{scenario}"
    assert message.startswith(f"{name}, device {device}: "), message
    assert words in message, message


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_faulty_simulated_device_under_loadgen_fails_the_run_without_hanging(tmp_path, scenario, fault):
    device = FaultyTimeline(fault)
    result = run_limited(run_scenario, device, settings(scenario), tmp_path, max_batch=4, batch_timeout_s=0.001,
                         name=f"widedeep-fp16-{scenario}")
    assert_failed_cleanly(result, scenario, "FaultyTimeline", expected_words(fault))
    assert device.batches == GOOD_BATCHES + 1, "the device was asked again after its fault"
    assert "start_batch of" in result.sut_errors[0]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("fault", ["raises", "unequal_lengths", "none"])
def test_a_faulty_executing_device_fails_the_run_without_hanging(tmp_path, scenario, fault):
    result = run_limited(run_scenario, FaultyExecution(fault), settings(scenario), tmp_path, max_batch=4,
                         batch_timeout_s=0.001, name=f"widedeep-fp16-{scenario}")
    assert_failed_cleanly(result, scenario, "FaultyExecution", expected_words(fault))


class ReadyFault(ServiceTimeDevice):
    """``ready_at`` (asked by the dispatcher and the issue thread) raises after a few calls."""

    def __init__(self):
        super().__init__(lambda n: (0.002, 0.002))
        self.calls = 0

    def ready_at(self):
        self.calls += 1
        if self.calls > 5:
            raise OSError("device link lost")
        return super().ready_at()


class QslFault(ServiceTimeDevice):
    def __init__(self, phase: str):
        super().__init__(lambda n: (0.002, 0.002))
        self.phase = phase

    def load(self, indices):
        if self.phase == "load":
            raise MemoryError("cannot stage the samples")

    def unload(self, indices):
        if self.phase == "unload":
            raise RuntimeError("cannot free the samples")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_raising_ready_at_fails_the_run_without_hanging(tmp_path, scenario):
    result = run_limited(run_scenario, ReadyFault(), settings(scenario), tmp_path, max_batch=4, batch_timeout_s=0.001,
                         name=f"widedeep-fp16-{scenario}")
    assert_failed_cleanly(result, scenario, "ReadyFault", "ready_at: OSError: device link lost")


@pytest.mark.parametrize("phase", ["load", "unload"])
@pytest.mark.parametrize("scenario", ["SingleStream", "Offline"])
def test_a_raising_qsl_fails_the_run_without_hanging(tmp_path, scenario, phase):
    result = run_limited(run_scenario, QslFault(phase), settings(scenario), tmp_path, max_batch=4,
                         name=f"widedeep-fp16-{scenario}")
    words = "MemoryError: cannot stage the samples" if phase == "load" else "RuntimeError: cannot free the samples"
    assert_failed_cleanly(result, scenario, "QslFault", f"QSL {phase} of 8 samples: {words}")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_failing_completion_still_completes_every_query(tmp_path, scenario, monkeypatch):
    """The completer thread's call into LoadGen fails once: the batch is completed empty and the run fails."""
    real = lg.QuerySamplesComplete
    calls = {"n": 0}

    def flaky(responses):
        calls["n"] += 1
        if calls["n"] == GOOD_BATCHES + 1:
            raise RuntimeError("completion refused")
        return real(responses)

    monkeypatch.setattr(sut_module.lg, "QuerySamplesComplete", flaky)
    device = ServiceTimeDevice(lambda n: (0.002, 0.002), {i: ANSWER for i in range(8)})
    result = run_limited(run_scenario, device, settings(scenario), tmp_path, max_batch=4, batch_timeout_s=0.001,
                         name=f"widedeep-fp16-{scenario}")
    assert_failed_cleanly(result, scenario, "ServiceTimeDevice", "RuntimeError: completion refused")


# -- virtual time ------------------------------------------------------------------------------------------------------
SERVICE_FAULTS = {
    "raises": (None, "ZeroDivisionError: cost model divided by zero"),
    "none": (None, "returned None; expected (occupancy_s, latency_s)"),
    "nan": ((float("nan"), 0.001), "expected finite times >= 0"),
    "negative": ((0.001, -0.001), "expected finite times >= 0"),
    "three_values": ((0.001, 0.001, 0.001), "expected (occupancy_s, latency_s), two numbers"),
    "text": (("fast", "slow"), "expected (occupancy_s, latency_s), two numbers"),
}


class FaultyService(ServiceTimeDevice):
    """A simulated device whose ``service_time`` after a few batches is the fault."""

    def __init__(self, fault: str):
        super().__init__(lambda n: (0.0003 + 0.0001 * n, 0.0003 + 0.0001 * n))
        self.fault = fault
        self.calls = 0

    def service_time(self, indices):
        self.calls += 1
        if self.calls <= GOOD_BATCHES:
            return super().service_time(indices)
        if self.fault == "raises":
            raise ZeroDivisionError("cost model divided by zero")
        return SERVICE_FAULTS[self.fault][0]


VIRTUAL = {
    "SingleStream": dict(min_duration_ms=500, min_query_count=256, expected_latency_s=0.0005),
    "MultiStream": dict(min_duration_ms=500, min_query_count=662, expected_latency_s=0.001),
    "Server": dict(min_duration_ms=1000, min_query_count=1024, target_qps=2000, server_latency_ms=10),
    "Offline": dict(min_duration_ms=500, target_qps=8000),
}


@pytest.mark.parametrize("fault", list(SERVICE_FAULTS))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_faulty_device_on_virtual_time_fails_the_run_without_hanging(tmp_path, scenario, fault):
    device = FaultyService(fault)
    result = run_limited(simulate_scenario, device, ScenarioSettings(scenario, performance_sample_count=8,
                                                                     **VIRTUAL[scenario]),
                         tmp_path, max_batch=8, batch_timeout_s=0.002, name=f"widedeep-fp16-{scenario}")
    assert_failed_cleanly(result, scenario, "FaultyService", SERVICE_FAULTS[fault][1])
    assert device.calls == GOOD_BATCHES + 1, "the device was asked again after its fault"
    assert not result.valid and result.invalid_reason.startswith("the system under test failed: "), result.invalid_reason
    assert (tmp_path / "simulation_summary.json").read_text().count("device FaultyService") >= 1


# -- the response contract -----------------------------------------------------------------------------------------
def test_well_formed_responses_pass_the_check_contiguous():
    strided = np.arange(8, dtype=np.float32)[::2]
    checked = check_responses([strided, strided.copy()], 2)
    assert all(r.flags.c_contiguous for r in checked) and checked[0].tobytes() == strided.tobytes()
    assert check_responses(np.zeros((3, 5), np.int64), 3)[2].shape == (5,)  # one row per sample
    assert check_service((1, 2.5), 4) == (1.0, 2.5)
