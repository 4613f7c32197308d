"""The op trace of a model: what every op of one forward pass costs, without computing anything.

:class:`TraceOps` is an :class:`~models.ops.Ops` whose methods record the op (its class, name, FLOPs and
bytes at the precision's data types, the matrix shape of matrix ops) and return a correctly shaped array of zeros, so
tracing a full-size model at any batch size takes milliseconds. The timing model (:mod:`conformance.hardware.ipu.timing.cost`)
turns a trace into time on a device.

Data types come from the ``ipu`` hardware's precision policies (``conformance/hardware/ipu/precisions.toml``, read by
:mod:`conformance.hardware.ipu.policy`): tensors are
held in FP16; under ``fp8 = "all"`` the operands of the matrix ops (conv2d, matmul, linear = PopRT's Conv, MatMul, Gemm)
are FP8, 1 byte, and the matrix units run at their FP8 rate; under ``fp8 = "weights"`` only the weights are 1 byte and the
units run at the FP16 rate; ops on the model's FP8 skip list stay FP16. ``fp32`` holds everything in 4 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np

from conformance.hardware.ipu.policy import load_precisions
from models.ops import Ops, as_pair

STORAGE_TYPES = {"f16": "fp16"}  # a policy's storage format -> the data type the trace prices
# Bytes per element of a model input as the device receives it: ids as int32, masks as bytes, floats in the storage type.
INPUT_KIND_BYTES = {"int": 4, "bool": 1}


@dataclass(frozen=True)
class DataTypes:
    """How one precision holds tensors: the storage type of activations, and what FP8 applies to."""

    precision: str
    storage: str  # "fp16" or "fp32": activations, vector ops, outputs of matrix ops
    fp8: str  # "none", "weights" or "all"
    skip: tuple[str, ...] = ()  # matrix ops (by name) kept at the storage type
    partials: str = "float"  # accumulator of matrix ops: "float" (4 bytes) or "half" (2 bytes)

    @property
    def storage_bytes(self) -> int:
        return 4 if self.storage == "fp32" else 2

    def matrix_types(self, name: str) -> tuple[str, int, int, int]:
        """(type the matrix units compute in, bytes of an activation operand, of a weight operand, of a partial sum) for
        matrix op ``name``. FP8 operands force half partials (poplibs)."""
        mode = "none" if name in self.skip else self.fp8
        partial = 2 if self.partials == "half" else 4
        if mode == "all":
            return "fp8", 1, 1, 2
        if mode == "weights":  # weights widened to FP16 on the tile before the AMP consumes them
            return self.storage, self.storage_bytes, 1, partial
        return self.storage, self.storage_bytes, self.storage_bytes, partial


def precision_names() -> tuple[str, ...]:
    """The precisions the timing model knows: the ``ipu`` hardware's policies, and ``fp32``."""
    return tuple(load_precisions()[0]) + ("fp32",)


def data_types(precision: str, model_name: str | None = None) -> DataTypes:
    """The data types of ``precision`` for ``model_name`` (its FP8 skip list applies); a ValueError listing the valid
    precisions otherwise."""
    if precision == "fp32":
        return DataTypes("fp32", "fp32", "none", partials="float")
    policies, fp8 = load_precisions()
    if precision not in policies:
        raise ValueError(f"unknown precision {precision!r}; expected one of: {', '.join(precision_names())}")
    policy = policies[precision]
    settings = fp8.get(model_name or "")
    skip = settings.skip if policy.uses_fp8 and settings is not None else ()
    return DataTypes(precision, STORAGE_TYPES[policy.storage], policy.fp8, tuple(skip), policy.partials)


@dataclass
class OpRecord:
    """One op of the trace. ``kind`` is the cost class the timing model prices:

    - ``matrix``: linear, matmul, conv2d with groups < channels, on the AMP units (``groups`` independent problems of
      ``m x k`` times ``k x n``);
    - ``vector``: elementwise ops, depthwise convs, pooling, norms, softmax, reductions on the vector units;
    - ``gather``: embedding lookups (``indices`` rows of a table of ``table_bytes``);
    - ``input``: a model input arriving from the host.
    """

    op: str
    name: str
    kind: str
    flops: float  # arithmetic of the op as written (no padding)
    in_bytes: float  # activation operands read
    out_bytes: float  # result written
    weight_bytes: float = 0.0  # parameters read (matrix weights, norm parameters, tables)
    compute_type: str = "fp16"  # type the op computes in: "fp8" only for matrix ops with FP8 operands
    groups: int = 1
    m: int = 0
    n: int = 0
    k: int = 0
    weight_operand: bool = False  # matrix op whose second operand is a parameter (linear, conv2d)
    partial_bytes: int = 4  # bytes of a partial sum when tiles split the contraction
    broadcast_bytes: float = 0.0  # operands smaller than the output that every tile holding the output needs
    reduction: bool = False  # needs a cross-element reduction (norms, softmax, mean)
    indices: int = 0
    table_bytes: float = 0.0
    folded: bool = False  # folded into the previous matrix op at compile time (inference BatchNorm after a conv)
    out_shape: tuple = ()
    sources: tuple = ()  # indices of the ops whose outputs this op reads (for liveness)


