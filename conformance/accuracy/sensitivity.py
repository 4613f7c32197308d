"""Proof that the accuracy gates are sensitive: run a model at a precision with a named numeric fault injected into
the ``ipu`` emulator (:mod:`conformance.hardware.ipu.faults`), evaluate every gate of ``accuracy.toml`` for that case
against FP32, and say which gates catch the fault.

A gate catches a fault when it passes on the correct emulator (the baseline, evaluated the same way) and fails with
the fault. Gates relative to another precision (an fp8 gate of the fp16 metric) compare with that precision's correct
run: the fault is judged against the truth, not against a run that has the fault too. A fault's status is

- ``caught``: at least one gating check caught it (``caught_by``; non-gating checks that did are ``flagged_by``);
- ``not caught``: the outputs changed and no gating check caught it;
- ``not triggered``: the outputs are bit for bit those of the correct emulator (e.g. nothing overflows, so NaN on
  overflow cannot show) and so are the op-level checks' mismatches (``op_mismatches``, whose probes run under the
  fault too): no gate can see it on these samples;
- ``n/a``: the fault does not apply to the precision (e.g. an FP8 fault at fp16).

Everything returned is plain data (JSON-ready): :func:`run` gives the whole study (a model whose stored FP32
outputs cannot be used is listed under ``errors`` and the others still run), :func:`render_text` and
:func:`render_markdown` its tables.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from conformance.accuracy import reference
from conformance.accuracy.evaluation import (
    compute_metrics,
    evaluate,
    measure_probes,
    probe_samples,
    run_hardware,
    wants_probe,
)
from conformance.hardware import get_backend
from conformance.hardware.ipu.faults import FAULT_NAMES, get_fault
from conformance.targets import accuracy as accuracy_targets
from conformance.targets.profiles import load_profiles
from models import load_model
from models.seeds import WEIGHT_SEED

SCHEMA = "ipu-conformance/sensitivity/1"
HARDWARE = "ipu"
STATUSES = ("caught", "not caught", "not triggered", "n/a")


def _number(value) -> float | None:
    """A JSON-ready number: None for a missing or non-finite value."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _evaluation(e) -> dict:
    return {"check": e.gate.check, "metric": e.gate.metric, "gating": bool(e.gate.gating), "passed": bool(e.passed),
            "value": _number(e.value), "target": _number(e.target), "op": e.gate.op, "reason": e.reason,
            "description": e.describe()}


def _gates(model: str, precision: str) -> list:
    """The case's gates that apply without labels (the study runs the evaluation set, which has none: the gates of
    the label metrics of a user's data set do not apply)."""
    return accuracy_targets.applicable(accuracy_targets.gates_for(HARDWARE, model, precision), labelled=False)


class _Study:
    """One model's FP32 reference and its correct runs, each computed once, at one profile's sample count."""

    def __init__(self, name: str, profile, backend):
        self.name = name
        self.count = profile.samples[name]
        self.batch_size = profile.batch_size[name]
        self.backend = backend
        start = time.perf_counter()
        self.model = load_model(name, seed=WEIGHT_SEED)
        self.inputs, self.reference = self._reference()
        self.load_s = time.perf_counter() - start
        self._clean: dict[str, tuple[dict, object]] = {}

    def _reference(self) -> tuple[dict, dict]:
        """(inputs, FP32 outputs) of the first ``count`` evaluation samples, as the accuracy tests take them: the
        stored outputs, and FP32 computed here for samples beyond the stored ones."""
        inputs, outputs, _ = reference.outputs_for(self.model, self.count, self.batch_size)
        return inputs, outputs

    def run(self, precision: str) -> tuple[dict, object]:
        """The emulator's outputs at ``precision`` and their metrics, the probes the gates ask for included, as the
        accuracy test measures them (with whatever fault is injected around the call)."""
        prepared = self.backend.prepare(self.model, precision, batch_size=self.batch_size)
        gates = _gates(self.name, precision)
        ops = prepared.ops()
        outputs, local = run_hardware(self.model, self.inputs, self.batch_size, ops, probe=wants_probe(gates))
        metrics = self.metrics(outputs)
        used = prepared.details(ops)
        measure_probes(gates, metrics, local, len(probe_samples(self.inputs, self.batch_size)),
                       lambda: self.backend.op_checks(self.name, precision, used))
        return outputs, metrics

    def clean(self, precision: str) -> tuple[dict, object]:
        """(outputs, metrics) of the correct emulator at ``precision``."""
        if precision not in self._clean:
            self._clean[precision] = self.run(precision)
        return self._clean[precision]

    def metrics(self, outputs: dict):
        return compute_metrics(self.name, self.reference, outputs, self.inputs)


