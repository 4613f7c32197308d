"""IPU chips as data (``chips.toml``): published figures, and the per-tile, per-cycle rates derived from them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    RootModel,
    StringConstraints,
    model_validator,
)

from conformance.datafiles import Schema, load_validated

DEVICES_FILE = Path(__file__).with_name("chips.toml")
DEFAULT_DEVICE = "c600"

AMP_TYPES = ("fp8", "fp16", "fp32")  # operand types of the matrix units the timing model prices
VECTOR_TYPES = ("fp16", "fp32")


class ChipSchema(Schema):
    """A ``[<chip>]`` table of chips.toml; every figure is a published one, so > 0 (the BSP constants >= 0)."""

    description: str = ""
    tiles: PositiveInt
    clock_ghz: PositiveFloat
    sram_mb: PositiveFloat
    amp_tflops: dict[Literal[AMP_TYPES], PositiveFloat] = Field(min_length=1)
    vector_tflops: dict[Literal[VECTOR_TYPES], PositiveFloat] = Field(min_length=1)
    sram_tbps: PositiveFloat
    exchange_bytes_per_cycle_per_tile: PositiveFloat
    sync_cycles: NonNegativeFloat
    exchange_fixed_cycles: NonNegativeFloat
    host_gbps: PositiveFloat
    amp_k_grain: dict[Literal[AMP_TYPES], PositiveInt]
    amp_n_grain: PositiveInt

    @model_validator(mode="after")
    def _grain_per_amp_type(self):
        if set(self.amp_k_grain) != set(self.amp_tflops):
            raise ValueError(f"amp_k_grain has types {sorted(self.amp_k_grain)}; expected one per amp_tflops type: "
                             f"{sorted(self.amp_tflops)}")
        return self


class ChipsFile(RootModel[dict[Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]*$")], ChipSchema]]):
    model_config = ConfigDict(strict=True)


@dataclass(frozen=True)
class Chip:
    name: str
    description: str
    tiles: int
    clock_ghz: float
    sram_mb: float
    amp_tflops: dict
    vector_tflops: dict
    sram_tbps: float
    exchange_bytes_per_cycle_per_tile: float
    sync_cycles: float
    exchange_fixed_cycles: float
    host_gbps: float
    amp_k_grain: dict
    amp_n_grain: int

    @property
    def clock_hz(self) -> float:
        return self.clock_ghz * 1e9

    @property
    def sram_bytes(self) -> float:
        return self.sram_mb * 1e6

    @property
    def amp_types(self) -> tuple[str, ...]:
        return tuple(self.amp_tflops)

    def amp_flops_per_cycle_per_tile(self, dtype: str) -> float:
        """Peak matrix-unit flops per cycle of one tile for operands of ``dtype`` (C600 FP16: 128 = 64 MACs)."""
        if dtype not in self.amp_tflops:
            raise ValueError(f"device {self.name!r} has no {dtype} matrix units; it supports {', '.join(self.amp_tflops)}")
        return self.amp_tflops[dtype] * 1e12 / (self.tiles * self.clock_hz)

    def vector_flops_per_cycle_per_tile(self, dtype: str) -> float:
        return self.vector_tflops[dtype] * 1e12 / (self.tiles * self.clock_hz)

    @property
    def sram_bytes_per_cycle_per_tile(self) -> float:
        return self.sram_tbps * 1e12 / (self.tiles * self.clock_hz)


@lru_cache(maxsize=None)
def load_devices(path: Path | None = None) -> dict[str, Chip]:
    """The chips of ``path`` (default: chips.toml), validated; a DataFileError (a ValueError) naming the file, line,
    key and what is allowed otherwise."""
    chips = load_validated(Path(path) if path is not None else DEVICES_FILE, ChipsFile).root
    if not chips:
        raise ValueError(f"{path or DEVICES_FILE}: no chips")
    return {name: Chip(name=name, **entry.model_dump()) for name, entry in chips.items()}


def get_device(name: str = DEFAULT_DEVICE) -> Chip:
    """The device called ``name`` (case-insensitive); a ValueError listing the known devices otherwise."""
    devices = load_devices()
    key = name.lower()
    if key not in devices:
        raise ValueError(f"unknown device {name!r}; expected one of: {', '.join(devices)}")
    return devices[key]


def _device_names() -> tuple[str, ...]:
    """The chips' names (``--device`` choices); empty when chips.toml is not valid: the error then comes, naming the
    file and key, where a chip is used (:func:`get_device`), not as a traceback on import."""
    try:
        return tuple(load_devices())
    except ValueError:
        return ()


DEVICE_NAMES = _device_names()
