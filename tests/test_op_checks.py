"""The op-level checks of the ipu emulator: none fail on the correct emulator, each injected fault that applies fails
a probe, and the checks' oracle agrees with a second one written out from the formats' definitions (Python's own
IEEE half packing for FP16, the F143/F152 grids built from their bit fields for FP8)."""

from __future__ import annotations

import dataclasses
import struct

import ml_dtypes
import numpy as np
import pytest

from conformance.accuracy.evaluation import MetricSet, evaluate, measure_probes
from conformance.hardware import get_backend
from conformance.hardware.ipu import op_checks as checks
from conformance.hardware.ipu.backend import IpuBackend
from conformance.hardware.ipu.faults import FAULTS, get_fault
from conformance.targets import accuracy as accuracy_targets
from models import load_model
from models.seeds import EVAL_SEED

PRECISIONS = ("fp16", "fp16-half-partials", "fp8", "fp8-weights")
# A small resnet50 whose first bottleneck has the projection shortcut the FP8 skip list names.
SMALL_RESNET = dict(hidden_sizes=(16, 16, 16, 16), depths=(1, 1, 1, 1), embedding_size=8, image_size=64)


def _backend_with(model: str, **settings) -> IpuBackend:
    """An ipu backend whose FP8 settings of ``model`` are changed (a copy: the loaded tables stay as they are)."""
    backend = IpuBackend()
    backend.fp8_settings = dict(backend.fp8_settings)
    backend.fp8_settings[model] = dataclasses.replace(backend.fp8_settings[model], **settings)
    return backend


# -- the correct emulator ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["widedeep", "resnet50"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_correct_emulator_has_no_mismatches(model, precision):
    backend = get_backend("ipu")
    policy = backend.policy(precision)
    mismatches, details = backend.op_checks(model, precision, {"fp8_scales": {}})  # a run that quantized nothing
    probes = details["probes"]
    assert mismatches == 0, {k: p["first_mismatch"] for k, p in probes.items()}
    expected = {"fp16_add", "fp16_mul", "accumulation"}
    expected |= {"fp8_input"} if policy.fp8 == "all" else set()
    expected |= {"fp8_weight"} if policy.uses_fp8 else set()
    expected |= {"skip_list"} if policy.uses_fp8 and backend.fp8_settings[model].skip else set()
    assert set(probes) == expected
    assert probes["fp16_add"]["compared"] == 63488  # every finite FP16 value (65536 less 2048 Inf/NaN patterns)
    assert all(p["compared"] > 0 and p["first_mismatch"] is None for p in probes.values())
    accumulation = probes["accumulation"]
    assert accumulation["max_ulps"] <= accumulation["allowed_ulps"]
    assert accumulation["partials"] == ("half" if policy.fp8 == "all" else policy.partials)


@pytest.mark.parametrize("precision", ["fp8", "fp8-weights"])
def test_f152_operands_have_no_mismatches(precision):
    backend = _backend_with("widedeep", input_format="f152", weight_format="f152")
    mismatches, details = backend.op_checks("widedeep", precision, {})
    assert mismatches == 0, details
    assert details["probes"]["fp8_weight"]["format"] == "f152"


def test_fp8_without_settings_is_an_error_naming_the_file():
    backend = IpuBackend()
    backend.fp8_settings = {k: v for k, v in backend.fp8_settings.items() if k != "widedeep"}
    with pytest.raises(ValueError, match=r"precisions.toml has no \[fp8.widedeep\] table"):
        backend.op_checks("widedeep", "fp8", {})
    with pytest.raises(ValueError, match=r"none were given"):
        get_backend("ipu").op_checks("resnet50", "fp8", {})  # a run whose details have no FP8 scales


# -- the faults -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fault, precision, probe", [
    ("fp8-scale-off-by-one", "fp8", "fp8_input"),
    ("fp8-scale-off-by-one", "fp8", "fp8_weight"),
    ("fp8-scale-off-by-one", "fp8-weights", "fp8_weight"),
    ("fp8-values-6pct-high", "fp8", "fp8_input"),
    ("fp8-values-6pct-high", "fp8-weights", "fp8_weight"),
    ("f16-truncation", "fp16", "fp16_add"),
    ("f16-truncation", "fp8", "fp16_mul"),
    ("f16-truncation", "fp16-half-partials", "accumulation"),
    ("fp8-truncation", "fp8", "fp8_input"),
    ("fp8-truncation", "fp8-weights", "fp8_weight"),
    ("half-partials", "fp16", "accumulation"),
] + [("nan-on-overflow", precision, "fp16_add") for precision in PRECISIONS])
def test_each_fault_fails_a_probe(fault, precision, probe):
    backend = get_backend("ipu")
    assert FAULTS[fault].applies(backend.policy(precision), backend.fp8_settings["widedeep"]) is None
    with get_fault(fault).inject() as injection:
        mismatches, details = backend.op_checks("widedeep", precision, {})
    assert injection.changed > 0
    found = details["probes"][probe]
    assert found["mismatches"] > 0 and mismatches >= found["mismatches"], details
    first = found["first_mismatch"]
    assert first["expected"] != first["got"], first  # the failure explains itself


