"""An ONNX graph of the user's (``--onnx NAME=FILE.onnx``) as a case of the accuracy test.

The graph runs through the backend's ops by :class:`~conformance.graphs.interpreter.Interpreter` (a
:class:`GraphModel`, so the backend prepares and calibrates it as it does the six models); its FP32 reference is
onnxruntime. Inputs come from a ``.npz`` keyed by the graph's input names, or are drawn from the graph's input
signature with the suite's evaluation seed: float inputs standard normal, integer inputs uniform over the rows of the
constant Gather table they index (directly or through Cast/Identity/reshaping steps), the only range the graph itself
states; an integer input that indexes no table must come from a ``.npz``. Or they come from a task's data set
(``--dataset NAME=TASK:PATH``, TASK one of the six models): read by that model's loader with its preprocessing, at the
sizes the graph states (image size, sequence length, classes, vocabulary), and scored against the labels by the task's
own scorer on the graph's outputs, which must then bear the task model's output names. Its gates are the ``onnx``
tables of ``accuracy.toml`` (tensor metrics of every output; with a task's labels, that task's label gates) and its
FP8 settings the ``onnx`` table of the hardware's precisions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shlex
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime

from conformance.accuracy.metrics import MetricError, decision_outputs
from conformance.datasets import DatasetError, EvaluationSet, load_dataset
from conformance.graphs import runtime
from conformance.graphs.interpreter import Interpreter, InterpreterError
from conformance.targets.accuracy import GRAPH_CASE
from models import model_module
from models.base import InputSpec, Model
from models.ops import Ops
from models.seeds import CALIBRATION_SEED, EVAL_SEED

NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
MAX_NPZ_BYTES = 1 << 30  # a .npz of inputs larger than this is not read
MAX_NPZ_ROWS = 100_000
DRAWN_SAMPLES = 8  # samples drawn from the signature when neither a .npz nor --samples is given
ALL = "all"  # --samples NAME=all: the whole of a .npz or data set
BATCH_SIZE = 4
# What onnxruntime raises for a graph it cannot load.
_ORT_ERRORS = tuple(getattr(onnxruntime.capi.onnxruntime_pybind11_state, kind)
                    for kind in ("Fail", "InvalidGraph", "InvalidArgument", "NotImplemented", "RuntimeException"))
# Steps that carry an integer input to a Gather unchanged in value.
_PASS_THROUGH = frozenset({"Cast", "Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten"})


class GraphCaseError(ValueError):
    """A graph or its inputs that cannot be judged: a usage error naming the file and what is expected."""


@dataclass(frozen=True)
class GraphConfig:
    """What identifies an imported graph."""

    path: str
    sha256: str
    opset: int


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in value.type.tensor_type.shape.dim]


class GraphModel(Model):
    """An ONNX graph with the interface of the six models: ``forward`` runs it through ``ops``."""

    name = GRAPH_CASE

    def __init__(self, interpreter: Interpreter, config: GraphConfig):
        constants = {k: v for k, v in interpreter.constants.items() if v.dtype == np.float32}
        super().__init__(config, constants)
        self.interpreter = interpreter
        self.output_names = tuple(interpreter.outputs)
        graph = interpreter.model.graph
        specs = []
        for value in graph.input:
            if value.name not in interpreter.inputs:
                continue
            dims = _dims(value)
            if not dims or isinstance(dims[0], int):
                raise GraphCaseError(f"{config.path}: input {value.name!r} has shape ({', '.join(map(str, dims))}); "
                                     "the first dimension must be the dynamic batch axis (torch.onnx.export's "
                                     "dynamic_axes={NAME: {0: 'batch'}})")
            unresolved = [d for d in dims[1:] if not isinstance(d, int)]
            if unresolved:
                raise GraphCaseError(f"{config.path}: input {value.name!r} has shape ({', '.join(map(str, dims))}): "
                                     f"dimension(s) {unresolved} beyond the batch axis cannot be resolved; export "
                                     "the graph with fixed sizes except the batch")
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
            kind = "float" if dtype.kind == "f" else "bool" if dtype == np.bool_ else "int"
            specs.append(InputSpec(value.name, tuple(dims[1:]), kind, dtype.name))
        self._specs = tuple(specs)
        self.id_ranges = {spec.name: _gather_rows(interpreter, spec.name) for spec in specs if spec.kind == "int"}

    @property
    def input_specs(self) -> tuple[InputSpec, ...]:
        return self._specs

    def forward(self, inputs: dict[str, np.ndarray], ops: Ops) -> dict[str, np.ndarray]:
        return self.interpreter.run(inputs, ops)

    def drawable(self) -> str | None:
        """Why inputs cannot be drawn from the signature (an integer input indexing no table), or None."""
        for spec in self._specs:
            if spec.kind == "bool" or (spec.kind == "int" and self.id_ranges[spec.name] is None):
                return (f"input {spec.name!r} ({spec.dtype}) indexes no constant Gather table, so the graph does not "
                        "say which values it takes")
        return None

    def draws(self) -> dict[str, str]:
        """How each input is drawn, for the report."""
        return {s.name: "standard normal" if s.kind == "float" else
                f"uniform integers in [0, {self.id_ranges[s.name][0]}) (the rows of {self.id_ranges[s.name][1]!r})"
                for s in self._specs}

    def sample_inputs(self, batch_size: int, seed: int = 0) -> dict[str, np.ndarray]:
        reason = self.drawable()
        if reason is not None:
            raise GraphCaseError(f"{self.config.path}: {reason}")
        rng = np.random.default_rng(seed)
        out = {}
        for spec in self._specs:
            shape = (batch_size, *spec.shape)
            if spec.kind == "float":
                out[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
            else:
                out[spec.name] = rng.integers(0, self.id_ranges[spec.name][0], shape).astype(spec.dtype)
        return out


def _gather_rows(interpreter: Interpreter, name: str) -> tuple[int, str] | None:
    """(rows, Gather node) of the smallest constant table the integer input ``name`` indexes, or None."""
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in interpreter.model.graph.node:
        for value in node.input:
            users.setdefault(value, []).append(node)
    found, frontier, seen = [], [name], set()
    while frontier:
        value = frontier.pop()
        if value in seen:
            continue
        seen.add(value)
        for node in users.get(value, []):
            if node.op_type in _PASS_THROUGH and node.input[0] == value:
                frontier.extend(node.output)
            elif node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == value:
                table = interpreter.constants.get(node.input[0])
                if table is not None:
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    found.append((int(table.shape[axis]), node.name))
    return min(found) if found else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_inputs(path: Path, model: GraphModel, where: str) -> dict[str, np.ndarray]:
    """The inputs of ``model`` in the ``.npz`` at ``path``: every graph input by name, of its dtype and shape, the same
    rows in each, and nothing else; a GraphCaseError starting with ``where`` (the option and file) otherwise."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise GraphCaseError(f"{where}: not a file; expected a .npz keyed by the graph's input names")
        if size > MAX_NPZ_BYTES:
            raise GraphCaseError(f"{where}: {size} bytes, more than the {MAX_NPZ_BYTES} read")
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise GraphCaseError(f"{where}: a single array, not a .npz keyed by the graph's input names")
        with loaded as npz:
            names = list(npz.files)
            expected = {s.name: s for s in model.input_specs}
            if sorted(names) != sorted(expected):
                raise GraphCaseError(f"{where}: holds arrays {sorted(names)}; the graph takes {sorted(expected)}")
            arrays = {}
            total = sum(npz.zip.getinfo(name + ".npy").file_size for name in names)
            if total > MAX_NPZ_BYTES:
                raise GraphCaseError(f"{where}: {total} bytes uncompressed, more than the {MAX_NPZ_BYTES} read")
            for name in names:
                spec = expected[name]
                array = npz[name]
                fits = array.ndim == len(spec.shape) + 1 and array.shape[1:] == spec.shape
                if array.dtype != np.dtype(spec.dtype) or not fits:
                    raise GraphCaseError(f"{where}: array {name!r} is {array.dtype} of shape {array.shape}; the graph "
                                         f"takes {spec.dtype} of shape (batch, {', '.join(map(str, spec.shape))})")
                arrays[name] = array
    except (OSError, ValueError, zipfile.BadZipFile, KeyError) as exc:
        if isinstance(exc, GraphCaseError):
            raise
        raise GraphCaseError(f"{where}: not a readable .npz ({exc})") from None
    rows = {len(a) for a in arrays.values()}
    if len(rows) != 1 or not 0 < rows.pop() <= MAX_NPZ_ROWS:
        raise GraphCaseError(f"{where}: arrays with rows {sorted(len(a) for a in arrays.values())}; expected the same "
                             f"number of rows (1 to {MAX_NPZ_ROWS}) in each")
    _check_values(arrays, model, where)
    return arrays


