"""``poprt.converter.Converter`` with PopRT 1.4's documented keyword arguments (those the backend may pass; any other
name is a TypeError, as a misspelt one would be for PopRT)."""

from __future__ import annotations

import onnx

from poprt import _calls


class Converter:
    def __init__(self, *, input_shape=None, convert_version=11, precision="fp32", fp8_skip_op_names=None,
                 fp8_params="F143,F143,0,0", batch_size=None, batch_axis=None):
        if precision not in ("fp32", "fp16", "fp8", "fp8_weight"):
            raise ValueError(f"precision {precision!r}: PopRT converts to fp32, fp16, fp8 or fp8_weight")
        self.options = {"input_shape": input_shape, "convert_version": convert_version, "precision": precision,
                        "fp8_skip_op_names": fp8_skip_op_names, "fp8_params": fp8_params}

    def convert(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """The model with the given input shapes fixed (the graph is otherwise unchanged: FP32)."""
        _calls.record("Converter.convert", options=self.options, nodes=[n.name for n in model.graph.node])
        converted = onnx.ModelProto()
        converted.CopyFrom(model)
        shapes = self.options["input_shape"] or {}
        for graph_input in converted.graph.input:
            if graph_input.name in shapes:
                dims = graph_input.type.tensor_type.shape.dim
                if len(dims) != len(shapes[graph_input.name]):
                    raise ValueError(f"input_shape {graph_input.name}={shapes[graph_input.name]}: the input has "
                                     f"{len(dims)} dimensions")
                for dim, size in zip(dims, shapes[graph_input.name]):
                    dim.Clear()
                    dim.dim_value = int(size)
        return converted
