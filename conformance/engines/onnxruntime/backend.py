"""The ``onnxruntime`` hardware: a third-party inference engine, onnxruntime's CPU provider, given the suite's ONNX
graph of each precision and judged with the same gates and reports as the suite's own backends, timed under the real
LoadGen.

Why these graphs: an engine a vendor ships (PopRT, TensorRT, OpenVINO, onnxruntime) is handed an ONNX graph and a
precision, not the suite's ``Ops`` calls. So a precision here is the graph the suite writes for it
(:mod:`conformance.graphs`): ``fp32`` the model's FP32 graph (:func:`~conformance.graphs.export.record`); ``fp16`` and
``fp8`` the graph of the ``ipu`` hardware's precision of the same name
(:func:`~conformance.graphs.precision.record_precision`, with the ipu's policy and the FP8 plan its backend calibrates):
float16 values between ops, and at fp8 QuantizeLinear/DequantizeLinear pairs in FLOAT8E4M3FNUZ / FLOAT8E5M2FNUZ (the
IPU's F143 / F152) with power-of-two scales on exactly the operands the policy quantizes, the same skip lists. The
backend therefore judges how an engine executes the precision graphs a vendor's engine would be given; where its
outputs leave the gates, the engine (or the graph) is at fault, not a re-implementation of the numerics.

What the graphs do not say, the engine decides: matmul/conv partials (ONNX has no accumulator type: onnxruntime sums in
FP32) and FP16 overflow (a Cast gives +-inf). The engine runs as deployed, with its default graph optimizations, which
may drop roundings the graph states: onnxruntime removes a float32 -> float16 -> float32 Cast pair, so roformer's fp16
graph there errs 6x less from FP32 than the emulator on the example batch, while with the optimizer off it gives the
emulator's bits. Each record says how far the engine was from the emulator on that batch (``example_batch``). The
engine runs whole graphs, so its ops cannot be probed one by one (:attr:`Prepared.per_op` is False): no rounding-bias
or op-check gates apply to it.

An imported graph (``--onnx NAME=FILE``, a :class:`~conformance.graphs.case.GraphModel`) runs as the user gave it at
fp32; at fp16 and fp8 its precision graph is recorded through the interpreter, with the ipu's ``onnx`` FP8 settings
(on the calibration inputs where the graph's inputs cannot be drawn).

Threads: a session's intra-op threads are the emulator's kernel threads,
:func:`conformance.numerics.formats.worker_threads` (``CONFORMANCE_THREADS``, else the cores this process may use, at
most 8), read when the session is built, so that engine and emulator runs on one host are comparable (a worker process
of a distributed run builds its own session with its own setting); they sleep when idle instead of spinning
(:func:`session_options`).
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from importlib import metadata
from pathlib import Path

import numpy as np
import onnxruntime

from conformance.hardware.base import Backend, Prepared
from conformance.hardware.devices import ExecutingDevice, Samples, Workload
from conformance.hardware.ipu.backend import IpuBackend
from conformance.numerics.formats import worker_threads
from models.ops import Ops

# The ipu precisions whose graphs this engine runs (fp32 is the model's own FP32 graph).
GRAPH_PRECISIONS = ("fp16", "fp8")
PROVIDER = "CPUExecutionProvider"
SPINNING = "session.intra_op.allow_spinning"  # onnxruntime's session config key

# Each prepared graph's session, built on first use in the process that runs it: outside the object's state, so a
# Prepared pickles (to a worker) and fingerprints by its graph alone, and the session lives as long as its graph.
_SESSIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SESSIONS_LOCK = threading.Lock()


def session_options() -> onnxruntime.SessionOptions:
    """The engine as this backend runs it: default graph optimizations, the suite's kernel threads, and intra-op
    threads that sleep when idle (a spinning pool takes the cores that LoadGen's issue and completion threads need on a
    host of few cores)."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = worker_threads()
    options.add_session_config_entry(SPINNING, "0")
    return options