def _same_bits(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)


def _judge(baseline: list, faulty: list) -> tuple[list[str], list[str], list[str]]:
    """(gating checks that caught the fault, non-gating ones that flagged it, gating ones that failed already)."""
    passed_before = {e.gate.check: e.passed for e in baseline}
    caught = [e.gate.check for e in faulty if e.gate.gating and not e.passed and passed_before.get(e.gate.check)]
    flagged = [e.gate.check for e in faulty if not e.gate.gating and not e.passed and passed_before.get(e.gate.check)]
    failing = [e.gate.check for e in faulty if e.gate.gating and not e.passed and not passed_before.get(e.gate.check)]
    return caught, flagged, failing


def _fault_case(study: _Study, precision: str, fault, gates, reference_sets, baseline, log) -> dict:
    policy = study.backend.policy(precision)
    entry = {"fault": fault.name, "description": fault.description, "status": "n/a", "caught_by": [],
             "flagged_by": [], "reason": "", "changed": 0, "unit": fault.unit, "evaluations": [], "seconds": 0.0}
    reason = fault.applies(policy, study.backend.fp8_settings.get(study.name))
    if reason:
        entry["reason"] = reason
        return entry
    log(f"sensitivity {study.name} {precision} {fault.name}: running ...")
    start = time.perf_counter()
    with fault.inject() as injection:
        outputs, faulty_metrics = study.run(precision)
    entry["changed"] = injection.changed
    entry["seconds"] = round(time.perf_counter() - start, 2)
    clean_outputs, clean_metrics = study.clean(precision)
    if (_same_bits(outputs, clean_outputs)
            and faulty_metrics.probes.get("op_mismatches") == clean_metrics.probes.get("op_mismatches")):
        entry["status"] = "not triggered"
        entry["reason"] = (f"outputs bit-identical to the correct emulator's: {fault.idle}" if injection.changed == 0
                           else f"outputs bit-identical to the correct emulator's although the fault acted "
                                f"({injection.changed} {fault.unit})")
        return entry
    evaluations = evaluate(gates, faulty_metrics, reference_sets)
    entry["evaluations"] = [_evaluation(e) for e in evaluations]
    caught, flagged, failing = _judge(baseline, evaluations)
    entry.update(caught_by=caught, flagged_by=flagged, status="caught" if caught else "not caught")
    if not caught:
        entry["reason"] = ("it fails only checks that fail without it too: " + ", ".join(failing) if failing else
                           "every gating check still passes")
    return entry


def _case(study: _Study, precision: str, faults, log) -> dict:
    gates = _gates(study.name, precision)
    start = time.perf_counter()
    others = sorted(accuracy_targets.reference_precisions(gates))
    runs = [p for p in (*others, precision) if p not in study._clean]
    if runs:
        log(f"sensitivity {study.name} {precision}: the correct emulator at {', '.join(runs)} ...")
    reference_sets = {"fp32": study.metrics(study.reference)}
    for other in others:
        reference_sets[other] = study.clean(other)[1]
    baseline = evaluate(gates, study.clean(precision)[1], reference_sets)
    case = {"model": study.name, "precision": precision, "samples": study.count, "batch_size": study.batch_size,
            "baseline": [_evaluation(e) for e in baseline], "baseline_seconds": round(time.perf_counter() - start, 2),
            "faults": []}
    failing = [e.gate.check for e in baseline if e.gate.gating and not e.passed]
    log(f"sensitivity {study.name} {precision}: baseline {'fails ' + ', '.join(failing) if failing else 'passes'} "
        f"({case['baseline_seconds']:.1f} s)")
    for fault in faults:
        entry = _fault_case(study, precision, fault, gates, reference_sets, baseline, log)
        case["faults"].append(entry)
        if entry["status"] != "n/a":
            log(f"sensitivity {study.name} {precision} {fault.name}: {describe(entry)} ({entry['seconds']:.1f} s)")
    return case


def cases_for(models, precisions=None) -> list[tuple[str, str]]:
    """The (model, precision) pairs with accuracy gates on the ipu, in the order of ``models``."""
    return accuracy_targets.matrix(HARDWARE, list(models), None if precisions is None else list(precisions))


