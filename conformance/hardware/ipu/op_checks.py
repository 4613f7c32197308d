"""Op-level numerics checks of the ``ipu`` emulator against an independent oracle.

A numeric fault that barely moves a model's outputs (an FP8 scale one binade off inside F143's range, unbiased FP16
partials where FP32 ones are due, one op of the skip list quantized anyway) passes every gate on the outputs. These
checks run small probe computations through the ops the models use (:class:`IpuOps` ``add``, ``mul``, ``linear``,
built as the backend builds them for the precision: its policy, and for FP8 a plan with the model's own formats and
fixed scales) and compare every result with values computed here from the formats' definitions:

- FP16: numpy's IEEE float16 cast (round to nearest even) of the exact float64 result, the device's saturation
  (+-65504) in place of IEEE's overflow to infinity;
- F143 / F152: ml_dtypes' ``float8_e4m3fnuz`` / ``float8_e5m2fnuz`` casts (round to nearest even) of ``x * 2^-scale``,
  clipped to +-max first (the device saturates where ml_dtypes gives NaN);
- sums: float64 (exact for the probes' operands), and for half partials the accumulation written out block by block.

Nothing here calls ``conformance.numerics`` but for its ``DEFAULT_BLOCK`` constant (the K elements a half-partials
block sums in FP32: a model of the hardware, not a rounding). The probes:

- ``fp16_add`` / ``fp16_mul``: every finite FP16 value with a seeded permutation of them (overflow included), bit for
  bit;
- ``fp8_input`` (policies with FP8 inputs): ``linear(X, I)`` with an identity weight has one non-zero product per
  output, so it gives the device's q(X) exactly; X holds every FP16 value from a quarter of the format's smallest
  subnormal to a binade beyond its max (ties, subnormals, saturation), at each scale of :data:`PROBE_SCALES`; bit for
  bit (zeros of either sign are equal: FP8 has no -0);
- ``fp8_weight`` (policies with FP8 weights): ``linear(I, W)``, the same for the weight grid;
- ``accumulation``: ``linear(A, B)`` with K = 4096 positive operands on the operand grid, against the policy's partials
  (FP8 operands force half partials); an output more than :data:`ALLOWED_ULPS` FP16 ulps from the oracle is a mismatch;
- ``skip_list`` (FP8 policies whose model keeps ops in FP16, per the backend's table): each skip-listed op that the
  model run quantized (it has FP8 scales in the run) is a mismatch.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

from conformance.hardware.ipu.ops import Fp8Plan, IpuOps
from conformance.hardware.ipu.policy import PRECISIONS_FILE, Fp8Settings, Policy
from conformance.numerics import DEFAULT_BLOCK, FP8_FORMATS, format_info

F16_MAX = float(np.finfo(np.float16).max)
FP8_DTYPES = {fmt: getattr(ml_dtypes, format_info(fmt).dtype_name) for fmt in FP8_FORMATS}
# Scales the FP8 quantization probes run at (one plan each): low, middle and high, each with the format's whole grid
# (times 2^scale) inside FP16's range, so that the FP16 output of the probe's linear shows every quantized value
# exactly.
PROBE_SCALES = {"f143": (-3, 0, 4), "f152": (-6, -2, 0)}
# Columns of the identity the FP8 probes multiply by.
WIDTH = 64
# The accumulation probe: (ROWS x K) @ (K x COLS) with positive operands in [0.5, 1].
ACC_K, ACC_ROWS, ACC_COLS = 4096, 16, 16
# FP16 ulps an accumulated output may lie from the oracle, by partials. Float: the device's FP32 sum of 4096 products
# is not exact and may fall on the other side of a rounding boundary of the FP16 grid (0 ulps measured). Half: the
# device's FP32 block sums and its FP32 add before each rounding to FP16 are roundings the oracle's float64 ones are
# not; a rounding that goes the other way shifts the rest of the chain by an ulp (measured: 1 ulp with FP16 operands,
# 0 with F143 operands; FP16 partials where FP32 ones are due: up to 7 ulps off, 138 of the 256 outputs beyond 1).
ALLOWED_ULPS = {"float": 1, "half": 2}
SEED = 1867


# -- the oracle --------------------------------------------------------------------------------------------------------
def f16_saturating(x) -> np.ndarray:
    """``x`` (float64, exact) rounded to FP16 by numpy's IEEE cast (nearest even); finite values beyond the FP16 range
    saturate to +-65504 as the device's do (IEEE gives +-Inf)."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore"):
        r = x.astype(np.float16)
    overflow = np.isinf(r) & np.isfinite(x)
    if overflow.any():
        r[overflow] = np.copysign(F16_MAX, x[overflow]).astype(np.float16)
    return r


