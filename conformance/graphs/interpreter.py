"""Run an FP32 ONNX graph through a backend's ops (:class:`models.ops.Ops`): the graph's arithmetic is the backend's.

Every node that computes (MatMul/Gemm, Conv, the elementwise ops, Softmax, LayerNormalization, Gelu,
BatchNormalization, pooling, a Gather from a float table) is one call of the ops contract, named after the node (a
node ``layer:2`` applies layer ``layer`` again), so a backend's precision policy applies by name as for the built-in
models: a MatMul or Gemm with a constant weight is a ``linear`` (its weight an FP8 weight operand), one of two
activations a ``matmul``; a bias Add after it is an ``add`` (the emulator rounds a matrix product before its bias
either way). The ops that only move or select values (Reshape, Transpose, Slice, Gather of indices, Concat, Where,
...) run exactly in numpy, as the models' own shape steps do. Of the sub-graph forms of an op (GLU and SiLU as the
suite's export writes them, Split/Sigmoid/Mul; the exact GELU as torch writes it, Div/Erf/Add/Mul/Mul), the
interpreter calls the op itself, so that the rounding is the op's; Erf alone has no op and is refused.

A graph is checked before it runs, each refusal an :class:`InterpreterError` naming what is wrong: not ONNX, failing
``onnx.checker``, an opset below :data:`MIN_OPSET`, an operator outside :data:`SUPPORTED` (naming the node and the
supported operators), a custom domain or a model-local function, tensors other than float32/int/bool, external data
that is missing or outside the graph's folder. Nothing from a graph is executed as code: attributes are read as data
and every operator maps to a fixed function here.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper, numpy_helper

from models.ops import Ops

MIN_OPSET = 17  # LayerNormalization is a single ONNX op from opset 17 on
MAX_GRAPH_BYTES = 2 ** 31 - 1  # a protobuf message holds at most 2 GiB: larger weights are external data
DOMAINS = ("", "ai.onnx")
F32 = np.float32
# Element types a graph may hold: float32 (its arithmetic is the backend's), integers and booleans (indices, masks).
TENSOR_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL}


class InterpreterError(ValueError):
    """A graph the interpreter cannot run as it is (the message names the node or the file and says why)."""


def _array(x):
    """``x`` as an array: as it is when it has a dtype and a shape (a numpy array, or a tensor being recorded into a
    graph, which must not be converted)."""
    return x if hasattr(x, "dtype") and hasattr(x, "shape") and hasattr(x, "ndim") else np.asarray(x)


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _layer(node_name: str) -> str:
    """The layer name an op call carries: ``a.b:2`` -> ``a.b``, ``a.b:2/bias`` -> ``a.b/bias``."""
    head, sep, tail = node_name.partition("/")
    return head.split(":", 1)[0] + sep + tail


def _onnx_slice(x, starts, ends, axes, steps):
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis, dim, start, end, step = int(axis) % x.ndim, x.shape[int(axis) % x.ndim], int(start), int(end), int(step)
        if step == 0:
            raise InterpreterError("Slice: a step of 0")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, -1), dim - 1), min(max(end, -1), dim - 1)
        index[axis] = slice(start, None if end < 0 else end, step)
    return x[tuple(index)]


class Interpreter:
    """A checked ONNX graph, ready to run through any :class:`Ops` (see the module docstring)."""

    def __init__(self, graph, *, base_dir: str | os.PathLike | None = None):
        """``graph``: a path, serialised bytes or a ModelProto; ``base_dir``: where its external data lives (the
        file's folder for a path)."""
        if isinstance(graph, (str, os.PathLike)):
            path = Path(graph)
            base_dir = path.parent if base_dir is None else base_dir
            try:
                if not path.is_file():
                    raise InterpreterError(f"{path}: not a file")
                if path.stat().st_size > MAX_GRAPH_BYTES:
                    raise InterpreterError(f"{path}: {path.stat().st_size} bytes, more than a protobuf message holds "
                                           f"({MAX_GRAPH_BYTES}); keep the weights in external data")
                graph = path.read_bytes()
            except OSError as exc:
                raise InterpreterError(f"{path}: cannot be read ({exc.strerror or exc})") from None
            self.source = str(path)
        else:
            self.source = "the graph"
        if isinstance(graph, (bytes, bytearray)):
            try:
                graph = onnx.load_from_string(bytes(graph))
            except (DecodeError, ValueError, RuntimeError) as exc:
                raise InterpreterError(f"{self.source} is not an ONNX model ({exc})") from None
        if not isinstance(graph, onnx.ModelProto) or not graph.graph.node:
            raise InterpreterError(f"{self.source} is not an ONNX model (no graph nodes)")
        self.model = graph
        self._check_structure()
        self._load_external_data(Path(base_dir) if base_dir is not None else None)
        try:
            onnx.checker.check_model(self.model, full_check=True)
        except onnx.checker.ValidationError as exc:
            raise InterpreterError(f"{self.source} fails onnx.checker: {str(exc).splitlines()[0]}") from None
        g = self.model.graph
        self.inputs = [v.name for v in g.input if v.name not in {t.name for t in g.initializer}]
        self.outputs = [v.name for v in g.output]
        self.constants = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        self._weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for tensor in g.initializer:
            if tensor.data_type not in TENSOR_TYPES:
                raise InterpreterError(f"initializer {tensor.name!r} is {onnx.TensorProto.DataType.Name(tensor.data_type)}; "
                                       "the interpreter runs FP32 graphs (float32, integer and bool tensors): the "
                                       "precision comes from the backend")
        self._check_forms()
        self._nodes = list(g.node)  # the graph's nodes, their attributes and each value's users, read once
        self._attrs = [_attrs(node) for node in self._nodes]
        self._users: dict[str, list[onnx.NodeProto]] = {}
        for node in self._nodes:
            for name in node.input:
                self._users.setdefault(name, []).append(node)
        for value in list(g.input) + list(g.output):
            kind = value.type.tensor_type.elem_type
            if kind not in TENSOR_TYPES:
                raise InterpreterError(f"graph input/output {value.name!r} is "
                                       f"{onnx.TensorProto.DataType.Name(kind)}; the interpreter runs FP32 graphs")

    # -- checks -----------------------------------------------------------------------------------------------------
    def _check_structure(self) -> None:
        m = self.model
        if m.functions:
            raise InterpreterError(f"{self.source} defines model-local functions ({', '.join(f.name for f in m.functions)}); "
                                   "only the standard ONNX operators are run")
        for opset in m.opset_import:
            if opset.domain not in DOMAINS:
                raise InterpreterError(f"{self.source} imports the custom domain {opset.domain!r}; only the standard "
                                       "ONNX domain is run")
            if opset.version < MIN_OPSET:
                raise InterpreterError(f"{self.source} has opset {opset.version}; opset {MIN_OPSET} or later is "
                                       "supported (convert it with onnx.version_converter)")
        for node in m.graph.node:
            where = f"node {node.name or '(unnamed)'!r} ({node.op_type})"
            if node.domain not in DOMAINS:
                raise InterpreterError(f"{where} is in the custom domain {node.domain!r}; only the standard ONNX "
                                       "domain is run")
            if node.op_type not in SUPPORTED:
                raise InterpreterError(f"{where}: operator {node.op_type} is not supported; supported operators: "
                                       f"{', '.join(sorted(SUPPORTED))}")
            for attribute in node.attribute:
                if attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    raise InterpreterError(f"{where} holds a sub-graph; sub-graphs are not run")

    def _check_forms(self) -> None:
        """Operators run only inside a sub-graph form (Erf inside GELU) are refused before the graph runs."""
        nodes = self.model.graph.node
        values = dict(self.constants)
        values.update({node.output[0]: numpy_helper.to_array(node.attribute[0].t) for node in nodes
                       if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value"})
        users: dict[str, list[onnx.NodeProto]] = {}
        producer = {}
        for node in nodes:
            producer.update({name: node for name in node.output})
            for name in node.input:
                users.setdefault(name, []).append(node)
        for node in nodes:
            if node.op_type == "Erf":
                div = producer.get(node.input[0])
                if div is None or _gelu_form(div, users, values) is None:
                    raise InterpreterError(f"node {node.name!r} (Erf): Erf is supported only inside the exact GELU "
                                           "sub-graph x * 0.5 * (1 + Erf(x / sqrt(2))); the ops contract has no erf")
        self._known = values  # values known before the graph runs: what a sub-graph form's constants are matched on

    def _load_external_data(self, base_dir: Path | None) -> None:
        external = [t for t in self.model.graph.initializer if external_data_helper.uses_external_data(t)]
        if not external:
            return
        if base_dir is None:
            raise InterpreterError(f"{self.source} keeps tensors in external data ({external[0].name!r}); give the "
                                   "graph as a file, with its data beside it")
        root = Path(base_dir).resolve()
        for tensor in external:
            location = external_data_helper.ExternalDataInfo(tensor).location
            target = (root / location).resolve()
            if root not in target.parents:
                raise InterpreterError(f"tensor {tensor.name!r}: external data {location!r} lies outside the graph's "
                                       f"folder {str(root)!r}")
            if not target.is_file():
                raise InterpreterError(f"tensor {tensor.name!r}: external data file {str(target)!r} is missing")
        external_data_helper.load_external_data_for_model(self.model, str(root))

    # -- running ----------------------------------------------------------------------------------------------------
    def run(self, inputs: dict[str, np.ndarray], ops: Ops) -> dict[str, np.ndarray]:
        """The graph's outputs on ``inputs`` (by the graph's input names), computed through ``ops``."""
        self.check_inputs(inputs)
        values: dict[str, np.ndarray] = dict(self.constants)
        constant = set(self.constants)
        values.update({name: _array(inputs[name]) for name in self.inputs})
        users = self._users
        done: set[int] = set()  # ids of the nodes a sub-graph form already ran
        for node, attrs in zip(self._nodes, self._attrs):
            if id(node) in done:
                continue
            fused = _fused(node, users, {**self._known, **values} if node.op_type == "Div" else values)
            if fused is not None:
                consumed, produced = fused(node, {name: values[name] for name in node.input if name}, ops)
                done.update(id(n) for n in consumed)
                values.update(produced)
                continue
            args = [values[name] if name else None for name in node.input]
            try:
                values.update(zip(node.output, _RUN[node.op_type](node, args, attrs, ops, constant, self)))
            except (ValueError, IndexError) as exc:  # shapes that do not fit: named, not a numpy traceback
                if isinstance(exc, InterpreterError):
                    raise
                shapes = ", ".join(str(np.shape(a)) for a in args if a is not None)
                raise InterpreterError(f"node {node.name!r} ({node.op_type}) on inputs of shapes {shapes}: {exc}") from None
            if node.op_type in _EXACT and all(name in constant for name in node.input if name) and not (
                    node.op_type == "Gather" and values[node.input[0]].dtype == F32):  # an embedding is an op
                constant.update(node.output)
        return {name: values[name] for name in self.outputs}

    def check_inputs(self, inputs: dict[str, np.ndarray]) -> None:
        """An InterpreterError unless ``inputs`` has every graph input, of its element type and rank, with its fixed
        dimensions."""
        missing = [name for name in self.inputs if name not in inputs]
        if missing:
            raise InterpreterError(f"inputs {missing} are missing; the graph takes {self.inputs}")
        for value in self.model.graph.input:
            if value.name not in self.inputs:
                continue
            array = _array(inputs[value.name])
            kind = value.type.tensor_type.elem_type
            expected_dtype = onnx.helper.tensor_dtype_to_np_dtype(kind)
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                    for d in value.type.tensor_type.shape.dim]
            fits = array.ndim == len(dims) and all(not isinstance(d, int) or d == n for d, n in zip(dims, array.shape))
            if array.dtype != expected_dtype or not fits:
                raise InterpreterError(f"input {value.name!r} is {array.dtype} of shape {array.shape}; the graph takes "
                                       f"{expected_dtype} of shape ({', '.join(map(str, dims))})")

    def is_input(self, value_name: str) -> bool:
        return value_name in self.inputs

    def weight(self, value_name: str, matrix: np.ndarray) -> np.ndarray:
        """The (out, in) weight of a MatMul's constant (in, out) operand, laid out once (as a checkpoint holds it:
        backends cache a weight's device form by the array)."""
        cached = self._weights.get(value_name)
        if cached is None or cached[0] is not matrix:
            cached = self._weights[value_name] = (matrix, np.ascontiguousarray(np.asarray(matrix).T))
        return cached[1]


# -- the operators --------------------------------------------------------------------------------------------------
def _float(x):
    return np.asarray(x, F32)


def _input_or_pass(node, args, attrs, ops, constant, interp):
    """Identity / Cast(to float) of a graph input is the model's ``input`` op; otherwise an exact step."""
    x = args[0]
    if node.op_type == "Cast":
        to = attrs["to"]
        if to not in TENSOR_TYPES:
            raise InterpreterError(f"node {node.name!r}: Cast to {onnx.TensorProto.DataType.Name(to)}; the interpreter "
                                   "runs FP32 graphs")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(to)
        if interp.is_input(node.input[0]) and to == onnx.TensorProto.FLOAT:
            return [ops.input(x.astype(dtype), name=_layer(node.name))]
        return [x.astype(dtype)]
    if interp.is_input(node.input[0]) and _array(x).dtype == F32:
        return [ops.input(x, name=_layer(node.name))]
    return [x]


def _matmul(node, args, attrs, ops, constant, interp):
    a, b = args
    name = _layer(node.name)
    if node.input[1] in constant and np.ndim(b) == 2:  # a layer's weight: (in, out) here, (out, in) for the ops
        return [ops.linear(a, interp.weight(node.input[1], b), None, name=name)]
    return [ops.matmul(a, b, name=name)]


def _gemm(node, args, attrs, ops, constant, interp):
    a, b, c = (args + [None])[:3]
    if attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
        raise InterpreterError(f"node {node.name!r}: Gemm with alpha or beta other than 1 is not supported")
    a = a.T if attrs.get("transA", 0) else a
    name = _layer(node.name)
    if node.input[1] in constant:
        weight = b if attrs.get("transB", 0) else interp.weight(node.input[1], b)  # (out, in)
        y = ops.linear(a, weight, None, name=name)
    else:
        y = ops.matmul(a, b.T if attrs.get("transB", 0) else b, name=name)
    return [y if c is None else ops.add(y, c, name=f"{name}/bias")]


def _conv(node, args, attrs, ops, constant, interp):
    x, w, b = (args + [None])[:3]
    if np.ndim(w) != 4 or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise InterpreterError(f"node {node.name!r}: only 2-D Conv with explicit pads is supported")
    pads = attrs.get("pads", [0, 0, 0, 0])
    if pads[:2] != pads[2:]:
        raise InterpreterError(f"node {node.name!r}: Conv pads {pads} are not the same on both sides")
    return [ops.conv2d(x, w, b, stride=tuple(attrs.get("strides", (1, 1))), padding=tuple(pads[:2]),
                       dilation=tuple(attrs.get("dilations", (1, 1))), groups=int(attrs.get("group", 1)),
                       name=_layer(node.name))]


_INTEGER_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


def _integers(*values) -> bool:
    """Whether every operand holds integers (index and shape arithmetic, run exactly, not through the ops)."""
    return all(_array(v).dtype.kind in "iub" for v in values)


def _binary(method):
    def run(node, args, attrs, ops, constant, interp):
        if _integers(*args):
            return [_INTEGER_OPS[method](args[0], args[1])]
        return [getattr(ops, method)(args[0], args[1], name=_layer(node.name))]
    return run


def _div(node, args, attrs, ops, constant, interp):
    a, b = args
    if _integers(a, b):  # ONNX's integer division truncates towards zero
        a, b = np.asarray(a), np.asarray(b)
        if not np.all(b):
            raise InterpreterError(f"node {node.name!r}: integer Div by zero")
        quotient = np.abs(a) // np.abs(b)
        return [(np.sign(a) * np.sign(b) * quotient).astype(np.result_type(a, b))]
    if node.input[1] in constant:
        reciprocal = (1.0 / np.asarray(b, np.float64)).astype(F32)
        if np.array_equal(1.0 / reciprocal.astype(np.float64), np.asarray(b, np.float64)):  # exact: x / b = x * (1/b)
            return [ops.mul(a, reciprocal, name=_layer(node.name))]
    return [ops.div(a, b, name=_layer(node.name))]


def _pow(node, args, attrs, ops, constant, interp):
    exponent = np.asarray(args[1]) if node.input[1] in constant else None
    if exponent is None or exponent.size != 1:
        raise InterpreterError(f"node {node.name!r}: Pow is supported with a constant scalar exponent (its exponent "
                               f"{node.input[1]!r} is {'not a constant' if exponent is None else f'of shape {exponent.shape}'})")
    return [ops.pow(args[0], float(exponent.reshape(())), name=_layer(node.name))]


def _unary(method, **fixed):
    def run(node, args, attrs, ops, constant, interp):
        return [getattr(ops, method)(args[0], name=_layer(node.name), **fixed)]
    return run


def _gelu(node, args, attrs, ops, constant, interp):
    approximate = attrs.get("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    return [ops.gelu(args[0], approximate=approximate, name=_layer(node.name))]


def _softmax(node, args, attrs, ops, constant, interp):
    return [ops.softmax(args[0], axis=int(attrs.get("axis", -1)), name=_layer(node.name))]


def _layer_norm(node, args, attrs, ops, constant, interp):
    x, gamma, beta = (args + [None])[:3]
    if int(attrs.get("axis", -1)) % np.ndim(x) != np.ndim(x) - 1:
        raise InterpreterError(f"node {node.name!r}: LayerNormalization over axes other than the last is not supported")
    beta = np.zeros_like(gamma) if beta is None else beta
    return [ops.layer_norm(x, gamma, beta, eps=float(attrs.get("epsilon", 1e-5)), name=_layer(node.name))]


def _batch_norm(node, args, attrs, ops, constant, interp):
    x, gamma, beta, mean, var = args[:5]
    return [ops.batch_norm(x, mean, var, gamma, beta, eps=float(attrs.get("epsilon", 1e-5)), axis=1,
                           name=_layer(node.name))]


def _reduce_mean(node, args, attrs, ops, constant, interp):
    x = args[0]
    axes = args[1] if len(args) > 1 and args[1] is not None else attrs.get("axes")
    axes = tuple(range(np.ndim(x))) if axes is None or len(axes) == 0 else tuple(int(a) for a in np.ravel(axes))
    return [ops.mean(x, axis=axes, keepdims=bool(attrs.get("keepdims", 1)), name=_layer(node.name))]


def _global_average_pool(node, args, attrs, ops, constant, interp):
    return [ops.mean(args[0], axis=(2, 3), keepdims=True, name=_layer(node.name))]


def _max_pool(node, args, attrs, ops, constant, interp):
    pads = attrs.get("pads", [0, 0, 0, 0])
    if pads[:2] != pads[2:] or attrs.get("ceil_mode", 0) or any(d != 1 for d in attrs.get("dilations", (1, 1))):
        raise InterpreterError(f"node {node.name!r}: MaxPool with uneven pads, ceil_mode or dilations is not supported")
    return [ops.max_pool2d(args[0], kernel=tuple(attrs["kernel_shape"]), stride=tuple(attrs.get("strides", (1, 1))),
                           padding=tuple(pads[:2]), name=_layer(node.name))]


def _gather(node, args, attrs, ops, constant, interp):
    data, indices = args
    axis = int(attrs.get("axis", 0))
    if node.input[0] in constant and np.asarray(data).dtype == F32 and axis == 0:
        return [ops.embedding(data, indices, name=_layer(node.name))]  # rows of a table: an embedding
    return [np.take(data, indices, axis=axis)]


# exact steps: values moved, selected or compared, never rounded
def _reshape(node, args, attrs, ops, constant, interp):
    x, shape = args
    shape = [int(d) for d in shape]
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [np.reshape(x, shape)]


def _transpose(node, args, attrs, ops, constant, interp):
    perm = attrs.get("perm")
    return [np.transpose(args[0], None if perm is None else tuple(perm))]


def _slice(node, args, attrs, ops, constant, interp):
    x, starts, ends = args[:3]
    axes = args[3] if len(args) > 3 and args[3] is not None else range(len(starts))
    steps = args[4] if len(args) > 4 and args[4] is not None else [1] * len(starts)
    return [_onnx_slice(x, starts, ends, axes, steps)]


def _unsqueeze(node, args, attrs, ops, constant, interp):
    x, axes = args
    out_ndim = np.ndim(x) + len(axes)
    return [np.expand_dims(x, tuple(int(a) % out_ndim for a in axes))]


def _squeeze(node, args, attrs, ops, constant, interp):
    x = args[0]
    axes = args[1] if len(args) > 1 and args[1] is not None else None
    return [np.squeeze(x, None if axes is None else tuple(int(a) for a in axes))]


def _concat(node, args, attrs, ops, constant, interp):
    return [np.concatenate(args, axis=int(attrs["axis"]))]


def _split(node, args, attrs, ops, constant, interp):
    x = args[0]
    axis = int(attrs.get("axis", 0)) % np.ndim(x)
    if len(args) > 1 and args[1] is not None:
        sizes = [int(s) for s in args[1]]
    else:
        parts = int(attrs.get("num_outputs", len(node.output)))
        size = -(-x.shape[axis] // parts)
        sizes = [size] * (parts - 1) + [x.shape[axis] - size * (parts - 1)]
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _flatten(node, args, attrs, ops, constant, interp):
    x = args[0]
    axis = int(attrs.get("axis", 1)) % (np.ndim(x) + 1)
    return [np.reshape(x, (int(np.prod(x.shape[:axis])), -1))]


def _shape(node, args, attrs, ops, constant, interp):
    shape = np.asarray(np.shape(args[0]), np.int64)
    return [shape[attrs.get("start", 0): attrs.get("end", len(shape))]]


def _constant(node, args, attrs, ops, constant, interp):
    if "value" in attrs:
        return [numpy_helper.to_array(attrs["value"])]
    for key, dtype in (("value_float", F32), ("value_floats", F32), ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return [np.asarray(attrs[key], dtype)]
    raise InterpreterError(f"node {node.name!r}: Constant without a value, value_float(s) or value_int(s)")


def _elementwise_exact(fn):
    def run(node, args, attrs, ops, constant, interp):
        return [fn(*args)]
    return run


def _constant_of_shape(node, args, attrs, ops, constant, interp):
    value = numpy_helper.to_array(attrs["value"]).reshape(-1) if "value" in attrs else np.zeros(1, F32)
    return [np.full(tuple(int(d) for d in args[0]), value[0], value.dtype)]


def _erf(node, args, attrs, ops, constant, interp):
    raise InterpreterError(f"node {node.name!r}: Erf is run only as part of the exact GELU sub-graph "
                           "x * 0.5 * (1 + Erf(x / sqrt(2))) (the ops contract has no erf of its own)")


def _range(node, args, attrs, ops, constant, interp):
    start, limit, delta = (np.asarray(a).reshape(()) for a in args)
    if delta == 0:
        raise InterpreterError(f"node {node.name!r}: Range with a delta of 0")
    count = max(int(np.ceil((limit - start) / delta)), 0)  # ONNX's number of elements
    return [(start + delta * np.arange(count, dtype=start.dtype)).astype(start.dtype)]


def _expand(node, args, attrs, ops, constant, interp):
    x, shape = args
    return [np.broadcast_to(x, np.broadcast_shapes(np.shape(x), tuple(int(d) for d in shape))).copy()]


_RUN = {
    "Identity": _input_or_pass, "Cast": _input_or_pass,
    "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv,
    "Add": _binary("add"), "Sub": _binary("sub"), "Mul": _binary("mul"), "Div": _div, "Pow": _pow,
    "Sqrt": _unary("sqrt"), "Relu": _unary("relu"), "Sigmoid": _unary("sigmoid"), "Tanh": _unary("tanh"), "Gelu": _gelu,
    "Softmax": _softmax, "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm,
    "ReduceMean": _reduce_mean, "GlobalAveragePool": _global_average_pool, "MaxPool": _max_pool,
    "Gather": _gather,
    "Reshape": _reshape, "Transpose": _transpose, "Slice": _slice, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze,
    "Concat": _concat, "Split": _split, "Flatten": _flatten, "Shape": _shape, "Constant": _constant,
    "Expand": _expand, "ConstantOfShape": _constant_of_shape, "Erf": _erf,
    "Equal": _elementwise_exact(np.equal), "Not": _elementwise_exact(np.logical_not),
    "And": _elementwise_exact(np.logical_and), "Or": _elementwise_exact(np.logical_or),
    "Greater": _elementwise_exact(np.greater), "GreaterOrEqual": _elementwise_exact(np.greater_equal),
    "Less": _elementwise_exact(np.less), "LessOrEqual": _elementwise_exact(np.less_equal),
    "IsNaN": _elementwise_exact(np.isnan), "Where": _elementwise_exact(np.where), "Range": _range,
}
SUPPORTED = frozenset(_RUN)
# Operators whose outputs are constant when their inputs are (weights laid out by shape steps stay weights).
_EXACT = frozenset({"Identity", "Cast", "Reshape", "Transpose", "Slice", "Unsqueeze", "Squeeze", "Concat", "Split",
                    "Flatten", "Shape", "Constant", "Expand", "Equal", "Not", "Where", "Gather",
                    "ConstantOfShape", "And", "Or", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "IsNaN",
                    "Range"})


# -- sub-graph forms of one op ------------------------------------------------------------------------------------
def _single_user(value, users, kind):
    found = users.get(value, [])
    return found[0] if len(found) == 1 and found[0].op_type == kind else None


def _scalar(values, name, expected) -> bool:
    """Whether value ``name`` is a known constant equal to ``expected`` in float32 (of one element)."""
    value = values.get(name)
    if not isinstance(value, (np.ndarray, np.generic)):  # absent, or computed (being recorded into a graph)
        return False
    return np.size(value) == 1 and np.float32(np.ravel(value)[0]) == np.float32(expected)


def _other(node, name):
    """The input of the two-input ``node`` that is not ``name`` (None when it is not one of them)."""
    rest = list(node.input)
    if name not in rest:
        return None
    rest.remove(name)
    return rest[0] if len(rest) == 1 else None


def _gelu_form(node, users, values):
    """The nodes of torch's exact GELU sub-graph starting at the Div ``node``, Div(x, sqrt 2) -> Erf -> Add(1) ->
    Mul(x, .) -> Mul(0.5), or None."""
    if node.op_type != "Div" or not _scalar(values, node.input[1], np.sqrt(2.0)):
        return None
    x = node.input[0]
    erf = _single_user(node.output[0], users, "Erf")
    add = erf and _single_user(erf.output[0], users, "Add")
    if add is None or not _scalar(values, _other(add, erf.output[0]), 1.0):
        return None
    mul = _single_user(add.output[0], users, "Mul")
    if mul is None or _other(mul, add.output[0]) != x:
        return None
    half = _single_user(mul.output[0], users, "Mul")
    if half is None or not _scalar(values, _other(half, mul.output[0]), 0.5):
        return None
    return [node, erf, add, mul, half]


def _fused(node, users, values):
    """The runner of a sub-graph that is one op of the contract starting at ``node``, or None: SiLU as
    Sigmoid(x) -> Mul(x, .), GLU as Split(x, 2) -> Sigmoid(second) -> Mul(first, .), exact GELU as torch writes
    it (see :func:`_gelu_form`): ONNX defines Gelu (opset 20) as a function of that body and inference compilers
    fuse it into one kernel, so the op's single rounding is how an IPU stack runs it, not a rounding per step."""
    gelu_nodes = _gelu_form(node, users, values)
    if gelu_nodes is not None:
        def gelu(node, values, ops, nodes=gelu_nodes):
            return nodes, {nodes[-1].output[0]: ops.gelu(values[node.input[0]], approximate="none",
                                                         name=_layer(nodes[-1].name))}
        return gelu
    if node.op_type == "Sigmoid":
        mul = _single_user(node.output[0], users, "Mul")
        if mul is not None and set(mul.input) == {node.input[0], node.output[0]}:
            def silu(node, values, ops, mul=mul):
                return [node, mul], {mul.output[0]: ops.silu(values[node.input[0]], name=_layer(mul.name))}
            return silu
    if (node.op_type == "Split" and len(node.output) == 2 and (len(node.input) < 2 or not node.input[1])
            and np.shape(values[node.input[0]])[int(_attrs(node).get("axis", 0))] % 2 == 0):  # two equal halves
        sigmoid = _single_user(node.output[1], users, "Sigmoid")
        mul = sigmoid and _single_user(sigmoid.output[0], users, "Mul")
        first_users = users.get(node.output[0], [])
        if mul is not None and set(mul.input) == {node.output[0], sigmoid.output[0]} and first_users == [mul]:
            axis = int(_attrs(node).get("axis", 0))

            def glu(node, values, ops, sigmoid=sigmoid, mul=mul, axis=axis):
                return [node, sigmoid, mul], {mul.output[0]: ops.glu(values[node.input[0]], axis=axis,
                                                                     name=_layer(mul.name))}
            return glu
    return None
