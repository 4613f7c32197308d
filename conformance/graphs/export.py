"""The FP32 ONNX graph of a model, recorded from the model's own code.

:class:`GraphOps` is an :class:`models.ops.Ops` whose every method computes the FP32 reference result on an example
batch (the numpy implementation it inherits) and adds the ONNX nodes that compute the same; its results are
:class:`~conformance.graphs.tensor.GraphTensor` values, which record the model's shape steps between ops. Running the
model's ``forward`` on example inputs through it writes down what the model computes: there is no second description
of the architecture to drift from the first. Each op's main node carries the op's layer name, so a precision policy's
skip list names the same nodes in the graph (see :mod:`conformance.graphs.builder`).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import external_data_helper

from conformance.fileio import write_bytes_atomic
from conformance.graphs import runtime
from conformance.graphs.builder import BATCH, GraphBuilder
from conformance.graphs.tensor import GraphError, GraphTensor, broadcast_batch_axis, operand_name, value_of
from models.base import Model
from models.ops import Ops, as_pair, contiguous

F32 = np.float32
EXAMPLE_BATCH = 1  # samples of the batch the graph is recorded on (the batch axis is tracked, not guessed from sizes)
EXAMPLE_SEED = 0
# How far onnxruntime's outputs on the example batch may be from the recording's FP32 outputs before the export fails:
# the largest absolute difference over max(1, the largest magnitude). FP32 rounding in another order moves them by
# ~1e-6 of that; a graph that computes something else, by much more.
VERIFY_TOLERANCE = 1e-4
# A protobuf message holds at most 2 GiB: with more bytes of weights than this they go to FILE.data beside the graph.
EXTERNAL_DATA_BYTES = 1_800_000_000


def _no_batch(x, what: str, axes) -> None:
    """A GraphError when the batch axis of ``x`` is one of ``axes`` (an axis the op mixes or splits)."""
    if isinstance(x, GraphTensor) and x.batch_axis is not None and x.batch_axis in {a % x.ndim for a in axes}:
        raise GraphError(f"{x.name}: {what} along the batch axis is not recorded")


def _batch_axis(x) -> int | None:
    return x.batch_axis if isinstance(x, GraphTensor) else None


class GraphOps(Ops):
    """FP32 ops that record the ONNX graph of what they compute (see the module docstring)."""

    precision = "fp32"

    def __init__(self, graph: GraphBuilder, values: Ops | None = None):
        super().__init__(recorder=None)
        self.graph = graph
        self.values = values or Ops()  # what computes each op's value on the example batch: the FP32 reference

    # -- helpers ----------------------------------------------------------------------------------------------------
    def _f32(self, x, hint: str) -> str:
        return operand_name(self.graph, x, F32, hint)

    def _node(self, op_type: str, inputs: list[str], name: str, value, batch_axis, **attributes) -> GraphTensor:
        """One node named after the layer, writing the op's result."""
        node = self.graph.node_name(name)
        out = self.graph.value_name(node)
        self.graph.add_node(op_type, inputs, [out], node, **attributes)
        return GraphTensor(self.graph, out, value, batch_axis, node)

    def _inner(self, op_type: str, inputs: list[str], node: str, role: str, outputs: int = 1, **attributes) -> list[str]:
        """A further node ``{node}/{role}`` of an op; its output value names."""
        name = self.graph.node_name(f"{node}/{role}")
        outs = [self.graph.value_name(name if outputs == 1 else f"{name}.{i}") for i in range(outputs)]
        self.graph.add_node(op_type, inputs, outs, name, **attributes)
        return outs

    def _last(self, op_type: str, inputs: list[str], node: str, role: str, value, batch_axis,
              **attributes) -> GraphTensor:
        """The node ``{node}/{role}`` that writes an op's result (named like the op's main node)."""
        name = self.graph.node_name(f"{node}/{role}")
        out = self.graph.value_name(node)
        self.graph.add_node(op_type, inputs, [out], name, **attributes)
        return GraphTensor(self.graph, out, value, batch_axis, node)

    def _unary(self, op_type: str, x, name: str, value, **attributes) -> GraphTensor:
        return self._node(op_type, [self._f32(x, f"{name}.input")], name, value, _batch_axis(x), **attributes)

    def _binary(self, op_type: str, a, b, name: str, value) -> GraphTensor:
        batch_axis = broadcast_batch_axis([a, b], value.ndim)
        return self._node(op_type, [self._f32(a, f"{name}.a"), self._f32(b, f"{name}.b")], name, value, batch_axis)

    # -- data entering the device ------------------------------------------------------------------------------------
    def input(self, x, *, name):
        value = self.values.input(value_of(x), name=name)
        if isinstance(x, GraphTensor) and x.dtype != F32:
            return self._node("Cast", [x.name], name, value, x.batch_axis, to=onnx.TensorProto.FLOAT)
        return self._unary("Identity", x, name, value)

    def embedding(self, table, ids, *, name):
        value = self.values.embedding(value_of(table), value_of(ids), name=name)
        if _batch_axis(table) is not None:
            raise GraphError(f"{name}: an embedding table with a batch axis is not recorded")
        inputs = [operand_name(self.graph, table, value.dtype, f"{name}.weight"),
                  operand_name(self.graph, ids, np.int64, f"{name}.ids")]
        return self._node("Gather", inputs, name, value, _batch_axis(ids), axis=0)

    # -- matrix units ------------------------------------------------------------------------------------------------
    def linear(self, x, weight, bias=None, *, name):
        value = self.values.linear(value_of(x), value_of(weight), value_of(bias), name=name)
        _no_batch(x, "a linear layer", [-1])
        node = self.graph.node_name(name)
        if isinstance(weight, GraphTensor):
            _no_batch(weight, "a linear layer's weight", range(weight.ndim))
            weight_t = self._inner("Transpose", [weight.name], node, "weight", perm=[1, 0])[0]
        else:
            weight_t = self.graph.transposed_weight(weight, f"{name}.weight")
        batch_axis = _batch_axis(x)
        if bias is None:
            out = self.graph.value_name(node)
            self.graph.add_node("MatMul", [self._f32(x, f"{name}.input"), weight_t], [out], node)
            return GraphTensor(self.graph, out, value, batch_axis, node)
        product = self.graph.value_name(f"{node}/MatMul")
        self.graph.add_node("MatMul", [self._f32(x, f"{name}.input"), weight_t], [product], node)
        return self._last("Add", [product, self._f32(bias, f"{name}.bias")], node, "bias", value, batch_axis)

    def matmul(self, a, b, *, name):
        # C-contiguous operands: numpy's matmul leaves BLAS for a strided view (a head split), ~10x slower
        value = self.values.matmul(contiguous(value_of(a)), contiguous(value_of(b)), name=name)
        if np.ndim(value_of(a)) < 2 or np.ndim(value_of(b)) < 2:
            raise GraphError(f"{name}: matmul of a vector is not recorded")
        _no_batch(a, "a matmul's contraction", [-1])
        _no_batch(b, "a matmul's contraction", [-2])
        batch_axis = None
        for x, last in ((a, False), (b, True)):
            if _batch_axis(x) is None:
                continue
            axis = value.ndim - 1 if last and x.batch_axis == x.ndim - 1 else x.batch_axis + value.ndim - x.ndim
            if batch_axis is not None and axis != batch_axis:
                raise GraphError(f"{name}: matmul operands with their batch axes at different places")
            batch_axis = axis
        return self._node("MatMul", [self._f32(a, f"{name}.a"), self._f32(b, f"{name}.b")], name, value, batch_axis)

    def conv2d(self, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, name):
        value = self.values.conv2d(value_of(x), value_of(weight), value_of(bias), stride=stride, padding=padding,
                               dilation=dilation, groups=groups, name=name)
        if _batch_axis(x) not in (None, 0):
            raise GraphError(f"{name}: conv2d input with its batch axis at {x.batch_axis}, not 0 (NCHW)")
        ph, pw = as_pair(padding)
        inputs = [self._f32(x, f"{name}.input"), self._f32(weight, f"{name}.weight")]
        if bias is not None:
            inputs.append(self._f32(bias, f"{name}.bias"))
        return self._node("Conv", inputs, name, value, _batch_axis(x), kernel_shape=list(np.shape(value_of(weight))[2:]),
                          strides=list(as_pair(stride)), pads=[ph, pw, ph, pw], dilations=list(as_pair(dilation)),
                          group=int(groups))

    # -- elementwise -------------------------------------------------------------------------------------------------
    def add(self, a, b, *, name):
        return self._binary("Add", a, b, name, self.values.add(value_of(a), value_of(b), name=name))

    def sub(self, a, b, *, name):
        return self._binary("Sub", a, b, name, self.values.sub(value_of(a), value_of(b), name=name))

    def mul(self, a, b, *, name):
        return self._binary("Mul", a, b, name, self.values.mul(value_of(a), value_of(b), name=name))

    def div(self, a, b, *, name):
        return self._binary("Div", a, b, name, self.values.div(value_of(a), value_of(b), name=name))

    def sqrt(self, x, *, name):
        return self._unary("Sqrt", x, name, self.values.sqrt(value_of(x), name=name))

    def pow(self, x, exponent: float, *, name):
        value = self.values.pow(value_of(x), exponent, name=name)
        inputs = [self._f32(x, f"{name}.input"), self.graph.constant(np.asarray(exponent, F32), f"{name}.exponent")]
        return self._node("Pow", inputs, name, value, _batch_axis(x))

    def relu(self, x, *, name):
        return self._unary("Relu", x, name, self.values.relu(value_of(x), name=name))

    def gelu(self, x, *, approximate="none", name):
        value = self.values.gelu(value_of(x), approximate=approximate, name=name)
        return self._unary("Gelu", x, name, value, approximate=approximate)

    def sigmoid(self, x, *, name):
        return self._unary("Sigmoid", x, name, self.values.sigmoid(value_of(x), name=name))

    def silu(self, x, *, name):
        value = self.values.silu(value_of(x), name=name)
        node = self.graph.node_name(name)
        x_name = self._f32(x, f"{name}.input")
        gate = self._inner("Sigmoid", [x_name], node, "sigmoid")[0]
        out = self.graph.value_name(node)
        self.graph.add_node("Mul", [x_name, gate], [out], node)
        return GraphTensor(self.graph, out, value, _batch_axis(x), node)

    def tanh(self, x, *, name):
        return self._unary("Tanh", x, name, self.values.tanh(value_of(x), name=name))

    def glu(self, x, *, axis, name):
        value = self.values.glu(value_of(x), axis=axis, name=name)
        _no_batch(x, "glu", [axis])
        node = self.graph.node_name(name)
        first, second = self._inner("Split", [self._f32(x, f"{name}.input")], node, "split", outputs=2,
                                    axis=int(axis), num_outputs=2)
        gate = self._inner("Sigmoid", [second], node, "sigmoid")[0]
        out = self.graph.value_name(node)
        self.graph.add_node("Mul", [first, gate], [out], node)
        return GraphTensor(self.graph, out, value, _batch_axis(x), node)

    # -- normalisation and reductions --------------------------------------------------------------------------------
    def layer_norm(self, x, gamma, beta, *, eps, name):
        value = self.values.layer_norm(value_of(x), value_of(gamma), value_of(beta), eps=eps, name=name)
        _no_batch(x, "layer_norm", [-1])
        inputs = [self._f32(x, f"{name}.input"), self._f32(gamma, f"{name}.weight"), self._f32(beta, f"{name}.bias")]
        return self._node("LayerNormalization", inputs, name, value, _batch_axis(x), axis=-1, epsilon=float(eps))

    def batch_norm(self, x, mean, var, gamma, beta, *, eps, axis=1, name):
        value = self.values.batch_norm(value_of(x), value_of(mean), value_of(var), value_of(gamma), value_of(beta), eps=eps,
                                   axis=axis, name=name)
        _no_batch(x, "batch_norm", [axis])
        ndim = np.ndim(value_of(x))
        if axis % ndim == 1 and not any(isinstance(p, GraphTensor) for p in (mean, var, gamma, beta)):
            inputs = [self._f32(x, f"{name}.input")] + [self._f32(p, f"{name}.{role}") for p, role in
                                                          ((gamma, "weight"), (beta, "bias"), (mean, "running_mean"),
                                                           (var, "running_var"))]
            return self._node("BatchNormalization", inputs, name, value, _batch_axis(x), epsilon=float(eps))
        # another channel axis: the reference's own scale and shift, then x * scale + shift
        inv = (value_of(gamma) / np.sqrt(value_of(var) + F32(eps))).astype(F32)
        shift = (value_of(beta) - value_of(mean) * inv).astype(F32)
        return self._scale_shift(x, inv, shift, axis=axis, name=name, value=value)

    def _scale_shift(self, x, scale: np.ndarray, shift: np.ndarray, *, axis: int, name: str, value) -> GraphTensor:
        """``x * scale + shift`` along channel ``axis`` (a batch norm folded into per-channel constants), whose
        value on the example batch is ``value``."""
        _no_batch(x, "batch_norm", [axis])
        shape = [1] * x.ndim
        shape[axis] = -1
        node = self.graph.node_name(name)
        scaled = self.graph.value_name(f"{node}/Mul")
        self.graph.add_node("Mul", [self._f32(x, f"{name}.input"), self.graph.constant(scale.reshape(shape), f"{name}.scale")],
                            [scaled], node)
        return self._last("Add", [scaled, self.graph.constant(shift.reshape(shape), f"{name}.shift")], node, "shift",
                          value, _batch_axis(x))

    def softmax(self, x, *, axis=-1, name):
        value = self.values.softmax(value_of(x), axis=axis, name=name)
        _no_batch(x, "softmax", [axis])
        return self._unary("Softmax", x, name, value, axis=int(axis))

    def mean(self, x, *, axis, keepdims=False, name):
        value = self.values.mean(value_of(x), axis=axis, keepdims=keepdims, name=name)
        ndim = np.ndim(value_of(x))
        axes = sorted({int(a) % ndim for a in (axis if isinstance(axis, (tuple, list)) else (axis,))})
        _no_batch(x, "mean", axes)
        batch_axis = _batch_axis(x)
        if batch_axis is not None and not keepdims:
            batch_axis -= sum(a < batch_axis for a in axes)
        inputs = [self._f32(x, f"{name}.input"), self.graph.constant(np.asarray(axes, np.int64), f"{name}.axes")]
        return self._node("ReduceMean", inputs, name, value, batch_axis, keepdims=int(bool(keepdims)))

    def max_pool2d(self, x, *, kernel, stride, padding=0, name):
        value = self.values.max_pool2d(value_of(x), kernel=kernel, stride=stride, padding=padding, name=name)
        if _batch_axis(x) not in (None, 0):
            raise GraphError(f"{name}: max_pool2d input with its batch axis at {x.batch_axis}, not 0 (NCHW)")
        ph, pw = as_pair(padding)
        return self._unary("MaxPool", x, name, value, kernel_shape=list(as_pair(kernel)), strides=list(as_pair(stride)),
                           pads=[ph, pw, ph, pw])

    # -- further ops (of imported graphs) ----------------------------------------------------------------------------
    def maximum(self, a, b, *, name):
        return self._binary("Max", a, b, name, self.values.maximum(value_of(a), value_of(b), name=name))

    def minimum(self, a, b, *, name):
        return self._binary("Min", a, b, name, self.values.minimum(value_of(a), value_of(b), name=name))

    def mod(self, a, b, *, name):
        value = self.values.mod(value_of(a), value_of(b), name=name)
        batch_axis = broadcast_batch_axis([a, b], value.ndim)
        return self._node("Mod", [self._f32(a, f"{name}.a"), self._f32(b, f"{name}.b")], name, value, batch_axis,
                          fmod=1)

    def _elementwise(self, op_type: str, method: str, x, name: str, **attributes) -> GraphTensor:
        return self._unary(op_type, x, name, getattr(self.values, method)(value_of(x), name=name), **attributes)

    def abs(self, x, *, name):
        return self._elementwise("Abs", "abs", x, name)

    def neg(self, x, *, name):
        return self._elementwise("Neg", "neg", x, name)

    def sign(self, x, *, name):
        return self._elementwise("Sign", "sign", x, name)

    def ceil(self, x, *, name):
        return self._elementwise("Ceil", "ceil", x, name)

    def floor(self, x, *, name):
        return self._elementwise("Floor", "floor", x, name)

    def exp(self, x, *, name):
        return self._elementwise("Exp", "exp", x, name)

    def log(self, x, *, name):
        return self._elementwise("Log", "log", x, name)

    def reciprocal(self, x, *, name):
        return self._elementwise("Reciprocal", "reciprocal", x, name)

    def hard_swish(self, x, *, name):
        return self._elementwise("HardSwish", "hard_swish", x, name)

    def hard_sigmoid(self, x, *, alpha, beta, name):
        value = self.values.hard_sigmoid(value_of(x), alpha=alpha, beta=beta, name=name)
        return self._unary("HardSigmoid", x, name, value, alpha=float(alpha), beta=float(beta))

    def clip(self, x, low=None, high=None, *, name):
        value = self.values.clip(value_of(x), low, high, name=name)
        bounds = ["" if v is None else self.graph.constant(np.asarray(v, F32), f"{name}.{role}")
                  for v, role in ((low, "min"), (high, "max"))]
        return self._node("Clip", [self._f32(x, f"{name}.input"), *bounds], name, value, _batch_axis(x))

    def cumsum(self, x, *, axis, exclusive=False, reverse=False, name):
        value = self.values.cumsum(value_of(x), axis=axis, exclusive=exclusive, reverse=reverse, name=name)
        _no_batch(x, "cumsum", [axis])
        inputs = [self._f32(x, f"{name}.input"), self.graph.constant(np.asarray(axis, np.int64), f"{name}.axis")]
        return self._node("CumSum", inputs, name, value, _batch_axis(x), exclusive=int(exclusive),
                          reverse=int(reverse))

    def sum(self, x, *, axis, keepdims=False, name):
        value = self.values.sum(value_of(x), axis=axis, keepdims=keepdims, name=name)
        ndim = np.ndim(value_of(x))
        axes = sorted({int(a) % ndim for a in (axis if isinstance(axis, (tuple, list)) else (axis,))})
        _no_batch(x, "sum", axes)
        batch_axis = _batch_axis(x)
        if batch_axis is not None and not keepdims:
            batch_axis -= sum(a < batch_axis for a in axes)
        inputs = [self._f32(x, f"{name}.input"), self.graph.constant(np.asarray(axes, np.int64), f"{name}.axes")]
        return self._node("ReduceSum", inputs, name, value, batch_axis, keepdims=int(bool(keepdims)))

    def instance_norm(self, x, gamma, beta, *, eps, name):
        value = self.values.instance_norm(value_of(x), value_of(gamma), value_of(beta), eps=eps, name=name)
        _no_batch(x, "instance_norm", range(1, np.ndim(value_of(x))))
        inputs = [self._f32(x, f"{name}.input"), self._f32(gamma, f"{name}.weight"), self._f32(beta, f"{name}.bias")]
        return self._node("InstanceNormalization", inputs, name, value, _batch_axis(x), epsilon=float(eps))

    def interpolate(self, x, rows, cols, *, name):
        """Two MatMuls by the constant interpolation matrices."""
        value = self.values.interpolate(value_of(x), rows, cols, name=name)
        if _batch_axis(x) not in (None, 0):
            raise GraphError(f"{name}: interpolate input with its batch axis at {x.batch_axis}, not 0 (NCHW)")
        node = self.graph.node_name(name)
        left = self.graph.constant(np.asarray(rows, F32), f"{name}.rows")
        right = self.graph.constant(np.ascontiguousarray(np.asarray(cols, F32).T), f"{name}.cols")
        y = self._inner("MatMul", [left, self._f32(x, f"{name}.input")], node, "rows")[0]
        return self._last("MatMul", [y, right], node, "cols", value, _batch_axis(x))

    def avg_pool2d(self, x, divisor, *, kernel, stride, name):
        """The window sums as a depthwise convolution by ones, divided by each window's count."""
        value = self.values.avg_pool2d(value_of(x), divisor, kernel=kernel, stride=stride, name=name)
        if _batch_axis(x) not in (None, 0):
            raise GraphError(f"{name}: avg_pool2d input with its batch axis at {x.batch_axis}, not 0 (NCHW)")
        channels = np.shape(value_of(x))[1]
        ones = self.graph.constant(np.ones((channels, 1, *as_pair(kernel)), F32), f"{name}.window")
        node = self.graph.node_name(name)
        sums = self._inner("Conv", [self._f32(x, f"{name}.input"), ones], node, "sums", group=int(channels),
                           kernel_shape=list(as_pair(kernel)), strides=list(as_pair(stride)))[0]
        count = self.graph.constant(np.asarray(divisor, F32), f"{name}.count")
        return self._last("Div", [sums, count], node, "Div", value, _batch_axis(x))