def test_half_partials_are_many_ulps_off_the_float_oracle():
    backend = get_backend("ipu")
    with get_fault("half-partials").inject():
        _, details = backend.op_checks("widedeep", "fp16", {})
    accumulation = details["probes"]["accumulation"]
    assert accumulation["partials"] == "float"
    assert accumulation["max_ulps"] > 2 * accumulation["allowed_ulps"], accumulation


def test_the_skip_list_is_checked_against_the_run_s_scales():
    """resnet50's FP8 policy keeps one conv in FP16: the correct run has no scales for it, the run with the skip list
    ignored quantizes it, and the probe counts it."""
    model = load_model("resnet50", **SMALL_RESNET)
    inputs = model.sample_inputs(1, seed=EVAL_SEED)
    backend = IpuBackend()
    skip = backend.fp8_settings["resnet50"].skip
    assert skip

    def run_details():
        prepared = backend.prepare(model, "fp8", inputs, batch_size=1)
        ops = prepared.ops()
        model(inputs, ops)
        return prepared.details(ops)

    correct = run_details()
    mismatches, details = backend.op_checks("resnet50", "fp8", correct)
    assert mismatches == 0 and details["probes"]["skip_list"]["compared"] == len(skip)
    with get_fault("fp8-skip-ignored").inject() as injection:
        faulty = run_details()
        mismatches, details = backend.op_checks("resnet50", "fp8", faulty)
    assert injection.changed > 0
    probe = details["probes"]["skip_list"]
    assert mismatches == probe["mismatches"] == len(skip) and probe["quantized"] == list(skip)
    assert probe["first_mismatch"]["input"] == [skip[0]]


# -- the oracle against a second one ---------------------------------------------------------------------------------
def _half_by_struct(x: float) -> float:
    """Python's IEEE binary16 packing (round half to even); its OverflowError is the device's saturation."""
    try:
        return struct.unpack("<e", struct.pack("<e", x))[0]
    except OverflowError:
        return float(np.copysign(65504.0, x))


