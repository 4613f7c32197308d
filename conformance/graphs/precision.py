"""The graph of a model at a precision of the ``ipu`` hardware: what the emulator computes, written as ONNX.

The emulator (:class:`conformance.hardware.ipu.ops.IpuOps`) holds every tensor between ops in FP16, computes each op in
FP32 from FP16 operands and rounds the result to FP16 once; at an FP8 precision it quantizes the operands of the matrix
ops to F143/F152 with per-tensor power-of-two scales (d = q * 2^scale), except on the ops of the model's skip list.
:class:`PrecisionGraphOps` runs the model's ``forward`` through the emulator (every op's value on the example batch is
the emulator's) and writes each op the way the emulator computed it:

- values between ops are float16 tensors: an op casts its float16 operands to float32, computes with the FP32 graph's
  nodes and casts its result to float16 (round to nearest even); a float32 value no op produced (an attention mask)
  goes through float16 first, as the emulator rounds it;
- parameters are float16 initializers (rounded as the emulator rounds them, overflow saturating to +-65504);
- an FP8 operand is a QuantizeLinear/DequantizeLinear pair (float32 scale 2^scale, a zero point of type
  FLOAT8E4M3FNUZ for F143 or FLOAT8E5M2FNUZ for F152, ``saturate=1``) on exactly the operands the emulator quantized in
  that call, with the scales it used (its record of them), so the skip list holds in the graph as in the emulator.
  FP8 weights are float32 initializers quantized in the graph, as the emulator quantizes the FP32 weights; a
  weights-only precision widens them through float16 before the matrix op.

What the graph does not say: matmul/conv partials. ONNX has no accumulator type; engines accumulate in FP32 (as here)
or as they are told (PopRT's ``partials_type``). The emulator's half partials round a running sum to FP16 after every
block and a matrix op's result to FP16 before its bias, so graph and emulator agree to FP16 rounding in the matrix ops
at those precisions. FP16 overflow: the emulator saturates to +-65504 where an ONNX Cast gives +-inf.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx

from conformance import numerics
from conformance.graphs.builder import GraphBuilder
from conformance.graphs import poprt
from conformance.graphs.export import GraphOps, Recording, record
from conformance.graphs.tensor import GraphTensor, value_of
from conformance.hardware.ipu.ops import Fp8Plan, IpuOps
from conformance.hardware.ipu.policy import Policy

# How far the error of onnxruntime's outputs from the FP32 model's may be from the emulator's error (with FP32
# partials: what the graph says) on the example batch before an export fails, as |log2| of their ratio
# (export.verify): 1, a factor of 2. The two evaluations differ where an op's FP32 result differs by an FP32 ulp
# (summation order, erf/exp/tanh implementations) across an FP16 or FP8 rounding boundary; on the small configs the
# outputs are within 0.44 of the precision's own error of each other (bit-equal for resnet50 and widedeep), but at full
# size such flips decorrelate the rounding noise (bert-base at fp8: onnxruntime and the emulator are as far apart as
# either is from FP32), so what is checked is that the graph's error is the precision's: a graph that leaves out a
# quantization or a rounding has a far smaller error, one with wrong scales a larger one.
VERIFY_TOLERANCE = 1.0
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
# The ONNX element types of the IPU's FP8 formats (opset 19 on; the format table names them); FLOAT8E4M3FN (max 448)
# is not F143.
FP8_TYPES = {fmt: getattr(onnx.TensorProto, numerics.format_info(fmt).onnx_type) for fmt in numerics.FP8_FORMATS}


class FloatPartialsOps(IpuOps):
    """The emulator at a precision with FP32 partials in every matrix op, FP8 operands included: what a graph of
    the precision computes (ONNX has no accumulator type). Everything else, the FP8 scales and the skip list
    included, is the emulator's own."""

    def __init__(self, policy: Policy, *, fp8_plan=None, recorder=None):
        super().__init__(replace(policy, partials="float"), fp8_plan=fp8_plan, recorder=recorder)

    def _fp8_format(self, fp8: str) -> None:
        return None  # the kernels see the FP8 operands' values and sum them in FP32 (FP8 values are exact in FP32)