# -- recording a model ---------------------------------------------------------------------------------------------
@dataclass
class Recording:
    """A model's ONNX graph, the example batch it was recorded on, and the outputs the graph must reproduce on that
    batch (the model's, at the graph's precision) within ``tolerance`` (see :func:`verify`)."""

    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    tolerance: float = VERIFY_TOLERANCE
    # A graph of a precision: the FP32 model's outputs on the example batch, against which the graph's error must be
    # the model's at that precision (see verify)
    baseline: dict[str, np.ndarray] | None = None

    @property
    def weight_bytes(self) -> int:
        return sum(len(t.raw_data) for t in self.model.graph.initializer)


def record(model: Model, *, weights: str = "", version: str = "", batch_size: int = EXAMPLE_BATCH,
           seed: int = EXAMPLE_SEED, ops: Callable[[GraphBuilder], GraphOps] = GraphOps, precision: str = "fp32",
           metadata: dict[str, str] | None = None, tolerance: float = VERIFY_TOLERANCE,
           example: dict[str, np.ndarray] | None = None) -> Recording:
    """The ONNX graph of ``model``: its ``forward`` run through ``ops(graph)`` (:class:`GraphOps`: the FP32 graph) on
    ``batch_size`` samples of its own ``sample_inputs``. Inputs and outputs are named as the model's (float outputs
    as float32 whatever the graph computes in), the batch axis is dynamic (``batch``). ``weights`` (where the weights
    came from), ``version``, ``precision`` and ``metadata`` go to the graph's metadata. ``example``: inputs to record
    on instead (their first ``batch_size`` rows), for a graph whose inputs cannot be drawn."""
    example = (model.sample_inputs(batch_size, seed=seed) if example is None
               else {name: np.asarray(value)[:batch_size] for name, value in example.items()})
    model.validate_inputs(example)
    graph = GraphBuilder({id(array): name for name, array in model.params.items()})
    for name in model.output_names:
        graph.reserve_value(name)
    feeds = {}
    for spec in model.input_specs:
        value = np.ascontiguousarray(example[spec.name], dtype=np.dtype(spec.dtype))
        graph.add_input(spec.name, value.dtype, (BATCH, *spec.shape))
        feeds[spec.name] = GraphTensor(graph, spec.name, value, 0, spec.name)
    results = model.forward(feeds, ops(graph))
    if set(results) != set(model.output_names):
        raise GraphError(f"{model.name}: forward returned {sorted(results)}, the model declares {list(model.output_names)}")
    outputs = {}
    for name in model.output_names:
        result = results[name]
        if not isinstance(result, GraphTensor) or result.batch_axis != 0:
            raise GraphError(f"{model.name}: output {name!r} does not have the batch as its first axis")
        if result.dtype.kind == "f" and result.dtype != F32:
            result = result.astype(F32)
        graph.add_output(name, result.name, result.dtype, (BATCH, *result.value.shape[1:]))
        outputs[name] = result.value
    config = json.dumps(asdict(model.config), sort_keys=True)
    described = "FP32" if precision == "fp32" else f"the precision {precision}"
    meta = {"model": model.name, "precision": precision, "config": config, "weights": weights or "seeded",
            **(metadata or {})}
    doc = (f"{model.name} in {described}, recorded from the ipu-conformance numpy model (weights: "
           f"{weights or 'seeded'}). Node names are the suite's layer names.")
    proto = graph.model(model.name, doc, meta, producer_version=version)
    return Recording(proto, example, outputs, tolerance)


