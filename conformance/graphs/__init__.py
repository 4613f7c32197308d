"""ONNX graphs of the six models, recorded from the models' own code (``ipu-conformance export``).

:mod:`~conformance.graphs.export` runs a model's ``forward`` through recording ops, :mod:`~conformance.graphs.tensor`
follows its shape steps between ops, :mod:`~conformance.graphs.builder` names nodes after the suite's layers, and
:mod:`~conformance.graphs.runtime` runs a graph on onnxruntime (an engine independent of the numpy models).
:mod:`~conformance.graphs.precision` writes a precision of the ``ipu`` hardware as a graph (float16 values, FP8
QuantizeLinear/DequantizeLinear pairs) and :mod:`~conformance.graphs.poprt` PopRT's converter settings for it;
:mod:`~conformance.graphs.interpreter` runs a graph through a backend's ops, and
:mod:`~conformance.graphs.case` makes a user's graph (``--onnx``) a case of the accuracy test.
"""

from conformance.graphs.builder import BATCH, OPSET, layer_of
from conformance.graphs.case import GraphCase, GraphCaseError, GraphModel
from conformance.graphs.export import GraphOps, Recording, check, record, save, verify, writable_target
from conformance.graphs.interpreter import Interpreter, InterpreterError
from conformance.graphs.precision import FloatPartialsOps, PrecisionGraphOps, record_precision
from conformance.graphs.tensor import BatchDim, GraphError, GraphTensor

__all__ = ["BATCH", "OPSET", "BatchDim", "FloatPartialsOps", "GraphCase", "GraphCaseError", "GraphError", "GraphModel",
           "GraphOps", "GraphTensor", "Interpreter",
           "InterpreterError", "PrecisionGraphOps", "Recording", "check", "layer_of", "record", "record_precision",
           "save", "verify", "writable_target"]
