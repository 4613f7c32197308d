"""Named numeric faults of the ``ipu`` emulator, injected on purpose to show which accuracy gates catch them.

Each :class:`Fault` says which precisions it applies to (:meth:`Fault.applies`) and injects itself as a context
manager: ``with FAULTS["f16-truncation"].inject() as injection: <run the model>``. Inside the block the emulator is
patched process-wide (every thread, the numerics' worker threads included); on exit every patched attribute is put
back, also when the block raises. One fault is active at a time: a second ``inject`` from another thread waits, one
nested in the same thread raises. ``injection.changed`` counts how often the fault acted (values, quantizations, ops;
``injection.unit`` says which), so a fault that never fired can be told from one the gates missed.

The faults:

- ``fp8-scale-off-by-one``: every FP8 scale (calibrated input scales, weight scales) one power of two too large (+1,
  at most 31): a grid twice as coarse, with twice the range;
- ``fp8-values-6pct-high``: every FP8-quantized operand value 6% too large (after quantization);
- ``f16-truncation`` / ``fp8-truncation``: every rounding onto the FP16 (resp. F143/F152) grid rounds toward zero
  instead of to nearest even; overflow is handled as before (saturation);
- ``half-partials``: matmul/conv accumulate in FP16 partials where the policy says FP32 (``fp16``);
- ``fp8-skip-ignored``: the matrix ops the model's FP8 policy keeps in FP16 (its skip list) quantized anyway, with
  input scales calibrated for them as for any other op;
- ``nan-on-overflow``: every saturating rounding (FP16 and FP8) gives NaN on overflow instead of +-max.

The rounding faults (truncation, NaN on overflow) replace ``formats._NearestRounding.span``, the one numpy pass every
round-to-nearest-even onto the FP16/F143/F152 grids goes through, and run the emulator on its numpy kernels
(``kernel_path("numpy")``; the compiled kernels give the same bits but do not go through that pass). The others patch
the emulator's objects: the numerics module as ``ops.py`` sees it (FP8 quantizations), ``IpuOps.__init__`` (the
policy's partials), ``IpuOps._fp8_operands`` and ``IpuBackend.fp8_plan`` (the skip list).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from conformance import numerics
from conformance.hardware.ipu import backend as ipu_backend
from conformance.hardware.ipu import ops as ipu_ops
from conformance.hardware.ipu.fp8_scales import FP8_FORMATS
from conformance.hardware.ipu.policy import Fp8Settings, Policy
from conformance.numerics import SCALE_RANGE, formats

# Elements per piece of the truncating pass (the rounding pass's own chunk: cache-sized).
_CHUNK = 1 << 17
# How much too large every FP8 value is under ``fp8-values-6pct-high``.
VALUE_ERROR = 1.06


@dataclass
class Injection:
    """One active fault: ``changed`` counts how often it acted, in ``unit``s (thread-safe)."""

    fault: "Fault"
    unit: str
    changed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, n) -> None:
        n = int(n)
        if n:
            with self._lock:
                self.changed += n


class _Patches:
    """Attributes set for the duration of a fault, put back in reverse order."""

    _ABSENT = object()  # a class attribute it inherits (put back by deleting the override)

    def __init__(self):
        self._saved: list[tuple[object, str, object]] = []

    def set(self, owner, name: str, value) -> None:
        before = owner.__dict__.get(name, self._ABSENT) if isinstance(owner, type) else getattr(owner, name)
        self._saved.append((owner, name, before))
        setattr(owner, name, value)

    def restore(self) -> None:
        while self._saved:
            owner, name, value = self._saved.pop()
            if value is self._ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


class _FaultLock:
    """One fault at a time in the process; nesting in one thread is an error (the patches would interleave)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.holder: Fault | None = None
        self._thread: int | None = None

    @contextlib.contextmanager
    def held(self, fault: "Fault"):
        if self._thread == threading.get_ident():
            raise RuntimeError(f"fault {fault.name!r} injected inside fault {self.holder.name!r}: faults do not nest")
        with self._lock:
            self.holder, self._thread = fault, threading.get_ident()
            try:
                yield
            finally:
                self.holder, self._thread = None, None


_LOCK = _FaultLock()


@dataclass(frozen=True)
class Fault:
    """A named numeric fault. ``precondition(policy, fp8_settings)`` gives the reason it does not apply (None: it
    does); ``install(patches, injection)`` patches the emulator; ``idle`` says what it means that the fault never
    acted on a run; ``numpy_path``: the emulator must run its numpy kernels for the patches to take effect."""

    name: str
    description: str
    unit: str
    idle: str
    precondition: Callable[[Policy, Fp8Settings | None], str | None]
    install: Callable[[_Patches, Injection], None]
    numpy_path: bool = False

    def applies(self, policy: Policy, fp8_settings: Fp8Settings | None = None) -> str | None:
        """Why this fault does not apply to a run at ``policy`` with the model's FP8 settings; None when it does."""
        return self.precondition(policy, fp8_settings)

    @contextlib.contextmanager
    def inject(self):
        """Patch the emulator for the block; yields the :class:`Injection` counting what the fault changed."""
        with _LOCK.held(self):
            injection = Injection(self, self.unit)
            patches = _Patches()
            with contextlib.ExitStack() as stack:
                stack.enter_context(numerics.arrays.use("numpy"))  # the faults patch the numpy emulator
                if self.numpy_path:
                    stack.enter_context(numerics.kernel_path("numpy"))
                stack.callback(patches.restore)
                self.install(patches, injection)
                yield injection