def _check_values(arrays: dict[str, np.ndarray], model: GraphModel, where: str) -> None:
    """Float inputs finite, integer ids within the rows of the table they index; a GraphCaseError otherwise."""
    for spec in model.input_specs:
        limit = model.id_ranges.get(spec.name)
        values = arrays[spec.name]
        if spec.kind == "float" and not np.all(np.isfinite(values)):
            raise GraphCaseError(f"{where}: array {spec.name!r} holds NaN or Inf")
        if limit is not None and values.size and (values.min() < 0 or values.max() >= limit[0]):
            raise GraphCaseError(f"{where}: array {spec.name!r} holds values outside [0, {limit[0]}), the rows of "
                                 f"{limit[1]!r}")


def task_sizes(task: str, model: GraphModel) -> dict[str, int]:
    """The sizes of the task model's config that the graph states, so that the task's loader prepares inputs the
    graph takes: an image model's channels, image size and classes (``pixel_values`` of (C, H, H), ``logits`` of
    (classes,)); a text model's sequence length and vocabulary (``input_ids`` of (S,), the rows of the table its ids
    index). Other sizes keep the task model's defaults (the inputs are checked after)."""
    fields = {f.name for f in dataclasses.fields(model_module(task).build_config())}
    specs = {s.name: s for s in model.input_specs}
    sizes: dict[str, int] = {}
    pixels, ids = specs.get("pixel_values"), specs.get("input_ids")
    if {"image_size", "num_channels"} <= fields and pixels is not None and len(pixels.shape) == 3 \
            and pixels.shape[1] == pixels.shape[2]:
        sizes.update(num_channels=pixels.shape[0], image_size=pixels.shape[1])
        logits = _output_dims(model).get("logits")
        if "num_labels" in fields and logits is not None and len(logits) == 1 and isinstance(logits[0], int):
            sizes["num_labels"] = logits[0]
    if "seq_len" in fields and ids is not None and len(ids.shape) == 1:
        sizes["seq_len"] = ids.shape[0]
        if "vocab_size" in fields and model.id_ranges.get("input_ids") is not None:
            sizes["vocab_size"] = model.id_ranges["input_ids"][0]
    return sizes


