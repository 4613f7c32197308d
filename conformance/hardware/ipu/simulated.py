"""The simulated IPU behind LoadGen: service times from the timing model on a simulated timeline, answers computed by
the emulator when LoadGen loads the performance sample set."""

from __future__ import annotations

import numpy as np

from conformance.hardware.devices import Samples, ServiceTimeDevice, Workload
from conformance.hardware.ipu.timing.chips import DEFAULT_DEVICE
from conformance.hardware.ipu.timing.cost import TimingModel, default_execution
from conformance.hardware.ipu.timing.packing import first_fit
from conformance.hardware.ipu.timing.trace import trace_model


class ServiceTimes:
    """Occupancy and latency of a device batch of ``n`` units (samples, rows or packs) of ``model`` from the timing model,
    traced at powers of two up to ``max_units`` and interpolated linearly in between (time is close to linear in the
    batch)."""

    def __init__(self, model, precision: str, max_units: int, chip: str = DEFAULT_DEVICE):
        timing = TimingModel(chip)
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
    """The IPU for LoadGen: service times from the timing model, answers computed by the emulator at QSL load
    (``make_ops()``: the ``ipu`` backend's ops at the precision). Packed models pack the batch's sequences first-fit into
    rows of seq_len tokens and are timed by the number of rows.

    The answers are computed here rather than taken from the accuracy tests' outputs of the same samples: the bytes
    depend on the batching (numpy's sgemm sums the same rows in another FP32 order at another M: rows of a 4096 x 768
    by 768 x 768 product differ from those of the 2048-row product), and TEST01 compares these answers byte for byte
    with a fresh computation over the same QSL batch."""

    def __init__(self, model, precision: str, workload: Workload, packed: bool, make_ops, chip: str = DEFAULT_DEVICE):
        self.samples = Samples(model, workload)
        self.workload = workload
        self.packed = packed
        self.make_ops = make_ops
        self.seq_len = getattr(model.config, "seq_len", None)
        self.lengths = self.samples.sequence_lengths() if packed else None
        self.times = ServiceTimes(model, precision, workload.max_batch * workload.rows_per_sample, chip)
        super().__init__(self.times, responses={})

    def units(self, indices) -> int:
        """Device batch size of these samples: rows of packed sequences, rows of wide&deep, or samples."""
        if self.packed and self.lengths is not None:
            return len(first_fit([int(self.lengths[i]) for i in indices], self.seq_len))
        return len(indices) * self.workload.rows_per_sample

    def service_time(self, indices) -> tuple[float, float]:
        return self.times(self.units(indices))

    def load(self, indices):
        missing = [i for i in indices if i not in self.responses]
        if not missing:
            return
        outputs = self.samples.model(self.samples.batch_inputs(missing), self.make_ops())
        self.responses.update(zip(missing, self.samples.responses(outputs, len(missing))))
