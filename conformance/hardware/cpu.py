"""The ``cpu`` hardware: the FP32 numpy reference that defines the expected outputs."""

from __future__ import annotations

import numpy as np

from conformance.hardware.base import Backend
from conformance.hardware.ops import Ops


class CpuBackend(Backend):
    name = "cpu"
    precisions = ("fp32",)
    description = "FP32 reference in numpy"

    def make_ops(self, model, precision: str = "fp32", *, recorder=None, **options) -> Ops:
        self.check_precision(precision)
        return Ops(recorder=recorder)

    def versions(self) -> dict[str, str]:
        return {"numpy": np.__version__}
