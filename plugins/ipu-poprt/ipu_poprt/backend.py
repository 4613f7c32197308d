"""The ``poprt`` hardware: a Graphcore C600 driven through PopRT, as the seed benchmark drove it.

For a model at a precision, the suite's FP32 ONNX graph of the model (:mod:`ipu_poprt.conversion`) is converted by
PopRT's converter with the ``ipu`` hardware's policy of that precision (its FP8 skip list and the FP8 scales the ipu
backend calibrates: the same objects, not a copy), compiled, and run by PopRT's runtime (:mod:`ipu_poprt.engine`).
The accuracy tests judge its outputs with the suite's gates; LoadGen drives it as a measured device (the host's clock,
as for the ``cpu`` hardware). The engine runs whole graphs: there are no per-op probes or op checks.

Precisions are the ipu's policies (fp16, fp16-half-partials, fp8, fp8-weights): PopRT converts to FP16 and FP8, and
the seed benchmark and the published C600 figures are FP16 and FP8. The IPU computes FP32 too (70 TFLOP/s on the
C600), but nothing published says how close its FP32 is to the numpy reference, so there is no gate to hold it to.

PopRT is not needed to load this module (the suite reads every registered backend's precisions and targets); it is
needed to run: ``--hardware poprt`` without it is a usage error (:meth:`PoprtBackend.unavailable`).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np

from conformance.hardware.base import Backend, Prepared
from conformance.hardware.devices import ExecutingDevice, Samples, Workload
from conformance.hardware.ipu.backend import IpuBackend
from ipu_poprt import requirement
from models.ops import Ops

TARGETS_DIR = Path(__file__).with_name("targets")


def _engine():
    """:mod:`ipu_poprt.engine`, imported when a graph first runs: it imports PopRT."""
    return importlib.import_module("ipu_poprt.engine")


def _conversion_module():
    """:mod:`ipu_poprt.conversion`, imported when a model is first prepared: it imports onnx (as the suite's graphs
    package waits until a graph is exported)."""
    return importlib.import_module("ipu_poprt.conversion")


class PoprtPrepared(Prepared):
    """A model's conversion at one precision; :meth:`forward` runs batches of any size on the graph compiled for
    ``rows`` rows (loaded on the IPU when first used). Its ops are the FP32 ones: PopRT runs the whole graph."""

    per_op = False

    def __init__(self, model, conversion, rows: int):
        super().__init__(model, conversion.precision, Ops)
        self.conversion = conversion
        self.rows = int(rows)
        # part of what the batches' outputs depend on (a store of computed batches tells engines apart by it)
        self.engine_version = _engine().version()

    def forward(self, inputs: dict, ops: Ops) -> dict:
        self.model.validate_inputs(inputs)
        return _engine().load(self.conversion, self.rows).run(inputs)

    def details(self, ops: Ops) -> dict:
        return {"poprt": {**self.conversion.calls(), "compiled_rows": self.rows, "version": self.engine_version}}


class PoprtExecution(ExecutingDevice):
    """The model's graph at one precision, compiled for the workload's largest device batch (``prepared.rows``), runs
    every batch LoadGen issues, in the dispatcher thread. It is compiled, loaded and run once before LoadGen starts."""

    def __init__(self, prepared: PoprtPrepared, workload: Workload):
        self.samples = Samples(prepared.model, workload)
        self.workload = workload
        engine = _engine()
        engine.load(prepared.conversion, prepared.rows).run(self.samples.batch_inputs([0]))  # compile, load, warm up

        def execute(indices):
            outputs = engine.load(prepared.conversion, prepared.rows).run(self.samples.batch_inputs(indices))
            return self.samples.responses(outputs, len(indices))

        super().__init__(execute)


class PoprtBackend(Backend):
    name = "poprt"
    description = "Graphcore C600 through PopRT: the suite's ONNX graph converted, compiled and run on the IPU"
    timing = "measured"

    def unavailable(self) -> str | None:
        """The missing ``poprt`` module and how to get it; None when PopRT imports."""
        return requirement.missing()
    targets_dir = TARGETS_DIR

    def __init__(self, chip: str | None = None):
        super().__init__(chip)
        self.ipu = IpuBackend()  # the precision policies, FP8 settings and calibration
        self.precisions = tuple(self.ipu.precisions)
        self._graphs: dict[int, tuple[object, bytes]] = {}  # id(model) -> (model, its FP32 graph)
        self._conversions: dict[tuple, tuple[object, object]] = {}  # (id(model), precision) -> (model, Conversion)

    def accuracy_support(self, model_name: str, precision: str) -> str | None:
        """The ipu's answer: a model runs at an FP8 precision when it has FP8 settings."""
        return super().accuracy_support(model_name, precision) or self.ipu.accuracy_support(model_name, precision)

    def scenario_support(self, model_name: str, precision: str, scenario: str) -> str | None:
        return super().scenario_support(model_name, precision, scenario) or self.ipu.accuracy_support(model_name,
                                                                                                        precision)

    def _graph(self, model) -> bytes:
        hit = self._graphs.get(id(model))
        if hit is None or hit[0] is not model:
            hit = self._graphs[id(model)] = (model, _conversion_module().export_graph(model))
        return hit[1]

    def conversion(self, model, precision: str, calibration_inputs: dict | None = None, *, batch_size: int = 4,
                   case: str | None = None):
        """The model's :class:`~ipu_poprt.conversion.Conversion` at ``precision`` (kept per model object, as the ipu
        backend keeps its FP8 plans, unless ``calibration_inputs`` replace the calibration set)."""
        key = (id(model), precision)
        hit = self._conversions.get(key)
        if hit is not None and hit[0] is model and calibration_inputs is None:
            return hit[1]
        ipu = self.ipu.prepare(model, precision, calibration_inputs, batch_size=batch_size, case=case)
        made = _conversion_module().plan(model, ipu, self._graph(model))
        if calibration_inputs is None:
            self._conversions[key] = (model, made)
        return made

    def prepare(self, model, precision: str, calibration_inputs: dict | None = None, *, batch_size: int = 4,
                case: str | None = None) -> PoprtPrepared:
        self.check_precision(precision)
        requirement.require()
        conversion = self.conversion(model, precision, calibration_inputs, batch_size=batch_size, case=case)
        return PoprtPrepared(model, conversion, batch_size)

    def loadgen_device(self, model, precision: str, workload: Workload) -> PoprtExecution:
        self.check_precision(precision)
        requirement.require()
        rows = workload.max_batch * workload.rows_per_sample
        return PoprtExecution(PoprtPrepared(model, self.conversion(model, precision), rows), workload)

    def data_types(self, precision: str) -> dict[str, str]:
        return self.ipu.data_types(precision)

    def versions(self) -> dict[str, str]:
        if requirement.missing() is not None:
            return {"numpy": np.__version__, "poprt": "not importable"}
        engine = _engine()
        return {"numpy": np.__version__, "poprt": engine.version(), "ipu": engine.hardware_version()}