def _output_dims(model: GraphModel) -> dict[str, list[int | str]]:
    """Each graph output's dimensions beyond the batch axis, as the graph states them."""
    return {value.name: _dims(value)[1:] for value in model.interpreter.model.graph.output}


@dataclass(frozen=True)
class TaskView:
    """What a task's loader reads of a model: its name and config (the task model's, at the graph's sizes)."""

    name: str
    config: Any


def load_task_data(task: str, path: Path, model: GraphModel, where: str, preprocessing: Path | None,
                   limit: int | None) -> tuple[EvaluationSet, list[str]]:
    """The data set of ``task`` at ``path`` as inputs of ``model``: read by the task's loader (with the tokenizer or
    image preprocessing of the ``preprocessing`` directory, as a checkpoint's), then checked against the graph's inputs
    (names, dtypes, shapes; each graph input must be one the task gives) and, with labels, the task's scorer against
    the graph's outputs. Returns the set (only the inputs the graph takes) and the task inputs the graph does not take;
    a GraphCaseError starting with ``where`` otherwise."""
    try:
        config = model_module(task).build_config(**task_sizes(task, model))
    except (TypeError, ValueError) as exc:
        raise GraphCaseError(f"{where}: the graph's sizes do not fit a {task} model ({exc})") from None
    try:
        evaluation = load_dataset(task, path, TaskView(task, config), checkpoint=preprocessing, limit=limit)
    except DatasetError as exc:
        raise GraphCaseError(f"{where}: {exc}") from None
    if evaluation.units == 0:
        raise GraphCaseError(f"{where}: holds no evaluation samples")
    given = evaluation.inputs
    specs = {s.name: s for s in model.input_specs}
    missing = sorted(set(specs) - set(given))
    if missing:
        raise GraphCaseError(f"{where}: the graph takes input(s) {missing} that {task}'s data does not give; {task}'s "
                             f"inputs are {sorted(given)} (name the graph's inputs as the task model's)")
    for name, spec in specs.items():
        array = given[name]
        if array.dtype != np.dtype(spec.dtype) or array.shape[1:] != spec.shape:
            raise GraphCaseError(f"{where}: {task}'s input {name!r} is {array.dtype} of shape (batch, "
                                 f"{', '.join(map(str, array.shape[1:]))}); the graph takes {spec.dtype} of shape "
                                 f"(batch, {', '.join(map(str, spec.shape))})")
    _check_values(given, model, where)
    unused = sorted(set(given) - set(specs))
    evaluation = dataclasses.replace(evaluation, inputs={name: given[name] for name in specs})
    if evaluation.labelled:
        _check_scorer(evaluation, model, task, where)
    return evaluation, unused


