"""Performance targets as data: ``performance.toml`` files (the suite's header says where each figure comes from;
each model keeps its own rows in its spec's ``tables`` folder, the built-in models' in ``models/tables/<model>/``, and
a backend shipped on its own the rows of its hardware).

``[targets.<model>.<hardware>.<precision>]`` holds one target per scenario; ``[models.<model>]`` the per-model run
parameters (Server latency bound, device batch, Server batching timeout, rows per sample). How long runs are is the
profile's (``profiles.toml``). The file is validated when loaded: unknown or missing keys, a value that is not a
positive number (``true`` is not 1), an unknown model, hardware, precision or scenario are errors naming the file, line,
key and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, create_model

from conformance.hardware import hardware_names, hardware_precisions
from conformance.hardware.base import MLPERF_BENCHMARKS, SCENARIOS
from conformance.targets import DataFileError, Schema, backend_files, fail, model_files, model_tables, read_toml, validate
from conformance.targets.bounds import MAX_BATCH, MAX_LATENCY_MS, MAX_QUERIES, MAX_RATE, count, non_negative, positive
from conformance.targets.profiles import PROFILE_NAMES
from models import MODEL_NAMES

PERFORMANCE_FILE = Path(__file__).with_name("performance.toml")
# Scenario -> (the figure it gates, units, comparison): MLPerf's metric of each scenario.
SCENARIO_CHECKS = {
    "SingleStream": ("p90_latency_ms", "ms", "<="),
    "MultiStream": ("p99_latency_ms", "ms", "<="),
    "Server": ("p99_latency_ms_at_target_qps", "ms", "<="),
    "Offline": ("samples_per_second", "samples/s", ">="),
}


class PerformanceTargetsError(DataFileError):
    """A mistake in performance.toml; the message names the file and the table."""


@dataclass(frozen=True)
class PerformanceTarget:
    model: str
    hardware: str
    precision: str
    scenario: str
    target: float  # ms for SingleStream/MultiStream, samples/s (Server: the target QPS) otherwise

    @property
    def test_id(self) -> str:
        return f"{self.model}-{self.precision}-{self.scenario}"

    @property
    def check(self) -> tuple[str, str, str]:
        return SCENARIO_CHECKS[self.scenario]


@dataclass(frozen=True)
class ModelRun:
    server_latency_ms: float
    mlperf_model: str  # the benchmark of LoadGen's mlperf.conf whose settings and seeds the model's runs take
    rows_per_sample: int
    max_batch: dict
    server_batch_timeout_ms: float


@dataclass(frozen=True)
class PerformanceTargets:
    targets: tuple[PerformanceTarget, ...]
    models: dict  # model -> ModelRun

    def for_hardware(self, hardware: str, precisions=None, models=None) -> list[PerformanceTarget]:
        return [t for t in self.targets if t.hardware == hardware and (precisions is None or t.precision in precisions)
                and (models is None or t.model in models)]


def check_complete(backend, models, precisions=None, path: Path | None = None) -> None:
    """Every selected model has the performance targets its hardware times: the precisions and scenarios some model has
    targets for on ``backend``'s hardware are each model's matrix there, so a model, precision or scenario without
    its target (which would silently drop a test, or leave none to run) is a PerformanceTargetsError naming the
    table and key. Combinations the backend does not run (its ``scenario_support`` says why) need none."""
    hardware = backend.name
    targets = load_performance_targets(path).for_hardware(hardware)
    timed = {}  # precision -> scenarios some model is timed at
    for t in targets:
        timed.setdefault(t.precision, set()).add(t.scenario)
    have = {(t.model, t.precision, t.scenario) for t in targets}
    where = path or PERFORMANCE_FILE.name
    if not timed:
        if models:
            raise PerformanceTargetsError(f"{where}: hardware {hardware!r} has no performance targets: its models "
                                          f"{', '.join(models)} need [targets.<model>.{hardware}.<precision>] tables "
                                          "(in the suite's file, the backend's or the model's own)")
        return
    missing = []
    for model in models:
        for precision in timed:
            if precisions is not None and precision not in precisions:
                continue
            absent = [s for s in SCENARIOS if s in timed[precision] and (model, precision, s) not in have
                      and not backend.scenario_support(model, precision, s)]
            if absent and len(absent) == len([s for s in SCENARIOS if s in timed[precision]]):
                missing.append(f"[targets.{model}.{hardware}.{precision}]")
            elif absent:
                missing.append(f"[targets.{model}.{hardware}.{precision}] {', '.join(absent)}")
    if missing:
        raise PerformanceTargetsError(f"{where}: no performance targets for {'; '.join(missing)}: the {hardware!r} "
                                      "hardware times these precisions and scenarios, so every model it runs needs "
                                      "them (in the suite's file, the backend's or the model's own)")


ModelName = Literal[MODEL_NAMES]
Scenario = Literal[SCENARIOS]


class ModelRunSchema(Schema):
    server_latency_ms: positive(MAX_LATENCY_MS)  # MLPerf's Server latency bound
    mlperf_model: Literal[MLPERF_BENCHMARKS]  # a benchmark of LoadGen's built-in mlperf.conf
    rows_per_sample: count(MAX_BATCH)
    max_batch: dict[str, count(MAX_BATCH)] = Field(min_length=1)  # hardware -> largest device batch (samples)
    server_batch_timeout_ms: non_negative(MAX_LATENCY_MS)


# scenario -> target: a latency bound in ms or a rate in samples/s, both > 0
ScenarioTargets = dict[Scenario, positive(MAX_RATE)]


@lru_cache(maxsize=None)
def _schemas() -> tuple[type[Schema], type[Schema], type[Schema]]:
    """(suite file, backend file, model file) schemas; built on first use, since the hardware names come from entry
    points."""
    hardware = Literal[hardware_names()]
    model_run = create_model("ModelRun", __base__=ModelRunSchema, max_batch=(dict[hardware, count(MAX_BATCH)], Field(min_length=1)))
    suite = create_model("PerformanceFile", __base__=Schema,
                         models=(dict[ModelName, model_run], ...),
                         targets=(dict[ModelName, dict[hardware, dict[str, ScenarioTargets]]], ...))
    counts = create_model("QueryCounts", __base__=Schema, **{s: (count(MAX_QUERIES), ...) for s in SCENARIOS})
    profile = create_model("BackendProfile", __base__=Schema, min_query_count=(counts, ...))
    backend = create_model("BackendPerformanceFile", __base__=Schema,
                           targets=(dict[ModelName, dict[str, dict[str, ScenarioTargets]]], {}),
                           max_batch=(dict[ModelName, count(MAX_BATCH)], {}),
                           profiles=(dict[Literal[PROFILE_NAMES], profile], {}))
    model = create_model("ModelPerformanceFile", __base__=Schema,
                         models=(dict[ModelName, model_run], {}),
                         targets=(dict[ModelName, dict[hardware, dict[str, ScenarioTargets]]], {}))
    return suite, backend, model


def _merge_backend_targets(data: dict, hardware: str, path: Path) -> tuple[Path, str]:
    """Add the ``[targets.<model>.<hardware>.*]`` tables and ``[max_batch]`` entries (model -> largest device batch) of a
    backend's own performance.toml to ``data``; its ``[profiles.<profile>].min_query_count`` is the profiles' (see
    :func:`conformance.targets.profiles.load_profiles`); anything else there is an error naming the file."""
    extra, text = _check(read_toml, path)
    _check(validate, extra, _schemas()[1], path, text)
    for model, per_hardware in extra.get("targets", {}).items():
        other = sorted(set(per_hardware) - {hardware})
        if other:
            _check(fail, path, ("targets", model, other[0]), f"a backend's file may only hold targets of its own "
                   f"hardware {hardware!r}", text)
        data.setdefault("targets", {}).setdefault(model, {})[hardware] = per_hardware[hardware]
    for model, batch in extra.get("max_batch", {}).items():
        data.setdefault("models", {}).setdefault(model, {}).setdefault("max_batch", {})[hardware] = batch
    return path, text


def _merge_model_tables(data: dict, model: str, path: Path, suite: Path) -> tuple[Path, str]:
    """Add a model's own ``[models.<model>]`` and ``[targets.<model>.*]`` tables (its performance.toml, validated on
    its own so that a mistake names its file and line) to the suite's ``data``; another model's tables, or tables the
    suite's file holds too (two sources of one figure), are an error naming the file."""
    own, text = _check(read_toml, path)
    _check(validate, own, _schemas()[2], path, text)
    _check(model_tables, own, model, path, {"models": 0, "targets": 0})
    for key, tables in own.items():
        for name in tables:
            if name in data.get(key, {}):
                _check(fail, path, (key, name), f"the suite's {suite} has [{key}.{name}] too: a model's run parameters "
                       "and targets are in its own file only", text)
        data.setdefault(key, {}).update(tables)
    return path, text


