"""Evaluating a hardware's outputs against the accuracy gates: plain functions, so they can be tested without pytest.

:func:`evaluate` takes the FP32 reference outputs, a hardware's outputs and the metrics of the precisions that ratio
gates are relative to, and returns one :class:`Evaluation` per gate. Non-finite hardware outputs are a failed
evaluation that says how many values and in which output (the metrics are not computed on them).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from conformance.accuracy import confidence, metrics
from conformance.accuracy.diagnosis import PROBE_INPUT_ELEMENTS, LocalErrorOps, summarise_bias
from conformance.distributed import Batch, Engine, Inputs, Job, RunStats, fingerprint, row_count, row_elements, take
from conformance.numerics import arrays
from conformance.targets import compare
from conformance.targets.accuracy import PROBE_METRICS, TENSOR_BOUNDS, TENSOR_METRICS
from conformance.targets.label_floors import FLOORS_FILE, load_label_floors
from models.ops import Ops

UNITS = {"snr_db": "dB"}


@dataclass
class Evaluation:
    """One gate's verdict: ``value op target``; ``reason`` explains a failure that is not just a number."""

    gate: object  # conformance.targets.Gate
    value: float | None
    target: float | None
    passed: bool
    details: dict = field(default_factory=dict)
    reason: str = ""
    # For a task-metric ratio gate: whether the 95% interval of the ratio clears the gate's ratio (the verdict is then
    # established by the evaluation set), or only the point estimate does; None for gates without an interval.
    # Also False for a label gate whose FP32 score is at or below its floor (label_floors.toml): it bounds nothing.
    established: bool | None = None
    note: str = ""  # why a passing gate is not established, when it is not the interval

    @property
    def verdict(self) -> str:
        """"PASS", "PASS, not established" or "FAIL"."""
        if not self.passed:
            return "FAIL"
        return "PASS, not established" if self.established is False else "PASS"

    def describe(self) -> str:
        g = self.gate
        if self.reason:
            return f"{g.check}: {self.reason}"
        unit = f" {UNITS[g.metric]}" if g.metric in UNITS else ""
        value = "n/a" if self.value is None else f"{self.value:.6g}{unit}"
        target = "n/a" if self.target is None else f"{self.target:.6g}{unit}"
        rhs = target if g.of is None else f"{g.ratio:g} x {g.metric}({g.of}) = {target}"
        ci = self.details.get("ci95")
        interval = f" [95% CI {ci[0]:.4g}, {ci[1]:.4g}]" if ci and None not in ci else ""
        verdict = {"PASS": "ok", "FAIL": "FAILED"}.get(self.verdict, self.verdict.lower())
        return (f"{g.check}: {value}{interval} {g.op} {rhs} -> {verdict}" + ("" if g.gating else " (reported only)")
                + (f" ({self.note})" if self.note else "")
                + (f" ({self.units_text()})" if self.passed and self.established is False and not self.note else ""))

    def units_text(self) -> str:
        """How many units a passing gate that is not established ran, and how many would establish it."""
        units, needed = self.details.get("units"), self.details.get("units_needed")
        floor = self.details.get("units_to_establish")
        if needed is not None:
            return f"{units} units, about {needed} would establish it"
        if floor is not None and units is not None and units < floor:
            return f"{units} units, at least {floor} would establish it"
        return f"{units} units: fewer lost decisions would establish it, not more units"


@dataclass
class MetricSet:
    """All metrics of one precision's outputs against FP32: task metrics, and tensor metrics per output."""

    task: dict[str, float]
    tensor: dict[str, dict[str, float]]  # output -> metric -> value
    nonfinite: dict[str, int]  # output -> number of NaN/Inf values (only outputs that have any)
    units: dict[str, metrics.TaskMetric] = field(default_factory=dict)  # task metric -> its per-unit form
    probes: dict[str, float] = field(default_factory=dict)  # metrics of the ops themselves (rounding_bias)

    def value(self, metric: str) -> tuple[float | None, dict]:
        """The metric's value and where it comes from; tensor metrics gate on the worst output."""
        if metric in self.task:
            return self.task[metric], {}
        if metric in PROBE_METRICS:
            return self.probes.get(metric), {}
        if metric in TENSOR_METRICS and self.tensor:
            per_output = {out: m[metric] for out, m in self.tensor.items()}
            higher_is_better = TENSOR_BOUNDS[metric][0] == "min"  # gated from below: the worst output is the lowest
            worst = (min if higher_is_better else max)(per_output, key=per_output.get)
            return per_output[worst], {"worst_output": worst, "per_output": per_output}
        return None, {}


