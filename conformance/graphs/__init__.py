"""ONNX graphs of the six models, recorded from the models' own code (``ipu-conformance export``).

:mod:`~conformance.graphs.export` runs a model's ``forward`` through recording ops, :mod:`~conformance.graphs.tensor`
follows its shape steps between ops, :mod:`~conformance.graphs.builder` names nodes after the suite's layers, and
:mod:`~conformance.graphs.runtime` runs a graph on onnxruntime (an engine independent of the numpy models).
"""

from conformance.graphs.builder import BATCH, OPSET, layer_of
from conformance.graphs.export import GraphOps, Recording, check, record, save, verify, writable_target
from conformance.graphs.tensor import BatchDim, GraphError, GraphTensor

__all__ = ["BATCH", "OPSET", "BatchDim", "GraphError", "GraphOps", "GraphTensor", "Recording", "check", "layer_of",
           "record", "save", "verify", "writable_target"]
