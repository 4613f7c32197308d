"""The ``cpu`` hardware: the FP32 numpy reference that defines the expected outputs, really executed and timed."""

from __future__ import annotations

import numpy as np

from conformance.hardware.base import Backend, Prepared
from conformance.hardware.devices import ExecutingDevice, Samples, Workload
from models.ops import Ops


class CpuExecution(ExecutingDevice):
    """The FP32 model really runs on each batch, in the dispatcher thread."""

    def __init__(self, model, workload: Workload):
        self.samples = Samples(model, workload)
        self.workload = workload
        self.ops = Ops()

        def execute(indices):
            outputs = model(self.samples.batch_inputs(indices), self.ops)
            return self.samples.responses(outputs, len(indices))

        super().__init__(execute)


class CpuBackend(Backend):
    name = "cpu"
    precisions = ("fp32",)
    description = "FP32 reference in numpy"
    timing = "measured"

    def prepare(self, model, precision: str = "fp32", calibration_inputs=None, *, batch_size: int = 4,
                case: str | None = None) -> Prepared:
        self.check_precision(precision)
        return Prepared(model, precision, lambda recorder=None: Ops(recorder=recorder))

    def loadgen_device(self, model, precision: str, workload: Workload) -> CpuExecution:
        self.check_precision(precision)
        return CpuExecution(model, workload)

    def versions(self) -> dict[str, str]:
        return {"numpy": np.__version__}
