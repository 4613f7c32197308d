"""Accuracy gates: each model at each precision of the hardware against the FP32 reference outputs.

The matrix comes from ``conformance/targets/accuracy.toml`` (the tables of ``--hardware``, filtered by ``--model`` and
``--precision``); ids are ``<model>-<precision>``, e.g. ``test_accuracy[bert-base-fp8]``. A failing gate (or
``--diagnose``) adds the error layer by layer on the worst samples.
"""

from __future__ import annotations

import dataclasses
import io
import shlex
import time

import numpy as np
import pytest

from conformance.accuracy import reference
from conformance.accuracy.diagnosis import diagnose, local_errors
from conformance.accuracy.evaluation import (
    UNITS,
    compute_metrics,
    evaluate,
    measure_probes,
    probe_samples,
    reference_on_engine,
    run_on_engine,
    wants_probe,
    worst_samples,
)
from conformance.datasets import sample_labels
from conformance.datasets.cache import OutputCache
from conformance.distributed import BatchStore, make_engine, pick
from conformance.fileio import write_bytes_atomic
from conformance.settings.session import run_settings
from conformance.targets import accuracy as accuracy_targets
from models import MODEL_NAMES
from models.ops import Ops

# Samples the layer-by-layer diagnosis runs (the ones with the lowest SNR).
DIAGNOSE_SAMPLES = 2


def pytest_generate_tests(metafunc):
    if "accuracy_case" in metafunc.fixturenames:
        settings = run_settings(metafunc.config)
        cases = accuracy_targets.matrix(settings.hardware, settings.models, settings.precisions)
        cases += [(name, precision) for name in settings.onnx for _, precision in
                  accuracy_targets.matrix(settings.hardware, [accuracy_targets.GRAPH_CASE], settings.precisions)]
        if not cases:
            backend = settings.backend
            reasons = {backend.accuracy_support(m, p) for m in MODEL_NAMES for p in backend.precisions}
            assert None not in reasons, (
                f"no accuracy targets for hardware {settings.hardware!r}, models {list(settings.models)}, precisions "
                f"{list(settings.precisions)} in {accuracy_targets.ACCURACY_FILE} or the models' or backend's own "
                f"{accuracy_targets.ACCURACY_FILE.name}"
            )
            skip = pytest.mark.skip(reason="; ".join(sorted(reasons)))
            metafunc.parametrize("accuracy_case", [pytest.param(None, id="none", marks=skip)])
            return
        metafunc.parametrize("accuracy_case", cases, ids=[f"{m}-{p}" for m, p in cases])


