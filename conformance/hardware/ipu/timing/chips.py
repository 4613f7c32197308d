"""IPU chips as data (``chips.toml``): published figures, and the per-tile, per-cycle rates derived from them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from conformance.fileio import load_toml

DEVICES_FILE = Path(__file__).with_name("chips.toml")
DEFAULT_DEVICE = "c600"

_REQUIRED = ("tiles", "clock_ghz", "sram_mb", "amp_tflops", "vector_tflops", "sram_tbps", "exchange_bytes_per_cycle_per_tile",
             "sync_cycles", "exchange_fixed_cycles", "host_gbps", "amp_k_grain", "amp_n_grain")


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
def load_devices(path: Path = DEVICES_FILE) -> dict[str, Chip]:
    data = load_toml(path)
    devices = {}
    for name, entry in data.items():
        missing = [key for key in _REQUIRED if key not in entry]
        if missing:
            raise ValueError(f"{path}: device [{name}] lacks {missing}")
        devices[name] = Chip(name=name, description=entry.get("description", ""), **{k: entry[k] for k in _REQUIRED})
    return devices


def get_device(name: str = DEFAULT_DEVICE) -> Chip:
    """The device called ``name`` (case-insensitive); a ValueError listing the known devices otherwise."""
    devices = load_devices()
    key = name.lower()
    if key not in devices:
        raise ValueError(f"unknown device {name!r}; expected one of: {', '.join(devices)}")
    return devices[key]


DEVICE_NAMES = tuple(load_devices())
