"""PopRT's converter and compiler settings for a precision of the ``ipu`` hardware (``FILE.poprt.json`` beside a graph).

PopRT (Graphcore's ONNX runtime, which ran the seed benchmark on the C600) converts an FP32 ONNX graph with
``poprt.converter.Converter(precision=..., fp8_skip_op_names="a,b", fp8_params="F143,F143,-3,-3")`` (the ``poprt``
command line takes the same names as ``--precision``, ``--fp8_skip_op_names``, ``--fp8_params``) and compiles it with
``CompilerOptions.partials_type``. ``fp8_params`` is (input format, weight format, input scale, weight scale), one
scale per operand class for the whole model, in Poplar's convention d = q * 2^scale. The exported graphs name their
nodes after the suite's layers, so the policy's skip list names the same nodes in the FP32 graph PopRT converts.

Per-tensor scales (the calibrated ``amax``/``mse`` methods) do not fit ``fp8_params``: it is then left out, and the
scales of every FP8 operand are listed under ``fp8.scales`` as the graph's QuantizeLinear nodes hold them.
"""

from __future__ import annotations

import json

from conformance.hardware.ipu.policy import Fp8Settings, Policy
from conformance.numerics import FP8_FORMATS, format_info

# The suite's FP8 modes as PopRT's converter precisions (precisions.toml: fp8 = "none" | "weights" | "all").
CONVERTER_PRECISION = {"none": "fp16", "weights": "fp8_weight", "all": "fp8"}
FORMAT_NAMES = {fmt: format_info(fmt).poprt_name for fmt in FP8_FORMATS}  # PopRT's names, from the format table


def settings(model: str, policy: Policy, fp8: Fp8Settings | None, scales: dict[str, dict[str, int]]) -> dict:
    """The settings for ``model`` at ``policy``: PopRT's converter and compiler options, and the FP8 operands with
    their scales (layer -> operand -> scale, as the graph holds them)."""
    converter: dict[str, str] = {"precision": CONVERTER_PRECISION[policy.fp8]}
    out: dict = {"model": model, "precision": policy.name, "input_graph": "the model's FP32 graph (export --precision fp32)",
                 "converter": converter, "compiler": {"partials_type": policy.partials}}
    if policy.uses_fp8:
        if fp8 is None:
            raise ValueError(f"{model} at {policy.name}: no FP8 settings")
        converter["fp8_skip_op_names"] = ",".join(fp8.skip)
        if fp8.scales == "fixed":
            converter["fp8_params"] = (f"{FORMAT_NAMES[fp8.input_format]},{FORMAT_NAMES[fp8.weight_format]},"
                                       f"{fp8.input_scale},{fp8.weight_scale}")
        out["fp8"] = {"input_format": FORMAT_NAMES[fp8.input_format],
                      "weight_format": FORMAT_NAMES[fp8.weight_format],
                      "scale_method": fp8.scales, "skip": list(fp8.skip),
                      "scales": {layer: dict(sorted(operands.items())) for layer, operands in sorted(scales.items())}}
    return out


def dumps(data: dict) -> bytes:
    return (json.dumps(data, indent=1) + "\n").encode()
