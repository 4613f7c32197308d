"""The number formats are declared once (conformance/numerics/format_table.py): the emulator's rounding, the exported
graphs' FP8 types, PopRT's format names, the ipu's FP8 policy, the op checks' oracle dtypes and the docs all follow
that table, and each entry agrees with independent definitions (ml_dtypes, onnx, numpy)."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest

from conformance import numerics
from conformance.graphs import poprt
from conformance.graphs.precision import FP8_TYPES
from conformance.hardware.ipu import fp8_scales, op_checks
from conformance.hardware.ipu.policy import Fp8Schema
from conformance.numerics import format_table

DOCS = Path(__file__).resolve().parents[1] / "docs" / "numerics.md"
FORMATS = [format_table.format_info(name) for name in format_table.FORMAT_NAMES]


def test_the_fp8_formats_are_the_scaled_ones():
    assert format_table.FP8_FORMATS == ("f143", "f152")
    assert numerics.FP8_FORMATS == format_table.FP8_FORMATS and numerics.FORMAT_NAMES == format_table.FORMAT_NAMES
    assert all(format_table.format_info(f).code_bits == 8 for f in format_table.FP8_FORMATS)


@pytest.mark.parametrize("info", FORMATS, ids=lambda i: i.name)
def test_a_format_is_the_dtype_it_names(info):
    """The fields, bias and max agree with the ml_dtypes (numpy, for f16) dtype of the same values."""
    dtype = np.dtype(getattr(ml_dtypes, info.dtype_name, None) or getattr(np, info.dtype_name))
    finfo = ml_dtypes.finfo(dtype) if info.scaled else np.finfo(dtype)
    assert dtype.itemsize * 8 == info.code_bits == np.dtype(info.code_dtype).itemsize * 8
    assert float(finfo.max) == info.max_value
    assert finfo.nmant == info.mantissa_bits
    assert float(finfo.smallest_normal) == info.min_normal
    assert float(finfo.smallest_subnormal) == info.min_subnormal
    assert bool(np.isinf(np.array(np.inf).astype(dtype))) == info.has_inf


@pytest.mark.parametrize("info", FORMATS, ids=lambda i: i.name)
def test_a_format_is_the_onnx_type_it_names(info):
    element_type = getattr(onnx.TensorProto, info.onnx_type)
    assert np.dtype(onnx.helper.tensor_dtype_to_np_dtype(element_type)) == np.dtype(
        getattr(ml_dtypes, info.dtype_name, None) or getattr(np, info.dtype_name))


def test_every_reader_of_the_fp8_formats_follows_the_table():
    """The exporter's QuantizeLinear types, PopRT's names, the policy's choices, the calibration's and the op checks'
    formats: each exactly the table's FP8 formats, so a format added there is exported, converted and checked."""
    fp8 = set(format_table.FP8_FORMATS)
    assert set(FP8_TYPES) == fp8
    assert FP8_TYPES == {f: getattr(onnx.TensorProto, format_table.format_info(f).onnx_type) for f in fp8}
    assert set(poprt.FORMAT_NAMES) == fp8
    assert poprt.FORMAT_NAMES == {f: format_table.format_info(f).poprt_name for f in fp8}
    assert set(fp8_scales.FP8_FORMATS) == fp8
    assert set(op_checks.FP8_DTYPES) == fp8
    for field in ("input_format", "weight_format"):
        assert set(typing.get_args(Fp8Schema.model_fields[field].annotation)) == fp8


def test_every_format_has_its_half_partials_block_and_the_kernels_read_it():
    """A format's half-partials block is a field of its entry: the kernels' default follows the table, so a new format
    needs no second list (a missing block is a KeyError no more)."""
    assert all(isinstance(info.partials_block, int) and info.partials_block > 0 for info in FORMATS)
    assert numerics.DEFAULT_BLOCK == {info.name: info.partials_block for info in FORMATS}
    assert (numerics.DEFAULT_BLOCK["f16"], numerics.DEFAULT_BLOCK["f143"], numerics.DEFAULT_BLOCK["f152"]) == (16, 32, 32)


def test_poprt_names_are_distinct_and_upper_case():
    names = [format_table.format_info(f).poprt_name for f in format_table.FP8_FORMATS]
    assert len(set(names)) == len(names) and all(re.fullmatch(r"F[0-9]{3}", n) for n in names)


def test_an_unknown_format_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown number format 'f144'; expected one of: f16, f143, f152"):
        format_table.format_info("f144")


def test_the_docs_table_is_the_declared_one():
    rows = {}
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `f") and len(cells) == 8:
            rows[cells[0].strip("`")] = cells
    expected = {}
    for info in FORMATS:
        expected[info.name] = [
            f"`{info.name}`", f"1, {info.exponent_bits}, {info.mantissa_bits}", str(info.bias), f"{info.max_value:g}",
            "yes" if info.scaled else "no", f"`{info.onnx_type}`", f"`{info.poprt_name}`" if info.poprt_name else "",
            f"`{info.dtype_name}`"]
    assert rows == expected
