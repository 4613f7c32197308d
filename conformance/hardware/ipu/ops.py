"""The ``ipu`` hardware's ops: the models' ops computed with the Graphcore IPU's FP16/FP8 numerics (``conformance.numerics``).

No IPU exists here; this backend emulates what one computes. The precisions are named policies kept as data in
``precisions.toml`` (storage format, matmul/conv partials, which matrix-op operands go to FP8), and the per-model FP8
settings (formats, scale method, skip list) live there too. Models are never changed for precision: :class:`IpuOps`
overrides every op of :class:`~models.ops.Ops` and applies the policy:

- every tensor between ops is held in FP16 (``quantize(x, "f16")``: round to nearest even, finite overflow saturates);
- elementwise ops compute from FP16 operands and round the result to FP16 (through FP32, which for add/sub/mul is
  the correctly rounded FP16 result: 24 >= 2 * 11 + 2 bits); transcendental ones (GELU, sigmoid) use the same FP32
  functions as the FP32 reference, so their results differ from it by the FP16 rounding alone;
- layer/batch norms and softmax take FP32 statistics and give FP16 outputs; means accumulate in FP32;
- linear/matmul/conv2d run the ``conformance.numerics`` kernels with the policy's partials; at FP8 their operands are
  quantized to F143/F152 with per-tensor power-of-two scales (d = q * 2^scale), which forces half partials and an FP16
  result; ops on the model's skip list stay FP16.

Quantized weights are cached per ops object (the same arrays every call), as the device holds them after compilation.

The ops compute in the library of their operands: numpy arrays with the numpy kernels, or the arrays of another
library (torch tensors, on the CPU or a GPU; ``--array``) on their device with the same roundings, the numerics taking
and returning that library's arrays. The accuracy run moves a batch's inputs there once and the model its parameters
(``Model.params_like``); only a recorder's copies come back to the host.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from conformance import numerics
from conformance.hardware.ipu import fp8_scales
from conformance.hardware.ipu.policy import Fp8Settings, Policy
from conformance.numerics.arrays import host_array, library_of
from models.ops import (Ops, _take_range, cumsum_fp32, gelu_fp32, instance_norm_fp32, interpolate_fp32, sigmoid_fp32,
                        window_sums)


def _foreign(*xs):
    """The library (:class:`conformance.numerics.arrays.ArrayLibrary`) of the first of ``xs`` that is another
    library's array than numpy's; None when numpy computes on all of them."""
    for x in xs:
        if x is not None and not isinstance(x, np.ndarray):
            library = library_of(x)
            if library is not None:
                return library
    return None


def _f16_scalar(v) -> float:
    """A constant operand (a numpy or Python scalar) beside arrays of another library, rounded to FP16 on the host as
    :func:`numerics.quantize` rounds (RNE of its float32 value, finite overflow saturating, +-Inf and NaN kept): a
    Python float, which the library's arithmetic takes as a float32 operand without a move."""
    v = np.float32(v)
    if np.isfinite(v):
        v = np.clip(v, np.float32(-65504), np.float32(65504))
    return float(np.float16(v))


def _reshape(x, shape):
    library = _foreign(x)
    return x.reshape(shape) if library is None else library.xp.reshape(x, tuple(shape))


