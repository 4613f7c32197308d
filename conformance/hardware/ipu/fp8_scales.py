"""FP8 scale calibration: per-tensor power-of-two scales for the operands of the matrix ops.

Poplar's convention is d = q * 2^scale (``conformance.numerics.quantize(x, fmt, scale=s)``), so a larger scale holds
larger values with coarser steps. Two methods, as PopRT/PopXL offer:

- ``amax``: the smallest scale whose largest finite value (240 * 2^s for F143, 57344 * 2^s for F152) holds the
  tensor's largest magnitude: nothing saturates, the small values lose the most;
- ``mse``: among the amax scale and the MSE_WINDOW scales below it, the one with the least mean squared quantisation
  error (saturation included) on the observed values; PopXL's host heuristic searches the legal scales the same way.
  Scales above the amax scale only coarsen the grid without saving any clipping, so they are never better.

Weight scales come from the weights themselves. Activation (input) scales come from running the model in FP32 on the
calibration set ``model.sample_inputs(n, seed=CALIBRATION_SEED)``, which is disjoint from the evaluation set
(EVAL_SEED), and observing every FP8 operand. That FP32 run is most of a calibration's cost (roformer's four 1024-token
sequences: about 9 s), so a run can keep the scales in a :class:`ScaleStore` between runs, keyed by what they are a
function of: the model with its weights, the settings, the calibration inputs and batch (and the suite's sources).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

from conformance.fileio import sha256_arrays
from conformance.numerics import FP8_FORMATS, SCALE_RANGE, format_info, quantize
from models import run_batched
from models.ops import Ops, sample_values
from models.seeds import CALIBRATION_SEED

SCALE_MIN, SCALE_MAX = SCALE_RANGE
# How many scales below the amax scale the MSE search tries: 8 binades of extra resolution for the small values.
MSE_WINDOW = 8
# Values per tensor the MSE search evaluates (a seeded sample of everything observed).
MSE_SAMPLE = 1 << 16
# Values kept per observed call (a seeded sample), so long calibration runs do not hold whole activations.
OBSERVE_PER_CALL = 1 << 13


OPERANDS = ("input", "a", "b")  # the observed operands: of linear and conv2d, and the two of matmul


class ScaleStore(Protocol):
    """Where calibrated input scales are kept between runs (``conformance.datasets.cache.ScaleCache``)."""

    def load(self, model, what: dict, check) -> dict | None:
        """The scales kept for ``model`` and ``what`` once ``check(scales)`` accepts them; None otherwise."""

    def save(self, model, what: dict, scales: dict) -> None:
        """Keep ``scales`` for ``model`` and ``what``."""


def check_scales(scales, settings) -> dict[str, dict[str, int]]:
    """``scales`` (op -> operand -> scale) as calibration makes them for ``settings``; a ValueError saying what is
    wrong (kept scales are read from a file: nothing in it is believed)."""
    if not isinstance(scales, dict):
        raise ValueError(f"scales: expected an object of ops, got {type(scales).__name__}")
    for op, operands in scales.items():
        if not isinstance(op, str) or op in settings.skip:
            why = "an op of the skip list" if op in settings.skip else "not an op name"
            raise ValueError(f"scales: {str(op)[:80]!r} is {why}")
        if not isinstance(operands, dict) or not operands or not set(operands) <= set(OPERANDS):
            raise ValueError(f"scales of {op[:80]!r}: expected operands among {', '.join(OPERANDS)}")
        for operand, scale in operands.items():
            if type(scale) is not int or not SCALE_MIN <= scale <= SCALE_MAX:
                raise ValueError(f"scale of {op[:80]!r} {operand}: {str(scale)[:40]}, expected an integer in "
                                 f"[{SCALE_MIN}, {SCALE_MAX}]")
    return scales


def _fp8_max(fmt: str) -> float:
    if fmt not in FP8_FORMATS:
        raise ValueError(f"unknown FP8 format {fmt!r}; expected one of: {', '.join(FP8_FORMATS)}")
    return format_info(fmt).max_value


def amax_scale(amax: float, fmt: str) -> int:
    """The smallest scale s in [-32, 31] with ``max(fmt) * 2^s >= amax``; 0 for an all-zero (or non-finite) tensor."""
    top = _fp8_max(fmt)
    amax = float(amax)
    if not np.isfinite(amax) or amax <= 0.0:
        return 0
    s = int(np.ceil(np.log2(amax / top)))
    if top * 2.0 ** (s - 1) >= amax:  # guard log2 rounding at exact powers of two
        s -= 1
    return int(np.clip(s, SCALE_MIN, SCALE_MAX))


def mse_scale(values, fmt: str, amax: float | None = None, window: int = MSE_WINDOW) -> int:
    """The scale among ``amax_scale - window .. amax_scale`` (clipped to [-32, 31]) with the least mean squared error of
    ``quantize(values, fmt, scale=s)`` (saturating); ties go to the larger scale (less clipping)."""
    values = sample_values(values, MSE_SAMPLE)
    if amax is None:
        amax = float(np.max(np.abs(values))) if values.size else 0.0
    top = amax_scale(amax, fmt)
    if amax <= 0.0 or not np.isfinite(amax):
        return top
    best, best_err = top, np.inf
    v64 = values.astype(np.float64)
    for s in range(top, max(top - window, SCALE_MIN) - 1, -1):
        err = float(np.mean((quantize(values, fmt, scale=s).astype(np.float64) - v64) ** 2))
        if err < best_err:
            best, best_err = s, err
    return best


def choose_scale(x, fmt: str, method: str) -> int:
    """The scale of tensor ``x`` by ``method`` ("amax" or "mse")."""
    amax = float(np.max(np.abs(x))) if np.size(x) else 0.0
    if method == "amax":
        return amax_scale(amax, fmt)
    if method == "mse":
        return mse_scale(x, fmt, amax=amax)
    raise ValueError(f"unknown scale method {method!r}; expected 'amax' or 'mse' ('fixed' scales come from the data)")


class _OperandStats:
    def __init__(self):
        self.amax = 0.0
        self.pieces: list[np.ndarray] = []

    def add(self, x: np.ndarray) -> None:
        if x.size:
            self.amax = max(self.amax, float(max(np.max(x), -np.min(x))))  # max |x| without an |x| copy of x
            self.pieces.append(sample_values(x, OBSERVE_PER_CALL))

    def values(self) -> np.ndarray:
        return np.concatenate(self.pieces) if self.pieces else np.zeros(0, np.float32)


class OperandObserver(Ops):
    """FP32 ops that observe the activation operands of the FP8 matrix ops (linear and conv2d inputs, both matmul
    operands); ops named in ``skip`` stay FP16 and are not observed."""

    def __init__(self, skip=(), recorder=None):
        super().__init__(recorder=recorder)
        self.skip = frozenset(skip)
        self.stats: dict[str, dict[str, _OperandStats]] = {}
        self.ops_seen: set[str] = set()

    def _observe(self, name: str, operand: str, x) -> None:
        if name not in self.skip:
            self.stats.setdefault(name, {}).setdefault(operand, _OperandStats()).add(np.asarray(x))

    def _emit(self, name, y):
        self.ops_seen.add(name)
        return super()._emit(name, y)

    def linear(self, x, weight, bias=None, *, name):
        self._observe(name, "input", x)
        return super().linear(x, weight, bias, name=name)

    def matmul(self, a, b, *, name):
        self._observe(name, "a", a)
        self._observe(name, "b", b)
        return super().matmul(a, b, name=name)

    def conv2d(self, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, name):
        self._observe(name, "input", x)
        return super().conv2d(x, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups, name=name)

    def scales(self, fmt: str, method: str) -> dict[str, dict[str, int]]:
        out = {}
        for op, operands in self.stats.items():
            out[op] = {}
            for operand, st in operands.items():
                if method == "amax":
                    out[op][operand] = amax_scale(st.amax, fmt)
                elif method == "mse":
                    out[op][operand] = mse_scale(st.values(), fmt, amax=st.amax)
                else:
                    raise ValueError(f"unknown scale method {method!r}; expected 'amax' or 'mse'")
        return out


def calibration_inputs(model, count: int) -> dict[str, np.ndarray]:
    """The first ``count`` samples of the model's calibration set (disjoint from the evaluation set)."""
    return model.sample_inputs(count, seed=CALIBRATION_SEED)


