"""Every gate, target and profile of the suite as data, each file with its one loader, validated when loaded against
a pydantic schema (:mod:`conformance.datafiles`: a mistake is a :class:`DataFileError` naming the file, line, key and
what is allowed); :func:`compare` is how a measured value meets its target."""

from __future__ import annotations

import math
from pathlib import Path

from conformance.datafiles import DataFileError, Schema, fail, load_validated, read_toml, validate
from conformance.hardware import backend_class, hardware_names

OPS = (">=", "<=")

__all__ = ["OPS", "DataFileError", "Schema", "backend_files", "compare", "fail", "load_validated", "read_toml",
           "validate"]


def backend_files(filename: str) -> list[tuple[str, Path]]:
    """(hardware, file) for each registered backend that ships its own ``filename`` (``accuracy.toml``,
    ``performance.toml``) in its ``targets_dir``: a backend distributed on its own brings the tables of its name."""
    found = []
    for name in hardware_names():
        directory = backend_class(name).targets_dir
        if directory is not None and (Path(directory) / filename).is_file():
            found.append((name, Path(directory) / filename))
    return found


def compare(value: float | None, op: str, target: float) -> bool:
    """``value op target``, False for a missing or NaN value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if op == ">=":
        return value >= target
    if op == "<=":
        return value <= target
    raise ValueError(f"unknown comparison {op!r}; expected one of: {', '.join(OPS)}")