# What each op of the contract computes on the IPU: the table docs/graphs.md shows (``ipu-conformance optable``).
# Only the matrix ops take FP8 operands; every other op takes FP16 operands.
_ROUNDED = "FP32 arithmetic of FP16 operands, the result rounded once to FP16"
_EXACT = "exact on FP16 operands (the result is an FP16 value): no rounding"
NUMERICS: dict[str, tuple[str, bool]] = {  # op -> (its FP16 numerics, whether its operands may be FP8)
    "input": ("rounded to FP16 as it enters the device", False),
    "embedding": ("a Gather of the table's FP16 rows: exact", False),
    "linear": ("matrix unit: the precision's partials (FP32 or FP16), FP16 result; FP8 weight (and input) "
               "operands under an FP8 policy", True),
    "matmul": ("matrix unit: as linear, both operands activations (FP8 only where inputs are)", True),
    "conv2d": ("matrix unit: as linear (1-D convolutions run as 2-D ones of height 1)", True),
    **{op: (_ROUNDED, False) for op in ("add", "sub", "mul", "div", "sqrt", "pow", "gelu", "sigmoid", "silu", "tanh",
                                        "glu", "exp", "log", "reciprocal", "mod", "hard_sigmoid", "hard_swish")},
    **{op: (_EXACT, False) for op in ("relu", "maximum", "minimum", "abs", "neg", "sign", "ceil", "floor",
                                      "max_pool2d")},
    "clip": ("exact on FP16 operands, the bounds rounded to FP16", False),
    "layer_norm": ("FP32 statistics, FP16 result", False),
    "batch_norm": ("statistics folded in FP32 from FP16 parameters, FP16 result", False),
    "instance_norm": ("FP32 statistics, FP16 result", False),
    "softmax": ("FP32 exponentials and sum, FP16 result", False),
    "mean": ("FP32 accumulation, FP16 result", False),
    "cumsum": ("FP32 accumulation, FP16 result", False),
    "sum": ("FP32 accumulation, FP16 result", False),
    "avg_pool2d": ("FP32 window sums and division, FP16 result", False),
    "interpolate": ("FP32 weighted sums of FP16 operands, FP16 result", False),
}

@dataclass
class Fp8Plan:
    """What an FP8 run uses: the model's settings and the calibrated input scales (op name -> operand -> scale).
    Weight scales are computed from the weights themselves when first used (or fixed)."""

    settings: Fp8Settings
    input_scales: dict[str, dict[str, int]] = field(default_factory=dict)
    calibration: dict = field(default_factory=dict)  # how the input scales were obtained (method, samples, seed)

    def input_scale(self, op: str, operand: str) -> int:
        if self.settings.scales == "fixed":
            return int(self.settings.input_scale)
        try:
            return self.input_scales[op][operand]
        except KeyError:
            raise KeyError(
                f"FP8 op {op!r} operand {operand!r} has no calibrated scale (calibrated ops: {len(self.input_scales)}); "
                "the model called an op the calibration run did not see"
            ) from None