class AccuracyRuns:
    """The session's FP32 references and hardware runs, each computed once (an fp8 test reuses the fp16 run).

    A model of the user's (``--checkpoint``, ``--dataset``) takes its inputs from the data set (or the checkpoint
    model's synthetic samples) and its FP32 outputs from the FP32 model, cached on disk; the others use the stored
    references."""

    def __init__(self, settings, backend, model_store, user_cases, config, progress=None):
        self.settings = settings
        self.progress = progress  # progress(line): a line on the terminal while a long run computes
        self.backend = backend
        self.model_store = model_store
        self.user_cases = user_cases
        self.config = config
        self._references: dict[str, tuple[dict, dict]] = {}
        self._labels: dict[str, object] = {}
        self._runs: dict[tuple[str, str], dict] = {}
        self.cached: dict[str, bool] = {}  # user's models: whether their FP32 outputs came from the cache
        self.sources: dict[str, dict] = {}  # stored models: the rows read from the reference file and computed
        self.fp32_runs: dict[str, dict] = {}  # the engine's stats of the FP32 outputs computed, by model
        self._engine = None

    def engine(self):
        """What runs the FP32 and hardware batches (made on first use): in this process, or with ``workers`` local
        worker processes or on the ``cluster`` at an address, keeping every computed batch in the cache directory so
        that an interrupted run resumes (:mod:`conformance.distributed`)."""
        if self._engine is None:
            workers, cluster = self.settings.workers, self.settings.cluster
            distributed = workers is not None or cluster is not None
            # the settings made the cache directory (writable) for a distributed run
            self._engine = make_engine(workers, cluster, BatchStore(self.settings.cache_dir) if distributed else None,
                                       array=self.settings.array)
            if distributed and self.progress is not None:
                dashboard = self._engine.dashboard
                devices = f" computing on {', '.join(self._engine.devices)}" if self._engine.devices else ""
                self.progress(f"accuracy batches run on {self._engine.where} ({self._engine.workers} workers{devices}, "
                              f"batches kept in {self._engine.store.directory}); "
                              + (f"dashboard: {dashboard}" if dashboard else "no dashboard (it needs bokeh where the "
                                 "scheduler runs)"))
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def count(self, name: str) -> int:
        """Model samples (rows) the test runs: a data set's (all, or as --samples caps it), else --samples or the
        profile's."""
        if name in self.settings.onnx:
            return self.settings.onnx[name].count()
        if name in self.user_cases and self.user_cases[name].evaluation is not None:
            return self.user_cases[name].evaluation.rows
        return self.settings.sample_count(name)

    def batch_size(self, name: str) -> int:
        if name in self.settings.onnx:
            return self.settings.onnx[name].batch_size
        return self.settings.profile_data.batch_size[name]

    def labels(self, name: str):
        """The labels ``name`` is judged against (None without labels): a user's labelled evaluation set, or the
        labels of the suite's own samples where the seeded model was built to solve their task (resnet50's synthetic
        images' classes)."""
        case = self.user_cases.get(name)
        if case is not None or name in self.settings.onnx:
            return case.evaluation if case is not None and case.labelled else None
        if name not in self._labels:
            model = self.model_store.get(name)
            self._labels[name] = sample_labels(name, reference.evaluation_labels(model, self.count(name)))
        return self._labels[name]

    def reference(self, name: str) -> tuple[dict, dict]:
        """(inputs, FP32 outputs) of the first ``count`` evaluation samples: stored outputs (checked against the
        samples they were computed on), and FP32 computed for samples beyond the stored ones, recorded in
        ``sources``; a user's model: computed (or cached) outputs of its inputs. What is computed runs as batches of
        the engine, like the hardware's runs (:meth:`fp32`)."""
        if name not in self._references:
            if name in self.settings.onnx:  # an imported graph's FP32 outputs come from onnxruntime, uncached
                case = self.user_cases[name]
                inputs = case.inputs(self.count(name))
                outputs, self.cached[name] = case.reference(inputs, self.batch_size(name))
            elif name in self.user_cases:
                case = self.user_cases[name]
                inputs = case.inputs(self.count(name))
                outputs, self.cached[name] = case.reference(inputs, self.batch_size(name),
                                                            OutputCache(self.settings.cache_dir),
                                                            lambda given: self.fp32(name, case.model, given))
            else:
                model = self.model_store.get(name)
                inputs, outputs, self.sources[name] = reference.outputs_for(
                    model, self.count(name), self.batch_size(name), compute=lambda given: self.fp32(name, model, given))
            self._references[name] = (inputs, outputs)
        return self._references[name]

    def fp32(self, name: str, model, inputs) -> dict:
        """FP32 outputs of ``model`` over ``inputs``, computed as batches of the engine (the bits of
        ``models.run_batched``); what the run did is kept for the records (``fp32_runs``)."""
        outputs, stats = reference_on_engine(self.engine(), name, model, inputs, self.batch_size(name),
                                             progress=self.progress)
        self.fp32_runs[name] = stats.as_dict()
        return outputs

    def hardware(self, name: str, precision: str, *, probe: bool = False) -> dict:
        """The hardware's outputs at ``precision``, what prepared them (ops with the same numerics: FP8 scales), the
        time it took, and with ``probe`` the ops' local errors on the probe samples (see ``run_hardware``; measured
        in the run, or apart when the run was made for another test without them)."""
        key = (name, precision)
        if (key in self._runs and probe and self._runs[key]["local_errors"] is None
                and self._runs[key]["prepared"].per_op):
            run = self._runs[key]
            inputs, _ = self.reference(name)
            samples = probe_samples(inputs, self.batch_size(name))
            run["local_errors"] = local_errors(self.model_store.get(name), pick(inputs, samples), run["prepared"].ops(),
                                               Ops(), range(len(samples)))
        if key not in self._runs:
            model = self.model_store.get(name)
            inputs, _ = self.reference(name)
            start = time.perf_counter()
            case = self.user_cases.get(name)
            prepared = self.backend.prepare(model, precision, case.calibration_inputs() if case else None,
                                            batch_size=self.batch_size(name))
            calibrated = time.perf_counter()
            run = run_on_engine(self.engine(), f"{name}-{precision}", model, prepared, inputs, self.batch_size(name),
                                probe=probe, progress=self.progress)
            self._runs[key] = {
                "outputs": run.outputs,
                "local_errors": run.local_errors,
                "prepared": prepared,
                "details": run.details,
                "engine": {**run.stats.as_dict(), "devices": run.devices},
                "calibration_s": calibrated - start,
                "run_s": time.perf_counter() - calibrated,
            }
        return self._runs[key]


