"""The ``ipu`` hardware: the models' ops computed with the Graphcore IPU's FP16/FP8 numerics (``conformance.numerics``).

No IPU exists here; this backend emulates what one computes. The precisions are named policies kept as data in
``precisions.toml`` (storage format, matmul/conv partials, which matrix-op operands go to FP8), and the per-model FP8
settings (formats, scale method, skip list) live there too. Models are never changed for precision: :class:`IpuOps`
overrides every op of :class:`~conformance.hardware.ops.Ops` and applies the policy:

- every tensor between ops is held in FP16 (``quantize(x, "f16")``: round to nearest even, finite overflow saturates);
- elementwise ops compute from FP16 operands and round the result to FP16 (through FP32, which for add/sub/mul is
  the correctly rounded FP16 result: 24 >= 2 * 11 + 2 bits); transcendental ones (GELU, sigmoid) use the same FP32
  functions as the FP32 reference, so their results differ from it by the FP16 rounding alone;
- layer/batch norms and softmax take FP32 statistics and give FP16 outputs; means accumulate in FP32;
- linear/matmul/conv2d run the ``conformance.numerics`` kernels with the policy's partials; at FP8 their operands are
  quantized to F143/F152 with per-tensor power-of-two scales (d = q * 2^scale), which forces half partials and an FP16
  result; ops on the model's skip list stay FP16.

Quantized weights are cached per ops object (the same arrays every call), as the device holds them after compilation.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from conformance.hardware.base import Backend, UnsupportedCombination
from conformance.hardware.ops import Ops, gelu_fp32, sigmoid_fp32

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PRECISIONS_FILE = Path(__file__).with_name("precisions.toml")

STORAGE_FORMATS = ("f16",)
PARTIALS = ("float", "half")
FP8_MODES = ("none", "weights", "all")
FP8_FORMATS = ("f143", "f152")
SCALE_METHODS = ("fixed", "amax", "mse")
# Ops PopRT runs in FP8 (Conv, MatMul, Gemm); every other op stays FP16 whatever the policy.
FP8_OPS = ("linear", "matmul", "conv2d")
# FP8 settings for cases that are not one of the six models (the MiniLM checkpoint: a BertModel without "bert.").
EXTRA_FP8_CASES = ("minilm",)


@dataclass(frozen=True)
class Policy:
    """One named precision of the ipu hardware (a ``[precisions.<name>]`` table)."""

    name: str
    description: str
    storage: str
    partials: str
    fp8: str

    @property
    def uses_fp8(self) -> bool:
        return self.fp8 != "none"


@dataclass(frozen=True)
class Fp8Settings:
    """A model's FP8 settings (a ``[fp8.<model>]`` table)."""

    model: str
    input_format: str = "f143"
    weight_format: str = "f143"
    scales: str = "mse"
    input_scale: int | None = None
    weight_scale: int | None = None
    calibration_samples: int = 4
    skip: tuple[str, ...] = ()

    def format_of(self, operand_class: str) -> str:
        return self.weight_format if operand_class == "weight" else self.input_format


