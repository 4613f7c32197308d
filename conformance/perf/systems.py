"""The device behind LoadGen for each hardware: the simulated IPU (timing model + emulator outputs) or the real cpu.

A QSL sample is one model sample (an image, a sequence, an utterance), except for wide&deep, where it is one request of
``rows_per_sample`` candidate rows (MLPerf's DLRM aggregates user-item pairs into samples the same way): a LoadGen
sample per row would measure Python, not the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.perf.packing import first_fit
from conformance.perf.sut import ExecutingDevice, ServiceTimeDevice


@dataclass(frozen=True)
class Workload:
    """The model's share of the performance run: how many QSL samples are loaded and what one sample is."""

    model: str
    performance_samples: int
    rows_per_sample: int = 1


def _slice(inputs: dict[str, np.ndarray], start: int, stop: int) -> dict[str, np.ndarray]:
    return {k: v[start:stop] for k, v in inputs.items()}


def _response(outputs: dict[str, np.ndarray], start: int, stop: int) -> np.ndarray:
    """One sample's answer as LoadGen receives it: the model's outputs for its rows, float32, concatenated in name order."""
    return np.concatenate([np.ascontiguousarray(outputs[k][start:stop], np.float32).ravel() for k in sorted(outputs)])


class Samples:
    """The performance sample set of a model: inputs of ``performance_samples x rows_per_sample`` rows."""

    def __init__(self, model, workload: Workload):
        from conformance.reference import EVAL_SEED

        self.model = model
        self.workload = workload
        rows = workload.performance_samples * workload.rows_per_sample
        self.inputs = model.sample_inputs(rows, seed=EVAL_SEED)

    def rows(self, index: int) -> tuple[int, int]:
        r = self.workload.rows_per_sample
        return index * r, (index + 1) * r

    def batch_inputs(self, indices) -> dict[str, np.ndarray]:
        parts = [_slice(self.inputs, *self.rows(i)) for i in indices]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def sequence_lengths(self) -> np.ndarray | None:
        mask = self.inputs.get("attention_mask")
        return None if mask is None else np.asarray(mask).sum(axis=1).astype(np.int64)


# -- ipu: the timing model on a real-time timeline ---------------------------------------------------------------------
class ServiceTimes:
    """Occupancy and latency of a device batch of ``n`` units (samples, rows or packs) of ``model`` from the timing model,
    traced at powers of two up to ``max_units`` and interpolated linearly in between (time is close to linear in the
    batch)."""

    def __init__(self, model, precision: str, max_units: int, device: str = "c600"):
        from conformance.perf.timing import TimingModel, default_execution
        from conformance.perf.trace import trace_model

        timing = TimingModel(device)
        execution = default_execution(model.name, packed=False)
        self.sizes = sorted({1, int(max_units), *[2 ** k for k in range(int(max_units).bit_length()) if 2 ** k <= max_units]})
        self.occupancy = []
        self.latency = []
        for n in self.sizes:
            t = timing.batch_time(trace_model(model, n, precision), execution)
            self.occupancy.append(t.per_batch_s)
            self.latency.append(t.latency_s)

    def __call__(self, units: int) -> tuple[float, float]:
        return float(np.interp(units, self.sizes, self.occupancy)), float(np.interp(units, self.sizes, self.latency))


class SimulatedIpu(ServiceTimeDevice):
    """The IPU for LoadGen: service times from the timing model, answers computed by the emulator at QSL load (the
    ``ipu`` backend's ops at the precision; the cpu FP32 model if the backend cannot run it). Packed models pack the
    batch's sequences first-fit into rows of seq_len tokens and are timed by the number of rows.

    The answers are computed here rather than taken from the accuracy tests' outputs of the same samples: the bytes
    depend on the batching (numpy's sgemm sums the same rows in another FP32 order at another M: rows of a 4096 x 768
    by 768 x 768 product differ from those of the 2048-row product), and TEST01 compares these answers byte for byte
    with a fresh computation over the same QSL batch."""

    def __init__(self, model, precision: str, workload: Workload, max_units: int, packed: bool, ops_factory):
        self.samples = Samples(model, workload)
        self.workload = workload
        self.packed = packed
        self.ops_factory = ops_factory
        self.seq_len = getattr(model.config, "seq_len", None)
        self.lengths = self.samples.sequence_lengths() if packed else None
        self.times = ServiceTimes(model, precision, max_units)
        super().__init__(self.times, responses={})

    def units(self, indices) -> int:
        """Device batch size of these samples: rows of packed sequences, rows of wide&deep, or samples."""
        if self.packed and self.lengths is not None:
            return len(first_fit([int(self.lengths[i]) for i in indices], self.seq_len))
        return len(indices) * self.workload.rows_per_sample

    def service_for(self, indices) -> tuple[float, float]:
        return self.times(self.units(indices))

    def load(self, indices):
        missing = [i for i in indices if i not in self.responses]
        if not missing:
            return
        ops = self.ops_factory()
        outputs = self.samples.model(self.samples.batch_inputs(missing), ops)
        r = self.workload.rows_per_sample
        for j, index in enumerate(missing):
            self.responses[index] = _response(outputs, j * r, (j + 1) * r)


# -- cpu: real execution ----------------------------------------------------------------------------------------------
class CpuExecution(ExecutingDevice):
    """The cpu hardware for LoadGen: the FP32 model really runs on each batch, in the dispatcher thread."""

    def __init__(self, model, workload: Workload):
        from conformance.hardware.ops import Ops

        self.samples = Samples(model, workload)
        self.workload = workload
        self.ops = Ops()

        def execute(indices):
            outputs = model(self.samples.batch_inputs(indices), self.ops)
            r = self.workload.rows_per_sample
            return [_response(outputs, j * r, (j + 1) * r) for j in range(len(indices))]

        super().__init__(execute)


def ipu_ops_factory(backend, model, precision: str):
    """Ops of the ipu backend at ``precision`` (FP8 scales are calibrated once per model and reused)."""
    return lambda: backend.make_ops(model, precision)


_SIMULATED: dict[tuple, SimulatedIpu] = {}


def simulated_ipu(model, backend, precision: str, workload: Workload, max_units: int, packed: bool) -> SimulatedIpu:
    """The simulated IPU for ``model`` at ``precision``, cached per model object for the session (its answers are
    computed once, with ``backend``'s ops: the FP8 scales the accuracy tests calibrated on the same model and backend
    objects are reused); its timeline is reset for each run."""
    key = (id(model), id(backend), precision, workload, max_units, packed)
    device = _SIMULATED.get(key)
    if device is None or device.samples.model is not model:
        device = SimulatedIpu(model, precision, workload, max_units, packed, ipu_ops_factory(backend, model, precision))
        _SIMULATED[key] = device
    device._free_at = 0.0
    return device
