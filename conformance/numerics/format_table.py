"""The IPU's number formats, declared once: each format's fields and range (what the emulator rounds to) and its name
in every place the suite writes or reads it: ONNX's tensor type (the exported graphs' QuantizeLinear pairs), PopRT's
``fp8_params`` name, and the dtype of ml_dtypes and torch whose values are the format's (the oracle and the torch
array library). The emulator, the exporter, PopRT's settings and the docs all read this table: a new format is one
entry here (and its tests)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FormatInfo:
    """One IPU number format. ``emin``/``emax`` are the exponents of the smallest normal and of the largest binade."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max_value: float
    has_inf: bool
    code_dtype: type
    onnx_type: str = ""  # onnx.TensorProto's name of the type
    dtype_name: str = ""  # the dtype of the same values in ml_dtypes (numpy's for float16) and torch
    poprt_name: str = ""  # PopRT's name in fp8_params (the FP8 formats)
    # K elements of matrix-unit operands in this format summed in FP32 before the running FP16 partial is rounded
    # (half partials). FP16: poplibs' AMP vertices consume ``weightsPerConvUnit`` = 16 half inputs per pass and write
    # the partials back after each pass; FP8: the same 64-bit loads carry 32 quarter inputs (assumed, not public).
    partials_block: int = 0

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def emax(self) -> int:
        return int(np.floor(np.log2(self.max_value)))

    @property
    def min_normal(self) -> float:
        return 2.0**self.emin

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.mantissa_bits)

    @property
    def code_bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def scaled(self) -> bool:
        """Whether its values carry a power-of-two scale (Poplar's ``quarter`` metadata): the FP8 formats."""
        return not self.has_inf


_FORMATS = {
    "f16": FormatInfo("f16", 5, 10, 15, 65504.0, True, np.uint16, "FLOAT16", "float16", partials_block=16),
    "f143": FormatInfo("f143", 4, 3, 8, 240.0, False, np.uint8, "FLOAT8E4M3FNUZ", "float8_e4m3fnuz", "F143", 32),
    "f152": FormatInfo("f152", 5, 2, 16, 57344.0, False, np.uint8, "FLOAT8E5M2FNUZ", "float8_e5m2fnuz", "F152", 32),
}
FORMAT_NAMES = tuple(_FORMATS)
FP8_FORMATS = tuple(name for name, info in _FORMATS.items() if info.scaled)


def format_info(fmt: str) -> FormatInfo:
    """The :class:`FormatInfo` of ``fmt`` (one of :data:`FORMAT_NAMES`)."""
    try:
        return _FORMATS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"unknown number format {fmt!r}; expected one of: {', '.join(FORMAT_NAMES)}") from None
