"""Every gate, target and profile of the suite as data, each file with its one loader, validated when loaded against
a pydantic schema (:mod:`conformance.datafiles`: a mistake is a :class:`DataFileError` naming the file, line, key and
what is allowed); :func:`compare` is how a measured value meets its target."""

from __future__ import annotations

import math
from pathlib import Path

from conformance.datafiles import DataFileError, Schema, fail, load_validated, read_toml, validate
from conformance.hardware import backend_class, hardware_names
from models import model_specs

OPS = (">=", "<=")

__all__ = ["OPS", "DataFileError", "Schema", "backend_files", "compare", "model_files", "model_tables", "fail", "load_validated", "read_toml",
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


def model_files(filename: str, optional: bool = False) -> list[tuple[str, Path]]:
    """(model, file) for each registered model whose spec keeps its own ``filename`` (``accuracy.toml``,
    ``performance.toml``, ``profiles.toml``, ``audit.toml``) in its ``tables`` folder: each model brings the tables of
    its name. A folder the spec names that lacks the file is an error naming both, unless the file is ``optional``
    (a model that no audit exempts has no audit.toml)."""
    found = []
    kind = filename.removesuffix(".toml")
    for name, spec in model_specs().items():
        path = spec.table(kind)
        if path is None or optional and not path.exists():
            continue
        if not path.is_file():
            raise DataFileError(f"{path}: model {name!r} keeps its tables in {str(spec.tables)!r}, which has no "
                                f"{filename}")
        found.append((name, path))
    return found


def model_tables(data: dict, model: str, path: Path, allowed: dict[str, int]) -> dict:
    """``data`` (a model's own table file) checked to hold tables of ``model`` only: each top-level key of
    ``allowed`` holds, ``allowed[key]`` levels down, tables keyed by model names, of which only ``model``'s may be
    there; anything else is a DataFileError naming the file and the key."""
    for key, value in data.items():
        if key not in allowed:
            raise DataFileError(f"{path}: key {key!r}: a model's {path.name} may hold {', '.join(allowed)} only")
        for found in _keys_at(value, allowed[key]):
            if found != model:
                raise DataFileError(f"{path}: key {key!r} names {found!r}: the tables of model {model!r} may only "
                                    f"hold its own name")
    return data


def _keys_at(value, depth: int):
    if not isinstance(value, dict):
        return
    if depth == 0:
        yield from value
        return
    for inner in value.values():
        yield from _keys_at(inner, depth - 1)


def compare(value: float | None, op: str, target: float) -> bool:
    """``value op target``, False for a missing or NaN value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if op == ">=":
        return value >= target
    if op == "<=":
        return value <= target
    raise ValueError(f"unknown comparison {op!r}; expected one of: {', '.join(OPS)}")