def calibrate_inputs(model, settings, *, batch_size: int = 4, samples: int | None = None, inputs=None,
                     store: ScaleStore | None = None, say=None):
    """Input scales of every FP8 matrix op of ``model`` (op -> operand -> scale) by ``settings.scales`` on the
    calibration set (or on ``inputs``, e.g. real text disjoint from the evaluation text), and a description of the
    calibration for the report; read from ``store`` when it keeps them, else calibrated (and kept there), which
    ``say(line)`` announces as it starts. Skip-list names the model never calls are an error (a typo in
    precisions.toml would otherwise silently run the op in FP8)."""
    if inputs is None:
        count = samples or settings.calibration_samples
        inputs = calibration_inputs(model, count)
        source = {"samples": count, "seed": CALIBRATION_SEED}
    else:
        count = len(next(iter(inputs.values())))
        source = {"samples": count, "seed": None, "inputs": "given"}
    info = {"method": settings.scales, "format": settings.input_format, **source}
    batch = max(1, min(batch_size, count))  # part of the key: BLAS may sum another batch's products in another order
    what = {"settings": dataclasses.asdict(settings), "inputs": sha256_arrays(inputs), "batch_size": batch}
    if store is not None:
        kept = store.load(model, what, lambda scales: check_scales(scales, settings))
        if kept is not None:
            return kept, info
    if say is not None:
        kept = " (kept in the cache for later runs)" if store is not None else ""
        say(f"{model.name}: calibrating the FP8 input scales on {count} samples in FP32{kept}")
    observer = OperandObserver(skip=settings.skip)
    run_batched(model, inputs, batch, observer)
    unknown = sorted(set(settings.skip) - observer.ops_seen)
    if unknown:
        raise ValueError(
            f"precisions.toml [fp8.{model.name}].skip names op(s) {unknown} that {model.name} never calls; "
            f"matrix ops it calls include: {', '.join(sorted(observer.stats)[:5])} ..."
        )
    scales = observer.scales(settings.input_format, settings.scales)
    if store is not None:
        store.save(model, what, scales)
    return scales, info
