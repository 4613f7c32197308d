"""Performance targets as data: ``performance.toml`` (see its header for where each figure comes from).

``[targets.<model>.<hardware>.<precision>]`` holds one target per scenario; ``[models.<model>]`` the per-model run
parameters (Server latency bound, device batch, Server batching timeout, rows per sample); ``[profiles.<profile>]`` how
long runs are. Mistakes (unknown model, hardware, scenario, missing keys) are errors naming the file and table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PERFORMANCE_FILE = Path(__file__).with_name("performance.toml")
SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
# Scenario -> (the figure it gates, units, comparison): MLPerf's metric of each scenario.
SCENARIO_CHECKS = {
    "SingleStream": ("p90_latency_ms", "ms", "<="),
    "MultiStream": ("p99_latency_ms", "ms", "<="),
    "Server": ("p99_latency_ms_at_target_qps", "ms", "<="),
    "Offline": ("samples_per_second", "samples/s", ">="),
}
MODEL_KEYS = ("server_latency_ms", "rows_per_sample", "max_batch", "server_batch_timeout_ms")
PROFILE_KEYS = ("min_duration_ms", "min_query_count", "performance_samples")


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
class RunLength:
    min_duration_ms: int
    min_query_count: dict  # hardware -> scenario -> count
    performance_samples: dict  # model -> count


@dataclass(frozen=True)
class PerformanceTargets:
    targets: tuple[PerformanceTarget, ...]
    models: dict  # model -> ModelRun
    profiles: dict  # profile -> RunLength

    def for_hardware(self, hardware: str, precisions=None, models=None) -> list[PerformanceTarget]:
        return [t for t in self.targets if t.hardware == hardware and (precisions is None or t.precision in precisions)
                and (models is None or t.model in models)]


@lru_cache(maxsize=None)
def load_performance_targets(path: Path = PERFORMANCE_FILE) -> PerformanceTargets:
    from conformance.hardware import HARDWARE_NAMES
    from models import MODEL_NAMES

    path = Path(path)
    data = tomllib.loads(path.read_text())

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
    profiles = {}
    for name, entry in data.get("profiles", {}).items():
        missing = [k for k in PROFILE_KEYS if k not in entry]
        if missing:
            fail(f"[profiles.{name}] lacks {missing}")
        profiles[name] = RunLength(int(entry["min_duration_ms"]), dict(entry["min_query_count"]), dict(entry["performance_samples"]))
    targets = []
    for model, per_hardware in data.get("targets", {}).items():
        if model not in MODEL_NAMES:
            fail(f"[targets.{model}]: unknown model; expected one of: {', '.join(MODEL_NAMES)}")
        if model not in models:
            fail(f"[targets.{model}] has no [models.{model}] run parameters")
        for hardware, per_precision in per_hardware.items():
            if hardware not in HARDWARE_NAMES:
                fail(f"[targets.{model}.{hardware}]: unknown hardware; expected one of: {', '.join(HARDWARE_NAMES)}")
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
    for profile in profiles.values():
        for hardware in {t.hardware for t in targets}:
            counts = profile.min_query_count.get(hardware)
            if counts is None or any(s not in counts for s in SCENARIOS):
                fail(f"a [profiles.*].min_query_count lacks hardware {hardware!r} or one of its scenarios")
    return PerformanceTargets(tuple(targets), models, profiles)