def fp8_value(x, fmt: str, scale: int) -> np.ndarray:
    """The values (float64) of ``x`` stored in FP8 format ``fmt`` at ``scale`` (d = q * 2^scale): ml_dtypes' cast of
    ``x * 2^-scale`` after clipping to +-max (the device saturates; ml_dtypes' fnuz types give NaN)."""
    dtype = FP8_DTYPES[fmt]
    top = float(ml_dtypes.finfo(dtype).max)
    scaled = np.clip(np.asarray(x, np.float64) * 2.0 ** -scale, -top, top)
    return scaled.astype(dtype).astype(np.float64) * 2.0**scale


def finite_f16() -> np.ndarray:
    """Every finite FP16 value (both zeros included), in bit-pattern order."""
    values = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    return values[np.isfinite(values)]


def fp8_probe_values(fmt: str, scale: int) -> np.ndarray:
    """The FP16 values (float16) an FP8 probe at ``scale`` quantizes: both zeros and every FP16 value with a magnitude
    from a quarter of the format's smallest subnormal (times 2^scale) up to a binade beyond its largest."""
    info = ml_dtypes.finfo(FP8_DTYPES[fmt])
    low = float(info.smallest_subnormal) * 2.0 ** (scale - 2)
    high = 2.0 ** (int(np.floor(np.log2(float(info.max)))) + 2 + scale)
    values = finite_f16()
    magnitude = np.abs(values.astype(np.float64))
    return values[(magnitude == 0) | ((magnitude >= low) & (magnitude < high))]


def f16_ordinal(x: np.ndarray) -> np.ndarray:
    """FP16 values (float16) as integers in value order: neighbours on the grid differ by 1 (+0 and -0 are 0)."""
    bits = x.view(np.uint16).astype(np.int64)
    return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)


def _blocked_half_sum(products: np.ndarray, block: int) -> np.ndarray:
    """Half partials written out: each block of ``block`` products summed exactly (float64) and rounded to FP32, then
    ``acc = fp16(acc + block_sum)`` in order, saturating."""
    k = products.shape[-1]
    sums = np.add.reduceat(products, np.arange(0, k, block), axis=-1).astype(np.float32)
    acc = np.zeros(products.shape[:-1], np.float64)
    for j in range(sums.shape[-1]):
        acc = f16_saturating(acc + sums[..., j]).astype(np.float64)
    return acc.astype(np.float16)


# -- comparing --------------------------------------------------------------------------------------------------------
def _show(v) -> str:
    return repr(float(v))


def _result(compared: int, bad: np.ndarray, inputs: tuple, expected: np.ndarray, got: np.ndarray, **extra) -> dict:
    """A probe's record: its mismatches, the values compared, and the first mismatch (inputs, expected, got)."""
    where = np.flatnonzero(bad)
    first = None
    if where.size:
        i = where[0]
        first = {"input": [_show(x[i]) for x in inputs], "expected": _show(expected[i]), "got": _show(got[i])}
    return {"mismatches": int(where.size), "compared": int(compared), "first_mismatch": first, **extra}


def _bit_mismatches(expected: np.ndarray, got: np.ndarray, *, zeros_equal: bool = False) -> np.ndarray:
    """Where ``got`` (float32) is not ``expected`` (float16) bit for bit as a float32 (a value off the FP16 grid, NaN
    and the other zero included; with ``zeros_equal``, zeros of either sign are equal)."""
    e = expected.astype(np.float32)
    g = np.asarray(got, np.float32)
    bad = e.view(np.uint32) != g.view(np.uint32)
    if zeros_equal:
        bad &= ~((e == 0) & (g == 0))
    return bad


