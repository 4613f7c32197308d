"""The ``ipu`` hardware's precisions as data: named policies and per-model FP8 settings in ``precisions.toml``, with
their one loader (used by the emulator and by the timing model's trace)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from conformance.fileio import load_toml
from conformance.hardware.ipu.fp8_scales import FP8_FORMATS
from conformance.numerics import SCALE_RANGE
from models import MODEL_NAMES

PRECISIONS_FILE = Path(__file__).with_name("precisions.toml")

STORAGE_FORMATS = ("f16",)
PARTIALS = ("float", "half")
FP8_MODES = ("none", "weights", "all")
SCALE_METHODS = ("fixed", "amax", "mse")
# FP8 settings for cases that are not one of the six models (the MiniLM checkpoint: a BertModel without "bert.").
EXTRA_FP8_CASES = ("minilm",)


@dataclass(frozen=True)
class Policy:
    """One named precision of the ipu hardware (a ``[precisions.<name>]`` table)."""

    name: str
    description: str
    storage: str
    partials: str
    fp8: str

    @property
    def uses_fp8(self) -> bool:
        return self.fp8 != "none"


@dataclass(frozen=True)
class Fp8Settings:
    """A model's FP8 settings (a ``[fp8.<model>]`` table)."""

    model: str
    input_format: str = "f143"
    weight_format: str = "f143"
    scales: str = "mse"
    input_scale: int | None = None
    weight_scale: int | None = None
    calibration_samples: int = 4
    skip: tuple[str, ...] = ()

    def format_of(self, operand_class: str) -> str:
        return self.weight_format if operand_class == "weight" else self.input_format


def _check_choice(path, where: str, key: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{path}: {where}.{key} = {value!r}; expected one of: {', '.join(map(str, allowed))}")


@lru_cache(maxsize=None)
def load_precisions(path: Path = PRECISIONS_FILE) -> tuple[dict[str, Policy], dict[str, Fp8Settings]]:
    """The policies and per-model FP8 settings in ``path``, validated; a ValueError naming the table and key otherwise."""
    data = load_toml(path)
    unknown = sorted(set(data) - {"precisions", "fp8"})
    if unknown:
        raise ValueError(f"{path}: unknown top-level table(s) {unknown}; expected [precisions.*] and [fp8.*]")
    policies = {}
    for name, entry in data.get("precisions", {}).items():
        where = f"[precisions.{name}]"
        extra = sorted(set(entry) - {"description", "storage", "partials", "fp8"})
        if extra:
            raise ValueError(f"{path}: {where} has unknown key(s) {extra}")
        for key, allowed in (("storage", STORAGE_FORMATS), ("partials", PARTIALS), ("fp8", FP8_MODES)):
            if key not in entry:
                raise ValueError(f"{path}: {where} lacks {key!r} (one of: {', '.join(allowed)})")
            _check_choice(path, where, key, entry[key], allowed)
        policies[name] = Policy(name, entry.get("description", ""), entry["storage"], entry["partials"], entry["fp8"])
    if not policies:
        raise ValueError(f"{path}: no [precisions.*] tables")
    fp8 = {}
    fields = set(Fp8Settings.__dataclass_fields__) - {"model"}
    for model, entry in data.get("fp8", {}).items():
        where = f"[fp8.{model}]"
        if model not in MODEL_NAMES + EXTRA_FP8_CASES:
            raise ValueError(f"{path}: {where}: unknown model {model!r}; expected one of: "
                             f"{', '.join(MODEL_NAMES + EXTRA_FP8_CASES)}")
        extra = sorted(set(entry) - fields)
        if extra:
            raise ValueError(f"{path}: {where} has unknown key(s) {extra}; valid: {', '.join(sorted(fields))}")
        settings = Fp8Settings(model=model, **{k: (tuple(v) if k == "skip" else v) for k, v in entry.items()})
        _check_choice(path, where, "input_format", settings.input_format, FP8_FORMATS)
        _check_choice(path, where, "weight_format", settings.weight_format, FP8_FORMATS)
        _check_choice(path, where, "scales", settings.scales, SCALE_METHODS)
        if settings.scales == "fixed":
            for key in ("input_scale", "weight_scale"):
                value = getattr(settings, key)
                if not isinstance(value, int) or not SCALE_RANGE[0] <= value <= SCALE_RANGE[1]:
                    raise ValueError(f"{path}: {where}.{key} = {value!r}; scales='fixed' needs an integer in "
                                     f"[{SCALE_RANGE[0]}, {SCALE_RANGE[1]}]")
        if not isinstance(settings.calibration_samples, int) or settings.calibration_samples < 1:
            raise ValueError(f"{path}: {where}.calibration_samples = {settings.calibration_samples!r}; expected an integer >= 1")
        fp8[model] = settings
    return policies, fp8


