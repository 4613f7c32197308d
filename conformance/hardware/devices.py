"""The devices LoadGen's system under test drives: what :meth:`Backend.loadgen_device` returns.

A *device* serves batches of QSL sample indices. Two kinds cover the suite's hardware:

- :class:`ServiceTimeDevice`: a device on a simulated timeline whose service times come from a model of the device (or
  are zero, for a device that measures the harness alone): a batch starts when the device is free, occupies it for its
  occupancy and completes after its latency; its answers are computed when LoadGen loads the samples.
- :class:`ExecutingDevice`: real execution, really timed.

A QSL sample is one model sample (an image, a sequence, an utterance), except for wide&deep, where it is one request of
``rows_per_sample`` candidate rows (MLPerf's DLRM aggregates user-item pairs into samples the same way): a LoadGen
sample per row would measure Python, not the device.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from models.seeds import EVAL_SEED

EMPTY_RESPONSE = np.zeros(0, np.uint8)
RESPONSE_KINDS = "biufc"  # numpy dtype kinds of an answer: bool, integers, floats, complex (bytes as LoadGen logs them)


class MalformedResponses(ValueError):
    """A device's answers to a batch are not one numeric array per sample, of one dtype and shape."""


def _signature(response: np.ndarray) -> str:
    return f"{response.dtype}{list(response.shape)}"


def check_responses(responses, count: int, like: np.ndarray | None = None) -> list[np.ndarray]:
    """The device's answers to a batch of ``count`` samples, checked: a sequence of ``count`` numpy arrays of one
    numeric dtype and one shape (every sample of a run is answered alike: also the dtype and shape of ``like``, an
    earlier answer, when given), returned C-contiguous so that LoadGen can read their bytes.
    :class:`MalformedResponses` says what is wrong otherwise."""
    if responses is None or isinstance(responses, (str, bytes, dict)) or not hasattr(responses, "__len__"):
        raise MalformedResponses(f"responses are {type(responses).__name__}; expected a list of {count} numpy arrays, "
                                 f"one per sample")
    if len(responses) != count:
        raise MalformedResponses(f"{len(responses)} responses for a batch of {count} samples; expected one per sample")
    checked = []
    for k, response in enumerate(responses):
        if not isinstance(response, np.ndarray):
            raise MalformedResponses(f"response {k} of {count} is {type(response).__name__}; expected a numpy array")
        if response.dtype.kind not in RESPONSE_KINDS:
            raise MalformedResponses(f"response {k} of {count} has dtype {response.dtype}; expected a numeric dtype "
                                     f"(bool, integer, float or complex)")
        checked.append(np.ascontiguousarray(response))
    shapes = sorted({_signature(r) for r in checked})
    if len(shapes) > 1:
        raise MalformedResponses(f"the {count} responses of one batch differ in dtype or shape ({', '.join(shapes)}); "
                                 f"expected one dtype and shape for every sample")
    if like is not None and checked and shapes[0] != _signature(like):
        raise MalformedResponses(f"the responses of this batch ({shapes[0]}) differ from the run's earlier ones "
                                 f"({_signature(like)}); expected one dtype and shape for every sample")
    return checked


def check_service(value, count: int) -> tuple[float, float]:
    """A simulated device's ``service_time`` of a batch of ``count`` samples, checked: (occupancy, latency) in seconds,
    each finite and >= 0. :class:`MalformedResponses` says what is wrong otherwise."""
    try:
        occupancy, latency = (float(v) for v in value)
    except (TypeError, ValueError):
        raise MalformedResponses(f"service_time of a batch of {count} samples returned {value!r}; expected "
                                 f"(occupancy_s, latency_s), two numbers") from None
    if not (math.isfinite(occupancy) and math.isfinite(latency) and occupancy >= 0 and latency >= 0):
        raise MalformedResponses(f"service_time of a batch of {count} samples returned occupancy {occupancy} s and "
                                 f"latency {latency} s; expected finite times >= 0")
    return occupancy, latency


@dataclass(frozen=True)
class Workload:
    """The model's share of a performance run: how many QSL samples are loaded, what one sample is, and the largest
    device batch (in samples) the system under test forms."""

    model: str
    performance_samples: int
    rows_per_sample: int = 1
    max_batch: int = 1


def response_bytes(outputs: dict[str, np.ndarray], start: int, stop: int) -> np.ndarray:
    """One sample's answer as LoadGen receives it: the model's outputs for its rows, float32, concatenated in name order."""
    return np.concatenate([np.ascontiguousarray(outputs[k][start:stop], np.float32).ravel() for k in sorted(outputs)])


