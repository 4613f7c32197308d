"""Performance targets as data: ``performance.toml`` (see its header for where each figure comes from).

``[targets.<model>.<hardware>.<precision>]`` holds one target per scenario; ``[models.<model>]`` the per-model run
parameters (Server latency bound, device batch, Server batching timeout, rows per sample). How long runs are is the
profile's (``profiles.toml``). Mistakes (unknown model, hardware, scenario, missing keys) are errors naming the file and table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from conformance.fileio import load_toml
from conformance.hardware import hardware_names
from conformance.hardware.base import SCENARIOS
from conformance.targets import backend_files
from conformance.targets.profiles import load_profiles
from models import MODEL_NAMES

PERFORMANCE_FILE = Path(__file__).with_name("performance.toml")
# Scenario -> (the figure it gates, units, comparison): MLPerf's metric of each scenario.
SCENARIO_CHECKS = {
    "SingleStream": ("p90_latency_ms", "ms", "<="),
    "MultiStream": ("p99_latency_ms", "ms", "<="),
    "Server": ("p99_latency_ms_at_target_qps", "ms", "<="),
    "Offline": ("samples_per_second", "samples/s", ">="),
}
MODEL_KEYS = ("server_latency_ms", "rows_per_sample", "max_batch", "server_batch_timeout_ms")


class PerformanceTargetsError(ValueError):
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


def _merge_backend_targets(data: dict, hardware: str, path: Path) -> None:
    """Add the ``[targets.<model>.<hardware>.*]`` tables and ``[max_batch]`` entries (model -> largest device batch) of a
    backend's own performance.toml to ``data``; its ``[profiles.<profile>].min_query_count`` is the profiles' (see
    :func:`conformance.targets.profiles.load_profiles`); anything else there is an error naming the file."""
    extra = load_toml(path)
    unknown = sorted(set(extra) - {"targets", "max_batch", "profiles"})
    if unknown:
        raise PerformanceTargetsError(f"{path}: unknown table(s) {unknown}; a backend's performance.toml holds "
                                      f"[targets.<model>.{hardware}.<precision>], [max_batch] and "
                                      f"[profiles.<profile>].min_query_count")
    for model, per_hardware in extra.get("targets", {}).items():
        other = sorted(set(per_hardware) - {hardware})
        if other:
            raise PerformanceTargetsError(f"{path}: [targets.{model}] may only hold {hardware!r}, not {other}")
        data.setdefault("targets", {}).setdefault(model, {})[hardware] = per_hardware[hardware]
    for model, batch in extra.get("max_batch", {}).items():
        data.setdefault("models", {}).setdefault(model, {}).setdefault("max_batch", {})[hardware] = batch


@lru_cache(maxsize=None)
def load_performance_targets(path: Path = PERFORMANCE_FILE) -> PerformanceTargets:
    path = Path(path)
    data = load_toml(path)
    if path == PERFORMANCE_FILE:  # backends shipped on their own bring the targets of their names
        for hardware, extra in backend_files(PERFORMANCE_FILE.name):
            _merge_backend_targets(data, hardware, extra)

    def fail(message: str):
        raise PerformanceTargetsError(f"{path}: {message}")

    models = {}
    for name, entry in data.get("models", {}).items():
        if name not in MODEL_NAMES:
            fail(f"[models.{name}]: unknown model; expected one of: {', '.join(MODEL_NAMES)}")
        missing = [k for k in MODEL_KEYS if k not in entry]
        if missing:
            fail(f"[models.{name}] lacks {missing}")
        models[name] = ModelRun(float(entry["server_latency_ms"]), int(entry["rows_per_sample"]), dict(entry["max_batch"]),
                                float(entry["server_batch_timeout_ms"]))
    targets = []
    for model, per_hardware in data.get("targets", {}).items():
        if model not in MODEL_NAMES:
            fail(f"[targets.{model}]: unknown model; expected one of: {', '.join(MODEL_NAMES)}")
        if model not in models:
            fail(f"[targets.{model}] has no [models.{model}] run parameters")
        for hardware, per_precision in per_hardware.items():
            if hardware not in hardware_names():
                fail(f"[targets.{model}.{hardware}]: unknown hardware; expected one of: {', '.join(hardware_names())}")
            if hardware not in models[model].max_batch:
                fail(f"[models.{model}].max_batch has no entry for hardware {hardware!r}")
            for precision, scenarios in per_precision.items():
                for scenario, value in scenarios.items():
                    if scenario not in SCENARIOS:
                        fail(f"[targets.{model}.{hardware}.{precision}]: unknown scenario {scenario!r}; expected one of: "
                             f"{', '.join(SCENARIOS)}")
                    if not isinstance(value, (int, float)) or value <= 0:
                        fail(f"[targets.{model}.{hardware}.{precision}].{scenario} = {value!r}; expected a positive number")
                    targets.append(PerformanceTarget(model, hardware, precision, scenario, float(value)))
    for profile in load_profiles().values():
        for hardware in {t.hardware for t in targets}:
            if hardware not in profile.performance.min_query_count:
                fail(f"hardware {hardware!r} has targets but profiles.toml's [{profile.name}.performance].min_query_count "
                     f"has no counts for it")
    return PerformanceTargets(tuple(targets), models)