@dataclass
class Trace:
    model: str
    precision: str
    batch_size: int
    ops: list[OpRecord] = field(default_factory=list)
    input_bytes: float = 0.0  # host -> device per batch
    output_bytes: float = 0.0  # device -> host per batch
    weight_bytes: float = 0.0  # every parameter once, at its stored type

    def total(self, attribute: str, kind: str | None = None) -> float:
        return float(sum(getattr(op, attribute) for op in self.ops if kind is None or op.kind == kind))

    @property
    def flops(self) -> float:
        return self.total("flops")

    @property
    def activation_bytes(self) -> float:
        return self.total("out_bytes")

    def by_kind(self) -> dict[str, dict[str, float]]:
        summary: dict[str, dict[str, float]] = {}
        for op in self.ops:
            entry = summary.setdefault(op.kind, {"ops": 0, "flops": 0.0, "bytes": 0.0})
            entry["ops"] += 1
            entry["flops"] += op.flops
            entry["bytes"] += op.in_bytes + op.out_bytes + op.weight_bytes
        return summary


# Vector-unit arithmetic per output element (flops), as the IPU's vector codelets compute them: transcendental functions
# (exp, tanh, erf) are a handful of vector instructions each on the tile's special-function support.
ELEMENT_FLOPS = {
    "add": 1, "sub": 1, "mul": 1, "relu": 1, "input": 1,
    "sigmoid": 4, "tanh": 4, "silu": 5, "glu": 5, "gelu": 8,
    "batch_norm": 2, "layer_norm": 8, "softmax": 6, "mean": 1,
}


def _zeros(shape) -> np.ndarray:
    """Zeros of ``shape`` that take no memory: one float32 zero broadcast (every stride 0, read-only). Its views
    (reshapes, transposes) stay views of that zero, so they lead back to the op that made it and cost nothing,
    whatever the batch."""
    return np.broadcast_to(np.zeros((), np.float32), tuple(int(s) for s in shape))


def _size(x) -> int:
    return int(np.size(x))