class Samples:
    """The performance sample set of a model: inputs of ``performance_samples x rows_per_sample`` rows of the
    evaluation set's generator."""

    def __init__(self, model, workload: Workload):
        self.model = model
        self.workload = workload
        rows = workload.performance_samples * workload.rows_per_sample
        self.inputs = model.sample_inputs(rows, seed=EVAL_SEED)

    def rows(self, index: int) -> tuple[int, int]:
        r = self.workload.rows_per_sample
        return index * r, (index + 1) * r

    def batch_inputs(self, indices) -> dict[str, np.ndarray]:
        parts = [{k: v[slice(*self.rows(i))] for k, v in self.inputs.items()} for i in indices]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def responses(self, outputs: dict[str, np.ndarray], count: int) -> list[np.ndarray]:
        """The answers to ``count`` samples whose rows are, in order, the rows of ``outputs``."""
        r = self.workload.rows_per_sample
        return [response_bytes(outputs, j * r, (j + 1) * r) for j in range(count)]

    def sequence_lengths(self) -> np.ndarray | None:
        mask = self.inputs.get("attention_mask")
        return None if mask is None else np.asarray(mask).sum(axis=1).astype(np.int64)


class Device:
    """Serves batches of QSL sample indices. ``load`` prepares samples (QSL load); ``start_batch`` begins a batch that
    was complete at perf_counter time ``formed_at`` and returns (time it completes, one response array per sample).

    ``samples`` is the performance sample set whose answers the device gives (None when it answers something else):
    TEST01 scores its responses against FP32 on those inputs."""

    instant = False  # start_batch returns at once (a simulated timeline): it may run in LoadGen's issue thread
    samples: Samples | None = None

    def load(self, indices: Sequence[int]) -> None:
        pass

    def unload(self, indices: Sequence[int]) -> None:
        pass

    def ready_at(self) -> float:
        """perf_counter time at which the device can start another batch."""
        return 0.0

    def start_batch(self, indices: Sequence[int], formed_at: float) -> tuple[float, list[np.ndarray]]:
        raise NotImplementedError

    def predicted_service(self, indices: Sequence[int]) -> tuple[float, float] | None:
        """(occupancy, latency) of a batch of these samples from the device's timing model, for LoadGen's expected
        latency and the Offline query size; None for a device whose time is measured (nothing to predict from)."""
        return None

    def reset(self) -> None:
        """Start a new run: a simulated timeline goes back to an idle device at time 0."""

    def fresh(self) -> "Device":
        """A copy that computes its answers again (TEST01's accuracy-mode device must not read what performance mode
        kept)."""
        return copy.copy(self)


class ServiceTimeDevice(Device):
    """A device on a simulated timeline: ``service(n) -> (occupancy_s, latency_s)`` for a batch of ``n`` samples;
    ``responses[index]`` is the answer to sample ``index`` (zero bytes when absent)."""

    instant = True

    def __init__(self, service: Callable[[int], tuple[float, float]], responses: dict[int, np.ndarray] | None = None):
        self.service = service
        self.responses = responses if responses is not None else {}
        self._free_at = 0.0

    def ready_at(self) -> float:
        return self._free_at

    def service_time(self, indices) -> tuple[float, float]:
        """(occupancy, latency) of a batch of these samples on the timeline."""
        return self.service(len(indices))

    def predicted_service(self, indices) -> tuple[float, float] | None:
        return self.service_time(indices)

    def start_batch(self, indices, formed_at):
        occupancy, latency = self.service_time(indices)
        start = max(formed_at, self._free_at)
        self._free_at = start + occupancy
        return start + latency, [self.responses.get(i, EMPTY_RESPONSE) for i in indices]

    def reset(self) -> None:
        self._free_at = 0.0

    def fresh(self) -> "ServiceTimeDevice":
        clone = copy.copy(self)
        clone.responses = {}
        clone.reset()
        return clone


class ExecutingDevice(Device):
    """Runs ``execute(indices) -> list of responses`` for real, in the dispatcher thread: the batch completes when it
    returns. ``prepare(indices)`` runs at QSL load (e.g. builds the inputs)."""

    def __init__(self, execute: Callable[[Sequence[int]], list[np.ndarray]],
                 prepare: Callable[[Sequence[int]], None] | None = None):
        self.execute = execute
        self.prepare = prepare

    def load(self, indices):
        if self.prepare is not None:
            self.prepare(indices)

    def start_batch(self, indices, formed_at):
        responses = self.execute(indices)
        return time.perf_counter(), responses