def _check_choice(path, where: str, key: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{path}: {where}.{key} = {value!r}; expected one of: {', '.join(map(str, allowed))}")


@lru_cache(maxsize=None)
def load_precisions(path: Path = PRECISIONS_FILE) -> tuple[dict[str, Policy], dict[str, Fp8Settings]]:
    """The policies and per-model FP8 settings in ``path``, validated; a ValueError naming the table and key otherwise."""
    from models import MODEL_NAMES

    data = tomllib.loads(Path(path).read_text())
    unknown = sorted(set(data) - {"precisions", "fp8"})
    if unknown:
        raise ValueError(f"{path}: unknown top-level table(s) {unknown}; expected [precisions.*] and [fp8.*]")
    policies = {}
    for name, entry in data.get("precisions", {}).items():
        where = f"[precisions.{name}]"
        extra = sorted(set(entry) - {"description", "storage", "partials", "fp8"})
        if extra:
            raise ValueError(f"{path}: {where} has unknown key(s) {extra}")
        for key, allowed in (("storage", STORAGE_FORMATS), ("partials", PARTIALS), ("fp8", FP8_MODES)):
            if key not in entry:
                raise ValueError(f"{path}: {where} lacks {key!r} (one of: {', '.join(allowed)})")
            _check_choice(path, where, key, entry[key], allowed)
        policies[name] = Policy(name, entry.get("description", ""), entry["storage"], entry["partials"], entry["fp8"])
    if not policies:
        raise ValueError(f"{path}: no [precisions.*] tables")
    fp8 = {}
    fields = set(Fp8Settings.__dataclass_fields__) - {"model"}
    for model, entry in data.get("fp8", {}).items():
        where = f"[fp8.{model}]"
        if model not in MODEL_NAMES + EXTRA_FP8_CASES:
            raise ValueError(f"{path}: {where}: unknown model {model!r}; expected one of: "
                             f"{', '.join(MODEL_NAMES + EXTRA_FP8_CASES)}")
        extra = sorted(set(entry) - fields)
        if extra:
            raise ValueError(f"{path}: {where} has unknown key(s) {extra}; valid: {', '.join(sorted(fields))}")
        settings = Fp8Settings(model=model, **{k: (tuple(v) if k == "skip" else v) for k, v in entry.items()})
        _check_choice(path, where, "input_format", settings.input_format, FP8_FORMATS)
        _check_choice(path, where, "weight_format", settings.weight_format, FP8_FORMATS)
        _check_choice(path, where, "scales", settings.scales, SCALE_METHODS)
        if settings.scales == "fixed":
            for key in ("input_scale", "weight_scale"):
                value = getattr(settings, key)
                if not isinstance(value, int) or not -32 <= value <= 31:
                    raise ValueError(f"{path}: {where}.{key} = {value!r}; scales='fixed' needs an integer in [-32, 31]")
        if not isinstance(settings.calibration_samples, int) or settings.calibration_samples < 1:
            raise ValueError(f"{path}: {where}.calibration_samples = {settings.calibration_samples!r}; expected an integer >= 1")
        fp8[model] = settings
    return policies, fp8


def _numerics():
    import conformance.numerics as numerics

    return numerics


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

    hardware = "ipu"

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
        self._num = _numerics()

    # -- FP16 grid -----------------------------------------------------------------------------------------------
    def round_f16(self, x) -> np.ndarray:
        """``x`` rounded to FP16 (RNE, saturating) as a new float32 array."""
        return self._num.quantize(np.asarray(x, np.float32), "f16")

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
        return False

    def _f16(self, x) -> np.ndarray:
        """An activation operand on the FP16 grid (quantized unless this object produced it)."""
        if self._on_grid(x):
            return x
        return self.round_f16(x)

    def _out(self, name: str, y, *, on_grid: bool = False) -> np.ndarray:
        """Round an op's freshly computed result to FP16 (in place when it is a C-contiguous float32 array: the op's
        temporary is not seen by anyone else), remember it as on-grid, and pass it to the recorder. ``on_grid``: the
        kernels already rounded it (a second rounding would change nothing)."""
        self.ops_seen.add(name)
        if not on_grid:
            if isinstance(y, np.ndarray) and y.dtype == np.float32 and y.flags.c_contiguous and y.flags.writeable:
                self._num.round_inplace(y, "f16")
            else:
                y = self.round_f16(y)
        return self._emit(name, self._mark(y))

    def _param(self, x, what, make):
        """A parameter's device form, computed once per array (weights are the same arrays every call). Views made
        afresh each call (``w.reshape(...)``) are keyed by the array owning the memory, their offset and layout."""
        owner = x
        while isinstance(owner, np.ndarray) and owner.base is not None:
            owner = owner.base
        if isinstance(x, np.ndarray):
            key = (id(owner), x.__array_interface__["data"][0], x.shape, x.strides, x.dtype.str, what)
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
        from conformance.calibration import choose_scale

        settings = self.fp8_plan.settings
        fmt = settings.weight_format

        def make(x):
            scale = settings.weight_scale if settings.scales == "fixed" else choose_scale(x, fmt, settings.scales)
            return int(scale), self._num.quantize(np.asarray(x, np.float32), fmt, scale=int(scale))

        scale, q = self._param(w, f"fp8:{fmt}:{settings.scales}", make)
        self._record_scale(name, "weight", scale)
        return q

    def _fp8_input(self, name: str, operand: str, x: np.ndarray) -> np.ndarray:
        fmt = self.fp8_plan.settings.input_format
        scale = self.fp8_plan.input_scale(name, operand)
        self._record_scale(name, operand, scale)
        return self._num.quantize(np.asarray(x, np.float32), fmt, scale=scale)

    # -- matrix units --------------------------------------------------------------------------------------------
    def _weight_operand(self, name: str, w: np.ndarray, fp8: str) -> np.ndarray:
        if fp8 == "all":
            return self._fp8_weight(name, w)
        if fp8 == "weights":  # stored in FP8, widened to FP16 on the device (exact unless below FP16's subnormals)
            q = self._fp8_weight(name, w)
            return self._param(q, "f16", self.round_f16)
        return self._param_f16(w)

    def _add_bias(self, y: np.ndarray, bias, shape) -> np.ndarray:
        """``y + bias`` in FP32 (rounded by :meth:`_out`); ``y`` itself, already on the FP16 grid, without a bias."""
        if bias is None:
            return y
        return np.add(y, self._param_f16(bias).reshape(shape), out=y)

    def linear(self, x, weight, bias=None, *, name):
        fp8 = self._fp8_operands(name)
        lead = x.shape[:-1]
        x2 = self._f16(x).reshape(-1, x.shape[-1])
        if fp8 == "all":
            x2 = self._fp8_input(name, "input", x2)
        w = self._weight_operand(name, weight, fp8)
        w_t = self._param(w, "transposed", lambda v: np.ascontiguousarray(v.T))  # (in, out): the kernel's b
        y = _kernels.matmul(self._num, x2, w_t, partials=self.policy.partials, fp8=self._fp8_format(fp8))
        y = self._add_bias(y, bias, (1, -1))
        return self._out(name, y.reshape(*lead, weight.shape[0]), on_grid=bias is None)

    def matmul(self, a, b, *, name):
        fp8 = self._fp8_operands(name)
        a, b = self._f16(a), self._f16(b)
        if fp8 == "all":  # both operands are activations: FP8 only when inputs are
            a = self._fp8_input(name, "a", a)
            b = self._fp8_input(name, "b", b)
        y = _kernels.matmul(self._num, a, b, partials=self.policy.partials, fp8=self._fp8_format(fp8))
        return self._out(name, y, on_grid=True)

    def conv2d(self, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, name):
        fp8 = self._fp8_operands(name)
        x = self._f16(x)
        if fp8 == "all":
            x = self._fp8_input(name, "input", x)
        w = self._weight_operand(name, weight, fp8)
        y = _kernels.conv2d(self._num, x, w, stride=stride, padding=padding, dilation=dilation, groups=groups,
                            partials=self.policy.partials, fp8=self._fp8_format(fp8))
        y = self._add_bias(y, bias, (1, -1, 1, 1))
        return self._out(name, y, on_grid=bias is None)

    # -- data entering the device ------------------------------------------------------------------------------
    def input(self, x, *, name):
        return self._out(name, np.array(x, np.float32))  # a copy: the caller's array is not rounded

    def embedding(self, table, ids, *, name):
        self.ops_seen.add(name)
        rows = np.take(self._param_f16(table), ids, axis=0)  # a Gather of FP16 rows: exact
        return self._emit(name, self._mark(rows))

    # -- elementwise: FP16 operands, FP32 arithmetic, FP16 result ----------------------------------------------
    def add(self, a, b, *, name):
        return self._out(name, np.add(self._f16(a), self._f16(b), dtype=np.float32))

    def sub(self, a, b, *, name):
        return self._out(name, np.subtract(self._f16(a), self._f16(b), dtype=np.float32))

    def mul(self, a, b, *, name):
        return self._out(name, np.multiply(self._f16(a), self._f16(b), dtype=np.float32))

    def relu(self, x, *, name):
        self.ops_seen.add(name)
        return self._emit(name, self._mark(np.maximum(self._f16(x), np.float32(0))))  # exact on the grid

    def gelu(self, x, *, approximate="none", name):
        return self._out(name, gelu_fp32(self._f16(x), approximate))

    def sigmoid(self, x, *, name):
        return self._out(name, sigmoid_fp32(self._f16(x)))

    def silu(self, x, *, name):
        x = self._f16(x)
        return self._out(name, np.multiply(x, sigmoid_fp32(x), dtype=np.float32))

    def tanh(self, x, *, name):
        return self._out(name, np.tanh(self._f16(x)))

    def glu(self, x, *, axis, name):
        a, b = np.split(self._f16(x), 2, axis=axis)
        return self._out(name, np.multiply(a, sigmoid_fp32(b), dtype=np.float32))

    # -- norms and reductions: FP32 statistics, FP16 result ----------------------------------------------------
    def layer_norm(self, x, gamma, beta, *, eps, name):
        x = self._f16(x)
        mean = x.mean(axis=-1, keepdims=True, dtype=np.float32)
        centred = x - mean
        var = np.mean(centred * centred, axis=-1, keepdims=True, dtype=np.float32)
        y = centred / np.sqrt(var + np.float32(eps)) * self._param_f16(gamma) + self._param_f16(beta)
        return self._out(name, y)

    def batch_norm(self, x, mean, var, gamma, beta, *, eps, axis=1, name):
        def fold(_):
            # the running statistics and affine parameters are FP16 tensors; the folded scale/shift in FP32
            g, b, m, v = (self._param_f16(p) for p in (gamma, beta, mean, var))
            inv = (g / np.sqrt(v + np.float32(eps))).astype(np.float32)
            return inv, (b - m * inv).astype(np.float32)

        inv, shift = self._param(gamma, ("bn", id(mean), id(var), id(beta), float(eps)), fold)
        shape = [1] * x.ndim
        shape[axis] = -1
        return self._out(name, self._f16(x) * inv.reshape(shape) + shift.reshape(shape))

    def softmax(self, x, *, axis=-1, name):
        x = self._f16(x)
        e = np.subtract(x, x.max(axis=axis, keepdims=True), dtype=np.float32)
        np.exp(e, out=e)
        e /= e.sum(axis=axis, keepdims=True, dtype=np.float32)
        return self._out(name, e)

    def mean(self, x, *, axis, keepdims=False, name):
        return self._out(name, self._f16(x).mean(axis=axis, keepdims=keepdims, dtype=np.float32))

    def max_pool2d(self, x, *, kernel, stride, padding=0, name):
        self.ops_seen.add(name)
        y = _SILENT.max_pool2d(self._f16(x), kernel=kernel, stride=stride, padding=padding, name=name)
        return self._emit(name, self._mark(np.ascontiguousarray(y)))  # a max of grid values is on the grid


# FP32 reference ops without a recorder, for reusing exact ops (max pooling) inside IpuOps.
_SILENT = Ops()


class _Kernels:
    """Adapter from IpuOps to the ``conformance.numerics`` kernels: ``fp8`` names the FP8 format of the operands
    (None for FP16 operands); FP8 operands force half partials and an FP16 result inside the kernels."""

    @staticmethod
    def matmul(num, a, b, *, partials: str, fp8: str | None) -> np.ndarray:
        return num.matmul(a, b, partials=partials, operand_format=fp8 or "f16")

    @staticmethod
    def conv2d(num, x, w, *, stride, padding, dilation, groups, partials: str, fp8: str | None) -> np.ndarray:
        return num.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups, partials=partials,
                          operand_format=fp8 or "f16")