@pytest.fixture(scope="session")
def accuracy_runs(settings, backend, model_store, user_cases, pytestconfig, progress):
    runs = AccuracyRuns(settings, backend, model_store, user_cases, pytestconfig, progress)
    yield runs
    runs.close()


def _write_artifacts(settings, name: str, precision: str, ref: dict, hw: dict) -> None:
    """``<report_dir>/artifacts/<model>-<precision>.npz``: reference__<output> and hardware__<output> arrays."""
    arrays = {f"reference__{k}": v for k, v in ref.items()}
    arrays.update({f"hardware__{k}": v for k, v in hw.items()})
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    write_bytes_atomic(settings.report_dir / "artifacts" / f"{name}-{precision}.npz", buffer.getvalue())


def _reproduce(settings, name: str, precision: str) -> str:
    user = "".join(f" {option} {name}={shlex.quote(str(given[name]))}"
                   for option, given in (("--checkpoint", settings.checkpoints), ("--dataset", settings.datasets),
                                         ("--calibration", settings.calibrations))
                   if name in given)
    samples = settings.samples.get(name, settings.samples.get("*"))
    if samples is not None:
        user += f" --samples {name}={samples}"
    if name in settings.onnx:
        return (f"pytest conformance/test_accuracy.py --hardware {settings.hardware} --profile {settings.profile} "
                f"--onnx {name}={shlex.quote(settings.onnx[name].model.config.path)}{settings.onnx[name].options()} "
                f"--precision {precision} --diagnose")
    return (f"pytest conformance/test_accuracy.py --hardware {settings.hardware} --profile {settings.profile} "
            f"--model {name} --precision {precision}{user} --diagnose")