def check(data) -> None:
    """``onnx.checker`` with the full check (strict shape inference) on a serialised graph or a path."""
    onnx.checker.check_model(os.fspath(data) if isinstance(data, os.PathLike) else data, full_check=True)


def verify(recording: Recording, graph) -> float:
    """Run ``graph`` (serialised, or a path) on onnxruntime's CPU provider on the recording's example batch and
    measure how far its outputs are from the model's. An FP32 graph: the largest difference from the recorded outputs
    relative to max(1, their largest magnitude). A graph of a precision (a recording with a ``baseline``, the FP32
    model's outputs): its error is the precision's, i.e. the largest |log2| over the outputs of onnxruntime's relative
    L2 distance from the FP32 outputs over the recorded outputs' distance from them. A GraphError when it exceeds the
    recording's tolerance (the graph does not compute what the model does)."""
    batch = len(next(iter(recording.inputs.values())))
    outputs = runtime.run(runtime.session(graph, as_written=True), recording.inputs, batch_size=batch)
    worst = 0.0
    for name, expected in recording.outputs.items():
        if recording.baseline is None:
            scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
            worst = max(worst, float(np.max(np.abs(outputs[name].astype(np.float64) - expected), initial=0.0)) / scale)
        else:
            graph_error = runtime.relative_error(outputs[name], recording.baseline[name])
            model_error = runtime.relative_error(expected, recording.baseline[name])
            if graph_error == model_error:
                continue
            worst = max(worst, abs(float(np.log2(graph_error / model_error))) if graph_error and model_error else np.inf)
    if not worst <= recording.tolerance:
        measure = ("of their scale" if recording.baseline is None else
                   "(|log2| of the graph's error from FP32 over the model's at this precision)")
        raise GraphError(f"{recording.model.graph.name}: onnxruntime's outputs differ from the model's by {worst:.3g} "
                         f"{measure} on the example batch (at most {recording.tolerance:g} expected)")
    return worst


