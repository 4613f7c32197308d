"""The ``ipu`` hardware's precisions as data: named policies in ``precisions.toml``, and FP8 settings per model (each
model's own ``fp8.toml``, in its spec's ``tables`` folder; ``precisions.toml`` holds those of the MiniLM checkpoint and
of imported graphs), with their one loader (used by the emulator and by the timing model's trace)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, PositiveInt, StringConstraints, create_model, model_validator

from conformance.datafiles import Schema, fail, read_toml, validate
from conformance.hardware.ipu.fp8_scales import FP8_FORMATS
from conformance.numerics import SCALE_RANGE
from models import MODEL_NAMES, model_specs

PRECISIONS_FILE = Path(__file__).with_name("precisions.toml")

STORAGE_FORMATS = ("f16",)
PARTIALS = ("float", "half")
FP8_MODES = ("none", "weights", "all")
SCALE_METHODS = ("fixed", "amax", "mse")
# FP8 settings for cases that are not one of the six models (the MiniLM checkpoint: a BertModel without "bert."; every
# imported ONNX graph, named as targets/accuracy.py's GRAPH_CASE).
EXTRA_FP8_CASES = ("minilm", "onnx")


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


def _distinct(value: list) -> list:
    repeated = sorted({v for v in value if value.count(v) > 1})
    if repeated:
        raise ValueError(f"names {', '.join(repeated)} more than once")
    return value


Scale = Annotated[int, Field(ge=SCALE_RANGE[0], le=SCALE_RANGE[1])]


class PolicySchema(Schema):
    description: str = ""
    storage: Literal[STORAGE_FORMATS]
    partials: Literal[PARTIALS]
    fp8: Literal[FP8_MODES]


class Fp8Schema(Schema):
    input_format: Literal[FP8_FORMATS] = "f143"
    weight_format: Literal[FP8_FORMATS] = "f143"
    scales: Literal[SCALE_METHODS] = "mse"
    input_scale: Scale | None = None
    weight_scale: Scale | None = None
    calibration_samples: PositiveInt = 4
    skip: Annotated[list[Annotated[str, StringConstraints(min_length=1)]], AfterValidator(_distinct)] = []

    @model_validator(mode="after")
    def _fixed_needs_scales(self):
        if self.scales == "fixed":
            missing = [k for k in ("input_scale", "weight_scale") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"scales = \"fixed\" needs {' and '.join(missing)}: an integer in "
                                 f"[{SCALE_RANGE[0]}, {SCALE_RANGE[1]}]")
        return self


# a precision's name is part of test ids and --precision lists
PrecisionName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]*$")]


class PrecisionsFile(Schema):
    precisions: dict[PrecisionName, PolicySchema] = Field(min_length=1)
    fp8: dict[Literal[MODEL_NAMES + EXTRA_FP8_CASES], Fp8Schema] = {}


@lru_cache(maxsize=None)
def load_precisions(path: Path | None = None) -> tuple[dict[str, Policy], dict[str, Fp8Settings]]:
    """The policies and per-model FP8 settings in ``path`` (default: the hardware's precisions.toml), validated; a
    DataFileError (a ValueError) naming the file, line, key and what is allowed otherwise."""
    path = Path(path) if path is not None else PRECISIONS_FILE
    data, text = read_toml(path)
    checked = validate(data, PrecisionsFile, path, text)
    if path == PRECISIONS_FILE:  # each model brings its FP8 settings ([fp8.<model>] of its fp8.toml)
        for model, spec in model_specs().items():
            extra = spec.table("fp8")
            if extra is None or not extra.is_file():
                continue
            own, own_text = read_toml(extra)
            schema = create_model("ModelFp8File", __base__=Schema, fp8=(dict[Literal[model], Fp8Schema], ...))
            if model in checked.fp8:
                fail(extra, ("fp8", model), f"the hardware's {path} has [fp8.{model}] too: a model's FP8 settings are "
                     "in its own fp8.toml only", own_text)
            checked.fp8.update(validate(own, schema, extra, own_text).fp8)
    if "fp32" in checked.precisions:
        fail(path, ("precisions", "fp32"), "fp32 is the reference the precisions are compared with, not a precision "
             "of the hardware", text)
    policies = {name: Policy(name, entry.description, entry.storage, entry.partials, entry.fp8)
                for name, entry in checked.precisions.items()}
    fp8 = {model: Fp8Settings(model=model, **{k: (tuple(v) if k == "skip" else v) for k, v in entry.model_dump().items()})
           for model, entry in checked.fp8.items()}
    return policies, fp8
