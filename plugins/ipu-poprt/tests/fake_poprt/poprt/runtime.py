"""``poprt.runtime``: ``Runner(executable)`` runs the compiled (FP32) graph on onnxruntime's CPU provider, only on
inputs and output arrays of exactly the compiled shapes and dtypes; ``DeviceManager().ipu_hardware_version()`` says
``ipu21`` (a C600)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime

from poprt import _calls


@dataclass(frozen=True)
class TensorDescription:
    name: str
    shape: tuple
    dtype: np.dtype

    def numpy_data_type(self):
        return self.dtype


class DeviceManager:
    def ipu_hardware_version(self) -> str:
        return "ipu21"


class RuntimeConfig:
    pass


def _description(value_info) -> TensorDescription:
    tensor = value_info.type.tensor_type
    shape = tuple(d.dim_value for d in tensor.shape.dim)
    return TensorDescription(value_info.name, shape, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)))


class Runner:
    def __init__(self, popef, config=None):
        model = onnx.load_from_string(popef.model)
        self.session = onnxruntime.InferenceSession(popef.model, providers=["CPUExecutionProvider"])
        self.inputs = [_description(i) for i in model.graph.input]
        if any(0 in d.shape for d in self.inputs):
            raise ValueError("the executable has inputs without fixed shapes: give the converter input_shape")
        zeros = {d.name: np.zeros(d.shape, d.dtype) for d in self.inputs}
        answers = self.session.run(list(popef.outputs), zeros)
        self.outputs = [TensorDescription(name, a.shape, a.dtype) for name, a in zip(popef.outputs, answers)]
        _calls.record("Runner", inputs={d.name: list(d.shape) for d in self.inputs},
                      outputs={d.name: list(d.shape) for d in self.outputs})

    def get_execute_inputs(self):
        return list(self.inputs)

    def get_execute_outputs(self):
        return list(self.outputs)

    def execute(self, input, output) -> None:
        for d in self.inputs:
            given = input.get(d.name)
            if given is None or given.shape != d.shape or given.dtype != d.dtype:
                raise ValueError(f"input {d.name!r}: expected {d.dtype}{list(d.shape)}, got "
                                 f"{'nothing' if given is None else f'{given.dtype}{list(given.shape)}'}")
        for d in self.outputs:
            array = output.get(d.name)
            if array is None or array.shape != d.shape or array.dtype != d.dtype:
                raise ValueError(f"output {d.name!r}: expected an array {d.dtype}{list(d.shape)} to fill")
        answers = self.session.run([d.name for d in self.outputs], {d.name: input[d.name] for d in self.inputs})
        for d, answer in zip(self.outputs, answers):
            np.copyto(output[d.name], answer)
        _calls.record("Runner.execute", inputs={d.name: [list(input[d.name].shape), str(input[d.name].dtype)]
                                                for d in self.inputs})