# -- when a fault applies ---------------------------------------------------------------------------------------------
def _always(policy: Policy, settings: Fp8Settings | None) -> str | None:
    return None


def _fp8(policy: Policy, settings: Fp8Settings | None) -> str | None:
    return None if policy.uses_fp8 else f"{policy.name} has no FP8 operands"


def _float_partials(policy: Policy, settings: Fp8Settings | None) -> str | None:
    if policy.uses_fp8:
        return f"{policy.name}: FP8 operands force half partials already"
    if policy.partials != "float":
        return f"{policy.name} accumulates in {policy.partials} partials already"
    return None


def _skip_list(policy: Policy, settings: Fp8Settings | None) -> str | None:
    reason = _fp8(policy, settings)
    if reason is None and settings is None:
        reason = f"{policy.name}: the model has no FP8 settings"
    if reason is None and not settings.skip:
        reason = f"the FP8 policy of {settings.model} keeps no op in FP16 (empty skip list in precisions.toml)"
    return reason


# -- FP8 quantizations as IpuOps makes them ---------------------------------------------------------------------------
class _FaultyNumerics:
    """``conformance.numerics`` as ``ops.py`` sees it during a fault: ``quantize`` replaced, the rest forwarded."""

    def __init__(self, quantize):
        self.quantize = quantize

    def __getattr__(self, name):
        return getattr(numerics, name)


def _install_scale_off_by_one(patches: _Patches, injection: Injection) -> None:
    def quantize(x, fmt, *, scale=0, **options):
        if fmt in FP8_FORMATS:
            injection.count(1)
            scale = min(int(scale) + 1, SCALE_RANGE[1])
        return numerics.quantize(x, fmt, scale=scale, **options)

    patches.set(ipu_ops, "numerics", _FaultyNumerics(quantize))


def _install_values_high(patches: _Patches, injection: Injection) -> None:
    def quantize(x, fmt, **options):
        q = numerics.quantize(x, fmt, **options)
        if fmt in FP8_FORMATS:
            injection.count(1)
            q *= np.float32(VALUE_ERROR)
        return q

    patches.set(ipu_ops, "numerics", _FaultyNumerics(quantize))


# -- the policy: partials and the skip list ---------------------------------------------------------------------------
def _install_half_partials(patches: _Patches, injection: Injection) -> None:
    original = ipu_ops.IpuOps.__init__

    def __init__(self, policy, **options):
        if not _float_partials(policy, None):
            injection.count(1)
            policy = dataclasses.replace(policy, partials="half")
        original(self, policy, **options)

    patches.set(ipu_ops.IpuOps, "__init__", __init__)


def _install_skip_ignored(patches: _Patches, injection: Injection) -> None:
    original_plan = ipu_backend.IpuBackend.fp8_plan
    original_operands = ipu_ops.IpuOps._fp8_operands
    skipped: set[str] = set()  # the names the models' skip lists hold

    def fp8_plan(self, model, precision, *, settings=None, **options):
        settings = settings or self.fp8_settings.get(model.name)
        if settings is not None and settings.skip:
            skipped.update(settings.skip)
            settings = dataclasses.replace(settings, skip=())  # calibrated and run as any other op
        return original_plan(self, model, precision, settings=settings, **options)

    def _fp8_operands(self, name):
        fp8 = original_operands(self, name)
        if fp8 != "none" and name in skipped:
            injection.count(1)
        return fp8

    patches.set(ipu_backend.IpuBackend, "fp8_plan", fp8_plan)
    patches.set(ipu_ops.IpuOps, "_fp8_operands", _fp8_operands)