def fp32_ops(recorder=None) -> Ops:
    """The ops of a graph engine's run: the FP32 ones (the engine computes the graph; nothing runs through these)."""
    return Ops(recorder=recorder)


def _describe(proto, data: bytes) -> dict:
    """What identifies a graph that ran: its digest, size, opset and node counts."""
    opset = max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    counts: dict[str, int] = {}
    for node in proto.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "opset": int(opset),
            "nodes": len(proto.graph.node), "quantize_linear": counts.get("QuantizeLinear", 0),
            "provider": PROVIDER, "onnxruntime": onnxruntime.__version__}


def _example_batch(prepared: "OrtPrepared", recording) -> dict:
    """How the engine's outputs on the batch a graph was recorded on compare with the recording's, per output
    (relative L2 distances): for a precision graph, the engine's and the emulator's errors from the FP32 model and
    their distance (the emulator with FP32 partials computes what the graph states, so an engine that rounds less
    than the graph says, e.g. by removing a float16 Cast pair, shows a smaller error than the emulator's); for the
    FP32 graph, its distance from the numpy model."""
    from conformance.graphs.runtime import relative_error

    outputs = prepared.forward(recording.inputs, prepared.ops())
    if recording.baseline is None:
        return {name: {"engine_vs_model": relative_error(outputs[name], expected)}
                for name, expected in recording.outputs.items()}
    return {name: {"engine_error": relative_error(outputs[name], recording.baseline[name]),
                   "emulator_error": relative_error(expected, recording.baseline[name]),
                   "engine_vs_emulator": relative_error(outputs[name], expected)}
            for name, expected in recording.outputs.items()}


class OrtPrepared(Prepared):
    """A model's graph at one precision, serialised (a uint8 array: it pickles and fingerprints by value); the
    onnxruntime session is built from it on first use in each process."""

    per_op = False

    def __init__(self, model, precision: str, graph: bytes, facts: dict):
        super().__init__(model, precision, fp32_ops)
        self.graph = np.frombuffer(graph, np.uint8)
        self.facts = facts  # the graph's description and, at fp8, its scales and calibration (for the record)

    def session(self):
        """The onnxruntime session of the graph (built once per process; see :data:`_SESSIONS`)."""
        with _SESSIONS_LOCK:
            session = _SESSIONS.get(self)
            if session is None:
                session = _SESSIONS[self] = onnxruntime.InferenceSession(self.graph.tobytes(), session_options(),
                                                                         providers=[PROVIDER])
        return session

    def forward(self, inputs: dict, ops: Ops) -> dict:
        """The model's outputs on the batch ``inputs`` (as given, one session run), named as the model's; float
        outputs as float32."""
        self.model.validate_inputs(inputs)
        feed = {spec.name: np.ascontiguousarray(inputs[spec.name], dtype=np.dtype(spec.dtype))
                for spec in self.model.input_specs}
        names = list(self.model.output_names)
        values = self.session().run(names, feed)
        return {name: value.astype(np.float32, copy=False) if value.dtype.kind == "f" else value
                for name, value in zip(names, values)}

    def details(self, ops: Ops) -> dict:
        return {**self.facts, "intra_op_threads": worker_threads()}


class OrtExecution(ExecutingDevice):
    """The precision's graph really runs on onnxruntime on each batch of performance samples, in the dispatcher
    thread; the session is built before LoadGen starts (no query pays for it)."""

    def __init__(self, prepared: OrtPrepared, workload: Workload):
        self.samples = Samples(prepared.model, workload)
        self.workload = workload
        self.prepared = prepared
        ops = prepared.ops()
        prepared.session()

        def execute(indices):
            outputs = prepared.forward(self.samples.batch_inputs(indices), ops)
            return self.samples.responses(outputs, len(indices))

        super().__init__(execute)


