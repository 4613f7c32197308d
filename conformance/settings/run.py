"""What the user asked for on the command line, after validation: one typed field per option of the main job, and
the run's one hardware backend, made from ``--hardware`` and ``--device`` when the settings are made."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from conformance.hardware import Backend, get_backend
from conformance.report.shard import Shard
from conformance.targets.profiles import Profile, load_profiles

if TYPE_CHECKING:
    from conformance.graphs.case import GraphCase


@dataclass(frozen=True)
class RunSettings:
    hardware: str  # --hardware
    models: tuple[str, ...]  # --model, canonical names (all six when not given)
    profile: str  # --profile
    precisions: tuple[str, ...]  # --precision (all of the hardware's when not given)
    report_dir: Path | None = None  # --report-dir
    diagnose: bool = False  # --diagnose
    plots: bool = True  # not --no-plots: the report draws its figures (where matplotlib is installed)
    baseline: Path | None = None  # --baseline
    shard: Shard | None = None  # --shard
    xfail_file: Path | None = None  # --xfail-file, or the hardware's own file
    device: str | None = None  # --device: the simulated chip (None: the hardware's default)
    real_time_loadgen: bool = False  # --real-time-loadgen
    checkpoints: dict[str, Path] = field(default_factory=dict)  # --checkpoint MODEL=DIR
    datasets: dict[str, Path] = field(default_factory=dict)  # --dataset MODEL=PATH
    samples: dict[str, int] = field(default_factory=dict)  # --samples N ("*") or MODEL=N
    calibrations: dict[str, Path] = field(default_factory=dict)  # --calibration MODEL=PATH
    workers: int | None = None  # --workers: local worker processes for the accuracy batches (None: in-process)
    cluster: str | None = None  # --cluster: a Dask scheduler's address, normalised (tcp://HOST:PORT)
    cache_dir: Path | None = None  # --cache-dir, or the platform's cache directory when something is cached there
    published_report_dir: Path | None = None  # where the report is published: report_dir is its staging directory
    cases: tuple[str, ...] = ()  # --model: the extra cases beside the six models that run (minilm)
    allow_unused_weights: bool = False  # --allow-unused-weights
    array: str = "numpy"  # --array: the array library (and device) of the emulator's numerics
    onnx: dict[str, "GraphCase"] = field(default_factory=dict)  # --onnx NAME=FILE.onnx, each graph loaded and checked
    # the run's backend: made here when not given; dataclasses.replace carries it to the copy, so a run has one
    backend: Backend | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.backend is None:
            object.__setattr__(self, "backend", get_backend(self.hardware, self.device))
        elif self.backend.name != self.hardware or (self.device is not None and self.backend.chip != self.device):
            raise ValueError(f"settings of hardware {self.hardware!r} (device {self.device}) given the backend of "
                             f"{self.backend.name!r} (chip {self.backend.chip})")

    def published_path(self, path, relative: bool = False) -> str:
        """``path`` inside the run's report directory as it will be after the run (the staging directory swapped in);
        ``relative``: relative to the report directory, as the records name their files."""
        if self.report_dir is None:
            return str(path)
        try:
            inside = Path(path).relative_to(self.report_dir)
        except ValueError:
            return str(path)
        if relative:
            return str(inside)
        return str(Path(self.published_report_dir or self.report_dir) / inside)

    def sample_count(self, model: str) -> int:
        """How many samples the accuracy tests run for ``model`` without a data set: ``--samples`` or the profile's."""
        return self.samples.get(model, self.samples.get("*", self.profile_data.samples[model]))

    @property
    def profile_data(self) -> Profile:
        return load_profiles()[self.profile]
