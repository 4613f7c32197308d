"""Run settings (hardware, models, profile, report directory) and the profiles kept as data in ``profiles.toml``."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PROFILES_FILE = Path(__file__).with_name("profiles.toml")
PROFILE_NAMES = ("smoke", "default", "full")


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    samples: dict[str, int]
    batch_size: dict[str, int]


@lru_cache(maxsize=None)
def reference_samples(path: Path = PROFILES_FILE) -> dict[str, int]:
    """Per model, the size of the evaluation set whose FP32 outputs ``reference/`` stores (``[reference].samples``)."""
    from models import MODEL_NAMES

    samples = tomllib.loads(Path(path).read_text()).get("reference", {}).get("samples", {})
    missing = [m for m in MODEL_NAMES if m not in samples]
    if missing:
        raise ValueError(f"{path}: [reference].samples lacks model(s) {missing}")
    return dict(samples)


@lru_cache(maxsize=None)
def load_profiles(path: Path = PROFILES_FILE) -> dict[str, Profile]:
    """All profiles in ``path``; a ValueError naming the profile and key when one is incomplete."""
    from models import MODEL_NAMES

    data = tomllib.loads(Path(path).read_text())
    profiles = {}
    for name in PROFILE_NAMES:
        if name not in data:
            raise ValueError(f"{path}: profile [{name}] is missing")
        entry = data[name]
        for key in ("samples", "batch_size"):
            missing = [m for m in MODEL_NAMES if m not in entry.get(key, {})]
            if missing:
                raise ValueError(f"{path}: [{name}].{key} lacks model(s) {missing}")
        profiles[name] = Profile(name, entry.get("description", ""), dict(entry["samples"]), dict(entry["batch_size"]))
    return profiles


@dataclass(frozen=True)
class RunSettings:
    """What the user asked for on the command line, after validation."""

    hardware: str
    models: tuple[str, ...]
    profile: str
    report_dir: Path | None = None
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def profile_data(self) -> Profile:
        return load_profiles()[self.profile]