class IpuOps(Ops):
    """The ops of one model at one precision on the emulated IPU. ``recorder`` sees every op's output (FP16 grid)."""

    takes_library_arrays = True  # its ops compute on another array library's arrays (the accuracy run moves inputs)

    def __init__(self, policy: Policy, *, fp8_plan: Fp8Plan | None = None, recorder=None):
        super().__init__(recorder=recorder)
        if policy.uses_fp8 and fp8_plan is None:
            raise ValueError(f"precision {policy.name!r} needs an FP8 plan (formats and scales)")
        self.policy = policy
        self.precision = policy.name
        self.fp8_plan = fp8_plan
        self.skip = frozenset(fp8_plan.settings.skip) if fp8_plan else frozenset()
        self.scales_used: dict[str, dict[str, int]] = {}  # op -> operand -> scale, as the run used them
        self.ops_seen: set[str] = set()
        self._params: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # (id, what) -> (array, its device form)
        self._grid: dict[int, weakref.ref] = {}  # ids of arrays this object produced (already on the FP16 grid)

    # -- FP16 grid -----------------------------------------------------------------------------------------------
    def round_f16(self, x) -> np.ndarray:
        """``x`` rounded to FP16 (RNE, saturating) as a new float32 array (of ``x``'s library)."""
        library = _foreign(x)
        if library is None:
            return numerics.quantize(np.asarray(x, np.float32), "f16")
        return numerics.quantize(library.xp.astype(x, library.xp.float32, copy=False), "f16")

    def _emit(self, name: str, y):
        """Every op's result passes here; a recorder gets it as a numpy array (moved to the host when it is another
        library's)."""
        if self.recorder is not None:
            self.recorder(name, y if isinstance(y, np.ndarray) else host_array(y))
        return y

    def _mark(self, y: np.ndarray) -> np.ndarray:
        key = id(y)
        self._grid[key] = weakref.ref(y, lambda _, key=key, grid=self._grid: grid.pop(key, None))
        return y

    def _on_grid(self, x) -> bool:
        """Whether ``x`` is (a view of) an array this object produced; numpy keeps the owner in ``.base``."""
        while isinstance(x, np.ndarray):
            ref = self._grid.get(id(x))
            if ref is not None and ref() is x:
                return True
            x = x.base
        library = _foreign(x)
        while library is not None and x is not None:  # another library's array and the one it views
            ref = self._grid.get(id(x))
            if ref is not None and ref() is x:
                return True
            x = library.base(x)
        return False

    def _f16(self, x) -> np.ndarray:
        """An activation operand on the FP16 grid (quantized unless this object produced it)."""
        if self._on_grid(x):
            return x
        return self.round_f16(x)

    def _f16_pair(self, a, b):
        """Two operands on the FP16 grid (:meth:`_f16`); beside an array of another library, a scalar constant as a
        Python float (:func:`_f16_scalar`) and a numpy array moved to that library."""
        library = _foreign(a, b)
        if library is None:
            return self._f16(a), self._f16(b)
        return tuple(self._f16(v) if library_of(v) is not None else _f16_scalar(v) if np.ndim(v) == 0
                     else self._f16(library.asarray(np.asarray(v, np.float32))) for v in (a, b))

    def _out(self, name: str, y, *, on_grid: bool = False) -> np.ndarray:
        """Round an op's freshly computed result to FP16 (in place when it is a C-contiguous float32 array: the op's
        temporary is not seen by anyone else), remember it as on-grid, and pass it to the recorder. ``on_grid``: the
        kernels already rounded it (a second rounding would change nothing)."""
        self.ops_seen.add(name)
        if not on_grid:
            if _foreign(y) is not None:
                y = self.round_f16(y)
            elif isinstance(y, np.ndarray) and y.dtype == np.float32 and y.flags.c_contiguous and y.flags.writeable:
                numerics.round_inplace(y, "f16")
            else:
                y = self.round_f16(y)
        return self._emit(name, self._mark(y))

    def _out_op(self, name: str, op: str, a, b, *, temporary: bool = False, round_a: bool = False) -> np.ndarray:
        """:meth:`_out` of ``a op b`` (float32 arithmetic, numpy broadcasting) with the op and the FP16 rounding in
        one pass (``numerics.round_op``: the same bits as the op followed by the rounding). ``temporary``: ``a`` is
        the op's own intermediate, written over when it is a C-contiguous float32 array of the result's shape.
        ``round_a``: ``a`` is rounded to FP16 first, in the same pass (a matmul's FP32 result before its bias)."""
        self.ops_seen.add(name)
        if _foreign(a, b) is not None:
            return self._emit(name, self._mark(numerics.round_op(op, a, b, "f16", round_a=round_a)))
        a = np.asarray(a)
        reuse = (temporary and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
                 and a.shape == np.broadcast_shapes(a.shape, np.shape(b)))
        y = numerics.round_op(op, a, b, "f16", out=a if reuse else None, round_a=round_a)
        return self._emit(name, self._mark(y))

    def _param(self, x, what, make):
        """A parameter's device form, computed once per array (weights are the same arrays every call). Views made
        afresh each call (``w.reshape(...)``) are keyed by the array owning the memory, their offset and layout."""
        owner = x
        while isinstance(owner, np.ndarray) and owner.base is not None:
            owner = owner.base
        library = None if isinstance(x, np.ndarray) else _foreign(x)
        if isinstance(x, np.ndarray):
            key = (id(owner), x.__array_interface__["data"][0], x.shape, x.strides, x.dtype.str, what)
        elif library is not None:
            owner, place = library.view_key(x)
            key = (*place, what)
        else:
            key = (id(owner), what)
        hit = self._params.get(key)
        if hit is not None and hit[0] is owner:
            return hit[1]
        value = make(x)
        self._params[key] = (owner, value)
        return value

    def _param_f16(self, x) -> np.ndarray:
        if x is None:
            return None
        return self._param(x, "f16", self.round_f16)

    # -- FP8 -------------------------------------------------------------------------------------------------------
    def _fp8_operands(self, name: str) -> str:
        """"none", "weights" or "all": which operands of matrix op ``name`` are FP8 under this policy."""
        if not self.policy.uses_fp8 or name in self.skip:
            return "none"
        return self.policy.fp8

    def _fp8_format(self, fp8: str) -> str | None:
        """The operand format the kernel sees: FP8 when both operands are FP8 (weights-only FP8 is widened to FP16
        on the device before the matmul, so the kernel sees FP16 operands)."""
        return self.fp8_plan.settings.input_format if fp8 == "all" else None

    def _record_scale(self, name: str, operand: str, scale: int) -> None:
        self.scales_used.setdefault(name, {})[operand] = int(scale)

    def _fp8_weight(self, name: str, w: np.ndarray) -> np.ndarray:
        """The weight on its FP8 grid (float32 values d = q * 2^scale), scale from the plan, cached."""
        settings = self.fp8_plan.settings
        fmt = settings.weight_format

        def make(x):
            library = _foreign(x)
            if library is None:
                x = np.asarray(x, np.float32)
            else:  # the scale from the host's copy (once per weight); the weight quantized on its device
                x = library.xp.astype(x, library.xp.float32, copy=False)
            scale = settings.weight_scale if settings.scales == "fixed" else fp8_scales.choose_scale(
                x if library is None else host_array(x), fmt, settings.scales)
            return int(scale), numerics.quantize(x, fmt, scale=int(scale))

        scale, q = self._param(w, f"fp8:{fmt}:{settings.scales}", make)
        self._record_scale(name, "weight", scale)
        return q

    def _fp8_input(self, name: str, operand: str, x: np.ndarray) -> np.ndarray:
        fmt = self.fp8_plan.settings.input_format
        scale = self.fp8_plan.input_scale(name, operand)
        self._record_scale(name, operand, scale)
        if _foreign(x) is not None:
            return numerics.quantize(x, fmt, scale=scale)
        return numerics.quantize(np.asarray(x, np.float32), fmt, scale=scale)

    # -- matrix units --------------------------------------------------------------------------------------------
    def _weight_operand(self, name: str, w: np.ndarray, fp8: str) -> np.ndarray:
        if fp8 == "all":
            return self._fp8_weight(name, w)
        if fp8 == "weights":  # stored in FP8, widened to FP16 on the device (exact unless below FP16's subnormals)
            q = self._fp8_weight(name, w)
            return self._param(q, "f16", self.round_f16)
        return self._param_f16(w)

    def _out_bias(self, name: str, y: np.ndarray, bias, shape, *, on_grid: bool = True) -> np.ndarray:
        """:meth:`_out` of ``y + bias`` (FP32 add, FP16 result, one fused pass); ``y`` itself without a bias.
        ``on_grid``: the kernels rounded ``y`` to FP16; else it is their FP32 result, rounded to FP16 here (in the
        bias's pass when there is one)."""
        if bias is None:
            return self._out(name, y, on_grid=on_grid)
        return self._out_op(name, "add", y, _reshape(self._param_f16(bias), shape), temporary=True,
                            round_a=not on_grid)

    def _defer_rounding(self, fp8: str, bias) -> bool:
        """Whether a matrix op's FP16 rounding is left to its bias add (one pass for both): FP32 partials only (half
        partials round inside the kernel)."""
        return bias is not None and self._fp8_format(fp8) is None and self.policy.partials == "float"

    def linear(self, x, weight, bias=None, *, name):
        fp8 = self._fp8_operands(name)
        lead = x.shape[:-1]
        x2 = _reshape(self._f16(x), (-1, x.shape[-1]))
        if fp8 == "all":
            x2 = self._fp8_input(name, "input", x2)
        w = self._weight_operand(name, weight, fp8)
        w_t = self._param(w, "transposed", _transposed)  # (in, out): the kernel's b
        defer = self._defer_rounding(fp8, bias)
        y = _kernels.matmul(x2, w_t, partials=self.policy.partials, fp8=self._fp8_format(fp8),
                            out_format=None if defer else "f16")
        return self._out_bias(name, _reshape(y, (*lead, weight.shape[0])), bias, (-1,), on_grid=not defer)

    def matmul(self, a, b, *, name):
        fp8 = self._fp8_operands(name)
        a, b = self._f16(a), self._f16(b)
        if fp8 == "all":  # both operands are activations: FP8 only when inputs are
            a = self._fp8_input(name, "a", a)
            b = self._fp8_input(name, "b", b)
        y = _kernels.matmul(a, b, partials=self.policy.partials, fp8=self._fp8_format(fp8))
        return self._out(name, y, on_grid=True)

    def conv2d(self, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, name):
        fp8 = self._fp8_operands(name)
        x = self._f16(x)
        if fp8 == "all":
            x = self._fp8_input(name, "input", x)
        w = self._weight_operand(name, weight, fp8)
        if fp8 == "all" or self.policy.partials == "half":  # the im2col matmul's layout, made once
            w = self._param(w, ("conv matrix", groups), lambda v: numerics.conv_weight_matrix(v, groups))
        defer = self._defer_rounding(fp8, bias)
        y = _kernels.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups,
                            partials=self.policy.partials, fp8=self._fp8_format(fp8),
                            out_format=None if defer else "f16")
        return self._out_bias(name, y, bias, (1, -1, 1, 1), on_grid=not defer)

    # -- data entering the device ------------------------------------------------------------------------------
    def input(self, x, *, name):
        library = _foreign(x)
        if library is not None:  # a new array: the caller's is not rounded
            return self._out(name, library.xp.astype(x, library.xp.float32, copy=True))
        return self._out(name, np.array(x, np.float32))  # a copy: the caller's array is not rounded

    def embedding(self, table, ids, *, name):
        self.ops_seen.add(name)
        if _foreign(table, ids) is not None:
            rows = _SILENT.embedding(self._param_f16(table), ids, name=name)
        else:
            rows = np.take(self._param_f16(table), ids, axis=0)  # a Gather of FP16 rows: exact
        return self._emit(name, self._mark(rows))

    # -- elementwise: FP16 operands, FP32 arithmetic, FP16 result ----------------------------------------------
    def _fp32(self, op: str, *operands, **options):
        """The FP32 op ``op`` (of :class:`~models.ops.Ops`) on arrays of another library than numpy's: the same
        float32 arithmetic as the numpy code beside each call, in the library's functions."""
        return getattr(_SILENT, op)(*operands, name="", **options)

    def add(self, a, b, *, name):
        return self._out_op(name, "add", *self._f16_pair(a, b))

    def sub(self, a, b, *, name):
        return self._out_op(name, "sub", *self._f16_pair(a, b))

    def mul(self, a, b, *, name):
        return self._out_op(name, "mul", *self._f16_pair(a, b))

    def div(self, a, b, *, name):
        # FP32 division of FP16 operands rounded once to FP16: IEEE FP16 division (FP32 holds the exact quotient's
        # FP16 rounding unchanged), as the IPU's f16 divide
        if _foreign(a, b) is not None:
            return self._out_op(name, "div", *self._f16_pair(a, b))
        return self._out(name, np.divide(self._f16(a), self._f16(b), dtype=np.float32))

    def sqrt(self, x, *, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("sqrt", self._f16(x)))
        return self._out(name, np.sqrt(self._f16(x)))

    def pow(self, x, exponent: float, *, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("pow", self._f16(x), exponent))
        return self._out(name, np.power(self._f16(x), np.float32(exponent)))

    def relu(self, x, *, name):
        self.ops_seen.add(name)
        if _foreign(x) is not None:
            return self._emit(name, self._mark(self._fp32("relu", self._f16(x))))  # exact on the grid
        return self._emit(name, self._mark(np.maximum(self._f16(x), np.float32(0))))  # exact on the grid

    def gelu(self, x, *, approximate="none", name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("gelu", self._f16(x), approximate=approximate))
        return self._out(name, gelu_fp32(self._f16(x), approximate))

    def sigmoid(self, x, *, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("sigmoid", self._f16(x)))
        return self._out(name, sigmoid_fp32(self._f16(x)))

    def silu(self, x, *, name):
        x = self._f16(x)
        if _foreign(x) is not None:
            return self._out_op(name, "mul", x, self._fp32("sigmoid", x))
        return self._out_op(name, "mul", x, sigmoid_fp32(x))

    def tanh(self, x, *, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("tanh", self._f16(x)))
        return self._out(name, np.tanh(self._f16(x)))

    def glu(self, x, *, axis, name):
        if _foreign(x) is not None:
            x = self._f16(x)
            half = x.shape[axis] // 2
            a, b = (_take_range(x, axis, start, start + half) for start in (0, half))
            return self._out_op(name, "mul", a, self._fp32("sigmoid", b))
        a, b = np.split(self._f16(x), 2, axis=axis)
        return self._out_op(name, "mul", a, sigmoid_fp32(b))

    # -- norms and reductions: FP32 statistics, FP16 result ----------------------------------------------------
    def layer_norm(self, x, gamma, beta, *, eps, name):
        x = self._f16(x)
        library = _foreign(x)
        if library is not None:
            xp = library.xp
            centred = x - xp.mean(x, axis=-1, keepdims=True)
            var = xp.mean(centred * centred, axis=-1, keepdims=True)
            scaled = centred / xp.sqrt(var + float(np.float32(eps))) * self._param_f16(gamma)
            return self._out_op(name, "add", scaled, self._param_f16(beta), temporary=True)
        mean = x.mean(axis=-1, keepdims=True, dtype=np.float32)
        centred = x - mean
        var = np.mean(centred * centred, axis=-1, keepdims=True, dtype=np.float32)
        scaled = centred / np.sqrt(var + np.float32(eps)) * self._param_f16(gamma)
        return self._out_op(name, "add", scaled, self._param_f16(beta), temporary=True)

    def batch_norm(self, x, mean, var, gamma, beta, *, eps, axis=1, name):
        def fold(_):
            # the running statistics and affine parameters are FP16 tensors; the folded scale/shift in FP32
            g, b, m, v = (self._param_f16(p) for p in (gamma, beta, mean, var))
            library = _foreign(g)
            if library is not None:  # folded once on the host (numpy's correctly rounded sqrt), then moved once
                g, b, m, v = (host_array(p) for p in (g, b, m, v))
            inv = (g / np.sqrt(v + np.float32(eps))).astype(np.float32)
            shift = (b - m * inv).astype(np.float32)
            return (inv, shift) if library is None else (library.asarray(inv), library.asarray(shift))

        inv, shift = self._param(gamma, ("bn", id(mean), id(var), id(beta), float(eps)), fold)
        shape = [1] * x.ndim
        shape[axis] = -1
        return self._out_op(name, "add", self._f16(x) * _reshape(inv, shape), _reshape(shift, shape), temporary=True)

    def softmax(self, x, *, axis=-1, name):
        x = self._f16(x)
        library = _foreign(x)
        if library is not None:
            xp = library.xp
            e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
            return self._out_op(name, "div", e, xp.sum(e, axis=axis, keepdims=True), temporary=True)
        e = np.subtract(x, x.max(axis=axis, keepdims=True), dtype=np.float32)
        np.exp(e, out=e)
        return self._out_op(name, "div", e, e.sum(axis=axis, keepdims=True, dtype=np.float32), temporary=True)

    def mean(self, x, *, axis, keepdims=False, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("mean", self._f16(x), axis=axis, keepdims=keepdims))
        return self._out(name, self._f16(x).mean(axis=axis, keepdims=keepdims, dtype=np.float32))

    def max_pool2d(self, x, *, kernel, stride, padding=0, name):
        self.ops_seen.add(name)
        y = _SILENT.max_pool2d(self._f16(x), kernel=kernel, stride=stride, padding=padding, name=name)
        if _foreign(y) is not None:
            return self._emit(name, self._mark(y))  # a max of grid values is on the grid
        return self._emit(name, self._mark(np.ascontiguousarray(y)))  # a max of grid values is on the grid

    # -- further ops of imported graphs ----------------------------------------------------------------------------
    def _exact(self, name: str, y) -> np.ndarray:
        """An op whose result of FP16 operands is itself on the FP16 grid (a selection, a sign change): no rounding."""
        self.ops_seen.add(name)
        library = _foreign(y)
        if library is not None:
            return self._emit(name, self._mark(library.xp.astype(y, library.xp.float32, copy=False)))
        return self._emit(name, self._mark(np.ascontiguousarray(y, np.float32)))

    def maximum(self, a, b, *, name):
        if _foreign(a, b) is not None:
            return self._exact(name, self._fp32("maximum", *self._f16_pair(a, b)))
        return self._exact(name, np.maximum(self._f16(a), self._f16(b)))

    def minimum(self, a, b, *, name):
        if _foreign(a, b) is not None:
            return self._exact(name, self._fp32("minimum", *self._f16_pair(a, b)))
        return self._exact(name, np.minimum(self._f16(a), self._f16(b)))

    def abs(self, x, *, name):
        if _foreign(x) is not None:
            return self._exact(name, self._fp32("abs", self._f16(x)))
        return self._exact(name, np.abs(self._f16(x)))

    def neg(self, x, *, name):
        if _foreign(x) is not None:
            return self._exact(name, self._fp32("neg", self._f16(x)))
        return self._exact(name, np.negative(self._f16(x)))

    def sign(self, x, *, name):
        if _foreign(x) is not None:
            return self._exact(name, self._fp32("sign", self._f16(x)))
        return self._exact(name, np.sign(self._f16(x)))

    def ceil(self, x, *, name):
        if _foreign(x) is not None:
            return self._exact(name, self._fp32("ceil", self._f16(x)))
        return self._exact(name, np.ceil(self._f16(x)))  # FP16 values of magnitude >= 1024 are integers

    def floor(self, x, *, name):
        if _foreign(x) is not None:
            return self._exact(name, self._fp32("floor", self._f16(x)))
        return self._exact(name, np.floor(self._f16(x)))

    def clip(self, x, low=None, high=None, *, name):
        y = self._f16(x)  # the bounds are FP16 tensors on the device
        if _foreign(y) is not None:
            bounds = [None if v is None else float(self.round_f16(np.float32(v))) for v in (low, high)]
            return self._exact(name, self._fp32("clip", y, *bounds))
        if low is not None:
            y = np.maximum(y, self.round_f16(np.float32(low)))
        if high is not None:
            y = np.minimum(y, self.round_f16(np.float32(high)))
        return self._exact(name, y)

    def exp(self, x, *, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("exp", self._f16(x)))
        with np.errstate(over="ignore"):
            return self._out(name, np.exp(self._f16(x)))

    def log(self, x, *, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("log", self._f16(x)))
        with np.errstate(divide="ignore", invalid="ignore"):
            return self._out(name, np.log(self._f16(x)))

    def reciprocal(self, x, *, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("reciprocal", self._f16(x)))
        with np.errstate(divide="ignore"):
            return self._out(name, np.reciprocal(self._f16(x)))

    def mod(self, a, b, *, name):
        if _foreign(a, b) is not None:  # fmod of FP16 operands is exact: no rounding changes it
            return self._out(name, self._fp32("mod", *self._f16_pair(a, b)))
        with np.errstate(invalid="ignore", divide="ignore"):  # fmod of FP16 operands is exact: no rounding changes it
            return self._out(name, np.fmod(self._f16(a), self._f16(b), dtype=np.float32))

    def hard_sigmoid(self, x, *, alpha, beta, name):
        return self._out(name, _SILENT.hard_sigmoid(self._f16(x), alpha=alpha, beta=beta, name=name))

    def hard_swish(self, x, *, name):
        return self._out(name, _SILENT.hard_swish(self._f16(x), name=name))

    def sum(self, x, *, axis, keepdims=False, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("sum", self._f16(x), axis=axis, keepdims=keepdims))
        return self._out(name, np.asarray(np.sum(self._f16(x), axis=axis, keepdims=keepdims, dtype=np.float32)))

    def cumsum(self, x, *, axis, exclusive=False, reverse=False, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("cumsum", self._f16(x), axis=axis, exclusive=exclusive, reverse=reverse))
        return self._out(name, cumsum_fp32(self._f16(x), axis, exclusive, reverse))

    def instance_norm(self, x, gamma, beta, *, eps, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("instance_norm", self._f16(x), self._param_f16(gamma),
                                              self._param_f16(beta), eps=eps))
        return self._out(name, instance_norm_fp32(self._f16(x), self._param_f16(gamma), self._param_f16(beta), eps))

    def interpolate(self, x, rows, cols, *, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("interpolate", self._f16(x), rows, cols))
        return self._out(name, interpolate_fp32(self._f16(x), rows, cols))

    def avg_pool2d(self, x, divisor, *, kernel, stride, name):
        if _foreign(x) is not None:
            return self._out(name, self._fp32("avg_pool2d", self._f16(x), divisor, kernel=kernel, stride=stride))
        return self._out(name, window_sums(self._f16(x), kernel, stride) / np.asarray(divisor, np.float32))


