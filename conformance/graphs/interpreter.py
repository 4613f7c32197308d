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
``onnx.checker`` (its shape inference included), an opset below :data:`MIN_OPSET` where one of its operators is
defined otherwise, an operator outside :data:`SUPPORTED` (naming the node and the supported operators), a node of a
custom domain or of ONNX-ML other than :data:`ML_OPERATORS` (a domain imported and unused is ignored) or a
model-local function, an optional output it does not compute, tensors other than
float32/int/bool, external data that is missing, outside the graph's folder or of another size than its file and
tensor state, a declared input beyond :data:`MAX_VALUE_BYTES` for one sample. Then the graph runs once on one sample
through the FP32 reference ops (:meth:`Interpreter._dry_run`), so that an attribute value, a rank or a shape it
cannot run is refused when it is read, not inside a test. Nothing from a graph is executed as code: attributes are
read as data and every operator maps to a fixed function here.

Run through a recording ops object (a precision graph written from the interpreter), an exact step on recorded
values is written into that graph as the source graph's own node.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper, numpy_helper

from conformance.graphs.tensor import GraphError, GraphTensor, value_of
from models.ops import Ops, window_sums

MIN_OPSET = 17  # LayerNormalization is a single ONNX op from opset 17 on
MAX_GRAPH_BYTES = 2 ** 31 - 1  # a protobuf message holds at most 2 GiB: larger weights are external data
MAX_VALUE_BYTES = 1 << 32  # the most one value of one sample may take (a declared input, an Expand, a Tile, a Pad)
DOMAINS = ("", "ai.onnx")
ML_DOMAIN = "ai.onnx.ml"  # ONNX-ML: of its operators, those in ML_OPERATORS are run
F32 = np.float32
# Element types a graph may hold: float32 (its arithmetic is the backend's), integers and booleans (indices, masks).
TENSOR_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL}


class InterpreterError(ValueError):
    """A graph the interpreter cannot run as it is (the message names the node or the file and says why)."""


class ValuesError(InterpreterError):
    """A node that cannot run on these values (an index out of range, an integer division by zero): a fault of the
    inputs or of the graph, which a run on other values may not meet."""


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
            raise ValuesError("Slice: a step of 0")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, -1), dim - 1), min(max(end, -1), dim - 1)
        index[axis] = slice(start, None if end < 0 else end, step)
    return x[tuple(index)]


def _declared(value: onnx.ValueInfoProto) -> list:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in value.type.tensor_type.shape.dim]


LARGE_WEIGHT = 1 << 16  # bytes: an initializer this large is checked by its shape, not copied into the checker


