"""Bad inputs and faults, each put to the real entry point: the main job (``pytest conformance/ ... --co`` in-process:
every check fires at configuration time, before any test), the ``ipu-conformance`` CLI, or ``models.load_model`` for
checkpoints. Each row says what is wrong and what must come back: the exit code and words of the message that name the
offending file, key, option or value. A data file is replaced by an edited copy (the loader's file constant patched,
its cache cleared), never edited in place.

To add a row, append a :class:`Bad` to ``CASES`` (or a list the parametrization joins); nothing else changes."""

from __future__ import annotations

import fcntl
import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from conformance.cli import main as cli_main
from conformance.hardware import hardware_names
from conformance.hardware.ipu import policy
from conformance.report import record as results_record
from conformance.hardware.ipu.timing import chips, cost, fit
from conformance.targets import accuracy, audit, label_floors, performance, profiles, regression
from models import CheckpointError, load_model, model_spec
from models.spec import ModelSpec
from tests.test_models_config import FIRST, _widedeep_checkpoint
from tests.test_report_shard_merge import split_sample
from tests.test_report_verify import (
    EARLIER,
    F1,
    RELATIVE,
    as_merged,
    fail_test,
    merged_passing,
    nothing_judged,
    passing_results,
    relative,
)

# the registered hardware names as a data file's error lists them ("'a', 'b' or 'c'")
HARDWARE_CHOICES = ", ".join(map(repr, hardware_names()[:-1])) + f" or {hardware_names()[-1]!r}"

REPO = Path(__file__).resolve().parents[1]
SUITE = ["-q", "--hardware", "ipu", "--profile", "smoke", "--model", "widedeep"]
COLLECT_ONLY = ["--co"]
SELECT_NOTHING = ["-k", "no_test_has_this_name"]  # where --co would skip the check: a run that selects no test
# every cached loader of a data file: cleared around each row, so that a patched file constant is read
LOADERS = (performance.load_performance_targets, profiles.load_profiles, profiles.reference_samples,
           audit.load_audit_config, policy.load_precisions, chips.load_devices, cost.load_constants,
           cost.load_calibration, cost.calibration_hash, cost._execution_table, accuracy._load_targets,
           label_floors.load_label_floors)


@dataclass(frozen=True)
class Bad:
    """One bad input. ``entry``: "suite" (the main job, ``SUITE`` + ``--co`` + ``args``), "cli" (``ipu-conformance`` + ``args``)
    or "checkpoint" (``load_model("widedeep", checkpoint=<tmp>/ckpt)``). ``file``/``old``/``new``: the data file
    ``module:CONSTANT`` replaced by a copy with ``old`` changed to ``new``. ``setup(tmp_path)`` prepares files the
    arguments name (``{tmp}`` in an argument is the test's directory). ``code``: the exit code (None: the call raises
    ``raises``). ``says``: words the message must contain."""

    id: str
    entry: str = "suite"
    args: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    file: str | None = None
    old: str = ""
    new: str = ""
    setup: Callable[[Path], None] | None = None
    code: int | None = 4
    raises: type[BaseException] | None = None
    says: tuple[str, ...] = ()
    collect_only: bool = True  # the main job with --co (else with a -k that selects nothing)
    names_line: bool = True  # a data file row: the message names the edited line (not only its table's)
    accepted: str = ""  # why the input is still accepted: the row is a strict expected failure until it is refused
    untouched: tuple[str, ...] = ()  # paths under the test's directory (an earlier report) the row must leave as they were


def data(file: str, old: str, new: str, *says: str, entry: str = "suite", args: tuple[str, ...] = (), code: int = 4,
         name: str = "", names_line: bool = True) -> Bad:
    """A row that edits one data file (``module:CONSTANT`` of its loader); the message must name the file's name too."""
    basename = _resolve(file).name
    return Bad(name, entry=entry, args=args, file=file, old=old, new=new, code=code, says=(basename, *says),
               names_line=names_line)


def _table(file: str, header: str) -> str:
    """The text of one table of a data file: its header line up to the next blank line."""
    text = _resolve(file).read_text()
    start = text.index(header + "\n")
    return text[start:text.index("\n\n", start) + 1]


def _resolve(file: str) -> Path:
    if file.startswith("model:"):  # a model's own table: model:<name>:<kind>
        _, name, kind = file.split(":")
        return model_spec(name).table(kind)
    module, constant = file.split(":")
    return getattr(importlib.import_module(module), constant)


PERF = "conformance.targets.performance:PERFORMANCE_FILE"
PROF = "conformance.targets.profiles:PROFILES_FILE"
AUDIT = "conformance.targets.audit:AUDIT_FILE"
REGR = "conformance.targets.regression:TOLERANCES_FILE"
PREC = "conformance.hardware.ipu.policy:PRECISIONS_FILE"
CHIPS = "conformance.hardware.ipu.timing.chips:DEVICES_FILE"
TIMING = "conformance.hardware.ipu.timing.cost:TIMING_FILE"
CALIB = "conformance.hardware.ipu.timing.cost:CALIBRATION_FILE"
EXEC = "conformance.hardware.ipu.timing.cost:EXECUTION_FILE"
PUBL = "conformance.hardware.ipu.timing.fit:PUBLISHED_FILE"
ACC = "conformance.targets.accuracy:ACCURACY_FILE"
FLOORS = "conformance.targets.label_floors:FLOORS_FILE"
WD_ACC = "model:widedeep:accuracy"  # wide&deep's own tables
WD_PERF = "model:widedeep:performance"
WD_PROF = "model:widedeep:profiles"
WD_FP8 = "model:widedeep:fp8"
ALBERT_PROF = "model:albert:profiles"
WIDEDEEP_FP8 = '[ipu.widedeep.fp8]\naccuracy = { of = "fp32", ratio = 0.99'
XFAIL_HEADER = "[temporarily-failing]\n"
PREDICT = ("predict", "resnet50", "--precision", "fp16", "--batch-size", "2")


def _file(name: str, content: str | bytes) -> Callable[[Path], None]:
    def make(tmp_path: Path) -> None:
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (target.write_bytes if isinstance(content, bytes) else target.write_text)(content)
    return make


def _earlier(tmp_path: Path) -> None:
    """An earlier report: the directory ``earlier/`` with a compliance.md and a results.json."""
    (tmp_path / "earlier").mkdir(exist_ok=True)
    (tmp_path / "earlier" / "compliance.md").write_text(EARLIER)
    (tmp_path / "earlier" / "results.json").write_text(json.dumps(passing_results()))