def _check_scorer(evaluation: EvaluationSet, model: GraphModel, task: str, where: str) -> None:
    """The task's scorer run on zeros shaped as the graph's outputs: a graph whose outputs it cannot read (another
    name, another shape) is refused now, naming what it reads and what the graph gives."""
    dims = _output_dims(model)
    if any(not isinstance(d, int) for shape in dims.values() for d in shape):
        return  # sizes only the run resolves: the scorer reads the real outputs
    rows = len(next(iter(evaluation.inputs.values())))
    zeros = {name: np.zeros((rows, *shape), np.float32) for name, shape in dims.items()}
    try:
        with np.errstate(all="ignore"):
            evaluation.label_metrics(zeros)
    except KeyError as exc:
        raise GraphCaseError(f"{where}: {task}'s labels are scored on the output {exc.args[0]!r}; the graph's outputs "
                             f"are {sorted(dims)} (name them as the {task} model's)") from None
    except (MetricError, ValueError, IndexError) as exc:
        raise GraphCaseError(f"{where}: {task}'s labels cannot be scored on the graph's outputs "
                             f"{ {name: ['batch', *shape] for name, shape in dims.items()} } ({exc})") from None


@dataclass
class GraphInputs:
    """Inputs the user gave in a ``.npz`` (the evaluation set of a graph case: no labels)."""

    inputs: dict[str, np.ndarray]
    provenance: dict[str, Any]
    labelled: bool = False


@dataclass(frozen=True)
class DataSource:
    """Where a graph's inputs come from: a ``.npz`` keyed by its input names (``task`` None), or the data set of
    ``task`` (one of the six models) read in that model's format."""

    path: Path
    task: str | None = None

    def __str__(self) -> str:
        return f"{self.task}:{self.path}" if self.task else str(self.path)


def _source(given: Path | DataSource | None) -> DataSource | None:
    return given if given is None or isinstance(given, DataSource) else DataSource(Path(given))


