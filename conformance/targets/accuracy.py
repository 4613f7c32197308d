"""Accuracy gates as data: ``accuracy.toml`` files say, per hardware, model and precision, which metrics gate and how:
each model's own (in its spec's ``tables`` folder; the built-in models' are ``models/tables/<model>/``), each
backend's own (its ``targets_dir``), and the suite's (the formats' explanation, the MiniLM and imported-graph cases).

Each table ``[<hardware>.<model>.<precision>]`` holds one gate per metric, MLPerf style:

- ``metric = { of = "fp32", ratio = 0.99, tier = 0.999 }``: the metric must reach ``ratio`` times the same metric of
  precision ``of`` on the same inputs and labels ("fp32" is the reference itself); ``tier`` adds an informational
  (non-gating) check at a stricter ratio, like MLPerf's 99.9% tier; ``report = { of = "fp16", ratio = 0.998 }`` adds
  an informational check relative to another precision (a vendor's acceptance bar);
- ``metric = { min = 30.0 }`` / ``{ max = ... }``: an absolute floor or ceiling (tensor-level SNR, cosine).

The tables present for a hardware are its test matrix. Mistakes (unknown hardware, model, precision or metric, a gate
without a threshold, unknown keys) are errors that name the file and line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from boundedio import parse_toml
from conformance.hardware import Backend, hardware_names, hardware_precisions
from conformance.targets import DataFileError, backend_files, model_files, read_toml
from conformance.targets.bounds import MIN_RATIO
from models import MODEL_NAMES, model_specs

ACCURACY_FILE = Path(__file__).with_name("accuracy.toml")

# The metrics the accuracy tests report, by the names the targets file gates them under: tensor metrics of every output
# (the seed benchmark's five numbers, cosine and SNR), and each model's task metrics.
TENSOR_METRICS = (
    "mean_abs_diff",
    "std_abs_diff",
    "max_abs_diff",
    "max_rel_diff",
    "mean_rel_diff",
    "cosine",
    "snr_db",
    "error_bias",
    "rounding_bias",
    "op_mismatches",
)
# Each model's decisions against its FP32 outputs, and its task metrics against the labels of a user's evaluation set
# (``--dataset``; gated only when the set has labels, their FP32 value being the FP32 model's accuracy on those
# labels): as the models' specs declare them (:class:`models.spec.ModelSpec`). A model with neither is judged by its
# tensor metrics alone.
TASK_METRICS = {name: spec.task_metrics for name, spec in model_specs().items()}
LABEL_METRICS = {name: spec.label_metrics for name, spec in model_specs().items()}
# Cases that are not one of the six models, with the metrics they report.
EXTRA_CASES = {
    "minilm": ("embedding_cosine", "min_embedding_cosine", "retrieval_agreement"),
}
# The model name of every imported ONNX graph (--onnx NAME=FILE.onnx): no task metrics of its own; tensor gates, and
# with a task's labelled data (--dataset NAME=TASK:PATH) that task's label metrics.
GRAPH_CASE = "onnx"
GRAPH_LABEL_METRICS = tuple(dict.fromkeys(m for metrics in LABEL_METRICS.values() for m in metrics))
# Decisions of an imported graph against its FP32 reference: computed where an output holds class scores or
# next-token logits (accuracy.metrics.decision_outputs), gated only there.
GRAPH_TASK_METRICS = ("top1_agreement",)
GATE_KEYS = {"of", "ratio", "tier", "report", "min", "max"}
# What a bound of a tensor metric may be: a floor or ceiling outside these ranges cannot gate anything (cosine lies in
# [-1, 1]; an SNR floor at or below 0 dB accepts an error as large as the signal; differences are >= 0).
TENSOR_BOUNDS = {
    "cosine": ("min", -1.0, 1.0),
    "snr_db": ("min", 0.0, 300.0),
    "mean_abs_diff": ("max", 0.0, math.inf),
    "std_abs_diff": ("max", 0.0, math.inf),
    "max_abs_diff": ("max", 0.0, math.inf),
    "max_rel_diff": ("max", 0.0, math.inf),
    "mean_rel_diff": ("max", 0.0, math.inf),
    "error_bias": ("max", 0.0, 1.0),
    "rounding_bias": ("max", 0.0, 1.0),
}
# Counts, whose ceiling is a whole number >= 0 (0: none allowed).
COUNT_METRICS = ("op_mismatches",)
# Metrics measured on the hardware's ops, not on the outputs: op by op against FP32 ops on the same inputs
# (rounding_bias), and probe computations against an independent oracle of the formats (op_mismatches).
PROBE_METRICS = ("rounding_bias", "op_mismatches")


class TargetsError(DataFileError):
    """A mistake in the targets file; the message names the file and line."""


@dataclass(frozen=True)
class Gate:
    """One check: ``metric op target`` where target is ``ratio * metric(of)`` or an absolute bound."""

    hardware: str
    model: str
    precision: str
    metric: str
    op: str  # ">=" or "<="
    of: str | None  # the precision whose metric a ratio applies to ("fp32" = the reference); None for absolute bounds
    ratio: float | None
    bound: float | None
    gating: bool
    line: int

    @property
    def check(self) -> str:
        """The check's name in the report: the metric, with the ratio for relative gates (``f1@0.99xfp32``)."""
        if self.of is None:
            return self.metric
        return f"{self.metric}@{self.ratio:g}x{self.of}"

    def target(self, reference_value: float | None = None) -> float:
        """The threshold: the absolute bound, or ``ratio * reference_value`` (the metric at precision ``of``)."""
        if self.of is None:
            return float(self.bound)
        if reference_value is None:
            raise ValueError(f"gate {self.check} of {self.model}-{self.precision} needs the {self.of} value of {self.metric}")
        return float(self.ratio) * float(reference_value)

    def describe(self) -> str:
        rhs = f"{self.bound:g}" if self.of is None else f"{self.ratio:g} x {self.metric}({self.of})"
        return f"{self.metric} {self.op} {rhs}" + ("" if self.gating else " (reported, not gating)")


