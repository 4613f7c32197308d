"""The tensor the recording ops hand the model: it records the exact shape steps a model takes between ops.

A model computes through its ops, and rearranges their results in numpy between them (head split and merge, slices,
the attention mask, concatenations). :class:`GraphTensor` gives the model what it uses of an ndarray for that:
``shape``, ``reshape``, ``transpose``, basic indexing, ``astype``, ``==``/``!=``, ``np.concatenate`` and ``np.where``
(and numpy's array API spellings of these, ``np.reshape``, ``np.permute_dims``, ``np.concat``, ``np.astype``);
each call computes the example's value with numpy and adds the ONNX node that does the same. Anything else is refused
with a TypeError rather than recorded wrongly: numpy arithmetic on it (which belongs in the ops), converting it to an
ndarray (``np.asarray``; the models use :func:`models.ops.contiguous` where they want a C-contiguous array), fancy
indexing, and Python branching on its values.

The batch axis stays dynamic: ``shape`` holds a :class:`BatchDim` there, and a reshape keeps the batch axis only
where that BatchDim is passed on. ``min``, ``max`` and ``size`` answer from the example batch (the models' input
checks; the graph's Gather checks its indices itself).
"""

from __future__ import annotations

import math

import numpy as np
from onnx import helper

INT64_MIN = -(2 ** 63)


class BatchDim(int):
    """The batch size in a recorded tensor's shape: an int (the example's), marked so that a reshape can tell where
    the batch axis goes. Arithmetic on it gives plain ints."""

    def __repr__(self) -> str:
        return f"BatchDim({int(self)})"


class GraphError(TypeError):
    """A step of a model that the graph cannot record as it is (the message says which and why)."""


def value_of(x):
    """The example value of a recorded tensor; anything else as it is."""
    return x.value if isinstance(x, GraphTensor) else x