def writable_target(path) -> Path:
    """``path`` as a Path, or an OSError saying why a file cannot be written there (before any work is done)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"--out {str(path)!r} is a directory; give a file name such as {str(path / 'model.onnx')!r}")
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise NotADirectoryError(f"--out {str(path)!r}: {str(parent)!r} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"--out {str(path)!r}: directory {str(parent)!r} is not writable")
    return path


def save(recording: Recording, path) -> list[Path]:
    """Check the graph (:func:`check`), run it on onnxruntime (:func:`verify`) and write it to ``path`` atomically;
    with weights over EXTERNAL_DATA_BYTES they go to ``{path}.data`` beside it (ONNX external data; the recording's
    ModelProto then refers to that file). The files written."""
    path = Path(path)
    if recording.weight_bytes <= EXTERNAL_DATA_BYTES:
        data = recording.model.SerializeToString()
        check(data)
        verify(recording, data)
        write_bytes_atomic(path, data)
        return [path]
    path.parent.mkdir(parents=True, exist_ok=True)
    location = f"{path.name}.data"
    with tempfile.TemporaryDirectory(prefix=f".{path.name}.", dir=path.parent) as tmp:
        staged = Path(tmp) / path.name
        external_data_helper.convert_model_to_external_data(recording.model, all_tensors_to_one_file=True,
                                                            location=location, size_threshold=1024)
        onnx.save_model(recording.model, staged)
        check(staged)
        verify(recording, staged)
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # the mode a plain open() gives, as for a graph written in one piece
        for name in (location, path.name):
            os.chmod(Path(tmp) / name, mode)
        os.replace(Path(tmp) / location, path.parent / location)
        os.replace(staged, path)
    return [path, path.parent / location]


__all__ = ["EXAMPLE_BATCH", "GraphOps", "Recording", "check", "record", "save", "verify", "writable_target"]