# -- roundings: the numpy pass of round-to-nearest-even ---------------------------------------------------------------
def truncate_span(rounding, original, xs: np.ndarray, ys: np.ndarray) -> int:
    """Round flat ``xs`` into ``ys`` (may be the same array) toward zero onto the grid of ``rounding`` (a
    ``formats._NearestRounding``); ``original`` is its round-to-nearest pass. Returns how many finite values were off
    the grid (changed).

    On the container's bit pattern: a value at or above the grid's smallest normal keeps its sign, exponent and the
    format's mantissa bits (the lower bits cleared: ``floor(|x| / ulp) * ulp``, at most the format's max, which tops
    its binade); one below it is ``trunc(x / s) * s`` with ``s`` the subnormal spacing; one at or above
    ``2**(emax + scale + 1)`` (and +-Inf, NaN) is handled by ``original``: saturated, NaN or Inf as the overflow mode
    says. Zeros are signed as ``original`` signs them (FP8 and the kernels' partials have no -0)."""
    c, info, scale = rounding.container, rounding.info, rounding.scale
    low, high = rounding.constants[:2]  # bit patterns of 2**(emin + scale) and 2**(emax + scale)
    drop = c.bits((1 << (c.mantissa_bits - info.mantissa_bits)) - 1)
    overflow = c.bits(int(high) + (1 << c.mantissa_bits))  # 2**(emax + scale + 1)
    x_bits, y_bits = xs.view(c.uint_dtype), ys.view(c.uint_dtype)
    magnitude = x_bits & c.magnitude_mask
    unsigned_zero = not (info.has_inf and rounding.signed_zero)
    small = np.flatnonzero(magnitude < low if unsigned_zero else (magnitude < low) & (magnitude != 0))
    large = np.flatnonzero(magnitude >= overflow)
    x_small, x_large = xs[small], xs[large]  # copies, before ys (maybe xs itself) is written
    changed = np.count_nonzero(x_bits & drop) - np.count_nonzero(x_small.view(c.uint_dtype) & drop)
    changed -= np.count_nonzero(x_large.view(c.uint_dtype) & drop)
    np.bitwise_and(x_bits, ~drop, out=y_bits)
    if small.size:
        spacing = c.float_dtype(2.0 ** (info.emin + scale - info.mantissa_bits))
        t = np.trunc(x_small / spacing) * spacing  # exact: division by a power of two, then an integer multiple
        if unsigned_zero:
            t += c.float_dtype(0.0)  # -0.0 + 0.0 is +0
        ys[small] = t
        changed += np.count_nonzero(t != x_small)
    if large.size:
        y_large = np.empty_like(x_large)
        original(rounding, x_large, y_large)
        ys[large] = y_large
        changed += np.count_nonzero(np.isfinite(x_large))
    return int(changed)


def _install_truncation(formats_names: tuple[str, ...]) -> Callable[[_Patches, Injection], None]:
    def install(patches: _Patches, injection: Injection) -> None:
        original = formats._NearestRounding.span

        def span(self, xs, ys):
            if self.info.name not in formats_names:
                return original(self, xs, ys)
            changed = 0
            for start in range(0, xs.size, _CHUNK):  # cache-sized pieces, as the rounding pass itself runs
                stop = min(xs.size, start + _CHUNK)
                changed += truncate_span(self, original, xs[start:stop], ys[start:stop])
            injection.count(changed)

        patches.set(formats._NearestRounding, "span", span)

    return install


def _install_nan_on_overflow(patches: _Patches, injection: Injection) -> None:
    original = formats._NearestRounding.span
    variants: dict = {}
    lock = threading.Lock()

    def nan_variant(rounding):
        with lock:
            if rounding not in variants:
                variants[rounding] = dataclasses.replace(rounding, overflow="nan")
            return variants[rounding]

    def span(self, xs, ys):
        if self.overflow != "sat":
            return original(self, xs, ys)
        before = np.count_nonzero(np.isnan(xs))
        if not self.info.has_inf:  # FP8: +-Inf gives NaN in both modes
            before += np.count_nonzero(np.isinf(xs))
        original(nan_variant(self), xs, ys)
        injection.count(np.count_nonzero(np.isnan(ys)) - before)

    patches.set(formats._NearestRounding, "span", span)


FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("fp8-scale-off-by-one", "every FP8 scale (inputs and weights) one power of two too large (+1)",
          "FP8 quantizations", "no operand was quantized to FP8", _fp8, _install_scale_off_by_one),
    Fault("fp8-values-6pct-high", f"every FP8-quantized operand value {VALUE_ERROR - 1:.0%} too large",
          "FP8 quantizations", "no operand was quantized to FP8", _fp8, _install_values_high),
    Fault("f16-truncation", "every rounding to FP16 toward zero instead of to nearest even",
          "values off the grid, truncated", "every value was already on the FP16 grid", _always,
          _install_truncation(("f16",)), numpy_path=True),
    Fault("fp8-truncation", "every rounding to FP8 (F143/F152) toward zero instead of to nearest even",
          "values off the grid, truncated", "every FP8 operand was already on its grid", _fp8,
          _install_truncation(FP8_FORMATS), numpy_path=True),
    Fault("half-partials", "FP16 partials in matmul/conv where the policy says FP32",
          "ops objects with half partials", "no ops object took the policy", _float_partials, _install_half_partials),
    Fault("fp8-skip-ignored", "the ops of the model's FP8 skip list quantized to FP8 anyway",
          "skip-listed matrix ops run in FP8",
          "no op of the skip list is a matrix op (Conv/MatMul/Gemm), the only ops the emulator quantizes to FP8",
          _skip_list, _install_skip_ignored),
    Fault("nan-on-overflow", "NaN instead of saturation on overflow, in every FP16 and FP8 rounding",
          "values turned to NaN", "no value overflowed its format", _always, _install_nan_on_overflow,
          numpy_path=True),
)}
FAULT_NAMES = tuple(FAULTS)


def get_fault(name: str) -> Fault:
    """The fault called ``name``; ValueError listing the faults otherwise."""
    try:
        return FAULTS[name]
    except KeyError:
        raise ValueError(f"unknown fault {name!r}; expected one of: {', '.join(FAULT_NAMES)}") from None