def _check(function, *args):
    """Run a validation helper, raising its DataFileError as a PerformanceTargetsError."""
    try:
        return function(*args)
    except PerformanceTargetsError:
        raise
    except DataFileError as exc:
        raise PerformanceTargetsError(str(exc)) from None


@lru_cache(maxsize=None)
def load_performance_targets(path: Path | None = None) -> PerformanceTargets:
    """The targets in ``path`` (default: the suite's performance.toml) and in every model's own performance.toml (with
    the suite's own file, also the tables of backends shipped on their own), validated; a PerformanceTargetsError
    naming the file, line, key and what is allowed otherwise."""
    path = Path(path) if path is not None else PERFORMANCE_FILE
    data, text = _check(read_toml, path)
    owners = {}  # model -> (file, text) of the model's own tables: their mistakes name its file
    for model, extra in model_files(PERFORMANCE_FILE.name):  # each model brings its run parameters and targets
        owners[model] = _merge_model_tables(data, model, extra, path)
    _check(validate, data, _schemas()[0], path, text)
    origins = {}  # hardware -> (file, text) of a backend shipped on its own: its tables' mistakes name its file
    if path == PERFORMANCE_FILE:  # backends shipped on their own bring the targets of their names
        for hardware, extra in backend_files(PERFORMANCE_FILE.name):
            origins[hardware] = _merge_backend_targets(data, hardware, extra)

    def problem(loc: tuple, message: str, hardware: str | None = None):
        where, where_text = origins.get(hardware, owners.get(loc[1], (path, text)))
        if hardware in origins and loc[0] == "models":  # the backend's file holds its batches as [max_batch]
            loc = ("max_batch", loc[1])
        _check(fail, where, loc, message, where_text)

    models = {name: ModelRun(float(entry["server_latency_ms"]), entry["mlperf_model"], entry["rows_per_sample"],
                             dict(entry["max_batch"]),
                             float(entry["server_batch_timeout_ms"]))
              for name, entry in data["models"].items()}
    targets = []
    for model, per_hardware in data["targets"].items():
        if model not in models:
            problem(("targets", model), f"has no [models.{model}] run parameters")
        for hardware, per_precision in per_hardware.items():
            if hardware not in models[model].max_batch:
                problem(("models", model, "max_batch"), f"has no entry for hardware {hardware!r}, which has targets",
                        hardware)
            precisions = hardware_precisions(hardware)
            for precision, scenarios in per_precision.items():
                if precision not in precisions:
                    problem(("targets", model, hardware, precision), f"unknown precision {precision!r} of hardware "
                            f"{hardware!r}; expected one of: {', '.join(precisions)}", hardware)
                for scenario, value in scenarios.items():
                    targets.append(PerformanceTarget(model, hardware, precision, scenario, float(value)))
    return PerformanceTargets(tuple(targets), models)