def test_accuracy(accuracy_case, settings, backend, accuracy_runs, user_cases, record_check, progress):
    name, precision = accuracy_case
    table = accuracy_targets.GRAPH_CASE if name in settings.onnx else name  # an imported graph: the graphs' gates
    reason = None if name in settings.onnx else backend.accuracy_support(name, precision)
    if reason:
        pytest.skip(reason)
    labels = accuracy_runs.labels(name)
    gates = accuracy_targets.applicable(accuracy_targets.gates_for(settings.hardware, table, precision), labels is not None,
                                        task=labels.model if labels is not None else None)
    if name in settings.onnx and not user_cases[name].decides():  # no output holds class scores: no decisions
        gates = [g for g in gates if g.metric not in accuracy_targets.GRAPH_TASK_METRICS]
    count = accuracy_runs.count(name)
    progress(f"accuracy {name} {precision}: {count} samples, batch {accuracy_runs.batch_size(name)}")
    inputs, ref = accuracy_runs.reference(name)
    vacuous = user_cases[name].no_verdict(ref) if name in settings.onnx else None
    if vacuous:  # nothing to judge against: no verdict for this graph, not a pass or a hardware failure
        pytest.skip(f"no verdict: {vacuous}")
    run = accuracy_runs.hardware(name, precision, probe=wants_probe(gates))
    hw = run["outputs"]

    metric_sets = {"fp32": compute_metrics(table, ref, ref, inputs, labels)}
    for other in sorted(accuracy_targets.reference_precisions(gates)):
        metric_sets[other] = compute_metrics(table, ref, accuracy_runs.hardware(name, other)["outputs"], inputs, labels)
    current = compute_metrics(table, ref, hw, inputs, labels)
    probe_details = measure_probes(gates, current, run["local_errors"],
                                   len(probe_samples(inputs, accuracy_runs.batch_size(name))),
                                   lambda: backend.op_checks(table, precision, run["details"]))
    evaluations = evaluate(gates, current, metric_sets)
    failed = [e for e in evaluations if e.gate.gating and not e.passed]

    if settings.report_dir is not None:
        _write_artifacts(settings, name, precision, ref, hw)

    engine = {**run["engine"], "fp32_reference": accuracy_runs.fp32_runs.get(name)}  # None: no FP32 computed
    common = {"samples": count, "calibration_s": round(run["calibration_s"], 3), "run_s": round(run["run_s"], 3),
              "tensor_metrics": current.tensor, "engine": engine, **probe_details}
    common.update(run["details"])
    ungated = {m: v for m, v in current.task.items() if m not in {g.metric for g in gates}}
    if ungated:  # computed, but no gate names it: recorded as information, never a pass
        common["ungated_metrics"] = ungated
        progress(f"accuracy {name} {precision}: no gate for {', '.join(sorted(ungated))} (informational: add it to "
                 f"[{settings.hardware}.{table}.{precision}] to gate it)")
    if name in user_cases:
        common["judged"] = {**user_cases[name].judged(), "fp32_outputs_cached": accuracy_runs.cached.get(name)}
    elif name in accuracy_runs.sources:
        common["fp32_reference"] = accuracy_runs.sources[name]
    diagnosis_text = ""
    if failed or settings.diagnose:
        model = accuracy_runs.model_store.get(name)
        samples = worst_samples(name, ref, hw, min(DIAGNOSE_SAMPLES, count))
        # only the diagnosed rows are read (a streamed data set is never read whole)
        diag = diagnose(model, pick(inputs, samples), lambda rec: Ops(recorder=rec), run["prepared"].ops,
                        range(len(samples)))
        diag = dataclasses.replace(diag, samples=[int(i) for i in samples])
        common.update(diag.details())
        diagnosis_text = diag.summary()

    for e in evaluations:
        record_check(kind="accuracy", model=name, precision=precision, check=e.gate.check, value=e.value,
                     target=e.target if e.target is not None else float("nan"), op=e.gate.op,
                     units=UNITS.get(e.gate.metric, ""), gating=e.gate.gating, passed=e.passed,
                     established=e.established,
                     details={**e.details, **common, **({"reason": e.reason} if e.reason else {}),
                              **({"note": e.note} if e.note else {})})

    summary = ", ".join(f"{e.gate.check}={'n/a' if e.value is None else f'{e.value:.4g}'}"
                        + ("" if e.established is not False else f" (not established: {e.note or e.units_text()})")
                        for e in evaluations if e.gate.gating)
    progress(f"accuracy {name} {precision}: {'FAIL' if failed else 'pass'} in "
                                f"{run['calibration_s'] + run['run_s']:.1f} s ({summary})")
    if diagnosis_text and not failed:
        progress(f"accuracy {name} {precision}: {diagnosis_text}")
    if failed:
        lines = [f"{name} at {precision} on {settings.hardware} ({count} samples, profile {settings.profile}) vs FP32:"]
        lines += ["  " + e.describe() for e in failed]
        if diagnosis_text:
            lines.append("  " + diagnosis_text)
        lines.append(f"  reproduce: {_reproduce(settings, name, precision)}")
        pytest.fail("\n".join(lines), pytrace=False)