_kernels = _Kernels()


class IpuBackend(Backend):
    name = "ipu"
    description = "Graphcore IPU emulator: bit-exact FP16/FP8 numerics in numpy"

    def __init__(self, precisions_file: Path = PRECISIONS_FILE):
        self.policies, self.fp8_settings = load_precisions(precisions_file)
        self.precisions = tuple(self.policies)
        self._plans: dict[tuple, tuple[object, Fp8Plan]] = {}

    def policy(self, precision: str) -> Policy:
        self.check_precision(precision)
        return self.policies[precision]

    def supports(self, model_name: str, precision: str) -> None:
        policy = self.policy(precision)
        if policy.uses_fp8 and model_name not in self.fp8_settings:
            raise UnsupportedCombination(
                f"{model_name} at {precision}: no FP8 settings for {model_name!r} in {PRECISIONS_FILE.name} "
                f"(models with FP8 settings: {', '.join(sorted(self.fp8_settings))})"
            )

    def fp8_plan(self, model, precision: str, *, settings: Fp8Settings | None = None, batch_size: int = 4,
                 calibration_samples: int | None = None, calibration_inputs=None) -> Fp8Plan:
        """The FP8 plan of ``model``: its settings (``settings`` or the model's table) and input scales calibrated
        on the calibration set or ``calibration_inputs`` (cached per model object, shared by every FP8 precision;
        weight scales are computed from the weights when used)."""
        from conformance import calibration

        policy = self.policy(precision)
        settings = settings or self.fp8_settings.get(model.name)
        if settings is None:
            raise UnsupportedCombination(f"{model.name} at {precision}: no FP8 settings in {PRECISIONS_FILE.name}")
        needs_inputs = policy.fp8 == "all" and settings.scales != "fixed"
        key = (id(model), settings, needs_inputs, calibration_samples)
        hit = self._plans.get(key)
        if hit is not None and hit[0] is model and calibration_inputs is None:
            return hit[1]
        plan = Fp8Plan(settings)
        if needs_inputs:
            plan.input_scales, plan.calibration = calibration.calibrate_inputs(
                model, settings, batch_size=batch_size, samples=calibration_samples, inputs=calibration_inputs
            )
        else:
            plan.calibration = {"method": settings.scales, "inputs": "not calibrated: " + (
                "fixed input scale" if settings.scales == "fixed" else "activations stay FP16")}
        if calibration_inputs is None:  # plans from caller-given inputs are the caller's to keep
            self._plans[key] = (model, plan)
        return plan

    def make_ops(self, model, precision: str, *, recorder=None, fp8_plan: Fp8Plan | None = None, batch_size: int = 4,
                 **options) -> IpuOps:
        """The ops of ``model`` at ``precision``. FP8 precisions calibrate (or take ``fp8_plan``) first."""
        if options:
            raise TypeError(f"ipu make_ops: unknown option(s) {sorted(options)}")
        policy = self.policy(precision)
        if policy.uses_fp8 and fp8_plan is None:
            self.supports(model.name, precision)
            fp8_plan = self.fp8_plan(model, precision, batch_size=batch_size)
        return IpuOps(policy, fp8_plan=fp8_plan if policy.uses_fp8 else None, recorder=recorder)

    def versions(self) -> dict[str, str]:
        return {"numpy": np.__version__}