def _results(name: str, mutate: Callable[[dict], object] | None = None, *, verdict: bool = False,
             base: Callable[[], dict] = passing_results) -> Callable[[Path], None]:
    """A results.json at ``name``: the passing sample run, changed by ``mutate``; with ``verdict`` its verdict and exit
    status made to follow from the change (a consistent file); and an earlier report beside it."""
    def make(tmp_path: Path) -> None:
        data = base()
        if mutate is not None:
            mutate(data)
        if verdict:
            judgement = results_record.judgement_of(data)
            data["verdict"], data["exit_status"] = judgement.verdict, judgement.exit_status
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data))
        _earlier(tmp_path)
    return make


def _shards(change: Callable[[dict], object] | None = None, count: int = 2) -> Callable[[Path], None]:
    """The sample run's shard files ``shard1.json`` ... (the second changed by ``change``) and an earlier report."""
    def make(tmp_path: Path) -> None:
        for index, (name, data) in enumerate(split_sample(count)):
            if index == 1 and change is not None:
                change(data)
            (tmp_path / name).write_text(json.dumps(data))
        _earlier(tmp_path)
    return make


def _both(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    def make(tmp_path: Path) -> None:
        for setup in setups:
            setup(tmp_path)
    return make


def _only(model: str) -> Callable[[dict], None]:
    def keep(data: dict) -> None:
        data["tests"] = [t for t in data["tests"] if f"[{model}" in t["id"]]
        data["records"] = [r for r in data["records"] if r["model"] == model]
    return keep


def _nulls(data: dict) -> None:
    for record in data["records"]:
        record.update(value=None, passed=False)


def _checkpoint(convert=None, config: Callable[[dict], object] | None = None) -> Callable[[Path], None]:
    def make(tmp_path: Path) -> None:
        _, path = _widedeep_checkpoint(tmp_path, convert)
        if config is not None:
            cfg = path / "config.json"
            cfg.write_text(json.dumps(config(json.loads(cfg.read_text()))))
    return make


def _poison(key, value):
    if key != FIRST[0]:
        return value
    value = value.copy()
    value.flat[0] = np.nan
    return value


CASES = [
    # -- options and environment of the main job ---------------------------------------------------------------------
    Bad("model-empty", args=("--model", ""), says=("--model", "empty model name")),
    Bad("model-twice", args=("--model", "widedeep,wide&deep"), says=("--model", "names model 'widedeep' twice")),
    Bad("model-unknown", args=("--model", "gpt5"), says=("--model", "'gpt5'")),
    Bad("hardware-unknown", args=("--hardware", "tpu"), says=("--hardware", "'tpu'")),
    Bad("profile-unknown", args=("--profile", "huge"), says=("--profile", "'huge'")),
    Bad("precision-unknown", args=("--precision", "fp4"), says=("--precision", "'fp4'", "fp16, fp16-half-partials")),
    Bad("device-unknown", args=("--device", "h100"), says=("--device h100", "c600")),
    Bad("shard-out-of-range", args=("--shard", "3/2"), says=("--shard", "3/2")),
    Bad("xfail-file-missing", args=("--xfail-file", "{tmp}/none.txt"), says=("--xfail-file", "none.txt", "no such file")),
    Bad("xfail-file-directory", args=("--xfail-file", "{tmp}"), says=("--xfail-file", "a directory")),
    Bad("baseline-missing", args=("--baseline", "{tmp}/old/results.json"), says=("old/results.json", "no such file")),
    Bad("baseline-not-results", args=("--baseline", "{tmp}/list.json"), setup=_file("list.json", "[1, 2]"),
        says=("list.json",)),
    Bad("threads-zero", env={"CONFORMANCE_THREADS": "0"}, says=("CONFORMANCE_THREADS='0'", "positive integer")),
    Bad("threads-word", env={"CONFORMANCE_THREADS": "two"}, says=("CONFORMANCE_THREADS='two'",)),
    # -- the report directory ----------------------------------------------------------------------------------------
    Bad("report-dir-is-a-file", args=("--report-dir", "{tmp}/report"), setup=_file("report", "not a directory"),
        says=("--report-dir", "report")),
    Bad("report-dir-held", args=("--report-dir", "{tmp}/held"), setup=lambda tmp: _hold_lock(tmp / "held"),
        says=("held", f"pid {os.getpid()}"), collect_only=False),
    # -- performance targets -----------------------------------------------------------------------------------------
    data(WD_PERF, "[targets.widedeep.ipu.fp16]\nSingleStream = 1.6", "[targets.widedeep.ipu.fp16]\nSingleStream = true",
         "targets.widedeep.ipu.fp16.SingleStream = true", "valid number", name="perf-bool-as-number"),
    data(WD_PERF, "rows_per_sample = 1024", "rows_per_sample = 1024\nrow_per_sample = 1", "unknown key 'row_per_sample'",
         "allowed keys: server_latency_ms", name="perf-unknown-key"),
    data(WD_PERF, "Offline = 24560", "Offline = -5", "Offline = -5", "greater than 0", name="perf-negative-target"),
    data(WD_PERF, "server_latency_ms = 60", "server_latency_ms = 0", "models.widedeep.server_latency_ms = 0",
         "greater than 0", name="perf-latency-bound-zero"),
    data(WD_PERF, "[targets.widedeep.ipu.fp8]", "[targets.widedeep.ipu.fp9]", "targets.widedeep.ipu.fp9",
         "unknown precision 'fp9'", "fp16, fp16-half-partials, fp8, fp8-weights", name="perf-unknown-precision"),
    data(WD_PERF, "[targets.widedeep.ipu.fp16]\nSingleStream", "[targets.widedeep.ipu.fp16]\nStreaming = 2.0\nSingleStream",
         "unknown name 'Streaming'", "'SingleStream', 'MultiStream', 'Server' or 'Offline'", name="perf-unknown-scenario"),
    data(WD_PERF, "max_batch = { ipu = 20, cpu = 1, null = 20 }", "max_batch = { ipu = 20, cpu = 1, nul = 20 }",
         "unknown name 'nul'", HARDWARE_CHOICES, name="perf-unknown-hardware"),
    data(WD_PERF, "[models.widedeep]", "[models.widedeep", "not valid TOML", name="perf-toml-syntax"),
    data(WD_PERF, "[models.widedeep]", "[models.wide-deep]", "unknown name 'wide-deep'", name="perf-unknown-model"),
    data(WD_PERF, "[models.widedeep]", "[models.albert]", "names 'albert'", "may only hold its own name",
         names_line=False, name="perf-another-models-table"),
    data(PERF, "are not targeted.\n", 'are not targeted.\n[targets.widedeep.null.fp32]\nOffline = 30000\n',
         "[targets.widedeep]", "in its own file only", names_line=False, name="perf-targets-in-two-files"),
    # -- profiles ----------------------------------------------------------------------------------------------------
    data(WD_PROF, "widedeep = 1024 }\nbatch_size", "widedeep = -5 }\nbatch_size", "smoke.samples.widedeep = -5",
         "greater than or equal to 1", name="profile-negative-samples"),
    data(PROF, "strict_xfails = true", "strict_xfails = 1", "default.strict_xfails = 1", "valid boolean",
         name="profile-number-as-bool"),
    data(PROF, "sampling_target = 32", "sampling_target = 32\nsampling = 4", "default.audit", "unknown key 'sampling'",
         name="profile-unknown-key"),
    data(PROF, 'models = ["resnet50", "widedeep"', 'models = ["resnet5", "widedeep"', 'smoke.audit.models[0] = "resnet5"',
         "'resnet50'", name="profile-unknown-model"),
    data(ALBERT_PROF, "[reference]\nsamples = { albert = 16 }\n", "", "lacks the required key 'reference'",
         names_line=False, name="profile-missing-model"),
    data(PROF, "minilm_sentences = 48\n", "minilm_sentences = 48\nsamples = { widedeep = 1 }\n",
         "gives model 'widedeep' this count too", names_line=False, name="profile-count-in-two-files"),
    data(PROF, "Server = 600, Offline = 1 }, cpu", "Server = 600 }, cpu", "smoke.performance.min_query_count.ipu",
         "lacks the required key 'Offline'", name="profile-missing-scenario"),
    data(PROF, "min_duration_ms = 300", "min_duration_ms = 0", "smoke.performance.min_duration_ms = 0",
         name="profile-zero-duration"),
    data(PROF, "[full]\n", "[fulll]\n", "unknown key 'fulll'", "full: lacks the required key 'minilm_sentences'",
         name="profile-misspelt-table"),
    # -- audit settings ----------------------------------------------------------------------------------------------
    data(AUDIT, "accuracy_delta = 0.01", "accuracy_delta = 1.5", "TEST01.accuracy_delta = 1.5", "less than or equal to 1",
         name="audit-ratio-above-one"),
    data(AUDIT, "max_speedup = 1.10", "max_speedup = 0.9", "TEST04.max_speedup = 0.9", "greater than 1",
         name="audit-speedup-below-one"),
    data(AUDIT, "same-sample run.\nremeasure = 3", "same-sample run.\nremeasure = true", "TEST04.remeasure = true",
         "valid integer",
         name="audit-bool-as-count"),
    data(AUDIT, 'scenarios = ["Offline", "SingleStream"]', 'scenarios = ["Offline", "Streaming"]',
         'TEST01.scenarios[1] = "Streaming"', name="audit-unknown-scenario"),
    # -- regression tolerances ---------------------------------------------------------------------------------------
    data(REGR, "rel = 0.001", "rel = -0.001", "accuracy.rel = -0.001", "greater than or equal to 0",
         name="regression-negative"),
    data(REGR, "[performance.timing.simulated]", "[performance.timing.simulted]", "unknown name 'simulted'",
         "'measured' or 'simulated'", name="regression-unknown-timing"),
    # -- precisions --------------------------------------------------------------------------------------------------
    data(PREC, 'partials = "float"', 'partials = "double"', 'precisions.fp16.partials = "double"', "'float' or 'half'",
         name="precision-unknown-partials"),
    data(WD_FP8, "calibration_samples = 1024", "calibration_samples = 0", "fp8.widedeep.calibration_samples = 0",
         name="precision-zero-samples"),
    data(WD_FP8, 'scales = "amax"\ncalibration_samples = 1024', 'scales = "fixed"\ninput_scale = -3\ncalibration_samples = 1024',
         "fp8.widedeep", "needs weight_scale", name="precision-fixed-without-scale",
         names_line=False),  # a rule across keys: the table's line
    data(WD_FP8, "[fp8.widedeep]", "[fp8.wide_deep]", "unknown name 'wide_deep'", name="precision-unknown-model"),
    data(PREC, "[fp8.onnx]", "[fp8.widedeep]\nskip = []\n\n[fp8.onnx]", "has [fp8.widedeep] too", names_line=False,
         name="precision-model-settings-in-two-files"),
    # -- chips, timing constants, execution options, calibration -----------------------------------------------------
    data(CHIPS, "[c600]\n", "[c600]\ntile = 4\n", "c600", "unknown key 'tile'", name="chip-unknown-key"),
    data(CHIPS, "tiles = 1472\nclock_ghz = 1.486", "tiles = 0\nclock_ghz = 1.486", "c600.tiles = 0", "greater than 0",
         name="chip-zero-tiles"),
    data(CHIPS, "amp_tflops = { fp16 = 280.0, fp32 = 70.0, fp8 = 560.0 }",
         "amp_tflops = { fp16 = 280.0, fp32 = 70.0, fp4 = 560.0 }", "c600.amp_tflops", "unknown name 'fp4'",
         name="chip-unknown-type"),
    data(TIMING, "matrix = 3", "matrix = -3", "supersteps.matrix = -3", name="timing-negative-steps"),
    data(EXEC, "batches_per_step = 1024", "batches_per_step = 0", "widedeep.batches_per_step = 0",
         name="execution-zero-batches"),
    data(EXEC, "packed = false\nclients = 5", "packed = 0\nclients = 5", "widedeep.packed = 0", "valid boolean",
         name="execution-number-as-bool"),
    data(CALIB, "amp_efficiency = 0.", "amp_efficiency = 1.", "parameters.amp_efficiency", "less than or equal to 1",
         name="calibration-efficiency-above-one"),
    # -- the same files through the CLI (its errors exit 4) ----------------------------------------------------------
    data(PUBL, "qps = 7062", "qps = -7062", "row[0].qps = -7062", entry="cli", args=("calibrate", "--check"), code=4,
         name="published-negative-qps"),
    data(PUBL, "fit = false\nreason", "fit = false\nreasons", "unknown key 'reasons'", entry="cli",
         args=("calibrate", "--check"), code=4, name="published-unknown-key"),
    data(CHIPS, "host_gbps = 32.0", "host_gbps = -32.0", "c600.host_gbps = -32.0", entry="cli", args=PREDICT, code=4,
         name="predict-bad-chip-file"),
    # -- predict's own arguments -------------------------------------------------------------------------------------
    Bad("predict-clients-zero", entry="cli", args=(*PREDICT, "--clients", "0"), code=4, says=("--clients",)),
    Bad("predict-set-not-a-number", entry="cli", args=(*PREDICT, "--set", "image_size=abc"), code=4,
        says=("image_size", "expects an integer", "'abc'")),
    Bad("predict-batch-does-not-fit", entry="cli", args=(*PREDICT[:-1], "100000"), code=1,
        says=("does not fit", "--allow-overflow")),
    Bad("predict-unknown-device", entry="cli", args=(*PREDICT, "--device", "h100"), code=4, says=("h100", "c600")),
    # -- report CLI --------------------------------------------------------------------------------------------------
    Bad("report-missing-file", entry="cli", args=("report", "{tmp}/none.json"), code=4, says=("none.json",)),
    Bad("report-not-results", entry="cli", args=("report", "{tmp}/list.json"), setup=_file("list.json", "[1]"), code=4,
        says=("list.json",)),
    # -- checkpoints -------------------------------------------------------------------------------------------------
    Bad("checkpoint-int-tensor", entry="checkpoint", setup=_checkpoint(lambda k, v: v.astype(np.int64) if k == FIRST[0] else v),
        code=None, raises=CheckpointError, says=(FIRST[0], "int64", "expected a float dtype")),
    Bad("checkpoint-nan", entry="checkpoint", setup=_checkpoint(_poison), code=None, raises=CheckpointError,
        says=(FIRST[0], "non-finite")),
    Bad("checkpoint-config-list", entry="checkpoint", setup=_checkpoint(config=lambda c: [c]), code=None,
        raises=CheckpointError, says=("config.json", "not a JSON object")),
    Bad("checkpoint-config-typo", entry="checkpoint", setup=_checkpoint(config=lambda c: {**c, "embeding_dim": 4}),
        code=None, raises=CheckpointError, says=("embeding_dim", "unknown field")),
    # -- the user's checkpoints, data sets and sample caps ---------------------------------------------------------
    Bad("user-dataset-for-unselected-model", args=("--dataset", "resnet50={tmp}/images"), setup=_file("images/x", ""),
        says=("--dataset resnet50", "not selected", "--model widedeep")),
    Bad("user-checkpoint-missing", args=("--checkpoint", "widedeep={tmp}/none"), says=("--checkpoint widedeep", "none",
                                                                                        "does not exist")),
    Bad("user-checkpoint-of-another-model", args=("--checkpoint", "widedeep={tmp}/ckpt"),
        setup=_checkpoint(config=lambda c: {**c, "model_type": "resnet"}), says=("ckpt", "model_type", "resnet",
                                                                                 "'widedeep'")),
    Bad("user-checkpoint-unknown-model", args=("--checkpoint", "widedep={tmp}/ckpt"), says=("widedep", "unknown model")),
    Bad("user-checkpoint-not-model-path", args=("--checkpoint", "{tmp}/ckpt"), says=("is not MODEL=PATH",)),
    Bad("user-checkpoint-twice", args=("--checkpoint", "widedeep={tmp}/ckpt", "--checkpoint", "wide&deep={tmp}/ckpt"),
        setup=_checkpoint(), says=("--checkpoint widedeep=...", "more than once")),
    Bad("user-samples-zero", args=("--samples", "0"), says=("'0'", "positive integer")),
    Bad("user-samples-not-a-number", args=("--samples", "widedeep=many"), says=("widedeep=many", "positive integer")),
    Bad("user-dataset-missing", args=("--dataset", "widedeep={tmp}/none.tsv"), says=("none.tsv", "no such file")),
    Bad("user-samples-of-no-graph", args=("--samples", "vit=3"), says=("--samples vit=...", "unknown model 'vit'",
                                                                       "a case of --onnx")),
    Bad("user-samples-named-all", args=("--samples", "all=3"), says=("'all=3'", "unknown model 'all'")),
    Bad("user-cache-dir-is-a-file", args=("--checkpoint", "widedeep={tmp}/ckpt", "--cache-dir", "{tmp}/cache"),
        setup=lambda tmp: (_checkpoint()(tmp), (tmp / "cache").write_text("")), says=("cache", "not a directory")),
    # -- accuracy gates and known failures -------------------------------------------------------------------------------
    data(ACC, "snr_db = { min = 10.0 }", "snr_db = { min = -1000.0 }", "snr_db.min = -1000.0", "outside (0, 300]",
         name="accuracy-snr-floor-negative"),
    data(ACC, "\ncosine = { min = 0.95 }", "\ncosine = { min = -5 }", "cosine.min = -5", "outside (-1, 1]",
         name="accuracy-cosine-floor-below-minus-one"),
    data(WD_ACC, WIDEDEEP_FP8, '[ipu.widedeep.fp8-gone]\naccuracy = { of = "fp32", ratio = 0.99', "fp8-gone",
         name="accuracy-unknown-precision"),
    data(WD_ACC, _table(WD_ACC, "[ipu.widedeep.fp8]"), "", "no accuracy gates for [ipu.widedeep.fp8]", names_line=False,
         name="accuracy-table-deleted"),
    data(ACC, '[ipu.onnx.fp16]\ntop1_accuracy = { of = "fp32", ratio = 0.99, tier = 0.999 }',
         '[ipu.onnx.fp16]\ntop1_accuracy = { min = 5.0 }', "top1_accuracy.min = 5.0", "must lie in (0, 1]",
         name="accuracy-graph-label-bound-above-one"),
    data(ACC, "[ipu.minilm.fp16]\n", "[ipu.widedeep.fp16]\nsnr_db = { min = 30.0 }\n\n[ipu.minilm.fp16]\n",
         "[ipu.widedeep.fp16] is in", "a table's gates are in one file", names_line=False, name="accuracy-table-in-two-files"),
    data(ACC, '[ipu.onnx.fp16]\n', '[ipu.onnx.fp16]\nexact_match = { min = 0.5 }\n', "unknown metric 'exact_match'",
         name="accuracy-graph-task-agreement-metric"),
    data(ACC, 'top1_agreement = { of = "fp32", ratio = 0.99, tier', 'top1_agreement = { of = "fp32", ratio = true, tier',
         "ratio = True is not a number", name="accuracy-ratio-bool"),
    data(ACC, 'top1_agreement = { of = "fp32", ratio = 0.99, tier', 'top1_agreement = { of = "fp32", ratio = 1.5, tier',
         "ratio = 1.5 is outside [0.5, 1]", name="accuracy-ratio-above-one"),
    data(ACC, 'top1_agreement = { of = "fp32", ratio = 0.99, tier', 'top1_agreement = { of = "fp32", ratio = 0.99, tire',
         "unknown key(s) ['tire']", name="accuracy-unknown-key"),
    data(ACC, "snr_db = { min = 10.0 }", "snr_db = { max = 10.0 }", "snr_db takes a min bound", name="accuracy-wrong-side"),
    Bad("xfail-entry-without-checks", args=("--xfail-file", "{tmp}/x.txt"),
        setup=_file("x.txt", XFAIL_HEADER + "test_accuracy[widedeep-fp8] flaky\n"),
        says=("x.txt:2", "needs the checks expected to fail")),
    Bad("xfail-entry-bad-check-name", args=("--xfail-file", "{tmp}/x.txt"),
        setup=_file("x.txt", XFAIL_HEADER + "test_accuracy[widedeep-fp8] auc;accuracy why\n"),
        says=("x.txt:2", "'auc;accuracy' is not a check name")),
    Bad("xfail-unknown-bucket", args=("--xfail-file", "{tmp}/x.txt"), setup=_file("x.txt", "[flaky]\n"),
        says=("x.txt:1", "unknown bucket '[flaky]'")),
    Bad("xfail-star-skips-every-test", args=("--xfail-file", "{tmp}/x.txt"),
        setup=_file("x.txt", "[unsupported]\n*  not supported on this hardware\n"),
        says=("x.txt:2", "test id '*' matches every test")),
    Bad("xfail-star-dash-star-waives-every-test", args=("--xfail-file", "{tmp}/x.txt"),
        setup=_file("x.txt", XFAIL_HEADER + "*-*  snr_db  every precision is short\n"),
        says=("x.txt:2", "test id '*-*' matches every test")),
    Bad("xfail-matches-every-collected-test", args=("--xfail-file", "{tmp}/x.txt", "--report-dir", "{tmp}/earlier"),
        setup=_both(_file("x.txt", "[unsupported]\ntest_reference[widedeep]  not here\ntest_*[widedeep*]  nor here\n"),
                    _earlier),
        says=("x.txt:3", "'test_*[widedeep*]' matches every one of the 21 collected tests"), untouched=("earlier",)),
]

# -- results files that are not believed: the report CLI and --baseline ---------------------------------------------
R = "{tmp}/r.json"
OUT = ("--out", "{tmp}/earlier/compliance.md")
KEPT = ("earlier",)
CASES += [
    Bad("report-gate-below-target-marked-passed", entry="cli", args=("report", R, *OUT),
        setup=_results("r.json", lambda d: next(r for r in d["records"] if r["id"] == F1).update(value=-0.18, target=0.816)),
        says=("r.json", "inconsistent results file", F1, "passed is true, but value -0.18 >= target 0.816 is false"),
        untouched=KEPT),
    Bad("report-pass-with-exit-status-1", entry="cli", args=("report", R, *OUT),
        setup=_results("r.json", lambda d: d.update(exit_status=1)),
        says=("r.json", "verdict PASS with exit status 1", "give FAIL with exit status 1"), untouched=KEPT),
    Bad("report-failed-test-under-pass", entry="cli", args=("report", R, *OUT),
        setup=_results("r.json", lambda d: fail_test(d, "test_accuracy[bert-base-fp16]", records_too=True)),
        says=("r.json", "verdict PASS with exit status 0", "1 test(s) failed"), untouched=KEPT),
    Bad("report-failed-test-whose-records-say-passed", entry="cli", args=("report", R, *OUT),
        setup=_results("r.json", lambda d: fail_test(d, "test_accuracy[bert-base-fp16]", records_too=False)),
        says=("r.json", F1, "outcome 'passed', but its test's is 'failed'"), untouched=KEPT),
    Bad("report-every-record-twice", entry="cli", args=("report", R, *OUT),
        setup=_results("r.json", lambda d: d.update(records=d["records"] * 2)),
        says=("r.json", "a copy of record"), untouched=KEPT),
    Bad("report-compare-tampered", entry="cli", args=("report", "compare", "{tmp}/earlier/results.json", R, *OUT),
        setup=_results("r.json", lambda d: d.update(exit_status=1)),
        says=("r.json", "verdict PASS with exit status 1"), untouched=KEPT),
    Bad("report-validate-tampered", entry="cli", args=("report", "validate", R),
        setup=_results("r.json", lambda d: next(r for r in d["records"] if r["id"] == F1).update(value=-0.18)),
        says=("r.json", "inconsistent results file", "passed is true, but value -0.18 >= target 0.99 is false")),
    Bad("report-nothing-judged", entry="cli", args=("report", R, "--out", "{tmp}/none.md"), code=5,
        setup=_results("r.json", nothing_judged, verdict=True), says=("nothing was judged", "exit 5")),
    Bad("report-compare-nothing-in-common", entry="cli", args=("report", "compare", "{tmp}/bert.json", "{tmp}/resnet.json"),
        setup=_both(_results("bert.json", _only("bert-base"), verdict=True),
                    _results("resnet.json", _only("resnet50"), verdict=True)),
        says=("resnet.json", "compares nothing")),
    Bad("report-one-shard-of-two", entry="cli", args=("report", "{tmp}/shard1.json", *OUT, "--merged-json", "{tmp}/all.json"),
        setup=_shards(), says=("shard1.json", "incomplete set of shards", "2/2 missing"), untouched=(*KEPT, "all.json")),
    Bad("report-two-shards-of-three", entry="cli", args=("report", "{tmp}/shard1.json", "{tmp}/shard2.json", *OUT),
        setup=_shards(count=3), says=("shard(s) 3/3 missing",), untouched=KEPT),
    Bad("report-shards-of-mixed-precisions", entry="cli", args=("report", "{tmp}/shard1.json", "{tmp}/shard2.json", *OUT),
        setup=_shards(lambda d: d["settings"].update(precisions=["fp8"])),
        says=("shard2.json: settings.precisions is ['fp8']", "shard1.json"), untouched=KEPT),
    Bad("report-shards-of-other-devices", entry="cli", args=("report", "{tmp}/shard1.json", "{tmp}/shard2.json", *OUT),
        setup=_shards(lambda d: d["settings"].update(device="bow")),
        says=("shard2.json: settings.device is 'bow'",), untouched=KEPT),
    Bad("report-shards-of-other-checkpoints", entry="cli", args=("report", "{tmp}/shard1.json", "{tmp}/shard2.json", *OUT),
        setup=_shards(lambda d: d["settings"].update(checkpoints={"resnet50": "/mine"})),
        says=("shard2.json: settings.checkpoints names models ['resnet50']",), untouched=KEPT),
    Bad("baseline-tampered", args=("--baseline", "{tmp}/b.json", "--report-dir", "{tmp}/earlier"),
        setup=_results("b.json", lambda d: next(r for r in d["records"] if r["id"] == F1).update(value=-0.18)),
        says=("--baseline", "b.json", "inconsistent results file", "passed is true, but value -0.18"), untouched=KEPT),
    Bad("baseline-without-records", args=("--baseline", "{tmp}/b.json", "--report-dir", "{tmp}/earlier"),
        setup=_results("b.json", nothing_judged, verdict=True),
        says=("--baseline", "b.json", "compares nothing", "no gated check with a value"), untouched=KEPT),
    Bad("baseline-only-nulls", args=("--baseline", "{tmp}/b.json", "--report-dir", "{tmp}/earlier"),
        setup=_results("b.json", _nulls, verdict=True),
        says=("--baseline", "b.json", "compares nothing"), untouched=KEPT),
]


def _fifo(name: str) -> Callable[[Path], None]:
    def make(tmp_path: Path) -> None:
        os.mkfifo(tmp_path / name)
    return make


def _merged(name: str, change: Callable[[dict], object]) -> Callable[[Path], None]:
    """The passing run, cut into two shards and merged, changed by ``change``, at ``name``; an earlier report beside."""
    return _results(name, as_merged(change))


def _passing_shards(tmp_path: Path) -> None:
    """The passing run's two shards, shard1.json and shard2.json, as their runs wrote them; an earlier report beside."""
    merged = merged_passing()
    for index, source in enumerate(merged["merged_from"], start=1):
        data = passing_results()
        data["settings"]["shard"] = source["shard"]
        (tmp_path / f"shard{index}.json").write_text(json.dumps(data))
    _earlier(tmp_path)


def _audit_hidden(data: dict) -> None:
    """An audit whose figure failed, marked passed and "not established" (which explains no pass), without the
    official script's verdict (which would)."""
    record = next(r for r in data["records"] if r["kind"] == "audit")
    record.update(value=0.0, target=1.0, op=">=", passed=True, established=False)
    record["details"].pop("official", None)


def _damaged_weights(tmp_path: Path) -> None:
    _checkpoint()(tmp_path)
    weights = tmp_path / "ckpt" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])


