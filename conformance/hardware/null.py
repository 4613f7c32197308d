"""The ``null`` hardware: a device that answers every query at once, with zeros, without running the model (as
MLCommons' null backends do). Its performance figures are the harness's own ceiling: LoadGen, the system under test and
the Python around them, with no device time at all."""

from __future__ import annotations

import numpy as np

from conformance.hardware.base import Backend, Prepared, UnsupportedCombination
from conformance.hardware.devices import ServiceTimeDevice, Workload

ZERO_ANSWER = np.zeros(1, np.float32)  # one float32 zero per sample
NO_NUMERICS = "the null device answers with zeros without running the model: it measures the harness, not numerics"


class NullDevice(ServiceTimeDevice):
    """Zero service time; every sample's answer is :data:`ZERO_ANSWER`."""

    def __init__(self):
        super().__init__(lambda units: (0.0, 0.0))

    def predicted_service(self, indices) -> None:
        return None  # no device time to predict: its figures are the harness's, measured

    def start_batch(self, indices, formed_at):
        due, _ = super().start_batch(indices, formed_at)
        return due, [ZERO_ANSWER] * len(indices)


class NullBackend(Backend):
    name = "null"
    precisions = ("fp32",)
    description = "null device: answers every query at once with zeros (the harness's own ceiling)"
    timing = "measured"  # the harness's own time, under the real LoadGen
    audits = ()

    def accuracy_support(self, model_name: str, precision: str) -> str | None:
        return NO_NUMERICS

    def prepare(self, model, precision: str = "fp32", calibration_inputs=None, *, batch_size: int = 4,
                case: str | None = None) -> Prepared:
        raise UnsupportedCombination(NO_NUMERICS)

    def loadgen_device(self, model, precision: str, workload: Workload) -> NullDevice:
        self.check_precision(precision)
        return NullDevice()
