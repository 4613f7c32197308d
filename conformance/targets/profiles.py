"""Profiles as data: ``profiles.toml`` says, per profile, how many samples each model runs and at which batch, how long
LoadGen runs, what the audits sample, and whether known failures are strict; ``[reference]`` sizes the stored
evaluation set. A backend shipped on its own gives its LoadGen query counts per profile in its performance.toml.
Mistakes are errors naming the file and the table."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from conformance.fileio import load_toml
from conformance.hardware.base import SCENARIOS
from conformance.targets import backend_files
from models import MODEL_NAMES

PROFILES_FILE = Path(__file__).with_name("profiles.toml")
PROFILE_NAMES = ("smoke", "default", "full")


class ProfilesError(ValueError):
    """A mistake in profiles.toml; the message names the file and the table."""


@dataclass(frozen=True)
class RunLength:
    """How long a LoadGen run of the profile lasts, and what it loads."""

    min_duration_ms: int
    min_query_count: dict  # hardware -> scenario -> count
    performance_samples: dict  # model -> QSL samples loaded


@dataclass(frozen=True)
class AuditSampling:
    sampling_target: int  # responses LoadGen samples into TEST01's accuracy log per performance run
    models: tuple[str, ...] | None  # models audited; None: every model of the performance matrix

    def models_for(self, selected) -> tuple[str, ...]:
        """The selected models (``--model``) that the profile audits."""
        return tuple(m for m in selected if self.models is None or m in self.models)


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    samples: dict  # model -> evaluation samples of the accuracy tests
    batch_size: dict  # model -> batch they run at
    minilm_sentences: int
    strict_xfails: bool  # a known failure that passes fails the run
    performance: RunLength
    audit: AuditSampling


def _fail(path, message: str):
    raise ProfilesError(f"{path}: {message}")


def _table(path, data: dict, where: str) -> dict:
    entry = data
    for part in where.split("."):
        entry = entry.get(part) if isinstance(entry, dict) else None
    if not isinstance(entry, dict):
        _fail(path, f"lacks the [{where}] table")
    return entry


def _per_model(path, where: str, value) -> dict[str, int]:
    if not isinstance(value, dict):
        _fail(path, f"{where} must map model names to counts")
    missing = [m for m in MODEL_NAMES if m not in value]
    if missing:
        _fail(path, f"{where} lacks model(s) {missing}")
    return dict(value)


@lru_cache(maxsize=None)
def reference_samples(path: Path = PROFILES_FILE) -> dict[str, int]:
    """Per model, the size of the evaluation set whose FP32 outputs ``reference/`` stores (``[reference].samples``)."""
    data = load_toml(path)
    return _per_model(path, "[reference].samples", _table(path, data, "reference").get("samples"))


@lru_cache(maxsize=None)
def load_profiles(path: Path = PROFILES_FILE) -> dict[str, Profile]:
    """All profiles in ``path``; a ProfilesError naming the profile and key when one is incomplete."""
    data = load_toml(path)
    profiles = {}
    for name in PROFILE_NAMES:
        entry = _table(path, data, name)
        perf = _table(path, data, f"{name}.performance")
        audit = entry.get("audit", {})
        for key in ("minilm_sentences", "strict_xfails"):
            if key not in entry:
                _fail(path, f"[{name}] lacks {key!r}")
        for key in ("min_duration_ms", "min_query_count", "performance_samples"):
            if key not in perf:
                _fail(path, f"[{name}.performance] lacks {key!r}")
        for hardware, counts in perf["min_query_count"].items():
            if not isinstance(counts, dict) or any(s not in counts for s in SCENARIOS):
                _fail(path, f"[{name}.performance].min_query_count.{hardware} needs a count for each of: {', '.join(SCENARIOS)}")
        if "sampling_target" not in audit:
            _fail(path, f"[{name}.audit] lacks 'sampling_target'")
        audited = audit.get("models")
        if audited is not None:
            unknown = [m for m in audited if m not in MODEL_NAMES]
            if unknown:
                _fail(path, f"[{name}.audit].models: unknown model(s) {unknown}; expected some of: {', '.join(MODEL_NAMES)}")
        profiles[name] = Profile(
            name=name,
            description=entry.get("description", ""),
            samples=_per_model(path, f"[{name}].samples", entry.get("samples")),
            batch_size=_per_model(path, f"[{name}].batch_size", entry.get("batch_size")),
            minilm_sentences=int(entry["minilm_sentences"]),
            strict_xfails=bool(entry["strict_xfails"]),
            performance=RunLength(int(perf["min_duration_ms"]), dict(perf["min_query_count"]),
                                  _per_model(path, f"[{name}.performance].performance_samples", perf["performance_samples"])),
            audit=AuditSampling(int(audit["sampling_target"]), None if audited is None else tuple(audited)),
        )
    if Path(path) == PROFILES_FILE:
        for hardware, extra in backend_files("performance.toml"):
            for name, entry in load_toml(extra).get("profiles", {}).items():
                if name not in profiles:
                    _fail(extra, f"[profiles.{name}]: unknown profile; expected one of: {', '.join(PROFILE_NAMES)}")
                counts = entry.get("min_query_count") if isinstance(entry, dict) else None
                if not isinstance(counts, dict) or any(s not in counts for s in SCENARIOS):
                    _fail(extra, f"[profiles.{name}].min_query_count needs a count for each of: {', '.join(SCENARIOS)}")
                profiles[name].performance.min_query_count[hardware] = dict(counts)
    return profiles