def _weights_fifo(tmp_path: Path) -> None:
    _checkpoint()(tmp_path)
    (tmp_path / "ckpt" / "model.safetensors").unlink()
    os.mkfifo(tmp_path / "ckpt" / "model.safetensors")


def _config_text(text: bytes) -> Callable[[Path], None]:
    def make(tmp_path: Path) -> None:
        _checkpoint()(tmp_path)
        (tmp_path / "ckpt" / "config.json").write_bytes(text)
    return make


EXTRA = ("--report-dir", "{tmp}/earlier")  # the earlier report a refused run must leave as it was
NOT_UTF8 = XFAIL_HEADER.encode() + b"test_accuracy[widedeep-fp8] snr_db \xff why\n"
CASES += [
    # -- special, damaged and hostile files where a results.json is read -----------------------------------------------
    Bad("baseline-dev-zero", args=("--baseline", "/dev/zero", *EXTRA), setup=_earlier,
        says=("--baseline /dev/zero", "a character device", "expected a results.json"), untouched=KEPT),
    Bad("baseline-fifo", args=("--baseline", "{tmp}/b.json", *EXTRA), setup=_both(_fifo("b.json"), _earlier),
        says=("b.json", "a FIFO"), untouched=KEPT),
    Bad("baseline-directory", args=("--baseline", "{tmp}/earlier", *EXTRA), setup=_earlier,
        says=("--baseline", "earlier: a folder"), untouched=KEPT),
    Bad("baseline-nested-100000-deep", args=("--baseline", "{tmp}/b.json", *EXTRA),
        setup=_both(_file("b.json", "[" * 100_000), _earlier), says=("b.json", "nested too deeply"), untouched=KEPT),
    Bad("baseline-number-1e999", args=("--baseline", "{tmp}/b.json", *EXTRA),
        setup=_both(_file("b.json", '{"schema": 1e999}'), _earlier), says=("b.json:1", "1e999", "not a finite number"),
        untouched=KEPT),
    Bad("baseline-nan", args=("--baseline", "{tmp}/b.json", *EXTRA),
        setup=_both(_file("b.json", '{"schema": NaN}'), _earlier), says=("b.json:1", "NaN"), untouched=KEPT),
    Bad("baseline-5000-digits", args=("--baseline", "{tmp}/b.json", *EXTRA),
        setup=_both(_file("b.json", '{"schema": ' + "7" * 5000 + "}"), _earlier), says=("b.json:1", "5000 characters"),
        untouched=KEPT),
    Bad("baseline-not-utf8", args=("--baseline", "{tmp}/b.json", *EXTRA),
        setup=_both(_file("b.json", b'{"schema": "\xff"}'), _earlier), says=("b.json:1", "not UTF-8"), untouched=KEPT),
    Bad("baseline-empty", args=("--baseline", "{tmp}/b.json", *EXTRA), setup=_both(_file("b.json", ""), _earlier),
        says=("b.json", "not valid JSON"), untouched=KEPT),
    Bad("baseline-merged-shard-dropped", args=("--baseline", "{tmp}/b.json", *EXTRA),
        setup=_merged("b.json", lambda d: d["merged_from"].pop()),
        says=("--baseline", "b.json", "inconsistent results file", "2/2 missing, but missing_shards lists none"),
        untouched=KEPT),
    Bad("baseline-not-established-shown-established", args=("--baseline", "{tmp}/b.json", *EXTRA),
        setup=_results("b.json", lambda d: relative(d, [0.98, 1.0], True)),
        says=("--baseline", "b.json", RELATIVE, "established is true, but"), untouched=KEPT),
    Bad("baseline-audit-passed-as-not-established", args=("--baseline", "{tmp}/b.json", *EXTRA),
        setup=_results("b.json", _audit_hidden), says=("b.json", "passed is true, but value 0.0 >= target 1.0"),
        untouched=KEPT),
    Bad("report-dev-zero", entry="cli", args=("report", "/dev/zero", *OUT), setup=_earlier, code=4,
        says=("/dev/zero", "a character device"), untouched=KEPT),
    Bad("report-fifo", entry="cli", args=("report", R, *OUT), setup=_both(_fifo("r.json"), _earlier), code=4,
        says=("r.json", "a FIFO"), untouched=KEPT),
    Bad("report-nested-100000-deep", entry="cli", args=("report", R, *OUT),
        setup=_both(_file("r.json", "{\"a\": " * 100_000), _earlier), code=4, says=("r.json", "nested too deeply"),
        untouched=KEPT),
    Bad("report-infinity", entry="cli", args=("report", R, *OUT), setup=_both(_file("r.json", "[Infinity]"), _earlier),
        code=4, says=("r.json:1", "Infinity"), untouched=KEPT),
    Bad("report-compare-dev-zero", entry="cli", args=("report", "compare", "{tmp}/earlier/results.json", "/dev/zero"),
        setup=_earlier, code=4, says=("/dev/zero", "a character device"), untouched=KEPT),
    Bad("report-not-established-shown-established", entry="cli", args=("report", R, *OUT),
        setup=_results("r.json", lambda d: relative(d, [0.98, 1.0], True)),
        says=("r.json", RELATIVE, "established is true, but its ratio's 95% interval [0.98, 1.0]"), untouched=KEPT),
    Bad("report-below-label-floor-shown-established", entry="cli", args=("report", R, *OUT),
        setup=_results("r.json", lambda d: relative(d, [0.995, 1.0], True, {"fp32": 0.0, "floor": 0.05})),
        says=("r.json", "its FP32 score 0.0 is at or below the floor 0.05"), untouched=KEPT),
    Bad("report-audit-passed-as-not-established", entry="cli", args=("report", R, *OUT),
        setup=_results("r.json", _audit_hidden), says=("r.json", "passed is true, but value 0.0 >= target 1.0 is false"),
        untouched=KEPT),
    Bad("report-merged-shard-dropped", entry="cli", args=("report", R, *OUT),
        setup=_merged("r.json", lambda d: d["merged_from"].pop()),
        says=("r.json", "merged from shards 1/2 of 2: 2/2 missing"), untouched=KEPT),
    Bad("report-merged-file-called-a-shard", entry="cli", args=("report", R, *OUT),
        setup=_merged("r.json", lambda d: d["settings"].update(shard="2/2")),
        says=("r.json", "settings.shard is '2/2'"), untouched=KEPT),
    Bad("report-merged-of-two-splits", entry="cli", args=("report", "validate", R),
        setup=_merged("r.json", lambda d: d["merged_from"][1].update(shard="2/3")),
        says=("r.json", "not parts of one split")),
    Bad("report-compare-merged-tampered", entry="cli", args=("report", "compare", "{tmp}/earlier/results.json", R, *OUT),
        setup=_merged("r.json", lambda d: d["merged_from"].__setitem__(1, dict(d["merged_from"][0]))),
        says=("r.json", "merged_from names a shard twice"), untouched=KEPT),
    Bad("report-validate-not-established", entry="cli", args=("report", "validate", R),
        setup=_results("r.json", lambda d: relative(d, [0.995, 1.0], False)),
        says=("r.json", "established is false, but", "gives true")),
    Bad("report-same-shard-twice", entry="cli", args=("report", "{tmp}/shard1.json", "{tmp}/shard1.json", *OUT),
        setup=_passing_shards, says=("shard1.json", "is also in"), untouched=KEPT),
    # -- special and damaged files given as options ----------------------------------------------------------------------
    Bad("xfail-file-dev-zero", args=("--xfail-file", "/dev/zero"), says=("--xfail-file /dev/zero", "not a regular file")),
    Bad("xfail-file-fifo", args=("--xfail-file", "{tmp}/x.txt"), setup=_fifo("x.txt"),
        says=("--xfail-file", "x.txt", "not a regular file")),
    Bad("xfail-file-not-utf8", args=("--xfail-file", "{tmp}/x.txt"), setup=_file("x.txt", NOT_UTF8),
        says=("--xfail-file", "x.txt:2", "not UTF-8")),
    Bad("user-dataset-dev-zero", args=("--dataset", "widedeep=/dev/zero"),
        says=("--dataset widedeep=/dev/zero", "a character device")),
    Bad("user-calibration-fifo", args=("--calibration", "widedeep={tmp}/rows.tsv"), setup=_fifo("rows.tsv"),
        says=("--calibration widedeep=", "rows.tsv", "a FIFO")),
    Bad("user-checkpoint-is-a-device", args=("--checkpoint", "widedeep=/dev/null"),
        says=("--checkpoint widedeep=/dev/null", "is not a directory")),
    Bad("report-dir-dev-null", args=("--report-dir", "/dev/null"), says=("--report-dir /dev/null",)),
    Bad("shard-zero-of-zero", args=("--shard", "0/0"), says=("--shard", "'0/0'", "1 <= I <= N")),
    Bad("shard-not-numbers", args=("--shard", "a/b"), says=("--shard", "'a/b'", "I/N with integers")),
    Bad("user-samples-negative", args=("--samples", "-3"), says=("--samples", "'-3'", "positive integer")),
    Bad("user-samples-float", args=("--samples", "widedeep=1e3"), says=("'widedeep=1e3'", "positive integer")),
    Bad("model-only-a-comma", args=("--model", ","), says=("--model", "empty model name")),
    # -- the data files: numbers that mean nothing ------------------------------------------------------------------------
    data(REGR, "rel = 0.001", "rel = 1000000", "accuracy.rel = 1000000", "less than 1", name="regression-rel-million"),
    data(REGR, "rel = 0.001", "rel = inf", "accuracy.rel = inf", "not a finite number", name="regression-rel-inf"),
    data(REGR, "rel = 0.001", "rel = 1.0", "accuracy.rel = 1.0", "less than 1", name="regression-rel-all-of-it"),
    data(ACC, 'top1_agreement = { of = "fp32", ratio = 0.99, tier', 'top1_agreement = { of = "fp32", ratio = 1e-12, tier',
         "ratio = 1e-12 is outside [0.5, 1]", name="accuracy-ratio-vanishing"),
    data(ACC, 'top1_agreement = { of = "fp32", ratio = 0.99, tier', 'top1_agreement = { of = "fp32", ratio = nan, tier',
         "not a finite number", name="accuracy-ratio-nan"),
    data(PROF, "min_duration_ms = 300", "min_duration_ms = 9223372036854775807",
         "smoke.performance.min_duration_ms = 9223372036854775807", "less than or equal to 3600000",
         name="profile-duration-int64-max"),
    data(PROF, "min_duration_ms = 300", "min_duration_ms = 300.5", "smoke.performance.min_duration_ms = 300.5",
         "valid integer", name="profile-duration-float"),
    data(WD_PROF, "widedeep = 1024 }\nbatch_size", "widedeep = 1000000000000 }\nbatch_size",
         "smoke.samples.widedeep = 1000000000000", "less than or equal to 1000000", name="profile-samples-trillion"),
    data(WD_PERF, "Offline = 24560", "Offline = 1e15", "Offline = 1000000000000000.0", "less than or equal to 1000000000",
         name="perf-target-1e15"),
    data(WD_PERF, "[targets.widedeep.ipu.fp16]\nSingleStream = 1.6", "[targets.widedeep.ipu.fp16]\nSingleStream = nan",
         "SingleStream = nan", "not a finite number", name="perf-target-nan"),
    data(WD_PERF, "Offline = 24560", "Offline = 24560\nOffline = 1", "not valid TOML", name="perf-key-twice"),
    data(AUDIT, "same-sample run.\nremeasure = 3", "same-sample run.\nremeasure = 1000000000",
         "TEST04.remeasure = 1000000000", "less than or equal to 3", name="audit-remeasure-billion"),
    data(AUDIT, "remeasure = 3\n# The responses", "remeasure = -1\n# The responses", "TEST01.remeasure = -1",
         "greater than or equal to 0", name="audit-test01-remeasure-negative"),
    data(AUDIT, "accuracy_delta = 0.01", "accuracy_delta = 0", "TEST01.accuracy_delta = 0", "greater than 0",
         name="audit-delta-zero"),
    data(FLOORS, "squad_f1 = 0.05", "squad_f1 = 0", "squad_f1 = 0", "greater than 0", name="label-floor-zero"),
    data(FLOORS, "squad_f1 = 0.05", "squad_f1 = -0.5", "squad_f1 = -0.5", "greater than 0", name="label-floor-negative"),
    data(FLOORS, "squad_f1 = 0.05", 'squad_f1 = "0.05"', "squad_f1", "valid number", name="label-floor-string"),
    # -- a checkpoint's files ----------------------------------------------------------------------------------------------
    Bad("checkpoint-config-bool-size", entry="checkpoint", setup=_checkpoint(config=lambda c: {**c, "embedding_dim": True}),
        code=None, raises=CheckpointError, says=("config.json", "embedding_dim = True", "expected an integer")),
    Bad("checkpoint-config-string-size", entry="checkpoint", setup=_checkpoint(config=lambda c: {**c, "embedding_dim": "4"}),
        code=None, raises=CheckpointError, says=("config.json", "embedding_dim = '4'", "expected an integer")),
    Bad("checkpoint-config-float-size", entry="checkpoint", setup=_checkpoint(config=lambda c: {**c, "embedding_dim": 4.0}),
        code=None, raises=CheckpointError, says=("config.json", "embedding_dim = 4.0", "expected an integer")),
    Bad("checkpoint-config-nan", entry="checkpoint", setup=_config_text(b'{"model_type": "widedeep", "x": NaN}'),
        code=None, raises=CheckpointError, says=("config.json:1", "NaN")),
    Bad("checkpoint-config-cut-short", entry="checkpoint", setup=_config_text(b'{"model_type": "wide'),
        code=None, raises=CheckpointError, says=("config.json:1", "not valid JSON")),
    Bad("checkpoint-config-missing", entry="checkpoint",
        setup=lambda tmp: (_checkpoint()(tmp), (tmp / "ckpt" / "config.json").unlink()),
        code=None, raises=CheckpointError, says=("ckpt", "lacks config.json")),
    Bad("checkpoint-weights-truncated", entry="checkpoint", setup=_damaged_weights, code=None, raises=CheckpointError,
        says=("model.safetensors", "corrupted or truncated")),
    Bad("checkpoint-weights-fifo", entry="checkpoint", setup=_weights_fifo, code=None, raises=CheckpointError,
        says=("model.safetensors", "a FIFO")),
]


