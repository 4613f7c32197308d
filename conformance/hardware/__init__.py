"""Hardware backends, found through the entry-point group ``ipu_conformance.hardware``: each entry point's name is a
``--hardware`` choice and its object a :class:`~conformance.hardware.base.Backend` subclass. This project registers
``cpu``, ``ipu`` and ``null`` there the same way a vendor's distribution registers its own (``pyproject.toml``)."""

from __future__ import annotations

from functools import lru_cache
from importlib import metadata

from conformance.hardware.base import Backend, UnsupportedCombination, exception_text, runtime_problem

ENTRY_POINT_GROUP = "ipu_conformance.hardware"


class HardwareRegistryError(ValueError):
    """An unknown hardware name, or an entry point that does not give a Backend of its name."""


@lru_cache(maxsize=None)
def _entry_points() -> dict[str, metadata.EntryPoint]:
    found: dict[str, metadata.EntryPoint] = {}
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        other = found.get(entry.name)
        if other is not None and other.value != entry.value:
            raise HardwareRegistryError(f"hardware {entry.name!r} is registered twice, as {other.value} and {entry.value}")
        found[entry.name] = entry
    return found


def hardware_names() -> tuple[str, ...]:
    """The registered hardware names, sorted; a HardwareRegistryError when there are none (the suite not installed)."""
    names = tuple(sorted(_entry_points()))
    if not names:
        raise HardwareRegistryError(f"no hardware backends registered in the entry-point group {ENTRY_POINT_GROUP!r}; "
                                    "install the suite (pip install -e .)")
    return names


@lru_cache(maxsize=None)
def backend_class(name: str) -> type[Backend]:
    """The Backend subclass registered as ``name``; a HardwareRegistryError listing the valid names otherwise."""
    entry = _entry_points().get(name)
    if entry is None:
        raise HardwareRegistryError(f"unknown hardware {name!r}; expected one of: {', '.join(hardware_names())}")
    try:
        cls = entry.load()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a plugin that cannot be loaded is not a crash of the run
        raise HardwareRegistryError(f"hardware {name!r} cannot be loaded: entry point {entry.value} in "
                                    f"{ENTRY_POINT_GROUP!r} raised {type(exc).__name__}: {exception_text(exc)}") from None
    if not (isinstance(cls, type) and issubclass(cls, Backend)) or cls.name != name:
        raise HardwareRegistryError(f"entry point {name} = {entry.value} in {ENTRY_POINT_GROUP!r} must be a "
                                    f"conformance.hardware.base.Backend subclass whose name is {name!r}")
    return cls


def get_backend(name: str, chip: str | None = None) -> Backend:
    """A new instance of the backend registered as ``name`` (on ``chip``, for a simulated backend that offers several).
    A run makes one, with its settings (:class:`conformance.settings.RunSettings`); a command that takes a hardware
    name alone makes its own."""
    return backend_class(name)(chip)


def unavailable(backend: Backend) -> str | None:
    """Why ``backend`` cannot run here (:meth:`Backend.unavailable`), or the exception that check raised, as text: a
    runtime that cannot be imported or used is never a crash of the run, whatever it raises."""
    try:
        reason = backend.unavailable()
    except (Exception, SystemExit) as exc:  # noqa: BLE001
        return (f"checking whether hardware {backend.name!r} can run here raised {type(exc).__name__}: "
                f"{exception_text(exc)}")
    if reason is not None and not isinstance(reason, str):
        return f"hardware {backend.name!r} cannot run here ({reason!r})"
    return reason or None


def hardware_precisions(name: str) -> tuple[str, ...]:
    """The precisions of the hardware registered as ``name``, against which a data file that names that hardware's
    precisions is checked (a backend's precisions may come from its own data files: it is made to read them)."""
    return tuple(get_backend(name).precisions)


__all__ = ["Backend", "UnsupportedCombination", "ENTRY_POINT_GROUP", "HardwareRegistryError", "backend_class",
           "get_backend", "hardware_names", "hardware_precisions", "runtime_problem", "unavailable"]
