"""Profiles as data: ``profiles.toml`` says, per profile, how long LoadGen runs, what the audits sample, and whether
known failures are strict; each model's own profiles.toml (in its spec's ``tables`` folder, the built-in models' in
``models/tables/<model>/``) how many samples it runs and at which batch, its LoadGen sample set, and in
``[reference]`` the size of its stored evaluation set. A backend shipped on its own gives its LoadGen query counts per
profile in its performance.toml.
The file is validated when loaded: unknown or missing keys, wrong types (``true`` is not a count), counts below 1 and
unknown model, hardware or scenario names are errors naming the file, line, key and what is allowed. The schema fixes
which keys there are, never the counts."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, create_model

from conformance.hardware import hardware_names
from conformance.hardware.base import SCENARIOS
from conformance.targets import DataFileError, Schema, backend_files, model_files, read_toml, validate
from conformance.targets.bounds import MAX_DURATION_MS, MAX_QUERIES, MAX_SAMPLES, count
from models import MODEL_NAMES

PROFILES_FILE = Path(__file__).with_name("profiles.toml")
PROFILE_NAMES = ("smoke", "default", "full", "release")
# The release gate: the one profile whose samples establish every gated check (tests/test_release_profile.py); the
# others gate on fewer samples, where a ratio tier passes on its point estimate (PASS*) without being established.
RELEASE_PROFILE = "release"


def profile_role(name: str) -> str:
    """What a run at profile ``name`` is, as the summary says it."""
    return "the release gate" if name == RELEASE_PROFILE else f"not the release gate, which is --profile {RELEASE_PROFILE}"


class ProfilesError(DataFileError):
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


def _every_model(value: dict) -> dict:
    missing = [m for m in MODEL_NAMES if m not in value]
    if missing:
        raise ValueError(f"lacks model(s) {', '.join(missing)}; every model needs a count ({', '.join(MODEL_NAMES)})")
    return value


ModelName = Literal[MODEL_NAMES]
PerModel = Annotated[dict[ModelName, count(MAX_SAMPLES)], AfterValidator(_every_model)]  # model -> a count >= 1


class ReferenceSchema(Schema):
    samples: PerModel


class AuditSchema(Schema):
    sampling_target: int = Field(ge=1, le=1_000_000)  # responses per performance run: a few to a million
    models: list[ModelName] | None = Field(default=None, min_length=1)


def _query_counts():
    return create_model("QueryCounts", __base__=Schema, **{s: (count(MAX_QUERIES), ...) for s in SCENARIOS})


@lru_cache(maxsize=None)
def _schemas() -> tuple[type[Schema], type[Schema]]:
    """(profiles.toml, a backend's ``[profiles.<name>]`` table) schemas; built on first use, since the hardware names
    come from entry points."""
    counts = _query_counts()
    performance = create_model("PerformanceRun", __base__=Schema,
                               min_duration_ms=(count(MAX_DURATION_MS), ...),
                               min_query_count=(dict[Literal[hardware_names()], counts], ...),
                               performance_samples=(PerModel, ...))
    profile = create_model("ProfileSchema", __base__=Schema,
                           description=(str, ""),
                           samples=(PerModel, ...),
                           batch_size=(PerModel, ...),
                           minilm_sentences=(count(MAX_SAMPLES), ...),
                           strict_xfails=(bool, ...),
                           performance=(performance, ...),
                           audit=(AuditSchema, ...))
    profiles = create_model("ProfilesFile", __base__=Schema, reference=(ReferenceSchema, ...),
                            **{name: (profile, ...) for name in PROFILE_NAMES})
    backend_profile = create_model("BackendProfile", __base__=Schema, min_query_count=(counts, ...))
    return profiles, backend_profile


def _validated(path: Path):
    data, text = _errors_as_profiles_error(read_toml, path)
    for model, extra in model_files(PROFILES_FILE.name):  # each model brings its counts
        _merge_model_counts(data, model, extra)
    return _errors_as_profiles_error(validate, data, _schemas()[0], path, text)


# What a model's own profiles.toml holds: per profile (and [reference]) its counts, keyed by its name.
MODEL_COUNTS = {"samples": (), "batch_size": (), "performance": ("performance_samples",)}


@lru_cache(maxsize=None)
def _model_schema(model: str) -> type[Schema]:
    """A model's own profiles.toml: every count of ``model``, each a count >= 1 (validated on its own, so that a
    mistake names the model's file and line)."""
    own = dict[Literal[model], count(MAX_SAMPLES)]
    performance = create_model("ModelPerformanceCounts", __base__=Schema, performance_samples=(own, ...))
    profile = create_model("ModelProfile", __base__=Schema, samples=(own, ...), batch_size=(own, ...),
                           performance=(performance, ...))
    reference = create_model("ModelReference", __base__=Schema, samples=(own, ...))
    return create_model("ModelProfilesFile", __base__=Schema, reference=(reference, ...),
                        **{name: (profile, ...) for name in PROFILE_NAMES})


def _merge_model_counts(data: dict, model: str, path: Path) -> None:
    """Add a model's own counts (``[reference].samples``, ``[<profile>].samples`` and ``batch_size``,
    ``[<profile>.performance].performance_samples``, each ``{ <model> = n }``, all of them) to the suite's ``data``;
    any other key, another model's name, a count that is not one, or a count the suite's file gives too, is a
    ProfilesError naming the file and key."""
    own, text = _errors_as_profiles_error(read_toml, path)
    for name, table in own.items():
        if name not in ("reference", *PROFILE_NAMES) or not isinstance(table, dict):
            raise ProfilesError(f"{path}: key {name!r}: a model's profiles.toml holds tables [reference] and "
                                f"[<profile>] ({', '.join(PROFILE_NAMES)}) only")
        for field, counts in table.items():
            inner = MODEL_COUNTS.get(field)
            if inner is None or not isinstance(counts, dict) or (inner and set(counts) - set(inner)):
                raise ProfilesError(f"{path}: [{name}].{field}: a model's profiles.toml holds samples, batch_size and "
                                    "performance.performance_samples only")
            for key, per_model in ({field: counts} if not inner else counts).items():
                if not isinstance(per_model, dict) or set(per_model) - {model}:
                    raise ProfilesError(f"{path}: [{name}].{key}: the counts of model {model!r} are "
                                        f"{{ {model} = n }}, no other model's")
    _errors_as_profiles_error(validate, own, _model_schema(model), path, text)
    for name, table in own.items():
        for field, counts in table.items():
            inner = MODEL_COUNTS[field]
            for key, per_model in ({field: counts} if not inner else counts).items():
                target = data.setdefault(name, {})
                for step in (field, key) if inner else (field,):
                    target = target.setdefault(step, {}) if isinstance(target, dict) else None
                if not isinstance(target, dict):  # the suite's file has no table there: its validation says so
                    continue
                if model in target:
                    raise ProfilesError(f"{path}: [{name}].{key}: the suite's {PROFILES_FILE.name} gives model "
                                        f"{model!r} this count too; a model's counts are in its own file only")
                target.update(per_model)


def _errors_as_profiles_error(function, *args):
    try:
        return function(*args)
    except DataFileError as exc:
        raise ProfilesError(str(exc)) from None


@lru_cache(maxsize=None)
def reference_samples(path: Path | None = None) -> dict[str, int]:
    """Per model, the size of the evaluation set whose FP32 outputs ``reference/`` stores (``[reference].samples``)."""
    return dict(_validated(Path(path) if path is not None else PROFILES_FILE).reference.samples)


@lru_cache(maxsize=None)
def load_profiles(path: Path | None = None) -> dict[str, Profile]:
    """All profiles in ``path`` (default: the suite's profiles.toml) with every model's counts from its own
    profiles.toml (with the suite's own file, also the query counts of backends shipped on their own), validated; a
    ProfilesError naming the file, line, key and what is allowed otherwise."""
    path = Path(path) if path is not None else PROFILES_FILE
    data = _validated(path)
    profiles = {}
    for name in PROFILE_NAMES:
        entry = getattr(data, name)
        perf, audit = entry.performance, entry.audit
        profiles[name] = Profile(
            name=name,
            description=entry.description,
            samples=dict(entry.samples),
            batch_size=dict(entry.batch_size),
            minilm_sentences=entry.minilm_sentences,
            strict_xfails=entry.strict_xfails,
            performance=RunLength(perf.min_duration_ms, {hw: counts.model_dump() for hw, counts in
                                                         perf.min_query_count.items()},
                                  dict(perf.performance_samples)),
            audit=AuditSampling(audit.sampling_target, None if audit.models is None else tuple(audit.models)),
        )
    if path == PROFILES_FILE:
        for hardware, extra in backend_files("performance.toml"):
            raw, text = _errors_as_profiles_error(read_toml, extra)
            for name, entry in raw.get("profiles", {}).items():
                loc_data = {"profiles": {name: entry}}
                schema = create_model("BackendProfiles", __base__=Schema,
                                      profiles=(dict[Literal[PROFILE_NAMES], _schemas()[1]], ...))
                checked = _errors_as_profiles_error(validate, loc_data, schema, extra, text)
                profiles[name].performance.min_query_count[hardware] = (
                    checked.profiles[name].min_query_count.model_dump())
    return profiles