def _hold_lock(directory: Path) -> None:
    """A report directory held by a live run (this process) through the suite's lock file."""
    directory.mkdir()
    handle = open(directory / ".conformance.lock", "w")  # noqa: SIM115 - kept open: the lock lives as long as it
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    handle.write(json.dumps({"pid": os.getpid(), "host": "here", "started": "now"}))
    handle.flush()
    _HELD.append(handle)


_HELD: list = []


@pytest.fixture
def clean_loaders():
    for loader in LOADERS:
        loader.cache_clear()
    yield
    for loader in LOADERS:
        loader.cache_clear()
    while _HELD:
        _HELD.pop().close()


def _run(case: Bad, tmp_path: Path, pytester, capsys) -> tuple[int | None, str]:
    args = [a.replace("{tmp}", str(tmp_path)) for a in case.args]
    if case.entry == "suite":
        how = COLLECT_ONLY if case.collect_only else SELECT_NOTHING
        result = pytester.runpytest(str(REPO / "conformance"), *SUITE, *how, *args)
        return int(result.ret), result.stderr.str() + result.stdout.str()
    if case.entry == "cli":
        try:
            code = cli_main(args)
        except SystemExit as exc:
            code = exc.code
        captured = capsys.readouterr()
        return code, captured.err + captured.out
    if case.entry == "checkpoint":
        with pytest.raises(case.raises) as info:
            load_model("widedeep", checkpoint=tmp_path / "ckpt")
        return None, str(info.value)
    raise AssertionError(f"unknown entry {case.entry!r}")


