"""An ONNX graph under construction: nodes, deduplicated initializers, and unique node and value names.

Names: the main node of an ops call (the matrix op of a linear layer, the Gather of an embedding) carries the call's
layer name (``bert.encoder.layer.3.attention.self.query``); its further nodes are ``{node}/{role}`` (``.../query/bias``)
and the shape steps on its result ``{node}/{OpType}``. ONNX runtimes refuse two nodes of one name, so a layer applied
more than once (ALBERT's shared layer) is ``{layer}``, ``{layer}:1``, ``{layer}:2``, ...; :func:`layer_of` gives the
layer name of any node name. The value an ops call returns is named like its main node; initializers after the
checkpoint tensor they hold (``{tensor}.T`` when stored transposed), other constants after their node.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

OPSET = 20  # Gelu (with its tanh form) is a single ONNX op from opset 20 on
IR_VERSION = 9  # the IR version of opset 20: the oldest that holds it, so that older runtimes read the file too
BATCH = "batch"  # the name of the dynamic batch axis of every input and output
DOMAIN = ""  # the standard ONNX operators only
SMALL_CONSTANT = 64  # constants of at most this many elements are shared by value (scalars, index lists)


def layer_of(node_name: str) -> str:
    """The suite's layer name that a node name carries: ``a.b.query:2/bias`` -> ``a.b.query``."""
    return node_name.split("/", 1)[0].split(":", 1)[0]


class GraphBuilder:
    """Collects nodes and initializers; every name it hands out is unique in its namespace (nodes, values)."""

    def __init__(self, param_names: dict[int, str] | None = None):
        self.nodes: list[onnx.NodeProto] = []
        self._model = onnx.ModelProto()  # its graph holds the initializers from the start: the weights are copied once
        self._graph = self._model.graph
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._node_names: set[str] = set()
        self._value_names: set[str] = set()
        self._constants: dict[Any, str] = {}
        self._keep: list[Any] = []  # objects whose id() keys a constant: kept alive so that no id is reused
        self._param_names = dict(param_names or {})  # id(array) -> checkpoint tensor name
        self._renamed: dict[str, str] = {}  # value name -> the graph output it became
        self.constant_bytes = 0

    # -- names ------------------------------------------------------------------------------------------------------
    @staticmethod
    def _unique(base: str, used: set[str]) -> str:
        name, k = base, 0
        while name in used:
            k += 1
            name = f"{base}:{k}"
        used.add(name)
        return name

    def node_name(self, base: str) -> str:
        return self._unique(base, self._node_names)

    def value_name(self, base: str) -> str:
        return self._unique(base, self._value_names)

    def reserve_value(self, name: str) -> None:
        """Claim ``name`` (a graph input's or output's) before any other value can take it."""
        if name in self._value_names:
            raise ValueError(f"graph value name {name!r} is used twice")
        self._value_names.add(name)

    # -- nodes ------------------------------------------------------------------------------------------------------
    def add_node(self, op_type: str, inputs: list[str], outputs: list[str], name: str, **attributes) -> None:
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, domain=DOMAIN, **attributes))

    # -- constants --------------------------------------------------------------------------------------------------
    def param_name(self, array) -> str | None:
        """The checkpoint name of ``array``, or of the parameter it is a view of; None for other arrays."""
        if not isinstance(array, np.ndarray):
            return None
        name = self._param_names.get(id(array))
        if name is None and array.base is not None:
            name = self._param_names.get(id(array.base))
        return name

    def constant(self, value, hint: str, dtype=None, *, key=None, name: str | None = None) -> str:
        """The initializer holding ``value`` (as ``dtype``), shared by every use of the same array object (or, for
        small constants, of the same values under the same ``hint``); named ``name``, else after its checkpoint tensor
        where it is one, else ``hint``."""
        array = np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype)
        if key is None:
            if array.size <= SMALL_CONSTANT:
                key = ("value", hint, array.dtype.str, array.shape, array.tobytes())
            else:
                key = ("object", id(value), array.dtype.str)
                self._keep.append(value)
        existing = self._constants.get(key)
        if existing is not None:
            return existing
        name = self.value_name(name or self.param_name(value) or hint)
        tensor = self._graph.initializer.add()
        tensor.name = name
        tensor.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        tensor.dims.extend(array.shape)
        tensor.raw_data = array.astype(array.dtype.newbyteorder("<"), order="C", copy=False).tobytes()  # ONNX: little-endian
        self.constant_bytes += array.nbytes
        self._constants[key] = name
        return name

    def typed_scalar(self, value: float, data_type: int, hint: str) -> str:
        """A scalar initializer of ONNX element type ``data_type`` (for types numpy has no dtype for, such as the
        FLOAT8 formats of a quantization's zero point), shared by every use of the same value, type and hint."""
        key = ("typed", hint, int(data_type), float(value))
        existing = self._constants.get(key)
        if existing is not None:
            return existing
        name = self.value_name(hint)
        self._graph.initializer.append(helper.make_tensor(name, data_type, [], [value]))
        self._constants[key] = name
        return name

    def transposed_weight(self, weight: np.ndarray, hint: str) -> str:
        """A linear layer's (out, in) weight stored as the (in, out) operand of MatMul, named ``{tensor}.T``."""
        key = ("transposed", id(weight))
        existing = self._constants.get(key)
        if existing is not None:
            return existing
        self._keep.append(weight)
        base = self.param_name(weight) or hint
        transposed = np.ascontiguousarray(np.asarray(weight, np.float32).T)
        return self.constant(transposed, f"{base}.T", key=key, name=f"{base}.T")

    # -- the model --------------------------------------------------------------------------------------------------
    def add_input(self, name: str, dtype: np.dtype, shape: tuple) -> None:
        self.reserve_value(name)
        self.inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape))

    def add_output(self, name: str, value_name: str, dtype: np.dtype, shape: tuple) -> None:
        """Declare the graph output ``name`` (reserved beforehand) holding the value ``value_name``: the node that
        makes it is renamed to write ``name``, or an Identity copies it (an input, an initializer, a value that
        is already another output)."""
        source = self._renamed.get(value_name, value_name)
        if source == value_name and any(value_name in node.output for node in self.nodes):
            for node in self.nodes:
                for field in (node.input, node.output):
                    for i, existing in enumerate(field):
                        if existing == value_name:
                            field[i] = name
            self._value_names.discard(value_name)
            self._renamed[value_name] = name
        else:
            self.add_node("Identity", [source], [name], self.node_name(f"{name}/Identity"))
        self.outputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape))

    def model(self, graph_name: str, doc: str = "", metadata: dict[str, str] | None = None,
              producer_version: str = "") -> onnx.ModelProto:
        """The ModelProto (once: the builder is spent)."""
        if self._model.opset_import:
            raise RuntimeError("GraphBuilder.model() was already called")
        graph = self._graph
        graph.name, graph.doc_string = graph_name, doc
        graph.node.extend(self.nodes)
        graph.input.extend(self.inputs)
        graph.output.extend(self.outputs)
        model = self._model
        model.ir_version, model.producer_name, model.producer_version = IR_VERSION, "ipu-conformance", producer_version
        model.doc_string = doc
        model.opset_import.append(helper.make_opsetid(DOMAIN, OPSET))
        for key, value in (metadata or {}).items():
            model.metadata_props.add(key=key, value=value)
        return model