def onnx_type(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


class GraphTensor:
    """A value of the graph being recorded: its ONNX name, its value on the example batch, and its batch axis (None
    for values that do not depend on the batch, such as position tables)."""

    __array_ufunc__ = None  # numpy arithmetic on a recorded tensor raises TypeError: arithmetic belongs in the ops

    def __init__(self, graph, name: str, value: np.ndarray, batch_axis: int | None, source: str):
        self.graph = graph  # the GraphBuilder
        self.name = name
        self.value = value
        self.batch_axis = batch_axis
        self.source = source  # the op's node that made it: shape steps on it are named {source}/{OpType}

    def __repr__(self) -> str:
        return f"GraphTensor({self.name!r}, shape={self.shape}, dtype={self.dtype})"

    # -- what numpy code reads -----------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        dims = list(self.value.shape)
        if self.batch_axis is not None:
            dims[self.batch_axis] = BatchDim(dims[self.batch_axis])
        return tuple(dims)

    @property
    def ndim(self) -> int:
        return self.value.ndim

    @property
    def dtype(self) -> np.dtype:
        return self.value.dtype

    @property
    def size(self) -> int:
        return self.value.size

    def __len__(self) -> int:
        return self.shape[0]

    def min(self, *args, **kwargs):
        return self.value.min(*args, **kwargs)

    def max(self, *args, **kwargs):
        return self.value.max(*args, **kwargs)

    def __bool__(self):
        raise GraphError(f"{self.name}: Python branches on a tensor's values cannot be recorded in a graph")

    def __array__(self, dtype=None, copy=None):
        raise GraphError(f"{self.name}: numpy converted a recorded tensor to an array (np.asarray, "
                         "np.ascontiguousarray, ...); the graph cannot follow that step (models.ops.contiguous keeps "
                         "a tensor's layout without converting it)")

    def __array_function__(self, func, types, args, kwargs):
        handler = _FUNCTIONS.get(func)
        if handler is None:
            raise GraphError(f"np.{func.__name__} on a recorded tensor is not supported by the graph export")
        return handler(*args, **kwargs)

    # -- shape steps ------------------------------------------------------------------------------------------------
    def _result(self, op_type: str, inputs: list, value: np.ndarray, batch_axis: int | None,
                **attributes) -> GraphTensor:
        """The node ``{source}/{op_type}`` on ``inputs``: value names, or (role, ints) for an int64 constant that is
        named ``{node}/{role}``."""
        node = self.graph.node_name(f"{self.source}/{op_type}")
        names = [x if isinstance(x, str) else self.graph.constant(np.asarray(x[1], np.int64), f"{node}/{x[0]}")
                 for x in inputs]
        out = self.graph.value_name(node)
        self.graph.add_node(op_type, names, [out], node, **attributes)
        return GraphTensor(self.graph, out, value, batch_axis, self.source)

    def reshape(self, *shape, order="C") -> GraphTensor:
        if order != "C":
            raise GraphError(f"{self.name}: reshape(order={order!r}) is not recorded (only C order)")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        value = self.value.reshape(shape)
        marks = [i for i, d in enumerate(shape) if isinstance(d, BatchDim)]
        target = list(value.shape)
        batch_axis = None
        if self.batch_axis is not None:
            if len(marks) != 1:
                raise GraphError(f"{self.name}: reshape {tuple(shape)} of a tensor with a batch axis must pass the "
                                 "batch size it read from .shape (a BatchDim) once, where the batch axis goes")
            batch_axis = marks[0]
            before_in, after_in = self.value.shape[:self.batch_axis], self.value.shape[self.batch_axis + 1:]
            before_out, after_out = value.shape[:batch_axis], value.shape[batch_axis + 1:]
            if math.prod(before_in) != math.prod(before_out) or math.prod(after_in) != math.prod(after_out):
                raise GraphError(f"{self.name}: reshape {self.value.shape} -> {value.shape} mixes the batch axis with "
                                 "others, so it would differ at another batch size")
            target[batch_axis] = -1
        if tuple(target) == tuple(self.value.shape) and batch_axis == self.batch_axis:
            return self
        return self._result("Reshape", [self.name, ("shape", target)], value, batch_axis)

    def transpose(self, *axes) -> GraphTensor:
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        if not axes:
            axes = tuple(reversed(range(self.ndim)))
        axes = tuple(int(a) % self.ndim for a in axes)
        value = self.value.transpose(axes)
        if axes == tuple(range(self.ndim)):
            return self
        batch_axis = None if self.batch_axis is None else axes.index(self.batch_axis)
        return self._result("Transpose", [self.name], value, batch_axis, perm=list(axes))

    def astype(self, dtype, copy=True) -> GraphTensor:
        dtype = np.dtype(dtype)
        if dtype == self.dtype:
            return self
        return self._result("Cast", [self.name], self.value.astype(dtype), self.batch_axis, to=onnx_type(dtype))

    def __getitem__(self, key) -> GraphTensor:
        value = self.value[key]  # numpy checks the key and gives the result
        key = key if isinstance(key, tuple) else (key,)
        for item in key:
            basic = item is None or item is Ellipsis or isinstance(item, slice) or (
                isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)))
            if not basic:
                raise GraphError(f"{self.name}: indexing with {type(item).__name__} is not recorded (only ints, "
                                 "slices, None and ...)")
        used = sum(1 for item in key if item is not None and item is not Ellipsis)
        if Ellipsis in key:
            at = key.index(Ellipsis)
            key = key[:at] + (slice(None),) * (self.ndim - used) + key[at + 1:]
        else:
            key = key + (slice(None),) * (self.ndim - used)
        starts, ends, axes, steps, picks, inserted = [], [], [], [], [], []
        in_axis = out_axis = 0
        batch_axis = None
        for item in key:
            if item is None:
                inserted.append(out_axis)
                out_axis += 1
                continue
            dim = self.value.shape[in_axis]
            if in_axis == self.batch_axis:
                if not (isinstance(item, slice) and item == slice(None)):
                    raise GraphError(f"{self.name}: index {item!r} on the batch axis would fix the batch size; only "
                                     "':' is recorded there")
                batch_axis = out_axis
            elif isinstance(item, slice):
                start, stop, step = item.indices(dim)
                if (start, stop, step) != (0, dim, 1):
                    starts.append(start)
                    ends.append(stop if stop >= 0 else INT64_MIN)  # -1 from indices(): before the first element
                    axes.append(in_axis)
                    steps.append(step)
            else:
                picks.append((in_axis, int(item) % dim))
            if isinstance(item, slice):
                out_axis += 1
            in_axis += 1
        result = self
        if axes:
            inputs = [result.name, ("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps)]
            result = result._result("Slice", inputs, None, None)
        for axis, index in sorted(picks, reverse=True):  # the later axes first: the earlier keep their numbers
            result = result._result("Gather", [result.name, ("index", index)], None, None, axis=axis)
        if inserted:
            result = result._result("Unsqueeze", [result.name, ("axes", inserted)], None, None)
        if result is self:
            return self
        result.value, result.batch_axis = value, batch_axis
        return result

    # -- comparisons ------------------------------------------------------------------------------------------------
    def _compare(self, other, negate: bool) -> GraphTensor:
        value = (self.value != value_of(other)) if negate else (self.value == value_of(other))
        batch_axis = broadcast_batch_axis([self, other], value.ndim)
        operand = operand_name(self.graph, other, self.dtype, f"{self.source}/Equal/b")
        equal = self._result("Equal", [self.name, operand], value if not negate else None, batch_axis)
        if not negate:
            return equal
        out = equal._result("Not", [equal.name], value, batch_axis)
        return out

    def __eq__(self, other):
        return self._compare(other, negate=False)

    def __ne__(self, other):
        return self._compare(other, negate=True)

    __hash__ = object.__hash__


# -- helpers the ops share ---------------------------------------------------------------------------------------------
def operand_name(graph, x, dtype, hint: str) -> str:
    """The ONNX value of an operand: a recorded tensor (cast to ``dtype`` where it is another), else an initializer
    of ``x`` as ``dtype``."""
    if isinstance(x, GraphTensor):
        return x.name if x.dtype == np.dtype(dtype) else x.astype(dtype).name
    return graph.constant(x, hint, dtype=dtype)


def broadcast_batch_axis(operands, out_ndim: int) -> int | None:
    """The batch axis of the result of broadcasting ``operands`` (numpy's rules: trailing axes aligned); a
    GraphError if they disagree, or a constant would be broadcast along the batch axis with a size of its own."""
    found = None
    for x in operands:
        if isinstance(x, GraphTensor) and x.batch_axis is not None:
            axis = x.batch_axis + out_ndim - x.ndim
            if found is not None and axis != found:
                raise GraphError(f"{x.name}: operands with their batch axes at different places")
            found = axis
    if found is not None:
        for x in operands:
            if isinstance(x, GraphTensor) and x.batch_axis is not None:
                continue
            shape = np.shape(value_of(x))
            at = found - (out_ndim - len(shape))
            if 0 <= at < len(shape) and shape[at] != 1:
                raise GraphError(f"an operand of shape {shape} without a batch axis is broadcast along the batch axis "
                                 "with a size of its own")
    return found


def _concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    if out is not None or dtype is not None:
        raise GraphError("np.concatenate with out= or dtype= is not recorded")
    arrays = list(arrays)
    tensors = [a for a in arrays if isinstance(a, GraphTensor)]
    graph = tensors[0].graph
    value = np.concatenate([value_of(a) for a in arrays], axis=axis)
    axis = int(axis) % value.ndim
    batch_axes = {a.batch_axis if isinstance(a, GraphTensor) else None for a in arrays}
    if len(batch_axes) != 1:
        raise GraphError("np.concatenate of tensors with and without a batch axis (or with it at different places)")
    batch_axis = batch_axes.pop()
    if batch_axis is not None and axis == batch_axis:
        raise GraphError("np.concatenate along the batch axis is not recorded")
    source = tensors[0].source
    node = graph.node_name(f"{source}/Concat")
    inputs = [operand_name(graph, a, value.dtype, f"{node}/{i}") for i, a in enumerate(arrays)]
    out = graph.value_name(node)
    graph.add_node("Concat", inputs, [out], node, axis=axis)
    return GraphTensor(graph, out, value, batch_axis, source)


def _where(condition, x, y):
    operands = [condition, x, y]
    tensors = [a for a in operands if isinstance(a, GraphTensor)]
    graph = tensors[0].graph
    value = np.where(*(value_of(a) for a in operands))
    batch_axis = broadcast_batch_axis(operands, value.ndim)
    source = tensors[0].source
    node = graph.node_name(f"{source}/Where")
    inputs = [operand_name(graph, a, dtype, f"{node}/{role}")
              for a, dtype, role in ((condition, np.bool_, "condition"), (x, value.dtype, "x"), (y, value.dtype, "y"))]
    out = graph.value_name(node)
    graph.add_node("Where", inputs, [out], node)
    return GraphTensor(graph, out, value, batch_axis, source)


def _pad(array, pad_width, mode="constant", constant_values=0):
    """A constant Pad of a recorded tensor (the batch axis unpadded)."""
    if mode != "constant" or not isinstance(array, GraphTensor):
        raise GraphError(f"np.pad(mode={mode!r}) of a recorded tensor is not recorded (only a constant pad)")
    widths = [(int(a), int(b)) for a, b in np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (array.ndim, 2))]
    if array.batch_axis is not None and widths[array.batch_axis] != (0, 0):
        raise GraphError(f"{array.name}: np.pad along the batch axis is not recorded")
    value = np.pad(array.value, widths, constant_values=constant_values)
    fill = array.graph.constant(np.asarray(constant_values, array.dtype), f"{array.source}/Pad/value")
    pads = [a for a, _ in widths] + [b for _, b in widths]
    return array._result("Pad", [array.name, ("pads", pads), fill], value, array.batch_axis)


_FUNCTIONS = {np.concatenate: _concatenate, np.where: _where, np.pad: _pad,
              np.shape: lambda a: a.shape, np.ndim: lambda a: a.ndim,
              np.reshape: lambda a, shape, **kwargs: a.reshape(shape, **kwargs),
              np.transpose: lambda a, axes=None: a.transpose(axes),  # also np.permute_dims, the same function
              np.astype: lambda a, dtype, /, *, copy=True, device=None: a.astype(dtype)}