class GraphCase:
    """An imported graph as the accuracy test judges it (the interface of a user's case).

    ``dataset`` / ``calibration``: a ``.npz`` path or a :class:`DataSource`; ``samples``: how many inputs are drawn
    (default :data:`DRAWN_SAMPLES`), or the first N of the data (default, or :data:`ALL`: all of it); ``preprocessing``:
    the directory of the tokenizer or ``preprocessor_config.json`` a task's data is read with (as a checkpoint's);
    ``calibrates``: whether the hardware has an FP8 precision, whose calibration inputs must then be drawable or given."""

    def __init__(self, name: str, path: Path, dataset: Path | DataSource | None = None,
                 calibration: Path | DataSource | None = None, *, samples: int | str | None = None,
                 preprocessing: Path | None = None, calibrates: bool = True):
        if not NAME.fullmatch(name):
            raise GraphCaseError(f"--onnx {name}=...: {name!r} is not a case name; expected lower-case letters, "
                                 "digits, '-' or '_', starting with a letter")
        dataset, calibration = _source(dataset), _source(calibration)
        if samples == ALL and dataset is None:
            raise GraphCaseError(f"--samples {name}={ALL}: {ALL} means the whole of the graph's data, and {name} has "
                                 f"none; give --dataset {name}=FILE.npz (or TASK:PATH), or a number of inputs to draw "
                                 f"(--samples {name}=N; default {DRAWN_SAMPLES})")
        if preprocessing is not None and not any(s is not None and s.task for s in (dataset, calibration)):
            raise GraphCaseError(f"--checkpoint {name}={preprocessing}: a graph's checkpoint directory gives only the "
                                 "tokenizer or image preprocessing of a task's data set; give --dataset "
                                 f"{name}=TASK:PATH with it, or drop it")
        try:
            interpreter = Interpreter(path)
        except InterpreterError as exc:
            raise GraphCaseError(f"--onnx {name}={path}: {exc}") from None
        self.name = name
        self.path = Path(path)
        self._given = {"--dataset": dataset, "--calibration": calibration, "--checkpoint": preprocessing,
                       "--samples": samples}
        opset = max(o.version for o in interpreter.model.opset_import if o.domain in ("", "ai.onnx"))
        self.model = GraphModel(interpreter, GraphConfig(str(self.path.resolve()), _sha256(self.path), opset))
        self.checkpoint = None
        self.preprocessing = preprocessing
        self.limit = samples if isinstance(samples, int) else None
        self.drawn = samples if isinstance(samples, int) else DRAWN_SAMPLES
        self.batch_size = BATCH_SIZE
        self.evaluation = self.calibration = None
        if dataset is not None:
            self.evaluation = self._load(dataset, "--dataset", self.limit)
        elif (reason := self.model.drawable()) is not None:
            raise GraphCaseError(f"--onnx {name}={path}: {reason}; give its inputs with --dataset {name}=FILE.npz")
        if calibration is not None:
            self.calibration = self._load(calibration, "--calibration", None)
        elif calibrates and self.evaluation is not None and self.model.drawable() is not None:
            raise GraphCaseError(f"--onnx {name}={path}: {self.model.drawable()}; give FP8 calibration inputs with "
                                 f"--calibration {name}=FILE.npz")
        try:  # onnxruntime builds the reference session now: a graph it cannot run is refused before any test
            self._session = runtime.session(self.path)
        except (*_ORT_ERRORS, RuntimeError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise GraphCaseError(f"--onnx {name}={path}: onnxruntime cannot load it ({reason})") from None

    def _load(self, source: DataSource, option: str, limit: int | None) -> GraphInputs | EvaluationSet:
        where = f"{option} {self.name}={source}"
        if source.task is not None:
            evaluation, unused = load_task_data(source.task, source.path, self.model, where, self.preprocessing, limit)
            provenance = {**evaluation.provenance, "task": source.task,
                          "inputs_not_taken": unused}  # task inputs the graph has no input for
            return dataclasses.replace(evaluation, provenance=provenance)
        arrays = load_inputs(source.path, self.model, where)
        total = len(next(iter(arrays.values())))
        if limit is not None:
            arrays = {key: value[:limit] for key, value in arrays.items()}
        rows = len(next(iter(arrays.values())))
        return GraphInputs(arrays, {"format": "npz", "path": str(source.path.resolve()),
                                    "sha256": _sha256(source.path), "units": rows, "rows": rows,
                                    **({"rows_in_file": total} if rows != total else {}), "labels": False})

    def options(self) -> str:
        """The options beside ``--onnx`` that give this case's data, as a command line reproducing it takes them."""
        return "".join(f" {option} {self.name}={shlex.quote(str(value))}" for option, value in self._given.items()
                       if value is not None)

    @property
    def labelled(self) -> bool:
        """Whether the evaluation data has labels (a task's data set with a scorer)."""
        return self.evaluation is not None and self.evaluation.labelled

    def count(self) -> int:
        return len(next(iter(self.evaluation.inputs.values()))) if self.evaluation is not None else self.drawn

    def inputs(self, count: int) -> dict[str, np.ndarray]:
        if self.evaluation is not None:
            return self.evaluation.inputs
        return self.model.sample_inputs(count, seed=EVAL_SEED)

    def calibration_inputs(self) -> dict[str, np.ndarray] | None:
        """The ``--calibration`` inputs, or None: the backend draws its calibration samples from the signature."""
        return None if self.calibration is None else self.calibration.inputs

    def reference(self, inputs: dict[str, np.ndarray], batch_size: int, cache=None) -> tuple[dict, bool]:
        """onnxruntime's FP32 outputs of ``inputs`` (never cached: the engine is the reference)."""
        return runtime.run(self._session, inputs, batch_size), False

    def decides(self) -> bool:
        """Whether an output holds decisions (class scores, next-token logits), judged by top-1 agreement with FP32."""
        return bool(decision_outputs({name: ["batch", *dims] for name, dims in _output_dims(self.model).items()}))

    def no_verdict(self, reference: dict[str, np.ndarray]) -> str | None:
        """Why the FP32 reference cannot judge anything (None when it can): an output that is non-finite (the graph's
        fault: a NaN or Inf weight or an overflowing step; its non-finite weights are named), all zero or constant on
        the samples, against which every precision would score a perfect or meaningless figure."""
        for name in self.model.output_names:
            values = np.asarray(reference[name])
            if values.dtype.kind != "f" or values.size == 0:
                continue
            where = f"the FP32 reference (onnxruntime) of graph {self.path.name!r}: output {name!r}"
            bad = ~np.isfinite(values)
            if bad.any():
                weights = sorted(k for k, v in self.model.interpreter.constants.items()
                                 if v.dtype.kind == "f" and np.isnan(v).any())
                return (f"{where} has {int(bad.sum())} non-finite value(s) (NaN/Inf) of {values.size} on the "
                        f"samples: the graph computes them, not the hardware"
                        + (f" (weights holding NaN: {', '.join(weights[:5])}{', ...' if len(weights) > 5 else ''})"
                           if weights else ""))
            first = values.reshape(-1)[0]
            if np.all(values == first):
                return (f"{where} is {'all zero' if first == 0 else f'constant ({float(first):g})'} on the "
                        f"{len(values)} samples: a vacuous reference, against which any precision scores perfectly")
        return None

    def judged(self) -> dict[str, Any]:
        """What the report says was judged: the graph in the checkpoint's place (path, sha256, opset), its inputs and
        FP8 calibration data, and the engine of the FP32 reference."""
        config = self.model.config
        def drawn(seed: int) -> str:  # called only where inputs were drawn (a graph may take undrawable ones)
            return (f"drawn from the graph's input signature (seed {seed}): "
                    + "; ".join(f"{name} {how}" for name, how in self.model.draws().items()))
        out: dict[str, Any] = {
            "checkpoint": {"path": config.path, "sha256": config.sha256, "format": "onnx", "opset": config.opset,
                           "parameters": self.model.num_parameters, "config": {},
                           "inputs": [s.describe() for s in self.model.input_specs],
                           "outputs": list(self.model.output_names)},
            "dataset": self.evaluation.provenance if self.evaluation is not None else drawn(EVAL_SEED),
            "task_metrics_against": "labels and fp32" if self.labelled else "fp32",
            "fp32_reference": f"onnxruntime {onnxruntime.__version__} (CPU)",
        }
        if self.preprocessing is not None:
            out["preprocessing_from"] = str(Path(self.preprocessing).resolve())
        out["fp8_calibration"] = (self.calibration.provenance if self.calibration is not None
                                  else drawn(CALIBRATION_SEED) if self.model.drawable() is None
                                  else "none (the hardware has no FP8 precision)")
        return out
