"""IPU numerics emulator: bit-exact FP16/FP8 formats (F143, F152) and matrix kernels with FP32 or FP16 partials.

Public API::

    quantize(x, fmt, *, scale=0, overflow="sat", rounding="nearest", rng=None) -> float32 array
    encode(x, fmt, *, scale=0, overflow="sat", rounding="nearest", rng=None)   -> uint8 (FP8) / uint16 (f16) codes
    decode(codes, fmt, *, scale=0)                                              -> float32 array
    matmul(a, b, *, partials="float", operand_format="f16", block=None, rounding="nearest", rng=None,
           out_format="f16", overflow="sat")                                    -> float32 array
    conv2d(x, w, *, stride=1, padding=0, dilation=1, groups=1, partials="float", operand_format="f16", block=None,
           rounding="nearest", rng=None, out_format="f16", overflow="sat")    -> float32 array (N, O, Ho, Wo)

    conv_weight_matrix(w, groups=1)                                              -> w laid out for conv2d's half partials
    round_op(op, a, b, fmt="f16", *, scale=0, overflow="sat", out=None)         -> quantize(a op b), one fused pass
    kernel_path("numpy" | "numba")                                              -> context manager: which kernels run
    arrays.use("numpy" | "torch:cpu" | "torch:cuda")                            -> context manager: which array library

``fmt`` is one of ``FORMAT_NAMES`` = ("f16", "f143", "f152"), declared in :mod:`~conformance.numerics.format_table`
(``FP8_FORMATS`` the scaled ones); values are d = q * 2**scale (FP8 only).
"""

from conformance.numerics import arrays
from conformance.numerics.compiled import KERNEL_PATHS, active_path, kernel_path
from conformance.numerics.formats import (
    FORMAT_NAMES,
    FP8_FORMATS,
    OVERFLOW_MODES,
    ROUNDING_MODES,
    SCALE_RANGE,
    FormatInfo,
    decode,
    encode,
    format_info,
    quantize,
    round_inplace,
    round_op,
)
from conformance.numerics.kernels import DEFAULT_BLOCK, PARTIALS, conv2d, conv_weight_matrix, matmul

__all__ = [
    "DEFAULT_BLOCK",
    "FORMAT_NAMES",
    "FP8_FORMATS",
    "KERNEL_PATHS",
    "OVERFLOW_MODES",
    "PARTIALS",
    "ROUNDING_MODES",
    "SCALE_RANGE",
    "FormatInfo",
    "active_path",
    "arrays",
    "conv2d",
    "conv_weight_matrix",
    "decode",
    "encode",
    "format_info",
    "kernel_path",
    "matmul",
    "quantize",
    "round_inplace",
    "round_op",
]
