"""Why an accuracy gate failed: the error layer by layer.

The FP32 reference and the hardware run the same (worst) samples with a recorder on the ops; every op's output is
compared with its FP32 counterpart by name, giving the SNR of each layer's output in execution order. The error of a
healthy low-precision run grows slowly layer after layer; a broken op (a wrong FP8 scale, an overflow, a bad kernel)
shows as a sudden drop. :func:`first_jump` names the first op whose SNR falls more than JUMP_DB below the lowest SNR
of every op before it.

Recorders keep a seeded sample of each output's values (the same positions in both runs), so diagnosing a
1024-token RoFormer does not hold gigabytes of activations. FP32 values beyond the FP16 range (attention masks of
-3.4e38) are compared after saturation to +-65504, which is how any FP16 device holds them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from conformance.accuracy.metrics import snr_db
from conformance.numerics.arrays import host_array, library_of
from conformance.numerics.compiled import signed_error_sums
from models.ops import sample_values

# A drop of this many dB below the running minimum is a jump: 10 dB is a tenfold increase in error power in one op.
JUMP_DB = 10.0
FP16_MAX = 65504.0
# Below FP16's smallest normal the grid is absolute (subnormals): a value's rounding error there follows how the
# values crowd toward zero (a decaying tail such as a sigmoid's rounds to 0 more often than away), not the rounding
# mode, so the rounding-bias probe leaves those values out.
FP16_SMALLEST_NORMAL = 2.0 ** -14
# Values of each op's output kept by the recorders.
SUBSAMPLE = 1 << 15


class SubsampleRecorder:
    """Ops recorder that keeps, per op name (repeated names get ``#2``, ``#3``...), a sample of the output's values."""

    def __init__(self, subsample: int = SUBSAMPLE):
        self.subsample = subsample
        self.outputs: dict[str, np.ndarray] = {}
        self.order: list[str] = []
        self._calls: dict[str, int] = {}

    def __call__(self, name: str, y) -> None:
        n = self._calls.get(name, 0) + 1
        self._calls[name] = n
        key = name if n == 1 else f"{name}#{n}"
        self.outputs[key] = sample_values(y, self.subsample).astype(np.float64)
        self.order.append(key)


def _snr(ref: np.ndarray, hw: np.ndarray) -> float | None:
    """SNR in dB of two recorded outputs; None when the hardware output has non-finite values."""
    if ref.shape != hw.shape:
        return None
    ref = np.clip(ref, -FP16_MAX, FP16_MAX)
    if not np.all(np.isfinite(hw)):
        return None
    return float(snr_db(ref, hw))


def first_jump(layer_snr, jump_db: float = JUMP_DB) -> tuple[str | None, float]:
    """The first layer whose SNR is more than ``jump_db`` below the lowest SNR before it (a non-finite output is an
    infinite drop), and that drop in dB; when no layer drops that much, the layer with the largest drop (or None)."""
    running = None
    largest: tuple[str | None, float] = (None, 0.0)
    for name, snr in layer_snr:
        value = float("-inf") if snr is None else snr
        if running is not None:
            drop = running - value
            if drop >= jump_db:
                return name, drop
            if drop > largest[1]:
                largest = (name, drop)
        running = value if running is None else min(running, value)
    return largest


@dataclass
class Diagnosis:
    samples: list[int]
    layer_snr: list[tuple[str, float | None]]
    first_jump: str | None
    jump_db: float
    unmatched: list[str] = field(default_factory=list)  # hardware ops with no FP32 counterpart

    def details(self) -> dict:
        """For ``record_check(details=...)``: JSON-safe (None for a non-finite output's SNR)."""
        return {
            "layer_snr_db": [[name, None if snr is None else round(float(snr), 3)] for name, snr in self.layer_snr],
            "first_jump": self.first_jump,
            "first_jump_drop_db": round(float(self.jump_db), 3) if np.isfinite(self.jump_db) else None,
            "diagnosed_samples": self.samples,
        }

    def summary(self, lines: int = 6) -> str:
        """A few lines for a failure message: where the error jumps and the lowest-SNR layers."""
        if not self.layer_snr:
            return "layer-by-layer: no ops recorded"
        fmt = lambda s: "non-finite" if s is None else f"{s:.1f} dB"  # noqa: E731
        worst = sorted(self.layer_snr, key=lambda kv: float("-inf") if kv[1] is None else kv[1])[:lines]
        head = (f"layer-by-layer SNR vs FP32 on sample(s) {self.samples}: error jumps first at {self.first_jump!r} "
                f"(drop {self.jump_db:.1f} dB)" if self.first_jump else
                f"layer-by-layer SNR vs FP32 on sample(s) {self.samples}: no layer drops by {JUMP_DB:g} dB")
        return head + "; lowest: " + ", ".join(f"{n} {fmt(s)}" for n, s in worst)


def diagnose(model, inputs: dict, reference_ops_factory, hardware_ops_factory, samples) -> Diagnosis:
    """Run ``model`` on ``samples`` (indices into ``inputs``) with FP32 ops and hardware ops (each factory takes a
    recorder and returns an ops object) and compare every op's output."""
    samples = [int(i) for i in samples]
    batch = {k: v[samples] for k, v in inputs.items()}
    ref_rec, hw_rec = SubsampleRecorder(), SubsampleRecorder()
    model(batch, reference_ops_factory(ref_rec))
    with np.errstate(all="ignore"):
        model(batch, hardware_ops_factory(hw_rec))
    layer_snr = []
    unmatched = []
    for name in hw_rec.order:
        ref = ref_rec.outputs.get(name)
        if ref is None:
            unmatched.append(name)
            continue
        layer_snr.append((name, _snr(ref, hw_rec.outputs[name])))
    jump, drop = first_jump(layer_snr)
    return Diagnosis(samples, layer_snr, jump, drop, unmatched)


# -- rounding bias, op by op -----------------------------------------------------------------------------------------
PROBE_MIN_ELEMENTS = 4096
PROBE_INPUT_ELEMENTS = 4096  # input values the probe runs on (at least two samples): its ops then have many more
# Ops whose local error is the rounding of given values (the model's inputs, an embedding table's rows): it is fixed
# per value, and data with repeated values (wide&deep's bucketed features, repeated tokens) repeats it, so it need not
# average out (wide&deep's inputs measure 0.15 with correct rounding). The ops computing from them are probed.
UNPROBED_KINDS = ("input", "embedding")
OP_METHODS = ("input", "embedding", "linear", "matmul", "conv2d", "add", "sub", "mul", "div", "sqrt", "pow", "relu", "gelu", "sigmoid", "silu",
              "tanh", "glu", "layer_norm", "batch_norm", "softmax", "mean", "max_pool2d")


def _as_fp32(value):
    """An operand of the FP32 reference op: float arrays as float32 numpy arrays. Another library's arrays (the
    emulator's on ``--array``) come to the host, so that the reference is numpy's whatever library the hardware's ops
    computed on (the local errors are then numpy's wherever the hardware's results are)."""
    if library_of(value) is not None:
        value = host_array(value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return value.astype(np.float32, copy=False)
    return value


def _size(a) -> int:
    """The number of elements of an operand (an array of any library, or a scalar)."""
    return np.size(a) if library_of(a) is None else math.prod(a.shape)


class LocalErrorOps:
    """Ops that compute every op twice on the same inputs: with the hardware's ops (whose result the model goes on
    with) and with FP32 ops. The difference is the op's own (local) error, free of what earlier ops did: for each op,
    ``mean(e * sign(fp32)) / rms(e)`` measures how much of it shrinks (< 0) or grows (> 0) magnitudes. Rounding to
    nearest even is unbiased, so a correct emulator's local errors average out; truncation or a scale error does not."""

    def __init__(self, hardware_ops, reference_ops):
        self._hardware = hardware_ops
        self._reference = reference_ops
        self.bias: list[tuple[str, str, float, int]] = []  # (op kind, op name, local bias, elements) of erring ops

    def __getattr__(self, attr):
        if attr not in OP_METHODS:
            return getattr(self._hardware, attr)
        hardware_op, reference_op = getattr(self._hardware, attr), getattr(self._reference, attr)

        def op(*args, name, **kwargs):
            y = hardware_op(*args, name=name, **kwargs)
            with np.errstate(all="ignore"):
                exact = reference_op(*[_as_fp32(a) for a in args], name=name,
                                     **{k: _as_fp32(v) for k, v in kwargs.items()})
            if not any(_size(a) == 1 for a in args):  # see _record
                self._record(attr, name, host_array(exact), host_array(y))
            return y

        return op

    def _record(self, kind: str, name: str, exact: np.ndarray, y: np.ndarray) -> None:
        """Note the op's local bias. Not called for an op with a scalar operand (attention's ``x * head_dim**-0.5``):
        the hardware rounds the constant once, and that one rounding offsets every element alike (1/sqrt(32) in FP16
        is 0.01% low), which no number of elements averages out; it is the constant's representation, not the
        rounding of the results."""
        if exact.shape != y.shape:
            return
        signed, squares, count = signed_error_sums(y, exact, FP16_SMALLEST_NORMAL, FP16_MAX)
        if squares > 0.0:
            rms = float(np.sqrt(squares / count))
            self.bias.append((kind, name, signed / count / rms, count))


def rounding_bias(model, inputs: dict, hardware_ops, reference_ops, samples) -> tuple[float, dict[str, float], list]:
    """The local bias (see :class:`LocalErrorOps`) on ``samples``, summed up by :func:`summarise_bias`."""
    return summarise_bias(local_errors(model, inputs, hardware_ops, reference_ops, samples))


def local_errors(model, inputs: dict, hardware_ops, reference_ops, samples) -> list[tuple[str, str, float, int]]:
    """:attr:`LocalErrorOps.bias` of a run of ``samples`` (one batch)."""
    samples = [int(i) for i in samples]
    probe = LocalErrorOps(hardware_ops, reference_ops)
    with np.errstate(all="ignore"):
        model({k: v[samples] for k, v in inputs.items()}, probe)
    return probe.bias


def summarise_bias(per_op: list[tuple[str, str, float, int]]) -> tuple[float, dict[str, float], list]:
    """The local biases of a probe run (:attr:`LocalErrorOps.bias`) averaged over the ops of each kind (``linear``,
    ``add``, ``softmax``...) weighted by their elements: the largest in magnitude (signed), the bias of every kind,
    and the per-op values. Per kind, because a fault in one part of the emulator (FP8 operands: the matrix ops)
    biases every op of that kind while the other kinds stay unbiased; kinds with fewer than
    :data:`PROBE_MIN_ELEMENTS` erring elements are left out (a handful of errors, e.g. of weights rounded once, need
    not average out)."""
    kinds: dict[str, list[tuple[float, int]]] = {}
    for kind, _, b, n in per_op:
        if kind not in UNPROBED_KINDS:
            kinds.setdefault(kind, []).append((b, n))
    per_kind = {kind: float(np.average([b for b, _ in v], weights=[n for _, n in v]))
                for kind, v in kinds.items() if sum(n for _, n in v) >= PROBE_MIN_ELEMENTS}
    if not per_kind:
        return 0.0, {}, []
    worst = max(per_kind.values(), key=abs)
    return worst, per_kind, per_op
