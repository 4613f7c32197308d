"""What PopRT is given for a model at a precision: the suite's FP32 ONNX graph and the calls that convert and compile it
for the ``ipu`` hardware's policy of that precision. Nothing here needs PopRT (see :mod:`ipu_poprt.engine`).

The graph is the suite's own export (:func:`conformance.graphs.record`: node names are the suite's layer names, so the
policy's FP8 skip list names the same nodes), checked with ``onnx.checker`` and reproduced by onnxruntime before PopRT
sees it. The settings are :func:`conformance.graphs.poprt.settings` for the policy and the FP8 plan the ipu backend
calibrated, with the scale of every FP8 operand as the emulator uses it. They become PopRT calls as follows:

- FP16, and FP8 with one fixed scale pair: ``Converter(precision=..., fp8_skip_op_names=..., fp8_params=...)``;
- FP8 with per-tensor scales (the ``amax``/``mse`` methods: one scale per operand does not fit ``fp8_params``): the
  graph is converted to FP16 (``Converter(precision="fp16")``), then PopRT's ``float_to_fp8`` pass
  (``poprt.passes.float_to_fp8.Float2FP8``, documented "from fp32 or fp16 to fp8") gets the skip list, the FP8 formats
  and ``fp8_input_dict`` / ``fp8_weight_dict``, one scale per FP8 op name. That pass takes one input scale per op: a
  MatMul of two activations (attention) whose operands were calibrated to different scales gets the larger one, which
  still holds both operands' largest magnitude (amax) at one binade less resolution for the other;
- ``CompilerOptions.partials_type`` is the policy's partials.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from conformance.graphs import check, record, verify
from conformance.graphs import poprt as poprt_settings
from conformance.hardware.ipu.backend import IpuPrepared
from models.base import Model

# the sample the emulator runs on once to list the FP8 operands' scales (which do not depend on it)
SCALE_SAMPLE_SEED = 0
WEIGHT = "weight"  # the operand name of a matrix op's weight in the emulator's scale record


@dataclass(frozen=True)
class Conversion:
    """Everything PopRT is asked for one model at one precision (plain data: it travels to worker processes)."""

    model: str
    precision: str
    graph: bytes  # the FP32 ONNX graph, serialised
    inputs: dict[str, tuple[tuple[int, ...], str]]  # input name -> (per-sample shape, dtype)
    outputs: tuple[str, ...]
    settings: dict  # conformance.graphs.poprt.settings for the policy
    converter: dict  # Converter keyword arguments (input_shape is added per compiled batch)
    float_to_fp8: dict | None  # the float_to_fp8 pass's keyword arguments (per-tensor FP8 scales), or None
    compiler: dict = field(default_factory=dict)  # CompilerOptions fields the policy sets

    def calls(self) -> dict:
        """What the conversion asks of PopRT, for the records."""
        out = {"converter": dict(self.converter), "compiler": dict(self.compiler)}
        if self.float_to_fp8 is not None:
            out["float_to_fp8"] = self.float_to_fp8
        return out


def fp8_scale_dicts(scales: dict[str, dict[str, int]]) -> tuple[dict[str, int], dict[str, int]]:
    """``(fp8_input_dict, fp8_weight_dict)`` from the scales of every FP8 operand (layer -> operand -> scale): a layer's
    weight scale, and the largest scale of its activation operands (see the module docstring)."""
    inputs: dict[str, int] = {}
    weights: dict[str, int] = {}
    for layer, operands in sorted(scales.items()):
        if WEIGHT in operands:
            weights[layer] = int(operands[WEIGHT])
        activations = [int(s) for operand, s in operands.items() if operand != WEIGHT]
        if activations:
            inputs[layer] = max(activations)
    return inputs, weights


def fp8_scales(model: Model, prepared: IpuPrepared) -> dict[str, dict[str, int]]:
    """The scale of every FP8 operand at the ipu backend's ``prepared`` precision: its emulator run once on a sample,
    which records the (calibrated) input scales and the weight scales it used."""
    if prepared.plan is None:
        return {}
    ops = prepared.ops()
    with np.errstate(all="ignore"):
        prepared.forward(model.sample_inputs(1, seed=SCALE_SAMPLE_SEED), ops)
    return {layer: dict(operands) for layer, operands in ops.scales_used.items()}


def export_graph(model: Model) -> bytes:
    """The model's FP32 graph, serialised, after onnx.checker and onnxruntime's reproduction of the model."""
    recording = record(model)
    data = recording.model.SerializeToString()
    check(data)
    verify(recording, data)
    return data


def plan(model: Model, prepared: IpuPrepared, graph: bytes) -> Conversion:
    """The conversion of ``graph`` (:func:`export_graph` of ``model``) at the ipu backend's ``prepared`` precision."""
    policy = prepared.policy
    fp8 = prepared.plan.settings if prepared.plan is not None else None
    settings = poprt_settings.settings(model.name, policy, fp8, fp8_scales(model, prepared))
    converter = dict(settings["converter"])
    float_to_fp8 = None
    if fp8 is not None and "fp8_params" not in converter:  # per-tensor scales: FP16 first, then the FP8 pass
        inputs, weights = fp8_scale_dicts(settings["fp8"]["scales"])
        float_to_fp8 = {"fp8_params": [settings["fp8"]["input_format"], settings["fp8"]["weight_format"], 0, 0],
                        "skip_op_names": list(fp8.skip), "convert_model": converter["precision"],
                        "fp8_input_dict": inputs, "fp8_weight_dict": weights}
        converter = {"precision": poprt_settings.CONVERTER_PRECISION["none"]}
    return Conversion(model=model.name, precision=policy.name, graph=graph,
                      inputs={s.name: (tuple(s.shape), s.dtype) for s in model.input_specs},
                      outputs=tuple(model.output_names), settings=settings, converter=converter,
                      float_to_fp8=float_to_fp8, compiler=dict(settings["compiler"]))