def compute_metrics(model_name: str, reference: dict, hardware: dict, inputs: dict, labels=None) -> MetricSet:
    """Task and tensor metrics of ``hardware`` vs ``reference`` outputs; nothing is computed on non-finite outputs.
    ``labels``: a labelled evaluation set (``label_metrics(outputs)``, :mod:`conformance.datasets`) whose task metrics
    against its labels join the agreement metrics."""
    missing = sorted(set(reference) - set(hardware))
    if missing:
        raise metrics.MetricError(f"{model_name}: hardware outputs lack {missing} (it gave {sorted(hardware)})")
    nonfinite = {name: n for name in reference if (n := metrics.nonfinite_count(hardware[name]))}
    if nonfinite:
        return MetricSet({}, {}, nonfinite)
    tensor = {name: metrics.tensor_metrics(reference[name], hardware[name], f"{model_name} {name}")
              for name in _tensor_outputs(reference)}
    units = metrics.task_unit_metrics(model_name, reference, hardware, inputs)
    if labels is not None:
        units.update(labels.label_metrics(hardware))
    return MetricSet({name: m.value for name, m in units.items()}, tensor, {}, units)


def _tensor_outputs(reference: dict) -> list[str]:
    """The outputs judged by the tensor metrics: the float ones. An integer output beside them (an imported
    classifier's class label, the ArgMax of its scores) is a decision, which agreement judges: an SNR of class ids
    measures nothing (one flipped label of eight costs 8 dB); integer outputs alone are all judged."""
    floats = [name for name in reference if np.asarray(reference[name]).dtype.kind == "f"]
    return floats or list(reference)