def run(models, precisions=None, faults=None, profile: str = "smoke", *, log: Callable[[str], None] = lambda s: None,
        backend=None) -> dict:
    """The sensitivity study: every case of ``models`` x ``precisions`` (default: every precision with gates) with
    every fault of ``faults`` (default: all). Plain data; see the module docstring for the statuses."""
    backend = backend or get_backend(HARDWARE)
    chosen = [get_fault(name) for name in (faults or FAULT_NAMES)]
    profile_data = load_profiles()[profile]
    start = time.perf_counter()
    cases, errors = [], []
    for name in models:
        pairs = [p for m, p in cases_for([name], precisions)]
        if not pairs:
            continue
        log(f"sensitivity {name}: the model and the FP32 outputs of {profile_data.samples[name]} samples ...")
        try:
            study = _Study(name, profile_data, backend)
        except reference.ReferenceError as exc:  # e.g. stale stored outputs: the other models still run
            errors.append({"model": name, "error": str(exc)})
            log(f"sensitivity {name}: not run: {exc}")
            continue
        log(f"sensitivity {name}: {study.count} samples, batch {study.batch_size}, loaded in {study.load_s:.1f} s")
        for precision in pairs:
            cases.append(_case(study, precision, chosen, log))
    counts = {status: sum(f["status"] == status for c in cases for f in c["faults"]) for status in STATUSES}
    return {"schema": SCHEMA, "hardware": HARDWARE, "profile": profile,
            "faults": {f.name: f.description for f in chosen}, "cases": cases, "errors": errors, "counts": counts,
            "all_caught": counts["not caught"] == 0, "seconds": round(time.perf_counter() - start, 1)}


# -- rendering --------------------------------------------------------------------------------------------------------
def describe(entry: dict) -> str:
    """One fault's result in a cell: the gates that caught it, NOT CAUGHT, not triggered or n/a, with the reason."""
    status = entry["status"]
    if status == "caught":
        text = ", ".join(entry["caught_by"])
        return text + (f" (also flagged: {', '.join(entry['flagged_by'])})" if entry["flagged_by"] else "")
    label = {"not caught": "NOT CAUGHT"}.get(status, status)
    return f"{label}: {entry['reason']}" if entry["reason"] else label


def _baseline_line(case: dict) -> str:
    gating = [e for e in case["baseline"] if e["gating"]]
    failing = [e["check"] for e in gating if not e["passed"]]
    verdict = f"fails {', '.join(failing)}" if failing else f"all {len(gating)} gating checks pass"
    return f"{case['model']} {case['precision']} ({case['samples']} samples): baseline {verdict}"


def render_text(result: dict) -> str:
    """The terminal tables: per model and precision, fault -> result."""
    width = max((len(f) for f in result["faults"]), default=5)
    lines = []
    for case in result["cases"]:
        lines.append(_baseline_line(case))
        for entry in case["faults"]:
            lines.append(f"  {entry['fault']:<{width}}  {describe(entry)}")
        lines.append("")
    lines += [f"{error['model']}: not run: {error['error']}" for error in result["errors"]]
    counts = result["counts"]
    lines.append(f"sensitivity ({result['profile']} profile, {result['seconds']:.0f} s): {counts['caught']} caught, "
                 f"{counts['not caught']} not caught, {counts['not triggered']} not triggered, {counts['n/a']} n/a")
    return "\n".join(lines) + "\n"


def render_markdown(result: dict) -> str:
    """The same as a Markdown report: a summary, then one table per model and precision."""
    counts = result["counts"]
    lines = ["# Accuracy gate sensitivity", "",
             f"Faults injected into the `{result['hardware']}` emulator, {result['profile']} profile "
             f"({result['seconds']:.0f} s): {counts['caught']} caught, {counts['not caught']} not caught, "
             f"{counts['not triggered']} not triggered, {counts['n/a']} n/a. A gate catches a fault when it passes on "
             "the correct emulator and fails with the fault.", "", "| fault | what it does |", "|---|---|"]
    lines += [f"| `{name}` | {text} |" for name, text in result["faults"].items()]
    if result["errors"]:
        lines += ["", "Not run:", ""] + [f"- {error['model']}: {error['error']}" for error in result["errors"]]
    for case in result["cases"]:
        lines += ["", f"## {case['model']} {case['precision']}", "", _baseline_line(case) + ".", "",
                  "| fault | result | caught by |", "|---|---|---|"]
        for entry in case["faults"]:
            status = {"not caught": "**NOT CAUGHT**"}.get(entry["status"], entry["status"])
            cell = ", ".join(f"`{c}`" for c in entry["caught_by"]) or entry["reason"].replace("|", "\\|")
            lines.append(f"| `{entry['fault']}` | {status} | {cell} |")
    return "\n".join(lines) + "\n"