def test_f16_oracle_agrees_with_python_half_packing():
    grid = np.unique(np.abs(checks.finite_f16().astype(np.float64)))
    ties = (grid[:-1] + grid[1:]) / 2  # exact in float64: every midpoint of neighbouring FP16 values
    rng = np.random.default_rng(5)
    values = np.concatenate([ties, -ties[::7], rng.standard_normal(2000) * 10.0 ** rng.integers(-9, 6, 2000),
                             [65504.0, 65519.99, 65520.0, 1e6, -1e9, 2.0**-25, 3 * 2.0**-26, 2.0**-26, -0.0]])
    got = checks.f16_saturating(values)
    want = np.array([_half_by_struct(float(v)) for v in values], np.float16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    # hand-picked: ties to even, subnormals, saturation
    picked = {1 + 2.0**-11: 1.0, 1 + 3 * 2.0**-11: 1 + 2.0**-9, 2.0**-25: 0.0, 3 * 2.0**-26: 2.0**-24,
              65519.99: 65504.0, 65520.0: 65504.0, -1e9: -65504.0}
    for x, expected in picked.items():
        assert float(checks.f16_saturating(x)) == expected, x


def _fp8_by_definition(values: np.ndarray, exponent_bits: int, mantissa_bits: int, bias: int, scale: int) -> np.ndarray:
    """Round to nearest, ties to the even code, onto the FP8 grid written out from its bit fields (fnuz: every
    positive code finite, no -0), saturating at the largest value; d = q * 2^scale."""
    codes = np.arange(1 << (exponent_bits + mantissa_bits))
    e, f = codes >> mantissa_bits, codes & ((1 << mantissa_bits) - 1)
    grid = np.where(e == 0, f / 2.0**mantissa_bits * 2.0 ** (1 - bias),
                    (1 + f / 2.0**mantissa_bits) * 2.0 ** (e - bias)) * 2.0**scale
    magnitude = np.minimum(np.abs(values), grid[-1])
    upper = np.clip(np.searchsorted(grid, magnitude), 1, grid.size - 1)
    lower = upper - 1
    below, above = magnitude - grid[lower], grid[upper] - magnitude
    pick = np.where(below < above, lower, np.where(above < below, upper, np.where(lower % 2 == 0, lower, upper)))
    return np.where(pick == 0, 0.0, np.sign(values) * grid[pick])


@pytest.mark.parametrize("fmt, fields", [("f143", (4, 3, 8)), ("f152", (5, 2, 16))])
def test_fp8_oracle_agrees_with_the_format_definition(fmt, fields):
    for scale in checks.PROBE_SCALES[fmt] + (-20, 12):
        values = checks.fp8_probe_values(fmt, scale).astype(np.float64) if scale in checks.PROBE_SCALES[fmt] else \
            np.random.default_rng(scale + 40).standard_normal(5000) * 2.0 ** (scale + np.arange(5000) % 24 - 12)
        got = checks.fp8_value(values, fmt, scale)
        want = _fp8_by_definition(values, *fields, scale)
        assert np.array_equal(got, want), (fmt, scale)
    # hand-picked at scale 0 (F143 max 240, smallest subnormal 2^-10; F152 max 57344, smallest subnormal 2^-17)
    picked = {"f143": {1.0625: 1.0, 1.1875: 1.25, 248.0: 240.0, 1e9: 240.0, -1e9: -240.0, 2.0**-11: 0.0,
                       3 * 2.0**-12: 2.0**-10, -2.0**-12: 0.0},
              "f152": {1.125: 1.0, 1.375: 1.5, 61440.0: 57344.0, 1e9: 57344.0, 2.0**-18: 0.0, 3 * 2.0**-19: 2.0**-17}}
    for x, expected in picked[fmt].items():
        assert float(checks.fp8_value(x, fmt, 0)) == expected, (fmt, x)
    assert float(checks.fp8_value(96.0, fmt, 4)) == 96.0  # 6 * 2^4
    # the clip is the saturation: ml_dtypes' own cast gives NaN beyond the max
    assert np.isnan(np.float32(1e9).astype(checks.FP8_DTYPES[fmt]).astype(np.float32))
    assert ml_dtypes.finfo(checks.FP8_DTYPES[fmt]).max == _fp8_by_definition(np.array([1e30]), *fields, 0)[0]


# -- the gate ---------------------------------------------------------------------------------------------------------
def test_the_gate_reads_the_checks_and_fails_without_them():
    gates = accuracy_targets.gates_for("ipu", "widedeep", "fp16")
    (gate,) = [g for g in gates if g.metric == "op_mismatches"]
    assert (gate.op, gate.bound, gate.gating) == ("<=", 0.0, True)
    current = MetricSet({}, {}, {})
    recorded = measure_probes([gate], current, None, 0, lambda: get_backend("ipu").op_checks("widedeep", "fp16", {}))
    assert recorded["op_mismatches"] == 0 and "accumulation" in recorded["op_checks"]["probes"]
    assert evaluate([gate], current, {})[0].passed
    with get_fault("half-partials").inject():
        faulty = MetricSet({}, {}, {})
        measure_probes([gate], faulty, None, 0, lambda: get_backend("ipu").op_checks("widedeep", "fp16", {}))
    assert faulty.probes["op_mismatches"] > 0 and not evaluate([gate], faulty, {})[0].passed
    missing = MetricSet({}, {}, {})
    measure_probes([gate], missing, None, 0, lambda: None)  # a backend without op-level checks
    (evaluation,) = evaluate([gate], missing, {})
    assert not evaluation.passed and "not computed" in evaluation.reason


def test_every_ipu_table_gates_op_mismatches():
    """The six models' tables and the trained MiniLM case's."""
    tables = {(g.model, g.precision) for g in accuracy_targets.load_targets() if g.hardware == "ipu"}
    assert ("minilm", "fp8") in tables
    gated = {(g.model, g.precision) for g in accuracy_targets.load_targets() if g.metric == "op_mismatches"}
    assert gated == tables


@pytest.mark.parametrize("text, message", [
    ("[ipu.widedeep.fp8]\nop_mismatches = { min = 0 }\n", r"x.toml:2: op_mismatches is a count .* give a max bound"),
    ("[ipu.widedeep.fp8]\nop_mismatches = { max = 0.5 }\n", r"x.toml:2: op_mismatches.max = 0.5 is not a whole"),
    ("[ipu.widedeep.fp8]\nop_mismatches = { max = -1 }\n", r"x.toml:2: op_mismatches.max = -1 is not a whole"),
    ("[ipu.widedeep.fp8]\nop_mismatches = { of = \"fp32\", ratio = 0.9 }\n",
     r"x.toml:2: op_mismatches is a probe metric"),
])
def test_op_mismatches_bound_mistakes_name_the_line(text, message):
    with pytest.raises(accuracy_targets.TargetsError, match=message):
        accuracy_targets.parse_targets(text, "x.toml")