class TraceOps(Ops):
    """Records every op into :attr:`trace` and returns zeros of the op's output shape (no arithmetic)."""

    def __init__(self, trace: Trace, types: DataTypes):
        super().__init__(recorder=None)
        self.trace = trace
        self.types = types
        self.precision = types.precision
        self._last_matrix_out = None  # id of the last matrix op's result, for BatchNorm folding
        self._seen_params: set[int] = set()
        self._producer: dict[int, int] = {}  # id of an op's output array -> index of the op
        self._outputs: list[np.ndarray] = []  # kept alive so that ids stay unique during the trace

    # -- recording ------------------------------------------------------------------------------------------------
    def _param_bytes(self, *arrays, per_element: float | None = None) -> float:
        """Bytes of parameters, counted once per distinct array in the trace's weight total (ALBERT shares its layers)."""
        per = self.types.storage_bytes if per_element is None else per_element
        total = 0.0
        for arr in arrays:
            if arr is None:
                continue
            nbytes = _size(arr) * per
            total += nbytes
            if id(arr) not in self._seen_params:
                self._seen_params.add(id(arr))
                self.trace.weight_bytes += nbytes
        return total

    def _sources(self, arrays) -> tuple[int, ...]:
        found = []
        for arr in arrays:
            while isinstance(arr, np.ndarray):
                if id(arr) in self._producer:
                    found.append(self._producer[id(arr)])
                    break
                arr = arr.base  # views (reshape, transpose, slices) lead back to the op's output
        return tuple(sorted(set(found)))

    def _record(self, op: str, name: str, out_shape, inputs=(), **fields) -> np.ndarray:
        out = _zeros(out_shape)
        record = OpRecord(op=op, name=name, out_shape=tuple(out.shape), sources=self._sources(inputs), **fields)
        self._producer[id(out)] = self._producer[id(out.base)] = len(self.trace.ops)  # the output and the zero it views
        self._outputs.append(out)
        self.trace.ops.append(record)
        return out

    def _vector(self, op: str, name: str, out_shape, inputs, *, params=(), reduction=False, flops_per_element=None):
        b = self.types.storage_bytes
        out_size = prod(out_shape)
        broadcast = sum(_size(x) for x in inputs if 1 < _size(x) < out_size) * b
        per = ELEMENT_FLOPS[op] if flops_per_element is None else flops_per_element
        return self._record(op, name, out_shape, inputs, kind="vector", flops=float(per * out_size),
                            in_bytes=float(sum(_size(x) for x in inputs) * b), out_bytes=float(out_size * b),
                            weight_bytes=self._param_bytes(*params), compute_type=self.types.storage,
                            broadcast_bytes=float(broadcast), reduction=reduction)

    # -- data entering the device ---------------------------------------------------------------------------------
    def input(self, x, *, name):
        x = np.asarray(x)
        # Converted to the storage type on the way in; the host -> device bytes are counted per model input.
        return self._vector("input", name, x.shape, [x])

    def embedding(self, table, ids, *, name):
        ids = np.asarray(ids)
        dim = table.shape[-1]
        b = self.types.storage_bytes
        out_shape = ids.shape + (dim,)
        return self._record("embedding", name, out_shape, kind="gather", flops=0.0, in_bytes=float(ids.size * 4),
                            out_bytes=float(prod(out_shape) * b), weight_bytes=self._param_bytes(table),
                            compute_type=self.types.storage, indices=int(ids.size), table_bytes=float(_size(table) * b))

    # -- matrix units -------------------------------------------------------------------------------------------------
    def _matrix(self, op, name, out_shape, operands, *, groups, m, n, k, a_elems, w=None, b_elems=0):
        compute, act_bytes, weight_bytes, partial_bytes = self.types.matrix_types(name)
        if compute == "fp8":
            # The activation operands are cast FP16 -> FP8 with their scale on the vector units first (PopRT inserts the
            # cast before each FP8 Conv/MatMul/Gemm; weights were cast at compile time).
            acts = a_elems + b_elems
            self._record("cast_fp8", f"{name}.cast_fp8", (acts,), operands, kind="vector", flops=2.0 * acts,
                         in_bytes=float(acts * self.types.storage_bytes), out_bytes=float(acts), compute_type=self.types.storage)
        out = self._record(
            op, name, out_shape, operands, kind="matrix", flops=2.0 * groups * m * n * k,
            in_bytes=float(a_elems * act_bytes + b_elems * act_bytes),
            out_bytes=float(prod(out_shape) * self.types.storage_bytes),
            weight_bytes=self._param_bytes(w, per_element=weight_bytes) if w is not None else 0.0,
            compute_type=compute, groups=groups, m=m, n=n, k=k, weight_operand=w is not None, partial_bytes=partial_bytes,
        )
        self._last_matrix_out = id(out)
        return out

    def linear(self, x, weight, bias=None, *, name):
        lead = x.shape[:-1]
        out_features, in_features = weight.shape
        out = self._matrix("linear", name, lead + (out_features,), [x], groups=1, m=prod(lead), n=out_features, k=in_features,
                           a_elems=_size(x), w=weight)
        if bias is not None:
            self._param_bytes(bias)
        return out

    def matmul(self, a, b, *, name):
        lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        m, k = a.shape[-2:]
        n = b.shape[-1]
        return self._matrix("matmul", name, lead + (m, n), [a, b], groups=prod(lead), m=m, n=n, k=k, a_elems=_size(a), b_elems=_size(b))

    def conv2d(self, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, name):
        n, c, h, w = x.shape
        o, cg, kh, kw = weight.shape
        sh, sw = as_pair(stride)
        ph, pw = as_pair(padding)
        dh, dw = as_pair(dilation)
        ho = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
        wo = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
        out_shape = (n, o, ho, wo)
        if bias is not None:
            self._param_bytes(bias)
        if groups > 1 and cg == 1:
            # Depthwise: one input channel per output, nothing for a matrix unit to contract; poplibs runs it on the
            # vector units (2 flops per tap and output).
            out = self._vector("conv2d", name, out_shape, [x], params=(weight,), flops_per_element=2 * kh * kw)
            self._last_matrix_out = id(out)
            return out
        # Implicit GEMM per group: (N*Ho*Wo) x (Cg*kh*kw) times (Cg*kh*kw) x (O/groups).
        return self._matrix("conv2d", name, out_shape, [x], groups=groups, m=n * ho * wo, n=o // groups, k=cg * kh * kw,
                            a_elems=_size(x), w=weight)

    # -- elementwise ----------------------------------------------------------------------------------------------------
    def _binary(self, op, a, b, name):
        shape = np.broadcast_shapes(np.shape(a), np.shape(b))
        return self._vector(op, name, shape, [a, b])

    def add(self, a, b, *, name):
        return self._binary("add", a, b, name)

    def sub(self, a, b, *, name):
        return self._binary("sub", a, b, name)

    def mul(self, a, b, *, name):
        return self._binary("mul", a, b, name)

    def relu(self, x, *, name):
        return self._vector("relu", name, x.shape, [x])

    def gelu(self, x, *, approximate="none", name):
        return self._vector("gelu", name, x.shape, [x])

    def sigmoid(self, x, *, name):
        return self._vector("sigmoid", name, x.shape, [x])

    def silu(self, x, *, name):
        return self._vector("silu", name, x.shape, [x])

    def tanh(self, x, *, name):
        return self._vector("tanh", name, x.shape, [x])

    def glu(self, x, *, axis, name):
        shape = list(x.shape)
        shape[axis] //= 2
        return self._vector("glu", name, tuple(shape), [x])

    # -- normalisation and reductions ---------------------------------------------------------------------------------
    def layer_norm(self, x, gamma, beta, *, eps, name):
        return self._vector("layer_norm", name, x.shape, [x], params=(gamma, beta), reduction=True)

    def batch_norm(self, x, mean, var, gamma, beta, *, eps, axis=1, name):
        out = self._vector("batch_norm", name, x.shape, [x], params=(mean, var, gamma, beta))
        if id(x) == self._last_matrix_out:
            # Inference BatchNorm right after a conv is an affine map of its output: the compiler folds it into the conv's
            # weights and bias (PopRT/ONNX constant folding), so it costs nothing on the device.
            self.trace.ops[-1].folded = True
        return out

    def softmax(self, x, *, axis=-1, name):
        return self._vector("softmax", name, x.shape, [x], reduction=True)

    def mean(self, x, *, axis, keepdims=False, name):
        axes = {a % x.ndim for a in ((axis,) if np.isscalar(axis) else axis)}
        if keepdims:
            out_shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        else:
            out_shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
        return self._vector("mean", name, out_shape, [x], reduction=True, flops_per_element=_size(x) / max(prod(out_shape), 1))

    def max_pool2d(self, x, *, kernel, stride, padding=0, name):
        n, c, h, w = x.shape
        kh, kw = as_pair(kernel)
        sh, sw = as_pair(stride)
        ph, pw = as_pair(padding)
        out_shape = (n, c, (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1)
        return self._vector("max_pool2d", name, out_shape, [x], flops_per_element=kh * kw)


def placeholder_inputs(model, batch_size: int) -> dict[str, np.ndarray]:
    """Zeros of every input's shape and dtype: a trace never looks at values, and zeros cost nothing to make."""
    return {spec.name: np.zeros((batch_size, *spec.shape), np.dtype(spec.dtype)) for spec in model.input_specs}


def trace_model(model, batch_size: int, precision: str, inputs: dict[str, np.ndarray] | None = None) -> Trace:
    """The op trace of one forward pass of ``model`` on a batch of ``batch_size`` at ``precision``.

    Host transfer bytes are the model inputs at the device's input types (ids int32, masks 1 byte, floats in the storage
    type) and the outputs in the storage type."""
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    types = data_types(precision, model.name)
    trace = Trace(model=model.name, precision=precision, batch_size=int(batch_size))
    if inputs is None:
        inputs = placeholder_inputs(model, batch_size)
    for spec in model.input_specs:
        per = INPUT_KIND_BYTES.get(spec.kind, types.storage_bytes)
        trace.input_bytes += batch_size * prod(spec.shape) * per
    outputs = model.forward(inputs, TraceOps(trace, types))
    trace.output_bytes = float(sum(np.size(v) for v in outputs.values()) * types.storage_bytes)
    return trace