class _Given:
    """Stands in for :class:`GraphOps`' FP32 value computation: every op gives the value the emulator computed."""

    value = None

    def __getattr__(self, op):
        return lambda *args, **kwargs: self.value


class PrecisionGraphOps(GraphOps):
    """Ops that compute through ``emulator`` and record the graph of what it computed (see the module docstring)."""

    def __init__(self, graph: GraphBuilder, emulator: IpuOps):
        super().__init__(graph, values=_Given())
        self.emulator = emulator
        self.precision = emulator.precision
        plan = emulator.fp8_plan
        self.formats = ({"weight": plan.settings.weight_format, "input": plan.settings.input_format} if plan else {})
        self.widen_weights = emulator.policy.fp8 == "weights"  # FP8 storage, FP16 operands of the matrix op
        self.quantized: dict[str, dict[str, int]] = {}  # layer -> operand -> scale, as written in the graph
        self._f16_values_of: dict[int, tuple[object, np.ndarray]] = {}  # id -> (array, its float16 values)
        self._widened: dict[str, GraphTensor] = {}  # float16 value or initializer name -> its float32 cast

    # -- the emulator's value --------------------------------------------------------------------------------------
    def _emulate(self, op: str, name: str, *args, **kwargs) -> dict[str, int]:
        """Run op ``op`` of the emulator (the value GraphOps then hands on); the FP8 operands it quantized in this
        call and their scales."""
        self.emulator.scales_used.pop(name, None)
        self.values.value = getattr(self.emulator, op)(*args, name=name, **kwargs)
        return dict(self.emulator.scales_used.get(name, {}))

    # -- operands -------------------------------------------------------------------------------------------------
    def _round(self, y: GraphTensor) -> GraphTensor:
        """An op's float32 result rounded to float16 (the emulator's value is on the FP16 grid: exact)."""
        return y.astype(F16)

    def _saturate(self, x: GraphTensor) -> GraphTensor:
        """``x`` clipped to FP16's finite range: a Cast to float16 after it saturates as the emulator's rounding
        does (a Cast alone gives +-inf; finfo(float32).min in an attention mask becomes -65504)."""
        top = float(numerics.format_info("f16").max_value)
        bounds = [self.graph.constant(np.float32(v), f"{x.source}/Clip.{role}") for v, role in ((-top, "min"), (top, "max"))]
        node = self.graph.node_name(f"{x.source}/Clip")
        out = self.graph.value_name(node)
        self.graph.add_node("Clip", [x.name, *bounds], [out], node)
        return GraphTensor(self.graph, out, np.clip(x.value, -top, top), x.batch_axis, x.source)

    def _f16_values(self, x) -> np.ndarray:
        """Parameter ``x`` rounded to float16 as the emulator rounds it (overflow saturating), once per array."""
        hit = self._f16_values_of.get(id(x))
        if hit is None or hit[0] is not x:
            hit = self._f16_values_of[id(x)] = (x, numerics.quantize(np.asarray(x, F32), "f16").astype(F16))
        return hit[1]  # x is kept alive above: its id names no other array

    def _f16_param(self, x, name: str, role: str) -> tuple[str, np.ndarray]:
        """The float16 initializer of parameter ``x`` (named after its checkpoint tensor) and its values."""
        values = self._f16_values(x)
        stored = self.graph.constant(values, f"{name}.{role}", key=("f16", id(x)),
                                     name=self.graph.param_name(x) or f"{name}.{role}")
        return stored, values

    def _operand(self, x, name: str, role: str):
        """Operand ``role`` of op ``name`` as the emulator's op reads it: on the FP16 grid, as float32."""
        if isinstance(x, GraphTensor):
            if x.dtype == F16:
                widened = self._widened.get(x.name)
                if widened is None:
                    widened = self._widened[x.name] = x.astype(F32)
                return widened
            if x.dtype == F32:  # a value no op produced (a mask): rounded to FP16, saturating, when an op reads it
                return self._saturate(x).astype(F16).astype(F32)
            return x
        if np.asarray(x).dtype.kind != "f":
            return x
        stored, values = self._f16_param(x, name, role)
        widened = self._widened.get(stored)
        if widened is None:
            cast = self.graph.node_name(f"{name}/{role}.Cast")
            out = self.graph.value_name(cast)
            self.graph.add_node("Cast", [stored], [out], cast, to=onnx.TensorProto.FLOAT)
            widened = self._widened[stored] = GraphTensor(self.graph, out, values.astype(F32), None, name)
        return widened

    def _qdq(self, x: GraphTensor, name: str, role: str, fmt: str, scale: int) -> GraphTensor:
        """``x`` quantized to ``fmt`` with scale 2^scale and dequantized: a QuantizeLinear/DequantizeLinear pair."""
        scale_name = self.graph.constant(np.float32(2.0 ** scale), f"{name}/{role}.scale")
        zero = self.graph.typed_scalar(0, FP8_TYPES[fmt], f"{name}/{role}.zero_point")
        q = self.graph.node_name(f"{name}/{role}/QuantizeLinear")
        q_out = self.graph.value_name(q)
        self.graph.add_node("QuantizeLinear", [x.name, scale_name, zero], [q_out], q, saturate=1)
        dq = self.graph.node_name(f"{name}/{role}/DequantizeLinear")
        dq_out = self.graph.value_name(dq)
        self.graph.add_node("DequantizeLinear", [q_out, scale_name, zero], [dq_out], dq)
        self.quantized.setdefault(name, {})[role] = int(scale)
        value = numerics.quantize(np.asarray(x.value, F32), fmt, scale=scale)
        return GraphTensor(self.graph, dq_out, value, x.batch_axis, x.source)

    def _activation(self, x, name: str, role: str, quantized: dict[str, int]):
        operand = self._operand(x, name, role)
        if role in quantized:
            operand = self._qdq(operand, name, role, self.formats["input"], quantized[role])
        return operand

    def _weight(self, w, name: str, quantized: dict[str, int]):
        if "weight" not in quantized:
            return self._operand(w, name, "weight")
        if isinstance(w, GraphTensor):
            w32 = self._operand(w, name, "weight") if w.dtype == F16 else w
        else:  # the FP32 weight, as the emulator quantizes it
            w32 = GraphTensor(self.graph, self.graph.constant(w, f"{name}.weight", dtype=F32),
                              np.asarray(w, F32), None, name)
        q = self._qdq(w32, name, "weight", self.formats["weight"], quantized["weight"])
        return q.astype(F16).astype(F32) if self.widen_weights else q

    # -- data entering the device ----------------------------------------------------------------------------------
    def input(self, x, *, name):
        self._emulate("input", name, value_of(x))
        return self._round(super().input(x, name=name))

    def embedding(self, table, ids, *, name):
        self._emulate("embedding", name, value_of(table), value_of(ids))  # rows of the FP16 table: exact
        self.values.value = self.values.value.astype(F16)
        stored, values = self._f16_param(table, name, "weight")
        return super().embedding(GraphTensor(self.graph, stored, values, None, name), ids, name=name)

    # -- matrix units ----------------------------------------------------------------------------------------------
    def _plus_bias(self, y: GraphTensor, bias, name: str, channel_axis: int | None) -> GraphTensor:
        """A matrix op's result rounded to FP16, plus its bias in FP32, rounded to FP16: the emulator rounds the
        product before its bias add."""
        if bias is None:
            return self._round(y)
        node = y.source
        rounded = self._inner("Cast", [y.name], node, "Cast", to=onnx.TensorProto.FLOAT16)[0]
        widened = self._inner("Cast", [rounded], node, "Cast", to=onnx.TensorProto.FLOAT)[0]
        b = self._operand(bias, name, "bias")
        if channel_axis is not None:
            b = b.reshape(*(-1 if axis == channel_axis else 1 for axis in range(y.ndim)))
        return self._round(self._last("Add", [widened, b.name], node, "bias", self.values.value, y.batch_axis))

    def linear(self, x, weight, bias=None, *, name):
        quantized = self._emulate("linear", name, value_of(x), value_of(weight), value_of(bias))
        y = super().linear(self._activation(x, name, "input", quantized), self._weight(weight, name, quantized), None,
                           name=name)
        return self._plus_bias(y, bias, name, None)

    def matmul(self, a, b, *, name):
        quantized = self._emulate("matmul", name, value_of(a), value_of(b))
        return self._round(super().matmul(self._activation(a, name, "a", quantized),
                                          self._activation(b, name, "b", quantized), name=name))

    def conv2d(self, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, name):
        geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        quantized = self._emulate("conv2d", name, value_of(x), value_of(weight), value_of(bias), **geometry)
        y = super().conv2d(self._activation(x, name, "input", quantized), self._weight(weight, name, quantized), None,
                           name=name, **geometry)
        return self._plus_bias(y, bias, name, 1)

    # -- elementwise -----------------------------------------------------------------------------------------------
    def _binary_op(self, op: str, a, b, name: str):
        self._emulate(op, name, value_of(a), value_of(b))
        return self._round(getattr(super(), op)(self._operand(a, name, "a"), self._operand(b, name, "b"), name=name))

    def add(self, a, b, *, name):
        return self._binary_op("add", a, b, name)

    def sub(self, a, b, *, name):
        return self._binary_op("sub", a, b, name)

    def mul(self, a, b, *, name):
        return self._binary_op("mul", a, b, name)

    def div(self, a, b, *, name):
        return self._binary_op("div", a, b, name)

    def _unary_op(self, op: str, x, name: str, **kwargs):
        self._emulate(op, name, value_of(x), **kwargs)
        return self._round(getattr(super(), op)(self._operand(x, name, "input"), name=name, **kwargs))

    def relu(self, x, *, name):
        return self._unary_op("relu", x, name)

    def sqrt(self, x, *, name):
        return self._unary_op("sqrt", x, name)

    def pow(self, x, exponent: float, *, name):
        return self._unary_op("pow", x, name, exponent=exponent)

    def gelu(self, x, *, approximate="none", name):
        return self._unary_op("gelu", x, name, approximate=approximate)

    def sigmoid(self, x, *, name):
        return self._unary_op("sigmoid", x, name)

    def silu(self, x, *, name):
        return self._unary_op("silu", x, name)

    def tanh(self, x, *, name):
        return self._unary_op("tanh", x, name)

    def glu(self, x, *, axis, name):
        return self._unary_op("glu", x, name, axis=axis)

    # -- normalisation and reductions ------------------------------------------------------------------------------
    def layer_norm(self, x, gamma, beta, *, eps, name):
        self._emulate("layer_norm", name, value_of(x), value_of(gamma), value_of(beta), eps=eps)
        return self._round(super().layer_norm(self._operand(x, name, "input"), self._operand(gamma, name, "weight"),
                                              self._operand(beta, name, "bias"), eps=eps, name=name))

    def batch_norm(self, x, mean, var, gamma, beta, *, eps, axis=1, name):
        """The emulator folds the FP16 statistics into an FP32 scale and shift: so does the graph."""
        self._emulate("batch_norm", name, value_of(x), *(value_of(p) for p in (mean, var, gamma, beta)), eps=eps,
                      axis=axis)
        g, b, m, v = (self._f16_values(p).astype(F32) for p in (gamma, beta, mean, var))
        inv = (g / np.sqrt(v + np.float32(eps))).astype(F32)
        shift = (b - m * inv).astype(F32)
        return self._round(self._scale_shift(self._operand(x, name, "input"), inv, shift, axis=axis, name=name,
                                             value=self.values.value))

    def softmax(self, x, *, axis=-1, name):
        return self._unary_op("softmax", x, name, axis=axis)

    def mean(self, x, *, axis, keepdims=False, name):
        return self._unary_op("mean", x, name, axis=axis, keepdims=keepdims)

    def max_pool2d(self, x, *, kernel, stride, padding=0, name):
        return self._unary_op("max_pool2d", x, name, kernel=kernel, stride=stride, padding=padding)

    # -- further ops (of imported graphs) ----------------------------------------------------------------------------
    def maximum(self, a, b, *, name):
        return self._binary_op("maximum", a, b, name)

    def minimum(self, a, b, *, name):
        return self._binary_op("minimum", a, b, name)

    def mod(self, a, b, *, name):
        return self._binary_op("mod", a, b, name)

    def abs(self, x, *, name):
        return self._unary_op("abs", x, name)

    def neg(self, x, *, name):
        return self._unary_op("neg", x, name)

    def sign(self, x, *, name):
        return self._unary_op("sign", x, name)

    def ceil(self, x, *, name):
        return self._unary_op("ceil", x, name)

    def floor(self, x, *, name):
        return self._unary_op("floor", x, name)

    def exp(self, x, *, name):
        return self._unary_op("exp", x, name)

    def log(self, x, *, name):
        return self._unary_op("log", x, name)

    def reciprocal(self, x, *, name):
        return self._unary_op("reciprocal", x, name)

    def hard_swish(self, x, *, name):
        return self._unary_op("hard_swish", x, name)

    def hard_sigmoid(self, x, *, alpha, beta, name):
        return self._unary_op("hard_sigmoid", x, name, alpha=alpha, beta=beta)

    def clip(self, x, low=None, high=None, *, name):
        """The bounds are FP16 values, as the emulator holds them."""
        bounds = [None if v is None else float(numerics.quantize(np.float32(v), "f16")) for v in (low, high)]
        self._emulate("clip", name, value_of(x), low, high)
        return self._round(super().clip(self._operand(x, name, "input"), *bounds, name=name))

    def cumsum(self, x, *, axis, exclusive=False, reverse=False, name):
        return self._unary_op("cumsum", x, name, axis=axis, exclusive=exclusive, reverse=reverse)

    def sum(self, x, *, axis, keepdims=False, name):
        return self._unary_op("sum", x, name, axis=axis, keepdims=keepdims)

    def instance_norm(self, x, gamma, beta, *, eps, name):
        self._emulate("instance_norm", name, value_of(x), value_of(gamma), value_of(beta), eps=eps)
        return self._round(super().instance_norm(self._operand(x, name, "input"), self._operand(gamma, name, "weight"),
                                                 self._operand(beta, name, "bias"), eps=eps, name=name))

    def interpolate(self, x, rows, cols, *, name):
        self._emulate("interpolate", name, value_of(x), rows, cols)
        return self._round(super().interpolate(self._operand(x, name, "input"), rows, cols, name=name))

    def avg_pool2d(self, x, divisor, *, kernel, stride, name):
        self._emulate("avg_pool2d", name, value_of(x), divisor, kernel=kernel, stride=stride)
        return self._round(super().avg_pool2d(self._operand(x, name, "input"), divisor, kernel=kernel, stride=stride,
                                              name=name))