# Rows of a weight transposed at a time by _transposed: numpy's copy of a whole transposed view walks the source
# with a stride of a row per element (0.7 GB/s for a (3072, 768) float32 weight); 64 rows at a time stay in cache
# (3-4x faster, the same values).
_TRANSPOSE_ROWS = 64


def _transposed(w):
    """A linear weight (out, in) as the (in, out) C-ordered matrix the kernel takes as its ``b``."""
    library = _foreign(w)
    if library is None:
        w = np.asarray(w)
        out = np.empty((w.shape[1], w.shape[0]), w.dtype)
        for start in range(0, w.shape[0], _TRANSPOSE_ROWS):
            out[:, start:start + _TRANSPOSE_ROWS] = w[start:start + _TRANSPOSE_ROWS].T
        return out
    return library.contiguous(library.xp.permute_dims(w, (1, 0)))


# FP32 reference ops without a recorder, for reusing exact ops (max pooling) inside IpuOps.
_SILENT = Ops()


class _Kernels:
    """Adapter from IpuOps to the ``conformance.numerics`` kernels: ``fp8`` names the FP8 format of the operands
    (None for FP16 operands); FP8 operands force half partials and an FP16 result inside the kernels."""

    @staticmethod
    def matmul(a, b, *, partials: str, fp8: str | None, out_format: str | None = "f16") -> np.ndarray:
        return numerics.matmul(a, b, partials=partials, operand_format=fp8 or "f16", out_format=out_format)

    @staticmethod
    def conv2d(x, w, *, stride, padding, dilation, groups, partials: str, fp8: str | None,
               out_format: str | None = "f16") -> np.ndarray:
        return numerics.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups, partials=partials,
                               operand_format=fp8 or "f16", out_format=out_format)


_kernels = _Kernels()