class OnnxruntimeBackend(Backend):
    name = "onnxruntime"
    description = "onnxruntime's CPU provider running the suite's ONNX graph of each precision (FP8 as QDQ)"
    precisions = ("fp32", *GRAPH_PRECISIONS)
    timing = "measured"
    targets_dir = Path(__file__).parent

    def __init__(self, chip: str | None = None):
        super().__init__(chip)
        self._ipu: IpuBackend | None = None
        self._prepared: dict[tuple, tuple[object, OrtPrepared]] = {}

    def ipu(self) -> IpuBackend:
        """The ipu backend whose policies, FP8 settings and calibration the precision graphs are written with."""
        if self._ipu is None:
            self._ipu = IpuBackend()
        return self._ipu

    def accuracy_support(self, model_name: str, precision: str) -> str | None:
        reason = super().accuracy_support(model_name, precision)
        if reason is None and precision in GRAPH_PRECISIONS:
            reason = self.ipu().accuracy_support(model_name, precision)  # a model without FP8 settings
        return reason

    def prepare(self, model, precision: str, calibration_inputs: dict | None = None, *, batch_size: int = 4,
                case: str | None = None) -> OrtPrepared:
        """The graph of ``model`` at ``precision`` and what identifies it; exported once per model object and
        precision for the session (a graph calibrated on caller-given inputs is the caller's to keep)."""
        self.check_precision(precision)
        key = (id(model), precision, case)
        hit = self._prepared.get(key)
        if hit is not None and hit[0] is model and calibration_inputs is None:
            return hit[1]
        graph, facts, recording = self._graph(model, precision, calibration_inputs, batch_size, case)
        prepared = OrtPrepared(model, precision, graph, facts)
        if recording is not None:
            facts["example_batch"] = _example_batch(prepared, recording)
        if calibration_inputs is None:
            self._prepared[key] = (model, prepared)
        return prepared

    def _graph(self, model, precision: str, calibration_inputs, batch_size: int, case: str | None):
        """The serialised graph of ``model`` at ``precision``, the facts of it for the record, and the recording it
        was written from (None for a user's graph run as given)."""
        from conformance import graphs  # onnx loads when a graph is first written, not when the backend is listed
        from conformance.graphs.case import GraphModel

        facts: dict = {}
        recording = None
        if precision == "fp32" and isinstance(model, GraphModel):  # the user's graph, as given
            proto = model.interpreter.model
            data = model.interpreter.serialized()  # its weights inline (the interpreter holds them as arrays)
            facts["graph"] = {"source": "the imported graph as given"}
        else:
            if precision == "fp32":
                recording = graphs.record(model)
                facts["graph"] = {"source": "the model's FP32 graph (graphs.export.record)"}
            else:
                ipu = self.ipu().prepare(model, precision, calibration_inputs, batch_size=batch_size, case=case)
                # a graph whose inputs cannot be drawn is recorded on the given calibration inputs
                example = (calibration_inputs if isinstance(model, GraphModel) and model.drawable() is not None
                           else None)
                recording, poprt = graphs.record_precision(model, ipu.policy, ipu.plan, example=example)
                facts["graph"] = {"source": f"the ipu precision {precision!r} as a graph (graphs.precision)"}
                if ipu.plan is not None:  # the ipu's record of its FP8 plan, with the scales as the graph holds them
                    facts.update(ipu.details(ipu.ops()), fp8_scales=poprt["fp8"]["scales"])
            proto = recording.model
            data = proto.SerializeToString()
        facts["graph"].update(_describe(proto, data))
        return data, facts, recording

    def loadgen_device(self, model, precision: str, workload: Workload) -> OrtExecution:
        return OrtExecution(self.prepare(model, precision), workload)

    def data_types(self, precision: str) -> dict[str, str]:
        """fp32: the FP32 reference's; fp16 and fp8: what the ipu precision the graph was written from holds."""
        if precision in GRAPH_PRECISIONS:
            return self.ipu().data_types(precision)
        return super().data_types(precision)

    def versions(self) -> dict[str, str]:
        return {"onnxruntime": onnxruntime.__version__, "onnx": metadata.version("onnx"), "numpy": np.__version__}