def _params(cases):
    return [pytest.param(case, id=case.id, marks=[pytest.mark.xfail(strict=True, reason=case.accepted)]
                         if case.accepted else []) for case in cases]


@pytest.mark.parametrize("case", _params(CASES))
def test_bad_input_is_refused_naming_it(case, tmp_path, pytester, capsys, monkeypatch, clean_loaders):
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    if case.file is not None:
        original = _resolve(case.file)
        text = original.read_text()
        assert case.old in text, f"{case.id}: {case.old!r} is not in {original}"
        copy = tmp_path / "data" / original.name
        copy.parent.mkdir()
        copy.write_text(text.replace(case.old, case.new, 1))
        if case.file.startswith("model:"):
            _, name, kind = case.file.split(":")
            table = ModelSpec.table
            monkeypatch.setattr(ModelSpec, "table",
                                lambda self, k: copy if (self.name, k) == (name, kind) else table(self, k))
        else:
            module, constant = case.file.split(":")
            monkeypatch.setattr(importlib.import_module(module), constant, copy)
    if case.setup is not None:
        case.setup(tmp_path)
    before = {name: _contents(tmp_path / name) for name in case.untouched}
    code, message = _run(case, tmp_path, pytester, capsys)
    assert code == case.code, f"{case.id}: exit {code}, expected {case.code}:\n{message}"
    missing = [word for word in case.says if word not in message]
    assert not missing, f"{case.id}: the message lacks {missing}:\n{message}"
    if case.file is not None and case.names_line:  # the edited line is named: "file:LINE:" (one problem) or "line LINE:" (several)
        line = _first_changed_line(text, copy.read_text())
        assert f":{line}:" in message or f"line {line}:" in message or f"at line {line}," in message, \
            f"{case.id}: the message does not name line {line}:\n{message}"
    assert "Traceback" not in message, message
    for name, contents in before.items():
        assert _contents(tmp_path / name) == contents, f"{case.id}: {name} was changed"


