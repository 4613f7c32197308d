"""The ONNX backend node tests as a peer of the interpreter: every case the ``onnx`` wheel generates is read as an
``--onnx`` graph is; a case of the operators the interpreter claims is either refused when read (an element type or
attribute value it does not run) or passes at FP32 against the case's expected outputs; a case of any other operator
is refused when read, and none crashes. The per-operator table in docs/graphs.md and the operator table beside it are
the code's."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from conformance.graphs import coverage
from conformance.graphs.coverage import FAILED, PASSED, REFUSED
from conformance.graphs.interpreter import SUPPORTED, Interpreter
from conformance.hardware import get_backend
from conformance.hardware.ipu.ops import NUMERICS, IpuOps
from models.ops import Ops


@pytest.fixture(scope="module")
def outcomes():
    return coverage.run_cases(coverage.node_cases())  # about 15 s for all 1,884 cases


def test_every_node_test_of_a_claimed_operator_passes_or_is_refused_when_read(outcomes):
    assert len(outcomes) > 1800
    failed = [f"{o.case}: {o.reason}" for o in outcomes if o.result == FAILED]
    assert not failed, "\n".join(failed)
    passed = [o for o in outcomes if o.result == PASSED]
    assert all(coverage.claimed(o) for o in passed)
    # the operators the exporters write are exercised by node tests that pass, not only refused
    exercised = {op for o in passed for op in o.ops}
    for op in ("Conv", "MaxPool", "AveragePool", "Pad", "GatherElements", "GatherND", "Tile", "InstanceNormalization",
               "HardSwish", "HardSigmoid", "Max", "Min", "Abs", "Neg", "Sign", "Log", "Exp", "Ceil", "Floor", "Clip",
               "Reciprocal", "Mod", "CumSum", "LayerNormalization", "Flatten"):
        assert op in exercised, op
    assert len(passed) >= 340


def test_cases_the_interpreter_got_wrong_before_now_pass(outcomes):
    """Flatten with a negative axis, MaxPool's auto_pad and ceil_mode, LayerNormalization asking for its statistics."""
    by_name = {o.case: o for o in outcomes}
    for name in ("test_flatten_negative_axis1", "test_flatten_negative_axis4", "test_maxpool_2d_same_upper",
                 "test_maxpool_2d_same_lower", "test_maxpool_2d_ceil", "test_maxpool_1d_default",
                 "test_averagepool_2d_ceil", "test_averagepool_2d_pads_count_include_pad",
                 "test_layer_normalization_4d_axis1", "test_layer_normalization_default_axis",
                 "test_maxpool_3d_default", "test_averagepool_3d_default", "test_argmax_negative_axis_keepdims_example",
                 "test_argmin_no_keepdims_random_select_last_index", "test_ai_onnx_ml_array_feature_extractor",
                 "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside", "test_resize_downsample_sizes_cubic",
                 "test_resize_upsample_scales_linear_half_pixel_symmetric",
                 "test_resize_upsample_sizes_nearest_axes_3_2", "test_maxpool_3d_dilations",
                 "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True"):
        assert by_name[name].result == PASSED, (name, by_name[name].reason)
    assert "optional output" in by_name["test_maxpool_with_argmax_2d_precomputed_pads"].reason


def test_unclaimed_operators_are_refused_when_read(outcomes):
    other = [o for o in outcomes if not coverage.claimed(o)]
    assert len(other) > 1000
    assert {o.result for o in other} == {REFUSED}


def test_docs_tables_are_the_codes(outcomes):
    text = coverage.DOCS.read_text()
    assert coverage.section(text, "operator table") == coverage.op_table(), (
        "docs/graphs.md: run python -m conformance.graphs.coverage")
    assert coverage.section(text, "node-test table") == coverage.pass_table(outcomes), (
        "docs/graphs.md: run python -m conformance.graphs.coverage")


def test_the_numerics_table_covers_every_op_of_the_contract_and_the_ipu_overrides_each():
    methods = {name for name, _ in inspect.getmembers(Ops, inspect.isfunction) if not name.startswith("_")}
    assert methods == set(NUMERICS)
    not_overridden = [m for m in methods if getattr(IpuOps, m) is getattr(Ops, m)]
    assert not not_overridden
    # only the matrix ops take FP8 operands
    assert {m for m, (_, fp8) in NUMERICS.items() if fp8} == {"linear", "matmul", "conv2d"}
    table = coverage.op_table()
    assert all(f"| {op} |" in table for op in SUPPORTED)


def test_an_accepted_case_runs_at_the_ipu_precisions(outcomes):
    """A sample of passing cases runs through the ipu ops too (no op of theirs missing on the emulator)."""
    ops = IpuOps(get_backend("ipu").policy("fp16"))
    cases = {c.name: c for c in coverage.node_cases("pad|pool|gather|tile|cumsum|clip|hard|instancenorm|max|min")}
    ran = 0
    for o in outcomes:
        if o.result != PASSED or o.case not in cases:
            continue
        case = cases[o.case]
        graph = Interpreter(case.model, check_run=False)
        inputs, expected = case.data_sets[0]
        with np.errstate(all="ignore"):
            got = graph.run(dict(zip(graph.inputs, inputs)), ops)
        for name, want in zip(graph.outputs, expected):
            assert np.shape(got[name]) == np.shape(want), o.case
        ran += 1
    assert ran > 30