# -- the probes -------------------------------------------------------------------------------------------------------
def _ops(policy: Policy, settings: Fp8Settings | None, input_scale: int = 0, weight_scale: int = 0) -> IpuOps:
    """The ops the backend builds for ``policy``; FP8 ones with the model's formats at fixed scales, nothing skipped."""
    if not policy.uses_fp8:
        return IpuOps(policy)
    fixed = dataclasses.replace(settings, scales="fixed", input_scale=int(input_scale), weight_scale=int(weight_scale),
                                skip=())
    return IpuOps(policy, fp8_plan=Fp8Plan(fixed))


def _elementwise(policy: Policy, settings: Fp8Settings | None, op: str) -> dict:
    a = finite_f16()
    b = a[np.random.default_rng([SEED, len(op)]).permutation(a.size)]
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    got = getattr(_ops(policy, settings), op)(a32, b32, name=f"op_checks.fp16_{op}")
    exact = {"add": np.add, "mul": np.multiply}[op](a.astype(np.float64), b.astype(np.float64))
    expected = f16_saturating(exact)
    return _result(a.size, _bit_mismatches(expected, got), (a32, b32), expected, got)


def _padded(values: np.ndarray) -> np.ndarray:
    """``values`` as float32 rows of WIDTH (zeros after the end)."""
    rows = -(-values.size // WIDTH)
    out = np.zeros(rows * WIDTH, np.float32)
    out[:values.size] = values
    return out.reshape(rows, WIDTH)


def _fp8_quantization(policy: Policy, settings: Fp8Settings, operand: str) -> dict:
    """``linear(X, I)`` (inputs) or ``linear(I, W)`` (weights) at each probe scale: the device's FP8 grid."""
    fmt = settings.input_format if operand == "input" else settings.weight_format
    identity = np.eye(WIDTH, dtype=np.float32)
    compared, bad, inputs, expected, got, scales = 0, [], [], [], [], []
    for scale in PROBE_SCALES[fmt]:
        x = fp8_probe_values(fmt, scale)
        matrix = _padded(x)
        if operand == "input":
            ops = _ops(policy, settings, input_scale=scale)
            y = ops.linear(matrix, identity, name="op_checks.fp8_input").reshape(-1)[:x.size]
        else:  # the weight (out, in) = matrix; linear gives I @ matrix.T
            ops = _ops(policy, settings, weight_scale=scale)
            y = ops.linear(identity, matrix, name="op_checks.fp8_weight").T.reshape(-1)[:x.size]
        want = fp8_value(x, fmt, scale).astype(np.float16)  # every FP8 value at these scales is an FP16 value
        compared += x.size
        bad.append(_bit_mismatches(want, y, zeros_equal=True))
        inputs.append(x.astype(np.float32))
        expected.append(want)
        got.append(np.asarray(y, np.float32))
        scales.append(np.full(x.size, scale))
    bad, inputs, expected, got, scales = map(np.concatenate, (bad, inputs, expected, got, scales))
    result = _result(compared, bad, (inputs,), expected, got, format=fmt, scales=list(PROBE_SCALES[fmt]))
    if result["first_mismatch"]:
        result["first_mismatch"]["scale"] = int(scales[np.flatnonzero(bad)[0]])
    return result


def _grid_values(fmt: str) -> np.ndarray:
    """The positive values in [0.5, 1] of ``fmt``'s grid at scale 0 (float64)."""
    if fmt == "f16":
        values = finite_f16().astype(np.float64)
    else:
        values = np.arange(256, dtype=np.uint8).view(FP8_DTYPES[fmt]).astype(np.float64)
    return np.unique(values[(values >= 0.5) & (values <= 1.0)])


def _accumulation(policy: Policy, settings: Fp8Settings | None) -> dict:
    """``linear(A, W)`` with K = ACC_K against the sum the policy's partials give (scales 0: the operands are on the
    grid)."""
    fp8 = policy.fp8
    a_format = settings.input_format if fp8 == "all" else "f16"
    w_format = settings.weight_format if fp8 in ("all", "weights") else "f16"
    partials = "half" if fp8 == "all" else policy.partials  # FP8 operands force half partials
    kernel_format = a_format  # the kernel sees FP8 operands only when both are (FP8 weights are widened to FP16)
    rng = np.random.default_rng([SEED, ACC_K])
    a = rng.choice(_grid_values(a_format), (ACC_ROWS, ACC_K))
    w = rng.choice(_grid_values(w_format), (ACC_COLS, ACC_K))
    got = _ops(policy, settings).linear(a.astype(np.float32), w.astype(np.float32), name="op_checks.accumulation")
    products = a[:, None, :] * w[None, :, :]  # exact in float64, and so are the sums of these operands
    if partials == "float":
        expected = f16_saturating(products.sum(axis=-1))
    else:
        expected = _blocked_half_sum(products, DEFAULT_BLOCK[kernel_format])
    got = np.asarray(got, np.float32)
    got16 = got.astype(np.float16)
    ulps = np.abs(f16_ordinal(got16) - f16_ordinal(expected))
    off_grid = got16.astype(np.float32) != got  # NaN included
    allowed = ALLOWED_ULPS[partials]
    bad = (off_grid | (ulps > allowed)).reshape(-1)
    rows = np.repeat(np.arange(ACC_ROWS), ACC_COLS)
    cols = np.tile(np.arange(ACC_COLS), ACC_ROWS)
    result = _result(got.size, bad, (rows, cols), expected.reshape(-1), got.reshape(-1), partials=partials,
                     operand_formats=[a_format, w_format], k=ACC_K, allowed_ulps=allowed,
                     max_ulps=int(np.max(np.where(off_grid, 0, ulps))))
    if result["first_mismatch"]:
        row, col = (int(float(v)) for v in result["first_mismatch"].pop("input"))
        result["first_mismatch"] = {"output": [row, col], **result["first_mismatch"]}
    return result


def _skip_list(settings: Fp8Settings, run_fp8_scales: dict) -> dict:
    quantized = [name for name in settings.skip if name in run_fp8_scales]
    first = None
    if quantized:
        first = {"input": [quantized[0]], "expected": "FP16 (skip list)",
                 "got": f"FP8 scales {run_fp8_scales[quantized[0]]}"}
    return {"mismatches": len(quantized), "compared": len(settings.skip), "first_mismatch": first,
            "quantized": quantized}


def op_checks(backend, model_name: str, precision: str, run_fp8_scales: dict | None) -> tuple[int, dict]:
    """The op-level checks of ``backend`` (the ipu backend) at ``precision`` with ``model_name``'s FP8 settings:
    (mismatches in all probes, per probe its mismatches, values compared and first mismatch). ``run_fp8_scales``: the
    FP8 scales the model's run used (op -> operand -> scale, ``IpuOps.scales_used``), needed when the model's FP8
    policy has a skip list."""
    policy = backend.policy(precision)
    settings = None
    if policy.uses_fp8:
        settings = backend.fp8_settings.get(model_name)
        if settings is None:
            raise ValueError(f"op checks of {model_name} at {precision}: {PRECISIONS_FILE.name} has no "
                             f"[fp8.{model_name}] table (models with FP8 settings: "
                             f"{', '.join(sorted(backend.fp8_settings))})")
    probes = {f"fp16_{op}": _elementwise(policy, settings, op) for op in ("add", "mul")}
    if policy.fp8 == "all":
        probes["fp8_input"] = _fp8_quantization(policy, settings, "input")
    if policy.uses_fp8:
        probes["fp8_weight"] = _fp8_quantization(policy, settings, "weight")
    probes["accumulation"] = _accumulation(policy, settings)
    if policy.uses_fp8 and settings.skip:
        if run_fp8_scales is None:
            raise ValueError(f"op checks of {model_name} at {precision}: the skip list of [fp8.{model_name}] in "
                             f"{PRECISIONS_FILE.name} is checked against the run's FP8 scales, and none were given")
        probes["skip_list"] = _skip_list(settings, run_fp8_scales)
    mismatches = sum(p["mismatches"] for p in probes.values())
    return mismatches, {"probes": probes}