_HEADER = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
_KEY = re.compile(r'^\s*("[^"]*"|[A-Za-z0-9_.-]+)\s*=')


def _split_dotted(text: str) -> tuple[str, ...]:
    parts = re.findall(r'"([^"]*)"|([^.\s]+)', text.strip())
    return tuple(q or b for q, b in parts)


def _line_index(text: str) -> dict[tuple, int]:
    """Line numbers of table headers ``(hw, model, precision)`` and keys ``(hw, model, precision, metric)``."""
    index: dict[tuple, int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _split_dotted(header.group(1))
            for n in range(1, len(table) + 1):  # implicit parent tables: the first header that names them
                index.setdefault(table[:n], number)
            continue
        key = _KEY.match(line)
        if key and table:
            index.setdefault(table + (key.group(1).strip('"'),), number)
    return index


def _hardware_precisions(hardware: str) -> tuple[str, ...]:
    if hardware not in hardware_names():
        return ()
    return hardware_precisions(hardware)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_targets(text: str, path: Path | str = "<targets>") -> list[Gate]:
    """All gates in a targets document; TargetsError naming ``path:line`` on the first mistake."""
    try:
        data = parse_toml(text, path)
    except ValueError as exc:
        raise TargetsError(str(exc)) from None
    lines = _line_index(text)

    def where(*key) -> str:
        for n in range(len(key), 0, -1):
            if key[:n] in lines:
                return f"{path}:{lines[key[:n]]}"
        return str(path)

    cases = {**{m: TASK_METRICS[m] + LABEL_METRICS[m] for m in MODEL_NAMES}, **EXTRA_CASES,
             GRAPH_CASE: GRAPH_TASK_METRICS + GRAPH_LABEL_METRICS}
    gates: list[Gate] = []
    for hardware, per_model in data.items():
        precisions = _hardware_precisions(hardware)
        if not precisions:
            raise TargetsError(f"{where(hardware)}: unknown hardware {hardware!r}; expected one of: {', '.join(hardware_names())}")
        if not isinstance(per_model, dict):
            raise TargetsError(f"{where(hardware)}: [{hardware}] must hold tables [{hardware}.<model>.<precision>]")
        for model, per_precision in per_model.items():
            if model not in cases:
                raise TargetsError(f"{where(hardware, model)}: unknown model {model!r}; expected one of: {', '.join(cases)}")
            if not isinstance(per_precision, dict):
                raise TargetsError(f"{where(hardware, model)}: {hardware}.{model} must hold tables per precision")
            allowed = tuple(cases[model]) + TENSOR_METRICS
            for precision, metrics in per_precision.items():
                here = (hardware, model, precision)
                if precision not in precisions:
                    raise TargetsError(f"{where(*here)}: unknown precision {precision!r} for hardware {hardware!r}; "
                                       f"expected one of: {', '.join(precisions)}")
                if not isinstance(metrics, dict) or not metrics:
                    raise TargetsError(f"{where(*here)}: [{'.'.join(here)}] has no gates")
                for metric, spec in metrics.items():
                    at = where(*here, metric)
                    if metric not in allowed:
                        raise TargetsError(f"{at}: unknown metric {metric!r} for {model}; expected one of: {', '.join(allowed)}")
                    gates.extend(_gates(spec, at, hardware, model, precision, metric, precisions, lines.get(here + (metric,), 0)))
    return gates


def _gates(spec, at, hardware, model, precision, metric, precisions, line) -> list[Gate]:
    if not isinstance(spec, dict):
        raise TargetsError(f"{at}: {metric} must be an inline table such as {{ of = \"fp32\", ratio = 0.99 }} or {{ min = 30.0 }}")
    unknown = sorted(set(spec) - GATE_KEYS)
    if unknown:
        raise TargetsError(f"{at}: {metric} has unknown key(s) {unknown}; valid: {', '.join(sorted(GATE_KEYS))}")
    kinds = [k for k in ("ratio", "min", "max") if k in spec]
    if not kinds:
        raise TargetsError(f"{at}: {metric} has no threshold: give ratio (with of), min or max")
    if len(kinds) > 1:
        raise TargetsError(f"{at}: {metric} has more than one threshold ({', '.join(kinds)}); give exactly one")
    for key in ("ratio", "tier", "min", "max"):
        if key in spec and not _number(spec[key]) or key in spec and isinstance(spec[key], float) and math.isnan(spec[key]):
            raise TargetsError(f"{at}: {metric}.{key} = {spec[key]!r} is not a number")
        if key in spec and math.isinf(spec[key]):  # an infinite bound or ratio gates nothing
            raise TargetsError(f"{at}: {metric}.{key} = {spec[key]!r} is not a finite number")
    base = dict(hardware=hardware, model=model, precision=precision, metric=metric, line=line)
    if "ratio" in spec:
        if metric in TENSOR_METRICS:
            what = "a probe metric" if metric in PROBE_METRICS else "a tensor metric"
            raise TargetsError(f"{at}: {metric} is {what}: give an absolute bound (min or max), not a ratio")
        of = _relative_to(spec, at, metric, precision, precisions)
        _check_ratio(spec["ratio"], f"{at}: {metric}.ratio")
        out = [Gate(op=">=", of=of, ratio=float(spec["ratio"]), bound=None, gating=True, **base)]
        if "tier" in spec:
            _check_ratio(spec["tier"], f"{at}: {metric}.tier")
            out.append(Gate(op=">=", of=of, ratio=float(spec["tier"]), bound=None, gating=False, **base))
        if "report" in spec:
            extra = spec["report"]
            if not isinstance(extra, dict) or set(extra) != {"of", "ratio"}:
                raise TargetsError(f"{at}: {metric}.report must be an inline table {{ of = \"fp16\", ratio = 0.998 }}")
            if not _number(extra["ratio"]):
                raise TargetsError(f"{at}: {metric}.report.ratio = {extra['ratio']!r} is not a number")
            _check_ratio(extra["ratio"], f"{at}: {metric}.report.ratio")
            extra_of = _relative_to(extra, at, f"{metric}.report", precision, precisions)
            out.append(Gate(op=">=", of=extra_of, ratio=float(extra["ratio"]), bound=None, gating=False, **base))
        return out
    for key in ("of", "tier", "report"):
        if key in spec:
            raise TargetsError(f"{at}: {metric}.{key} only goes with a ratio threshold")
    kind = "min" if "min" in spec else "max"
    bound = float(spec[kind])
    task_metrics = TASK_METRICS.get(model, ()) + LABEL_METRICS.get(model, ()) + EXTRA_CASES.get(model, ())
    if metric in task_metrics or (model == GRAPH_CASE and metric in GRAPH_TASK_METRICS + GRAPH_LABEL_METRICS):
        if not 0.0 < bound <= 1.0:
            raise TargetsError(f"{at}: {metric}.{kind} = {spec[kind]!r}: a task metric's bound must lie in (0, 1]")
    elif metric in COUNT_METRICS:
        if kind != "max":
            raise TargetsError(f"{at}: {metric} is a count (lower when the hardware is closer to the oracle): give a "
                               f"max bound, not {kind}")
        if math.isinf(bound) or bound < 0 or bound != math.floor(bound):
            raise TargetsError(f"{at}: {metric}.max = {spec[kind]!r} is not a whole number >= 0")
    elif metric in TENSOR_BOUNDS:
        wanted, low, high = TENSOR_BOUNDS[metric]
        if kind != wanted:
            raise TargetsError(f"{at}: {metric} takes a {wanted} bound (it is {'higher' if wanted == 'min' else 'lower'} "
                               f"when the hardware is closer to FP32), not {kind}")
        if not low < bound <= high:
            raise TargetsError(f"{at}: {metric}.{kind} = {spec[kind]!r} is outside ({low:g}, {high:g}]: "
                               "a bound there would not gate anything")
    return [Gate(op=">=" if kind == "min" else "<=", of=None, ratio=None, bound=bound, gating=True, **base)]


def _check_ratio(value, where: str) -> None:
    if not MIN_RATIO <= value <= 1:
        raise TargetsError(f"{where} = {value!r} is outside [{MIN_RATIO:g}, 1]: a ratio of a metric to a higher "
                           "precision's (below that, the gate bounds almost nothing)")


def _relative_to(spec, at, what, precision, precisions) -> str:
    of = spec.get("of")
    if of is None:
        raise TargetsError(f"{at}: {what} has a ratio but no 'of' (the precision it is relative to, e.g. \"fp32\")")
    if of != "fp32" and of not in precisions or of == precision:
        valid = ["fp32"] + [p for p in precisions if p not in ("fp32", precision)]
        raise TargetsError(f"{at}: {what}.of = {of!r}; expected one of: {', '.join(valid)}")
    return of


def _read_targets(path: Path) -> list[Gate]:
    path = Path(path)
    if not path.exists():
        raise TargetsError(f"targets file {str(path)!r} does not exist")
    try:
        _, text = read_toml(path)  # bounded, UTF-8, numbers finite and within range
    except DataFileError as exc:
        raise TargetsError(str(exc)) from None
    return parse_targets(text, path)


def load_targets(path: Path | None = None) -> tuple[Gate, ...]:
    """The gates in ``path`` (default: :data:`ACCURACY_FILE`, looked up at call time: the suite's shared file) and in
    every model's own accuracy.toml; with the suite's own file, also those that backends ship for their names."""
    return _load_targets(Path(path) if path is not None else ACCURACY_FILE, ACCURACY_FILE)


@lru_cache(maxsize=None)
def _load_targets(path: Path, suite_file: Path) -> tuple[Gate, ...]:
    gates = _read_targets(path)
    tables = {(g.hardware, g.model, g.precision): path for g in gates}
    if path == suite_file:
        gates += _owned_gates(backend_files(suite_file.name), "hardware", tables,
                              lambda owner, other: f"the {owner!r} backend's targets may only hold [{owner}.*] tables, "
                                                   f"not {other}")
    gates += _owned_gates(model_files(suite_file.name), "model", tables,
                          lambda owner, other: f"model {owner!r}'s gates may only hold [<hardware>.{owner}.*] "
                                               f"tables, not those of {other}")
    return tuple(gates)


def _owned_gates(files, field: str, tables: dict, refusal) -> list[Gate]:
    """The gates of ``(owner, file)`` pairs shipped beside the suite (a backend's, a model's), each file holding only
    its owner's tables (``field`` of every gate equal to the owner; ``refusal(owner, others)`` says what it holds
    otherwise), and none that another file holds (``tables``: each table so far, with its file; added to)."""
    gates = []
    for owner, extra in files:
        found = _read_targets(extra)
        other = sorted({getattr(g, field) for g in found} - {owner})
        if other:
            raise TargetsError(f"{extra}: {refusal(owner, other)}")
        for g in found:
            table = (g.hardware, g.model, g.precision)
            if tables.setdefault(table, extra) != extra:
                raise TargetsError(f"{extra}:{g.line}: [{'.'.join(table)}] is in {tables[table]} too: a table's gates "
                                   "are in one file")
        gates.extend(found)
    return gates


def gates_for(hardware: str, model: str, precision: str, path: Path | None = None) -> list[Gate]:
    return [g for g in load_targets(path) if (g.hardware, g.model, g.precision) == (hardware, model, precision)]


def matrix(hardware: str, models, precisions=None, path: Path | None = None) -> list[tuple[str, str]]:
    """The (model, precision) pairs with gates for ``hardware``, in the order of ``models`` then the file's order."""
    pairs = list(dict.fromkeys((g.model, g.precision) for g in load_targets(path) if g.hardware == hardware))
    chosen = [(m, p) for model in models for (m, p) in pairs if m == model]
    if precisions is not None:
        chosen = [(m, p) for (m, p) in chosen if p in precisions]
    return chosen


def check_complete(backend: Backend, models=MODEL_NAMES, path: Path | None = None) -> None:
    """Every model and precision the run's ``backend`` runs has its gates: a missing table would silently drop a test,
    so it is a TargetsError naming the table. Combinations the backend does not support (it says why) need none."""
    hardware = backend.name
    have = {(g.model, g.precision) for g in load_targets(path) if g.hardware == hardware}
    missing = [f"[{hardware}.{m}.{p}]" for m in models for p in backend.precisions
               if (m, p) not in have and backend.accuracy_support(m, p) is None]
    if missing:
        raise TargetsError(f"{path or ACCURACY_FILE}: no accuracy gates for {', '.join(missing)}; every model and precision the "
                           f"{hardware!r} hardware runs needs its table")


def applicable(gates, labelled: bool, task: str | None = None) -> list[Gate]:
    """The gates that apply to an evaluation set: label-metric gates only where the set has labels; an imported
    graph's only those of the ``task`` whose labelled data it is judged on."""
    def label_metrics(model: str) -> tuple[str, ...]:
        return GRAPH_LABEL_METRICS if model == GRAPH_CASE else LABEL_METRICS.get(model, ())

    def applies(g: Gate) -> bool:
        if g.metric not in label_metrics(g.model):
            return True
        return labelled and (g.model != GRAPH_CASE or g.metric in LABEL_METRICS.get(task, ()))
    return [g for g in gates if applies(g)]


def reference_precisions(gates) -> set[str]:
    """The precisions other than fp32 whose metrics ``gates`` need (fp8 gates relative to fp16)."""
    return {g.of for g in gates if g.of not in (None, "fp32")}