def _without_large_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` for onnx.checker: its large initializers as graph inputs of their type and shape (the checker and its
    shape inference read no weight's values; shapes and small constants are kept), so that checking does not copy
    the weights (the checker serialises the model and parses it again, twice with its shape inference); the weights'
    sizes are checked when they are read (:func:`numpy_helper.to_array`)."""
    large = [t for t in model.graph.initializer
             if external_data_helper.uses_external_data(t) or len(t.raw_data) > LARGE_WEIGHT]
    if not large:
        return model
    light = onnx.ModelProto()
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(light, field, getattr(model, field))
    light.opset_import.extend(model.opset_import)
    graph, names = light.graph, {t.name for t in large}
    graph.name = model.graph.name
    graph.node.extend(model.graph.node)
    graph.input.extend(model.graph.input)
    graph.output.extend(model.graph.output)
    graph.value_info.extend(model.graph.value_info)
    graph.initializer.extend(t for t in model.graph.initializer if t.name not in names)
    declared = {v.name for v in model.graph.input}
    graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in large
                       if t.name not in declared)
    return light


def _without_data(model: onnx.ModelProto, names: set[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose initializers ``names`` keep their name, type and dims but no data: the parsed
    message holds its weights (protobuf may keep the whole serialised file for them), so that once they are read
    into arrays, the graph is held without them."""
    def copy(source, target, skip: str) -> None:
        for field, value in source.ListFields():
            if field.name == skip:
                continue
            if hasattr(value, "extend"):  # a repeated field
                getattr(target, field.name).extend(value)
            elif field.message_type is not None:
                getattr(target, field.name).CopyFrom(value)
            else:
                setattr(target, field.name, value)

    light = onnx.ModelProto()
    copy(model, light, "graph")
    copy(model.graph, light.graph, "initializer")
    for tensor in model.graph.initializer:
        if tensor.name in names:
            light.graph.initializer.add(name=tensor.name, dims=tensor.dims, data_type=tensor.data_type,
                                        doc_string=tensor.doc_string)
        else:
            light.graph.initializer.append(tensor)
    return light


def _tensor_bytes(tensor: onnx.TensorProto) -> int | None:
    """The bytes of an external tensor's raw data, from its dims and type (None for a type of no fixed size)."""
    try:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return None
    return int(np.prod(tensor.dims, dtype=np.int64)) * itemsize


def _budget(what: str, shape, dtype, shown: str | None = None) -> None:
    """An InterpreterError when a value of ``shape`` (one sample) would take more than :data:`MAX_VALUE_BYTES`."""
    count = 1
    for d in shape:
        if int(d) < 0:
            raise InterpreterError(f"{what}: negative dimension in {tuple(shape)}")
        count *= int(d)
    size = count * np.dtype(dtype).itemsize
    if size > MAX_VALUE_BYTES:
        raise InterpreterError(f"{what} of shape {shown or tuple(int(d) for d in shape)} takes {size} bytes for one "
                               f"sample, more than the {MAX_VALUE_BYTES} a value may take")


class Interpreter:
    """A checked ONNX graph, ready to run through any :class:`Ops` (see the module docstring)."""

    def __init__(self, graph, *, base_dir: str | os.PathLike | None = None, check_run: bool = True):
        """``graph``: a path, serialised bytes or a ModelProto; ``base_dir``: where its external data lives (the
        file's folder for a path); ``check_run``: run it once on one sample (:meth:`_dry_run`).

        The graph's weights are held once, as the arrays of :attr:`constants`: external data is read straight into
        them, and a graph parsed here (from a path or bytes) has its large initializers' data released from
        :attr:`model` once read (:meth:`serialized` writes the graph whole again); a ModelProto given is the
        caller's and is left as it is."""
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
        owned = isinstance(graph, (bytes, bytearray))  # parsed here: its weights' data may be released
        if owned:
            try:
                graph = onnx.load_from_string(bytes(graph))
            except (DecodeError, ValueError, RuntimeError) as exc:
                raise InterpreterError(f"{self.source} is not an ONNX model ({exc})") from None
        if not isinstance(graph, onnx.ModelProto) or not graph.graph.node:
            raise InterpreterError(f"{self.source} is not an ONNX model (no graph nodes)")
        self.model = graph
        self._check_structure()
        self._base_dir = self._check_external_data(Path(base_dir) if base_dir is not None else None)
        try:
            onnx.checker.check_model(_without_large_weights(self.model), full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError) as exc:
            # ValueError: what the checker's C++ side raises for some malformed fields (an unknown tensor type)
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InterpreterError(f"{self.source} fails onnx.checker: {first}") from None
        g = self.model.graph
        self.inputs = [v.name for v in g.input if v.name not in {t.name for t in g.initializer}]
        self.outputs = [v.name for v in g.output]
        self.constants = {}
        self._released: set[str] = set()  # initializers whose data lives only in self.constants
        for t in g.initializer:
            external = external_data_helper.uses_external_data(t)
            try:  # external data read from its file (the bytes once, viewed by the array), never into the graph
                self.constants[t.name] = numpy_helper.to_array(t, base_dir=self._base_dir or "")
            except (ValueError, TypeError, OSError) as exc:
                raise InterpreterError(f"initializer {t.name!r} cannot be read ({exc})") from None
            if external or (owned and self.constants[t.name].nbytes > LARGE_WEIGHT):
                self._released.add(t.name)
        if owned and self._released:
            self.model = graph = _without_data(self.model, self._released)
            g = graph.graph
        self._lay_out_weights()
        self._weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._built: dict[str, np.ndarray] = {}  # arrays made from nodes' attributes (an ONNX-ML node's weights)
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
        for value in g.input:
            if value.name in self.inputs:
                dims = _declared(value)
                _budget(f"graph input {value.name!r}", [d if isinstance(d, int) else 1 for d in dims],
                        onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type),
                        shown=f"({', '.join(map(str, dims))})")
        if check_run:
            self._dry_run()

    def _dry_run(self) -> None:
        """Run the graph once through the FP32 reference ops on one sample (dynamic dimensions 1; floats seeded normal,
        integers 0, booleans false), so that whatever it cannot run (an attribute value, a rank, shapes that do not
        fit) is refused now, naming the node, and not inside a test."""
        rng = np.random.default_rng(0)
        inputs = {}
        for value in self.model.graph.input:
            if value.name in self.inputs:
                dims = [d if isinstance(d, int) else 1 for d in _declared(value)]
                dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
                inputs[value.name] = (rng.standard_normal(dims).astype(dtype) if np.dtype(dtype).kind == "f"
                                      else np.zeros(dims, dtype))
        try:
            with np.errstate(all="ignore"):
                self.run(inputs, Ops())
        except MemoryError:
            raise InterpreterError(f"{self.source}: one sample does not fit in memory") from None
        except InterpreterError as exc:
            node = getattr(exc, "node", None)
            if node is not None and isinstance(exc, ValuesError) and self._depends_on_values(node, exc.values):
                return  # it failed on an index or size computed from the drawn values: the real inputs decide
            raise

    def _depends_on_values(self, node: onnx.NodeProto, values: dict) -> bool:
        """Whether an integer or boolean input of ``node`` is computed from the values (not only the shapes) of the
        graph's inputs."""
        reach = set(self.inputs)
        for n in self._nodes:
            if n.op_type != "Shape" and any(name in reach for name in n.input):
                reach.update(n.output)
        parameters = node.input[1:] if node.op_type == "Resize" else ()  # its scales or sizes, whatever their type
        return any(name in reach and (_array(values[name]).dtype.kind in "iub" or name in parameters)
                   for name in node.input if name and name in values)

    # -- checks -----------------------------------------------------------------------------------------------------
    def _check_structure(self) -> None:
        m = self.model
        if m.functions:
            raise InterpreterError(f"{self.source} defines model-local functions ({', '.join(f.name for f in m.functions)}); "
                                   "only the standard ONNX operators are run")
        for node in m.graph.node:
            where = f"node {node.name or '(unnamed)'!r} ({node.op_type})"
            if node.domain == ML_DOMAIN and node.op_type not in ML_OPERATORS:
                hint = (" (skl2onnx writes ZipMap unless the classifier is converted with "
                        "options={id(model): {'zipmap': False}})" if node.op_type == "ZipMap" else "")
                raise InterpreterError(f"{where}: the ONNX-ML operator {node.op_type} (domain {ML_DOMAIN!r}) is not "
                                       f"supported{hint}; of that domain only {', '.join(sorted(ML_OPERATORS))} run")
            if node.domain not in (*DOMAINS, ML_DOMAIN):
                raise InterpreterError(f"{where} is in the custom domain {node.domain!r}; only the standard ONNX "
                                       f"domain is run (and {', '.join(sorted(ML_OPERATORS))} of {ML_DOMAIN!r})")
            if node.op_type not in SUPPORTED or (node.domain == ML_DOMAIN) != (node.op_type in ML_OPERATORS):
                raise InterpreterError(f"{where}: operator {node.op_type} is not supported; supported operators: "
                                       f"{', '.join(sorted(SUPPORTED))}")
            for attribute in node.attribute:
                if attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    raise InterpreterError(f"{where} holds a sub-graph; sub-graphs are not run")
            computed = _OUTPUTS.get(node.op_type)
            extra = [name for name in node.output[computed or len(node.output):] if name]
            if computed is not None and extra:
                raise InterpreterError(f"{where}: its optional output(s) {extra} are not computed; only its first "
                                       f"{computed} output(s)")
        for opset in m.opset_import:  # a domain imported but used by no node (skl2onnx's ai.onnx.ml) is ignored
            if opset.domain in DOMAINS and opset.version < MIN_OPSET:
                self._check_old_opset(opset.version)

    def _lay_out_weights(self) -> None:
        """The constant (in, out) weights of MatMul and Gemm held as views of their (out, in) C-ordered transposes,
        the layout the ops' ``linear`` takes (:meth:`weight`): each weight is held once, not also as a transposed
        copy. A weight a Gemm also reads with transB=1 keeps its own layout."""
        wanted, kept = set(), set()
        for node in self.model.graph.node:
            if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1 and node.input[1] in self.constants:
                transposed = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
                (kept if transposed else wanted).add(node.input[1])
        for name in wanted - kept:
            w = self.constants[name]
            if w.ndim == 2 and w.dtype == F32 and w.flags.c_contiguous:
                self.constants[name] = np.ascontiguousarray(w.T).T

    def _check_old_opset(self, version: int) -> None:
        """A graph of an opset below :data:`MIN_OPSET` is read as written only when each of its standard operators is
        defined there as at MIN_OPSET (exporters such as skl2onnx write the lowest opset their operators need): the
        interpreter implements MIN_OPSET's definitions and later ones."""
        for node in self.model.graph.node:
            if node.domain not in DOMAINS:
                continue
            try:
                since = onnx.defs.get_schema(node.op_type, MIN_OPSET, "").since_version
            except onnx.defs.SchemaError:
                continue  # not an operator of opset MIN_OPSET: every node was checked against SUPPORTED above
            if since > version:
                raise InterpreterError(
                    f"{self.source} has opset {version}, where node {node.name or '(unnamed)'!r} ({node.op_type}) is "
                    f"defined otherwise than at opset {MIN_OPSET} ({node.op_type}-{since}); opset {MIN_OPSET} or "
                    "later is supported, or an older one whose operators are all defined as at "
                    f"{MIN_OPSET} (convert it with onnx.version_converter)")

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

    def _check_external_data(self, base_dir: Path | None) -> str | None:
        """The resolved folder of the graph's external data (None when it has none), each tensor's file checked:
        inside that folder, present, and of the tensor's size at its offset."""
        external = [t for t in self.model.graph.initializer if external_data_helper.uses_external_data(t)]
        if not external:
            return None
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
            info = external_data_helper.ExternalDataInfo(tensor)
            offset, size = int(info.offset or 0), target.stat().st_size
            length = int(info.length) if info.length else size - offset
            expected = _tensor_bytes(tensor)
            if offset < 0 or offset + length > size or (expected is not None and length != expected):
                raise InterpreterError(
                    f"tensor {tensor.name!r}: external data {location!r} does not match: offset {offset} and length "
                    f"{length} in a file of {size} bytes, for a tensor of "
                    f"{'unknown size' if expected is None else f'{expected} bytes'}")
            if expected is None:
                raise InterpreterError(f"tensor {tensor.name!r}: external data of a type of no fixed size")
        return str(root)

    def serialized(self) -> bytes:
        """The graph as one serialised ModelProto, its weights inline (from :attr:`constants`, where reading the
        graph released them from :attr:`model`)."""
        if not self._released:
            return self.model.SerializeToString()
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        for tensor in model.graph.initializer:
            if tensor.name in self._released:
                tensor.CopyFrom(numpy_helper.from_array(np.asarray(self.constants[tensor.name]), tensor.name))
        return model.SerializeToString()

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
                if self._replays(node, args, constant):
                    values.update(zip(node.output, _replay(node, args, attrs, constant, self)))
                else:
                    values.update(zip(node.output, _RUN[node.op_type](node, args, attrs, ops, constant, self)))
            except (ValueError, IndexError, TypeError, KeyError, ArithmeticError) as exc:  # named, not a traceback
                if isinstance(exc, GraphError):  # the graph being recorded cannot follow a step: its own error
                    raise
                if isinstance(exc, InterpreterError) and "node " in str(exc):
                    error = exc
                elif isinstance(exc, InterpreterError):
                    error = type(exc)(f"node {node.name!r} ({node.op_type}): {exc}")
                else:  # numpy's own failure on these operands: their shapes or values do not fit the node
                    shapes = ", ".join(str(np.shape(a)) for a in args if a is not None)
                    error = ValuesError(f"node {node.name!r} ({node.op_type}) on inputs of shapes {shapes}: {exc}")
                error.node, error.values = node, values
                raise error from None
            if node.op_type in _EXACT and all(name in constant for name in node.input if name) and not (
                    node.op_type == "Gather" and values[node.input[0]].dtype == F32):  # an embedding is an op
                constant.update(node.output)
        return {name: values[name] for name in self.outputs}

    def _replays(self, node: onnx.NodeProto, args: list, constant: set) -> bool:
        """Whether ``node`` is an exact step on values being recorded into a graph (a precision graph written from
        this interpreter): one that calls no op of the contract, written into that graph as it is."""
        if not any(isinstance(a, GraphTensor) for a in args):
            return False
        if node.op_type in ("Identity", "Cast"):
            return not (self.is_input(node.input[0]) and value_of(args[0]).dtype.kind == "f")
        if node.op_type == "Gather":
            return not (node.input[0] in constant and value_of(args[0]).dtype == F32)
        if node.op_type in _EXACT:
            return True
        return node.op_type in _INTEGER_PATHS and _integers(*(value_of(a) for a in args if a is not None))

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

    def attribute_array(self, node: onnx.NodeProto, key: str, build) -> np.ndarray:
        """The array ``build()`` makes of ``node``'s attribute ``key``, made once: the same object on every run, as
        backends cache a weight's device form by the array."""
        name = f"{node.name}/{key}"
        if name not in self._built:
            self._built[name] = build()
        return self._built[name]

    def weight(self, value_name: str, matrix: np.ndarray) -> np.ndarray:
        """The (out, in) weight of a MatMul's constant (in, out) operand, laid out once (as a checkpoint holds it:
        backends cache a weight's device form by the array)."""
        cached = self._weights.get(value_name)
        if cached is None or cached[0] is not matrix:
            weight = np.asarray(matrix).T
            cached = self._weights[value_name] = (matrix, weight if weight.flags.c_contiguous
                                                  else np.ascontiguousarray(weight))
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
        with np.errstate(invalid="ignore"):  # a float out of an integer's range (T5's log(0) = -inf) casts as in C,
            return [x.astype(dtype)]         # as onnxruntime casts it: numpy's warning says nothing more
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
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    a = a.T if attrs.get("transA", 0) else a
    name = _layer(node.name)
    if node.input[1] in constant:
        weight = b if attrs.get("transB", 0) else interp.weight(node.input[1], b)  # (out, in)
        y = ops.linear(a, weight, None, name=name)
    else:
        y = ops.matmul(a, b.T if attrs.get("transB", 0) else b, name=name)
    if alpha != 1.0:
        y = ops.mul(y, np.float32(alpha), name=f"{name}/alpha")
    if c is not None and beta != 1.0:
        c = (np.asarray(c, F32) * np.float32(beta) if node.input[2] in constant
             else ops.mul(c, np.float32(beta), name=f"{name}/beta"))
    return [y if c is None or beta == 0.0 else ops.add(y, c, name=f"{name}/bias")]


def _conv(node, args, attrs, ops, constant, interp):
    x, w, b = (args + [None])[:3]
    spatial = np.ndim(w) - 2
    if spatial not in (1, 2, 3) or np.ndim(x) != np.ndim(w):
        raise InterpreterError(f"node {node.name!r}: Conv of {spatial} spatial dimension(s) on a tensor of rank "
                               f"{np.ndim(x)}; 1-D, 2-D and 3-D Conv are supported")
    strides, dilations = _ints(attrs, "strides", spatial, 1), _ints(attrs, "dilations", spatial, 1)
    begin, end = _pads(node, attrs, np.shape(x)[2:], np.shape(w)[2:], strides, dilations)
    if begin != end:  # uneven padding: zeros added exactly, then a convolution without padding
        x, begin = _pad_exact(x, begin, end, 0.0), [0] * spatial
    if spatial == 3:
        return [_conv3d(node, x, w, b, strides, dilations, begin, int(attrs.get("group", 1)), ops)]
    if spatial == 1:  # a 1-D convolution is a 2-D one of height 1
        x, w = x[:, :, None, :], w[:, :, None, :]
        strides, dilations, begin = (1, *strides), (1, *dilations), [0, *begin]
    y = ops.conv2d(x, w, b, stride=tuple(strides), padding=tuple(begin), dilation=tuple(dilations),
                   groups=int(attrs.get("group", 1)), name=_layer(node.name))
    return [y[:, :, 0, :] if spatial == 1 else y]


def _conv3d(node, x, w, b, strides, dilations, pads, groups, ops):
    """A 3-D convolution (NCDHW) as one 2-D convolution per output depth plane: the input planes its kernel reaches,
    stacked as channels (channel c, tap k at c * kd + k, so that each group's channels stay together), convolved with
    the weight laid out alike (O, C/groups * kd, kh, kw). Each output sums all of its window's products in one matrix
    op, as the 2-D convolution does; the depth padding is added exactly (zeros)."""
    if pads[0]:
        x = _pad_exact(x, [pads[0], 0, 0], [pads[0], 0, 0], 0.0)
    channels, depth = np.shape(x)[1], np.shape(x)[2]
    out_channels, per_group, kd, kh, kw = (int(d) for d in np.shape(w))
    if channels != per_group * groups or out_channels % groups:
        raise InterpreterError(f"node {node.name!r}: Conv input of {channels} channels, weight {np.shape(w)} with "
                               f"group={groups}")
    stride, dilation = strides[0], dilations[0]
    span = dilation * (kd - 1) + 1
    planes = (int(depth) - span) // stride + 1
    if planes < 1:
        raise InterpreterError(f"node {node.name!r}: Conv of depth {depth} (padded) with a kernel spanning {span}")
    _budget(f"node {node.name!r} (Conv, input planes stacked per output plane)",
            [channels * kd, *np.shape(x)[3:]], np.float32)
    weight = np.reshape(w, (out_channels, per_group * kd, kh, kw))
    out = []
    for plane in range(planes):
        start = plane * stride
        slab = x[:, :, start: start + span: dilation]  # (N, C, kd, H, W)
        slab = slab.reshape((slab.shape[0], channels * kd, *slab.shape[3:]))
        y = ops.conv2d(slab, weight, b, stride=tuple(strides[1:]), padding=tuple(pads[1:]),
                       dilation=tuple(dilations[1:]), groups=groups, name=_layer(node.name))
        out.append(y[:, :, None])
    return out[0] if planes == 1 else np.concatenate(out, axis=2)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ints(attrs, key, count, default) -> list[int]:
    value = [int(v) for v in attrs.get(key, [default] * count)]
    if len(value) != count:
        raise InterpreterError(f"attribute {key} {value} has {len(value)} values for {count} spatial dimension(s)")
    return value


def _pads(node, attrs, sizes, kernel, strides, dilations) -> tuple[list[int], list[int]]:
    """(begin, end) pads of a Conv or pooling node over spatial ``sizes``: ``pads``, or ``auto_pad`` resolved as ONNX
    resolves it (SAME_UPPER puts the odd pad at the end, SAME_LOWER at the beginning, VALID none)."""
    spatial = len(sizes)
    auto = _text(attrs.get("auto_pad", "NOTSET"))
    if auto == "NOTSET":
        pads = _ints(attrs, "pads", 2 * spatial, 0)
        return pads[:spatial], pads[spatial:]
    if auto == "VALID":
        return [0] * spatial, [0] * spatial
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise InterpreterError(f"node {node.name!r}: auto_pad {auto!r} is not one of NOTSET, VALID, SAME_UPPER, "
                               "SAME_LOWER")
    begin, end = [], []
    for n, k, s, d in zip(sizes, kernel, strides, dilations):
        total = max((-(-int(n) // s) - 1) * s + (int(k) - 1) * d + 1 - int(n), 0)
        small, large = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else large)
        end.append(large if auto == "SAME_UPPER" else small)
    return begin, end


def _pad_exact(x, begin, end, value):
    """``x`` (N, C, spatial...) with ``value`` added before and after its spatial axes (an exact step)."""
    return np.pad(x, [(0, 0), (0, 0)] + list(zip(begin, end)), constant_values=value)


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
            raise ValuesError(f"node {node.name!r}: integer Div by zero")
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
    axis = int(attrs.get("axis", -1)) % np.ndim(x)
    beta = np.zeros_like(gamma) if beta is None else beta
    eps = float(attrs.get("epsilon", 1e-5))
    name = _layer(node.name)
    if axis == np.ndim(x) - 1 and np.ndim(gamma) <= 1 and np.ndim(beta) <= 1:
        y = ops.layer_norm(x, gamma, beta, eps=eps, name=name)
    else:  # over several trailing axes: the same statistics over them flattened into one
        trailing = tuple(np.shape(x)[axis:])
        flat = (int(np.prod(trailing)),)
        y = ops.layer_norm(np.reshape(x, (*np.shape(x)[:axis], -1)), np.broadcast_to(gamma, trailing).reshape(flat),
                           np.broadcast_to(beta, trailing).reshape(flat), eps=eps, name=name)
        y = np.reshape(y, np.shape(x))
    if not any(node.output[1:]):
        return [y]
    # the optional Mean and InvStdDev outputs, as ops of their own
    axes = tuple(range(axis, np.ndim(x)))
    mean = ops.mean(x, axis=axes, keepdims=True, name=f"{name}/mean")
    centred = ops.sub(x, mean, name=f"{name}/centred")
    var = ops.mean(ops.mul(centred, centred, name=f"{name}/square"), axis=axes, keepdims=True, name=f"{name}/variance")
    inv = ops.reciprocal(ops.sqrt(ops.add(var, np.float32(eps), name=f"{name}/epsilon"), name=f"{name}/std"),
                         name=f"{name}/inv_std")
    return [y, mean, inv]


def _batch_norm(node, args, attrs, ops, constant, interp):
    x, gamma, beta, mean, var = args[:5]
    return [ops.batch_norm(x, mean, var, gamma, beta, eps=float(attrs.get("epsilon", 1e-5)), axis=1,
                           name=_layer(node.name))]


def _reduce_mean(node, args, attrs, ops, constant, interp):
    x = args[0]
    axes = args[1] if len(args) > 1 and args[1] is not None else attrs.get("axes")
    axes = tuple(range(np.ndim(x))) if axes is None or len(axes) == 0 else tuple(int(a) for a in np.ravel(axes))
    return [ops.mean(x, axis=axes, keepdims=bool(attrs.get("keepdims", 1)), name=_layer(node.name))]


def _reduce_axes(node, args, attrs):
    x = args[0]
    axes = args[1] if len(args) > 1 and args[1] is not None else attrs.get("axes")
    if axes is None or len(axes) == 0:
        if int(attrs.get("noop_with_empty_axes", 0)):
            return None
        return tuple(range(np.ndim(x)))
    return tuple(int(a) % max(np.ndim(x), 1) for a in np.ravel(axes))


def _reduce_sum(node, args, attrs, ops, constant, interp):
    axes, keepdims = _reduce_axes(node, args, attrs), bool(attrs.get("keepdims", 1))
    if axes is None:
        return [args[0]]
    if _integers(args[0]):
        return [np.sum(args[0], axis=axes, keepdims=keepdims, dtype=_array(args[0]).dtype)]
    return [ops.sum(args[0], axis=axes, keepdims=keepdims, name=_layer(node.name))]


def _reduce_select(fn, largest):
    """ReduceMax / ReduceMin: a value of the input is selected, exactly (over an empty axis, the identity: the
    lowest value of the type for a maximum, the highest for a minimum)."""
    def run(node, args, attrs, ops, constant, interp):
        x = np.asarray(args[0])
        axes = _reduce_axes(node, args, attrs)
        if axes is None:
            return [x]
        if x.dtype == np.bool_:
            identity = not largest
        elif x.dtype.kind == "f":
            identity = -np.inf if largest else np.inf
        else:
            identity = np.iinfo(x.dtype).min if largest else np.iinfo(x.dtype).max
        return [fn(x, axis=axes, keepdims=bool(attrs.get("keepdims", 1)), initial=identity)]
    return run


def _arg_select(largest):
    """ArgMax / ArgMin: the index of the largest (smallest) value along an axis, the first (``select_last_index``:
    the last) of equal ones; a selection, exact."""
    def run(node, args, attrs, ops, constant, interp):
        x = np.asarray(args[0])
        axis = int(attrs.get("axis", 0)) % max(x.ndim, 1)
        if x.shape[axis] == 0:
            raise ValuesError(f"node {node.name!r}: {node.op_type} over an empty axis")
        fn = np.argmax if largest else np.argmin
        if int(attrs.get("select_last_index", 0)):
            y = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            y = fn(x, axis=axis)
        y = np.asarray(y, np.int64)
        return [np.expand_dims(y, axis) if int(attrs.get("keepdims", 1)) else y]
    return run


def _scaler(node, args, attrs, ops, constant, interp):
    """ONNX-ML Scaler (scikit-learn's StandardScaler as skl2onnx writes it): (x - offset) * scale over the last axis,
    a ``sub`` and a ``mul`` of the ops."""
    x = args[0]
    if _integers(x):
        raise InterpreterError(f"node {node.name!r}: Scaler of {_array(x).dtype} is not supported (float32 only)")
    features = np.shape(x)[-1] if np.ndim(x) else 1
    operands = []
    for key, default in (("offset", 0.0), ("scale", 1.0)):
        value = np.asarray(attrs.get(key, [default]), F32)
        if value.size not in (1, features):
            raise InterpreterError(f"node {node.name!r}: Scaler {key} of {value.size} values for {features} features")
        operands.append(value)
    name = _layer(node.name)
    return [ops.mul(ops.sub(x, operands[0], name=f"{name}/offset"), operands[1], name=name)]


def _array_feature_extractor(node, args, attrs, ops, constant, interp):
    """ONNX-ML ArrayFeatureExtractor: the elements of the last axis at the (flattened) indices, a rank-1 input's as
    one row (as onnxruntime defines it; skl2onnx maps a classifier's class index to its label with it); exact."""
    x, indices = _array(args[0]), np.asarray(args[1]).reshape(-1)
    if indices.dtype.kind not in "iu":
        raise InterpreterError(f"node {node.name!r}: ArrayFeatureExtractor indices of {indices.dtype}; integers "
                               "expected")
    n = x.shape[-1] if x.ndim else 0
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        raise ValuesError(f"node {node.name!r}: ArrayFeatureExtractor indices outside [0, {n})")
    y = np.take(x, indices.astype(np.int64), axis=-1)
    return [y[None] if x.ndim == 1 else y]


def _exact_step(interp, op_type: str, args: list, name: str, constant: set, **attributes):
    """A value-moving step an operator is made of (a classifier's label: ArgMax, then a Gather of the class labels),
    run in numpy, or, on values being recorded into a graph, written there as a standard node of its own."""
    node = onnx.helper.make_node(op_type, [f"{name}/input{i}" for i in range(len(args))], [f"{name}/output"],
                                 name=name, **attributes)
    attrs = _attrs(node)
    if interp._replays(node, args, constant):
        return _replay(node, args, attrs, constant, interp)[0]
    return _RUN[op_type](node, args, attrs, _FP32_OPS, constant, interp)[0]


def _ml_matrix(node, args, attrs, interp, what: str):
    """The (rows, features) weight and the intercepts of an ONNX-ML linear model (LinearClassifier, LinearRegressor)
    on the (N, features) float input, as the ``linear`` op takes them."""
    x = args[0]
    if _integers(x) or np.ndim(x) != 2:
        raise InterpreterError(f"node {node.name!r}: {node.op_type} of {_array(x).dtype} of rank {np.ndim(x)}; a "
                               "float32 (N, features) input is supported")
    features = int(np.shape(x)[1])
    count = len(attrs.get("coefficients", []))
    if not count or count % features:
        raise InterpreterError(f"node {node.name!r}: {node.op_type} has {count} coefficients for {features} features")
    weight = interp.attribute_array(node, "coefficients",
                                    lambda: np.asarray(attrs["coefficients"], F32).reshape(-1, features))
    rows = weight.shape[0]
    intercepts = interp.attribute_array(node, "intercepts", lambda: np.asarray(attrs.get("intercepts", []), F32))
    if intercepts.size not in (0, 1, rows):
        raise InterpreterError(f"node {node.name!r}: {node.op_type} has {intercepts.size} intercepts for {rows} {what}")
    transform = _text(attrs.get("post_transform", "NONE"))
    return x, weight, intercepts, transform


def _linear_regressor(node, args, attrs, ops, constant, interp):
    """ONNX-ML LinearRegressor (scikit-learn's linear regressions as skl2onnx writes them): a ``linear`` op, then
    an ``add`` of the intercepts."""
    x, weight, intercepts, transform = _ml_matrix(node, args, attrs, interp, "targets")
    if weight.shape[0] != int(attrs.get("targets", 1)) or transform != "NONE":
        raise InterpreterError(f"node {node.name!r}: LinearRegressor with {weight.shape[0]} coefficient rows for "
                               f"targets={attrs.get('targets', 1)} and post_transform {transform!r}; post_transform "
                               "NONE is supported")
    name = _layer(node.name)
    y = ops.linear(x, weight, None, name=name)
    return [ops.add(y, intercepts, name=f"{name}/bias") if intercepts.size else y]


def _linear_classifier(node, args, attrs, ops, constant, interp):
    """ONNX-ML LinearClassifier (logistic regression, linear SVMs) as onnxruntime defines it: the class scores as a
    ``linear`` op and an ``add`` of the intercepts, then the post transform (``sigmoid`` for LOGISTIC, ``softmax``
    for SOFTMAX), the label the class of the largest score (an exact ArgMax and Gather). A binary model's one score s
    gives the pair (1 - p, p), p = sigmoid(s) for LOGISTIC and s otherwise (a ``sub``), and the second class when
    s > 0 (an exact comparison)."""
    x, weight, intercepts, transform = _ml_matrix(node, args, attrs, interp, "classes")
    if "classlabels_strings" in attrs:
        raise InterpreterError(f"node {node.name!r}: LinearClassifier with string class labels is not supported "
                               "(integer labels are)")
    labels = attrs.get("classlabels_ints")
    classes = len(labels) if labels else weight.shape[0]
    binary = weight.shape[0] == 1 and classes == 2
    if (weight.shape[0] != classes and not binary) or classes < 2:
        raise InterpreterError(f"node {node.name!r}: LinearClassifier of {weight.shape[0]} score rows for {classes} "
                               "classes is not supported")
    if transform not in ("NONE", "LOGISTIC", "SOFTMAX"):
        raise InterpreterError(f"node {node.name!r}: LinearClassifier post_transform {transform!r} is not supported "
                               "(NONE, LOGISTIC and SOFTMAX are)")
    name = _layer(node.name)
    scores = ops.linear(x, weight, None, name=name)
    if intercepts.size:
        scores = ops.add(scores, intercepts, name=f"{name}/bias")
    table = interp.attribute_array(node, "classlabels_ints",
                                   lambda: np.asarray(labels if labels else range(classes), np.int64))
    if binary:
        p = ops.sigmoid(scores, name=f"{name}/logistic") if transform == "LOGISTIC" else scores
        positive = _exact_step(interp, "Greater", [scores, np.zeros(1, F32)], f"{node.name}/positive", constant)
        best = _exact_step(interp, "Cast", [positive], f"{node.name}/class", constant, to=onnx.TensorProto.INT64)
        scores = np.concatenate([ops.sub(np.ones(1, F32), p, name=f"{name}/complement"), p], axis=1)
    else:
        if transform == "LOGISTIC":
            scores = ops.sigmoid(scores, name=f"{name}/logistic")
        elif transform == "SOFTMAX":
            scores = ops.softmax(scores, axis=-1, name=f"{name}/softmax")
        best = _exact_step(interp, "ArgMax", [scores], f"{node.name}/ArgMax", constant, axis=1, keepdims=1)
    label = _exact_step(interp, "Gather", [table, best], f"{node.name}/label", constant, axis=0)
    return [_exact_step(interp, "Reshape", [label, np.array([-1], np.int64)], f"{node.name}/labels", constant),
            scores]


def _normalizer(node, args, attrs, ops, constant, interp):
    """ONNX-ML Normalizer as onnxruntime defines it: each row divided by its L1 norm, its L2 norm or its largest
    value (MAX), a row whose norm is 0 left as it is; as the ops ``abs``, ``mul``, ``sum``, ``sqrt`` and ``div``,
    the largest value and the zero test exact."""
    x = args[0]
    norm = _text(attrs.get("norm", "MAX"))
    if _integers(x) or np.ndim(x) != 2:
        raise InterpreterError(f"node {node.name!r}: Normalizer of {_array(x).dtype} of rank {np.ndim(x)}; a float32 "
                               "(N, features) input is supported")
    name = _layer(node.name)
    if norm == "L1":
        total = ops.sum(ops.abs(x, name=f"{name}/abs"), axis=(1,), keepdims=True, name=f"{name}/norm")
    elif norm == "L2":
        total = ops.sqrt(ops.sum(ops.mul(x, x, name=f"{name}/square"), axis=(1,), keepdims=True, name=f"{name}/sum"),
                         name=f"{name}/norm")
    elif norm == "MAX":
        total = _exact_step(interp, "ReduceMax", [x, np.array([1], np.int64)], f"{node.name}/norm", constant,
                            keepdims=1)
    else:
        raise InterpreterError(f"node {node.name!r}: Normalizer norm {norm!r} is not one of MAX, L1, L2")
    zero = _exact_step(interp, "Equal", [total, np.zeros(1, F32)], f"{node.name}/zero", constant)
    divisor = _exact_step(interp, "Where", [zero, np.ones(1, F32), total], f"{node.name}/divisor", constant)
    return [ops.div(x, divisor, name=name)]


def _global_average_pool(node, args, attrs, ops, constant, interp):
    return [ops.mean(args[0], axis=tuple(range(2, np.ndim(args[0]))), keepdims=True, name=_layer(node.name))]


def _pool_geometry(node, attrs, x):
    """(kernel, strides, dilations, begin pads, end pads, extra) of a 1-D, 2-D or 3-D pooling node: ``extra`` the
    positions ``ceil_mode`` adds beyond the end pads (which no window average counts)."""
    kernel = [int(k) for k in attrs["kernel_shape"]]
    spatial = len(kernel)
    if spatial not in (1, 2, 3) or np.ndim(x) != spatial + 2:
        raise InterpreterError(f"node {node.name!r}: {node.op_type} of {spatial} spatial dimension(s) on a tensor of "
                               f"rank {np.ndim(x)}; 1-D, 2-D and 3-D pooling are supported")
    dilations = _ints(attrs, "dilations", spatial, 1)
    if any(d < 1 for d in dilations) or any(k < 1 for k in kernel):
        raise InterpreterError(f"node {node.name!r}: {node.op_type} with kernel {kernel} and dilations {dilations}")
    if int(attrs.get("storage_order", 0)):
        raise InterpreterError(f"node {node.name!r}: MaxPool with storage_order=1 is not supported")
    strides = _ints(attrs, "strides", spatial, 1)
    sizes = np.shape(x)[2:]
    begin, end = _pads(node, attrs, sizes, kernel, strides, dilations)
    extra = [0] * spatial
    if int(attrs.get("ceil_mode", 0)):
        for i, (n, k, s, d) in enumerate(zip(sizes, kernel, strides, dilations)):
            reach = (k - 1) * d + 1  # the positions a window spans
            span = n + begin[i] + end[i] - reach
            out = -(-span // s) + 1
            if (out - 1) * s >= n + begin[i]:  # a last window starting in the end padding is dropped
                out -= 1
            extra[i] = max((out - 1) * s + reach - (n + begin[i] + end[i]), 0)
    return kernel, strides, dilations, begin, end, extra


def _as_2d(x, spatial):
    return x[:, :, None, :] if spatial == 1 else x


def _depth_planes(x, kernel, strides):
    """For 3-D pooling (NCDHW): per output depth plane, the input planes its windows reach with the depth interleaved
    into the width, (N, C, H, W * kd) with element (h, w * kd + k) from plane k, and the 2-D kernel and stride that
    then cover each 3-D window, (kh, kw * kd) at (sh, sw * kd): one 2-D pooling op per output plane sees exactly the
    elements of its 3-D windows."""
    kd, kh, kw = kernel
    sd, sh, sw = strides
    planes = (int(np.shape(x)[2]) - kd) // sd + 1
    slabs = []
    for plane in range(planes):
        slab = x[:, :, plane * sd: plane * sd + kd].transpose(0, 1, 3, 4, 2)  # (N, C, H, W, kd)
        slabs.append(slab.reshape((slab.shape[0], slab.shape[1], slab.shape[2], slab.shape[3] * kd)))
    return slabs, (kh, kw * kd), (sh, sw * kd)


def _window_taps(node, x, kernel, strides, dilations):
    """For dilated pooling: the elements of each window side by side, (N, C, P, Q * taps) with the output positions
    (P, Q) (the leading output axes folded into P) and a window's taps along its row, and the 2-D kernel and stride
    (1, taps) that cover one window: one 2-D pooling op sees exactly each dilated window's elements. Each tap is a
    strided slice (exact)."""
    sizes = [int(n) for n in np.shape(x)[2:]]
    outs = [(n - (k - 1) * d - 1) // s + 1 for n, k, s, d in zip(sizes, kernel, strides, dilations)]
    if min(outs) < 1:
        raise ValuesError(f"node {node.name!r}: {node.op_type} windows of {kernel} dilated {dilations} do not fit "
                          f"the (padded) input of {tuple(sizes)}")
    taps = int(np.prod(kernel))
    _budget(f"node {node.name!r} ({node.op_type}, the windows' elements)", [np.shape(x)[1], *outs, taps], F32)
    columns = []
    for offsets in np.ndindex(*kernel):
        index = tuple(slice(o * d, o * d + (m - 1) * s + 1, s)
                      for o, d, m, s in zip(offsets, dilations, outs, strides))
        columns.append(x[(slice(None), slice(None), *index)][..., None])
    stacked = columns[0] if taps == 1 else np.concatenate(columns, axis=-1)  # (N, C, *outs, taps)
    rows = int(np.prod(outs[:-1], dtype=np.int64))
    return (stacked.reshape((stacked.shape[0], stacked.shape[1], rows, outs[-1] * taps)), (1, taps), (1, taps),
            outs)


def _stack_planes(planes):
    out = [y[:, :, None] for y in planes]
    return out[0] if len(out) == 1 else np.concatenate(out, axis=2)


def _max_pool(node, args, attrs, ops, constant, interp):
    x = args[0]
    kernel, strides, dilations, begin, end, extra = _pool_geometry(node, attrs, x)
    end = [e + x_ for e, x_ in zip(end, extra)]
    if any(begin) or any(end):  # -inf added exactly: a window's maximum is that of its elements
        x = _pad_exact(x, begin, end, -np.inf)
    spatial = len(kernel)
    if any(d != 1 for d in dilations):
        flat, k2, s2, outs = _window_taps(node, x, kernel, strides, dilations)
        y = ops.max_pool2d(flat, kernel=k2, stride=s2, padding=0, name=_layer(node.name))
        return [y.reshape((y.shape[0], y.shape[1], *outs))]
    if spatial == 3:
        slabs, k2, s2 = _depth_planes(x, kernel, strides)
        return [_stack_planes([ops.max_pool2d(slab, kernel=k2, stride=s2, padding=0, name=_layer(node.name))
                               for slab in slabs])]
    y = ops.max_pool2d(_as_2d(x, spatial), kernel=tuple([1] * (2 - spatial) + kernel),
                       stride=tuple([1] * (2 - spatial) + strides), padding=0, name=_layer(node.name))
    return [y[:, :, 0, :] if spatial == 1 else y]


def _average_pool(node, args, attrs, ops, constant, interp):
    x = args[0]
    kernel, strides, dilations, begin, end, extra = _pool_geometry(node, attrs, x)
    spatial = len(kernel)
    # the count of each window: its input elements, with the stated pads when count_include_pad (never the extra)
    counted = np.ones((1, 1, *np.shape(x)[2:]), F32)
    if int(attrs.get("count_include_pad", 0)):
        counted = np.pad(counted, [(0, 0), (0, 0)] + list(zip(begin, end)), constant_values=1.0)
        counted = np.pad(counted, [(0, 0), (0, 0)] + [(0, e) for e in extra])
    else:
        counted = np.pad(counted, [(0, 0), (0, 0)] + [(b, e + x_) for b, e, x_ in zip(begin, end, extra)])
    end = [e + x_ for e, x_ in zip(end, extra)]
    if any(begin) or any(end):
        x = _pad_exact(x, begin, end, 0.0)
    if any(d != 1 for d in dilations):
        flat, k2, s2, outs = _window_taps(node, x, kernel, strides, dilations)
        counts, _, _, _ = _window_taps(node, counted, kernel, strides, dilations)
        y = ops.avg_pool2d(flat, window_sums(counts, k2, s2)[0, 0], kernel=k2, stride=s2, name=_layer(node.name))
        return [y.reshape((y.shape[0], y.shape[1], *outs))]
    if spatial == 3:
        slabs, k2, s2 = _depth_planes(x, kernel, strides)
        counts, _, _ = _depth_planes(counted, kernel, strides)
        return [_stack_planes([ops.avg_pool2d(slab, window_sums(count, k2, s2)[0, 0], kernel=k2, stride=s2,
                                              name=_layer(node.name)) for slab, count in zip(slabs, counts)])]
    k2, s2 = tuple([1] * (2 - spatial) + kernel), tuple([1] * (2 - spatial) + strides)
    divisor = window_sums(_as_2d(counted, spatial), k2, s2)[0, 0]
    y = ops.avg_pool2d(_as_2d(x, spatial), divisor, kernel=k2, stride=s2, name=_layer(node.name))
    return [y[:, :, 0, :] if spatial == 1 else y]


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
    axis = int(attrs.get("axis", 1))
    axis = axis + np.ndim(x) if axis < 0 else axis
    return [np.reshape(x, (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))))]


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
    _budget(f"node {node.name!r} (ConstantOfShape)", [int(d) for d in args[0]], value.dtype)
    return [np.full(tuple(int(d) for d in args[0]), value[0], value.dtype)]


def _erf(node, args, attrs, ops, constant, interp):
    raise InterpreterError(f"node {node.name!r}: Erf is run only as part of the exact GELU sub-graph "
                           "x * 0.5 * (1 + Erf(x / sqrt(2))) (the ops contract has no erf of its own)")


def _range(node, args, attrs, ops, constant, interp):
    start, limit, delta = (np.asarray(a).reshape(()) for a in args)
    if delta == 0:
        raise ValuesError(f"node {node.name!r}: Range with a delta of 0")
    count = max(int(np.ceil((limit - start) / delta)), 0)  # ONNX's number of elements
    _budget(f"node {node.name!r} (Range)", [count], start.dtype)
    return [(start + delta * np.arange(count, dtype=start.dtype)).astype(start.dtype)]


def _expand(node, args, attrs, ops, constant, interp):
    x, shape = args
    shape = np.broadcast_shapes(np.shape(x), tuple(int(d) for d in shape))
    _budget(f"node {node.name!r} (Expand)", shape, _array(x).dtype)
    return [np.broadcast_to(x, shape).copy()]


def _unary_float(method, exact=None):
    """An elementwise op of one input: a float one through ``ops.<method>``, an integer one by ``exact`` in numpy."""
    def run(node, args, attrs, ops, constant, interp):
        if _integers(args[0]):
            if exact is None:
                raise InterpreterError(f"node {node.name!r}: {node.op_type} of {_array(args[0]).dtype} is not "
                                       "supported (float32 only)")
            return [exact(args[0]).astype(_array(args[0]).dtype)]
        return [getattr(ops, method)(args[0], name=_layer(node.name))]
    return run


def _variadic(method, exact):
    """Max / Min of any number of inputs, broadcast: pairwise through ``ops.<method>`` (exact in numpy for integers)."""
    def run(node, args, attrs, ops, constant, interp):
        y = args[0]
        for i, other in enumerate(args[1:], 1):
            if _integers(y, other):
                y = exact(y, other)
            else:
                y = getattr(ops, method)(y, other, name=_layer(node.name) + (f"/{i}" if len(args) > 2 else ""))
        return [y if len(args) > 1 else (np.array(y) if _integers(y) else ops.maximum(y, y, name=_layer(node.name)))]
    return run


def _clip(node, args, attrs, ops, constant, interp):
    x = args[0]
    bounds = []
    for position in (1, 2):
        bound = args[position] if len(args) > position else None
        if bound is not None and np.size(bound) != 1:
            raise InterpreterError(f"node {node.name!r}: Clip bounds must be scalars (input {position} has shape "
                                   f"{np.shape(bound)})")
        bounds.append(None if bound is None else np.asarray(bound).reshape(()))
    if _integers(x):
        low, high = bounds
        y = np.asarray(x)
        y = y if low is None else np.maximum(y, low)
        return [(y if high is None else np.minimum(y, high)).astype(np.asarray(x).dtype)]
    low, high = (None if b is None else float(b) for b in bounds)
    return [ops.clip(x, low, high, name=_layer(node.name))]


def _mod(node, args, attrs, ops, constant, interp):
    a, b = args
    fmod = int(attrs.get("fmod", 0))
    if _integers(a, b):
        a, b = np.asarray(a), np.asarray(b)
        if not np.all(b):
            raise ValuesError(f"node {node.name!r}: integer Mod by zero")
        return [(np.fmod(a, b) if fmod else np.mod(a, b)).astype(np.result_type(a, b))]
    if not fmod:
        raise InterpreterError(f"node {node.name!r}: Mod of floats needs fmod=1 (ONNX defines no other)")
    return [ops.mod(a, b, name=_layer(node.name))]


def _hard_sigmoid(node, args, attrs, ops, constant, interp):
    return [ops.hard_sigmoid(args[0], alpha=float(attrs.get("alpha", 0.2)), beta=float(attrs.get("beta", 0.5)),
                             name=_layer(node.name))]


def _cumsum(node, args, attrs, ops, constant, interp):
    x, axis = args
    if np.size(axis) != 1:
        raise InterpreterError(f"node {node.name!r}: CumSum axis must be a scalar")
    axis = int(np.asarray(axis).reshape(())) % max(np.ndim(x), 1)
    exclusive, reverse = bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0))
    if _integers(x):
        x = np.asarray(x)
        y = np.flip(x, axis) if reverse else x
        y = np.cumsum(y, axis=axis, dtype=x.dtype)
        if exclusive:
            y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)), np.take(y, range(y.shape[axis] - 1),
                                                                                    axis=axis)], axis=axis)
        return [np.ascontiguousarray(np.flip(y, axis) if reverse else y)]
    return [ops.cumsum(x, axis=axis, exclusive=exclusive, reverse=reverse, name=_layer(node.name))]


def _instance_norm(node, args, attrs, ops, constant, interp):
    x, scale, bias = args
    if np.ndim(x) < 3:
        raise InterpreterError(f"node {node.name!r}: InstanceNormalization of a tensor of rank {np.ndim(x)}; "
                               "(N, C, spatial...) expected")
    return [ops.instance_norm(x, scale, bias, eps=float(attrs.get("epsilon", 1e-5)), name=_layer(node.name))]


def _einsum(node, args, attrs, ops, constant, interp):
    """Einsum as exporters write it: a transpose of one operand, or a (batched) matrix product of two: letters in
    both operands and the output are batch axes, in both and not the output contracted, in one operand and the output
    free; it runs as one ``matmul`` (``linear`` with a constant operand and no batch axes)."""
    equation = _text(attrs["equation"]).replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    refuse = f"node {node.name!r}: Einsum {equation!r} is not supported"
    if "..." in equation or not all(t.isalpha() for t in terms) or any(len(set(t)) != len(t) for t in terms):
        raise InterpreterError(f"{refuse} (ellipses and repeated letters are not)")
    if not arrow:  # implicit output: the letters seen once, in alphabetical order
        out = "".join(sorted(c for c in set(lhs) if lhs.count(c) == 1))
    if len(terms) == 1:
        if sorted(out) != sorted(terms[0]):
            raise InterpreterError(f"{refuse} (of one operand, only a transpose is)")
        return [np.transpose(args[0], [terms[0].index(c) for c in out])]
    if len(terms) != 2 or len(args) != 2:
        raise InterpreterError(f"{refuse} (of two operands or one)")
    (sa, sb), (a, b) = terms, args
    if any(np.ndim(v) != len(t) for v, t in zip((a, b), terms)) or set(out) - set(sa + sb):
        raise InterpreterError(f"{refuse} on operands of shapes {np.shape(a)}, {np.shape(b)}")
    batch = [c for c in out if c in sa and c in sb]
    contracted = [c for c in sa if c in sb and c not in out]
    free_a, free_b = [c for c in sa if c not in sb], [c for c in sb if c not in sa]
    if any(c not in out for c in free_a + free_b):
        raise InterpreterError(f"{refuse} (a letter of one operand only is summed over)")
    size = {c: n for t, v in zip(terms, (a, b)) for c, n in zip(t, np.shape(v))}
    if any(np.shape(a)[sa.index(c)] != np.shape(b)[sb.index(c)] for c in batch + contracted):
        raise InterpreterError(f"{refuse}: operands of shapes {np.shape(a)}, {np.shape(b)} do not fit")
    dims = lambda letters: [size[c] for c in letters]  # noqa: E731
    prod = lambda letters: int(np.prod(dims(letters), dtype=np.int64))  # noqa: E731
    am = np.reshape(np.transpose(a, [sa.index(c) for c in batch + free_a + contracted]),
                    (*dims(batch), prod(free_a), prod(contracted)))
    bm = np.reshape(np.transpose(b, [sb.index(c) for c in batch + contracted + free_b]),
                    (*dims(batch), prod(contracted), prod(free_b)))
    name = _layer(node.name)
    if not batch and node.input[1] in constant:
        y = ops.linear(am, interp.weight(node.input[1] + "/" + node.name, bm), None, name=name)
    else:
        y = ops.matmul(am, bm, name=name)
    produced = batch + free_a + free_b
    return [np.transpose(np.reshape(y, dims(produced)), [produced.index(c) for c in out])]


def _gather_elements(node, args, attrs, ops, constant, interp):
    data, indices = args
    axis = int(attrs.get("axis", 0)) % np.ndim(data)
    indices = np.asarray(indices, np.int64)
    n = np.shape(data)[axis]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        raise ValuesError(f"node {node.name!r}: GatherElements indices outside [-{n}, {n})")
    return [np.take_along_axis(data, np.where(indices < 0, indices + n, indices), axis=axis)]


def _gather_nd(node, args, attrs, ops, constant, interp):
    data, indices = np.asarray(args[0]), np.asarray(args[1], np.int64)
    batch = int(attrs.get("batch_dims", 0))
    depth = indices.shape[-1]
    if batch + depth > data.ndim:
        raise InterpreterError(f"node {node.name!r}: GatherND indices of depth {depth} into data of rank {data.ndim} "
                               f"with batch_dims {batch}")
    lead = data.shape[:batch]
    bound = np.asarray(data.shape[batch: batch + depth])
    idx = np.where(indices < 0, indices + bound, indices)
    if idx.size and (np.any(idx < 0) or np.any(idx >= bound)):
        raise ValuesError(f"node {node.name!r}: GatherND indices outside the data's shape {data.shape}")
    flat_data = data.reshape((int(np.prod(lead, dtype=np.int64)), *data.shape[batch:]))
    flat_idx = idx.reshape((flat_data.shape[0], -1, depth))
    rows = [flat_data[b][tuple(flat_idx[b].T)] for b in range(flat_data.shape[0])]
    out = np.stack(rows) if rows else np.zeros((0, flat_idx.shape[1], *data.shape[batch + depth:]), data.dtype)
    return [out.reshape((*indices.shape[:-1], *data.shape[batch + depth:]))]


def _scatter_nd(node, args, attrs, ops, constant, interp):
    data, indices, updates = np.asarray(args[0]), np.asarray(args[1], np.int64), np.asarray(args[2])
    if _text(attrs.get("reduction", "none")) != "none":
        raise InterpreterError(f"node {node.name!r}: ScatterND with reduction {_text(attrs['reduction'])!r} is not "
                               "supported")
    out = data.copy()
    depth = indices.shape[-1]
    for index, update in zip(indices.reshape(-1, depth), updates.reshape((-1, *data.shape[depth:]))):
        out[tuple(index)] = update
    return [out]


def _tile(node, args, attrs, ops, constant, interp):
    x, repeats = args
    repeats = [int(r) for r in np.ravel(repeats)]
    _budget(f"node {node.name!r} (Tile)", [n * r for n, r in zip(np.shape(x), repeats)], _array(x).dtype)
    return [np.tile(x, repeats)]


def _pad(node, args, attrs, ops, constant, interp):
    x, pads = args[0], [int(p) for p in np.ravel(args[1])]
    value = args[2] if len(args) > 2 and args[2] is not None else None
    rank = np.ndim(x)
    axes = ([int(a) % rank for a in np.ravel(args[3])] if len(args) > 3 and args[3] is not None
            else list(range(rank)))
    if len(pads) != 2 * len(axes):
        raise InterpreterError(f"node {node.name!r}: Pad has {len(pads)} pads for {len(axes)} axes")
    widths = [(0, 0)] * rank
    for i, axis in enumerate(axes):
        widths[axis] = (pads[i], pads[i + len(axes)])
    mode = _text(attrs.get("mode", "constant"))
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise InterpreterError(f"node {node.name!r}: Pad mode {mode!r} is not supported")
    shape = [n + a + b for n, (a, b) in zip(np.shape(x), widths)]
    _budget(f"node {node.name!r} (Pad)", [max(d, 0) for d in shape], _array(x).dtype)
    crop = tuple(slice(max(-a, 0), n - max(-b, 0)) for n, (a, b) in zip(np.shape(x), widths))
    x = x[crop]  # negative pads remove elements
    widths = [(max(a, 0), max(b, 0)) for a, b in widths]
    if mode == "constant":
        fill = 0 if value is None else np.asarray(value).reshape(())
        return [np.pad(x, widths, mode="constant", constant_values=fill)]
    if any(n == 0 for n in np.shape(x)) and any(a or b for a, b in widths):
        raise InterpreterError(f"node {node.name!r}: Pad mode {mode!r} of an empty axis")
    return [np.pad(x, widths, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])]


def _resize_coordinates(mode: str, out_size: int, in_size: int, scale: float) -> np.ndarray:
    """The input coordinate of each output position along one axis (ONNX's coordinate_transformation_mode)."""
    o = np.arange(out_size, dtype=np.float64)
    if mode == "align_corners":  # the resized length is in_size * scale, not rounded (as ONNX defines it)
        length = in_size * scale
        return o * (in_size - 1) / (length - 1) if length != 1 else np.zeros(out_size)
    if mode == "asymmetric":
        return o / scale
    if mode == "pytorch_half_pixel" and out_size == 1:
        return np.zeros(1)
    if mode == "half_pixel_symmetric":  # centred: the output's rounded-down length spread symmetrically
        adjustment = out_size / (in_size * scale)
        return in_size / 2 * (1 - adjustment) + (o + 0.5) / scale - 0.5
    return (o + 0.5) / scale - 0.5  # half_pixel, pytorch_half_pixel


def _cubic_weights(coords: np.ndarray, size: int, a: float, exclude_outside: bool) -> np.ndarray:
    """The (out, size) matrix of ONNX's cubic interpolation along one axis: each output the weighted sum of the four
    inputs around its coordinate (Keys' kernel of ``cubic_coeff_a``), positions beyond the edges the edge input, or
    with ``exclude_outside`` weighted 0 and the other weights scaled to sum to 1."""
    base = np.floor(coords)
    t = (coords - base)[:, None]
    taps = np.abs(np.arange(-1, 3)[None, :] - t)  # distance of each of the four neighbours
    near = ((a + 2) * taps - (a + 3)) * taps * taps + 1  # |d| <= 1
    far = ((a * taps - 5 * a) * taps + 8 * a) * taps - 4 * a  # 1 < |d| < 2
    weights = np.where(taps <= 1, near, far)
    index = base.astype(np.int64)[:, None] + np.arange(-1, 3)[None, :]
    if exclude_outside:
        weights = np.where((index < 0) | (index >= size), 0.0, weights)
        weights = weights / weights.sum(axis=1, keepdims=True)
    matrix = np.zeros((len(coords), size))
    np.add.at(matrix, (np.repeat(np.arange(len(coords)), 4), np.clip(index, 0, size - 1).reshape(-1)),
              weights.reshape(-1))
    return matrix


def _linear_weights(coords: np.ndarray, size: int) -> np.ndarray:
    """The (out, size) matrix of linear interpolation along one axis (coordinates beyond the edges at the edge)."""
    c = np.clip(coords, 0, size - 1)
    low = np.floor(c).astype(np.int64)
    high = np.minimum(low + 1, size - 1)
    weight = c - low
    matrix = np.zeros((len(c), size))
    np.add.at(matrix, (np.arange(len(c)), low), 1 - weight)
    np.add.at(matrix, (np.arange(len(c)), high), weight)
    return matrix


def _resize(node, args, attrs, ops, constant, interp):
    """Resize of the spatial axes of an (N, C, H, W) or (N, C, L) tensor: ``nearest`` as an exact selection of input
    elements, ``linear`` and ``cubic`` as one ``interpolate`` op (each output a weighted sum of its two or four
    neighbours per axis, the weights of each output row and column constant matrices)."""
    x, _, scales, sizes = (list(args) + [None] * 4)[:4]
    refuse = f"node {node.name!r}: Resize"
    mode = _text(attrs.get("mode", "nearest"))
    transform = _text(attrs.get("coordinate_transformation_mode", "half_pixel"))
    if mode not in ("nearest", "linear", "cubic"):
        raise InterpreterError(f"{refuse} mode {mode!r} is not supported (nearest, linear and cubic are)")
    if transform not in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"):
        raise InterpreterError(f"{refuse} coordinate_transformation_mode {transform!r} is not supported")
    if int(attrs.get("antialias", 0)) or _text(attrs.get("keep_aspect_ratio_policy", "stretch")) != "stretch":
        raise InterpreterError(f"{refuse} with antialias or a keep_aspect_ratio_policy is not supported")
    exclude = bool(int(attrs.get("exclude_outside", 0)))
    if exclude and mode != "cubic":  # as onnxruntime: ONNX defines it for cubic (and antialiasing)
        raise InterpreterError(f"{refuse} mode {mode!r} with exclude_outside is not supported (cubic's only)")
    shape = tuple(int(d) for d in np.shape(x))
    axes = [int(a) % len(shape) for a in attrs.get("axes", range(len(shape)))]  # the axes scales or sizes are of
    if len(set(axes)) != len(axes):
        raise InterpreterError(f"{refuse} with repeated axes {list(attrs['axes'])}")
    out, factors = list(shape), [1.0] * len(shape)
    given = np.ravel(sizes) if sizes is not None and np.size(sizes) else np.ravel(scales) \
        if scales is not None and np.size(scales) else None
    if given is None:
        raise InterpreterError(f"{refuse} without scales or sizes")
    if len(given) != len(axes):
        raise ValuesError(f"{refuse}: {len(given)} scales or sizes for {len(axes)} axes")
    for axis, value in zip(axes, given):
        if sizes is not None and np.size(sizes):
            out[axis] = int(value)
            factors[axis] = out[axis] / shape[axis] if shape[axis] else 1.0
        else:
            factors[axis] = float(value)
            out[axis] = int(np.floor(shape[axis] * factors[axis]))
    if len(out) != len(shape) or len(shape) not in (3, 4) or tuple(out[:2]) != shape[:2] or min(out) < 1:
        raise ValuesError(f"{refuse} of a tensor of shape {shape} to {tuple(out)}: only the spatial axes of an "
                               "(N, C, H, W) or (N, C, L) tensor are resized")
    _budget(f"node {node.name!r} (Resize)", out, _array(x).dtype)
    coords = [_resize_coordinates(transform, o, i, f) for o, i, f in zip(out[2:], shape[2:], factors[2:])]
    if mode == "nearest":
        rounding = _text(attrs.get("nearest_mode", "round_prefer_floor"))
        pick = {"round_prefer_floor": lambda c: np.ceil(c - 0.5), "round_prefer_ceil": lambda c: np.floor(c + 0.5),
                "floor": np.floor, "ceil": np.ceil}.get(rounding)
        if pick is None:
            raise InterpreterError(f"{refuse} nearest_mode {rounding!r} is not supported")
        y = x
        for axis, (c, size) in enumerate(zip(coords, shape[2:]), 2):
            y = np.take(y, np.clip(pick(c), 0, size - 1).astype(np.int64), axis=axis)
        return [y]
    a = float(attrs.get("cubic_coeff_a", -0.75))
    matrices = [(_cubic_weights(c, size, a, exclude) if mode == "cubic" else _linear_weights(c, size)).astype(F32)
                for c, size in zip(coords, shape[2:])]
    if len(shape) == 3:
        y = ops.interpolate(x[:, :, None, :], np.ones((1, 1), F32), matrices[0], name=_layer(node.name))
        return [y[:, :, 0, :]]
    return [ops.interpolate(x, matrices[0], matrices[1], name=_layer(node.name))]


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
    "AveragePool": _average_pool, "Pad": _pad, "Tile": _tile, "CumSum": _cumsum,
    "GatherElements": _gather_elements, "GatherND": _gather_nd, "ScatterND": _scatter_nd,
    "InstanceNormalization": _instance_norm, "Einsum": _einsum,
    "Max": _variadic("maximum", np.maximum), "Min": _variadic("minimum", np.minimum),
    "Abs": _unary_float("abs", np.abs), "Neg": _unary_float("neg", np.negative), "Sign": _unary_float("sign", np.sign),
    "Ceil": _unary_float("ceil"), "Floor": _unary_float("floor"), "Exp": _unary_float("exp"),
    "Log": _unary_float("log"), "Reciprocal": _unary_float("reciprocal"), "Clip": _clip, "Mod": _mod,
    "HardSigmoid": _hard_sigmoid, "HardSwish": _unary("hard_swish"), "ReduceSum": _reduce_sum,
    "ReduceMax": _reduce_select(np.max, True), "ReduceMin": _reduce_select(np.min, False),
    "Resize": _resize, "ArgMax": _arg_select(True), "ArgMin": _arg_select(False),
    "Scaler": _scaler, "ArrayFeatureExtractor": _array_feature_extractor, "LinearClassifier": _linear_classifier,
    "LinearRegressor": _linear_regressor, "Normalizer": _normalizer,
}
# the ONNX-ML (ai.onnx.ml) operators run
ML_OPERATORS = frozenset({"Scaler", "ArrayFeatureExtractor", "LinearClassifier", "LinearRegressor", "Normalizer"})
# Operators with optional further outputs, and how many outputs the interpreter computes for each.
_OUTPUTS = {"MaxPool": 1, "LayerNormalization": 3, "BatchNormalization": 1, "LinearClassifier": 2}
SUPPORTED = frozenset(_RUN)
# Operators whose outputs are constant when their inputs are (weights laid out by shape steps stay weights).
_EXACT = frozenset({"Identity", "Cast", "Reshape", "Transpose", "Slice", "Unsqueeze", "Squeeze", "Concat", "Split",
                    "Flatten", "Shape", "Constant", "Expand", "Equal", "Not", "Where", "Gather",
                    "ConstantOfShape", "And", "Or", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "IsNaN",
                    "Range", "Pad", "Tile", "GatherElements", "GatherND", "ScatterND", "ReduceMax", "ReduceMin",
                    "ArgMax", "ArgMin", "ArrayFeatureExtractor"})


# Exact steps whose result holds the elements of their first operand, laid out anew.
_RELAYOUT = frozenset({"Identity", "Cast", "Reshape", "Squeeze", "Flatten"})
# Operators that run exactly in numpy when their operands are integers (index arithmetic), through the ops otherwise.
_INTEGER_PATHS = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Abs", "Neg", "Sign", "Clip", "Mod", "CumSum",
                            "ReduceSum"})
_FP32_OPS = Ops()


def _replay(node, args, attrs, constant, interp):
    """``node`` written into the graph being recorded as it is (its attributes and the constants it reads), its value
    on the example computed as the interpreter computes it. A result has the batch axis first where an operand has
    one and the result has the example's batch size first (an index or shape vector has none)."""
    floats = {np.asarray(value_of(a)).dtype for a in args if a is not None and np.asarray(value_of(a)).dtype.kind == "f"}
    if len(floats) > 1:  # float16 values of the precision graph beside float32 ones (a mask's constant): in float32
        args = [a.astype(F32) if isinstance(a, GraphTensor) and a.dtype.kind == "f" else a for a in args]
    example = [value_of(a) if a is not None else None for a in args]
    results = _RUN[node.op_type](node, example, attrs, _FP32_OPS, constant, interp)
    tensors = [a for a in args if isinstance(a, GraphTensor)]
    graph, source = tensors[0].graph, tensors[0].source
    batch = next((a.value.shape[a.batch_axis] for a in tensors if a.batch_axis is not None), None)
    label = graph.node_name(f"{source}/{node.op_type}")
    names = []
    for name, a in zip(node.input, args):
        if a is None:
            names.append("")
        else:
            names.append(a.name if isinstance(a, GraphTensor) else graph.constant(np.asarray(a), f"{label}/{name}"))
    outputs = [graph.value_name(label) for _ in results]
    kept = {k: v for k, v in attrs.items()}
    if node.op_type == "ArrayFeatureExtractor":  # written in the standard domain: Gather of the flattened indices
        flat = graph.value_name(f"{label}/indices")
        graph.add_node("Reshape", [names[1], graph.constant(np.array([-1], np.int64), f"{label}/flat")], [flat],
                       graph.node_name(f"{label}/Reshape"))
        if np.ndim(example[0]) == 1:
            row = graph.value_name(f"{label}/row")
            graph.add_node("Gather", [names[0], flat], [row], graph.node_name(f"{label}/Gather"), axis=-1)
            graph.add_node("Unsqueeze", [row, graph.constant(np.array([0], np.int64), f"{label}/axis")], outputs,
                           label)
        else:
            graph.add_node("Gather", [names[0], flat], outputs, label, axis=-1)
    else:
        graph.add_node(node.op_type, names, outputs, label, **kept)
    # a 1-D integer result is an index or shape vector, unless it holds the elements of a batched operand (a
    # classifier's labels flattened)
    holds = node.op_type in _RELAYOUT and any(a.batch_axis is not None for a in tensors)
    out = []
    for name, value in zip(outputs, results):
        value = np.asarray(value)
        batched = (batch is not None and value.ndim >= 1 and value.shape[0] == batch
                   and (value.ndim >= 2 or value.dtype.kind not in "iu"
                        or (holds and value.size == value_of(tensors[0]).size)))
        out.append(GraphTensor(graph, name, value, 0 if batched else None, source))
    return out


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
    Mul(x, .) -> Mul(0.5) (or Mul(0.5, .) -> Mul(x, .)), or None."""
    if node.op_type != "Div" or not _scalar(values, node.input[1], np.sqrt(2.0)):
        return None
    x = node.input[0]
    erf = _single_user(node.output[0], users, "Erf")
    add = erf and _single_user(erf.output[0], users, "Add")
    if add is None or not _scalar(values, _other(add, erf.output[0]), 1.0):
        return None
    first = _single_user(add.output[0], users, "Mul")
    second = first and _single_user(first.output[0], users, "Mul")
    if second is None:
        return None
    # x * (1 + erf) then * 0.5 (TorchScript's order), or 0.5 * (1 + erf) then * x (the dynamo exporter's)
    if _other(first, add.output[0]) == x and _scalar(values, _other(second, first.output[0]), 0.5):
        return [node, erf, add, first, second]
    if _scalar(values, _other(first, add.output[0]), 0.5) and _other(second, first.output[0]) == x:
        return [node, erf, add, first, second]
    return None


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