def probe_samples(inputs: Inputs, batch_size: int) -> list[int]:
    """The samples the probes run on: the first ones that hold :data:`PROBE_INPUT_ELEMENTS` input values (two at
    least, one batch of ``batch_size`` and the samples there are at most): two images or sequences, a hundred-odd
    wide&deep rows."""
    available = min(row_count(inputs), batch_size)
    per_sample = row_elements(inputs)
    wanted = max(2, -(-PROBE_INPUT_ELEMENTS // max(per_sample, 1)))
    return list(range(min(wanted, available)))


def wants_probe(gates) -> bool:
    """Whether ``gates`` gate the ops' own rounding bias (the probe that rides on the hardware run)."""
    return any(g.metric == "rounding_bias" for g in gates)


def wants_op_checks(gates) -> bool:
    """Whether ``gates`` gate the backend's op-level checks against an independent oracle."""
    return any(g.metric == "op_mismatches" for g in gates)


def hardware_batches(inputs: Inputs, batch_size: int, probe: bool) -> list[Batch]:
    """The batches of a hardware run: the probe samples (:func:`probe_samples`) first, then the rest in batches of
    ``batch_size``; the same batches whether the probe runs or not (only the first one's options differ)."""
    count = row_count(inputs)
    head = len(probe_samples(inputs, batch_size))
    return [Batch(0, head, {"probe": True} if probe else {})] + \
        [Batch(start, min(start + batch_size, count)) for start in range(head, count, batch_size)]


def _forward(forward: Callable[[dict, object], dict], inputs: dict, hardware_ops, probe: bool) -> tuple[dict, list | None]:
    """The outputs of one batch by ``forward(inputs, ops)``, and with ``probe`` the local errors of its ops: it then
    runs through :class:`LocalErrorOps` (which passes the hardware's results through as they are), adding only the
    FP32 ops. Ops that compute on another array library (``takes_library_arrays``, the emulator's) get the inputs
    on the selected library's device (``--array``), moved once, and their outputs come back as numpy arrays."""
    local = LocalErrorOps(hardware_ops, Ops()) if probe else None
    library = arrays.active()
    moved = not library.is_numpy and getattr(hardware_ops, "takes_library_arrays", False)
    rows = row_count(inputs)
    if moved:  # the ops compute on the selected library's device: the inputs go there once, the outputs come back
        inputs = arrays.to_library(inputs, library)
    try:
        with np.errstate(all="ignore"):
            outputs = forward(inputs, local if probe else hardware_ops)
        if moved:
            outputs = arrays.to_numpy(outputs)
    except library.memory_errors as exc:  # never a figure from part of a batch: the test fails naming the memory
        raise library.out_of_memory(exc, f"a batch of {rows} samples") from None
    return outputs, (local.bias if probe else None)


def run_hardware(model, inputs: Inputs, batch_size: int, hardware_ops, *, probe: bool) -> tuple[dict, list | None]:
    """The hardware's outputs over ``inputs`` in the batches of :func:`hardware_batches`, in this process, and with
    ``probe`` the local errors of every op on the probe samples (:func:`diagnosis.local_errors`)."""
    parts = [_forward(model, take(inputs, b.start, b.stop), hardware_ops, b.options.get("probe"))
             for b in hardware_batches(inputs, batch_size, probe)]
    outputs = {k: np.concatenate([p[0][k] for p in parts]) for k in parts[0][0]}
    return outputs, parts[0][1]


@dataclass
class HardwareWork:
    """What a process holds to compute a model's batches on a hardware: the model and its prepared ops
    (``hardware.base.Prepared``). Its ops object is made on first use and kept for every batch that process
    computes, as a serial run keeps one (weights converted once); it is not sent along with the work."""

    model: object
    prepared: object
    array: str = arrays.DEFAULT  # the library the run selected (--array); a local worker may take a device of its own

    def ops(self):
        if self.__dict__.get("_ops") is None:
            self.__dict__["_ops"] = self.prepared.ops()
        return self.__dict__["_ops"]

    def __getstate__(self):
        return {"model": self.model, "prepared": self.prepared, "array": self.array}


def hardware_batch(work: HardwareWork, inputs: dict, options: dict) -> tuple[dict, dict]:
    """One batch of a hardware run (a task of the engine): its outputs, and as extras what the run used so far
    (``prepared.details``: FP8 scales) and with the ``probe`` option the local errors."""
    with arrays.use(arrays.for_this_process(work.array)) as library:
        ops = work.ops()
        probe = bool(options.get("probe")) and getattr(work.prepared, "per_op", True)
        outputs, local = _forward(work.prepared.forward, inputs, ops, probe)
    extras = {"details": work.prepared.details(ops), "device": arrays.describe(library)}
    if local is not None:
        extras["local_errors"] = local
    return outputs, extras


@dataclass
class HardwareRun:
    outputs: dict
    local_errors: list | None  # with the probe: (op kind, op name, local bias, elements) of each erring op
    details: dict  # prepared.details of the run: the union over its batches
    stats: RunStats
    devices: list[str] = field(default_factory=list)  # what computed its batches (arrays.describe), each once


def merge_details(parts: list[dict], where: str = "details") -> dict:
    """The union of the batches' details (nested dicts, e.g. the FP8 scales each batch's ops used); a leaf that
    differs between two batches is a ValueError naming it (the ops of one run use the same numerics)."""
    merged: dict = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(merged.get(key, {}), dict):
                merged[key] = merge_details([merged.get(key, {}), value], f"{where}.{key}")
            elif key in merged and merged[key] != value:
                raise ValueError(f"the batches of one run disagree on {where}.{key}: {merged[key]!r} and {value!r}")
            else:
                merged[key] = value
    return merged


def run_on_engine(engine: Engine, name: str, model, prepared, inputs: Inputs, batch_size: int, *,
                  probe: bool, progress: Callable[[str], None] | None = None) -> HardwareRun:
    """:func:`run_hardware` with ``prepared``'s ops, its batches run as tasks of ``engine`` (the model and prepared
    ops sent to each worker once; batches the engine's store has are read, not computed), assembled in batch order.
    ``name`` names the run (model and precision) in the store and in messages; ``progress`` takes the run's
    progress lines (:class:`conformance.distributed.Progress`)."""
    library = arrays.active()
    work = HardwareWork(model, prepared, library.spec)
    # batches computed on another library are kept apart from numpy's (the same bits only up to FP32 sums' order)
    state = (model, prepared) if library.is_numpy else (model, prepared, library.spec)
    identity = fingerprint(state) if engine.store is not None else ""
    results, stats = engine.run(Job(name, work, hardware_batch, identity), inputs,
                                hardware_batches(inputs, batch_size, probe), progress)
    outputs = {k: np.concatenate([r[0][k] for r in results]) for k in results[0][0]}
    local = [tuple(e) for e in results[0][1]["local_errors"]] if "local_errors" in results[0][1] else None
    devices = sorted({r[1]["device"] for r in results if r[1].get("device")})  # batches kept before had none
    return HardwareRun(outputs, local, merge_details([r[1]["details"] for r in results]), stats, devices)


def reference_batch(model, inputs: dict, options: dict) -> tuple[dict, dict]:
    """One batch of FP32 reference outputs (a task of the engine): the model on its own FP32 ops, as
    :func:`models.run_batched` computes each batch."""
    return model(inputs), {}


def reference_batches(count: int, batch_size: int) -> list[Batch]:
    """The batches of an FP32 reference run over ``count`` samples: those of :func:`models.run_batched`."""
    return [Batch(start, min(start + batch_size, count)) for start in range(0, count, batch_size)]


# what the fingerprint of an FP32 reference job holds beside the model (a hardware job's holds its prepared ops)
REFERENCE_JOB = "fp32-reference"


def reference_on_engine(engine: Engine, name: str, model, inputs: Inputs, batch_size: int, *,
                        progress: Callable[[str], None] | None = None) -> tuple[dict, RunStats]:
    """The FP32 outputs of ``model`` over ``inputs`` in the batches of :func:`models.run_batched` (the same bits), run
    as tasks of ``engine`` like a hardware run's (the model sent to each worker once, batches the engine's store has
    read, not computed), and what the run did. ``name`` names the job (``<model>-fp32-reference``) in the store and
    in progress lines."""
    count = row_count(inputs)
    if count == 0:
        raise ValueError(f"{name}: an FP32 reference run needs at least one sample")
    identity = fingerprint((REFERENCE_JOB, model)) if engine.store is not None else ""
    results, stats = engine.run(Job(f"{name}-{REFERENCE_JOB}", model, reference_batch, identity), inputs,
                                reference_batches(count, batch_size), progress)
    return {k: np.concatenate([r[0][k] for r in results]) for k in results[0][0]}, stats


def measure_probes(gates, current: MetricSet, local: list | None, samples: int,
                   op_checks: Callable[[], tuple[int, dict] | None] | None = None) -> dict:
    """Put the probe metrics ``gates`` ask for into ``current``, from the local errors of a probe run on ``samples``
    samples (:func:`run_hardware`) and the backend's op-level checks of the case (``op_checks()``: (mismatches,
    details), None when the backend has none; they do not depend on the outputs, so they run even when those are not
    finite); returns what to record about them."""
    recorded = {}
    if wants_op_checks(gates) and op_checks is not None:
        start = time.perf_counter()
        checked = op_checks()
        if checked is not None:
            mismatches, details = checked
            current.probes["op_mismatches"] = float(mismatches)
            recorded.update(op_mismatches=int(mismatches), op_checks=details,
                            op_checks_s=round(time.perf_counter() - start, 4))
    if current.nonfinite or not wants_probe(gates) or local is None:  # None: the hardware runs whole graphs
        return recorded
    bias, per_kind, per_op = summarise_bias(local)
    current.probes["rounding_bias"] = abs(bias)
    return {**recorded, "rounding_bias_signed": round(bias, 4), "rounding_bias_by_kind": per_kind,
            "rounding_bias_ops": len(per_op), "rounding_bias_samples": samples}


def _interval(gate, current: MetricSet, base: MetricSet | None) -> tuple[dict, bool | None]:
    """The 95% intervals of a task-metric gate's value (and ratio), and whether the ratio's bound clears the gate."""
    metric = current.units.get(gate.metric)
    if metric is None:
        return {}, None
    value = confidence.value_interval(metric)
    details = {"ci95": value.as_list(), "ci_method": value.method, "units": metric.units}
    if gate.of is None:  # an absolute bound (the cpu's "every answer reproduced"): a fact of these samples
        return details, None
    base_metric = base.units.get(gate.metric) if base is not None else None
    if base_metric is None:
        return details, None
    ratio = confidence.ratio_interval(metric, base_metric)
    details.update({"ratio_ci95": ratio.as_list(), "ratio_ci_method": ratio.method,
                    "units_to_establish": confidence.units_to_establish(gate.ratio)})
    if math.isnan(ratio.low):
        return details, None
    established = bool(compare(ratio.low if gate.op == ">=" else ratio.high, gate.op, gate.ratio))
    if not established:
        details["units_needed"] = confidence.units_needed(metric, base_metric, gate.ratio)
    return details, established


def floor_note(metric: str, reference_sets: dict[str, MetricSet], floors: dict[str, float]) -> tuple[str, dict]:
    """For a label metric: why its gates bound nothing when the FP32 model's score on the labels is at or below the
    metric's floor (or was not computed), and what to record; ("", {}) otherwise."""
    if metric not in floors:
        return "", {}
    base = reference_sets.get("fp32")
    fp32 = base.value(metric)[0] if base is not None and not base.nonfinite else None
    floor = floors[metric]
    if fp32 is not None and not math.isnan(fp32) and fp32 > floor:
        return "", {}
    shown = "not computed" if fp32 is None or math.isnan(fp32) else f"{fp32:.4g}"
    note = (f"not established: the FP32 model's {metric} on these labels is {shown}, at or below the floor {floor:g} "
            f"of {FLOORS_FILE.name}, so a ratio of it bounds nothing (do the labels, tokenizer and checkpoint belong "
            "together?)")
    return note, {"label_floor": {"fp32": fp32, "floor": floor, "file": FLOORS_FILE.name}}


def evaluate(gates, current: MetricSet, reference_sets: dict[str, MetricSet],
             floors: dict[str, float] | None = None) -> list[Evaluation]:
    """Each gate against ``current``; ratio gates take the metric of precision ``gate.of`` from ``reference_sets``
    (``"fp32"`` included: the reference scored against itself). A label metric's gates are not established while the
    FP32 score is at or below its floor (``floors``, by default :func:`load_label_floors`)."""
    floors = load_label_floors() if floors is None else floors
    out = []
    for gate in gates:
        if current.nonfinite:
            where = ", ".join(f"{n} in output {name!r}" for name, n in current.nonfinite.items())
            out.append(Evaluation(gate, None, None, False, {"nonfinite": current.nonfinite},
                                  f"hardware output has non-finite values (NaN/Inf): {where}"))
            continue
        value, details = current.value(gate.metric)
        if gate.of is None:
            target = gate.target()
        else:
            base = reference_sets.get(gate.of)
            if base is None or base.nonfinite:
                reason = (f"the {gate.of} run it is relative to has non-finite outputs" if base is not None
                          else f"no {gate.of} metrics to compare with")
                out.append(Evaluation(gate, value, None, False, details, reason))
                continue
            base_value, _ = base.value(gate.metric)
            details = {**details, f"{gate.of}_value": base_value}
            target = gate.target(base_value) if base_value is not None and not math.isnan(base_value) else None
        if value is None:
            out.append(Evaluation(gate, None, target, False, details, f"metric {gate.metric!r} was not computed"))
            continue
        passed = target is not None and compare(float(value), gate.op, target)
        interval, established = _interval(gate, current, reference_sets.get(gate.of) if gate.of else None)
        note, floor = floor_note(gate.metric, reference_sets, floors)
        if note:
            established = False
        out.append(Evaluation(gate, float(value), target, passed, {**details, **interval, **floor},
                              established=established, note=note))
    return out


def worst_samples(model_name: str, reference: dict, hardware: dict, count: int) -> list[int]:
    """Indices of the ``count`` samples whose primary output has the lowest SNR (non-finite outputs first)."""
    name = metrics.PRIMARY_OUTPUT.get(model_name) or _tensor_outputs(reference)[0]
    ref, hw = reference[name], hardware[name]
    bad = ~np.isfinite(hw.reshape(len(hw), -1)).all(axis=1)
    snr = metrics.per_sample_snr_db(ref, np.where(np.isfinite(hw), hw, 0.0))
    snr[bad] = -np.inf
    return [int(i) for i in np.argsort(snr, kind="stable")[:count]]