def record_precision(model, policy: Policy, plan: Fp8Plan | None, *, weights: str = "", version: str = "",
                     example: dict[str, np.ndarray] | None = None) -> tuple[Recording, dict]:
    """The graph of ``model`` at ``policy`` (with ``plan``'s FP8 settings and calibrated scales), verified against
    :class:`FloatPartialsOps`, and PopRT's settings for the same policy (:mod:`conformance.graphs.poprt`)."""
    made: list[PrecisionGraphOps] = []

    def ops(graph):
        made.append(PrecisionGraphOps(graph, FloatPartialsOps(policy, fp8_plan=plan)))
        return made[-1]

    metadata = {"partials": f"{policy.partials} (the graph sums in FP32: ONNX has no accumulator type)"}
    if plan is not None:
        metadata["fp8"] = json.dumps({"input_format": plan.settings.input_format,
                                      "weight_format": plan.settings.weight_format, "skip": list(plan.settings.skip),
                                      "calibration": plan.calibration}, sort_keys=True)
    recording = record(model, weights=weights, version=version, ops=ops, precision=policy.name, metadata=metadata,
                       tolerance=VERIFY_TOLERANCE, example=example)
    recording.baseline = model(recording.inputs)  # the FP32 model on the example batch
    return recording, poprt.settings(model.name, policy, plan.settings if plan else None, made[-1].quantized)
