"""A conversion (:class:`ipu_poprt.conversion.Conversion`) converted, compiled and run with PopRT's documented
Python API (PopRT 1.4 user guide, "Python API", and its examples ``convert_compile_and_run.py``):

- ``poprt.converter.Converter(input_shape=..., precision=..., fp8_skip_op_names=..., fp8_params=...).convert(model)``;
- ``poprt.Pass.get_pass("float_to_fp8", ...)(model)`` for per-tensor FP8 scales (``Float2FP8``);
- ``poprt.compiler.CompilerOptions`` (``num_ipus``, ``ipu_version``, ``batches_per_step``, ``partials_type``) and
  ``poprt.compiler.Compiler.compile(model_bytes, outputs, options)``, the executable in memory;
- ``poprt.runtime.DeviceManager().ipu_hardware_version()`` (``ipu21``: a C600);
- ``poprt.runtime.Runner(executable)``, ``get_execute_inputs()`` / ``get_execute_outputs()`` (``name``, ``shape``,
  ``numpy_data_type()``) and ``execute(inputs, outputs)``, which fills the output arrays.

PopRT compiles static shapes: a graph is compiled for a batch of ``rows`` rows, and a batch of another size runs in
chunks of ``rows``, the last one padded with copies of its last row (rows are independent in inference) and the
padding's outputs dropped. This module is imported only where PopRT is used.
"""

from __future__ import annotations

import numpy as np
import onnx
import poprt
from poprt import Pass, runtime
from poprt.compiler import Compiler, CompilerOptions
from poprt.converter import Converter

from ipu_poprt.conversion import Conversion

FP8_IPU = "ipu21"  # ipu_hardware_version() of the C600, the IPU with FP8 (ipu2: M2000 and Bow IPUs)
BATCHES_PER_STEP = 1  # one batch per host call: LoadGen times each batch the SUT issues


class EngineError(RuntimeError):
    """PopRT's converted graph or runner does not fit what the suite runs (an output missing, a precision the IPU
    here does not have)."""


def hardware_version() -> str:
    return runtime.DeviceManager().ipu_hardware_version()


def convert(conversion: Conversion, rows: int) -> onnx.ModelProto:
    """The graph converted for batches of ``rows`` rows at the conversion's precision."""
    input_shape = {name: [rows, *shape] for name, (shape, _) in conversion.inputs.items()}
    model = onnx.load_from_string(conversion.graph)
    converted = Converter(input_shape=input_shape, **conversion.converter).convert(model)
    if conversion.float_to_fp8 is not None:
        converted = Pass.get_pass("float_to_fp8", **conversion.float_to_fp8)(converted)
    return converted


class CompiledGraph:
    """A conversion compiled for ``rows`` rows and loaded on the IPU: :meth:`run` computes any number of rows."""

    def __init__(self, conversion: Conversion, rows: int):
        version = hardware_version()
        if conversion.settings.get("fp8") and version != FP8_IPU:
            raise EngineError(f"{conversion.model} at {conversion.precision}: FP8 needs a C600 (IPU {FP8_IPU}); the "
                              f"IPU here is {version}")
        converted = convert(conversion, rows)
        missing = sorted(set(conversion.outputs) - {o.name for o in converted.graph.output})
        if missing:
            raise EngineError(f"{conversion.model}: PopRT's converted graph has no output(s) {', '.join(missing)} "
                              f"(it has: {', '.join(o.name for o in converted.graph.output)})")
        options = CompilerOptions()
        options.num_ipus = 1
        options.ipu_version = version
        options.batches_per_step = BATCHES_PER_STEP
        options.partials_type = conversion.compiler["partials_type"]
        executable = Compiler.compile(converted.SerializeToString(), list(conversion.outputs), options)
        self.runner = runtime.Runner(executable)
        self.rows = rows
        self.conversion = conversion
        self._inputs = list(self.runner.get_execute_inputs())
        self._outputs = [o for o in self.runner.get_execute_outputs() if o.name in conversion.outputs]
        for desc in self._inputs:
            if list(desc.shape)[:1] != [rows]:
                raise EngineError(f"{conversion.model}: PopRT's input {desc.name!r} has shape {list(desc.shape)}; "
                                  f"expected a batch of {rows} rows first")

    def _execute(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One call of the runner on exactly ``rows`` rows; outputs as float32 (PopRT answers at its precision)."""
        inputs = {d.name: np.ascontiguousarray(feeds[d.name], dtype=d.numpy_data_type()) for d in self._inputs}
        outputs = {d.name: np.zeros(d.shape, dtype=d.numpy_data_type()) for d in self._outputs}
        self.runner.execute(inputs, outputs)
        return outputs

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outputs for every row of ``feeds`` (input name -> rows), in chunks of the compiled batch."""
        count = len(next(iter(feeds.values())))
        parts: dict[str, list[np.ndarray]] = {name: [] for name in self.conversion.outputs}
        for start in range(0, count, self.rows):
            stop = min(start + self.rows, count)
            chunk = {name: feeds[name][start:stop] for name in self.conversion.inputs}
            if stop - start < self.rows:
                pad = self.rows - (stop - start)
                chunk = {name: np.concatenate([v, np.repeat(v[-1:], pad, axis=0)]) for name, v in chunk.items()}
            for name, value in self._execute(chunk).items():
                parts[name].append(value[:stop - start])
        return {name: np.concatenate(values).astype(np.float32, copy=False) if np.asarray(values[0]).dtype.kind == "f"
                else np.concatenate(values) for name, values in parts.items()}


_loaded: list[CompiledGraph] = []  # the graph loaded on this process's IPU (at most one)


def load(conversion: Conversion, rows: int) -> CompiledGraph:
    """The conversion compiled for ``rows`` rows and loaded on the IPU. One graph is loaded at a time (a C600 is one
    IPU): asking for another releases the one loaded before it is compiled and loaded."""
    if _loaded and _loaded[0].conversion is conversion and _loaded[0].rows == rows:
        return _loaded[0]
    _loaded.clear()  # the runner goes with its last reference, and the device with it
    _loaded.append(CompiledGraph(conversion, rows))
    return _loaded[0]


def version() -> str:
    return str(getattr(poprt, "__version__", "unknown"))
