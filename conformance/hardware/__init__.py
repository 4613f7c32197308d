"""Hardware backends: a registry of name -> backend class, imported lazily so that ``--help`` stays fast."""

from __future__ import annotations

import importlib

from conformance.hardware.base import Backend, UnsupportedCombination

# name -> "module:Class"; the plugin offers exactly these as ``--hardware`` choices.
_REGISTRY = {
    "cpu": "conformance.hardware.cpu:CpuBackend",
    "ipu": "conformance.hardware.ipu:IpuBackend",
}

HARDWARE_NAMES = tuple(_REGISTRY)


def get_backend(name: str) -> Backend:
    """The backend registered as ``name``; a ValueError listing the valid names otherwise."""
    try:
        target = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown hardware {name!r}; expected one of: {', '.join(HARDWARE_NAMES)}") from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)()


__all__ = ["Backend", "UnsupportedCombination", "HARDWARE_NAMES", "get_backend"]