def _contents(path: Path) -> dict | bytes | None:
    """A file's bytes, a directory's files (by relative path) with theirs; None when absent."""
    if path.is_dir():
        return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
    return path.read_bytes() if path.exists() else None


def _first_changed_line(before: str, after: str) -> int:
    for number, (old, new) in enumerate(zip(before.splitlines(), after.splitlines()), start=1):
        if old != new:
            return number
    raise AssertionError("the copy is not edited")


def test_the_table_is_large_and_its_ids_distinct():
    ids = [case.id for case in CASES]
    assert len(ids) >= 150 and len(set(ids)) == len(ids)


@pytest.mark.parametrize("file", [PERF, PROF, AUDIT, REGR, PREC, CHIPS, TIMING, CALIB, EXEC, PUBL])
def test_the_shipped_data_files_are_valid(file, clean_loaders):
    """The rows above edit these files; unedited, each loads (the main job's own data is what the rows start from)."""
    loader = {PERF: performance.load_performance_targets, PROF: profiles.load_profiles, AUDIT: audit.load_audit_config,
              REGR: regression.load_tolerances, PREC: policy.load_precisions, CHIPS: chips.load_devices,
              TIMING: cost.load_constants, CALIB: cost.load_calibration, EXEC: cost._execution_table,
              PUBL: fit.load_rows}[file]
    assert loader()
